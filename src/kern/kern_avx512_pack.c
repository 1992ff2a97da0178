/*
 * kern_avx512_pack.c: the avx512 table's kernel of Q8_0, Q4_0, Q4_1 and Q5_0
 * matrices packed at load (quant.h's q_pack, which describes the layout:
 * groups of 16 rows whose lanes are rows), compiled with AVX512 F, VL, BW
 * and VNNI (kern.am).
 *
 * The tiled kernels read a weight row as it is stored: one 512-bit
 * multiply-add covers 64 values of ONE row, and each (row, token) then pays
 * a conversion, a scale product and an FMA per 64 values, plus the set-up of
 * every row's levels and scales: about 8 multiply-adds per vector
 * instruction, which on a core with two 512-bit pipes caps Q8_0 near 100 G
 * multiply-adds/s. Packed, one dpbusd multiplies 4 values of 16 rows by the
 * same 4 values of x (broadcast from memory), eight of them form each row's
 * exact integer block sum, and the float work (one conversion, one scale
 * product, one FMA) is shared by 16 rows: about 40 multiply-adds per
 * instruction, and no horizontal sum at the end.
 *
 * Float order, the same for any number of tokens and any split of the
 * groups between threads (batch independence): per (row, token), for b =
 * 0 .. nb - 1: acc = fma(scale_w[b] * d_x[b], (float)isum[b], acc), from
 * acc = 0 (Q4_1: then acc = fma(m_w[b], xsum[b], acc)). Integer sums are
 * exact, so how they are formed does not matter.
 */
#include "kern_int.h"

#include <immintrin.h>
#include <string.h>

#define PACK_NT 8	/* tokens per tile */
#define PACK_CX 8192	/* int32 corrections of a chunk of tokens (32 KiB of stack) */

#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 8")

static inline int32_t
ld32(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return v;
}

/*
 * Levels of block b of group G as 8 vectors of unsigned bytes, lane r = 4
 * consecutive values of row r: vector j takes x[4j .. 4j + 3].
 */
INLINE void
levels(enum gguf_dtype t, const uint8_t *G, int64_t nb, int64_t b, __m512i *wv)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0F);

	if (t == GGML_TYPE_Q8_0) {
		UNROLL
		for (int j = 0; j < 8; j++)
			wv[j] = _mm512_loadu_si512(G + (size_t)b * 512 + 64 * j);
		return;
	}
	if (t == GGML_TYPE_Q5_0) {
		/*
		 * bit j of each byte is vector j's fifth bit (quant_pack.c): masked
		 * to bits j and j + 4, vector j's moves up by 4 - j and vector j +
		 * 4's down by j to bit 4 with zeros above it, and one select
		 * (vpternlogd 0xE4) takes bits 0-3 from the nibble and 4-7 from
		 * there: 4 masks, 7 shifts, 8 selects and the high nibbles' 4
		 * shifts (23 instructions), where the nibbles' 12, a byte test and
		 * a masked add per vector took 28; the same levels, 1.10x at one
		 * token (docs/BENCHMARKS.md, 2026-11-29 night).
		 */
		__m512i qh = _mm512_loadu_si512(G + (size_t)nb * 256 + (size_t)b * 64);
		UNROLL
		for (int j = 0; j < 4; j++) {
			__m512i v = _mm512_loadu_si512(G + (size_t)b * 256 + 64 * j);
			__m512i hj = _mm512_and_si512(qh, _mm512_set1_epi8((char)(0x11 << j)));
			wv[j] = _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(hj, 4 - j), lo4, 0xE4);
			wv[j + 4] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), _mm512_srli_epi16(hj, j),
			    lo4, 0xE4);
		}
		return;
	}
	/*
	 * Q4_0/Q4_1's high nibbles are multiplied where they lie, as 16 u (at
	 * most 240, still a byte): their chain's sum is 16 times theirs, shifted
	 * back exactly (group_tile); a shift fewer per vector.
	 */
	const bool q4 = t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1;
	UNROLL
	for (int j = 0; j < 4; j++) {
		__m512i v = _mm512_loadu_si512(G + (size_t)b * 256 + 64 * j);
		wv[j] = _mm512_and_si512(v, lo4);
		wv[j + 4] = q4 ? _mm512_andnot_si512(lo4, v) : _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
	}
}

