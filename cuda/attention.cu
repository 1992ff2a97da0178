/*
 * attention.cu: causal grouped-query attention over the layer's cache with
 * an online softmax (no score matrix in memory): for decode, one block per
 * KV head that serves its whole GQA group, split over the cache
 * (flash-decoding: the split count from the SM count, launch_plan.c, so a
 * captured graph replays at any position); for short prefills and the
 * shapes the group kernel does not take, a block per (token, query head)
 * (long prefills: attn_prefill.cu's tiles). The same kernels serve
 * forward_multi's rows (attention_rows): row t is one sequence's token,
 * its cache and position its own (a->k_rows[t], a->pos0[t]).
 *
 * Positions come from device memory (*a->pos0), never from the launch, so
 * the decode graph (backend_cuda.cu) replays these kernels unchanged.
 */
#include "cuda_int.h"
#include "dev_util.cuh"
#include "kv_q8.cuh"

#include <math.h>

/* Element col of cache row p (kv_dim wide): f32, f16, or Q8_0 (q8: d * q of its block). */
__device__ static inline float
kv_at(const void *c, bool f16, bool q8, int kv_dim, int64_t p, int col)
{
	if (q8)
		return kvq8_at((const uint8_t *)c + p * (kv_dim / KVQ8_QB) * KVQ8_BYTES, col);
	return f16 ? __half2float(((const __half *)c)[p * kv_dim + col]) : ((const float *)c)[p * kv_dim + col];
}

/*
 * Causal grouped-query attention with an online softmax, split over the
 * sequence (flash-decoding) when gridDim.z > 1. Block (t, h, z) handles
 * query token t, head h (KV head h / (n_head / n_head_kv), as on the CPU)
 * and the z-th of gridDim.z equal slices of positions [first, *pos0 + t]
 * (with k_rows, forward_multi's: [first, pos0[t]] of row t's own cache):
 * first = *pos0 + t + 1 - win for a windowed layer (win > 0, gemma), else
 * 0. Scores are q.k * scale, then cap * tanh(score / cap) when cap > 0
 * (gemma2).
 * Each of its ATT_WARPS warps walks a strided subset of the slice keeping
 * its own max, sum and output accumulator (in shared memory); the warps
 * are then merged. With one slice the block writes the normalised output;
 * otherwise it writes (max, sum, unnormalised accumulator) to part and
 * kernel_attention_merge combines the slices. head_dim <= 256.
 * grid (n, n_head, splits), block 32 * ATT_WARPS, static shared memory
 * ATT_WARPS * 1 KB. Bytes: K and V of the positions once per query head,
 * 2 * (pos + 1) * head_dim * elt (elt 34 / 32 for a Q8_0 cache; the heads
 * of a group re-read the same rows, mostly from L2).
 */
#define ATT_WARPS 4
__global__ static void
kernel_attention(const float *q, const void *kc, const void *vc, bool f16, bool q8,
    float *out, float *part, int n_head, int n_head_kv, int head_dim, const int *pos0, float scale,
    float cap, int win, void *const *k_rows, void *const *v_rows)
{
	__shared__ float acc[ATT_WARPS][256];
	__shared__ float wm[ATT_WARPS], ws[ATT_WARPS];
	int t = blockIdx.x, h = blockIdx.y, z = blockIdx.z, nz = gridDim.z;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * head_dim;
	const float *qv = q + ((int64_t)t * n_head + h) * head_dim;
	int n_pos = (k_rows ? pos0[t] : *pos0 + t) + 1, first = win > 0 ? max(0, n_pos - win) : 0;
	int per = (n_pos - first + nz - 1) / nz, p0 = first + z * per, p1 = min(n_pos, p0 + per);
	float m = -INFINITY, s = 0.f;

	if (k_rows) {
		kc = k_rows[t];
		vc = v_rows[t];
	}
	for (int i = lane; i < head_dim; i += 32)
		acc[warp][i] = 0.f;
	for (int p = p0 + warp; p < p1; p += ATT_WARPS) {
		int col0 = kvh * head_dim;
		float dot = 0.f;
		for (int i = lane; i < head_dim; i += 32)
			dot += qv[i] * kv_at(kc, f16, q8, kv_dim, p, col0 + i);
		dot = warp_sum(dot) * scale;
		if (cap > 0.f)
			dot = cap * tanhf(dot / cap);
		float m2 = fmaxf(m, dot), corr = expf(m - m2), e = expf(dot - m2);
		s = s * corr + e;
		for (int i = lane; i < head_dim; i += 32)
			acc[warp][i] = acc[warp][i] * corr + e * kv_at(vc, f16, q8, kv_dim, p, col0 + i);
		m = m2;
	}
	if (lane == 0) {
		wm[warp] = m;
		ws[warp] = s;
	}
	__syncthreads();
	float M = -INFINITY, S = 0.f;
	for (int w = 0; w < ATT_WARPS; w++)
		if (ws[w] > 0.f)
			M = fmaxf(M, wm[w]);
	for (int w = 0; w < ATT_WARPS; w++)
		if (ws[w] > 0.f)
			S += ws[w] * expf(wm[w] - M);
	float *o = nz == 1 ? out + ((int64_t)t * n_head + h) * head_dim :
	    part + (((int64_t)t * n_head + h) * nz + z) * (head_dim + 2);
	for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
		float v = 0.f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (ws[w] > 0.f)
				v += acc[w][i] * expf(wm[w] - M);
		o[i] = nz == 1 ? v / S : v;
	}
	if (nz > 1 && threadIdx.x == 0) {
		o[head_dim] = M;	/* -inf with S == 0 for an empty slice */
		o[head_dim + 1] = S;
	}
}

