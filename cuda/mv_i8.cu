/*
 * mv_i8.cu: decode's matrix-vector products on int8 dot products, for
 * every quantised weight type the GPU takes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), and the steps fused around them (RMSNorm
 * into the quantisation of x, gate + up + activation in one kernel, bias
 * and residual add in the epilogue).
 *
 * x is quantised once per token to int8 blocks of 32 (struct xq8: scale,
 * the sum of the rounded values, 32 quants); every weight type's value is s * q - m with q a
 * small integer, s one scale per 16 or 32 values and m an offset per
 * group (the K-quants' dmin * min, Q4_1/Q5_1's m, or a constant level
 * shift such as Q4_0's 8), so a group's dot is s * d_x * sum(q q_x) minus
 * the offset times x's sum: dp4a over 4 quants at a time. The K-quants'
 * groups of 16 use x's sum over 16 from its quants (one more dp4a).
 *
 * A "part" is what one lane does per step: a quarter block for Q8_0 (8
 * values, 8 bytes), 32 values for the others (one block of Q4_0..Q5_1,
 * one sub-block of a K-quant super-block). Lanes take consecutive parts,
 * so a warp's step covers 32 consecutive parts of a row: 272 contiguous
 * bytes (Q8_0), 576..768 (Q4_0..Q5_1), 336..840 of one to four super-
 * blocks (the K-quants). Quants are read 4 bytes at a time, 2-byte aligned
 * for the block sizes that are not multiples of 4 (Q4_0 18, Q5_0 22, Q8_0
 * 34, Q3_K 110, Q6_K 210); repacking those at upload (scales apart from
 * quants) would allow 16-byte loads and is not done.
 *
 * The per-part functions are __host__ __device__: tests/unit/test_cuda_i8
 * runs them on the CPU against the float64 dot of q_dequant_row's values.
 */
#include "cuda_int.h"
#include "dev_util.cuh"

#include <math.h>

#define MV_WARPS 8	/* warps per block of the matrix-vector kernels */

/* Q8_0 (34 bytes: d, q[32]): quarter k = p % 4 of block p / 4. Two dp4a. */
__host__ __device__ static inline float
part_q8_0(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	int64_t b = p / 4;
	int k = (int)(p % 4);
	const uint8_t *blk = row + b * 34;
	const int *xq = (const int *)(x[b].q + 8 * k);
	int acc = dot4(ld4_u16(blk + 2 + 8 * k), xq[0], 0);

	acc = dot4(ld4_u16(blk + 6 + 8 * k), xq[1], acc);
	return ldh(blk) * x[b].d * (float)acc;
}

/*
 * Q4_0 (18 bytes: d, qs[16]) and Q4_1 (20: d, m, qs[16]): value i < 16 the
 * low nibble of qs[i], i + 16 its high one; Q4_0 levels are q - 8.
 */
__host__ __device__ static inline float
part_q4_0(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	const uint8_t *blk = row + p * 18;
	const int *xq = (const int *)x[p].q;
	int acc = 0;

	for (int i = 0; i < 4; i++) {
		int v = ld4_u16(blk + 2 + 4 * i);
		acc = dot4(v & 0x0F0F0F0F, xq[i], acc);
		acc = dot4((v >> 4) & 0x0F0F0F0F, xq[i + 4], acc);
	}
	return ldh(blk) * (x[p].d * (float)acc - 8.f * x[p].s);
}

__host__ __device__ static inline float
part_q4_1(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	const uint8_t *blk = row + p * 20;
	const int *xq = (const int *)x[p].q;
	int acc = 0;

	for (int i = 0; i < 4; i++) {
		int v = ld4(blk + 4 + 4 * i);
		acc = dot4(v & 0x0F0F0F0F, xq[i], acc);
		acc = dot4((v >> 4) & 0x0F0F0F0F, xq[i + 4], acc);
	}
	return ldh(blk) * x[p].d * (float)acc + ldh(blk + 2) * x[p].s;
}

