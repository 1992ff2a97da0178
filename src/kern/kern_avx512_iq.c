/*
 * kern_avx512_iq.c: the avx512 table's int8-activation kernel of
 * quant_iq.h's types (Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ1_S, IQ1_M), compiled with AVX512 F, VL, BW and VNNI (kern.am).
 * The table points MXFP4, IQ4_NL, IQ4_XS and Q2_K at kern_avx512_iqn.c's
 * kernels, which decode their blocks in registers; this path takes any of
 * the types.
 *
 * As the AVX2 kernel (kern_avx2_iq.c), a row's blocks are decoded once to
 * signed levels and per-16 scales (kern_avx2_iq_unpack: quant's one decoder
 * of the lattice types, with a table lookup for the nibble types) for up to
 * Q_IQ_TOKENS tokens. The unit of work here is a pair of 32-value groups:
 * the levels' magnitudes (abs) go on dpbusd's unsigned side and x, negated
 * where the level is negative (a byte mask from the levels' sign bits), on
 * its signed side, so one 512-bit dpbusd forms the 16 four-value lane sums
 * of 64 values (lanes 4g .. 4g + 3 the pair's group g of 16). Lane sums are
 * the exact integers: |level| <= 128, |x| <= 127. Each group's scale times
 * its block's d_x multiplies them with one FMA into the token's 16-lane
 * accumulator; Q2_K's offsets (m times the sum of the rounded x of each 16,
 * from a dpbusd of ones) are subtracted with one more. A row whose 32-value
 * groups are odd in number ends with a half step on lanes 0-7 (a 256-bit
 * dpbusd into a separate 8-lane accumulator), and a token's result is the
 * 16-lane sum plus that 8-lane sum.
 *
 * Batch independence: each (row, token) runs this same sequence whatever
 * n_tok is and whichever rows share the call, so its result is bitwise
 * the same in any batch. It differs from the AVX2 kernel's only in float
 * rounding (the same integer sums, scaled and added in another order).
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

#include <string.h>

/* lanes 4q .. 4q + 3 take element q: the four groups of 16 of a pair */
#define QUAD_IDX _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0)
/* lanes 0-7 take element 0, lanes 8-15 element 1: the pair's two blocks of x */
#define PAIR_IDX _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)

/* Up to 256 values of a row as levels and per-16 scales (offsets for Q2_K). */
struct chunk {
	struct q_iq_int b;
	int n32;		/* 32-value groups held */
};

/* The chunk of values e0 .. e0 + 256 (or the row's end) of a row of type t. */
static void
load_chunk(enum gguf_dtype t, const uint8_t *row, int64_t e0, int64_t n, struct chunk *c)
{
	int64_t bs = q_iq_block_elems(t);
	size_t bb = q_iq_block_bytes(t);
	struct q_iq_int ib;

	if (bs == QK_K) {
		kern_avx2_iq_unpack(t, row + (size_t)(e0 / bs) * bb, &c->b);
		c->n32 = QK_K / 32;
		return;
	}
	/* 32-value blocks (IQ4_NL, MXFP4): up to 8 of them */
	c->b.has_m = false;
	c->n32 = (int)((n - e0) / 32 < 8 ? (n - e0) / 32 : 8);
	for (int j = 0; j < c->n32; j++) {
		kern_avx2_iq_unpack(t, row + (size_t)(e0 / 32 + j) * bb, &ib);
		memcpy(c->b.q + 32 * j, ib.q, 32);
		c->b.s[2 * j] = ib.s[0];
		c->b.s[2 * j + 1] = ib.s[1];
	}
}

static void
row_act(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    float *out, size_t out_stride)
{
	int64_t nb32 = n / 32;
	struct chunk ch;
	__m512 acc[Q_IQ_TOKENS];
	__m256 half[Q_IQ_TOKENS];
	const __m512i ones8 = _mm512_set1_epi8(1);

	for (int tok = 0; tok < n_tok; tok++) {
		acc[tok] = _mm512_setzero_ps();
		half[tok] = _mm256_setzero_ps();
	}
	for (int64_t e0 = 0; e0 < n; e0 += 32 * (int64_t)ch.n32) {
		/* per pair, once for all tokens: the levels' magnitudes, sign mask, scales (offsets) */
		__m512i wabs[4];
		__mmask64 wneg[4];
		__m512 sv[4], mv[4];

		load_chunk(t, row, e0, n, &ch);
		for (int c = 0; c + 2 <= ch.n32; c += 2) {
			__m512i w = _mm512_loadu_si512(ch.b.q + 32 * c);
			wabs[c / 2] = _mm512_abs_epi8(w);
			wneg[c / 2] = _mm512_movepi8_mask(w);
			sv[c / 2] = _mm512_permutexvar_ps(QUAD_IDX, _mm512_castps128_ps512(_mm_loadu_ps(ch.b.s + 2 * c)));
			mv[c / 2] = ch.b.has_m ? _mm512_permutexvar_ps(QUAD_IDX,
			    _mm512_castps128_ps512(_mm_loadu_ps(ch.b.m + 2 * c))) : _mm512_setzero_ps();
		}
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab);
			const int8_t *q = (const int8_t *)(d + 2 * nb32);
			__m512 a = acc[tok];
			int c;

			for (c = 0; c + 2 <= ch.n32; c += 2) {
				int64_t g = e0 / 32 + c;	/* the pair's first block of x */
				__m512i x = _mm512_loadu_si512(q + 32 * g);
				__m512i sx = _mm512_mask_sub_epi8(x, wneg[c / 2], _mm512_setzero_si512(), x);
				__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs[c / 2], sx);
				__m512 dx = _mm512_permutexvar_ps(PAIR_IDX, _mm512_castps128_ps512(
				    _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(d + g)))));
				a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sv[c / 2], dx), a);
				if (ch.b.has_m) {
					/* Q2_K: the offsets times the sums of the rounded x, per 16 */
					__m512i xs = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, x);
					a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(xs), _mm512_mul_ps(mv[c / 2], dx), a);
				}
			}
			acc[tok] = a;
			if (c < ch.n32) {
				/* the row's last, unpaired group of 32 (only 32-value blocks leave one) */
				int64_t g = e0 / 32 + c;
				__m256i w = _mm256_loadu_si256((const __m256i *)(ch.b.q + 32 * c));
				__m256i x = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
				__m256i sx = _mm256_mask_sub_epi8(x, _mm256_movepi8_mask(w), _mm256_setzero_si256(), x);
				__m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), sx);
				__m256 sc = _mm256_set_m128(_mm_set1_ps(ch.b.s[2 * c + 1] * d[g]),
				    _mm_set1_ps(ch.b.s[2 * c] * d[g]));
				half[tok] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, half[tok]);
			}
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * out_stride] = _mm512_reduce_add_ps(acc[tok]) + q_hsum8(half[tok]);
}

bool
kern_avx512_iq_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % q_iq_block_elems(t) != 0)
		return false;
	for (int64_t r = r0; r < r1; r++)
		for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS)
			row_act(t, W + (size_t)r * rb, act + (size_t)t0 * ab, ab,
			    n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS, n_in,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
	return true;
}
