/*
 * kern_neon.h: what the aarch64 kernel files share, internal to src/kern:
 * the int8 dot product of 16 bytes, the decoding of one weight block into
 * 32-value groups of int8 levels with their scales, and the tiles of the
 * int8 and float products. Included only by kern_neon.c (the "neon" table,
 * plain ARMv8.0 flags) and kern_neon_dot.c (the "neondot" table, built
 * with +dotprod); the functions are inlined into each, so each file's copy
 * is compiled for its own instruction set, as kern_x86.h's are.
 *
 * The two tables differ only in dot16: SDOT where the file is built with
 * dotprod, else widening multiplies and pairwise adds that leave the same
 * four partial sums in the same lanes. The integer sums are exact either
 * way, and the float work on them is the same code, so the two tables give
 * bitwise the same results (tests/e2e/test_neon_qemu.sh checks it).
 *
 * The float work per (row, token) and 32-value group: the group's int32
 * lane sums (4 lanes) converted to float and added, with one fused
 * multiply-add per scale (one for the 32-value types and Q4_K/Q5_K, one per
 * 16-value half for Q3_K/Q6_K) times the weight scale times the token's
 * block scale, into the pair's accumulator; after a block, the Q4_1/Q5_1
 * offset (m times the float sum of x) or the Q4_K/Q5_K sub-block mins
 * (times the 8 sums of x) enter the same accumulator. Its 4 lanes are
 * added at the end. Every (row, token) has its own accumulator and sees
 * the same instructions whatever the tile's shape: batch independence.
 */
#ifndef KVC_KERN_NEON_H
#define KVC_KERN_NEON_H

#include "kern_int.h"

#include <arm_neon.h>
#include <string.h>

#define INLINE __attribute__((always_inline)) static inline
/* the tile loops, fully unrolled so the accumulators stay in registers */
#define UNROLL _Pragma("GCC unroll 8")

/* acc lane k + the sum of a[4k + i] * b[4k + i], i < 4 (exact). */
INLINE int32x4_t
dot16(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if defined(__ARM_FEATURE_DOTPROD)
	return vdotq_s32(acc, a, b);
#else
	/* products of byte pairs (int16, exact: |a b| <= 128 * 127), then pairs of pairs */
	int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
	int32x4_t hi = vpaddlq_s16(vmull_high_s8(a, b));
	return vaddq_s32(acc, vpaddq_s32(lo, hi));
#endif
}

/* The IEEE half at p (unaligned) as float; exact. */
INLINE float
h2f(const uint8_t *p)
{
	__fp16 h;

	memcpy(&h, p, 2);
	return (float)h;
}

/* ---- one weight block, decoded per group of 32 values -------------------- */

INLINE int
t_groups(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K ||
	    t == GGML_TYPE_Q6_K ? 8 : 1;
}

INLINE size_t
t_block_bytes(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_Q8_0: return 34;
	case GGML_TYPE_Q4_0: return 18;
	case GGML_TYPE_Q4_1: return 20;
	case GGML_TYPE_Q5_0: return 22;
	case GGML_TYPE_Q5_1: return 24;
	case GGML_TYPE_Q3_K: return 110;
	case GGML_TYPE_Q4_K: return 144;
	case GGML_TYPE_Q5_K: return 176;
	default: return 210;	/* Q6_K */
	}
}

/* Whether the scale changes every 16 values (Q3_K, Q6_K) rather than every 32. */
INLINE bool
t_scale16(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q6_K;
}

/* Whether a block adds an offset times the sums of x (Q4_1, Q5_1, Q4_K, Q5_K). */
INLINE bool
t_has_off(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K ||
	    t == GGML_TYPE_Q5_K;
}

/* A block's scales: value i = s[i / 16] * level + its offset. */
struct nblk {
	const uint8_t *p;
	float s[16];
	float32x4_t off[2];	/* Q4_1/Q5_1: (m, 0, 0, 0); Q4_K/Q5_K: -dmin * min_j, j < 8 */
};

/* Q4_K/Q5_K: sub-block j's 6-bit scale and min from the 12 bytes at q (quant.h). */
INLINE void
k_scale_min(const uint8_t *q, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4;
		*mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
	}
}

/* Q3_K: scale k of 16 (6 bits, offset 32), laid out as quant.h says. */
INLINE int
q3_scale(const uint8_t *s, int k)
{
	int lo = k < 8 ? s[k] & 0xF : s[k - 8] >> 4, hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;

	return (lo | hi << 4) - 32;
}

