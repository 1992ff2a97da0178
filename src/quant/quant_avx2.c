/*
 * quant_avx2.c: AVX2+FMA(+F16C) dot products of quantised rows with float
 * activations. Each function carries the target attribute so the rest of
 * the program builds for the baseline CPU; q_avx2_cpu() gates every call.
 *
 * The quants are widened to float in registers (never stored), multiplied
 * with x per sub-block, and the sub-block sum is scaled once: for a block
 * with scale d and (K-quants) min m, sum_i (d q_i - m) x_i is computed as
 * d * sum_i q_i x_i - m * sum_i x_i.
 */
#include "quant_impl.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

bool
q_avx2_cpu(void)
{
	return kvc_cpu_avx2();
}

static inline uint16_t
rd16(const void *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

AVX2 static inline float
h2f(const void *p)
{
	return _cvtsh_ss(rd16(p));
}

/* 8 signed / unsigned bytes -> 8 floats */
AVX2 static inline __m256
i8f(__m128i b)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

AVX2 static inline __m256
u8f(__m128i b)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
}

/* sum over 32 lanes of q * x, q given as 32 bytes in two 128-bit halves */
AVX2 static inline __m256
dot32_i8(__m128i a, __m128i b, const float *x)
{
	__m256 s = _mm256_mul_ps(i8f(a), _mm256_loadu_ps(x));

	s = _mm256_fmadd_ps(i8f(_mm_srli_si128(a, 8)), _mm256_loadu_ps(x + 8), s);
	s = _mm256_fmadd_ps(i8f(b), _mm256_loadu_ps(x + 16), s);
	return _mm256_fmadd_ps(i8f(_mm_srli_si128(b, 8)), _mm256_loadu_ps(x + 24), s);
}

AVX2 static inline __m256
dot32_u8(__m128i a, __m128i b, const float *x)
{
	__m256 s = _mm256_mul_ps(u8f(a), _mm256_loadu_ps(x));

	s = _mm256_fmadd_ps(u8f(_mm_srli_si128(a, 8)), _mm256_loadu_ps(x + 8), s);
	s = _mm256_fmadd_ps(u8f(b), _mm256_loadu_ps(x + 16), s);
	return _mm256_fmadd_ps(u8f(_mm_srli_si128(b, 8)), _mm256_loadu_ps(x + 24), s);
}

AVX2 static inline __m256
sum32(const float *x)
{
	return _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
	    _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
}

AVX2 static float
dot_f32(const float *w, const float *x, int64_t n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	float t = 0;

	for (; i + 32 <= n; i += 32) {
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
		a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
		a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
		a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
	}
	for (; i + 8 <= n; i += 8)
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
	for (; i < n; i++) {
		float v;
		memcpy(&v, w + i, 4);
		t += v * x[i];
	}
	return q_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + t;
}

