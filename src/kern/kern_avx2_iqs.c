/*
 * kern_avx2_iqs.c: the avx2 table's int8-activation kernels of the
 * lattice types with explicit signs or a shift, IQ3_S, IQ2_S, IQ1_S and
 * IQ1_M (layouts in quant_iq.h), compiled with AVX2, FMA and F16C only
 * (kern.am): no VNNI, no AVX-512. The avx2vnni table takes these too.
 *
 * Each 256-value block is decoded straight into registers, one 32-value
 * group per 256-bit vector: the grid entries gathered by index (8 dwords
 * for IQ3_S, 4 qwords for the others), a byte mask of the negative values
 * (from IQ3_S's and IQ2_S's sign bits through a byte shuffle and compare;
 * IQ1's values are the integers 8 t +- 1 at a scale of d_g / 8, formed per
 * byte from the grid's t), then maddubs of the magnitudes with the
 * activation negated where the mask is set, and madd with ones: 8 exact
 * sums of 4 products (lanes 0-3 the group's first 16 values, 4-7 its
 * second). Each lane's float scale is its group of 16's weight scale
 * times the group's activation scale d_x; one FMA per group adds the sums
 * times it into the token's 8-lane accumulator, reduced in q_hsum8's
 * order at the row's end.
 *
 * Several tokens (prefill): a block is decoded once (struct iqs_blk) for up
 * to Q_IQ_TOKENS tokens, and each token runs the same product on it as one
 * token alone does (blk_dot), so a (row, token) result is bitwise the same
 * whatever n_tok is and whichever rows share the call. It differs from the
 * portable kernel (q_iq_dot_act) and the avx512 table only in float
 * rounding (the same integer sums, scaled and added in another order).
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

#include <stdint.h>
#include <string.h>

/* One block: group g is values 32g .. 32g + 31. */
struct iqs_blk {
	__m256i u[8];		/* magnitudes (unsigned bytes) */
	__m256i neg[8];		/* 0xFF where the value is negative */
	__m256 s[8];		/* weight scale of madd's lane l: group of 16 2g + l / 4 */
};

INLINE uint32_t
ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

INLINE uint16_t
ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

INLINE __m256i
vec8(const int32_t *v)
{
	return _mm256_loadu_si256((const __m256i *)v);
}


/*
 * Grid entries by index, gathered: on this machine (Xeon, family 6 model
 * 207) as fast or faster than scalar loads put together with inserts
 * (bench/qmm, one token: IQ3_S 2.8x, IQ2_S 1.2x, IQ1_S/IQ1_M within the
 * noise of a loaded machine).
 */
INLINE __m256i
grid32x8(const uint32_t *grid, __m256i idx)
{
	return _mm256_i32gather_epi32((const int *)grid, idx, 4);
}

INLINE __m256i
grid64x4(const uint64_t *grid, __m128i idx)
{
	return _mm256_i32gather_epi64((const long long *)grid, idx, 8);
}

/* The groups' lane scales from the block's 16 per-16 scales (lo: groups of 16 0-7, hi: 8-15). */
INLINE void
spread_scales(__m256 lo, __m256 hi, struct iqs_blk *o)
{
	for (int g = 0; g < 4; g++) {
		__m256i idx = _mm256_set_epi32(2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g, 2 * g, 2 * g, 2 * g);
		o->s[g] = _mm256_permutevar8x32_ps(lo, idx);
		o->s[g + 4] = _mm256_permutevar8x32_ps(hi, idx);
	}
}

/*
 * Magnitudes and negative mask of IQ1's 8 t + delta, delta a byte vector
 * (1 or -1 per value), t the grid bytes (0xFF, 0, 1): t << 3 per byte is
 * t * 8 once the bits shifted in from the byte below are masked off.
 */
