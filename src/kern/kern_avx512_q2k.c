/*
 * kern_avx512_q2k.c: the avx512 table's int8-activation kernel of Q2_K
 * (quant_iq.h's layout), compiled with AVX512 F, VL, BW and VNNI (kern.am);
 * kern_avx512_iqn.c's entry hands Q2_K matrices here.
 *
 * A register tile of TR rows times TT tokens. Each super-block of a row is
 * decoded once per pass of tokens (q2k_decode, into a small array that
 * stays in L1: a chunk of KC super-blocks of the tile's rows) and read back
 * by every tile of tokens: the levels (0..3) are unsigned, so the 4-bit
 * scale goes into them (one vpshufb per zmm through per-16 tables [0, sc,
 * 2 sc, 3 sc], a 128-bit lane being one group of 16), and vpdpbusd of that
 * with x is each group's exact sc * sum q x. The tokens' side is formed once
 * per pass (x_side): per super-block the d_x of each pair of 32-value blocks
 * spread over the pair's lanes (4 zmm) and the 16 sums of x per 16 times
 * d_x (the offsets' side), so the tile's loop has no shuffle at all:
 * per (row, token, super-block) 4 vpdpbusd, 4 conversions, 4 products by
 * d_x and 2 FMAs (d, and the 16 mins times dmin), the TR x TT accumulators
 * in registers throughout a chunk.
 *
 * Float order, per (row, token): per super-block, t = f0 * dx0, then t =
 * fma(fj, dxj, t) for j = 1..3 (fj the converted exact sums of pair j);
 * acc = fma(t, d, acc); acc = fnmadd(dmin * m, xm, acc); from acc = 0, the
 * 16 lanes summed by _mm512_reduce_add_ps at the row's end. The same
 * sequence whatever n_tok is (1 included: decode runs this tile with one
 * token), whichever rows share the call and wherever a chunk ends, so each
 * result is bitwise the same in any batch. The integer sums are those of
 * the portable kernel (q_iq_dot_act); only their scaled sum's rounding
 * differs.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/*
 * Rows x tokens: 4 x 2 measured ahead of 4 x 3, 6 x 2, 3 x 4, 2 x 4 and 3 x 2
 * (bench/qmm q2_k 64|512 4864 896 3 avx512, docs/BENCHMARKS.md).
 */
#define TR 4		/* rows per tile (a last tile repeats its last row) */
#define TT 2		/* tokens per tile */
#define KC 16		/* super-blocks of the tile's rows decoded at once (24 KiB) */
#define XS_SB 80	/* the tokens' side per token and super-block: 4 x 16 spread d_x, 16 offset sums */
#define XS_FLOATS 32768	/* the tokens' side of one pass (128 KiB of stack) */
#define NT_MIN(n) ((n) < TT ? (n) : TT)
_Static_assert(TT <= 6, "q2k_pass's switch takes tiles of up to 6 tokens");

/* lanes 0-7 take element 2j of an 8-lane vector, lanes 8-15 element 2j + 1 */
static const int32_t pair_idx[4][16] = {
	{ 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1 },
	{ 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3 },
	{ 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5 },
	{ 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7 },
};

/*
 * The tokens' side of one token, XS_SB floats per super-block: the 8 d_x
 * of its blocks spread as pair j's lanes (16j ..), then xm[k] = d_x of
 * block k / 2 times the sum of the rounded x of values 16k .. 16k + 15
 * (exact in any order, so the same floats however they are formed).
 */
static void
x_side(const uint8_t *a, int64_t n, float *xs)
{
	const float *d = (const float *)a;
	const int8_t *q = (const int8_t *)(d + 2 * (n / 32));
	const __m512i ones = _mm512_set1_epi8(1);
	/* c below holds group 4i + L at dword 4L + i: back to group order */
	const __m512i back = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	const __m512i half = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	for (int64_t e = 0; e < n; e += 256, xs += XS_SB) {
		__m512i s[4];
		__m512 d8 = _mm512_castps256_ps512(_mm256_loadu_ps(d + e / 32));
		for (int j = 0; j < 4; j++) {
			_mm512_storeu_ps(xs + 16 * j, _mm512_permutexvar_ps(_mm512_loadu_si512(pair_idx[j]), d8));
			/* dword 4g + i: a quarter of group g of the 64 */
			s[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(q + e + 64 * j));
		}
		__m512i lo = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
		__m512i hi = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
		__m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(lo, hi), _mm512_unpackhi_epi64(lo, hi));
		_mm512_storeu_ps(xs + 64, _mm512_mul_ps(_mm512_permutexvar_ps(half, d8),
		    _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(back, c))));
	}
}

/* lanes 4k .. 4k + 3 take element 4j + k of a 16-lane vector: pair j's four groups of 16 */
static const int32_t quad_idx[4][16] = {
	{ 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 },
	{ 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7 },
	{ 8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11 },
	{ 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15 },
};

/* A super-block of a row, decoded for every tile of tokens. */
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

/*
 * TR rows (their chunks of decoded super-blocks g[r]) times NT <= TT tokens
 * (q[k] their levels, xs[k] their side, both at the chunk's first
 * super-block) over ns super-blocks; acc[TT * r + k] carried in and out.
 */
INLINE void
q2k_tile(int NT, const struct q2k *const *g, int ns, const int8_t *const *q, const float *const *xs,
    __m512 *acc)
{
	__m512 a[TR][TT];

	UNROLL
	for (int r = 0; r < TR; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			a[r][k] = acc[TT * r + k];
	for (int s = 0; s < ns; s++) {
		__m512 t[TR][TT];
		UNROLL
		for (int j = 0; j < 4; j++) {
			UNROLL
			for (int r = 0; r < TR; r++) {
				__m512i u = g[r][s].u[j];
				UNROLL
				for (int k = 0; k < NT; k++) {
					__m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
					    _mm512_loadu_si512(q[k] + 256 * s + 64 * j)));
					__m512 dx = _mm512_loadu_ps(xs[k] + XS_SB * s + 16 * j);
					if (j == 0)
						t[r][k] = _mm512_mul_ps(f, dx);
					else
						t[r][k] = _mm512_fmadd_ps(f, dx, t[r][k]);
				}
			}
		}
		UNROLL
		for (int r = 0; r < TR; r++) {
			__m512 d = _mm512_set1_ps(g[r][s].d);
			UNROLL
			for (int k = 0; k < NT; k++) {
				a[r][k] = _mm512_fmadd_ps(t[r][k], d, a[r][k]);
				a[r][k] = _mm512_fnmadd_ps(g[r][s].mn, _mm512_loadu_ps(xs[k] + XS_SB * s + 64), a[r][k]);
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
	__m512 acc[TR * (Q_IQ_TOKENS + TT)];
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
			acc[i] = _mm512_setzero_ps();
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
				__m512 *c = acc + TR * k0;
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
				y[(size_t)k * os + (size_t)(r + i)] = _mm512_reduce_add_ps(acc[TR * (k - k % TT) +
				    TT * i + k % TT]);
	}
}

/*
 * The table's entry for Q2_K (kern_avx512_iqn_rows_act's case),
 * tokens in passes whose side fits XS_FLOATS.
 */
bool
kern_avx512_q2k_rows_act(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok,
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
