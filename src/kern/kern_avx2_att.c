/*
 * kern_avx2_att.c: the avx2 table's attention kernels (compiled with -mavx2
 * -mfma -mf16c, kern.am). A tile of queries (kern_att_tile) converts each
 * block of K rows to float once, transposed, so that eight positions'
 * scores are one FMA per head element, and each block of V rows once; the
 * softmax runs eight positions at a time with a polynomial e^x. Before the
 * tiles, prefill converted every cache row once per query and called expf
 * per score: at 7000 positions of history the 119-token turn of
 * bench/ttft.sh spent about 14% of its time there, now about 6%. Q8_0 cache
 * rows: the dot product and axpy over slices of whole blocks (others go to
 * the scalar kernels).
 */
#include "kern_int.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static float
hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Row r of a cache block as floats, from F16 or F32 elements. */
static void
att_row(const struct kern_att_tile *t, const char *base, int p, float *dst)
{
	const char *row = base + (size_t)p * t->rb;
	int i = 0;

	if (!t->f16) {
		memcpy(dst, row, (size_t)t->hd * sizeof *dst);
		return;
	}
	for (; i + 8 <= t->hd; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)
		    ((const uint16_t *)row + i))));
	for (; i < t->hd; i++)
		dst[i] = q_fp16_to_f32(((const uint16_t *)row)[i]);
}

/* Element i of a cache row, F16 or F32, as a float. */
static inline float
att_elem(const struct kern_att_tile *t, const char *row, int i)
{
	return t->f16 ? q_fp16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

/* Elements [i, i + 8) of a cache row as floats. */
static inline __attribute__((always_inline)) __m256
att_ld8(const struct kern_att_tile *t, const char *row, int i)
{
	if (t->f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
	return _mm256_loadu_ps((const float *)row + i);
}

/* v[e][r] = old v[r][e]: an 8 x 8 block transposed in registers. */
static inline __attribute__((always_inline)) void
transpose8(__m256 v[8])
{
	__m256 a[8], b[8];

	for (int e = 0; e < 8; e += 2) {
		a[e] = _mm256_unpacklo_ps(v[e], v[e + 1]);	/* r0e0 r1e0 r0e1 r1e1 | e4.. */
		a[e + 1] = _mm256_unpackhi_ps(v[e], v[e + 1]);	/* r0e2 r1e2 r0e3 r1e3 | e6.. */
	}
	for (int h = 0; h < 8; h += 4) {
		b[h] = _mm256_shuffle_ps(a[h], a[h + 2], 0x44);		/* element 0 (and 4) */
		b[h + 1] = _mm256_shuffle_ps(a[h], a[h + 2], 0xee);	/* 1 (5) */
		b[h + 2] = _mm256_shuffle_ps(a[h + 1], a[h + 3], 0x44);	/* 2 (6) */
		b[h + 3] = _mm256_shuffle_ps(a[h + 1], a[h + 3], 0xee);	/* 3 (7) */
	}
	for (int e = 0; e < 4; e++) {
		v[e] = _mm256_permute2f128_ps(b[e], b[e + 4], 0x20);
		v[e + 4] = _mm256_permute2f128_ps(b[e], b[e + 4], 0x31);
	}
}

/*
 * K rows [blk, blk + n) transposed into kt (hd rows of KERN_ATT_PB floats),
 * positions n..n8 zero, so that eight positions' dot products are one
 * vector FMA per element of the head. Eight rows at a time go through
 * 8 x 8 register transposes (the element-by-element copy this replaced was
 * most of a decode step's attention over an F16 cache: 8 KB of scattered
 * 4-byte stores per row of Gemma 3's 256-element heads).
 */
static void
att_load_kt(const struct kern_att_tile *t, int blk, int n, int n8, float *kt)
{
	int hd = t->hd, r, i;

	for (r = 0; r + 8 <= n; r += 8) {
		const char *row[8];

		for (int e = 0; e < 8; e++)
			row[e] = t->k + (size_t)(blk + r + e) * t->rb;
		for (i = 0; i + 8 <= hd; i += 8) {
			__m256 v[8];

			for (int e = 0; e < 8; e++)
				v[e] = att_ld8(t, row[e], i);
			transpose8(v);
			for (int e = 0; e < 8; e++)
				_mm256_storeu_ps(kt + (size_t)(i + e) * KERN_ATT_PB + r, v[e]);
		}
		for (; i < hd; i++)
			for (int e = 0; e < 8; e++)
				kt[(size_t)i * KERN_ATT_PB + r + e] = att_elem(t, row[e], i);
	}
	for (; r < n; r++) {
		const char *row = t->k + (size_t)(blk + r) * t->rb;

		for (i = 0; i < hd; i++)
			kt[(size_t)i * KERN_ATT_PB + r] = att_elem(t, row, i);
	}
	for (; r < n8; r++)
		for (i = 0; i < hd; i++)
			kt[(size_t)i * KERN_ATT_PB + r] = 0;
}

/*
 * Dot products of query q with the block's positions [r0, r1) (r0 a
 * multiple of 8), written to s[r0..]: each is the sum over the head's
 * elements in order, one FMA per element, the same in every lane (four
 * vectors of eight positions at a time keep four FMA chains in flight).
 */
static void
att_dots(const float *kt, int hd, const float *q, int r0, int r1, float *s)
{
	int r = r0, i, r8 = (r1 + 7) & ~7;	/* the block is zero-padded to a multiple of 8 */

	for (; r + 32 <= r8; r += 32) {
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;

		for (i = 0; i < hd; i++) {
			__m256 qi = _mm256_broadcast_ss(q + i);
			const float *k = kt + (size_t)i * KERN_ATT_PB + r;

			a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k), qi, a0);
			a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 8), qi, a1);
			a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 16), qi, a2);
			a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 24), qi, a3);
		}
		_mm256_storeu_ps(s + r, a0);
		_mm256_storeu_ps(s + r + 8, a1);
		_mm256_storeu_ps(s + r + 16, a2);
		_mm256_storeu_ps(s + r + 24, a3);
	}
	for (; r < r8; r += 8) {
		__m256 a0 = _mm256_setzero_ps();

		for (i = 0; i < hd; i++)
			a0 = _mm256_fmadd_ps(_mm256_loadu_ps(kt + (size_t)i * KERN_ATT_PB + r),
			    _mm256_broadcast_ss(q + i), a0);
		_mm256_storeu_ps(s + r, a0);
	}
}

