/*
 * quant.c: ggml block formats (sizes, dequantisation) and the scalar
 * reference of the dot products, float and integer (src/kern's tables run
 * it where they have no SIMD kernel). The half-precision conversions are in
 * half.c, the packed layout in quant_pack.c, the quantisers for fixtures in
 * quant_ref.c.
 */
#include "quant_impl.h"
#include "quant_iq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- types ------------------------------------------------------------- */

bool
q_supported(enum gguf_dtype t)
{
	/* the float types, plus every block type the int8 path also takes */
	return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 ||
	    q_act_supported(t);
}

int64_t
q_block_elems(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: return 1;
	case GGML_TYPE_Q8_0: return QK8_0;
	case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
	case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: return QK4_0;
	case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: return QK_K;
	default: return q_iq_block_elems(t);	/* Q2_K, IQ*, MXFP4: quant_iq.c */
	}
}

static size_t
block_bytes(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_F32: return 4;
	case GGML_TYPE_F16: case GGML_TYPE_BF16: return 2;
	case GGML_TYPE_Q8_0: return sizeof(block_q8_0);
	case GGML_TYPE_Q4_0: return sizeof(block_q4_0);
	case GGML_TYPE_Q4_1: return sizeof(block_q4_1);
	case GGML_TYPE_Q5_0: return sizeof(block_q5_0);
	case GGML_TYPE_Q5_1: return sizeof(block_q5_1);
	case GGML_TYPE_Q3_K: return sizeof(block_q3_K);
	case GGML_TYPE_Q4_K: return sizeof(block_q4_K);
	case GGML_TYPE_Q5_K: return sizeof(block_q5_K);
	case GGML_TYPE_Q6_K: return sizeof(block_q6_K);
	default: return q_iq_block_bytes(t);
	}
}

size_t
q_row_bytes(enum gguf_dtype t, int64_t n)
{
	int64_t b = q_block_elems(t);

	if (b == 0 || n < 0 || n % b != 0)
		return 0;
	return (size_t)(n / b) * block_bytes(t);
}

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 layout");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K layout");
_Static_assert(offsetof(block_q3_K, qs) == 32 && offsetof(block_q3_K, scales) == 96 &&
    offsetof(block_q3_K, d) == 108, "block_q3_K offsets");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");
/* src/kern's kernels address fields by these byte offsets */
_Static_assert(offsetof(block_q6_K, qh) == 128 && offsetof(block_q6_K, scales) == 192 &&
    offsetof(block_q6_K, d) == 208, "block_q6_K offsets");
_Static_assert(offsetof(block_q5_K, qh) == 16 && offsetof(block_q5_K, qs) == 48, "block_q5_K offsets");
_Static_assert(offsetof(block_q4_K, qs) == 16, "block_q4_K offsets");

/* ---- dequantisation, one block ----------------------------------------- */

static void
deq_q8_0(const block_q8_0 *b, float *y)
{
	float d = q_fp16_to_f32(b->d);

	for (int i = 0; i < QK8_0; i++)
		y[i] = d * (float)b->qs[i];
}

static void
deq_q4_0(const block_q4_0 *b, float *y)
{
	float d = q_fp16_to_f32(b->d);

	for (int i = 0; i < QK4_0 / 2; i++) {
		y[i] = d * (float)((b->qs[i] & 0xF) - 8);
		y[i + QK4_0 / 2] = d * (float)((b->qs[i] >> 4) - 8);
	}
}

/*
 * Q4_1, Q5_0, Q5_1: 32 values, element i in the low nibble of qs[i % 16]
 * (i < 16) or the high one; the 5-bit types take bit i of qh (a
 * little-endian 32-bit word) as the 5th bit. value = d * level + off.
 */
static inline void
deq_32(uint16_t d16, float off, const uint8_t *qh4, const uint8_t *qs, int sub, float *y)
{
	float d = q_fp16_to_f32(d16);
	uint32_t qh = 0;

	if (qh4 != NULL)
		qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
	for (int i = 0; i < 16; i++) {
		int lo = (qs[i] & 0xF) | (int)((qh >> i) & 1) << 4;
		int hi = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
		y[i] = d * (float)(lo - sub) + off;
		y[i + 16] = d * (float)(hi - sub) + off;
	}
}

/*
 * Q4_K and Q5_K share a layout: 4 chunks of 64, low nibbles are sub-block
 * 2c, high nibbles 2c+1; Q5_K adds bit 2c / 2c+1 of qh[l] as the 5th bit of
 * chunk c's values (qh NULL for Q4_K).
 */
