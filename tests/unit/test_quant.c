/*
 * test_quant: the weight formats. Dequantisation is checked against blocks
 * built byte by byte here, with the expected values derived from the ggml
 * format definitions written out independently in this file; dot products
 * against a double-precision dot of the dequantised row (scalar and AVX2
 * kernels both); quantise -> dequantise against per-type error bounds.
 */
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float
frand(void)	/* uniform in [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static const char *
tname(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_F32: return "F32";
	case GGML_TYPE_F16: return "F16";
	case GGML_TYPE_BF16: return "BF16";
	case GGML_TYPE_Q8_0: return "Q8_0";
	case GGML_TYPE_Q4_0: return "Q4_0";
	case GGML_TYPE_Q4_1: return "Q4_1";
	case GGML_TYPE_Q5_0: return "Q5_0";
	case GGML_TYPE_Q5_1: return "Q5_1";
	case GGML_TYPE_Q3_K: return "Q3_K";
	case GGML_TYPE_Q4_K: return "Q4_K";
	case GGML_TYPE_Q5_K: return "Q5_K";
	case GGML_TYPE_Q6_K: return "Q6_K";
	default: return "?";
	}
}

static float
h2f(uint16_t h)
{
	return q_fp16_to_f32(h);
}

static uint16_t
f2h(float f)
{
	return q_f32_to_fp16(f);
}

static void
test_fp16(void)
{
	/* decoding: sign, 5-bit exponent (bias 15), 10-bit mantissa */
	test_cond(h2f(0x0000) == 0.0f && !signbit(h2f(0x0000)), "+0");
	test_cond(h2f(0x8000) == 0.0f && signbit(h2f(0x8000)), "-0");
	test_cond(h2f(0x3c00) == 1.0f, "1");
	test_cond(h2f(0xc000) == -2.0f, "-2");
	test_cond(h2f(0x7bff) == 65504.0f, "max half");
	test_cond(h2f(0x3555) == 0.333251953125f, "1/3 ~ 1365/4096");
	test_cond(h2f(0x0001) == ldexpf(1, -24), "smallest subnormal");
	test_cond(h2f(0x03ff) == 1023 * ldexpf(1, -24), "largest subnormal");
	test_cond(h2f(0x0400) == ldexpf(1, -14), "smallest normal");
	test_cond(isinf(h2f(0x7c00)) && h2f(0x7c00) > 0, "+inf");
	test_cond(isinf(h2f(0xfc00)) && h2f(0xfc00) < 0, "-inf");
	test_cond(isnan(h2f(0x7e00)) && isnan(h2f(0x7c01)), "nan");

	/* encoding, round to nearest even */
	test_cond(f2h(1.0f) == 0x3c00, "%04x", f2h(1.0f));
	test_cond(f2h(-0.0f) == 0x8000, "%04x", f2h(-0.0f));
	test_cond(f2h(65504.0f) == 0x7bff, "max");
	test_cond(f2h(65519.0f) == 0x7bff, "below the overflow midpoint");
	test_cond(f2h(65520.0f) == 0x7c00, "overflow midpoint ties to inf");
	test_cond(f2h(1e6f) == 0x7c00 && f2h(-1e6f) == 0xfc00, "overflow");
	test_cond(f2h(1.0f + ldexpf(1, -11)) == 0x3c00, "tie to even (down)");
	test_cond(f2h(1.0f + 3 * ldexpf(1, -11)) == 0x3c02, "tie to even (up)");
	test_cond(f2h(1.0f + ldexpf(1, -11) + ldexpf(1, -20)) == 0x3c01, "above tie");
	test_cond(f2h(ldexpf(1, -24)) == 0x0001, "subnormal 1");
	test_cond(f2h(ldexpf(1, -25)) == 0x0000, "2^-25 ties to 0");
	test_cond(f2h(1.5f * ldexpf(1, -25)) == 0x0001, "0.75 ulp rounds up");
	test_cond(f2h(3 * ldexpf(1, -25)) == 0x0002, "1.5 ulp ties to 2");
	test_cond(f2h(ldexpf(1, -14) - ldexpf(1, -25)) == 0x0400, "rounds up to min normal");
	test_cond(f2h(ldexpf(1, -30)) == 0x0000, "underflow");
	test_cond(f2h(1e-45f) == 0x0000, "f32 subnormal");
	uint16_t hn = f2h(NAN);
	test_cond((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "nan stays nan: %04x", hn);
	test_cond(f2h(INFINITY) == 0x7c00, "inf");

	/* every finite half survives a round trip through float */
	int bad = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue;
		if (f2h(h2f((uint16_t)h)) != h)
			bad++;
	}
	test_cond(bad == 0, "%d halves do not round-trip", bad);

	/* bf16 is the top half of a float */
	test_cond(q_bf16_to_f32(0x3f80) == 1.0f, "bf16 1");
	test_cond(q_bf16_to_f32(0x4049) == 3.140625f, "bf16 pi");
	test_cond(q_f32_to_bf16(1.0f) == 0x3f80, "1");
	test_cond(q_f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80, "tie down");
	test_cond(q_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82, "tie up");
	test_cond(q_f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)) == 0x3f81, "above tie");
	test_cond(q_f32_to_bf16(3.4028235e38f) == 0x7f80, "FLT_MAX rounds to inf");
	test_cond(q_f32_to_bf16(-INFINITY) == 0xff80, "-inf");
	uint16_t bn = q_f32_to_bf16(NAN);
	test_cond((bn & 0x7f80) == 0x7f80 && (bn & 0x7f) != 0, "bf16 nan %04x", bn);
}

static void
expect_row(enum gguf_dtype t, const void *blk, const float *want, int n, const char *what)
{
	float got[256];
	int bad = 0;

	q_dequant_row(t, blk, got, n);
	for (int i = 0; i < n; i++) {
		if (got[i] != want[i]) {
			if (bad++ < 3)
				fprintf(stderr, "%s[%d]: got %g want %g\n", what, i, got[i], want[i]);
		}
	}
	test_cond(bad == 0, "%s: %d of %d values differ", what, bad, n);
}

/* The 8 (scale, min) pairs and their 12 packed bytes used by the K tests. */
static const int ks_sc[8] = {1, 2, 3, 4, 17, 33, 63, 40};
static const int ks_mn[8] = {0, 1, 5, 63, 16, 2, 48, 7};
/*
 * Packing, from the format: bytes 0-3 hold scales 0-3 in their low 6 bits,
 * bytes 4-7 mins 0-3; scales/mins 4-7 keep their low 4 bits in bytes 8-11
 * (scale low nibble, min high nibble) and their top 2 bits in the top 2
 * bits of bytes 0-3 (scales) and 4-7 (mins).
 *   byte0 = 1 | (17>>4)<<6 = 0x41   byte4 = 0 | (16>>4)<<6 = 0x40
 *   byte1 = 2 | (33>>4)<<6 = 0x82   byte5 = 1 | (2>>4)<<6 = 0x01
 *   byte2 = 3 | (63>>4)<<6 = 0xC3   byte6 = 5 | (48>>4)<<6 = 0xC5
 *   byte3 = 4 | (40>>4)<<6 = 0x84   byte7 = 63 | (7>>4)<<6 = 0x3F
 *   byte8 = 17&15 | (16&15)<<4 = 0x01   byte9 = 33&15 | (2&15)<<4 = 0x21
 *   byte10 = 63&15 | (48&15)<<4 = 0x0F  byte11 = 40&15 | (7&15)<<4 = 0x78
 */
static const uint8_t ks_bytes[12] = {0x41, 0x82, 0xC3, 0x84, 0x40, 0x01, 0xC5, 0x3F,
	0x01, 0x21, 0x0F, 0x78};

