/*
 * kern_avx512_i8.c: the avx512 table's products of int8 activations
 * (compiled with AVX512 F, VL, BW and VNNI, kern.am). A tile is four weight rows times
 * up to four tokens, and the unit of work is a pair of 32-value groups (two
 * Q8_0/Q4_0/... blocks, or groups 2j and 2j + 1 of a K-quant block): one
 * 512-bit dpbusd forms the 16 four-value lane sums of both groups, so each
 * (row, token) pays one multiply-add, one conversion, one scale product and
 * one FMA per 64 values, where the 256-bit kernel pays them per 32.
 *
 * Signs: dpbusd multiplies unsigned bytes by signed bytes. The levels go
 * on the unsigned side and x on the signed side. Where the stored level is
 * an unsigned u minus a fixed offset o (Q4_0 8, Q5_0 16, Q3_K 4, Q6_K 32),
 * the multiply-add starts from the token's -o * (sum of its 4 x) per lane,
 * formed once per token and pair: sum u x - o sum x = sum (u - o) x. Q8_0's
 * levels are signed: there the token's x is made unsigned as x + 128 (xor
 * 0x80, once per token and pair) and the row's -128 * (sum of its 4
 * levels), once per row and pair, is the start: sum (x + 128) w - 128 sum
 * w = sum x w. All exact for any int8 x: the lane sums are the integers.
 *
 * Batch independence: every (row, token) has its own 16-lane accumulator;
 * lanes 0-7 take the pair's first group, 8-15 its second, and the float
 * work on them (scale product, FMA, the Q4_1/Q5_1/Q4_K/Q5_K offsets under a
 * lane mask, the final 16-lane sum) is the same sequence for any tile, for
 * a lone token (decode, q_dot_act) as for a 512-token prefill. These sums
 * are in a different order from the AVX2 kernels', so AVX-512 and AVX2
 * results may differ in the last bits (each within quant.h's bound).
 */
#include "kern_int.h"
#include "kern_x86.h"

/* mad_avx2's (kern_x86.h) multiply-add with VNNI: the same exact lane sums in one instruction. */
INLINE __m256i
mad_vnni(__m256i u, __m256i s)
{
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

/* lanes 0-7 take element 0 of a vector, lanes 8-15 element 1 */
#define PAIR_IDX _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
/* lanes 4q .. 4q + 3 take element q (the 16-value scales of Q3_K/Q6_K) */
#define QUAD_IDX _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0)

INLINE __m512i
cat256(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The 256-bit a in both halves. */
INLINE __m512i
twice256(const void *p)
{
	return _mm512_broadcast_i64x4(ld256(p));
}

/* Two floats at p, as lanes 0-7 = p[0], 8-15 = p[1]. */
INLINE __m512
pair_f(const float *p)
{
	uint64_t u;

	memcpy(&u, p, 8);	/* p need not be 8-byte aligned */
	__m128 v = _mm_castsi128_ps(_mm_cvtsi64_si128((long long)u));

	return _mm512_permutexvar_ps(PAIR_IDX, _mm512_castps128_ps512(v));
}

/* Two fp16 (at a and b) as floats, in lanes 0 and 1. */
INLINE __m128
two_h(const uint8_t *a, const uint8_t *b)
{
	uint16_t x, y;

	memcpy(&x, a, 2);
	memcpy(&y, b, 2);
	return _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)x | (uint32_t)y << 16)));
}

/* The fp16 at a in lanes 0-7, at b in lanes 8-15, as floats. */
INLINE __m512
pair_h(const uint8_t *a, const uint8_t *b)
{
	uint16_t x, y;

	memcpy(&x, a, 2);
	memcpy(&y, b, 2);
	return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)x)),
	    _mm_set1_epi16((short)y), 1));
}

/* One row's part of a pair of groups: levels, lane scales, and what follows. */
struct pr {
	__m512i w;		/* 64 levels */
	__m512i corr;		/* signed types: -128 * sum of each lane's 4 levels */
	__m512 ws;		/* weight scale of each lane */
	__m512 off;		/* Q4_1/Q5_1: m of each block in lanes 0 and 8, else 0 */
};

