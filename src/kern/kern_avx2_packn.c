/*
 * kern_avx2_packn.c: the avx2 table's kernel of IQ4_NL, MXFP4 and IQ4_XS
 * matrices packed at load (quant_pack.c's layout: Q4_0's vectors of nibble bytes,
 * 32-bit lane r of a 64-byte vector 4 bytes of row r of a group of 16),
 * compiled with -mavx2 -mfma -mf16c, and again with -mavxvnni
 * -DKERN_AVXVNNI for the avx2vnni table (kern.am).
 *
 * As kern_avx2_pack.c, a 256-bit vector holds half a group (rows 8h ..
 * 8h + 7 at byte 32h): a block's multiply-adds serve 8 rows with 4 values
 * of x broadcast to every lane, and its float work (a conversion, the
 * scale product, an FMA) is shared by those rows, where the unpacked
 * kernel (kern_avx2_iqn.c) pays it per row. The nibbles become levels by
 * one vpshufb per vector through the type's table (quant_iq.h), shared by
 * every token of the tile.
 *
 * Integer sums, exact either way (so avx2 and avx2vnni agree bitwise):
 * with AVX-VNNI the table gives u = w + 128 (unsigned, at most 241), one
 * vpdpbusd per 4 values of 8 rows, the chain started from the token's
 * block sum of x times -128. Without it, IQ4_NL's and IQ4_XS's table
 * gives w itself, and vpmaddubsw takes |w| (at most 127) and x with w's
 * sign, then vpmaddwd by 1 widens each vector (a pair is at most 2 * 127 *
 * 127 = 32258: no saturation, but two vectors' pairs could be, so no int16
 * sums across vectors), as Q8_0's packed kernel does; MXFP4's levels are
 * small (|w| <= 12), so its table gives u = w + 12 (0 .. 24), vpmaddubsw
 * takes u and x as they are (a pair at most 6096), four vectors' pairs are
 * added in int16 (24384) before each vpmaddwd, and the chain starts from
 * -12 x.
 *
 * Scales: IQ4_NL's fp16 d; MXFP4's E8M0 exponent e as the float 2^(e -
 * 128), built from its bits (exact, subnormal for e < 2); IQ4_XS's int8
 * ls - 32 times its super-block's d (exact); then times d_x.
 *
 * Float order (quant_pack.c's, the same as the avx512 table's packed
 * kernel): per (row, token), from acc = 0, for b = 0 .. nb - 1: acc =
 * fma(s_b * d_x,b, (float)isum_b, acc), for any number of tokens (decode:
 * group_one) and any split of the groups.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/* Tokens per tile: 8, as kern_avx2_pack.c's (a block's nibbles turned into levels once for 8) */
#define PACK_NT 8
#define PACK_CX 8192	/* int32 corrections of a chunk of tokens (32 KiB of stack) */
#define PACK_NB (PACK_CX / 4)	/* blocks per row pack_fits takes: 4 tokens' corrections fit */

/* As kern_avx2_pack.c's: broadcasts of x loaded from memory by each half, not spilled. */
INLINE const int8_t *
opaque(const int8_t *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* x[o .. o + 3] in every 32-bit lane */
INLINE __m256i
bcast4(const int8_t *x, int o)
{
	int32_t v;

	memcpy(&v, x + o, 4);
	return _mm256_set1_epi32(v);
}

/* The levels' offset: u = w + OFFSET (0: the signed levels themselves) */
#ifdef KERN_AVXVNNI
#define OFFSET(t) 128
#else
#define OFFSET(t) ((t) == GGML_TYPE_MXFP4 ? 12 : 0)
#endif

/* The type's 16 levels plus OFFSET in both 128-bit halves. */
INLINE __m256i
level_table(enum gguf_dtype t)
{
	__m128i v = _mm_loadu_si128((const __m128i *)(t == GGML_TYPE_MXFP4 ? q_mxfp4_values : q_iq4nl_values));

	return _mm256_broadcastsi128_si256(_mm_add_epi8(v, _mm_set1_epi8((char)OFFSET(t))));
}

/*
 * Levels of block b, rows 8h .. 8h + 7 of group G: vector j < 4 values
 * 4j .. 4j + 3 (low nibbles), j >= 4 values 16 + 4 (j - 4) .. (high).
 */
INLINE void
levels(const uint8_t *G, int64_t b, int h, __m256i tab, __m256i *wv)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F);

	UNROLL
	for (int j = 0; j < 4; j++) {
		__m256i v = ld256(G + (size_t)b * 256 + 64 * j + 32 * h);
		wv[j] = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, lo4));
		wv[j + 4] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4));
	}
}