INLINE void
iq1_levels(__m256i g, __m256i delta, __m256i *u, __m256i *neg)
{
	__m256i q = _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8((char)0xF8)), delta);

	*u = _mm256_abs_epi8(q);
	*neg = _mm256_cmpgt_epi8(_mm256_setzero_si256(), q);
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
	const __m256i hsh = _mm256_set_epi32(1, 2, 3, 4, 5, 6, 7, 8);
	const uint8_t *qs = p + 2, *qh = p + 66, *signs = p + 74;
	__m256i sw = _mm256_set1_epi32((int)ld32(p + 106)), m15 = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
	__m256 d = _mm256_set1_ps(h2f(p));
	__m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sw, vec8(sh)), m15);
	__m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sw, vec8(sh + 8)), m15);

	spread_scales(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(lo, 1), one))),
	    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(hi, 1), one))), o);
	for (int b = 0; b < 8; b++) {
		__m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * b)));
		__m256i h = _mm256_sllv_epi32(_mm256_set1_epi32(qh[b]), hsh);	/* bit k to bit 8 in lane k */
		idx = _mm256_or_si256(idx, _mm256_and_si256(h, _mm256_set1_epi32(256)));
		o->u[b] = grid32x8(q_iq3s_grid, idx);
		o->neg[b] = bits_mask(signs + 4 * b);
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
	const __m256i sh = _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0);
	const __m128i hsh = _mm_set_epi32(6, 4, 2, 0);
	const uint8_t *qs = p + 2, *signs = p + 34, *qh = p + 66;
	__m256i m15 = _mm256_set1_epi32(15);
	__m256 d = _mm256_set1_ps(h2f(p)), half = _mm256_set1_ps(0.5f), quarter = _mm256_set1_ps(0.25f);
	__m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)ld32(p + 74)), sh), m15);
	__m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)ld32(p + 78)), sh), m15);

	spread_scales(_mm256_mul_ps(_mm256_mul_ps(d, _mm256_add_ps(_mm256_cvtepi32_ps(lo), half)), quarter),
	    _mm256_mul_ps(_mm256_mul_ps(d, _mm256_add_ps(_mm256_cvtepi32_ps(hi), half)), quarter), o);
	for (int b = 0; b < 8; b++) {
		__m128i idx = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)ld32(qs + 4 * b)));
		__m128i h = _mm_srlv_epi32(_mm_set1_epi32(qh[b]), hsh);
		idx = _mm_or_si128(idx, _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(3)), 8));
		o->u[b] = grid64x4(q_iq2s_grid, idx);
		o->neg[b] = bits_mask(signs + 4 * b);
	}
}

/* IQ1's scales per 16 (lane g: its 3-bit s): d (2 s + 1) / 8, exact (quant_iq.c's iq1_scale). */
INLINE __m256
iq1_scales(__m256 d, __m256i s3)
{
	__m256i odd = _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(s3, _mm256_set1_epi32(7)), 1),
	    _mm256_set1_epi32(1));

	return _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(odd)), _mm256_set1_ps(0.125f));
}

/*
 * IQ1_S: per group b the u16 qh[b]: bits 3l .. 3l + 2 the high bits of
 * entry l's index (low bits qs[4b + l]), bits 12-14 s, bit 15 the shift
 * (delta -1/8) of the whole group.
 */
INLINE void
dec_iq1_s(const uint8_t *p, struct iqs_blk *o)
{
	const __m128i hsh = _mm_set_epi32(9, 6, 3, 0);
	const uint8_t *qs = p + 2, *qh = p + 34;
	__m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)qh));
	__m256 d = _mm256_set1_ps(h2f(p));

	spread_scales(iq1_scales(d, _mm256_srli_epi32(_mm256_permutevar8x32_epi32(h,
	    _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0)), 12)),
	    iq1_scales(d, _mm256_srli_epi32(_mm256_permutevar8x32_epi32(h,
	    _mm256_set_epi32(7, 7, 6, 6, 5, 5, 4, 4)), 12)), o);
	for (int b = 0; b < 8; b++) {
		unsigned hb = ld16(qh + 2 * b);
		__m128i idx = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)ld32(qs + 4 * b)));
		__m128i hi = _mm_srlv_epi32(_mm_set1_epi32((int)hb), hsh);
		idx = _mm_or_si128(idx, _mm_slli_epi32(_mm_and_si128(hi, _mm_set1_epi32(7)), 8));
		iq1_levels(grid64x4(q_iq1s_grid, idx),
		    _mm256_set1_epi8(hb & 0x8000 ? -1 : 1), &o->u[b], &o->neg[b]);
	}
}

