/*
 * kern_avx2_packk.c: the avx2 table's kernel of Q4_K, Q5_K and Q6_K
 * matrices packed at load (quant_pack.c: groups of 16 rows whose 32-bit
 * lanes are rows, per super-block its blocks' nibbles, high bits, decoded
 * scales, then d and dmin), compiled with -mavx2 -mfma -mf16c, and again
 * with -mavxvnni -DKERN_AVXVNNI for the avx2vnni table (kern.am).
 *
 * A 256-bit vector holds half a group's lane vector (rows 8h .. 8h + 7 at
 * byte 32h), so a block's multiply-adds serve 8 rows with 4 values of x
 * broadcast to every lane, and its float work (a conversion, d * dx, an
 * FMA, the min's FMA) is shared by them, where the unpacked tiles
 * (kern_avx2_i8.c) decode the 6-bit scales and pay that work per row.
 *
 * Integer sums, exact either way (so avx2 and avx2vnni agree bitwise):
 * with AVX-VNNI, vpdpbusd chains over the block's two halves (Q6_K's from
 * the token's correction -32 x the half's sum of x), multiplied by the
 * scales with vpmulld; Q4_K's high nibbles are multiplied where they lie,
 * as 16 u (at most 240: a byte mask instead of a shift and a mask, the
 * chain's sum shifted back exactly), 28 vector operations per block of 8
 * rows instead of 31 (docs/BENCHMARKS.md, 2026-11-29 night). Without it, vpmaddubsw pairs summed in int16 as long
 * as they cannot saturate (|x| <= 127: Q4_K's u <= 15 all eight vectors,
 * 8 * 2 * 15 * 127 = 30480; Q5_K's u <= 31 four, 31496; Q6_K's u <= 63 two,
 * 32004), then vpmaddwd by the scale in both int16 halves of each lane,
 * which forms scale x sum in int32 in the same instruction; Q6_K's
 * correction is -32 (sc0 X0 + sc1 X1), one more vpmaddwd of the two
 * scales by the two half sums X (each at most 2048 in size).
 *
 * One token (decode: packed_one_k) runs both halves of a group at each
 * block and prefetches the group's stream; several run half a group at a
 * time for up to KNT tokens (packed_rows_k).
 *
 * Float order: quant_pack.c's, the same as the avx512 table's packed K
 * kernel, for any number of tokens and any split of the groups.
 */
#include "kern_int.h"
#include "kern_x86.h"

/*
 * Tokens per tile: a block's levels and scales are decoded once for KNT
 * tokens. 8 rather than 4 halves their share of the vector ALUs (Q6_K's
 * levels are a mask, a shift, a mask and an or per vector after the
 * nibbles' own mask or shift and mask), which the multiplies need: the
 * accumulators no longer fit the 16 registers beside the levels, but
 * their spills are loads and stores, whose ports have room. Q6_K 1.14x,
 * Q4_K 1.13x in bench/qmm (docs/BENCHMARKS.md, 2026-11-30).
 */
#define KNT 8
#define KCX 16384	/* Q6_K's half sums of x of a chunk of tokens (32 KiB of stack) */

INLINE __m256i
bcast4(const int8_t *x)
{
	int32_t v;

	memcpy(&v, x, 4);
	return _mm256_set1_epi32(v);
}

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

/* v's 16-bit lanes shifted left by n (n < 0: right by -n); n is a constant once inlined */
INLINE __m256i
shift16(__m256i v, int n)
{
	if (n > 0)
		return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n));
	if (n < 0)
		return _mm256_srl_epi16(v, _mm_cvtsi32_si128(-n));
	return v;
}

/*
 * The 8 level vectors of a block's half group h (L its nibbles, H its high
 * bits): vector m < 4 for x[4m ..], m >= 4 for x[16 + 4 (m - 4) ..].
 */
