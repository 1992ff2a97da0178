/*
 * quant_iq.h: the weight formats added after the first set: Q2_K, IQ4_NL,
 * IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M. Not part of
 * quant.h: quant.c dispatches to quant_iq.c for these types, the fixture
 * quantisers (quant_ref_iq.c) and the tests read the blocks and the lattice
 * tables (quant_grid.c) declared here, and src/kern's tables read a block's
 * integer form (q_iq_unpack) and run q_iq_matmul_rows_act as the scalar
 * entry, so the lattice types have one decoder.
 *
 * Block layouts are ggml's (part of the GGUF format), little-endian. Every
 * value of every type is s * q - m with q a small integer (|q| <= 127), s
 * the scale of its group of 16 (or 32, then two equal groups) and m an
 * offset (Q2_K only), which is what the int8 kernels compute with.
 * (IQ1_S/IQ1_M store d_g (t + delta), t = -1, 0, 1 and delta = +-1/8: q is
 * 8 t +- 1 and s = d_g / 8.)
 */
#ifndef KVC_QUANT_IQ_H
#define KVC_QUANT_IQ_H

#include "quant.h"

#define QK_IQ4NL 32
#define QK_MXFP4 32

/*
 * Q2_K: value 128n + 32j + l (n < 2, j < 4, l < 32) has level
 * (qs[32n + l] >> 2j) & 3; its group k = value / 16 has scale byte
 * scales[k]: d * (low nibble) * level - dmin * (high nibble).
 */
typedef struct {
	uint8_t scales[QK_K / 16];	/* 4-bit scale | 4-bit min << 4 */
	uint8_t qs[QK_K / 4];		/* 2-bit levels */
	uint16_t d, dmin;		/* fp16 */
} block_q2_K;								/* 84 bytes */

/* IQ4_NL: d * q_iq4nl_values[nibble]; value i < 16 low nibble of qs[i], i + 16 its high one. */
typedef struct { uint16_t d; uint8_t qs[QK_IQ4NL / 2]; } block_iq4_nl;	/* 18 bytes */

/*
 * IQ4_XS: 8 groups of 32, each as an IQ4_NL block (nibbles qs[16b ..]) at
 * scale d * (ls - 32), ls 6 bits: low nibble b % 2 of scales_l[b / 2], top
 * 2 bits at bit 2b of scales_h.
 */
typedef struct {
	uint16_t d;
	uint16_t scales_h;
	uint8_t scales_l[QK_K / 64];
	uint8_t qs[QK_K / 2];
} block_iq4_xs;								/* 136 bytes */

/*
 * MXFP4 (OCP microscaling): 32 E2M1 values (nibbles as IQ4_NL) sharing the
 * E8M0 exponent e: value = q_mxfp4_values[nibble] * 2^(e - 128) (the table
 * holds the E2M1 values doubled, hence 128 rather than the bias 127).
 */
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;	/* 17 bytes */

/*
 * The lattice types: groups of 8 (IQ2) or 4 (IQ3) magnitudes come from a
 * grid entry (byte j of the entry is value j's magnitude), signs from bits
 * (bit j set: value j negative). Sign bytes given as a 7-bit index go
 * through q_iq_ksigns, whose 8th bit makes the count of minus signs even.
 *
 * IQ2_XXS: per 32 values b: bytes 8b..8b+3 of qs are 4 grid indices
 * (q_iq2xxs_grid, 8 values each), the u32 at 8b + 4 holds 4 7-bit sign
 * indices (bits 7l..) and the scale s in its top 4 bits:
 * d * (0.5 + s) / 4.
 */
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;	/* 66 bytes */
/*
 * IQ2_XS: qs[4b + l] = 9-bit index into q_iq2xs_grid | 7-bit sign index
 * << 9; scales[b]: low nibble for l < 2, high for l >= 2 (groups of 16),
 * d * (0.5 + s) / 4.
 */
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;	/* 74 */
/*
 * IQ2_S: index into q_iq2s_grid = qs[4b + l] | bits 2l..2l+1 of qh[b] << 8;
 * sign byte qs[32 + 4b + l] (8 explicit bits); scales as IQ2_XS.
 */
typedef struct {
	uint16_t d;
	uint8_t qs[QK_K / 4];
	uint8_t qh[QK_K / 32];
	uint8_t scales[QK_K / 32];
} block_iq2_s;								/* 82 bytes */
/*
 * IQ3_XXS: qs[8b + k] indices into q_iq3xxs_grid (4 values each); the u32
 * at qs + 64 + 4b: 4 7-bit sign indices for the 4 groups of 8, scale s in
 * the top 4 bits: d * (0.5 + s) / 2.
 */