static void
test_dequant_by_hand(void)
{
	float want[256];

	/* Q8_0: d = 0x3800 = 0.5; value = d * q */
	{
		block_q8_0 b = {0x3800, {0}};
		int8_t qs[32] = {0, 1, -1, 127, -128, 64, -64, 3};
		for (int i = 8; i < 32; i++)
			qs[i] = (int8_t)(i * 5 - 80);
		memcpy(b.qs, qs, 32);
		for (int i = 0; i < 32; i++)
			want[i] = 0.5f * qs[i];
		test_cond(want[3] == 63.5f && want[4] == -64.0f, "hand values");
		expect_row(GGML_TYPE_Q8_0, &b, want, 32, "q8_0");
	}
	/* Q4_0: d = 0x4000 = 2; byte j: low nibble -> value j, high -> value j+16; value = d * (q - 8) */
	{
		block_q4_0 b = {0x4000, {0}};
		memset(b.qs, 0x88, 16);		/* q = 8 -> 0 */
		b.qs[0] = 0x1F;	/* v0 = 2*(15-8) = 14, v16 = 2*(1-8) = -14 */
		b.qs[1] = 0x80;	/* v1 = 2*(0-8) = -16, v17 = 0 */
		b.qs[15] = 0x3A;	/* v15 = 2*(10-8) = 4, v31 = 2*(3-8) = -10 */
		memset(want, 0, sizeof want);
		want[0] = 14; want[16] = -14; want[1] = -16; want[17] = 0; want[15] = 4; want[31] = -10;
		expect_row(GGML_TYPE_Q4_0, &b, want, 32, "q4_0");
	}
	/* Q4_1: d = 2 (0x4000), m = -1 (0xbc00); nibbles as Q4_0; value = d * q + m */
	{
		block_q4_1 b = {0x4000, 0xbc00, {0}};
		b.qs[0] = 0x1F;	/* v0 = 2*15 - 1 = 29, v16 = 2*1 - 1 = 1 */
		b.qs[15] = 0xA3;	/* v15 = 2*3 - 1 = 5, v31 = 2*10 - 1 = 19 */
		for (int i = 0; i < 32; i++)
			want[i] = -1;
		want[0] = 29; want[16] = 1; want[15] = 5; want[31] = 19;
		expect_row(GGML_TYPE_Q4_1, &b, want, 32, "q4_1");
	}
	/*
	 * Q5_0 / Q5_1: the 4 qh bytes are a little-endian word whose bit i is
	 * value i's 5th bit (+16); Q5_0 value = d * (q - 16), Q5_1 d * q + m.
	 */
	{
		block_q5_0 b = {0x3800, {0x01, 0x80, 0x00, 0x80}, {0}};	/* d = 0.5; bits 0, 15, 31 */
		b.qs[0] = 0x2F;	/* v0 = 0.5*((15|16) - 16) = 7.5, v16 = 0.5*(2 - 16) = -7 */
		b.qs[7] = 0x90;	/* v7 = 0.5*(0 - 16) = -8, v23 = 0.5*(9 - 16) = -3.5 */
		for (int i = 0; i < 32; i++)
			want[i] = -8;	/* level 0 */
		want[0] = 7.5f; want[16] = -7; want[7] = -8; want[23] = -3.5f;
		want[15] = 0; want[31] = 0;	/* level 16: only the 5th bit */
		expect_row(GGML_TYPE_Q5_0, &b, want, 32, "q5_0");
	}
	{
		block_q5_1 b = {0x3400, 0x4000, {0}, {0}};	/* d = 0.25, m = 2 */
		for (int k = 0; k < 4; k++)
			b.qh[k] = (uint8_t)(k * 71 + 29);
		for (int i = 0; i < 16; i++)
			b.qs[i] = (uint8_t)(i * 37 + 5);
		for (int i = 0; i < 32; i++) {
			int nib = i < 16 ? b.qs[i] & 15 : b.qs[i - 16] >> 4;
			int hb = (b.qh[i / 8] >> (i % 8)) & 1;
			want[i] = 0.25f * (float)(nib + 16 * hb) + 2.0f;
		}
		/* value 0: qs[0] = 5, qh[0] = 29 = 0b11101 -> bit 0 set: 0.25*21 + 2 = 7.25 */
		test_cond(want[0] == 7.25f, "hand value %g", want[0]);
		expect_row(GGML_TYPE_Q5_1, &b, want, 32, "q5_1");
	}
	/*
	 * Q4_K: d = 1 (0x3c00), dmin = 0.5 (0x3800). 4 chunks of 64 values,
	 * 32 bytes each: value 64c+l is d*sc[2c]*(byte & 15) - dmin*mn[2c],
	 * value 64c+32+l is d*sc[2c+1]*(byte >> 4) - dmin*mn[2c+1].
	 */
	{
		block_q4_K b;
		b.d = 0x3c00;
		b.dmin = 0x3800;
		memcpy(b.scales, ks_bytes, 12);
		for (int c = 0; c < 4; c++) {
			for (int l = 0; l < 32; l++) {
				uint8_t byte = (uint8_t)(l * 7 + c * 13);
				b.qs[32 * c + l] = byte;
				want[64 * c + l] = 1.0f * ks_sc[2 * c] * (byte & 15) - 0.5f * ks_mn[2 * c];
				want[64 * c + 32 + l] = 1.0f * ks_sc[2 * c + 1] * (byte >> 4) - 0.5f * ks_mn[2 * c + 1];
			}
		}
		/* two by hand: value 0: byte 0 -> 1*1*0 - 0.5*0 = 0; value 224+1: chunk 3, byte 7+39=46=0x2E -> 40*2 - 3.5 */
		test_cond(want[0] == 0 && want[225] == 76.5f, "hand values %g %g", want[0], want[225]);
		expect_row(GGML_TYPE_Q4_K, &b, want, 256, "q4_k");
	}
	/* Q5_K: as Q4_K, plus bit 2c (low half) / 2c+1 (high half) of qh[l] as the 5th bit (+16) */
	{
		block_q5_K b;
		b.d = 0x3400;	/* 0.25 */
		b.dmin = 0x4000;	/* 2 */
		memcpy(b.scales, ks_bytes, 12);
		for (int l = 0; l < 32; l++)
			b.qh[l] = (uint8_t)(l * 37 + 11);
		for (int c = 0; c < 4; c++) {
			for (int l = 0; l < 32; l++) {
				uint8_t byte = (uint8_t)(l * 5 + c * 29 + 3);
				int h0 = (b.qh[l] >> (2 * c)) & 1, h1 = (b.qh[l] >> (2 * c + 1)) & 1;
				b.qs[32 * c + l] = byte;
				want[64 * c + l] = 0.25f * ks_sc[2 * c] * ((byte & 15) + 16 * h0) - 2.0f * ks_mn[2 * c];
				want[64 * c + 32 + l] = 0.25f * ks_sc[2 * c + 1] * ((byte >> 4) + 16 * h1) - 2.0f * ks_mn[2 * c + 1];
			}
		}
		/* value 0: byte 3, qh[0] = 11 = 0b1011 -> bit0 = 1: 0.25*1*(3+16) - 0 = 4.75 */
		test_cond(want[0] == 4.75f, "hand value %g", want[0]);
		expect_row(GGML_TYPE_Q5_K, &b, want, 256, "q5_k");
	}
	/*
	 * Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): value e = 128h +
	 * 32j + l has 2 low bits (qs[32h + l] >> 2j) & 3 and a third bit, bit
	 * 4h + j of hmask[l]; level = low + 4 * bit - 4 (-4..3). Its scale is
	 * number 8h + 2j + l/16 of 16 6-bit values stored + 32: low 4 bits of
	 * scale k in byte k (k < 8, low nibble) or byte k - 8 (high nibble), top
	 * 2 bits in bits 2(k/4), 2(k/4)+1 of byte 8 + k%4. value = d * (s - 32) * level.
	 */
	{
		block_q3_K b;
		static const int s6[16] = {32, 0, 63, 31, 33, 1, 62, 40, 16, 48, 5, 58, 32, 20, 44, 7};
		b.d = 0x3800;	/* 0.5 */
		memset(b.scales, 0, 12);
		for (int k = 0; k < 16; k++) {
			b.scales[k < 8 ? k : k - 8] |= (uint8_t)((s6[k] & 15) << (k < 8 ? 0 : 4));
			b.scales[8 + k % 4] |= (uint8_t)((s6[k] >> 4) << (2 * (k / 4)));
		}
		for (int i = 0; i < 32; i++)
			b.hmask[i] = (uint8_t)(i * 29 + 3);
		for (int i = 0; i < 64; i++)
			b.qs[i] = (uint8_t)(i * 53 + 17);
		for (int e = 0; e < 256; e++) {
			int h = e / 128, j = (e % 128) / 32, l = e % 32;
			int low = (b.qs[32 * h + l] >> (2 * j)) & 3, hb = (b.hmask[l] >> (4 * h + j)) & 1;
			want[e] = 0.5f * (float)(s6[8 * h + 2 * j + l / 16] - 32) * (float)(low + 4 * hb - 4);
		}
		/*
		 * By hand: value 0: qs[0] = 17 = 0b10001 -> low 1; hmask[0] = 3 -> bit 0
		 * set: level 1; scale 0 = 32 -> 0: value 0. Value 16: qs[16] = 16*53+17
		 * = 865 & 255 = 97 = 0b1100001 -> low 1; hmask[16] = 467 & 255 = 211 =
		 * 0b11010011 -> bit 0 set: level 1; scale 1 = 0 -> -32: 0.5*-32*1 = -16.
		 * Value 224 + 31 = 255 (h 1, j 3, l 31): qs[63] = 3356 & 255 = 28 =
		 * 0b00011100 -> >> 6: 0; hmask[31] = 902 & 255 = 134 = 0b10000110 -> bit
		 * 7 set: level 0 -> 0. Value 128 (h 1, j 0, l 0): qs[32] = 1713 & 255 =
		 * 177 = 0b10110001 -> low 1; hmask[0] bit 4 = 0: level -3; scale 8 = 16
		 * -> -16: 0.5*-16*-3 = 24.
		 */
		test_cond(want[0] == 0 && want[16] == -16 && want[255] == 0 && want[128] == 24,
		    "hand values %g %g %g %g", want[0], want[16], want[255], want[128]);
		expect_row(GGML_TYPE_Q3_K, &b, want, 256, "q3_k");
	}
	/*
	 * Q6_K: value e = 128h + 32k + l (h < 2, k < 4, l < 32) has low 4 bits
	 * from ql[64h + l + 32(k&1)] (low nibble for k < 2, high for k >= 2),
	 * high 2 bits from bits 2k..2k+1 of qh[32h + l]; q = that - 32; value =
	 * d * scales[8h + 2k + l/16] * q.
	 */
	{
		block_q6_K b;
		static const int8_t sc[16] = {1, -2, 3, 127, -128, 5, 0, 7, 9, -10, 11, 12, 13, -14, 15, 16};
		b.d = 0x3400;	/* 0.25 */
		memcpy(b.scales, sc, 16);
		for (int i = 0; i < 128; i++)
			b.ql[i] = (uint8_t)(i * 11 + 5);
		for (int i = 0; i < 64; i++)
			b.qh[i] = (uint8_t)(i * 23 + 1);
		for (int e = 0; e < 256; e++) {
			int h = e / 128, k = (e % 128) / 32, l = e % 32;
			uint8_t lb = b.ql[64 * h + l + 32 * (k & 1)];
			int lo = k >= 2 ? lb >> 4 : lb & 15;
			int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
			want[e] = 0.25f * (float)sc[8 * h + 2 * k + l / 16] * (float)((lo | hi << 4) - 32);
		}
		/* value 0: ql[0] = 5, qh[0] = 1 -> q = (5 | 1<<4) - 32 = -11; 0.25 * 1 * -11 */
		test_cond(want[0] == -2.75f, "hand value %g", want[0]);
		expect_row(GGML_TYPE_Q6_K, &b, want, 256, "q6_k");
	}
	/* F16 / BF16 rows, unaligned */
	{
		uint8_t raw[1 + 3 * 2] = {0, 0x00, 0x3c, 0x00, 0xc0, 0x55, 0x35};
		float w16[3] = {1.0f, -2.0f, 0.333251953125f};
		expect_row(GGML_TYPE_F16, raw + 1, w16, 3, "f16");
		uint8_t rawb[1 + 2 * 2] = {0, 0x80, 0x3f, 0x49, 0x40};
		float wb[2] = {1.0f, 3.140625f};
		expect_row(GGML_TYPE_BF16, rawb + 1, wb, 2, "bf16");
	}
}

