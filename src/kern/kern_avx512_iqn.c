/*
 * kern_avx512_iqn.c: the avx512 table's int8-activation kernels of MXFP4,
 * IQ4_NL, IQ4_XS and Q2_K (quant_iq.h's layouts), compiled with AVX512 F,
 * VL, BW and VNNI (kern.am). Each block is decoded straight into vector
 * registers: no struct q_iq_int, no scalar level or scale per value.
 *
 * The nibble types (MXFP4, IQ4_NL, IQ4_XS) go by groups of eight 32-value
 * blocks (an IQ4_XS super-block; 8 consecutive IQ4_NL/MXFP4 blocks, fewer
 * at a row's end). Per group, once for every token: the 8 blocks' weight
 * scales as one 8-lane vector (the fp16 d's picked out of two 64-byte loads
 * by one word permute; MXFP4's E8M0 exponents the same way, applied with
 * vscalefps, exact as 2^(e - 128) * d_x is; IQ4_XS's 6-bit scales by lane
 * shifts), and per pair of blocks one zmm of level magnitudes: the pair's
 * 16-byte nibble runs broadcast to lanes [a, a, b, b], the high nibbles
 * shifted down in lanes 1 and 3, one vpshufb through the |level| table,
 * and the negative levels as a byte mask (bit 3 of the nibble: clear for
 * IQ4_NL's negative half, set for MXFP4's). Per token and pair: x negated
 * where the level is (masked subtract), one vpdpbusd (lanes 8b .. 8b + 7
 * block b's exact sums, |level| <= 127, |x| <= 127), and one FMA by the
 * pair's two scales s_b * d_x,b spread over those lanes.
 *
 * Q2_K per super-block: the levels (0..3) are unsigned already, so the
 * 4-bit scale goes into them: one vpshufb per zmm through per-16 tables
 * [0, sc, 2 sc, 3 sc] (one 128-bit lane is one group of 16) gives sc * q;
 * vpdpbusd of that with x is each group's sc * sum q x, one FMA per pair of
 * blocks by d * d_x,b. The offsets: each token's sums of x per 16 times
 * d_x are formed once per call (x_sums16), so a super-block's 16 mins
 * (times dmin) take one FMA per token.
 *
 * Batch independence: a (row, token) runs this same sequence of float
 * operations whatever n_tok is and whichever rows share the call (the
 * groups, their order and the tail are set by n_in alone), so its result is
 * bitwise the same in any batch. The integer sums are those of the portable
 * kernel (q_iq_dot_act); only the float rounding of their scaled sum differs.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/*
 * Accumulators per token: pair j of a group adds into its own, so that no
 * chain of dependent FMAs runs through a group (one FMA's latency per
 * group and accumulator, not four); summed in one order at the row's end.
 */
#define NACC 4

/*
 * One token is bound by memory: the hardware prefetchers stop at each 4 KiB
 * page of the mapped file, so each group of a row asks for the same group
 * PF_ROWS rows on, as the K-quants' one-token kernels do (docs/BENCHMARKS.md).
 */
#define PF_ROWS 2

