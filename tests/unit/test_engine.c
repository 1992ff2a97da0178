/*
 * test_engine.c: sequences and their KV caches on tiny random-weight models
 * of each architecture (built here with gguf_write): delta prefill equals
 * full prefill, rewind + re-append, sync's common prefix, eviction,
 * snapshots (and rejection of bad blobs), context overflow, fingerprints.
 */
#include "gguf/gguf.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#include "engine/engine.h"

#define N_VOCAB (3 + 256 + 16)

struct spec {
	const char *arch;
	int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
	bool biases, qk_norm, tied;
};

static const struct spec specs[] = {
	{ "llama", 32, 2, 4, 2, 8, 48, false, false, false },
	{ "qwen2", 32, 2, 4, 1, 8, 40, true, false, true },
	{ "qwen3", 32, 2, 4, 2, 16, 40, false, true, true },
};

static uint64_t rng_state;

static float
frand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static int
add(struct gguf_writer *w, const char *name, int64_t n_in, int64_t n_out, float scale, float offset)
{
	int64_t ne[2] = { n_in, n_out };
	size_t n = (size_t)(n_in * n_out);
	float *d = malloc(n * sizeof *d);
	int rc;

	for (size_t i = 0; i < n; i++)
		d[i] = offset + scale * frand();
	rc = gguf_w_tensor(w, name, GGML_TYPE_F32, n_out > 1 ? 2 : 1, ne, d, n * sizeof *d);
	free(d);
	return rc;
}

/* A small model of spec s with weights from seed, written to path. */
static int
build_model(const char *path, const struct spec *s, uint64_t seed)
{
	struct gguf_writer *w = gguf_writer_new();
	const char *toks[N_VOCAB];
	char bufs[N_VOCAB][16];
	float scores[N_VOCAB];
	int32_t types[N_VOCAB];
	char key[128], name[64], err[256];
	int qd = s->n_head * s->head_dim, kvd = s->n_head_kv * s->head_dim, rc = 0;

	rng_state = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (int i = 0; i < N_VOCAB; i++) {
		if (i == 0)
			snprintf(bufs[i], sizeof bufs[i], "<unk>");
		else if (i == 1)
			snprintf(bufs[i], sizeof bufs[i], "<s>");
		else if (i == 2)
			snprintf(bufs[i], sizeof bufs[i], "</s>");
		else if (i < 3 + 256)
			snprintf(bufs[i], sizeof bufs[i], "<0x%02X>", i - 3);
		else
			snprintf(bufs[i], sizeof bufs[i], "\xe2\x96\x81%c%c", 'a' + (i - 259), 'a' + (i - 259) / 2);
		toks[i] = bufs[i];
		scores[i] = i < 259 ? 0.0f : -(float)i;
		types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
	}
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", s->arch, k), key)
	rc |= gguf_w_str(w, "general.architecture", s->arch);
	rc |= gguf_w_u32(w, KEY("context_length"), 4096);
	rc |= gguf_w_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
	rc |= gguf_w_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
	rc |= gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
	rc |= gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
	rc |= gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
	if (s->qk_norm) {
		rc |= gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
		rc |= gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
	}
	rc |= gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
	rc |= gguf_w_f32(w, KEY("rope.freq_base"), 10000.0f);
#undef KEY
	rc |= gguf_w_str(w, "tokenizer.ggml.model", "llama");
	rc |= gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, N_VOCAB);
	rc |= gguf_w_arr_f32(w, "tokenizer.ggml.scores", scores, N_VOCAB);
	rc |= gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, N_VOCAB);
	rc |= gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
	rc |= gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);

	rc |= add(w, "token_embd.weight", s->n_embd, N_VOCAB, 1.0f, 0);
	for (int l = 0; l < s->n_layer; l++) {
#define T(sfx, a, b, sc, off) (snprintf(name, sizeof name, "blk.%d.%s", l, sfx), \
	rc |= add(w, name, a, b, sc, off))
		T("attn_norm.weight", s->n_embd, 1, 0.2f, 1.0f);
		T("attn_q.weight", s->n_embd, qd, 0.4f, 0);
		T("attn_k.weight", s->n_embd, kvd, 0.4f, 0);
		T("attn_v.weight", s->n_embd, kvd, 0.4f, 0);
		if (s->biases) {
			T("attn_q.bias", qd, 1, 0.2f, 0);
			T("attn_k.bias", kvd, 1, 0.2f, 0);
			T("attn_v.bias", kvd, 1, 0.2f, 0);
		}
		if (s->qk_norm) {
			T("attn_q_norm.weight", s->head_dim, 1, 0.2f, 1.0f);
			T("attn_k_norm.weight", s->head_dim, 1, 0.2f, 1.0f);
		}
		T("attn_output.weight", qd, s->n_embd, 0.2f, 0);
		T("ffn_norm.weight", s->n_embd, 1, 0.2f, 1.0f);
		T("ffn_gate.weight", s->n_embd, s->n_ff, 0.3f, 0);
		T("ffn_up.weight", s->n_embd, s->n_ff, 0.3f, 0);
		T("ffn_down.weight", s->n_ff, s->n_embd, 0.3f, 0);
