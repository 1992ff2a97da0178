/*
 * quant_iq.c: Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ1_S, IQ1_M: sizes, one block unpacked into integer levels and
 * scales (the one decoder of these formats, quant_iq.h), dequantisation and
 * the portable int8-activation dot product. quant.c dispatches here for
 * these types.
 */
#include "quant_iq.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K layout");
_Static_assert(offsetof(block_q2_K, qs) == 16 && offsetof(block_q2_K, d) == 80, "block_q2_K offsets");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");
_Static_assert(sizeof(block_iq4_xs) == 136 && offsetof(block_iq4_xs, qs) == 8, "block_iq4_xs layout");
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 layout");
_Static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs layout");
_Static_assert(sizeof(block_iq2_xs) == 74 && offsetof(block_iq2_xs, scales) == 66, "block_iq2_xs layout");
_Static_assert(sizeof(block_iq2_s) == 82 && offsetof(block_iq2_s, qh) == 66, "block_iq2_s layout");
_Static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs layout");
_Static_assert(sizeof(block_iq3_s) == 110 && offsetof(block_iq3_s, signs) == 74 &&
    offsetof(block_iq3_s, scales) == 106, "block_iq3_s layout");
_Static_assert(sizeof(block_iq1_s) == 50 && offsetof(block_iq1_s, qh) == 34, "block_iq1_s layout");
_Static_assert(sizeof(block_iq1_m) == 56 && offsetof(block_iq1_m, scales) == 48, "block_iq1_m layout");

bool
q_iq_type(enum gguf_dtype t)
{
	return q_iq_block_elems(t) != 0;
}

int64_t
q_iq_block_elems(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_IQ4_NL: case GGML_TYPE_MXFP4: return 32;
	case GGML_TYPE_Q2_K: case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S:
	case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S: return QK_K;
	case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: return QK_K;
	default: return 0;
	}
}

size_t
q_iq_block_bytes(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_Q2_K: return sizeof(block_q2_K);
	case GGML_TYPE_IQ4_NL: return sizeof(block_iq4_nl);
	case GGML_TYPE_IQ4_XS: return sizeof(block_iq4_xs);
	case GGML_TYPE_MXFP4: return sizeof(block_mxfp4);
	case GGML_TYPE_IQ3_XXS: return sizeof(block_iq3_xxs);
	case GGML_TYPE_IQ3_S: return sizeof(block_iq3_s);
	case GGML_TYPE_IQ2_XXS: return sizeof(block_iq2_xxs);
	case GGML_TYPE_IQ2_XS: return sizeof(block_iq2_xs);
	case GGML_TYPE_IQ2_S: return sizeof(block_iq2_s);
	case GGML_TYPE_IQ1_S: return sizeof(block_iq1_s);
	case GGML_TYPE_IQ1_M: return sizeof(block_iq1_m);
	default: return 0;
	}
}

float
q_mxfp4_scale(uint8_t e)
{
	/* 2^-128 .. 2^127: subnormal at the bottom, every one exact in a float */
	return ldexpf(1.0f, (int)e - 128);
}

static uint16_t
le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 32 values from 16 bytes of nibbles through a level table (IQ4_NL, IQ4_XS, MXFP4). */
static void
nibbles32(const uint8_t *qs, const int8_t *table, int8_t *q)
{
	for (int i = 0; i < 16; i++) {
		q[i] = table[qs[i] & 0xF];
		q[i + 16] = table[qs[i] >> 4];
	}
}

/*
 * 8 signed values: magnitudes from a grid entry's bytes (byte j value j),
 * minus where sign bit j is set. Eight bytes at once in a 64-bit word: bit
 * j spread to a 0xFF byte j (replicate, pick, test nonzero per byte), then
 * (g ^ m) - m per byte, which is g or -g modulo 256; the decoder runs for
 * every block of every product, and the loop of eight branches it replaces
 * was most of a lattice-type product's time (bench/qmm).
 */