/* o += a[r] * vb[r] for r in [r0, r1) in order (vb rows of hd floats). */
static void
att_wsum(float *o, const float *a, const float *vb, int hd, int r0, int r1)
{
	int i = 0, r;

	for (; i + 32 <= hd; i += 32) {
		__m256 o0 = _mm256_loadu_ps(o + i), o1 = _mm256_loadu_ps(o + i + 8);
		__m256 o2 = _mm256_loadu_ps(o + i + 16), o3 = _mm256_loadu_ps(o + i + 24);

		for (r = r0; r < r1; r++) {
			__m256 w = _mm256_set1_ps(a[r]);
			const float *v = vb + (size_t)r * hd + i;

			o0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v), o0);
			o1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8), o1);
			o2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 16), o2);
			o3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 24), o3);
		}
		_mm256_storeu_ps(o + i, o0);
		_mm256_storeu_ps(o + i + 8, o1);
		_mm256_storeu_ps(o + i + 16, o2);
		_mm256_storeu_ps(o + i + 24, o3);
	}
	for (; i + 8 <= hd; i += 8) {
		__m256 o0 = _mm256_loadu_ps(o + i);

		for (r = r0; r < r1; r++)
			o0 = _mm256_fmadd_ps(_mm256_set1_ps(a[r]),
			    _mm256_loadu_ps(vb + (size_t)r * hd + i), o0);
		_mm256_storeu_ps(o + i, o0);
	}
	for (; i < hd; i++)
		for (r = r0; r < r1; r++)
			o[i] += a[r] * vb[(size_t)r * hd + i];
}