#undef T
	}
	rc |= add(w, "output_norm.weight", s->n_embd, 1, 0.2f, 1.0f);
	if (!s->tied)
		rc |= add(w, "output.weight", s->n_embd, N_VOCAB, 0.5f, 0);
	if (rc == 0)
		rc = gguf_w_write(w, path, err, sizeof err);
	if (rc)
		fprintf(stderr, "build_model %s: %d %s\n", s->arch, rc, err);
	gguf_writer_free(w);
	return rc;
}

/* max |a - b| <= tol * max |b|: the logits agree to tol relative to their scale. */
static bool
logits_close(const float *a, const float *b, int n, double tol, double *worst)
{
	double m = 0, d = 0;

	if (a == NULL || b == NULL)
		return false;
	for (int i = 0; i < n; i++) {
		m = fmax(m, fabs(b[i]));
		d = fmax(d, fabs((double)a[i] - b[i]));
	}
	*worst = m > 0 ? d / m : d;
	return d <= tol * m;
}

static float *
copy_logits(const struct kvc_seq *s, int n)
{
	const float *l = eng_seq_logits(s);
	float *c;

	if (l == NULL)
		return NULL;
	c = malloc((size_t)n * sizeof *c);
	memcpy(c, l, (size_t)n * sizeof *c);
	return c;
}

static struct kvc_seq *
fresh(struct kvc_engine *e, const int32_t *t, int n)
{
	struct kvc_seq *s = NULL;
	char err[256];

	if (eng_seq_new(e, &s, err, sizeof err) != 0) {
		fprintf(stderr, "eng_seq_new: %s\n", err);
		return NULL;
	}
	if (n > 0 && eng_seq_append(s, t, n, NULL, err, sizeof err) != 0)
		fprintf(stderr, "append: %s\n", err);
	return s;
}