/* Levels of blocks p0, p1 of a 32-value type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1). */
INLINE __m512i
pair_levels32(enum gguf_dtype t, const uint8_t *p0, const uint8_t *p1)
{
	if (t == GGML_TYPE_Q8_0)
		return cat256(ld256(p0 + 2), ld256(p1 + 2));
	bool has_m = t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
	bool q5 = t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1;
	size_t qo = (has_m ? 4 : 2) + (q5 ? 4 : 0);
	/* 128-bit chunks: qs0, qs0 >> 4, qs1, qs1 >> 4, each nibble masked */
	__m512i v = cat256(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + qo))),
	    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p1 + qo))));
	__m512i u = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
	    _mm512_set1_epi8(0xF));
	if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1)
		return u;
	uint32_t h0, h1;
	memcpy(&h0, p0 + (has_m ? 4 : 2), 4);
	memcpy(&h1, p1 + (has_m ? 4 : 2), 4);
	__mmask64 hb = _cvtu64_mask64((uint64_t)h0 | (uint64_t)h1 << 32);
	/* + 16 where the 5th bit is set */
	return _mm512_mask_add_epi8(u, hb, u, _mm512_set1_epi8(16));
}

/* Levels of groups 2j, 2j + 1 of a K-quant block at p. */
INLINE __m512i
pair_levels_k(enum gguf_dtype t, const uint8_t *p, int j)
{
	const __m512i lo4 = _mm512_set1_epi8(0xF);

	switch (t) {
	case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: {
		/* group 2j low nibbles, 2j + 1 high nibbles of the same 32 bytes */
		bool q5 = t == GGML_TYPE_Q5_K;
		__m512i u = _mm512_and_si512(_mm512_srlv_epi64(twice256(p + 16 + (q5 ? 32 : 0) + 32 * j),
		    _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), lo4);
		if (q5) {	/* 5th bit: bit g of qh[l] */
			__m512i sel = cat256(_mm256_set1_epi8((char)(1 << (2 * j))),
			    _mm256_set1_epi8((char)(1 << (2 * j + 1))));
			__mmask64 hb = _mm512_test_epi8_mask(twice256(p + 16), sel);
			u = _mm512_mask_add_epi8(u, hb, u, _mm512_set1_epi8(16));
		}
		return u;
	}
	case GGML_TYPE_Q3_K: {
		/* group 4h + k: bits 2k of qs[32h ..]; 3rd bit: bit g of hmask */
		int h = j / 2, k = 2 * (j % 2);
		__m512i lo = _mm512_and_si512(_mm512_srlv_epi64(twice256(p + 32 + 32 * h),
		    _mm512_set_epi64(2 * k + 2, 2 * k + 2, 2 * k + 2, 2 * k + 2, 2 * k, 2 * k, 2 * k, 2 * k)),
		    _mm512_set1_epi8(3));
		__m512i sel = cat256(_mm256_set1_epi8((char)(1 << (2 * j))),
		    _mm256_set1_epi8((char)(1 << (2 * j + 1))));
		__mmask64 hb = _mm512_test_epi8_mask(twice256(p), sel);
		return _mm512_mask_add_epi8(lo, hb, lo, _mm512_set1_epi8(4));
	}
	default: {	/* Q6_K: group 4h + k, ql[64h + 32 (k & 1)], nibble k >= 2, qh[32h] >> 2k */
		int h = j / 2, k = 2 * (j % 2);
		__m512i l = _mm512_loadu_si512(p + 64 * h);
		if (k >= 2)
			l = _mm512_srli_epi16(l, 4);
		__m512i hh = _mm512_srlv_epi64(twice256(p + 128 + 32 * h),
		    _mm512_set_epi64(2 * k + 2, 2 * k + 2, 2 * k + 2, 2 * k + 2, 2 * k, 2 * k, 2 * k, 2 * k));
		/* (l & 0x0F) | ((hh << 4) & 0x30) */
		l = _mm512_ternarylogic_epi64(l, _mm512_slli_epi16(hh, 4), _mm512_set1_epi8(0x0F),
		    0xE4);
		return _mm512_and_si512(l, _mm512_set1_epi8(0x3F));
	}
	}
}

