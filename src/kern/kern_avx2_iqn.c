/*
 * kern_avx2_iqn.c: the avx2 table's int8-activation kernels of MXFP4,
 * IQ4_NL, IQ4_XS and Q2_K (quant_iq.h's layouts), compiled with AVX2, FMA
 * and F16C only (kern.am; the avx2vnni table runs them too). As the avx512
 * table's (kern_avx512_iqn.c), each block is decoded straight into vector
 * registers, one 32-value block per ymm.
 *
 * The nibble types (MXFP4, IQ4_NL, IQ4_XS) by groups of eight blocks (an
 * IQ4_XS super-block; 8 consecutive IQ4_NL/MXFP4 blocks, fewer at a row's
 * end). Per group, once for every token: the 8 weight scales as one vector
 * (IQ4_XS's 6-bit scales by lane shifts; MXFP4's exponent e as the float
 * 2^(e - 128) built from its bits, exact, subnormal for e < 2), and per
 * block the 16 nibble bytes broadcast to both halves, the high half
 * shifted by 4, masked, and looked up twice with vpshufb: the signed
 * levels and their magnitudes. Per token and block: x takes the level's
 * sign (vpsignb), vpmaddubsw with the magnitudes and vpmaddwd with ones
 * give 8 exact sums of 4 products (|level| <= 127, |x| <= 127: a pair is
 * at most 32258, no int16 saturation), and one FMA adds them times the
 * block's s * d_x into the token's 8 lanes.
 *
 * Q2_K per super-block: the 2-bit levels are unsigned, so the 4-bit scale
 * goes into them (vpshufb through [0, sc, 2 sc, 3 sc], one table per 128-bit
 * half: one half is one group of 16): sc * q <= 45, x <= 127, no
 * saturation. Per token and block: vpmaddubsw of that with x, widened by
 * vpmaddwd, one FMA by d * d_x. The offsets: each token's sums of x per 16
 * times d_x are formed once per call (x_sums16), so a super-block's 16
 * mins (times dmin) take two FMAs per token.
 *
 * Batch independence: each (row, token) runs this same sequence of float
 * operations whatever n_tok is and whichever rows share the call (groups
 * and tail set by n_in alone), reduced by q_hsum8, so its result is
 * bitwise the same in any batch; the integer sums are the portable
 * kernel's (q_iq_dot_act), only their scaled sum's rounding differs.
 */
#include "kern_int.h"
#include "kern_x86.h"
#include "quant/quant_iq.h"

/*
 * Accumulators per token: block b of a group adds into b % NACC, so that
 * no chain of dependent FMAs runs through a group (two FMAs' latency per
 * group and accumulator, not eight); summed in one order at the row's end.
 */
#define NACC 4

/*
 * One token is bound by memory: the hardware prefetchers stop at each 4 KiB
 * page of the mapped file, so each group of a row asks for the same group
 * PF_ROWS rows on, as the K-quants' one-token kernels do (docs/BENCHMARKS.md).
 */
#define PF_ROWS 2

INLINE float
acc_sum(const __m256 *a)
{
	return q_hsum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* all 8 lanes element b of v */
INLINE __m256
lane(__m256 v, int b)
{
	return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(b));
}

/* ---- MXFP4, IQ4_NL, IQ4_XS ------------------------------------------------ */

struct nib {
	__m256i wa[8];		/* block b: |level| */
	__m256i ws[8];		/* block b: the level (its sign for vpsignb) */
	__m256 sw;		/* per block: its scale (0 past the group's blocks) */
};

INLINE const uint8_t *
nib_qs(enum gguf_dtype t, const uint8_t *p, int b)
{
	switch (t) {
	case GGML_TYPE_IQ4_NL: return p + 18 * b + 2;
	case GGML_TYPE_MXFP4: return p + 17 * b + 1;
	default: return p + 8 + 16 * b;	/* IQ4_XS */
	}
}

