/*
 * quant_tile.c: tiled matrix kernels. A tile is two weight rows times up to
 * four tokens (int8 activations) or three tokens (float activations; one
 * token: 4 rows, or 8 with AVX-512, whose tiles are below): each weight
 * block is decoded once per tile and multiplied into every token of it,
 * instead of once per (row, token) as a one-row dot product does.
 *
 * Batch independence: every (row, token) pair has its own accumulator(s),
 * which see the same instructions, on the same values, in the same order,
 * whatever the tile's shape; the one-token path (decode, q_dot, q_dot_act)
 * runs these same kernels with a tile of one token (on AVX-512, a decode
 * kernel of its own that keeps the tile's float operations, see
 * quant_tile_i8_512.h's dec32). So a position's logits
 * are bitwise the same computed alone, in a tile or in a long prefill
 * (tests/unit/test_forward.c checks it). On AVX512-VNNI CPUs (chosen at
 * run time) the int8 tiles are quant_tile_i8_512.h's 4 rows x 4 tokens,
 * 64 values per step; the description below is the AVX2 kernels'.
 *
 * The float work per (row, token, 32 values) is fixed as: lane scales
 * (weight scale of each 4-value lane) times the token's block scale, times
 * the 8 int32 lane sums converted to float, added with one FMA into the
 * pair's accumulator; after a block's groups, the Q4_1/Q5_1 offset
 * (m times the float sum of x) or the Q4_K/Q5_K sub-block mins (times the
 * 8 sums of x) enter the same accumulator with one more FMA.
 */
#include "quant_impl.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define AVX512 VNNI
#define INLINE __attribute__((always_inline)) static inline
/* the tile loops, fully unrolled so the accumulators stay in registers */
#define UNROLL _Pragma("GCC unroll 8")

/*
 * 1: AVX-512 (F, VL, BW, VNNI), so the int8 kernels use VNNI's dpbusd and
 * the float kernels 512-bit vectors; 0: AVX2 only. Probed once (the answer
 * cannot change while we run).
 */
static int
have_vnni(void)
{
	static int known = -1;
	int v = __atomic_load_n(&known, __ATOMIC_RELAXED);

	if (v < 0) {
		__builtin_cpu_init();
		v = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
		    __builtin_cpu_supports("avx512bw");
		__atomic_store_n(&known, v, __ATOMIC_RELAXED);
	}
	return v;
}

bool
q_tile_avx512_cpu(void)
{
	return q_avx2_cpu() && have_vnni();
}

AVX2 INLINE float
h2f(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return _cvtsh_ss(v);
}

AVX2 INLINE __m256i
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
AVX2 INLINE __m256i
mad_avx2(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

VNNI INLINE __m256i
mad_vnni(__m256i u, __m256i s)
{
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

/* Byte i is 0xFF where bit i of the little-endian 32-bit word at p is set. */
AVX2 INLINE __m256i
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
AVX2 INLINE void
scales16(const int8_t *sc, float d, float *fs)
{
	__m128i v = _mm_loadu_si128((const __m128i *)sc);
	__m256 dd = _mm256_set1_ps(d);

	_mm256_storeu_ps(fs, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
	_mm256_storeu_ps(fs + 8, _mm256_mul_ps(dd,
	    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))));
}

/* The scales of a block (per-block work, shared by its groups and tokens). */
AVX2 INLINE void
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
AVX2 INLINE __m256
blk_xoff(enum gguf_dtype t, const float *xs, int64_t b)
{
	if (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1)
		return _mm256_broadcast_ss(xs + b);
	return _mm256_loadu_ps(xs + 8 * b);
}

/* Lane scales of group g: lanes 0-3 hold values 0-15 of it, lanes 4-7 values 16-31. */
AVX2 INLINE __m256
blk_scale(enum gguf_dtype t, const struct blk *b, int g)
{
	if (t_group_count(t) == 1)	/* d, straight to a register (no store and reload) */
		return _mm256_set1_ps(h2f(b->p));
	if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K)
		return _mm256_broadcast_ss(b->fs + g);
	return _mm256_set_m128(_mm_broadcast_ss(b->fs + 2 * g + 1), _mm_broadcast_ss(b->fs + 2 * g));
}

/* The 32 levels of group g (values 32g .. 32g + 31 of the block). */
AVX2 INLINE __m256i
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

#define TILE_TGT AVX2
#define TILE_MAD mad_avx2
#define TILE_NAME(f) f##_avx2
#include "quant_tile_i8.h"
#undef TILE_TGT
#undef TILE_MAD
#undef TILE_NAME
#include "quant_tile_i8_512.h"

