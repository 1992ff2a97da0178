/*
 * dev_util.cuh: the few one-line device helpers every kernel file of the
 * CUDA backend uses (fp16 bits to float, the dp4a dot, unaligned 4-byte
 * loads, a warp's sum and maximum).
 *
 * The one place in the tree with function bodies in a header, on purpose:
 * without relocatable device code (-rdc, a device link step and no
 * inlining across files) a __device__ function must be defined in every
 * translation unit that calls it, and these must inline into the kernels'
 * inner loops. Each is __host__ __device__ where the host runs the same
 * arithmetic (tests/unit/test_cuda_i8.cu checks the int8 parts on the CPU).
 */
#ifndef KVC_CUDA_DEV_UTIL_CUH
#define KVC_CUDA_DEV_UTIL_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}

/* fp16 bits to float, on the device or the host */
__host__ __device__ static inline float
h2f_any(uint16_t h)
{
#ifdef __CUDA_ARCH__
	return __half2float(__ushort_as_half(h));
#else
	return q_fp16_to_f32(h);
#endif
}

/* a . b over 4 int8 lanes, plus c (the dp4a instruction on the device, sm_61 and up) */
__host__ __device__ static inline int
dot4(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
	return __dp4a(a, b, c);
#else
	for (int i = 0; i < 4; i++)
		c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
	return c;
#endif
}

/* 4 bytes at p, 2-byte aligned (blocks of 18, 22, 34, 110 or 210 bytes) */
__host__ __device__ static inline int
ld4_u16(const uint8_t *p)
{
	const uint16_t *h = (const uint16_t *)p;

	return (int)((uint32_t)h[0] | (uint32_t)h[1] << 16);
}

/* 4 bytes at p, 4-byte aligned */
__host__ __device__ static inline int
ld4(const uint8_t *p)
{
	return *(const int *)p;
}

/* fp16 at p (2-byte aligned) as float */
__host__ __device__ static inline float
ldh(const uint8_t *p)
{
	return h2f_any(*(const uint16_t *)p);
}

/* the sum of s over the 32 lanes of a warp, in every lane */
__device__ static inline float
warp_sum(float s)
{
	for (int o = 16; o > 0; o /= 2)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	return s;
}

/* the largest of m over the 32 lanes of a warp, in every lane */
__device__ static inline float
warp_max(float m)
{
	for (int o = 16; o > 0; o /= 2)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	return m;
}

#endif
