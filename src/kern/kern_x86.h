/*
 * kern_x86.h: what the x86 kernel files share, internal to src/kern: the
 * horizontal sum every AVX2 reduction uses, the decoding of one weight
 * block into 32-value groups of int8 levels and their scales (the AVX2 and
 * AVX-512 int8 tiles both read blocks through it), and the software
 * prefetch of the float tiles. Included only by files compiled with AVX2
 * (or more) enabled; the functions are inlined into each caller, so each
 * file's copy is compiled for that file's instruction set.
 */
#ifndef KVC_KERN_X86_H
#define KVC_KERN_X86_H

#include "kern.h"

#include <immintrin.h>
#include <string.h>

#define INLINE __attribute__((always_inline)) static inline
/* the tile loops, fully unrolled so the accumulators stay in registers */
#define UNROLL _Pragma("GCC unroll 8")

/*
 * kern_avx2_i8.c and kern_avx2_pack.c are built twice (kern.am): for the
 * avx2 table, and with -mavxvnni -DKERN_AVXVNNI for the avx2vnni table,
 * whose entries take this prefix. The integer sums are exact both ways, so
 * the two tables' results are bitwise the same.
 */
#ifdef KERN_AVXVNNI
#define KERN_AVX2_SYM(name) kern_avx2vnni_##name
#else
#define KERN_AVX2_SYM(name) kern_avx2_##name
#endif

/*
 * The sum of v's eight floats, halves first, then pairs: the one order every
 * AVX2 kernel reduces in (results depend on it bit for bit).
 */
INLINE float
q_hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/*
 * All 8 Q4_K/Q5_K scales and mins at once (same bits as q_k_scale_min),
 * with 32-bit word operations on a little-endian CPU: bytes 0-3 of the 12
 * hold scales 0-3 (low 6 bits), bytes 4-7 mins 0-3; scales/mins 4-7 take
 * their low nibble from bytes 8-11 and their top 2 bits from the top of
 * bytes 0-3 / 4-7.
 */
INLINE void
q_k_scales8_le(const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
	uint32_t w0, w1, w2, a, b, c, d;

	memcpy(&w0, q, 4);
	memcpy(&w1, q + 4, 4);
	memcpy(&w2, q + 8, 4);
	a = w0 & 0x3f3f3f3fu;
	b = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
	c = w1 & 0x3f3f3f3fu;
	d = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
	memcpy(sc, &a, 4);
	memcpy(sc + 4, &b, 4);
	memcpy(mn, &c, 4);
	memcpy(mn + 4, &d, 4);
}

INLINE float
h2f(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return _cvtsh_ss(v);
}

INLINE __m256i
ld256(const void *p)
{
	return _mm256_loadu_si256((const __m256i *)p);
}

/*
 * 8 int32 lanes, lane k = sum of u[4k..4k+4) * s[4k..4k+4), u unsigned
 * bytes, s signed. No int16 saturation occurs for the levels below
 * (|u| <= 128, |s| <= 127, at most 2 * 128 * 127 per pair), so both forms
 * give the exact sums.
 */
INLINE __m256i
mad_avx2(__m256i u, __m256i s)
{
#ifdef KERN_AVXVNNI
	return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* Byte i is 0xFF where bit i of the little-endian 32-bit word at p is set. */
INLINE __m256i
bits_mask(const uint8_t *p)
{
	const __m256i pick = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
	    0x0101010101010101ll, 0);
	const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
	uint32_t h;

	memcpy(&h, p, 4);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), pick);
	return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* ---- one weight block, decoded per group of 32 values -------------------- */

/* What a block's groups need beyond its bytes: the scales of 16-value halves. */
struct blk {
	const uint8_t *p;
	float fs[16];		/* K-quants: weight scale of values [16k, 16k + 16); Q4_K/Q5_K: [32k, 32k + 32) */
	__m256 off;		/* Q4_1/Q5_1: (m, 0, ..., 0); Q4_K/Q5_K: -dmin * min_j, j < 8 */
};

INLINE int
t_group_count(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K ||
	    t == GGML_TYPE_Q6_K ? 8 : 1;
}

