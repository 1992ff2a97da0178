/*
 * cuda_int.h: what the CUDA backend's files share (not a public header:
 * only cuda/*.cu and their tests include it). backend_cuda.cu is the
 * vtable, uploads, caches and the forward's order of kernels; mv_i8.cu the
 * int8 matrix-vector kernels of decode and the fused steps around them;
 * attention.cu attention over the cache (flash-decoding, prefill);
 * launch_plan.c (launch_plan.h) the host-side choices, plain C so that
 * the CPU tests run them without nvcc.
 */
#ifndef KVC_CUDA_INT_H
#define KVC_CUDA_INT_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "launch_plan.h"

/*
 * One token's x in blocks of 32, as the int8 kernels read it: scale d =
 * max|x| / 127, sum s = the block's exact sum (for the weights' offsets),
 * q = x / d rounded to nearest. 40 bytes, so q is 4-byte aligned for dp4a.
 */
struct xq8 {
	float d, s;
	int8_t q[32];
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
	const int *pos;			/* the token's position, in device memory (a graph replays it) */
	int head_dim, rope_dim;		/* rope_dim 0: no rotation (V, gpt2) */
	bool neox;
	float *y;			/* (n_out) Q; NULL: the rows go to cache */
	void *cache;			/* (n_ctx, n_out) the layer's K or V, f16 or f32 */
	bool f16;
};

/* One layer's attention for attention.cu's kernels. */
struct att_args {
	const float *q;			/* (n, n_head, head_dim) rotated queries */
	const void *k, *v;		/* (cap, n_head_kv * head_dim) the layer's cache */
	bool f16;			/* cache f16, else f32 */
	float *out;			/* (n, n_head, head_dim) */
	float *part;			/* (n_head, nz, head_dim + 2) split partials (decode, nz > 1) */
	int n_head, n_head_kv, head_dim;
	const int *pos0;		/* first token's position, in device memory */
	float scale, cap;		/* score scale; softcap (gemma2) or 0 */
	int win;			/* sliding window (gemma's local layers) or 0 */
};

/* ---- attention.cu ---- */

/*
 * One token's attention split nz ways over the cache (att_decode_splits),
 * the splits merged when nz > 1; part holds ATT_MAX_SPLIT splits.
 */
cudaError_t attention_decode(cudaStream_t st, const struct att_args *a, int nz);

/* n tokens' attention (prefill), a block per (token, query head). */
cudaError_t attention_tokens(cudaStream_t st, const struct att_args *a, int n);

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
