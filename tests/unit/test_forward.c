/*
 * test_forward: the CPU backend's logits against the float64 reference
 * (tests/fixtures/ref_forward.c) on tiny random-weight models built here, for every
 * architecture x weight type, with F32 and F16 KV caches; plus the KV cache
 * contract (batch splitting, rewinding, kv_read/kv_write, context limit),
 * bitwise batch independence for every weight type, and model_load's refusals.
 *
 * Error bounds. Both paths use the same dequantised weights (the reference
 * dequantises the very blocks the backend dots with), so weight
 * quantisation error is common to both and cancels. Metric per position:
 * max|a - ref| / max|ref| over the vocabulary.
 *  - F32 cache, F32/F16/BF16 weights (float activations): float32 sums of
 *    n <= 512 products carry a relative error of about sqrt(n) * 2^-24 ~
 *    1e-6 of the sum of |terms| (n * 2^-24 ~ 3e-5 at worst); a few such
 *    stages per layer over 2 layers stay well inside 1e-4.
 *  - Quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K,
 *    and on llama and qwen2 Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S,
 *    IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, whose weights the reference decodes itself,
 *    tests/fixtures/ref_dequant.c): the backend rounds
 *    each product's input to int8 per block of 32 (quant.h, q_dot_act),
 *    which the reference does not. quant.h bounds one dot product by
 *    sum_b (d_b / 2) sum_{i in b} w'_i, d_b = max_b|x| / 127, w'_i = |w_i| +
 *    m_i. That linear sum assumes every rounding error has the same sign;
 *    the errors are the fractional parts of x_i / d_b, spread uniformly
 *    over +-d_b/2 and unrelated to each other and to the weights, so the
 *    same terms add in quadrature: var(err) = sum_b (d_b^2 / 12) sum_{i in
 *    b} w'_i^2. Averaged over the test's random rows, with
 *    max_b|x|^2 <= sum_{i in b} x_i^2 (true for any x):
 *      var(err) <= mean(w'^2) * 32 |x|^2 / (12 * 127^2),
 *    while the output itself has var(y) = mean(w^2) |x|^2, so each product
 *    gets a relative error eps <= rho * sqrt(32/12) / 127 = 0.0129 rho,
 *    rho = rms(w') / rms(w). rho = 1 for Q8_0/Q4_0/Q5_0/Q3_K/Q6_K (m = 0); for
 *    Q4_K/Q5_K the test's weights, uniform in +-s, are stored as d*sc*q - m
 *    with m ~ s, so w' = w + m is uniform in [0, 2s]: rho = 2; the same
 *    for Q4_1/Q5_1, stored as d*q + m with m = the block minimum ~ -s. Q2_K
 *    has offsets too, but its kernel applies them to the rounded x as well
 *    (quant_iq.h), so what multiplies the rounding error is w itself: rho = 1,
 *    as for the IQ and MXFP4 types (no offsets). A forward
 *    pass has P = 7 products per layer (Q, K, V, O, gate, up, down) x 2
 *    layers + the output = 15, with O(1) gain each to the logits (unit-
 *    scale weights, RMSNorm before each block); independent errors add in
 *    quadrature, so the logits' error is <= sqrt(15) * eps = 0.050 rho of
 *    their scale, and the metric (ratio of two maxima over 300 values of
 *    near-Gaussian spread) is about that ratio of scales. Bound: TOL_ACT *
 *    rho = 0.05 rho added to 1e-4. Measured: <= 0.015 (rho = 1), <= 0.031
 *    (rho = 2, 150-token prefill); the slack is that real blocks have
 *    max_b|x| ~ 2.2-3.7 rms (measured) where the bound allows sqrt(32).
 *  - F16 cache: each cached K and V element is rounded to 11 significant
 *    bits, a relative change <= u = 2^-11 ~ 4.9e-4. A score q.k/sqrt(d)
 *    moves by <= u |q||k|/sqrt(d) (|scores| are O(1) here, so softmax
 *    weights move by ~u relatively) and the attention output by ~2u of
 *    max|v|; the residual stream passes that through 2 layers with O(1)
 *    gain, so logits move by a few u: bound 2e-3 (~4u; measured <= 3.3e-4).
 *  - gemma2/gemma3 run the same 7 products per layer; their extra steps
 *    (embedding scale, post-norms, GELU, softcaps) are float32 element-wise
 *    operations whose rounding is far below these bounds, and the post-norms
 *    keep each block's gain at O(1), so the same bounds apply (measured:
 *    <= 3.5e-7 for F32/F16/BF16, <= 0.036 quantised). Their windows (5
 *    positions, N_TOK = 12 and a 150-token prefill) make the masking count:
 *    a window one position too wide fails every gemma case.
 *  - phi3, chatglm, glm4 read Q/K/V and gate/up from fused tensors (views
 *    of their rows) and run the same 7 products; chatglm/glm4 rotate
 *    adjacent pairs over half of each head, glm4 adds post-norms. Same
 *    bounds (measured: <= 5.4e-7 for F32/F16/BF16, <= 0.054 quantised).
 *  - gpt2: learned positions, LayerNorm with bias, biases on every product,
 *    GELU MLP (one product fewer per layer), same bounds.
 *  - YaRN changes only the angles and the rotated magnitude (yarn_checks).
 */
#include "gguf/gguf.h"
#include "backend/backend.h"
#include "model/model.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "fixtures/ref_forward.h"
#include "test.h"

#include <stdint.h>

#define TOL_F32 1e-4
#define TOL_F16 2e-3
#define TOL_ACT 0.05	/* per unit of rho, see above */
#define N_TOK 12	/* prefill PREFILL, then single-token decodes */
#define PREFILL 8

struct spec {
	const char *arch;
	enum gguf_dtype wtype;
	int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
	bool explicit_head_dim;	/* write attention.key_length */
	bool tied;		/* no output.weight */
	bool biases;		/* qwen2 Q/K/V biases */
	bool qk_norm;		/* qwen3 */
	bool rope_freqs;	/* llama 3.1 frequency factors */
	float eps, theta;
	float linear_scale;	/* rope.scaling.factor when != 0 */
	/* gemma2/gemma3 keys written when > 0 (absent: llama.cpp's defaults) */
	int n_swa, swa_pattern;
	float attn_cap, final_cap;
	/* phi3/chatglm/glm4: fused attn_qkv and gate+up ffn_up; rotated dims (0: head_dim) */
	bool fused;
	int rope_dim;
};

