/*
 * cpu_simd.h: the CPU backend's attention kernels over one cache row
 * (cpu_simd.c); internal to the backend module.
 */
#ifndef KVC_CPU_SIMD_H
#define KVC_CPU_SIMD_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86_SIMD 1
#endif

/* sum_i a[i] * b[i], a an F32 or F16 row */
float cpu_dot_f32(const float *a, const float *b, int n);
float cpu_dot_f16(const uint16_t *a, const float *b, int n);
/* y[i] += a * x[i], x an F32 or F16 row */
void cpu_axpy_f32(float *y, float a, const float *x, int n);
void cpu_axpy_f16(float *y, float a, const uint16_t *x, int n);

#ifdef HAVE_X86_SIMD
/* The same with AVX2+FMA+F16C: only call when kvc_cpu_avx2() is true. */
float cpu_dot_f32_avx(const float *a, const float *b, int n);
float cpu_dot_f16_avx(const uint16_t *a, const float *b, int n);
void cpu_axpy_f32_avx(float *y, float a, const float *x, int n);
void cpu_axpy_f16_avx(float *y, float a, const uint16_t *x, int n);
#endif

#endif