INLINE __m256
nib_scales(enum gguf_dtype t, const uint8_t *p, int nb)
{
	if (t == GGML_TYPE_IQ4_XS) {
		/* 6-bit ls: nibble b of the u32 at p + 4, two bits at 2b of the u16 at p + 2; d * (ls - 32) */
		uint32_t lo;
		uint16_t hi;
		memcpy(&lo, p + 4, 4);
		memcpy(&hi, p + 2, 2);
		__m256i l = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)lo),
		    _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)), _mm256_set1_epi32(0xF));
		__m256i h = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(hi),
		    _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
		__m256i ls = _mm256_or_si256(l, _mm256_slli_epi32(h, 4));
		return _mm256_mul_ps(_mm256_set1_ps(h2f(p)),
		    _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
	}
	/*
	 * The d's or exponents gathered in general registers, not through a
	 * small array: a vector load of what scalar stores just wrote stalls
	 * (no store forwarding), and perf put a third of the time there.
	 */
	uint64_t w0 = 0, w1 = 0;
	if (t == GGML_TYPE_IQ4_NL) {
		UNROLL
		for (int b = 0; b < nb; b++) {
			uint16_t h;
			memcpy(&h, p + 18 * b, 2);
			if (b < 4)
				w0 |= (uint64_t)h << (16 * b);
			else
				w1 |= (uint64_t)h << (16 * (b - 4));
		}
		return _mm256_cvtph_ps(_mm_set_epi64x((long long)w1, (long long)w0));
	}
	/* MXFP4: 2^(e - 128) is the float (e - 1) << 23 for e >= 2, the subnormal 2^21 << e below */
	UNROLL
	for (int b = 0; b < nb; b++)
		w0 |= (uint64_t)p[17 * b] << (8 * b);
	__m256i ev = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)w0));
	__m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(ev, _mm256_set1_epi32(1)), 23);
	__m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(1 << 21), ev);
	return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, nrm, _mm256_cmpgt_epi32(ev, _mm256_set1_epi32(1))));
}

INLINE void
nib_decode(enum gguf_dtype t, const uint8_t *p, int nb, __m256i tab, __m256i tabs, struct nib *g)
{
	const __m256i sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), lo4 = _mm256_set1_epi8(0x0F);

	g->sw = nib_scales(t, p, nb);
	UNROLL
	for (int b = 0; b < 8; b++) {
		if (b >= nb) {	/* a row's last group: never read, set for the compiler */
			g->ws[b] = g->wa[b] = _mm256_setzero_si256();
			continue;
		}
		__m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nib_qs(t, p, b)));
		/* bytes 0-15 values 0-15 (low nibbles), 16-31 values 16-31 (high nibbles) */
		__m256i n = _mm256_and_si256(_mm256_srlv_epi32(v, sh), lo4);
		g->ws[b] = _mm256_shuffle_epi8(tab, n);
		g->wa[b] = _mm256_shuffle_epi8(tabs, n);
	}
}

INLINE void
nib_token(const struct nib *g, int nb, const float *d, const int8_t *q, __m256 *acc)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	__m256 s = _mm256_mul_ps(g->sw, _mm256_maskload_ps(d, m));

	UNROLL
	for (int b = 0; b < nb; b++) {
		__m256i x = ld256(q + 32 * b);
		__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(g->wa[b], _mm256_sign_epi8(x, g->ws[b])), ones);
		acc[b % NACC] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), lane(s, b), acc[b % NACC]);
	}
}

/* Blocks [b0, b0 + nb) of a row against every token. */
INLINE void
nib_group(enum gguf_dtype t, const uint8_t *row, int64_t b0, int nb, __m256i tab, __m256i tabs,
    const uint8_t *act, size_t ab, int n_tok, int64_t nb32, size_t pf, __m256 *acc)
{
	/* IQ4_XS: super-block b0 / 8 (b0 a multiple of 8); the others: block b0 */
	size_t off = t == GGML_TYPE_IQ4_XS ? (size_t)(b0 / 8) * sizeof(block_iq4_xs) :
	    (size_t)b0 * (t == GGML_TYPE_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_iq4_nl));
	size_t gb = t == GGML_TYPE_IQ4_XS ? sizeof(block_iq4_xs) :
	    (size_t)nb * (t == GGML_TYPE_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_iq4_nl));
	struct nib g;

	if (pf)	/* decode: the same group of a row further on (addresses only: prefetches never fault) */
		prefetch_span(row + off + pf, gb);
	nib_decode(t, row + off, nb, tab, tabs, &g);
	for (int tok = 0; tok < n_tok; tok++) {
		const float *d = (const float *)(act + (size_t)tok * ab);
		nib_token(&g, nb, d + b0, (const int8_t *)(d + 2 * nb32) + 32 * b0, acc + NACC * tok);
	}
}

INLINE void
nib_row(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n,
    size_t pf, float *out, size_t os)
{
	const int8_t *tv = t == GGML_TYPE_MXFP4 ? q_mxfp4_values : q_iq4nl_values;
	__m128i t16 = _mm_loadu_si128((const __m128i *)tv);
	__m256i tab = _mm256_broadcastsi128_si256(t16), tabs = _mm256_broadcastsi128_si256(_mm_abs_epi8(t16));
	int64_t nb32 = n / 32, b0;
	__m256 acc[NACC * Q_IQ_TOKENS];

	for (int i = 0; i < NACC * n_tok; i++)
		acc[i] = _mm256_setzero_ps();
	for (b0 = 0; b0 + 8 <= nb32; b0 += 8)
		nib_group(t, row, b0, 8, tab, tabs, act, ab, n_tok, nb32, pf, acc);
	if (b0 < nb32)
		nib_group(t, row, b0, (int)(nb32 - b0), tab, tabs, act, ab, n_tok, nb32, pf, acc);
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = acc_sum(acc + NACC * tok);
}

