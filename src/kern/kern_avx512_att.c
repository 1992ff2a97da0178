/*
 * kern_avx512_att.c: the avx512 table's attention of a tile of queries (struct kern_att_tile)
 * with AVX-512, for prefill's tiles of many queries that share a KV head.
 *
 * kern_avx2_att_tile (kern_avx2_att.c) puts eight positions in a vector's lanes:
 * each block of K rows is transposed, element by element, once per tile,
 * and on the real Gemma 3 270M (head size 256, four queries per KV head)
 * that transposition was a third of prefill's attention time. Here the
 * lanes hold sixteen queries instead: the tile's queries are transposed
 * once (hd x 16 floats, small), each K row is converted to float once and
 * its elements broadcast, so sixteen scores are one FMA per element, with
 * two groups of sixteen queries sharing every broadcast. The weighted sum
 * over V keeps the head's elements in the lanes, but four queries share
 * each V vector, converted from F16 in the loop instead of into a buffer.
 *
 * Bitwise the same as kern_avx2_att_tile: a score is still
 * fma(q[i], k[i], acc) over i in order from 0 (the product is exact, so
 * the operands' order does not matter), the softmax is the same function,
 * and o[e] still takes fma(a[r], v[r][e], o[e]) for r in order from the
 * query's lo to its hi (a query outside its range at r is masked out, not
 * given a zero weight). So which kernel a tile runs, and which queries share
 * it, changes no bit of any output: prefill and decode agree.
 */
#include "kern_int.h"

#include <string.h>

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* Queries per pass of the scores (two vectors of sixteen lanes). */
#define QL 32
/* Positions per block of scores: rows converted, and broadcast, together. */
#define PPMAX 8

static bool
att512_fits(const struct kern_att_tile *t)
{
	/* whole vectors of the head; the buffer below fits in kern_att_buf_floats */
	return t->hd % 16 == 0 && t->hd >= 16 && t->nq > 8;
}

/* Rows [p, p + n) of base as floats into kf (rows of hd), rows n..pp zero. */
static void
load_rows(const struct kern_att_tile *t, const char *base, int p, int n, int pp, float *kf)
{
	int hd = t->hd, r, i;

	for (r = 0; r < n; r++) {
		const char *row = base + (size_t)(p + r) * t->rb;
		float *dst = kf + (size_t)r * hd;

		if (!t->f16) {
			memcpy(dst, row, (size_t)hd * sizeof *dst);
			continue;
		}
		for (i = 0; i < hd; i += 16)
			_mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)((const uint16_t *)row + i))));
	}
	if (n < pp)
		memset(kf + (size_t)n * hd, 0, (size_t)(pp - n) * hd * sizeof *kf);
}

/*
 * out[r][j] = sum over i in order of qt[i][j] * kf[r][i], for NG groups of
 * sixteen queries (qt rows of 16 NG floats) and PP rows of kf.
 */
INLINE void
dots_block(const float *qt, int hd, const float *kf, int NG, int PP, float *out)
{
	__m512 acc[2][PPMAX];
	int i, g, r;

#pragma GCC unroll 16
	for (g = 0; g < NG; g++)
#pragma GCC unroll 16
		for (r = 0; r < PP; r++)
			acc[g][r] = _mm512_setzero_ps();
	for (i = 0; i < hd; i++) {
#pragma GCC unroll 16
		for (g = 0; g < NG; g++) {
			__m512 qv = _mm512_loadu_ps(qt + (size_t)i * 16 * NG + 16 * g);

#pragma GCC unroll 16
			for (r = 0; r < PP; r++)
				acc[g][r] = _mm512_fmadd_ps(qv, _mm512_set1_ps(kf[(size_t)r * hd + i]),
				    acc[g][r]);
		}
	}
#pragma GCC unroll 16
	for (g = 0; g < NG; g++)
#pragma GCC unroll 16
		for (r = 0; r < PP; r++)
			_mm512_storeu_ps(out + (size_t)r * 16 * NG + 16 * g, acc[g][r]);
}

/* Raw scores of queries [j0, j0 + nq) over their positions, into t->s. */
static void
tile_scores(const struct kern_att_tile *t, int j0, int nq)
{
	int hd = t->hd, NG = nq > 16 ? 2 : 1, W = 16 * NG, PP = NG == 1 ? 8 : 6;
	int P0 = INT32_MAX, P1 = 0, i, j, p, r;
	float *qt = t->buf, *kf = qt + (size_t)QL * hd, *out = kf + (size_t)PPMAX * hd;

	for (j = 0; j < nq; j++) {
		if (t->lo[j0 + j] < P0)
			P0 = t->lo[j0 + j];
		if (t->hi[j0 + j] > P1)
			P1 = t->hi[j0 + j];
	}
	for (i = 0; i < hd; i++)
		for (j = 0; j < W; j++)
			qt[(size_t)i * W + j] = j < nq ? t->q[j0 + j][i] : 0.0f;
	for (p = P0; p < P1; p += PP) {
		int n = P1 - p < PP ? P1 - p : PP;

		load_rows(t, t->k, p, n, PP, kf);
		if (NG == 1)
			dots_block(qt, hd, kf, 1, 8, out);
		else
			dots_block(qt, hd, kf, 2, 6, out);
		for (j = 0; j < nq; j++) {
			float *s = t->s + (size_t)(j0 + j) * t->s_stride;

			for (r = 0; r < n; r++)
				s[p + r] = out[(size_t)r * W + j];
		}
	}
}

/*
 * o[j][e0 .. e0 + 16 NE) = sum over r of a_j[r] v[r][..] for the nj (<= 4)
 * queries from j0, r in order through the segments [b[k], b[k + 1]) in
 * which the set of queries whose [lo, hi) holds r does not change (F16:
 * the rows are F16, else F32; both constant where this is inlined).
 */
