/*
 * quant_tile_i8.h: the int8 tile kernels of quant_tile.c, written once and
 * included there twice: with TILE_TGT/TILE_MAD/TILE_NAME for AVX2
 * (maddubs + madd) and for AVX512-VNNI (dpbusd), since a function compiled
 * for AVX2 cannot inline a VNNI instruction. Internal to quant_tile.c.
 */
/*
 * One tile: rows w[0], w[1] times NT tokens of prepared activations (ab
 * bytes apart), n_in values; out[r * 4 + tok]. Constant t, vnni and NT
 * (always inlined) give each combination its own straight-line loop.
 */
TILE_TGT INLINE void
TILE_NAME(tile_i8)(enum gguf_dtype t, int NT, const uint8_t *const w[2], const uint8_t *act,
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
					s = TILE_MAD(wu[r], s);
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
TILE_TGT INLINE void
TILE_NAME(rows_i8)(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
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
			case 4: TILE_NAME(tile_i8)(t, 4, w, a, ab, n_in, 0, out); break;
			case 3: TILE_NAME(tile_i8)(t, 3, w, a, ab, n_in, 0, out); break;
			case 2: TILE_NAME(tile_i8)(t, 2, w, a, ab, n_in, 0, out); break;
			default: TILE_NAME(tile_i8)(t, 1, w, a, ab, n_in, n_tok == 1 ? 8 * rb : 0, out); break;
			}
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * 4 + k];
		}
	}
}

#define RT_CASES								\
	switch (t) {								\
	case GGML_TYPE_Q8_0: TILE_NAME(rows_i8)(GGML_TYPE_Q8_0, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q4_0: TILE_NAME(rows_i8)(GGML_TYPE_Q4_0, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q4_1: TILE_NAME(rows_i8)(GGML_TYPE_Q4_1, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q5_0: TILE_NAME(rows_i8)(GGML_TYPE_Q5_0, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q5_1: TILE_NAME(rows_i8)(GGML_TYPE_Q5_1, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q3_K: TILE_NAME(rows_i8)(GGML_TYPE_Q3_K, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q4_K: TILE_NAME(rows_i8)(GGML_TYPE_Q4_K, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q5_K: TILE_NAME(rows_i8)(GGML_TYPE_Q5_K, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	case GGML_TYPE_Q6_K: TILE_NAME(rows_i8)(GGML_TYPE_Q6_K, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1); return true; \
	default: return false;							\
	}

TILE_TGT static bool
TILE_NAME(rows_act)(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act, size_t ab,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	RT_CASES
}
#undef RT_CASES
