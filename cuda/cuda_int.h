/*
 * cuda_int.h: what the CUDA backend's files share (not a public header:
 * only cuda/*.cu and their tests include it). backend_cuda.cu is the
 * vtable, uploads and caches; layers.cu the forward's order of kernels
 * (and its scratch, the decode graph); matmul.cu the products of the
 * generic and prefill paths (block decoding, F16 matvec, cuBLAS);
 * cuda_err.cu error reporting; mv_i8.cu the
 * int8 matrix-vector kernels of decode and the fused steps around them;
 * attention.cu attention over the cache (flash-decoding, short
 * prefills, forward_multi's rows); attn_prefill.cu long prefills'
 * attention over tiles of queries x keys; multi.cu forward_multi (one
 * decode step of several sequences); launch_plan.c (launch_plan.h) the
 * host-side choices, plain C so that the CPU tests run them without nvcc.
 */
#ifndef KVC_CUDA_INT_H
#define KVC_CUDA_INT_H

extern "C" {
#include "backend/backend.h"
#include "quant/quant.h"
}

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "launch_plan.h"
#include "support.h"

/* Record the failing call with file:line and return an error, never abort. */
#define CUDA_CHECK(call, err, errlen) do {					\
	cudaError_t e_ = (call);						\
	if (e_ != cudaSuccess) {						\
		kvc_err((err), (errlen), "cuda: %s failed at %s:%d: %s",	\
		    #call, __FILE__, __LINE__, cudaGetErrorString(e_));		\
		return e_ == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;	\
	}									\
} while (0)
#define CUBLAS_CHECK(call, err, errlen) do {					\
	cublasStatus_t s_ = (call);						\
	if (s_ != CUBLAS_STATUS_SUCCESS) {					\
		kvc_err((err), (errlen), "cublas: %s failed at %s:%d: status %d", \
		    #call, __FILE__, __LINE__, (int)s_);			\
		return KVC_EIO;							\
	}									\
} while (0)

#define CHUNK 2048		/* tokens per prefill step (bounds the scratch) */

/*
 * After a kernel launch in a function with rc, c, err and errlen: return
 * cu_launched's error, naming the kernel.
 */
#define LAUNCHED(kernel) do {							\
	if ((rc = cu_launched(c, (kernel), err, errlen)) != KVC_OK)		\
		return rc;							\
} while (0)

/*
 * One token's x in blocks of 32, as the int8 kernels read it: scale d =
 * max|x| / 127, q = x / d rounded to nearest, sum s = d * (sum of the 32
 * q), the sum of the rounded x (the weights' offsets must see the x the
 * levels see, or Q4_1/Q5_1/Q4_K/Q5_K's offset terms do not cancel: as the
 * CPU's q_act_prepare). 40 bytes, so q is 4-byte aligned for dp4a.
 */
struct xq8 {
	float d, s;
	int8_t q[32];
};

/* A weight on the device, in its file type. */
struct dweight {
	const void *d;		/* device bytes; NULL if absent */
	int type;		/* enum gguf_dtype */
	int64_t n_in, n_out;
	size_t row_bytes;
};

