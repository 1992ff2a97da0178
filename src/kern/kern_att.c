/*
 * kern_att.c: the scalar table's attention kernels: the dot product and
 * axpy over one F32 or F16 cache row, the attention of a tile of queries
 * one query at a time (kern.h's kern_att_tile), and the Q8_0 cache rows
 * (rounding float rows to GGUF's Q8_0 blocks as ggml does: d = max|x| / 127
 * stored as fp16, q = round(x / d); and the dot product and axpy that read
 * the blocks in place, a head's slice starting and ending anywhere).
 *
 * Rounding error of one element x of a Q8_0 block whose largest magnitude
 * is A: q = round(x * 127 / A) is off by <= 1/2 step of d = A / 127, and
 * storing d in fp16 moves every d * q by <= 127 * d * 2^-11 = A * 2^-11, so
 * |x - fp16(d) * q| <= A * (1/254 + 2^-11) (tests/unit/test_kv_q8.c
 * builds its attention bound on this).
 */
#include "kern_int.h"

#include <math.h>
#include <string.h>

static float
dot_f32(const float *a, const float *b, int n)
{
	float s = 0;
	int i;

	for (i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static float
dot_f16(const uint16_t *a, const float *b, int n)
{
	float s = 0;
	int i;

	for (i = 0; i < n; i++)
		s += q_fp16_to_f32(a[i]) * b[i];
	return s;
}

static void
axpy_f32(float *y, float a, const float *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		y[i] += a * x[i];
}

static void
axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		y[i] += a * q_fp16_to_f32(x[i]);
}

size_t
kern_att_buf_floats(int hd)
{
	return 2 * (size_t)KERN_ATT_PB * (size_t)hd;
}

/*
 * Query j's raw dot products in s[lo, hi) become scores, then softmax
 * numerators; returns their sum (the same order as one query alone), the
 * sink's term included where the tile has sinks.
 */
static float
att_softmax(const struct kern_att_tile *t, int j)
{
	float *s = t->s + (size_t)j * t->s_stride;
	float mx = -INFINITY, sum = 0, scale = t->scale, cap = t->cap;
	int p;

	for (p = t->lo[j]; p < t->hi[j]; p++) {
		s[p] = cap > 0 ? cap * tanhf(s[p] * scale / cap) : s[p] * scale;
		if (s[p] > mx)
			mx = s[p];
	}
	if (t->sink != NULL && t->sink[j] > mx)
		mx = t->sink[j];
	for (p = t->lo[j]; p < t->hi[j]; p++) {
		s[p] = expf(s[p] - mx);
		sum += s[p];
	}
	if (t->sink != NULL)	/* the sink's weight, after the positions' */
		sum += expf(t->sink[j] - mx);
	return sum;
}

/* Portable: one query at a time over the rows in place. */
void
kern_scalar_att_tile(const struct kern_att_tile *t)
{
	int hd = t->hd, j, p;

	for (j = 0; j < t->nq; j++) {
		float *s = t->s + (size_t)j * t->s_stride, *o = t->o[j], sum;

		for (p = t->lo[j]; p < t->hi[j]; p++) {
			const void *kr = t->k + (size_t)p * t->rb;

			s[p] = t->f16 ? dot_f16(kr, t->q[j], hd) : dot_f32(kr, t->q[j], hd);
		}
		sum = att_softmax(t, j);
		memset(o, 0, (size_t)hd * sizeof *o);
		for (p = t->lo[j]; p < t->hi[j]; p++) {
			const void *vr = t->v + (size_t)p * t->rb;

			if (t->f16)
				axpy_f16(o, s[p] / sum, vr, hd);
			else
				axpy_f32(o, s[p] / sum, vr, hd);
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

void
kern_kvq8_quantize(const float *x, void *dst, int n)
{
	unsigned char *o = dst;
	int b, i;

	for (b = 0; b < n / QB; b++, o += QBYTES, x += QB) {
		float amax = 0, d, id;
		uint16_t h;

		for (i = 0; i < QB; i++)
			if (fabsf(x[i]) > amax)
				amax = fabsf(x[i]);
		d = amax / 127.0f;
		id = d != 0 ? 1.0f / d : 0;
		h = q_f32_to_fp16(d);
		o[0] = (unsigned char)(h & 0xff);
		o[1] = (unsigned char)(h >> 8);
		for (i = 0; i < QB; i++)
			o[2 + i] = (unsigned char)(int8_t)roundf(x[i] * id);
	}
}

float
kern_scalar_kvq8_dot(const void *row, int i0, const float *b, int n)
{
	const unsigned char *r = row;
	float s = 0;
	int i = 0;

	/* one block (or the part of it inside the slice) per step */
	while (i < n) {
		int e = i0 + i, blk = e / QB, j0 = e % QB, m = QB - j0 < n - i ? QB - j0 : n - i, j;
		const int8_t *q = blk_q(r, blk) + j0;
		float bs = 0;

		for (j = 0; j < m; j++)
			bs += (float)q[j] * b[i + j];
		s += bs * blk_d(r, blk);
		i += m;
	}
	return s;
}

void
kern_scalar_kvq8_axpy(float *y, float a, const void *row, int i0, int n)
{
	const unsigned char *r = row;
	int i = 0;

	while (i < n) {
		int e = i0 + i, blk = e / QB, j0 = e % QB, m = QB - j0 < n - i ? QB - j0 : n - i, j;
		const int8_t *q = blk_q(r, blk) + j0;
		float ad = a * blk_d(r, blk);

		for (j = 0; j < m; j++)
			y[i + j] += ad * (float)q[j];
		i += m;
	}
}