INLINE void
wsum_part(const struct kern_att_tile *t, int j0, int nj, int e0, int NE, bool F16, const int *b,
    int nb)
{
	__m512 o[4][4];
	const float *a0, *a1, *a2, *a3;
	int j, c, k;

#define AROW(j) (t->s + (size_t)(j0 + ((j) < nj ? (j) : 0)) * t->s_stride)
	a0 = AROW(0), a1 = AROW(1), a2 = AROW(2), a3 = AROW(3);
#undef AROW
	for (j = 0; j < 4; j++)
#pragma GCC unroll 4
		for (c = 0; c < NE; c++)
			o[j][c] = _mm512_setzero_ps();
	for (k = 0; k + 1 < nb; k++) {
		__mmask16 m[4];
		int any = 0, r;
		const char *row = t->v + (size_t)b[k] * t->rb + (size_t)e0 * (F16 ? 2 : 4);

		for (j = 0; j < 4; j++) {
			m[j] = j < nj && t->lo[j0 + j] <= b[k] && b[k] < t->hi[j0 + j] ? 0xffff : 0;
			any |= m[j];
		}
		if (!any)
			continue;
		if ((m[0] & m[1] & m[2] & m[3]) == 0xffff) {
			/* all four (heads of one token, mostly): no masks */
			for (r = b[k]; r < b[k + 1]; r++, row += t->rb) {
				__m512 w0 = _mm512_set1_ps(a0[r]), w1 = _mm512_set1_ps(a1[r]);
				__m512 w2 = _mm512_set1_ps(a2[r]), w3 = _mm512_set1_ps(a3[r]);

#pragma GCC unroll 4
				for (c = 0; c < NE; c++) {
					__m512 v = F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)
					    ((const uint16_t *)row + 16 * c))) :
					    _mm512_loadu_ps((const float *)row + 16 * c);

					o[0][c] = _mm512_fmadd_ps(w0, v, o[0][c]);
					o[1][c] = _mm512_fmadd_ps(w1, v, o[1][c]);
					o[2][c] = _mm512_fmadd_ps(w2, v, o[2][c]);
					o[3][c] = _mm512_fmadd_ps(w3, v, o[3][c]);
				}
			}
			continue;
		}
		for (r = b[k]; r < b[k + 1]; r++, row += t->rb) {
			__m512 v[4], w0 = _mm512_set1_ps(a0[r]), w1 = _mm512_set1_ps(a1[r]);
			__m512 w2 = _mm512_set1_ps(a2[r]), w3 = _mm512_set1_ps(a3[r]);

#pragma GCC unroll 4
			for (c = 0; c < NE; c++) {
				v[c] = F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)
				    ((const uint16_t *)row + 16 * c))) :
				    _mm512_loadu_ps((const float *)row + 16 * c);
				o[0][c] = _mm512_mask3_fmadd_ps(w0, v[c], o[0][c], m[0]);
				o[1][c] = _mm512_mask3_fmadd_ps(w1, v[c], o[1][c], m[1]);
				o[2][c] = _mm512_mask3_fmadd_ps(w2, v[c], o[2][c], m[2]);
				o[3][c] = _mm512_mask3_fmadd_ps(w3, v[c], o[3][c], m[3]);
			}
		}
	}
	for (j = 0; j < nj; j++)
#pragma GCC unroll 4
		for (c = 0; c < NE; c++)
			_mm512_storeu_ps(t->o[j0 + j] + e0 + 16 * c, o[j][c]);
}

/* The sorted distinct lo and hi of queries [j0, j0 + nj) into b; returns their count. */
static int
bounds(const struct kern_att_tile *t, int j0, int nj, int *b)
{
	int n = 0, j, k, x;

	for (j = 0; j < nj; j++) {
		b[n++] = t->lo[j0 + j];
		b[n++] = t->hi[j0 + j];
	}
	for (j = 1; j < n; j++)		/* insertion sort of at most 8 */
		for (k = j; k > 0 && b[k - 1] > b[k]; k--)
			x = b[k], b[k] = b[k - 1], b[k - 1] = x;
	for (j = k = 0; j < n; j++)
		if (k == 0 || b[k - 1] != b[j])
			b[k++] = b[j];
	return k;
}

static void
att512(const struct kern_att_tile *t)
{
	int hd = t->hd, j0, e0, b[8], nb;

	for (j0 = 0; j0 < t->nq; j0 += QL)
		tile_scores(t, j0, t->nq - j0 < QL ? t->nq - j0 : QL);
	for (j0 = 0; j0 < t->nq; j0++)
		(void)kern_avx2_att_softmax(t, j0);	/* s: the weights, divided by their sum */
	for (j0 = 0; j0 < t->nq; j0 += 4) {
		int nj = t->nq - j0 < 4 ? t->nq - j0 : 4;

		nb = bounds(t, j0, nj, b);
		for (e0 = 0; e0 + 64 <= hd; e0 += 64)
			if (t->f16)
				wsum_part(t, j0, nj, e0, 4, true, b, nb);
			else
				wsum_part(t, j0, nj, e0, 4, false, b, nb);
		for (; e0 < hd; e0 += 16)
			wsum_part(t, j0, nj, e0, 1, t->f16, b, nb);
	}
}

/* Tiles of more than eight queries (prefill) here, smaller ones as avx2's: the same bits. */
void
kern_avx512_att_tile(const struct kern_att_tile *t)
{
	if (att512_fits(t))
		att512(t);
	else
		kern_avx2_att_tile(t);
}
