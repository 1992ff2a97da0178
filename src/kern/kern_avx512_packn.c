/*
 * kern_avx512_packn.c: the avx512 table's kernel of IQ4_NL, MXFP4 and
 * IQ4_XS matrices packed at load (quant_pack.c's layout: Q4_0's vectors of nibble
 * bytes, lane r of a vector 4 bytes of row r of a group of 16), compiled
 * with AVX512 F, VL, BW and VNNI (kern.am).
 *
 * Why packed: kern_avx512_pack.c. These two types are Q4_0's blocks with
 * the nibble mapped through a table of 16 levels (quant_iq.h), so the
 * levels of 16 rows x 4 values come from one vpshufb of a vector of
 * nibbles through the table plus 128 (u = w + 128, unsigned, at most 241:
 * vpdpbusd's first operand), and the token's block sum of x times -128
 * starts the chain of multiply-adds: the integer sum of w x is exact. Per
 * block and group the decoding (4 loads, 4 masks, 4 shifts and masks, 8
 * shuffles) is shared by every token of the tile; per token it is eight
 * vpdpbusd with x broadcast from memory, one conversion, one scale
 * product, one FMA for 16 rows. The unpacked kernel (kern_avx512_iqn.c)
 * pays, per row, about five instructions per 64 values for each token.
 *
 * Scales: IQ4_NL's 16 fp16 d; MXFP4's 16 E8M0 exponent bytes, applied as
 * vscalefps(d_x, e - 128): 2^(e - 128) d_x rounded once, the value the
 * product by the exact float 2^(e - 128) gives (quant_iq.h's q_mxfp4_scale);
 * IQ4_XS's int8 ls - 32 times its super-block's d, exact, once per block.
 *
 * Float order (quant_pack.c's, the avx2 table's too): per (row, token),
 * from acc = 0, for b = 0 .. nb - 1: acc = fma(s_b * d_x,b, (float)isum_b,
 * acc). The same for one token (decode: group_one) as for a tile, for any
 * split of the groups, so results do not depend on the batch.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

#define PACK_NT 8	/* tokens per tile */
#define PACK_CX 8192	/* int32 corrections of a chunk of tokens (32 KiB of stack) */

static inline int32_t
ld32(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* The type's 16 levels plus 128 (unsigned) in every 128-bit lane. */
INLINE __m512i
level_table(enum gguf_dtype t)
{
	__m128i v = _mm_loadu_si128((const __m128i *)(t == GGML_TYPE_MXFP4 ? q_mxfp4_values : q_iq4nl_values));

	return _mm512_broadcast_i32x4(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
}

/*
 * Levels u of block b of group G as 8 vectors, lane r = 4 values of row
 * r: vector j < 4 values 4j .. 4j + 3 (low nibbles), j >= 4 values
 * 16 + 4 (j - 4) .. (high nibbles).
 */
INLINE void
levels(const uint8_t *G, int64_t b, __m512i tab, __m512i *wv)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0F);

	UNROLL
	for (int j = 0; j < 4; j++) {
		__m512i v = _mm512_loadu_si512(G + (size_t)b * 256 + 64 * j);
		wv[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, lo4));
		wv[j + 4] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4));
	}
}

/*
 * The 16 rows' scales of block b (S: the group's scale part, nb blocks):
 * IQ4_NL d, MXFP4 e - 128, IQ4_XS d (ls - 32) (exact).
 */
INLINE __m512
scales(enum gguf_dtype t, const uint8_t *S, int64_t nb, int64_t b)
{
	if (t == GGML_TYPE_IQ4_XS) {
		__m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(S + 16 * nb + 32 * (b / 8))));
		return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
		    _mm_loadu_si128((const __m128i *)(S + 16 * b)))));
	}
	if (t == GGML_TYPE_MXFP4)
		return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(
		    _mm_loadu_si128((const __m128i *)(S + 16 * b))), _mm512_set1_epi32(128)));
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(S + 32 * b)));
}

/* s_b * d_x for the 16 rows */
INLINE __m512
scale_x(enum gguf_dtype t, __m512 ws, __m512 dx)
{
	return t == GGML_TYPE_MXFP4 ? _mm512_scalef_ps(dx, ws) : _mm512_mul_ps(ws, dx);
}