static bool
is_gemma(const char *arch)
{
	return strncmp(arch, "gemma", 5) == 0;
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

static int
add_tensor(struct gguf_writer *w, const char *name, enum gguf_dtype type, int64_t n_in,
    int64_t n_out, double scale, double offset)
{
	size_t rb = gguf_dtype_row_size(type, n_in);
	float *row = malloc((size_t)n_in * sizeof *row);
	uint8_t *data = malloc(rb * (size_t)n_out);
	int64_t ne[2] = { n_in, n_out };
	int64_t r, i;
	int rc = 0;

	for (r = 0; r < n_out && rc == 0; r++) {
		for (i = 0; i < n_in; i++)
			row[i] = (float)(offset + scale * rnd());
		rc = q_quantize_row(type, row, data + (size_t)r * rb, n_in);
	}
	if (rc == 0)
		rc = gguf_w_tensor(w, name, type, n_out == 1 ? 1 : 2, ne, data, rb * (size_t)n_out);
	free(row);
	free(data);
	return rc;
}

/* Serialise a model per s; extra(w) may add more keys/tensors. */
static void *
build(const struct spec *s, size_t *len, void (*extra)(struct gguf_writer *))
{
	struct gguf_writer *w = gguf_writer_new();
	char key[128];
	int qd = s->n_head * s->head_dim, kvd = s->n_head_kv * s->head_dim, l;
	void *out = NULL;
	double ms = 1.0 / sqrt(s->n_embd), fs = 1.0 / sqrt(s->n_ff);
	bool gpt2 = strcmp(s->arch, "gpt2") == 0;

#define K(name) (snprintf(key, sizeof key, "%s.%s", s->arch, name), key)
	gguf_w_str(w, "general.architecture", s->arch);
	gguf_w_u32(w, K("context_length"), 256);
	gguf_w_u32(w, K("embedding_length"), (uint32_t)s->n_embd);
	gguf_w_u32(w, K("block_count"), (uint32_t)s->n_layer);
	gguf_w_u32(w, K("feed_forward_length"), (uint32_t)s->n_ff);
	gguf_w_u32(w, K("attention.head_count"), (uint32_t)s->n_head);
	gguf_w_u32(w, K("attention.head_count_kv"), (uint32_t)s->n_head_kv);
	gguf_w_f32(w, K(gpt2 ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"), s->eps);
	gguf_w_f32(w, K("rope.freq_base"), s->theta);
	if (s->explicit_head_dim) {
		gguf_w_u32(w, K("attention.key_length"), (uint32_t)s->head_dim);
		gguf_w_u32(w, K("attention.value_length"), (uint32_t)s->head_dim);
	}
	if (s->linear_scale != 0) {
		gguf_w_str(w, K("rope.scaling.type"), "linear");
		gguf_w_f32(w, K("rope.scaling.factor"), s->linear_scale);
	}
	if (s->rope_dim > 0)
		gguf_w_u32(w, K("rope.dimension_count"), (uint32_t)s->rope_dim);
	if (s->n_swa > 0)
		gguf_w_u32(w, K("attention.sliding_window"), (uint32_t)s->n_swa);
	if (s->swa_pattern > 0)
		gguf_w_u32(w, K("attention.sliding_window_pattern"), (uint32_t)s->swa_pattern);
	if (s->attn_cap > 0)
		gguf_w_f32(w, K("attn_logit_softcapping"), s->attn_cap);
	if (s->final_cap > 0)
		gguf_w_f32(w, K("final_logit_softcapping"), s->final_cap);
#undef K
	add_tensor(w, "token_embd.weight", s->wtype, s->n_embd, s->n_vocab, 1.0, 0);
	add_tensor(w, "output_norm.weight", GGML_TYPE_F32, s->n_embd, 1, 0.2, 1.0);
	if (!s->tied)
		add_tensor(w, "output.weight", s->wtype, s->n_embd, s->n_vocab, ms, 0);
	if (s->rope_freqs)
		add_tensor(w, "rope_freqs.weight", GGML_TYPE_F32, s->head_dim / 2, 1, 3.0, 4.0);
	if (gpt2) {
		/* 256 learned positions (context_length), and the final LayerNorm's bias */
		add_tensor(w, "position_embd.weight", s->wtype, s->n_embd, 256, 0.5, 0);
		add_tensor(w, "output_norm.bias", GGML_TYPE_F32, s->n_embd, 1, 0.2, 0);
	}
	for (l = 0; l < s->n_layer; l++) {
		char n[64];
#define T(suffix, type, nin, nout, sc, off) \
		(snprintf(n, sizeof n, "blk.%d.%s", l, suffix), add_tensor(w, n, type, nin, nout, sc, off))
		T("attn_norm.weight", GGML_TYPE_F32, s->n_embd, 1, 0.2, 1.0);
		/* larger Q/K weights give peaked attention, which exercises softmax */
		if (s->fused) {
			/* one scale for the three: the fused matrix is one tensor */
			T("attn_qkv.weight", s->wtype, s->n_embd, qd + 2 * kvd, 2 * ms, 0);
			if (s->biases)
				T("attn_qkv.bias", GGML_TYPE_F32, qd + 2 * kvd, 1, 0.3, 0);
		} else {
			T("attn_q.weight", s->wtype, s->n_embd, qd, 2 * ms, 0);
			T("attn_k.weight", s->wtype, s->n_embd, kvd, 2 * ms, 0);
			T("attn_v.weight", s->wtype, s->n_embd, kvd, ms, 0);
		}
		if (s->biases && !s->fused) {
			T("attn_q.bias", GGML_TYPE_F32, qd, 1, 0.3, 0);
			T("attn_k.bias", GGML_TYPE_F32, kvd, 1, 0.3, 0);
			T("attn_v.bias", GGML_TYPE_F32, kvd, 1, 0.3, 0);
		}
		if (s->qk_norm) {
			T("attn_q_norm.weight", GGML_TYPE_F32, s->head_dim, 1, 0.3, 1.0);
			T("attn_k_norm.weight", GGML_TYPE_F32, s->head_dim, 1, 0.3, 1.0);
		}
		T("attn_output.weight", s->wtype, qd, s->n_embd, ms, 0);
		T("ffn_norm.weight", GGML_TYPE_F32, s->n_embd, 1, 0.2, 1.0);
		if (gpt2) {
			/* LayerNorm biases, product biases, a plain GELU MLP */
			T("attn_norm.bias", GGML_TYPE_F32, s->n_embd, 1, 0.2, 0);
			T("ffn_norm.bias", GGML_TYPE_F32, s->n_embd, 1, 0.2, 0);
			T("attn_output.bias", GGML_TYPE_F32, s->n_embd, 1, 0.3, 0);
			T("ffn_up.weight", s->wtype, s->n_embd, s->n_ff, 2 * ms, 0);
			T("ffn_up.bias", GGML_TYPE_F32, s->n_ff, 1, 0.3, 0);
			T("ffn_down.bias", GGML_TYPE_F32, s->n_embd, 1, 0.3, 0);
		} else if (s->fused) {
			T("ffn_up.weight", s->wtype, s->n_embd, 2 * s->n_ff, 2 * ms, 0);
		} else {
			T("ffn_gate.weight", s->wtype, s->n_embd, s->n_ff, 2 * ms, 0);
			T("ffn_up.weight", s->wtype, s->n_embd, s->n_ff, ms, 0);
		}
		T("ffn_down.weight", s->wtype, s->n_ff, s->n_embd, fs, 0);
		if (is_gemma(s->arch) || strcmp(s->arch, "glm4") == 0) {
			T("post_attention_norm.weight", GGML_TYPE_F32, s->n_embd, 1, 0.2, 1.0);
			T("post_ffw_norm.weight", GGML_TYPE_F32, s->n_embd, 1, 0.2, 1.0);
		}
#undef T
	}
	if (extra)
		extra(w);
	if (gguf_w_to_mem(w, &out, len) != 0)
		out = NULL;
	gguf_writer_free(w);
	return out;
}

static struct gguf_file *
open_spec(const struct spec *s, void **mem, void (*extra)(struct gguf_writer *))
{
	struct gguf_file *f = NULL;
	char err[256];
	size_t len;

	*mem = build(s, &len, extra);
	if (*mem == NULL || gguf_open_mem(&f, *mem, len, s->arch, err, sizeof err) != 0) {
		fprintf(stderr, "cannot build %s model: %s\n", s->arch, *mem ? err : "writer");
		return NULL;
	}
	return f;
}

/* max over positions of max|a - r| / max|r| */
static double
rel_err(const float *a, const double *r, int n_vocab)
{
	double d = 0, mx = 0;
	int i;

	for (i = 0; i < n_vocab; i++) {
		d = fmax(d, fabs(a[i] - r[i]));
		mx = fmax(mx, fabs(r[i]));
	}
	return d / mx;
}

static double
max_diff_f(const float *a, const float *b, size_t n)
{
	double d = 0;
	size_t i;

	for (i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d;
}

static double
max_abs(const float *a, size_t n)
{
	double m = 0;
	size_t i;

	for (i = 0; i < n; i++)
		m = fmax(m, fabs(a[i]));
	return m;
}

/* Bound for the F32 cache: weights with integer kernels add the int8 activation term. */
static double
tol_weights(enum gguf_dtype t)
{
	if (!q_act_supported(t))
		return TOL_F32;
	/* rho (see the top): 2 where sub-block mins shift the integer weights */
	bool offset = t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q4_1 ||
	    t == GGML_TYPE_Q5_1;

	return TOL_F32 + TOL_ACT * (offset ? 2 : 1);
}

/* Prefill PREFILL tokens (all logits), then decode one by one; worst error against ref. */
static double
run_vs_ref(void *ctx, const struct kvc_model *m, enum gguf_dtype kv_type,
    const int32_t *tok, const double *ref, float *lg)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	int V = m->hp.n_vocab, t, rc;
	char err[256];
	double worst = 0;
	void *kv = NULL;

	rc = be->kv_create(ctx, 64, kv_type, &kv, err, sizeof err);
	test_cond(rc == 0, "kv_create: %s", err);
	if (rc)
		return 1e9;
	rc = be->forward(ctx, kv, tok, PREFILL, 0, lg, true, err, sizeof err);
	test_cond(rc == 0, "prefill: %s", err);
	for (t = 0; t < PREFILL && rc == 0; t++)
		worst = fmax(worst, rel_err(lg + (size_t)t * V, ref + (size_t)t * V, V));
	for (t = PREFILL; t < N_TOK && rc == 0; t++) {
		rc = be->forward(ctx, kv, tok + t, 1, t, lg, false, err, sizeof err);
		test_cond(rc == 0, "decode %d: %s", t, err);
		worst = fmax(worst, rel_err(lg, ref + (size_t)t * V, V));
	}
	be->kv_destroy(ctx, kv);
	return rc ? 1e9 : worst;
}

/*
 * The cache contract on one model: split batches equal one batch;
 * rewinding and recomputing reproduces logits; kv_read/kv_write move a
 * cache into another bit for bit; overflow gives KVC_ERANGE.
 */
static void
cache_contract(const struct kvc_model *m, const int32_t *tok, enum gguf_dtype kv_type)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	struct kvc_backend_params bp = { .n_threads = 2 };
	int V = m->hp.n_vocab, kvd = m->hp.n_head_kv * m->hp.head_dim, l, part, rc;
	size_t es = kv_type == GGML_TYPE_F16 ? 2 : 4, rows = (size_t)N_TOK * kvd * es;
	float *one = malloc((size_t)N_TOK * V * sizeof *one);
	float *two = malloc((size_t)N_TOK * V * sizeof *two);
	float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
	char *buf = malloc(rows), *buf2 = malloc(rows);
	void *ctx = NULL, *kv1 = NULL, *kv2 = NULL, *kv3 = NULL;
	char err[256];
	int32_t nt = (tok[0] + 1) % V;

	rc = be->init(&ctx, m, &bp, err, sizeof err);
	test_cond(rc == 0, "init: %s", err);
	if (rc)
		goto out;
	be->kv_create(ctx, 32, kv_type, &kv1, err, sizeof err);
	be->kv_create(ctx, 32, kv_type, &kv2, err, sizeof err);
	be->kv_create(ctx, 32, kv_type, &kv3, err, sizeof err);

	/* one batch vs. 5 + 7 */
	rc = be->forward(ctx, kv1, tok, N_TOK, 0, one, true, err, sizeof err);
	test_cond(rc == 0, "forward 12: %s", err);
	rc = be->forward(ctx, kv2, tok, 5, 0, two, true, err, sizeof err);
	rc |= be->forward(ctx, kv2, tok + 5, N_TOK - 5, 5, two + (size_t)5 * V, true, err, sizeof err);
	test_cond(rc == 0, "forward 5+7: %s", err);
	for (l = 0; l < N_TOK; l++)
		test_cond(max_diff_f(one + (size_t)l * V, two + (size_t)l * V, V) <=
		    1e-5 * max_abs(one + (size_t)l * V, V),
		    "position %d differs between one batch and two: %g", l,
		    max_diff_f(one + (size_t)l * V, two + (size_t)l * V, V));

	/* rewind kv2 to 6 and recompute 6..12 with a different token first, then the original */
	be->forward(ctx, kv2, &nt, 1, 6, a, false, err, sizeof err);
	rc = be->forward(ctx, kv2, tok + 6, N_TOK - 6, 6, a, false, err, sizeof err);
	test_cond(rc == 0 && max_diff_f(a, one + (size_t)(N_TOK - 1) * V, V) <=
	    1e-5 * max_abs(one + (size_t)(N_TOK - 1) * V, V),
	    "rewind and recompute: %g", max_diff_f(a, one + (size_t)(N_TOK - 1) * V, V));

	/* snapshot kv1 into kv3 through kv_read/kv_write, then both decode one more token */
	for (l = 0; l < m->hp.n_layer; l++)
		for (part = 0; part < 2; part++) {
			rc = be->kv_read(ctx, kv1, l, part, 0, N_TOK, buf, err, sizeof err);
			test_cond(rc == 0, "kv_read: %s", err);
			rc = be->kv_write(ctx, kv3, l, part, 0, N_TOK, buf, err, sizeof err);
			test_cond(rc == 0, "kv_write: %s", err);
			rc = be->kv_read(ctx, kv3, l, part, 3, N_TOK - 3, buf2, err, sizeof err);
			test_cond(rc == 0 && memcmp(buf + 3 * kvd * es, buf2, (N_TOK - 3) * kvd * es) == 0,
			    "layer %d part %d: read back differs", l, part);
		}
	rc = be->forward(ctx, kv1, &nt, 1, N_TOK, a, false, err, sizeof err);
	rc |= be->forward(ctx, kv3, &nt, 1, N_TOK, b, false, err, sizeof err);
	test_cond(rc == 0 && memcmp(a, b, (size_t)V * sizeof *a) == 0,
	    "restored cache gives different logits (%g)", max_diff_f(a, b, V));

	/* reading what is not computed, leaving gaps, running past n_ctx */
	test_cond(be->kv_read(ctx, kv3, 0, KVC_KV_K, 10, 10, buf, err, sizeof err) == KVC_EINVAL,
	    "read past the computed positions");
	test_cond(be->kv_write(ctx, kv3, 0, KVC_KV_K, 20, 1, buf, err, sizeof err) == KVC_EINVAL,
	    "write leaving a gap");
	test_cond(be->forward(ctx, kv3, tok, 1, 20, a, false, err, sizeof err) == KVC_EINVAL,
	    "forward leaving a gap");
	test_cond(be->forward(ctx, kv3, tok, N_TOK, 25, a, false, err, sizeof err) == KVC_EINVAL,
	    "forward past the end");
	rc = be->forward(ctx, kv3, tok, N_TOK, N_TOK + 1, a, false, err, sizeof err);
	rc = be->forward(ctx, kv3, tok, N_TOK, 2 * N_TOK + 1, a, false, err, sizeof err);
	test_cond(rc == KVC_ERANGE && strstr(err, "context") != NULL, "context overflow: %d %s", rc, err);
	test_cond(be->kv_bytes(ctx, kv3) >= (size_t)(2 * N_TOK + 1) * kvd * es * 2 * m->hp.n_layer &&
	    be->kv_bytes(ctx, kv3) <= (size_t)32 * kvd * es * 2 * m->hp.n_layer, "kv_bytes %zu",
	    be->kv_bytes(ctx, kv3));
	{
		struct kvc_buf d = {0};

		be->describe(ctx, &d);
		test_cond(d.n > 0 && strstr(d.p, "KV caches: 3") != NULL, "describe: %s", d.p ? d.p : "");
		kvc_buf_free(&d);
	}
out:
	if (ctx) {
		be->kv_destroy(ctx, kv1);
		be->kv_destroy(ctx, kv2);
		be->kv_destroy(ctx, kv3);
		be->free(ctx);
	}
	free(one); free(two); free(a); free(b); free(buf); free(buf2);
}

/*
 * Batch independence (issue 11): the logits of a position are bitwise the
 * same computed alone (one-token forwards, the decode path), in batches of
 * 5 (tiles of 2 rows x 4 tokens plus a last tile of 1, or 2 x 3 + 2 for
 * the float types) and in one N-token prefill (512: chunks of 128, full
 * tiles), at 1 and 2 threads (which pair the rows differently). This holds
 * because each (row, token) product runs the same instructions on the same
 * values in the same order whatever tile carries it (src/kern), in every
 * kernel table this CPU runs.
 */
static void
batch_independence(const struct kvc_model *m, const struct kern *k, int N)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	int V = m->hp.n_vocab, i, th, p, rc = 0, bad[3] = {0, 0, 0};
	size_t sz = (size_t)N * V * sizeof(float);
	int32_t tok[512];
	float *lg[2][3];
	char err[256] = "";

	for (i = 0; i < N; i++)
		tok[i] = (int32_t)((rnd() + 1) * 150) % V;
	for (th = 0; th < 2; th++) {
		struct kvc_backend_params bp = { .n_threads = th + 1, .kernels = k->name };
		void *ctx = NULL, *kv = NULL;

		for (i = 0; i < 3; i++)
			lg[th][i] = calloc(1, sz);
		rc = be->init(&ctx, m, &bp, err, sizeof err);
		if (rc == 0)
			rc = be->kv_create(ctx, N, GGML_TYPE_F32, &kv, err, sizeof err);
		/* a forward at pos0 replaces what the cache held from pos0 on */
		if (rc == 0)
			rc = be->forward(ctx, kv, tok, N, 0, lg[th][0], true, err, sizeof err);
		for (p = 0; rc == 0 && p < N; p += 5)
			rc = be->forward(ctx, kv, tok + p, N - p < 5 ? N - p : 5, p,
			    lg[th][1] + (size_t)p * V, true, err, sizeof err);
		for (p = 0; rc == 0 && p < N; p++)
			rc = be->forward(ctx, kv, tok + p, 1, p, lg[th][2] + (size_t)p * V, true,
			    err, sizeof err);
		test_cond(rc == 0, "%s batch independence: %s", gguf_dtype_name(m->layers[0].wq.type), err);
		if (ctx) {
			be->kv_destroy(ctx, kv);
			be->free(ctx);
		}
	}
	for (p = 0; p < N; p++) {
		size_t o = (size_t)p * V, n = (size_t)V * sizeof(float);
		bad[0] += memcmp(lg[0][0] + o, lg[0][2] + o, n) != 0;	/* prefill vs alone */
		bad[1] += memcmp(lg[0][1] + o, lg[0][2] + o, n) != 0;	/* batches of 5 vs alone */
		for (i = 0; i < 3; i++)	/* 2 threads vs 1 */
			bad[2] += memcmp(lg[1][i] + o, lg[0][i] + o, n) != 0;
	}
	printf("%-4s %-6s batch independence: %d/%d/%d of %d positions differ "
	    "(prefill, batches of 5, 2 threads)\n", gguf_dtype_name(m->layers[0].wq.type), k->name,
	    bad[0], bad[1], bad[2], N);
	test_cond(bad[0] == 0 && bad[1] == 0 && bad[2] == 0,
	    "%s %s: logits depend on the batch: %d positions differ in the %d-token prefill, "
	    "%d in batches of 5, %d between 1 and 2 threads", gguf_dtype_name(m->layers[0].wq.type),
	    k->name, bad[0], N, bad[1], bad[2]);
	for (th = 0; th < 2; th++)
		for (i = 0; i < 3; i++)
			free(lg[th][i]);
}

/*
 * A prefill longer than the backend's internal chunk (128 tokens), all
 * logits, against the reference; and the same logits from 1 and 3 threads
 * (each output row is computed whole by one thread, so they are identical).
 */
static void
long_prefill(const struct kvc_model *m, const struct gguf_file *f, const struct ref_config *rc)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	enum { N = 150 };
	int V = m->hp.n_vocab, i, th, r;
	int32_t tok[N];
	double *ref = malloc((size_t)N * V * sizeof *ref), worst = 0;
	float *lg[2] = { malloc((size_t)N * V * sizeof(float)), malloc((size_t)N * V * sizeof(float)) };
	char err[256];

	for (i = 0; i < N; i++)
		tok[i] = (int32_t)((rnd() + 1) * 150);
	test_cond(ref_forward(f, rc, tok, N, ref) == 0, "reference");
	for (th = 0; th < 2; th++) {
		struct kvc_backend_params bp = { .n_threads = th ? 3 : 1 };
		void *ctx = NULL, *kv = NULL;

		r = be->init(&ctx, m, &bp, err, sizeof err);
		if (r == 0)
			r = be->kv_create(ctx, N, GGML_TYPE_F32, &kv, err, sizeof err);
		if (r == 0)
			r = be->forward(ctx, kv, tok, N, 0, lg[th], true, err, sizeof err);
		test_cond(r == 0, "%d-token prefill: %s", N, err);
		if (ctx) {
			be->kv_destroy(ctx, kv);
			be->free(ctx);
		}
	}
	for (i = 0; i < N; i++)
		worst = fmax(worst, rel_err(lg[0] + (size_t)i * V, ref + (size_t)i * V, V));
	printf("%d-token prefill: rel err %.2e\n", N, worst);
	test_cond(worst <= tol_weights(m->layers[0].wq.type), "%d-token prefill: %g", N, worst);
	test_cond(memcmp(lg[0], lg[1], (size_t)N * V * sizeof(float)) == 0,
	    "1 and 3 threads give different logits");
	free(ref);
	free(lg[0]);
	free(lg[1]);
}

