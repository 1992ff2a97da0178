/*
 * kern_avx2_pack.c: the avx2 table's kernel of Q8_0, Q4_0, Q4_1 and Q5_0
 * matrices packed at load (quant.h's q_pack; quant_pack.c describes the
 * layout: groups of 16 rows, each block's levels in 64-byte vectors whose
 * 32-bit lane r holds 4 consecutive levels of row r), compiled with -mavx2
 * -mfma -mf16c (kern.am).
 *
 * A 256-bit vector holds half a group's lane vector: rows 8h .. 8h + 7 at
 * byte 32h. So one multiply-add serves 8 rows with 4 values of x broadcast
 * to every lane, and the float work of a block (one conversion, one scale
 * product, one FMA) is shared by those 8 rows, where the unpacked tiles
 * (kern_avx2_i8.c) pay it per row; no horizontal sum at the end either.
 *
 * With AVX-VNNI (the avx2vnni table: this file built with -mavxvnni
 * -DKERN_AVXVNNI) it is one vpdpbusd of unsigned levels (Q8_0's w + 128)
 * and x, corrected by -o x the token's block sum. Without VNNI the
 * multiply-add is vpmaddubsw (pairs into int16, saturating) then vpmaddwd
 * by 1 (into int32). The int16 stage is kept as long as it
 * cannot saturate, |x| <= 127 (q_act_prepare): Q4_0's levels u <= 15 give
 * pairs of at most 2 * 15 * 127 = 3810, so the eight vectors of a block are
 * added in int16 (30480) before one vpmaddwd; Q5_0's u <= 31 give 7874,
 * four at a time (31496). Q8_0's stored w + 128 <= 255 would saturate, so
 * it multiplies |w| (<= 128) by x with w's sign (at most 2 * 128 * 127 =
 * 32512 per pair) and widens each vector; it needs no correction. Q4_1's
 * levels are Q4_0's u with no correction: its offset is one more FMA of
 * its m and the token's sum of x.
 *
 * One token (decode: packed_one) runs both halves of a group at each block
 * and prefetches the group's stream; several run half a group at a time
 * for up to PACK_NT tokens (packed_rows).
 *
 * Float order (quant_pack.c's, checked by test_quant, the same as the
 * avx512 table's packed kernel): per (row, token), for b = 0 .. nb - 1,
 * acc = fma(scale_w[b] * d_x[b], (float)isum[b], acc) from acc = 0. The
 * integer sums are exact however they are formed, so the result does not
 * depend on the number of tokens, the split of the groups, or the table.
 */
#include "kern_int.h"
#include "kern_x86.h"

/*
 * Tokens per tile: a block's levels are loaded and unpacked once for
 * PACK_NT tokens (Q8_0's |w| and w, Q4_0's masks and shifts); 8 rather
 * than 4 halves their share of the vector ALUs the multiplies need. The
 * accumulators then spill beside the levels, loads and stores whose ports
 * have room (docs/BENCHMARKS.md, 2026-11-30).
 */
#define PACK_NT 8
#define PACK_CX 8192	/* int32 corrections of a chunk of tokens (32 KiB of stack) */
#define PACK_NB (PACK_CX / 4)	/* blocks per row pack_fits takes: 4 tokens' corrections fit */

/*
 * p, as a value the compiler cannot see through: each half of a group then
 * loads its broadcasts of x from memory (vpbroadcastd m32, a load alone)
 * where the compiler would otherwise keep one half's in registers for the
 * other, run out of them and spill (a store and a load per broadcast).
 */
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

/* x's first value in vector j: Q8_0 4j; Q4_0/Q5_0 low nibbles 4j, high 16 + 4 (j - 4) */
INLINE int
x_first(enum gguf_dtype t, int j)
{
	return t == GGML_TYPE_Q8_0 || j < 4 ? 4 * j : 16 + 4 * (j - 4);
}

