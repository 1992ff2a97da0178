/*
 * test_tok_linear.c (issue 10 point 3): pre-tokenizing and encoding are
 * linear in the text. A pasted number stalled the chat: the llama3/qwen2
 * digit rule measured the whole digit run at every position (1 MB of digits
 * took over 300 s), and DeepSeek-LLM's \s+$ did the same over whitespace
 * runs; and a 1 MB piece (a run of digits under gpt-2's \p{N}+) went
 * through a merge heap of a million entries (issue 26; BPE merges a long
 * word by rank buckets now). Those words' ids are checked equal to the
 * heap's on every class's 100 KB text (the llama.cpp vectors check the
 * buckets on short words: test_tok_vectors).
 *
 * What is measured is work, not time: the module counts its units of work
 * as it goes (pretok_out.work: code points decoded and each look of a
 * scanner at one; tok_encode_work: that, plus symbols made, pairs tried,
 * heap and rank-queue pushes, pops and the levels they move, candidates
 * visited). A count does not change with the machine's load, so one run of
 * each length decides. For every pre-tokenizer and every character class,
 * and for every vocabulary at hand (the fixtures' BPE and SPM ones,
 * llama.cpp's real ones from $SHARED_DATA, that part SKIPs without it) its
 * own pre-tokenizer and whole tok_encode on digits and mixed text, the
 * count of 1 MB is at most MAX_RATIO times that of 100 KB: a linear scanner
 * gives 10.24x (the lengths' ratio), a quadratic one 100x. 10 KB : 100 KB is
 * checked first, so a quadratic scanner fails in seconds instead of running
 * 1 MB for minutes.
 */
#include <stdint.h>

#include "test.h"
#include "core/kvc.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tok_internal.h"
#include "fixtures/fixture_vocab.h"
#include "tok_testlib.h"

#define TINY (10u * 1024)
#define SMALL (100u * 1024)
#define BIG (1024u * 1024)
/*
 * 11: every count here grows 10.24-10.25x from 100 KiB to 1 MiB (the
 * lengths' ratio, 1024/100; fixed costs per call only lower it), on every
 * pre-tokenizer, class and vocabulary. A quadratic scanner gives about 100x
 * (run_max measuring the whole run, the llama3 digit bug: 99.8x at 10 KB :
 * 100 KB), and the merge heap issue 26 replaced, n log n, 11.88x on gpt-2's
 * 1 MB digit word (long_word = SIZE_MAX): 11 holds both out.
 */