static const enum gguf_dtype all_types[] = {
	GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
	GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
	GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

/* Test-local reading of K-quant scale j (format definition, as in the comment above ks_bytes). */
static void
k_scale(const uint8_t *q, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
		*mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/*
 * Round-trip bounds per element, from how q_quantize_row chooses scales
 * (fp16 rounding of the stored d adds a relative 2^-11, covered by slack):
 *   F16: |err| <= 2^-11 |x| (normal range); BF16: 2^-8 |x|.
 *   Q8_0: d = amax/127: |err| <= d/2 (+ amax 2^-11 for the rounded d).
 *   Q4_0: d = -max/8 (max: signed value of largest magnitude): levels -8..7
 *     of d cover it, except +8 clamps to 7: |err| <= |d|. Q5_0 the same
 *     with -16..15.
 *   Q4_1/Q5_1 (levels 0..N): d = (max - min)/N, m = min, both rounded to
 *     fp16 (relative 2^-11 each): |err| <= d/2 + (N d + |m|) 2^-10.
 *   Q4_K/Q5_K (levels 0..N, N = 15/31): sub-block scale s = range/N and min
 *     m are quantised to d1 = d*sc6, m1 = dmin*mn6 with |d1 - s| <= d/2,
 *     |m1 - m| <= dmin/2. Unclamped values err <= d1/2; clamped at the low
 *     end <= dmin/2, at the high end <= N|s - d1| + |m1 - m|:
 *     |err| <= max(d1/2, N d/2 + dmin/2).
 *   Q6_K (levels -32..31, scale s = amax/31 per 16): |err| <= max(|d1|/2, 31 d/2).
 *   Q3_K (levels -4..3, s = -mx/4 per 16, mx the value of largest
 *     magnitude, quantised to d1 = d * sc with |d1 - s| <= d/2): unclamped
 *     |err| <= |d1|/2; clamped at -4 <= 4 |s - d1| <= 2d, at +3 (values up
 *     to 4|s|) <= 4|s| - 3|d1| <= |d1| + 2d: |err| <= |d1| + 2d.
 */
static void
test_roundtrip(void)
{
	enum { N = 1024 };
	static float x[N], y[N];
	static uint8_t buf[N * 4];

	for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
		enum gguf_dtype t = all_types[ti];
		double worst = 0;	/* err / bound */
		for (int rep = 0; rep < 4; rep++) {
			for (int i = 0; i < N; i++) {
				/* vary the scale between blocks, some all-positive stretches */
				float sc = (rep == 3) ? 0 : 0.01f + (float)((i / 32) % 7);
				x[i] = sc * (rep == 2 && (i / 64) % 2 ? fabsf(frand()) : frand());
			}
			test_cond(q_quantize_row(t, x, buf, N) == 0, "%s quantize", tname(t));
			q_dequant_row(t, buf, y, N);
			for (int i = 0; i < N; i++) {
				double bound = 0, err = fabs((double)x[i] - y[i]);
				int bi;
				switch (t) {
				case GGML_TYPE_F32: bound = 0; break;
				case GGML_TYPE_F16: bound = ldexp(fabs(x[i]), -11); break;
				case GGML_TYPE_BF16: bound = ldexp(fabs(x[i]), -8); break;
				case GGML_TYPE_Q8_0: {
					const block_q8_0 *b = (const block_q8_0 *)buf + i / 32;
					double d = h2f(b->d);
					bound = d / 2 + 127 * d * ldexp(1, -10);
					break;
				}
				case GGML_TYPE_Q4_0: {
					const block_q4_0 *b = (const block_q4_0 *)buf + i / 32;
					bound = fabs(h2f(b->d)) * (1 + ldexp(1, -7));
					break;
				}
				case GGML_TYPE_Q5_0: {
					const block_q5_0 *b = (const block_q5_0 *)buf + i / 32;
					bound = fabs(h2f(b->d)) * (1 + ldexp(1, -7));
					break;
				}
				case GGML_TYPE_Q4_1: {
					const block_q4_1 *b = (const block_q4_1 *)buf + i / 32;
					double d = h2f(b->d);
					bound = d / 2 + (15 * d + fabs(h2f(b->m))) * ldexp(1, -10);
					break;
				}
				case GGML_TYPE_Q5_1: {
					const block_q5_1 *b = (const block_q5_1 *)buf + i / 32;
					double d = h2f(b->d);
					bound = d / 2 + (31 * d + fabs(h2f(b->m))) * ldexp(1, -10);
					break;
				}
				case GGML_TYPE_Q4_K:
				case GGML_TYPE_Q5_K: {
					bool q5 = t == GGML_TYPE_Q5_K;
					bi = i / 256;
					const uint8_t *b = buf + (size_t)bi * (q5 ? 176 : 144);
					uint16_t dh, mh;
					int sc, mn, nmax = q5 ? 31 : 15;
					memcpy(&dh, b, 2);
					memcpy(&mh, b + 2, 2);
					k_scale(b + 4, (i % 256) / 32, &sc, &mn);
					double d = h2f(dh), dmin = h2f(mh);
					bound = fmax(d * sc / 2, nmax * d / 2 + dmin / 2) * 1.01;
					break;
				}
				case GGML_TYPE_Q3_K: {
					const block_q3_K *b = (const block_q3_K *)buf + i / 256;
					int k = (i % 256) / 16;
					int sc6 = ((k < 8 ? b->scales[k] & 15 : b->scales[k - 8] >> 4) |
					    ((b->scales[8 + k % 4] >> (2 * (k / 4))) & 3) << 4) - 32;
					double d = h2f(b->d);
					bound = (fabs(d * sc6) + 2 * d) * 1.01;
					break;
				}
				case GGML_TYPE_Q6_K: {
					const block_q6_K *b = (const block_q6_K *)buf + i / 256;
					double d = h2f(b->d);
					bound = fmax(fabs(d * b->scales[(i % 256) / 16]) / 2, 31 * d / 2) * 1.01;
					break;
				}
				default: break;
				}
				bound += 1e-7;
				if (err / bound > worst)
					worst = err / bound;
				if (!isfinite(y[i]))
					worst = INFINITY;
			}
		}
		test_cond(worst <= 1.0, "%s round trip: error reaches %.3f x the bound",
		    tname(t), worst);
		printf("%-5s round trip: worst error %.3f of the bound\n", tname(t), worst);
	}
}

/* Reference: double dot of the dequantised row. Returns sum |w_i x_i| in *mag. */
static double
ref_dot(enum gguf_dtype t, const void *row, const float *x, int64_t n, double *mag)
{
	float *w = malloc((size_t)n * sizeof *w);
	double s = 0, m = 0;

	q_dequant_row(t, row, w, n);
	for (int64_t i = 0; i < n; i++) {
		s += (double)w[i] * x[i];
		m += fabs((double)w[i] * x[i]);
	}
	free(w);
	*mag = m;
	return s;
}

/* k's one-row products within float summation of the exact dot (q_dot: the scalar reference). */
static void
test_dot(const struct kern *k)
{
	static const int64_t lens[] = {256, 512, 4096, 4864};

	for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
		enum gguf_dtype t = all_types[ti];
		for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
			int64_t n = lens[li];
			size_t rb = q_row_bytes(t, n);
			float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w);
			uint8_t *raw = malloc(rb + 1), *row = raw + 1;	/* rows are not aligned in files */
			for (int64_t i = 0; i < n; i++) {
				w[i] = frand() * (1 + (float)(i % 97) / 10);
				x[i] = frand();
			}
			test_cond(q_quantize_row(t, w, row, n) == 0, "quantize");
			double mag, want = ref_dot(t, row, x, n, &mag);
			double tol = 1e-5 * mag + 1e-6;	/* float summation of n terms */
			float s = q_dot(t, row, x, n), v = kern_dot(k, t, row, x, n);
			test_cond(fabs(s - want) <= tol, "%s n=%lld q_dot %g want %g", tname(t), (long long)n, s, want);
			test_cond(fabs(v - want) <= tol, "%s n=%lld %s %g want %g", tname(t), (long long)n, k->name,
			    v, want);
			free(x);
			free(w);
			free(raw);
		}
	}
	/* F32/F16/BF16 rows of any length (tails) */
	for (int n = 1; n < 70; n += 3) {
		float x[70], w[70], wr[70];
		uint8_t row[70 * 4];
		for (int i = 0; i < n; i++) {
			w[i] = frand();
			x[i] = frand();
		}
		for (int ty = 0; ty < 3; ty++) {
			enum gguf_dtype t = ty == 0 ? GGML_TYPE_F32 : ty == 1 ? GGML_TYPE_F16 : GGML_TYPE_BF16;
			double want = 0, mag = 0;
			q_quantize_row(t, w, row, n);
			q_dequant_row(t, row, wr, n);
			for (int i = 0; i < n; i++) {
				want += (double)wr[i] * x[i];
				mag += fabs((double)wr[i] * x[i]);
			}
			float got = kern_dot(k, t, row, x, n);
			test_cond(fabs(got - want) <= 1e-6 * mag + 1e-7, "%s n=%d %s: %g want %g",
			    tname(t), n, k->name, got, want);
		}
	}
}

