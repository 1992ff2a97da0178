/* sub_convert.c: kvchat convert-llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "convert/llama2c.h"

static int
usage(void)
{
	fprintf(stderr, "usage: kvchat convert-llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf\n");
	return 2;
}

int
sub_convert_llama2c(int argc, char **argv)
{
	const char *pos[2] = { NULL, NULL }, *out = NULL;
	struct l2c_config c;
	char err[512] = "";
	int n_pos = 0, rc;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
			out = argv[++i];
		else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage();
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1] != '\0')
			return usage();
		else if (n_pos < 2)
			pos[n_pos++] = argv[i];
		else
			return usage();
	}
	if (n_pos != 2 || out == NULL)
		return usage();
	rc = l2c_convert(pos[0], pos[1], out, &c, err, sizeof err);
	if (rc) {
		fprintf(stderr, "kvchat: convert-llama2c: %s\n", err[0] ? err : "failed");
		return 1;
	}
	fprintf(stderr, "kvchat: wrote %s: llama, dim %d, hidden %d, %d layers, %d heads (%d kv), "
	    "vocab %d (%s classifier), context %d\n", out, c.dim, c.hidden_dim, c.n_layers,
	    c.n_heads, c.n_kv_heads, c.vocab_size, c.shared_cls ? "shared" : "separate", c.seq_len);
	return 0;
}