/* -128 x the sum of each block's 32 int8 x, nb blocks of one token. */
INLINE void
corrections(const int8_t *q, int64_t nb, int32_t *cx)
{
	for (int64_t b = 0; b < nb; b++) {
		/* x + 128 is unsigned: its sum of absolute differences from 0 is its sum */
		__m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + 32 * b)),
		    _mm256_set1_epi8((char)0x80));
		__m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
		__m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
		int64_t sum = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128;

		cx[b] = -128 * (int32_t)sum;
	}
}

/* Lane r: the exact sum of row r's w x over the block, x its 32 int8 values, from correction c. */
INLINE __m512i
block_isum(const __m512i *wv, const int8_t *x, int32_t c)
{
	__m512i s0 = _mm512_set1_epi32(c), s1 = _mm512_setzero_si512();

	UNROLL
	for (int j = 0; j < 4; j++) {
		s0 = _mm512_dpbusd_epi32(s0, wv[j], _mm512_set1_epi32(ld32(x + 4 * j)));
		s1 = _mm512_dpbusd_epi32(s1, wv[j + 4], _mm512_set1_epi32(ld32(x + 16 + 4 * j)));
	}
	return _mm512_add_epi32(s0, s1);
}

/*
 * One group (16 rows) times NT tokens of prepared activations, ab bytes
 * apart, cx their corrections (nb apart): acc[k] lane r = row r, token k.
 */
INLINE void
group_tile(enum gguf_dtype t, int NT, const uint8_t *G, int64_t nb, const uint8_t *act, size_t ab,
    const int32_t *cx, __m512 *acc)
{
	const uint8_t *S = G + (size_t)nb * 256;
	const __m512i tab = level_table(t);
	const float *dx[PACK_NT];
	const int8_t *qx[PACK_NT];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		qx[k] = (const int8_t *)(dx[k] + 2 * nb);
		acc[k] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		__m512 ws = scales(t, S, nb, b);
		__m512i wv[8];

		levels(G, b, tab, wv);
		UNROLL
		for (int k = 0; k < NT; k++) {
			__m512i is = block_isum(wv, qx[k] + 32 * b, cx[(size_t)k * (size_t)nb + (size_t)b]);
			acc[k] = _mm512_fmadd_ps(scale_x(t, ws, _mm512_set1_ps(dx[k][b])), _mm512_cvtepi32_ps(is),
			    acc[k]);
		}
	}
}

/*
 * One token (decode) through NG groups side by side: the block's 32 int8
 * x broadcast into 8 registers once for every group, with its d and
 * correction. Per (row, block) group_tile's arithmetic.
 */
INLINE void
group_one(enum gguf_dtype t, int NG, const uint8_t *G, size_t gb, int64_t nb, const uint8_t *act,
    const int32_t *cx, __m512 *acc)
{
	const __m512i tab = level_table(t);
	const float *dx = (const float *)act;
	const int8_t *qx = (const int8_t *)(dx + 2 * nb);

	UNROLL
	for (int g = 0; g < NG; g++)
		acc[g] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const int8_t *x = qx + 32 * b;
		__m512i xv[8];
		__m512 d = _mm512_set1_ps(dx[b]);

		UNROLL
		for (int j = 0; j < 8; j++)
			xv[j] = _mm512_set1_epi32(ld32(x + 4 * j));
		UNROLL
		for (int g = 0; g < NG; g++) {
			const uint8_t *Gg = G + (size_t)g * gb;
			__m512 ws = scales(t, Gg + (size_t)nb * 256, nb, b);
			__m512i wv[8], s0 = _mm512_set1_epi32(cx[b]), s1 = _mm512_setzero_si512();

			levels(Gg, b, tab, wv);
			UNROLL
			for (int j = 0; j < 4; j++) {
				s0 = _mm512_dpbusd_epi32(s0, wv[j], xv[j]);
				s1 = _mm512_dpbusd_epi32(s1, wv[j + 4], xv[j + 4]);
			}
			acc[g] = _mm512_fmadd_ps(scale_x(t, ws, d), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
			    acc[g]);
		}
	}
}

