/*
 * test_forward_multi.c: eng_seq_append_multi (the CPU's prefill_multi)
 * gives every sequence's prompt the logits its own prefill gives, and
 * eng_seq_decode_multi (forward_multi) every sequence the logits its own
 * one-token forward gives, bit for bit, with the sequences at different
 * positions, across architectures, weight types (the int8-activation
 * kernels included) and cache types; a
 * sequence that leaves and one that joins change nothing for the others;
 * a full context, a repeated sequence or a bad id is refused without
 * changing anything; an evicted sequence is brought back by its own
 * prefill first. One gemma3 case has a window of 8 and prompts past its
 * bounded layers' capacity (2 * 8 - 1 + 128 = 143 slots), so the pass reads
 * trimmed caches at their slot offsets. The mixture-of-experts cases
 * (qwen3moe, qwen2moe) group a pass's rows by the experts they chose.
 * Every case runs in every kernel table this CPU runs.
 */
#include "test.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "kern/kern.h"
#include "sampler/sampler.h"

#define N_SEQ 6
#define N_STEP 5

/*
 * Prompt lengths: all different, so every row of a pass sits at its own
 * position; plus prompt_base (the bounded-window case starts them past 140).
 */
static const int prompt_len[N_SEQ] = { 1, 9, 3, 17, 5, 30 };
static int prompt_base;

static int32_t
prompt_tok(int seq, int i, int n_vocab)
{
	return (int32_t)((seq * 131 + i * 97 + 7) % n_vocab);
}

static struct kvc_seq *
new_seq(struct kvc_engine *e, int seq)
{
	struct kvc_seq *s = NULL;
	int32_t t[256];
	int n = prompt_base + prompt_len[seq];
	char err[256];

	for (int i = 0; i < n; i++)
		t[i] = prompt_tok(seq, i, eng_n_vocab(e));
	if (eng_seq_new(e, &s, err, sizeof err) != 0 ||
	    eng_seq_append(s, t, n, NULL, err, sizeof err) != 0) {
		fprintf(stderr, "sequence %d: %s\n", seq, err);
		eng_seq_free(s);
		return NULL;
	}
	return s;
}

/*
 * The N_SEQ sequences with their prompts prefilled together
 * (eng_seq_append_multi: the CPU's prefill_multi, the prompts' rows in
 * shared chunks, sequences crossing chunk boundaries in the bounded-window
 * case); 0, or 1 with the check failed.
 */
static int
new_seqs_together(struct kvc_engine *e, struct kvc_seq **v, const char *what)
{
	static int32_t t[N_SEQ][256];
	const int32_t *tp[N_SEQ];
	int n[N_SEQ], rc = 0;
	struct eng_stats st[N_SEQ];
	char err[256] = "";

	for (int i = 0; i < N_SEQ; i++) {
		v[i] = NULL;
		n[i] = prompt_base + prompt_len[i];
		for (int j = 0; j < n[i]; j++)
			t[i][j] = prompt_tok(i, j, eng_n_vocab(e));
		tp[i] = t[i];
		if (rc == 0)
			rc = eng_seq_new(e, &v[i], err, sizeof err);
	}
	if (rc == 0)
		rc = eng_seq_append_multi(v, N_SEQ, tp, n, st, err, sizeof err);
	test_cond(rc == 0, "%s: the prompts prefilled together: %s", what, err);
	for (int i = 0; rc == 0 && i < N_SEQ; i++)
		test_cond(st[i].n_computed == n[i] && eng_seq_n_pos(v[i]) == n[i],
		    "%s: sequence %d: %d of %d positions computed together", what, i, st[i].n_computed, n[i]);
	return rc != 0;
}

/*
 * N_STEP greedy steps of N_SEQ sequences, in passes of `width` (the
 * sequences still running, as kvchat batch runs them: sequence i leaves
 * after 2 + i steps, so the passes shrink), against the same sequences
 * decoded alone one token at a time. Returns the mismatches.
 */