bool
q_tile_rows_act(bool avx512, enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % 32 != 0 || n_in % (32 * t_group_count(t)) != 0)
		return false;
	if (avx512 && have_vnni())
		return rows_act_512(t, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
	return rows_act_avx2(t, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
}

/* ---- float activations: F32, F16, BF16 ---------------------------------- */

AVX2 INLINE __m256
ldw(enum gguf_dtype t, const uint8_t *row, int64_t i)
{
	if (t == GGML_TYPE_F32)
		return _mm256_loadu_ps((const float *)(row + 4 * i));
	__m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * i));
	if (t == GGML_TYPE_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

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

AVX2 INLINE void
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

AVX2 INLINE void
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

/*
 * R rows (2, or 4 for one token) times NT tokens; each (row, token) keeps
 * two accumulators, the 8-value chunks alternating between them, added at
 * the end, whatever R and NT are. Prefetched as the 512-bit tiles below.
 */
AVX2 INLINE void
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

/* Rows in fours for one token, else in twos (the last repeated), tokens in threes. */
AVX2 INLINE void
rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	int R = n_tok == 1 ? 4 : 2;

	for (int64_t r = r0; r < r1; r += R) {
		const uint8_t *w[4], *nx[4];
		int nr = r1 - r < R ? (int)(r1 - r) : R;
		for (int i = 0; i < R; i++) {
			w[i] = W + (size_t)(r + (i < nr ? i : nr - 1)) * rb;
			nx[i] = r + R + i < r1 ? W + (size_t)(r + R + i) * rb : w[i];
		}
		for (int tok = 0; tok < n_tok; tok += 3) {
			const float *xt = x + (size_t)tok * (size_t)n_in;
			float out[12];
			int nt = n_tok - tok < 3 ? n_tok - tok : 3;
			switch (nt) {
			case 3: tile_f(t, 2, 3, w, nx, xt, n_in, out); break;
			case 2: tile_f(t, 2, 2, w, nx, xt, n_in, out); break;
			default:
				if (R == 4)
					tile_f(t, 4, 1, w, nx, xt, n_in, out);
				else
					tile_f(t, 2, 1, w, nx, xt, n_in, out);
				break;
			}
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * 3 + k];
		}
	}
}

/* ---- the same with 512-bit vectors, one accumulator per (row, token) ---- */

