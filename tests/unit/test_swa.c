/*
 * test_swa.c: the bounded caches of sliding-window layers (gemma3 fixture,
 * window 8, so a 700-token sequence crosses a windowed cache's capacity
 * of 2 * 8 - 1 + 128 = 143 positions many times).
 *
 * 1. Backend (gemma3, and gemma2 with its softcaps and every other layer
 *    windowed): the logits of every position are bitwise those of the whole
 *    cache (kvc_backend_params.kv_whole, the computation before the
 *    bound), in one prefill, token by token and in slices of 37, for F32,
 *    F16 and Q8_0 caches; the committed bytes stay within the bound (for
 *    gemma3's 5 windowed layers of 6, under a third of the whole); a
 *    forward whose window is gone is KVC_ENOTFOUND (never other rows), one
 *    within the kept rows is exact; kv_read below what a windowed layer
 *    holds is KVC_ENOTFOUND; a slide (kv_shift) dropping positions above,
 *    across and below what the windowed layers hold gives the whole
 *    cache's next logits bitwise.
 * 2. Engine: a rewind past the window recomputes from position 0 (and says
 *    so in its counts) and gives the uninterrupted logits; a short one does
 *    not recompute; snapshots saved per turn restore a cache whose next
 *    logits are bitwise the uninterrupted ones, holding a windowed layer's
 *    rows only where the cache still held them (version 4: the chunk no
 *    larger than the cache); a rewind past what the restored cache holds
 *    recomputes; the same chunk in version 3 (zeros for the absent rows)
 *    and a version 2 chunk of 700 real rows (what older kvchats saved)
 *    still restore exactly; a version 4 chunk whose windowed layers are not
 *    the model's is refused.
 */
#include "config.h"

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/snapshot.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 700, N_CTX = 1024, SWA = 8, CAP = 2 * SWA - 1 + KVC_KV_WINDOW_SLACK };

static const struct kvc_backend_i *be = &kvc_backend_cpu;
static int32_t tok[N + 1];

/* Forward tok[pos0..pos0+n) in slices of step, all logits into lg (row p at p * V). */
static int
run(void *ctx, void *kv, int pos0, int n, int step, float *lg, int V, char *err, size_t errlen)
{
	int rc = 0;

	for (int p = pos0; rc == 0 && p < pos0 + n; p += step) {
		int k = pos0 + n - p < step ? pos0 + n - p : step;

		rc = be->forward(ctx, kv, tok + p, k, p, lg + (size_t)p * V, true, err, errlen);
	}
	return rc;
}

static int
same_rows(const float *a, const float *b, int p0, int p1, int V)
{
	int bad = 0;

	for (int p = p0; p < p1; p++)
		bad += memcmp(a + (size_t)p * V, b + (size_t)p * V, (size_t)V * sizeof *a) != 0;
	return bad;
}

/* The whole cache's and the bounded cache's next logits after dropping [p0, p0 + nd). */
static void
slide_case(const struct kvc_model *m, void *cw, void *cb, enum gguf_dtype t, int p0, int nd)
{
	int V = m->hp.n_vocab, rc, n = N - nd;
	void *kw = NULL, *kb = NULL;
	float *lw = calloc((size_t)(N + 1) * V, sizeof *lw), *lb = calloc((size_t)(N + 1) * V, sizeof *lb);
	char err[256] = "";

	rc = be->kv_create(cw, N_CTX, t, &kw, err, sizeof err);
	rc = rc ? rc : be->kv_create(cb, N_CTX, t, &kb, err, sizeof err);
	rc = rc ? rc : run(cw, kw, 0, N, 128, lw, V, err, sizeof err);
	rc = rc ? rc : run(cb, kb, 0, N, 1, lb, V, err, sizeof err);
	rc = rc ? rc : be->kv_shift(cw, kw, p0, nd, err, sizeof err);
	rc = rc ? rc : be->kv_shift(cb, kb, p0, nd, err, sizeof err);
	test_cond(rc == 0, "slide %d+%d: %s", p0, nd, err);
	/* the next token, at the new end */
	rc = rc ? rc : be->forward(cw, kw, tok + N, 1, n, lw, true, err, sizeof err);
	rc = rc ? rc : be->forward(cb, kb, tok + N, 1, n, lb, true, err, sizeof err);
	test_cond(rc == 0 && memcmp(lw, lb, (size_t)V * sizeof *lw) == 0,
	    "%s: after dropping [%d, %d) the bounded cache's next logits differ (%s)",
	    gguf_dtype_name(t), p0, p0 + nd, err);
	be->kv_destroy(cw, kw);
	be->kv_destroy(cb, kb);
	free(lw);
	free(lb);
}