static void
test_matmul(const struct kern *k)
{
	enum { N_IN = 512, N_OUT = 7, N_TOK = 3 };
	static float w[N_OUT * N_IN], x[N_TOK * N_IN], y[N_TOK * N_OUT];
	static uint8_t W[N_OUT * N_IN * 4];

	for (int i = 0; i < N_OUT * N_IN; i++)
		w[i] = frand();
	for (int i = 0; i < N_TOK * N_IN; i++)
		x[i] = frand();
	for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
		enum gguf_dtype t = all_types[ti];
		size_t rb = q_row_bytes(t, N_IN);
		for (int r = 0; r < N_OUT; r++)
			q_quantize_row(t, w + r * N_IN, W + r * rb, N_IN);
		{
			for (int i = 0; i < N_TOK * N_OUT; i++)
				y[i] = -12345.0f;
			/* only rows [2, 5) are this caller's */
			kern_matmul(k, t, W, rb, x, N_TOK, N_IN, y, N_OUT, 2, 5);
			int bad = 0;
			for (int tok = 0; tok < N_TOK; tok++) {
				for (int r = 0; r < N_OUT; r++) {
					float got = y[tok * N_OUT + r];
					if (r < 2 || r >= 5) {
						bad += got != -12345.0f;
						continue;
					}
					double mag, want = ref_dot(t, W + r * rb, x + tok * N_IN, N_IN, &mag);
					bad += !(fabs(got - want) <= 1e-5 * mag);
					/* a token's result does not depend on the batch */
					bad += got != kern_dot(k, t, W + r * rb, x + tok * N_IN, N_IN);
				}
			}
			test_cond(bad == 0, "%s %s matmul: %d bad", tname(t), k->name, bad);
		}
	}
}

/*
 * The float tiles' shapes (8 rows at one token with prefetches that run into
 * the next tile's rows, 4 rows x 1-4 tokens, the prefill's 4 x 6 tiles from
 * 8 tokens; AVX2: 4 rows at one token, 2 x 1-3, the short batches' 2 x 3
 * tiles, the panel's 2 x 6 tiles per half of each 16 values): every (row,
 * token) of every batch size and row range is bitwise the row's q_dot on
 * that path, and rows outside the range are not written. Rows of 80 values
 * (shorter than the prefetch distance) and of 1040. The prefill runs the
 * short batches' blocking below F_NP tokens (kern_avx2.c 48, kern_avx512.c
 * 64; rows of up to 2048 values) and the panel from there: 9 to 47 tokens
 * take the short path on both tables (47: one block of 48), 61 and 63 on
 * avx512 (two blocks, the second ending on a partial tile); 48 tokens and
 * more the panel on avx2, 64 and 77 on avx512 (77 ending on a partial
 * tile), so both paths are held to the same bits. Keep batches on both
 * sides of each F_NP.
 */
/* One kern_matmul call against each row's kern_dot: the number of wrong outputs. */
static int
float_tiles_bad(const struct kern *k, enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x,
    int n_in, int n_tok, float *y, int n_out, int64_t r0, int64_t r1)
{
	int bad = 0;

	for (int i = 0; i < n_tok * n_out; i++)
		y[i] = -12345.0f;
	kern_matmul(k, t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	for (int tok = 0; tok < n_tok; tok++)
		for (int r = 0; r < n_out; r++) {
			float got = y[tok * n_out + r];
			if (r < r0 || r >= r1)
				bad += got != -12345.0f;
			else
				bad += got != kern_dot(k, t, W + r * rb, x + tok * n_in, n_in);
		}
	return bad;
}

static void
test_matmul_float_tiles(const struct kern *k)
{
	enum { MAX_IN = 1040, N_OUT = 37, MAX_TOK = 77 };
	static const enum gguf_dtype types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
	static const int ins[] = { 80, MAX_IN };
	static const int toks[] = { 1, 2, 5, 9, 13, 47, 48, 61, 63, 64, MAX_TOK };
	static const int64_t ranges[][2] = { { 0, N_OUT }, { 3, 29 }, { 9, 10 } };
	static float w[N_OUT * MAX_IN], x[MAX_TOK * MAX_IN], y[MAX_TOK * N_OUT];
	static uint8_t W[N_OUT * MAX_IN * 4];

	for (int i = 0; i < N_OUT * MAX_IN; i++)
		w[i] = frand();
	for (int i = 0; i < MAX_TOK * MAX_IN; i++)
		x[i] = frand();
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
		for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++) {
			enum gguf_dtype t = types[ti];
			int n_in = ins[ii];
			size_t rb = q_row_bytes(t, n_in);
			for (int r = 0; r < N_OUT; r++)
				q_quantize_row(t, w + r * n_in, W + r * rb, n_in);
			for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++)
				for (size_t gi = 0; gi < sizeof ranges / sizeof ranges[0]; gi++)
					{
						int64_t r0 = ranges[gi][0], r1 = ranges[gi][1];
						int bad = float_tiles_bad(k, t, W, rb, x, n_in, toks[ki], y,
						    N_OUT, r0, r1);
						test_cond(bad == 0, "%s %s n_in %d, %d tokens, rows [%lld, %lld): %d bad",
						    tname(t), k->name, n_in, toks[ki], (long long)r0, (long long)r1, bad);
					}
		}
}

/*
 * Prefill of long float rows: below F_NPL tokens (rows longer than 2048
 * values: kern_avx2.c 192, kern_avx512.c 96) the AVX2 table runs its bands
 * in runs of 512 KiB of weights (32 rows of 8192 F16 values, 16 of F32),
 * each block of tokens through every band of a run before the next run;
 * from F_NPL both tables convert runs of 1 MiB of floats (32 rows of 8192)
 * into a panel. Every (row, token) bitwise the row's kern_dot, over runs
 * that end on a partial band: 10 tokens on the short path, 129 on avx2's
 * (three blocks of 48, the last partial) and avx512's panel, 193 on both
 * panels. Keep batches on both sides of each F_NPL.
 */
static void
test_matmul_float_runs(const struct kern *k)
{
	enum { N = 8192, N_OUT = 41, N_TOK = 193 };
	static const enum gguf_dtype types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
	static const int64_t ranges[][2] = { { 0, N_OUT }, { 5, 40 } };
	static const int toks[] = { 10, 129, N_TOK };
	static float w[N], x[N_TOK * N], y[N_TOK * N_OUT];
	static uint8_t W[N_OUT * N * 4];

	for (int i = 0; i < N_TOK * N; i++)
		x[i] = frand();
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum gguf_dtype t = types[ti];
		size_t rb = q_row_bytes(t, N);
		for (int r = 0; r < N_OUT; r++) {
			for (int i = 0; i < N; i++)
				w[i] = frand();
			q_quantize_row(t, w, W + r * rb, N);
		}
		for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++)
			for (size_t gi = 0; gi < sizeof ranges / sizeof ranges[0]; gi++) {
				int bad = float_tiles_bad(k, t, W, rb, x, N, toks[ki], y, N_OUT,
				    ranges[gi][0], ranges[gi][1]);
				test_cond(bad == 0, "%s %s n_in %d, %d tokens, rows [%lld, %lld): %d bad",
				    tname(t), k->name, N, toks[ki], (long long)ranges[gi][0],
				    (long long)ranges[gi][1], bad);
			}
	}
}

/*
 * The panel's runs of 128 rows or more copy each block of tokens'
 * activations to an aligned buffer first unless they start on a 64-byte
 * boundary (shorter runs, and aligned activations, are read in place):
 * 150 rows, every (row, token) bitwise the row's kern_dot, with the
 * activations at a 64-byte boundary (in place) and 4 bytes past one
 * (copied), at 65 tokens
 * (the panel on both tables, the last block one token) and at 13 (the
 * short batches' path).
 */
static void
test_matmul_float_copy(const struct kern *k)
{
	enum { N = 96, N_OUT = 150, N_TOK = 65 };
	static const int toks[] = { 13, N_TOK };
	static const enum gguf_dtype types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
	static const int64_t ranges[][2] = { { 0, N_OUT }, { 2, 149 } };
	static float w[N], xbuf[N_TOK * N + 16] __attribute__((aligned(64))), y[N_TOK * N_OUT];
	static uint8_t W[N_OUT * N * 4];

	for (int i = 0; i < N_TOK * N + 16; i++)
		xbuf[i] = frand();
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum gguf_dtype t = types[ti];
		size_t rb = q_row_bytes(t, N);
		for (int r = 0; r < N_OUT; r++) {
			for (int i = 0; i < N; i++)
				w[i] = frand();
			q_quantize_row(t, w, W + r * rb, N);
		}
		for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++)
			for (int off = 0; off <= 1; off++)
				for (size_t gi = 0; gi < sizeof ranges / sizeof ranges[0]; gi++) {
					int bad = float_tiles_bad(k, t, W, rb, xbuf + off, N, toks[ki], y,
					    N_OUT, ranges[gi][0], ranges[gi][1]);
					test_cond(bad == 0,
					    "%s %s n_in %d, %d tokens, x + %d, rows [%lld, %lld): %d bad",
					    tname(t), k->name, N, toks[ki], off, (long long)ranges[gi][0],
					    (long long)ranges[gi][1], bad);
				}
	}
}