static void
check_hparams(const struct kvc_model *m, const struct spec *s)
{
	const struct kvc_hparams *hp = &m->hp;

	test_cond(strcmp(model_arch_name(hp->arch), s->arch) == 0, "arch %s", model_arch_name(hp->arch));
	test_cond(hp->n_vocab == s->n_vocab && hp->n_embd == s->n_embd && hp->n_layer == s->n_layer &&
	    hp->n_head == s->n_head && hp->n_head_kv == s->n_head_kv && hp->head_dim == s->head_dim &&
	    hp->n_ff == s->n_ff &&
	    hp->rope_dim == (strcmp(s->arch, "gpt2") == 0 ? 0 : s->rope_dim ? s->rope_dim : s->head_dim),
	    "%s: shapes", s->arch);
	test_cond(hp->rope_neox == (strcmp(s->arch, "llama") != 0 && strncmp(s->arch, "chatglm", 7) != 0 &&
	    strcmp(s->arch, "glm4") != 0), "%s: rope pairing", s->arch);
	test_cond(fabsf(hp->rms_eps - s->eps) < 1e-12f && hp->rope_theta == s->theta,
	    "%s: eps/theta", s->arch);
	test_cond((m->output.data == m->tok_embd.data) == s->tied, "%s: tied output", s->arch);
	test_cond((m->layers[0].bq.data != NULL) == s->biases &&
	    (m->layers[1].q_norm.data != NULL) == s->qk_norm &&
	    (m->rope_freqs.data != NULL) == s->rope_freqs, "%s: optional tensors", s->arch);
	test_cond(hp->post_norms == (is_gemma(s->arch) || strcmp(s->arch, "glm4") == 0) &&
	    hp->ffn_gelu == is_gemma(s->arch) &&
	    (m->layers[0].attn_post_norm.data != NULL) == hp->post_norms &&
	    hp->embd_scale == (is_gemma(s->arch) ? 16.0f : 1.0f), "%s: gemma pieces", s->arch);
}