AVX2 static inline __m256
ld_f16(const uint8_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AVX2 static inline __m256
ld_bf16(const uint8_t *p)
{
	__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AVX2 static float
dot_f16(const uint8_t *w, const float *x, int64_t n, bool bf)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	float t = 0;

#define LD(k) (bf ? ld_bf16(w + 2 * (i + (k))) : ld_f16(w + 2 * (i + (k))))
	for (; i + 32 <= n; i += 32) {
		a0 = _mm256_fmadd_ps(LD(0), _mm256_loadu_ps(x + i), a0);
		a1 = _mm256_fmadd_ps(LD(8), _mm256_loadu_ps(x + i + 8), a1);
		a2 = _mm256_fmadd_ps(LD(16), _mm256_loadu_ps(x + i + 16), a2);
		a3 = _mm256_fmadd_ps(LD(24), _mm256_loadu_ps(x + i + 24), a3);
	}
	for (; i + 8 <= n; i += 8)
		a0 = _mm256_fmadd_ps(LD(0), _mm256_loadu_ps(x + i), a0);
#undef LD
	for (; i < n; i++) {
		uint16_t h = rd16(w + 2 * i);
		t += (bf ? q_bf16_to_f32(h) : q_fp16_to_f32(h)) * x[i];
	}
	return q_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + t;
}

/* Blocks are addressed as bytes: rows need not be aligned. */
AVX2 static float
dot_q8_0(const uint8_t *b, const float *x, int64_t nb)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
	int64_t i = 0;

	/* two accumulators so consecutive blocks' final FMAs do not wait on each other */
	for (; i + 2 <= nb; i += 2) {
		const uint8_t *p = b + 34 * i, *q = p + 34;
		__m256 s0 = dot32_i8(_mm_loadu_si128((const __m128i *)(p + 2)),
		    _mm_loadu_si128((const __m128i *)(p + 18)), x + 32 * i);
		__m256 s1 = dot32_i8(_mm_loadu_si128((const __m128i *)(q + 2)),
		    _mm_loadu_si128((const __m128i *)(q + 18)), x + 32 * i + 32);
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(p)), s0, acc0);
		acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(q)), s1, acc1);
	}
	for (; i < nb; i++) {
		const uint8_t *p = b + 34 * i;
		__m256 s0 = dot32_i8(_mm_loadu_si128((const __m128i *)(p + 2)),
		    _mm_loadu_si128((const __m128i *)(p + 18)), x + 32 * i);
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(p)), s0, acc0);
	}
	return q_hsum8(_mm256_add_ps(acc0, acc1));
}

AVX2 static float
dot_q4_0(const uint8_t *b, const float *x, int64_t nb)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
	const __m128i lo4 = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);

	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *p = b + 18 * i;
		__m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
		__m128i a = _mm_sub_epi8(_mm_and_si128(v, lo4), eight);
		__m128i h = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), lo4), eight);
		__m256 s = dot32_i8(a, h, x + 32 * i);
		__m256 d = _mm256_set1_ps(h2f(p));
		if (i & 1)
			acc1 = _mm256_fmadd_ps(d, s, acc1);
		else
			acc0 = _mm256_fmadd_ps(d, s, acc0);
	}
	return q_hsum8(_mm256_add_ps(acc0, acc1));
}

/*
 * dsc[j] = d * scale_j (* dx[j] when dx is given), dmn[j] = dmin * min_j
 * for the 8 sub-blocks of a Q4_K/Q5_K block.
 */
AVX2 static inline void
k_scales(const uint8_t *packed, float d, float dmin, const float *dx, float *dsc, float *dmn)
{
	uint8_t sc[8], mn[8];
	__m256 s, m;

	q_k_scales8_le(packed, sc, mn);
	s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc)));
	m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn)));
	s = _mm256_mul_ps(_mm256_set1_ps(d), s);
	if (dx != NULL)
		s = _mm256_mul_ps(s, _mm256_loadu_ps(dx));
	_mm256_storeu_ps(dsc, s);
	_mm256_storeu_ps(dmn, _mm256_mul_ps(_mm256_set1_ps(dmin), m));
}

/* xs[j] = sum of x[32j .. 32j+32), for the min terms of Q4_K/Q5_K. */
AVX2 static void
xsums(const float *x, int64_t n, float *xs)
{
	for (int64_t j = 0; j < n / 32; j++)
		xs[j] = q_hsum8(sum32(x + 32 * j));
}

/*
 * Q4_K and Q5_K share everything but the 5th bit. The min part of block b,
 * sum_j dmin m_j xs[8b + j], is one 8-lane FMA per block given the
 * sub-block sums xs (precomputed once per token by the caller, or here).
 * Two accumulators (low / high nibble halves) halve the FMA chain.
 */
