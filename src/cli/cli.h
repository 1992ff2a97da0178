/*
 * cli.h: the kvchat subcommands. Each takes argc/argv starting at the
 * command name and returns the process exit status (0 ok, 1 error, 2 usage).
 */
#ifndef KVC_CLI_H
#define KVC_CLI_H

int cmd_tokenize(int argc, char **argv);	/* cmd_tokenize.c */
int cmd_detokenize(int argc, char **argv);	/* cmd_tokenize.c */
int cmd_info(int argc, char **argv);		/* cmd_info.c */
int cmd_generate(int argc, char **argv);	/* cmd_generate.c */
int cmd_bench(int argc, char **argv);		/* cmd_bench.c */
int cmd_convert_llama2c(int argc, char **argv);	/* cmd_convert.c */
int cmd_chat(int argc, char **argv);		/* repl.c: the default command */

/* Prints kvchat's usage to f. */
#include <stdio.h>
void cli_usage(FILE *f);
/* Prints the full --help text (options, REPL commands, files, environment) to f. */
void cli_help(FILE *f);

#endif