/* Four bits b (0..15) to bit 4 of each of four bytes: Q5's fifth bits. */
__host__ __device__ static inline int
spread4(uint32_t b)
{
	return (int)(((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25));
}

/*
 * Q5_0 (22 bytes: d, qh[4], qs[16]) and Q5_1 (24: d, m, qh[4], qs[16]): as
 * Q4_0/Q4_1 with bit i of qh the fifth bit of value i; Q5_0 levels q - 16.
 */
__host__ __device__ static inline int
q5_acc(const uint8_t *qs, uint32_t qh, bool aligned, const int *xq)
{
	int acc = 0;

	for (int i = 0; i < 4; i++) {
		int v = aligned ? ld4(qs + 4 * i) : ld4_u16(qs + 4 * i);
		acc = dot4((v & 0x0F0F0F0F) | spread4((qh >> (4 * i)) & 0xF), xq[i], acc);
		acc = dot4(((v >> 4) & 0x0F0F0F0F) | spread4((qh >> (16 + 4 * i)) & 0xF), xq[i + 4], acc);
	}
	return acc;
}

__host__ __device__ static inline float
part_q5_0(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	const uint8_t *blk = row + p * 22;
	int acc = q5_acc(blk + 6, (uint32_t)ld4_u16(blk + 2), false, (const int *)x[p].q);

	return ldh(blk) * (x[p].d * (float)acc - 16.f * x[p].s);
}

__host__ __device__ static inline float
part_q5_1(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	const uint8_t *blk = row + p * 24;
	int acc = q5_acc(blk + 8, (uint32_t)ld4(blk + 4), true, (const int *)x[p].q);

	return ldh(blk) * x[p].d * (float)acc + ldh(blk + 2) * x[p].s;
}

/* sum of 16 of x's quants (ints i0..i0+3 of the block): the K-quants' groups of 16 */
__host__ __device__ static inline int
xsum16(const int *xq, int i0)
{
	int s = 0;

	for (int i = i0; i < i0 + 4; i++)
		s = dot4(0x01010101, xq[i], s);
	return s;
}

/*
 * Q2_K (84 bytes: scales[16], qs[64], d, dmin): part p is values 32m ..
 * 32m + 31 of super-block p / 8 (m = p % 8 = 4n + j): levels (qs[32n + l]
 * >> 2j) & 3, groups 2m and 2m + 1 of 16, scale byte d * low - dmin * high.
 */
__host__ __device__ static inline float
part_q2_k(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	int m = (int)(p % 8), n = m / 4, j = m % 4;
	const uint8_t *blk = row + p / 8 * 84, *qs = blk + 16 + 32 * n;
	const int *xq = (const int *)x[p].q;
	int sc0 = blk[2 * m], sc1 = blk[2 * m + 1], acc0 = 0, acc1 = 0;

	for (int i = 0; i < 4; i++) {
		acc0 = dot4((ld4(qs + 4 * i) >> (2 * j)) & 0x03030303, xq[i], acc0);
		acc1 = dot4((ld4(qs + 16 + 4 * i) >> (2 * j)) & 0x03030303, xq[i + 4], acc1);
	}
	return x[p].d * (ldh(blk + 80) * (float)((sc0 & 15) * acc0 + (sc1 & 15) * acc1) -
	    ldh(blk + 82) * (float)((sc0 >> 4) * xsum16(xq, 0) + (sc1 >> 4) * xsum16(xq, 4)));
}

/* Q3_K's 6-bit scale of group k (0..15), minus 32 */
__host__ __device__ static inline int
q3_scale(const uint8_t *sc, int k)
{
	return ((k < 8 ? sc[k] & 15 : sc[k - 8] >> 4) | ((sc[8 + k % 4] >> (2 * (k / 4))) & 3) << 4) - 32;
}

/*
 * Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): part p as Q2_K's,
 * level ((qs[32n + l] >> 2j) & 3) + 4 * (bit m of hmask[l]) - 4.
 */
__host__ __device__ static inline float
part_q3_k(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	int m = (int)(p % 8), n = m / 4, j = m % 4;
	const uint8_t *blk = row + p / 8 * 110, *qs = blk + 32 + 32 * n;
	const int *xq = (const int *)x[p].q;
	int acc[2] = { 0, 0 };

	for (int i = 0; i < 8; i++) {
		int q = (ld4_u16(qs + 4 * i) >> (2 * j)) & 0x03030303;
		int hb = (ld4_u16(blk + 4 * i) >> m) & 0x01010101;
		acc[i / 4] = dot4(q | hb << 2, xq[i], acc[i / 4]);
	}
	return ldh(blk + 108) * x[p].d * (float)(q3_scale(blk + 96, 2 * m) * (acc[0] - 4 * xsum16(xq, 0)) +
	    q3_scale(blk + 96, 2 * m + 1) * (acc[1] - 4 * xsum16(xq, 4)));
}

/* Q4_K/Q5_K's 6-bit scale and min of sub-block j (0..7) from scales[12] */
__host__ __device__ static inline void
k_scale_min6(const uint8_t *sc, int j, int *s6, int *m6)
{
	if (j < 4) {
		*s6 = sc[j] & 63;
		*m6 = sc[j + 4] & 63;
	} else {
		*s6 = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
		*m6 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
	}
}

/*
 * Q4_K (144 bytes: d, dmin, scales[12], qs[128]): sub-block j = p % 8 of
 * super-block p / 8, its quants the low (j even) or high nibbles of
 * qs[32 (j / 2) ..][0..32), 16-byte aligned: two 16-byte loads.
 */
__host__ __device__ static inline float
part_q4_k(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	int j = (int)(p % 8), sh = 4 * (j % 2), acc = 0, s6, m6;
	const uint8_t *blk = row + p / 8 * 144;
	const int4 *q4 = (const int4 *)(blk + 16 + 32 * (j / 2));
	const int *xq = (const int *)x[p].q;
	int4 a = q4[0], b = q4[1];
	int v[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };

	for (int i = 0; i < 8; i++)
		acc = dot4((v[i] >> sh) & 0x0F0F0F0F, xq[i], acc);
	k_scale_min6(blk + 4, j, &s6, &m6);
	return ldh(blk) * (float)s6 * x[p].d * (float)acc - ldh(blk + 2) * (float)m6 * x[p].s;
}

/*
 * Q5_K (176 bytes: d, dmin, scales[12], qh[32], qs[128]): as Q4_K with bit
 * j of qh[l] the fifth bit of value l of sub-block j.
 */
__host__ __device__ static inline float
part_q5_k(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	int j = (int)(p % 8), sh = 4 * (j % 2), acc = 0, s6, m6;
	const uint8_t *blk = row + p / 8 * 176, *qs = blk + 48 + 32 * (j / 2), *qh = blk + 16;
	const int *xq = (const int *)x[p].q;

	for (int i = 0; i < 8; i++) {
		int v = ((ld4(qs + 4 * i) >> sh) & 0x0F0F0F0F) | ((ld4(qh + 4 * i) >> j) & 0x01010101) << 4;
		acc = dot4(v, xq[i], acc);
	}
	k_scale_min6(blk + 4, j, &s6, &m6);
	return ldh(blk) * (float)s6 * x[p].d * (float)acc - ldh(blk + 2) * (float)m6 * x[p].s;
}

/*
 * Q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d): part p = values
 * 128n + 32g + l (m = p % 8 = 4n + g): low 4 bits the low (g < 2) or high
 * nibble of ql[64n + 32 (g & 1) + l], high 2 bits (qh[32n + l] >> 2g) & 3,
 * level minus 32, groups' scales scales[8n + 2g] and [8n + 2g + 1].
 */
__host__ __device__ static inline float
part_q6_k(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	int m = (int)(p % 8), n = m / 4, g = m % 4;
	const uint8_t *blk = row + p / 8 * 210;
	const uint8_t *ql = blk + 64 * n + 32 * (g & 1), *qh = blk + 128 + 32 * n;
	const int8_t *sc = (const int8_t *)(blk + 192 + 8 * n + 2 * g);
	const int *xq = (const int *)x[p].q;
	int acc[2] = { 0, 0 };

	for (int i = 0; i < 8; i++) {
		int lo = (ld4_u16(ql + 4 * i) >> (4 * (g >> 1))) & 0x0F0F0F0F;
		int hi = ((ld4_u16(qh + 4 * i) >> (2 * g)) & 0x03030303) << 4;
		acc[i / 4] = dot4(lo | hi, xq[i], acc[i / 4]);
	}
	return ldh(blk + 208) * x[p].d * (float)(sc[0] * (acc[0] - 32 * xsum16(xq, 0)) +
	    sc[1] * (acc[1] - 32 * xsum16(xq, 4)));
}

/* Parts per row of n_in values. */
template <int T>
__host__ __device__ static inline int64_t
n_parts(int64_t n_in)
{
	return T == GGML_TYPE_Q8_0 ? n_in / 8 : n_in / 32;
}

template <int T>
__host__ __device__ static inline float
part(const uint8_t *row, int64_t p, const struct xq8 *x)
{
	if constexpr (T == GGML_TYPE_Q8_0) return part_q8_0(row, p, x);
	else if constexpr (T == GGML_TYPE_Q4_0) return part_q4_0(row, p, x);
	else if constexpr (T == GGML_TYPE_Q4_1) return part_q4_1(row, p, x);
	else if constexpr (T == GGML_TYPE_Q5_0) return part_q5_0(row, p, x);
	else if constexpr (T == GGML_TYPE_Q5_1) return part_q5_1(row, p, x);
	else if constexpr (T == GGML_TYPE_Q2_K) return part_q2_k(row, p, x);
	else if constexpr (T == GGML_TYPE_Q3_K) return part_q3_k(row, p, x);
	else if constexpr (T == GGML_TYPE_Q4_K) return part_q4_k(row, p, x);
	else if constexpr (T == GGML_TYPE_Q5_K) return part_q5_k(row, p, x);
	else return part_q6_k(row, p, x);
}

/* Every type the int8 kernels take, for the dispatching switches. */
#define MV_I8_TYPES(X) X(GGML_TYPE_Q8_0) X(GGML_TYPE_Q4_0) X(GGML_TYPE_Q4_1) X(GGML_TYPE_Q5_0) \
	X(GGML_TYPE_Q5_1) X(GGML_TYPE_Q2_K) X(GGML_TYPE_Q3_K) X(GGML_TYPE_Q4_K) X(GGML_TYPE_Q5_K) \
	X(GGML_TYPE_Q6_K)

bool
mv_i8_supported(int t)
{
	switch (t) {
#define X(T) case T:
	MV_I8_TYPES(X)
#undef X
		return true;
	default:
		return false;
	}
}

double
mv_i8_row_host(int t, const uint8_t *row, const struct xq8 *x, int64_t n_in)
{
	double s = 0;

	switch (t) {
#define X(T) case T: for (int64_t p = 0; p < n_parts<T>(n_in); p++) s += part<T>(row, p, x); return s;
	MV_I8_TYPES(X)
#undef X
	default:
		return NAN;
	}
}

/*
 * The partial dot of one row: parts p0, p0 + step, ... (a lane's share).
 * Four parts in flight per lane before their first use.
 */
template <int T>
__device__ static inline float
row_dot(const uint8_t *row, const struct xq8 *x, int64_t np, int64_t p0, int step)
{
	float s = 0.f;

#pragma unroll 4
	for (int64_t p = p0; p < np; p += step)
		s += part<T>(row, p, x);
	return s;
}

/*
 * Sum of the wpr warps' s that share a row (split-K inside the block),
 * valid in the first warp of each group; every thread must call it.
 */
__device__ static inline float
rows_reduce(float s, int wpr, float *red)
{
	int warp = threadIdx.x / 32;

	s = warp_sum(s);
	if (wpr == 1)
		return s;
	if (threadIdx.x % 32 == 0)
		red[warp] = s;
	__syncthreads();
	s = 0.f;
	for (int k = 0; k < wpr; k++)
		s += red[warp / wpr * wpr + k];
	return s;
}

/*
 * y = W x (+ epilogue) for one token, W of type T. Block of MV_WARPS
 * warps = 8 / wpr rows, wpr warps per row each over every wpr-th run of 32
 * parts (mv_warps_per_row: split-K for the narrow K/V projections). grid
 * ceil(n_out * wpr / 8), block 256, static shared memory 32 bytes. Bytes:
 * n_out * row_bytes once + n_in / 32 * 40 of x per block (from L1/L2) +
 * n_out * 4 written (twice that read-modify-written with accumulate).
 */
template <int T>
__global__ static void __launch_bounds__(32 * MV_WARPS)
kernel_mv_i8(const uint8_t *W, size_t row_bytes, const struct xq8 *x, float *y, int64_t n_in,
    int64_t n_out, int wpr, struct mv_epi epi)
{
	__shared__ float red[MV_WARPS];
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t r = (int64_t)blockIdx.x * (MV_WARPS / wpr) + warp / wpr;
	float s = 0.f;

	if (r < n_out)
		s = row_dot<T>(W + r * row_bytes, x, n_parts<T>(n_in), (warp % wpr) * 32 + lane, 32 * wpr);
	s = rows_reduce(s, wpr, red);
	if (lane == 0 && warp % wpr == 0 && r < n_out)
		y[r] = (epi.accumulate ? y[r] : 0.f) + s + (epi.bias ? epi.bias[r] : 0.f);
}

/*
 * Y (nt rows of n_out, nt <= MV_MULTI_TOKENS) = W x_t for a few tokens
 * (prefill's short deltas): x's blocks token-major, xstride blocks apart.
 * Each lane decodes its part once per token from the same bytes (L1 after
 * the first), so the matrix comes from memory once per pass instead of
 * being dequantised to F16 for cuBLAS. Launch as kernel_mv_i8; static
 * shared memory MV_MULTI_TOKENS * 32 bytes. Bytes: n_out * row_bytes + nt
 * * (n_in / 32 * 40 + n_out * 4).
 */
template <int T>
__global__ static void __launch_bounds__(32 * MV_WARPS)
kernel_mv_i8_multi(const uint8_t *W, size_t row_bytes, const struct xq8 *x, int64_t xstride, float *y,
    int64_t n_in, int64_t n_out, int wpr, int nt)
{
	__shared__ float red[MV_MULTI_TOKENS][MV_WARPS];
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t r = (int64_t)blockIdx.x * (MV_WARPS / wpr) + warp / wpr;
	int64_t np = n_parts<T>(n_in), step = 32 * wpr;
	float s[MV_MULTI_TOKENS];

#pragma unroll
	for (int t = 0; t < MV_MULTI_TOKENS; t++)
		s[t] = 0.f;
	if (r < n_out) {
		const uint8_t *row = W + r * row_bytes;
		for (int64_t p = (warp % wpr) * 32 + lane; p < np; p += step) {
#pragma unroll
			for (int t = 0; t < MV_MULTI_TOKENS; t++)
				if (t < nt)
					s[t] += part<T>(row, p, x + t * xstride);
		}
	}
#pragma unroll
	for (int t = 0; t < MV_MULTI_TOKENS; t++)
		s[t] = rows_reduce(s[t], wpr, red[t]);
	if (lane != 0 || warp % wpr != 0 || r >= n_out)
		return;
	for (int t = 0; t < nt; t++)
		y[t * n_out + r] = s[t];
}

/* GELU, tanh form (as ggml and the CPU backend) */
__device__ static inline float
gelu_tanh_i8(float x)
{
	return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/*
 * h = act(Wg x) * (Wu x): gate, up and SwiGLU (GeGLU with gelu) in one
 * pass, both rows r read by the same warps so x's blocks are shared. Launch
 * as kernel_mv_i8. Bytes: 2 * n_out * row_bytes + n_out * 4 written (the
 * unfused path also writes and re-reads 2 * n_out * 4 more).
 */
template <int T>
__global__ static void __launch_bounds__(32 * MV_WARPS)
kernel_mv_i8_glu(const uint8_t *Wg, const uint8_t *Wu, size_t row_bytes, const struct xq8 *x, float *h,
    int64_t n_in, int64_t n_out, int wpr, bool gelu)
{
	__shared__ float red[2][MV_WARPS];
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t r = (int64_t)blockIdx.x * (MV_WARPS / wpr) + warp / wpr;
	int64_t np = n_parts<T>(n_in), p0 = (warp % wpr) * 32 + lane;
	float g = 0.f, u = 0.f;

	if (r < n_out) {
		g = row_dot<T>(Wg + r * row_bytes, x, np, p0, 32 * wpr);
		u = row_dot<T>(Wu + r * row_bytes, x, np, p0, 32 * wpr);
	}
	g = rows_reduce(g, wpr, red[0]);
	u = rows_reduce(u, wpr, red[1]);
	if (lane == 0 && warp % wpr == 0 && r < n_out)
		h[r] = (gelu ? gelu_tanh_i8(g) : g / (1.f + expf(-g))) * u;
}

/*
 * Rows r0, r1 of RoPE pair u of a Q/K/V projection (struct mv_qkv's
 * order), and the pair's frequency index, or -1 for an unrotated pair.
 */
__device__ static inline int
qkv_pair(int64_t u, int hd, int rd, bool neox, int64_t *r0, int64_t *r1)
{
	int64_t base = u / (hd / 2) * hd;
	int i = (int)(u % (hd / 2));

	if (i >= rd / 2) {
		*r0 = base + rd + 2 * (i - rd / 2);
		*r1 = *r0 + 1;
		return -1;
	}
	*r0 = base + (neox ? i : 2 * i);
	*r1 = base + (neox ? i + rd / 2 : 2 * i + 1);
	return i;
}

/*
 * A Q, K or V projection for one token with its whole epilogue (struct
 * mv_qkv): the two rows of a RoPE pair dotted by the same warps, bias,
 * rotation by the angle pos * inv_freq[i] (in double, as kernel_rope and
 * the CPU), then stored to y or the cache row at pos. Replaces the
 * product, bias, RoPE and cache-store kernels (and their round trips
 * through memory). grid ceil(n_out / 2 * wpr / 8), block 256, static
 * shared memory 64 bytes. Bytes: n_out * row_bytes + x's blocks (cached)
 * + n_out * 4 (or 2, an f16 cache) written.
 */
template <int T>
__global__ static void __launch_bounds__(32 * MV_WARPS)
kernel_mv_i8_qkv(const uint8_t *W, size_t row_bytes, const struct xq8 *x, int64_t n_in, int64_t n_out,
    int wpr, struct mv_qkv e)
{
	__shared__ float red[2][MV_WARPS];
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, fi = -1;
	int64_t u = (int64_t)blockIdx.x * (MV_WARPS / wpr) + warp / wpr, r0 = 0, r1 = 0;
	int64_t np = n_parts<T>(n_in), p0 = (warp % wpr) * 32 + lane;
	bool live = u < n_out / 2;
	float a = 0.f, b = 0.f;

	if (live) {
		fi = qkv_pair(u, e.head_dim, e.rope_dim, e.neox, &r0, &r1);
		a = row_dot<T>(W + r0 * row_bytes, x, np, p0, 32 * wpr);
		b = row_dot<T>(W + r1 * row_bytes, x, np, p0, 32 * wpr);
	}
	a = rows_reduce(a, wpr, red[0]);
	b = rows_reduce(b, wpr, red[1]);
	if (lane != 0 || warp % wpr != 0 || !live)
		return;
	if (e.bias) {
		a += e.bias[r0];
		b += e.bias[r1];
	}
	int pos = *e.pos;
	if (fi >= 0) {
		double sd, cd;
		sincos((double)pos * e.inv_freq[fi], &sd, &cd);
		float c = (float)(cd * e.mscale), s = (float)(sd * e.mscale), a0 = a;
		a = a0 * c - b * s;
		b = a0 * s + b * c;
	}
	if (e.y) {
		e.y[r0] = a;
		e.y[r1] = b;
	} else if (e.f16) {
		__half *row = (__half *)e.cache + (int64_t)pos * n_out;
		row[r0] = __float2half(a);
		row[r1] = __float2half(b);
	} else {
		float *row = (float *)e.cache + (int64_t)pos * n_out;
		row[r0] = a;
		row[r1] = b;
	}
}

/*
 * Quantise 32 values, one per lane (v), into block b: d = max|v| / 127, q
 * rounded to nearest, s = d times the integer sum of the 32 q: the sum of
 * the rounded x, so that the weights' offset terms (Q4_1/Q5_1's m, the
 * K-quants' mins, Q4_0/Q5_0's level shift) multiply the same x as their
 * levels and cancel as the CPU's do (q_act_prepare); with x's exact sum a
 * Q4_K dot was off by ~1e-3 of its magnitude. As tests/unit/test_cuda_i8's
 * host copy does, bit for bit.
 */
__device__ static inline void
quantize_block(float v, struct xq8 *b, int lane)
{
	float amax = fabsf(v);
	int q, isum;

	for (int o = 16; o > 0; o /= 2)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	float d = amax / 127.f;
	q = d > 0.f ? __float2int_rn(v / d) : 0;
	isum = q;
	for (int o = 16; o > 0; o /= 2)
		isum += __shfl_xor_sync(0xffffffffu, isum, o);
	b->q[lane] = (int8_t)q;
	if (lane == 0) {
		b->d = d;
		b->s = d * (float)isum;	/* exact in any order: an integer sum */
	}
}

/*
 * x (n_in floats) to n_in / 32 xq8 blocks: a warp per block, a lane per
 * value. grid ceil(n_in / 256), block 256, no shared memory. Bytes: n_in
 * * 4 read, n_in / 32 * 40 written.
 */
__global__ static void
kernel_quantize_x(const float *x, struct xq8 *xq, int64_t n_in)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i - threadIdx.x % 32 >= n_in)
		return;		/* whole warps only: n_in % 32 == 0 */
	quantize_block(x[i], &xq[i / 32], threadIdx.x % 32);
}