/* Groups [g0, g1) for one token, ONE_NG at a time (the rest one by one). */
#define ONE_NG 2

INLINE void
packed_one(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb);
	int32_t cx[PACK_CX / PACK_NT];	/* nb <= PACK_CX / PACK_NT (kern_avx512_packn_fits) */

	corrections((const int8_t *)act + 8 * nb, nb, cx);
	for (int64_t g = g0; g < g1;) {
		int ng = g1 - g >= ONE_NG ? ONE_NG : 1;
		__m512 acc[ONE_NG];

		if (ng == ONE_NG)
			group_one(t, ONE_NG, P + (size_t)g * gb, gb, nb, act, cx, acc);
		else
			group_one(t, 1, P + (size_t)g * gb, gb, nb, act, cx, acc);
		for (int i = 0; i < ng; i++, g++) {
			int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;

			_mm512_mask_storeu_ps(y + r, (__mmask16)((1u << nr) - 1), acc[i]);
		}
	}
}

/*
 * Tokens in chunks whose corrections fit the stack (at most 64, so a
 * chunk's activations stay in L2 while every group passes over them), each
 * chunk through groups [g0, g1), PACK_NT tokens at a time.
 */
INLINE void
packed_rows(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	int64_t nb = n_in / 32;
	size_t gb = q_pack_group_bytes(t, nb), ab = q_act_bytes(n_in);
	int32_t cx[PACK_CX];
	int tc = (int)(PACK_CX / nb) / PACK_NT * PACK_NT;

	if (tc > 64)
		tc = 64;
	if (n_tok == 1) {
		packed_one(t, P, act, n_in, y, n_out, g0, g1);
		return;
	}
	for (int t0 = 0; t0 < n_tok; t0 += tc) {
		int nc = n_tok - t0 < tc ? n_tok - t0 : tc;

		for (int k = 0; k < nc; k++)
			corrections((const int8_t *)(act + (size_t)(t0 + k) * ab) + 8 * nb, nb,
			    cx + (size_t)k * (size_t)nb);
		for (int64_t g = g0; g < g1; g++) {
			const uint8_t *G = P + (size_t)g * gb;
			int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;
			__mmask16 m = (__mmask16)((1u << nr) - 1);

			for (int k0 = 0; k0 < nc; k0 += PACK_NT) {
				const uint8_t *a = act + (size_t)(t0 + k0) * ab;
				const int32_t *c = cx + (size_t)k0 * (size_t)nb;
				int nt = nc - k0 < PACK_NT ? nc - k0 : PACK_NT;
				__m512 acc[PACK_NT];

				switch (nt) {
				case 8: group_tile(t, 8, G, nb, a, ab, c, acc); break;
				case 7: group_tile(t, 7, G, nb, a, ab, c, acc); break;
				case 6: group_tile(t, 6, G, nb, a, ab, c, acc); break;
				case 5: group_tile(t, 5, G, nb, a, ab, c, acc); break;
				case 4: group_tile(t, 4, G, nb, a, ab, c, acc); break;
				case 3: group_tile(t, 3, G, nb, a, ab, c, acc); break;
				case 2: group_tile(t, 2, G, nb, a, ab, c, acc); break;
				default: group_tile(t, 1, G, nb, a, ab, c, acc); break;
				}
				for (int k = 0; k < nt; k++)
					_mm512_mask_storeu_ps(y + (size_t)(t0 + k0 + k) * (size_t)n_out + (size_t)r,
					    m, acc[k]);
			}
		}
	}
}

void
kern_avx512_packed_n(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	if (t == GGML_TYPE_MXFP4)
		packed_rows(GGML_TYPE_MXFP4, P, act, n_tok, n_in, y, n_out, g0, g1);
	else if (t == GGML_TYPE_IQ4_XS)
		packed_rows(GGML_TYPE_IQ4_XS, P, act, n_tok, n_in, y, n_out, g0, g1);
	else
		packed_rows(GGML_TYPE_IQ4_NL, P, act, n_tok, n_in, y, n_out, g0, g1);
}
