/*
 * attn_prefill.cu: a long prefill's attention over tiles of queries x
 * keys with an online softmax (flash attention), on the CUDA cores.
 *
 * attention_tokens gives every (token, query head) a block of its own,
 * which reads the K and V rows it attends to by itself: a prompt of n
 * tokens reads the cache n * n_head times over (from L2 at best). Here a
 * block takes a run of query rows of one KV head's group (row r = t * G
 * + j: token t, query head j of the G that share the KV head, so a GQA
 * group's heads and neighbouring tokens are one block), loads each tile
 * of ATT_TILE_KEYS keys' K into shared memory once for all its rows,
 * scores them (lane k: key k of the tile, the whole dot from shared
 * memory), then the same tile's V, and updates each row's running max,
 * sum and output (lane l: dims l, l + 32, ...) with one rescale per tile.
 * Rows stop at their own position (causal) and start at their window
 * (gemma's local layers); scores are softcapped as attention_tokens'.
 *
 * The tiling's order (which keys share a tile, from where a block starts)
 * is launch_plan.c's att_tile_keys; tests/fixtures/att_tile_ref.c runs
 * the same blocks and tiles on the host in float, which test_cuda_plan
 * compares with plain attention on any machine, and test_cuda_i8 this
 * kernel with the float64 softmax on a device.
 */
#include "cuda_int.h"
#include "dev_util.cuh"
#include "kv_q8.cuh"

#include <math.h>

/* Element col of cache row p (kv_dim wide): f32, f16, or Q8_0 (d * q of its block, kv_q8.cuh). */
__device__ static inline float
kv_elt(const void *c, bool f16, bool q8, int64_t kv_dim, int64_t p, int64_t col)
{
	if (q8)
		return kvq8_at((const uint8_t *)c + p * (kv_dim / KVQ8_QB) * KVQ8_BYTES, col);
	return f16 ? __half2float(((const __half *)c)[p * kv_dim + col]) : ((const float *)c)[p * kv_dim + col];
}

/*
 * ATT_TILE_KEYS cache rows of KV head kvh from position kb into tile (row
 * stride HD + 1, so lane k's walk along row k meets no bank twice), rows
 * at or past k1 as zeros. Consecutive threads read consecutive elements
 * (of a Q8_0 cache: consecutive levels, each with its block's scale).
 */
template <int HD>
__device__ static inline void
load_tile(float (*tile)[HD + 1], const void *c, bool f16, bool q8, int kb, int k1, int64_t kv_dim, int kvh)
{
	for (int e = threadIdx.x; e < ATT_TILE_KEYS * HD; e += blockDim.x) {
		int key = e / HD, i = e % HD, p = kb + key;

		tile[key][i] = p < k1 ? kv_elt(c, f16, q8, kv_dim, p, (int64_t)kvh * HD + i) : 0.f;
	}
}

/*
 * Rows [r0, r0 + R) (R = ATT_TILE_WARPS * RW, att_tile_rows) of KV head
 * blockIdx.y's group: warp w holds rows r0 + w RW .. + RW - 1, lane l dims
 * l + 32 i (i < PL) of each one's output. head_dim = 32 PL.
 * grid (ceil(n G / R), n_head_kv), block 32 * ATT_TILE_WARPS, static
 * shared memory ATT_TILE_KEYS * (HD + 1) * 4 + R * HD * 4 (<= 41 KB, at
 * HD 256 with RW 1). Bytes: each block reads the K and V rows of its keys
 * once, 2 * (k1 - k0) * HD * elt (elt 34 / 32 for Q8_0), R times fewer
 * than attention_tokens' blocks over the same rows; q and out n * n_head
 * * HD * 4 each.
 */