/*
 * Combine nz slices of kernel_attention: out = sum_z acc_z e^(m_z - M) /
 * sum_z s_z e^(m_z - M). grid (n, n_head), block head_dim threads.
 * Bytes: n * n_head * nz * (head_dim + 2) * 4 read, n * q_dim * 4 written.
 */
__global__ static void
kernel_attention_merge(const float *part, float *out, int n_head, int head_dim, int nz)
{
	int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
	const float *pp = part + ((int64_t)t * n_head + h) * nz * (head_dim + 2);
	float M = -INFINITY, S = 0.f, v = 0.f;

	for (int z = 0; z < nz; z++)
		if (pp[z * (head_dim + 2) + head_dim + 1] > 0.f)
			M = fmaxf(M, pp[z * (head_dim + 2) + head_dim]);
	for (int z = 0; z < nz; z++) {
		const float *r = pp + z * (head_dim + 2);
		if (r[head_dim + 1] > 0.f) {
			float e = expf(r[head_dim] - M);
			S += r[head_dim + 1] * e;
			if (i < head_dim)
				v += r[i] * e;
		}
	}
	if (i < head_dim)
		out[((int64_t)t * n_head + h) * head_dim + i] = v / S;
}

/*
 * Positions [p0, p1) of split z of nz over the keys token t sees: the
 * window's last win positions (win > 0, gemma's local layers) or all of
 * them, cut into nz equal slices (some empty when the context is short).
 */
__device__ static inline void
att_slice(int n_pos, int win, int z, int nz, int *p0, int *p1)
{
	int first = win > 0 ? max(0, n_pos - win) : 0;
	int per = (n_pos - first + nz - 1) / nz;

	*p0 = first + z * per;
	*p1 = min(n_pos, *p0 + per);
}

/* PL consecutive values of a cache row from base: 16-, 8- or 4-byte loads of an f16 cache. */
template <int PL>
__device__ static inline void
load_kv(const void *c, bool f16, int64_t base, float *out)
{
	if (!f16) {
#pragma unroll
		for (int i = 0; i < PL; i++)
			out[i] = ((const float *)c)[base + i];
		return;
	}
	const __half *h = (const __half *)c + base;
	if constexpr (PL == 8) {
		uint4 u = *(const uint4 *)h;
		const __half2 *p = (const __half2 *)&u;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float2 f = __half22float2(p[i]);
			out[2 * i] = f.x;
			out[2 * i + 1] = f.y;
		}
	} else if constexpr (PL == 4) {
		uint2 u = *(const uint2 *)h;
		const __half2 *p = (const __half2 *)&u;
#pragma unroll
		for (int i = 0; i < 2; i++) {
			float2 f = __half22float2(p[i]);
			out[2 * i] = f.x;
			out[2 * i + 1] = f.y;
		}
	} else {
#pragma unroll
		for (int i = 0; i < PL; i++)
			out[i] = __half2float(h[i]);
	}
}

/*
 * PL consecutive values of a Q8_0 cache row (row: its first byte) from
 * column col: one fp16 scale and PL levels by 2-byte loads when they lie
 * in one block (PL 2, 4, 8 from a multiple of PL), else value by value.
 */