static void
grid8(uint64_t g, uint8_t signs, int8_t *q)
{
	const uint64_t H = 0x8080808080808080ull, L7 = 0x7F7F7F7F7F7F7F7Full;
	uint64_t b = ((uint64_t)signs * 0x0101010101010101ull) & 0x8040201008040201ull;
	uint64_t m = ((((b & L7) + L7) | b) & H) >> 7;	/* 1 in byte j where bit j is set */
	uint64_t a;

	m *= 0xFF;
	a = g ^ m;
	/* a - m per byte, no borrow across bytes */
	a = ((a | H) - (m & ~H)) ^ ((a ^ ~m) & H);
	for (int j = 0; j < 8; j++)
		q[j] = (int8_t)(uint8_t)(a >> (8 * j));
}

static void
grid4x2(uint32_t g0, uint32_t g1, uint8_t signs, int8_t *q)
{
	grid8((uint64_t)g0 | (uint64_t)g1 << 32, signs, q);
}

/*
 * 8 values of IQ1_S/IQ1_M as the integers 8 t + 1, or 8 t - 1 with the
 * group's negative shift (t = -1, 0, 1: a grid entry's bytes). Per byte of
 * a 64-bit word: t << 3 is 0xF8, 0 or 8 once the bits shifted in from the
 * byte below are masked off, its low 3 bits clear, so | 1 adds the one; the
 * negative shift then takes 2 from each byte without a borrow between them
 * (every byte is odd, at least 1).
 */
static void
iq1_8(uint64_t g, bool neg, int8_t *q)
{
	const uint64_t B = 0x0101010101010101ull, H = 0x8080808080808080ull;
	uint64_t a = ((g << 3) & (0xF8 * B)) | B;

	if (neg)
		a = ((a | H) - 2 * B) ^ ((a ^ ~(2 * B)) & H);
	for (int j = 0; j < 8; j++)
		q[j] = (int8_t)(uint8_t)(a >> (8 * j));
}

static void
set_scale32(struct q_iq_int *o, int b, float s)
{
	o->s[2 * b] = o->s[2 * b + 1] = s;
}

static void
unpack_q2_k(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p + 80)), dmin = q_fp16_to_f32(le16(p + 82));

	o->has_m = true;
	for (int k = 0; k < 16; k++) {
		o->s[k] = d * (float)(p[k] & 0xF);
		o->m[k] = dmin * (float)(p[k] >> 4);
	}
	/* value 128 h + 32 s + l: bits 2s, 2s + 1 of byte 32 h + l of qs */
	for (int h = 0; h < 2; h++)
		for (int sh = 0; sh < 4; sh++)
			for (int l = 0; l < 32; l++)
				o->q[128 * h + 32 * sh + l] = (int8_t)((p[16 + 32 * h + l] >> (2 * sh)) & 3);
}

static void
unpack_iq4_xs(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));
	uint16_t sh = le16(p + 2);

	for (int b = 0; b < 8; b++) {
		int ls = ((p[4 + b / 2] >> (4 * (b % 2))) & 0xF) | ((sh >> (2 * b)) & 3) << 4;
		set_scale32(o, b, d * (float)(ls - 32));
		nibbles32(p + 8 + 16 * b, q_iq4nl_values, o->q + 32 * b);
	}
}

static void
unpack_iq2_xxs(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));

	for (int b = 0; b < 8; b++) {
		const uint8_t *g = p + 2 + 8 * b;
		uint32_t aux = le32(g + 4);
		set_scale32(o, b, d * (0.5f + (float)(aux >> 28)) * 0.25f);
		for (int l = 0; l < 4; l++)
			grid8(q_iq2xxs_grid[g[l]], q_iq_ksigns[(aux >> (7 * l)) & 127], o->q + 32 * b + 8 * l);
	}
}

static void
unpack_iq2_xs(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));

	for (int b = 0; b < 8; b++) {
		uint8_t sc = p[66 + b];
		o->s[2 * b] = d * (0.5f + (float)(sc & 0xF)) * 0.25f;
		o->s[2 * b + 1] = d * (0.5f + (float)(sc >> 4)) * 0.25f;
		for (int l = 0; l < 4; l++) {
			uint16_t v = le16(p + 2 + 2 * (4 * b + l));
			grid8(q_iq2xs_grid[v & 511], q_iq_ksigns[v >> 9], o->q + 32 * b + 8 * l);
		}
	}
}