/*
 * RMSNorm of one token (n values, n % 32 == 0) with weight w, written as
 * floats to xb and as int8 blocks to xq: the norm kernel and
 * kernel_quantize_x in one. grid 1, block 1024, static shared memory 132
 * bytes. Bytes: 2 * n * 4 read (x twice, w), n * 4 + n / 32 * 40 written.
 */
__global__ static void __launch_bounds__(1024)
kernel_rmsnorm_q8(const float *x, const float *w, float *xb, struct xq8 *xq, int n, float eps)
{
	__shared__ float red[32], scale;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
	float ss = 0.f;

	for (int i = threadIdx.x; i < n; i += blockDim.x)
		ss += x[i] * x[i];
	ss = warp_sum(ss);
	if (lane == 0)
		red[warp] = ss;
	__syncthreads();
	if (warp == 0) {
		ss = warp_sum(lane < nw ? red[lane] : 0.f);
		if (lane == 0)
			scale = rsqrtf(ss / n + eps);
	}
	__syncthreads();
	for (int b = warp; b < n / 32; b += nw) {
		int i = 32 * b + lane;
		float v = x[i] * scale * w[i];
		xb[i] = v;
		quantize_block(v, &xq[b], lane);
	}
}

cudaError_t
mv_i8(cudaStream_t st, int t, const uint8_t *W, size_t row_bytes, const struct xq8 *x, float *y,
    int64_t n_in, int64_t n_out, int n_sm, struct mv_epi epi)
{
	int wpr = mv_warps_per_row(n_out, n_sm);
	unsigned grid = (unsigned)((n_out * wpr + MV_WARPS - 1) / MV_WARPS);

	switch (t) {
#define X(T) case T: kernel_mv_i8<T><<<grid, 32 * MV_WARPS, 0, st>>>(W, row_bytes, x, y, n_in, n_out, \
	    wpr, epi); break;
	MV_I8_TYPES(X)
#undef X
	default:
		return cudaErrorInvalidValue;
	}
	return cudaPeekAtLastError();
}

