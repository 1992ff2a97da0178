/*
 * cpu.c: the forward pass on the CPU.
 *
 * Per layer: RMSNorm -> Q/K/V products (one thread dispatch) -> biases,
 * qwen3 Q/K norms, RoPE, K/V stored into the cache -> attention over the
 * cache in place (threads split (token, head) pairs) -> output product ->
 * residual -> RMSNorm -> gate/up products with SwiGLU applied by the thread
 * that computed each row -> down product -> residual. Matrix products run
 * on the stored (possibly quantised) weights, the threads taking chunks of
 * the output rows; a batch of tokens shares every weight row read (prefill
 * is matrix x matrix). Every kernel comes from the table chosen at init
 * (c->k, src/kern). F32/F16/BF16 weights go through kern_matmul with
 * float activations. For the types q_act_supported accepts (Q8_0, Q4_0,
 * Q4_K, Q5_K, Q6_K) the input rows are first rounded to int8 per block of
 * 32 (act_prepare, once per product, shared by the products that read the
 * same input) and the threads run the integer kernels (kern_matmul_act):
 * 1.5-2.5x faster per core, for a small activation-rounding error bounded
 * in quant.h (tests/unit/test_forward.c derives what it does to the logits).
 * Where the table has a packed kernel for a matrix (kern_packs: Q8_0,
 * Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4, IQ4_XS in the avx2 and
 * avx512 tables), cpu_pack.c made a packed copy at init and the threads run the packed
 * kernel on it, each taking whole groups of 16 rows.
 *
 * Memory: scratch for a chunk of tokens is allocated when a larger chunk
 * (or a longer context) first appears, never per token. Prefill runs in
 * chunks of at most CPU_CHUNK tokens to bound that scratch. A KV cache holds,
 * per layer, K and V as (cap, n_head_kv * head_dim) rows of F16, F32 or
 * Q8_0 blocks, grown by doubling up to n_ctx. Attention over F16/F32
 * caches runs in tiles of queries that share a KV head (the table's
 * att_tile: each cache row read once per tile, not once per query), the threads taking runs of tiles of equal work;
 * over Q8_0 rows one query at a time (the table's kvq8 kernels). The per-token steps
 * between the products (norms, RoPE, K/V stores, residuals) are in
 * cpu_rows.c, threads splitting the tokens;
 * what differs between architectures (RoPE, activations, norms, softcaps)
 * in cpu_arch.c. Gemma: embeddings scaled, post-norms, GELU gate, windowed
 * layers (model_layer_swa) attending to the last hp.n_swa positions with
 * their own RoPE: their caches are bounded (cpu_kv.c keeps the last
 * positions, mapped to slots; the window is applied as a mask over them).
 * gpt2: learned positions, LayerNorm, biases, GELU MLP. Mixture-of-experts
 * layers run their FFN in cpu_moe.c; the products themselves are cpu_mm.c's.
 */
#include "backend.h"
#include "cpu_arch.h"
#include "cpu_int.h"
#include "kv_shift.h"
#include "quant/quant.h"
#include "threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a bounded windowed layer makes room for one chunk at a time */
_Static_assert(CPU_CHUNK <= KVC_KV_WINDOW_SLACK, "CPU_CHUNK exceeds the windowed caches' slack");

/* ---- attention ---- */

struct att_job {
	struct cpu_ctx *c;
	struct cpu_kv *const *kv;	/* [n_tok]: row t's cache */
	const int *pos;			/* [n_tok]: row t's position */
	int layer;
	int n_tok;
};

/* Most queries in one attention tile (kern_att_tile), and its tokens x heads shape. */
#define ATT_TILE 32

static int
att_heads_per_tile(const struct kvc_hparams *hp, int n_tok, int nth)
{
	int group = hp->n_head / hp->n_head_kv;

	/* whole groups, unless that leaves threads without a tile (decode) */
	return group <= 64 && n_tok * hp->n_head_kv >= nth ? group : 1;
}

