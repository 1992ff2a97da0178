/*
 * kern_avx2_iq.c: the AVX2 int8-activation kernel of quant_iq.h's types
 * (Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
 * IQ1_M),
 * the rows_act entry of those types in the avx2 table (the avx512 table's
 * is kern_avx512_iq.c, which decodes blocks through kern_avx2_iq_unpack).
 * The tables point MXFP4, IQ4_NL, IQ4_XS and Q2_K at kern_avx2_iqn.c's
 * kernels, which decode their blocks in registers; this path takes any of
 * the types.
 * A row's block is decoded once (q_iq_unpack) for up to Q_IQ_TOKENS
 * tokens; each 32 values' product with a token is one sign/maddubs/madd
 * sequence giving 8 sums of 4 products (lanes 0-3 the first group of 16,
 * lanes 4-7 the second), scaled by each group's s * d_b and added with FMA
 * into 8 lanes per token, reduced in q_hsum8's order at the end. Each
 * token's operations are the same whatever n_tok is and whichever rows
 * share the call, so a (row, token) result is bitwise batch independent;
 * it differs from the portable kernel's only in float rounding (the same
 * integer sums, scaled and added in another order).
 *
 * The blocks' integer form (struct q_iq_int, q_iq_unpack) is quant's one
 * decoder of these formats; this file reads it through quant_iq.h rather
 * than decoding the lattice types a second time.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/* 32 levels from 16 bytes of nibbles through a 16-entry table (elements 0-15 low nibbles, 16-31 high). */
static inline void
nibbles32(const uint8_t *qs, __m256i table, int8_t *q)
{
	__m128i b = _mm_loadu_si128((const __m128i *)qs);
	__m256i n = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0xF)),
	    _mm_and_si128(b, _mm_set1_epi8(0xF)));

	_mm256_storeu_si256((__m256i *)q, _mm256_shuffle_epi8(table, n));
}

/*
 * q_iq_unpack for the nibble types (IQ4_NL, IQ4_XS, MXFP4) with a table
 * lookup per 32 values: the same levels and scales; false for the others.
 */
static bool
unpack_nibbles(enum gguf_dtype t, const uint8_t *p, struct q_iq_int *o)
{
	const int8_t *tab = t == GGML_TYPE_MXFP4 ? q_mxfp4_values : q_iq4nl_values;
	__m256i table;

	if (t != GGML_TYPE_IQ4_NL && t != GGML_TYPE_IQ4_XS && t != GGML_TYPE_MXFP4)
		return false;
	table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab));
	o->has_m = false;
	if (t == GGML_TYPE_IQ4_XS) {
		float d = q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
		unsigned sh = (unsigned)(p[2] | p[3] << 8);
		for (int b = 0; b < 8; b++) {
			int ls = ((p[4 + b / 2] >> (4 * (b % 2))) & 0xF) | (int)((sh >> (2 * b)) & 3) << 4;
			o->s[2 * b] = o->s[2 * b + 1] = d * (float)(ls - 32);
			nibbles32(p + 8 + 16 * b, table, o->q + 32 * b);
		}
		return true;
	}
	o->s[0] = o->s[1] = t == GGML_TYPE_MXFP4 ? q_mxfp4_scale(p[0]) : q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
	nibbles32(p + (t == GGML_TYPE_MXFP4 ? 1 : 2), table, o->q);
	return true;
}

void
kern_avx2_iq_unpack(enum gguf_dtype t, const uint8_t *p, struct q_iq_int *o)
{
	if (!unpack_nibbles(t, p, o))
		q_iq_unpack(t, p, o);
}

static void
row_act(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    float *out, size_t out_stride)
{
	int64_t bs = q_iq_block_elems(t), nb32 = n / 32;
	size_t bb = q_iq_block_bytes(t);
	struct q_iq_int ib;
	__m256 acc[Q_IQ_TOKENS];
	const __m256i ones8 = _mm256_set1_epi8(1);
	const __m256i ones16 = _mm256_set1_epi16(1);

	for (int tok = 0; tok < n_tok; tok++)
		acc[tok] = _mm256_setzero_ps();
	for (int64_t b = 0; bs > 0 && b < n / bs; b++) {
		kern_avx2_iq_unpack(t, row + (size_t)b * bb, &ib);
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab);
			const int8_t *q = (const int8_t *)(d + 2 * nb32);
			__m256 a = acc[tok];
			for (int c = 0; c < bs / 32; c++) {
				int64_t e0 = b * bs + 32 * c;
				float dx = d[e0 / 32];
				__m256i w = _mm256_loadu_si256((const __m256i *)(ib.q + 32 * c));
				__m256i x = _mm256_loadu_si256((const __m256i *)(q + e0));
				/* |w| times x with w's sign: |products| <= 127 * 127, pairs fit int16 */
				__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w),
				    _mm256_sign_epi8(x, w)), ones16);
				__m256 sc = _mm256_set_m128(_mm_set1_ps(ib.s[2 * c + 1] * dx), _mm_set1_ps(ib.s[2 * c] * dx));
				a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, a);
				if (ib.has_m) {
					/* Q2_K: the offsets times the sums of the rounded x, per 16 */
					__m256i xs = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x), ones16);
					__m256 mv = _mm256_set_m128(_mm_set1_ps(ib.m[2 * c + 1] * dx),
					    _mm_set1_ps(ib.m[2 * c] * dx));
					a = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(xs), mv, a);
				}
			}
			acc[tok] = a;
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * out_stride] = q_hsum8(acc[tok]);
}

bool
kern_avx2_iq_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS)
			row_act(t, W + (size_t)r * rb, act + (size_t)t0 * ab, ab,
			    n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS, n_in,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
	return true;
}
