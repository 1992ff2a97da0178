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
