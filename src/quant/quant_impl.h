/*
 * quant_impl.h: what quant.c, its SIMD kernels (quant_avx2.c) and the
 * reference quantisers (quant_ref.c) share; internal to the quant module.
 */
#ifndef KVC_QUANT_IMPL_H
#define KVC_QUANT_IMPL_H

#include "quant.h"

#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/*
 * The sum of v's eight floats, halves first, then pairs: the one order every
 * AVX2 kernel of the module reduces in (results depend on it bit for bit).
 */
__attribute__((target("avx2"), always_inline)) static inline float
q_hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
#endif

/* The AVX2+FMA+F16C kernels: only call when q_avx2_cpu() is true. */
bool q_avx2_cpu(void);
/*
 * sum_i row[i] * x[i]; false if t has no AVX2 kernel (caller falls back).
 * xs: for Q4_K/Q5_K, the sums of x over each 32 (from q_avx2_xsums), or
 * NULL to compute them here; the result is bitwise the same either way.
 */
bool q_avx2_dot(enum gguf_dtype t, const void *row, const float *x, const float *xs, int64_t n, float *out);
void q_avx2_xsums(const float *x, int64_t n, float *xs);	/* xs[n / 32] */
/* q_act_prepare on an AVX2 CPU (same d and levels; the sums of x in a vector order) */
void q_avx2_act_prepare(const float *x, int64_t n_in, void *act);

/*
 * quant_tile.c, AVX2 CPUs only (q_avx2_cpu()): q_matmul_rows_act's and
 * q_matmul_rows' loops as tiles of rows x tokens (act: tokens ab bytes
 * apart). false when t (or n_in: int8 a multiple of the block, float of 16)
 * has no tile kernel; the caller then uses the one-row kernels, for every
 * batch size alike. avx512: use the AVX-512 kernels (VNNI multiply-adds,
 * 512-bit float tiles) where the CPU has AVX512F/VL/BW/VNNI.
 */
bool q_tile_avx512_cpu(void);
bool q_tile_rows_act(bool avx512, enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
bool q_tile_rows_f(bool avx512, enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);

/* One block of any quantised type, for aligned copies of blocks in unaligned rows. */
union any_block {
	block_q8_0 q8_0;
	block_q4_0 q4_0;
	block_q4_1 q4_1;
	block_q5_0 q5_0;
	block_q5_1 q5_1;
	block_q3_K q3_k;
	block_q4_K q4_k;
	block_q5_K q5_k;
	block_q6_K q6_k;
};

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes. */
static inline void
q_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/*
 * All 8 Q4_K/Q5_K scales and mins at once (same bits as q_k_scale_min),
 * with 32-bit word operations on a little-endian CPU: bytes 0-3 of the 12
 * hold scales 0-3 (low 6 bits), bytes 4-7 mins 0-3; scales/mins 4-7 take
 * their low nibble from bytes 8-11 and their top 2 bits from the top of
 * bytes 0-3 / 4-7.
 */
static inline void
q_k_scales8_le(const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
	uint32_t w0, w1, w2, a, b, c, d;

	memcpy(&w0, q, 4);
	memcpy(&w1, q + 4, 4);
	memcpy(&w2, q + 8, 4);
	a = w0 & 0x3f3f3f3fu;
	b = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
	c = w1 & 0x3f3f3f3fu;
	d = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
	memcpy(sc, &a, 4);
	memcpy(sc + 4, &b, 4);
	memcpy(mn, &c, 4);
	memcpy(mn + 4, &d, 4);
}

#endif