static int
compare(struct kvc_engine *e, const char *what)
{
	struct kvc_seq *multi[N_SEQ], *alone[N_SEQ], *run[N_SEQ];
	int32_t next[N_SEQ], tok[N_SEQ];
	size_t nv = (size_t)eng_n_vocab(e);
	char err[256];
	int bad = 0, rc;

	if (new_seqs_together(e, multi, what) != 0)
		return 1;
	for (int i = 0; i < N_SEQ; i++) {
		alone[i] = new_seq(e, i);
		if (multi[i] == NULL || alone[i] == NULL)
			return 1;
		/* prefilled with the others: the bits of its own prefill */
		test_cond(memcmp(eng_seq_logits(multi[i]), eng_seq_logits(alone[i]), nv * sizeof(float)) == 0,
		    "%s: sequence %d: logits of the prompts prefilled together differ from its own "
		    "prefill's", what, i);
		next[i] = smp_argmax(eng_seq_logits(multi[i]), (int)nv);
	}
	for (int step = 0; step < N_STEP; step++) {
		int n = 0;

		for (int i = 0; i < N_SEQ; i++)
			if (step < 2 + i) {
				run[n] = multi[i];
				tok[n++] = next[i];
			}
		rc = eng_seq_decode_multi(run, n, tok, err, sizeof err);
		test_cond(rc == 0, "%s: step %d: decode_multi of %d: %s", what, step, n, err);
		if (rc != 0)
			return 1;
		for (int i = 0; i < N_SEQ; i++) {
			const float *lm, *la;

			if (step >= 2 + i)
				continue;
			rc = eng_seq_append(alone[i], &next[i], 1, NULL, err, sizeof err);
			test_cond(rc == 0, "%s: alone append: %s", what, err);
			lm = eng_seq_logits(multi[i]);
			la = eng_seq_logits(alone[i]);
			if (lm == NULL || la == NULL || memcmp(lm, la, nv * sizeof *lm) != 0) {
				test_cond(0, "%s: step %d, sequence %d at position %d: logits differ from "
				    "its one-token forward", what, step, i, eng_seq_n_pos(alone[i]) - 1);
				bad++;
			}
			test_cond(eng_seq_n_pos(multi[i]) == eng_seq_n_pos(alone[i]) &&
			    memcmp(eng_seq_tokens(multi[i]), eng_seq_tokens(alone[i]),
			    (size_t)eng_seq_n_pos(alone[i]) * sizeof(int32_t)) == 0,
			    "%s: sequence %d: token lists agree", what, i);
			next[i] = smp_argmax(la, (int)nv);
		}
	}
	for (int i = 0; i < N_SEQ; i++) {
		eng_seq_free(multi[i]);
		eng_seq_free(alone[i]);
	}
	return bad;
}

/* Refusals change nothing; an evicted sequence is prefilled again first. */
static void
edges(struct kvc_engine *e)
{
	struct kvc_seq *a = new_seq(e, 1), *b = new_seq(e, 2), *c = new_seq(e, 3), *two[2];
	size_t nv = (size_t)eng_n_vocab(e);
	int32_t tok[2] = { 5, 6 }, filler[64];
	float *ref;
	char err[256];
	int rc, na, nb;

	if (a == NULL || b == NULL || c == NULL)
		return;
	na = eng_seq_n_pos(a);
	nb = eng_seq_n_pos(b);
	two[0] = a;
	two[1] = a;
	rc = eng_seq_decode_multi(two, 2, tok, err, sizeof err);
	test_cond(rc == KVC_EINVAL && eng_seq_n_pos(a) == na, "the same sequence twice is refused: %d", rc);
	two[1] = b;
	tok[1] = (int32_t)nv;
	rc = eng_seq_decode_multi(two, 2, tok, err, sizeof err);
	test_cond(rc == KVC_EINVAL && eng_seq_n_pos(a) == na && eng_seq_n_pos(b) == nb,
	    "an id outside the vocabulary is refused: %d", rc);
	/* fill c's context (n_ctx 64) to the last position */
	for (int i = 0; i < 64; i++)
		filler[i] = (int32_t)(i % 40 + 3);
	rc = eng_seq_append(c, filler, eng_n_ctx(e) - eng_seq_n_pos(c), NULL, err, sizeof err);
	test_cond(rc == 0 && eng_seq_n_pos(c) == eng_n_ctx(e), "fill: %s", err);
	two[1] = c;
	tok[1] = 6;
	rc = eng_seq_decode_multi(two, 2, tok, err, sizeof err);
	test_cond(rc == KVC_ERANGE && eng_seq_n_pos(a) == na && strstr(err, "context full") != NULL,
	    "a full context is refused before anything runs: %d %s", rc, err);

	/* b evicted: its own prefill brings the cache back, then the pass */
	ref = malloc(nv * sizeof *ref);
	{
		struct kvc_seq *r = new_seq(e, 2);

		rc = r ? eng_seq_append(r, &tok[1], 1, NULL, err, sizeof err) : -1;
		memcpy(ref, eng_seq_logits(r), nv * sizeof *ref);
		eng_seq_free(r);
	}
	eng_seq_evict(b);
	two[1] = b;
	rc = eng_seq_decode_multi(two, 2, tok, err, sizeof err);
	test_cond(rc == 0 && eng_seq_resident(b) && eng_seq_n_pos(b) == nb + 1 &&
	    eng_seq_n_pos(a) == na + 1, "an evicted sequence joins: %d %s", rc, err);
	test_cond(rc == 0 && memcmp(eng_seq_logits(b), ref, nv * sizeof *ref) == 0,
	    "the evicted sequence's logits equal its one-token forward's");
	free(ref);
	eng_seq_free(a);
	eng_seq_free(b);
	eng_seq_free(c);
}