static void
unpack_iq2_s(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));
	const uint8_t *qs = p + 2, *signs = p + 34, *qh = p + 66, *sc = p + 74;

	for (int b = 0; b < 8; b++) {
		o->s[2 * b] = d * (0.5f + (float)(sc[b] & 0xF)) * 0.25f;
		o->s[2 * b + 1] = d * (0.5f + (float)(sc[b] >> 4)) * 0.25f;
		for (int l = 0; l < 4; l++) {
			int idx = qs[4 * b + l] | ((qh[b] >> (2 * l)) & 3) << 8;
			grid8(q_iq2s_grid[idx], signs[4 * b + l], o->q + 32 * b + 8 * l);
		}
	}
}

static void
unpack_iq3_xxs(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));
	const uint8_t *qs = p + 2;

	for (int b = 0; b < 8; b++) {
		uint32_t aux = le32(qs + 64 + 4 * b);
		set_scale32(o, b, d * (0.5f + (float)(aux >> 28)) * 0.5f);
		for (int l = 0; l < 4; l++)
			grid4x2(q_iq3xxs_grid[qs[8 * b + 2 * l]], q_iq3xxs_grid[qs[8 * b + 2 * l + 1]],
			    q_iq_ksigns[(aux >> (7 * l)) & 127], o->q + 32 * b + 8 * l);
	}
}

static void
unpack_iq3_s(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));
	const uint8_t *qs = p + 2, *qh = p + 66, *signs = p + 74, *sc = p + 106;

	for (int b = 0; b < 8; b++) {
		set_scale32(o, b, d * (float)(1 + 2 * ((sc[b / 2] >> (4 * (b % 2))) & 0xF)));
		for (int l = 0; l < 4; l++) {
			int k0 = 2 * l, k1 = 2 * l + 1;
			int i0 = qs[8 * b + k0] | ((qh[b] >> k0) & 1) << 8, i1 = qs[8 * b + k1] | ((qh[b] >> k1) & 1) << 8;
			grid4x2(q_iq3s_grid[i0], q_iq3s_grid[i1], signs[4 * b + l], o->q + 32 * b + 8 * l);
		}
	}
}

/*
 * IQ1_S/IQ1_M's scale: d (2 s + 1) / 8 for the integers 8 t +- 1. It is
 * exact (11 + 4 significant bits, /8 a power of two), and so is its product
 * with any |q| <= 9, so s * q is ggml's d (2 s + 1) (t +- 1/8) bit for bit.
 */
static float
iq1_scale(float d, unsigned s3)
{
	return d * (float)(2 * (s3 & 7) + 1) * 0.125f;
}

static void
unpack_iq1_s(const uint8_t *p, struct q_iq_int *o)
{
	float d = q_fp16_to_f32(le16(p));
	const uint8_t *qs = p + 2, *qh = p + 34;

	for (int b = 0; b < 8; b++) {
		unsigned h = le16(qh + 2 * b);
		set_scale32(o, b, iq1_scale(d, h >> 12));
		for (int l = 0; l < 4; l++)
			iq1_8(q_iq1s_grid[qs[4 * b + l] | ((h >> (3 * l)) & 7) << 8], (h & 0x8000) != 0,
			    o->q + 32 * b + 8 * l);
	}
}

static void
unpack_iq1_m(const uint8_t *p, struct q_iq_int *o)
{
	const uint8_t *qs = p, *qh = p + 32, *sc = p + 48;
	unsigned w[4];
	float d;

	for (int k = 0; k < 4; k++)
		w[k] = le16(sc + 2 * k);
	/* the fp16 d from the top nibbles of the four scale words, word 0's lowest */
	d = q_fp16_to_f32((uint16_t)(w[0] >> 12 | (w[1] >> 8 & 0xF0) | (w[2] >> 4 & 0xF00) | (w[3] & 0xF000)));
	for (int b = 0; b < 8; b++) {
		unsigned s6 = w[b / 2] >> (6 * (b % 2));
		o->s[2 * b] = iq1_scale(d, s6);
		o->s[2 * b + 1] = iq1_scale(d, s6 >> 3);
		for (int l = 0; l < 4; l++) {
			unsigned h = qh[2 * b + l / 2] >> (4 * (l % 2));
			iq1_8(q_iq1s_grid[qs[4 * b + l] | (h & 7) << 8], (h & 8) != 0, o->q + 32 * b + 8 * l);
		}
	}
}

