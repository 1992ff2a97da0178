/*
 * kern_avx2.c: the avx2 table's products of float activations (F32, F16,
 * BF16 weights) and its int8 rounding of activations; compiled with -mavx2
 * -mfma -mf16c (kern.am). A tile is two weight rows times up to three
 * tokens (one token: four rows), each (row, token) with its own
 * accumulators, so a product is bitwise the same for any batch.
 */
#include "kern_int.h"
#include "kern_x86.h"

#include <stdint.h>
#include <stdlib.h>

/*
 * 8 BF16 values at p as floats (each the top half of its float): the 16
 * bytes loaded into both 128-bit halves (vbroadcasti128, a load alone) and
 * moved into place by one byte shuffle, where vpmovzxwd + vpslld took two
 * operations, one of them on the ports the FMAs need.
 */
INLINE __m256
ld_bf16(const uint8_t *p)
{
	const __m256i to_top = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
	    -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);

	return _mm256_castsi256_ps(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(
	    _mm_loadu_si128((const __m128i *)p)), to_top));
}

INLINE __m256
ldw(enum gguf_dtype t, const uint8_t *row, int64_t i)
{
	if (t == GGML_TYPE_F32)
		return _mm256_loadu_ps((const float *)(row + 4 * i));
	if (t == GGML_TYPE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
	return ld_bf16(row + 2 * i);
}

/*
 * R rows (2, or 4 for one token) times NT tokens; each (row, token) keeps
 * two accumulators, the 8-value chunks alternating between them, added at
 * the end, whatever R and NT are. Prefetched (kern_x86.h's pf_rows) as the
 * 512-bit tiles of kern_avx512.c.
 */
INLINE void
tile_f(enum gguf_dtype t, int R, int NT, const uint8_t *const *w, const uint8_t *const *nx,
    const float *x, int64_t n, float *out)
{
	int64_t es = t == GGML_TYPE_F32 ? 4 : 2;
	/* one token of F16/BF16: one prefetch per row and 64-byte line, at every other step */
	const bool pf2 = R == 4 && NT == 1 && es == 2;
	__m256 acc[4][3][2];
	struct pf_rows f;

	if (pf2)
		pf_init_per(&f, R, w, nx, es, n, 32);
	else
		pf_init(&f, R, w, nx, es, n);
	UNROLL
	for (int r = 0; r < R; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			acc[r][k][0] = acc[r][k][1] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		if (!pf2 || i % 32 == 0)
			pf_step(&f, R, i);
		UNROLL
		for (int h = 0; h < 2; h++) {
			__m256 wv[4];
			UNROLL
			for (int r = 0; r < R; r++)
				wv[r] = ldw(t, w[r], i + 8 * h);
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256 xv = _mm256_loadu_ps(x + (size_t)k * (size_t)n + i + 8 * h);
				UNROLL
				for (int r = 0; r < R; r++)
					acc[r][k][h] = _mm256_fmadd_ps(wv[r], xv, acc[r][k][h]);
			}
		}
	}
	UNROLL
	for (int r = 0; r < R; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			out[r * 3 + k] = q_hsum8(_mm256_add_ps(acc[r][k][0], acc[r][k][1]));
}

/* The tile of t's shape (R, NT): 4 x 1 (one token) or 2 x 1-3; t constant in each. */
INLINE void
tile_shape(enum gguf_dtype t, int R, int NT, const uint8_t *const *w, const uint8_t *const *nx,
    const float *x, int64_t n, float *out)
{
	switch (R == 4 ? 0 : NT) {
	case 0: tile_f(t, 4, 1, w, nx, x, n, out); break;
	case 3: tile_f(t, 2, 3, w, nx, x, n, out); break;
	case 2: tile_f(t, 2, 2, w, nx, x, n, out); break;
	default: tile_f(t, 2, 1, w, nx, x, n, out); break;
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
 * Rows whose length is not a multiple of 16 (no tile takes them): one row
 * and one token at a time, four accumulators of eight, the tail in order.
 */
static float
dot_f32(const float *w, const float *x, int64_t n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	float t = 0;

	for (; i + 32 <= n; i += 32) {
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
		a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
		a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
		a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
	}
	for (; i + 8 <= n; i += 8)
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
	for (; i < n; i++) {
		float v;
		memcpy(&v, w + i, 4);
		t += v * x[i];
	}
	return q_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + t;
}

static inline __m256
ld_f16(const uint8_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static float
dot_f16(const uint8_t *w, const float *x, int64_t n, bool bf)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	float t = 0;

#define LD(k) (bf ? ld_bf16(w + 2 * (i + (k))) : ld_f16(w + 2 * (i + (k))))
	for (; i + 32 <= n; i += 32) {
		a0 = _mm256_fmadd_ps(LD(0), _mm256_loadu_ps(x + i), a0);
		a1 = _mm256_fmadd_ps(LD(8), _mm256_loadu_ps(x + i + 8), a1);
		a2 = _mm256_fmadd_ps(LD(16), _mm256_loadu_ps(x + i + 16), a2);
		a3 = _mm256_fmadd_ps(LD(24), _mm256_loadu_ps(x + i + 24), a3);
	}
	for (; i + 8 <= n; i += 8)
		a0 = _mm256_fmadd_ps(LD(0), _mm256_loadu_ps(x + i), a0);
#undef LD
	for (; i < n; i++) {
		uint16_t h;
		memcpy(&h, w + 2 * i, 2);
		t += (bf ? q_bf16_to_f32(h) : q_fp16_to_f32(h)) * x[i];
	}
	return q_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + t;
}

/*
 * Prefill of F_NP tokens or more, F_NPL for rows longer than F_LR values
 * (rows_fs takes the shorter batches from 8 tokens), blocked as
 * kern_avx512.c's rows_f16p: the rows run in runs whose floats fill F_PB
 * bytes, each run converted to float once into a panel (band by band of
 * F_RB rows, chunk by chunk of F_KC values), then every block of F_TB
 * tokens runs over the run in tiles of F_TR rows x F_TT tokens (one tile
 * of tokens per block: the panel's chunk comes from L2 for each block, the
 * block's accumulators stay in L1 between chunks). Where a run has F_XR
 * rows or more and the activations do not start on a 64-byte boundary,
 * each block's activations are first copied to a 64-byte aligned buffer
 * (malloc'd rows start 16 bytes past a line, so half of the 256-bit loads
 * of them spanned two lines); a shorter run, or aligned activations (the
 * CPU backend's scratch, cpu.c), are read in place.
 *
 * tile_f keeps two accumulators per (row, token), for the 8-value halves of
 * each 16. They never meet before the end, so the tile runs the chunk twice,
 * once per half, with one accumulator per (row, token): twice the (row,
 * token) pairs per loaded vector for the same registers (2 x 6: 12
 * accumulators, 2 rows' vectors and one token's, 8 loads per 12 FMAs where
 * 2 x 3 with both halves took 10). The accumulators go to memory between
 * chunks and come back unchanged, so each (row, token) sees tile_f's FMAs in
 * tile_f's order and the same final sum: bitwise what decode and small
 * batches give. Without memory for the panel, rows_fs runs: the same sums.
 */
#define F_PB (1 << 20)
#define F_KC 512
#define F_TB 6
#define F_XR 128
#define F_TR 2
#define F_TT 6
#define F_RB 16
#define F_NA (2 * F_TR * F_TT)	/* accumulators of a tile: both halves */
/*
 * Tokens from which the panel runs (rows_f), where it measured faster than
 * the short batches' path (docs/BENCHMARKS.md: rows of 896, 2048 and 4864
 * values): F_NP for rows of up to F_LR values, F_NPL for longer ones.
 * test_quant.c's float tests run batches on both sides of each.
 */
#define F_LR 2048
#define F_NP 48
#define F_NPL 192

INLINE void
tile_fp(int NT, const float *wf, int kc, const float *x, size_t xs, __m256 *am)
{
	UNROLL
	for (int h = 0; h < 2; h++) {
		__m256 acc[F_TR][F_TT];
		UNROLL
		for (int r = 0; r < F_TR; r++)
			UNROLL
			for (int k = 0; k < NT; k++)
				acc[r][k] = am[(h * F_TR + r) * F_TT + k];
		for (int i = 8 * h; i < kc; i += 16) {
			__m256 wv[F_TR];
			UNROLL
			for (int r = 0; r < F_TR; r++)
				wv[r] = _mm256_load_ps(wf + r * F_KC + i);
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256 xv = _mm256_loadu_ps(x + (size_t)k * xs + i);
				/*
				 * in a register for every row: left to itself the
				 * compiler folds the load into each FMA, and the load
				 * ports, not the FMAs, set the pace
				 */
				__asm__("" : "+x"(xv));
				UNROLL
				for (int r = 0; r < F_TR; r++)
					acc[r][k] = _mm256_fmadd_ps(wv[r], xv, acc[r][k]);
			}
		}
		UNROLL
		for (int r = 0; r < F_TR; r++)
			UNROLL
			for (int k = 0; k < NT; k++)
				am[(h * F_TR + r) * F_TT + k] = acc[r][k];
	}
}

/*
 * Short batches (8 to F_NP - 1 tokens, F_NPL - 1 for long rows, and any
 * batch where the panel cannot be allocated): the blocking the prefill had
 * before the panel, kept because below a few dozen tokens it is the faster
 * one (each weight is converted once either way, and here a band's chunk
 * of S_KC values is converted into L1 right before its tiles, where the
 * panel comes from L2: docs/BENCHMARKS.md). A band of F_RB rows is
 * converted chunk by chunk for a block of S_TB tokens, then tiles of 2
 * rows x 3 tokens run on the floats, both 8-value halves of each 16 in one
 * pass (two accumulators per (row, token), as tile_f). The bands run in
 * runs of S_SB bytes of weights, each block of tokens through every band
 * of a run, so the block's activations stay in L2 across the run's bands.
 * Each (row, token) sees tile_f's FMAs in tile_f's order and the same
 * final sum, as on the panel's path: the switch at F_NP or F_NPL tokens
 * keeps every product bitwise batch independent.
 */
#define S_SB (512 << 10)
#define S_KC 256
#define S_TB 48

INLINE void
tile_fs(int NT, const float *wf, int kc, const float *x, size_t xs, __m256 *am)
{
	__m256 acc[2][3][2];

	UNROLL
	for (int r = 0; r < 2; r++)
		UNROLL
		for (int k = 0; k < NT; k++) {
			acc[r][k][0] = am[(r * 3 + k) * 2];
			acc[r][k][1] = am[(r * 3 + k) * 2 + 1];
		}
	for (int i = 0; i < kc; i += 16) {
		UNROLL
		for (int h = 0; h < 2; h++) {
			__m256 w0 = _mm256_load_ps(wf + i + 8 * h), w1 = _mm256_load_ps(wf + S_KC + i + 8 * h);
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256 xv = _mm256_loadu_ps(x + (size_t)k * xs + i + 8 * h);
				/* in a register for both rows (tile_fp's reason) */
				__asm__("" : "+x"(xv));
				acc[0][k][h] = _mm256_fmadd_ps(w0, xv, acc[0][k][h]);
				acc[1][k][h] = _mm256_fmadd_ps(w1, xv, acc[1][k][h]);
			}
		}
	}
	UNROLL
	for (int r = 0; r < 2; r++)
		UNROLL
		for (int k = 0; k < NT; k++) {
			am[(r * 3 + k) * 2] = acc[r][k][0];
			am[(r * 3 + k) * 2 + 1] = acc[r][k][1];
		}
}

/* Band rows [rband, rband + nrb) times tokens [tb, tb + nb) (nb <= S_TB). */
INLINE void
band_fs(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int tb, int nb, int64_t n_in,
    float *y, int64_t n_out, int64_t rband, int nrb, float *wf, __m256 (*am)[S_TB / 3][12])
{
	size_t xs = (size_t)n_in;
	int ng = (nrb + 1) / 2;

	for (int q = 0; q < ng; q++)
		for (int g = 0; g * 3 < nb; g++)
			for (int a = 0; a < 12; a++)
				am[q][g][a] = _mm256_setzero_ps();
	for (int64_t c = 0; c < n_in; c += S_KC) {
		int kc = n_in - c < S_KC ? (int)(n_in - c) : S_KC;
		/* a band's odd last row repeats; its sums are dropped */
		for (int i = 0; i < 2 * ng; i++) {
			const uint8_t *w = W + (size_t)(rband + (i < nrb ? i : nrb - 1)) * rb;
			for (int e = 0; e < kc; e += 8)
				_mm256_store_ps(wf + i * S_KC + e, ldw(t, w, c + e));
		}
		for (int g = 0; g * 3 < nb; g++) {
			const float *xt = x + (size_t)(tb + 3 * g) * xs + c;
			int nt = nb - 3 * g < 3 ? nb - 3 * g : 3;
			for (int q = 0; q < ng; q++) {
				const float *wq = wf + 2 * q * S_KC;
				switch (nt) {
				case 3: tile_fs(3, wq, kc, xt, xs, am[q][g]); break;
				case 2: tile_fs(2, wq, kc, xt, xs, am[q][g]); break;
				default: tile_fs(1, wq, kc, xt, xs, am[q][g]); break;
				}
			}
		}
	}
	for (int q = 0; q < ng; q++)
		for (int g = 0; g * 3 < nb; g++)
			for (int i = 0; i < 2 && 2 * q + i < nrb; i++)
				for (int k = 0; k < 3 && 3 * g + k < nb; k++) {
					const __m256 *v = &am[q][g][(i * 3 + k) * 2];
					y[(size_t)(tb + 3 * g + k) * (size_t)n_out + (size_t)(rband + 2 * q + i)] =
					    q_hsum8(_mm256_add_ps(v[0], v[1]));
				}
}

INLINE void
rows_fs(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	float wf[F_RB * S_KC] __attribute__((aligned(32)));
	__m256 am[F_RB / 2][S_TB / 3][12];
	int64_t run = (int64_t)(S_SB / rb) / F_RB * F_RB;

	if (run < F_RB)
		run = F_RB;
	for (int64_t s0 = r0; s0 < r1; s0 += run) {
		int64_t s1 = r1 - s0 < run ? r1 : s0 + run;
		for (int tb = 0; tb < n_tok; tb += S_TB) {
			int nb = n_tok - tb < S_TB ? n_tok - tb : S_TB;
			for (int64_t rband = s0; rband < s1; rband += F_RB)
				band_fs(t, W, rb, x, tb, nb, n_in, y, n_out, rband,
				    s1 - rband < F_RB ? (int)(s1 - rband) : F_RB, wf, am);
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
		for (int e = 0; e < kc; e += 8)
			_mm256_store_ps(wf + i * F_KC + e, ldw(t, w, c + e));
	}
}

/*
 * Band rows [rband, rband + nrb) times tokens [tb, tb + nb) (nb <= F_TB),
 * whose activations are xb, one token's row every xs floats; pb: the band's
 * converted chunks (F_RB x F_KC floats each).
 */
INLINE void
band_fp(const float *pb, const float *xb, size_t xs, int tb, int nb, int64_t n_in, float *y,
    int64_t n_out, int64_t rband, int nrb, __m256 (*am)[F_TB / F_TT][F_NA])
{
	int ng = (nrb + F_TR - 1) / F_TR;

	for (int q = 0; q < ng; q++)
		for (int g = 0; g * F_TT < nb; g++)
			for (int a = 0; a < F_NA; a++)
				am[q][g][a] = _mm256_setzero_ps();
	for (int64_t c = 0; c < n_in; c += F_KC) {
		int kc = n_in - c < F_KC ? (int)(n_in - c) : F_KC;
		const float *wc = pb + (size_t)(c / F_KC) * F_RB * F_KC;
		for (int g = 0; g * F_TT < nb; g++) {
			const float *xt = xb + (size_t)(F_TT * g) * xs + c;
			int nt = nb - F_TT * g < F_TT ? nb - F_TT * g : F_TT;
			for (int q = 0; q < ng; q++) {
				const float *wq = wc + F_TR * q * F_KC;
				switch (nt) {
				case 6: tile_fp(6, wq, kc, xt, xs, am[q][g]); break;
				case 5: tile_fp(5, wq, kc, xt, xs, am[q][g]); break;
				case 4: tile_fp(4, wq, kc, xt, xs, am[q][g]); break;
				case 3: tile_fp(3, wq, kc, xt, xs, am[q][g]); break;
				case 2: tile_fp(2, wq, kc, xt, xs, am[q][g]); break;
				default: tile_fp(1, wq, kc, xt, xs, am[q][g]); break;
				}
			}
		}
	}
	for (int q = 0; q < ng; q++)
		for (int g = 0; g * F_TT < nb; g++)
			for (int i = 0; i < F_TR && F_TR * q + i < nrb; i++)
				for (int k = 0; k < F_TT && F_TT * g + k < nb; k++) {
					const __m256 *v = &am[q][g][i * F_TT + k];
					y[(size_t)(tb + F_TT * g + k) * (size_t)n_out +
					    (size_t)(rband + F_TR * q + i)] =
					    q_hsum8(_mm256_add_ps(v[0], v[F_TR * F_TT]));
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
			conv_rows(t, W, rb, rband, nrb, (nrb + F_TR - 1) / F_TR * F_TR, c,
			    n_in - c < F_KC ? (int)(n_in - c) : F_KC, pb + (size_t)(c / F_KC) * F_RB * F_KC);
	}
}

INLINE void
rows_fp(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	__m256 am[F_RB / F_TR][F_TB / F_TT][F_NA];
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
		rows_fs(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
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
				band_fp(pan + (size_t)((rband - s0) / F_RB) * band_f, xb, xs, tb, nb, n_in, y,
				    n_out, rband, s1 - rband < F_RB ? (int)(s1 - rband) : F_RB, am);
		}
	}
	free(pan);
}

/* Prefill of t: the short batches' path below F_NP (F_NPL) tokens, the panel's from there. */
INLINE void
rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_tok < (n_in <= F_LR ? F_NP : F_NPL))
		rows_fs(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	else
		rows_fp(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
}

/* F32, F16, BF16 (false for other types: the scalar reference runs). */
bool
kern_avx2_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16)
		return false;
	if (n_in % 16 != 0) {
		for (int64_t r = r0; r < r1; r++)
			for (int tok = 0; tok < n_tok; tok++) {
				const uint8_t *w = W + (size_t)r * rb;
				const float *xt = x + (size_t)tok * (size_t)n_in;
				y[(size_t)tok * (size_t)n_out + (size_t)r] = t == GGML_TYPE_F32 ?
				    dot_f32((const float *)w, xt, n_in) : dot_f16(w, xt, n_in, t == GGML_TYPE_BF16);
			}
		return true;
	}
	if (n_tok >= 8) {
		switch (t) {
		case GGML_TYPE_F32: rows_f(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
		case GGML_TYPE_F16: rows_f(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
		default: rows_f(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
		}
		return true;
	}
	/* rows in fours for one token, else in twos; tokens in threes */
	rows_f_tiled(tile_any, 4, 2, 3, t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	return true;
}

/* The sum of 32 floats: four vectors added pairwise, then q_hsum8. */
INLINE __m256
sum32(const float *x)
{
	return _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
	    _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
}

/*
 * q_act_prepare's work with vectors: the same d, the same levels (the
 * conversion rounds to nearest even, as lrintf does in the default mode),
 * the same sums (d times the integer sum of the levels): bitwise the scalar
 * bytes.
 */
void
kern_avx2_act_prepare(const float *x, int64_t n_in, void *act)
{
	int64_t nb = n_in / 32;
	float *d = act, *xs = d + nb;
	int8_t *q = (int8_t *)(xs + nb);
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));

	for (int64_t b = 0; b < nb; b++) {
		const float *xb = x + 32 * b;
		__m256 v[4], m;
		for (int i = 0; i < 4; i++)
			v[i] = _mm256_loadu_ps(xb + 8 * i);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absm), _mm256_and_ps(v[1], absm)),
		    _mm256_max_ps(_mm256_and_ps(v[2], absm), _mm256_and_ps(v[3], absm)));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		float amax = _mm_cvtss_f32(h);
		float db = amax / 127.0f, id = db > 0 ? 127.0f / amax : 0;
		__m256 iv = _mm256_set1_ps(id);
		d[b] = db;
		__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], iv));
		__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], iv));
		__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], iv));
		__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], iv));
		/* d times the levels' sum: integers below 2^24 add exactly as floats in any order */
		xs[b] = db * q_hsum8(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(i0, i1),
		    _mm256_add_epi32(i2, i3))));
		/* packs interleave 128-bit lanes: put the 8 dwords groups back in order */
		__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		_mm256_storeu_si256((__m256i *)(q + 32 * b), p);
	}
}