INLINE size_t
t_block_bytes(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_Q8_0: return 34;
	case GGML_TYPE_Q4_0: return 18;
	case GGML_TYPE_Q4_1: return 20;
	case GGML_TYPE_Q5_0: return 22;
	case GGML_TYPE_Q5_1: return 24;
	case GGML_TYPE_Q3_K: return 110;
	case GGML_TYPE_Q4_K: return 144;
	case GGML_TYPE_Q5_K: return 176;
	default: return 210;	/* Q6_K */
	}
}

/* Levels stored signed (sign trick in the multiply) or unsigned (direct). */
INLINE bool
t_signed(enum gguf_dtype t)
{
	return !(t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K ||
	    t == GGML_TYPE_Q5_K);
}

/* Q3_K's 16 6-bit scales minus 32 (layout in quant.h). */
static inline void
q3_scales(const uint8_t *p, int8_t *sc)
{
	uint32_t w0, w1, w2, v[4];
	uint8_t u[16];

	memcpy(&w0, p, 4);
	memcpy(&w1, p + 4, 4);
	memcpy(&w2, p + 8, 4);
	v[0] = (w0 & 0x0f0f0f0fu) | ((w2 & 0x03030303u) << 4);
	v[1] = (w1 & 0x0f0f0f0fu) | (((w2 >> 2) & 0x03030303u) << 4);
	v[2] = ((w0 >> 4) & 0x0f0f0f0fu) | (((w2 >> 4) & 0x03030303u) << 4);
	v[3] = ((w1 >> 4) & 0x0f0f0f0fu) | (((w2 >> 6) & 0x03030303u) << 4);
	memcpy(u, v, 16);
	for (int k = 0; k < 16; k++)
		sc[k] = (int8_t)(u[k] - 32);
}

/* fs[k] = d * sc[k] for 16 signed byte scales */
INLINE void
scales16(const int8_t *sc, float d, float *fs)
{
	__m128i v = _mm_loadu_si128((const __m128i *)sc);
	__m256 dd = _mm256_set1_ps(d);

	_mm256_storeu_ps(fs, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
	_mm256_storeu_ps(fs + 8, _mm256_mul_ps(dd,
	    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))));
}

/* The scales of a block (per-block work, shared by its groups and tokens). */
INLINE void
blk_prep(enum gguf_dtype t, const uint8_t *p, struct blk *b)
{
	b->p = p;
	switch (t) {
	case GGML_TYPE_Q3_K: {
		int8_t sc[16];
		q3_scales(p + 96, sc);
		scales16(sc, h2f(p + 108), b->fs);
		break;
	}
	case GGML_TYPE_Q6_K:
		scales16((const int8_t *)(p + 192), h2f(p + 208), b->fs);
		break;
	case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: {
		uint8_t sc[8], mn[8];
		q_k_scales8_le(p + 4, sc, mn);
		/* fs[j] = d * scale_j: one scale per group of 32 */
		__m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc)));
		_mm256_storeu_ps(b->fs, _mm256_mul_ps(_mm256_set1_ps(h2f(p)), s));
		__m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn)));
		b->off = _mm256_mul_ps(_mm256_set1_ps(-h2f(p + 2)), m);
		break;
	}
	case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: {
		uint16_t m;
		memcpy(&m, p + 2, 2);
		/* the half in lane 0, zeros above it, widened: (m, 0, 0, 0) */
		b->off = _mm256_set_m128(_mm_setzero_ps(), _mm_cvtph_ps(_mm_cvtsi32_si128(m)));
		break;
	}
	default:	/* the 32-value types: blk_scale reads d itself */
		break;
	}
}

/* Whether a type has the offset term (added once per block, after its groups). */
INLINE bool
t_has_off(enum gguf_dtype t)
{
	return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K;
}

/*
 * The offset's input for a token and block: its sum of x as (s, s, ...) for
 * Q4_1/Q5_1 (only lane 0 meets a nonzero m), the 8 sums of its 32-value
 * sub-blocks for Q4_K/Q5_K.
 */
INLINE __m256
blk_xoff(enum gguf_dtype t, const float *xs, int64_t b)
{
	if (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1)
		return _mm256_broadcast_ss(xs + b);
	return _mm256_loadu_ps(xs + 8 * b);
}

/* Lane scales of group g: lanes 0-3 hold values 0-15 of it, lanes 4-7 values 16-31. */
INLINE __m256
blk_scale(enum gguf_dtype t, const struct blk *b, int g)
{
	if (t_group_count(t) == 1)	/* d, straight to a register (no store and reload) */
		return _mm256_set1_ps(h2f(b->p));
	if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K)
		return _mm256_broadcast_ss(b->fs + g);
	return _mm256_set_m128(_mm_broadcast_ss(b->fs + 2 * g + 1), _mm_broadcast_ss(b->fs + 2 * g));
}