INLINE void
blk_prep(enum gguf_dtype t, const uint8_t *p, struct nblk *b)
{
	b->p = p;
	switch (t) {
	case GGML_TYPE_Q4_1:
	case GGML_TYPE_Q5_1:
		b->s[0] = h2f(p);
		b->off[0] = vsetq_lane_f32(h2f(p + 2), vdupq_n_f32(0), 0);
		break;
	case GGML_TYPE_Q4_K:
	case GGML_TYPE_Q5_K: {
		float d = h2f(p), dmin = h2f(p + 2), mn[8];
		for (int j = 0; j < 8; j++) {
			int sc, m;
			k_scale_min(p + 4, j, &sc, &m);
			b->s[2 * j] = d * (float)sc;
			mn[j] = -dmin * (float)m;
		}
		b->off[0] = vld1q_f32(mn);
		b->off[1] = vld1q_f32(mn + 4);
		break;
	}
	case GGML_TYPE_Q3_K: {
		float d = h2f(p + 108);
		for (int k = 0; k < 16; k++)
			b->s[k] = d * (float)q3_scale(p + 96, k);
		break;
	}
	case GGML_TYPE_Q6_K: {
		float d = h2f(p + 208);
		for (int k = 0; k < 16; k++)
			b->s[k] = d * (float)(int8_t)p[192 + k];
		break;
	}
	default:	/* Q8_0, Q4_0, Q5_0 */
		b->s[0] = h2f(p);
		break;
	}
}

/* 0x10 in byte i where bit i (i < 16) of the 16-bit little-endian word at h is set. */
INLINE uint8x16_t
bit4_of(const uint8_t *h)
{
	static const uint8_t bit[16] = { 1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128 };
	uint8x16_t v = vcombine_u8(vdup_n_u8(h[0]), vdup_n_u8(h[1]));

	return vandq_u8(vtstq_u8(v, vld1q_u8(bit)), vdupq_n_u8(0x10));
}

/* Group g's 32 levels (q[0]: values 0-15, q[1]: 16-31) as int8. */
INLINE void
blk_group(enum gguf_dtype t, const struct nblk *b, int g, int8x16_t q[2])
{
	const uint8_t *p = b->p;
	const uint8x16_t m4 = vdupq_n_u8(0x0F);

	switch (t) {
	case GGML_TYPE_Q8_0:
		q[0] = vld1q_s8((const int8_t *)p + 2);
		q[1] = vld1q_s8((const int8_t *)p + 18);
		break;
	case GGML_TYPE_Q4_0:
	case GGML_TYPE_Q4_1: {
		uint8x16_t v = vld1q_u8(p + (t == GGML_TYPE_Q4_0 ? 2 : 4));
		int8x16_t sub = vdupq_n_s8(t == GGML_TYPE_Q4_0 ? 8 : 0);
		q[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m4)), sub);
		q[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), sub);
		break;
	}
	case GGML_TYPE_Q5_0:
	case GGML_TYPE_Q5_1: {
		const uint8_t *qh = p + (t == GGML_TYPE_Q5_0 ? 2 : 4);
		uint8x16_t v = vld1q_u8(qh + 4);
		int8x16_t sub = vdupq_n_s8(t == GGML_TYPE_Q5_0 ? 16 : 0);
		q[0] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, m4), bit4_of(qh))), sub);
		q[1] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), bit4_of(qh + 2))), sub);
		break;
	}
	case GGML_TYPE_Q4_K:
	case GGML_TYPE_Q5_K: {
		/* group g: the low (g even) or high nibbles of bytes [32 (g / 2), +32) of qs */
		bool q5 = t == GGML_TYPE_Q5_K;
		const uint8_t *qs = p + (q5 ? 48 : 16) + 32 * (g / 2);
		for (int h = 0; h < 2; h++) {
			uint8x16_t v = vld1q_u8(qs + 16 * h);
			v = g % 2 == 0 ? vandq_u8(v, m4) : vshrq_n_u8(v, 4);
			if (q5) {	/* fifth bit: bit g of qh[l] */
				uint8x16_t hb = vtstq_u8(vld1q_u8(p + 16 + 16 * h), vdupq_n_u8((uint8_t)(1u << g)));
				v = vorrq_u8(v, vandq_u8(hb, vdupq_n_u8(0x10)));
			}
			q[h] = vreinterpretq_s8_u8(v);
		}
		break;
	}
	case GGML_TYPE_Q3_K: {
		/* g = 4 h + j: bits 2j of qs[32 h + l], less 4 unless bit g of hmask[l] is set */
		int hh = g / 4, j = g % 4;
		for (int h = 0; h < 2; h++) {
			uint8x16_t lo = vandq_u8(vshlq_u8(vld1q_u8(p + 32 + 32 * hh + 16 * h),
			    vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3));
			uint8x16_t hm = vtstq_u8(vld1q_u8(p + 16 * h), vdupq_n_u8((uint8_t)(1u << g)));
			int8x16_t sub = vreinterpretq_s8_u8(vbicq_u8(vdupq_n_u8(4), hm));
			q[h] = vsubq_s8(vreinterpretq_s8_u8(lo), sub);
		}
		break;
	}
	default: {	/* Q6_K, g = 4 hh + k: nibble of ql[64 hh + 32 (k & 1) + l], 2 bits of qh */
		int hh = g / 4, k = g % 4;
		for (int h = 0; h < 2; h++) {
			uint8x16_t l = vld1q_u8(p + 64 * hh + 32 * (k & 1) + 16 * h);
			uint8x16_t hi = vandq_u8(vshlq_u8(vld1q_u8(p + 128 + 32 * hh + 16 * h),
			    vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
			l = k >= 2 ? vshrq_n_u8(l, 4) : vandq_u8(l, m4);
			q[h] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
		}
		break;
	}
	}
}