INLINE void
levels_k(enum gguf_dtype t, const uint8_t *L, const uint8_t *H, int h, __m256i *wv)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F);
#ifdef KERN_AVXVNNI
	/* Q4_K's high nibbles where they lie, as 16 u (block_isum shifts their sum back) */
	const bool q4 = t == GGML_TYPE_Q4_K;
#else
	const bool q4 = false;
#endif

	UNROLL
	for (int v = 0; v < 4; v++) {
		__m256i q = ld256(L + 64 * v + 32 * h);
		wv[v] = _mm256_and_si256(q, lo4);
		wv[v + 4] = q4 ? _mm256_andnot_si256(lo4, q) : _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
	}
	if (t == GGML_TYPE_Q5_K) {
		/* bit m of each byte of H is vector m's fifth bit: to bit 4 */
		__m256i hv = ld256(H + 32 * h);
		UNROLL
		for (int m = 0; m < 8; m++)
			wv[m] = _mm256_or_si256(wv[m], _mm256_and_si256(shift16(hv, 4 - m),
			    _mm256_set1_epi8(0x10)));
	} else if (t == GGML_TYPE_Q6_K) {
		/* bits 2 (m % 4) of each byte of H[m / 4] are vector m's two high bits: to bits 4-5 */
		UNROLL
		for (int m = 0; m < 8; m++)
			wv[m] = _mm256_or_si256(wv[m], _mm256_and_si256(shift16(ld256(H + 64 * (m / 4) + 32 * h),
			    4 - 2 * (m % 4)), _mm256_set1_epi8(0x30)));
	}
}

/* Q6_K's half sums of one token's int8 x: block b's at cx[2b], cx[2b + 1]. */
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
 * Block j's scales of half h (C: the block's 32 scale bytes) as block_isum
 * takes them. With VNNI, int32 lanes: s0 the scale (Q6_K: s0, s1 the two
 * halves' scales). Without, int16 pairs for vpmaddwd, each formed by one
 * byte shuffle: s0 = (sc, sc) (Q6_K: s0 = (sc0, sc0), s1 = (sc1, sc1),
 * s01 = (sc0, sc1), sign-extended).
 */
INLINE void
scales_k(enum gguf_dtype t, const uint8_t *C, int h, __m256i *s0, __m256i *s1, __m256i *s01)
{
	const __m128i a = _mm_loadl_epi64((const __m128i *)(C + 8 * h));

	*s1 = *s01 = _mm256_setzero_si256();
#ifdef KERN_AVXVNNI
	if (t == GGML_TYPE_Q6_K) {
		*s0 = _mm256_cvtepi8_epi32(a);
		*s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(C + 16 + 8 * h)));
	} else {
		*s0 = _mm256_cvtepu8_epi32(a);
	}
#else
	if (t == GGML_TYPE_Q6_K) {
		__m256i p = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a,
		    _mm_loadl_epi64((const __m128i *)(C + 16 + 8 * h))));
		/* byte indices count from each 128-bit half: lane r's first byte is 4 (r % 4) */
		const __m256i lo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
		    0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
		*s01 = p;
		*s0 = _mm256_shuffle_epi8(p, lo);
		*s1 = _mm256_shuffle_epi8(p, _mm256_add_epi8(lo, _mm256_set1_epi8(2)));
	} else {
		/* the 8 bytes in both 128-bit halves; lane r takes byte r, zero-extended, twice */
		__m256i v = _mm256_broadcastq_epi64(a);
		*s0 = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1,
		    3, -1, 3, -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
	}
#endif
}

/*
 * Lane r: the block's scaled exact integer sum for row 8h + r and token x
 * (quant_pack.c), ck the token's two half sums (Q6_K), s0/s1 the lanes'
 * scales (int32), s01 (Q6_K without VNNI: (sc0, sc1) as int16 pairs, or
 * with m32 -32 (sc0, sc1), at most 4096 in size: the tiles form it once
 * per block for all their tokens, and each token's correction is then one
 * vpmaddwd and an add instead of a vpmaddwd, a shift and a subtraction).
 */
