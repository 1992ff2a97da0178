/*
 * kern_avx2_q2k.c: the avx2 table's int8-activation kernel of Q2_K
 * (quant_iq.h's layout), compiled with AVX2, FMA and F16C only (kern.am;
 * the avx2vnni table runs it too); kern_avx2_iqn.c's entry hands Q2_K
 * matrices here.
 *
 * A register tile of TR rows times TT tokens, as the avx512 table's
 * (kern_avx512_q2k.c): each super-block of a row is decoded once per pass
 * of tokens into a small array that stays in L1 (a chunk of KC
 * super-blocks of the tile's rows) and read back by every tile of tokens.
 * The 2-bit levels are unsigned, so the 4-bit scale goes into them
 * (vpshufb through [0, sc, 2 sc, 3 sc], one table per 128-bit half, a half
 * being one group of 16): sc * q <= 45, |x| <= 127. Per (row, token) and
 * pair of 32-value blocks: vpmaddubsw of each block with x (pairs of
 * products, at most 11430), vphaddw of the two (sums of 4, at most 22860:
 * no int16 saturation), one vpmaddwd by 1 (lanes 0-1 and 4-5 the first
 * block's, 2-3 and 6-7 the second's), one conversion and one FMA by the
 * tokens' side: the pair's d_x spread over those lanes, formed once per
 * pass with each token's 16 sums of x per 16 times d_x (x_side). Half the
 * widenings, conversions and FMAs of one block per register: these, not
 * the loads, set the pace on the two ports that multiply.
 *
 * Float order, per (row, token): per super-block, t = f0 * dx0, then t =
 * fma(fi, dxi, t) for pairs i = 1..3; acc = fma(t, d, acc); acc =
 * fnmadd(dmin * m, xm, acc) for groups 0-7, then 8-15; from acc = 0,
 * reduced by q_hsum8 at the row's end. The same sequence whatever n_tok is
 * (1 included: decode runs this tile with one token), whichever rows share
 * the call and wherever a chunk ends, so each result is bitwise the same in
 * any batch; the integer sums are the portable kernel's (q_iq_dot_act),
 * only their scaled sum's rounding differs.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/*
 * Rows x tokens: 4 x 1 measured as fast as 6 x 1 and 3 x 2, ahead of 3 x 1,
 * 2 x 2 and 2 x 1 (bench/qmm q2_k 64|512 4864 896 3 avx2, docs/BENCHMARKS.md).
 */
#define TR 4		/* rows per tile (a last tile repeats its last row) */
#define TT 1		/* tokens per tile */
#define KC 16		/* super-blocks of the tile's rows decoded at once (22 KiB) */
#define XS_SB 48	/* the tokens' side per token and super-block: 4 x 8 spread d_x, 16 offset sums */
#define XS_FLOATS 32768	/* the tokens' side of one pass (128 KiB of stack) */
#define NT_MIN(n) ((n) < TT ? (n) : TT)
_Static_assert(TT <= 6, "q2k_pass's switch takes tiles of up to 6 tokens");

/*
 * The tokens' side of one token, XS_SB floats per super-block: pair i's
 * d_x (8i ..) as the lanes of its sums (d_2i, d_2i, d_2i+1, d_2i+1, twice),
 * then xm[k] = d_x of block k / 2 times the sum of the rounded x of values
 * 16k .. 16k + 15 (exact in any order, so the same floats however formed).
 */
static void
x_side(const uint8_t *a, int64_t n, float *xs)
{
	const float *d = (const float *)a;
	const int8_t *q = (const int8_t *)(d + 2 * (n / 32));
	const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
	/* h below holds groups 0, 2, 4, 6 | 1, 3, 5, 7: back to group order */
	const __m256i back = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	const __m256i half = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);

	for (int64_t e = 0; e < n; e += 256, xs += XS_SB) {
		__m256 d8 = _mm256_loadu_ps(d + e / 32);
		for (int i = 0; i < 4; i++)
			_mm256_storeu_ps(xs + 8 * i, _mm256_permutevar8x32_ps(d8, _mm256_setr_epi32(2 * i, 2 * i,
			    2 * i + 1, 2 * i + 1, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1)));
		for (int64_t h = 0; h < 2; h++) {
			__m256i s[4];
			for (int b = 0; b < 4; b++)	/* dwords 0-3 quarters of group 2b, 4-7 of group 2b + 1 */
				s[b] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, ld256(q + e + 128 * h + 32 * b)),
				    ones16);
			__m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
			__m256 dx = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(d + e / 32 + 4 * h)),
			    half);
			_mm256_storeu_ps(xs + 32 + 8 * h, _mm256_mul_ps(dx,
			    _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(c, back))));
		}
	}
}