/*
 * The levels pair_levels32/pair_levels_k return are unsigned, except
 * Q8_0's: the stored level is theirs minus this (0: none).
 */
INLINE int
t_level_off(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_Q4_0: return 8;
	case GGML_TYPE_Q5_0: return 16;
	case GGML_TYPE_Q3_K: return 4;
	case GGML_TYPE_Q6_K: return 32;
	default: return 0;
	}
}

/* The correction for Q8_0's signed levels (see the top of this file). */
INLINE __m512i
pair_corr(__m512i w)
{
	__m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w);

	return _mm512_sub_epi32(_mm512_setzero_si512(), c);
}

/*
 * An odd last block b of a 32-value type: the 256-bit tile's steps, on
 * lanes 0-7 of the accumulators only.
 */
INLINE void
tail512(enum gguf_dtype t, int NR, int NT, const uint8_t *const w[], int64_t b, const float *const dx[4],
    const float *const xs[4], const int8_t *const qx[4], __m512 acc[][4])
{
	const bool sgn = t_signed(t), off1 = t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
	__m256i wv[8], wu[8];
	__m256 ws[8], mo[8];

	UNROLL
	for (int r = 0; r < NR; r++) {
		struct blk bk;
		blk_prep(t, w[r] + (size_t)b * t_block_bytes(t), &bk);
		wv[r] = blk_group(t, &bk, 0);
		wu[r] = sgn ? _mm256_sign_epi8(wv[r], wv[r]) : wv[r];
		ws[r] = blk_scale(t, &bk, 0);
		mo[r] = off1 ? bk.off : _mm256_setzero_ps();
	}
	UNROLL
	for (int k = 0; k < NT; k++) {
		__m256i xv = ld256(qx[k] + 32 * b);
		__m256 dv = _mm256_broadcast_ss(dx[k] + b);
		UNROLL
		for (int r = 0; r < NR; r++) {
			__m256i s = sgn ? _mm256_sign_epi8(xv, wv[r]) : xv;
			s = mad_vnni(wu[r], s);
			__m256 a = _mm512_castps512_ps256(acc[r][k]);
			a = _mm256_fmadd_ps(_mm256_mul_ps(ws[r], dv), _mm256_cvtepi32_ps(s), a);
			if (off1)
				a = _mm256_fmadd_ps(mo[r], _mm256_broadcast_ss(xs[k] + b), a);
			acc[r][k] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(acc[r][k]),
			    _mm256_castps_pd(a), 0));
		}
	}
}

/*
 * One tile: rows w[0..NR) times NT tokens of prepared activations (ab bytes
 * apart), n_in values; out[r * 4 + tok]. pf > 0: prefetch each row's bytes
 * pf ahead as its blocks are read (decode, where nothing else hides the
 * memory latency).
 */
INLINE void
tile512(enum gguf_dtype t, int NR, int NT, const uint8_t *const w[4], const uint8_t *act, size_t ab,
    int64_t n_in, size_t pf, float *out)
{
	const int ng = t_group_count(t);
	const int64_t nb = n_in / 32;
	const size_t bb = t_block_bytes(t);
	const bool sgn = t == GGML_TYPE_Q8_0, off1 = t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
	const int lofs = t_level_off(t);
	const float *dx[4], *xs[4];
	const int8_t *qx[4];
	__m512 acc[4][4];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		xs[k] = dx[k] + nb;
		qx[k] = (const int8_t *)(xs[k] + nb);
		UNROLL
		for (int r = 0; r < NR; r++)
			acc[r][k] = _mm512_setzero_ps();
	}
	/* the 64-value pair at group ag (even), given the rows' parts */