INLINE float
acc_sum(const __m512 *a)
{
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

/* lanes 0-7 take element 2j of an 8-lane vector, lanes 8-15 element 2j + 1 */
static const int32_t pair_idx[4][16] = {
	{ 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1 },
	{ 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3 },
	{ 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5 },
	{ 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7 },
};

INLINE __m512
pair_spread(__m256 v, int j)
{
	return _mm512_permutexvar_ps(_mm512_loadu_si512(pair_idx[j]), _mm512_castps256_ps512(v));
}

/* Bytes [0, n) of 128 at p as two zmm, nothing past them read (masked loads suppress faults). */
INLINE void
load128(const uint8_t *p, int n, __m512i *a, __m512i *b)
{
	__mmask64 ma = n >= 64 ? ~0ull : (1ull << n) - 1;
	__mmask64 mb = n >= 128 ? ~0ull : n > 64 ? (1ull << (n - 64)) - 1 : 0;

	*a = _mm512_maskz_loadu_epi8(ma, p);
	*b = _mm512_maskz_loadu_epi8(mb, p + 64);
}

/* ---- MXFP4, IQ4_NL, IQ4_XS ------------------------------------------------ */

/* A group of up to 8 blocks of 32, decoded for every token. */
struct nib {
	__m512i wabs[4];	/* pair j: |level| of blocks 2j (lanes 0-1), 2j + 1 (lanes 2-3) */
	__mmask64 neg[4];	/* where the level is negative */
	__m256 sw;		/* per block: its scale; MXFP4: e - 128 */
};

INLINE const uint8_t *
nib_qs(enum gguf_dtype t, const uint8_t *p, int b)
{
	switch (t) {
	case GGML_TYPE_IQ4_NL: return p + 18 * b + 2;
	case GGML_TYPE_MXFP4: return p + 17 * b + 1;
	default: return p + 8 + 16 * b;	/* IQ4_XS */
	}
}

/* The group's 8 scales (lanes past nb zero, or an exponent of a zero scale's block). */
INLINE __m256
nib_scales(enum gguf_dtype t, const uint8_t *p, int nb)
{
	__m512i a, b;

	if (t == GGML_TYPE_IQ4_XS) {
		/* 6-bit ls: nibble b of the u32 at p + 4, two bits at 2b of the u16 at p + 2; d * (ls - 32) */
		uint32_t lo;
		uint16_t hi;
		memcpy(&lo, p + 4, 4);
		memcpy(&hi, p + 2, 2);
		__m256i l = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)lo),
		    _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)), _mm256_set1_epi32(0xF));
		__m256i h = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(hi),
		    _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
		__m256i ls = _mm256_or_si256(l, _mm256_slli_epi32(h, 4));
		return _mm256_mul_ps(_mm256_set1_ps(h2f(p)),
		    _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
	}
	if (t == GGML_TYPE_IQ4_NL) {
		/* the fp16 d of block b is word 9b of the group */
		load128(p, 18 * nb, &a, &b);
		__m512i w = _mm512_permutex2var_epi16(a, _mm512_inserti32x4(_mm512_setzero_si512(),
		    _mm_setr_epi16(0, 9, 18, 27, 36, 45, 54, 63), 0), b);
		return _mm256_cvtph_ps(_mm512_castsi512_si128(w));
	}
	/* MXFP4: block b's exponent is byte 17b: the low or high byte of word 17b / 2 */
	load128(p, 17 * nb, &a, &b);
	__m512i w = _mm512_permutex2var_epi16(a, _mm512_inserti32x4(_mm512_setzero_si512(),
	    _mm_setr_epi16(0, 8, 17, 25, 34, 42, 51, 59), 0), b);
	__m256i e = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu16_epi32(_mm512_castsi512_si128(w)),
	    _mm256_setr_epi32(0, 8, 0, 8, 0, 8, 0, 8)), _mm256_set1_epi32(0xFF));
	return _mm256_cvtepi32_ps(_mm256_sub_epi32(e, _mm256_set1_epi32(128)));
}

INLINE void
nib_decode(enum gguf_dtype t, const uint8_t *p, int nb, __m512i tabs, struct nib *g)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0F), bit3 = _mm512_set1_epi8(8);

	g->sw = nib_scales(t, p, nb);
	UNROLL
	for (int j = 0; j < 4; j++) {
		if (2 * j >= nb) {	/* a row's last group: never read, set for the compiler */
			g->wabs[j] = _mm512_setzero_si512();
			g->neg[j] = 0;
			continue;
		}
		__m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)nib_qs(t, p, 2 * j)));
		if (2 * j + 1 < nb)
			v = _mm512_mask_broadcast_i32x4(v, 0xFF00,
			    _mm_loadu_si128((const __m128i *)nib_qs(t, p, 2 * j + 1)));
		else
			v = _mm512_maskz_mov_epi32(0x00FF, v);
		/* lanes 1 and 3: values 16-31 of their block, the high nibbles */
		__m512i n = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), lo4);
		g->wabs[j] = _mm512_shuffle_epi8(tabs, n);
		/* IQ4_NL's levels 0-7 are its negative ones, MXFP4's 8-15 (8 is -0) */
		g->neg[j] = t == GGML_TYPE_MXFP4 ? _mm512_test_epi8_mask(n, bit3) : _mm512_testn_epi8_mask(n, bit3);
	}
}