/*
 * Rows 8h .. 8h + 7's scales of block b (S: the group's scale part, nb
 * blocks): IQ4_NL d, MXFP4 2^(e - 128), IQ4_XS d (ls - 32) (exact).
 */
INLINE __m256
scales(enum gguf_dtype t, const uint8_t *S, int64_t nb, int64_t b, int h)
{
	if (t == GGML_TYPE_IQ4_XS) {
		int64_t s8;
		memcpy(&s8, S + 16 * b + 8 * h, 8);
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + 16 * nb + 32 * (b / 8) + 16 * h)));
		return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(s8))));
	}
	if (t == GGML_TYPE_MXFP4) {
		int64_t e8;
		memcpy(&e8, S + 16 * b + 8 * h, 8);
		__m256i ev = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(e8));
		/* 2^(e - 128) is the float (e - 1) << 23 for e >= 2, the subnormal 2^21 << e below */
		__m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(ev, _mm256_set1_epi32(1)), 23);
		__m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(1 << 21), ev);
		return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, nrm, _mm256_cmpgt_epi32(ev, _mm256_set1_epi32(1))));
	}
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + 32 * b + 16 * h)));
}

/* Lane r: the exact sum of row r's w x over the block, from c (the token's correction). */
INLINE __m256i
block_isum(enum gguf_dtype t, const __m256i *wv, const int8_t *x, __m256i c)
{
#ifdef KERN_AVXVNNI
	__m256i s0 = c, s1 = _mm256_setzero_si256();
	UNROLL
	for (int j = 0; j < 4; j++) {
		s0 = _mm256_dpbusd_avx_epi32(s0, wv[j], bcast4(x, 4 * j));
		s1 = _mm256_dpbusd_avx_epi32(s1, wv[j + 4], bcast4(x, 16 + 4 * j));
	}
	(void)t;
	return _mm256_add_epi32(s0, s1);
#else
	const __m256i one16 = _mm256_set1_epi16(1);
	__m256i s = c;
	if (t == GGML_TYPE_MXFP4) {	/* u <= 24: four vectors' pairs in int16, then widened */
		UNROLL
		for (int j0 = 0; j0 < 8; j0 += 4) {
			__m256i p = _mm256_maddubs_epi16(wv[j0], bcast4(x, j0 < 4 ? 0 : 16));
			UNROLL
			for (int j = j0 + 1; j < j0 + 4; j++)
				p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wv[j],
				    bcast4(x, j < 4 ? 4 * j : 16 + 4 * (j - 4))));
			s = _mm256_add_epi32(s, _mm256_madd_epi16(p, one16));
		}
		return s;
	}
	UNROLL
	for (int j = 0; j < 8; j++) {
		__m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv[j]),
		    _mm256_sign_epi8(bcast4(x, j < 4 ? 4 * j : 16 + 4 * (j - 4)), wv[j]));
		s = _mm256_add_epi32(s, _mm256_madd_epi16(p, one16));
	}
	return s;
#endif
}

