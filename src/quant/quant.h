/*
 * quant.h: the weight formats kvchat computes with: F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K, and (quant_iq.c, their
 * blocks in the internal quant_iq.h) Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS,
 * IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M. (Q5_0/Q5_1 are what
 * llama.cpp's K-quant mixes fall back to for rows 256 does not divide, e.g.
 * Qwen2.5-0.5B's 896-wide matrices in a Q4_K_M file.) Block layouts are ggml's (part of the GGUF format);
 * all multi-byte fields are little-endian, fp16 scales are IEEE half.
 *
 * The formats only: block layouts, row sizes, dequantisation, the scalar
 * reference of the products and the packed layout; the kernels that compute
 * with them, one table per instruction set, are src/kern's.
 */
#ifndef KVC_QUANT_H
#define KVC_QUANT_H

#include "core/kvc.h"
#include "gguf/gguf.h"

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;		/* 18 bytes */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;		/* 34 bytes */
/* value = d q + m, q the 4-bit level 0..15 (element i: low nibble of qs[i], i+16: high) */
typedef struct { uint16_t d, m; uint8_t qs[QK4_0 / 2]; } block_q4_1;	/* 20 bytes */
/* 5-bit levels: nibbles as Q4_0/Q4_1, bit i of the little-endian qh word is element i's 5th bit */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK4_0 / 2]; } block_q5_0;	/* 22 bytes; d (q - 16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK4_0 / 2]; } block_q5_1;	/* 24 bytes; d q + m */
/*
 * Q3_K: value 128h + 32j + l (h < 2, j < 4, l < 32) has level
 * ((qs[32h + l] >> 2j) & 3) - 4, plus 4 when bit 4h + j of hmask[l] is set
 * (levels -4..3), times d * (scale[8h + 2j + l / 16] - 32). The 16 6-bit
 * scales: low 4 bits in the nibbles of bytes 0-7 (scales 0-7 low nibbles,
 * 8-15 high nibbles), top 2 bits of scale k at bits 2(k / 4) of byte 8 + k % 4.
 */
typedef struct {
	uint8_t hmask[QK_K / 8];	/* 3rd bit of each level */
	uint8_t qs[QK_K / 4];		/* low 2 bits */
	uint8_t scales[12];		/* 16 scales, 6 bits each, offset 32 */
	uint16_t d;			/* super-block scale */
} block_q3_K;								/* 110 bytes */
typedef struct {
	uint16_t d;			/* super-block scale for the 6-bit scales */
	uint16_t dmin;			/* super-block scale for the 6-bit mins */
	uint8_t scales[K_SCALE_SIZE];	/* 8 (scale, min) pairs, 6 bits each */
	uint8_t qs[QK_K / 2];		/* 4-bit quants */
} block_q4_K;								/* 144 bytes */
typedef struct {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[K_SCALE_SIZE];
	uint8_t qh[QK_K / 8];		/* 5th bit of each quant */
	uint8_t qs[QK_K / 2];		/* low 4 bits */
} block_q5_K;								/* 176 bytes */
typedef struct {
	uint8_t ql[QK_K / 2];		/* low 4 bits */
	uint8_t qh[QK_K / 4];		/* high 2 bits */
	int8_t scales[QK_K / 16];	/* 8-bit scale per 16 values */
	uint16_t d;			/* super-block scale */
} block_q6_K;								/* 210 bytes */

/* half.c */
float q_fp16_to_f32(uint16_t h);
uint16_t q_f32_to_fp16(float f);	/* round to nearest even */
float q_bf16_to_f32(uint16_t h);
uint16_t q_f32_to_bf16(float f);	/* round to nearest even */

/* True for the weight types kvchat computes with. */
bool q_supported(enum gguf_dtype t);

/*
 * dst[0..n) = dequantised src; n a multiple of the type's block size.
 * (Quantising is quant_ref.h's, for fixtures and tests only.)
 */
void q_dequant_row(enum gguf_dtype t, const void *src, float *dst, int64_t n);

/*
 * The scalar reference of the products (the kernel tables of src/kern run
 * them for any type or shape their SIMD entries do not take): sum_i row[i]
 * * x[i] over n elements, row in type t, each block dequantised and dotted
 * with x, the block sums added in order.
 */