/* Per-thread floats of att_s: each tile query's scores, and two row blocks. */
static size_t
att_scratch(const struct kvc_hparams *hp, int cap)
{
	int group = hp->n_head / hp->n_head_kv, nq = group > ATT_TILE ? group : ATT_TILE;

	return (size_t)nq * ((size_t)cap + KERN_ATT_PB) + kern_att_buf_floats(hp->head_dim);
}

/* Work of token t's query: the positions it reads, and a fixed part. */
static int64_t
att_cost(const struct att_job *j, int t, int win)
{
	int n_pos = j->pos[t] + 1;

	return (win > 0 && n_pos > win ? win : n_pos) + 32;
}

/*
 * The thread that runs tile it (of n_ht per tb tokens): the tiles cut into
 * nth runs of about equal work, in order. Causal tiles grow with their
 * position, so equal counts of tiles left the first thread of two waiting
 * for the second; which thread runs a tile changes no result.
 */
static int
att_owner(const struct att_job *j, int it, int n_ht, int tb, int win, int nth)
{
	int64_t before = 0, total = 0, mine = 0;
	int t;

	if (nth == 1)
		return 0;
	for (t = 0; t < j->n_tok; t++) {
		int64_t w = att_cost(j, t, win);

		total += w;
		if (t < it / n_ht * tb)
			before += w;
		else if (t < (it / n_ht + 1) * tb)
			mine += w;
	}
	total *= n_ht;
	before = before * n_ht + mine * (it % n_ht);
	return (int)((before + mine / 2) * nth / total);
}

/*
 * F16/F32 caches: tiles of up to ATT_TILE queries (tokens x heads of one KV
 * head) read each cache row once (kern_att_tile); threads split the tiles.
 */
static void
att_tiles(struct att_job *j, int ith, int nth)
{
	struct cpu_ctx *c = j->c;
	const struct kvc_hparams *hp = &c->hp;
	int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv, t, it;
	int hs = att_heads_per_tile(hp, j->n_tok, nth), tb = hs >= ATT_TILE ? 1 : ATT_TILE / hs;
	int n_tt, n_ht = hp->n_head / hs, n_items;
	int win = model_layer_swa(hp, j->layer) ? hp->n_swa : 0;
	float *scr = c->att_s + (size_t)ith * c->att_stride;
	const float *q[64], *sinks = c->vecs[j->layer].sinks;
	float *o[64], sink[64];
	int lo[64], hi[64];

	/* a tile reads one cache: rows of several sequences (forward_multi) get a tile each */
	for (t = 1; t < j->n_tok; t++)
		if (j->kv[t] != j->kv[0])
			tb = 1;
	n_tt = (j->n_tok + tb - 1) / tb;
	n_items = n_tt * n_ht;
	for (it = 0; it < n_items; it++) {
		int tt = it / n_ht, h0 = it % n_ht * hs, h, nq = 0, g = h0 / group;
		const struct cpu_kv *kv;
		bool f16;

		if (att_owner(j, it, n_ht, tb, win, nth) != ith)
			continue;
		kv = j->kv[tt * tb];
		f16 = kv->type == GGML_TYPE_F16;
		size_t esz = f16 ? 2 : 4;
		/* rows are read at slots: position p of a bounded layer sits at p + kb */
		int kb = cpu_kv_slot(kv, j->layer, 0);
		struct kern_att_tile at = {
			(const char *)kv->k[j->layer] + (size_t)g * hd * esz,
			(const char *)kv->v[j->layer] + (size_t)g * hd * esz,
			kv->row_bytes, f16, hd, 0, q, o, lo, hi, hp->attn_scale,
			hp->attn_softcap, scr, (size_t)c->cap_att + KERN_ATT_PB,
			scr + (att_scratch(hp, c->cap_att) - kern_att_buf_floats(hd)),
			sinks != NULL ? sink : NULL,
		};

		for (t = tt * tb; t < j->n_tok && t < (tt + 1) * tb; t++)
			for (h = h0; h < h0 + hs; h++, nq++) {
				int n_pos = j->pos[t] + 1;

				q[nq] = c->q + (size_t)t * c->q_dim + (size_t)h * hd;
				sink[nq] = sinks != NULL ? sinks[h] : 0;
				o[nq] = c->att + (size_t)t * c->q_dim + (size_t)h * hd;
				/* in slots; a query's sums run in position order from lo
				 * whatever the offset, so bounded and whole caches agree bitwise */
				lo[nq] = (win > 0 && n_pos > win ? n_pos - win : 0) + kb;
				hi[nq] = n_pos + kb;
			}
		at.nq = nq;
		c->kern->att_tile(&at);
	}
}

