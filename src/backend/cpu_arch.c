/*
 * cpu_arch.c: the pieces of the CPU forward that differ between
 * architectures, kept out of cpu.c's data flow: RoPE frequencies (gemma's
 * windowed layers have their own base; YaRN's blend), the gate activation (SwiGLU for
 * llama/qwen, GELU with tanh for gemma, as ggml_gelu), softcapping (gemma2).
 */
#include "cpu_arch.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* sqrt(2/pi) and the cubic coefficient of the tanh form of GELU */
#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))

/*
 * e^x for 8 floats: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor
 * polynomial to r^6 (relative error below 2e-7 there), times 2^n built in the
 * exponent bits. x is clamped to [-87, 88] so 2^n stays a normal float: the
 * callers only need e^x to saturate (huge or tiny), not to overflow.
 */
AVX2 static inline __m256
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
AVX2 static inline void
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
AVX2 static void
act_avx2(float *g, const float *u, int64_t n, bool gelu)
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
#endif

/* act(x) on a CPU without AVX2: the same functions through libm */
static float
act1(float x, bool gelu)
{
	if (gelu)
		return 0.5f * x * (1.0f + tanhf(GELU_K0 * x * (1.0f + GELU_K1 * x * x)));
	return x / (1.0f + expf(-x));
}

void
cpu_rope_freqs(double *inv_freq, int rope_dim, double theta, double scale,
    const struct kvc_weight *factors)
{
	int i;

	for (i = 0; i < rope_dim / 2; i++) {
		double f = scale * pow(theta, -2.0 * i / rope_dim);

		if (factors != NULL && factors->data != NULL) {
			float ff;

			/* one element at a time: the vector's type has block size 1 */
			q_dequant_row(factors->type, (const char *)factors->data +
			    (size_t)i * gguf_dtype_size(factors->type), &ff, 1);
			f /= ff;
		}
		inv_freq[i] = f;
	}
}

void
cpu_rope_yarn(double *inv_freq, const struct kvc_hparams *hp, double scale)
{
	double span = hp->yarn_high - hp->yarn_low > 0.001 ? hp->yarn_high - hp->yarn_low : 0.001;

	for (int i = 0; i < hp->rope_dim / 2; i++) {
		double y = (i - hp->yarn_low) / span, mix = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);

		/* inv_freq holds scale * f_i: the interpolated frequency; f_i is the extrapolated one */
		inv_freq[i] = inv_freq[i] * (1 - mix) + inv_freq[i] / scale * mix;
	}
}

void
cpu_gate_act(float *g, const float *u, int64_t r0, int64_t r1, bool gelu)
{
	int64_t r;

#if defined(__x86_64__)
	if (kvc_cpu_avx2()) {
		act_avx2(g + r0, u + r0, r1 - r0, gelu);
		return;
	}
#endif
	for (r = r0; r < r1; r++)
		g[r] = act1(g[r], gelu) * u[r];
}

void
cpu_softcap(float *x, size_t n, float cap)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] / cap);
}

void
cpu_layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps)
{
	double mean = 0, var = 0;
	float sc;
	int i;

	for (i = 0; i < n; i++)
		mean += x[i];
	mean /= n;
	for (i = 0; i < n; i++)
		var += (x[i] - mean) * (x[i] - mean);
	sc = (float)(1.0 / sqrt(var / n + eps));
	for (i = 0; i < n; i++)
		y[i] = (float)(x[i] - mean) * sc * w[i] + (b ? b[i] : 0.0f);
}

void
cpu_gelu_bias(float *x, const float *b, int64_t n)
{
	int64_t i;

	if (b != NULL)
		for (i = 0; i < n; i++)
			x[i] += b[i];
#if defined(__x86_64__)
	if (kvc_cpu_avx2()) {
		act_avx2(x, NULL, n, true);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		x[i] = act1(x[i], true);
}

void
cpu_rope(float *x, const float *cs, int rope_dim, bool neox)
{
	int i, half = rope_dim / 2;

	for (i = 0; i < half; i++) {
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[a], x1 = x[b];

		x[a] = x0 * c - x1 * s;
		x[b] = x0 * s + x1 * c;
	}
}
