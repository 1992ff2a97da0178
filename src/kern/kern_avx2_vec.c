/*
 * kern_avx2_vec.c: the avx2 table's element-wise kernels over a token's
 * row (compiled with -mavx2 -mfma -mf16c, kern.am): RMSNorm, F16 stores of
 * cache rows, and the FFN activations.
 */
#include "kern_int.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* sqrt(2/pi) and the cubic coefficient of the tanh form of GELU */
#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f

/* sum of x[i]^2 in double (eight running sums) */
static double
sumsq(const float *x, int n)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = a0;
	__m128d h;
	double s;
	int i;

	for (i = 0; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
		__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));

		/* a float's square is exact in double: the FMA rounds only the sum */
		a0 = _mm256_fmadd_pd(lo, lo, a0);
		a1 = _mm256_fmadd_pd(hi, hi, a1);
	}
	a0 = _mm256_add_pd(a0, a1);
	h = _mm_add_pd(_mm256_castpd256_pd128(a0), _mm256_extractf128_pd(a0, 1));
	s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
	for (; i < n; i++)
		s += (double)x[i] * x[i];
	return s;
}

/* y[i] = x[i] * sc * w[i] (y may alias x): RMSNorm's scaling, the scalar loop's bits */
static void
scale_mul(float *y, const float *x, float sc, const float *w, int n)
{
	__m256 vs = _mm256_set1_ps(sc);
	int i;

	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
		    _mm256_loadu_ps(w + i)));
	for (; i < n; i++)
		y[i] = x[i] * sc * w[i];
}

void
kern_avx2_f32_to_f16(uint16_t *d, const float *x, int n)
{
	int i;

	for (i = 0; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
		    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	for (; i < n; i++)
		d[i] = q_f32_to_fp16(x[i]);
}

void
kern_avx2_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
	float sc = (float)(1.0 / sqrt(sumsq(x, n) / n + eps));

	scale_mul(y, x, sc, w, n);
}


/*
 * e^x for 8 floats: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor
 * polynomial to r^6 (relative error below 2e-7 there), times 2^n built in the
 * exponent bits. x is clamped to [-87, 88] so 2^n stays a normal float: the
 * callers only need e^x to saturate (huge or tiny), not to overflow.
 */
static inline __m256
exp8(__m256 x)
{
	const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f);
	const __m256 ln2_lo = _mm256_set1_ps(1.428606765330187e-06f);
	__m256 n, r, p;

	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, ln2_hi, x);
	r = _mm256_fnmadd_ps(n, ln2_lo, r);
	p = _mm256_set1_ps(1.0f / 720);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(
	    _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)));
}

/*
 * 8 elements of act(g) * u (u NULL: times 1). Both activations are x / (1 +
 * e^(-s)): SiLU with s = x, and GELU's 0.5 x (1 + tanh z) with s = 2z, since
 * 1 + tanh z = 2 / (1 + e^(-2z)).
 */
static inline void
act8(float *g, const float *u, bool gelu)
{
	__m256 x = _mm256_loadu_ps(g), s = x, y;

	if (gelu) {
		__m256 x2 = _mm256_mul_ps(x, x);

		s = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2 * GELU_K0), x),
		    _mm256_fmadd_ps(_mm256_set1_ps(GELU_K1), x2, _mm256_set1_ps(1.0f)));
	}
	y = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f),
	    exp8(_mm256_sub_ps(_mm256_setzero_ps(), s))));
	if (u != NULL)
		y = _mm256_mul_ps(y, _mm256_loadu_ps(u));
	_mm256_storeu_ps(g, y);
}

/*
 * act over n elements. The last n % 8 go through the same 8-wide code on a
 * padded copy, so an element's value never depends on where a thread's
 * range starts or ends: results stay bitwise independent of the thread
 * count and the batch.
 */
void
kern_avx2_act(float *g, const float *u, int64_t n, bool gelu)
{
	int64_t i;

	for (i = 0; i + 8 <= n; i += 8)
		act8(g + i, u ? u + i : NULL, gelu);
	if (i < n) {
		float tg[8] = { 0 }, tu[8] = { 0 };
		size_t rest = (size_t)(n - i) * sizeof(float);

		memcpy(tg, g + i, rest);
		if (u != NULL)
			memcpy(tu, u + i, rest);
		act8(tg, u ? tu : NULL, gelu);
		memcpy(g + i, tg, rest);
	}
}