template <int PL>
__device__ static inline void
load_kv_q8(const uint8_t *row, int col, float *out)
{
	if constexpr (KVQ8_QB % PL == 0 && PL % 2 == 0) {
		const uint8_t *b = row + col / KVQ8_QB * KVQ8_BYTES;
		float d = __half2float(__ushort_as_half(*(const uint16_t *)b));
		const uint16_t *q = (const uint16_t *)(b + 2 + col % KVQ8_QB);
#pragma unroll
		for (int i = 0; i < PL / 2; i++) {
			uint16_t u = q[i];
			out[2 * i] = d * (float)(int8_t)(u & 0xff);
			out[2 * i + 1] = d * (float)(int8_t)(u >> 8);
		}
	} else {
#pragma unroll
		for (int i = 0; i < PL; i++)
			out[i] = kvq8_at(row, col + i);
	}
}

#define GQA_MAX 8	/* query heads per KV head kernel_attn_gqa holds in registers */

/*
 * One token's attention for KV head blockIdx.x and its G = n_head /
 * n_head_kv query heads over split blockIdx.y of gridDim.y, for row
 * blockIdx.z (forward_multi's sequences: a.k_rows; else row 0). Lane l holds
 * dims [PL l, PL l + PL) of the G queries and accumulators in registers
 * (head_dim = 32 PL); each of the ATT_WARPS warps walks every ATT_WARPS-th
 * position of the split, reads its K and V rows once (wide loads: 16 bytes
 * a lane for head_dim 256, 8 for 128) and updates all G online softmaxes,
 * so the group shares one read of the cache instead of G. The warps are
 * merged in shared memory; with one split the block writes the normalised
 * output, otherwise (max, sum, unnormalised accumulator) to part for
 * kernel_attention_merge. grid (n_head_kv, nz, rows), block 32 * ATT_WARPS,
 * static shared memory ATT_WARPS * GQA_MAX * (head_dim + 2) * 4 <= 33 KB.
 * A Q8_0 cache: the lane's PL levels by 2-byte loads and its block's
 * scale (load_kv_q8). Bytes: 2 * n_pos * kv_dim * elt (34 / 32 for Q8_0)
 * of cache read once, n_head * head_dim * 4
 * of q, n_head * nz * (head_dim + 2) * 4 written.
 */