/* ---- the int8 tile: two weight rows times up to four tokens -------------- */

/*
 * Rows w[0], w[1] times NT tokens of prepared activations (q_act_prepare's
 * layout, ab bytes apart), n_in values; out[r * 4 + tok]. Constant t and NT
 * (always inlined) give each combination its own straight-line loop.
 */
INLINE void
tile_i8(enum gguf_dtype t, int NT, const uint8_t *const w[2], const uint8_t *act, size_t ab,
    int64_t n_in, float *out)
{
	const int ng = t_groups(t);
	const int64_t nb = n_in / 32, nbk = nb / ng;
	const size_t bb = t_block_bytes(t);
	const float *dx[4], *xs[4];
	const int8_t *qx[4];
	float32x4_t acc[2][4];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		xs[k] = dx[k] + nb;
		qx[k] = (const int8_t *)(xs[k] + nb);
		acc[0][k] = acc[1][k] = vdupq_n_f32(0);
	}
	for (int64_t b = 0; b < nbk; b++) {
		struct nblk bk[2];
		UNROLL
		for (int r = 0; r < 2; r++)
			blk_prep(t, w[r] + (size_t)b * bb, &bk[r]);
		for (int g = 0; g < ng; g++) {
			int64_t ag = b * ng + g;
			int8x16_t wq[2][2];
			UNROLL
			for (int r = 0; r < 2; r++)
				blk_group(t, &bk[r], g, wq[r]);
			UNROLL
			for (int k = 0; k < NT; k++) {
				int8x16_t x0 = vld1q_s8(qx[k] + 32 * ag), x1 = vld1q_s8(qx[k] + 32 * ag + 16);
				float d = dx[k][ag];
				UNROLL
				for (int r = 0; r < 2; r++) {
					const int32x4_t z = vdupq_n_s32(0);
					if (t_scale16(t)) {
						int32x4_t s0 = dot16(z, wq[r][0], x0), s1 = dot16(z, wq[r][1], x1);
						acc[r][k] = vfmaq_n_f32(acc[r][k], vcvtq_f32_s32(s0), bk[r].s[2 * g] * d);
						acc[r][k] = vfmaq_n_f32(acc[r][k], vcvtq_f32_s32(s1),
						    bk[r].s[2 * g + 1] * d);
					} else {
						int32x4_t s = dot16(dot16(z, wq[r][0], x0), wq[r][1], x1);
						acc[r][k] = vfmaq_n_f32(acc[r][k], vcvtq_f32_s32(s), bk[r].s[2 * g] * d);
					}
				}
			}
		}
		if (t_has_off(t)) {
			bool kq = t_groups(t) == 8;
			UNROLL
			for (int k = 0; k < NT; k++) {
				/* Q4_K/Q5_K: the block's 8 sums of x; Q4_1/Q5_1: its one sum in lane 0 */
				float32x4_t x0 = kq ? vld1q_f32(xs[k] + 8 * b) : vld1q_dup_f32(xs[k] + b);
				float32x4_t x1 = kq ? vld1q_f32(xs[k] + 8 * b + 4) : vdupq_n_f32(0);
				UNROLL
				for (int r = 0; r < 2; r++) {
					acc[r][k] = vfmaq_f32(acc[r][k], bk[r].off[0], x0);
					if (kq)
						acc[r][k] = vfmaq_f32(acc[r][k], bk[r].off[1], x1);
				}
			}
		}
	}
	UNROLL
	for (int r = 0; r < 2; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			out[r * 4 + k] = vaddvq_f32(acc[r][k]);
}

