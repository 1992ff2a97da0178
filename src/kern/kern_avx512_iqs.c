/*
 * kern_avx512_iqs.c: the avx512 table's int8-activation kernels of the
 * lattice types with explicit signs or a shift, IQ3_S, IQ2_S, IQ1_S and
 * IQ1_M (layouts in quant_iq.h), compiled with AVX512 F, VL, BW and VNNI
 * (kern.am).
 *
 * Each 256-value block is decoded straight into registers, a pair of
 * 32-value groups (64 values) per 512-bit vector: the grid entries
 * gathered by index (16 dwords for IQ3_S, 8 qwords for the others), the
 * values' magnitudes on dpbusd's unsigned side and the activation, negated
 * where the value is negative (a 64-bit mask: IQ3_S's and IQ2_S's sign
 * bytes are that mask as they lie in the block), on its signed side, so
 * one dpbusd forms the 16 four-value lane sums of the pair (lanes 4g ..
 * 4g + 3 the pair's group g of 16). IQ1_S/IQ1_M's values are the integers
 * 8 t +- 1 at a scale of d_g / 8 (quant_iq.h), formed per byte from the
 * grid's t. Lane sums are exact integers. Each lane's float scale is its
 * group of 16's weight scale times its group of 32's activation scale d_x;
 * one FMA per pair adds the lane sums times it into the token's 16-lane
 * accumulator, reduced at the row's end.
 *
 * Several tokens (prefill): a block is decoded once (struct iqs_blk, 4
 * vectors of magnitudes, 4 masks, 4 vectors of weight scales) for up to
 * Q_IQ_TOKENS tokens, and each token runs the same product on it as one
 * token alone does (blk_dot), so a (row, token) result is bitwise the same
 * whatever n_tok is and whichever rows share the call. It differs from the
 * portable kernel (q_iq_dot_act) and the avx2 table only in float rounding
 * (the same integer sums, scaled and added in another order).
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

#include <stdint.h>
#include <string.h>

/* One block: pair p is values 64p .. 64p + 63. */
struct iqs_blk {
	__m512i u[4];		/* magnitudes (unsigned bytes) */
	__mmask64 neg[4];	/* bit j: value j negative */
	__m512 s[4];		/* weight scale of dpbusd's lane l: group of 16 4p + l / 4 */
};

INLINE uint64_t
ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

INLINE uint32_t
ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

INLINE __m512i
vec16(const int32_t *v)
{
	return _mm512_loadu_si512(v);
}


/*
 * Grid entries by index, gathered: on this machine (Xeon, family 6 model
 * 207) faster than scalar loads put together with inserts (bench/qmm, one
 * token: IQ3_S 1.9x, IQ2_S 1.2x, IQ1_S 1.9x).
 */
INLINE __m512i
grid32x16(const uint32_t *grid, __m512i idx)
{
	return _mm512_i32gather_epi32(idx, (const void *)grid, 4);
}

INLINE __m512i
grid64x8(const uint64_t *grid, __m256i idx)
{
	return _mm512_i32gather_epi64(idx, (const void *)grid, 8);
}

/* lane l: l / 2 (the group of 32 of a group of 16), l / 4 (a pair's group of 16; IQ1_M's scale word) */
static const int32_t half_idx[16] = { 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7 };
static const int32_t quad_idx[16] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 };

/* The pairs' lane scales from the block's 16 per-16 scales (lane g: group g). */
INLINE void
spread_scales(__m512 s16, struct iqs_blk *o)
{
	for (int p = 0; p < 4; p++)
		o->s[p] = _mm512_permutexvar_ps(_mm512_add_epi32(vec16(quad_idx), _mm512_set1_epi32(4 * p)), s16);
}

/*
 * Magnitudes and signs of IQ1's 8 t + delta (delta = 1, or -1 in the
 * qwords of m8), t the grid bytes (0xFF, 0, 1): t << 3 per byte is t * 8
 * once the bits shifted in from the byte below are masked off.
 */