/*
 * IQ1_M: entry l of group b: index qs[4b + l] | (nibble l of the u16
 * qh[2b ..] & 7) << 8, the nibble's bit 3 its shift. s of group of 16 g:
 * bits 3 (g % 4) .. + 2 of the u16 scales[g / 4]; d from their top nibbles.
 */
INLINE void
dec_iq1_m(const uint8_t *p, struct iqs_blk *o)
{
	const __m256i sh = _mm256_set_epi32(9, 6, 3, 0, 9, 6, 3, 0);
	const __m128i nsh = _mm_set_epi32(12, 8, 4, 0);
	const uint8_t *qs = p, *qh = p + 32;
	uint64_t w;
	uint16_t dh;
	__m256i sw;
	__m256 d;

	memcpy(&w, p + 48, 8);
	/* the fp16 d: top nibble of each u16, the first word's lowest */
	dh = (uint16_t)((w >> 12 & 0xF) | (w >> 24 & 0xF0) | (w >> 36 & 0xF00) | (w >> 48 & 0xF000));
	d = _mm256_set1_ps(_cvtsh_ss(dh));
	sw = _mm256_castsi128_si256(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(p + 48))));
	spread_scales(iq1_scales(d, _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(sw,
	    _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0)), sh)),
	    iq1_scales(d, _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(sw,
	    _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2)), sh)), o);
	for (int b = 0; b < 8; b++) {
		__m128i nib = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(ld16(qh + 2 * b)), nsh), _mm_set1_epi32(15));
		__m128i idx = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)ld32(qs + 4 * b)));
		/* per qword: 0xFF bytes where the entry's shift bit is set, else 1 */
		__m256i sh8 = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_cvtepu32_epi64(nib), _mm256_set1_epi64x(8)),
		    _mm256_set1_epi64x(8));
		idx = _mm_or_si128(idx, _mm_slli_epi32(_mm_and_si128(nib, _mm_set1_epi32(7)), 8));
		iq1_levels(grid64x4(q_iq1s_grid, idx),
		    _mm256_or_si256(sh8, _mm256_set1_epi8(1)), &o->u[b], &o->neg[b]);
	}
}

/*
 * One token times one decoded block: x the block's 256 levels, dx their
 * 8 scales (one per 32). The float steps (per group: the scale product,
 * one FMA) are the same for every n_tok.
 */
INLINE __m256
blk_dot(const struct iqs_blk *b, const float *dx, const int8_t *x, __m256 acc)
{
	const __m256i ones16 = _mm256_set1_epi16(1);

	for (int g = 0; g < 8; g++) {
		__m256i xv = _mm256_loadu_si256((const __m256i *)(x + 32 * g));
		__m256i sx = _mm256_sub_epi8(_mm256_xor_si256(xv, b->neg[g]), b->neg[g]);
		/* |products| <= 43 * 127: the pairs fit int16 */
		__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(b->u[g], sx), ones16);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(b->s[g], _mm256_set1_ps(dx[g])), acc);
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
		__m256 acc = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			dec(row + (size_t)i * bb, &b);
			acc = blk_dot(&b, d + 8 * i, x + QK_K * i, acc);
		}
		out[0] = q_hsum8(acc);
		return;
	}
	__m256 acc[Q_IQ_TOKENS];
	for (int tok = 0; tok < n_tok; tok++)
		acc[tok] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		dec(row + (size_t)i * bb, &b);
		for (int tok = 0; tok < n_tok; tok++) {
			const uint8_t *a = act + (size_t)tok * ab;
			acc[tok] = blk_dot(&b, (const float *)a + 8 * i, (const int8_t *)(a + xoff) + QK_K * i, acc[tok]);
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = q_hsum8(acc[tok]);
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
kern_avx2_iqs_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
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