static void
backend_case(const struct kvc_model *m, enum gguf_dtype t)
{
	struct kvc_backend_params pw = { .n_threads = 2, .kv_whole = true }, pb = { .n_threads = 2 };
	int V = m->hp.n_vocab, rc, n_win = 0, lo;
	size_t sz = (size_t)N * V * sizeof(float), rb = kvc_kv_row_bytes(t, m->hp.n_head_kv * m->hp.head_dim);
	float *lw = malloc(sz), *lb[3] = { malloc(sz), malloc(sz), malloc(sz) }, *one = malloc(sz);
	void *cw = NULL, *cb = NULL, *kw = NULL, *kb[3] = { NULL, NULL, NULL };
	char err[256] = "";
	unsigned char *row = malloc(rb * 8);
	static const int steps[3] = { N, 1, 37 };

	for (int il = 0; il < m->hp.n_layer; il++)
		n_win += model_layer_swa(&m->hp, il);
	rc = be->init(&cw, m, &pw, err, sizeof err);
	rc = rc ? rc : be->init(&cb, m, &pb, err, sizeof err);
	rc = rc ? rc : be->kv_create(cw, N_CTX, t, &kw, err, sizeof err);
	rc = rc ? rc : run(cw, kw, 0, N, 128, lw, V, err, sizeof err);
	test_cond(rc == 0, "%s whole cache: %s", gguf_dtype_name(t), err);
	for (int i = 0; i < 3 && rc == 0; i++) {
		rc = be->kv_create(cb, N_CTX, t, &kb[i], err, sizeof err);
		rc = rc ? rc : run(cb, kb[i], 0, N, steps[i], lb[i], V, err, sizeof err);
		test_cond(rc == 0, "%s bounded, slices of %d: %s", gguf_dtype_name(t), steps[i], err);
		test_cond(same_rows(lw, lb[i], 0, N, V) == 0, "%s bounded, slices of %d: %d of %d "
		    "positions differ from the whole cache", gguf_dtype_name(t), steps[i],
		    same_rows(lw, lb[i], 0, N, V), N);
		/* full layers grow to 1024 slots, windowed ones stay within CAP */
		test_cond(be->kv_bytes(cb, kb[i]) <= 2 * rb * ((size_t)(m->hp.n_layer - n_win) * N_CTX +
		    (size_t)n_win * CAP), "%s: %zu bytes committed", gguf_dtype_name(t),
		    be->kv_bytes(cb, kb[i]));
		lo = be->kv_lowest(cb, kb[i]);
		test_cond(lo > 0 && lo >= N - CAP && lo <= N - SWA + 1, "%s: lowest %d",
		    gguf_dtype_name(t), lo);
	}
	if (rc == 0) {
		size_t bw = be->kv_bytes(cw, kw), bb = be->kv_bytes(cb, kb[0]);

		printf("%s %s: whole %zu bytes, bounded %zu bytes (%d of %d layers windowed, lowest %d)\n",
		    model_arch_name(m->hp.arch), gguf_dtype_name(t), bw, bb, n_win, m->hp.n_layer,
		    be->kv_lowest(cb, kb[0]));
		test_cond(bb < bw && (n_win * 6 < m->hp.n_layer * 5 || bb * 3 < bw),
		    "%s: bounded %zu against whole %zu", gguf_dtype_name(t), bb, bw);
		/* reads: a windowed layer (0) lacks position 0, the global one (5) has it */
		test_cond(be->kv_read(cb, kb[0], 0, KVC_KV_K, 0, 1, row, err, sizeof err) == KVC_ENOTFOUND,
		    "read below a windowed layer's rows");
		test_cond(be->kv_read(cb, kb[0], m->hp.n_layer - 1, KVC_KV_K, 0, 1, row, err,
		    sizeof err) == 0, "read of a global layer: %s", err);
		/* a rewind within the kept rows is exact; one past them refuses */
		rc = be->forward(cb, kb[1], tok + N - 20, 3, N - 20, one, true, err, sizeof err);
		test_cond(rc == 0 && memcmp(one, lw + (size_t)(N - 20) * V, 3 * (size_t)V * sizeof *one) == 0,
		    "rewind by 20: %s", err);
		rc = be->forward(cb, kb[2], tok + 300, 1, 300, one, true, err, sizeof err);
		test_cond(rc == KVC_ENOTFOUND, "rewind to 300 gave %d, not KVC_ENOTFOUND", rc);
		rc = run(cb, kb[2], 0, 400, 128, lb[2], V, err, sizeof err);
		test_cond(rc == 0 && same_rows(lw, lb[2], 0, 400, V) == 0, "recompute from 0: %s", err);
	}
	for (int i = 0; i < 3; i++)
		be->kv_destroy(cb, kb[i]);
	be->kv_destroy(cw, kw);
	/* slides: dropped range above, across and below the windowed layers' rows */
	slide_case(m, cw, cb, t, 600, 50);
	slide_case(m, cw, cb, t, 500, 100);
	slide_case(m, cw, cb, t, 4, 300);
	be->free(cw);
	be->free(cb);
	free(lw); free(lb[0]); free(lb[1]); free(lb[2]); free(one); free(row);
}