/*
 * e^x (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-7 polynomial in
 * r, times 2^n), within 2 ulp, for x clamped to [-87, 88]: below -87 it
 * gives e^-87 instead of a denormal or 0, which a softmax whose largest term
 * is 1, or SiLU's 1 + e^-x, does not notice.
 */
static inline __attribute__((always_inline)) __m256
exp_neg(__m256 x)
{
	__m256 n, r, p;
	__m256i e;

	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/*
 * att_softmax with eight positions at a time (from lo, then one by one):
 * the same arithmetic for a query whatever its tile.
 */
float
kern_avx2_att_softmax(const struct kern_att_tile *t, int j)
{
	float *s = t->s + (size_t)j * t->s_stride, mx = -INFINITY, sum, tail = 0;
	float scale = t->scale, cap = t->cap, m8[8];
	int lo = t->lo[j], hi = t->hi[j], p;
	__m256 vmx = _mm256_set1_ps(-INFINITY), vs = _mm256_setzero_ps(), vsc;

	if (cap > 0) {
		for (p = lo; p < hi; p++)
			s[p] = cap * tanhf(s[p] * scale / cap);
	} else {
		vsc = _mm256_set1_ps(scale);
		for (p = lo; p + 8 <= hi; p += 8)
			_mm256_storeu_ps(s + p, _mm256_mul_ps(_mm256_loadu_ps(s + p), vsc));
		for (; p < hi; p++)
			s[p] *= scale;
	}
	for (p = lo; p + 8 <= hi; p += 8)
		vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(s + p));
	_mm256_storeu_ps(m8, vmx);
	for (p = 0; p < 8; p++)
		if (m8[p] > mx)
			mx = m8[p];
	for (p = lo + (hi - lo) / 8 * 8; p < hi; p++)
		if (s[p] > mx)
			mx = s[p];
	if (t->sink != NULL && t->sink[j] > mx)
		mx = t->sink[j];
	vmx = _mm256_set1_ps(mx);
	for (p = lo; p + 8 <= hi; p += 8) {
		__m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + p), vmx));

		_mm256_storeu_ps(s + p, e);
		vs = _mm256_add_ps(vs, e);
	}
	for (; p < hi; p++) {
		__m256 e = exp_neg(_mm256_set1_ps(s[p] - mx));

		s[p] = _mm256_cvtss_f32(e);
		tail += s[p];
	}
	sum = hsum8(vs) + tail;
	if (t->sink != NULL)	/* the sink's weight, after the positions' (att_softmax's order) */
		sum += _mm256_cvtss_f32(exp_neg(_mm256_set1_ps(t->sink[j] - mx)));
	vs = _mm256_set1_ps(sum);
	for (p = lo; p + 8 <= hi; p += 8)
		_mm256_storeu_ps(s + p, _mm256_div_ps(_mm256_loadu_ps(s + p), vs));
	for (; p < hi; p++)
		s[p] /= sum;
	return sum;
}

/*
 * Scores of every query against a block of K rows, transposed once for the
 * tile; softmax per query; then each block of V rows, converted once, into
 * every query's sum.
 */
