/*
 * test_moe: mixture-of-experts models (qwen3moe, qwen2moe with its shared
 * expert, llama with experts, gpt-oss with its attention sinks, biases,
 * clamped SwiGLU, alternating windowed layers and YaRN, glm4moe with its
 * dense first layer, sigmoid routing steered by a correction bias, scaled
 * weights, ungated shared expert, partial NeoX RoPE, optional Q/K norms
 * and a multi-token-prediction block that must not run) on tiny
 * random-weight files built here:
 * model_load's hyper-parameters and defaults, the CPU backend's logits
 * against the float64 reference (tests/fixtures/ref_forward.c, which routes
 * and sums the experts on its own) for every weight type with F32 and F16
 * caches, logits bitwise independent of the batch (a prefill's tokens are
 * grouped by expert, a decode reads only its experts), the bytes counted as
 * read per token, and the refusals.
 *
 * Bounds: test_forward.c's (its top derives them). A MoE layer runs the same
 * kind of products (Q, K, V, O, the router, and per selected expert gate, up,
 * down, whose outputs are summed with weights that add up to 1 or less, so
 * their independent errors do not grow with n_expert_used), qwen2moe three
 * more for the shared expert: sqrt(19 / 15) = 1.13 times the dense count,
 * inside the bound's slack (measured below it, printed).
 *
 * Routing is a discontinuous function of the router's input: an error
 * that swaps the n_expert_used-th expert and the next changes the result by
 * O(1), so near-ties must not occur where the int8 activations' rounding
 * (about 1% of a product) could decide them. With purely random routers
 * they do (2-layer qwen2moe fixtures showed 0.058 (Q8_0) and 0.107 (Q4_0)
 * against about 0.01 elsewhere, with reference gaps down to 0.03 between
 * the chosen and the next logit). So the fixtures route by structure: token
 * t's embedding carries ROUTE_B / 2^r at coordinate (t + r) % n_expert for
 * the ranks r < n_expert_used (and nothing else at coordinates below
 * n_expert), no layer writes those coordinates (the rows of attn_output
 * and of the down products there are zeros), router row e is ROUTE_A at
 * coordinate e plus a small random row. A token of group g then ranks
 * experts g, g + 1, ... with the last chosen well above the rest
 * (ROUTE_A * ROUTE_B / 2^(k-1) over the norm's scale), while the norm's
 * scale and the random rows still vary the logits, and the weights, per
 * token and layer. Every group
 * selects a different set, a prefill's tokens share and split experts, and
 * a wrong choice still costs O(1). The reference reports the smallest gap
 * (ref_config.route_gap; measured 0.17-0.65) and each comparison first
 * asserts it above ROUTE_GAP: router logits are ~2 here and the
 * activations' bound lets a product drift by 1.3% (test_forward.c), so a
 * logit moves by ~0.03 at most, a gap of 0.1 cannot flip.
 *
 * glm4moe's correction bias (exp_probs_b) is small and random except for
 * the last expert's, +1: that expert is chosen by every token, for the
 * bias alone (its unbiased sigmoid is about 0.5, below the token's group's
 * about 0.87), and weighted by its unbiased sigmoid; a backend that chose
 * without the bias, or weighted with it, is O(1) off. Its gap (the
 * reference's, in the sigmoids' terms) stays above ROUTE_GAP the same way.
 */
#define ROUTE_GAP 0.1
#include "gguf/gguf.h"
#include "backend/backend.h"
#include "kern/kern.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "fixtures/ref_forward.h"
#include "test.h"

#include <signal.h>
#include <stdint.h>
#include <time.h>

#define TOL_F32 1e-4
#define TOL_F16 2e-3
#define TOL_ACT 0.05
#define N_TOK 12
#define PREFILL 8

struct mspec {
	const char *arch;
	enum gguf_dtype wtype;
	int n_expert, n_used;
	int n_ff;		/* feed_forward_length */
	int n_ff_exp;		/* expert_feed_forward_length written when > 0 */
	int n_ff_exp_eff;	/* what the experts are: the key, or llama.cpp's default */
	int n_ff_shexp;		/* qwen2moe's shared expert (the default: n_ff) */
	bool norm;		/* renormalised weights (the architecture's, for the reference) */
	double scale;		/* glm4moe: expert_weights_scale */
	bool qk_norm;		/* glm4moe: attn_q_norm/attn_k_norm (GLM-4.6 has them, 4.5-Air not) */
};

enum { E = 256, N_LAYER = 2, N_HEAD = 4, N_HEAD_KV = 2, HD = 64, N_VOCAB = 300, GPT_OSS_SWA = 5 };

/* glm4moe: layer 0 dense, then experts; one more block (multi-token prediction) in the file */
static int
n_dense(const struct mspec *s)
{
	return strcmp(s->arch, "glm4moe") == 0 ? 1 : 0;
}

static uint64_t rng_state;

static double
rnd(void)	/* uniform in [-1, 1) */
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) / (double)(1ULL << 52) - 1.0;
}

/*
 * A tensor of n_out * n_mat rows of n_in, stored with ne = {n_in, n_out,
 * n_mat} when n_mat > 1; rows r with r % n_out < zero_below are zeros.
 */
