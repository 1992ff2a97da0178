/*
 * half.c: IEEE half and bfloat16 <-> float conversions, one value at a
 * time (the SIMD kernels convert whole vectors themselves). Below
 * everything else in the module: quant.c, quant_avx2.c and the backends
 * call these.
 */
#include "quant.h"

#include <string.h>

static inline uint32_t
f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float
bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

float
q_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;

	if (e == 0) {
		/* zero or subnormal: m * 2^-24, exact in float */
		float v = (float)m * (1.0f / 16777216.0f);
		return (h & 0x8000) ? -v : v;
	}
	if (e == 31)	/* inf, nan (payload kept) */
		return bits_f32(sign | 0x7f800000 | (m << 13));
	return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t
q_f32_to_fp16(float f)
{
	uint32_t x = f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t e, m, h, rem, half, shift;

	x &= 0x7fffffff;
	if (x >= 0x7f800000) {
		if (x == 0x7f800000)
			return sign | 0x7c00;
		return sign | 0x7e00 | ((x >> 13) & 0x3ff);	/* quiet nan */
	}
	/* 65520 is halfway between 65504 (odd mantissa) and 2^16: ties go up */
	if (x >= 0x477ff000)
		return sign | 0x7c00;
	e = x >> 23;
	m = x & 0x7fffff;
	if (e >= 113) {		/* normal half */
		h = ((e - 112) << 10) | (m >> 13);
		rem = m & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
			h++;	/* a carry into the exponent is still right */
		return sign | (uint16_t)h;
	}
	if (e < 102)		/* below 2^-25: rounds to zero */
		return sign;
	/* subnormal half: value = (m | 2^23) * 2^(e-150), in units of 2^-24 */
	m |= 0x800000;
	shift = 126 - e;	/* 14..24 */
	h = m >> shift;
	rem = m & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (h & 1)))
		h++;
	return sign | (uint16_t)h;
}

float
q_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t
q_f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);

	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);	/* quiet nan */
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