static void
test_arch(const char *dir, const struct spec *sp)
{
	struct kvc_engine_params p = kvc_engine_default_params();
	struct kvc_engine *e = NULL, *e16 = NULL;
	struct kvc_seq *a, *b, *c;
	struct eng_stats st;
	char path[512], err[256];
	int32_t A[5] = { 1, 259, 260, 70, 261 }, B[4] = { 262, 263, 40, 264 }, AB[9], AC[8];
	int32_t C[3] = { 100, 270, 5 }, x = 265;
	float *l_ab, *l_ac, *l_next;
	struct kvc_buf blob = { 0 }, blob2 = { 0 }, bad = { 0 };
	double worst;
	int nv, rc;

	memcpy(AB, A, sizeof A);
	memcpy(AB + 5, B, sizeof B);
	memcpy(AC, A, sizeof A);
	memcpy(AC + 5, C, sizeof C);
	snprintf(path, sizeof path, "%s/%s.gguf", dir, sp->arch);
	test_cond(build_model(path, sp, 7) == 0, "%s: build", sp->arch);
	p.kv_type = GGML_TYPE_F32;
	p.n_ctx = 16;
	p.n_threads = 2;
	p.device = "cpu";
	rc = eng_open(&e, path, &p, err, sizeof err);
	test_cond(rc == 0, "%s: eng_open: %s", sp->arch, err);
	if (rc)
		return;
	nv = eng_n_vocab(e);
	test_cond(nv == N_VOCAB, "%s: n_vocab %d", sp->arch, nv);
	test_cond(eng_kv_bytes_per_pos(e) == (size_t)(2 * sp->n_layer * sp->n_head_kv * sp->head_dim * 4),
	    "%s: kv bytes per pos %zu", sp->arch, eng_kv_bytes_per_pos(e));

	/* full prefill of A+B: the reference */
	b = fresh(e, AB, 9);
	l_ab = copy_logits(b, nv);
	test_cond(l_ab != NULL, "%s: logits after A+B", sp->arch);

	/* delta: A then B; the second call computes exactly |B| positions */
	a = fresh(e, NULL, 0);
	rc = eng_seq_append(a, A, 5, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_computed == 5 && st.n_reused == 0, "%s: append A: rc %d computed %d reused %d",
	    sp->arch, rc, st.n_computed, st.n_reused);
	rc = eng_seq_append(a, B, 4, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_computed == 4 && st.n_reused == 5, "%s: append B: rc %d computed %d reused %d",
	    sp->arch, rc, st.n_computed, st.n_reused);
	test_cond(logits_close(eng_seq_logits(a), l_ab, nv, 1e-5, &worst),
	    "%s: A then B vs A+B: relative difference %g", sp->arch, worst);
	test_cond(eng_seq_n_pos(a) == 9 && memcmp(eng_seq_tokens(a), AB, sizeof AB) == 0,
	    "%s: tokens after A, B", sp->arch);

	/* rewind to 3 and re-append the rest */
	test_cond(eng_seq_truncate(a, 3) == 0 && eng_seq_n_pos(a) == 3, "%s: truncate", sp->arch);
	test_cond(eng_seq_logits(a) == NULL, "%s: no logits after truncate", sp->arch);
	test_cond(eng_seq_truncate(a, 4) == KVC_EINVAL, "%s: truncate past the end", sp->arch);
	rc = eng_seq_append(a, AB + 3, 6, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_computed == 6 && st.n_reused == 3, "%s: re-append: computed %d reused %d",
	    sp->arch, st.n_computed, st.n_reused);
	test_cond(logits_close(eng_seq_logits(a), l_ab, nv, 1e-5, &worst),
	    "%s: rewind + re-append: relative difference %g", sp->arch, worst);

	/* sync: same tokens reuse everything; a different tail recomputes only the tail */
	rc = eng_seq_sync(a, AB, 9, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_reused == 9 && st.n_computed == 0, "%s: sync same: reused %d computed %d",
	    sp->arch, st.n_reused, st.n_computed);
	c = fresh(e, AC, 8);
	l_ac = copy_logits(c, nv);
	eng_seq_free(c);
	rc = eng_seq_sync(a, AC, 8, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_reused == 5 && st.n_computed == 3, "%s: sync A+C: reused %d computed %d",
	    sp->arch, st.n_reused, st.n_computed);
	test_cond(logits_close(eng_seq_logits(a), l_ac, nv, 1e-5, &worst),
	    "%s: sync A+C: relative difference %g", sp->arch, worst);
	test_cond(eng_seq_n_pos(a) == 8 && memcmp(eng_seq_tokens(a), AC, sizeof AC) == 0,
	    "%s: tokens after sync", sp->arch);
	/* sync to a prefix: nothing new, but the last position's logits must be recomputed */
	rc = eng_seq_sync(a, A, 5, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_reused == 4 && st.n_computed == 1 && eng_seq_logits(a) != NULL,
	    "%s: sync to prefix: reused %d computed %d", sp->arch, st.n_reused, st.n_computed);
	rc = eng_seq_sync(a, AB, 9, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_reused == 5 && st.n_computed == 4 &&
	    logits_close(eng_seq_logits(a), l_ab, nv, 1e-5, &worst), "%s: sync back to A+B", sp->arch);

	/* context overflow: refused, nothing changed */
	{
		int32_t many[8] = { 3, 4, 5, 6, 7, 8, 9, 10 };

		rc = eng_seq_append(a, many, 8, &st, err, sizeof err);
		test_cond(rc == KVC_ERANGE && eng_seq_n_pos(a) == 9 &&
		    logits_close(eng_seq_logits(a), l_ab, nv, 0, &worst), "%s: overflow: rc %d n_pos %d",
		    sp->arch, rc, eng_seq_n_pos(a));
		many[0] = N_VOCAB;
		rc = eng_seq_append(a, many, 1, &st, err, sizeof err);
		test_cond(rc == KVC_EINVAL && eng_seq_n_pos(a) == 9, "%s: bad id: rc %d", sp->arch, rc);
	}

	/* snapshot: whole and in two pieces, into fresh sequences; the next token agrees exactly */
	rc = eng_seq_kv_save(a, 0, 9, &blob, err, sizeof err);
	test_cond(rc == 0 && blob.n == 40 + eng_kv_bytes_per_pos(e) * 9, "%s: save: rc %d, %zu bytes",
	    sp->arch, rc, blob.n);
	rc = eng_seq_kv_save(a, 0, 4, &blob2, err, sizeof err);
	rc |= eng_seq_kv_save(a, 4, 9, &bad, err, sizeof err);	/* second piece, kept in bad for now */
	test_cond(rc == 0, "%s: save pieces", sp->arch);
	test_cond(eng_seq_append(a, &x, 1, NULL, err, sizeof err) == 0, "%s: next token", sp->arch);
	l_next = copy_logits(a, nv);
	{
		struct kvc_seq *r = fresh(e, NULL, 0), *r2 = fresh(e, NULL, 0);

		rc = eng_seq_kv_load(r, AB, blob.p, blob.n, err, sizeof err);
		test_cond(rc == 0 && eng_seq_n_pos(r) == 9, "%s: load: %s", sp->arch, err);
		rc = eng_seq_append(r, &x, 1, &st, err, sizeof err);
		test_cond(rc == 0 && st.n_computed == 1 && st.n_reused == 9 &&
		    logits_close(eng_seq_logits(r), l_next, nv, 0, &worst),
		    "%s: restored next-token logits: rc %d computed %d diff %g", sp->arch, rc, st.n_computed, worst);
		/* pieces must come in order */
		rc = eng_seq_kv_load(r2, AB, bad.p, bad.n, err, sizeof err);
		test_cond(rc == KVC_ECORRUPT, "%s: out-of-order piece: rc %d", sp->arch, rc);
		rc = eng_seq_kv_load(r2, AB, blob2.p, blob2.n, err, sizeof err);
		rc |= eng_seq_kv_load(r2, AB, bad.p, bad.n, err, sizeof err);
		rc |= eng_seq_append(r2, &x, 1, NULL, err, sizeof err);
		test_cond(rc == 0 && logits_close(eng_seq_logits(r2), l_next, nv, 0, &worst),
		    "%s: restored from two pieces: %s", sp->arch, err);
		eng_seq_free(r);
		eng_seq_free(r2);
	}

	/* corrupted or mismatched blobs are refused */
	{
		struct kvc_seq *r = fresh(e, NULL, 0);
		unsigned char *q;

		bad.n = 0;
		kvc_buf_append(&bad, blob.p, blob.n);
		q = (unsigned char *)bad.p;
		q[0] = 'X';
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ECORRUPT, "%s: bad magic", sp->arch);
		q[0] = 'K';
		q[4] = 3;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ECORRUPT, "%s: bad version", sp->arch);
		/* version 1 (no bind word): well formed, refused as bound to nothing */
		q[4] = 1;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ENOTFOUND &&
		    strstr(err, "version 1") != NULL, "%s: version 1: %s", sp->arch, err);
		q[4] = 2;
		/* bound to its tokens: the same rows over other tokens, or another bind word */
		{
			int32_t other[9];

			memcpy(other, AB, sizeof other);
			other[8] = AB[8] == 70 ? 71 : 70;
			test_cond(eng_seq_kv_load(r, other, bad.p, bad.n, err, sizeof err) == KVC_ENOTFOUND,
			    "%s: other last token: %s", sp->arch, err);
			other[8] = AB[8];
			other[0] = AB[0] == 70 ? 71 : 70;
			test_cond(eng_seq_kv_load(r, other, bad.p, bad.n, err, sizeof err) == KVC_ENOTFOUND,
			    "%s: other first token: %s", sp->arch, err);
			q[33] ^= 0x10;	/* the bind word: another model's blob under this fingerprint */
			test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ENOTFOUND,
			    "%s: other bind word: %s", sp->arch, err);
			q[33] ^= 0x10;
		}
		q[12] ^= 1;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ECORRUPT, "%s: bad n_layer", sp->arch);
		q[12] ^= 1;
		q[16] ^= 4;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ECORRUPT, "%s: bad kv_dim", sp->arch);
		q[16] ^= 4;
		q[8] = GGML_TYPE_F16;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ECORRUPT, "%s: bad type", sp->arch);
		q[8] = GGML_TYPE_F32;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n - 1, err, sizeof err) == KVC_ECORRUPT, "%s: short blob", sp->arch);
		test_cond(eng_seq_kv_load(r, AB, bad.p, 20, err, sizeof err) == KVC_ECORRUPT, "%s: header only", sp->arch);
		q[24] = 10;
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == KVC_ECORRUPT, "%s: bad count", sp->arch);
		q[24] = 9;
		test_cond(eng_seq_n_pos(r) == 0, "%s: nothing restored from bad blobs", sp->arch);
		test_cond(eng_seq_kv_load(r, AB, bad.p, bad.n, err, sizeof err) == 0, "%s: repaired blob loads: %s",
		    sp->arch, err);
		eng_seq_free(r);
	}

	/*
	 * a cache of another type: same fingerprint (it names the weights; the
	 * store keeps the cache type beside it); the blob is converted
	 * (tests/unit/test_kv_q8.c checks the converted rows)
	 */
	p.kv_type = GGML_TYPE_F16;
	rc = eng_open(&e16, path, &p, err, sizeof err);
	test_cond(rc == 0, "%s: open f16: %s", sp->arch, err);
	if (rc == 0) {
		struct kvc_seq *r = fresh(e16, NULL, 0);
		struct kvc_buf b32 = {0};

		test_cond(strcmp(eng_fingerprint(e), eng_fingerprint(e16)) == 0,
		    "%s: fingerprint independent of the cache type", sp->arch);
		rc = eng_seq_kv_save(a, 0, eng_seq_n_pos(a), &b32, err, sizeof err);
		test_cond(rc == 0 && eng_seq_kv_load(r, eng_seq_tokens(a), b32.p, b32.n, err, sizeof err) == 0 &&
		    eng_seq_n_pos(r) == eng_seq_n_pos(a), "%s: f32 blob into f16 engine: %s", sp->arch, err);
		kvc_buf_free(&b32);
		eng_seq_free(r);
		eng_close(e16);
	}

	/* eviction keeps the tokens; the next append recomputes everything */
	eng_seq_evict(a);
	test_cond(!eng_seq_resident(a) && eng_seq_n_pos(a) == 10 && eng_seq_kv_bytes(a) == 0 &&
	    eng_seq_logits(a) == NULL, "%s: evicted", sp->arch);
	rc = eng_seq_truncate(a, 9);
	rc |= eng_seq_append(a, &x, 1, &st, err, sizeof err);
	test_cond(rc == 0 && eng_seq_resident(a) && st.n_reused == 0 && st.n_computed == 10 &&
	    logits_close(eng_seq_logits(a), l_next, nv, 1e-5, &worst),
	    "%s: re-resident: rc %d reused %d computed %d diff %g", sp->arch, rc, st.n_reused, st.n_computed, worst);
	/* an evicted sequence restored from its snapshot continues from there */
	eng_seq_evict(a);
	rc = eng_seq_kv_load(a, AB, blob.p, blob.n, err, sizeof err);
	test_cond(rc == 0 && eng_seq_n_pos(a) == 10, "%s: load into evicted: %s (n_pos %d)", sp->arch, err,
	    eng_seq_n_pos(a));
	rc = eng_seq_sync(a, eng_seq_tokens(a), 10, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_reused == 9 && st.n_computed == 1 &&
	    logits_close(eng_seq_logits(a), l_next, nv, 0, &worst), "%s: evicted + snapshot + sync: reused %d computed %d",
	    sp->arch, st.n_reused, st.n_computed);

	eng_seq_free(a);
	eng_seq_free(b);
	free(l_ab);
	free(l_ac);
	free(l_next);
	kvc_buf_free(&blob);
	kvc_buf_free(&blob2);
	kvc_buf_free(&bad);
	eng_close(e);
}