struct dlayer {
	float *attn_norm, *ffn_norm;		/* (n_embd) f32 */
	float *bq, *bk, *bv;			/* biases or NULL */
	float *q_norm, *k_norm;			/* (head_dim) or NULL */
	float *attn_post_norm, *ffn_post_norm;	/* gemma, glm4: (n_embd) or NULL */
	float *attn_norm_b, *ffn_norm_b;	/* gpt2 LayerNorm biases (n_embd) or NULL */
	float *bo, *b_up, *b_down;		/* gpt2 product biases (n_embd), (n_ff), (n_embd) or NULL */
	bool swa;				/* model_layer_swa: attends to the last n_swa positions */
	struct dweight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cu_multi;

struct cuda_ctx {
	const struct kvc_model *m;
	int dev;
	int n_sm;				/* the device's multiprocessors (launch shapes) */
	cublasHandle_t blas;
	cudaStream_t stream;
	struct dweight tok_embd, output;
	float *output_norm;
	float *output_norm_b;			/* gpt2: (n_embd) or NULL */
	struct dweight pos_embd;		/* gpt2: learned positions (n_ctx_train rows), or absent */
	double *inv_freq_swa;			/* (rope_dim/2): the windowed layers' (gemma's local base) */
	int *d_pos;				/* (1) first position of the running forward */
	double *inv_freq;			/* (rope_dim/2): freq_scale * theta^(-2i/d) / factor[i] */
	struct dlayer *layers;
	size_t weight_bytes;
	size_t kv_used;				/* bytes committed by all caches */
	int64_t max_n_in;			/* widest matrix input (matvec shared memory) */
	size_t ws_elems;			/* wscratch capacity: largest quantised layer matrix, elements */
	bool sync_check;			/* KVCHAT_CUDA_SYNC=1: synchronise and check after every launch */
	/* decode as one CUDA graph per step (launch_plan.h's graph_key says when to recapture) */
	bool use_graph;				/* graph_wanted: KVCHAT_CUDA_GRAPH != 0 and no sync_check */
	uint64_t gen;				/* last generation number handed out (caches, scratch) */
	uint64_t scratch_gen;			/* generation of the scratch and logits buffers */
	struct graph_key graph_key;		/* what graph_exec was captured for */
	cudaGraphExec_t graph_exec;		/* the decode step, or NULL */
	unsigned long graph_captures, graph_replays;
	int *h_in;				/* (2) pinned: the step's token and position */
	/* scratch, grown to the largest batch seen (at most CHUNK tokens) */
	int cap_tok;
	float *x;				/* (cap_tok, n_embd) residual stream */
	float *xb;				/* (cap_tok, max(n_embd, q_dim)) normed input / product out */
	float *q, *att;				/* (cap_tok, q_dim) */
	float *k, *v;				/* (cap_tok, kv_dim) */
	float *hb, *hb2;			/* (cap_tok, n_ff) */
	int32_t *tokens;			/* (cap_tok) */
	__half *wscratch;			/* (ws_elems) dequantised matrix for GEMM; NULL until n > 1 */
	__half *xh;				/* (cap_tok, max_n_in) activations as f16 for GEMM */
	float *xscale;				/* (cap_tok) power-of-two scale of each row of xh */
	struct xq8 *xq;				/* (MV_MULTI_MAX, max_n_in / 32) x in int8 blocks: one token's
						   (decode) or a short delta's (mv_i8_multi) */
	bool xq_fresh;				/* xq holds the last matmul's x (its n_in: xq_n) */
	int64_t xq_n;
	float *att_part;			/* (ATT_MAX_SPLIT, n_head, head_dim + 2) split-K partials */
	int cap_logits;				/* rows of logits */
	float *logits;				/* (cap_logits, n_vocab) */
	struct cu_multi *multi;			/* forward_multi's row tables (multi.cu), or NULL */
	/* sampling on the device (sample.cu) */
	bool keep_logits;			/* the running forward keeps its last logits in logits[0] */
	bool logits_kept;			/* logits[0] holds the last forward's (forward_keep) */
	struct cu_sampler *smp;			/* sample.cu's buffers, made at the first sample */
};

struct cuda_kv {
	int n_ctx, cap;				/* positions allowed / allocated */
	int n_valid;				/* positions [0, n_valid) hold data */
	int type;				/* GGML_TYPE_F16, GGML_TYPE_F32 or GGML_TYPE_Q8_0 */
	int n_layer, kv_dim;
	void **k, **v;				/* [n_layer] device (cap, kv_dim) in type
						   (Q8_0: rows of kv_dim / 32 GGUF blocks, kv_q8.cuh) */
	size_t bytes;
	uint64_t gen;				/* bumped when k, v are reallocated (graph_key) */
};



/*
 * What a matrix-vector product does with row r's dot s before storing it:
 * y[r] = (accumulate ? y[r] : 0) + s + (bias ? bias[r] : 0). accumulate
 * folds the residual add into the output projections (x += W a).
 */
struct mv_epi {
	const float *bias;	/* (n_out) or NULL */
	bool accumulate;
};

/*
 * Where a Q, K or V projection's rows go (kernel_mv_i8_qkv): bias added,
 * RoPE applied to the rotated pairs at the token's position, then into y
 * (Q, for attention) or the layer's cache row at that position (K, V).
 * Rows are taken in RoPE pairs: (2i, 2i + 1) of a head, or NeoX's (i, i +
 * rope_dim / 2); the unrotated tail of a head in adjacent pairs.
 */
struct mv_qkv {
	const float *bias;		/* (n_out) or NULL */
	const double *inv_freq;		/* (rope_dim / 2) angle per position, as kernel_rope's */
	float mscale;			/* cos and sin times this (YaRN's rope_mscale, else 1) */
	const int *pos;			/* the token's position, in device memory (a graph replays it) */
	int head_dim, rope_dim;		/* rope_dim 0: no rotation (V, gpt2) */
	bool neox;
	float *y;			/* (n_out) Q; NULL: the rows go to cache */
	void *cache;			/* (n_ctx, n_out) the layer's K or V, f16 or f32 */
	bool f16;
};

/*
 * forward_multi's pass (multi.cu): row t is one sequence's next token at
 * position pos[t] of its own cache. Device tables.
 */
struct cu_rows {
	const int *pos;			/* (n) each row's position */
	void *const *k, *const *v;	/* (n_layer * n) layer l's K / V buffer of row t's cache at [l * n + t] */
	int n;
	int n_pos_max;			/* the largest pos[t] + 1 (attention splits) */
	bool f16;			/* the caches' type: f16, else f32 (all the same) */
	bool q8;			/* the caches are Q8_0 (f16 false) */
};

/* One layer's attention for attention.cu's kernels. */
struct att_args {
	const float *q;			/* (n, n_head, head_dim) rotated queries */
	const void *k, *v;		/* (cap, n_head_kv * head_dim) the layer's cache */
	bool f16;			/* cache f16, else f32 (or q8) */
	float *out;			/* (n, n_head, head_dim) */
	float *part;			/* (n_head, nz, head_dim + 2) split partials (decode, nz > 1) */
	int n_head, n_head_kv, head_dim;
	const int *pos0;		/* first token's position, in device memory */
	float scale, cap;		/* score scale; softcap (gemma2) or 0 */
	int win;			/* sliding window (gemma's local layers) or 0 */
	/*
	 * forward_multi (attention_rows): row t's cache buffers, then pos0 is
	 * the rows' positions (n) and k, v are unused; NULL otherwise.
	 */
	void *const *k_rows, *const *v_rows;
	bool q8;			/* Q8_0 cache (f16 false): rows of kv_dim / 32 blocks of 34 bytes */
};

/* ---- attention.cu ---- */

/*
 * One token's attention split nz ways over the cache (att_decode_splits),
 * the splits merged when nz > 1; part holds ATT_MAX_SPLIT splits.
 */
cudaError_t attention_decode(cudaStream_t st, const struct att_args *a, int nz);

/* n tokens' attention (prefill), a block per (token, query head). */
cudaError_t attention_tokens(cudaStream_t st, const struct att_args *a, int n);

/*
 * forward_multi's attention: n_rows rows of one token each (a->k_rows,
 * a->v_rows, a->pos0 per row), each split nz ways over its own cache
 * (att_multi_splits; n_rows * nz <= ATT_MAX_SPLIT when nz > 1).
 */
cudaError_t attention_rows(cudaStream_t st, const struct att_args *a, int nz, int n_rows);

/* ---- attn_prefill.cu ---- */

/*
 * n tokens' attention over tiles of queries x keys (att_tile_ok(n,
 * head_dim) must hold): causal, windowed, softcapped as attention_tokens.
 */
cudaError_t attention_prefill(cudaStream_t st, const struct att_args *a, int n);

/* ---- kv_q8.cu ---- */

/* Bytes of a cache row of kv_dim elements of type (0: a type the caches do not take). */
size_t cu_kv_row_bytes(int type, int kv_dim);

/*
 * n tokens' K and V rows (n x kv_dim floats, kv_dim % 32 == 0) quantised
 * into the Q8_0 caches kc, vc at rows *pos0 .. *pos0 + n - 1.
 */
cudaError_t kv_store_q8(cudaStream_t st, const float *k, const float *v, void *kc, void *vc, const int *pos0,
    int n, int kv_dim);

/*
 * forward_multi's store into Q8_0 caches: row t's K and V (row t of k, v)
 * into layer l's buffers of row t's own cache at position r->pos[t].
 */
cudaError_t kv_store_q8_rows(cudaStream_t st, const struct cu_rows *r, int l, const float *k, const float *v,
    int kv_dim);

/*
 * n_rows Q8_0 K rows from src rotated by delta positions into dst (distinct
 * buffers), as kv_shift_rows on the CPU; kv_dim * 4 bytes of shared memory.
 */
cudaError_t kv_rotate_q8(cudaStream_t st, const void *src, void *dst, int n_rows, int kv_dim, int head_dim,
    int rope_dim, bool neox, const double *inv_freq, int delta);

/* ---- sample.cu ---- */

/*
 * The next token from the kept logits (c->logits_kept) as smp_sample would
 * pick it (backend.h's sample); KVC_EUNSUPPORTED for a request the device
 * does not take (top-k off or above 1024).
 */
int cu_sample(struct cuda_ctx *c, const struct kvc_sample_req *r, int32_t *id, uint64_t *rng, char *err,
    size_t errlen);
void cu_sample_free(struct cuda_ctx *c);

/* ---- cuda_err.cu ---- */

/*
 * After a kernel launch: the launch's error and, with KVCHAT_CUDA_SYNC=1,
 * the kernel's own (the stream is synchronised), naming the kernel.
 */
int cu_launched(struct cuda_ctx *c, const char *kernel, char *err, size_t errlen);

/* KVC_OK, or the error of a failed runtime call with its name and reason. */
int cu_call(cudaError_t e, const char *what, char *err, size_t errlen);

/* ---- matmul.cu ---- */

/* The types cuBLAS multiplies as stored (the others are dequantised to F16 first). */
bool cu_matmul_native(int type);

/* Shared memory for the widest matrix's x (past the 48 KB default), and the SM count. */
int cu_set_matvec_smem(struct cuda_ctx *c, char *err, size_t errlen);

/*
 * Y (n, n_out) = X (n, n_in) . W^T; same_x: X's int8 blocks from the
 * previous product (or block_norm_q) are still valid.
 */
int cu_matmul(struct cuda_ctx *c, const struct dweight *w, const float *X, float *Y, int n, bool same_x,
    char *err, size_t errlen);

/*
 * The embedding rows of c->tokens[0..n) (and gpt2's learned positions)
 * into c->x; the positions *c->d_pos + t, or with rows (forward_multi)
 * rows[t] (device memory).
 */
void cu_embed(struct cuda_ctx *c, int n, const int *rows);

/* ---- layers.cu ---- */

void cu_free_scratch(struct cuda_ctx *c);

/* Scratch for n tokens (n <= CHUNK) and, for n > 1, the GEMM buffers. */
int cu_ensure_scratch(struct cuda_ctx *c, int n, char *err, size_t errlen);

/* Tokens[0..n) (n <= CHUNK) at positions pos0..; logits of rows [lo, n) into logits (may be NULL). */
int cu_forward_chunk(struct cuda_ctx *c, struct cuda_kv *kv, const int32_t *tokens, int n, int pos0,
    float *logits, int lo, char *err, size_t errlen);

/*
 * forward_multi's pass: rows->n (<= the scratch's capacity) tokens already
 * in c->tokens, each at its own position of its own cache; every row's
 * logits into logits (host, rows->n x n_vocab).
 */
int cu_forward_rows(struct cuda_ctx *c, const struct cu_rows *rows, float *logits, char *err, size_t errlen);

/* ---- multi.cu ---- */

/*
 * forward_multi's arguments (backend.h), checked as the CPU checks them;
 * *mixed when the caches are not all F16, all F32 or all Q8_0 (the rows' kernels
 * take one type: the caller then runs the sequences one at a time).
 */
int cu_multi_check(const struct cuda_ctx *c, int n_seq, void *const *kvs, const int32_t *tokens, const int *pos,
    const float *logits, bool *mixed, char *err, size_t errlen);

/*
 * One decode step of n_seq sequences, checked by cu_multi_check (not
 * mixed) and each cache grown to hold pos[i] + 1 positions.
 */
int cu_forward_multi(struct cuda_ctx *c, int n_seq, void *const *kvs, const int32_t *tokens, const int *pos,
    float *logits, char *err, size_t errlen);

/* The row tables' buffers (c->multi), at cuda_free. */
void cu_multi_free(struct cuda_ctx *c);

/* ---- mv_i8.cu ---- */

/* Whether the int8 kernels take weights of type t (enum gguf_dtype). */
bool mv_i8_supported(int t);

/*
 * W (n_out rows of n_in, type t) times x (n_in / 32 blocks) into y with
 * epilogue epi, on stream st; n_sm: the device's SM count (launch_plan).
 * Returns cudaErrorInvalidValue for a type mv_i8_supported refuses, else
 * the launch's error.
 */
cudaError_t mv_i8(cudaStream_t st, int t, const uint8_t *W, size_t row_bytes, const struct xq8 *x,
    float *y, int64_t n_in, int64_t n_out, int n_sm, struct mv_epi epi);

/*
 * Y (n rows of n_out) = W x_t for n tokens (2 <= n <= MV_MULTI_MAX),
 * x's blocks token-major (n * n_in / 32 of them): the matrix read once per
 * MV_MULTI_TOKENS tokens.
 */
cudaError_t mv_i8_multi(cudaStream_t st, int t, const uint8_t *W, size_t row_bytes, const struct xq8 *x,
    float *y, int64_t n_in, int64_t n_out, int n_sm, int n);

/*
 * Fused gate, up and activation: h[r] = act(Wg[r] . x) * (Wu[r] . x), act
 * SiLU or tanh-GELU (gelu); Wg and Wu of one type t, same shape.
 */
cudaError_t mv_i8_glu(cudaStream_t st, int t, const uint8_t *Wg, const uint8_t *Wu, size_t row_bytes,
    const struct xq8 *x, float *h, int64_t n_in, int64_t n_out, int n_sm, bool gelu);

/* A Q, K or V projection with its epilogue (struct mv_qkv); head_dim even. */
cudaError_t mv_i8_qkv(cudaStream_t st, int t, const uint8_t *W, size_t row_bytes, const struct xq8 *x,
    int64_t n_in, int64_t n_out, int n_sm, struct mv_qkv e);

/* x (n_in floats, n_in % 32 == 0) to n_in / 32 xq8 blocks. */
cudaError_t quantize_x(cudaStream_t st, const float *x, struct xq8 *xq, int64_t n_in);

/*
 * RMSNorm folded into the quantisation of the next products' input: one
 * token's x (n floats) normed with weight w into xb (float, for products
 * without an int8 kernel) and xq (int8 blocks) in one kernel.
 */
cudaError_t rmsnorm_quantize(cudaStream_t st, const float *x, const float *w, float *xb,
    struct xq8 *xq, int n, float eps);

/*
 * The dot of one row of type t with x as the device computes it (the same
 * per-part functions, summed in part order): the CPU tests' entry.
 */
double mv_i8_row_host(int t, const uint8_t *row, const struct xq8 *x, int64_t n_in);

#endif
