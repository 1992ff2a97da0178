/*
 * quant_ref.c: quantising floats into the block formats, for the fixture
 * generator (tests/fixtures/mkmodel), the tests and the benchmarks. Simple
 * round-to-nearest choices of scales, not llama.cpp's error-minimising
 * searches: kvchat itself only reads quantised weights, so this file is
 * built into libkvcref.a, never into libkvchat.a.
 */
#include "quant_impl.h"
#include "quant_iq.h"
#include "quant_ref.h"

#include <math.h>
#include <string.h>

static int
nearest_int(float f)
{
	return (int)lrintf(f);
}

static void
quant_q8_0(const float *x, block_q8_0 *b)
{
	float amax = 0;

	for (int i = 0; i < QK8_0; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	b->d = q_f32_to_fp16(amax / 127.0f);
	float d = q_fp16_to_f32(b->d), id = d > 0 ? 1.0f / d : 0;
	for (int i = 0; i < QK8_0; i++) {
		int q = nearest_int(x[i] * id);
		b->qs[i] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
	}
}

static void
quant_q4_0(const float *x, block_q4_0 *b)
{
	float amax = 0, mx = 0;

	/* the value of largest magnitude maps to -8, the most negative level */
	for (int i = 0; i < QK4_0; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			mx = x[i];
		}
	}
	b->d = q_f32_to_fp16(mx / -8.0f);
	float d = q_fp16_to_f32(b->d), id = d != 0 ? 1.0f / d : 0;
	for (int i = 0; i < QK4_0 / 2; i++) {
		int q0 = nearest_int(x[i] * id) + 8, q1 = nearest_int(x[i + 16] * id) + 8;
		q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
		q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
		b->qs[i] = (uint8_t)(q0 | (q1 << 4));
	}
}

/*
 * Q5_0: as Q4_0 with 32 levels: the value of largest magnitude maps to
 * -16. Q4_1/Q5_1: d = (max - min) / nmax and m = min, levels 0..nmax.
 * Returns the levels in q[0..32) for pack_32.
 */
static void
quant_sym5(const float *x, uint16_t *dp, uint8_t *q)
{
	float amax = 0, mx = 0;

	for (int i = 0; i < 32; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			mx = x[i];
		}
	}
	*dp = q_f32_to_fp16(mx / -16.0f);
	float d = q_fp16_to_f32(*dp), id = d != 0 ? 1.0f / d : 0;
	for (int i = 0; i < 32; i++) {
		int v = nearest_int(x[i] * id) + 16;
		q[i] = (uint8_t)(v < 0 ? 0 : v > 31 ? 31 : v);
	}
}

static void
quant_affine(const float *x, int nmax, uint16_t *dp, uint16_t *mp, uint8_t *q)
{
	float lo = x[0], hi = x[0];

	for (int i = 1; i < 32; i++) {
		lo = fminf(lo, x[i]);
		hi = fmaxf(hi, x[i]);
	}
	*dp = q_f32_to_fp16((hi - lo) / (float)nmax);
	*mp = q_f32_to_fp16(lo);
	float d = q_fp16_to_f32(*dp), m = q_fp16_to_f32(*mp), id = d > 0 ? 1.0f / d : 0;
	for (int i = 0; i < 32; i++) {
		int v = nearest_int((x[i] - m) * id);
		q[i] = (uint8_t)(v < 0 ? 0 : v > nmax ? nmax : v);
	}
}

/* Levels q[0..32) into nibbles (and the qh word for 5-bit types, qh4 != NULL). */
static void
pack_32(const uint8_t *q, uint8_t *qs, uint8_t *qh4)
{
	uint32_t qh = 0;

	for (int i = 0; i < 16; i++) {
		qs[i] = (uint8_t)((q[i] & 0xF) | (q[i + 16] & 0xF) << 4);
		qh |= (uint32_t)(q[i] >> 4) << i | (uint32_t)(q[i + 16] >> 4) << (i + 16);
	}
	if (qh4 != NULL)
		for (int k = 0; k < 4; k++)
			qh4[k] = (uint8_t)(qh >> (8 * k));
}

