/*
 * kern_avx512_packk.c: the avx512 table's kernel of Q4_K, Q5_K and Q6_K
 * matrices packed at load (quant_pack.c: groups of 16 rows whose 32-bit
 * lanes are rows, per super-block of 256 values its blocks' nibbles, high
 * bits, decoded scales, then d and dmin), compiled with AVX512 F, VL, BW
 * and VNNI (kern.am).
 *
 * Why packed: the tiles of kern_avx512_i8.c read a K-quant row as stored,
 * so every (row, block of 32) pays the block's decoding (the 12 bytes of
 * 6-bit scales and mins, Q6_K's split arrays), a conversion, a scale
 * product, an FMA and the min's FMA for one row: one token ran 12.7 GB/s
 * of Q4_K weights (bench/qmm, cache-resident). Packed, a block's 8
 * multiply-adds serve 16 rows with 4 values of x broadcast to every lane,
 * the scales are bytes to widen, and the float work of the block (one
 * conversion, one product d * dx, one FMA, the min's FMA) is shared by the
 * 16 rows; there is no horizontal sum at the end.
 *
 * Q4_K's high nibbles are multiplied as they lie (16 u, at most 240, still
 * a byte): their chain's sum is 16 times theirs, shifted back exactly,
 * which saves a shift per vector of levels.
 *
 * Float order: quant_pack.c's (the same for one token as for many, and for
 * any split of the groups): per (row, token) and block, one FMA of the
 * exact scaled integer sum (and for Q4_K/Q5_K one of the min).
 */
#include "kern_int.h"
#include "kern_x86.h"

#define KNT 8		/* tokens per tile */
#define KCX 16384	/* Q6_K's half sums of x of a chunk of tokens (32 KiB of stack) */

INLINE __m512i
bcast4(const int8_t *x)
{
	int32_t v;

	memcpy(&v, x, 4);
	return _mm512_set1_epi32(v);
}

/* v's 16-bit lanes shifted left by n (n < 0: right by -n); n is a constant once inlined */
INLINE __m512i
shift16(__m512i v, int n)
{
	if (n > 0)
		return _mm512_sll_epi16(v, _mm_cvtsi32_si128(n));
	if (n < 0)
		return _mm512_srl_epi16(v, _mm_cvtsi32_si128(-n));
	return v;
}

/*
 * A block's 16 scales (sc0: values 0-15's, sc1: Q6_K's 16-31's, signed) and,
 * for Q4_K/Q5_K, its mins times dm (mn), from the block's 32 bytes at C.
 */
INLINE void
scales_k(bool q6, const uint8_t *C, __m512 dm, __m512i *sc0, __m512i *sc1, __m512 *mn)
{
	if (q6) {
		*sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)C));
		*sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(C + 16)));
	} else {
		*sc0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)C));
		*mn = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
		    _mm_loadu_si128((const __m128i *)(C + 16)))));
	}
}

/*
 * Bits 0-3 of each byte from a, bits 4-7 from b (vpternlogd 0xE4: where
 * the constant's bit is set a's, elsewhere b's): a level's low four bits
 * and its high bits, placed at bit 4 with zeros above, in one instruction.
 */
INLINE __m512i
sel_lo4(__m512i a, __m512i b)
{
	return _mm512_ternarylogic_epi32(a, b, _mm512_set1_epi8(0x0F), 0xE4);
}

/*
 * The 8 level vectors of a block (L its nibbles, H its high bits): vector
 * m < 4 for x[4m ..], m >= 4 for x[16 + 4 (m - 4) ..]; Q4_K's last four
 * are 16 u.
 *
 * Q6_K merges each vector's nibbles and two high bits with one select
 * (sel_lo4): the high bits are first masked so that, shifted to bits 4-5,
 * nothing but zeros lands above them, one mask serving two vectors: per
 * block 4 masks, 6 shifts, 8 selects and the high nibbles' 4 shifts (22
 * instructions, where the nibbles' 12, 6 shifts and 8 merges took 26);
 * the same levels, 1.15x at one token (docs/BENCHMARKS.md, 2026-11-29
 * night). The same form for Q5_K's fifth bits (23 instructions instead of
 * 28, 11 of them shifts on port 0 with the multiply-adds) was no faster.
 */
