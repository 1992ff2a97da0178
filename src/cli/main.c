/* main.c: dispatch to a subcommand; with none, chat. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

int
main(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		cli_help(stdout);
		return 0;
	}
	if (cli_kernels_check(stderr) != 0)
		return 2;
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		printf("kvchat %s\nCPU kernels: %s\n", PACKAGE_VERSION, cli_kernels_name());
		return 0;
	}
	if (argc >= 2 && argv[1][0] != '-') {
		for (const struct cli_subcommand *c = cli_subcommands; c->name; c++)
			if (strcmp(argv[1], c->name) == 0)
				return c->fn(argc - 1, argv + 1);
		fprintf(stderr, "kvchat: unknown command '%s'\n", argv[1]);
		cli_usage(stderr);
		return 2;
	}
	return repl_main(argc, argv);
}
