/*
 * kern_avx512.c: the avx512 table's products of float activations (F32,
 * F16, BF16 weights) with 512-bit vectors, one accumulator per (row,
 * token); compiled with AVX512 F, VL, BW and VNNI (kern.am).
 */
#include "kern_int.h"
#include "kern_x86.h"

#include <stdint.h>
#include <stdlib.h>

/*
 * Values i .. i + 15 of a row as floats. A BF16 value is the top half of
 * its float: one word permutation puts word j in the top half of lane j
 * and zeroes the bottom halves (a single shuffle-port instruction, where
 * widening and shifting took two, one of them on the FMA's port 0).
 */
INLINE __m512
ldw16(enum gguf_dtype t, const uint8_t *row, int64_t i)
{
	if (t == GGML_TYPE_F32)
		return _mm512_loadu_ps(row + 4 * i);
	__m256i h = _mm256_loadu_si256((const __m256i *)(row + 2 * i));
	if (t == GGML_TYPE_F16)
		return _mm512_cvtph_ps(h);
	const __m512i up = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
	    7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
	return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16((__mmask32)0xAAAAAAAAu, up,
	    _mm512_castsi256_si512(h)));
}

/*
 * R rows (4, or 8 for one token) times NT tokens, one 16-lane accumulator
 * per (row, token): one FMA per 16 values in order from 0, then the
 * 512 -> 256 add and q_hsum8, whatever R and NT are (so the same as
 * rows_f16p's prefill tiles). 8 rows at one token: more independent
 * streams in flight (bench/qmm bf16 1 896 4864, weights from memory:
 * 4 rows 9.8 GB/s, 4 rows + prefetch 11.0, 8 rows + prefetch 12.1).
 */
INLINE void
tile_f16w(enum gguf_dtype t, int R, int NT, const uint8_t *const *w, const uint8_t *const *nx,
    const float *x, int64_t n, float *out)
{
	int64_t es = t == GGML_TYPE_F32 ? 4 : 2;
	__m512 acc[8][4];
	struct pf_rows f;

	pf_init(&f, R, w, nx, es, n);
	UNROLL
	for (int r = 0; r < R; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			acc[r][k] = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		__m512 wv[8];
		pf_step(&f, R, i);
		UNROLL
		for (int r = 0; r < R; r++)
			wv[r] = ldw16(t, w[r], i);
		UNROLL
		for (int k = 0; k < NT; k++) {
			__m512 xv = _mm512_loadu_ps(x + (size_t)k * (size_t)n + i);
			UNROLL
			for (int r = 0; r < R; r++)
				acc[r][k] = _mm512_fmadd_ps(wv[r], xv, acc[r][k]);
		}
	}
	UNROLL
	for (int r = 0; r < R; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			out[r * 4 + k] = q_hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][k]),
			    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][k]), 1))));
}

/*
 * One token, 8 rows of F16/BF16 (decode): tile_f16w's arithmetic (one FMA
 * per 16 values in order from 0 per row, then the same horizontal sum), 32
 * values per step with one prefetch per row and step, a cache line of
 * 2-byte values: each line was requested twice (tile_f16w prefetches per
 * 16 values, pf_step) and the cursors' switch to the next tile's rows
 * tested on every step. Here the steps before the switch and after it are
 * two loops, so the prefetches cost a load slot each and nothing else.
 */
INLINE void
one_step(enum gguf_dtype t, const uint8_t *const *w, const float *x, int64_t i, __m512 *acc)
{
	__m512 xv = _mm512_loadu_ps(x + i);

	UNROLL
	for (int r = 0; r < 8; r++)
		acc[r] = _mm512_fmadd_ps(ldw16(t, w[r], i), xv, acc[r]);
}