/* Fingerprints: stable for the same file, different for other weights. */
static void
test_fingerprint(const char *dir)
{
	struct kvc_engine_params p = kvc_engine_default_params();
	struct kvc_engine *e1 = NULL, *e2 = NULL, *e3 = NULL;
	char p1[512], p2[512], err[256];

	snprintf(p1, sizeof p1, "%s/fp1.gguf", dir);
	snprintf(p2, sizeof p2, "%s/fp2.gguf", dir);
	build_model(p1, &specs[0], 1);
	build_model(p2, &specs[0], 2);
	p.device = "cpu";
	p.n_threads = 1;
	test_cond(eng_open(&e1, p1, &p, err, sizeof err) == 0, "open fp1: %s", err);
	test_cond(eng_open(&e2, p1, &p, err, sizeof err) == 0, "open fp1 again: %s", err);
	test_cond(eng_open(&e3, p2, &p, err, sizeof err) == 0, "open fp2: %s", err);
	if (e1 && e2 && e3) {
		test_cond(strlen(eng_fingerprint(e1)) == 16, "fingerprint length");
		test_cond(strcmp(eng_fingerprint(e1), eng_fingerprint(e2)) == 0, "same file, same fingerprint");
		test_cond(strcmp(eng_fingerprint(e1), eng_fingerprint(e3)) != 0, "other weights, other fingerprint");
		test_cond(eng_n_ctx(e1) == 4096, "default context = training context (%d)", eng_n_ctx(e1));
	}
	eng_close(e1);
	eng_close(e2);
	eng_close(e3);
	p.device = "tpu";
	test_cond(eng_open(&e1, p1, &p, err, sizeof err) == KVC_EINVAL && strstr(err, "tpu"), "unknown device: %s", err);
#ifndef HAVE_CUDA
	p.device = "cuda";
	test_cond(eng_open(&e1, p1, &p, err, sizeof err) == KVC_EUNSUPPORTED && strstr(err, "CUDA"),
	    "cuda without CUDA: %s", err);
#endif
	remove(p1);
	remove(p2);
}