static inline void
deq_k_nibbles(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *q,
    const uint8_t *qh, float *y)
{
	float d = q_fp16_to_f32(d16), dmin = q_fp16_to_f32(dmin16);

	for (int c = 0; c < 4; c++, q += 32, y += 64) {
		uint8_t s0, m0, s1, m1;
		q_k_scale_min(2 * c, scales, &s0, &m0);
		q_k_scale_min(2 * c + 1, scales, &s1, &m1);
		float d0 = d * s0, n0 = dmin * m0, d1 = d * s1, n1 = dmin * m1;
		for (int l = 0; l < 32; l++) {
			int h0 = qh ? (qh[l] >> (2 * c)) & 1 : 0, h1 = qh ? (qh[l] >> (2 * c + 1)) & 1 : 0;
			y[l] = d0 * (float)((q[l] & 0xF) | (h0 << 4)) - n0;
			y[l + 32] = d1 * (float)((q[l] >> 4) | (h1 << 4)) - n1;
		}
	}
}

static void
deq_q4_k(const block_q4_K *b, float *y)
{
	deq_k_nibbles(b->d, b->dmin, b->scales, b->qs, NULL, y);
}

static void
deq_q5_k(const block_q5_K *b, float *y)
{
	deq_k_nibbles(b->d, b->dmin, b->scales, b->qs, b->qh, y);
}

/* Q3_K scale k (0..15) from its 12 packed bytes, offset 32 removed (quant.h). */
static inline int
q3_scale(const uint8_t *s, int k)
{
	int lo = k < 8 ? s[k] & 0xF : s[k - 8] >> 4, hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;

	return (lo | hi << 4) - 32;
}

/* Q3_K level of value e (-4..3), as quant.h lays it out. */
static inline int
q3_level(const uint8_t *hmask, const uint8_t *qs, int e)
{
	int h = e / 128, j = (e % 128) / 32, l = e % 32;
	int lo = (qs[32 * h + l] >> (2 * j)) & 3, hb = (hmask[l] >> (4 * h + j)) & 1;

	return lo - (hb ? 0 : 4);
}

static void
deq_q3_k(const block_q3_K *b, float *y)
{
	float d = q_fp16_to_f32(b->d);

	for (int e = 0; e < QK_K; e++)
		y[e] = d * (float)q3_scale(b->scales, e / 16) * (float)q3_level(b->hmask, b->qs, e);
}

static void
deq_q6_k(const block_q6_K *b, float *y)
{
	float d = q_fp16_to_f32(b->d);
	const uint8_t *ql = b->ql, *qh = b->qh;
	const int8_t *sc = b->scales;

	/* 2 halves of 128: ql 64 bytes, qh 32 bytes, 8 scales (one per 16) each */
	for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
			int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
			int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
			y[l] = d * (float)sc[is] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
	}
}

/*
 * Dequantise block i of a row of quantised type t into y[0..block). Rows
 * need not be aligned (tests use odd addresses): the block is copied to an
 * aligned local first.
 */
static void
deq_block(enum gguf_dtype t, const void *src, int64_t i, float *y)
{
	union any_block b;
	size_t bs = block_bytes(t);

	if (q_iq_type(t)) {
		q_iq_dequant_block(t, (const uint8_t *)src + (size_t)i * bs, y);
		return;
	}
	memcpy(&b, (const uint8_t *)src + (size_t)i * bs, bs);
	switch (t) {
	case GGML_TYPE_Q8_0: deq_q8_0(&b.q8_0, y); break;
	case GGML_TYPE_Q4_0: deq_q4_0(&b.q4_0, y); break;
	case GGML_TYPE_Q4_1: deq_32(b.q4_1.d, q_fp16_to_f32(b.q4_1.m), NULL, b.q4_1.qs, 0, y); break;
	case GGML_TYPE_Q5_0: deq_32(b.q5_0.d, 0, b.q5_0.qh, b.q5_0.qs, 16, y); break;
	case GGML_TYPE_Q5_1: deq_32(b.q5_1.d, q_fp16_to_f32(b.q5_1.m), b.q5_1.qh, b.q5_1.qs, 0, y); break;
	case GGML_TYPE_Q3_K: deq_q3_k(&b.q3_k, y); break;
	case GGML_TYPE_Q4_K: deq_q4_k(&b.q4_k, y); break;
	case GGML_TYPE_Q5_K: deq_q5_k(&b.q5_k, y); break;
	case GGML_TYPE_Q6_K: deq_q6_k(&b.q6_k, y); break;
	default: break;
	}
}

void
q_dequant_row(enum gguf_dtype t, const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	int64_t bs = q_block_elems(t);

	switch (t) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		return;
	case GGML_TYPE_F16:
	case GGML_TYPE_BF16:
		for (int64_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);	/* rows may be unaligned */
			dst[i] = t == GGML_TYPE_F16 ? q_fp16_to_f32(h) : q_bf16_to_f32(h);
		}
		return;
	default:
		if (bs == 0)
			return;
		for (int64_t i = 0; i < n / bs; i++)
			deq_block(t, src, i, dst + i * bs);
	}
}