template <int PL, int RW>
__global__ static void __launch_bounds__(32 * ATT_TILE_WARPS)
kernel_attn_tile(struct att_args a, int n)
{
	constexpr int HD = 32 * PL, R = ATT_TILE_WARPS * RW;
	__shared__ float tile[ATT_TILE_KEYS][HD + 1];
	__shared__ float qs[R][HD];
	const int G = a.n_head / a.n_head_kv, kvh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int r0 = blockIdx.x * R, r1 = min(n * G, r0 + R), pos0 = *a.pos0;
	const int64_t kv_dim = (int64_t)a.n_head_kv * HD;
	float acc[RW][PL], m[RW], l[RW], s[RW];
	int qpos[RW], first[RW], k0, k1;

	/* att_tile_keys: from the first key the block's first token sees to its last token */
	k0 = a.win > 0 ? max(0, pos0 + r0 / G + 1 - a.win) : 0;
	k1 = pos0 + (r1 - 1) / G + 1;
	for (int e = threadIdx.x; e < R * HD; e += blockDim.x) {
		int rr = e / HD, i = e % HD, r = r0 + rr;

		qs[rr][i] = r < r1 ? a.q[((int64_t)(r / G) * a.n_head + kvh * G + r % G) * HD + i] : 0.f;
	}
#pragma unroll
	for (int k = 0; k < RW; k++) {
		int r = r0 + warp * RW + k;

		qpos[k] = r < r1 ? pos0 + r / G : -1;	/* -1: past the chunk, every key masked */
		first[k] = a.win > 0 ? max(0, qpos[k] + 1 - a.win) : 0;
		m[k] = -INFINITY;
		l[k] = 0.f;
#pragma unroll
		for (int i = 0; i < PL; i++)
			acc[k][i] = 0.f;
	}
	for (int kb = k0; kb < k1; kb += ATT_TILE_KEYS) {
		int p = kb + lane;	/* this lane's key */

		__syncthreads();	/* q is in place; the previous tile's V is read */
		load_tile<HD>(tile, a.k, a.f16, a.q8, kb, k1, kv_dim, kvh);
		__syncthreads();
#pragma unroll
		for (int k = 0; k < RW; k++) {
			const float *qr = qs[warp * RW + k];
			float d = 0.f;

			for (int i = 0; i < HD; i++)
				d += qr[i] * tile[lane][i];
			d *= a.scale;
			if (a.cap > 0.f)
				d = a.cap * tanhf(d / a.cap);
			s[k] = p >= first[k] && p <= qpos[k] ? d : -INFINITY;
		}
		__syncthreads();	/* K is scored: V takes its place */
		load_tile<HD>(tile, a.v, a.f16, a.q8, kb, k1, kv_dim, kvh);
		__syncthreads();
#pragma unroll
		for (int k = 0; k < RW; k++) {
			float mn = fmaxf(m[k], warp_max(s[k]));

			if (mn == -INFINITY)
				continue;	/* the same in every lane: nothing of this row seen yet */
			float corr = expf(m[k] - mn), e = s[k] == -INFINITY ? 0.f : expf(s[k] - mn);

			l[k] = l[k] * corr + warp_sum(e);
#pragma unroll
			for (int i = 0; i < PL; i++)
				acc[k][i] *= corr;
			for (int j = 0; j < ATT_TILE_KEYS; j++) {
				float pj = __shfl_sync(0xffffffffu, e, j);
#pragma unroll
				for (int i = 0; i < PL; i++)
					acc[k][i] += pj * tile[j][32 * i + lane];
			}
			m[k] = mn;
		}
	}
#pragma unroll
	for (int k = 0; k < RW; k++) {
		int r = r0 + warp * RW + k;

		if (r >= r1)
			continue;
		float *o = a.out + ((int64_t)(r / G) * a.n_head + kvh * G + r % G) * HD;
#pragma unroll
		for (int i = 0; i < PL; i++)
			o[32 * i + lane] = acc[k][i] / l[k];
	}
}

cudaError_t
attention_prefill(cudaStream_t st, const struct att_args *a, int n)
{
	int G = a->n_head / a->n_head_kv, R = att_tile_rows(a->head_dim);
	dim3 grid((unsigned)((n * G + R - 1) / R), (unsigned)a->n_head_kv);

	if (!att_tile_ok(n, a->head_dim))
		return cudaErrorInvalidValue;
	switch (a->head_dim) {
	case 64: kernel_attn_tile<2, 2><<<grid, 32 * ATT_TILE_WARPS, 0, st>>>(*a, n); break;
	case 96: kernel_attn_tile<3, 2><<<grid, 32 * ATT_TILE_WARPS, 0, st>>>(*a, n); break;
	case 128: kernel_attn_tile<4, 2><<<grid, 32 * ATT_TILE_WARPS, 0, st>>>(*a, n); break;
	default: kernel_attn_tile<8, 1><<<grid, 32 * ATT_TILE_WARPS, 0, st>>>(*a, n); break;
	}
	return cudaPeekAtLastError();
}