template <int PL>
__global__ static void __launch_bounds__(32 * ATT_WARPS)
kernel_attn_gqa(struct att_args a, int nz)
{
	__shared__ float sacc[ATT_WARPS][GQA_MAX][32 * PL], sm[ATT_WARPS][GQA_MAX], ss[ATT_WARPS][GQA_MAX];
	const int hd = 32 * PL, G = a.n_head / a.n_head_kv, kvh = blockIdx.x, z = blockIdx.y, row = blockIdx.z;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, p0, p1;
	int64_t kv_dim = (int64_t)a.n_head_kv * hd;
	float q[GQA_MAX][PL], acc[GQA_MAX][PL], m[GQA_MAX], s[GQA_MAX];
	const void *kc = a.k_rows ? a.k_rows[row] : a.k, *vc = a.k_rows ? a.v_rows[row] : a.v;

	/* the row's own query, output and partials (row 0 of one token: as they are) */
	a.q += (int64_t)row * a.n_head * hd;
	a.out += (int64_t)row * a.n_head * hd;
	a.part += (int64_t)row * a.n_head * nz * (hd + 2);
	att_slice((a.k_rows ? a.pos0[row] : *a.pos0) + 1, a.win, z, nz, &p0, &p1);
#pragma unroll
	for (int j = 0; j < GQA_MAX; j++) {
		m[j] = -INFINITY;
		s[j] = 0.f;
#pragma unroll
		for (int i = 0; i < PL; i++) {
			q[j][i] = j < G ? a.q[(int64_t)(kvh * G + j) * hd + PL * lane + i] : 0.f;
			acc[j][i] = 0.f;
		}
	}
	for (int p = p0 + warp; p < p1; p += ATT_WARPS) {
		int64_t base = (int64_t)p * kv_dim + (int64_t)kvh * hd + PL * lane;
		float k[PL], v[PL];

		if (a.q8) {
			size_t rb = (size_t)(kv_dim / KVQ8_QB) * KVQ8_BYTES;
			int col = kvh * hd + PL * lane;
			load_kv_q8<PL>((const uint8_t *)kc + p * rb, col, k);
			load_kv_q8<PL>((const uint8_t *)vc + p * rb, col, v);
		} else {
			load_kv<PL>(kc, a.f16, base, k);
			load_kv<PL>(vc, a.f16, base, v);
		}
#pragma unroll
		for (int j = 0; j < GQA_MAX; j++) {
			if (j >= G)
				break;
			float dot = 0.f;
#pragma unroll
			for (int i = 0; i < PL; i++)
				dot += q[j][i] * k[i];
			dot = warp_sum(dot) * a.scale;
			if (a.cap > 0.f)
				dot = a.cap * tanhf(dot / a.cap);
			float m2 = fmaxf(m[j], dot), corr = expf(m[j] - m2), e = expf(dot - m2);
			s[j] = s[j] * corr + e;
#pragma unroll
			for (int i = 0; i < PL; i++)
				acc[j][i] = acc[j][i] * corr + e * v[i];
			m[j] = m2;
		}
	}
#pragma unroll
	for (int j = 0; j < GQA_MAX; j++) {
		if (j >= G)
			break;
#pragma unroll
		for (int i = 0; i < PL; i++)
			sacc[warp][j][PL * lane + i] = acc[j][i];
		if (lane == 0) {
			sm[warp][j] = m[j];
			ss[warp][j] = s[j];
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < G * hd; e += blockDim.x) {
		int j = e / hd, i = e % hd, h = kvh * G + j;
		float M = -INFINITY, S = 0.f, v = 0.f;

		for (int w = 0; w < ATT_WARPS; w++)
			if (ss[w][j] > 0.f)
				M = fmaxf(M, sm[w][j]);
		for (int w = 0; w < ATT_WARPS; w++)
			if (ss[w][j] > 0.f) {
				float f = expf(sm[w][j] - M);
				S += ss[w][j] * f;
				v += sacc[w][j][i] * f;
			}
		if (nz == 1) {
			a.out[(int64_t)h * hd + i] = v / S;
			continue;
		}
		float *o = a.part + ((int64_t)h * nz + z) * (hd + 2);
		o[i] = v;
		if (i == 0) {
			o[hd] = M;	/* -inf with S == 0 for an empty slice */
			o[hd + 1] = S;
		}
	}
}

/* Whether kernel_attn_gqa takes this head shape (else the per-head kernel runs). */
static bool
gqa_ok(const struct att_args *a)
{
	int G = a->n_head / a->n_head_kv;

	return G <= GQA_MAX && (a->head_dim == 64 || a->head_dim == 96 || a->head_dim == 128 ||
	    a->head_dim == 256);
}

cudaError_t
attention_rows(cudaStream_t st, const struct att_args *a, int nz, int n_rows)
{
	if (gqa_ok(a)) {
		dim3 grid(a->n_head_kv, nz, n_rows);

		switch (a->head_dim / 32) {
		case 2: kernel_attn_gqa<2><<<grid, 32 * ATT_WARPS, 0, st>>>(*a, nz); break;
		case 3: kernel_attn_gqa<3><<<grid, 32 * ATT_WARPS, 0, st>>>(*a, nz); break;
		case 4: kernel_attn_gqa<4><<<grid, 32 * ATT_WARPS, 0, st>>>(*a, nz); break;
		default: kernel_attn_gqa<8><<<grid, 32 * ATT_WARPS, 0, st>>>(*a, nz); break;
		}
	} else {
		kernel_attention<<<dim3(n_rows, a->n_head, nz), 32 * ATT_WARPS, 0, st>>>(a->q, a->k, a->v,
		    a->f16, a->q8, a->out, a->part, a->n_head, a->n_head_kv, a->head_dim, a->pos0, a->scale,
		    a->cap, a->win, a->k_rows, a->v_rows);
	}
	if (nz > 1) {
		cudaError_t e = cudaPeekAtLastError();

		if (e != cudaSuccess)
			return e;
		kernel_attention_merge<<<dim3(n_rows, a->n_head), a->head_dim, 0, st>>>(a->part, a->out,
		    a->n_head, a->head_dim, nz);
	}
	return cudaPeekAtLastError();
}

cudaError_t
attention_decode(cudaStream_t st, const struct att_args *a, int nz)
{
	return attention_rows(st, a, nz, 1);
}

cudaError_t
attention_tokens(cudaStream_t st, const struct att_args *a, int n)
{
	kernel_attention<<<dim3(n, a->n_head, 1), 32 * ATT_WARPS, 0, st>>>(a->q, a->k, a->v, a->f16, a->q8,
	    a->out, a->part, a->n_head, a->n_head_kv, a->head_dim, a->pos0, a->scale, a->cap, a->win, NULL,
	    NULL);
	return cudaPeekAtLastError();
}