/* ---- dot products --------------------------------------------------------- */

/*
 * Portable path: each block is dequantised into a small stack buffer (never
 * more than one block) and dotted with x; per-block sums are added in
 * order. Four partial sums keep the adds independent.
 */
static float
dot_f32_scalar(const float *w, const float *x, int64_t n)
{
	float s[4] = {0, 0, 0, 0};
	int64_t i = 0;

	for (; i + 4 <= n; i += 4)
		for (int k = 0; k < 4; k++)
			s[k] += w[i + k] * x[i + k];
	for (; i < n; i++)
		s[0] += w[i] * x[i];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

static float
dot_scalar(enum gguf_dtype t, const void *row, const float *x, int64_t n)
{
	float buf[QK_K];
	float sum = 0;

	switch (t) {
	case GGML_TYPE_F32: {
		const float *w = row;
		if (((uintptr_t)w & 3) == 0)
			return dot_f32_scalar(w, x, n);
		break;	/* unaligned: go through the buffer */
	}
	case GGML_TYPE_F16:
	case GGML_TYPE_BF16:
		break;
	default: {
		int64_t bs = q_block_elems(t);
		if (bs <= 1)
			return 0;
		for (int64_t i = 0; i < n / bs; i++) {
			deq_block(t, row, i, buf);
			sum += dot_f32_scalar(buf, x + i * bs, bs);
		}
		return sum;
	}
	}
	/* F16/BF16 (and unaligned F32) in chunks of QK_K */
	const uint8_t *p = row;
	size_t es = block_bytes(t);
	for (int64_t i = 0; i < n; i += QK_K) {
		int64_t m = n - i < QK_K ? n - i : QK_K;
		q_dequant_row(t, p + (size_t)i * es, buf, m);
		sum += dot_f32_scalar(buf, x + i, m);
	}
	return sum;
}

float
q_dot(enum gguf_dtype t, const void *row, const float *x, int64_t n)
{
	return dot_scalar(t, row, x, n);
}

/* ---- integer kernels over int8 activations -------------------------------- */

bool
q_act_supported(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
	case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q3_K:
	case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
		return true;
	default:
		return q_iq_type(t);	/* every type of quant_iq.c has an int8 kernel */
	}
}

size_t
q_act_bytes(int64_t n_in)
{
	return (size_t)(n_in / 32) * 2 * sizeof(float) + (size_t)n_in;
}

void
q_act_prepare(const float *x, int64_t n_in, void *act)
{
	int64_t nb = n_in / 32;
	float *d = act, *xs = d + nb;
	int8_t *q = (int8_t *)(xs + nb);

	for (int64_t b = 0; b < nb; b++) {
		const float *xb = x + 32 * b;
		float amax = 0;
		int32_t isum = 0;
		for (int i = 0; i < 32; i++)
			amax = fmaxf(amax, fabsf(xb[i]));
		float db = amax / 127.0f, id = db > 0 ? 127.0f / amax : 0;
		d[b] = db;
		for (int i = 0; i < 32; i++) {
			q[32 * b + i] = (int8_t)lrintf(xb[i] * id);
			isum += q[32 * b + i];
		}
		/* the sum of the rounded x (see quant.h): exact in any order, times d */
		xs[b] = db * (float)isum;
	}
}

/*
 * One block of weights as integers: value i = s16[i / 16] * q[i] - mn[i / 32]
 * (mn only for Q4_K/Q5_K). Blocks of 32 fill 2 groups of 16.
 */
struct int_block {
	int8_t q[QK_K];
	float s16[QK_K / 16];
	float mn[QK_K / 32];
};