/* Causal grouped-query attention for (token, head) pairs, reading the cache in place. */
static void
att_run(void *arg, int ith, int nth)
{
	struct att_job *j = arg;
	struct cpu_ctx *c = j->c;
	const struct kvc_hparams *hp = &c->hp;
	int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
	int n_items = j->n_tok * hp->n_head, it;
	int i0 = (int)((int64_t)n_items * ith / nth), i1 = (int)((int64_t)n_items * (ith + 1) / nth);
	float *s = c->att_s + (size_t)ith * c->att_stride;
	float *o = c->att_o + (size_t)ith * hd;
	const float scale = hp->attn_scale, cap = hp->attn_softcap, *sk = c->vecs[j->layer].sinks;
	/* a windowed layer sees keys p with (query position - p) < n_swa */
	int win = model_layer_swa(hp, j->layer) ? hp->n_swa : 0;

	/* F16/F32 caches attend in tiles; Q8_0 caches one query at a time, below, in place */
	if (j->kv[0]->type != GGML_TYPE_Q8_0) {
		att_tiles(j, ith, nth);
		return;
	}
	for (it = i0; it < i1; it++) {
		int t = it / hp->n_head, h = it % hp->n_head, n_pos = j->pos[t] + 1, p;
		int p0 = win > 0 && n_pos > win ? n_pos - win : 0;
		const struct cpu_kv *kv = j->kv[t];
		const char *K = kv->k[j->layer], *V = kv->v[j->layer];
		size_t rb = kv->row_bytes;
		int kb = cpu_kv_slot(kv, j->layer, 0);	/* -(position in slot 0): bounded layers */
		int e0 = (h / group) * hd;	/* the head's first element */
		const float *q = c->q + (size_t)t * c->q_dim + (size_t)h * hd;
		float mx = -INFINITY, sum = 0;

		for (p = p0; p < n_pos; p++) {
			float d = c->kern->kvq8_dot(K + (size_t)(p + kb) * rb, e0, q, hd);

			s[p] = cap > 0 ? cap * tanhf(d * scale / cap) : d * scale;
			if (s[p] > mx)
				mx = s[p];
		}
		if (sk != NULL && sk[h] > mx)	/* gpt-oss: one more score, no value row */
			mx = sk[h];
		for (p = p0; p < n_pos; p++) {
			s[p] = expf(s[p] - mx);
			sum += s[p];
		}
		if (sk != NULL)
			sum += expf(sk[h] - mx);
		memset(o, 0, (size_t)hd * sizeof *o);
		for (p = p0; p < n_pos; p++) {
			c->kern->kvq8_axpy(o, s[p] / sum, V + (size_t)(p + kb) * rb, e0, hd);
		}
		memcpy(c->att + (size_t)t * c->q_dim + (size_t)h * hd, o, (size_t)hd * sizeof *o);
	}
}

/* ---- init ---- */

/* *dst = w as floats carved from *mem, or NULL when w is absent. */
static void
dequant_vec(const struct kvc_weight *w, float **dst, float **mem)
{
	if (w->data == NULL) {
		*dst = NULL;
		return;
	}
	*dst = *mem;
	q_dequant_row(w->type, w->data, *dst, w->n_in);
	*mem += w->n_in;
}