/* -OFFSET x the sum of each block's 32 int8 x, nb blocks of one token. */
INLINE void
corrections(enum gguf_dtype t, const int8_t *q, int64_t nb, int32_t *cx)
{
	const int32_t o = OFFSET(t);

	(void)t;
	if (o == 0) {
		memset(cx, 0, (size_t)nb * sizeof *cx);
		return;
	}
	for (int64_t b = 0; b < nb; b++) {
		/* x + 128 is unsigned: its sum of absolute differences from 0 is its sum */
		__m256i u = _mm256_xor_si256(ld256(q + 32 * b), _mm256_set1_epi8((char)0x80));
		__m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
		__m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
		int64_t sum = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128;

		cx[b] = -o * (int32_t)sum;
	}
}

/*
 * Rows 8h .. 8h + 7 of one group times NT tokens of prepared activations,
 * ab bytes apart, cx their corrections (nb apart): acc[k] lane r = row
 * 8h + r, token k.
 */
INLINE void
half_tile(enum gguf_dtype t, int NT, const uint8_t *G, int64_t nb, int h, const uint8_t *act,
    size_t ab, const int32_t *cx, __m256 *acc)
{
	const uint8_t *S = G + (size_t)nb * 256;
	const __m256i tab = level_table(t);
	const float *dx[PACK_NT];
	const int8_t *qx[PACK_NT];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		qx[k] = (const int8_t *)(dx[k] + 2 * nb);
		acc[k] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		__m256 ws = scales(t, S, nb, b, h);
		__m256i wv[8];

		levels(G, b, h, tab, wv);
		UNROLL
		for (int k = 0; k < NT; k++) {
			__m256i s = block_isum(t, wv, qx[k] + 32 * b,
			    _mm256_set1_epi32(cx[(size_t)k * (size_t)nb + (size_t)b]));
			acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(ws, _mm256_set1_ps(dx[k][b])),
			    _mm256_cvtepi32_ps(s), acc[k]);
		}
	}
}

/* Rows [8h, 8h + n) of the group from acc: n < 8 on the partial last group. */
INLINE void
store_rows(float *y, __m256 acc, int n)
{
	if (n >= 8) {
		_mm256_storeu_ps(y, acc);
		return;
	}
	float v[8];
	_mm256_storeu_ps(v, acc);
	memcpy(y, v, (size_t)n * sizeof *y);
}

/*
 * One token (decode) through one group, both halves at each block, the
 * group's levels and scales prefetched PF_BYTES of levels ahead (into the
 * next group past the last block), as kern_avx2_pack.c's group_one: the
 * packed copies lie in 4 KiB pages, where the hardware prefetcher stops.
 * nh: halves (2, or 1 on a last group of 8 rows or fewer).
 */
#define PF_BYTES 2048

INLINE void
group_one(enum gguf_dtype t, int nh, const uint8_t *G, size_t gb, int64_t nb, const uint8_t *act,
    const int32_t *cx, __m256 *acc)
{
	const size_t sb = t == GGML_TYPE_IQ4_NL ? 32 : 16;
	const uint8_t *S = G + (size_t)nb * 256;
	const __m256i tab = level_table(t);
	const float *dx = (const float *)act;
	const int8_t *qx = (const int8_t *)(dx + 2 * nb);
	const int64_t ahead = PF_BYTES / 256;

	acc[0] = acc[1] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		/* block b + ahead of this group, or of the next (addresses only: prefetches never fault) */
		int64_t pb = b + ahead;
		const char *pg = (const char *)G + (pb < nb ? 0 : gb);
		pb -= pb < nb ? 0 : nb;
		UNROLL
		for (size_t o = 0; o < 256; o += 64)
			_mm_prefetch(pg + (size_t)pb * 256 + o, _MM_HINT_T0);
		_mm_prefetch(pg + (size_t)nb * 256 + (size_t)pb * sb, _MM_HINT_T0);
		if (t == GGML_TYPE_IQ4_XS)	/* the super-block's d */
			_mm_prefetch(pg + (size_t)nb * (256 + 16) + (size_t)(pb / 8) * 32, _MM_HINT_T0);

		const __m256 db = _mm256_set1_ps(dx[b]);
		const __m256i c = _mm256_set1_epi32(cx[b]);
		UNROLL
		for (int h = 0; h < nh; h++) {
			__m256 ws = scales(t, S, nb, b, h);
			__m256i wv[8], is;

			levels(G, b, h, tab, wv);
			is = block_isum(t, wv, opaque(qx + 32 * b), c);
			acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(ws, db), _mm256_cvtepi32_ps(is), acc[h]);
		}
	}
}