static int
add_t(struct gguf_writer *w, const char *name, enum gguf_dtype type, int64_t n_in, int64_t n_out,
    int64_t n_mat, double scale, double offset, int zero_below)
{
	/* a vector (or a row of biases) that adds to the routing coordinates: zero them */
	bool zero_cols = zero_below > 0 && n_in == E && strstr(name, "bias") != NULL;

	size_t rb = gguf_dtype_row_size(type, n_in);
	int64_t rows = n_out * n_mat, ne[3] = { n_in, n_out, n_mat };
	float *row = malloc((size_t)n_in * sizeof *row);
	uint8_t *data = malloc(rb * (size_t)rows);
	int rc = 0;

	for (int64_t r = 0; r < rows && rc == 0; r++) {
		for (int64_t i = 0; i < n_in; i++)
			row[i] = (zero_cols ? i < zero_below : r % n_out < zero_below) ? 0 :
			    (float)(offset + scale * rnd());
		rc = q_quantize_row(type, row, data + (size_t)r * rb, n_in);
	}
	if (rc == 0)
		rc = gguf_w_tensor(w, name, type, n_mat > 1 ? 3 : n_out == 1 ? 1 : 2, ne, data,
		    rb * (size_t)rows);
	free(row);
	free(data);
	return rc;
}

#define ROUTE_B 4.0
#define ROUTE_A 0.3

/* token_embd with each token's group coordinates, or a router (see the top). */
static int
add_routed(struct gguf_writer *w, const char *name, enum gguf_dtype type, int64_t n_in, int64_t rows,
    int n_expert, int n_used, bool router)
{
	size_t rb = gguf_dtype_row_size(type, n_in);
	int64_t ne[2] = { n_in, rows };
	float *row = malloc((size_t)n_in * sizeof *row);
	uint8_t *data = malloc(rb * (size_t)rows);
	int rc = 0;

	for (int64_t r = 0; r < rows && rc == 0; r++) {
		for (int64_t i = 0; i < n_in; i++)
			row[i] = (float)(router ? 0.1 / sqrt((double)n_in) * rnd() : i < n_expert ? 0 : rnd());
		if (router)
			row[r] += (float)ROUTE_A;
		else
			for (int k = 0; k < n_used; k++)
				row[(r + k) % n_expert] = (float)(ROUTE_B / (1 << k));
		rc = q_quantize_row(type, row, data + (size_t)r * rb, n_in);
	}
	if (rc == 0)
		rc = gguf_w_tensor(w, name, type, 2, ne, data, rb * (size_t)rows);
	free(row);
	free(data);
	return rc;
}

static struct gguf_file *
build(const struct mspec *s, void **mem, const char *skip)
{
	struct gguf_writer *w = gguf_writer_new();
	struct gguf_file *f = NULL;
	char key[128], n[96], err[256];
	int qd = N_HEAD * HD, kvd = N_HEAD_KV * HD, F = s->n_ff_exp_eff;
	double ms = 1.0 / sqrt(E), fs = 1.0 / sqrt(F);
	bool qwen = strncmp(s->arch, "qwen", 4) == 0, q2 = strcmp(s->arch, "qwen2moe") == 0;
	bool oss = strcmp(s->arch, "gpt-oss") == 0, glm = strcmp(s->arch, "glm4moe") == 0;
	size_t len;

#define K(name) (snprintf(key, sizeof key, "%s.%s", s->arch, name), key)
	gguf_w_str(w, "general.architecture", s->arch);
	gguf_w_u32(w, K("context_length"), 256);
	gguf_w_u32(w, K("embedding_length"), E);
	gguf_w_u32(w, K("block_count"), N_LAYER + glm);
	gguf_w_u32(w, K("feed_forward_length"), (uint32_t)s->n_ff);
	gguf_w_u32(w, K("attention.head_count"), N_HEAD);
	gguf_w_u32(w, K("attention.head_count_kv"), N_HEAD_KV);
	gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f);
	gguf_w_f32(w, K("rope.freq_base"), 1000000.0f);
	gguf_w_u32(w, K("expert_count"), (uint32_t)s->n_expert);
	gguf_w_u32(w, K("expert_used_count"), (uint32_t)s->n_used);
	if (s->n_ff_exp > 0)
		gguf_w_u32(w, K("expert_feed_forward_length"), (uint32_t)s->n_ff_exp);
	if (oss) {
		/* a window of 5 in the even layers; YaRN as gpt-oss files have it (smaller) */
		gguf_w_u32(w, K("attention.sliding_window"), GPT_OSS_SWA);
		gguf_w_str(w, K("rope.scaling.type"), "yarn");
		gguf_w_f32(w, K("rope.scaling.factor"), 4.0f);
		gguf_w_u32(w, K("rope.scaling.original_context_length"), 4096);
	}
	if (glm) {
		/* GLM-4.5's keys as llama.cpp's converter writes them; RoPE over half of each head */
		gguf_w_u32(w, K("rope.dimension_count"), HD / 2);
		gguf_w_u32(w, K("expert_shared_count"), 1);
		gguf_w_u32(w, K("leading_dense_block_count"), 1);
		gguf_w_u32(w, K("expert_gating_func"), 2);
		gguf_w_f32(w, K("expert_weights_scale"), (float)s->scale);
		gguf_w_bool(w, K("expert_weights_norm"), true);
		gguf_w_u32(w, K("nextn_predict_layers"), 1);
	}
