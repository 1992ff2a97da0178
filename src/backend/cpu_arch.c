/*
 * cpu_arch.c: the pieces of the CPU forward that differ between
 * architectures, kept out of cpu.c's data flow: RoPE frequencies (gemma's
 * windowed layers have their own base), the gate activation (SwiGLU for
 * llama/qwen, GELU with tanh for gemma, as ggml_gelu), softcapping (gemma2).
 */
#include "cpu_arch.h"
#include "quant/quant.h"

#include <math.h>

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
cpu_gate_act(float *g, const float *u, int64_t r0, int64_t r1, bool gelu)
{
	/* sqrt(2/pi) and the cubic coefficient of the tanh form of GELU */
	const float k0 = 0.7978845608028654f, k1 = 0.044715f;
	int64_t r;

	if (gelu) {
		for (r = r0; r < r1; r++) {
			float x = g[r];

			g[r] = 0.5f * x * (1.0f + tanhf(k0 * x * (1.0f + k1 * x * x))) * u[r];
		}
	} else {
		for (r = r0; r < r1; r++)
			g[r] = g[r] / (1.0f + expf(-g[r])) * u[r];
	}
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
	const float k0 = 0.7978845608028654f, k1 = 0.044715f;
	int64_t i;

	for (i = 0; i < n; i++) {
		float v = x[i] + (b ? b[i] : 0.0f);

		x[i] = 0.5f * v * (1.0f + tanhf(k0 * v * (1.0f + k1 * v * v)));
	}
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