#define MAX_RATIO 11.0
/* The character classes: each text is its pattern repeated, then "x". */
static const struct {
	const char *name;
	const char *pat;
} classes[] = {
	{ "digits", "3141592653589793238462643383279502884197" },
	{ "letters", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" },
	{ "accented", "\xc3\xa9\xc3\xa0\xc3\xbc\xc3\xb1\xc3\xa7\xc3\xb8" },
	{ "cjk", "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6\xe4\xb8\xb2" },
	{ "hangul", "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4" },
	{ "spaces", " " },
	{ "tabs+spaces", " \t  \t" },
	{ "newlines", "\n" },
	{ "crlf+spaces", "\r\n  \n \r" },
	{ "punctuation", "!?.,;:-()[]{}\"'/\\@#%&*" },
	{ "symbols", "$+<=>^~|`" },
	{ "emoji", "\xf0\x9f\x98\x80\xf0\x9f\x8e\x89\xe2\x9c\xa8" },
	{ "contractions", "'s'T're'VE'm'll'd" },
	{ "mixed", "Hello, world! 123 4567 \xe4\xb8\xad\xe6\x96\x87 \n\t it's x=42;\r\n"
	    "\xf0\x9f\x98\x80 \xc3\xa9t\xc3\xa9  \n\n  99,999.5 " },
};
#define N_CLASSES (sizeof classes / sizeof classes[0])

static const char *const kind_names[] = {
	"default", "gpt2", "llama3", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
	"starcoder",
};
#define N_KINDS (sizeof kind_names / sizeof kind_names[0])

/* pat repeated to about len bytes (whole repetitions, at least one), then "x". */
static char *
make_text(const char *pat, size_t len, size_t *out_len)
{
	size_t p = strlen(pat), n = 0;
	char *s = malloc(len + p + 2);

	if (s == NULL)
		return NULL;
	do {
		memcpy(s + n, pat, p);
		n += p;
	} while (n + p <= len);
	s[n++] = 'x';
	s[n] = '\0';
	*out_len = n;
	return s;
}

/* What is counted: one pre-tokenizer, or a whole tokenizer. */
struct subject {
	enum pretok_kind kind;
	const struct kvc_tokenizer *tok;	/* NULL: count pretok_split(kind) */
};

/* The units of work of one run over s[0..n). */
static size_t
work_of(const struct subject *sj, const char *s, size_t n, int *rc)
{
	struct pretok_out po = { 0 };
	struct kvc_tokens ids = { 0 };
	char err[256] = "";
	size_t work = 0;

	if (sj->tok == NULL) {
		*rc = pretok_split(sj->kind, s, n, &po);
		work = po.work;
	} else {
		*rc = tok_encode_work(sj->tok, s, n, 0, &ids, &work, err, sizeof err);
	}
	pretok_out_free(&po);
	kvc_tokens_free(&ids);
	return work;
}

/* Ratio of the counts of len_b and len_a bytes of class ci; *wa, *wb the counts. */
static double
ratio_of(const struct subject *sj, size_t ci, size_t len_a, size_t len_b, size_t *wa,
    size_t *wb, int *rc)
{
	size_t na, nb;
	char *a = make_text(classes[ci].pat, len_a, &na);
	char *b = make_text(classes[ci].pat, len_b, &nb);
	double ratio = 0;

	*wa = *wb = 0;
	if (a == NULL || b == NULL) {
		*rc = KVC_ENOMEM;
	} else {
		*wa = work_of(sj, a, na, rc);
		if (*rc == 0)
			*wb = work_of(sj, b, nb, rc);
		ratio = (double)*wb / (double)(*wa > 0 ? *wa : 1);
	}
	free(a);
	free(b);
	return ratio;
}

/* The 1 MB : 100 KB ratio of one subject on one class, after 100 KB : 10 KB. */
static void
check_class(const struct subject *sj, const char *who, size_t ci)
{
	size_t wa = 0, wb = 0;
	double ratio;
	int rc = 0;
	const char *what = "1 MB against 100 KB";

	ratio = ratio_of(sj, ci, TINY, SMALL, &wa, &wb, &rc);
	if (rc == 0 && ratio <= MAX_RATIO)
		ratio = ratio_of(sj, ci, SMALL, BIG, &wa, &wb, &rc);
	else
		what = "100 KB against 10 KB";
	test_cond(rc == 0, "%s, %s: rc %d", who, classes[ci].name, rc);
	test_cond(wa > 0, "%s, %s: no work counted", who, classes[ci].name);
	test_cond(ratio <= MAX_RATIO, "%s, %s: %s: %zu units of work against %zu, %.1fx (at "
	    "most %.0fx)", who, classes[ci].name, what, wb, wa, ratio, MAX_RATIO);
	if (getenv("TOK_LINEAR_VERBOSE"))
		printf("%-22s %-13s %10zu %10zu  ratio %5.2f\n", who, classes[ci].name, wa, wb,
		    ratio);
}

static struct kvc_tokenizer *
fixture_tokenizer(enum fixture_vocab_kind kind)
{
	struct gguf_writer *w = gguf_writer_new();
	struct gguf_file *f = NULL;
	struct kvc_tokenizer *t = NULL;
	void *mem = NULL;
	size_t len = 0;
	char err[256] = "";

	if (w != NULL && fixture_vocab_add(w, kind, 0, NULL) == 0 &&
	    gguf_w_to_mem(w, &mem, &len) == 0 &&
	    gguf_open_mem(&f, mem, len, "fixture", err, sizeof err) == 0) {
		if (tok_load(&t, f, err, sizeof err) != 0)
			t = NULL;
		gguf_close(f);
	}
	test_cond(t != NULL, "fixture vocabulary %d: %s", (int)kind, err);
	gguf_writer_free(w);
	free(mem);
	return t;
}

/* BPE: every class's 100 KB text, its long words merged by buckets and by the heap: the same ids. */
static void
check_buckets_equal_heap(struct kvc_tokenizer *t, const char *name)
{
	size_t keep = t->long_word;

	if (tok_kind(t) != TOK_KIND_BPE)
		return;
	for (size_t ci = 0; ci < N_CLASSES; ci++) {
		struct kvc_tokens a = { 0 }, b = { 0 };
		char err[256] = "";
		size_t n;
		char *s = make_text(classes[ci].pat, SMALL, &n);
		int rc;

		t->long_word = keep;
		rc = s ? tok_encode(t, s, n, 0, &a, err, sizeof err) : KVC_ENOMEM;
		t->long_word = SIZE_MAX;
		rc = rc ? rc : tok_encode(t, s, n, 0, &b, err, sizeof err);
		test_cond(rc == 0 && a.n == b.n && memcmp(a.v, b.v, a.n * sizeof *a.v) == 0,
		    "%s, %s: rank buckets and heap differ (rc %d, %zu and %zu ids)", name,
		    classes[ci].name, rc, a.n, b.n);
		kvc_tokens_free(&a);
		kvc_tokens_free(&b);
		free(s);
	}
	t->long_word = keep;
}

/* t's own pre-tokenizer on every class; whole tok_encode on the classes that stalled. */
static void
check_tokenizer(struct kvc_tokenizer *t, const char *name)
{
	static const char *const encode_classes[] = { "digits", "mixed" };
	struct subject sj = { PRETOK_DEFAULT, NULL };
	char who[64];
	bool ign;

	if (tok_kind(t) == TOK_KIND_BPE) {
		test_cond(pretok_from_name(tok_pre_name(t), &sj.kind, &ign) == 0, "%s: pre '%s'",
		    name, tok_pre_name(t));
		snprintf(who, sizeof who, "%s (pre %s)", name, tok_pre_name(t));
		for (size_t ci = 0; ci < N_CLASSES; ci++)
			check_class(&sj, who, ci);
	}
	check_buckets_equal_heap(t, name);
	sj.tok = t;
	snprintf(who, sizeof who, "%s tok_encode", name);
	for (size_t ci = 0; ci < N_CLASSES; ci++)
		for (size_t j = 0; j < 2; j++)
			if (strcmp(classes[ci].name, encode_classes[j]) == 0)
				check_class(&sj, who, ci);
}

int
main(void)
{
	const char *dir = test_shared_data();
	struct kvc_tokenizer *t;
	char who[64];

	/* Every pre-tokenizer, every class. */
	for (size_t k = 0; k < N_KINDS; k++) {
		struct subject sj = { (enum pretok_kind)k, NULL };

		snprintf(who, sizeof who, "pretok %s", kind_names[k]);
		for (size_t ci = 0; ci < N_CLASSES; ci++)
			check_class(&sj, who, ci);
	}
	/* The vocabularies: the fixtures' own, then llama.cpp's. */
	if ((t = fixture_tokenizer(FIXTURE_VOCAB_BPE)) != NULL) {
		check_tokenizer(t, "fixture bpe");
		tok_free(t);
	}
	if ((t = fixture_tokenizer(FIXTURE_VOCAB_SPM)) != NULL) {
		check_tokenizer(t, "fixture spm");
		tok_free(t);
	}
	if (dir == NULL) {
		printf("SKIP (part): no $SHARED_DATA, llama.cpp's vocabularies not counted\n");
		return test_done();
	}
	for (size_t v = 0; v < tok_test_n_vocabs; v++) {
		char err[256] = "";
		int rc = tok_test_load_vocab(dir, tok_test_vocabs[v], &t, err, sizeof err);

		test_cond(rc == 0, "%s: %s", tok_test_vocabs[v], err);
		if (rc != 0)
			continue;
		check_tokenizer(t, tok_test_vocabs[v]);
		tok_free(t);
	}
	return test_done();
}