cudaError_t
mv_i8_multi(cudaStream_t st, int t, const uint8_t *W, size_t row_bytes, const struct xq8 *x, float *y,
    int64_t n_in, int64_t n_out, int n_sm, int n)
{
	int wpr = mv_warps_per_row(n_out, n_sm);
	unsigned grid = (unsigned)((n_out * wpr + MV_WARPS - 1) / MV_WARPS);
	int64_t nb = n_in / 32;

	for (int t0 = 0; t0 < n; t0 += MV_MULTI_TOKENS) {
		int nt = n - t0 < MV_MULTI_TOKENS ? n - t0 : MV_MULTI_TOKENS;

		switch (t) {
#define X(T) case T: kernel_mv_i8_multi<T><<<grid, 32 * MV_WARPS, 0, st>>>(W, row_bytes, x + t0 * nb, nb, \
	    y + t0 * n_out, n_in, n_out, wpr, nt); break;
		MV_I8_TYPES(X)
#undef X
		default:
			return cudaErrorInvalidValue;
		}
	}
	return cudaPeekAtLastError();
}

cudaError_t
mv_i8_glu(cudaStream_t st, int t, const uint8_t *Wg, const uint8_t *Wu, size_t row_bytes,
    const struct xq8 *x, float *h, int64_t n_in, int64_t n_out, int n_sm, bool gelu)
{
	int wpr = mv_warps_per_row(n_out, n_sm);
	unsigned grid = (unsigned)((n_out * wpr + MV_WARPS - 1) / MV_WARPS);

	switch (t) {
#define X(T) case T: kernel_mv_i8_glu<T><<<grid, 32 * MV_WARPS, 0, st>>>(Wg, Wu, row_bytes, x, h, \
	    n_in, n_out, wpr, gelu); break;
	MV_I8_TYPES(X)
#undef X
	default:
		return cudaErrorInvalidValue;
	}
	return cudaPeekAtLastError();
}