/* The 32 levels of group g (values 32g .. 32g + 31 of the block). */
INLINE __m256i
blk_group(enum gguf_dtype t, const struct blk *b, int g)
{
	const __m256i lo4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1),
	    three = _mm256_set1_epi8(3);
	const uint8_t *p = b->p;

	switch (t) {
	case GGML_TYPE_Q8_0:
		return ld256(p + 2);
	case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: {
		/* Q4_0 d qs, Q4_1 d m qs, Q5_0 d qh qs, Q5_1 d m qh qs */
		bool has_m = t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
		bool q5 = t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1;
		const uint8_t *qh = p + (has_m ? 4 : 2), *qs = qh + (q5 ? 4 : 0);
		__m128i v = _mm_loadu_si128((const __m128i *)qs);
		__m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), lo4);
		if (t == GGML_TYPE_Q4_0)
			return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
		if (t == GGML_TYPE_Q5_0)	/* nibble - 16 where the 5th bit is clear */
			return _mm256_or_si256(u, _mm256_andnot_si256(bits_mask(qh),
			    _mm256_set1_epi8((char)0xF0)));
		if (t == GGML_TYPE_Q5_1)
			return _mm256_or_si256(u, _mm256_and_si256(bits_mask(qh), _mm256_set1_epi8(0x10)));
		return u;
	}
	case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: {
		bool q5 = t == GGML_TYPE_Q5_K;
		__m256i v = ld256(p + 16 + (q5 ? 32 : 0) + 32 * (g / 2));
		__m256i u = _mm256_and_si256(g & 1 ? _mm256_srli_epi16(v, 4) : v, lo4);
		if (q5) {
			__m256i hb = _mm256_srl_epi16(ld256(p + 16), _mm_cvtsi32_si128(g));
			u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
		}
		return u;
	}
	case GGML_TYPE_Q3_K: {
		/* group 4h + k: low 2 bits at shift 2k of qs[32h ..], 3rd bit h-mask bit 4h + k */
		int h = g / 4, k = g % 4;
		__m256i lo = _mm256_and_si256(_mm256_srl_epi16(ld256(p + 32 + 32 * h),
		    _mm_cvtsi32_si128(2 * k)), three);
		__m256i hb = _mm256_and_si256(_mm256_srl_epi16(ld256(p), _mm_cvtsi32_si128(g)), one);
		return _mm256_sub_epi8(lo, _mm256_slli_epi16(_mm256_xor_si256(hb, one), 2));
	}
	default: {	/* Q6_K: group 4h + k, ql[64h ..], qh[32h ..] */
		int h = g / 4, k = g % 4;
		__m256i l = ld256(p + 64 * h + 32 * (k & 1));
		__m256i hh = _mm256_srl_epi16(ld256(p + 128 + 32 * h), _mm_cvtsi32_si128(2 * k));
		l = _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(l, 4) : l, lo4);
		l = _mm256_or_si256(l, _mm256_slli_epi16(_mm256_and_si256(hh, three), 4));
		return _mm256_sub_epi8(l, _mm256_set1_epi8(32));
	}
	}
}

/*
 * The cache lines of [p, p + n), n <= 256, into L1 ahead of their use:
 * decode reads each weight once, and the hardware prefetcher alone leaves
 * the kernels waiting on memory (docs/BENCHMARKS.md).
 */
INLINE void
prefetch_span(const uint8_t *p, size_t n)
{
	for (size_t o = 0; o < n; o += 64)
		_mm_prefetch((const char *)p + o, _MM_HINT_T0);
	_mm_prefetch((const char *)p + n - 1, _MM_HINT_T0);
}

/* ---- software prefetch of the float tiles --------------------------------- */


/*
 * Software prefetch for the small-batch (memory-bound) tiles. The hardware
 * prefetchers alone left a thread at ~75 % of the read bandwidth bench/membw
 * measures: a model file is mapped in 4 KiB pages, the L2 streamer stops at
 * each page's end, and a tile reads its rows (1.8-9.7 KB each here) side by
 * side. So each row's stream is requested PF_AHEAD bytes ahead of its loads
 * (one prefetch per 16 values: for 2-byte types every line twice), and once
 * that point passes the row's end it goes on in the same row of the next
 * tile, so the first lines of every next row are on their way when the tile
 * starts on them. Prefetches change no arithmetic.
 */