/* Every type with an int8-activation kernel (q_act_supported). */
static const enum gguf_dtype int8_types[] = {
	GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
	GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

/*
 * The integer kernels: activations rounded to int8 per 32. Bound against the
 * exact dot: sum_b (d_b / 2) sum_{i in b} |w_i| (quant.h), plus float
 * rounding; and equal, to float rounding, to sum_i w_i x^_i, the weights
 * times the rounded x (offsets included: with the exact sums of x in the
 * offset terms Q4_1/Q5_1/Q4_K/Q5_K miss this by ~1e-3 of the magnitude).
 * Every table computes the same integer sums as the scalar reference
 * q_dot_act: they agree to float rounding of the scaled block sums. The
 * table's rounding of x gives q_act_prepare's bytes.
 */
static void
test_act(const struct kern *k)
{
	enum { N = 1024, N_OUT = 5, N_TOK = 6 };
	static float x[N_TOK * N], w[N_OUT * N], wd[N], y[N_TOK * N_OUT];
	static uint8_t W[N_OUT * N * 2], act[N_TOK * (N + 8 * N / 32)];
	size_t ab = q_act_bytes(N);

	test_cond(ab == N + 8 * (N / 32), "act bytes %zu", ab);
	for (int i = 0; i < N_TOK * N; i++)
		x[i] = frand() * (1 + (float)((i / 32) % 5));
	for (int i = 0; i < N_OUT * N; i++)
		w[i] = frand() * (1 + (float)(i % 13) / 4);
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + tok * N, N, act + tok * ab);
	/* the prepared form: |x - d q| <= d/2, sums d * (sum of the levels) */
	{
		const float *d = (const float *)act, *xs = d + N / 32;
		const int8_t *q = (const int8_t *)(xs + N / 32);
		int bad = 0;
		for (int i = 0; i < N; i++)
			bad += !(fabs(x[i] - d[i / 32] * q[i]) <= d[i / 32] * 0.5 * (1 + 1e-5));
		for (int b = 0; b < N / 32; b++) {
			int sum = 0;
			for (int i = 0; i < 32; i++)
				sum += q[32 * b + i];
			bad += xs[b] != d[b] * (float)sum;
		}
		test_cond(bad == 0, "q_act_prepare: %d bad", bad);
	}
	{
		static uint8_t mine[N + 8 * N / 32];
		int bad = 0;
		/* d, sums and levels bitwise */
		for (int tok = 0; tok < N_TOK; tok++) {
			k->act_prepare(x + tok * N, N, mine);
			bad += memcmp(mine, act + tok * ab, ab) != 0;
		}
		test_cond(bad == 0, "%s act_prepare as q_act_prepare: %d bad", k->name, bad);
	}
	test_cond(!q_act_supported(GGML_TYPE_F16) && q_act_supported(GGML_TYPE_Q6_K), "act types");
	for (size_t ti = 0; ti < sizeof int8_types / sizeof int8_types[0]; ti++) {
		enum gguf_dtype t = int8_types[ti];
		size_t rb = q_row_bytes(t, N);
		int bad = 0;
		for (int r = 0; r < N_OUT; r++)
			q_quantize_row(t, w + r * N, W + r * rb, N);
		/* AVX2's tiles are 2 rows x 4 tokens, AVX-512's 4 x 4: here full and partial ones */
		kern_matmul_act(k, t, W, rb, act, N_TOK, N, y, N_OUT, 0, N_OUT);
		for (int r = 0; r < N_OUT; r++) {
			q_dequant_row(t, W + r * rb, wd, N);
			for (int tok = 0; tok < N_TOK; tok++) {
				const float *xt = x + tok * N, *d = (const float *)(act + tok * ab);
				const int8_t *q = (const int8_t *)(d + N / 16);
				double exact = 0, rounded = 0, bound = 0, mag = 0;
				for (int i = 0; i < N; i++) {
					exact += (double)wd[i] * xt[i];
					rounded += (double)wd[i] * d[i / 32] * q[i];
					bound += d[i / 32] / 2 * fabs(wd[i]);
					mag += fabs((double)wd[i] * xt[i]);
				}
				bound += 1e-5 * mag;
				float sc = q_dot_act(t, W + r * rb, act + tok * ab, N);
				float v = kern_dot_act(k, t, W + r * rb, act + tok * ab, N);
				/* within the bound, the weights times the rounded x, and a token's result independent of the batch */
				if (!(fabs(sc - exact) <= bound) || !(fabs(v - exact) <= bound) ||
				    !(fabs(sc - rounded) <= 1e-5 * mag) ||
				    !(fabs(v - sc) <= 1e-5 * mag) || y[tok * N_OUT + r] != v) {
					if (bad++ < 3)
						fprintf(stderr, "%s row %d tok %d: scalar %g %s %g (tile %g) "
						    "exact %g bound %g\n", tname(t), r, tok, sc, k->name, v,
						    y[tok * N_OUT + r], exact, bound);
				}
			}
		}
		test_cond(bad == 0, "%s %s integer kernels: %d bad", tname(t), k->name, bad);
	}
}

/*
 * Rows with an odd number of 32-value blocks: the AVX-512 kernels work on
 * pairs of blocks and finish such a row with a half step. Against the
 * scalar kernel (same integers), for every token of a batch of 5, alone
 * and in the batch.
 */
static void
test_act_odd(const struct kern *k)
{
	static const enum gguf_dtype types[] = {
		GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
	};
	enum { N = 96, N_OUT = 6, N_TOK = 5 };
	static float x[N_TOK * N], w[N_OUT * N], y[N_TOK * N_OUT];
	static uint8_t W[N_OUT * N * 2], act[N_TOK * (N + 8 * N / 32)];
	size_t ab = q_act_bytes(N);

	for (int i = 0; i < N_TOK * N; i++)
		x[i] = frand();
	for (int i = 0; i < N_OUT * N; i++)
		w[i] = frand() * (1 + (float)(i % 7));
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + tok * N, N, act + tok * ab);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum gguf_dtype t = types[ti];
		size_t rb = q_row_bytes(t, N);
		int bad = 0;
		for (int r = 0; r < N_OUT; r++)
			q_quantize_row(t, w + r * N, W + r * rb, N);
		kern_matmul_act(k, t, W, rb, act, N_TOK, N, y, N_OUT, 0, N_OUT);
		for (int r = 0; r < N_OUT; r++) {
			for (int tok = 0; tok < N_TOK; tok++) {
				float sc = q_dot_act(t, W + r * rb, act + tok * ab, N);
				float v5 = kern_dot_act(k, t, W + r * rb, act + tok * ab, N);
				bad += !(fabs(v5 - sc) <= 1e-5 * (1 + fabs(sc))) || y[tok * N_OUT + r] != v5;
			}
		}
		test_cond(bad == 0, "%s %s odd block count: %d bad", tname(t), k->name, bad);
	}
}

/* The integer levels w of a 32-value block (value = d * w): Q8_0, Q4_0, Q5_0. */
static void
block_levels(enum gguf_dtype t, const uint8_t *blk, int *w)
{
	uint32_t qh;

	memcpy(&qh, blk + 2, 4);
	for (int i = 0; i < 32; i++) {
		if (t == GGML_TYPE_Q8_0) {
			w[i] = (int8_t)blk[2 + i];
			continue;
		}
		const uint8_t *qs = blk + (t == GGML_TYPE_Q4_0 ? 2 : t == GGML_TYPE_Q4_1 ? 4 : 6);
		int u = i < 16 ? qs[i] & 0x0F : qs[i - 16] >> 4;
		/* Q4_1: the level itself (its m is the offset) */
		w[i] = t == GGML_TYPE_Q4_0 ? u - 8 : t == GGML_TYPE_Q4_1 ? u : (u | (int)((qh >> i) & 1) << 4) - 16;
	}
}

/*
 * Packed matrices (quant_pack.c's layout, the kernel of a table that has
 * one: avx512): every (row, token)
 * bitwise equal to the documented float order on the stored integers, and
 * within q_dot_act's bound of the exact product; and the same for any
 * number of tokens in the call and any cut of the groups. The shape has a
 * partial last group (105 rows: 7 groups, which one token runs as four,
 * two and one side by side) and an odd block count (96); a Q8_0 row
 * holds the extreme level -128 that a foreign quantiser may write. 11
 * tokens, and 9 of them: a tile of 8 (avx2's and avx512's) and the rest.
 */