int
cpu_init(void **out, const struct kvc_model *m, const struct kvc_backend_params *p,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &m->hp;
	struct cpu_ctx *c;
	size_t n_vec = 0;
	float *mem;
	int il, rc, n_threads = p && p->n_threads > 0 ? p->n_threads : kvc_n_cores();

	*out = NULL;
	c = calloc(1, sizeof *c);
	if (c == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	c->m = m;
	c->hp = *hp;
	c->kv_whole = p && p->kv_whole;
	c->interrupt = p ? p->interrupt : NULL;
	c->q_dim = hp->n_head * hp->head_dim;
	c->kv_dim = hp->n_head_kv * hp->head_dim;
	/* inputs of products: n_embd (Q/K/V, gate/up, output), q_dim (wo), n_ff (down) */
	c->act_in = hp->n_embd > c->q_dim ? hp->n_embd : c->q_dim;
	c->ff_max = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp;
	if (c->ff_max > c->act_in)
		c->act_in = c->ff_max;
	c->act_in = (c->act_in + 31) / 32 * 32;
	if ((rc = kern_find(p ? p->kernels : NULL, &c->kern, err, errlen))) {
		free(c);
		return rc;
	}
	if ((rc = tp_new(&c->pool, n_threads, err, errlen))) {
		free(c);
		return rc;
	}
	if ((rc = cpu_pack_init(c, p, err, errlen))) {
		cpu_free(c);
		return rc;
	}

	for (il = 0; il < hp->n_layer; il++) {
		const struct kvc_layer_weights *w = &m->layers[il];

		n_vec += 2 * (size_t)hp->n_embd;
		if (w->bq.data)
			n_vec += (size_t)c->q_dim + 2 * (size_t)c->kv_dim;
		if (w->q_norm.data)
			n_vec += 2 * (size_t)hp->head_dim;
		if (w->attn_post_norm.data)
			n_vec += 2 * (size_t)hp->n_embd;
		if (w->attn_norm_b.data)	/* gpt2: two norm biases, bo, b_down, b_up */
			n_vec += 4 * (size_t)hp->n_embd + (size_t)hp->n_ff;
		else if (w->bo.data)	/* gpt-oss: bo, and the sinks */
			n_vec += (size_t)hp->n_embd;
		if (w->attn_sinks.data)
			n_vec += (size_t)hp->n_head;
	}
	n_vec += 2 * (size_t)hp->n_embd;
	c->vec_mem = malloc(n_vec * sizeof(float));
	/* model_load guarantees positive sizes; the casts tell the compiler so */
	c->vecs = calloc((unsigned)hp->n_layer, sizeof *c->vecs);
	/* one spare element: gpt2 has no RoPE (rope_dim 0) */
	c->inv_freq = malloc((unsigned)(hp->rope_dim / 2 + 1) * sizeof *c->inv_freq);
	c->inv_freq_swa = malloc((unsigned)(hp->rope_dim / 2 + 1) * sizeof *c->inv_freq);
	if (c->vec_mem == NULL || c->vecs == NULL || c->inv_freq == NULL || c->inv_freq_swa == NULL) {
		cpu_free(c);
		kvc_err(err, errlen, "out of memory for model vectors");
		return KVC_ENOMEM;
	}
	mem = c->vec_mem;
	for (il = 0; il < hp->n_layer; il++) {
		const struct kvc_layer_weights *w = &m->layers[il];
		struct cpu_vecs *v = &c->vecs[il];

		dequant_vec(&w->attn_norm, &v->attn_norm, &mem);
		dequant_vec(&w->ffn_norm, &v->ffn_norm, &mem);
		dequant_vec(&w->bq, &v->bq, &mem);
		dequant_vec(&w->bk, &v->bk, &mem);
		dequant_vec(&w->bv, &v->bv, &mem);
		dequant_vec(&w->q_norm, &v->q_norm, &mem);
		dequant_vec(&w->k_norm, &v->k_norm, &mem);
		dequant_vec(&w->attn_post_norm, &v->attn_post_norm, &mem);
		dequant_vec(&w->ffn_post_norm, &v->ffn_post_norm, &mem);
		dequant_vec(&w->attn_norm_b, &v->attn_norm_b, &mem);
		dequant_vec(&w->ffn_norm_b, &v->ffn_norm_b, &mem);
		dequant_vec(&w->bo, &v->bo, &mem);
		dequant_vec(&w->b_up, &v->b_up, &mem);
		dequant_vec(&w->b_down, &v->b_down, &mem);
		dequant_vec(&w->attn_sinks, &v->sinks, &mem);
	}
	dequant_vec(&m->output_norm, &c->out_norm, &mem);
	dequant_vec(&m->output_norm_b, &c->out_norm_b, &mem);
	cpu_rope_freqs(c->inv_freq, hp->rope_dim, hp->rope_theta, hp->rope_freq_scale, &m->rope_freqs);
	if (hp->n_swa > 0)
		cpu_rope_freqs(c->inv_freq_swa, hp->rope_dim, hp->rope_theta_swa,
		    hp->rope_freq_scale_swa, NULL);
	else
		memcpy(c->inv_freq_swa, c->inv_freq, (size_t)(hp->rope_dim / 2) * sizeof *c->inv_freq);
	if (hp->rope_yarn) {
		cpu_rope_yarn(c->inv_freq, hp, hp->rope_freq_scale);
		if (hp->n_swa > 0)
			cpu_rope_yarn(c->inv_freq_swa, hp, hp->rope_freq_scale_swa);
		else
			memcpy(c->inv_freq_swa, c->inv_freq, (size_t)(hp->rope_dim / 2) * sizeof *c->inv_freq);
	}
	if (p && p->progress)
		p->progress(p->progress_arg, m->weight_bytes, m->weight_bytes);
	*out = c;
	return 0;
}

static void
free_scratch(struct cpu_ctx *c)
{
	free(c->x);
	free(c->xb);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->hb);
	free(c->hb2);
	free(c->rope_cs);
	free(c->xq);
	c->x = c->xb = c->q = c->k = c->v = c->att = c->hb = c->hb2 = c->rope_cs = NULL;
	c->xq = NULL;
	c->cap_tok = 0;
}

