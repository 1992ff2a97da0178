/*
 * quant.h: the weight formats kvchat computes with: F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K, and (quant_iq.c, their
 * blocks in the internal quant_iq.h) Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS,
 * IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S. (Q5_0/Q5_1 are what
 * llama.cpp's K-quant mixes fall back to for rows 256 does not divide, e.g.
 * Qwen2.5-0.5B's 896-wide matrices in a Q4_K_M file.) Block layouts are ggml's (part of the GGUF format);
 * all multi-byte fields are little-endian, fp16 scales are IEEE half.
 *
 * Dot products work directly on quantised blocks: a weight matrix is never
 * dequantised whole.
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

/* sum_i row[i] * x[i] over n elements, row in type t. */
float q_dot(enum gguf_dtype t, const void *row, const float *x, int64_t n);

/*
 * y[tok * n_out + r] = dot(W row r, x[tok * n_in ...]) for rows r in [r0, r1)
 * and tokens tok in [0, n_tok). W rows are row_bytes apart. Each weight row is
 * read once from memory and used for all tokens (prefill reuses it from cache).
 * Threads split [0, n_out) between them and call this on their own range.
 */
void q_matmul_rows(enum gguf_dtype t, const void *W, size_t row_bytes,
    const float *x, int n_tok, int64_t n_in, float *y, int64_t n_out,
    int64_t r0, int64_t r1);

/* Which SIMD path q_dot/q_matmul_rows use on this CPU ("avx512+vnni", "avx2+fma" or "scalar"). */
const char *q_simd_name(void);

/*
 * Explicit choice of kernel, for tests and benchmarks: Q_SIMD_AUTO is what
 * q_dot/q_matmul_rows use: Q_SIMD_AVX512 when the CPU has AVX512F, VL,
 * BW and VNNI, else Q_SIMD_AVX2 when it has AVX2+FMA+F16C, else scalar.
 * A path the CPU lacks runs the next one down. Scalar, AVX2 and AVX-512
 * sum in different orders (the int8 kernels form the same integer sums of
 * 4 products, then scale and add them 8 lanes per 32 values on AVX2, 16
 * lanes per 64 on AVX-512), so their results may differ in the last bits.
 *
 * The quant_iq.h types (Q2_K, IQ*, MXFP4) have no tiles yet: their
 * blocks are decoded once per row for up to 32 tokens and their products
 * run on AVX2 (quant_iq_avx2.c), which the AVX-512 path uses too.
 *
 * On the AVX2/AVX-512 paths the products run as tiles of 2 rows x 4
 * tokens (AVX2 int8), 4 x 4 (AVX-512 int8), 2 x 3 (AVX2 float) or 4 x 4
 * (AVX-512 float),
 * quant_tile.c: each (row, token) result is bitwise the same whatever
 * n_tok is and whichever rows share the call, and q_dot / q_dot_act
 * return exactly what the matrix products compute.
 */
enum q_simd { Q_SIMD_AUTO = 0, Q_SIMD_SCALAR = 1, Q_SIMD_AVX2 = 2, Q_SIMD_AVX512 = 3 };
bool q_simd_available(enum q_simd s);
float q_dot_simd(enum q_simd s, enum gguf_dtype t, const void *row, const float *x, int64_t n);
void q_matmul_rows_simd(enum q_simd s, enum gguf_dtype t, const void *W, size_t row_bytes,
    const float *x, int n_tok, int64_t n_in, float *y, int64_t n_out,
    int64_t r0, int64_t r1);

/* Bytes of n elements of a supported type; 0 if unsupported or n is not a multiple of the block. */
size_t q_row_bytes(enum gguf_dtype t, int64_t n);
/* Elements per block of a supported type (1 for F32/F16/BF16, 32, 256); 0 if unsupported. */
int64_t q_block_elems(enum gguf_dtype t);

/*
 * Integer kernels (opt-in, llama.cpp's approach): the activations are
 * rounded to int8 per block of 32 once per matmul, and the dot products
 * run on integer multiply-adds: 1.5-2.5x the float kernels' speed for the
 * quantised types (bench/qdot). The price is the rounding of x: with
 * d_b = max|x| / 127 over block b, |x_i - x^_i| <= d_b / 2, so
 *   |q_dot_act - sum_i w_i x_i| <= sum_b (d_b / 2) sum_{i in b} (|w_i| + m_i)
 * (+ float rounding), where m_i is the magnitude of the block's offset
 * (Q4_K/Q5_K sub-block min dmin * m_j, Q4_1/Q5_1 m; 0 for the other
 * types): the offset terms use the exact float sums of x, only the d * q
 * part sees the rounded x. Types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K,
 * Q5_K, Q6_K and the quant_iq.h types (q_act_supported; for Q2_K the
 * offsets too see the rounded x, so its m_i is 0 in the bound and |w_i| the
 * value's magnitude); others must use q_matmul_rows.
 *
 * Layout of one token's prepared activations (q_act_bytes(n_in) bytes,
 * n_in a multiple of 32, nb = n_in / 32): float d[nb], float xsum[nb],
 * int8 q[n_in]. Tokens are q_act_bytes(n_in) apart.
 */
bool q_act_supported(enum gguf_dtype t);
size_t q_act_bytes(int64_t n_in);
void q_act_prepare(const float *x, int64_t n_in, void *act);
float q_dot_act(enum q_simd s, enum gguf_dtype t, const void *row, const void *act, int64_t n);
void q_matmul_rows_act(enum q_simd s, enum gguf_dtype t, const void *W, size_t row_bytes,
    const void *act, int n_tok, int64_t n_in, float *y, int64_t n_out,
    int64_t r0, int64_t r1);

/*
 * Packed weights (quant_pack.c): on AVX512-VNNI CPUs, Q8_0 matrices are
 * rearranged once, at load, into groups of Q_PACK_ROWS rows whose levels
 * sit side by side, so that one multiply-add instruction serves 16 rows.
 * q_pack_supported says whether this CPU and type have a packed kernel;
 * q_pack writes groups [g0, g1) of the packed copy (q_pack_bytes bytes,
 * rows past n_out as zeros); q_matmul_packed_act computes rows of groups
 * [g0, g1) for n_tok prepared tokens, y as q_matmul_rows_act's. Each
 * (row, token) is bitwise the same for any n_tok and any split of the
 * groups (batch independence), and within q_dot_act's bound of the exact
 * product; it may differ from q_matmul_rows_act in the last bits.
 */
#define Q_PACK_ROWS 16
bool q_pack_supported(enum gguf_dtype t, int64_t n_in);
size_t q_pack_bytes(enum gguf_dtype t, int64_t n_in, int64_t n_out);
void q_pack(enum gguf_dtype t, const void *W, size_t row_bytes, int64_t n_in, int64_t n_out,
    void *P, int64_t g0, int64_t g1);
void q_matmul_packed_act(enum gguf_dtype t, const void *P, const void *act, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t g0, int64_t g1);

#endif