/* Prefill longer than one backend chunk, split or not, gives the same logits. */
static void
test_long(const char *dir)
{
	struct kvc_engine_params p = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	struct kvc_seq *a, *b;
	struct eng_stats st;
	char path[512], err[256];
	int32_t t[600];
	double worst;
	int rc;

	snprintf(path, sizeof path, "%s/long.gguf", dir);
	build_model(path, &specs[1], 3);
	p.device = "cpu";
	p.kv_type = GGML_TYPE_F32;
	p.n_ctx = 600;
	p.n_threads = 2;
	if (eng_open(&e, path, &p, err, sizeof err) != 0) {
		test_cond(0, "open long: %s", err);
		return;
	}
	for (int i = 0; i < 600; i++)
		t[i] = 3 + (i * 37) % (N_VOCAB - 3);
	a = fresh(e, NULL, 0);
	rc = eng_seq_append(a, t, 600, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_computed == 600, "600 at once: %s", err);
	b = fresh(e, t, 301);
	rc = eng_seq_append(b, t + 301, 299, &st, err, sizeof err);
	test_cond(rc == 0 && st.n_computed == 299 && st.n_reused == 301, "301 + 299");
	test_cond(logits_close(eng_seq_logits(a), eng_seq_logits(b), N_VOCAB, 1e-5, &worst),
	    "long delta prefill: relative difference %g", worst);
	test_cond(eng_seq_append(b, t, 1, &st, err, sizeof err) == KVC_ERANGE, "full context refuses one more");
	eng_seq_free(a);
	eng_seq_free(b);
	eng_close(e);
	remove(path);
}