/* -o x the sum of each block's 32 int8 x, nb blocks of one token (o: the levels' offset). */
INLINE void
corrections(enum gguf_dtype t, const int8_t *q, int64_t nb, int32_t *cx)
{
	const int32_t o = t == GGML_TYPE_Q8_0 ? 128 : t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 0;

	for (int64_t b = 0; b < nb; b++) {
		/* x + 128 is unsigned: its sum of absolute differences from 0 is its sum */
		__m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + 32 * b)),
		    _mm256_set1_epi8((char)0x80));
		__m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
		__m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
		int64_t sum = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128;

		cx[b] = -o * (int32_t)sum;
	}
}

/*
 * One group (16 rows) times NT tokens of prepared activations, ab bytes
 * apart, cx their corrections (nb apart): acc[k] lane r = row r, token k.
 * Two chains of four multiply-adds per token and block keep the pipes fed
 * while a chain waits on its last result.
 */
INLINE void
group_tile(enum gguf_dtype t, int NT, const uint8_t *G, int64_t nb, const uint8_t *act, size_t ab,
    const int32_t *cx, __m512 *acc)
{
	const uint8_t *S = G + (size_t)nb * (q_pack_level_bytes(t) + q_pack_high_bytes(t));
	const size_t sb = q_pack_scale_bytes(t);
	const float *dx[PACK_NT];
	const int8_t *qx[PACK_NT];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		qx[k] = (const int8_t *)(dx[k] + 2 * nb);
		acc[k] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		__m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(S + (size_t)b * sb)));
		/* Q4_1's m, after its d */
		__m512 wm = t == GGML_TYPE_Q4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(S +
		    (size_t)b * sb + Q_PACK_SCALE_BYTES))) : _mm512_setzero_ps();
		__m512i wv[8];

		levels(t, G, nb, b, wv);
		UNROLL
		for (int k = 0; k < NT; k++) {
			const int8_t *x = qx[k] + 32 * b;
			__m512i s0 = _mm512_set1_epi32(cx[(size_t)k * (size_t)nb + (size_t)b]);
			__m512i s1 = _mm512_setzero_si512();

			if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1) {
				/* s0: low nibbles (x[4j ..]), s1: 16 x the high ones (x[16 + 4j ..]) */
				UNROLL
				for (int j = 0; j < 4; j++) {
					s0 = _mm512_dpbusd_epi32(s0, wv[j], _mm512_set1_epi32(ld32(x + 4 * j)));
					s1 = _mm512_dpbusd_epi32(s1, wv[j + 4], _mm512_set1_epi32(ld32(x + 16 + 4 * j)));
				}
				s1 = _mm512_srai_epi32(s1, 4);
			} else {
				/* vector j takes x[4j ..] for Q8_0; Q5_0's 4 + j take x[16 + 4j ..] */
				UNROLL
				for (int j = 0; j < 8; j += 2) {
					int xo0 = t == GGML_TYPE_Q8_0 || j < 4 ? 4 * j : 16 + 4 * (j - 4);
					int xo1 = t == GGML_TYPE_Q8_0 || j + 1 < 4 ? 4 * (j + 1) : 16 + 4 * (j - 3);
					s0 = _mm512_dpbusd_epi32(s0, wv[j], _mm512_set1_epi32(ld32(x + xo0)));
					s1 = _mm512_dpbusd_epi32(s1, wv[j + 1], _mm512_set1_epi32(ld32(x + xo1)));
				}
			}
			acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(dx[k][b])),
			    _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[k]);
			if (t == GGML_TYPE_Q4_1)	/* the token's sum of x: dx[k] + nb */
				acc[k] = _mm512_fmadd_ps(wm, _mm512_set1_ps(dx[k][nb + b]), acc[k]);
		}
	}
}

/*
 * One token (decode) through NG groups side by side: the block's 32 int8
 * x are broadcast into 8 registers once and serve every group's 8
 * multiply-adds, with the token's d and correction, instead of being
 * loaded again for each group (the activation's int8 form kept in
 * registers across rows). Vector j of every type takes x[4j ..] (Q4_0,
 * Q4_1: the high nibbles of vectors 4-7 are x[16 ..]). Per (row, block)
 * the arithmetic is group_tile's: the same exact integer sum, then
 * fma(scale_w * d_x, (float)isum, acc) (Q4_1: and its m's FMA).
 */