#undef K
	add_routed(w, "token_embd.weight", s->wtype, E, N_VOCAB, s->n_expert, s->n_used, false);
	add_t(w, "output_norm.weight", GGML_TYPE_F32, E, 1, 1, 0.2, 1.0, 0);
	add_t(w, "output.weight", s->wtype, E, N_VOCAB, 1, ms, 0, 0);
	for (int l = 0; l < N_LAYER + glm; l++) {
#define T(suffix, type, nin, nout, nmat, sc, off) \
		(snprintf(n, sizeof n, "blk.%d.%s", l, suffix), \
		strcmp(suffix, skip ? skip : "") == 0 ? 0 : add_t(w, n, type, nin, nout, nmat, sc, off, \
		strstr(suffix, "output") || strstr(suffix, "down") ? s->n_expert : 0))
		T("attn_norm.weight", GGML_TYPE_F32, E, 1, 1, 0.2, 1.0);
		T("attn_q.weight", s->wtype, E, qd, 1, 2 * ms, 0);
		T("attn_k.weight", s->wtype, E, kvd, 1, 2 * ms, 0);
		T("attn_v.weight", s->wtype, E, kvd, 1, ms, 0);
		if (l == N_LAYER) {
			/* glm4moe's multi-token-prediction block: kvchat never reads it */
			T("nextn.eh_proj.weight", s->wtype, 2 * E, E, 1, ms, 0);
			T("nextn.enorm.weight", GGML_TYPE_F32, E, 1, 1, 0.2, 1.0);
			continue;
		}
		if (q2 || oss || glm) {
			T("attn_q.bias", GGML_TYPE_F32, qd, 1, 1, 0.3, 0);
			T("attn_k.bias", GGML_TYPE_F32, kvd, 1, 1, 0.3, 0);
			T("attn_v.bias", GGML_TYPE_F32, kvd, 1, 1, 0.3, 0);
		}
		if ((qwen && !q2) || s->qk_norm) {
			T("attn_q_norm.weight", GGML_TYPE_F32, HD, 1, 1, 0.3, 1.0);
			T("attn_k_norm.weight", GGML_TYPE_F32, HD, 1, 1, 0.3, 1.0);
		}
		T("attn_output.weight", s->wtype, qd, E, 1, ms, 0);
		T(oss || glm ? "post_attention_norm.weight" : "ffn_norm.weight", GGML_TYPE_F32, E, 1, 1, 0.2, 1.0);
		if (l < n_dense(s)) {
			T("ffn_gate.weight", s->wtype, E, s->n_ff, 1, 2 * ms, 0);
			T("ffn_up.weight", s->wtype, E, s->n_ff, 1, ms, 0);
			T("ffn_down.weight", s->wtype, s->n_ff, E, 1, 1.0 / sqrt(s->n_ff), 0);
			continue;
		}
		if (oss) {
			T("attn_output.bias", GGML_TYPE_F32, E, 1, 1, 0.3, 0);
			/* sinks around the scores' size, so they take a real share */
			T("attn_sinks.weight", GGML_TYPE_F32, N_HEAD, 1, 1, 1.0, 0.5);
			T("ffn_gate_inp.bias", GGML_TYPE_F32, s->n_expert, 1, 1, 0.1, 0);
			T("ffn_gate_exps.bias", GGML_TYPE_F32, F, s->n_expert, 1, 0.3, 0);
			T("ffn_up_exps.bias", GGML_TYPE_F32, F, s->n_expert, 1, 0.3, 0);
			T("ffn_down_exps.bias", GGML_TYPE_F32, E, s->n_expert, 1, 0.3, 0);
		}
		/* the router stays F32, as llama.cpp's quantizer leaves it */
		snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", l);
		if (strcmp(skip ? skip : "", "ffn_gate_inp.weight") != 0)
			add_routed(w, n, GGML_TYPE_F32, E, s->n_expert, s->n_expert, s->n_used, true);
		T("ffn_gate_exps.weight", s->wtype, E, F, s->n_expert, 2 * ms, 0);
		T("ffn_up_exps.weight", s->wtype, E, F, s->n_expert, ms, 0);
		T("ffn_down_exps.weight", s->wtype, F, E, s->n_expert, fs, 0);
		if (glm && strcmp(skip ? skip : "", "exp_probs_b.bias") != 0) {
			/* small and random, but +1 on the last expert: chosen for its bias alone */
			float b[64];
			int64_t ne1[4] = { s->n_expert, 1, 1, 1 };

			for (int e = 0; e < s->n_expert; e++)
				b[e] = (float)(0.02 * rnd()) + (e == s->n_expert - 1 ? 1.0f : 0.0f);
			snprintf(n, sizeof n, "blk.%d.exp_probs_b.bias", l);
			gguf_w_tensor(w, n, GGML_TYPE_F32, 1, ne1, b, (size_t)s->n_expert * sizeof *b);
		}
		if (q2 || glm) {
			int S = s->n_ff_shexp;

			if (q2)
				T("ffn_gate_inp_shexp.weight", GGML_TYPE_F32, E, 1, 1, ms, 0);
			T("ffn_gate_shexp.weight", s->wtype, E, S, 1, 2 * ms, 0);
			T("ffn_up_shexp.weight", s->wtype, E, S, 1, ms, 0);
			T("ffn_down_shexp.weight", s->wtype, S, E, 1, 1.0 / sqrt(S), 0);
		}
#undef T
	}
	*mem = NULL;
	if (gguf_w_to_mem(w, mem, &len) != 0 || gguf_open_mem(&f, *mem, len, s->arch, err, sizeof err) != 0)
		f = NULL;
	gguf_writer_free(w);
	return f;
}