INLINE __m256i
block_isum(enum gguf_dtype t, const __m256i *wv, const int8_t *x, const int16_t *ck, __m256i s0,
    __m256i s1, __m256i s01, bool m32)
{
#ifdef KERN_AVXVNNI
	const bool q6 = t == GGML_TYPE_Q6_K;
	__m256i a = q6 ? _mm256_set1_epi32(-32 * ck[0]) : _mm256_setzero_si256();
	__m256i c = q6 ? _mm256_set1_epi32(-32 * ck[1]) : _mm256_setzero_si256();
	UNROLL
	for (int v = 0; v < 4; v++) {
		a = _mm256_dpbusd_avx_epi32(a, wv[v], bcast4(x + 4 * v));
		c = _mm256_dpbusd_avx_epi32(c, wv[v + 4], bcast4(x + 16 + 4 * v));
	}
	(void)s01;
	(void)m32;
	if (q6)
		return _mm256_add_epi32(_mm256_mullo_epi32(a, s0), _mm256_mullo_epi32(c, s1));
	if (t == GGML_TYPE_Q4_K)	/* c: 16 x the high nibbles' sum, exactly divisible */
		c = _mm256_srai_epi32(c, 4);
	return _mm256_mullo_epi32(_mm256_add_epi32(a, c), s0);
#else
	__m256i p[8];
	UNROLL
	for (int m = 0; m < 8; m++)
		p[m] = _mm256_maddubs_epi16(wv[m], bcast4(x + (m < 4 ? 4 * m : 16 + 4 * (m - 4))));
	if (t == GGML_TYPE_Q4_K) {
		__m256i q = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]),
		    _mm256_add_epi16(p[2], p[3])), _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]),
		    _mm256_add_epi16(p[6], p[7])));
		return _mm256_madd_epi16(q, s0);
	}
	if (t == GGML_TYPE_Q5_K) {
		__m256i sc = s0;
		__m256i lo = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
		__m256i hi = _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7]));
		return _mm256_add_epi32(_mm256_madd_epi16(lo, sc), _mm256_madd_epi16(hi, sc));
	}
	__m256i sa = s0, sb = s1;
	__m256i is = _mm256_add_epi32(
	    _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), sa),
	    _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), sa)),
	    _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[4], p[5]), sb),
	    _mm256_madd_epi16(_mm256_add_epi16(p[6], p[7]), sb)));
	uint32_t xx = (uint32_t)(uint16_t)ck[0] | (uint32_t)(uint16_t)ck[1] << 16;
	__m256i corr = _mm256_madd_epi16(s01, _mm256_set1_epi32((int)xx));
	if (m32)
		return _mm256_add_epi32(is, corr);
	return _mm256_sub_epi32(is, _mm256_slli_epi32(corr, 5));
#endif
}

/*
 * Rows 8h .. 8h + 7 of one group times NT tokens of prepared activations,
 * ab bytes apart (nb blocks each), cx their Q6_K half sums (2 nb apart):
 * acc[k] lane r = row 8h + r, token k.
 */