static void
unpack_int(enum gguf_dtype t, const uint8_t *p, struct int_block *o)
{
	uint16_t h, hm;
	float d, dmin;

	memcpy(&h, p, 2);
	d = q_fp16_to_f32(h);
	switch (t) {
	case GGML_TYPE_Q8_0:
		memcpy(o->q, p + 2, 32);
		o->s16[0] = o->s16[1] = d;
		o->mn[0] = 0;
		break;
	case GGML_TYPE_Q4_0:
		for (int i = 0; i < 16; i++) {
			o->q[i] = (int8_t)((p[2 + i] & 0xF) - 8);
			o->q[i + 16] = (int8_t)((p[2 + i] >> 4) - 8);
		}
		o->s16[0] = o->s16[1] = d;
		o->mn[0] = 0;
		break;
	case GGML_TYPE_Q4_1:
	case GGML_TYPE_Q5_0:
	case GGML_TYPE_Q5_1: {
		/* offsets: Q4_1 d m qs, Q5_0 d qh qs, Q5_1 d m qh qs; m enters as -mn */
		bool has_m = t != GGML_TYPE_Q5_0, q5 = t != GGML_TYPE_Q4_1;
		const uint8_t *qh = p + (has_m ? 4 : 2), *qs = qh + (q5 ? 4 : 0);
		uint32_t hw = q5 ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 |
		    (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
		int sub = t == GGML_TYPE_Q5_0 ? 16 : 0;
		for (int i = 0; i < 16; i++) {
			o->q[i] = (int8_t)(((qs[i] & 0xF) | (int)((hw >> i) & 1) << 4) - sub);
			o->q[i + 16] = (int8_t)(((qs[i] >> 4) | (int)((hw >> (i + 16)) & 1) << 4) - sub);
		}
		o->s16[0] = o->s16[1] = d;
		memcpy(&hm, p + 2, 2);
		o->mn[0] = has_m ? -q_fp16_to_f32(hm) : 0;
		break;
	}
	case GGML_TYPE_Q4_K:
	case GGML_TYPE_Q5_K: {
		bool q5 = t == GGML_TYPE_Q5_K;
		const uint8_t *qh = p + 16, *qs = p + 16 + (q5 ? 32 : 0);
		memcpy(&hm, p + 2, 2);
		dmin = q_fp16_to_f32(hm);
		for (int j = 0; j < 8; j++) {
			uint8_t sc, mn;
			q_k_scale_min(j, p + 4, &sc, &mn);
			o->s16[2 * j] = o->s16[2 * j + 1] = d * sc;
			o->mn[j] = dmin * mn;
		}
		for (int c = 0; c < 4; c++) {
			for (int l = 0; l < 32; l++) {
				int a = qs[32 * c + l] & 0xF, b = qs[32 * c + l] >> 4;
				if (q5) {
					a |= ((qh[l] >> (2 * c)) & 1) << 4;
					b |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
				}
				o->q[64 * c + l] = (int8_t)a;
				o->q[64 * c + 32 + l] = (int8_t)b;
			}
		}
		break;
	}
	case GGML_TYPE_Q3_K: {
		const uint8_t *hmask = p, *qs = p + 32, *sc = p + 96;
		memcpy(&h, p + 108, 2);
		d = q_fp16_to_f32(h);
		for (int g = 0; g < 16; g++)
			o->s16[g] = d * (float)q3_scale(sc, g);
		for (int j = 0; j < 8; j++)
			o->mn[j] = 0;
		for (int e = 0; e < QK_K; e++)
			o->q[e] = (int8_t)q3_level(hmask, qs, e);
		break;
	}
	case GGML_TYPE_Q6_K: {
		const uint8_t *ql = p, *qh = p + 128;
		const int8_t *sc = (const int8_t *)(p + 192);
		memcpy(&h, p + 208, 2);
		d = q_fp16_to_f32(h);
		for (int g = 0; g < 16; g++)
			o->s16[g] = d * sc[g];
		for (int j = 0; j < 8; j++)
			o->mn[j] = 0;
		for (int e = 0; e < QK_K; e++) {
			int hh = e / 128, k = (e % 128) / 32, l = e % 32;
			uint8_t lb = ql[64 * hh + l + 32 * (k & 1)];
			int lo = k >= 2 ? lb >> 4 : lb & 15;
			int hi = (qh[32 * hh + l] >> (2 * k)) & 3;
			o->q[e] = (int8_t)((lo | hi << 4) - 32);
		}
		break;
	}
	default:
		break;
	}
}

static float
dot_act_scalar(enum gguf_dtype t, const uint8_t *row, const float *d, const float *xs,
    const int8_t *q, int64_t n)
{
	int64_t bs = q_block_elems(t);
	size_t bb = block_bytes(t);
	struct int_block ib;
	float sum = 0, msum = 0;

	for (int64_t b = 0; b < n / bs; b++) {
		unpack_int(t, row + (size_t)b * bb, &ib);
		for (int g = 0; g < bs / 16; g++) {
			int32_t isum = 0;
			int64_t e0 = b * bs + 16 * g;
			for (int i = 0; i < 16; i++)
				isum += ib.q[16 * g + i] * q[e0 + i];
			sum += ib.s16[g] * d[e0 / 32] * (float)isum;
		}
		for (int j = 0; j < bs / 32; j++)
			msum += ib.mn[j] * xs[(b * bs) / 32 + j];
	}
	return sum - msum;
}

float
q_dot_act(enum gguf_dtype t, const void *row, const void *act, int64_t n)
{
	int64_t nb = n / 32;
	const float *d = act, *xs = d + nb;
	const int8_t *q = (const int8_t *)(xs + nb);

	if (q_iq_type(t))
		return q_iq_dot_act(t, row, act, n);
	return dot_act_scalar(t, row, d, xs, q, n);
}