INLINE void
levels_k(enum gguf_dtype t, const uint8_t *L, const uint8_t *H, __m512i *wv)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0F);
	__m512i q[4];

	UNROLL
	for (int v = 0; v < 4; v++)
		q[v] = _mm512_loadu_si512(L + 64 * v);
	if (t == GGML_TYPE_Q4_K) {
		UNROLL
		for (int v = 0; v < 4; v++) {
			wv[v] = _mm512_and_si512(q[v], lo4);
			wv[v + 4] = _mm512_andnot_si512(lo4, q[v]);
		}
	} else if (t == GGML_TYPE_Q5_K) {
		/*
		 * bit m of each byte of H is vector m's fifth bit: + 16 under its
		 * byte mask (Q5_0's select form, or a byte shuffle per nibble of H,
		 * measured no faster here: docs/BENCHMARKS.md)
		 */
		__m512i h = _mm512_loadu_si512(H);
		UNROLL
		for (int v = 0; v < 4; v++) {
			wv[v] = _mm512_and_si512(q[v], lo4);
			wv[v + 4] = _mm512_and_si512(_mm512_srli_epi16(q[v], 4), lo4);
		}
		UNROLL
		for (int m = 0; m < 8; m++) {
			__mmask64 k = _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(1 << m)));
			wv[m] = _mm512_mask_add_epi8(wv[m], k, wv[m], _mm512_set1_epi8(16));
		}
	} else {
		/*
		 * Q6_K: bits 2i of each byte of H[p] are vector 4p + i's two high
		 * bits; masked to vectors 0 and 2's (0x33) or 1 and 3's (0xCC),
		 * each moves to bits 4-5 with zeros above it
		 */
		UNROLL
		for (int p = 0; p < 2; p++) {
			__m512i h = _mm512_loadu_si512(H + 64 * p);
			__m512i he = _mm512_and_si512(h, _mm512_set1_epi8(0x33));
			__m512i ho = _mm512_and_si512(h, _mm512_set1_epi8((char)0xCC));
			UNROLL
			for (int i = 0; i < 4; i++)
				wv[4 * p + i] = sel_lo4(p ? _mm512_srli_epi16(q[i], 4) : q[i],
				    shift16(i % 2 ? ho : he, 4 - 2 * i));
		}
	}
}

/*
 * Q6_K's corrections of one token: for each block b, the sums of its two
 * halves' int8 x (at most 2048 in size), at cx[2b], cx[2b + 1]; the level
 * offset 32 makes each -32 times that.
 */
INLINE void
corrections6(const int8_t *q, int64_t nb, int16_t *cx)
{
	for (int64_t b = 0; b < nb; b++) {
		/* x + 128 is unsigned: its sums of absolute differences from 0 are its sums (of 8) */
		__m256i u = _mm256_xor_si256(ld256(q + 32 * b), _mm256_set1_epi8((char)0x80));
		__m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
		int64_t e[4];

		_mm256_storeu_si256((__m256i *)e, s);
		cx[2 * b] = (int16_t)(e[0] + e[1] - 16 * 128);
		cx[2 * b + 1] = (int16_t)(e[2] + e[3] - 16 * 128);
	}
}

/*
 * One group (16 rows) times NT tokens of prepared activations, ab bytes
 * apart (nb blocks each), cx their Q6_K corrections (2 nb apart): acc[k]
 * lane r = row r, token k.
 */
INLINE void
group_tile_k(enum gguf_dtype t, int NT, const uint8_t *G, int64_t nb, const uint8_t *act, size_t ab,
    const int16_t *cx, __m512 *acc)
{
	const bool q6 = t == GGML_TYPE_Q6_K;
	const size_t hb = q_pack_high_bytes(t), sbb = q_pack_sb_bytes(t);
	const float *dx[KNT], *xs[KNT];
	const int8_t *qx[KNT];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		xs[k] = dx[k] + nb;
		qx[k] = (const int8_t *)(xs[k] + nb);
		acc[k] = _mm512_setzero_ps();
	}
	for (int64_t s = 0; s < nb / 8; s++) {
		const uint8_t *S = G + (size_t)s * sbb, *H = S + 8 * 256, *C = H + 8 * hb, *D = C + 8 * 32;
		__m512 d = _mm512_cvtph_ps(ld256(D));
		__m512 dm = q6 ? _mm512_setzero_ps() : _mm512_cvtph_ps(ld256(D + 32));

		for (int j = 0; j < 8; j++) {
			const int64_t b = 8 * s + j;
			__m512i wv[8], sc0, sc1 = _mm512_setzero_si512();
			__m512 mn = _mm512_setzero_ps();

			levels_k(t, S + 256 * j, H + hb * j, wv);
			scales_k(q6, C + 32 * j, dm, &sc0, &sc1, &mn);
			UNROLL
			for (int k = 0; k < NT; k++) {
				const int8_t *x = qx[k] + 32 * b;
				/* a: values 0-15 of the block, c: 16-31 (Q6_K from their corrections) */
				const int16_t *ck = cx + (size_t)k * 2 * (size_t)nb + 2 * (size_t)b;
				__m512i a = q6 ? _mm512_set1_epi32(-32 * ck[0]) : _mm512_setzero_si512();
				__m512i c = q6 ? _mm512_set1_epi32(-32 * ck[1]) : _mm512_setzero_si512();
				UNROLL
				for (int v = 0; v < 4; v++) {
					a = _mm512_dpbusd_epi32(a, wv[v], bcast4(x + 4 * v));
					c = _mm512_dpbusd_epi32(c, wv[v + 4], bcast4(x + 16 + 4 * v));
				}
				__m512i is;
				if (q6)
					is = _mm512_add_epi32(_mm512_mullo_epi32(a, sc0), _mm512_mullo_epi32(c, sc1));
				else if (t == GGML_TYPE_Q4_K)
					is = _mm512_mullo_epi32(_mm512_add_epi32(a, _mm512_srai_epi32(c, 4)), sc0);
				else
					is = _mm512_mullo_epi32(_mm512_add_epi32(a, c), sc0);
				acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
				    _mm512_mul_ps(d, _mm512_set1_ps(dx[k][b])), acc[k]);
				if (!q6)
					acc[k] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(xs[k][b]), acc[k]);
			}
		}
	}
}

