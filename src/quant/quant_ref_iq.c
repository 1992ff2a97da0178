/*
 * quant_ref_iq.c: quantisers of the quant_iq.h formats, for fixtures and
 * tests only (libkvcref.a). Any valid encoding serves them, so the choices
 * are plain: scales from each group's largest magnitude, levels by nearest
 * value, lattice entries by exhaustive nearest-point search over the grid
 * (slow, and fine for fixtures of a few million weights), and where a sign
 * index must have an even count of minus signs, the smallest value of the
 * group takes the flip. The IQ1 types look up the nearest point of -1, 0, 1
 * first and search their 2,048 entries only when it is not one of them.
 */
#include "quant_iq.h"

#include <math.h>
#include <string.h>

static float
amax_of(const float *x, int n)
{
	float m = 0;

	for (int i = 0; i < n; i++)
		m = fmaxf(m, fabsf(x[i]));
	return m;
}

static void
put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void
put32(uint8_t *p, uint32_t v)
{
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* The index of the level nearest x/s in a table of 16 (IQ4_NL, MXFP4). */
static int
nearest16(const int8_t *table, float v)
{
	int best = 0;
	float be = INFINITY;

	for (int k = 0; k < 16; k++) {
		float e = fabsf(v - (float)table[k]);
		if (e < be) {
			be = e;
			best = k;
		}
	}
	return best;
}

/* 32 values at scale s as nibbles of a 16-level table (IQ4_NL layout). */
static void
nibbles_of(const float *x, float s, const int8_t *table, uint8_t *qs)
{
	float is = s != 0 ? 1.0f / s : 0;

	for (int i = 0; i < 16; i++)
		qs[i] = (uint8_t)(nearest16(table, x[i] * is) | nearest16(table, x[i + 16] * is) << 4);
}

static int
quant_q2_k(const float *x, uint8_t *p)
{
	float sc[16], mn[16], smax = 0, mmax = 0, d, dmin;

	/* each 16: value = a q - m with q 0..3 and m >= 0 covering [min(x, 0), max(x)] */
	for (int k = 0; k < 16; k++) {
		float lo = 0, hi = x[16 * k];
		for (int i = 0; i < 16; i++) {
			lo = fminf(lo, x[16 * k + i]);
			hi = fmaxf(hi, x[16 * k + i]);
		}
		sc[k] = fmaxf(hi - lo, 0) / 3;
		mn[k] = -lo;
		smax = fmaxf(smax, sc[k]);
		mmax = fmaxf(mmax, mn[k]);
	}
	put16(p + 80, q_f32_to_fp16(smax / 15));
	put16(p + 82, q_f32_to_fp16(mmax / 15));
	d = q_fp16_to_f32((uint16_t)(p[80] | p[81] << 8));
	dmin = q_fp16_to_f32((uint16_t)(p[82] | p[83] << 8));
	memset(p + 16, 0, 64);
	for (int k = 0; k < 16; k++) {
		int is = d > 0 ? (int)lrintf(sc[k] / d) : 0, im = dmin > 0 ? (int)lrintf(mn[k] / dmin) : 0;
		is = is < 0 ? 0 : is > 15 ? 15 : is;
		im = im < 0 ? 0 : im > 15 ? 15 : im;
		p[k] = (uint8_t)(is | im << 4);
		float a = d * (float)is, m = dmin * (float)im;
		for (int i = 0; i < 16; i++) {
			int e = 16 * k + i, q = a > 0 ? (int)lrintf((x[e] + m) / a) : 0;
			q = q < 0 ? 0 : q > 3 ? 3 : q;
			p[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
		}
	}
	return 0;
}

static int
quant_iq4_xs(const float *x, uint8_t *p)
{
	float s[8], smax = 0, d;
	uint16_t sh = 0;

	/* each 32: the value of largest magnitude on the level -127 */
	for (int b = 0; b < 8; b++) {
		float m = 0;
		for (int i = 0; i < 32; i++)
			if (fabsf(x[32 * b + i]) > fabsf(m))
				m = x[32 * b + i];
		s[b] = m / -127.0f;
		smax = fmaxf(smax, fabsf(s[b]));
	}
	put16(p, q_f32_to_fp16(smax / 31));
	d = q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
	memset(p + 4, 0, 4);
	for (int b = 0; b < 8; b++) {
		int ls = d > 0 ? (int)lrintf(s[b] / d) + 32 : 32;
		ls = ls < 0 ? 0 : ls > 63 ? 63 : ls;
		p[4 + b / 2] |= (uint8_t)((ls & 0xF) << (4 * (b % 2)));
		sh |= (uint16_t)((ls >> 4) << (2 * b));
		nibbles_of(x + 32 * b, d * (float)(ls - 32), q_iq4nl_values, p + 8 + 16 * b);
	}
	put16(p + 2, sh);
	return 0;
}

static int
quant_mxfp4(const float *x, uint8_t *p)
{
	float amax = amax_of(x, 32);
	int e = 0;

	/* the smallest exponent whose scale keeps amax within the largest level, 12 */
	while (e < 254 && q_mxfp4_scale((uint8_t)e) * 12 < amax)
		e++;
	p[0] = (uint8_t)e;
	nibbles_of(x, q_mxfp4_scale((uint8_t)e), q_mxfp4_values, p + 1);
	return 0;
}

/* The grid entry of n values (8 or 4 bytes each) nearest the magnitudes a[0..n). */
static int
nearest_entry(const void *grid, int count, int n, const float *a)
{
	int best = 0;
	float be = INFINITY;

	for (int k = 0; k < count; k++) {
		uint64_t g = n == 8 ? ((const uint64_t *)grid)[k] : ((const uint32_t *)grid)[k];
		float e = 0;
		for (int j = 0; j < n; j++) {
			float v = a[j] - (float)((g >> (8 * j)) & 0xFF);
			e += v * v;
		}
		if (e < be) {
			be = e;
			best = k;
		}
	}
	return best;
}

/*
 * The sign byte of 8 values (bit j: x[j] < 0); with even set, an odd count
 * of minus signs gives the smallest magnitude the wrong sign.
 */
static uint8_t
signs_of(const float *x, bool even)
{
	uint8_t s = 0;
	int n = 0, small = 0;

	for (int j = 0; j < 8; j++) {
		if (x[j] < 0) {
			s |= (uint8_t)(1u << j);
			n++;
		}
		if (fabsf(x[j]) < fabsf(x[small]))
			small = j;
	}
	if (even && (n & 1))
		s ^= (uint8_t)(1u << small);
	return s;
}

/*
 * The lattice types' scales: each group g of `per` values wants the scale
 * amax_g / gmax; a group's scale is d * (a + b s) for a 4-bit s. d is the
 * largest wanted scale over (a + 15 b), each s the nearest step.
 */
static float
lattice_scales(const float *x, int per, float gmax, float a, float b, uint8_t *p, int *s)
{
	float want[16], wmax = 0, d;
	int ng = QK_K / per;

	for (int g = 0; g < ng; g++) {
		want[g] = amax_of(x + per * g, per) / gmax;
		wmax = fmaxf(wmax, want[g]);
	}
	put16(p, q_f32_to_fp16(wmax / (a + 15 * b)));
	d = q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
	for (int g = 0; g < ng; g++) {
		int v = d > 0 ? (int)lrintf((want[g] / d - a) / b) : 0;
		s[g] = v < 0 ? 0 : v > 15 ? 15 : v;
	}
	return d;
}

/* The magnitudes of 8 values at scale db, as grid units. */
static void
units(const float *x, float db, float *a)
{
	for (int j = 0; j < 8; j++)
		a[j] = db > 0 ? fabsf(x[j]) / db : 0;
}

static int
quant_iq2(enum gguf_dtype t, const float *x, uint8_t *p)
{
	bool xxs = t == GGML_TYPE_IQ2_XXS, xs = t == GGML_TYPE_IQ2_XS;
	int s[16], per = xxs ? 32 : 16;
	float d = lattice_scales(x, per, 43, 0.125f, 0.25f, p, s), a[8];
	const uint64_t *grid = xxs ? q_iq2xxs_grid : xs ? q_iq2xs_grid : q_iq2s_grid;
	int count = xxs ? 256 : xs ? 512 : 1024;

	if (t == GGML_TYPE_IQ2_S)
		memset(p + 66, 0, 8);
	for (int b = 0; b < 8; b++) {
		uint32_t aux = xxs ? (uint32_t)s[b] << 28 : 0;
		for (int l = 0; l < 4; l++) {
			const float *xg = x + 32 * b + 8 * l;
			int sg = xxs ? s[b] : s[2 * b + l / 2];
			units(xg, d * (0.5f + (float)sg) * 0.25f, a);
			int k = nearest_entry(grid, count, 8, a);
			uint8_t sb = signs_of(xg, t != GGML_TYPE_IQ2_S);
			if (xxs) {
				p[2 + 8 * b + l] = (uint8_t)k;
				aux |= (uint32_t)(sb & 127) << (7 * l);
			} else if (xs) {
				put16(p + 2 + 2 * (4 * b + l), (uint16_t)(k | (sb & 127) << 9));
			} else {
				p[2 + 4 * b + l] = (uint8_t)k;
				p[34 + 4 * b + l] = sb;
				p[66 + b] |= (uint8_t)((k >> 8) << (2 * l));
			}
		}
		if (xxs)
			put32(p + 2 + 8 * b + 4, aux);
		else
			p[(xs ? 66 : 74) + b] = (uint8_t)(s[2 * b] | s[2 * b + 1] << 4);
	}
	return 0;
}

static int
quant_iq3(enum gguf_dtype t, const float *x, uint8_t *p)
{
	bool xxs = t == GGML_TYPE_IQ3_XXS;
	int s[8];
	/* IQ3_XXS: d (0.5 + s) / 2, largest level 62; IQ3_S: d (1 + 2 s), largest 15 */
	float d = xxs ? lattice_scales(x, 32, 62, 0.25f, 0.5f, p, s) : lattice_scales(x, 32, 15, 1, 2, p, s);
	float a[8];

	if (!xxs)
		memset(p + 66, 0, 8 + 32 + 4);
	for (int b = 0; b < 8; b++) {
		float db = xxs ? d * (0.5f + (float)s[b]) * 0.5f : d * (float)(1 + 2 * s[b]);
		uint32_t aux = (uint32_t)s[b] << 28;
		for (int l = 0; l < 4; l++) {
			const float *xg = x + 32 * b + 8 * l;
			units(xg, db, a);
			int k0 = nearest_entry(xxs ? (const void *)q_iq3xxs_grid : q_iq3s_grid, xxs ? 256 : 512, 4, a);
			int k1 = nearest_entry(xxs ? (const void *)q_iq3xxs_grid : q_iq3s_grid, xxs ? 256 : 512, 4, a + 4);
			uint8_t sb = signs_of(xg, xxs);
			p[2 + 8 * b + 2 * l] = (uint8_t)k0;
			p[2 + 8 * b + 2 * l + 1] = (uint8_t)k1;
			if (xxs) {
				aux |= (uint32_t)(sb & 127) << (7 * l);
			} else {
				p[66 + b] |= (uint8_t)((k0 >> 8) << (2 * l) | (k1 >> 8) << (2 * l + 1));
				p[74 + 4 * b + l] = sb;
			}
		}
		if (xxs)
			put32(p + 66 + 4 * b, aux);
		else
			p[106 + b / 2] |= (uint8_t)(s[b] << (4 * (b % 2)));
	}
	return 0;
}

/* An IQ1 grid entry's position in the order of 8 digits t_j + 1, t_7 the most significant. */
static uint32_t
iq1_code(uint64_t g)
{
	uint32_t c = 0;

	for (int j = 7; j >= 0; j--) {
		uint8_t b = (uint8_t)(g >> (8 * j));
		c = 3 * c + (b == 0xFF ? 0u : b == 0 ? 1u : 2u);
	}
	return c;
}

/*
 * The q_iq1s_grid entry nearest u - delta (u: 8 values in units of their
 * scale), its squared error in *cost. The point of -1, 0, 1 nearest in
 * each coordinate is the answer when it is an entry (the grid is in
 * increasing iq1_code order; if it were not, the binary search would only
 * miss and the full search run); else every entry is tried.
 */
static int
iq1_entry(const float *u, float delta, float *cost)
{
	float c[8][3], be = INFINITY;
	uint32_t want = 0;
	int best = -1, lo = 0, hi = 2047;

	for (int j = 7; j >= 0; j--) {
		int m = 0;
		for (int v = 0; v < 3; v++) {
			float e = u[j] - delta - (float)(v - 1);
			c[j][v] = e * e;
			m = c[j][v] < c[j][m] ? v : m;
		}
		want = 3 * want + (uint32_t)m;
	}
	while (lo <= hi && best < 0) {
		int mid = (lo + hi) / 2;
		uint32_t code = iq1_code(q_iq1s_grid[mid]);
		if (code == want)
			best = mid;
		else if (code < want)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	/* the found entry alone, or all of them */
	lo = best >= 0 ? best : 0;
	hi = best >= 0 ? best + 1 : 2048;
	for (int k = lo; k < hi; k++) {
		float e = 0;
		for (int j = 0; j < 8; j++) {
			uint8_t b = (uint8_t)(q_iq1s_grid[k] >> (8 * j));
			e += c[j][b == 0xFF ? 0 : b == 0 ? 1 : 2];
		}
		if (e < be) {
			be = e;
			best = k;
		}
	}
	*cost = be;
	return best < 0 ? 0 : best;	/* NaN input: any entry */
}

/*
 * IQ1_S (scales per 32, one shift per 32) and IQ1_M (scales per 16, a
 * shift per 8): a group's d_g wants its largest magnitude at 1.5 units,
 * the step of three levels over data spread evenly; d is the largest wanted
 * d_g over 15 (2 s + 1 at s = 7), each s the nearest. IQ1_S takes the
 * shift whose four entries err less in all; IQ1_M each group's better one.
 */
static int
quant_iq1(enum gguf_dtype t, const float *x, uint8_t *p)
{
	bool m = t == GGML_TYPE_IQ1_M;
	int per = m ? 16 : 32, ng = QK_K / per, s[16];
	float want[16], wmax = 0, d;
	uint16_t dh;

	for (int g = 0; g < ng; g++) {
		want[g] = amax_of(x + per * g, per) / 1.5f;
		wmax = fmaxf(wmax, want[g]);
	}
	dh = q_f32_to_fp16(wmax / 15);
	d = q_fp16_to_f32(dh);
	for (int g = 0; g < ng; g++) {
		int v = d > 0 ? (int)lrintf((want[g] / d - 1) / 2) : 0;
		s[g] = v < 0 ? 0 : v > 7 ? 7 : v;
	}
	memset(p, 0, m ? 56 : 50);
	if (!m)
		put16(p, dh);
	for (int b = 0; b < 8; b++) {
		int k[2][4];
		float cost[2][4], tot[2] = {0, 0};
		for (int l = 0; l < 4; l++) {
			float dg = d * (float)(2 * s[m ? 2 * b + l / 2 : b] + 1), u[8];
			for (int j = 0; j < 8; j++)
				u[j] = dg > 0 ? x[32 * b + 8 * l + j] / dg : 0;
			for (int neg = 0; neg < 2; neg++) {
				k[neg][l] = iq1_entry(u, neg ? -0.125f : 0.125f, &cost[neg][l]);
				tot[neg] += cost[neg][l];
			}
		}
		if (!m) {
			int neg = tot[1] < tot[0];
			uint16_t h = (uint16_t)(s[b] << 12 | neg << 15);
			for (int l = 0; l < 4; l++) {
				p[2 + 4 * b + l] = (uint8_t)k[neg][l];
				h |= (uint16_t)((k[neg][l] >> 8) << (3 * l));
			}
			put16(p + 34 + 2 * b, h);
			continue;
		}
		for (int l = 0; l < 4; l++) {
			int neg = cost[1][l] < cost[0][l];
			p[4 * b + l] = (uint8_t)k[neg][l];
			p[32 + 2 * b + l / 2] |= (uint8_t)(((k[neg][l] >> 8) | neg << 3) << (4 * (l % 2)));
		}
	}
	if (m) {
		/* 3 bits per 16 from bit 0 of each u16, 4 per word; d's nibble k on top of word k */
		for (int w = 0; w < 4; w++) {
			unsigned v = (unsigned)(s[4 * w] | s[4 * w + 1] << 3 | s[4 * w + 2] << 6 | s[4 * w + 3] << 9);
			put16(p + 48 + 2 * w, (uint16_t)(v | ((dh >> (4 * w)) & 0xFu) << 12));
		}
	}
	return 0;
}

int
q_iq_quantize_block(enum gguf_dtype t, const float *x, uint8_t *p)
{
	switch (t) {
	case GGML_TYPE_Q2_K: return quant_q2_k(x, p);
	case GGML_TYPE_IQ4_NL: {
		float m = 0;
		for (int i = 0; i < 32; i++)
			if (fabsf(x[i]) > fabsf(m))
				m = x[i];
		put16(p, q_f32_to_fp16(m / -127.0f));
		nibbles_of(x, q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8)), q_iq4nl_values, p + 2);
		return 0;
	}
	case GGML_TYPE_IQ4_XS: return quant_iq4_xs(x, p);
	case GGML_TYPE_MXFP4: return quant_mxfp4(x, p);
	case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S: return quant_iq2(t, x, p);
	case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: return quant_iq3(t, x, p);
	case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: return quant_iq1(t, x, p);
	default: return KVC_EUNSUPPORTED;
	}
}
