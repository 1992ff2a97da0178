/*
 * kv_q8.cu: the q8_0 KV cache on the device (--kv-type q8_0): the store of
 * a forward's K and V rows into it (forward_multi's rows too, each into
 * its own cache) and the RoPE shift of a slid cache. The
 * rows are GGUF's Q8_0 blocks, byte for byte the CPU backend's and a
 * snapshot's (kv_q8.cuh says why the bits agree); attention.cu reads them.
 *
 * The store is its own kernel after the Q/K/V products rather than their
 * epilogue: a block's scale needs the largest of its 32 values, and the
 * fused product (kernel_mv_i8_qkv) spreads a head's values over 16 warps
 * by RoPE pairs, so its K and V rows go to scratch first (4 bytes a value
 * written and read again, next to the matrix rows read for them).
 */
#include "cuda_int.h"
#include "dev_util.cuh"
#include "kv_q8.cuh"

size_t
cu_kv_row_bytes(int type, int kv_dim)
{
	switch (type) {
	case GGML_TYPE_F32: return (size_t)kv_dim * 4;
	case GGML_TYPE_F16: return (size_t)kv_dim * 2;
	case GGML_TYPE_Q8_0: return kv_dim % KVQ8_QB ? 0 : (size_t)(kv_dim / KVQ8_QB) * KVQ8_BYTES;
	default: return 0;
	}
}

/*
 * One block of 32 values into blk (34 bytes), a lane per value x: the
 * block's largest magnitude by shuffles, then kv_q8.cuh's scale and
 * levels. The whole warp calls it.
 */
__device__ static inline void
store_block(float x, uint8_t *blk, int lane)
{
	float amax = fabsf(x);

	for (int o = 16; o > 0; o /= 2)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	uint16_t h;
	float id = kvq8_scale(amax, &h);

	blk[2 + lane] = (uint8_t)kvq8_level(x, id);
	if (lane == 0) {
		blk[0] = (uint8_t)(h & 0xff);
		blk[1] = (uint8_t)(h >> 8);
	}
}

/*
 * n tokens' K and V rows (n, kv_dim floats each) into the Q8_0 caches at
 * rows *pos0 .. (pos == NULL), or row t into its own cache kcs[t], vcs[t]
 * at row pos[t] (forward_multi's rows): a warp per block of 32 values, a
 * lane per value (store_block). grid ceil(2 n kv_dim / 32 / 8), block
 * 256, no shared memory. Bytes: 2 n kv_dim * 4 read, 2 n kv_dim / 32 * 34
 * written.
 */
__global__ static void
kernel_kv_store_q8(const float *k, const float *v, uint8_t *kc, uint8_t *vc, const int *pos0,
    void *const *kcs, void *const *vcs, const int *pos, int n, int kv_dim)
{
	int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32, nb = kv_dim / KVQ8_QB;
	int64_t per = (int64_t)n * nb;

	if (g >= 2 * per)
		return;		/* whole warps leave together */
	bool is_v = g >= per;
	int64_t r = is_v ? g - per : g;
	int t = (int)(r / nb), b = (int)(r % nb);
	float x = (is_v ? v : k)[(int64_t)t * kv_dim + (int64_t)b * KVQ8_QB + lane];
	uint8_t *cache = pos ? (uint8_t *)(is_v ? vcs[t] : kcs[t]) : is_v ? vc : kc;
	int p = pos ? pos[t] : *pos0 + t;

	store_block(x, cache + (int64_t)p * nb * KVQ8_BYTES + (int64_t)b * KVQ8_BYTES, lane);
}

cudaError_t
kv_store_q8(cudaStream_t st, const float *k, const float *v, void *kc, void *vc, const int *pos0, int n,
    int kv_dim)
{
	int64_t warps = 2 * (int64_t)n * (kv_dim / KVQ8_QB);

	kernel_kv_store_q8<<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(k, v, (uint8_t *)kc, (uint8_t *)vc,
	    pos0, NULL, NULL, NULL, n, kv_dim);
	return cudaPeekAtLastError();
}

cudaError_t
kv_store_q8_rows(cudaStream_t st, const struct cu_rows *r, int l, const float *k, const float *v, int kv_dim)
{
	int64_t warps = 2 * (int64_t)r->n * (kv_dim / KVQ8_QB);

	kernel_kv_store_q8<<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(k, v, NULL, NULL, NULL,
	    r->k + (size_t)l * r->n, r->v + (size_t)l * r->n, r->pos, r->n, kv_dim);
	return cudaPeekAtLastError();
}

/*
 * Rows of a slid Q8_0 cache's K rotated by delta positions, from src (the
 * staged rows) into dst, as src/backend's kv_shift_rows does on the CPU:
 * the row to floats (d * q), each rotated pair in double with the angle
 * delta * inv_freq[i], rounded to float, the row quantised again (kv_q8.cuh).
 * grid n_rows, block 256, dynamic shared memory kv_dim * 4 bytes. Bytes:
 * 2 * n_rows * kv_dim / 32 * 34.
 */
__global__ static void
kernel_kv_rotate_q8(const uint8_t *src, uint8_t *dst, int kv_dim, int head_dim, int rope_dim, bool neox,
    const double *inv_freq, int delta)
{
	extern __shared__ float row[];
	size_t rb = (size_t)(kv_dim / KVQ8_QB) * KVQ8_BYTES;
	const uint8_t *s = src + blockIdx.x * rb;
	uint8_t *d = dst + blockIdx.x * rb;
	int half = rope_dim / 2, warp = threadIdx.x / 32, lane = threadIdx.x % 32;

	for (int i = threadIdx.x; i < kv_dim; i += blockDim.x)
		row[i] = kvq8_at(s, i);
	__syncthreads();
	/* each pair belongs to one thread: no other thread reads or writes its two values */
	for (int u = threadIdx.x; u < kv_dim / head_dim * half; u += blockDim.x) {
		int hh = u / half, i = u % half;
		float *x = row + (int64_t)hh * head_dim;
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		double x0 = x[a], x1 = x[b], sd, cd;

		sincos((double)delta * inv_freq[i], &sd, &cd);
		x[a] = (float)(x0 * cd - x1 * sd);
		x[b] = (float)(x0 * sd + x1 * cd);
	}
	__syncthreads();
	for (int b = warp; b < kv_dim / KVQ8_QB; b += blockDim.x / 32)
		store_block(row[b * KVQ8_QB + lane], d + b * KVQ8_BYTES, lane);
}

cudaError_t
kv_rotate_q8(cudaStream_t st, const void *src, void *dst, int n_rows, int kv_dim, int head_dim, int rope_dim,
    bool neox, const double *inv_freq, int delta)
{
	if (n_rows <= 0)
		return cudaSuccess;
	kernel_kv_rotate_q8<<<n_rows, 256, (size_t)kv_dim * sizeof(float), st>>>((const uint8_t *)src,
	    (uint8_t *)dst, kv_dim, head_dim, rope_dim, neox, inv_freq, delta);
	return cudaPeekAtLastError();
}