#define PAIR_STEP(ag, pr)							\
	do {									\
		UNROLL								\
		for (int k = 0; k < NT; k++) {					\
			__m512i xv = _mm512_loadu_si512(qx[k] + 32 * (ag));	\
			__m512 dv = pair_f(dx[k] + (ag));			\
			__m512i cx = _mm512_setzero_si512();			\
			if (sgn)						\
				xv = _mm512_xor_si512(xv, _mm512_set1_epi8((char)0x80)); \
			if (lofs)						\
				cx = _mm512_sub_epi32(cx, _mm512_dpbusd_epi32(cx, \
				    _mm512_set1_epi8((char)lofs), xv));		\
			UNROLL							\
			for (int r = 0; r < NR; r++) {				\
				__m512i s = sgn ? _mm512_dpbusd_epi32(pr[r].corr, xv, pr[r].w) \
				    : _mm512_dpbusd_epi32(cx, pr[r].w, xv);	\
				acc[r][k] = _mm512_fmadd_ps(_mm512_mul_ps(pr[r].ws, dv), \
				    _mm512_cvtepi32_ps(s), acc[r][k]);		\
			}							\
		}								\
	} while (0)
	if (ng == 1) {
		int64_t b = 0;
		for (; b + 2 <= nb; b += 2) {
			struct pr pr[4];
			UNROLL
			for (int r = 0; r < NR; r++) {
				const uint8_t *p0 = w[r] + (size_t)b * bb, *p1 = p0 + bb;
				pr[r].w = pair_levels32(t, p0, p1);
				if (sgn)
					pr[r].corr = pair_corr(pr[r].w);
				pr[r].ws = pair_h(p0, p1);
				if (off1)
					pr[r].off = _mm512_maskz_permutexvar_ps(0x0101, PAIR_IDX,
					    _mm512_castps128_ps512(two_h(p0 + 2, p1 + 2)));
			}
			PAIR_STEP(b, pr);
			if (off1) {
				UNROLL
				for (int k = 0; k < NT; k++) {
					__m512 xo = pair_f(xs[k] + b);
					UNROLL
					for (int r = 0; r < NR; r++)
						acc[r][k] = _mm512_mask3_fmadd_ps(pr[r].off, xo, acc[r][k], 0x0101);
				}
			}
		}
		if (b < nb)
			tail512(t, NR, NT, w, b, dx, xs, qx, acc);
	} else {
		const bool offk = t_has_off(t);
		for (int64_t b = 0; b < nb / 8; b++) {
			struct blk bk[4];
			UNROLL
			for (int r = 0; r < NR; r++) {
				blk_prep(t, w[r] + (size_t)b * bb, &bk[r]);
				if (pf)
					prefetch_span(w[r] + (size_t)b * bb + pf, bb);
			}
			UNROLL
			for (int j = 0; j < 4; j++) {
				struct pr pr[4];
				UNROLL
				for (int r = 0; r < NR; r++) {
					pr[r].w = pair_levels_k(t, bk[r].p, j);
					if (sgn)
						pr[r].corr = pair_corr(pr[r].w);
					if (offk)	/* one scale per group of 32 */
						pr[r].ws = pair_f(bk[r].fs + 2 * j);
					else		/* one per 16 */
						pr[r].ws = _mm512_permutexvar_ps(QUAD_IDX,
						    _mm512_castps128_ps512(_mm_loadu_ps(bk[r].fs + 4 * j)));
				}
				PAIR_STEP(b * 8 + 2 * j, pr);
			}
			if (offk) {	/* the 8 sub-block mins, lanes 0-7 */
				UNROLL
				for (int k = 0; k < NT; k++) {
					__m512 xo = _mm512_castps256_ps512(_mm256_loadu_ps(xs[k] + 8 * b));
					UNROLL
					for (int r = 0; r < NR; r++)
						acc[r][k] = _mm512_mask3_fmadd_ps(_mm512_castps256_ps512(bk[r].off),
						    xo, acc[r][k], 0x00FF);
				}
			}
		}
	}
#undef PAIR_STEP
	UNROLL
	for (int r = 0; r < NR; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			out[r * 4 + k] = q_hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][k]),
			    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][k]), 1))));
}

/*
 * Decode (one token) of the 32-value types: NR rows (at most 8) at a time,
 * with the work the tile does per (row, pair) cut down, and the rows
 * prefetched pf bytes ahead. For each (row, token) the float work is the
 * tile's, bit for bit: the same lane sums (integers, whichever way they are
 * formed), the same products weight scale x token scale in each lane, the
 * same FMAs into a 16-lane accumulator in the same order, the same tail
 * and the same final sum. What changes is how the operands are formed:
 *  - the token's correction is formed once per pair for all the rows
 *    (Q8_0: the levels are made unsigned as w + 128, and the start is
 *    -128 * the token's 4-value sums, instead of a per-row correction);
 *  - the 2 NR fp16 scales of a pair are converted with one instruction and
 *    multiplied by the token's two scales with one more; each row then takes
 *    its 16 lane products with one permute.
 */
