/*
 * cpu_arch.h: the pieces of the CPU forward that differ between
 * architectures (cpu_arch.c): RoPE frequencies, the FFN gate's activation,
 * softcapping, gpt2's LayerNorm and ungated GELU. Internal to the backend module.
 */
#ifndef KVC_CPU_ARCH_H
#define KVC_CPU_ARCH_H

#include "kern/kern.h"
#include "model/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * inv_freq[i] = scale * theta^(-2i/rope_dim) / factors[i], i < rope_dim/2;
 * factors (llama 3.1's rope_freqs.weight) may be NULL or absent.
 */
void cpu_rope_freqs(double *inv_freq, int rope_dim, double theta, double scale,
    const struct kvc_weight *factors);

/*
 * YaRN (hp->rope_yarn): inv_freq from cpu_rope_freqs with linear scale
 * `scale` becomes, pair by pair, the blend of scaled and unscaled
 * frequencies model.h describes. The angle stays linear in the position, so
 * kv_shift's rotations by a position delta remain exact.
 */
void cpu_rope_yarn(double *inv_freq, const struct kvc_hparams *hp, double scale);

/* g[r] = act(g[r]) * u[r] for r in [r0, r1): act SiLU, or GELU (tanh form) when gelu. */
void cpu_gate_act(const struct kern *k, float *g, const float *u, int64_t r0, int64_t r1, bool gelu);

/* x[i] = cap * tanh(x[i] / cap) over n elements (cap > 0). */
void cpu_softcap(float *x, size_t n, float cap);

/*
 * Rotate one head's first rope_dim dims by the angles in cs (cos, sin
 * pairs): NeoX pairs (i, i + rope_dim/2) or adjacent pairs (2i, 2i+1).
 */
void cpu_rope(float *x, const float *cs, int rope_dim, bool neox);

/* gpt2: y = (x - mean) / sqrt(var + eps) * w + b (b may be NULL; x and y may alias). */
void cpu_layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps);

/* gpt2's MLP activation: x[i] = GELU(x[i] + b[i]) (tanh form; b may be NULL). */
void cpu_gelu_bias(const struct kern *k, float *x, const float *b, int64_t n);

#endif