AVX2 static float
dot_q45_k(const uint8_t *blk, size_t bsz, bool q5, const float *x, const float *xs_in, int64_t nb)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, macc = acc0;
	const __m128i lo4 = _mm_set1_epi8(0xF), one = _mm_set1_epi8(1);
	float xs_local[8];

	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		const uint8_t *p = blk + (size_t)i * bsz;
		const uint8_t *scales = p + 4;
		const uint8_t *qh = q5 ? p + 4 + K_SCALE_SIZE : NULL;
		const uint8_t *qs = p + 4 + K_SCALE_SIZE + (q5 ? QK_K / 8 : 0);
		float d = h2f(p), dmin = h2f(p + 2);
		float dsc[8], dmn[8];
		__m128i h0 = _mm_setzero_si128(), h1 = h0;
		const float *xs = xs_in ? xs_in + 8 * i : xs_local;

		if (xs_in == NULL)
			xsums(x, QK_K, xs_local);
		k_scales(scales, d, dmin, NULL, dsc, dmn);
		macc = _mm256_fmadd_ps(_mm256_loadu_ps(dmn), _mm256_loadu_ps(xs), macc);
		if (q5) {
			h0 = _mm_loadu_si128((const __m128i *)qh);
			h1 = _mm_loadu_si128((const __m128i *)(qh + 16));
		}
		for (int c = 0; c < 4; c++) {
			__m128i v0 = _mm_loadu_si128((const __m128i *)(qs + 32 * c));
			__m128i v1 = _mm_loadu_si128((const __m128i *)(qs + 32 * c + 16));
			__m128i a0 = _mm_and_si128(v0, lo4), a1 = _mm_and_si128(v1, lo4);
			__m128i b0 = _mm_and_si128(_mm_srli_epi16(v0, 4), lo4);
			__m128i b1 = _mm_and_si128(_mm_srli_epi16(v1, 4), lo4);

			if (q5) {
				/* bit 2c of qh[l] tops value l of sub-block 2c, bit 2c+1 of 2c+1 */
				__m128i c0 = _mm_cvtsi32_si128(2 * c), c1 = _mm_cvtsi32_si128(2 * c + 1);
				a0 = _mm_or_si128(a0, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(h0, c0), one), 4));
				a1 = _mm_or_si128(a1, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(h1, c0), one), 4));
				b0 = _mm_or_si128(b0, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(h0, c1), one), 4));
				b1 = _mm_or_si128(b1, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(h1, c1), one), 4));
			}
			const float *xc = x + 64 * c;
			acc0 = _mm256_fmadd_ps(_mm256_set1_ps(dsc[2 * c]), dot32_u8(a0, a1, xc), acc0);
			acc1 = _mm256_fmadd_ps(_mm256_set1_ps(dsc[2 * c + 1]), dot32_u8(b0, b1, xc + 32), acc1);
		}
	}
	return q_hsum8(_mm256_add_ps(acc0, acc1)) - q_hsum8(macc);
}

/* fs[g] = d * scales[g] for the 16 int8 scales of a Q6_K block */
AVX2 static inline void
q6_scales(const int8_t *sc, float d, float *fs)
{
	__m128i v = _mm_loadu_si128((const __m128i *)sc);
	__m256 dd = _mm256_set1_ps(d);

	_mm256_storeu_ps(fs, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
	_mm256_storeu_ps(fs + 8, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))));
}

AVX2 static float
dot_q6_k(const uint8_t *b, const float *x, int64_t nb)
{
	__m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
	const __m128i lo4 = _mm_set1_epi8(0xF), three = _mm_set1_epi8(3), k32 = _mm_set1_epi8(32);

	for (int64_t i = 0; i < nb; i++) {
		/* ql[128], qh[64], scales[16], d */
		const uint8_t *blk = b + 210 * i;
		float fs16[16];
		q6_scales((const int8_t *)(blk + 192), h2f(blk + 208), fs16);
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
			const float *fs = fs16 + 8 * h;
			const float *xh = x + QK_K * i + 128 * h;
			/* l in [16g, 16g+16): sub-blocks g, 2+g, 4+g, 6+g */
			for (int g = 0; g < 2; g++) {
				__m128i la = _mm_loadu_si128((const __m128i *)(ql + 16 * g));
				__m128i lb = _mm_loadu_si128((const __m128i *)(ql + 32 + 16 * g));
				__m128i hh = _mm_loadu_si128((const __m128i *)(qh + 16 * g));
				__m128i q[4];
				q[0] = _mm_or_si128(_mm_and_si128(la, lo4),
				    _mm_slli_epi16(_mm_and_si128(hh, three), 4));
				q[1] = _mm_or_si128(_mm_and_si128(lb, lo4),
				    _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hh, 2), three), 4));
				q[2] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(la, 4), lo4),
				    _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hh, 4), three), 4));
				q[3] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(lb, 4), lo4),
				    _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hh, 6), three), 4));
				for (int k = 0; k < 4; k++) {
					__m128i v = _mm_sub_epi8(q[k], k32);
					const float *xs = xh + 32 * k + 16 * g;
					__m256 s = _mm256_mul_ps(i8f(v), _mm256_loadu_ps(xs));
					s = _mm256_fmadd_ps(i8f(_mm_srli_si128(v, 8)), _mm256_loadu_ps(xs + 8), s);
					__m256 dd = _mm256_broadcast_ss(fs + 2 * k + g);
					acc[k] = _mm256_fmadd_ps(dd, s, acc[k]);
				}
			}
		}
	}
	return q_hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