/* One token through groups [g0, g1). */
INLINE void
packed_one(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb);
	int32_t cx[PACK_NB];

	corrections(t, (const int8_t *)act + 8 * nb, nb, cx);
	for (int64_t g = g0; g < g1; g++) {
		const uint8_t *G = P + (size_t)g * gb;
		int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;
		__m256 acc[2];

		if (nr > 8) {
			group_one(t, 2, G, gb, nb, act, cx, acc);
			store_rows(y + r, acc[0], 8);
			store_rows(y + r + 8, acc[1], (int)(nr - 8));
		} else {
			group_one(t, 1, G, gb, nb, act, cx, acc);
			store_rows(y + r, acc[0], (int)nr);
		}
	}
}

/*
 * Tokens in chunks whose corrections fit the stack (at most 64, so a
 * chunk's activations stay in L2 while every group passes over them), each
 * chunk through groups [g0, g1), half a group and PACK_NT tokens at a time.
 */
INLINE void
packed_rows(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	int64_t nb = n_in / 32;
	size_t gb = q_pack_group_bytes(t, nb), ab = q_act_bytes(n_in);
	int32_t cx[PACK_CX];
	int tc = (int)(PACK_CX / nb);	/* at least 4 (pack_fits) */

	if (tc > 64)
		tc = 64;
	if (tc >= PACK_NT)
		tc = tc / PACK_NT * PACK_NT;
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

			for (int h = 0; h < 2 && 8 * h < nr; h++) {
				for (int k0 = 0; k0 < nc; k0 += PACK_NT) {
					const uint8_t *a = act + (size_t)(t0 + k0) * ab;
					const int32_t *c = cx + (size_t)k0 * (size_t)nb;
					int nt = nc - k0 < PACK_NT ? nc - k0 : PACK_NT;
					__m256 acc[PACK_NT];

					switch (nt) {
					case 8: half_tile(t, 8, G, nb, h, a, ab, c, acc); break;
					case 7: half_tile(t, 7, G, nb, h, a, ab, c, acc); break;
					case 6: half_tile(t, 6, G, nb, h, a, ab, c, acc); break;
					case 5: half_tile(t, 5, G, nb, h, a, ab, c, acc); break;
					case 4: half_tile(t, 4, G, nb, h, a, ab, c, acc); break;
					case 3: half_tile(t, 3, G, nb, h, a, ab, c, acc); break;
					case 2: half_tile(t, 2, G, nb, h, a, ab, c, acc); break;
					default: half_tile(t, 1, G, nb, h, a, ab, c, acc); break;
					}
					for (int k = 0; k < nt; k++)
						store_rows(y + (size_t)(t0 + k0 + k) * (size_t)n_out +
						    (size_t)(r + 8 * h), acc[k], (int)(nr - 8 * h));
				}
			}
		}
	}
}

void
KERN_AVX2_SYM(packed_n)(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	if (t == GGML_TYPE_MXFP4)
		packed_rows(GGML_TYPE_MXFP4, P, act, n_tok, n_in, y, n_out, g0, g1);
	else if (t == GGML_TYPE_IQ4_XS)
		packed_rows(GGML_TYPE_IQ4_XS, P, act, n_tok, n_in, y, n_out, g0, g1);
	else
		packed_rows(GGML_TYPE_IQ4_NL, P, act, n_tok, n_in, y, n_out, g0, g1);
}