/*
 * One token (decode) through NG groups side by side: each block's 32 int8
 * x are broadcast into 8 registers once (vector m takes x[4m ..]) and, with
 * the token's d, sum of x and Q6_K corrections, serve every group, instead
 * of being loaded again per group. Per (row, block) the arithmetic is
 * group_tile_k's, so the results are bitwise the same.
 */
INLINE void
group_one_k(enum gguf_dtype t, int NG, const uint8_t *G, size_t gb, int64_t nb, const uint8_t *act,
    const int32_t *cx, __m512 *acc)
{
	const bool q6 = t == GGML_TYPE_Q6_K;
	const size_t hb = q_pack_high_bytes(t), sbb = q_pack_sb_bytes(t);
	const float *dx = (const float *)act, *xs = dx + nb;
	const int8_t *qx = (const int8_t *)(xs + nb);

	UNROLL
	for (int g = 0; g < NG; g++)
		acc[g] = _mm512_setzero_ps();
	for (int64_t s = 0; s < nb / 8; s++) {
		__m512 d[4], dm[4];

		UNROLL
		for (int g = 0; g < NG; g++) {
			const uint8_t *D = G + (size_t)g * gb + (size_t)s * sbb + 8 * 256 + 8 * hb + 8 * 32;
			d[g] = _mm512_cvtph_ps(ld256(D));
			dm[g] = q6 ? _mm512_setzero_ps() : _mm512_cvtph_ps(ld256(D + 32));
		}
		for (int j = 0; j < 8; j++) {
			const int64_t b = 8 * s + j;
			const int8_t *x = qx + 32 * b;
			__m512i xv[8];
			__m512 db = _mm512_set1_ps(dx[b]), xb = _mm512_set1_ps(xs[b]);
			/* Q6_K: the level offset's terms, broadcast from memory (no move from a general register) */
			__m512i c0 = q6 ? _mm512_set1_epi32(cx[2 * b]) : _mm512_setzero_si512();
			__m512i c1 = q6 ? _mm512_set1_epi32(cx[2 * b + 1]) : _mm512_setzero_si512();

			UNROLL
			for (int m = 0; m < 8; m++)
				xv[m] = bcast4(x + 4 * m);
			UNROLL
			for (int g = 0; g < NG; g++) {
				const uint8_t *S = G + (size_t)g * gb + (size_t)s * sbb, *H = S + 8 * 256,
				    *C = H + 8 * hb;
				__m512i wv[8], sc0, sc1 = _mm512_setzero_si512(), is;
				__m512i a = c0, c = c1;
				__m512 mn = _mm512_setzero_ps();

				levels_k(t, S + 256 * j, H + hb * j, wv);
				scales_k(q6, C + 32 * j, dm[g], &sc0, &sc1, &mn);
				UNROLL
				for (int v = 0; v < 4; v++) {
					a = _mm512_dpbusd_epi32(a, wv[v], xv[v]);
					c = _mm512_dpbusd_epi32(c, wv[v + 4], xv[v + 4]);
				}
				if (q6)
					is = _mm512_add_epi32(_mm512_mullo_epi32(a, sc0), _mm512_mullo_epi32(c, sc1));
				else if (t == GGML_TYPE_Q4_K)
					is = _mm512_mullo_epi32(_mm512_add_epi32(a, _mm512_srai_epi32(c, 4)), sc0);
				else
					is = _mm512_mullo_epi32(_mm512_add_epi32(a, c), sc0);
				acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(d[g], db), acc[g]);
				if (!q6)
					acc[g] = _mm512_fnmadd_ps(mn, xb, acc[g]);
			}
		}
	}
}

