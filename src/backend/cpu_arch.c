/*
 * cpu_arch.c: the pieces of the CPU forward that differ between
 * architectures, kept out of cpu.c's data flow: RoPE frequencies (gemma's
 * windowed layers have their own base; YaRN's blend), the gate activation
 * (SwiGLU for llama/qwen, GELU with tanh for gemma, as ggml_gelu: the kernel
 * table's), softcapping (gemma2).
 */
#include "cpu_arch.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

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
cpu_gate_act(const struct kern *k, float *g, const float *u, int64_t r0, int64_t r1, bool gelu)
{
	k->act(g + r0, u + r0, r1 - r0, gelu);
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
cpu_gelu_bias(const struct kern *k, float *x, const float *b, int64_t n)
{
	int64_t i;

	if (b != NULL)
		for (i = 0; i < n; i++)
			x[i] += b[i];
	k->act(x, NULL, n, true);
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
