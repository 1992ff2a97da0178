/*
 * kern_avx512_iqg.c: the avx512 table's int8-activation kernel of the
 * lattice types whose signs are 7-bit ksigns indices: IQ2_XXS, IQ2_XS,
 * IQ3_XXS (compiled with AVX512 F, VL, BW and VNNI: kern.am). The other
 * types of quant_iq.h are kern_avx512_iq.c's.
 *
 * As kern_avx2_iqg.c, a block is decoded straight into registers, here 64
 * values (a pair of groups of 32) per 512-bit vector:
 *  - magnitudes: the pair's grid entries by one gather (8 of 8 bytes for
 *    IQ2, 16 of 4 bytes for IQ3_XXS), byte j of an entry value j's
 *    unsigned magnitude (at most 62);
 *  - signs: the block's 32 sign indices with their parity bit (q_iq_ksigns)
 *    made once per block and kept as two halves broadcast to every 128-bit
 *    lane; per pair one byte shuffle spreads its 8 sign bytes over their 8
 *    values each, tested against the value's bit: a 64-bit mask of the
 *    negative values;
 *  - scales: the block's 16 scales d (2 s + 1) / 8 (IQ3_XXS / 4), one per
 *    16 values, exact in a float.
 * The product with a token's 64 int8 x: x negated under the mask, one
 * dpbusd with the magnitudes on its unsigned side, so lane j holds the
 * exact sum of values 4j .. 4j + 3 (at most 4 * 62 * 127). Per block and
 * token the 16 scales times the token's d_x of each 32 are formed once
 * (one multiply); each pair's lanes convert to float and take one FMA by
 * the 4 of those that cover it (a lane permute) into the token's 16-lane
 * accumulator, reduced by _mm512_reduce_add_ps at the end.
 *
 * One token decodes each pair and multiplies it at once; several tokens
 * (up to Q_IQ_TOKENS per pass) decode a block once into 4 vectors and 4
 * masks and run every token over them. Both do the same float operations
 * in the same order for a (row, token), so its result is bitwise the same
 * whatever n_tok and whichever rows share the call. It differs from the
 * portable kernel's and the avx2 table's only in float rounding.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/* What a block's pairs share: sign bytes, grid indices (IQ2), scales. */
struct gblk {
	/* sign bytes: byte 4b + l of the 32 is group b's byte l (bit j: value 8l + j negative) */
	__m512i sg_lo, sg_hi;	/* bytes 0-15 (pairs 0-1) in all four lanes, bytes 16-31 (pairs 2-3) */
	uint8_t idx8[32];	/* IQ2_XXS: grid index of group b's 8 values l at 4b + l */
	uint16_t idx16[32];	/* IQ2_XS: the same, 9 bits */
	__m512 sw;		/* lane k: the scale of values 16k .. 16k + 15 */
};

/* 32 7-bit sign indices to q_iq_ksigns's bytes: the parity of the 7 bits in bit 7 (per nibble from a table). */
INLINE __m256i
ksigns32(__m256i s)
{
	const __m256i par = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128,
	    -128, 0, 0, -128, 0, -128, -128, 0));
	const __m256i lo4 = _mm256_set1_epi8(0x0F);
	__m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(par, _mm256_and_si256(s, lo4)),
	    _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi16(s, 4), lo4)));

	return _mm256_or_si256(s, p);
}

/* The block's 32 sign bytes as two halves in every lane (a pair's shuffle stays in its lane). */
INLINE void
signs(__m256i s, struct gblk *o)
{
	o->sg_lo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(s));
	o->sg_hi = _mm512_broadcast_i32x4(_mm256_extracti128_si256(s, 1));
}

/*
 * IQ2_XXS and IQ3_XXS: 8 words (group b's in word b) of 4 7-bit sign
 * indices and s in the top 4 bits: sign bytes to o->sgn, and the 16
 * scales d * (2 s + 1) * k (each group's twice).
 */