/*
 * Levels of block b, rows 8h .. 8h + 7 of group G: 8 vectors, vector j
 * for x[x_first(j) ..]. Q8_0: the stored w + 128; Q4_0/Q5_0: u = w + o.
 */
INLINE void
levels(enum gguf_dtype t, const uint8_t *G, int64_t nb, int64_t b, int h, __m256i *wv)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F);

	if (t == GGML_TYPE_Q8_0) {
		UNROLL
		for (int j = 0; j < 8; j++)
			wv[j] = ld256(G + (size_t)b * 512 + 64 * j + 32 * h);
		return;
	}
#ifdef KERN_AVXVNNI
	/* Q4_0/Q4_1's high nibbles where they lie, as 16 u (block_isum shifts their sum back) */
	const bool q4 = t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1;
#else
	const bool q4 = false;
#endif
	UNROLL
	for (int j = 0; j < 4; j++) {
		__m256i v = ld256(G + (size_t)b * 256 + 64 * j + 32 * h);
		wv[j] = _mm256_and_si256(v, lo4);
		wv[j + 4] = q4 ? _mm256_andnot_si256(lo4, v) : _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
	}
	if (t == GGML_TYPE_Q5_0) {
		/* bit j of each byte is vector j's fifth bit (quant_pack.c): to bit 4, or'd in */
		__m256i qh = ld256(G + (size_t)nb * 256 + (size_t)b * 64 + 32 * h);
		UNROLL
		for (int j = 0; j < 8; j++) {
			__m256i s = j < 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j)) : j == 4 ? qh :
			    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j - 4));
			wv[j] = _mm256_or_si256(wv[j], _mm256_and_si256(s, _mm256_set1_epi8(16)));
		}
	}
}

/*
 * Lane r: the exact sum over the block of row r's levels times x, from c
 * (the token's correction; 0 where the form below needs none).
 */
INLINE __m256i
block_isum(enum gguf_dtype t, const __m256i *wv, const int8_t *x, __m256i c)
{
#ifdef KERN_AVXVNNI
	/* every type's levels are unsigned here (Q8_0's w + 128): two chains of four */
	__m256i s0 = c, s1 = _mm256_setzero_si256();
	if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1) {
		/* s1: 16 x the high nibbles' sum, exactly divisible */
		UNROLL
		for (int j = 0; j < 4; j++) {
			s0 = _mm256_dpbusd_avx_epi32(s0, wv[j], bcast4(x, 4 * j));
			s1 = _mm256_dpbusd_avx_epi32(s1, wv[j + 4], bcast4(x, 16 + 4 * j));
		}
		return _mm256_add_epi32(s0, _mm256_srai_epi32(s1, 4));
	}
	UNROLL
	for (int j = 0; j < 8; j += 2) {
		s0 = _mm256_dpbusd_avx_epi32(s0, wv[j], bcast4(x, x_first(t, j)));
		s1 = _mm256_dpbusd_avx_epi32(s1, wv[j + 1], bcast4(x, x_first(t, j + 1)));
	}
	return _mm256_add_epi32(s0, s1);
#else
	const __m256i one16 = _mm256_set1_epi16(1);

	if (t == GGML_TYPE_Q8_0) {
		__m256i s = _mm256_setzero_si256();
		UNROLL
		for (int j = 0; j < 8; j++) {
			__m256i w = _mm256_xor_si256(wv[j], _mm256_set1_epi8((char)0x80));
			__m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w),
			    _mm256_sign_epi8(bcast4(x, 4 * j), w));
			s = _mm256_add_epi32(s, _mm256_madd_epi16(p, one16));
		}
		return _mm256_add_epi32(s, c);
	}
	/* int16 sums of 8 (Q4_0) or 4 (Q5_0) vectors' pairs, then one widening each */
	const int run = t == GGML_TYPE_Q5_0 ? 4 : 8;	/* Q4_1's u <= 15 as Q4_0's */
	__m256i s = _mm256_setzero_si256();
	UNROLL
	for (int j0 = 0; j0 < 8; j0 += run) {
		__m256i p = _mm256_maddubs_epi16(wv[j0], bcast4(x, x_first(t, j0)));
		UNROLL
		for (int j = j0 + 1; j < j0 + run; j++)
			p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wv[j], bcast4(x, x_first(t, j))));
		s = _mm256_add_epi32(s, _mm256_madd_epi16(p, one16));
	}
	return _mm256_add_epi32(s, c);
