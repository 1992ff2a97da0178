/*
 * cli.h: the kvchat subcommands, their table, and the usage and --help
 * texts. Each subcommand takes argc/argv starting at the command name and
 * returns the process exit status (0 ok, 1 error, 2 usage).
 */
#ifndef KVC_CLI_H
#define KVC_CLI_H

#include <stdio.h>

int sub_tokenize(int argc, char **argv);	/* sub_tokenize.c */
int sub_template(int argc, char **argv);	/* sub_template.c */
int sub_detokenize(int argc, char **argv);	/* sub_tokenize.c */
int sub_info(int argc, char **argv);		/* sub_info.c */
int sub_generate(int argc, char **argv);	/* sub_generate.c */
int sub_bench(int argc, char **argv);		/* sub_bench.c */
int sub_batch(int argc, char **argv);		/* sub_batch.c */
int sub_serve(int argc, char **argv);		/* sub_serve.c */
int sub_perplexity(int argc, char **argv);	/* sub_perplexity.c */
int sub_convert_llama2c(int argc, char **argv);	/* sub_convert.c */
int sub_backup(int argc, char **argv);		/* sub_store.c */
int sub_recover(int argc, char **argv);		/* sub_store.c */
int cli_remote_main(int argc, char **argv);	/* remote_chat.c: kvchat --endpoint */
int repl_main(int argc, char **argv);		/* repl/repl.c: the default command */

/* kernels.c: KVCHAT_KERNELS */
/* The table KVCHAT_KERNELS names, for kvc_engine_params.kernels (NULL when unset: the best). */
const char *cli_kernels(void);
/* The name of the table in use: KVCHAT_KERNELS's, else the best this CPU runs. */
const char *cli_kernels_name(void);
/* 0, or 2 after telling f why KVCHAT_KERNELS names no table this CPU runs. */
int cli_kernels_check(FILE *f);

/* help.c */
struct cli_subcommand {
	const char *name;
	int (*fn)(int, char **);
	const char *usage;	/* the synopsis after "kvchat " */
};
/* The subcommands in the order the usage lists them, ending with a NULL name. */
extern const struct cli_subcommand cli_subcommands[];

/* Prints kvchat's usage to f. */
void cli_usage(FILE *f);
/*
 * Prints the full --help text (options, REPL commands, files, environment)
 * to f; print_commands writes the chat's /command list (cmd_print_help).
 */
void cli_help(FILE *f, void (*print_commands)(FILE *f));

#endif
