/* tok_testlib.c: shared data access for the tokenizer conformance tests. */
#include <stdio.h>
#include <stdlib.h>

#include "gguf/gguf.h"
#include "tok_testlib.h"

const char *const tok_test_vocabs[] = {
	"qwen2", "llama-bpe", "llama-spm", "phi-3", "gpt-2",
	"deepseek-llm", "deepseek-coder", "starcoder", "falcon",
};
const size_t tok_test_n_vocabs = sizeof tok_test_vocabs / sizeof tok_test_vocabs[0];

char *
tok_test_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	long n;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (p = malloc((size_t)n + 1)) != NULL) {
		if (fread(p, 1, (size_t)n, f) != (size_t)n) {
			free(p);
			p = NULL;
		} else {
			p[n] = '\0';
			*len = (size_t)n;
		}
	}
	fclose(f);
	return p;
}

int
tok_test_load_vocab(const char *dir, const char *name, struct kvc_tokenizer **tok,
    char *err, size_t errlen)
{
	char path[4096];
	struct gguf_file *f;
	int rc;

	snprintf(path, sizeof path, "%s/llama.cpp-vocab/ggml-vocab-%s.gguf", dir, name);
	rc = gguf_open(&f, path, err, errlen);
	if (rc != 0)
		return rc;
	rc = tok_load(tok, f, err, errlen);
	gguf_close(f);
	return rc;
}