void
kern_avx2_att_tile(const struct kern_att_tile *t)
{
	int hd = t->hd, P0 = INT32_MAX, P1 = 0, j, blk, r;
	float *kt = t->buf, *vb = t->buf + (size_t)KERN_ATT_PB * hd;

	for (j = 0; j < t->nq; j++) {
		if (t->lo[j] < P0)
			P0 = t->lo[j];
		if (t->hi[j] > P1)
			P1 = t->hi[j];
		memset(t->o[j], 0, (size_t)hd * sizeof(float));
	}
	for (blk = P0; blk < P1; blk += KERN_ATT_PB) {
		int n = P1 - blk < KERN_ATT_PB ? P1 - blk : KERN_ATT_PB;

		att_load_kt(t, blk, n, (n + 7) & ~7, kt);
		for (j = 0; j < t->nq; j++) {
			int r0 = (t->lo[j] > blk ? t->lo[j] - blk : 0) & ~7;
			int r1 = t->hi[j] < blk + n ? t->hi[j] - blk : n;

			if (r1 > r0)
				att_dots(kt, hd, t->q[j], r0, r1,
				    t->s + (size_t)j * t->s_stride + blk);
		}
	}
	for (j = 0; j < t->nq; j++)
		(void)kern_avx2_att_softmax(t, j);	/* s: the weights, divided by their sum */
	for (blk = P0; blk < P1; blk += KERN_ATT_PB) {
		int n = P1 - blk < KERN_ATT_PB ? P1 - blk : KERN_ATT_PB;

		for (r = 0; r < n; r++)
			att_row(t, t->v, blk + r, vb + (size_t)r * hd);
		for (j = 0; j < t->nq; j++) {
			int r0 = t->lo[j] > blk ? t->lo[j] - blk : 0;
			int r1 = t->hi[j] < blk + n ? t->hi[j] - blk : n;

			if (r1 > r0)
				att_wsum(t->o[j], t->s + (size_t)j * t->s_stride + blk, vb, hd,
				    r0, r1);
		}
	}
}

/* ---- Q8_0 cache rows ---- */

#define QB 32		/* elements per block */
#define QBYTES 34	/* fp16 scale + 32 int8 */

/* The scale of block b of row (stored little-endian, possibly unaligned). */
static inline float
blk_d(const unsigned char *row, int b)
{
	const unsigned char *p = row + (size_t)b * QBYTES;

	return q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static inline const int8_t *
blk_q(const unsigned char *row, int b)
{
	return (const int8_t *)(row + (size_t)b * QBYTES + 2);
}

/* Elements 8k..8k+7 of a block's 32 int8 as floats. */
static inline __m256
q8_lane(const int8_t *q, int k)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * k))));
}

static float
kvq8_dot_avx(const void *row, int i0, const float *b, int n)
{
	const unsigned char *r = row;
	__m256 acc = _mm256_setzero_ps();
	__m128 s;
	int blk;

	for (blk = 0; blk < n / QB; blk++) {
		const int8_t *q = blk_q(r, i0 / QB + blk);
		const float *x = b + blk * QB;
		__m256 t = _mm256_mul_ps(q8_lane(q, 0), _mm256_loadu_ps(x));

		t = _mm256_fmadd_ps(q8_lane(q, 1), _mm256_loadu_ps(x + 8), t);
		t = _mm256_fmadd_ps(q8_lane(q, 2), _mm256_loadu_ps(x + 16), t);
		t = _mm256_fmadd_ps(q8_lane(q, 3), _mm256_loadu_ps(x + 24), t);
		acc = _mm256_fmadd_ps(_mm256_set1_ps(blk_d(r, i0 / QB + blk)), t, acc);
	}
	s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static void
kvq8_axpy_avx(float *y, float a, const void *row, int i0, int n)
{
	const unsigned char *r = row;
	int blk, k;

	for (blk = 0; blk < n / QB; blk++) {
		const int8_t *q = blk_q(r, i0 / QB + blk);
		__m256 ad = _mm256_set1_ps(a * blk_d(r, i0 / QB + blk));
		float *o = y + blk * QB;

		for (k = 0; k < 4; k++)
			_mm256_storeu_ps(o + 8 * k, _mm256_fmadd_ps(ad, q8_lane(q, k),
			    _mm256_loadu_ps(o + 8 * k)));
	}
}

/* Slices of whole blocks with vectors, others through the scalar kernels. */
float
kern_avx2_kvq8_dot(const void *row, int i0, const float *b, int n)
{
	if (i0 % QB != 0 || n % QB != 0)
		return kern_scalar_kvq8_dot(row, i0, b, n);
	return kvq8_dot_avx(row, i0, b, n);
}

void
kern_avx2_kvq8_axpy(float *y, float a, const void *row, int i0, int n)
{
	if (i0 % QB != 0 || n % QB != 0)
		kern_scalar_kvq8_axpy(y, a, row, i0, n);
	else
		kvq8_axpy_avx(y, a, row, i0, n);
}