void
cpu_free(void *ctx)
{
	struct cpu_ctx *c = ctx;

	if (c == NULL)
		return;
	tp_free(c->pool);
	cpu_pack_free(c);
	free_scratch(c);
	cpu_moe_free(c);
	free(c->att_s);
	free(c->att_o);
	free(c->vec_mem);
	free(c->vecs);
	free(c->inv_freq);
	free(c->inv_freq_swa);
	/* caches still alive belong to their owners; they are only unlinked */
	free(c);
}

/*
 * n floats of scratch starting on a cache line: a product's activations
 * (xb, att, hb) are then read by the float prefill kernels in place with
 * aligned loads, rows of a multiple of 16 floats each starting on a line,
 * where malloc's 16-byte alignment made every 512-bit load span two lines
 * (src/kern's rows_f16p copied them first; docs/BENCHMARKS.md,
 * "2026-11-30: F16/BF16 prefill").
 */
static float *
scratch_floats(size_t n)
{
	return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
}

int
cpu_reserve_scratch(struct cpu_ctx *c, int n_tok, int n_pos, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->hp;
	int nth = tp_size(c->pool);

	if (n_tok > c->cap_tok) {
		size_t t = (size_t)n_tok;
		int wide = hp->n_embd > c->q_dim ? hp->n_embd : c->q_dim;

		free_scratch(c);
		c->x = scratch_floats(t * hp->n_embd);
		c->xb = scratch_floats(t * wide);
		c->q = scratch_floats(t * c->q_dim);
		c->k = scratch_floats(t * c->kv_dim);
		c->v = scratch_floats(t * c->kv_dim);
		c->att = scratch_floats(t * c->q_dim);
		c->hb = scratch_floats(t * c->ff_max);
		c->hb2 = scratch_floats(t * c->ff_max);
		c->rope_cs = malloc(2 * t * (size_t)(hp->rope_dim + 2) * sizeof(float));
		c->xq = malloc(t * q_act_bytes(c->act_in));
		if (!c->x || !c->xb || !c->q || !c->k || !c->v || !c->att || !c->hb ||
		    !c->hb2 || !c->rope_cs || !c->xq) {
			free_scratch(c);
			kvc_err(err, errlen, "out of memory for a batch of %d tokens", n_tok);
			return KVC_ENOMEM;
		}
		c->cap_tok = n_tok;
	}
	if (cpu_moe_reserve(c, n_tok, err, errlen))
		return KVC_ENOMEM;
	if (c->att_o == NULL) {
		c->att_o = malloc((size_t)nth * hp->head_dim * sizeof(float));
		if (c->att_o == NULL) {
			kvc_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
	}
	if (n_pos > c->cap_att) {
		int cap = c->cap_att ? c->cap_att : 256;
		float *s;

		while (cap < n_pos)
			cap = cap > INT32_MAX / 2 ? n_pos : cap * 2;
		s = realloc(c->att_s, (size_t)nth * att_scratch(hp, cap) * sizeof(float));
		if (s == NULL) {
			kvc_err(err, errlen, "out of memory for attention over %d positions", n_pos);
			return KVC_ENOMEM;
		}
		c->att_s = s;
		c->cap_att = cap;
		c->att_stride = att_scratch(hp, cap);
	}
	return 0;
}

/* ---- forward ---- */

/* Embeddings of tok[0..n) into x, and the RoPE cos/sin of their positions pos[0..n). */
static void
embed_chunk(struct cpu_ctx *c, const int32_t *tok, const int *pos, int n)
{
	const struct kvc_model *m = c->m;
	const struct kvc_hparams *hp = &c->hp;
	int E = hp->n_embd, half = hp->rope_dim / 2, t, i, sw;

	for (t = 0; t < n; t++) {
		float *x = c->x + (size_t)t * E;

		q_dequant_row(m->tok_embd.type, cpu_pack_embd_row(c, tok[t]), x, E);
		if (hp->embd_scale != 1.0f)
			for (i = 0; i < E; i++)
				x[i] *= hp->embd_scale;
		if (m->pos_embd.data != NULL) {
			/* gpt2: the learned position's row, through xb (free until the first norm) */
			float *p = c->xb + (size_t)t * E;

			q_dequant_row(m->pos_embd.type, (const char *)m->pos_embd.data +
			    (size_t)pos[t] * m->pos_embd.row_bytes, p, E);
			for (i = 0; i < E; i++)
				x[i] += p[i];
		}
		for (sw = 0; sw < 2; sw++) {
			const double *f = sw ? c->inv_freq_swa : c->inv_freq;
			float *cs = c->rope_cs + ((size_t)sw * c->cap_tok + t) * hp->rope_dim;

			for (i = 0; i < half; i++) {
				double a = (double)pos[t] * f[i];

				/* YaRN scales both by its magnitude factor (1 otherwise) */
				cs[2 * i] = (float)(cos(a) * hp->rope_mscale);
				cs[2 * i + 1] = (float)(sin(a) * hp->rope_mscale);
			}
		}
	}
}

int
cpu_forward_rows(struct cpu_ctx *c, struct cpu_kv *const *kv, const int32_t *tok, const int *pos,
    int n, float *out, int lo)
{
	const struct kvc_model *m = c->m;
	const struct kvc_hparams *hp = &c->hp;
	int E = hp->n_embd, t, il;

	cpu_pack_hold(c, true);
	embed_chunk(c, tok, pos, n);
	cpu_rows_residual(c, n, false, NULL, NULL, c->vecs[0].attn_norm, c->vecs[0].attn_norm_b);
	for (il = 0; il < hp->n_layer; il++) {
		const struct kvc_layer_weights *w = &m->layers[il];
		const struct cpu_vecs *v = &c->vecs[il], *vn = il + 1 < hp->n_layer ? v + 1 : NULL;
		struct mm_job j;
		struct att_job aj = { c, kv, pos, il, n };

		/* xb: the normed input */
		j = (struct mm_job){ c->xb, { { &w->wq, c->q }, { &w->wk, c->k },
		    { &w->wv, c->v } }, 3, n, false, false, 0, NULL, { NULL } };
		cpu_matmul(c, &j);
		cpu_rows_qkv(c, kv, pos, il, n);

		tp_run(c->pool, att_run, &aj);	/* gpt-oss's sinks inside its softmax */

		j = (struct mm_job){ c->att, { { &w->wo, c->xb } }, 1, n, false, false, 0, NULL, { NULL } };
		cpu_matmul(c, &j);
		cpu_rows_residual(c, n, true, v->bo, v->attn_post_norm, v->ffn_norm, v->ffn_norm_b);

		if (w->gate_inp.data != NULL) {	/* experts (glm4moe's first layers are dense) */
			if (cpu_moe_ffn(c, il, n) != KVC_OK) {	/* xb in, xb out */
				cpu_pack_hold(c, false);
				return KVC_EINTR;
			}
			cpu_rows_residual(c, n, true, NULL, v->ffn_post_norm,
			    vn ? vn->attn_norm : NULL, vn ? vn->attn_norm_b : NULL);
			continue;
		}
		if (hp->ffn_plain) {
			/* gpt2: GELU(up x + b_up), no gate */
			j = (struct mm_job){ c->xb, { { &w->w_up, c->hb } }, 1, n, false, false, 0, NULL, { NULL } };
			cpu_matmul(c, &j);
			for (t = 0; t < n; t++)
				cpu_gelu_bias(c->kern, c->hb + (size_t)t * hp->n_ff, v->b_up, hp->n_ff);
		} else {
			j = (struct mm_job){ c->xb, { { &w->w_gate, c->hb }, { &w->w_up, c->hb2 } },
			    2, n, true, hp->ffn_gelu, 0, NULL, { NULL } };
			cpu_matmul(c, &j);
		}
		j = (struct mm_job){ c->hb, { { &w->w_down, c->xb } }, 1, n, false, false, 0, NULL, { NULL } };
		cpu_matmul(c, &j);
		/* and the next layer's input norm, by the same thread */
		cpu_rows_residual(c, n, true, v->b_down, v->ffn_post_norm,
		    vn ? vn->attn_norm : NULL, vn ? vn->attn_norm_b : NULL);
	}

	if (out != NULL && lo < n) {
		struct mm_job j;

		for (t = lo; t < n; t++)
			cpu_norm(c, c->xb + (size_t)(t - lo) * E, c->x + (size_t)t * E, c->out_norm,
			    c->out_norm_b);
		j = (struct mm_job){ c->xb, { { &m->output, out } }, 1, n - lo, false, false, 0, NULL, { NULL } };
		cpu_matmul(c, &j);
		if (hp->final_softcap > 0)
			cpu_softcap(out, (size_t)(n - lo) * hp->n_vocab, hp->final_softcap);
	}
	cpu_pack_hold(c, false);
	return KVC_OK;
}

int
cpu_forward(void *ctx, void *kvp, const int32_t *tokens, int n, int pos0, float *logits,
    bool all_logits, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp, *kvs[CPU_CHUNK];
	int i, rc, done, pos[CPU_CHUNK];

	if ((rc = kvc_backend_forward_check(n, pos0, kv->n_valid, kv->n_ctx, err, errlen)) != KVC_OK)
		return rc;
	if (c->m->pos_embd.data != NULL && pos0 + n > c->m->pos_embd.n_out) {
		kvc_err(err, errlen, "position %d is past the model's %lld learned positions",
		    pos0 + n - 1, (long long)c->m->pos_embd.n_out);
		return KVC_ERANGE;
	}
	for (i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->hp.n_vocab) {
			kvc_err(err, errlen, "token id %d out of range (vocabulary %d)",
			    tokens[i], c->hp.n_vocab);
			return KVC_EINVAL;
		}
	if ((rc = cpu_kv_prepare(c, kv, pos0, n, err, errlen)) ||
	    (rc = cpu_reserve_scratch(c, n < CPU_CHUNK ? n : CPU_CHUNK, pos0 + n, err, errlen)))
		return rc;
	for (i = 0; i < CPU_CHUNK; i++)
		kvs[i] = kv;

	kv->n_valid = pos0;	/* what lies past pos0 is being replaced */
	/* a prefill's: its first pass may pack many experts (cpu_pack_experts) */
	c->fwd_stoppable = c->interrupt != NULL && n > 1 && !(logits != NULL && all_logits);
	for (done = 0; done < n; ) {
		int nc = n - done < CPU_CHUNK ? n - done : CPU_CHUNK;
		float *out = NULL;
		int lo = nc;

		if (logits != NULL && all_logits) {
			out = logits + (size_t)done * c->hp.n_vocab;
			lo = 0;
		} else if (logits != NULL && done + nc == n) {
			out = logits;
			lo = nc - 1;
		}
		cpu_kv_room(c, kv, pos0 + done, nc);
		for (i = 0; i < nc; i++)
			pos[i] = pos0 + done + i;
		if (cpu_forward_rows(c, kvs, tokens + done, pos, nc, out, lo) != KVC_OK) {
			/* none of this call's positions count: the caller computes them again */
			c->fwd_stoppable = false;
			kv->n_valid = pos0;
			kvc_err(err, errlen, "interrupted while packing the experts the prompt chose");
			return KVC_EINTR;
		}
		done += nc;
		kv->n_valid = pos0 + done;
	}
	c->fwd_stoppable = false;
	return 0;
}

void
cpu_describe(void *ctx, struct kvc_buf *out)
{
	struct cpu_ctx *c = ctx;
	const struct cpu_kv *kv;
	int n = 0;

	for (kv = c->caches; kv != NULL; kv = kv->next)
		n++;
	kvc_buf_printf(out, "backend cpu: %d threads, kernels %s (int8 activations for "
	    "Q8_0/Q4_0/Q4_K/Q5_K/Q6_K)\n", tp_size(c->pool), c->kern->name);
	kvc_buf_printf(out, "weights: %.1f MiB read per token (mapped from the file)\n",
	    c->m->weight_bytes / 1048576.0);
	if (c->n_packs > 0)
		kvc_buf_printf(out, "packed: %d Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q5_K/Q6_K/IQ4_NL/MXFP4/IQ4_XS matrices, "
		    "%.1f MiB (rows side by side for the packed kernel%s)\n", c->n_packs, c->pack_bytes / 1048576.0,
		    c->pack_released ? "; their file pages handed back" : "");
	if (c->n_xtotal > 0)
		kvc_buf_printf(out, "experts: %d of %d packed so far (%s)\n",
		    __atomic_load_n(&c->n_xready, __ATOMIC_ACQUIRE), c->n_xtotal,	/* the thread packing ahead adds */
		    c->xahead_on ? "ahead, while idle, or when a token first chooses one" :
		    "each when a token first chooses it");
	if (c->experts_mapped)
		kvc_buf_printf(out, "experts: left mapped from the file (packed, they would not fit in memory)\n");
	kvc_buf_printf(out, "KV caches: %d, %.1f MiB committed\n", n, c->kv_used / 1048576.0);
	cpu_kv_describe(c, out);
}