/* A super-block of a row, decoded for every tile of tokens. */
struct q2k {
	__m256i u[8];		/* block b (values 32b ..): sc * q per byte */
	__m256 mn[2];		/* dmin * min of groups 0-7, 8-15 */
	float d;
};

INLINE void
q2k_decode(const uint8_t *p, struct q2k *g)
{
	__m128i s16 = _mm_loadu_si128((const __m128i *)p);
	__m256i s[2] = { _mm256_cvtepu8_epi32(s16), _mm256_cvtepu8_epi32(_mm_srli_si128(s16, 8)) };
	__m256i tab[2];
	__m256 dmin = _mm256_set1_ps(h2f(p + 82));

	for (int h = 0; h < 2; h++) {
		/* per group k: the bytes 0, sc, 2 sc, 3 sc (sc <= 15) as one dword */
		tab[h] = _mm256_mullo_epi32(_mm256_and_si256(s[h], _mm256_set1_epi32(0xF)),
		    _mm256_set1_epi32(0x03020100));
		g->mn[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(s[h], 4)), dmin);
	}
	g->d = h2f(p + 80);
	UNROLL
	for (int b = 0; b < 8; b++) {
		/* values 128h + 32i + l: bits 2i of byte 32h + l (block b = 4h + i) */
		__m256i q = _mm256_and_si256(_mm256_srli_epi16(ld256(p + 16 + 32 * (b / 4)), 2 * (b % 4)),
		    _mm256_set1_epi8(3));
		/* groups 2b, 2b + 1: dwords (2b) % 8 and (2b + 1) % 8 of half b / 4, one per 128-bit half */
		__m256i idx = _mm256_setr_epi32(2 * b % 8, 2 * b % 8, 2 * b % 8, 2 * b % 8,
		    (2 * b + 1) % 8, (2 * b + 1) % 8, (2 * b + 1) % 8, (2 * b + 1) % 8);
		g->u[b] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(tab[b / 4], idx), q);
	}
}

/* Pair i's exact sums of row g with token levels q: lanes 0-1, 4-5 block 2i's, 2-3, 6-7 block 2i + 1's. */
INLINE __m256
pair_sums(const struct q2k *g, const int8_t *q, int i)
{
	__m256i m0 = _mm256_maddubs_epi16(g->u[2 * i], ld256(q + 64 * i));
	__m256i m1 = _mm256_maddubs_epi16(g->u[2 * i + 1], ld256(q + 64 * i + 32));

	return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_hadd_epi16(m0, m1), _mm256_set1_epi16(1)));
}

/*
 * TR rows (their chunks of decoded super-blocks g[r]) times NT <= TT tokens
 * (q[k] their levels, xs[k] their side, both at the chunk's first
 * super-block) over ns super-blocks; acc[TT * r + k] carried in and out.
 */