/* One token's product with the group of nb blocks: d their d_x, q their levels. */
INLINE void
nib_token(enum gguf_dtype t, const struct nib *g, int nb, const float *d, const int8_t *q, __m512 *acc)
{
	__m256 dx = _mm256_maskz_loadu_ps((__mmask8)(nb >= 8 ? 0xFF : (1u << nb) - 1), d);
	/* lanes past nb: 0 (MXFP4: 0 * 2^k), so the half-empty pair of an odd tail adds 0 * 0 */
	__m256 s = t == GGML_TYPE_MXFP4 ? _mm256_scalef_ps(dx, g->sw) : _mm256_mul_ps(g->sw, dx);

	UNROLL
	for (int j = 0; 2 * j < nb; j++) {
		__m512i x = 2 * j + 1 < nb ? _mm512_loadu_si512(q + 64 * j) :
		    _mm512_maskz_loadu_epi8(0xFFFFFFFFull, q + 64 * j);
		__m512i sx = _mm512_mask_sub_epi8(x, g->neg[j], _mm512_setzero_si512(), x);
		__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), g->wabs[j], sx);
		acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), pair_spread(s, j), acc[j]);
	}
}

/* Blocks [b0, b0 + nb) of a row against every token. */
INLINE void
nib_group(enum gguf_dtype t, const uint8_t *row, int64_t b0, int nb, __m512i tabs, const uint8_t *act,
    size_t ab, int n_tok, int64_t nb32, size_t pf, __m512 *acc)
{
	/* IQ4_XS: super-block b0 / 8 (b0 a multiple of 8); the others: block b0 */
	size_t off = t == GGML_TYPE_IQ4_XS ? (size_t)(b0 / 8) * sizeof(block_iq4_xs) :
	    (size_t)b0 * (t == GGML_TYPE_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_iq4_nl));
	size_t gb = t == GGML_TYPE_IQ4_XS ? sizeof(block_iq4_xs) :
	    (size_t)nb * (t == GGML_TYPE_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_iq4_nl));
	struct nib g;

	if (pf)	/* decode: the same group of a row further on (addresses only: prefetches never fault) */
		prefetch_span(row + off + pf, gb);
	nib_decode(t, row + off, nb, tabs, &g);
	for (int tok = 0; tok < n_tok; tok++) {
		const float *d = (const float *)(act + (size_t)tok * ab);
		nib_token(t, &g, nb, d + b0, (const int8_t *)(d + 2 * nb32) + 32 * b0, acc + NACC * tok);
	}
}

INLINE void
nib_row(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    size_t pf, float *out, size_t os)
{
	const int8_t *tab = t == GGML_TYPE_MXFP4 ? q_mxfp4_values : q_iq4nl_values;
	__m512i tabs = _mm512_broadcast_i32x4(_mm_abs_epi8(_mm_loadu_si128((const __m128i *)tab)));
	int64_t nb32 = n / 32, b0;
	__m512 acc[NACC * Q_IQ_TOKENS];

	for (int i = 0; i < NACC * n_tok; i++)
		acc[i] = _mm512_setzero_ps();
	for (b0 = 0; b0 + 8 <= nb32; b0 += 8)
		nib_group(t, row, b0, 8, tabs, act, ab, n_tok, nb32, pf, acc);
	if (b0 < nb32)
		nib_group(t, row, b0, (int)(nb32 - b0), tabs, act, ab, n_tok, nb32, pf, acc);
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = acc_sum(acc + NACC * tok);
}

