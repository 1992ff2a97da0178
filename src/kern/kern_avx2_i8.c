/*
 * kern_avx2_i8.c: the avx2 table's products of int8 activations (compiled
 * with -mavx2 -mfma -mf16c, kern.am), and the avx2vnni table's (the same
 * file with -mavxvnni: mad_avx2 is then one vpdpbusd, the same sums). A tile is two weight rows times up to
 * four tokens: each weight block is decoded once per tile (kern_x86.h) and
 * multiplied into every token of it, instead of once per (row, token) as a
 * one-row dot product does.
 *
 * Batch independence: every (row, token) pair has its own accumulator,
 * which sees the same instructions, on the same values, in the same order,
 * whatever the tile's shape; one token (decode, kern_dot_act) runs the same
 * kernel with a tile of one token. So a position's logits are bitwise the
 * same computed alone, in a tile or in a long prefill
 * (tests/unit/test_forward.c checks it).
 *
 * The float work per (row, token, 32 values) is fixed as: lane scales
 * (weight scale of each 4-value lane) times the token's block scale, times
 * the 8 int32 lane sums converted to float, added with one FMA into the
 * pair's accumulator; after a block's groups, the Q4_1/Q5_1 offset
 * (m times the float sum of x) or the Q4_K/Q5_K sub-block mins (times the
 * 8 sums of x) enter the same accumulator with one more FMA.
 */
#include "kern_int.h"
#include "kern_x86.h"

/*
 * One tile: rows w[0], w[1] times NT tokens of prepared activations (ab
 * bytes apart), n_in values; out[r * 4 + tok]. Constant t, vnni and NT
 * (always inlined) give each combination its own straight-line loop.
 */
INLINE void
tile_i8(enum gguf_dtype t, int NT, const uint8_t *const w[2], const uint8_t *act,
    size_t ab, int64_t n_in, size_t pf, float *out)
{
	const int ng = t_group_count(t);
	const int64_t nb = n_in / 32, nbk = nb / ng;
	const size_t bb = t_block_bytes(t);
	const bool sgn = t_signed(t);
	const float *dx[4], *xs[4];
	const int8_t *qx[4];
	__m256 acc[2][4];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		xs[k] = dx[k] + nb;
		qx[k] = (const int8_t *)(xs[k] + nb);
		acc[0][k] = acc[1][k] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nbk; b++) {
		struct blk bk[2];
		UNROLL
		for (int r = 0; r < 2; r++) {
			blk_prep(t, w[r] + (size_t)b * bb, &bk[r]);
			if (pf)	/* decode: the rows a few pairs on, as this block is read */
				prefetch_span(w[r] + (size_t)b * bb + pf, bb);
		}
		UNROLL
		for (int g = 0; g < ng; g++) {
			int64_t ag = b * ng + g;
			__m256i wv[2], wu[2];
			__m256 ws[2];
			UNROLL
			for (int r = 0; r < 2; r++) {
				wv[r] = blk_group(t, &bk[r], g);
				wu[r] = sgn ? _mm256_sign_epi8(wv[r], wv[r]) : wv[r];
				ws[r] = blk_scale(t, &bk[r], g);
			}
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256i xv = ld256(qx[k] + 32 * ag);
				__m256 dv = _mm256_broadcast_ss(dx[k] + ag);
				UNROLL
				for (int r = 0; r < 2; r++) {
					__m256i s = sgn ? _mm256_sign_epi8(xv, wv[r]) : xv;
					s = mad_avx2(wu[r], s);
					acc[r][k] = _mm256_fmadd_ps(_mm256_mul_ps(ws[r], dv),
					    _mm256_cvtepi32_ps(s), acc[r][k]);
				}
			}
		}
		if (t_has_off(t)) {
			UNROLL
			for (int k = 0; k < NT; k++) {
				__m256 xo = blk_xoff(t, xs[k], b);
				UNROLL
				for (int r = 0; r < 2; r++)
					acc[r][k] = _mm256_fmadd_ps(bk[r].off, xo, acc[r][k]);
			}
		}
	}
	UNROLL
	for (int r = 0; r < 2; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			out[r * 4 + k] = q_hsum8(acc[r][k]);
}

/*
 * Rows [r0, r1) in pairs (an odd last row is paired with itself and its
 * twin's result dropped), tokens in tiles of 4 and a last tile of 1-3.
 */
INLINE void
rows_i8(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r += 2) {
		const uint8_t *w[2] = { W + (size_t)r * rb, W + (size_t)(r + 1 < r1 ? r + 1 : r) * rb };
		int nr = r + 1 < r1 ? 2 : 1;
		for (int tok = 0; tok < n_tok; tok += 4) {
			const uint8_t *a = act + (size_t)tok * ab;
			float out[8];
			int nt = n_tok - tok < 4 ? n_tok - tok : 4;
			switch (nt) {
			case 4: tile_i8(t, 4, w, a, ab, n_in, 0, out); break;
			case 3: tile_i8(t, 3, w, a, ab, n_in, 0, out); break;
			case 2: tile_i8(t, 2, w, a, ab, n_in, 0, out); break;
			default: tile_i8(t, 1, w, a, ab, n_in, n_tok == 1 ? 8 * rb : 0, out); break;
			}
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * 4 + k];
		}
	}
}

/*
 * One entry per type, its type a constant so each gets its own straight-line
 * loops; false when n_in is not whole blocks (the scalar reference runs).
 */
#define ROWS_I8(T, name)							\
static bool									\
name(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab, int n_tok, \
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)		\
{										\
	(void)t;								\
	if (n_in % (32 * t_group_count(T)) != 0)				\
		return false;							\
	rows_i8(T, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);		\
	return true;								\
}
ROWS_I8(GGML_TYPE_Q8_0, rows_q8_0)
ROWS_I8(GGML_TYPE_Q4_0, rows_q4_0)
ROWS_I8(GGML_TYPE_Q4_1, rows_q4_1)
ROWS_I8(GGML_TYPE_Q5_0, rows_q5_0)
ROWS_I8(GGML_TYPE_Q5_1, rows_q5_1)
ROWS_I8(GGML_TYPE_Q3_K, rows_q3_k)
ROWS_I8(GGML_TYPE_Q4_K, rows_q4_k)
ROWS_I8(GGML_TYPE_Q5_K, rows_q5_k)
ROWS_I8(GGML_TYPE_Q6_K, rows_q6_k)

kern_rows_act_fn *const KERN_AVX2_SYM(rows_act)[KERN_NTYPE] = {
	[GGML_TYPE_Q8_0] = rows_q8_0, [GGML_TYPE_Q4_0] = rows_q4_0, [GGML_TYPE_Q4_1] = rows_q4_1,
	[GGML_TYPE_Q5_0] = rows_q5_0, [GGML_TYPE_Q5_1] = rows_q5_1, [GGML_TYPE_Q3_K] = rows_q3_k,
	[GGML_TYPE_Q4_K] = rows_q4_k, [GGML_TYPE_Q5_K] = rows_q5_k, [GGML_TYPE_Q6_K] = rows_q6_k,
	KERN_AVX2_IQ_ROWS_ACT,
};