INLINE void
dec32(enum gguf_dtype t, int NR, const uint8_t *const w[8], const uint8_t *act, int64_t n_in,
    size_t pf, float *out)
{
	const int64_t nb = n_in / 32;
	const size_t bb = t_block_bytes(t);
	const bool q8 = t == GGML_TYPE_Q8_0, off1 = t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
	const int lofs = q8 ? 128 : t_level_off(t);
	const float *dx[4] = { (const float *)act }, *xs[4] = { dx[0] + nb };
	const int8_t *qx[4] = { (const int8_t *)(xs[0] + nb) };
	__m512 acc[8][4];
	__m512i idx[8];

	UNROLL
	for (int r = 0; r < NR; r++) {
		acc[r][0] = _mm512_setzero_ps();
		/* lanes 0-7 take product 2r (block b), 8-15 product 2r + 1 (block b + 1) */
		idx[r] = _mm512_add_epi32(PAIR_IDX, _mm512_set1_epi32(2 * r));
	}
	int64_t b = 0;
	for (; b + 2 <= nb; b += 2) {
		const size_t o = (size_t)b * bb;
		__m512i xv = _mm512_loadu_si512(qx[0] + 32 * b);
		__m512i cx = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(
		    _mm512_setzero_si512(), _mm512_set1_epi8((char)lofs), xv));
		/* dx[b], dx[b + 1] in every pair of lanes */
		__m512 dv = _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castsi128_pd(
		    _mm_loadl_epi64((const __m128i *)(dx[0] + b)))));
		uint64_t h[4] = { 0, 0, 0, 0 };
		UNROLL
		for (int r = 0; r < NR; r++) {
			uint16_t d0, d1;
			memcpy(&d0, w[r] + o, 2);
			memcpy(&d1, w[r] + o + bb, 2);
			h[r / 2] |= ((uint64_t)d0 | (uint64_t)d1 << 16) << (32 * (r % 2));
		}
		__m512 sp = NR > 4 ? _mm512_mul_ps(_mm512_cvtph_ps(_mm256_set_epi64x((long long)h[3],
		    (long long)h[2], (long long)h[1], (long long)h[0])), dv) :
		    _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtph_ps(_mm_set_epi64x((long long)h[1],
		    (long long)h[0])), _mm512_castps512_ps256(dv)));
		UNROLL
		for (int r = 0; r < NR; r++) {
			const uint8_t *p0 = w[r] + o;
			if (pf)
				prefetch_span(p0 + pf, 2 * bb);
			__m512i lv = pair_levels32(t, p0, p0 + bb);
			if (q8)
				lv = _mm512_xor_si512(lv, _mm512_set1_epi8((char)0x80));
			__m512i s = _mm512_dpbusd_epi32(cx, lv, xv);
			acc[r][0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx[r], sp), _mm512_cvtepi32_ps(s),
			    acc[r][0]);
		}
		if (off1) {
			__m512 xo = pair_f(xs[0] + b);
			UNROLL
			for (int r = 0; r < NR; r++) {
				__m512 m = _mm512_maskz_permutexvar_ps(0x0101, PAIR_IDX,
				    _mm512_castps128_ps512(two_h(w[r] + o + 2, w[r] + o + bb + 2)));
				acc[r][0] = _mm512_mask3_fmadd_ps(m, xo, acc[r][0], 0x0101);
			}
		}
	}
	if (b < nb)
		tail512(t, NR, 1, w, b, dx, xs, qx, acc);
	UNROLL
	for (int r = 0; r < NR; r++)
		out[r] = q_hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][0]),
		    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][0]), 1))));
}

/* Rows per decode step: 32-value types, K-quants (the tile's four at most). */
#define DEC_NR32 8
#define DEC_NRK 4