typedef struct { uint16_t d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;	/* 98 bytes */
/*
 * IQ3_S: index into q_iq3s_grid = qs[8b + k] | bit k of qh[b] << 8 (4
 * values each); signs[4b + l] explicit bits for group l of 8; scale nibble
 * b % 2 of scales[b / 2]: d * (1 + 2s).
 */
typedef struct {
	uint16_t d;
	uint8_t qs[QK_K / 4];
	uint8_t qh[QK_K / 32];
	uint8_t signs[QK_K / 8];
	uint8_t scales[QK_K / 64];
} block_iq3_s;								/* 110 bytes */

/*
 * The IQ1 types: groups of 8 values t_j = -1, 0, 1 from a q_iq1s_grid entry
 * (byte j of the entry is t_j as int8), each value d_g (t_j + delta), delta
 * = +1/8, or -1/8 where the group's shift bit is set, d_g = d (2 s + 1)
 * with a 3-bit s.
 *
 * IQ1_S: per 32 values b, u16 qh[b]: bits 3l..3l+2 the high bits of group
 * l's index (low 8 bits qs[4b + l]), bits 12-14 s, bit 15 the shift of all
 * four groups; d the fp16 at the start.
 */
typedef struct { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; } block_iq1_s;	/* 50 bytes */
/*
 * IQ1_M: per 32 values b, group l's index qs[4b + l] | (nibble l % 2 of
 * qh[2b + l / 2] & 7) << 8, that nibble's bit 3 its shift; s of the first
 * 16 bits 0-2 of (u16 scales[b / 2]) >> 6 (b % 2), of the second 16 bits
 * 3-5; d the fp16 whose nibble k is the top nibble of u16 scales[k].
 */
typedef struct { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; } block_iq1_m;	/* 56 bytes */

/* quant_grid.c, quant_grid_iq1.c: the format's tables (generated, see scripts/gen-quant-grid.py) */
extern const uint8_t q_iq_ksigns[128];
extern const uint64_t q_iq2xxs_grid[256];
extern const uint64_t q_iq2xs_grid[512];
extern const uint64_t q_iq2s_grid[1024];
extern const uint32_t q_iq3xxs_grid[256];
extern const uint32_t q_iq3s_grid[512];
extern const uint64_t q_iq1s_grid[2048];	/* IQ1_S and IQ1_M; bytes 0xFF, 0, 1 */
extern const int8_t q_iq4nl_values[16];
extern const int8_t q_mxfp4_values[16];

/* 2^(e - 128), the scale of an MXFP4 block (exact for every e). */
float q_mxfp4_scale(uint8_t e);

/* quant_iq.c. True for the types of this file. */
bool q_iq_type(enum gguf_dtype t);
/* Elements and bytes of one block; 0 for a type not of this file. */
int64_t q_iq_block_elems(enum gguf_dtype t);
size_t q_iq_block_bytes(enum gguf_dtype t);

/*
 * One block as integers: value e = s[e / 16] * q[e] - m[e / 16] (m all
 * zero except for Q2_K). Computing s * q - m in float gives exactly
 * q_dequant_row's value.
 */
struct q_iq_int {
	int8_t q[QK_K];
	float s[QK_K / 16];
	float m[QK_K / 16];
	bool has_m;
};
void q_iq_unpack(enum gguf_dtype t, const uint8_t *blk, struct q_iq_int *o);

/* Dequantise one block (at any address) into y[0 .. block). */
void q_iq_dequant_block(enum gguf_dtype t, const uint8_t *blk, float *y);

/*
 * The int8-activation dot (quant.h's q_dot_act contract) over n values of
 * a row of type t, portable code: for each group of 16, the integer sum
 * of q_w * q_x times s * d_b, and for Q2_K the offset m * d_b times the
 * integer sum of q_x (so the offset also sees the rounded x: the error
 * bound is quant.h's with m_i = 0 and |w_i| the value's magnitude).
 */
float q_iq_dot_act(enum gguf_dtype t, const uint8_t *row, const void *act, int64_t n);
/*
 * The scalar table's rows_act entry for these types (act: tokens ab bytes apart);
 * each result is q_iq_dot_act's. A row's blocks are decoded once for up to
 * Q_IQ_TOKENS tokens.
 */
#define Q_IQ_TOKENS 32
void q_iq_matmul_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);

/* quant_ref_iq.c (libkvcref.a): quantise one block of floats; 0 or KVC_EUNSUPPORTED. */
int q_iq_quantize_block(enum gguf_dtype t, const float *x, uint8_t *blk);

#endif
