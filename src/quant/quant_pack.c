/*
 * quant_pack.c: the layout of Q8_0, Q4_0, Q4_1, Q5_0, IQ4_NL, MXFP4,
 * IQ4_XS and of Q4_K, Q5_K, Q6_K matrices packed at load
 * for the kernel tables that have a packed kernel (src/kern's avx2 and
 * avx512: kern_avx512_pack.c says why a packed matrix is faster). Packed, the
 * lanes are rows instead of values: a group
 * of Q_PACK_ROWS (16) rows keeps, per block of 32 values, eight 64-byte
 * vectors whose lane r holds 4 consecutive levels of row r, and the 16
 * rows' fp16 scales side by side.
 *
 * Bytes of a group, per block of 32 values, each part for all nb blocks
 * before the next (so the level vectors stay 64-byte aligned): levels, the
 * fifth bits (Q5_0), the 16 fp16 scales (Q4_1: then the 16 fp16 m,
 * q_pack_scale_bytes); rows past n_out are zeros.
 * Q8_0 keeps 8 vectors of levels stored as w + 128 (unsigned, dpbusd's
 * first operand). Q4_0/Q5_0 keep 4 vectors of their stored bytes: lane r
 * of vector j holds bytes 4j .. 4j + 3 of row r's 16 (low nibbles: values
 * 4j .., high: 16 + 4j ..), and Q5_0 a vector of the rows' fifth bits
 * laid out as Q5_K's below (lane r byte k, bit m: the value byte k of
 * level vector m stands for), so that a shift and a mask (or a byte test)
 * put each level vector's bits in place; their levels u are w + o (o = 8, 16). Each token's block sum of
 * u x is corrected by -o x (sum of its int8 levels), formed once per call
 * and token. Q4_1 keeps Q4_0's vectors; its levels are its own (0..15)
 * and m the offset. Their float order, per (row, token), from acc = 0, for
 * each block b: acc = fma(d_b dx_b, (float)isum_b, acc), isum the exact
 * integer sum of w x; Q4_1 then acc = fma(m_b, xsum_b, acc).
 *
 * IQ4_NL and MXFP4 keep Q4_0's 4 vectors of stored nibble bytes; their
 * levels are quant_iq.h's tables, which the kernels turn the nibbles into
 * by one byte shuffle per vector, as u = w + 128 (unsigned, at most 241),
 * each token's block sum corrected by -128 x. Scales: IQ4_NL's 16 fp16 d
 * as Q4_0's; MXFP4's 16 E8M0 exponent bytes (q_pack_scale_bytes 16, so
 * the copy is the file's size), the scale s = 2^(e - 128). Float order as
 * Q4_0's: acc = fma(s_b dx_b, (float)isum_b, acc), s_b dx_b one rounding
 * (exact for MXFP4 unless it leaves float's range). IQ4_XS (rows a
 * multiple of 256) is IQ4_NL's blocks with per-block scales d (ls - 32):
 * the same level vectors, then per block the 16 rows' ls - 32 as int8 (16
 * bytes), then per super-block the 16 rows' fp16 d (32 bytes); s_b = d
 * (float)(ls - 32) is exact in a float (11 by 6 bits), so its float order
 * is IQ4_NL's with that s_b.
 *
 * Q4_K, Q5_K and Q6_K are packed per super-block of 256 values (8 blocks
 * of 32), the super-block's parts together so a group is read front to
 * back: the 8 blocks' levels as Q4_0's (4 vectors of low-4-bit nibble
 * bytes each: byte i of a row's 16 holds values i and 16 + i), then the
 * 8 blocks' high bits, then their scales, then the 16 rows' fp16 d (and
 * dmin). Everything the 12 packed bytes of scales and mins (Q4_K/Q5_K)
 * or the split low/high arrays (Q6_K) keep is decoded here, once, so the
 * kernel only masks and shifts. High bits (q_pack_high_bytes per block):
 * Q5_K a vector whose lane r byte k holds, at bit m, the fifth bit of
 * the value that byte k of level vector m (of the kernel's eight: vector
 * m < 4 is values 4m.., m >= 4 values 16 + 4(m - 4)..) stands for; Q6_K
 * two vectors, the first for level vectors 0-3 and the second for 4-7,
 * vector m's two high bits at bits 2(m % 4). Scales, 32 bytes per block:
 * Q4_K/Q5_K the 16 rows' 6-bit scales then mins as bytes; Q6_K the 16
 * rows' int8 scales of the block's first 16 values, then of its last 16.
 * The levels u are unsigned: Q4_K/Q5_K's own (0..15, 0..31; the mins are
 * the offset), Q6_K's w + 32.
 *
 * The K types' float order (the same for any number of tokens and any
 * split of the groups, both x86 tables): per (row, token), from acc = 0,
 * for each block b (super-block s, block j of it):
 *   Q4_K/Q5_K: acc = fma((float)(sc_j isum_b), d_s dx_b, acc), then
 *              acc = fma(-(dmin_s (float)mn_j), xsum_b, acc);
 *   Q6_K:      acc = fma((float)(sc_j0 isum_b0 + sc_j1 isum_b1), d_s dx_b, acc),
 * isum the exact integer sum of (u - offset) x over the block (b0, b1: its
 * two halves of 16), dx_b and xsum_b the token's block scale and sum
 * (q_act_prepare). The integers are below 2^24, so each conversion is exact.
 */