static void
backend_tests(const char *path)
{
	static const enum gguf_dtype types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0 };
	struct gguf_file *f = NULL;
	struct kvc_model m;
	char err[256];

	if (gguf_open(&f, path, err, sizeof err) != 0 || model_load(&m, f, err, sizeof err) != 0) {
		test_cond(0, "load %s: %s", path, err);
		gguf_close(f);
		return;
	}
	test_cond(m.hp.n_swa == SWA && kvc_kv_window_cap(&m.hp, N_CTX) == CAP &&
	    kvc_kv_window_cap(&m.hp, CAP) == CAP && kvc_kv_window_cap(&m.hp, 100) == 100,
	    "window %d, capacity %d", m.hp.n_swa, kvc_kv_window_cap(&m.hp, N_CTX));
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		backend_case(&m, types[i]);
	model_free(&m);
	gguf_close(f);
}

/* ---- engine ---- */

static const float *
next_logits(struct kvc_seq *s, int pos, struct eng_stats *st)
{
	char err[256] = "";
	int rc = eng_seq_truncate(s, pos);

	rc = rc ? rc : eng_seq_append(s, tok + pos, 1, st, err, sizeof err);
	test_cond(rc == 0, "append at %d: %s", pos, err);
	return eng_seq_logits(s);
}