INLINE void
q2k_tile(int NT, const struct q2k *const *g, int ns, const int8_t *const *q, const float *const *xs,
    __m256 *acc)
{
	__m256 a[TR][TT];

	UNROLL
	for (int r = 0; r < TR; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			a[r][k] = acc[TT * r + k];
	for (int s = 0; s < ns; s++) {
		__m256 t[TR][TT];
		UNROLL
		for (int i = 0; i < 4; i++) {
			UNROLL
			for (int r = 0; r < TR; r++) {
				UNROLL
				for (int k = 0; k < NT; k++) {
					__m256 f = pair_sums(&g[r][s], q[k] + 256 * s, i);
					__m256 dx = _mm256_loadu_ps(xs[k] + XS_SB * s + 8 * i);
					if (i == 0)
						t[r][k] = _mm256_mul_ps(f, dx);
					else
						t[r][k] = _mm256_fmadd_ps(f, dx, t[r][k]);
				}
			}
		}
		UNROLL
		for (int r = 0; r < TR; r++) {
			__m256 d = _mm256_set1_ps(g[r][s].d);
			UNROLL
			for (int k = 0; k < NT; k++) {
				const float *xm = xs[k] + XS_SB * s + 32;
				a[r][k] = _mm256_fmadd_ps(t[r][k], d, a[r][k]);
				a[r][k] = _mm256_fnmadd_ps(g[r][s].mn[0], _mm256_loadu_ps(xm), a[r][k]);
				a[r][k] = _mm256_fnmadd_ps(g[r][s].mn[1], _mm256_loadu_ps(xm + 8), a[r][k]);
			}
		}
	}
	UNROLL
	for (int r = 0; r < TR; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			acc[TT * r + k] = a[r][k];
}
/*
 * Rows [r0, r1) in tiles of TR (a last tile repeats its last row, whose
 * copies are computed and dropped) against nt <= Q_IQ_TOKENS tokens (act,
 * ab bytes apart; xs their side, XS_SB * nsb floats apart); out[k * os].
 */
static void
q2k_pass(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int nt, int64_t nsb, const float *xs,
    float *y, size_t os, int64_t r0, int64_t r1)
{
	struct q2k dec[TR * KC];
	__m256 acc[TR * (Q_IQ_TOKENS + TT)];
	const int64_t nb32 = 8 * nsb;
	/*
	 * One token is bound by memory, and the hardware prefetchers stop at
	 * each 4 KiB page of the mapped file: decode asks for each super-block
	 * of the next tile's rows as it decodes this one's.
	 */
	const size_t pf = nt == 1 ? TR * rb : 0;
	const int na = TR * ((nt + TT - 1) / TT * TT);	/* the accumulators of nt tokens' tiles */

	for (int64_t r = r0; r < r1; r += TR) {
		int nr = r1 - r < TR ? (int)(r1 - r) : TR;

		for (int i = 0; i < na; i++)
			acc[i] = _mm256_setzero_ps();
		for (int64_t s0 = 0; s0 < nsb; s0 += KC) {
			int ns = nsb - s0 < KC ? (int)(nsb - s0) : KC;
			const struct q2k *g[TR];

			for (int i = 0; i < nr; i++) {
				const uint8_t *p = W + (size_t)(r + i) * rb + (size_t)s0 * sizeof(block_q2_K);
				for (int s = 0; s < ns; s++, p += sizeof(block_q2_K)) {
					if (pf)	/* addresses only: prefetches never fault */
						prefetch_span(p + pf, sizeof(block_q2_K));
					q2k_decode(p, &dec[KC * i + s]);
				}
			}
			for (int i = 0; i < TR; i++)
				g[i] = dec + KC * (i < nr ? i : nr - 1);
			for (int k0 = 0; k0 < nt; k0 += TT) {
				int nk = nt - k0 < TT ? nt - k0 : TT;
				const int8_t *q[TT];
				const float *x[TT];
				for (int k = 0; k < nk; k++) {
					const float *d = (const float *)(act + (size_t)(k0 + k) * ab);
					q[k] = (const int8_t *)(d + 2 * nb32) + 256 * s0;
					x[k] = xs + (size_t)(k0 + k) * (size_t)(XS_SB * nsb) + XS_SB * s0;
				}
				__m256 *c = acc + TR * k0;
				switch (nk) {	/* NT_MIN: no tile wider than TT is compiled */
				case 6: q2k_tile(NT_MIN(6), g, ns, q, x, c); break;
				case 5: q2k_tile(NT_MIN(5), g, ns, q, x, c); break;
				case 4: q2k_tile(NT_MIN(4), g, ns, q, x, c); break;
				case 3: q2k_tile(NT_MIN(3), g, ns, q, x, c); break;
				case 2: q2k_tile(NT_MIN(2), g, ns, q, x, c); break;
				default: q2k_tile(1, g, ns, q, x, c); break;
				}
			}
		}
		for (int k = 0; k < nt; k++)
			for (int i = 0; i < nr; i++)
				y[(size_t)k * os + (size_t)(r + i)] = q_hsum8(acc[TR * (k - k % TT) +
				    TT * i + k % TT]);
	}
}

/*
 * The table's entry for Q2_K (kern_avx2_iqn_rows_act's case), tokens in
 * passes whose side fits XS_FLOATS.
 */
bool
kern_avx2_q2k_rows_act(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	float xs[XS_FLOATS];
	int64_t nsb = n_in / 256;

	if (n_in % 256 != 0 || nsb == 0 || nsb * XS_SB > XS_FLOATS)
		return false;
	int tp = XS_FLOATS / (XS_SB * nsb) < Q_IQ_TOKENS ? (int)(XS_FLOATS / (XS_SB * nsb)) : Q_IQ_TOKENS;
	if (tp > TT)	/* whole tiles of tokens in every pass but the last */
		tp -= tp % TT;
	for (int t0 = 0; t0 < n_tok; t0 += tp) {
		int nt = n_tok - t0 < tp ? n_tok - t0 : tp;
		const uint8_t *a = act + (size_t)t0 * ab;
		for (int k = 0; k < nt; k++)
			x_side(a + (size_t)k * ab, n_in, xs + (size_t)k * (size_t)(XS_SB * nsb));
		q2k_pass(W, rb, a, ab, nt, nsb, xs, y + (size_t)t0 * (size_t)n_out, (size_t)n_out, r0, r1);
	}
	return true;
}