bool
q_avx2_dot(enum gguf_dtype t, const void *row, const float *x, const float *xs, int64_t n, float *out)
{
	switch (t) {
	case GGML_TYPE_F32: *out = dot_f32(row, x, n); return true;
	case GGML_TYPE_F16: *out = dot_f16(row, x, n, false); return true;
	case GGML_TYPE_BF16: *out = dot_f16(row, x, n, true); return true;
	case GGML_TYPE_Q8_0: *out = dot_q8_0(row, x, n / QK8_0); return true;
	case GGML_TYPE_Q4_0: *out = dot_q4_0(row, x, n / QK4_0); return true;
	case GGML_TYPE_Q4_K: *out = dot_q45_k(row, sizeof(block_q4_K), false, x, xs, n / QK_K); return true;
	case GGML_TYPE_Q5_K: *out = dot_q45_k(row, sizeof(block_q5_K), true, x, xs, n / QK_K); return true;
	case GGML_TYPE_Q6_K: *out = dot_q6_k(row, x, n / QK_K); return true;
	default: return false;
	}
}

void
q_avx2_xsums(const float *x, int64_t n, float *xs)
{
	xsums(x, n, xs);
}

/*
 * q_act_prepare's work with vectors: the same d, the same levels (the
 * conversion rounds to nearest even, as lrintf does in the default mode),
 * the sum of x in a vector order (so it may differ from the scalar sum in
 * the last bits; every token on this CPU takes this path).
 */
AVX2 void
q_avx2_act_prepare(const float *x, int64_t n_in, void *act)
{
	int64_t nb = n_in / 32;
	float *d = act, *xs = d + nb;
	int8_t *q = (int8_t *)(xs + nb);
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));

	for (int64_t b = 0; b < nb; b++) {
		const float *xb = x + 32 * b;
		__m256 v[4], m;
		for (int i = 0; i < 4; i++)
			v[i] = _mm256_loadu_ps(xb + 8 * i);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absm), _mm256_and_ps(v[1], absm)),
		    _mm256_max_ps(_mm256_and_ps(v[2], absm), _mm256_and_ps(v[3], absm)));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		float amax = _mm_cvtss_f32(h);
		float db = amax / 127.0f, id = db > 0 ? 127.0f / amax : 0;
		__m256 iv = _mm256_set1_ps(id);
		d[b] = db;
		xs[b] = q_hsum8(sum32(xb));
		__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], iv));
		__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], iv));
		__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], iv));
		__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], iv));
		/* packs interleave 128-bit lanes: put the 8 dwords groups back in order */
		__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		_mm256_storeu_si256((__m256i *)(q + 32 * b), p);
	}
}

#else	/* not x86: the portable kernels only */

bool
q_avx2_cpu(void)
{
	return false;
}

bool
q_avx2_dot(enum gguf_dtype t, const void *row, const float *x, const float *xs, int64_t n, float *out)
{
	return false;
}

void
q_avx2_xsums(const float *x, int64_t n, float *xs)
{
}

void
q_avx2_act_prepare(const float *x, int64_t n_in, void *act)
{
}

#endif
