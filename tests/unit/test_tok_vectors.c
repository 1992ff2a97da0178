/*
 * test_tok_vectors.c: llama.cpp's tokenizer test vectors
 * ($SHARED_DATA/llama.cpp-vocab/ggml-vocab-NAME.gguf{,.inp,.out}): every
 * string must tokenize to exactly the expected ids (no BOS, no special-token
 * parsing, as llama.cpp's test-tokenizer-0) and detokenize back to itself.
 * SKIP when the shared data is absent.
 */
#include "gguf/gguf.h"
#include "test.h"

#include "tok_testlib.h"
#include "tokenizer/tokenizer.h"

static void
print_ids(const char *label, const int32_t *v, size_t n)
{
	fprintf(stderr, "    %s:", label);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %d", v[i]);
	fputc('\n', stderr);
}

static void
run_vocab(const char *dir, const char *name)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	char path[4096], err[512];
	struct kvc_tokenizer *tok;
	char *inp, *out, *s, *line;
	size_t inp_len, out_len, n_ok = 0, n_all = 0, n_rt = 0;

	if (tok_test_load_vocab(dir, name, &tok, err, sizeof err) != 0) {
		test_cond(0, "%s", err);
		return;
	}
	snprintf(path, sizeof path, "%s/llama.cpp-vocab/ggml-vocab-%s.gguf.inp", dir, name);
	inp = tok_test_slurp(path, &inp_len);
	snprintf(path, sizeof path, "%s/llama.cpp-vocab/ggml-vocab-%s.gguf.out", dir, name);
	out = tok_test_slurp(path, &out_len);
	test_cond(inp != NULL && out != NULL, "%s: cannot read the .inp/.out vectors", name);
	if (inp == NULL || out == NULL)
		goto done;

	/* the .inp ends with a separator: the piece after the last one is not a test */
	s = inp;
	line = out;
	for (char *next; (next = strstr(s, sep)) != NULL; s = next + sizeof sep - 1) {
		struct kvc_tokens ids = { 0 }, want = { 0 };
		struct kvc_buf back = { 0 };
		char *eol = strchr(line, '\n'), *p;
		size_t len = (size_t)(next - s);
		int rc;

		if (eol == NULL) {
			test_cond(0, "%s: .out has fewer lines than .inp has strings", name);
			break;
		}
		*eol = '\0';
		for (p = line; *p;) {
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			kvc_tokens_push(&want, (int32_t)v);
			p = end;
		}
		line = eol + 1;
		n_all++;
		rc = tok_encode(tok, s, len, 0, &ids, err, sizeof err);
		if (rc == 0 && ids.n == want.n && (ids.n == 0 || memcmp(ids.v, want.v, ids.n * sizeof *ids.v) == 0)) {
			n_ok++;
		} else {
			fprintf(stderr, "FAIL %s: string %zu \"%.*s\"\n", name, n_all - 1, (int)len, s);
			print_ids("want", want.v, want.n);
			print_ids("got ", ids.v, ids.n);
		}
		tok_decode(tok, ids.v, ids.n, 0, &back);
		if (back.n == len && memcmp(back.p ? back.p : "", s, len) == 0)
			n_rt++;
		else
			fprintf(stderr, "FAIL %s: string %zu does not detokenize to itself: \"%.*s\"\n",
			    name, n_all - 1, (int)back.n, back.p ? back.p : "");
		kvc_tokens_free(&ids);
		kvc_tokens_free(&want);
		kvc_buf_free(&back);
	}
	printf("%-16s %zu/%zu strings tokenize as expected, %zu/%zu detokenize back\n",
	    name, n_ok, n_all, n_rt, n_all);
	test_cond(n_all >= 40, "%s: only %zu test strings", name, n_all);
	test_cond(n_ok == n_all, "%s: %zu of %zu strings differ", name, n_all - n_ok, n_all);
	test_cond(n_rt == n_all, "%s: %zu of %zu strings do not round-trip", name, n_all - n_rt, n_all);
done:
	free(inp);
	free(out);
	tok_free(tok);
}

int
main(void)
{
	const char *dir = test_shared_data();

	if (dir == NULL)
		test_skip("SHARED_DATA (../shared/data) not found: no llama.cpp vocab vectors");
	for (size_t i = 0; i < tok_test_n_vocabs; i++)
		run_vocab(dir, tok_test_vocabs[i]);
	return test_done();
}
