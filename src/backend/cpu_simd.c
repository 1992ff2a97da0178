/*
 * cpu_simd.c: the vector kernels of the CPU backend's attention: dot
 * product and axpy over one cache row of F32 or F16 elements, portable and
 * with AVX2+FMA+F16C (chosen per call by cpu.c, which checks the CPU once).
 */
#include "cpu_simd.h"
#include "quant/quant.h"

#ifdef HAVE_X86_SIMD
#include <immintrin.h>
#endif

float
cpu_dot_f32(const float *a, const float *b, int n)
{
	float s = 0;
	int i;

	for (i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

float
cpu_dot_f16(const uint16_t *a, const float *b, int n)
{
	float s = 0;
	int i;

	for (i = 0; i < n; i++)
		s += q_fp16_to_f32(a[i]) * b[i];
	return s;
}

void
cpu_axpy_f32(float *y, float a, const float *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		y[i] += a * x[i];
}

void
cpu_axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		y[i] += a * q_fp16_to_f32(x[i]);
}

#ifdef HAVE_X86_SIMD
#define SIMD_TARGET __attribute__((target("avx2,fma,f16c")))

SIMD_TARGET static float
hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

SIMD_TARGET float
cpu_dot_f32_avx(const float *a, const float *b, int n)
{
	__m256 acc = _mm256_setzero_ps();
	float s;
	int i;

	for (i = 0; i + 8 <= n; i += 8)
		acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
	s = hsum8(acc);
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

SIMD_TARGET float
cpu_dot_f16_avx(const uint16_t *a, const float *b, int n)
{
	__m256 acc = _mm256_setzero_ps();
	float s;
	int i;

	for (i = 0; i + 8 <= n; i += 8) {
		__m256 va = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));

		acc = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + i), acc);
	}
	s = hsum8(acc);
	for (; i < n; i++)
		s += q_fp16_to_f32(a[i]) * b[i];
	return s;
}

SIMD_TARGET void
cpu_axpy_f32_avx(float *y, float a, const float *x, int n)
{
	__m256 va = _mm256_set1_ps(a);
	int i;

	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
		    _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * x[i];
}

SIMD_TARGET void
cpu_axpy_f16_avx(float *y, float a, const uint16_t *x, int n)
{
	__m256 va = _mm256_set1_ps(a);
	int i;

	for (i = 0; i + 8 <= n; i += 8) {
		__m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));

		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, vx, _mm256_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += a * q_fp16_to_f32(x[i]);
}
#endif
