/*
 * test_tok_vectors.c: llama.cpp's tokenizer test vectors
 * ($SHARED_DATA/llama.cpp-vocab/ggml-vocab-NAME.gguf{,.inp,.out}): every
 * string must tokenize to exactly the expected ids (no BOS, no special-token
 * parsing, as llama.cpp's test-tokenizer-0) and detokenize back to itself.
 * BPE vocabularies run twice: as loaded, and with every word of two bytes
 * or more merged by rank buckets (tok_bpe.c's path for long words), which
 * must give the same ids. SKIP when the shared data is absent.
 */
#include "gguf/gguf.h"
#include "test.h"

#include "tok_testlib.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tok_internal.h"

static void
print_ids(const char *label, const int32_t *v, size_t n)
{
	fprintf(stderr, "    %s:", label);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %d", v[i]);
	fputc('\n', stderr);
}

/*
 * Random texts over a few letters and digits make long runs of overlapping
 * pairs of one rank ("aaaa", "1111"), where the order of merges decides
 * the tokens: the buckets (long_word 2) must give the heap's ids.
 */
static void
buckets_equal_heap(struct kvc_tokenizer *tok, const char *name)
{
	static const char alpha[] = "aaaabbeet  00011\n";
	unsigned seed = 26;
	int n_diff = 0;
	char s[400], err[256];

	for (int k = 0; k < 300; k++) {
		struct kvc_tokens a = { 0 }, b = { 0 };
		size_t n = 40 + (size_t)(k % 9) * 40;
		int rc;

		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			s[i] = alpha[(seed >> 16) % (sizeof alpha - 1)];
		}
		tok->long_word = 2;
		rc = tok_encode(tok, s, n, 0, &a, err, sizeof err);
		tok->long_word = SIZE_MAX;
		rc = rc ? rc : tok_encode(tok, s, n, 0, &b, err, sizeof err);
		if (rc != 0 || a.n != b.n || memcmp(a.v, b.v, a.n * sizeof *a.v) != 0)
			n_diff++;
		kvc_tokens_free(&a);
		kvc_tokens_free(&b);
	}
	tok->long_word = 2;
	test_cond(n_diff == 0, "%s: %d of 300 random texts merge differently by buckets and by the heap",
	    name, n_diff);
}

static void
run_vocab(const char *dir, const char *name, bool buckets)
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
	if (buckets) {
		if (tok_kind(tok) != TOK_KIND_BPE) {
			tok_free(tok);
			return;
		}
		tok->long_word = 2;
		buckets_equal_heap(tok, name);
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
	printf("%-16s %zu/%zu strings tokenize as expected%s, %zu/%zu detokenize back\n",
	    name, n_ok, n_all, buckets ? " (rank buckets)" : "", n_rt, n_all);
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
	for (size_t i = 0; i < tok_test_n_vocabs; i++) {
		run_vocab(dir, tok_test_vocabs[i], false);
		run_vocab(dir, tok_test_vocabs[i], true);
	}
	return test_done();
}