/*
 * Every weight type through tests/fixtures/mkmodel's fixtures (when built): the
 * batched prefill path and the one-token path must agree for quantised
 * weights as well.
 */
static void
test_weight_types(const char *dir)
{
	static const char *const archs[] = { "llama", "qwen2", "qwen3" };
	static const char *const types[] = { "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k" };
	const char *bd = getenv("top_builddir");
	char mk[512], cmd[1400], path[600], err[256];

	if (bd == NULL)
		bd = ".";
	snprintf(mk, sizeof mk, "%s/tests/fixtures/mkmodel", bd);
	if (access(mk, X_OK) != 0) {
		printf("note: %s not built: weight-type fixtures not checked\n", mk);
		return;
	}
	for (size_t ia = 0; ia < sizeof archs / sizeof archs[0]; ia++) {
		for (size_t it = 0; it < sizeof types / sizeof types[0]; it++) {
			struct kvc_engine_params p = kvc_engine_default_params();
			struct kvc_engine *e = NULL;
			struct kvc_seq *a, *b;
			struct eng_stats st;
			int32_t t[12];
			double worst;
			int rc;

			snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, archs[ia], types[it]);
			snprintf(cmd, sizeof cmd, "'%s' --preset tiny --arch %s --type %s --quiet -o '%s'",
			    mk, archs[ia], types[it], path);
			if (system(cmd) != 0) {
				test_cond(0, "%s failed", cmd);
				continue;
			}
			p.device = "cpu";
			p.kv_type = GGML_TYPE_F32;
			p.n_ctx = 32;
			p.n_threads = 2;
			rc = eng_open(&e, path, &p, err, sizeof err);
			test_cond(rc == 0, "%s %s: open: %s", archs[ia], types[it], err);
			if (rc)
				continue;
			for (int i = 0; i < 12; i++)
				t[i] = (int32_t)((i * 97 + 11) % eng_n_vocab(e));
			a = fresh(e, t, 12);
			b = fresh(e, t, 7);
			rc = eng_seq_append(b, t + 7, 5, &st, err, sizeof err);
			test_cond(rc == 0 && st.n_computed == 5 && st.n_reused == 7, "%s %s: delta append",
			    archs[ia], types[it]);
			test_cond(logits_close(eng_seq_logits(b), eng_seq_logits(a), eng_n_vocab(e), 1e-5, &worst),
			    "%s %s: 7 then 5 vs 12 at once: relative difference %g", archs[ia], types[it], worst);
			eng_seq_free(a);
			eng_seq_free(b);
			eng_close(e);
			remove(path);
		}
	}
}

int
main(void)
{
	char dir[] = "/tmp/kvc-test-engine-XXXXXX";
	char path[600];

	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		test_arch(dir, &specs[i]);
		snprintf(path, sizeof path, "%s/%s.gguf", dir, specs[i].arch);
		remove(path);
	}
	test_fingerprint(dir);
	test_long(dir);
	test_weight_types(dir);
	rmdir(dir);
	return test_done();
}