static struct ref_config
ref_of(const struct mspec *s)
{
	struct ref_config rc = { 0 };

	rc.arch = s->arch;
	rc.n_vocab = N_VOCAB;
	rc.n_embd = E;
	rc.n_layer = N_LAYER;
	rc.n_head = N_HEAD;
	rc.n_head_kv = N_HEAD_KV;
	rc.head_dim = HD;
	rc.n_ff = s->n_ff;
	rc.rope_dim = HD;
	rc.rms_eps = 1e-6;
	rc.rope_theta = 1000000.0;
	rc.rope_freq_scale = 1.0;
	rc.n_expert = s->n_expert;
	rc.n_expert_used = s->n_used;
	rc.n_ff_exp = s->n_ff_exp_eff;
	rc.n_ff_shexp = strcmp(s->arch, "qwen2moe") == 0 || n_dense(s) ? s->n_ff_shexp : 0;
	rc.expert_norm = s->norm;
	if (n_dense(s)) {
		rc.rope_dim = HD / 2;
		rc.n_dense = n_dense(s);
		rc.expert_sigmoid = true;
		rc.expert_scale = s->scale;
	}
	if (strcmp(s->arch, "gpt-oss") == 0) {
		rc.gpt_oss = true;
		rc.n_swa = GPT_OSS_SWA;
		rc.swa_period = 2;
		rc.rope_freq_scale = 0.25;
		rc.yarn_orig_ctx = 4096;
		rc.yarn_attn_factor = 1;
	}
	return rc;
}

static double
rel_err(const float *a, const double *r, int n)
{
	double d = 0, mx = 0;

	for (int i = 0; i < n; i++) {
		d = fmax(d, fabs(a[i] - r[i]));
		mx = fmax(mx, fabs(r[i]));
	}
	return d / mx;
}

static double
tol_weights(enum gguf_dtype t)
{
	bool offset = t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q4_1 ||
	    t == GGML_TYPE_Q5_1;

	return q_act_supported(t) ? TOL_F32 + TOL_ACT * (offset ? 2 : 1) : TOL_F32;
}

/* Prefill PREFILL tokens (all logits), then decode one at a time; the worst error. */
static double
vs_ref(void *ctx, const struct kvc_model *m, enum gguf_dtype kv_type, const int32_t *tok,
    const double *ref)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	float *lg = malloc((size_t)N_TOK * N_VOCAB * sizeof *lg);
	double worst = 0;
	void *kv = NULL;
	char err[256];
	int rc, t;

	(void)m;
	rc = be->kv_create(ctx, 64, kv_type, &kv, err, sizeof err);
	if (rc == 0)
		rc = be->forward(ctx, kv, tok, PREFILL, 0, lg, true, err, sizeof err);
	for (t = 0; t < PREFILL && rc == 0; t++)
		worst = fmax(worst, rel_err(lg + (size_t)t * N_VOCAB, ref + (size_t)t * N_VOCAB, N_VOCAB));
	for (t = PREFILL; t < N_TOK && rc == 0; t++) {
		rc = be->forward(ctx, kv, tok + t, 1, t, lg, false, err, sizeof err);
		worst = fmax(worst, rel_err(lg, ref + (size_t)t * N_VOCAB, N_VOCAB));
	}
	test_cond(rc == 0, "forward: %s", err);
	if (kv)
		be->kv_destroy(ctx, kv);
	free(lg);
	return rc ? 1e9 : worst;
}

/*
 * The same logits, bit for bit, from a 48-token prefill, prefills of 5
 * tokens, one token at a time, and from 1 and 3 threads: the grouping of
 * tokens by expert and the threads' items change no result.
 */
static void
batch_independence(const struct kvc_model *m, const char *what)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	enum { N = 48 };
	int32_t tok[N];
	float *lg[2][3];
	int bad = 0, th, i, p, rc = 0;
	char err[256];

	for (i = 0; i < N; i++)
		tok[i] = (int32_t)((i * 37 + 11) % N_VOCAB);
	for (th = 0; th < 2; th++) {
		struct kvc_backend_params bp = { .n_threads = th ? 3 : 1 };
		void *ctx = NULL, *kv = NULL;

		for (i = 0; i < 3; i++)
			lg[th][i] = malloc((size_t)N * N_VOCAB * sizeof(float));
		rc = be->init(&ctx, m, &bp, err, sizeof err);
		if (rc == 0)
			rc = be->kv_create(ctx, N, GGML_TYPE_F32, &kv, err, sizeof err);
		if (rc == 0)
			rc = be->forward(ctx, kv, tok, N, 0, lg[th][0], true, err, sizeof err);
		for (p = 0; rc == 0 && p < N; p += 5)
			rc = be->forward(ctx, kv, tok + p, N - p < 5 ? N - p : 5, p,
			    lg[th][1] + (size_t)p * N_VOCAB, true, err, sizeof err);
		for (p = 0; rc == 0 && p < N; p++)
			rc = be->forward(ctx, kv, tok + p, 1, p, lg[th][2] + (size_t)p * N_VOCAB, true,
			    err, sizeof err);
		test_cond(rc == 0, "%s batch independence: %s", what, err);
		if (ctx) {
			be->kv_destroy(ctx, kv);
			be->free(ctx);
		}
	}
	for (th = 0; th < 2; th++)
		for (i = 0; i < 3; i++)
			bad += memcmp(lg[th][i], lg[0][2], (size_t)N * N_VOCAB * sizeof(float)) != 0;
	printf("%s batch independence: %d of 6 runs differ from one token at a time\n", what, bad);
	test_cond(bad == 0, "%s: logits depend on the batch or the threads (%d runs differ)", what, bad);
	for (th = 0; th < 2; th++)
		for (i = 0; i < 3; i++)
			free(lg[th][i]);
}

