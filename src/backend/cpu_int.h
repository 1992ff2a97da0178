/*
 * cpu_int.h: what the CPU backend's files share: its context (model,
 * scratch, thread pool, RoPE tables) and its KV caches. Internal to
 * src/backend; the rest of the program sees only kvc_backend_i.
 */
#ifndef KVC_CPU_INT_H
#define KVC_CPU_INT_H

#include "backend.h"

struct cpu_kv {
	int n_ctx;		/* most positions it may hold */
	int cap;		/* positions allocated */
	int n_valid;		/* positions [0, n_valid) hold data */
	enum gguf_dtype type;	/* GGML_TYPE_F16, GGML_TYPE_F32 or GGML_TYPE_Q8_0 */
	size_t row_bytes;	/* kv_dim elements of type (kvc_kv_row_bytes) */
	void **k, **v;		/* [n_layer] -> (cap, kv_dim) */
	struct cpu_kv *next;	/* list of the context's caches */
};

/* Small per-layer vectors, dequantised to float once at init. */
struct cpu_vecs {
	float *attn_norm, *ffn_norm;	/* (n_embd) */
	float *bq, *bk, *bv;		/* (q_dim), (kv_dim) x2, or NULL */
	float *q_norm, *k_norm;		/* (head_dim) or NULL */
	float *attn_post_norm, *ffn_post_norm;	/* gemma (n_embd), else NULL */
	float *attn_norm_b, *ffn_norm_b, *bo, *b_up, *b_down;	/* gpt2's biases, else NULL */
};

struct cpu_ctx {
	const struct kvc_model *m;
	struct kvc_hparams hp;
	int q_dim, kv_dim;		/* n_head * head_dim, n_head_kv * head_dim */
	struct tp_pool *pool;
	bool simd;			/* AVX2+FMA+F16C usable for attention */

	float *vec_mem;			/* backing store of vecs and out_norm */
	struct cpu_vecs *vecs;		/* [n_layer] */
	float *out_norm;		/* (n_embd) */
	float *out_norm_b;		/* gpt2: (n_embd), else NULL */
	double *inv_freq;		/* (rope_dim/2): freq_scale * theta^(-2i/d) / factor[i] */
	double *inv_freq_swa;		/* (rope_dim/2): the same for windowed layers */

	/* scratch for up to cap_tok tokens, token-major */
	int cap_tok;
	float *x;			/* (cap_tok, n_embd) residual stream */
	float *xb;			/* (cap_tok, max(n_embd, q_dim)) normed input / product out */
	float *q;			/* (cap_tok, q_dim) */
	float *k, *v;			/* (cap_tok, kv_dim) */
	float *att;			/* (cap_tok, q_dim) attention output */
	float *hb, *hb2;		/* (cap_tok, n_ff) */
	float *rope_cs;			/* (2, cap_tok, rope_dim/2, 2) cos, sin: global, windowed layers */
	void *xq;			/* (cap_tok) x q_act_bytes(act_in): int8 activations */
	int64_t act_in;			/* widest product input, rounded up to 32 elements */
	int cap_att;			/* positions the per-thread attention rows hold */
	size_t att_stride;		/* floats of att_s per thread (cpu.c's att_scratch) */
	float *att_s;			/* (n_threads, att_stride): scores and row blocks */
	float *att_o;			/* (n_threads, head_dim) accumulators */

	size_t kv_used;			/* bytes committed by all caches */
	struct cpu_kv *caches;
};

/* cpu_kv.c: the vtable's cache entries, and what the forward needs of them. */
int cpu_kv_create(void *ctx, int n_ctx, enum gguf_dtype kv_type, void **out, char *err,
    size_t errlen);
void cpu_kv_destroy(void *ctx, void *kvp);
size_t cpu_kv_bytes(void *ctx, void *kv);
int cpu_kv_read(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    void *dst, char *err, size_t errlen);
int cpu_kv_write(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    const void *src, char *err, size_t errlen);
int cpu_kv_shift(void *ctx, void *kvp, int p0, int n_drop, char *err, size_t errlen);
/* Make kv hold positions [0, n_pos): doubling, capped by n_ctx. */
int cpu_kv_reserve(struct cpu_ctx *c, struct cpu_kv *kv, int n_pos, char *err, size_t errlen);
/* Row pos of one layer's K or V (base) from n floats, in the cache's type. */
void cpu_kv_store_row(const struct cpu_kv *kv, void *base, int pos, const float *src, int n);

#endif