/* A version 2 chunk of positions [0, N) with every row real, as an older kvchat wrote it. */
static int
v2_blob(struct kvc_engine *e, struct kvc_buf *out)
{
	struct kvc_backend_params pw = { .n_threads = 2, .kv_whole = true };
	const struct kvc_model *m = eng_model(e);
	size_t rb = kvc_kv_row_bytes(GGML_TYPE_F16, m->hp.n_head_kv * m->hp.head_dim);
	struct eng_snap h = { .kv_type = GGML_TYPE_F16, .n_layer = (uint32_t)m->hp.n_layer,
	    .kv_dim = (uint32_t)(m->hp.n_head_kv * m->hp.head_dim), .pos0 = 0, .n = N,
	    .win_from = 0, .bind = eng_snap_bind(eng_fingerprint(e), tok, N) };
	unsigned char hdr[ENG_SNAP_HEADER];
	void *ctx = NULL, *kv = NULL;
	char err[256] = "";
	int rc;

	eng_snap_choose_version(&h);

	rc = be->init(&ctx, m, &pw, err, sizeof err);
	rc = rc ? rc : be->kv_create(ctx, N_CTX, GGML_TYPE_F16, &kv, err, sizeof err);
	rc = rc ? rc : be->forward(ctx, kv, tok, N, 0, NULL, false, err, sizeof err);
	rc = rc ? rc : kvc_buf_reserve(out, eng_snap_bytes(&h, rb));
	if (rc == 0) {
		eng_snap_put_header(hdr, &h);
		kvc_buf_append(out, hdr, sizeof hdr);
		for (int l = 0; l < m->hp.n_layer && rc == 0; l++)
			for (int part = 0; part < 2 && rc == 0; part++) {
				rc = be->kv_read(ctx, kv, l, (enum kvc_kv_part)part, 0, N, out->p + out->n,
				    err, sizeof err);
				out->n += (size_t)N * rb;
			}
	}
	test_cond(rc == 0, "version 2 blob: %s", err);
	if (ctx) {
		be->kv_destroy(ctx, kv);
		be->free(ctx);
	}
	return rc;
}

/*
 * The version 3 form of a version 4 chunk (what kvchat wrote before
 * version 4): every layer n rows long, a windowed layer's absent rows zeros.
 */
static int
v3_of(const struct kvc_buf *v4, struct kvc_buf *out, size_t rb)
{
	struct eng_snap h, h3;
	unsigned char hdr[ENG_SNAP_HEADER];
	char err[256] = "";
	int rc = eng_snap_get_header(v4->p, v4->n, &h, err, sizeof err);

	test_cond(rc == 0 && h.version == 4, "version 4 header: %s", err);
	if (rc || h.version != 4)
		return -1;
	h3 = h;
	h3.swa = NULL;
	eng_snap_choose_version(&h3);
	test_cond(h3.version == 3, "version 3 without the flags");
	if (kvc_buf_reserve(out, eng_snap_bytes(&h3, rb)) != 0)
		return -1;
	eng_snap_put_header(hdr, &h3);
	kvc_buf_append(out, hdr, sizeof hdr);
	for (int l = 0; l < (int)h.n_layer; l++)
		for (int part = 0; part < 2; part++) {
			size_t zero = (size_t)(eng_snap_layer_first(&h, l) - h.pos0) * rb;

			memset(out->p + out->n, 0, zero);
			out->n += zero;
			kvc_buf_append(out, v4->p + eng_snap_part_offset(&h, rb, l, (enum kvc_kv_part)part),
			    eng_snap_part_bytes(&h, rb, l));
		}
	test_cond(out->n == eng_snap_bytes(&h3, rb), "version 3 blob: %zu bytes", out->n);
	return 0;
}

