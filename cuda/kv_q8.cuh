/*
 * kv_q8.cuh: the Q8_0 cache row's arithmetic as the device computes it,
 * written so that the same lines compile for the device (nvcc), for the
 * host inside the CUDA files and as plain C (tests/unit/test_cuda_kvq8.c,
 * which checks them bit for bit against src/kern's kern_kvq8_quantize on
 * the CPU, with or without nvcc).
 *
 * The cache keeps GGUF's Q8_0 rows on the device, exactly the bytes of the
 * CPU backend's rows and of a snapshot (kv_dim / 32 blocks of 34 bytes: an
 * fp16 scale d = max|x| / 127, then 32 int8 levels q = round(x / d),
 * halves away from zero), so kv_read and kv_write are plain copies and a
 * snapshot written on one backend restores on the other unchanged. For
 * the same floats the levels and scale are the CPU's bits: the division,
 * the reciprocal and the product are single IEEE operations on both sides
 * (nvcc's default -prec-div=true; no fast math), roundf is exact, and the
 * fp16 rounding is the integer routine below on both, not the hardware's
 * conversion.
 *
 * A header with function bodies on purpose, as dev_util.cuh: a device
 * function must be defined in every translation unit that calls it
 * (no relocatable device code), and the CPU test compiles these very lines.
 */
#ifndef KVC_CUDA_KV_Q8_CUH
#define KVC_CUDA_KV_Q8_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define KVQ8_HD __host__ __device__
#else
#define KVQ8_HD
#endif

#define KVQ8_QB 32		/* elements per block */
#define KVQ8_BYTES 34		/* fp16 scale + 32 int8 */

/* The bits of a float (the device's intrinsic; memcpy on the host). */
KVQ8_HD static inline uint32_t
kvq8_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
#endif
}

/*
 * f to IEEE half, round to nearest even, by integer operations only (the
 * value of src/quant's q_f32_to_fp16 for every float: infinities and NaN
 * kept, overflow to infinity, subnormal halves rounded, below 2^-25 to
 * zero).
 */
KVQ8_HD static inline uint16_t
kvq8_f32_to_fp16(float f)
{
	uint32_t x = kvq8_bits(f), e, m, h, rem, half, shift;
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);

	x &= 0x7fffffff;
	if (x >= 0x7f800000)
		return (uint16_t)(sign | (x == 0x7f800000 ? 0x7c00 : 0x7e00 | ((x >> 13) & 0x3ff)));
	if (x >= 0x477ff000)	/* at or past 65520, halfway to 2^16: infinity */
		return (uint16_t)(sign | 0x7c00);
	e = x >> 23;
	m = x & 0x7fffff;
	if (e >= 113) {		/* a normal half */
		h = ((e - 112) << 10) | (m >> 13);
		rem = m & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
			h++;	/* a carry into the exponent is still right */
		return (uint16_t)(sign | h);
	}
	if (e < 102)
		return sign;
	m |= 0x800000;		/* a subnormal half, in units of 2^-24 */
	shift = 126 - e;
	h = m >> shift;
	rem = m & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

/*
 * A block's scale from its largest magnitude: d = amax / 127 (stored as
 * fp16 in *h) and the reciprocal the levels are formed with (0 for an
 * all-zero block).
 */
KVQ8_HD static inline float
kvq8_scale(float amax, uint16_t *h)
{
	float d = amax / 127.0f;

	*h = kvq8_f32_to_fp16(d);
	return d != 0 ? 1.0f / d : 0;
}

/* One value's level under the reciprocal id of its block's scale. */
KVQ8_HD static inline int8_t
kvq8_level(float x, float id)
{
	return (int8_t)(int)roundf(x * id);
}

/*
 * Block of 32 values x into dst (34 bytes: scale little-endian, levels):
 * the sequential form of what kernel_kv_store_q8 does with a lane per
 * value (the largest magnitude is exact in any order).
 */
KVQ8_HD static inline void
kvq8_quantize_block(const float *x, uint8_t *dst)
{
	float amax = 0, id;
	uint16_t h;

	for (int i = 0; i < KVQ8_QB; i++)
		amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
	id = kvq8_scale(amax, &h);
	dst[0] = (uint8_t)(h & 0xff);
	dst[1] = (uint8_t)(h >> 8);
	for (int i = 0; i < KVQ8_QB; i++)
		dst[2 + i] = (uint8_t)kvq8_level(x[i], id);
}

/* fp16 bits to float (exact; the host's form, the device has an instruction). */
KVQ8_HD static inline float
kvq8_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	float f;

	if (e == 0x1f) {
		u = sign | 0x7f800000 | m << 13;
	} else if (e != 0) {
		u = sign | (e + 112) << 23 | m << 13;
	} else {
		f = (float)m * 5.9604644775390625e-8f;	/* subnormal or zero: m * 2^-24, exact */
		return sign ? -f : f;
	}
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Element col of a Q8_0 row as float: d * q (as kvc_kv_row_to_f32). */
KVQ8_HD static inline float
kvq8_at(const uint8_t *row, int64_t col)
{
	const uint8_t *b = row + col / KVQ8_QB * KVQ8_BYTES;
	uint16_t h = (uint16_t)(b[0] | b[1] << 8);
	float d;

#ifdef __CUDA_ARCH__
	d = __half2float(__ushort_as_half(h));
#else
	d = kvq8_fp16_to_f32(h);
#endif
	return d * (float)(int8_t)b[2 + col % KVQ8_QB];
}

#endif