#define PF_AHEAD 1024

struct pf_rows {
	const char *p[8];	/* each row's next line to request */
	const char *nx[8];	/* the same row of the next tile (or the row itself past the range) */
	int64_t i_sw;		/* the value index at which the cursors move to nx ... */
	int64_t off;		/* ... and the offset in nx they move to */
	int64_t step;		/* bytes per 16 values */
};

INLINE void
pf_init(struct pf_rows *f, int R, const uint8_t *const *w, const uint8_t *const *nx, int64_t es,
    int64_t n)
{
	int64_t len = es * n, ahead = PF_AHEAD < len ? PF_AHEAD : len;

	for (int r = 0; r < R; r++) {
		f->p[r] = (const char *)w[r] + ahead;
		f->nx[r] = (const char *)nx[r];
	}
	/* the first multiple of 16 values whose point is at or past the row's end */
	f->step = 16 * es;
	f->i_sw = (len - ahead + f->step - 1) / f->step * 16;
	f->off = es * f->i_sw + ahead - len;
}

/*
 * pf_init for cursors that move per values (a multiple of 16) at each
 * pf_step, the caller stepping once per per values: with 2-byte values and
 * per 32, one request per 64-byte line, where pf_init's 16 request each
 * line twice.
 */
INLINE void
pf_init_per(struct pf_rows *f, int R, const uint8_t *const *w, const uint8_t *const *nx, int64_t es,
    int64_t n, int64_t per)
{
	int64_t len = es * n, ahead = PF_AHEAD < len ? PF_AHEAD : len;

	for (int r = 0; r < R; r++) {
		f->p[r] = (const char *)w[r] + ahead;
		f->nx[r] = (const char *)nx[r];
	}
	/* the first multiple of per values whose point is at or past the row's end */
	f->step = per * es;
	f->i_sw = (len - ahead + f->step - 1) / f->step * per;
	f->off = es * f->i_sw + ahead - len;
}

INLINE void
pf_step(struct pf_rows *f, int R, int64_t i)
{
	if (i == f->i_sw)
		UNROLL
		for (int r = 0; r < R; r++)
			f->p[r] = f->nx[r] + f->off;
	UNROLL
	for (int r = 0; r < R; r++) {
		_mm_prefetch(f->p[r], _MM_HINT_T0);
		f->p[r] += f->step;
	}
}

/* ---- the float tiles' driver ------------------------------------------------ */

/*
 * A float tile (kern_avx2.c's, kern_avx512.c's): R rows w[] (nx[]: the same
 * rows of the next tile, for the prefetches) times NT tokens of x (n values
 * each, n apart); out[r * (its tile's tokens) + k].
 */
typedef void tile_f_fn(enum gguf_dtype t, int R, int NT, const uint8_t *const *w,
    const uint8_t *const *nx, const float *x, int64_t n, float *out);

/*
 * Rows [r0, r1) in tiles of r_one rows for one token, else of r_many (the
 * last rows repeated to fill a tile, their copies dropped), tokens in tiles
 * of tt: the one driver of both tables' float tiles (r_one <= 8, tt <= 4).
 */
INLINE void
rows_f_tiled(tile_f_fn *tile, int r_one, int r_many, int tt, enum gguf_dtype t, const uint8_t *W,
    size_t rb, const float *x, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0,
    int64_t r1)
{
	int R = n_tok == 1 ? r_one : r_many;

	for (int64_t r = r0; r < r1; r += R) {
		const uint8_t *w[8], *nx[8];
		int nr = r1 - r < R ? (int)(r1 - r) : R;
		for (int i = 0; i < R; i++) {
			w[i] = W + (size_t)(r + (i < nr ? i : nr - 1)) * rb;
			nx[i] = r + R + i < r1 ? W + (size_t)(r + R + i) * rb : w[i];
		}
		for (int tok = 0; tok < n_tok; tok += tt) {
			float out[32];
			int nt = n_tok - tok < tt ? n_tok - tok : tt;
			tile(t, R, nt, w, nx, x + (size_t)tok * (size_t)n_in, n_in, out);
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * tt + k];
		}
	}
}

#endif