/* ---- Q2_K ------------------------------------------------------------------ */

/*
 * The offsets' side, per token once per call: xm[k] = d_x of block k / 2
 * times the sum of the rounded x of values 16k .. 16k + 15 (exact in any
 * order, so the same floats however they are formed). A super-block's 16
 * mins then take two FMAs per token. XM_FLOATS bounds the floats of the
 * tokens of one pass (on the stack).
 */
#define XM_FLOATS 8192

static void
x_sums16(const uint8_t *a, int64_t n, float *xm)
{
	const float *d = (const float *)a;
	const int8_t *q = (const int8_t *)(d + 2 * (n / 32));
	const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
	/* h below holds groups 0, 2, 4, 6 | 1, 3, 5, 7: back to group order */
	const __m256i back = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	const __m256i half = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);

	for (int64_t e = 0; e < n; e += 128) {
		__m256i s[4];
		for (int b = 0; b < 4; b++)	/* dwords 0-3 quarters of group 2b, 4-7 of group 2b + 1 */
			s[b] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, ld256(q + e + 32 * b)), ones16);
		__m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
		__m256 dx = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(d + e / 32)), half);
		_mm256_storeu_ps(xm + e / 16, _mm256_mul_ps(dx,
		    _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(h, back))));
	}
}

struct q2k {
	__m256i u[8];		/* block b (values 32b ..): sc * q per byte */
	__m256 mn[2];		/* dmin * min of groups 0-7, 8-15 */
	float d;
};

INLINE void
q2k_decode(const uint8_t *p, struct q2k *g)
{
	__m128i s16 = _mm_loadu_si128((const __m128i *)p);
	__m256i s[2] = { _mm256_cvtepu8_epi32(s16), _mm256_cvtepu8_epi32(_mm_srli_si128(s16, 8)) };
	__m256i tab[2];
	__m256 dmin = _mm256_set1_ps(h2f(p + 82));

	for (int h = 0; h < 2; h++) {
		/* per group k: the bytes 0, sc, 2 sc, 3 sc (sc <= 15) as one dword */
		tab[h] = _mm256_mullo_epi32(_mm256_and_si256(s[h], _mm256_set1_epi32(0xF)),
		    _mm256_set1_epi32(0x03020100));
		g->mn[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(s[h], 4)), dmin);
	}
	g->d = h2f(p + 80);
	UNROLL
	for (int b = 0; b < 8; b++) {
		/* values 128h + 32i + l: bits 2i of byte 32h + l (block b = 4h + i) */
		__m256i q = _mm256_and_si256(_mm256_srli_epi16(ld256(p + 16 + 32 * (b / 4)), 2 * (b % 4)),
		    _mm256_set1_epi8(3));
		/* groups 2b, 2b + 1: dwords (2b) % 8 and (2b + 1) % 8 of half b / 4, one per 128-bit half */
		__m256i idx = _mm256_setr_epi32(2 * b % 8, 2 * b % 8, 2 * b % 8, 2 * b % 8,
		    (2 * b + 1) % 8, (2 * b + 1) % 8, (2 * b + 1) % 8, (2 * b + 1) % 8);
		g->u[b] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(tab[b / 4], idx), q);
	}
}

/* One token: d its super-block's 8 d_x, q its levels, xm its 16 offset sums. */
INLINE void
q2k_token(const struct q2k *g, const float *d, const int8_t *q, const float *xm, __m256 *acc)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 sd = _mm256_mul_ps(_mm256_loadu_ps(d), _mm256_set1_ps(g->d));

	UNROLL
	for (int b = 0; b < 8; b++) {
		__m256i pu = _mm256_madd_epi16(_mm256_maddubs_epi16(g->u[b], ld256(q + 32 * b)), ones);
		acc[b % NACC] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pu), lane(sd, b), acc[b % NACC]);
	}
	acc[0] = _mm256_fnmadd_ps(g->mn[0], _mm256_loadu_ps(xm), acc[0]);
	acc[1] = _mm256_fnmadd_ps(g->mn[1], _mm256_loadu_ps(xm + 8), acc[1]);
}

