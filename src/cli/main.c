/* main.c: dispatch to a subcommand; with none, chat. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "cli.h"
#include "cli/repl/cmd.h"

int
main(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		cli_help(stdout, cmd_print_help);
		return 0;
	}
	if (cli_kernels_check(stderr) != 0)
		return 2;
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		struct kvc_buf b = { 0 };

		/* what was installed: the CPU kernels this CPU runs, the backends built, what CUDA finds here */
		kvc_backend_version(&b);
		printf("kvchat %s\nCPU kernels: %s\n%s", PACKAGE_VERSION, cli_kernels_name(), b.p ? b.p : "");
		kvc_buf_free(&b);
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
	/* --endpoint: the chat against a remote server, without a model here */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--endpoint") == 0)
			return cli_remote_main(argc, argv);
	return repl_main(argc, argv);
}