AVX512 INLINE __m512
ldw16(enum gguf_dtype t, const uint8_t *row, int64_t i)
{
	if (t == GGML_TYPE_F32)
		return _mm512_loadu_ps(row + 4 * i);
	__m256i h = _mm256_loadu_si256((const __m256i *)(row + 2 * i));
	if (t == GGML_TYPE_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/*
 * R rows (4, or 8 for one token) times NT tokens, one 16-lane accumulator
 * per (row, token): one FMA per 16 values in order from 0, then the
 * 512 -> 256 add and q_hsum8, whatever R and NT are (so the same as
 * rows_f16p's prefill tiles). 8 rows at one token: more independent
 * streams in flight (bench/qmm bf16 1 896 4864, weights from memory:
 * 4 rows 9.8 GB/s, 4 rows + prefetch 11.0, 8 rows + prefetch 12.1).
 */
AVX512 INLINE void
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
 * Rows in eights for one token, else in fours (the last ones repeated to
 * fill a tile, their copies dropped), tokens in fours.
 */
AVX512 INLINE void
rows_f16w(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	int R = n_tok == 1 ? 8 : 4;

	for (int64_t r = r0; r < r1; r += R) {
		const uint8_t *w[8], *nx[8];
		int nr = r1 - r < R ? (int)(r1 - r) : R;
		for (int i = 0; i < R; i++) {
			w[i] = W + (size_t)(r + (i < nr ? i : nr - 1)) * rb;
			nx[i] = r + R + i < r1 ? W + (size_t)(r + R + i) * rb : w[i];
		}
		for (int tok = 0; tok < n_tok; tok += 4) {
			const float *xt = x + (size_t)tok * (size_t)n_in;
			float out[32];
			int nt = n_tok - tok < 4 ? n_tok - tok : 4;
			switch (nt) {
			case 4: tile_f16w(t, 4, 4, w, nx, xt, n_in, out); break;
			case 3: tile_f16w(t, 4, 3, w, nx, xt, n_in, out); break;
			case 2: tile_f16w(t, 4, 2, w, nx, xt, n_in, out); break;
			default:
				if (R == 8)
					tile_f16w(t, 8, 1, w, nx, xt, n_in, out);
				else
					tile_f16w(t, 4, 1, w, nx, xt, n_in, out);
				break;
			}
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * 4 + k];
		}
	}
}

/*
 * Prefill (8 tokens or more): tiles of 4 rows x 6 tokens (24 accumulators,
 * the 4 rows' vectors and one token's), blocked twice: a band of F_RB rows
 * is converted to float once per chunk of F_KC values for a block of F_TB
 * tokens (instead of once per 4 tokens), and each 6-token slice of the
 * chunk's activations is used by the band's 4 row tiles while it is in L1
 * (rows_f16w reads every token's activations from L2 once per 4 rows:
 * qdot at n_in 4864, 64-128 tokens, gave 70 GFLOP/s that way and 100-110
 * this way). The accumulators go to memory between chunks and come back
 * unchanged, so each (row, token) still sees one FMA per 16 values in order
 * from 0, then the same horizontal sum: bitwise what tile_f16w gives (the
 * path of decode and of small batches).
 */
#define F_KC 256
#define F_TB 48
#define F_RB 16

AVX512 INLINE void
tile_f16p(int NT, const float *wf, int kc, const float *x, int64_t n, __m512 *am)
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
			wv[r] = _mm512_load_ps(wf + r * F_KC + i);
		UNROLL
		for (int k = 0; k < NT; k++) {
			__m512 xv = _mm512_loadu_ps(x + (size_t)k * (size_t)n + i);
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

AVX512 INLINE void
rows_f16p(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	float wf[F_RB * F_KC] __attribute__((aligned(64)));
	__m512 am[F_RB / 4][F_TB / 6][24];

	for (int64_t rband = r0; rband < r1; rband += F_RB) {
		int nrb = r1 - rband < F_RB ? (int)(r1 - rband) : F_RB, ng = (nrb + 3) / 4;
		for (int tb = 0; tb < n_tok; tb += F_TB) {
			int nb = n_tok - tb < F_TB ? n_tok - tb : F_TB;
			for (int q = 0; q < ng; q++)
				for (int g = 0; g * 6 < nb; g++)
					for (int a = 0; a < 24; a++)
						am[q][g][a] = _mm512_setzero_ps();
			for (int64_t c = 0; c < n_in; c += F_KC) {
				int kc = n_in - c < F_KC ? (int)(n_in - c) : F_KC;
				/* rows past the band's end repeat its last row; their sums are dropped */
				for (int i = 0; i < 4 * ng; i++) {
					const uint8_t *w = W + (size_t)(rband + (i < nrb ? i : nrb - 1)) * rb;
					for (int e = 0; e < kc; e += 16)
						_mm512_store_ps(wf + i * F_KC + e, ldw16(t, w, c + e));
				}
				for (int g = 0; g * 6 < nb; g++) {
					const float *xt = x + (size_t)(tb + 6 * g) * (size_t)n_in + c;
					int nt = nb - 6 * g < 6 ? nb - 6 * g : 6;
					for (int q = 0; q < ng; q++) {
						const float *wq = wf + 4 * q * F_KC;
						switch (nt) {
						case 6: tile_f16p(6, wq, kc, xt, n_in, am[q][g]); break;
						case 5: tile_f16p(5, wq, kc, xt, n_in, am[q][g]); break;
						case 4: tile_f16p(4, wq, kc, xt, n_in, am[q][g]); break;
						case 3: tile_f16p(3, wq, kc, xt, n_in, am[q][g]); break;
						case 2: tile_f16p(2, wq, kc, xt, n_in, am[q][g]); break;
						default: tile_f16p(1, wq, kc, xt, n_in, am[q][g]); break;
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

AVX512 static bool
rows_f_avx512(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_tok >= 8)
		switch (t) {
		case GGML_TYPE_F32: rows_f16p(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
		case GGML_TYPE_F16: rows_f16p(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
		case GGML_TYPE_BF16: rows_f16p(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
		default: return false;
		}
	switch (t) {
	case GGML_TYPE_F32: rows_f16w(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_F16: rows_f16w(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_BF16: rows_f16w(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
	default: return false;
	}
}

AVX2 bool
q_tile_rows_f(bool avx512, enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % 16 != 0)
		return false;
	if (avx512 && have_vnni())
		return rows_f_avx512(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
	switch (t) {
	case GGML_TYPE_F32: rows_f(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_F16: rows_f(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
	case GGML_TYPE_BF16: rows_f(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); return true;
	default: return false;
	}
}

#else	/* not x86: the portable kernels only */

bool
q_tile_avx512_cpu(void)
{
	return false;
}

bool
q_tile_rows_act(bool avx512, enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	return false;
}

bool
q_tile_rows_f(bool avx512, enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	return false;
}

#endif
