/*
 * quant_impl.h: what quant.c and its SIMD kernels (quant_avx2.c) share;
 * internal to the quant module.
 */
#ifndef KVC_QUANT_IMPL_H
#define KVC_QUANT_IMPL_H

#include "quant.h"

/* The AVX2+FMA+F16C kernels: only call when q_avx2_cpu() is true. */
bool q_avx2_cpu(void);
/*
 * sum_i row[i] * x[i]; false if t has no AVX2 kernel (caller falls back).
 * xs: for Q4_K/Q5_K, the sums of x over each 32 (from q_avx2_xsums), or
 * NULL to compute them here; the result is bitwise the same either way.
 */
bool q_avx2_dot(enum ggml_type t, const void *row, const float *x, const float *xs, int64_t n, float *out);
void q_avx2_xsums(const float *x, int64_t n, float *xs);	/* xs[n / 32] */

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

#endif