cudaError_t
mv_i8_qkv(cudaStream_t st, int t, const uint8_t *W, size_t row_bytes, const struct xq8 *x,
    int64_t n_in, int64_t n_out, int n_sm, struct mv_qkv e)
{
	int wpr = mv_warps_per_row(n_out / 2, n_sm);
	unsigned grid = (unsigned)((n_out / 2 * wpr + MV_WARPS - 1) / MV_WARPS);

	switch (t) {
#define X(T) case T: kernel_mv_i8_qkv<T><<<grid, 32 * MV_WARPS, 0, st>>>(W, row_bytes, x, n_in, n_out, \
	    wpr, e); break;
	MV_I8_TYPES(X)
#undef X
	default:
		return cudaErrorInvalidValue;
	}
	return cudaPeekAtLastError();
}

cudaError_t
quantize_x(cudaStream_t st, const float *x, struct xq8 *xq, int64_t n_in)
{
	kernel_quantize_x<<<(unsigned)((n_in + 255) / 256), 256, 0, st>>>(x, xq, n_in);
	return cudaPeekAtLastError();
}

cudaError_t
rmsnorm_quantize(cudaStream_t st, const float *x, const float *w, float *xb, struct xq8 *xq, int n,
    float eps)
{
	kernel_rmsnorm_q8<<<1, 1024, 0, st>>>(x, w, xb, xq, n, eps);
	return cudaPeekAtLastError();
}