INLINE void
iq1_levels(__m512i g, __mmask8 m8, __m512i *u, __mmask64 *neg)
{
	__m512i delta = _mm512_mask_blend_epi64(m8, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
	__m512i q = _mm512_add_epi8(_mm512_and_si512(_mm512_slli_epi16(g, 3), _mm512_set1_epi8((char)0xF8)), delta);

	*u = _mm512_abs_epi8(q);
	*neg = _mm512_movepi8_mask(q);
}

/*
 * IQ3_S: index of values 4k .. 4k + 3 of group b: qs[8b + k] | bit k of
 * qh[b] << 8; sign bits signs[4b ..]; scale d (1 + 2 s), s nibble b % 2 of
 * scales[b / 2].
 */
INLINE void
dec_iq3_s(const uint8_t *p, struct iqs_blk *o)
{
	static const int32_t sh[16] = { 0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28 };
	const uint8_t *qs = p + 2, *qh = p + 66, *signs = p + 74;
	__m512i nib = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)ld32(p + 106)), vec16(sh)),
	    _mm512_set1_epi32(15));
	__m512i odd = _mm512_add_epi32(_mm512_slli_epi32(nib, 1), _mm512_set1_epi32(1));

	spread_scales(_mm512_mul_ps(_mm512_set1_ps(h2f(p)), _mm512_cvtepi32_ps(odd)), o);
	for (int k = 0; k < 4; k++) {
		__m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16 * k)));
		__mmask16 hb = (__mmask16)(qh[2 * k] | qh[2 * k + 1] << 8);
		idx = _mm512_mask_or_epi32(idx, hb, idx, _mm512_set1_epi32(256));
		o->u[k] = grid32x16(q_iq3s_grid, idx);
		o->neg[k] = (__mmask64)ld64(signs + 8 * k);
	}
}

/*
 * IQ2_S: index of values 8l .. 8l + 7 of group b: qs[4b + l] | bits 2l,
 * 2l + 1 of qh[b] << 8; sign bits at qs + 32; scales d (0.5 + s) / 4 per
 * 16, s the nibbles of scales[b].
 */
INLINE void
dec_iq2_s(const uint8_t *p, struct iqs_blk *o)
{
	static const int32_t sh[16] = { 0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28 };
	const __m256i hsh = _mm256_set_epi32(14, 12, 10, 8, 6, 4, 2, 0);
	const uint8_t *qs = p + 2, *signs = p + 34, *qh = p + 66;
	__m512i w = _mm512_permutexvar_epi32(_mm512_srli_epi32(vec16(quad_idx), 1),
	    _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(p + 74))));
	__m512i nib = _mm512_and_si512(_mm512_srlv_epi32(w, vec16(sh)), _mm512_set1_epi32(15));
	__m512 s16 = _mm512_add_ps(_mm512_cvtepi32_ps(nib), _mm512_set1_ps(0.5f));

	spread_scales(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(h2f(p)), s16), _mm512_set1_ps(0.25f)), o);
	for (int k = 0; k < 4; k++) {
		__m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k)));
		__m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(qh[2 * k] | qh[2 * k + 1] << 8), hsh);
		idx = _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 8));
		o->u[k] = grid64x8(q_iq2s_grid, idx);
		o->neg[k] = (__mmask64)ld64(signs + 8 * k);
	}
}

/* IQ1's scale per 16 (lane g: its 3-bit s): d (2 s + 1) / 8, exact (quant_iq.c's iq1_scale). */
INLINE __m512
iq1_scales(float d, __m512i s3)
{
	__m512i odd = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(s3, _mm512_set1_epi32(7)), 1),
	    _mm512_set1_epi32(1));

	return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(odd)), _mm512_set1_ps(0.125f));
}

/*
 * IQ1_S: per group b the u16 qh[b]: bits 3l .. 3l + 2 the high bits of
 * entry l's index (low bits qs[4b + l]), bits 12-14 s, bit 15 the shift
 * (delta -1/8) of the whole group.
 */
INLINE void
dec_iq1_s(const uint8_t *p, struct iqs_blk *o)
{
	const __m256i hsh = _mm256_set_epi32(25, 22, 19, 16, 9, 6, 3, 0);
	const uint8_t *qs = p + 2, *qh = p + 34;
	__m512i h = _mm512_permutexvar_epi32(vec16(half_idx),
	    _mm512_castsi256_si512(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)qh))));

	spread_scales(iq1_scales(h2f(p), _mm512_srli_epi32(h, 12)), o);
	for (int k = 0; k < 4; k++) {
		uint32_t h01 = ld32(qh + 4 * k);	/* groups 2k, 2k + 1 */
		__m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k)));
		__m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32((int)h01), hsh);
		__mmask8 m8 = (__mmask8)((h01 >> 15 & 1) * 0x0F | (h01 >> 31) * 0xF0);
		idx = _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(7)), 8));
		iq1_levels(grid64x8(q_iq1s_grid, idx), m8, &o->u[k], &o->neg[k]);
	}
}

/*
 * IQ1_M: entry l of group b: index qs[4b + l] | (nibble l % 2 of
 * qh[2b + l / 2] & 7) << 8, the nibble's bit 3 its shift; so the 8 entries
 * of a pair are the 8 nibbles of the u32 at qh + 4k. s of group of 16 g:
 * bits 3 (g % 4) .. + 2 of the u16 scales[g / 4]; d from their top nibbles.
 */