static void
test_pack_type(const struct kern *k, enum gguf_dtype t)
{
	enum { N = 96, N_OUT = 105, N_TOK = 11, NG = (N_OUT + 15) / 16 };
	static float x[N_TOK * N], w[N_OUT * N], wd[N], y[N_TOK * N_OUT], y1[N_OUT], y2[N_TOK * N_OUT];
	static uint8_t W[N_OUT * 102], act[N_TOK * (N + 8 * N / 32)];
	size_t ab = q_act_bytes(N), rb = q_row_bytes(t, N), bb = rb / (N / 32), pb;
	uint8_t *P;
	int bad = 0, same = 0, lv[32];

	pb = q_pack_bytes(t, N, N_OUT);
	test_cond(pb == NG * 3 * (t == GGML_TYPE_Q8_0 ? 544 : t == GGML_TYPE_Q4_0 ? 288 :
	    t == GGML_TYPE_Q4_1 ? 320 : 352),
	    "%s packed bytes %zu", tname(t), pb);
	for (int i = 0; i < N_TOK * N; i++)
		x[i] = frand() * (1 + (float)((i / 32) % 5));
	x[5] = 40;	/* a block whose max maps to 127 */
	for (int i = 0; i < N_OUT * N; i++)
		w[i] = frand() * (1 + (float)(i % 13) / 4);
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + tok * N, N, act + tok * ab);
	for (int r = 0; r < N_OUT; r++)
		q_quantize_row(t, w + r * N, W + r * rb, N);
	if (t == GGML_TYPE_Q8_0)
		W[3 * rb + 2 + 7] = 0x80;	/* row 3, level 7 = -128 */
	P = aligned_alloc(64, (pb + 63) / 64 * 64);
	memset(P, 0xA5, pb);		/* padding rows must be written, not inherited */
	q_pack(t, W, rb, N, N_OUT, P, 0, 1);
	q_pack(t, W, rb, N, N_OUT, P, 1, NG);
	kern_matmul_packed(k, t, P, act, N_TOK, N, y, N_OUT, 0, NG);
	for (int r = 0; r < N_OUT; r++) {
		q_dequant_row(t, W + r * rb, wd, N);
		for (int tok = 0; tok < N_TOK; tok++) {
			const float *xt = x + tok * N, *d = (const float *)(act + tok * ab);
			const int8_t *qx = (const int8_t *)(d + 2 * (N / 32));
			double exact = 0, bound = 0, mag = 0;
			float order = 0;
			for (int i = 0; i < N; i++) {
				exact += (double)wd[i] * xt[i];
				bound += d[i / 32] / 2 * fabs(wd[i]);
				mag += fabs((double)wd[i] * xt[i]);
			}
			bound += 1e-5 * mag;
			/* quant_pack.c's documented order, on the stored integers */
			for (int b = 0; b < N / 32; b++) {
				const uint8_t *blk = W + r * rb + bb * b;
				uint16_t hs;
				int32_t isum = 0;
				memcpy(&hs, blk, 2);
				block_levels(t, blk, lv);
				for (int i = 0; i < 32; i++)
					isum += lv[i] * qx[32 * b + i];
				order = fmaf(h2f(hs) * d[b], (float)isum, order);
				if (t == GGML_TYPE_Q4_1) {
					memcpy(&hs, blk + 2, 2);
					order = fmaf(h2f(hs), d[N / 32 + b], order);
				}
			}
			float v = y[tok * N_OUT + r];
			if (!(fabs(v - exact) <= bound) || v != order) {
				if (bad++ < 3)
					fprintf(stderr, "packed %s row %d tok %d: %g in order %g exact %g "
					    "bound %g\n", tname(t), r, tok, v, order, exact, bound);
			}
		}
	}
	test_cond(bad == 0, "packed %s: %d bad", tname(t), bad);
	/*
	 * one token at a time, each group alone, then all groups in one call
	 * (decode's path, groups side by side): bitwise the batch's
	 */
	for (int tok = 0; tok < N_TOK; tok++) {
		for (int g = 0; g < NG; g++)
			kern_matmul_packed(k, t, P, act + tok * ab, 1, N, y1, N_OUT, g, g + 1);
		same += memcmp(y1, y + tok * N_OUT, sizeof y1) == 0;
		memset(y1, 0, sizeof y1);
		kern_matmul_packed(k, t, P, act + tok * ab, 1, N, y1, N_OUT, 0, NG);
		same += memcmp(y1, y + tok * N_OUT, sizeof y1) == 0;
	}
	/* tokens 2..6 as a batch of 5 (a tile of 4 and one) */
	kern_matmul_packed(k, t, P, act + 2 * ab, N_TOK - 2, N, y2, N_OUT, 0, NG);
	same += memcmp(y2, y + 2 * N_OUT, (N_TOK - 2) * N_OUT * sizeof *y) == 0;
	test_cond(same == 2 * N_TOK + 1, "packed %s batch independence: %d of %d", tname(t), same,
	    2 * N_TOK + 1);
	free(P);
}

/*
 * Block j of a K super-block as integers, from quant.h's layouts: levels u
 * (unsigned: Q4_K/Q5_K's own, Q6_K's w + 32) and Q4_K/Q5_K's (scale, min)
 * or Q6_K's two scales of 16.
 */
static void
k_block_ints(enum gguf_dtype t, const uint8_t *blk, int j, int *u, int *sc)
{
	if (t == GGML_TYPE_Q6_K) {
		for (int l = 0; l < 32; l++) {
			int e = 32 * j + l, h = e / 128, q = (e % 128) / 32, i = e % 32;
			int lo = blk[64 * h + 32 * (q % 2) + i] >> (q >= 2 ? 4 : 0) & 0xF;
			u[l] = lo | ((blk[128 + 32 * h + i] >> (2 * q)) & 3) << 4;
		}
		sc[0] = (int8_t)blk[192 + 2 * j];
		sc[1] = (int8_t)blk[192 + 2 * j + 1];
		return;
	}
	const uint8_t *q12 = blk + 4, *qs = blk + (t == GGML_TYPE_Q5_K ? 48 : 16);
	for (int l = 0; l < 32; l++) {
		int byte = qs[32 * (j / 2) + l];
		u[l] = (j % 2 ? byte >> 4 : byte & 0xF);
		if (t == GGML_TYPE_Q5_K)
			u[l] |= ((blk[16 + l] >> j) & 1) << 4;
	}
	/* 6-bit scale and min: j < 4 in bytes j, j + 4; else nibbles of j + 4 and top bits of j - 4, j */
	sc[0] = j < 4 ? q12[j] & 63 : (q12[j + 4] & 0xF) | (q12[j - 4] >> 6) << 4;
	sc[1] = j < 4 ? q12[j + 4] & 63 : (q12[j + 4] >> 4) | (q12[j] >> 6) << 4;
}

/*
 * Packed K-quants (quant_pack.c's layout and float order): every (row,
 * token) bitwise the documented order on the block's integers and within
 * q_dot_act's bound of the exact product; the same for one token, any cut
 * of the groups, and a batch that starts elsewhere. Two super-blocks, a
 * partial last group (37 rows), 10 tokens (more than one tile of tokens).
 */
static void
test_pack_k_type(const struct kern *k, enum gguf_dtype t)
{
	enum { N = 512, NB = N / 32, N_OUT = 37, N_TOK = 10 };
	static float x[N_TOK * N], w[N_OUT * N], wd[N], y[N_TOK * N_OUT], y1[N_OUT], y2[N_TOK * N_OUT];
	static uint8_t W[N_OUT * 420], act[N_TOK * (N + 8 * NB)];
	size_t ab = q_act_bytes(N), rb = q_row_bytes(t, N), sbb = rb / 2, pb;
	uint8_t *P;
	int bad = 0, same = 0, u[32], sc[2];

	pb = q_pack_bytes(t, N, N_OUT);
	test_cond(pb == 3 * 2 * (t == GGML_TYPE_Q4_K ? 2368 : t == GGML_TYPE_Q5_K ? 2880 : 3360) &&
	    q_pack_bytes(t, 480, N_OUT) == 0, "%s packed bytes %zu", tname(t), pb);
	for (int i = 0; i < N_TOK * N; i++)
		x[i] = frand() * (1 + (float)((i / 32) % 5));
	x[5] = 40;
	for (int i = 0; i < N_OUT * N; i++)
		w[i] = frand() * (1 + (float)(i % 13) / 4) + (i % 64 < 32 ? 0.3f : -0.2f);
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + tok * N, N, act + tok * ab);
	for (int r = 0; r < N_OUT; r++)
		q_quantize_row(t, w + r * N, W + r * rb, N);
	P = aligned_alloc(64, (pb + 63) / 64 * 64);
	memset(P, 0xA5, pb);
	q_pack(t, W, rb, N, N_OUT, P, 0, 2);
	q_pack(t, W, rb, N, N_OUT, P, 2, 3);
	kern_matmul_packed(k, t, P, act, N_TOK, N, y, N_OUT, 0, 3);
	for (int r = 0; r < N_OUT; r++) {
		q_dequant_row(t, W + r * rb, wd, N);
		for (int tok = 0; tok < N_TOK; tok++) {
			const float *xt = x + tok * N, *d = (const float *)(act + tok * ab), *xs = d + NB;
			const int8_t *qx = (const int8_t *)(d + 2 * NB);
			double exact = 0, bound = 0, mag = 0;
			float order = 0;
			for (int i = 0; i < N; i++) {
				exact += (double)wd[i] * xt[i];
				bound += d[i / 32] / 2 * fabs(wd[i]);
				mag += fabs((double)wd[i] * xt[i]);
			}
			bound += 1e-5 * mag;
			for (int b = 0; b < NB; b++) {
				const uint8_t *blk = W + r * rb + sbb * (b / 8);
				uint16_t dh, mh;
				int32_t is[2] = { 0, 0 };
				memcpy(&dh, blk + (t == GGML_TYPE_Q6_K ? 208 : 0), 2);
				memcpy(&mh, blk + 2, 2);
				k_block_ints(t, blk, b % 8, u, sc);
				for (int i = 0; i < 32; i++)
					is[i / 16] += (u[i] - (t == GGML_TYPE_Q6_K ? 32 : 0)) * qx[32 * b + i];
				if (t == GGML_TYPE_Q6_K) {
					order = fmaf((float)(sc[0] * is[0] + sc[1] * is[1]), h2f(dh) * d[b], order);
				} else {
					order = fmaf((float)(sc[0] * (is[0] + is[1])), h2f(dh) * d[b], order);
					order = fmaf(-(h2f(mh) * (float)sc[1]), xs[b], order);
				}
			}
			float v = y[tok * N_OUT + r];
			if (!(fabs(v - exact) <= bound) || v != order) {
				if (bad++ < 3)
					fprintf(stderr, "packed %s %s row %d tok %d: %.9g in order %.9g exact %g "
					    "bound %g\n", tname(t), k->name, r, tok, v, order, exact, bound);
			}
		}
	}
	test_cond(bad == 0, "packed %s %s: %d bad", tname(t), k->name, bad);
	for (int tok = 0; tok < N_TOK; tok++) {
		for (int g = 0; g < 3; g++)
			kern_matmul_packed(k, t, P, act + tok * ab, 1, N, y1, N_OUT, g, g + 1);
		same += memcmp(y1, y + tok * N_OUT, sizeof y1) == 0;
		memset(y1, 0, sizeof y1);
		kern_matmul_packed(k, t, P, act + tok * ab, 1, N, y1, N_OUT, 0, 3);
		same += memcmp(y1, y + tok * N_OUT, sizeof y1) == 0;
	}
	kern_matmul_packed(k, t, P, act + 3 * ab, N_TOK - 3, N, y2, N_OUT, 0, 3);
	same += memcmp(y2, y + 3 * N_OUT, (N_TOK - 3) * N_OUT * sizeof *y) == 0;
	test_cond(same == 2 * N_TOK + 1, "packed %s %s batch independence: %d of %d", tname(t), k->name,
	    same, 2 * N_TOK + 1);
	free(P);
}