/* The experts' line of the backend's description: packed so far, of; -1 when it has none. */
static void
experts_packed(void *ctx, int *got, int *of)
{
	struct kvc_buf d = { 0 };
	const char *at;

	*got = *of = -1;
	kvc_backend_cpu.describe(ctx, &d);
	at = d.p != NULL ? strstr(d.p, "experts: ") : NULL;
	if (at == NULL || sscanf(at, "experts: %d of %d", got, of) != 2)
		*got = *of = -1;
	kvc_buf_free(&d);
}

/* Until every expert is packed (a minute at most, against a thread that never ends). */
static void
wait_packed(void *ctx, int *got, int *of)
{
	for (int w = 0; w < 60000; w++) {
		struct timespec ts = { 0, 1000000 };

		experts_packed(ctx, got, of);
		if (*got == *of)
			return;
		nanosleep(&ts, NULL);
	}
}

/*
 * Ctrl-C in a prefill that packs experts (kvc_backend_params.interrupt): a
 * prompt's forward finds the flag set and stops with KVC_EINTR before it
 * packs any expert or runs any product on an unpacked one; a one-token
 * forward (a decode step) runs on; and with the flag clear again the prompt
 * gives the logits of a backend never interrupted, bit for bit.
 */
static void
stop_in_packing(const struct kvc_model *m, const char *what)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	enum { N = 24 };
	static volatile sig_atomic_t flag;
	int32_t tok[N];
	float lg[2][N_VOCAB];
	int rc[4] = { -1, -1, -1, -1 }, got[2] = { -1, -1 }, of = -1;
	char err[256] = "";

	for (int i = 0; i < N; i++)
		tok[i] = (int32_t)((i * 31 + 5) % N_VOCAB);
	for (int run = 0; run < 2; run++) {
		struct kvc_backend_params bp = { .n_threads = 2, .interrupt = run ? &flag : NULL };
		void *ctx = NULL, *kv = NULL;

		flag = 0;
		if (be->init(&ctx, m, &bp, err, sizeof err) != 0 ||
		    be->kv_create(ctx, N, GGML_TYPE_F32, &kv, err, sizeof err) != 0) {
			test_cond(false, "%s stop in packing: %s", what, err);
			if (ctx)
				be->free(ctx);
			return;
		}
		if (run == 0) {
			rc[0] = be->forward(ctx, kv, tok, N, 0, lg[0], false, err, sizeof err);
		} else {
			flag = 1;
			rc[1] = be->forward(ctx, kv, tok, N, 0, lg[1], false, err, sizeof err);
			experts_packed(ctx, &got[0], &of);
			rc[2] = be->forward(ctx, kv, tok, 1, 0, lg[1], false, err, sizeof err);
			experts_packed(ctx, &got[1], &of);
			flag = 0;
			rc[3] = be->forward(ctx, kv, tok, N, 0, lg[1], false, err, sizeof err);
		}
		be->kv_destroy(ctx, kv);
		be->free(ctx);
	}
	printf("%s stop in packing: rc %d %d %d %d, packed %d then %d of %d\n", what, rc[0], rc[1], rc[2],
	    rc[3], got[0], got[1], of);
	test_cond(rc[0] == 0 && rc[1] == KVC_EINTR && got[0] == 0,
	    "%s: a prompt with the flag set: rc %d, %d experts packed", what, rc[1], got[0]);
	test_cond(rc[2] == 0 && got[1] > 0, "%s: one token with the flag set: rc %d, %d packed", what, rc[2],
	    got[1]);
	test_cond(rc[3] == 0 && memcmp(lg[0], lg[1], sizeof lg[0]) == 0,
	    "%s: the prompt again after the stop: rc %d, logits %s", what, rc[3],
	    rc[3] == 0 ? "differ" : "none");
}

/*
 * Packing ahead (kvc_backend_params.pack_ahead), and every expert packed at
 * init (pack_experts_now, which init finishes before it returns): the same logits, bit for
 * bit, as with each expert packed when first chosen, from a prefill that
 * runs at once beside the thread packing ahead (the two take experts from
 * each other) and from one that runs after it has packed them all; and it
 * does pack them all. The wait is for the thread's end, however long it
 * takes, bounded only against a thread that never ends.
 */
