/* main.c: dispatch to a subcommand; with none, chat. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

struct cli_entry {
	const char *name;
	int (*fn)(int, char **);
	const char *usage;
};

static const struct cli_entry cli_table[] = {
	{ "tokenize", cmd_tokenize, "tokenize -m FILE [--parse-special] [--bos]" },
	{ "detokenize", cmd_detokenize, "detokenize -m FILE" },
	{ "info", cmd_info, "info -m FILE" },
	{ "generate", cmd_generate, "generate -m FILE [-p TEXT] [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S] [--ids] [--threads N]" },
	{ "bench", cmd_bench, "bench -m FILE [-p 512] [-n 128] [--threads N]" },
	{ "convert-llama2c", cmd_convert_llama2c, "convert-llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf" },
};

void
cli_usage(FILE *f)
{
	fprintf(f, "usage: kvchat [-m MODEL] [options]          chat (see kvchat(1))\n");
	for (size_t i = 0; i < sizeof cli_table / sizeof cli_table[0]; i++)
		fprintf(f, "       kvchat %s\n", cli_table[i].usage);
	fprintf(f, "       kvchat --help | --version\n");
}

int
main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		printf("kvchat %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (argc >= 2 && argv[1][0] != '-') {
		for (size_t i = 0; i < sizeof cli_table / sizeof cli_table[0]; i++)
			if (strcmp(argv[1], cli_table[i].name) == 0)
				return cli_table[i].fn(argc - 1, argv + 1);
		fprintf(stderr, "kvchat: unknown command '%s'\n", argv[1]);
		cli_usage(stderr);
		return 2;
	}
	return cmd_chat(argc, argv);
}