int
main(void)
{
	static const struct {
		const char *arch, *type, *kv;
		int swa;	/* gemma's window (0: the fixture's), prompts from 140 on */
	} cases[] = {
		{ "llama", "q8_0", "f16", 0 }, { "qwen2", "q4_k", "f16", 0 }, { "qwen3", "f16", "f32", 0 },
		{ "llama", "q6_k", "q8_0", 0 }, { "qwen2", "q4_0", "q8_0", 0 }, { "gemma3", "q5_k", "f16", 0 },
		{ "gpt2", "f32", "f16", 0 }, { "phi3", "bf16", "f16", 0 }, { "gemma3", "q8_0", "f32", 8 },
		/* experts: the pass groups its rows by expert as a prefill does */
		{ "qwen3moe", "q4_k", "f16", 0 }, { "qwen2moe", "q8_0", "q8_0", 0 },
		{ "glm4moe", "q4_k", "f16", 0 },
	};
	char dir[] = "/tmp/kvc-test-fmulti-XXXXXX";
	const char *bd = getenv("top_builddir");
	char mk[512], cmd[1400], path[600], what[64], err[256];

	if (bd == NULL)
		bd = ".";
	snprintf(mk, sizeof mk, "%s/tests/fixtures/mkmodel", bd);
	if (access(mk, X_OK) != 0) {
		printf("SKIP: %s not built\n", mk);
		return 77;
	}
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
	for (int ki = 0; kern_list(ki) != NULL; ki++) {
		/* every kernel table this CPU runs */
		const struct kern *k = kern_list(ki);
		struct kvc_engine_params p = kvc_engine_default_params();
		struct kvc_engine *e = NULL;
		int rc;

		if (!kern_runs(k))
			continue;

		snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, cases[i].arch, cases[i].type);
		snprintf(cmd, sizeof cmd, "'%s' --preset tiny --arch %s --type %s --swa %d --quiet "
		    "-o '%s'", mk, cases[i].arch, cases[i].type, cases[i].swa ? cases[i].swa : 16, path);
		if (system(cmd) != 0) {
			test_cond(0, "%s failed", cmd);
			continue;
		}
		snprintf(what, sizeof what, "%s %s, %s cache%s, %s kernels", cases[i].arch, cases[i].type,
		    cases[i].kv, cases[i].swa ? ", bounded window 8" : "", k->name);
		p.device = "cpu";
		p.kernels = k->name;
		p.n_ctx = cases[i].swa ? 256 : 64;
		prompt_base = cases[i].swa ? 140 : 0;
		p.n_threads = 2;
		(void)eng_kv_type_parse(cases[i].kv, &p.kv_type);
		rc = eng_open(&e, path, &p, err, sizeof err);
		test_cond(rc == 0, "%s: open: %s", what, err);
		if (rc == 0) {
			test_cond(compare(e, what) == 0, "%s: every sequence's logits equal its own", what);
			if (i == 0 && ki == 0)
				edges(e);
		}
		eng_close(e);
		remove(path);
	}
	rmdir(dir);
	return test_done();
}