/*
 * Independent of the forward: the reference config a test spec means,
 * with llama.cpp's defaults for the gemma keys the spec leaves out.
 */
static struct ref_config
ref_of(const struct spec *s)
{
	struct ref_config rc = { s->arch, s->n_vocab, s->n_embd, s->n_layer, s->n_head,
	    s->n_head_kv, s->head_dim, s->n_ff, s->rope_dim ? s->rope_dim : s->head_dim, s->eps, s->theta,
	    s->linear_scale ? 1.0 / s->linear_scale : 1.0, 0, 0, 0, 0, 0, 0, false, false, 0, 0, 0, 0, 0, 0, 0,
	    false, NULL, false, 0, false, 0 };
	bool g2 = strcmp(s->arch, "gemma2") == 0;

	rc.post_norms = strcmp(s->arch, "glm4") == 0;
	if (strcmp(s->arch, "gpt2") == 0)
		rc.rope_dim = 0;	/* learned positions instead */
	if (!is_gemma(s->arch))
		return rc;
	rc.embd_scale = sqrt((double)s->n_embd);
	rc.gelu = rc.post_norms = true;
	rc.n_swa = s->n_swa > 0 ? s->n_swa : g2 ? 4096 : 0;
	rc.swa_period = s->swa_pattern > 0 ? s->swa_pattern : g2 ? 2 : 6;
	rc.rope_theta_swa = g2 ? s->theta : 10000;
	rc.attn_softcap = s->attn_cap > 0 ? s->attn_cap : g2 ? 50 : 0;
	rc.final_softcap = s->final_cap > 0 ? s->final_cap : g2 ? 30 : 0;
	return rc;
}