#endif
}

/*
 * -o x the sum of each block's 32 int8 x, nb blocks of one token; Q8_0's
 * o is 128 with VNNI (its levels w + 128), 0 without (|w| times x with w's sign).
 */
INLINE void
corrections(enum gguf_dtype t, const int8_t *q, int64_t nb, int32_t *cx)
{
#ifdef KERN_AVXVNNI
	const int32_t o = t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : t == GGML_TYPE_Q8_0 ? 128 : 0;
#else
	const int32_t o = t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 0;
#endif

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
	const uint8_t *S = G + (size_t)nb * (q_pack_level_bytes(t) + q_pack_high_bytes(t));
	const size_t sb = q_pack_scale_bytes(t);
	const float *dx[PACK_NT];
	const int8_t *qx[PACK_NT];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		qx[k] = (const int8_t *)(dx[k] + 2 * nb);
		acc[k] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		__m256 ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + (size_t)b * sb + 16 * h)));
		/* Q4_1's m, after its d */
		__m256 wm = t == GGML_TYPE_Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S +
		    (size_t)b * sb + Q_PACK_SCALE_BYTES + 16 * h))) : _mm256_setzero_ps();
		__m256i wv[8];

		levels(t, G, nb, b, h, wv);
		UNROLL
		for (int k = 0; k < NT; k++) {
			__m256i s = block_isum(t, wv, qx[k] + 32 * b,
			    _mm256_set1_epi32(cx[(size_t)k * (size_t)nb + (size_t)b]));
			acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(ws, _mm256_set1_ps(dx[k][b])),
			    _mm256_cvtepi32_ps(s), acc[k]);
			if (t == GGML_TYPE_Q4_1)	/* the token's sum of x: dx[k] + nb */
				acc[k] = _mm256_fmadd_ps(wm, _mm256_set1_ps(dx[k][nb + b]), acc[k]);
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
 * One token (decode) through one group, both halves at each block (16 rows
 * per step): the group is read front to back once, every 64-byte line
 * whole, where the tiles above read each line twice, half at a time, and
 * the token's block scale and correction serve both halves. Each part of
 * the group (levels, fifth bits, scales) is prefetched PF_BYTES of levels
 * ahead, past the last block into the next groups (G + gb ...), so their
 * first lines are on their way: decode reads each weight once, from
 * memory, and the packed copies lie in 4 KiB pages, at whose ends the
 * hardware prefetcher stops. Into L2 (_MM_HINT_T1), 8 KiB ahead: L2 keeps
 * more misses in flight than L1's fill buffers, and from DRAM 2 KiB into
 * L1 left Q8_0 at 82 % of bench/membw (docs/BENCHMARKS.md, 2026-11-29
 * evening: 2 KiB, 4 KiB, 8 KiB and 12 KiB, into L1 and L2, measured). A
 * matrix already in L2 pays for them (Q8_0 avx2vnni 10-19 %); every other
 * line only, or into L1, gave that back and lost more from DRAM (the
 * section 2026-11-29 night).
 * nh: halves (2, or 1 on a last group of 8 rows or fewer); acc[h] lane r =
 * row 8h + r.
 */
#define PF_BYTES 8192