/*
 * Decode: rows [r0, r1) of one token, DEC_NR at a time and the rest one by
 * one, each row's bytes prefetched one step of rows ahead.
 */
INLINE void
dec512(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, int64_t n_in,
    float *y, int64_t r0, int64_t r1)
{
	const bool k = t_group_count(t) > 1;
	const int nr = k ? DEC_NRK : DEC_NR32;
	const size_t pf = (size_t)nr * rb;
	int64_t r = r0;

	for (; r + nr <= r1; r += nr) {
		const uint8_t *w[8];
		float out[32];
		for (int i = 0; i < nr; i++)
			w[i] = W + (size_t)(r + i) * rb;
		if (k) {
			tile512(t, DEC_NRK, 1, w, act, 0, n_in, pf, out);
			for (int i = 0; i < DEC_NRK; i++)
				y[r + i] = out[4 * i];
		} else {
			dec32(t, DEC_NR32, w, act, n_in, pf, out);
			for (int i = 0; i < DEC_NR32; i++)
				y[r + i] = out[i];
		}
	}
	for (; r < r1; r++) {
		const uint8_t *w[8] = { W + (size_t)r * rb };
		float out[16];
		if (k)
			tile512(t, 1, 1, w, act, 0, n_in, 0, out);
		else
			dec32(t, 1, w, act, n_in, 0, out);
		y[r] = out[0];
	}
}

/* Rows in fours (the last ones repeated to fill a tile, their copies dropped), tokens in fours. */
INLINE void
rows512(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_tok == 1) {
		dec512(t, W, rb, act, n_in, y, r0, r1);
		return;
	}
	for (int64_t r = r0; r < r1; r += 4) {
		const uint8_t *w[4];
		int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
		for (int i = 0; i < 4; i++)
			w[i] = W + (size_t)(r + (i < nr ? i : nr - 1)) * rb;
		for (int tok = 0; tok < n_tok; tok += 4) {
			const uint8_t *a = act + (size_t)tok * ab;
			float out[16];
			int nt = n_tok - tok < 4 ? n_tok - tok : 4;
			switch (nt) {
			case 4: tile512(t, 4, 4, w, a, ab, n_in, 0, out); break;
			case 3: tile512(t, 4, 3, w, a, ab, n_in, 0, out); break;
			case 2: tile512(t, 4, 2, w, a, ab, n_in, 0, out); break;
			default: tile512(t, 4, 1, w, a, ab, n_in, 0, out); break;
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
#define ROWS_512(T, name)							\
static bool									\
name(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, \
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)		\
{										\
	(void)t;								\
	if (n_in % (32 * t_group_count(T)) != 0)				\
		return false;							\
	rows512(T, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);		\
	return true;								\
}
ROWS_512(GGML_TYPE_Q8_0, rows_q8_0)
ROWS_512(GGML_TYPE_Q4_0, rows_q4_0)
ROWS_512(GGML_TYPE_Q4_1, rows_q4_1)
ROWS_512(GGML_TYPE_Q5_0, rows_q5_0)
ROWS_512(GGML_TYPE_Q5_1, rows_q5_1)
ROWS_512(GGML_TYPE_Q3_K, rows_q3_k)
ROWS_512(GGML_TYPE_Q4_K, rows_q4_k)
ROWS_512(GGML_TYPE_Q5_K, rows_q5_k)
ROWS_512(GGML_TYPE_Q6_K, rows_q6_k)

kern_rows_act_fn *const kern_avx512_rows_act[KERN_NTYPE] = {
	[GGML_TYPE_Q8_0] = rows_q8_0, [GGML_TYPE_Q4_0] = rows_q4_0, [GGML_TYPE_Q4_1] = rows_q4_1,
	[GGML_TYPE_Q5_0] = rows_q5_0, [GGML_TYPE_Q5_1] = rows_q5_1, [GGML_TYPE_Q3_K] = rows_q3_k,
	[GGML_TYPE_Q4_K] = rows_q4_k, [GGML_TYPE_Q5_K] = rows_q5_k, [GGML_TYPE_Q6_K] = rows_q6_k,
	KERN_AVX512_IQ_ROWS_ACT,
};