/* Pack 8 (scale, min) pairs of 6 bits as q_k_scale_min reads them. */
static void
pack_k_scales(const uint8_t *sc, const uint8_t *mn, uint8_t *q)
{
	for (int j = 0; j < 4; j++) {
		q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
		q[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
		q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
	}
}

/*
 * Q4_K/Q5_K: each sub-block of 32 gets scale (max-min)/nmax and min -min
 * (min clipped to <= 0); those are quantised to 6 bits against d = max
 * scale / 63 and dmin = max min / 63, then the values against the
 * quantised scale and min. q[0..256) receives the levels 0..nmax.
 */
static void
quant_k_common(const float *x, int nmax, uint16_t *dp, uint16_t *dminp,
    uint8_t *scales, uint8_t *q)
{
	float sc[8], mn[8], smax = 0, mmax = 0;
	uint8_t sc6[8], mn6[8];

	for (int j = 0; j < 8; j++) {
		float lo = 0, hi = x[32 * j];
		for (int l = 0; l < 32; l++) {
			lo = fminf(lo, x[32 * j + l]);
			hi = fmaxf(hi, x[32 * j + l]);
		}
		sc[j] = (hi - lo) / (float)nmax;
		mn[j] = -lo;
		smax = fmaxf(smax, sc[j]);
		mmax = fmaxf(mmax, mn[j]);
	}
	*dp = q_f32_to_fp16(smax / 63.0f);
	*dminp = q_f32_to_fp16(mmax / 63.0f);
	float d = q_fp16_to_f32(*dp), dmin = q_fp16_to_f32(*dminp);
	for (int j = 0; j < 8; j++) {
		int s = d > 0 ? nearest_int(sc[j] / d) : 0;
		int m = dmin > 0 ? nearest_int(mn[j] / dmin) : 0;
		sc6[j] = (uint8_t)(s > 63 ? 63 : s < 0 ? 0 : s);
		mn6[j] = (uint8_t)(m > 63 ? 63 : m < 0 ? 0 : m);
	}
	pack_k_scales(sc6, mn6, scales);
	for (int j = 0; j < 8; j++) {
		float d1 = d * sc6[j], m1 = dmin * mn6[j], id = d1 > 0 ? 1.0f / d1 : 0;
		for (int l = 0; l < 32; l++) {
			int v = nearest_int((x[32 * j + l] + m1) * id);
			q[32 * j + l] = (uint8_t)(v < 0 ? 0 : v > nmax ? nmax : v);
		}
	}
}

static void
quant_q4_k(const float *x, block_q4_K *b)
{
	uint8_t q[QK_K];

	quant_k_common(x, 15, &b->d, &b->dmin, b->scales, q);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++)
			b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

static void
quant_q5_k(const float *x, block_q5_K *b)
{
	uint8_t q[QK_K];

	quant_k_common(x, 31, &b->d, &b->dmin, b->scales, q);
	memset(b->qh, 0, sizeof b->qh);
	for (int c = 0; c < 4; c++) {
		for (int l = 0; l < 32; l++) {
			uint8_t a = q[64 * c + l], z = q[64 * c + 32 + l];
			b->qs[32 * c + l] = (uint8_t)((a & 0xF) | ((z & 0xF) << 4));
			b->qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((z >> 4) << (2 * c + 1)));
		}
	}
}

/*
 * Q3_K: 16 sub-blocks of 16, symmetric: sub-block scale s = mx / -4 (mx the
 * value of largest magnitude, so it maps to level -4), scales quantised
 * against d = max|s| / 31 to -31..31 (stored + 32), values to -4..3.
 */
static void
quant_q3_k(const float *x, block_q3_K *b)
{
	float sc[16], smax = 0;
	int sq[16], lv[QK_K];

	for (int j = 0; j < 16; j++) {
		float amax = 0, mx = 0;
		for (int l = 0; l < 16; l++) {
			if (fabsf(x[16 * j + l]) > amax) {
				amax = fabsf(x[16 * j + l]);
				mx = x[16 * j + l];
			}
		}
		sc[j] = mx / -4.0f;
		smax = fmaxf(smax, fabsf(sc[j]));
	}
	b->d = q_f32_to_fp16(smax / 31.0f);
	float d = q_fp16_to_f32(b->d);
	for (int j = 0; j < 16; j++) {
		int v = d > 0 ? nearest_int(sc[j] / d) : 0;
		sq[j] = v > 31 ? 31 : v < -31 ? -31 : v;
		float d1 = d * (float)sq[j], id = d1 != 0 ? 1.0f / d1 : 0;
		for (int l = 0; l < 16; l++) {
			int q = nearest_int(x[16 * j + l] * id);
			lv[16 * j + l] = q < -4 ? -4 : q > 3 ? 3 : q;
		}
	}
	memset(b->scales, 0, sizeof b->scales);
	for (int k = 0; k < 16; k++) {
		int u = sq[k] + 32;
		b->scales[k % 8] |= (uint8_t)((u & 0xF) << (k < 8 ? 0 : 4));
		b->scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
	}
	memset(b->hmask, 0, sizeof b->hmask);
	memset(b->qs, 0, sizeof b->qs);
	for (int e = 0; e < QK_K; e++) {
		int h = e / 128, j = (e % 128) / 32, l = e % 32, u = lv[e] + 4;
		b->qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
		b->hmask[l] |= (uint8_t)((u >> 2) << (4 * h + j));
	}
}