INLINE void
half_tile_k(enum gguf_dtype t, int NT, const uint8_t *G, int64_t nb, int h, const uint8_t *act,
    size_t ab, const int16_t *cx, __m256 *acc)
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
		acc[k] = _mm256_setzero_ps();
	}
	for (int64_t s = 0; s < nb / 8; s++) {
		const uint8_t *S = G + (size_t)s * sbb, *H = S + 8 * 256, *C = H + 8 * hb, *D = C + 8 * 32;
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(D + 16 * h)));
		__m256 dm = q6 ? _mm256_setzero_ps() :
		    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(D + 32 + 16 * h)));

		for (int j = 0; j < 8; j++) {
			const int64_t b = 8 * s + j;
			__m256i wv[8], s0, s1, s01;
			__m256 mn = _mm256_setzero_ps();

			levels_k(t, S + 256 * j, H + hb * j, h, wv);
			scales_k(t, C + 32 * j, h, &s0, &s1, &s01);
			s01 = _mm256_mullo_epi16(s01, _mm256_set1_epi16(-32));	/* Q6_K without VNNI */
			if (!q6)
				mn = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
				    _mm_loadl_epi64((const __m128i *)(C + 32 * j + 16 + 8 * h)))));
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256i is = block_isum(t, wv, qx[k] + 32 * b,
				    cx + (size_t)k * 2 * (size_t)nb + 2 * (size_t)b, s0, s1, s01, true);
				acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
				    _mm256_mul_ps(d, _mm256_set1_ps(dx[k][b])), acc[k]);
				if (!q6)
					acc[k] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(xs[k][b]), acc[k]);
			}
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
 * the token's block scale and sum serve both halves. A group's
 * super-blocks, and the groups, lie one after the other, so the stream is
 * prefetched PF_BYTES ahead, one block's share of a super-block
 * (q_pack_sb_bytes / 8) per block, past the group's end into the next:
 * decode reads each weight once, from memory, and the packed copies lie in
 * 4 KiB pages, at whose ends the hardware prefetcher stops. nh: halves (2,
 * or 1 on a last group of 8 rows or fewer); acc[h] lane r = row 8h + r.
 */
#define PF_BYTES 2048

INLINE void
group_one_k(enum gguf_dtype t, int nh, const uint8_t *G, int64_t nb, const uint8_t *act,
    const int16_t *cx, __m256 *acc)
{
	const bool q6 = t == GGML_TYPE_Q6_K;
	/* quant_pack.c's sizes (q_pack_high_bytes, q_pack_sb_bytes) as constants, so the prefetches unroll */
	const size_t hb = t == GGML_TYPE_Q5_K ? 64 : q6 ? 128 : 0, sbb = 8 * (256 + hb + 32) + (q6 ? 32 : 64),
	    step = sbb / 8;
	const float *dx = (const float *)act, *xs = dx + nb;
	const int8_t *qx = (const int8_t *)(xs + nb);

	acc[0] = acc[1] = _mm256_setzero_ps();
	for (int64_t s = 0; s < nb / 8; s++) {
		const uint8_t *S = G + (size_t)s * sbb, *H = S + 8 * 256, *C = H + 8 * hb, *D = C + 8 * 32;
		__m256 d[2], dm[2];

		UNROLL
		for (int h = 0; h < nh; h++) {
			d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(D + 16 * h)));
			dm[h] = q6 ? _mm256_setzero_ps() :
			    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(D + 32 + 16 * h)));
		}
		for (int j = 0; j < 8; j++) {
			const int64_t b = 8 * s + j;
			/* addresses only: prefetches never fault */
			const char *pf = (const char *)S + PF_BYTES + step * (size_t)j;
			UNROLL
			for (size_t o = 0; o < step; o += 64)
				_mm_prefetch(pf + o, _MM_HINT_T0);
			_mm_prefetch(pf + step - 1, _MM_HINT_T0);

			const __m256 db = _mm256_set1_ps(dx[b]), xb = _mm256_set1_ps(xs[b]);
			UNROLL
			for (int h = 0; h < nh; h++) {
				__m256i wv[8], s0, s1, s01;
				__m256 mn = _mm256_setzero_ps();

				levels_k(t, S + 256 * j, H + hb * j, h, wv);
				scales_k(t, C + 32 * j, h, &s0, &s1, &s01);
				if (!q6)
					mn = _mm256_mul_ps(dm[h], _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
					    _mm_loadl_epi64((const __m128i *)(C + 32 * j + 16 + 8 * h)))));
				__m256i is = block_isum(t, wv, opaque(qx + 32 * b), cx + 2 * b, s0, s1, s01, false);
				acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d[h], db), acc[h]);
				if (!q6)
					acc[h] = _mm256_fnmadd_ps(mn, xb, acc[h]);
			}
		}
	}
}