static void
pack_ahead_same(const struct kvc_model *m, const char *what)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	enum { N = 24 };
	int32_t tok[N];
	float *lg[4];
	int bad = 0, rc = 0, got = -1, of = -1;
	char err[256];

	for (int i = 0; i < N; i++)
		tok[i] = (int32_t)((i * 53 + 7) % N_VOCAB);
	for (int run = 0; run < 4; run++) {
		/* run 3: every expert packed at init (pack_experts_now, kvchat bench) */
		struct kvc_backend_params bp = { .n_threads = 2, .pack_ahead = run == 1 || run == 2,
		    .pack_experts_now = run == 3 };
		void *ctx = NULL, *kv = NULL;

		lg[run] = malloc((size_t)N * N_VOCAB * sizeof(float));
		rc = be->init(&ctx, m, &bp, err, sizeof err);
		/* run 2: the prefill only once every expert is packed */
		if (rc == 0 && run == 2)
			wait_packed(ctx, &got, &of);
		if (run == 2)
			test_cond(got > 0 && got == of, "%s: packed ahead before the prefill: %d of %d", what,
			    got, of);
		if (rc == 0 && run == 3)
			experts_packed(ctx, &got, &of);	/* no thread: all of them, or not, as init returned */
		if (run == 3)
			test_cond(got > 0 && got == of, "%s: packed at init: %d of %d", what, got, of);
		if (rc == 0)
			rc = be->kv_create(ctx, N, GGML_TYPE_F32, &kv, err, sizeof err);
		if (rc == 0)
			rc = be->forward(ctx, kv, tok, N, 0, lg[run], true, err, sizeof err);
		if (rc == 0 && run == 1)
			wait_packed(ctx, &got, &of);
		if (run == 1)
			test_cond(got > 0 && got == of, "%s: packed ahead after the prefill: %d of %d", what, got,
			    of);
		test_cond(rc == 0, "%s packed ahead: %s", what, err);
		if (ctx) {
			be->kv_destroy(ctx, kv);
			be->free(ctx);
		}
	}
	for (int run = 1; run < 4; run++)
		bad += memcmp(lg[run], lg[0], (size_t)N * N_VOCAB * sizeof(float)) != 0;
	printf("%s packed ahead or at init: %d of 3 runs differ from packing when chosen (%d of %d experts)\n",
	    what, bad, got, of);
	test_cond(bad == 0, "%s: packed ahead or at init, %d of 3 runs differ from packing when chosen", what,
	    bad);
	for (int run = 0; run < 4; run++)
		free(lg[run]);
}

static void
check_model(const struct kvc_model *m, const struct mspec *s)
{
	const struct kvc_hparams *hp = &m->hp;
	const struct kvc_layer_weights *w = &m->layers[1];
	uint64_t stack = 0, all_exp, other = 0;
	int n_moe = N_LAYER - n_dense(s);
	bool glm = n_dense(s) > 0;

	test_cond(strcmp(model_arch_name(hp->arch), s->arch) == 0, "arch %s", model_arch_name(hp->arch));
	test_cond(hp->n_expert == s->n_expert && hp->n_expert_used == s->n_used &&
	    hp->n_ff_exp == s->n_ff_exp_eff && hp->expert_norm == s->norm &&
	    hp->n_ff_shexp == (strcmp(s->arch, "qwen2moe") == 0 || glm ? s->n_ff_shexp : 0),
	    "%s: experts %d/%d of %d, norm %d, shared %d", s->arch, hp->n_expert_used, hp->n_expert,
	    hp->n_ff_exp, hp->expert_norm, hp->n_ff_shexp);
	/* the description names the experts' width, not feed_forward_length (the dense layers') */
	char ffn[128], want[128];
	model_ffn_desc(hp, ffn, sizeof ffn);
	snprintf(want, sizeof want, "ffn %d x %d experts, %d per token", s->n_ff_exp_eff, s->n_expert, s->n_used);
	test_cond(strncmp(ffn, want, strlen(want)) == 0 && (hp->n_ff_shexp > 0) == (strstr(ffn, "shared") != NULL) &&
	    glm == (strstr(ffn, "dense") != NULL), "%s: described as \"%s\"", s->arch, ffn);
	/* glm4moe: the trailing block is not a layer, layer 0 is dense, routing by sigmoids, scaled */
	test_cond(hp->n_layer == N_LAYER && hp->n_layer_dense == n_dense(s) && hp->expert_sigmoid == glm &&
	    hp->expert_scale == (float)(glm ? s->scale : 1) && (m->layers[0].gate_inp.data == NULL) == glm &&
	    (m->layers[0].w_gate.data != NULL) == glm && (w->exp_probs_b.data != NULL) == glm &&
	    (w->gate_inp_shexp.data != NULL) == (strcmp(s->arch, "qwen2moe") == 0),
	    "%s: %d layers, %d dense, sigmoid %d, scale %g", s->arch, hp->n_layer, hp->n_layer_dense,
	    hp->expert_sigmoid, hp->expert_scale);
	test_cond(w->gate_exps.n_out == (int64_t)s->n_expert * s->n_ff_exp_eff &&
	    w->down_exps.n_out == (int64_t)s->n_expert * E && w->w_gate.data == NULL,
	    "%s: expert stacks", s->arch);
	/* expert 3 is a view 3 matrices into the stack */
	struct kvc_weight e3 = model_expert(m, &w->down_exps, 3);
	test_cond(e3.n_out == E && e3.n_in == s->n_ff_exp_eff &&
	    (const char *)e3.data == (const char *)w->down_exps.data + 3 * E * w->down_exps.row_bytes,
	    "%s: model_expert", s->arch);
	/* per token: every other tensor, and n_used of n_expert experts */
	stack = (w->gate_exps.row_bytes + w->up_exps.row_bytes) * (uint64_t)s->n_ff_exp_eff +
	    w->down_exps.row_bytes * (uint64_t)E;
	all_exp = stack * (uint64_t)s->n_expert * n_moe;
	test_cond(m->n_params - m->n_params_active ==
	    (uint64_t)n_moe * (s->n_expert - s->n_used) * 3 * E * s->n_ff_exp_eff,
	    "%s: active parameters %llu of %llu", s->arch, (unsigned long long)m->n_params_active,
	    (unsigned long long)m->n_params);
	/* every tensor but the experts', the embedding (a row per token) and an unrun block's, whole */
	for (int64_t i = 0; i < gguf_n_tensors(m->file); i++)
		if (strstr(gguf_tensor(m->file, i)->name, "_exps.weight") == NULL &&
		    strcmp(gguf_tensor(m->file, i)->name, "token_embd.weight") != 0 &&
		    strncmp(gguf_tensor(m->file, i)->name, "blk.2.", 6) != 0)
			other += gguf_tensor(m->file, i)->nbytes;
	test_cond(m->weight_bytes == other + stack * (uint64_t)s->n_used * n_moe,
	    "%s: bytes per token %llu, expected %llu (all experts %llu)", s->arch,
	    (unsigned long long)m->weight_bytes,
	    (unsigned long long)(other + stack * (uint64_t)s->n_used * n_moe), (unsigned long long)all_exp);
}