INLINE void
tile_one(enum gguf_dtype t, const uint8_t *const *w, const uint8_t *const *nx, const float *x,
    int64_t n, float *out)
{
	const int64_t len = 2 * n, ahead = PF_AHEAD < len ? PF_AHEAD : len;
	/* the first step (of 32 values) whose prefetch point is at or past the row's end */
	const int64_t isw = (len - ahead + 63) / 64 * 32;
	__m512 acc[8];
	int64_t i = 0;

	UNROLL
	for (int r = 0; r < 8; r++)
		acc[r] = _mm512_setzero_ps();
	for (; i + 32 <= n && i < isw; i += 32) {
		UNROLL
		for (int r = 0; r < 8; r++)
			_mm_prefetch((const char *)w[r] + 2 * i + ahead, _MM_HINT_T0);
		one_step(t, w, x, i, acc);
		one_step(t, w, x, i + 16, acc);
	}
	for (; i + 32 <= n; i += 32) {
		UNROLL
		for (int r = 0; r < 8; r++)
			_mm_prefetch((const char *)nx[r] + 2 * i + ahead - len, _MM_HINT_T0);
		one_step(t, w, x, i, acc);
		one_step(t, w, x, i + 16, acc);
	}
	if (i < n)	/* n is a multiple of 16 */
		one_step(t, w, x, i, acc);
	UNROLL
	for (int r = 0; r < 8; r++)
		out[r * 4] = q_hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r]),
		    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1))));
}

/* The tile of t's shape (R, NT): 8 x 1 (one token) or 4 x 1-4; t constant in each. */
INLINE void
tile_shape(enum gguf_dtype t, int R, int NT, const uint8_t *const *w, const uint8_t *const *nx,
    const float *x, int64_t n, float *out)
{
	switch (R == 8 ? 0 : NT) {
	case 0:
		if (t == GGML_TYPE_F32)
			tile_f16w(t, 8, 1, w, nx, x, n, out);
		else
			tile_one(t, w, nx, x, n, out);
		break;
	case 4: tile_f16w(t, 4, 4, w, nx, x, n, out); break;
	case 3: tile_f16w(t, 4, 3, w, nx, x, n, out); break;
	case 2: tile_f16w(t, 4, 2, w, nx, x, n, out); break;
	default: tile_f16w(t, 4, 1, w, nx, x, n, out); break;
	}
}

static void
tile_any(enum gguf_dtype t, int R, int NT, const uint8_t *const *w, const uint8_t *const *nx,
    const float *x, int64_t n, float *out)
{
	if (t == GGML_TYPE_F32)
		tile_shape(GGML_TYPE_F32, R, NT, w, nx, x, n, out);
	else if (t == GGML_TYPE_F16)
		tile_shape(GGML_TYPE_F16, R, NT, w, nx, x, n, out);
	else
		tile_shape(GGML_TYPE_BF16, R, NT, w, nx, x, n, out);
}

/*
 * Prefill of F_NP tokens or more, F_NPL for rows longer than F_LR values
 * (rows_f16s takes the shorter batches from 8 tokens): tiles of 4 rows x 6
 * tokens (24 accumulators, the 4 rows' vectors and one token's). The rows
 * run in runs whose floats fill F_PB bytes (L2 holds them): a run's
 * weights are converted to float once, into a panel laid out band by band
 * (F_RB rows) and chunk by chunk (F_KC values), and every block of F_TB
 * tokens then runs over the whole run, so the conversion costs once per
 * row, not once per block of tokens. Within a band and a chunk, the
 * block's activations serve the band's 4 row tiles while they are in L1,
 * and the block's accumulators (6 KiB) stay in L1 between chunks (blocks
 * of 12 and 24 tokens, two and four tiles per chunk of the panel, measured
 * a few per cent slower; 48, with 48 KiB of accumulators, slower still).
 * Where a run has F_XR rows or more and the activations do not start on a
 * 64-byte boundary, each block's activations are first copied to a 64-byte
 * aligned buffer (rows from malloc start 16 bytes past a boundary, so every
 * 512-bit load of them spans two cache lines); a shorter run (long rows: 48
 * rows of 4864 values) reads them in place, where the copy, made again for
 * every run, cost more than the split loads. The CPU backend's scratch is
 * aligned (cpu.c), so there every run reads them in place with aligned
 * loads (docs/BENCHMARKS.md, "2026-11-30: F16/BF16 prefill").
 *
 * The accumulators go to memory between chunks and come back unchanged, so
 * each (row, token) still sees one FMA per 16 values in order from 0, then
 * the same horizontal sum: bitwise what tile_f16w gives (the path of decode
 * and of small batches). Without memory for the panel, rows_f16s runs:
 * the same sums.
 */