/*
 * The widest rows a table packs (kern_packs, up to 65536 values): a
 * chunk of tokens whose corrections fill the kernel's stack array holds
 * fewer than a tile of tokens there, so the batch must still advance
 * and give each token what it gives alone (bitwise), for Q8_0, Q6_K and
 * IQ4_NL (kern_avx2_pack.c's, kern_avx2_packk.c's and kern_avx2_packn.c's
 * chunks), 9 tokens over one group of 16 rows.
 */
static void
test_pack_wide(const struct kern *k)
{
	enum { N_OUT = 16, N_TOK = 9, NMAX = 65536 };
	static const enum gguf_dtype types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL };
	static float x[NMAX], y[N_TOK * N_OUT], y1[N_OUT];
	float *w = malloc(NMAX * sizeof *w);
	uint8_t *act = malloc(N_TOK * q_act_bytes(NMAX));
	int64_t n = NMAX;

	while (n > 256 && !kern_packs(k, GGML_TYPE_Q6_K, n))
		n -= 256;
	test_cond(w != NULL && act != NULL && kern_packs(k, GGML_TYPE_Q8_0, n), "%s packs rows of %lld",
	    k->name, (long long)n);
	if (w == NULL || act == NULL) {
		free(w);
		free(act);
		return;
	}
	size_t ab = q_act_bytes(n);
	for (int tok = 0; tok < N_TOK; tok++) {
		for (int64_t i = 0; i < n; i++)
			x[i] = frand() * (1 + (float)(i % 7));
		q_act_prepare(x, n, act + (size_t)tok * ab);
	}
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum gguf_dtype t = types[ti];
		size_t rb = q_row_bytes(t, n), pb = q_pack_bytes(t, n, N_OUT);
		uint8_t *W = malloc(N_OUT * rb), *P = aligned_alloc(64, (pb + 63) / 64 * 64);
		int same = 0;

		if (W == NULL || P == NULL) {
			test_cond(false, "wide %s: out of memory", tname(t));
			free(W);
			free(P);
			continue;
		}
		for (int r = 0; r < N_OUT; r++) {
			for (int64_t i = 0; i < n; i++)
				w[i] = frand();
			q_quantize_row(t, w, W + r * rb, n);
		}
		q_pack(t, W, rb, n, N_OUT, P, 0, 1);
		kern_matmul_packed(k, t, P, act, N_TOK, n, y, N_OUT, 0, 1);
		for (int tok = 0; tok < N_TOK; tok++) {
			kern_matmul_packed(k, t, P, act + (size_t)tok * ab, 1, n, y1, N_OUT, 0, 1);
			same += memcmp(y1, y + tok * N_OUT, sizeof y1) == 0;
		}
		test_cond(same == N_TOK, "packed %s %s, rows of %lld, %d tokens: %d alike", tname(t), k->name,
		    (long long)n, N_TOK, same);
		free(W);
		free(P);
	}
	free(w);
	free(act);
}

static void
test_pack(const struct kern *k)
{
	if (!kern_packs(k, GGML_TYPE_Q8_0, 96)) {
		test_cond(!kern_packs(k, GGML_TYPE_Q4_0, 32) && !kern_packs(k, GGML_TYPE_Q4_K, 256),
		    "%s has no packed kernel: none offered", k->name);
		return;
	}
	test_cond(kern_packs(k, GGML_TYPE_Q4_K, 256) && !kern_packs(k, GGML_TYPE_Q4_K, 96) &&
	    !kern_packs(k, GGML_TYPE_Q8_0, 48) && q_pack_bytes(GGML_TYPE_Q3_K, 256, 16) == 0 &&
	    q_pack_bytes(GGML_TYPE_Q5_1, 256, 16) == 0, "packed types");
	test_pack_type(k, GGML_TYPE_Q8_0);
	test_pack_type(k, GGML_TYPE_Q4_0);
	test_pack_type(k, GGML_TYPE_Q4_1);
	test_pack_type(k, GGML_TYPE_Q5_0);
	test_pack_k_type(k, GGML_TYPE_Q4_K);
	test_pack_k_type(k, GGML_TYPE_Q5_K);
	test_pack_k_type(k, GGML_TYPE_Q6_K);
	test_pack_wide(k);
}

/*
 * Rows of W one token at a time (ranges that start anywhere and leave every
 * kind of remainder) against the same rows of a batch of n_tok, bitwise;
 * rows outside a range must be left alone. Returns the mismatches.
 */
static int
decode_vs_batch(const struct kern *k, enum gguf_dtype t, const uint8_t *W, size_t rb,
    const uint8_t *act, int n_tok, int n, int n_out, float *yb, float *y1)
{
	static const int ranges[][2] = { { 0, 21 }, { 3, 21 }, { 1, 9 }, { 5, 6 }, { 2, 19 } };
	size_t ab = q_act_bytes(n);
	int bad = 0;

	kern_matmul_act(k, t, W, rb, act, n_tok, n, yb, n_out, 0, n_out);
	for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
		int r0 = ranges[ri][0], r1 = ranges[ri][1] < n_out ? ranges[ri][1] : n_out;
		for (int tok = 0; tok < n_tok; tok++) {
			for (int r = 0; r < n_out; r++)
				y1[r] = -1e30f;
			kern_matmul_act(k, t, W, rb, act + tok * ab, 1, n, y1, n_out, r0, r1);
			for (int r = 0; r < n_out; r++) {
				bool in = r >= r0 && r < r1;
				if ((in ? y1[r] != yb[tok * n_out + r] : y1[r] != -1e30f) && bad++ < 3)
					fprintf(stderr, "%s %s n %d rows [%d, %d) row %d tok %d: alone %.9g, "
					    "in the batch %.9g\n", tname(t), k->name,
					    n, r0, r1, r, tok, y1[r], yb[tok * n_out + r]);
			}
		}
	}
	return bad;
}

/*
 * Decode: one token's rows come from a kernel of their own (AVX-512: eight
 * rows of a 32-value type or four of a K-quant at a time, the rest one by
 * one; AVX2: the tile's pairs with the rows prefetched). Each row's result
 * must be bitwise the one the tiles give the same token in a batch, with
 * even and odd block counts, in every table.
 */
static void
test_act_decode(const struct kern *k)
{
	enum { NMAX = 512, N_OUT = 21, N_TOK = 5 };
	static float x[N_TOK * NMAX], w[N_OUT * NMAX], yb[N_TOK * N_OUT], y1[N_OUT];
	static uint8_t W[N_OUT * NMAX * 2], act[N_TOK * (NMAX + 8 * NMAX / 32)];

	for (size_t ti = 0; ti < sizeof int8_types / sizeof int8_types[0]; ti++) {
		enum gguf_dtype t = int8_types[ti];
		bool kq = t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K ||
		    t == GGML_TYPE_Q6_K;
		/* K-quants: two blocks; the others 15 blocks (odd) or 16 */
		for (int n = kq ? 512 : 480; n <= 512; n += 32) {
			size_t rb = q_row_bytes(t, n), ab = q_act_bytes(n);
			int bad;
			for (int i = 0; i < N_TOK * n; i++)
				x[i] = frand() * (1 + (float)((i / 32) % 3));
			for (int i = 0; i < N_OUT * n; i++)
				w[i] = frand() * (1 + (float)(i % 11) / 3);
			for (int tok = 0; tok < N_TOK; tok++)
				q_act_prepare(x + tok * n, n, act + tok * ab);
			for (int r = 0; r < N_OUT; r++)
				q_quantize_row(t, w + r * n, W + r * rb, n);
			bad = decode_vs_batch(k, t, W, rb, act, N_TOK, n, N_OUT, yb, y1);
			test_cond(bad == 0, "%s %s n %d decode rows bitwise the batch's: %d bad", tname(t),
			    k->name, n, bad);
		}
	}
}

