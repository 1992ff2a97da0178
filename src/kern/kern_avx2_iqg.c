/*
 * kern_avx2_iqg.c: the avx2 table's int8-activation kernel of the lattice
 * types whose signs are 7-bit ksigns indices: IQ2_XXS, IQ2_XS, IQ3_XXS
 * (compiled with AVX2, FMA and F16C only: kern.am). The other types of
 * quant_iq.h are kern_avx2_iq.c's.
 *
 * A block is decoded straight into registers, 32 values (one group) at a
 * time, with no scalar pass over its values:
 *  - magnitudes: the group's grid entries (4 of 8 bytes for IQ2, 8 of 4
 *    bytes for IQ3_XXS) loaded by index into one vector (a gather for
 *    IQ3_XXS and IQ2_XS, four loads for IQ2_XXS), byte j of an
 *    entry value j's unsigned magnitude (at most 62);
 *  - signs: the block's 32 sign indices gathered into one vector once, the
 *    8th bit (the parity of the 7, q_iq_ksigns) added by two nibble lookups,
 *    then per group its 4 sign bytes spread to their 8 values each by a
 *    byte shuffle, the value's bit kept and 127 added: a negative byte
 *    where it is set, 127 where not (what sign needs: no compare);
 *  - scales: the integer 2 s + 1 of each group of 16 (the format's scale is
 *    d (2 s + 1) / 8, IQ3_XXS / 4), as int16 words by a byte shuffle.
 * The product with a token's 32 int8 x is sign (x by the value's sign),
 * maddubs (magnitudes on the unsigned side: pairs at most 2 * 62 * 127, no
 * saturation) and madd by the scales: 8 exact int32 sums of 4 products,
 * each times its 2 s + 1. Those convert to float and take one FMA by the
 * token's d_x of the group; the block's 8 groups are summed that way from
 * zero, the block's sum times d / 8 (/ 4) is added with one more FMA into
 * the token's 8 lanes, reduced in q_hsum8's order at the end.
 *
 * One token decodes each group and multiplies it at once; several tokens
 * (up to Q_IQ_TOKENS per pass) decode a block once into 24 vectors and run
 * every token over them. Both do the same float operations in the same
 * order for a (row, token) (the integer sums are exact however formed), so
 * its result is bitwise the same whatever n_tok and whichever rows share
 * the call. It differs from the portable kernel's (q_iq_dot_act) only in
 * float rounding.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/* What a block's groups share: sign bytes, scales, d. */
struct gblk {
	/* sign bytes: byte 4b + l of the 32 is group b's byte l (bit j: value 8l + j negative); */
	__m256i sg_lo, sg_hi;	/* bytes 0-15 (groups 0-3) in both lanes, bytes 16-31 (groups 4-7) in both */
	uint16_t idx[32];	/* IQ2_XS: grid index of group b's 8 values l at 4b + l */
	__m256i ls;		/* byte 2b: 2 s + 1 of group b's first 16 values, 2b + 1 its second (both lanes) */
	float dw;		/* d / 8 (IQ2), d / 4 (IQ3_XXS) */
};

/* Byte shuffles taking a group's scales to int16 words: low lane byte 2b, high lane 2b + 1. */
#define LSP(b) { 2 * (b), -1, 2 * (b), -1, 2 * (b), -1, 2 * (b), -1, 2 * (b), -1, 2 * (b), -1,	\
	2 * (b), -1, 2 * (b), -1, 2 * (b) + 1, -1, 2 * (b) + 1, -1, 2 * (b) + 1, -1, 2 * (b) + 1, -1,	\
	2 * (b) + 1, -1, 2 * (b) + 1, -1, 2 * (b) + 1, -1, 2 * (b) + 1, -1 }
static const int8_t ls_pick[8][32] __attribute__((aligned(32))) = {
	LSP(0), LSP(1), LSP(2), LSP(3), LSP(4), LSP(5), LSP(6), LSP(7),
};
/* Byte shuffles spreading group b's 4 sign bytes (4 (b % 4) .. of its half) over their 8 values each. */
#define SGP8(k) (k), (k), (k), (k), (k), (k), (k), (k)
#define SGP(b) { SGP8(4 * (b)), SGP8(4 * (b) + 1), SGP8(4 * (b) + 2), SGP8(4 * (b) + 3) }
static const int8_t sg_pick[4][32] __attribute__((aligned(32))) = { SGP(0), SGP(1), SGP(2), SGP(3) };