/*
 * llama.cpp's defaults for the gemma keys a file may lack, read back from
 * model_load: gemma3 has no window without attention.sliding_window; with
 * one, five windowed layers then a global one, local RoPE base 10000;
 * gemma2 windows 4096 positions in every other layer, softcaps 50 and 30.
 */
static void
gemma_defaults(void)
{
	static const struct { const char *arch; int n_layer, n_swa; int swa[6]; float theta_swa, ac, fc; } cases[] = {
		{ "gemma3", 6, 0, { 0, 0, 0, 0, 0, 0 }, 10000, 0, 0 },
		{ "gemma3", 6, 7, { 1, 1, 1, 1, 1, 0 }, 10000, 0, 0 },
		{ "gemma2", 6, 0, { 1, 0, 1, 0, 1, 0 }, 1000000, 50, 30 },
	};
	size_t i;
	int l;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct spec s = { cases[i].arch, GGML_TYPE_F32, 256, cases[i].n_layer, 4, 1, 128, 512, 300,
		    true, true, false, strcmp(cases[i].arch, "gemma3") == 0, false, 1e-6f, 1000000.0f, 0,
		    cases[i].n_swa, 0, 0, 0, false, 0 };
		struct kvc_model m;
		struct gguf_file *f;
		char err[256];
		void *mem;

		f = open_spec(&s, &mem, NULL);
		test_cond(f != NULL && model_load(&m, f, err, sizeof err) == 0, "%s defaults: load", s.arch);
		if (f == NULL) {
			free(mem);
			continue;
		}
		test_cond(m.hp.n_swa == (cases[i].n_swa ? cases[i].n_swa : strcmp(s.arch, "gemma2") ? 0 : 4096),
		    "%s: window %d", s.arch, m.hp.n_swa);
		for (l = 0; l < 6; l++)
			test_cond(model_layer_swa(&m.hp, l) == (cases[i].swa[l] != 0), "%s: layer %d windowed", s.arch, l);
		test_cond((m.hp.n_swa == 0 || m.hp.rope_theta_swa == cases[i].theta_swa) &&
		    m.hp.attn_softcap == cases[i].ac && m.hp.final_softcap == cases[i].fc &&
		    fabsf(m.hp.attn_scale - 1 / sqrtf(128)) < 1e-9f, "%s: rope base, softcaps, scale", s.arch);
		model_free(&m);
		gguf_close(f);
		free(mem);
	}
}