/* One token through groups [g0, g1). */
INLINE void
packed_one_k(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int64_t n_in, float *y,
    int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb);
	int16_t cx[KCX];

	if (t == GGML_TYPE_Q6_K)
		corrections6((const int8_t *)act + 8 * nb, nb, cx);
	for (int64_t g = g0; g < g1; g++) {
		const uint8_t *G = P + (size_t)g * gb;
		int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;
		__m256 acc[2];

		if (nr > 8) {
			group_one_k(t, 2, G, nb, act, cx, acc);
			store_rows(y + r, acc[0], 8);
			store_rows(y + r + 8, acc[1], (int)(nr - 8));
		} else {
			group_one_k(t, 1, G, nb, act, cx, acc);
			store_rows(y + r, acc[0], (int)nr);
		}
	}
}

/*
 * Tokens in chunks (at most 64, so a chunk's activations stay in L2 while
 * every group passes over them; Q6_K: as many as its half sums' stack
 * holds), each chunk through groups [g0, g1), half a group and KNT tokens
 * at a time.
 */
INLINE void
packed_rows_k(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	const int64_t nb = n_in / 32;
	const size_t gb = q_pack_group_bytes(t, nb), ab = q_act_bytes(n_in);
	int16_t cx[KCX];
	int tc = 64;

	/*
	 * pack_fits (kern_avx2_pack.c) takes nb <= 2048, so at least 4 tokens'
	 * half sums fit; a chunk is whole tiles when it holds one or more
	 */
	if (t == GGML_TYPE_Q6_K && (int64_t)tc * 2 * nb > KCX) {
		tc = (int)(KCX / (2 * nb));
		if (tc >= KNT)
			tc = tc / KNT * KNT;
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

			for (int h = 0; h < 2 && 8 * h < nr; h++) {
				for (int k0 = 0; k0 < nc; k0 += KNT) {
					const uint8_t *a = act + (size_t)(t0 + k0) * ab;
					const int16_t *c = cx + (t == GGML_TYPE_Q6_K ? (size_t)k0 * 2 * (size_t)nb : 0);
					int nt = nc - k0 < KNT ? nc - k0 : KNT;
					__m256 acc[KNT];

					switch (nt) {
					case 8: half_tile_k(t, 8, G, nb, h, a, ab, c, acc); break;
					case 7: half_tile_k(t, 7, G, nb, h, a, ab, c, acc); break;
					case 6: half_tile_k(t, 6, G, nb, h, a, ab, c, acc); break;
					case 5: half_tile_k(t, 5, G, nb, h, a, ab, c, acc); break;
					case 4: half_tile_k(t, 4, G, nb, h, a, ab, c, acc); break;
					case 3: half_tile_k(t, 3, G, nb, h, a, ab, c, acc); break;
					case 2: half_tile_k(t, 2, G, nb, h, a, ab, c, acc); break;
					default: half_tile_k(t, 1, G, nb, h, a, ab, c, acc); break;
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
KERN_AVX2_SYM(packed_k)(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	if (n_tok == 1) {
		switch (t) {
		case GGML_TYPE_Q4_K: packed_one_k(GGML_TYPE_Q4_K, P, act, n_in, y, n_out, g0, g1); break;
		case GGML_TYPE_Q5_K: packed_one_k(GGML_TYPE_Q5_K, P, act, n_in, y, n_out, g0, g1); break;
		default: packed_one_k(GGML_TYPE_Q6_K, P, act, n_in, y, n_out, g0, g1); break;
		}
		return;
	}
	switch (t) {
	case GGML_TYPE_Q4_K: packed_rows_k(GGML_TYPE_Q4_K, P, act, n_tok, n_in, y, n_out, g0, g1); break;
	case GGML_TYPE_Q5_K: packed_rows_k(GGML_TYPE_Q5_K, P, act, n_tok, n_in, y, n_out, g0, g1); break;
	default: packed_rows_k(GGML_TYPE_Q6_K, P, act, n_tok, n_in, y, n_out, g0, g1); break;
	}
}