static void
refusals(void)
{
	static const struct { const char *arch, *skip, *needle; int rc; } cases[] = {
		{ "qwen3moe", "ffn_up_exps.weight", "ffn_up_exps", KVC_EFORMAT },
		{ "qwen2moe", "ffn_gate_inp_shexp.weight", "ffn_gate_inp_shexp", KVC_EFORMAT },
		{ "llama", "ffn_gate_inp.weight", "ffn_gate_inp", KVC_EFORMAT },
		{ "gpt-oss", "attn_sinks.weight", "attn_sinks", KVC_EFORMAT },
		{ "gpt-oss", "ffn_down_exps.bias", "ffn_down_exps.bias", KVC_EFORMAT },
		{ "glm4moe", "exp_probs_b.bias", "exp_probs_b", KVC_EFORMAT },
		{ "glm4moe", "ffn_gate.weight", "blk.0.ffn_gate", KVC_EFORMAT },
		{ "glm4moe", "attn_k_norm.weight", "attn_q_norm and attn_k_norm", KVC_EFORMAT },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct mspec s = { cases[i].arch, GGML_TYPE_F32, 4, 2, 512, 256, 256, 256, true, 1,
		    strcmp(cases[i].arch, "glm4moe") == 0 };
		struct kvc_model m;
		char err[256] = "";
		void *mem;
		struct gguf_file *f = build(&s, &mem, cases[i].skip);
		int rc = f ? model_load(&m, f, err, sizeof err) : -1;

		test_cond(rc == cases[i].rc && strstr(err, cases[i].needle) != NULL,
		    "%s without %s: rc %d '%s'", cases[i].arch, cases[i].skip, rc, err);
		if (rc == 0)
			model_free(&m);
		gguf_close(f);
		free(mem);
	}
	/* more experts used than there are */
	{
		struct mspec s = { "qwen3moe", GGML_TYPE_F32, 4, 5, 512, 256, 256, 0, true, 1, false };
		struct kvc_model m;
		char err[256] = "";
		void *mem;
		struct gguf_file *f = build(&s, &mem, NULL);
		int rc = f ? model_load(&m, f, err, sizeof err) : -1;

		test_cond(rc == KVC_EFORMAT && strstr(err, "expert_used_count 5") != NULL,
		    "5 of 4 experts: rc %d '%s'", rc, err);
		if (rc == 0)
			model_free(&m);
		gguf_close(f);
		free(mem);
	}
}

/*
 * One fixture of spec s in weight type t: against the reference, and
 * batch independence if asked; packed > 0: the backend must say it packed
 * that many matrices (the expert stacks among them); limit: the backend's
 * pack_limit (0: its default), under which the stacks stay mapped, as the
 * backend must then say.
 */
static void
run_case(struct mspec s, enum gguf_dtype t, const int32_t *tok, bool check, bool batch, int packed,
    uint64_t limit)
{
	struct ref_config rc = ref_of(&s);
	struct kvc_backend_params bp = { .n_threads = 2, .pack_limit = limit };
	struct kvc_model m;
	char err[256], what[64];
	void *mem, *ctx = NULL;
	double *ref = malloc((size_t)N_TOK * N_VOCAB * sizeof *ref), e32, e16, tol, gap = INFINITY;
	struct gguf_file *f;

	s.wtype = t;
	snprintf(what, sizeof what, "%s %s", s.arch, gguf_dtype_name(s.wtype));
	f = build(&s, &mem, NULL);
	test_cond(f != NULL, "%s: fixture", what);
	if (f == NULL || model_load(&m, f, err, sizeof err) != 0) {
		test_cond(0, "%s: model_load: %s", what, f ? err : "no file");
		gguf_close(f);
		free(mem);
		free(ref);
		return;
	}
	if (check)
		check_model(&m, &s);
	rc.route_gap = &gap;
	test_cond(ref_forward(f, &rc, tok, N_TOK, ref) == 0, "%s: reference", what);
	test_cond(gap > ROUTE_GAP, "%s: the reference's routing has a near-tie (%g)", what, gap);
	test_cond(kvc_backend_cpu.init(&ctx, &m, &bp, err, sizeof err) == 0, "init: %s", err);
	if (packed > 0 && ctx != NULL) {
		struct kvc_buf d = { 0 };
		char want[32];
		snprintf(want, sizeof want, "packed: %d ", packed);
		kvc_backend_cpu.describe(ctx, &d);
		test_cond(d.p != NULL && strstr(d.p, want) != NULL, "%s: %s in %s", what, want, d.p ? d.p : "");
		test_cond(d.p != NULL && (strstr(d.p, "experts: left mapped") != NULL) == (limit > 0),
		    "%s: experts %s mapped: %s", what, limit > 0 ? "left" : "not", d.p ? d.p : "");
		/* the stacks packed, none of their experts yet: each when a token first chooses it */
		snprintf(want, sizeof want, "experts: 0 of %d packed", 3 * N_LAYER * s.n_expert);
		test_cond(d.p != NULL && (strstr(d.p, want) != NULL) == (limit == 0), "%s: %s in %s", what,
		    limit == 0 ? want : "no experts' line", d.p ? d.p : "");
		kvc_buf_free(&d);
	}
	e32 = vs_ref(ctx, &m, GGML_TYPE_F32, tok, ref);
	e16 = vs_ref(ctx, &m, GGML_TYPE_F16, tok, ref);
	if (packed > 0 && limit == 0 && ctx != NULL) {
		struct kvc_buf d = { 0 };
		const char *at;
		int got = -1, of = -1;

		/* after the prompts, the experts they chose (and only those) were packed first */
		kvc_backend_cpu.describe(ctx, &d);
		at = d.p != NULL ? strstr(d.p, "experts: ") : NULL;
		test_cond(at != NULL && sscanf(at, "experts: %d of %d", &got, &of) == 2 && got > 0 &&
		    got <= of && of == 3 * N_LAYER * s.n_expert, "%s: experts packed after the forward: %s",
		    what, d.p ? d.p : "");
		kvc_buf_free(&d);
	}
	kvc_backend_cpu.free(ctx);
	tol = tol_weights(s.wtype);
	printf("%-14s rel err F32 cache %.2e  F16 cache %.2e  (routing gap %.2f)\n", what, e32,
	    e16, gap);
	test_cond(e32 <= tol, "%s F32 cache: %g > %g", what, e32, tol);
	test_cond(e16 <= tol + TOL_F16, "%s F16 cache: %g > %g", what, e16, tol + TOL_F16);
	if (batch)
		batch_independence(&m, what);
	if (batch && packed > 0 && limit == 0) {
		pack_ahead_same(&m, what);
		stop_in_packing(&m, what);
	}
	model_free(&m);
	gguf_close(f);
	free(mem);
	free(ref);
}

