/*
 * quant_pack.c: the layout of Q8_0, Q4_0 and Q5_0 matrices packed at load
 * for the kernel tables that have a packed kernel (src/kern's avx2 and
 * avx512: kern_avx512_pack.c says why a packed matrix is faster). Packed, the
 * lanes are rows instead of values: a group
 * of Q_PACK_ROWS (16) rows keeps, per block of 32 values, eight 64-byte
 * vectors whose lane r holds 4 consecutive levels of row r, and the 16
 * rows' fp16 scales side by side.
 *
 * Bytes of a group, per block of 32 values, each part for all nb blocks
 * before the next (so the level vectors stay 64-byte aligned): levels, the
 * fifth bits (Q5_0), the 16 fp16 scales; rows past n_out are zeros.
 * Q8_0 keeps 8 vectors of levels stored as w + 128 (unsigned, dpbusd's
 * first operand). Q4_0/Q5_0 keep 4 vectors of their stored bytes: lane r
 * of vector j holds bytes 4j .. 4j + 3 of row r's 16 (low nibbles: values
 * 4j .., high: 16 + 4j ..), and Q5_0 a vector of the rows' 32-bit fifth
 * bits; their levels u are w + o (o = 8, 16). Each token's block sum of
 * u x is corrected by -o x (sum of its int8 levels), formed once per call
 * and token.
 */
#include "quant_impl.h"

#include <string.h>

bool
q_packable(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0;
}

size_t
q_pack_level_bytes(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q8_0 ? 512 : 256;
}

size_t
q_pack_high_bytes(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q5_0 ? 64 : 0;
}

size_t
q_pack_group_bytes(enum gguf_dtype t, int64_t nb)
{
	return (size_t)nb * (q_pack_level_bytes(t) + q_pack_high_bytes(t) + Q_PACK_SCALE_BYTES);
}

size_t
q_pack_bytes(enum gguf_dtype t, int64_t n_in, int64_t n_out)
{
	int64_t groups = (n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;

	if (!q_packable(t) || n_in % 32 != 0)
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
	uint8_t *sc = G + (size_t)nb * (lb + hb) + (size_t)b * Q_PACK_SCALE_BYTES + 2 * r;

	if (blk == NULL) {
		for (int j = 0; j < (int)(lb / 64); j++)
			memset(l + 64 * j, t == GGML_TYPE_Q8_0 ? 0x80 : 0, 4);
		if (hb)
			memset(h, 0, 4);
		memset(sc, 0, 2);
		return;
	}
	memcpy(sc, blk, 2);
	switch (t) {
	case GGML_TYPE_Q8_0:
		for (int j = 0; j < 8; j++) {
			uint32_t v;

			memcpy(&v, blk + 2 + 4 * j, 4);
			v ^= 0x80808080u;
			memcpy(l + 64 * j, &v, 4);
		}
		break;
	case GGML_TYPE_Q4_0:
		for (int j = 0; j < 4; j++)
			memcpy(l + 64 * j, blk + 2 + 4 * j, 4);
		break;
	default:	/* Q5_0: d, qh[4], qs[16] */
		memcpy(h, blk + 2, 4);
		for (int j = 0; j < 4; j++)
			memcpy(l + 64 * j, blk + 6 + 4 * j, 4);
		break;
	}
}

void
q_pack(enum gguf_dtype t, const void *W, size_t row_bytes, int64_t n_in, int64_t n_out, void *P,
    int64_t g0, int64_t g1)
{
	int64_t nb = n_in / 32;
	size_t gb = q_pack_group_bytes(t, nb), bb = t == GGML_TYPE_Q8_0 ? 34 : t == GGML_TYPE_Q4_0 ? 18 : 22;

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