/*
 * Packed products at the integer extremes, where an int16 stage that could
 * saturate would show: every level at its type's largest unsigned value
 * (Q8_0 127, and -128 a foreign quantiser may write; 4-bit 15; 5-bit 31;
 * Q6_K 63, scales 127 and -128) or smallest, and activations all 127, all
 * -127, all -113 (x = 16 (-8) + 15: both parts of a split at their
 * largest) or alternating. Each (row, token), at one token and in a batch,
 * bitwise the documented order (quant_pack.c) on the stored integers.
 */
static void
test_pack_extremes(const struct kern *k, enum gguf_dtype t)
{
	enum { N_OUT = 37, N_TOK = 5, NMAX = 256 };
	static const int pat[N_TOK][2] = { { 127, 127 }, { -127, -127 }, { -113, -113 }, { 127, -127 },
	    { -113, 127 } };
	const bool kq = q_pack_k(t);
	const int n = kq ? 256 : 64, nb = n / 32;
	static uint8_t W[N_OUT * 210 * NMAX / 256], act[N_TOK * (NMAX + 8 * NMAX / 32)];
	static float y[N_TOK * N_OUT], y1[N_OUT];
	size_t rb = q_row_bytes(t, n), ab = q_act_bytes(n), bb = kq ? rb : rb / (size_t)nb, pb;
	int bad = 0, lv[32], u[32], sc[2];
	uint8_t *P;

	/* rows: all bytes 0xFF (the largest levels), 0x00 or 0xAA, then their scales */
	for (int r = 0; r < N_OUT; r++)
		for (int b = 0; b < (kq ? 1 : nb); b++) {
			uint8_t *blk = W + (size_t)r * rb + bb * (size_t)b;
			memset(blk, r % 3 == 0 ? 0xFF : r % 3 == 1 ? 0x00 : 0xAA, bb);
			uint16_t d = 0x2E66, m = 0xAE66;	/* 0.1, -0.1 */
			switch (t) {
			case GGML_TYPE_Q6_K:
				memcpy(blk + 208, &d, 2);
				for (int j = 0; j < 16; j++)
					blk[192 + j] = r % 2 ? 0x7F : 0x80;
				break;
			case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
				memcpy(blk, &d, 2);
				memcpy(blk + 2, &d, 2);
				memset(blk + 4, r % 2 ? 0xFF : 0xBF, 12);	/* 6-bit scales and mins 63 */
				break;
			case GGML_TYPE_Q8_0:
				memcpy(blk, &d, 2);
				if (r % 3 == 2)	/* 0xAA is -86: 127 and -128 instead, alternating */
					for (int i = 0; i < 32; i++)
						blk[2 + i] = i % 2 ? 0x7F : 0x80;
				else if (r % 3 == 0)
					memset(blk + 2, 0x7F, 32);
				else
					memset(blk + 2, 0x80, 32);
				break;
			case GGML_TYPE_Q4_1:
				memcpy(blk, &d, 2);
				memcpy(blk + 2, &m, 2);
				break;
			default:	/* Q4_0, Q5_0 */
				memcpy(blk, &d, 2);
				break;
			}
		}
	for (int tok = 0; tok < N_TOK; tok++) {
		float *dx = (float *)(act + tok * ab), *xs = dx + nb;
		int8_t *q = (int8_t *)(xs + nb);
		for (int b = 0; b < nb; b++) {
			int sum = 0;
			for (int i = 0; i < 32; i++)
				sum += q[32 * b + i] = (int8_t)pat[tok][i % 2];
			dx[b] = 0.01f * (float)(b + 1);
			xs[b] = dx[b] * (float)sum;
		}
	}
	pb = q_pack_bytes(t, n, N_OUT);
	P = aligned_alloc(64, (pb + 63) / 64 * 64);
	q_pack(t, W, rb, n, N_OUT, P, 0, 3);
	kern_matmul_packed(k, t, P, act, N_TOK, n, y, N_OUT, 0, 3);
	for (int tok = 0; tok < N_TOK; tok++) {
		kern_matmul_packed(k, t, P, act + tok * ab, 1, n, y1, N_OUT, 0, 3);
		const float *dx = (const float *)(act + tok * ab), *xs = dx + nb;
		const int8_t *qx = (const int8_t *)(xs + nb);
		for (int r = 0; r < N_OUT; r++) {
			float order = 0;
			for (int b = 0; b < nb; b++) {
				const uint8_t *blk = W + (size_t)r * rb + (kq ? 0 : bb * (size_t)b);
				uint16_t dh, mh;
				int32_t is[2] = { 0, 0 };
				if (kq) {
					memcpy(&dh, blk + (t == GGML_TYPE_Q6_K ? 208 : 0), 2);
					memcpy(&mh, blk + 2, 2);
					k_block_ints(t, blk, b, u, sc);
					for (int i = 0; i < 32; i++)
						is[i / 16] += (u[i] - (t == GGML_TYPE_Q6_K ? 32 : 0)) * qx[32 * b + i];
					if (t == GGML_TYPE_Q6_K) {
						order = fmaf((float)(sc[0] * is[0] + sc[1] * is[1]), h2f(dh) * dx[b], order);
					} else {
						order = fmaf((float)(sc[0] * (is[0] + is[1])), h2f(dh) * dx[b], order);
						order = fmaf(-(h2f(mh) * (float)sc[1]), xs[b], order);
					}
					continue;
				}
				memcpy(&dh, blk, 2);
				block_levels(t, blk, lv);
				for (int i = 0; i < 32; i++)
					is[0] += lv[i] * qx[32 * b + i];
				order = fmaf(h2f(dh) * dx[b], (float)is[0], order);
				if (t == GGML_TYPE_Q4_1) {
					memcpy(&mh, blk + 2, 2);
					order = fmaf(h2f(mh), xs[b], order);
				}
			}
			if ((y[tok * N_OUT + r] != order || y1[r] != order) && bad++ < 3)
				fprintf(stderr, "packed %s %s extremes row %d tok %d: batch %.9g alone %.9g "
				    "order %.9g\n", tname(t), k->name, r, tok, y[tok * N_OUT + r], y1[r], order);
		}
	}
	test_cond(bad == 0, "packed %s %s at the integer extremes: %d bad", tname(t), k->name, bad);
	free(P);
}

/* Every packed type of a table that has a packed kernel, at the extremes. */
static void
test_pack_extremes_all(const struct kern *k)
{
	static const enum gguf_dtype packed[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
	    GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };

	for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++)
		if (kern_packs(k, packed[i], 256))
			test_pack_extremes(k, packed[i]);
}

static void
test_misc(void)
{
	test_cond(q_supported(GGML_TYPE_Q4_K) && q_supported(GGML_TYPE_Q4_1) &&
	    q_supported(GGML_TYPE_Q5_0) && q_supported(GGML_TYPE_Q5_1) &&
	    !q_supported(GGML_TYPE_Q8_1) && !q_supported(GGML_TYPE_TQ1_0) &&
	    q_supported(GGML_TYPE_Q3_K) && !q_supported(GGML_TYPE_TQ2_0), "supported set");
	test_cond(q_row_bytes(GGML_TYPE_Q4_K, 512) == 288 && q_row_bytes(GGML_TYPE_Q6_K, 256) == 210 &&
	    q_row_bytes(GGML_TYPE_Q8_0, 64) == 68 && q_row_bytes(GGML_TYPE_Q4_0, 32) == 18 &&
	    q_row_bytes(GGML_TYPE_Q5_K, 256) == 176 && q_row_bytes(GGML_TYPE_BF16, 3) == 6 &&
	    q_row_bytes(GGML_TYPE_Q4_1, 64) == 40 && q_row_bytes(GGML_TYPE_Q5_0, 64) == 44 &&
	    q_row_bytes(GGML_TYPE_Q5_1, 896) == 28 * 24 && q_row_bytes(GGML_TYPE_Q3_K, 512) == 220,
	    "row bytes");
	test_cond(q_row_bytes(GGML_TYPE_Q4_K, 100) == 0, "partial block");
	float x[256] = {0};
	uint8_t b[64];
	test_cond(q_quantize_row(GGML_TYPE_TQ1_0, x, b, 256) == KVC_EUNSUPPORTED, "refuses TQ1_0");
	test_cond(q_quantize_row(GGML_TYPE_Q8_0, x, b, 31) == KVC_EUNSUPPORTED, "refuses a partial block");
}

int
main(void)
{
	test_fp16();
	test_dequant_by_hand();
	test_roundtrip();
	/* the kernels of every table this CPU runs (so CI on an AVX-512 machine checks avx2's too) */
	for (int i = 0; kern_list(i) != NULL; i++) {
		const struct kern *k = kern_list(i);

		if (!kern_runs(k)) {
			printf("kernels %s: not on this CPU\n", k->name);
			continue;
		}
		printf("kernels %s\n", k->name);
		test_dot(k);
		test_matmul(k);
		test_matmul_float_tiles(k);
		test_matmul_float_runs(k);
		test_matmul_float_copy(k);
		test_act(k);
		test_act_odd(k);
		test_pack(k);
		test_act_decode(k);
		test_pack_extremes_all(k);
	}
	test_misc();
	return test_done();
}