/* ---- Q2_K ------------------------------------------------------------------ */

/*
 * The offsets' side, per token once per call: xm[k] = d_x of block k / 2
 * times the sum of the rounded x of values 16k .. 16k + 15 (exact in any
 * order, so the same floats however they are formed). A super-block's 16
 * mins then take one FMA per token. XM_FLOATS bounds the floats of the
 * tokens of one pass (on the stack).
 */
#define XM_FLOATS 8192

static void
x_sums16(const uint8_t *a, int64_t n, float *xm)
{
	const float *d = (const float *)a;
	const int8_t *q = (const int8_t *)(d + 2 * (n / 32));
	const __m512i ones = _mm512_set1_epi8(1);
	/* c below holds group 4i + L at dword 4L + i: back to group order */
	const __m512i back = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	const __m512i half = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	for (int64_t e = 0; e < n; e += 256) {
		__m512i s[4];
		for (int j = 0; j < 4; j++)	/* dword 4g + i: a quarter of group g of the 64 */
			s[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(q + e + 64 * j));
		__m512i lo = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
		__m512i hi = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
		__m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(lo, hi), _mm512_unpackhi_epi64(lo, hi));
		__m512 dx = _mm512_permutexvar_ps(half, _mm512_castps256_ps512(_mm256_loadu_ps(d + e / 32)));
		_mm512_storeu_ps(xm + e / 16, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(back, c))));
	}
}

/* lanes 4k .. 4k + 3 take element 4j + k of a 16-lane vector: pair j's four groups of 16 */
static const int32_t quad_idx[4][16] = {
	{ 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 },
	{ 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7 },
	{ 8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11 },
	{ 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15 },
};

/* A super-block decoded for every token. */
struct q2k {
	__m512i u[4];		/* pair j (values 64j ..): sc * q per byte */
	__m512 mn;		/* dmin * min of group k */
	float d;
};

INLINE void
q2k_decode(const uint8_t *p, struct q2k *g)
{
	__m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
	/* per group k: the bytes 0, sc, 2 sc, 3 sc (sc <= 15) as one dword */
	__m512i tab = _mm512_mullo_epi32(_mm512_and_si512(s, _mm512_set1_epi32(0xF)),
	    _mm512_set1_epi32(0x03020100));

	g->d = h2f(p + 80);
	g->mn = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(s, 4)), _mm512_set1_ps(h2f(p + 82)));
	UNROLL
	for (int j = 0; j < 4; j++) {
		/* values 128h + 32i + l: bits 2i of byte 32h + l; pair j holds i = 2(j % 2), 2(j % 2) + 1 */
		__m512i v = _mm512_broadcast_i64x4(ld256(p + 16 + 32 * (j / 2)));
		__m512i sh = _mm512_set1_epi16((short)(4 * (j % 2)));
		sh = _mm512_mask_add_epi16(sh, 0xFFFF0000u, sh, _mm512_set1_epi16(2));
		__m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(3));
		g->u[j] = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(_mm512_loadu_si512(quad_idx[j]), tab), q);
	}
}

/* One token: d its super-block's 8 d_x, q its levels, xm its 16 offset sums. */
INLINE void
q2k_token(const struct q2k *g, const float *d, const int8_t *q, const float *xm, __m512 *acc)
{
	__m256 sd = _mm256_mul_ps(_mm256_loadu_ps(d), _mm256_set1_ps(g->d));

	UNROLL
	for (int j = 0; j < 4; j++) {
		__m512i pu = _mm512_dpbusd_epi32(_mm512_setzero_si512(), g->u[j], _mm512_loadu_si512(q + 64 * j));
		acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pu), pair_spread(sd, j), acc[j]);
	}
	acc[0] = _mm512_fnmadd_ps(g->mn, _mm512_loadu_ps(xm), acc[0]);
}

