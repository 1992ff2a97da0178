/*
 * kv_q8.c: the Q8_0 KV cache's row format: rounding float rows to GGUF's
 * Q8_0 blocks as ggml does (d = max|x| / 127 stored as fp16, q =
 * round(x / d)), the attention kernels that read the blocks in place
 * (portable, and AVX2 for whole blocks), and the conversions between the
 * cache types that snapshots of another type go through.
 *
 * Rounding error of one element x of a block whose largest magnitude is A:
 * q = round(x * 127 / A) is off by <= 1/2 step of d = A / 127, and storing
 * d in fp16 moves every d * q by <= 127 * d * 2^-11 = A * 2^-11, so
 * |x - fp16(d) * q| <= A * (1/254 + 2^-11) (tests/unit/test_kv_q8.c
 * builds its attention bound on this).
 */
#include "config.h"

#include "backend.h"
#include "kv_q8.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#ifdef HAVE_X86_SIMD
#include <immintrin.h>
#endif

#define QB 32		/* elements per block */
#define QBYTES 34	/* fp16 scale + 32 int8 */

/* The scale of block b of row (stored little-endian, possibly unaligned). */
static inline float
blk_d(const unsigned char *row, int b)
{
	const unsigned char *p = row + (size_t)b * QBYTES;

	return q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static inline const int8_t *
blk_q(const unsigned char *row, int b)
{
	return (const int8_t *)(row + (size_t)b * QBYTES + 2);
}

void
kvq8_quantize(const float *x, void *dst, int n)
{
	unsigned char *o = dst;
	int b, i;

	for (b = 0; b < n / QB; b++, o += QBYTES, x += QB) {
		float amax = 0, d, id;
		uint16_t h;

		for (i = 0; i < QB; i++)
			if (fabsf(x[i]) > amax)
				amax = fabsf(x[i]);
		d = amax / 127.0f;
		id = d != 0 ? 1.0f / d : 0;
		h = q_f32_to_fp16(d);
		o[0] = (unsigned char)(h & 0xff);
		o[1] = (unsigned char)(h >> 8);
		for (i = 0; i < QB; i++)
			o[2 + i] = (unsigned char)(int8_t)roundf(x[i] * id);
	}
}

float
kvq8_dot(const void *row, int i0, const float *b, int n)
{
	const unsigned char *r = row;
	float s = 0;
	int i = 0;

	/* one block (or the part of it inside the slice) per step */
	while (i < n) {
		int e = i0 + i, blk = e / QB, j0 = e % QB, m = QB - j0 < n - i ? QB - j0 : n - i, j;
		const int8_t *q = blk_q(r, blk) + j0;
		float bs = 0;

		for (j = 0; j < m; j++)
			bs += (float)q[j] * b[i + j];
		s += bs * blk_d(r, blk);
		i += m;
	}
	return s;
}

void
kvq8_axpy(float *y, float a, const void *row, int i0, int n)
{
	const unsigned char *r = row;
	int i = 0;

	while (i < n) {
		int e = i0 + i, blk = e / QB, j0 = e % QB, m = QB - j0 < n - i ? QB - j0 : n - i, j;
		const int8_t *q = blk_q(r, blk) + j0;
		float ad = a * blk_d(r, blk);

		for (j = 0; j < m; j++)
			y[i + j] += ad * (float)q[j];
		i += m;
	}
}

#ifdef HAVE_X86_SIMD
#define SIMD_TARGET __attribute__((target("avx2,fma,f16c")))

/* Elements 8k..8k+7 of a block's 32 int8 as floats. */
SIMD_TARGET static inline __m256
q8_lane(const int8_t *q, int k)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * k))));
}

SIMD_TARGET float
kvq8_dot_avx(const void *row, int i0, const float *b, int n)
{
	const unsigned char *r = row;
	__m256 acc = _mm256_setzero_ps();
	__m128 s;
	int blk;

	for (blk = 0; blk < n / QB; blk++) {
		const int8_t *q = blk_q(r, i0 / QB + blk);
		const float *x = b + blk * QB;
		__m256 t = _mm256_mul_ps(q8_lane(q, 0), _mm256_loadu_ps(x));

		t = _mm256_fmadd_ps(q8_lane(q, 1), _mm256_loadu_ps(x + 8), t);
		t = _mm256_fmadd_ps(q8_lane(q, 2), _mm256_loadu_ps(x + 16), t);
		t = _mm256_fmadd_ps(q8_lane(q, 3), _mm256_loadu_ps(x + 24), t);
		acc = _mm256_fmadd_ps(_mm256_set1_ps(blk_d(r, i0 / QB + blk)), t, acc);
	}
	s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

SIMD_TARGET void
kvq8_axpy_avx(float *y, float a, const void *row, int i0, int n)
{
	const unsigned char *r = row;
	int blk, k;

	for (blk = 0; blk < n / QB; blk++) {
		const int8_t *q = blk_q(r, i0 / QB + blk);
		__m256 ad = _mm256_set1_ps(a * blk_d(r, i0 / QB + blk));
		float *o = y + blk * QB;

		for (k = 0; k < 4; k++)
			_mm256_storeu_ps(o + 8 * k, _mm256_fmadd_ps(ad, q8_lane(q, k),
			    _mm256_loadu_ps(o + 8 * k)));
	}
}
#endif

/* ---- row formats of the cache types (backend.h) ---- */

size_t
kvc_kv_row_bytes(enum gguf_dtype type, int n)
{
	if (n < 0)
		return 0;
	switch (type) {
	case GGML_TYPE_F32: return (size_t)n * 4;
	case GGML_TYPE_F16: return (size_t)n * 2;
	case GGML_TYPE_Q8_0: return n % QB ? 0 : (size_t)(n / QB) * QBYTES;
	default: return 0;
	}
}

int
kvc_kv_row_to_f32(enum gguf_dtype type, const void *src, float *dst, int n)
{
	const unsigned char *s = src;
	int i;

	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof *dst);
		return KVC_OK;
	case GGML_TYPE_F16:
		for (i = 0; i < n; i++)
			dst[i] = q_fp16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
		return KVC_OK;
	case GGML_TYPE_Q8_0:
		if (n % QB)
			return KVC_EINVAL;
		for (i = 0; i < n; i++)
			dst[i] = blk_d(s, i / QB) * (float)blk_q(s, i / QB)[i % QB];
		return KVC_OK;
	default:
		return KVC_EUNSUPPORTED;
	}
}

int
kvc_kv_row_from_f32(enum gguf_dtype type, const float *src, void *dst, int n)
{
	unsigned char *d = dst;
	int i;

	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof *src);
		return KVC_OK;
	case GGML_TYPE_F16:
		for (i = 0; i < n; i++) {
			uint16_t h = q_f32_to_fp16(src[i]);

			d[2 * i] = (unsigned char)(h & 0xff);
			d[2 * i + 1] = (unsigned char)(h >> 8);
		}
		return KVC_OK;
	case GGML_TYPE_Q8_0:
		if (n % QB)
			return KVC_EINVAL;
		kvq8_quantize(src, dst, n);
		return KVC_OK;
	default:
		return KVC_EUNSUPPORTED;
	}
}