/*
 * 32 7-bit sign indices to q_iq_ksigns's bytes: the index with the parity
 * of its bits in bit 7 (the parity of each nibble from a 16-entry table).
 */
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

/* The block's 32 sign bytes as two lane-broadcast halves (a group's shuffle stays in its lane). */
INLINE void
signs(__m256i s, struct gblk *o)
{
	o->sg_lo = _mm256_permute2x128_si256(s, s, 0x00);
	o->sg_hi = _mm256_permute2x128_si256(s, s, 0x11);
}

/*
 * IQ2_XXS and IQ3_XXS: 8 words (group b's in word b) of 4 7-bit sign
 * indices and the scale s in the top 4 bits. Their sign bytes into
 * o->sgn, their 2 s + 1 into o->ls.
 */
INLINE void
aux_words(__m256i a, struct gblk *o)
{
	const __m256i m7 = _mm256_set1_epi32(0x7F);
	/* index l (bits 7l ..) to byte l */
	__m256i s = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(a, m7),
	    _mm256_and_si256(_mm256_slli_epi32(a, 1), _mm256_slli_epi32(m7, 8))),
	    _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(a, 2), _mm256_slli_epi32(m7, 16)),
	    _mm256_and_si256(_mm256_slli_epi32(a, 3), _mm256_slli_epi32(m7, 24))));
	/* s of word b to bytes 2b and 2b + 1 of each lane: byte 0 of each word twice, then the lanes joined */
	__m256i ls = _mm256_shuffle_epi8(_mm256_srli_epi32(a, 28), _mm256_broadcastsi128_si256(
	    _mm_setr_epi8(0, 0, 4, 4, 8, 8, 12, 12, -1, -1, -1, -1, -1, -1, -1, -1)));

	signs(ksigns32(s), o);
	ls = _mm256_permute4x64_epi64(ls, _MM_SHUFFLE(2, 0, 2, 0));
	o->ls = _mm256_or_si256(_mm256_add_epi8(ls, ls), _mm256_set1_epi8(1));
}

/* A block's shared parts (t constant in each caller: kern_avx2_iqg_rows_act's three). */
INLINE void
gblk_prep(enum gguf_dtype t, const uint8_t *p, struct gblk *o)
{
	if (t == GGML_TYPE_IQ3_XXS) {
		aux_words(_mm256_loadu_si256((const __m256i *)(p + 66)), o);
		o->dw = h2f(p) * 0.25f;
	} else if (t == GGML_TYPE_IQ2_XXS) {
		/* 8 bytes per group: 4 grid indices, then the word of signs and scale */
		__m256 lo = _mm256_loadu_ps((const float *)(p + 2)), hi = _mm256_loadu_ps((const float *)(p + 34));
		__m256i a = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
		aux_words(_mm256_permute4x64_epi64(a, _MM_SHUFFLE(3, 1, 2, 0)), o);
		o->dw = h2f(p) * 0.125f;
	} else {
		/* IQ2_XS: 32 words of 9-bit grid index | sign index << 9; scale nibbles after them */
		__m256i w0 = _mm256_loadu_si256((const __m256i *)(p + 2));
		__m256i w1 = _mm256_loadu_si256((const __m256i *)(p + 34));
		__m256i m9 = _mm256_set1_epi16(511);
		__m256i s = _mm256_packus_epi16(_mm256_srli_epi16(w0, 9), _mm256_srli_epi16(w1, 9));
		__m128i sc = _mm_loadl_epi64((const __m128i *)(p + 66)), lo4 = _mm_set1_epi8(0x0F);
		__m128i ls = _mm_unpacklo_epi8(_mm_and_si128(sc, lo4), _mm_and_si128(_mm_srli_epi16(sc, 4), lo4));

		_mm256_storeu_si256((__m256i *)o->idx, _mm256_and_si256(w0, m9));
		_mm256_storeu_si256((__m256i *)(o->idx + 16), _mm256_and_si256(w1, m9));
		/* packus interleaves the lanes: groups 0-1, 4-5 | 2-3, 6-7 */
		s = _mm256_permute4x64_epi64(s, _MM_SHUFFLE(3, 1, 2, 0));
		signs(ksigns32(s), o);
		ls = _mm_or_si128(_mm_add_epi8(ls, ls), _mm_set1_epi8(1));
		o->ls = _mm256_broadcastsi128_si256(ls);
		o->dw = h2f(p) * 0.125f;
	}
}