/* One row against n_tok tokens, xm their offset sums (nb16 floats apart). */
INLINE void
q2k_row(const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n, const float *xm,
    int64_t nb16, size_t pf, float *out, size_t os)
{
	int64_t nb32 = n / 32;
	__m512 acc[NACC * Q_IQ_TOKENS];
	struct q2k g;

	for (int i = 0; i < NACC * n_tok; i++)
		acc[i] = _mm512_setzero_ps();
	for (int64_t b0 = 0; b0 < nb32; b0 += 8) {
		const uint8_t *p = row + (size_t)(b0 / 8) * sizeof(block_q2_K);
		if (pf)	/* decode: the same super-block of a row further on */
			prefetch_span(p + pf, sizeof(block_q2_K));
		q2k_decode(p, &g);
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab);
			q2k_token(&g, d + b0, (const int8_t *)(d + 2 * nb32) + 32 * b0, xm + tok * nb16 + 2 * b0,
			    acc + NACC * tok);
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = acc_sum(acc + NACC * tok);
}

/* The rows of a Q2_K matrix: tokens in passes whose offset sums fit XM_FLOATS. */
INLINE bool
q2k_rows(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t r0, int64_t r1)
{
	float xm[XM_FLOATS];
	int64_t nb16 = n_in / 16;

	if (nb16 == 0 || nb16 > XM_FLOATS)
		return false;
	int tp = XM_FLOATS / nb16 < Q_IQ_TOKENS ? (int)(XM_FLOATS / nb16) : Q_IQ_TOKENS;
	if (n_tok == 1) {
		x_sums16(act, n_in, xm);
		for (int64_t r = r0; r < r1; r++)
			q2k_row(W + (size_t)r * rb, act, ab, 1, n_in, xm, nb16, PF_ROWS * rb, y + r, (size_t)n_out);
		return true;
	}
	for (int t0 = 0; t0 < n_tok; t0 += tp) {
		int nt = n_tok - t0 < tp ? n_tok - t0 : tp;
		const uint8_t *a = act + (size_t)t0 * ab;
		for (int tok = 0; tok < nt; tok++)
			x_sums16(a + (size_t)tok * ab, n_in, xm + tok * nb16);
		for (int64_t r = r0; r < r1; r++)
			q2k_row(W + (size_t)r * rb, a, ab, nt, n_in, xm, nb16, 0,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
	}
	return true;
}

/* ---- the table's entry ------------------------------------------------------ */

/* Rows [r0, r1) of one type, tokens in runs of Q_IQ_TOKENS; n_tok 1 is compiled apart (decode). */
#define ROWS(call)								\
	do {									\
		for (int64_t r = r0; r < r1; r++) {				\
			const uint8_t *row = W + (size_t)r * rb;		\
			if (n_tok == 1) {					\
				float *out = y + r;				\
				const int nt = 1;				\
				const uint8_t *a = act;				\
				const size_t pf = PF_ROWS * rb;			\
				call;						\
				continue;					\
			}							\
			for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS) {	\
				float *out = y + (size_t)t0 * (size_t)n_out + (size_t)r; \
				const int nt = n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS; \
				const uint8_t *a = act + (size_t)t0 * ab;	\
				const size_t pf = 0;				\
				call;						\
			}							\
		}								\
	} while (0)

bool
kern_avx512_iqn_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % q_iq_block_elems(t) != 0)
		return false;
	switch (t) {
	case GGML_TYPE_MXFP4: ROWS(nib_row(GGML_TYPE_MXFP4, row, a, ab, nt, n_in, pf, out, (size_t)n_out)); break;
	case GGML_TYPE_IQ4_NL: ROWS(nib_row(GGML_TYPE_IQ4_NL, row, a, ab, nt, n_in, pf, out, (size_t)n_out)); break;
	case GGML_TYPE_IQ4_XS: ROWS(nib_row(GGML_TYPE_IQ4_XS, row, a, ab, nt, n_in, pf, out, (size_t)n_out)); break;
	case GGML_TYPE_Q2_K: return q2k_rows(W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
	default: return false;
	}
	return true;
}