int
main(void)
{
	static const enum gguf_dtype types[] = {
		GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
		GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
	};
	/* K-quant rows need multiples of 256: the experts are 256 wide */
	static const struct mspec specs[] = {
		/* expert width from its key (not feed_forward_length / used = 384), renormalised */
		{ "qwen3moe", 0, 8, 2, 768, 256, 256, 0, true, 1, false },
		/* default expert width 512 / 2, shared expert of feed_forward_length, not renormalised */
		{ "qwen2moe", 0, 8, 2, 512, 0, 256, 512, false, 1, false },
		/* Mixtral: experts of feed_forward_length, renormalised; 3 of 4 */
		{ "llama", 0, 4, 3, 256, 0, 256, 0, true, 1, false },
		/* gpt-oss: biases everywhere, softmax over the chosen logits (not renormalised: exact) */
		{ "gpt-oss", 0, 8, 2, 512, 256, 256, 0, false, 1, false },
		/* glm4moe as GLM-4.5-Air: no Q/K norms, weights renormalised, unscaled */
		{ "glm4moe", 0, 8, 2, 512, 256, 256, 256, true, 1.0, false },
		/* and as GLM-4.6: Q/K norms, weights scaled by 2.5 */
		{ "glm4moe", 0, 8, 2, 512, 256, 256, 256, true, 2.5, true },
	};
	int32_t tok[N_TOK];

	rng_state = 0x9E3779B97F4A7C15ULL;
	for (int i = 0; i < N_TOK; i++)
		tok[i] = (int32_t)((rnd() + 1) * 150);
	/*
	 * qwen3moe's stacks in a type the table packs are packed at load
	 * (cpu_pack.c), with Q, K, V, O and the output: 7 per layer and one
	 */
	for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++)
		for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
			run_case(specs[si], types[ti], tok, ti == 0,
			    types[ti] == GGML_TYPE_F32 || types[ti] == GGML_TYPE_Q4_K,
			    si == 0 && kern_packs(kern_best(), types[ti], E) ? 7 * N_LAYER + 1 : 0, 0);
	/*
	 * Expert stacks of the newer types packed at load (cpu_pack.c: IQ4_NL,
	 * MXFP4, IQ4_XS where the table packs them): gpt-oss's own type with its biases, and
	 * qwen3moe's experts in the other two (after the loop above, so its
	 * fixtures' random weights stay what they were); with a packed kernel
	 * for them, per layer Q, K, V, O and the 3 stacks, and the output
	 */
	bool pk = kern_packs(kern_best(), GGML_TYPE_MXFP4, E);
	run_case(specs[3], GGML_TYPE_MXFP4, tok, false, true, pk ? 7 * N_LAYER + 1 : 0, 0);
	run_case(specs[0], GGML_TYPE_IQ4_XS, tok, false, false, pk ? 7 * N_LAYER + 1 : 0, 0);
	run_case(specs[0], GGML_TYPE_IQ4_NL, tok, false, false, pk ? 7 * N_LAYER + 1 : 0, 0);
	/*
	 * A machine too small for the experts packed (a limit of one byte):
	 * the stacks stay mapped, the dense matrices and the output are
	 * packed (4 per layer and one), and the results are the same
	 */
	if (kern_packs(kern_best(), GGML_TYPE_Q4_K, E))
		run_case(specs[0], GGML_TYPE_Q4_K, tok, false, true, 4 * N_LAYER + 1, 1);
	refusals();
	return test_done();
}