/* Group b of a block: magnitudes, +-1 signs, int16 scales. */
INLINE void
group(enum gguf_dtype t, const uint8_t *p, const struct gblk *o, int b, __m256i *mag, __m256i *sgn,
    __m256i *ls)
{
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i v;

	/* by index: one gather for IQ3_XXS's 8 and IQ2_XS's 4 (faster here), 4 loads for IQ2_XXS (as fast, no index vector) */
	if (t == GGML_TYPE_IQ3_XXS) {
		__m256i i = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 2 + 8 * b)));
		*mag = _mm256_i32gather_epi32((const int *)q_iq3xxs_grid, i, 4);
	} else if (t == GGML_TYPE_IQ2_XXS) {
		const uint8_t *q = p + 2 + 8 * b;
		*mag = _mm256_setr_epi64x((long long)q_iq2xxs_grid[q[0]], (long long)q_iq2xxs_grid[q[1]],
		    (long long)q_iq2xxs_grid[q[2]], (long long)q_iq2xxs_grid[q[3]]);
	} else {
		__m128i i = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(o->idx + 4 * b)));
		*mag = _mm256_i32gather_epi64((const long long *)q_iq2xs_grid, i, 8);
	}
	v = _mm256_and_si256(_mm256_shuffle_epi8(b < 4 ? o->sg_lo : o->sg_hi,
	    _mm256_load_si256((const __m256i *)sg_pick[b % 4])), bit);
	/* the value's bit (0 or 2^j) + 127: 0x80 or more (negative as int8) where set, 127 where clear */
	*sgn = _mm256_add_epi8(v, _mm256_set1_epi8(0x7F));
	*ls = _mm256_shuffle_epi8(o->ls, _mm256_load_si256((const __m256i *)ls_pick[b]));
}

/* acc + (the group's scaled integer sums with x) * dx: the one float step per group */
INLINE __m256
group_dot(__m256i mag, __m256i sgn, __m256i ls, const int8_t *x, float dx, __m256 acc)
{
	__m256i xv = _mm256_loadu_si256((const __m256i *)x);
	__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(xv, sgn)), ls);

	return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dx), acc);
}

/* One row against n_tok <= Q_IQ_TOKENS tokens (ab bytes apart): out[tok * os]. */
INLINE void
row_act(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    float *out, size_t os)
{
	int64_t nb32 = n / 32;
	size_t bb = q_iq_block_bytes(t);
	__m256 acc[Q_IQ_TOKENS];
	struct gblk o;

	for (int tok = 0; tok < n_tok; tok++)
		acc[tok] = _mm256_setzero_ps();
	for (int64_t k = 0; k < n / QK_K; k++) {
		const uint8_t *p = row + (size_t)k * bb;
		gblk_prep(t, p, &o);
		if (n_tok == 1) {
			const float *d = (const float *)act + 8 * k;
			const int8_t *x = (const int8_t *)((const float *)act + 2 * nb32) + QK_K * k;
			__m256 s = _mm256_setzero_ps();
			UNROLL
			for (int b = 0; b < 8; b++) {
				__m256i mag, sgn, ls;
				group(t, p, &o, b, &mag, &sgn, &ls);
				s = group_dot(mag, sgn, ls, x + 32 * b, d[b], s);
			}
			acc[0] = _mm256_fmadd_ps(s, _mm256_set1_ps(o.dw), acc[0]);
			continue;
		}
		__m256i mag[8], sgn[8], ls[8];
		UNROLL
		for (int b = 0; b < 8; b++)
			group(t, p, &o, b, mag + b, sgn + b, ls + b);
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab) + 8 * k;
			const int8_t *x = (const int8_t *)((const float *)(act + (size_t)tok * ab) + 2 * nb32) + QK_K * k;
			__m256 s = _mm256_setzero_ps();
			UNROLL
			for (int b = 0; b < 8; b++)
				s = group_dot(mag[b], sgn[b], ls[b], x + 32 * b, d[b], s);
			acc[tok] = _mm256_fmadd_ps(s, _mm256_set1_ps(o.dw), acc[tok]);
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = q_hsum8(acc[tok]);
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
kern_avx2_iqg_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
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