/*
 * Rows [r0, r1) in pairs (an odd last row is paired with itself and its
 * twin's result dropped), tokens in tiles of 4 and a last tile of 1-3.
 */
INLINE void
rows_i8(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r += 2) {
		const uint8_t *w[2] = { W + (size_t)r * rb, W + (size_t)(r + 1 < r1 ? r + 1 : r) * rb };
		int nr = r + 1 < r1 ? 2 : 1;
		if (n_tok == 1 && r + 2 < r1)	/* decode: the next pair on its way */
			for (size_t o = 0; o < 2 * rb; o += 64)
				__builtin_prefetch(W + (size_t)(r + 2) * rb + o);
		for (int tok = 0; tok < n_tok; tok += 4) {
			const uint8_t *a = act + (size_t)tok * ab;
			float out[8];
			int nt = n_tok - tok < 4 ? n_tok - tok : 4;
			switch (nt) {
			case 4: tile_i8(t, 4, w, a, ab, n_in, out); break;
			case 3: tile_i8(t, 3, w, a, ab, n_in, out); break;
			case 2: tile_i8(t, 2, w, a, ab, n_in, out); break;
			default: tile_i8(t, 1, w, a, ab, n_in, out); break;
			}
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * 4 + k];
		}
	}
}

/*
 * One entry per type, its type a constant so each gets its own straight-line
 * loops; false when n_in is not whole blocks (the scalar reference runs).
 */
#define NEON_ROWS_I8(T, name)							\
static bool									\
name(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, \
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)		\
{										\
	(void)t;								\
	if (n_in % (32 * t_groups(T)) != 0)					\
		return false;							\
	rows_i8(T, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);		\
	return true;								\
}

/* Each type's entry, for a file's table (after NEON_ROWS_I8 named them rows_<type>). */
#define NEON_ROWS_I8_ALL							\
	NEON_ROWS_I8(GGML_TYPE_Q8_0, rows_q8_0)					\
	NEON_ROWS_I8(GGML_TYPE_Q4_0, rows_q4_0)					\
	NEON_ROWS_I8(GGML_TYPE_Q4_1, rows_q4_1)					\
	NEON_ROWS_I8(GGML_TYPE_Q5_0, rows_q5_0)					\
	NEON_ROWS_I8(GGML_TYPE_Q5_1, rows_q5_1)					\
	NEON_ROWS_I8(GGML_TYPE_Q3_K, rows_q3_k)					\
	NEON_ROWS_I8(GGML_TYPE_Q4_K, rows_q4_k)					\
	NEON_ROWS_I8(GGML_TYPE_Q5_K, rows_q5_k)					\
	NEON_ROWS_I8(GGML_TYPE_Q6_K, rows_q6_k)

/* quant_iq.h's types: the scalar table's loop (no NEON kernel of theirs yet) */
#define NEON_ROWS_I8_TABLE							\
	[GGML_TYPE_Q8_0] = rows_q8_0, [GGML_TYPE_Q4_0] = rows_q4_0, [GGML_TYPE_Q4_1] = rows_q4_1, \
	[GGML_TYPE_Q5_0] = rows_q5_0, [GGML_TYPE_Q5_1] = rows_q5_1, [GGML_TYPE_Q3_K] = rows_q3_k, \
	[GGML_TYPE_Q4_K] = rows_q4_k, [GGML_TYPE_Q5_K] = rows_q5_k, [GGML_TYPE_Q6_K] = rows_q6_k, \
	KERN_SCALAR_IQ_ROWS_ACT

#endif