static void
engine_tests(const char *path)
{
	struct kvc_engine_params p = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	struct kvc_seq *a = NULL, *b = NULL;
	struct kvc_buf c1 = {0}, c2 = {0}, old = {0}, c3 = {0};
	const struct kvc_model *m;
	size_t rb, cap_bytes;
	int n_swa = 0;
	struct eng_stats st;
	float *ref;
	char err[256] = "";
	int V, rc;

	p.device = "cpu";
	p.n_threads = 2;
	p.n_ctx = N_CTX;
	if (eng_open(&e, path, &p, err, sizeof err) != 0) {
		test_cond(0, "eng_open: %s", err);
		return;
	}
	V = eng_n_vocab(e);
	ref = malloc((size_t)V * sizeof *ref);
	test_cond(eng_kv_window_bytes(e) > 0 && eng_kv_mem_bytes_per_pos(e) * 6 ==
	    eng_kv_bytes_per_pos(e), "memory per position: %zu of %zu", eng_kv_mem_bytes_per_pos(e),
	    eng_kv_bytes_per_pos(e));
	rc = eng_seq_new(e, &a, err, sizeof err);
	rc = rc ? rc : eng_seq_new(e, &b, err, sizeof err);
	/* two turns, a chunk saved after each (the second made where the window moved on) */
	rc = rc ? rc : eng_seq_append(a, tok, 100, NULL, err, sizeof err);
	rc = rc ? rc : eng_seq_kv_save(a, 0, 100, &c1, err, sizeof err);
	rc = rc ? rc : eng_seq_append(a, tok + 100, N - 100, NULL, err, sizeof err);
	rc = rc ? rc : eng_seq_kv_save(a, 100, N, &c2, err, sizeof err);
	test_cond(rc == 0, "turns: %s", err);
	if (rc) goto out;
	test_cond(c1.p[4] == 2 && c2.p[4] == 4, "chunk versions %d, %d (2, then 4)", c1.p[4], c2.p[4]);
	/* version 4: the windowed layers' rows only as far as the cache kept them */
	m = eng_model(e);
	rb = kvc_kv_row_bytes(eng_kv_type(e), m->hp.n_head_kv * m->hp.head_dim);
	for (int l = 0; l < m->hp.n_layer; l++)
		n_swa += model_layer_swa(&m->hp, l);
	cap_bytes = 48 + 2 * ((size_t)(m->hp.n_layer - n_swa) * (N - 100) + (size_t)n_swa * CAP) * rb;
	test_cond(n_swa > 0 && c2.n <= cap_bytes && c2.n < 40 + 2 * (size_t)m->hp.n_layer * (N - 100) * rb,
	    "version 4 chunk of %d positions: %zu bytes, at most %zu (the cache's), version 3 %zu",
	    N - 100, c2.n, cap_bytes, 40 + 2 * (size_t)m->hp.n_layer * (N - 100) * rb);
	memcpy(ref, next_logits(a, N, &st), (size_t)V * sizeof *ref);
	test_cond(st.n_computed == 1, "next token: %d computed", st.n_computed);
	/* /retry of a short reply: within the kept rows, nothing recomputed */
	test_cond(memcmp(next_logits(a, N, &st), ref, (size_t)V * sizeof *ref) == 0 &&
	    st.n_computed == 1 && st.n_reused == N, "rewind by 1: %d computed", st.n_computed);
	(void)next_logits(a, N - 40, &st);
	test_cond(st.n_computed == 1, "rewind by 40: %d computed", st.n_computed);
	/* past the window: recomputed from 0, same logits as uninterrupted */
	(void)next_logits(a, 300, &st);
	test_cond(st.n_computed == 301 && st.n_reused == 0, "rewind to 300: %d computed, %d reused",
	    st.n_computed, st.n_reused);
	rc = eng_seq_sync(a, tok, N, NULL, err, sizeof err);
	test_cond(rc == 0 && memcmp(next_logits(a, N, &st), ref, (size_t)V * sizeof *ref) == 0,
	    "logits after the recompute: %s", err);
	/* resume: the two chunks into a fresh sequence */
	rc = eng_seq_kv_load(b, tok, c1.p, c1.n, err, sizeof err);
	rc = rc ? rc : eng_seq_kv_load(b, tok, c2.p, c2.n, err, sizeof err);
	test_cond(rc == 0, "restore: %s", err);
	test_cond(eng_seq_kv_bytes(b) <=
	    (size_t)N_CTX * eng_kv_mem_bytes_per_pos(e) + eng_kv_window_bytes(e),
	    "restored cache %zu bytes", eng_seq_kv_bytes(b));
	test_cond(memcmp(next_logits(b, N, &st), ref, (size_t)V * sizeof *ref) == 0 &&
	    st.n_computed == 1, "restored: next logits differ (%d computed)", st.n_computed);
	(void)next_logits(b, 400, &st);
	test_cond(st.n_computed == 401, "rewind of the restored cache to 400: %d computed",
	    st.n_computed);
	/* the same chunk as version 3 (zeros for the absent rows) still restores */
	eng_seq_evict(b);
	if (v3_of(&c2, &c3, rb) == 0) {
		rc = eng_seq_kv_load(b, tok, c1.p, c1.n, err, sizeof err);
		rc = rc ? rc : eng_seq_kv_load(b, tok, c3.p, c3.n, err, sizeof err);
		test_cond(rc == 0 && memcmp(next_logits(b, N, &st), ref, (size_t)V * sizeof *ref) == 0 &&
		    st.n_computed == 1, "version 3 chunk: %s", err);
	}
	/* a version 4 chunk whose layer flags are not the model's: refused */
	c2.p[ENG_SNAP_HEADER] ^= 1;
	eng_seq_evict(b);
	rc = eng_seq_kv_load(b, tok, c1.p, c1.n, err, sizeof err);
	test_cond(rc == 0 && eng_seq_kv_load(b, tok, c2.p, c2.n, err, sizeof err) == KVC_ECORRUPT,
	    "other windowed layers refused: %s", err);
	c2.p[ENG_SNAP_HEADER] ^= 1;
	/* an older kvchat's chunk: every row real, 700 of them, into a bounded cache */
	eng_seq_evict(b);
	if (v2_blob(e, &old) == 0) {
		rc = eng_seq_kv_load(b, tok, old.p, old.n, err, sizeof err);
		test_cond(rc == 0 && memcmp(next_logits(b, N, &st), ref, (size_t)V * sizeof *ref) == 0 &&
		    st.n_computed == 1, "version 2 chunk: %s", err);
	}
out:
	kvc_buf_free(&c1);
	kvc_buf_free(&c2);
	kvc_buf_free(&old);
	kvc_buf_free(&c3);
	free(ref);
	eng_seq_free(a);
	eng_seq_free(b);
	eng_close(e);
}