INLINE void
aux_words(__m256i a, float dk, struct gblk *o)
{
	const __m256i m7 = _mm256_set1_epi32(0x7F);
	__m256i s = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(a, m7),
	    _mm256_and_si256(_mm256_slli_epi32(a, 1), _mm256_slli_epi32(m7, 8))),
	    _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(a, 2), _mm256_slli_epi32(m7, 16)),
	    _mm256_and_si256(_mm256_slli_epi32(a, 3), _mm256_slli_epi32(m7, 24))));
	__m512i ls = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
	    _mm512_castsi256_si512(_mm256_srli_epi32(a, 28)));

	signs(ksigns32(s), o);
	ls = _mm512_add_epi32(_mm512_add_epi32(ls, ls), _mm512_set1_epi32(1));
	o->sw = _mm512_mul_ps(_mm512_cvtepi32_ps(ls), _mm512_set1_ps(dk));
}

/* A block's shared parts (t constant in each caller: kern_avx512_iqg_rows_act's three). */
INLINE void
gblk_prep(enum gguf_dtype t, const uint8_t *p, struct gblk *o)
{
	if (t == GGML_TYPE_IQ3_XXS) {
		aux_words(_mm256_loadu_si256((const __m256i *)(p + 66)), h2f(p) * 0.25f, o);
	} else if (t == GGML_TYPE_IQ2_XXS) {
		/* 8 bytes per group: 4 grid indices, then the word of signs and scale */
		__m256 lo = _mm256_loadu_ps((const float *)(p + 2)), hi = _mm256_loadu_ps((const float *)(p + 34));
		__m256i a = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
		__m256i i = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
		/* the shuffles interleave the lanes: groups 0-1, 4-5 | 2-3, 6-7 */
		_mm256_storeu_si256((__m256i *)o->idx8, _mm256_permute4x64_epi64(i, _MM_SHUFFLE(3, 1, 2, 0)));
		aux_words(_mm256_permute4x64_epi64(a, _MM_SHUFFLE(3, 1, 2, 0)), h2f(p) * 0.125f, o);
	} else {
		/* IQ2_XS: 32 words of 9-bit grid index | sign index << 9; scale nibbles after them */
		__m256i w0 = _mm256_loadu_si256((const __m256i *)(p + 2));
		__m256i w1 = _mm256_loadu_si256((const __m256i *)(p + 34));
		__m256i m9 = _mm256_set1_epi16(511);
		__m256i s = _mm256_packus_epi16(_mm256_srli_epi16(w0, 9), _mm256_srli_epi16(w1, 9));
		__m128i sc = _mm_loadl_epi64((const __m128i *)(p + 66)), lo4 = _mm_set1_epi8(0x0F);
		__m128i ls = _mm_unpacklo_epi8(_mm_and_si128(sc, lo4), _mm_and_si128(_mm_srli_epi16(sc, 4), lo4));
		__m512i l32 = _mm512_cvtepu8_epi32(ls);

		_mm256_storeu_si256((__m256i *)o->idx16, _mm256_and_si256(w0, m9));
		_mm256_storeu_si256((__m256i *)(o->idx16 + 16), _mm256_and_si256(w1, m9));
		s = _mm256_permute4x64_epi64(s, _MM_SHUFFLE(3, 1, 2, 0));
		signs(ksigns32(s), o);
		l32 = _mm512_add_epi32(_mm512_add_epi32(l32, l32), _mm512_set1_epi32(1));
		o->sw = _mm512_mul_ps(_mm512_cvtepi32_ps(l32), _mm512_set1_ps(h2f(p) * 0.125f));
	}
}

/* Pair c (groups 2c, 2c + 1) of a block: magnitudes and the mask of negative values. */
INLINE void
pair(enum gguf_dtype t, const uint8_t *p, const struct gblk *o, int c, __m512i *mag, __mmask64 *neg)
{
	/* 128-bit lane k: sign bytes 2k and 2k + 1 of the pair's 8 (8 (c % 2) .. of its half), each over 8 values */
	const long long e = c % 2 ? 0x0808080808080808ll : 0;
	const __m512i spread = _mm512_set_epi64(e + 0x0707070707070707ll, e + 0x0606060606060606ll,
	    e + 0x0505050505050505ll, e + 0x0404040404040404ll, e + 0x0303030303030303ll,
	    e + 0x0202020202020202ll, e + 0x0101010101010101ll, e);
	const __m512i bit = _mm512_set1_epi64((long long)0x8040201008040201ull);

	if (t == GGML_TYPE_IQ3_XXS) {
		__m512i i = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 2 + 16 * c)));
		*mag = _mm512_i32gather_epi32(i, (const void *)q_iq3xxs_grid, 4);
	} else if (t == GGML_TYPE_IQ2_XXS) {
		__m256i i = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(o->idx8 + 8 * c)));
		*mag = _mm512_i32gather_epi64(i, (const void *)q_iq2xxs_grid, 8);
	} else {
		__m256i i = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(o->idx16 + 8 * c)));
		*mag = _mm512_i32gather_epi64(i, (const void *)q_iq2xs_grid, 8);
	}
	*neg = _mm512_test_epi8_mask(_mm512_shuffle_epi8(c < 2 ? o->sg_lo : o->sg_hi, spread), bit);
}