INLINE void
dec_iq1_m(const uint8_t *p, struct iqs_blk *o)
{
	static const int32_t sh[16] = { 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9 };
	const __m256i nsh = _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0);
	const uint8_t *qs = p, *qh = p + 32;
	uint64_t w = ld64(p + 48);
	/* the fp16 d: top nibble of each u16, the first word's lowest */
	uint16_t dh = (uint16_t)((w >> 12 & 0xF) | (w >> 24 & 0xF0) | (w >> 36 & 0xF00) | (w >> 48 & 0xF000));
	__m512i sw = _mm512_permutexvar_epi32(vec16(quad_idx),
	    _mm512_castsi128_si512(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(p + 48)))));

	spread_scales(iq1_scales(_cvtsh_ss(dh), _mm512_srlv_epi32(sw, vec16(sh))), o);
	for (int k = 0; k < 4; k++) {
		__m256i nib = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)ld32(qh + 4 * k)), nsh),
		    _mm256_set1_epi32(15));
		__m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k)));
		__mmask8 m8 = _mm256_test_epi32_mask(nib, _mm256_set1_epi32(8));
		idx = _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8));
		iq1_levels(grid64x8(q_iq1s_grid, idx), m8, &o->u[k], &o->neg[k]);
	}
}

/*
 * One token times one decoded block: x the block's 256 levels, dx their
 * 8 scales (one per 32). The float steps (per pair: the scale product,
 * one FMA) are the same for every n_tok.
 */
INLINE __m512
blk_dot(const struct iqs_blk *b, const float *dx, const int8_t *x, __m512 acc)
{
	for (int p = 0; p < 4; p++) {
		__m512i xv = _mm512_loadu_si512(x + 64 * p);
		__m512i sx = _mm512_mask_sub_epi8(xv, b->neg[p], _mm512_setzero_si512(), xv);
		__m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b->u[p], sx);
		__m512 dxv = _mm512_mask_mov_ps(_mm512_set1_ps(dx[2 * p]), 0xFF00, _mm512_set1_ps(dx[2 * p + 1]));
		acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(b->s[p], dxv), acc);
	}
	return acc;
}

typedef void dec_fn(const uint8_t *p, struct iqs_blk *o);

/* One row of nb blocks (bb bytes each) times n_tok <= Q_IQ_TOKENS tokens. */
INLINE void
row_act(dec_fn *dec, size_t bb, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    float *out, size_t os)
{
	int64_t nb = n / QK_K;
	size_t xoff = (size_t)(n / 32) * 2 * sizeof(float);	/* the levels after d[] and xsum[] */
	struct iqs_blk b;

	if (n_tok == 1) {
		/* decode: the block stays in registers between its decoding and its product */
		const float *d = (const float *)act;
		const int8_t *x = (const int8_t *)(act + xoff);
		__m512 acc = _mm512_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			dec(row + (size_t)i * bb, &b);
			acc = blk_dot(&b, d + 8 * i, x + QK_K * i, acc);
		}
		out[0] = _mm512_reduce_add_ps(acc);
		return;
	}
	__m512 acc[Q_IQ_TOKENS];
	for (int tok = 0; tok < n_tok; tok++)
		acc[tok] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		dec(row + (size_t)i * bb, &b);
		for (int tok = 0; tok < n_tok; tok++) {
			const uint8_t *a = act + (size_t)tok * ab;
			acc[tok] = blk_dot(&b, (const float *)a + 8 * i, (const int8_t *)(a + xoff) + QK_K * i, acc[tok]);
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = _mm512_reduce_add_ps(acc[tok]);
}

/* Rows [r0, r1), tokens in runs of Q_IQ_TOKENS (each block decoded once per run). */
INLINE void
rows(dec_fn *dec, size_t bb, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS)
			row_act(dec, bb, W + (size_t)r * rb, act + (size_t)t0 * ab, ab,
			    n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS, n_in,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
}

/* Each type's loop compiled with its decoder inlined. */
static void
rows_iq3_s(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t r0, int64_t r1)
{
	rows(dec_iq3_s, sizeof(block_iq3_s), W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
}

static void
rows_iq2_s(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t r0, int64_t r1)
{
	rows(dec_iq2_s, sizeof(block_iq2_s), W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
}

static void
rows_iq1_s(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t r0, int64_t r1)
{
	rows(dec_iq1_s, sizeof(block_iq1_s), W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
}

static void
rows_iq1_m(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t r0, int64_t r1)
{
	rows(dec_iq1_m, sizeof(block_iq1_m), W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
}

bool
kern_avx512_iqs_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % QK_K != 0)
		return false;
	switch (t) {
	case GGML_TYPE_IQ3_S: rows_iq3_s(W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_IQ2_S: rows_iq2_s(W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_IQ1_S: rows_iq1_s(W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_IQ1_M: rows_iq1_m(W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	default: return false;
	}
}