/*
 * Q6_K: 16 sub-blocks of 16, symmetric: scale amax/31 per sub-block, scales
 * quantised to int8 against d = max scale / 127, values to -32..31.
 */
static void
quant_q6_k(const float *x, block_q6_K *b)
{
	float sc[16], smax = 0;
	int8_t q[QK_K];

	for (int j = 0; j < 16; j++) {
		float amax = 0;
		for (int l = 0; l < 16; l++)
			amax = fmaxf(amax, fabsf(x[16 * j + l]));
		sc[j] = amax / 31.0f;
		smax = fmaxf(smax, sc[j]);
	}
	b->d = q_f32_to_fp16(smax / 127.0f);
	float d = q_fp16_to_f32(b->d);
	for (int j = 0; j < 16; j++) {
		int s = d > 0 ? nearest_int(sc[j] / d) : 0;
		b->scales[j] = (int8_t)(s > 127 ? 127 : s);
		float d1 = d * b->scales[j], id = d1 > 0 ? 1.0f / d1 : 0;
		for (int l = 0; l < 16; l++) {
			int v = nearest_int(x[16 * j + l] * id);
			q[16 * j + l] = (int8_t)(v < -32 ? -32 : v > 31 ? 31 : v);
		}
	}
	memset(b->qh, 0, sizeof b->qh);
	for (int h = 0; h < 2; h++) {
		const int8_t *qq = q + 128 * h;
		uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
		for (int l = 0; l < 32; l++) {
			int u1 = qq[l] + 32, u2 = qq[l + 32] + 32, u3 = qq[l + 64] + 32, u4 = qq[l + 96] + 32;
			ql[l] = (uint8_t)((u1 & 0xF) | ((u3 & 0xF) << 4));
			ql[l + 32] = (uint8_t)((u2 & 0xF) | ((u4 & 0xF) << 4));
			qh[l] = (uint8_t)((u1 >> 4) | ((u2 >> 4) << 2) | ((u3 >> 4) << 4) | ((u4 >> 4) << 6));
		}
	}
}

int
q_quantize_row(enum gguf_dtype t, const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	int64_t bs = q_block_elems(t);
	size_t bb = q_row_bytes(t, bs);	/* one block */
	uint8_t lv[32];
	union any_block b;	/* aligned scratch: dst may be at any address */

	if (bs == 0 || n % bs != 0)
		return KVC_EUNSUPPORTED;
	for (int64_t i = 0; i < n / bs; i++) {
		const float *x = src + i * bs;
		switch (t) {
		case GGML_TYPE_F32:
			memcpy(p + 4 * i, x, 4);
			break;
		case GGML_TYPE_F16:
		case GGML_TYPE_BF16: {
			uint16_t h = t == GGML_TYPE_F16 ? q_f32_to_fp16(*x) : q_f32_to_bf16(*x);
			memcpy(p + 2 * i, &h, 2);
			break;
		}
		case GGML_TYPE_Q8_0: quant_q8_0(x, &b.q8_0); break;
		case GGML_TYPE_Q4_0: quant_q4_0(x, &b.q4_0); break;
		case GGML_TYPE_Q4_1:
			quant_affine(x, 15, &b.q4_1.d, &b.q4_1.m, lv);
			pack_32(lv, b.q4_1.qs, NULL);
			break;
		case GGML_TYPE_Q5_0:
			quant_sym5(x, &b.q5_0.d, lv);
			pack_32(lv, b.q5_0.qs, b.q5_0.qh);
			break;
		case GGML_TYPE_Q5_1:
			quant_affine(x, 31, &b.q5_1.d, &b.q5_1.m, lv);
			pack_32(lv, b.q5_1.qs, b.q5_1.qh);
			break;
		case GGML_TYPE_Q3_K: quant_q3_k(x, &b.q3_k); break;
		case GGML_TYPE_Q4_K: quant_q4_k(x, &b.q4_k); break;
		case GGML_TYPE_Q5_K: quant_q5_k(x, &b.q5_k); break;
		case GGML_TYPE_Q6_K: quant_q6_k(x, &b.q6_k); break;
		default:
			/* Q2_K, IQ*, MXFP4 (quant_ref_iq.c) write straight to dst */
			if (q_iq_quantize_block(t, x, p + (size_t)i * bb) != 0)
				return KVC_EUNSUPPORTED;
			continue;
		}
		if (bs > 1)
			memcpy(p + (size_t)i * bb, &b, bb);
	}
	return 0;
}