/* ---- model_load refusals ---- */

static void extra_unknown(struct gguf_writer *w)
{
	add_tensor(w, "blk.0.attn_output.bias", GGML_TYPE_F32, 256, 1, 0.1, 0);
}
static void extra_scaling(struct gguf_writer *w) { gguf_w_str(w, "llama.rope.scaling.type", "longrope"); }

/* YaRN keys for yarn_arch: factor 4 over an original context of 4096, attn_factor 0.9 */
static const char *yarn_arch;
static void extra_yarn(struct gguf_writer *w)
{
	char k[4][96];
	for (int i = 0; i < 4; i++)
		snprintf(k[i], sizeof k[i], "%s.rope.scaling.%s", yarn_arch,
		    (const char *[]){ "type", "factor", "original_context_length", "attn_factor" }[i]);
	gguf_w_str(w, k[0], "yarn");
	gguf_w_f32(w, k[1], 4.0f);
	gguf_w_u32(w, k[2], 4096);
	gguf_w_f32(w, k[3], 0.9f);
}

/* YaRN on each RoPE layout: adjacent pairs (llama), NeoX with Q/K norms (qwen3), half rotated
 * (chatglm), windowed (gemma3); the ramp covers pairs 10..23 (base 1e4) or 6..16 (1e6) of 32. */
static void
yarn_checks(const struct spec *specs, size_t n_spec, const int32_t *tok)
{
	for (size_t si = 0; si < n_spec; si++) {
		struct spec s = specs[si];
		struct kvc_backend_params bp = { .n_threads = 2 };
		struct kvc_model m;
		struct ref_config rc = ref_of(&s);
		void *mem, *ctx = NULL;
		char err[256] = "";

		if (strstr(" llama qwen3 chatglm gemma3 ", s.arch) == NULL)
			continue;	/* the others' layouts are these */
		s.wtype = GGML_TYPE_F32;	/* a wrong blend or magnitude fails the float bound */
		s.rope_freqs = false;
		s.linear_scale = 0;
		yarn_arch = s.arch;
		struct gguf_file *f = open_spec(&s, &mem, extra_yarn);
		int r = f ? model_load(&m, f, err, sizeof err) : -1;
		double *ref = malloc((size_t)N_TOK * s.n_vocab * sizeof *ref), e = 1e9;
		float *lg = malloc((size_t)N_TOK * s.n_vocab * sizeof *lg);

		test_cond(r == 0 && m.hp.rope_yarn && fabsf(m.hp.rope_freq_scale - 0.25f) < 1e-7f &&
		    fabsf(m.hp.rope_mscale - 0.9f * (1 + 0.1f * logf(4))) < 1e-6f, "%s yarn: load %s", s.arch, err);
		rc.rope_freq_scale = 0.25;
		rc.yarn_orig_ctx = 4096;
		rc.yarn_attn_factor = 0.9;
		if (r == 0 && ref_forward(f, &rc, tok, N_TOK, ref) == 0 &&
		    kvc_backend_cpu.init(&ctx, &m, &bp, err, sizeof err) == 0) {
			e = run_vs_ref(ctx, &m, GGML_TYPE_F32, tok, ref, lg);
			kvc_backend_cpu.free(ctx);
		}
		printf("%-7s yarn  rel err %.2e\n", s.arch, e);
		test_cond(e <= TOL_F32, "%s yarn: %g %s", s.arch, e, err);
		if (r == 0)
			model_free(&m);
		free(ref), free(lg), free(mem);
		gguf_close(f);
	}
}
static void extra_longrope(struct gguf_writer *w)
{
	add_tensor(w, "rope_factors_long.weight", GGML_TYPE_F32, 16, 1, 0.1, 1.0);
}
static void extra_moe(struct gguf_writer *w)
{
	gguf_w_u32(w, "qwen2.expert_count", 8);	/* experts in a qwen2 file: not llama.cpp's */
}

