/*
 * kern_neon.c: the "neon" table's entries, for any aarch64 CPU (Advanced
 * SIMD is part of ARMv8.0; built with the target's plain flags, kern.am):
 * the int8 products (kern_neon.h's tiles, SDOT emulated), the products of
 * float activations with F32, F16 and BF16 weights, and the int8 rounding
 * of activations. The "neondot" table (kern_neon_dot.c) uses the float
 * products and the rounding from here.
 */
#include "kern_neon.h"

NEON_ROWS_I8_ALL

kern_rows_act_fn *const kern_neon_rows_act[KERN_NTYPE] = {
	NEON_ROWS_I8_TABLE,
};

/* ---- float activations ---------------------------------------------------- */

/* 4 weights from value i of a row of F32, F16 or BF16 (t constant when inlined). */
INLINE float32x4_t
ldw(enum gguf_dtype t, const uint8_t *row, int64_t i)
{
	if (t == GGML_TYPE_F32)
		return vreinterpretq_f32_u8(vld1q_u8(row + 4 * i));
	uint16x4_t h = vreinterpret_u16_u8(vld1_u8(row + 2 * i));
	if (t == GGML_TYPE_F16)
		return vcvt_f32_f16(vreinterpret_f16_u16(h));
	return vreinterpretq_f32_u32(vshll_n_u16(h, 16));	/* BF16: the top half of a float */
}

/*
 * Two rows times NT tokens (1-4), n a multiple of 8; out[r * 4 + k]. Each
 * (row, token) keeps two accumulators, the 4-value chunks alternating
 * between them, added at the end, whatever NT is.
 */
INLINE void
tile_f(enum gguf_dtype t, int NT, const uint8_t *const w[2], const float *x, int64_t n, float *out)
{
	float32x4_t acc[2][4][2];

	UNROLL
	for (int r = 0; r < 2; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			acc[r][k][0] = acc[r][k][1] = vdupq_n_f32(0);
	for (int64_t i = 0; i < n; i += 8) {
		UNROLL
		for (int h = 0; h < 2; h++) {
			float32x4_t wv[2] = { ldw(t, w[0], i + 4 * h), ldw(t, w[1], i + 4 * h) };
			UNROLL
			for (int k = 0; k < NT; k++) {
				float32x4_t xv = vld1q_f32(x + (size_t)k * (size_t)n + i + 4 * h);
				UNROLL
				for (int r = 0; r < 2; r++)
					acc[r][k][h] = vfmaq_f32(acc[r][k][h], wv[r], xv);
			}
		}
	}
	UNROLL
	for (int r = 0; r < 2; r++)
		UNROLL
		for (int k = 0; k < NT; k++)
			out[r * 4 + k] = vaddvq_f32(vaddq_f32(acc[r][k][0], acc[r][k][1]));
}

INLINE void
rows_f_type(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r += 2) {
		const uint8_t *w[2] = { W + (size_t)r * rb, W + (size_t)(r + 1 < r1 ? r + 1 : r) * rb };
		int nr = r + 1 < r1 ? 2 : 1;
		if (n_tok == 1 && r + 2 < r1)	/* decode: the next pair on its way */
			for (size_t o = 0; o < 2 * rb; o += 64)
				__builtin_prefetch(W + (size_t)(r + 2) * rb + o);
		for (int tok = 0; tok < n_tok; tok += 4) {
			const float *xt = x + (size_t)tok * (size_t)n_in;
			float out[8];
			int nt = n_tok - tok < 4 ? n_tok - tok : 4;
			switch (nt) {
			case 4: tile_f(t, 4, w, xt, n_in, out); break;
			case 3: tile_f(t, 3, w, xt, n_in, out); break;
			case 2: tile_f(t, 2, w, xt, n_in, out); break;
			default: tile_f(t, 1, w, xt, n_in, out); break;
			}
			for (int i = 0; i < nr; i++)
				for (int k = 0; k < nt; k++)
					y[(size_t)(tok + k) * (size_t)n_out + (size_t)(r + i)] = out[i * 4 + k];
		}
	}
}

/* F32, F16, BF16 with n_in a multiple of 8 (else false: the scalar reference runs). */
bool
kern_neon_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	if (n_in % 8 != 0)
		return false;
	switch (t) {
	case GGML_TYPE_F32: rows_f_type(GGML_TYPE_F32, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
	case GGML_TYPE_F16: rows_f_type(GGML_TYPE_F16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
	case GGML_TYPE_BF16: rows_f_type(GGML_TYPE_BF16, W, rb, x, n_tok, n_in, y, n_out, r0, r1); break;
	default: return false;
	}
	return true;
}

/*
 * q_act_prepare's work with vectors: the same d and levels (the conversion
 * rounds to nearest even, as lrintf does in the default mode), the same
 * sums (d times the levels' integer sum): bitwise the scalar bytes; both
 * neon tables use this one.
 */
void
kern_neon_act_prepare(const float *x, int64_t n_in, void *act)
{
	int64_t nb = n_in / 32;
	float *d = act, *xs = d + nb;
	int8_t *q = (int8_t *)(xs + nb);

	for (int64_t b = 0; b < nb; b++) {
		const float *xb = x + 32 * b;
		float32x4_t v[8], m;
		int16x8_t h[4];
		for (int i = 0; i < 8; i++)
			v[i] = vld1q_f32(xb + 4 * i);
		m = vabsq_f32(v[0]);
		for (int i = 1; i < 8; i++)
			m = vmaxq_f32(m, vabsq_f32(v[i]));
		float amax = vmaxvq_f32(m);
		float db = amax / 127.0f, id = db > 0 ? 127.0f / amax : 0;
		d[b] = db;
		int32_t isum = 0;
		for (int i = 0; i < 4; i++) {
			h[i] = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * i], id))),
			    vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * i + 1], id))));
			isum += vaddlvq_s16(h[i]);
		}
		/* d times the levels' sum, as q_act_prepare: exact in any order */
		xs[b] = db * (float)isum;
		vst1q_s8(q + 32 * b, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
		vst1q_s8(q + 32 * b + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
	}
}