#include "quant_impl.h"

#include <string.h>

bool
q_packable(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 ||
	    t == GGML_TYPE_Q5_0 || t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_MXFP4 || t == GGML_TYPE_IQ4_XS ||
	    q_pack_k(t);
}

size_t
q_pack_scale_bytes(enum gguf_dtype t)
{
	/* MXFP4: the 16 rows' E8M0 exponent bytes; IQ4_XS: their ls - 32 as int8 */
	return t == GGML_TYPE_Q4_1 ? 2 * Q_PACK_SCALE_BYTES : t == GGML_TYPE_MXFP4 || t == GGML_TYPE_IQ4_XS ? 16 :
	    Q_PACK_SCALE_BYTES;
}

bool
q_pack_k(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

size_t
q_pack_level_bytes(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q8_0 ? 512 : 256;
}

size_t
q_pack_high_bytes(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_K ? 64 : t == GGML_TYPE_Q6_K ? 128 : 0;
}

size_t
q_pack_sb_bytes(enum gguf_dtype t)
{
	return 8 * (q_pack_level_bytes(t) + q_pack_high_bytes(t) + Q_PACK_SCALE_BYTES) +
	    (t == GGML_TYPE_Q6_K ? 32 : 64);
}

size_t
q_pack_group_bytes(enum gguf_dtype t, int64_t nb)
{
	if (q_pack_k(t))
		return (size_t)(nb / 8) * q_pack_sb_bytes(t);
	/* IQ4_XS: then the 16 rows' fp16 d of each super-block */
	return (size_t)nb * (q_pack_level_bytes(t) + q_pack_high_bytes(t) + q_pack_scale_bytes(t)) +
	    (t == GGML_TYPE_IQ4_XS ? (size_t)(nb / 8) * Q_PACK_SCALE_BYTES : 0);
}

size_t
q_pack_bytes(enum gguf_dtype t, int64_t n_in, int64_t n_out)
{
	int64_t groups = (n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;

	if (!q_packable(t) || n_in <= 0 || n_in % (q_pack_k(t) || t == GGML_TYPE_IQ4_XS ? 256 : 32) != 0)
		return 0;
	return (size_t)groups * q_pack_group_bytes(t, n_in / 32);
}

/* Block b of a row into its places in group G (NULL blk: a padding row). */
static void
pack_block(enum gguf_dtype t, const uint8_t *blk, uint8_t *G, int64_t nb, int64_t b, int r)
{
	size_t lb = q_pack_level_bytes(t), hb = q_pack_high_bytes(t);
	uint8_t *l = G + (size_t)b * lb + 4 * r;
	uint8_t *h = G + (size_t)nb * lb + (size_t)b * hb + 4 * r;
	/* a row's scale: an fp16 (MXFP4: its exponent byte) */
	size_t se = t == GGML_TYPE_MXFP4 ? 1 : 2;
	uint8_t *sc = G + (size_t)nb * (lb + hb) + (size_t)b * q_pack_scale_bytes(t) + se * (size_t)r;

	if (blk == NULL) {
		for (int j = 0; j < (int)(lb / 64); j++)
			memset(l + 64 * j, t == GGML_TYPE_Q8_0 ? 0x80 : 0, 4);
		if (hb)
			memset(h, 0, 4);
		memset(sc, 0, se);
		if (t == GGML_TYPE_Q4_1)
			memset(sc + Q_PACK_SCALE_BYTES, 0, 2);
		return;
	}
	switch (t) {
	case GGML_TYPE_Q8_0:
		memcpy(sc, blk, 2);
		for (int j = 0; j < 8; j++) {
			uint32_t v;

			memcpy(&v, blk + 2 + 4 * j, 4);
			v ^= 0x80808080u;
			memcpy(l + 64 * j, &v, 4);
		}
		break;
	case GGML_TYPE_Q4_0:
	case GGML_TYPE_IQ4_NL:	/* d, qs[16], as Q4_0 */
		memcpy(sc, blk, 2);
		for (int j = 0; j < 4; j++)
			memcpy(l + 64 * j, blk + 2 + 4 * j, 4);
		break;
	case GGML_TYPE_MXFP4:	/* e, qs[16]: the scale part is one byte per row */
		sc[0] = blk[0];
		for (int j = 0; j < 4; j++)
			memcpy(l + 64 * j, blk + 1 + 4 * j, 4);
		break;
	case GGML_TYPE_Q4_1:	/* d, m, qs[16] */
		memcpy(sc, blk, 2);
		memcpy(sc + Q_PACK_SCALE_BYTES, blk + 2, 2);
		for (int j = 0; j < 4; j++)
			memcpy(l + 64 * j, blk + 4 + 4 * j, 4);
		break;
	default: {	/* Q5_0: d, qh[4], qs[16]; bit v of qh is value v's fifth */
		uint32_t qh;

		memcpy(sc, blk, 2);
		memcpy(&qh, blk + 2, 4);
		memset(h, 0, 4);
		for (int m = 0; m < 8; m++)
			for (int k = 0; k < 4; k++)
				h[k] |= (uint8_t)(((qh >> ((m < 4 ? 4 * m : 16 + 4 * (m - 4)) + k)) & 1) << m);
		for (int j = 0; j < 4; j++)
			memcpy(l + 64 * j, blk + 6 + 4 * j, 4);
		break;
	}
	}
}

static inline uint64_t
ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t
ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/*
 * Super-block s of a K-type row (NULL: a padding row) into its places in
 * group G, lane r, with word operations (a load packs every K-quant matrix):
 * per block j, its nibble bytes from the 32 low-4-bit levels at lo (each
 * the byte's nibble at shift sh), the high bits, the scales.
 */
static void
pack_k_sb(enum gguf_dtype t, const uint8_t *blk, uint8_t *G, int64_t s, int r)
{
	const uint64_t m4 = 0x0F0F0F0F0F0F0F0Full;
	size_t hb = q_pack_high_bytes(t);
	uint8_t *S = G + (size_t)s * q_pack_sb_bytes(t), *H = S + 8 * 256, *C = H + 8 * hb, *D = C + 8 * 32;
	bool q6 = t == GGML_TYPE_Q6_K;

	for (int j = 0; j < 8; j++) {
		uint8_t nib[16], *Hj = H + hb * j + 4 * r;
		uint32_t hw[2] = { 0, 0 };
		int sc0 = 0, sc1 = 0;

		if (blk == NULL) {
			memset(nib, 0, sizeof nib);
		} else {
			/* Q4_K/Q5_K: block j is nibble j % 2 of qs[32 (j / 2) ..]; Q6_K: nibble k / 2 of ql[64h + 32 (k & 1) ..] */
			int h = j / 4, k = j % 4;
			const uint8_t *lo = q6 ? blk + 64 * h + 32 * (k & 1) :
			    blk + (t == GGML_TYPE_Q5_K ? 48 : 16) + 32 * (j / 2);
			int sh = q6 ? 4 * (k / 2) : 4 * (j % 2);

			for (int i = 0; i < 16; i += 8) {
				uint64_t a = (ld64(lo + i) >> sh) & m4, b = (ld64(lo + 16 + i) >> sh) & m4;
				uint64_t v = a | b << 4;
				memcpy(nib + i, &v, 8);
			}
			/*
			 * Level vector m's byte 0 stands for values 4m ..: its high
			 * bits are qh's word m, read for m and m + 4 side by side
			 * (one loop over m with the sums indexed by m / 4 was most
			 * of a mixture of experts' load, packing its Q6_K stacks)
			 */
			if (q6) {	/* value 32j + l's two high bits: bits 2k of qh[32h + l] */
				const uint8_t *qh = blk + 128 + 32 * h;

				for (int m = 0; m < 4; m++) {
					hw[0] |= ((ld32(qh + 4 * m) >> (2 * k)) & 0x03030303u) << (2 * m);
					hw[1] |= ((ld32(qh + 16 + 4 * m) >> (2 * k)) & 0x03030303u) << (2 * m);
				}
			} else if (hb) {	/* Q5_K: bit j of qh[l] */
				for (int m = 0; m < 8; m++)
					hw[0] |= ((ld32(blk + 16 + 4 * m) >> j) & 0x01010101u) << m;
			}
			if (q6) {
				sc0 = (int8_t)blk[192 + 2 * j];
				sc1 = (int8_t)blk[192 + 2 * j + 1];
			} else {
				uint8_t a, b;

				q_k_scale_min(j, blk + 4, &a, &b);
				sc0 = a;
				sc1 = b;
			}
		}
		for (int v = 0; v < 4; v++)
			memcpy(S + 256 * j + 64 * v + 4 * r, nib + 4 * v, 4);
		if (hb)
			memcpy(Hj, &hw[0], 4);
		if (hb > 64)
			memcpy(Hj + 64, &hw[1], 4);
		C[32 * j + r] = (uint8_t)sc0;
		C[32 * j + 16 + r] = (uint8_t)sc1;
	}
	if (blk != NULL) {
		memcpy(D + 2 * r, q6 ? blk + 208 : blk, 2);
		if (!q6)
			memcpy(D + 32 + 2 * r, blk + 2, 2);
	} else {
		memset(D + 2 * r, 0, 2);
		if (!q6)
			memset(D + 32 + 2 * r, 0, 2);
	}
}

/*
 * Super-block s of an IQ4_XS row (NULL: a padding row) into lane r of
 * group G: its 8 blocks' nibbles as IQ4_NL's, their 6-bit scales as
 * ls - 32 (int8, one byte per row), its d.
 */
static void
pack_iq4_xs_sb(const uint8_t *blk, uint8_t *G, int64_t nb, int64_t s, int r)
{
	uint8_t *sc = G + (size_t)nb * 256 + (size_t)s * 8 * 16 + r;
	uint8_t *d = G + (size_t)nb * (256 + 16) + (size_t)s * Q_PACK_SCALE_BYTES + 2 * r;

	for (int j = 0; j < 8; j++) {
		uint8_t *l = G + (size_t)(8 * s + j) * 256 + 4 * r;

		if (blk == NULL) {
			for (int v = 0; v < 4; v++)
				memset(l + 64 * v, 0, 4);
			sc[16 * j] = 0;
			continue;
		}
		int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) |
		    (int)((ld32(blk) >> (16 + 2 * j)) & 3) << 4;
		for (int v = 0; v < 4; v++)
			memcpy(l + 64 * v, blk + 8 + 16 * j + 4 * v, 4);
		sc[16 * j] = (uint8_t)(int8_t)(ls - 32);
	}
	if (blk == NULL)
		memset(d, 0, 2);
	else
		memcpy(d, blk, 2);
}

void
q_pack(enum gguf_dtype t, const void *W, size_t row_bytes, int64_t n_in, int64_t n_out, void *P,
    int64_t g0, int64_t g1)
{
	int64_t nb = n_in / 32;
	size_t gb = q_pack_group_bytes(t, nb), bb = q_row_bytes(t, 32);

	if (t == GGML_TYPE_IQ4_XS) {
		for (int64_t g = g0; g < g1; g++)
			for (int r = 0; r < Q_PACK_ROWS; r++) {
				int64_t row = g * Q_PACK_ROWS + r;
				const uint8_t *src = (const uint8_t *)W + (size_t)row * row_bytes;

				for (int64_t s = 0; s < nb / 8; s++)
					pack_iq4_xs_sb(row < n_out ? src + (size_t)s * 136 : NULL,
					    (uint8_t *)P + (size_t)g * gb, nb, s, r);
			}
		return;
	}

	if (q_pack_k(t)) {
		size_t sbb = q_row_bytes(t, 256);

		for (int64_t g = g0; g < g1; g++)
			for (int r = 0; r < Q_PACK_ROWS; r++) {
				int64_t row = g * Q_PACK_ROWS + r;
				const uint8_t *src = (const uint8_t *)W + (size_t)row * row_bytes;

				for (int64_t s = 0; s < nb / 8; s++)
					pack_k_sb(t, row < n_out ? src + (size_t)s * sbb : NULL,
					    (uint8_t *)P + (size_t)g * gb, s, r);
			}
		return;
	}
	for (int64_t g = g0; g < g1; g++) {
		uint8_t *G = (uint8_t *)P + (size_t)g * gb;

		for (int r = 0; r < Q_PACK_ROWS; r++) {
			int64_t row = g * Q_PACK_ROWS + r;
			const uint8_t *src = (const uint8_t *)W + (size_t)row * row_bytes;

			for (int64_t b = 0; b < nb; b++)
				pack_block(t, row < n_out ? src + (size_t)b * bb : NULL, G, nb, b, r);
		}
	}
}
