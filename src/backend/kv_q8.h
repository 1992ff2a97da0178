/*
 * kv_q8.h: the attention kernels over Q8_0 cache rows (kv_q8.c); internal
 * to the backend module. A Q8_0 row of n elements is n/32 of GGUF's Q8_0
 * blocks (fp16 scale d, then 32 int8 q; element = d * q), 34 bytes each,
 * so a head's slice [i0, i0 + n) may start and end inside a block.
 */
#ifndef KVC_KV_Q8_H
#define KVC_KV_Q8_H

#include "cpu_simd.h"

#include <stdbool.h>

/* sum_i row[i0 + i] * b[i] over i < n */
float kvq8_dot(const void *row, int i0, const float *b, int n);
/* y[i] += a * row[i0 + i] over i < n */
void kvq8_axpy(float *y, float a, const void *row, int i0, int n);
/* Round x[0..n) (n a multiple of 32) to Q8_0 blocks at dst. */
void kvq8_quantize(const float *x, void *dst, int n);

#ifdef HAVE_X86_SIMD
/*
 * The same with AVX2+FMA+F16C, for slices of whole blocks (i0 and n
 * multiples of 32); only call when kvc_cpu_avx2() is true.
 */
float kvq8_dot_avx(const void *row, int i0, const float *b, int n);
void kvq8_axpy_avx(float *y, float a, const void *row, int i0, int n);
#endif

/* Whether the AVX2 kernels take slice [i0, i0 + n). */
static inline bool
kvq8_whole_blocks(int i0, int n)
{
	return i0 % 32 == 0 && n % 32 == 0;
}

#endif