float q_dot(enum gguf_dtype t, const void *row, const float *x, int64_t n);

/* Bytes of n elements of a supported type; 0 if unsupported or n is not a multiple of the block. */
size_t q_row_bytes(enum gguf_dtype t, int64_t n);
/* Elements per block of a supported type (1 for F32/F16/BF16, 32, 256); 0 if unsupported. */
int64_t q_block_elems(enum gguf_dtype t);

/*
 * Integer products (llama.cpp's approach): the activations are rounded to
 * int8 per block of 32 once per matmul, and the dot products run on
 * integer multiply-adds: 1.5-2.5x the float kernels' speed for the
 * quantised types (bench/qdot). The price is the rounding of x: with
 * d_b = max|x| / 127 over block b, |x_i - x^_i| <= d_b / 2, and the
 * product is sum_i w_i x^_i, so
 *   |q_dot_act - sum_i w_i x_i| <= sum_b (d_b / 2) sum_{i in b} |w_i|
 * (+ float rounding). The offsets of Q4_1/Q5_1 (m) and Q4_K/Q5_K (the
 * sub-block min dmin * m_j) multiply the sum of the rounded x too: with the
 * exact sum instead, the error would be sum_i (w_i + m_i)(x^_i - x_i), the
 * unsigned levels' magnitude rather than the weight's, twice llama.cpp's
 * error on Q4_K and enough to flip a mixture-of-experts router (docs/MODELS.md).
 * Types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K and the
 * quant_iq.h types (q_act_supported); others take float activations.
 *
 * Layout of one token's prepared activations (q_act_bytes(n_in) bytes,
 * n_in a multiple of 32, nb = n_in / 32): float d[nb], float xsum[nb] (d_b
 * times the integer sum of the block's levels: the sum of the rounded x),
 * int8 q[n_in]. Tokens are q_act_bytes(n_in) apart. q_act_prepare is the
 * scalar reference of the rounding (the SIMD tables' give the same bytes);
 * q_dot_act the scalar reference of the integer product, which every kernel
 * table bounds itself against.
 */
bool q_act_supported(enum gguf_dtype t);
size_t q_act_bytes(int64_t n_in);
void q_act_prepare(const float *x, int64_t n_in, void *act);
float q_dot_act(enum gguf_dtype t, const void *row, const void *act, int64_t n);

/*
 * Packed weights (quant_pack.c): Q8_0, Q4_0, Q4_1, Q5_0, IQ4_NL, MXFP4,
 * IQ4_XS, Q4_K, Q5_K and Q6_K matrices (q_packable)
 * rearranged once, at load, into groups of Q_PACK_ROWS rows whose levels
 * sit side by side, so that one multiply-add instruction serves 16 rows
 * (for the kernel tables with a packed kernel, kern_packs). q_pack writes
 * groups [g0, g1) of the packed copy (q_pack_bytes bytes, rows past n_out
 * as zeros). Per block of 32 values a group holds q_pack_level_bytes of
 * levels, q_pack_high_bytes of high bits and q_pack_scale_bytes of
 * scales: for Q8_0/Q4_0/Q4_1/Q5_0/IQ4_NL/MXFP4/IQ4_XS each part for all the group's blocks before
 * the next; for the K types (q_pack_k) per super-block of 256 values, its
 * 8 blocks' parts, then the rows' fp16 d (and dmin): q_pack_sb_bytes
 * (q_pack_group_bytes in all).
 */
#define Q_PACK_ROWS 16
#define Q_PACK_SCALE_BYTES 32
bool q_packable(enum gguf_dtype t);
bool q_pack_k(enum gguf_dtype t);
size_t q_pack_level_bytes(enum gguf_dtype t);
size_t q_pack_high_bytes(enum gguf_dtype t);
size_t q_pack_scale_bytes(enum gguf_dtype t);
size_t q_pack_sb_bytes(enum gguf_dtype t);
/* nb: blocks of 32 values per row */
size_t q_pack_group_bytes(enum gguf_dtype t, int64_t nb);
size_t q_pack_bytes(enum gguf_dtype t, int64_t n_in, int64_t n_out);
void q_pack(enum gguf_dtype t, const void *W, size_t row_bytes, int64_t n_in, int64_t n_out,
    void *P, int64_t g0, int64_t g1);

#endif
