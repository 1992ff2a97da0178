/*
 * kern_avx2.c: the avx2 table's products of float activations (F32, F16,
 * BF16 weights) and its int8 rounding of activations; compiled with -mavx2
 * -mfma -mf16c (kern.am). A tile is two weight rows times up to three
 * tokens (one token: four rows), each (row, token) with its own
 * accumulators, so a product is bitwise the same for any batch.
 */
#include "kern_int.h"
#include "kern_x86.h"

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
	__m256 acc[4][3][2];
	struct pf_rows f;

	pf_init(&f, R, w, nx, es, n);
	UNROLL
	for (int r = 0; r < R; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			acc[r][k][0] = acc[r][k][1] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
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
 * Prefill (8 tokens or more), blocked as kern_avx512.c's rows_f16p: a band
 * of F_RB rows is converted to float once per chunk of F_KC values for a
 * block of F_TB tokens (rows_f_tiled converts every row once per 3 tokens,
 * and with 2 rows of a long n_in a token's activations fall out of L1
 * between tiles), then tiles of 2 rows x 3 tokens run on the floats. The
 * accumulators (two per (row, token), the 8-value halves of each 16
 * alternating) go to memory between chunks and come back unchanged, so
 * each (row, token) sees tile_f's FMAs in tile_f's order and the same final
 * sum: bitwise what decode and small batches give.
 *
 * The bands run in runs of F_SB bytes of weights: for each block of
 * tokens, every band of the run, so the block's activations (F_TB rows of
 * n_in floats) stay in L2 across the run's bands and the run's weights
 * across the token blocks. Band by band, every band read all the
 * activations again (1.8 MB at 512 tokens of 896, 10 MB at 4864: from L3,
 * at about 8 flops per byte read).
 */
#define F_SB (512 << 10)
#define F_KC 256
#define F_TB 48
#define F_RB 16

INLINE void
tile_fp(int NT, const float *wf, int kc, const float *x, int64_t n, __m256 *am)
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
			__m256 w0 = _mm256_load_ps(wf + i + 8 * h), w1 = _mm256_load_ps(wf + F_KC + i + 8 * h);
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256 xv = _mm256_loadu_ps(x + (size_t)k * (size_t)n + i + 8 * h);
				/*
				 * in a register for both rows: left to itself the compiler
				 * folds the load into both FMAs, 16 loads per 12 FMAs, and
				 * the load ports, not the FMAs, set the pace
				 */
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

/* Band rows [rband, rband + nrb) times tokens [tb, tb + nb) (nb <= F_TB). */
INLINE void
band_fp(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int tb, int nb, int64_t n_in,
    float *y, int64_t n_out, int64_t rband, int nrb, float *wf, __m256 (*am)[F_TB / 3][12])
{
	int ng = (nrb + 1) / 2;

	for (int q = 0; q < ng; q++)
		for (int g = 0; g * 3 < nb; g++)
			for (int a = 0; a < 12; a++)
				am[q][g][a] = _mm256_setzero_ps();
	for (int64_t c = 0; c < n_in; c += F_KC) {
		int kc = n_in - c < F_KC ? (int)(n_in - c) : F_KC;
		/* a band's odd last row repeats; its sums are dropped */
		for (int i = 0; i < 2 * ng; i++) {
			const uint8_t *w = W + (size_t)(rband + (i < nrb ? i : nrb - 1)) * rb;
			for (int e = 0; e < kc; e += 8)
				_mm256_store_ps(wf + i * F_KC + e, ldw(t, w, c + e));
		}
		for (int g = 0; g * 3 < nb; g++) {
			const float *xt = x + (size_t)(tb + 3 * g) * (size_t)n_in + c;
			int nt = nb - 3 * g < 3 ? nb - 3 * g : 3;
			for (int q = 0; q < ng; q++) {
				const float *wq = wf + 2 * q * F_KC;
				switch (nt) {
				case 3: tile_fp(3, wq, kc, xt, n_in, am[q][g]); break;
				case 2: tile_fp(2, wq, kc, xt, n_in, am[q][g]); break;
				default: tile_fp(1, wq, kc, xt, n_in, am[q][g]); break;
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
rows_fp(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	float wf[F_RB * F_KC] __attribute__((aligned(32)));
	__m256 am[F_RB / 2][F_TB / 3][12];
	int64_t run = (int64_t)(F_SB / rb) / F_RB * F_RB;

	if (run < F_RB)
		run = F_RB;
	for (int64_t s0 = r0; s0 < r1; s0 += run) {
		int64_t s1 = r1 - s0 < run ? r1 : s0 + run;
		for (int tb = 0; tb < n_tok; tb += F_TB) {
			int nb = n_tok - tb < F_TB ? n_tok - tb : F_TB;
			for (int64_t rband = s0; rband < s1; rband += F_RB)
				band_fp(t, W, rb, x, tb, nb, n_in, y, n_out, rband,
				    s1 - rband < F_RB ? (int)(s1 - rband) : F_RB, wf, am);
		}
	}
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
		case GGML_TYPE_F32: rows_fp(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
		case GGML_TYPE_F16: rows_fp(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
		default: rows_fp(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
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