int
main(void)
{
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	const char *bd = getenv("top_builddir");
	char dir[512], path[700], path2[700], cmd[1600];
	uint64_t rng = 7;
	int rc;

	snprintf(dir, sizeof dir, "%s/kvc-swa.XXXXXX", tmp);
	if (mkdtemp(dir) == NULL) {
		test_cond(0, "mkdtemp %s", dir);
		return test_done();
	}
	snprintf(path, sizeof path, "%s/g3.gguf", dir);
	snprintf(path2, sizeof path2, "%s/g2.gguf", dir);
	snprintf(cmd, sizeof cmd, "'%s/tests/fixtures/mkmodel' -o '%s' --preset tiny --arch gemma3 "
	    "--swa %d --type f32 --seed 5 --quiet >/dev/null", bd ? bd : ".", path, SWA);
	rc = system(cmd);
	snprintf(cmd, sizeof cmd, "'%s/tests/fixtures/mkmodel' -o '%s' --preset tiny --arch gemma2 "
	    "--swa %d --type f32 --seed 6 --quiet >/dev/null", bd ? bd : ".", path2, SWA);
	if (rc != 0 || system(cmd) != 0) {
		test_cond(0, "mkmodel failed: %s", cmd);
		remove(path);
		rmdir(dir);
		return test_done();
	}
	for (int i = 0; i <= N; i++)
		tok[i] = 3 + (int32_t)(test_urand(&rng) * 250);
	backend_tests(path);
	backend_tests(path2);
	engine_tests(path);
	remove(path);
	remove(path2);
	rmdir(dir);
	return test_done();
}