#define F_PB (1 << 20)
#define F_KC 512
#define F_TB 6
#define F_RB 16
#define F_XR 128

/*
 * Tokens from which the panel runs (rows_f16), where it measured faster
 * than the short batches' path (docs/BENCHMARKS.md: rows of 896, 2048 and
 * 4864 values): F_NP for rows of up to F_LR values, F_NPL for longer
 * ones. test_quant.c's float tests run batches on both sides of each.
 */
#define F_LR 2048
#define F_NP 64
#define F_NPL 96

/*
 * The accumulators am (4 rows x 6 tokens) += NT tokens' chunk of kc values
 * at x (a token's every xs floats) times 4 converted rows (wf, a row every
 * ws floats). pin: each token's vector loaded once into a register for the
 * 4 rows (the panel's path); without it the compiler folds the load into
 * each FMA (the short batches' path, as it was measured).
 */
INLINE void
tile_f16p(int NT, int ws, bool pin, const float *wf, int kc, const float *x, size_t xs, __m512 *am)
{
	__m512 acc[4][6];

	UNROLL
	for (int r = 0; r < 4; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			acc[r][k] = am[r * 6 + k];
	for (int i = 0; i < kc; i += 16) {
		__m512 wv[4];
		UNROLL
		for (int r = 0; r < 4; r++)
			wv[r] = _mm512_load_ps(wf + r * ws + i);
		UNROLL
		for (int k = 0; k < NT; k++) {
			__m512 xv = _mm512_loadu_ps(x + (size_t)k * xs + i);
			if (pin)
				__asm__("" : "+v"(xv));
			UNROLL
			for (int r = 0; r < 4; r++)
				acc[r][k] = _mm512_fmadd_ps(wv[r], xv, acc[r][k]);
		}
	}
	UNROLL
	for (int r = 0; r < 4; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			am[r * 6 + k] = acc[r][k];
}

/*
 * Short batches (8 to F_NP - 1 tokens, F_NPL - 1 for long rows, and any
 * batch where the panel cannot be allocated): the blocking the prefill had
 * before the panel, kept because below a few dozen tokens it is the faster
 * one (each weight is converted once either way, and here a band's chunk
 * of S_KC values is converted into L1 right before its tiles, where the
 * panel comes from L2: docs/BENCHMARKS.md). For each band of F_RB rows and
 * block of S_TB tokens, chunk by chunk: the band's chunk converted into
 * wf, then every 6-token tile of the block through the band's 4-row tiles.
 * Each (row, token) sees the same FMAs in the same order as on the panel's
 * path and tile_f16w's, then the same horizontal sum, so the switch
 * between the two paths at F_NP or F_NPL tokens keeps every product
 * bitwise batch independent.
 */
#define S_KC 256
#define S_TB 48

INLINE void
rows_f16s(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	float wf[F_RB * S_KC] __attribute__((aligned(64)));
	__m512 am[F_RB / 4][S_TB / 6][24];
	size_t xs = (size_t)n_in;

	for (int64_t rband = r0; rband < r1; rband += F_RB) {
		int nrb = r1 - rband < F_RB ? (int)(r1 - rband) : F_RB, ng = (nrb + 3) / 4;
		for (int tb = 0; tb < n_tok; tb += S_TB) {
			int nb = n_tok - tb < S_TB ? n_tok - tb : S_TB;
			for (int q = 0; q < ng; q++)
				for (int g = 0; g * 6 < nb; g++)
					for (int a = 0; a < 24; a++)
						am[q][g][a] = _mm512_setzero_ps();
			for (int64_t c = 0; c < n_in; c += S_KC) {
				int kc = n_in - c < S_KC ? (int)(n_in - c) : S_KC;
				/* rows past the band's end repeat its last row; their sums are dropped */
				for (int i = 0; i < 4 * ng; i++) {
					const uint8_t *w = W + (size_t)(rband + (i < nrb ? i : nrb - 1)) * rb;
					for (int e = 0; e < kc; e += 16)
						_mm512_store_ps(wf + i * S_KC + e, ldw16(t, w, c + e));
				}
				for (int g = 0; g * 6 < nb; g++) {
					const float *xt = x + (size_t)(tb + 6 * g) * xs + c;
					int nt = nb - 6 * g < 6 ? nb - 6 * g : 6;
					for (int q = 0; q < ng; q++) {
						const float *wq = wf + 4 * q * S_KC;
						switch (nt) {
						case 6: tile_f16p(6, S_KC, false, wq, kc, xt, xs, am[q][g]); break;
						case 5: tile_f16p(5, S_KC, false, wq, kc, xt, xs, am[q][g]); break;
						case 4: tile_f16p(4, S_KC, false, wq, kc, xt, xs, am[q][g]); break;
						case 3: tile_f16p(3, S_KC, false, wq, kc, xt, xs, am[q][g]); break;
						case 2: tile_f16p(2, S_KC, false, wq, kc, xt, xs, am[q][g]); break;
						default: tile_f16p(1, S_KC, false, wq, kc, xt, xs, am[q][g]); break;
						}
					}
				}
			}
			for (int q = 0; q < ng; q++)
				for (int g = 0; g * 6 < nb; g++)
					for (int i = 0; i < 4 && 4 * q + i < nrb; i++)
						for (int k = 0; k < 6 && 6 * g + k < nb; k++) {
							__m512 v = am[q][g][i * 6 + k];
							y[(size_t)(tb + 6 * g + k) * (size_t)n_out +
							    (size_t)(rband + 4 * q + i)] =
							    q_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v),
							    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
						}
		}
	}
}

/*
 * Values [c, c + kc) of nr rows from rband on as floats, row i at
 * wf + i * F_KC; rows at or past the band's end (nrb rows) repeat its last
 * row (their sums are dropped).
 */
INLINE void
conv_rows(enum gguf_dtype t, const uint8_t *W, size_t rb, int64_t rband, int nrb, int nr, int64_t c,
    int kc, float *wf)
{
	for (int i = 0; i < nr; i++) {
		const uint8_t *w = W + (size_t)(rband + (i < nrb ? i : nrb - 1)) * rb;
		for (int e = 0; e < kc; e += 16)
			_mm512_store_ps(wf + i * F_KC + e, ldw16(t, w, c + e));
	}
}

/*
 * Band rows [rband, rband + nrb) times tokens [tb, tb + nb) (nb <= F_TB),
 * whose activations are xb, one token's row every xs floats; pb: the band's
 * converted chunks (F_RB x F_KC floats each).
 */
INLINE void
band_f16p(const float *pb, const float *xb, size_t xs, int tb, int nb, int64_t n_in, float *y,
    int64_t n_out, int64_t rband, int nrb, __m512 (*am)[F_TB / 6][24])
{
	int ng = (nrb + 3) / 4;

	for (int q = 0; q < ng; q++)
		for (int g = 0; g * 6 < nb; g++)
			for (int a = 0; a < 24; a++)
				am[q][g][a] = _mm512_setzero_ps();
	for (int64_t c = 0; c < n_in; c += F_KC) {
		int kc = n_in - c < F_KC ? (int)(n_in - c) : F_KC;
		const float *wc = pb + (size_t)(c / F_KC) * F_RB * F_KC;
		for (int g = 0; g * 6 < nb; g++) {
			const float *xt = xb + (size_t)(6 * g) * xs + c;
			int nt = nb - 6 * g < 6 ? nb - 6 * g : 6;
			for (int q = 0; q < ng; q++) {
				const float *wq = wc + 4 * q * F_KC;
				switch (nt) {
				case 6: tile_f16p(6, F_KC, true, wq, kc, xt, xs, am[q][g]); break;
				case 5: tile_f16p(5, F_KC, true, wq, kc, xt, xs, am[q][g]); break;
				case 4: tile_f16p(4, F_KC, true, wq, kc, xt, xs, am[q][g]); break;
				case 3: tile_f16p(3, F_KC, true, wq, kc, xt, xs, am[q][g]); break;
				case 2: tile_f16p(2, F_KC, true, wq, kc, xt, xs, am[q][g]); break;
				default: tile_f16p(1, F_KC, true, wq, kc, xt, xs, am[q][g]); break;
				}
			}
		}
	}
	for (int q = 0; q < ng; q++)
		for (int g = 0; g * 6 < nb; g++)
			for (int i = 0; i < 4 && 4 * q + i < nrb; i++)
				for (int k = 0; k < 6 && 6 * g + k < nb; k++) {
					__m512 v = am[q][g][i * 6 + k];
					y[(size_t)(tb + 6 * g + k) * (size_t)n_out + (size_t)(rband + 4 * q + i)] =
					    q_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v),
					    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
				}
}

