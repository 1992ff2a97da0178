/*
 * test_tok_roundtrip.c: for every vocabulary with llama.cpp test vectors,
 * tokenizing then detokenizing both files of $SHARED_DATA/corpus returns
 * the input byte for byte (default flags both ways: the SPM leading space
 * tok_encode adds is the one tok_decode drops). For qwen2 and llama-bpe the
 * token counts must also equal those an independent tokenizer found
 * (SOURCES.md, "Derived vocab GGUFs"). SKIP when the shared data is absent.
 */
#include "gguf/gguf.h"
#include "test.h"

#include "tok_testlib.h"
#include "tokenizer/tokenizer.h"

static const char *const corpora[] = { "julia-zh-manual.md", "war-and-peace.txt" };

/* Token counts from SOURCES.md (a scratch tokenizer outside the project). */
static const struct {
	const char *vocab, *corpus;
	size_t n;
} known[] = {
	{ "qwen2", "julia-zh-manual.md", 99163 },
	{ "llama-bpe", "julia-zh-manual.md", 102721 },
	{ "qwen2", "war-and-peace.txt", 761086 },
	{ "llama-bpe", "war-and-peace.txt", 760377 },
};

int
main(void)
{
	const char *dir = test_shared_data();
	char *text[2];
	size_t len[2];
	char path[4096], err[512];
	double total = 0;

	if (dir == NULL)
		test_skip("SHARED_DATA (../shared/data) not found: no corpus");
	for (int c = 0; c < 2; c++) {
		snprintf(path, sizeof path, "%s/corpus/%s", dir, corpora[c]);
		text[c] = tok_test_slurp(path, &len[c]);
		if (text[c] == NULL)
			test_skip("cannot read %s", path);
	}
	for (size_t v = 0; v < tok_test_n_vocabs; v++) {
		const char *vocab = tok_test_vocabs[v];
		struct kvc_tokenizer *tok;

		if (tok_test_load_vocab(dir, vocab, &tok, err, sizeof err) != 0) {
			test_cond(0, "%s", err);
			continue;
		}
		for (int c = 0; c < 2; c++) {
			struct kvc_tokens ids = { 0 };
			struct kvc_buf back = { 0 };
			double t0 = kvc_now(), t1, t2;
			int rc = tok_encode(tok, text[c], len[c], 0, &ids, err, sizeof err);

			t1 = kvc_now();
			test_cond(rc == 0, "%s %s: %s", vocab, corpora[c], err);
			test_cond(tok_decode(tok, ids.v, ids.n, 0, &back) == 0, "%s: decode failed", vocab);
			t2 = kvc_now();
			total += t2 - t0;
			test_cond(back.n == len[c] && memcmp(back.p, text[c], len[c]) == 0,
			    "%s %s: detokenized text differs (%zu bytes vs %zu)", vocab, corpora[c],
			    back.n, len[c]);
			printf("%-16s %-20s %8zu tokens  encode %.3fs (%.0f tok/s)  decode %.3fs\n",
			    vocab, corpora[c], ids.n, t1 - t0, (double)ids.n / (t1 - t0), t2 - t1);
			for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
				if (strcmp(known[k].vocab, vocab) == 0 && strcmp(known[k].corpus, corpora[c]) == 0)
					test_cond(ids.n == known[k].n, "%s %s: %zu tokens, the reference has %zu",
					    vocab, corpora[c], ids.n, known[k].n);
			kvc_tokens_free(&ids);
			kvc_buf_free(&back);
		}
		tok_free(tok);
	}
	printf("total encode+decode time %.2fs\n", total);
	free(text[0]);
	free(text[1]);
	return test_done();
}