/* 4 lanes of 16 scaled d_x per 16 values: pair c's factor from a block's 16 */
#define QUAD(c) _mm512_setr_epi32(4 * (c), 4 * (c), 4 * (c), 4 * (c), 4 * (c) + 1, 4 * (c) + 1, 4 * (c) + 1,	\
	4 * (c) + 1, 4 * (c) + 2, 4 * (c) + 2, 4 * (c) + 2, 4 * (c) + 2, 4 * (c) + 3, 4 * (c) + 3, 4 * (c) + 3,	\
	4 * (c) + 3)

/* The token's 16 factors of a block: scale of each 16 values times the d_x of its 32 (d: the block's 8). */
INLINE __m512
factors(const struct gblk *o, const float *d)
{
	const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	return _mm512_mul_ps(o->sw, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(d))));
}

/* acc + pair c's exact lane sums with x (64 int8) times their factors: the one float step per pair */
INLINE __m512
pair_dot(__m512i mag, __mmask64 neg, const int8_t *x, __m512 f, int c, __m512 acc)
{
	__m512i xv = _mm512_loadu_si512(x);
	__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), mag,
	    _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv));

	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(QUAD(c), f), acc);
}

/* One row against n_tok <= Q_IQ_TOKENS tokens (ab bytes apart): out[tok * os]. */
INLINE void
row_act(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    float *out, size_t os)
{
	int64_t nb32 = n / 32;
	size_t bb = q_iq_block_bytes(t);
	__m512 acc[Q_IQ_TOKENS];
	struct gblk o;

	for (int tok = 0; tok < n_tok; tok++)
		acc[tok] = _mm512_setzero_ps();
	for (int64_t k = 0; k < n / QK_K; k++) {
		const uint8_t *p = row + (size_t)k * bb;
		gblk_prep(t, p, &o);
		if (n_tok == 1) {
			const int8_t *x = (const int8_t *)((const float *)act + 2 * nb32) + QK_K * k;
			__m512 f = factors(&o, (const float *)act + 8 * k), a = acc[0];
			UNROLL
			for (int c = 0; c < 4; c++) {
				__m512i mag;
				__mmask64 neg;
				pair(t, p, &o, c, &mag, &neg);
				a = pair_dot(mag, neg, x + 64 * c, f, c, a);
			}
			acc[0] = a;
			continue;
		}
		__m512i mag[4];
		__mmask64 neg[4];
		UNROLL
		for (int c = 0; c < 4; c++)
			pair(t, p, &o, c, mag + c, neg + c);
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab);
			const int8_t *x = (const int8_t *)(d + 2 * nb32) + QK_K * k;
			__m512 f = factors(&o, d + 8 * k), a = acc[tok];
			UNROLL
			for (int c = 0; c < 4; c++)
				a = pair_dot(mag[c], neg[c], x + 64 * c, f, c, a);
			acc[tok] = a;
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = _mm512_reduce_add_ps(acc[tok]);
}

INLINE void
rows(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS)
			row_act(t, W + (size_t)r * rb, act + (size_t)t0 * ab, ab,
			    n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS, n_in,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
}

bool
kern_avx512_iqg_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % QK_K != 0)
		return false;
	switch (t) {
	case GGML_TYPE_IQ2_XXS: rows(GGML_TYPE_IQ2_XXS, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_IQ2_XS: rows(GGML_TYPE_IQ2_XS, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_IQ3_XXS: rows(GGML_TYPE_IQ3_XXS, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true;
	default: return false;
	}
}