/* Rows [s0, s1) as floats into the panel pan, band by band, chunk by chunk. */
INLINE void
conv_run(enum gguf_dtype t, const uint8_t *W, size_t rb, int64_t n_in, int64_t s0, int64_t s1,
    size_t band_f, float *pan)
{
	for (int64_t rband = s0; rband < s1; rband += F_RB) {
		int nrb = s1 - rband < F_RB ? (int)(s1 - rband) : F_RB;
		float *pb = pan + (size_t)((rband - s0) / F_RB) * band_f;
		for (int64_t c = 0; c < n_in; c += F_KC)
			conv_rows(t, W, rb, rband, nrb, (nrb + 3) / 4 * 4, c,
			    n_in - c < F_KC ? (int)(n_in - c) : F_KC, pb + (size_t)(c / F_KC) * F_RB * F_KC);
	}
}

INLINE void
rows_f16p(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	__m512 am[F_RB / 4][F_TB / 6][24];
	size_t xs = (size_t)n_in, nch = (size_t)(n_in + F_KC - 1) / F_KC;
	size_t band_f = nch * F_RB * F_KC;	/* floats of a band's panel */
	int64_t run = (int64_t)(F_PB / (band_f * sizeof(float))) * F_RB, nrun;
	size_t xa_f;
	float *pan, *xa = NULL;

	if (r1 <= r0)
		return;
	if (run < F_RB)
		run = F_RB;
	/* runs of about equal length (whole bands) */
	nrun = (r1 - r0 + run - 1) / run;
	run = ((r1 - r0 + nrun - 1) / nrun + F_RB - 1) / F_RB * F_RB;
	/* activations already on a line (the CPU backend's scratch) are read in place */
	xa_f = run >= F_XR && ((uintptr_t)x & 63) != 0 ? (size_t)(n_tok < F_TB ? n_tok : F_TB) * xs : 0;
	pan = aligned_alloc(64, ((size_t)(run / F_RB) * band_f + xa_f) * sizeof *pan);
	if (pan == NULL) {	/* the same sums without a panel */
		rows_f16s(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
		return;
	}
	if (xa_f > 0)
		xa = pan + (size_t)(run / F_RB) * band_f;
	for (int64_t s0 = r0; s0 < r1; s0 += run) {
		int64_t s1 = r1 - s0 < run ? r1 : s0 + run;
		conv_run(t, W, rb, n_in, s0, s1, band_f, pan);
		for (int tb = 0; tb < n_tok; tb += F_TB) {
			int nb = n_tok - tb < F_TB ? n_tok - tb : F_TB;
			const float *xb = x + (size_t)tb * xs;
			if (xa != NULL) {
				memcpy(xa, xb, (size_t)nb * xs * sizeof *xa);
				xb = xa;
			}
			for (int64_t rband = s0; rband < s1; rband += F_RB)
				band_f16p(pan + (size_t)((rband - s0) / F_RB) * band_f, xb, xs, tb, nb, n_in,
				    y, n_out, rband, s1 - rband < F_RB ? (int)(s1 - rband) : F_RB, am);
		}
	}
	free(pan);
}

/* Prefill of t: the short batches' path below F_NP (F_NPL) tokens, the panel's from there. */
INLINE void
rows_f16(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_tok < (n_in <= F_LR ? F_NP : F_NPL))
		rows_f16s(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	else
		rows_f16p(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
}

bool
kern_avx512_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % 16 != 0)	/* no tile takes these rows: avx2's one-row products */
		return kern_avx2_rows_f(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	if (n_tok >= 8)
		switch (t) {
		case GGML_TYPE_F32: rows_f16(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
		case GGML_TYPE_F16: rows_f16(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
		case GGML_TYPE_BF16: rows_f16(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
		default: return false;
		}
	if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16)
		return false;
	/* rows in eights for one token, else in fours; tokens in fours */
	rows_f_tiled(tile_any, 8, 4, 4, t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	return true;
}