INLINE void
group_one(enum gguf_dtype t, int nh, const uint8_t *G, size_t gb, int64_t nb, const uint8_t *act,
    const int32_t *cx, __m256 *acc)
{
	/* quant_pack.c's sizes (q_pack_level_bytes ...) as constants, so the prefetches unroll */
	const size_t lb = t == GGML_TYPE_Q8_0 ? 512 : 256, hb = t == GGML_TYPE_Q5_0 ? 64 : 0,
	    sb = t == GGML_TYPE_Q4_1 ? 2 * Q_PACK_SCALE_BYTES : Q_PACK_SCALE_BYTES;
	const uint8_t *S = G + (size_t)nb * (lb + hb);
	const float *dx = (const float *)act;
	const int8_t *qx = (const int8_t *)(dx + 2 * nb);
	const int64_t ahead = (int64_t)(PF_BYTES / lb);
	/* the prefetch cursor: block pb of group pg, ahead blocks on (groups later when they are short) */
	const char *pg = (const char *)G + (size_t)(ahead / nb) * gb;
	int64_t pb = ahead % nb;

	acc[0] = acc[1] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		/* addresses only: prefetches never fault */
		UNROLL
		for (size_t o = 0; o < lb; o += 64)
			_mm_prefetch(pg + (size_t)pb * lb + o, _MM_HINT_T1);
		if (hb)
			_mm_prefetch(pg + (size_t)nb * lb + (size_t)pb * hb, _MM_HINT_T1);
		_mm_prefetch(pg + (size_t)nb * (lb + hb) + (size_t)pb * sb, _MM_HINT_T1);
		if (++pb == nb) {
			pb = 0;
			pg += gb;
		}

		const __m256 db = _mm256_set1_ps(dx[b]);
		const __m256i c = _mm256_set1_epi32(cx[b]);
		UNROLL
		for (int h = 0; h < nh; h++) {
			__m256 ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + (size_t)b * sb + 16 * h)));
			__m256i wv[8], is;

			levels(t, G, nb, b, h, wv);
			is = block_isum(t, wv, opaque(qx + 32 * b), c);
			acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(ws, db), _mm256_cvtepi32_ps(is), acc[h]);
			if (t == GGML_TYPE_Q4_1) {
				__m256 wm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + (size_t)b * sb +
				    Q_PACK_SCALE_BYTES + 16 * h)));
				acc[h] = _mm256_fmadd_ps(wm, _mm256_set1_ps(dx[nb + b]), acc[h]);
			}
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

#define PACKED(T, name)								\
static void									\
name(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in,	\
    float *y, int64_t n_out, int64_t g0, int64_t g1)				\
{										\
	(void)t;								\
	if (n_tok == 1)								\
		packed_one(T, P, act, n_in, y, n_out, g0, g1);			\
	else									\
		packed_rows(T, P, act, n_tok, n_in, y, n_out, g0, g1);		\
}
PACKED(GGML_TYPE_Q8_0, packed_q8_0)
PACKED(GGML_TYPE_Q4_0, packed_q4_0)
PACKED(GGML_TYPE_Q4_1, packed_q4_1)
PACKED(GGML_TYPE_Q5_0, packed_q5_0)

kern_packed_fn *const KERN_AVX2_SYM(packed)[KERN_NTYPE] = {
	[GGML_TYPE_Q8_0] = packed_q8_0, [GGML_TYPE_Q4_0] = packed_q4_0, [GGML_TYPE_Q5_0] = packed_q5_0,
	[GGML_TYPE_Q4_1] = packed_q4_1,
	[GGML_TYPE_Q4_K] = KERN_AVX2_SYM(packed_k), [GGML_TYPE_Q5_K] = KERN_AVX2_SYM(packed_k),
	[GGML_TYPE_Q6_K] = KERN_AVX2_SYM(packed_k),
	[GGML_TYPE_IQ4_NL] = KERN_AVX2_SYM(packed_n), [GGML_TYPE_MXFP4] = KERN_AVX2_SYM(packed_n),
	[GGML_TYPE_IQ4_XS] = KERN_AVX2_SYM(packed_n),
};

/* The corrections of a chunk of 4 tokens must fit the stack array. */
bool
KERN_AVX2_SYM(pack_fits)(int64_t n_in)
{
	return n_in > 0 && n_in % 32 == 0 && n_in / 32 <= PACK_NB;
}