void
q_iq_unpack(enum gguf_dtype t, const uint8_t *p, struct q_iq_int *o)
{
	o->has_m = false;
	memset(o->m, 0, sizeof o->m);
	switch (t) {
	case GGML_TYPE_Q2_K: unpack_q2_k(p, o); break;
	case GGML_TYPE_IQ4_NL:
		set_scale32(o, 0, q_fp16_to_f32(le16(p)));
		nibbles32(p + 2, q_iq4nl_values, o->q);
		break;
	case GGML_TYPE_MXFP4:
		set_scale32(o, 0, q_mxfp4_scale(p[0]));
		nibbles32(p + 1, q_mxfp4_values, o->q);
		break;
	case GGML_TYPE_IQ4_XS: unpack_iq4_xs(p, o); break;
	case GGML_TYPE_IQ2_XXS: unpack_iq2_xxs(p, o); break;
	case GGML_TYPE_IQ2_XS: unpack_iq2_xs(p, o); break;
	case GGML_TYPE_IQ2_S: unpack_iq2_s(p, o); break;
	case GGML_TYPE_IQ3_XXS: unpack_iq3_xxs(p, o); break;
	case GGML_TYPE_IQ3_S: unpack_iq3_s(p, o); break;
	case GGML_TYPE_IQ1_S: unpack_iq1_s(p, o); break;
	case GGML_TYPE_IQ1_M: unpack_iq1_m(p, o); break;
	default: memset(o->q, 0, sizeof o->q); memset(o->s, 0, sizeof o->s); break;
	}
}

void
q_iq_dequant_block(enum gguf_dtype t, const uint8_t *blk, float *y)
{
	struct q_iq_int b;
	int64_t n = q_iq_block_elems(t);

	q_iq_unpack(t, blk, &b);
	/* s * q is exact in a float for every type (at most 24 significant bits), so one rounding at most */
	for (int64_t e = 0; e < n; e++)
		y[e] = b.s[e / 16] * (float)b.q[e] - b.m[e / 16];
}

/*
 * One row against n_tok <= Q_IQ_TOKENS prepared tokens (ab bytes apart):
 * each block is unpacked once for all of them. Every token's sums run in
 * the same order whatever n_tok is, so its result is bitwise the same
 * alone or in a batch.
 */

static void
row_act(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    float *out, size_t out_stride)
{
	int64_t bs = q_iq_block_elems(t), nb32 = n / 32;
	size_t bb = q_iq_block_bytes(t);
	struct q_iq_int ib;
	float sum[Q_IQ_TOKENS] = {0}, msum[Q_IQ_TOKENS] = {0};

	for (int64_t b = 0; bs > 0 && b < n / bs; b++) {
		q_iq_unpack(t, row + (size_t)b * bb, &ib);
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab);
			const int8_t *q = (const int8_t *)(d + 2 * nb32);
			for (int g = 0; g < bs / 16; g++) {
				int64_t e0 = b * bs + 16 * g;
				int32_t isum = 0, xsum = 0;
				for (int i = 0; i < 16; i++) {
					isum += ib.q[16 * g + i] * q[e0 + i];
					xsum += q[e0 + i];
				}
				sum[tok] += ib.s[g] * d[e0 / 32] * (float)isum;
				if (ib.has_m)
					msum[tok] += ib.m[g] * d[e0 / 32] * (float)xsum;
			}
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * out_stride] = sum[tok] - msum[tok];
}

float
q_iq_dot_act(enum gguf_dtype t, const uint8_t *row, const void *act, int64_t n)
{
	float r;

	row_act(t, row, act, 0, 1, n, &r, 1);
	return r;
}

void
q_iq_matmul_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS)
			row_act(t, W + (size_t)r * rb, act + (size_t)t0 * ab, ab,
			    n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS, n_in,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
}