INLINE void
group_one(enum gguf_dtype t, int NG, const uint8_t *G, size_t gb, int64_t nb, const uint8_t *act,
    const int32_t *cx, __m512 *acc)
{
	const size_t sb = q_pack_scale_bytes(t), so = (size_t)nb * (q_pack_level_bytes(t) +
	    q_pack_high_bytes(t));
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
			const uint8_t *Gg = G + (size_t)g * gb, *S = Gg + so + (size_t)b * sb;
			__m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)S));
			__m512i wv[8], s0 = _mm512_set1_epi32(cx[b]), s1 = _mm512_setzero_si512();

			levels(t, Gg, nb, b, wv);
			UNROLL
			for (int j = 0; j < 4; j++) {
				s0 = _mm512_dpbusd_epi32(s0, wv[j], xv[j]);
				s1 = _mm512_dpbusd_epi32(s1, wv[j + 4], xv[j + 4]);
			}
			if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1)
				s1 = _mm512_srai_epi32(s1, 4);
			acc[g] = _mm512_fmadd_ps(_mm512_mul_ps(ws, d),
			    _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[g]);
			if (t == GGML_TYPE_Q4_1)
				acc[g] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(S +
				    Q_PACK_SCALE_BYTES))), _mm512_set1_ps(dx[nb + b]), acc[g]);
		}
	}
}

/*
 * Groups [g0, g1) for one token, four at a time (the rest by two, then
 * one): four groups side by side share each block's x registers among 32
 * multiply-adds instead of 16 (bench/qmm, cache-resident, against two:
 * Q8_0 1.07x, Q4_0 1.03x, Q5_0 1.02x, Q4_1 the same; docs/BENCHMARKS.md).
 */
INLINE void
packed_one(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb);
	int32_t cx[PACK_CX / PACK_NT];	/* nb <= PACK_CX / PACK_NT (kern_avx512_pack_fits) */

	corrections(t, (const int8_t *)act + 8 * nb, nb, cx);
	for (int64_t g = g0; g < g1;) {
		int ng = g1 - g >= 4 ? 4 : g1 - g >= 2 ? 2 : 1;
		__m512 acc[4];

		if (ng == 4)
			group_one(t, 4, P + (size_t)g * gb, gb, nb, act, cx, acc);
		else if (ng == 2)
			group_one(t, 2, P + (size_t)g * gb, gb, nb, act, cx, acc);
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
 * chunk through groups [g0, g1), eight tokens at a time.
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
			corrections(t, (const int8_t *)(act + (size_t)(t0 + k) * ab) + 8 * nb, nb,
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

#define PACKED(T, name)								\
static void									\
name(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in,	\
    float *y, int64_t n_out, int64_t g0, int64_t g1)				\
{										\
	(void)t;								\
	packed_rows(T, P, act, n_tok, n_in, y, n_out, g0, g1);			\
}
PACKED(GGML_TYPE_Q8_0, packed_q8_0)
PACKED(GGML_TYPE_Q4_0, packed_q4_0)
PACKED(GGML_TYPE_Q4_1, packed_q4_1)
PACKED(GGML_TYPE_Q5_0, packed_q5_0)

kern_packed_fn *const kern_avx512_packed[KERN_NTYPE] = {
	[GGML_TYPE_Q8_0] = packed_q8_0, [GGML_TYPE_Q4_0] = packed_q4_0, [GGML_TYPE_Q5_0] = packed_q5_0,
	[GGML_TYPE_Q4_1] = packed_q4_1,
	[GGML_TYPE_Q4_K] = kern_avx512_packed_k, [GGML_TYPE_Q5_K] = kern_avx512_packed_k,
	[GGML_TYPE_Q6_K] = kern_avx512_packed_k,
	[GGML_TYPE_IQ4_NL] = kern_avx512_packed_n, [GGML_TYPE_MXFP4] = kern_avx512_packed_n,
	[GGML_TYPE_IQ4_XS] = kern_avx512_packed_n,
};

/* The corrections of a chunk of PACK_NT tokens must fit the stack array. */
bool
kern_avx512_pack_fits(int64_t n_in)
{
	return n_in > 0 && n_in % 32 == 0 && n_in / 32 * PACK_NT <= PACK_CX;
}