/* Groups [g0, g1) for one token, ONE_NG at a time (the rest one by one). */
#define ONE_NG 2

INLINE void
packed_one_k(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb);
	/* 2 nb <= 2048 = KCX / KNT: kern_avx512_pack_fits takes nb <= 1024 */
	int16_t c16[KCX / KNT];
	int32_t cx[KCX / KNT];

	if (t == GGML_TYPE_Q6_K) {
		corrections6((const int8_t *)act + 8 * nb, nb, c16);
		for (int64_t i = 0; i < 2 * nb; i++)
			cx[i] = -32 * c16[i];
	}
	for (int64_t g = g0; g < g1;) {
		int ng = g1 - g >= ONE_NG ? ONE_NG : 1;
		__m512 acc[ONE_NG];

		if (ng == ONE_NG)
			group_one_k(t, ONE_NG, P + (size_t)g * gb, gb, nb, act, cx, acc);
		else
			group_one_k(t, 1, P + (size_t)g * gb, gb, nb, act, cx, acc);
		for (int i = 0; i < ng; i++, g++) {
			int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;

			_mm512_mask_storeu_ps(y + r, (__mmask16)((1u << nr) - 1), acc[i]);
		}
	}
}

/*
 * Tokens in chunks (at most 64, so a chunk's activations stay in L2 while
 * every group passes over them; Q6_K: as many as its corrections' stack
 * holds), each chunk through groups [g0, g1), KNT tokens at a time.
 */
INLINE void
packed_rows_k(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb), ab = q_act_bytes(n_in);
	int16_t cx[KCX];
	int tc = 64;

	if (t == GGML_TYPE_Q6_K && (int64_t)tc * 2 * nb > KCX)
		tc = (int)(KCX / (2 * nb)) / KNT * KNT;
	if (n_tok == 1) {
		packed_one_k(t, P, act, n_in, y, n_out, g0, g1);
		return;
	}
	for (int t0 = 0; t0 < n_tok; t0 += tc) {
		int nc = n_tok - t0 < tc ? n_tok - t0 : tc;

		if (t == GGML_TYPE_Q6_K)
			for (int k = 0; k < nc; k++)
				corrections6((const int8_t *)(act + (size_t)(t0 + k) * ab) + 8 * nb, nb,
				    cx + (size_t)k * 2 * (size_t)nb);
		for (int64_t g = g0; g < g1; g++) {
			const uint8_t *G = P + (size_t)g * gb;
			int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;
			__mmask16 m = (__mmask16)((1u << nr) - 1);

			for (int k0 = 0; k0 < nc; k0 += KNT) {
				const uint8_t *a = act + (size_t)(t0 + k0) * ab;
				const int16_t *c = cx + (t == GGML_TYPE_Q6_K ? (size_t)k0 * 2 * (size_t)nb : 0);
				int nt = nc - k0 < KNT ? nc - k0 : KNT;
				__m512 acc[KNT];

				switch (nt) {
				case 8: group_tile_k(t, 8, G, nb, a, ab, c, acc); break;
				case 7: group_tile_k(t, 7, G, nb, a, ab, c, acc); break;
				case 6: group_tile_k(t, 6, G, nb, a, ab, c, acc); break;
				case 5: group_tile_k(t, 5, G, nb, a, ab, c, acc); break;
				case 4: group_tile_k(t, 4, G, nb, a, ab, c, acc); break;
				case 3: group_tile_k(t, 3, G, nb, a, ab, c, acc); break;
				case 2: group_tile_k(t, 2, G, nb, a, ab, c, acc); break;
				default: group_tile_k(t, 1, G, nb, a, ab, c, acc); break;
				}
				for (int k = 0; k < nt; k++)
					_mm512_mask_storeu_ps(y + (size_t)(t0 + k0 + k) * (size_t)n_out + (size_t)r,
					    m, acc[k]);
			}
		}
	}
}

void
kern_avx512_packed_k(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	switch (t) {
	case GGML_TYPE_Q4_K: packed_rows_k(GGML_TYPE_Q4_K, P, act, n_tok, n_in, y, n_out, g0, g1); break;
	case GGML_TYPE_Q5_K: packed_rows_k(GGML_TYPE_Q5_K, P, act, n_tok, n_in, y, n_out, g0, g1); break;
	default: packed_rows_k(GGML_TYPE_Q6_K, P, act, n_tok, n_in, y, n_out, g0, g1); break;
	}
}