/* One row against n_tok tokens, xm their offset sums (nb16 floats apart). */
INLINE void
q2k_row(const uint8_t *row, const uint8_t *act, size_t ab, int n_tok, int64_t n, const float *xm,
    int64_t nb16, size_t pf, float *out, size_t os)
{
	int64_t nb32 = n / 32;
	__m256 acc[NACC * Q_IQ_TOKENS];
	struct q2k g;

	for (int i = 0; i < NACC * n_tok; i++)
		acc[i] = _mm256_setzero_ps();
	for (int64_t b0 = 0; b0 < nb32; b0 += 8) {
		const uint8_t *p = row + (size_t)(b0 / 8) * sizeof(block_q2_K);
		if (pf)	/* decode: the same super-block of a row further on */
			prefetch_span(p + pf, sizeof(block_q2_K));
		q2k_decode(p, &g);
		for (int tok = 0; tok < n_tok; tok++) {
			const float *d = (const float *)(act + (size_t)tok * ab);
			q2k_token(&g, d + b0, (const int8_t *)(d + 2 * nb32) + 32 * b0, xm + tok * nb16 + 2 * b0,
			    acc + NACC * tok);
		}
	}
	for (int tok = 0; tok < n_tok; tok++)
		out[(size_t)tok * os] = acc_sum(acc + NACC * tok);
}

/* The rows of a Q2_K matrix: tokens in passes whose offset sums fit XM_FLOATS. */
INLINE bool
q2k_rows(const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, int64_t n_in, float *y,
    int64_t n_out, int64_t r0, int64_t r1)
{
	float xm[XM_FLOATS];
	int64_t nb16 = n_in / 16;

	if (nb16 == 0 || nb16 > XM_FLOATS)
		return false;
	int tp = XM_FLOATS / nb16 < Q_IQ_TOKENS ? (int)(XM_FLOATS / nb16) : Q_IQ_TOKENS;
	if (n_tok == 1) {
		x_sums16(act, n_in, xm);
		for (int64_t r = r0; r < r1; r++)
			q2k_row(W + (size_t)r * rb, act, ab, 1, n_in, xm, nb16, PF_ROWS * rb, y + r, (size_t)n_out);
		return true;
	}
	for (int t0 = 0; t0 < n_tok; t0 += tp) {
		int nt = n_tok - t0 < tp ? n_tok - t0 : tp;
		const uint8_t *a = act + (size_t)t0 * ab;
		for (int tok = 0; tok < nt; tok++)
			x_sums16(a + (size_t)tok * ab, n_in, xm + tok * nb16);
		for (int64_t r = r0; r < r1; r++)
			q2k_row(W + (size_t)r * rb, a, ab, nt, n_in, xm, nb16, 0,
			    y + (size_t)t0 * (size_t)n_out + (size_t)r, (size_t)n_out);
	}
	return true;
}

/* ---- the table's entry ------------------------------------------------------ */

/* Rows [r0, r1) of one type, tokens in runs of Q_IQ_TOKENS; n_tok 1 is compiled apart (decode). */
#define ROWS(call)								\
	do {									\
		for (int64_t r = r0; r < r1; r++) {				\
			const uint8_t *row = W + (size_t)r * rb;		\
			if (n_tok == 1) {					\
				float *out = y + r;				\
				const int nt = 1;				\
				const uint8_t *a = act;				\
				const size_t pf = PF_ROWS * rb;			\
				call;						\
				continue;					\
			}							\
			for (int t0 = 0; t0 < n_tok; t0 += Q_IQ_TOKENS) {	\
				float *out = y + (size_t)t0 * (size_t)n_out + (size_t)r; \
				const int nt = n_tok - t0 < Q_IQ_TOKENS ? n_tok - t0 : Q_IQ_TOKENS; \
				const uint8_t *a = act + (size_t)t0 * ab;	\
				const size_t pf = 0;				\
				call;						\
			}							\
		}								\
	} while (0)

bool
kern_avx2_iqn_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % q_iq_block_elems(t) != 0)
		return false;
	switch (t) {
	case GGML_TYPE_MXFP4: ROWS(nib_row(GGML_TYPE_MXFP4, row, a, ab, nt, n_in, pf, out, (size_t)n_out)); break;
	case GGML_TYPE_IQ4_NL: ROWS(nib_row(GGML_TYPE_IQ4_NL, row, a, ab, nt, n_in, pf, out, (size_t)n_out)); break;
	case GGML_TYPE_IQ4_XS: ROWS(nib_row(GGML_TYPE_IQ4_XS, row, a, ab, nt, n_in, pf, out, (size_t)n_out)); break;
	case GGML_TYPE_Q2_K: return q2k_rows(W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
	default: return false;
	}
	return true;
}