static void
refusals(const struct spec *base)
{
	struct {
		const char *what;
		void (*extra)(struct gguf_writer *);
		const char *arch;
		enum gguf_dtype wtype;
		int rc;
		const char *needle;
	} cases[] = {
		{ "unknown tensor", extra_unknown, "llama", GGML_TYPE_F32, KVC_EUNSUPPORTED, "attn_output.bias" },
		{ "rope scaling", extra_scaling, "llama", GGML_TYPE_F32, KVC_EUNSUPPORTED, "longrope" },
		{ "moe", extra_moe, "qwen2", GGML_TYPE_F32, KVC_EUNSUPPORTED, "expert" },
		{ "architecture", NULL, "gemma", GGML_TYPE_F32, KVC_EUNSUPPORTED, "gemma" },
		{ "weight type", NULL, "llama", GGML_TYPE_TQ1_0, KVC_EUNSUPPORTED, "TQ1_0" },
		{ "qwen3 without q/k norms", NULL, "qwen3", GGML_TYPE_F32, KVC_EFORMAT, "attn_q_norm" },
		{ "phi3 LongRoPE", extra_longrope, "phi3", GGML_TYPE_F32, KVC_EUNSUPPORTED, "LongRoPE" },
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct spec s = *base;
		struct gguf_file *f;
		struct kvc_model m;
		char err[256] = "";
		void *mem;
		int rc;

		s.arch = cases[i].arch;
		s.wtype = cases[i].wtype;
		s.rope_freqs = false;
		s.linear_scale = 0;
		f = NULL;
		if (cases[i].wtype == GGML_TYPE_TQ1_0) {
			/* a type kvchat cannot compute with: the fixture writer cannot make it, so by hand */
			struct gguf_writer *w = gguf_writer_new();
			static uint8_t blocks[54 * 8];	/* 8 rows of one TQ1_0 block (54 bytes) */
			int64_t ne[2] = { 256, 8 };
			size_t len;

			gguf_w_str(w, "general.architecture", "llama");
			gguf_w_u32(w, "llama.embedding_length", 256);
			gguf_w_u32(w, "llama.block_count", 1);
			gguf_w_u32(w, "llama.feed_forward_length", 256);
			gguf_w_u32(w, "llama.attention.head_count", 4);
			gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
			gguf_w_tensor(w, "token_embd.weight", GGML_TYPE_TQ1_0, 2, ne, blocks, sizeof blocks);
			mem = NULL;
			if (gguf_w_to_mem(w, &mem, &len) == 0)
				gguf_open_mem(&f, mem, len, "tq1_0", err, sizeof err);
			gguf_writer_free(w);
		} else {
			f = open_spec(&s, &mem, cases[i].extra);
		}
		test_cond(f != NULL, "%s: fixture", cases[i].what);
		if (f == NULL) {
			free(mem);
			continue;
		}
		rc = model_load(&m, f, err, sizeof err);
		test_cond(rc == cases[i].rc && strstr(err, cases[i].needle) != NULL,
		    "%s: rc %d, message '%s'", cases[i].what, rc, err);
		if (rc == 0)
			model_free(&m);
		gguf_close(f);
		free(mem);
	}
}

/* Whether the command line (ARCH TYPE...) asks for spec s with weights t. */
static bool
chosen(const struct spec *s, enum gguf_dtype t, int argc, char **argv)
{
	if (strcmp(s->arch, argv[1]) != 0)
		return false;
	for (int i = 2; i < argc; i++)
		if (strcmp(gguf_dtype_name(t), argv[i]) == 0)
			return true;
	return false;
}

/*
 * test_forward [ARCH TYPE...]: with arguments, only that architecture with
 * those weight types (gguf_dtype_name's spelling), in the table
 * KVCHAT_KERNELS names (unset: every table the CPU runs), against the
 * reference and batch independence over 20 positions, nothing else: the
 * short run tests/e2e/test_neon_qemu.sh gives an emulated CPU. Without
 * arguments, everything.
 */
int
main(int argc, char **argv)
{
	static const enum gguf_dtype types[] = {
		GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
		GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
		GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
		/* the later formats (quant_iq.c) on the first two architectures only, to keep the test short */
		GGML_TYPE_Q2_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4, GGML_TYPE_IQ3_XXS,
		GGML_TYPE_IQ3_S, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M,
	};
	const size_t n_first_types = 12, n_iq_specs = 2;
	/* K-quant rows need n_in % 256 == 0: n_embd, q_dim and n_ff are multiples of 256 */
	static const struct spec specs[] = {
		/* GQA 8:2, untied, Llama 3.1 frequency factors, linear scaling */
		{ "llama", 0, 256, 2, 8, 2, 32, 512, 300, false, false, false, false, true,
		  1e-5f, 500000.0f, 2.0f, 0, 0, 0, 0, false, 0 },
		/* MQA 4:1, tied, biases */
		{ "qwen2", 0, 256, 2, 4, 1, 64, 512, 300, false, true, true, false, false,
		  1e-6f, 1000000.0f, 0, 0, 0, 0, 0, false, 0 },
		/* head size 128 != n_embd / n_head, Q/K norms, untied */
		{ "qwen3", 0, 256, 2, 4, 2, 128, 512, 300, true, false, false, true, false,
		  1e-6f, 1000000.0f, 0, 0, 0, 0, 0, false, 0 },
		/* MQA, head size 128 (q_dim 512 != n_embd), q/k norms, tied, window 5 in layer 0 of 2 */
		{ "gemma3", 0, 256, 2, 4, 1, 128, 512, 300, true, true, false, true, false,
		  1e-6f, 1000000.0f, 0, 5, 2, 0, 0, false, 0 },
		/* softcaps small enough to bend the scores and logits; default pattern: layer 0 windowed */
		{ "gemma2", 0, 256, 2, 4, 2, 128, 512, 300, true, true, false, false, false,
		  1e-6f, 10000.0f, 0, 5, 0, 3.0f, 10.0f, false, 0 },
		/* fused Q/K/V and gate+up, NeoX RoPE, MQA 4:1 */
		{ "phi3", 0, 256, 2, 4, 1, 64, 512, 300, false, false, false, false, false,
		  1e-5f, 10000.0f, 0, 0, 0, 0, 0, true, 0 },
		/* fused Q/K/V with bias, adjacent-pair RoPE on half of each head */
		{ "chatglm", 0, 256, 2, 4, 2, 64, 512, 300, false, false, true, false, false,
		  1e-5f, 10000.0f, 0, 0, 0, 0, 0, true, 32 },
		/* the same with post-norms */
		{ "glm4", 0, 256, 2, 4, 2, 64, 512, 300, false, false, true, false, false,
		  1e-5f, 10000.0f, 0, 0, 0, 0, 0, true, 32 },
		/* learned positions, LayerNorm, biases everywhere, fused Q/K/V, GELU MLP */
		{ "gpt2", 0, 256, 2, 4, 4, 64, 512, 300, false, false, true, false, false,
		  1e-5f, 10000.0f, 0, 0, 0, 0, 0, true, 0 },
	};
	int32_t tok[N_TOK];
	size_t si, ti;
	int i;
	bool only = argc > 1;
	const char *want = getenv("KVCHAT_KERNELS");	/* with arguments: that table only */

	if (only && want != NULL) {
		const struct kern *k;
		char err[160];
		test_cond(kern_find(want, &k, err, sizeof err) == 0, "KVCHAT_KERNELS: %s", err);
	}
	rng_state = 0x9E3779B97F4A7C15ULL;
	for (i = 0; i < N_TOK; i++)
		tok[i] = (int32_t)((rnd() + 1) * 150);

	for (si = 0; si < sizeof specs / sizeof specs[0]; si++) {
		for (ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
			struct spec s = specs[si];
			struct ref_config rc;
			struct kvc_model m;
			struct gguf_file *f;
			double *ref;
			float *lg;
			void *mem, *ctx = NULL;
			char err[256];
			double e32, e16, tol;

			if (ti >= n_first_types && si >= n_iq_specs)
				continue;
			if (only && !chosen(&s, types[ti], argc, argv))
				continue;
			s.wtype = types[ti];
			f = open_spec(&s, &mem, NULL);
			test_cond(f != NULL, "%s %s: fixture", s.arch, gguf_dtype_name(s.wtype));
			if (f == NULL) {
				free(mem);
				continue;
			}
			if (model_load(&m, f, err, sizeof err) != 0) {
				test_cond(0, "%s %s: model_load: %s", s.arch, gguf_dtype_name(s.wtype), err);
				gguf_close(f);
				free(mem);
				continue;
			}
			if (ti == 0)
				check_hparams(&m, &s);
			test_cond(fabsf(m.hp.rope_freq_scale - (s.linear_scale ? 1 / s.linear_scale : 1)) < 1e-7f,
			    "%s: rope scale %g", s.arch, m.hp.rope_freq_scale);

			rc = ref_of(&s);
			ref = malloc((size_t)N_TOK * s.n_vocab * sizeof *ref);
			lg = malloc((size_t)N_TOK * s.n_vocab * sizeof *lg);
			test_cond(ref_forward(f, &rc, tok, N_TOK, ref) == 0, "reference");

			/* every kernel table this CPU runs, against the same reference */
			for (int ki = 0; kern_list(ki) != NULL; ki++) {
				const struct kern *k = kern_list(ki);
				struct kvc_backend_params bp = { .n_threads = 2, .kernels = k->name };

				if (!kern_runs(k) || (only && want != NULL && strcmp(want, k->name) != 0))
					continue;
				test_cond(kvc_backend_cpu.init(&ctx, &m, &bp, err, sizeof err) == 0, "init: %s", err);
				e32 = run_vs_ref(ctx, &m, GGML_TYPE_F32, tok, ref, lg);
				e16 = run_vs_ref(ctx, &m, GGML_TYPE_F16, tok, ref, lg);
				kvc_backend_cpu.free(ctx);
				printf("%-7s %-4s %-6s  rel err F32 cache %.2e  F16 cache %.2e\n", s.arch,
				    gguf_dtype_name(s.wtype), k->name, e32, e16);
				tol = tol_weights(s.wtype);
				test_cond(e32 <= tol, "%s %s %s F32 cache: %g > %g", s.arch,
				    gguf_dtype_name(s.wtype), k->name, e32, tol);
				/* the cache's rounding and the activations' add up */
				test_cond(e16 <= tol + TOL_F16, "%s %s %s F16 cache: %g > %g", s.arch,
				    gguf_dtype_name(s.wtype), k->name, e16, tol + TOL_F16);
				/*
				 * qwen2: tied output, biases. Of the later formats only IQ4_XS (the
				 * kernels of quant_iq.h's types share one loop; test_quant_iq checks
				 * each type's batch independence): 1,536 positions of their kernels
				 * per type would triple the test's time.
				 */
				if (only)
					batch_independence(&m, k, 20);
				else if (si == 1 && (ti < n_first_types || s.wtype == GGML_TYPE_IQ4_XS))
					batch_independence(&m, k, 512);
			}
			/* the errors must be small because the paths agree, not because logits vanish */
			test_cond(fabs(ref[(size_t)(N_TOK - 1) * s.n_vocab]) < 1e3, "ref sane");

			if (s.wtype == GGML_TYPE_Q4_K && !only) {
				cache_contract(&m, tok, GGML_TYPE_F32);
				cache_contract(&m, tok, GGML_TYPE_F16);
				if (si == 0 || is_gemma(s.arch))
					long_prefill(&m, f, &rc);
			}
			free(ref);
			free(lg);
			model_free(&m);
			gguf_close(f);
			free(mem);
		}
	}
	if (only) {
		test_cond(test_passed + test_failed > 0, "%s: no such architecture or types", argv[1]);
		return test_done();
	}
	refusals(&specs[0]);
	gemma_defaults();
	yarn_checks(specs, sizeof specs / sizeof specs[0], tok);
	return test_done();
}
