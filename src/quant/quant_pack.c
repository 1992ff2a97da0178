/*
 * quant_pack.c: Q8_0 weights packed at load for AVX512-VNNI CPUs.
 *
 * The tiled kernels of quant_tile.c read a weight row as it is stored: one
 * 512-bit multiply-add covers 64 values of ONE row, and each (row, token)
 * then pays a conversion, a scale product and an FMA per 64 values, plus
 * the set-up of every row's levels and scales: about 8 multiply-adds per
 * vector instruction, which on a core with two 512-bit pipes caps Q8_0
 * near 100 G multiply-adds/s. Packed, the lanes are rows instead: a group
 * of Q_PACK_ROWS (16) rows keeps, per block of 32 values, eight 64-byte
 * vectors whose lane r holds 4 consecutive levels of row r, and the 16
 * rows' fp16 scales side by side. One dpbusd then multiplies 4 values of
 * 16 rows by the same 4 values of x (broadcast from memory), eight of them
 * form each row's exact integer block sum, and the float work (one
 * conversion, one scale product, one FMA) is shared by 16 rows: about 40
 * multiply-adds per instruction, and no horizontal sum at the end.
 *
 * Bytes of a group: nb blocks of 512 bytes of levels, then nb x 32 bytes of
 * scales (so the level vectors stay 64-byte aligned when nb is even); rows
 * past n_out are zeros. Levels are stored as w + 128 (unsigned, dpbusd's
 * first operand); each token's block sum is corrected by the -128 x (sum
 * of its int8 levels) that q_act_prepare leaves after the levels.
 *
 * Float order, the same for any number of tokens and any split of the
 * groups between threads (batch independence): per (row, token), for b =
 * 0 .. nb - 1: acc = fma(scale_w[b] * d_x[b], (float)isum[b], acc), from
 * acc = 0. Integer sums are exact, so how they are formed does not matter.
 */
#include "quant_impl.h"

#include <string.h>

#define PACK_L 512	/* level bytes of one block of a group: 16 rows x 32 */
#define PACK_S 32	/* scale bytes of one block of a group: 16 x fp16 */

bool
q_pack_supported(enum gguf_dtype t, int64_t n_in)
{
	return t == GGML_TYPE_Q8_0 && n_in > 0 && n_in % 32 == 0 && q_tile_avx512_cpu();
}

size_t
q_pack_bytes(enum gguf_dtype t, int64_t n_in, int64_t n_out)
{
	int64_t groups = (n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;

	if (t != GGML_TYPE_Q8_0 || n_in % 32 != 0)
		return 0;
	return (size_t)groups * (size_t)(n_in / 32) * (PACK_L + PACK_S);
}

void
q_pack(enum gguf_dtype t, const void *W, size_t row_bytes, int64_t n_in, int64_t n_out, void *P,
    int64_t g0, int64_t g1)
{
	int64_t nb = n_in / 32;
	size_t gb = (size_t)nb * (PACK_L + PACK_S);

	(void)t;
	for (int64_t g = g0; g < g1; g++) {
		uint8_t *L = (uint8_t *)P + (size_t)g * gb, *S = L + (size_t)nb * PACK_L;

		for (int r = 0; r < Q_PACK_ROWS; r++) {
			int64_t row = g * Q_PACK_ROWS + r;
			const uint8_t *src = (const uint8_t *)W + (size_t)row * row_bytes;

			for (int64_t b = 0; b < nb; b++) {
				uint8_t *l = L + (size_t)b * PACK_L + 4 * r;

				if (row >= n_out) {
					for (int j = 0; j < 8; j++)
						memset(l + 64 * j, 0x80, 4);
					memset(S + (size_t)b * PACK_S + 2 * r, 0, 2);
					continue;
				}
				const uint8_t *blk = src + (size_t)b * 34;
				memcpy(S + (size_t)b * PACK_S + 2 * r, blk, 2);
				for (int j = 0; j < 8; j++)
					for (int i = 0; i < 4; i++)
						l[64 * j + i] = blk[2 + 4 * j + i] ^ 0x80;
			}
		}
	}
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define INLINE __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 8")

static inline int32_t
ld32(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return v;
}

/*
 * One group (16 rows) times NT tokens of prepared activations, ab bytes
 * apart: out[k * 16 + r]. Two chains of four multiply-adds per token and
 * block keep the pipes fed while a chain waits on its last result.
 */
VNNI INLINE void
group_tile(int NT, const uint8_t *G, int64_t nb, const uint8_t *act, size_t ab, __m512 *acc)
{
	const uint8_t *S = G + (size_t)nb * PACK_L;
	const float *dx[8];
	const int8_t *qx[8];
	const int32_t *qc[8];

	UNROLL
	for (int k = 0; k < NT; k++) {
		dx[k] = (const float *)(act + (size_t)k * ab);
		qx[k] = (const int8_t *)(dx[k] + 2 * nb);
		qc[k] = (const int32_t *)(qx[k] + 32 * nb);
		acc[k] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *L = G + (size_t)b * PACK_L;
		__m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(S + (size_t)b * PACK_S)));
		__m512i wv[8];

		UNROLL
		for (int j = 0; j < 8; j++)
			wv[j] = _mm512_loadu_si512(L + 64 * j);
		UNROLL
		for (int k = 0; k < NT; k++) {
			const int8_t *x = qx[k] + 32 * b;
			__m512i s0 = _mm512_set1_epi32(qc[k][b]), s1 = _mm512_setzero_si512();

			UNROLL
			for (int j = 0; j < 8; j += 2) {
				s0 = _mm512_dpbusd_epi32(s0, wv[j], _mm512_set1_epi32(ld32(x + 4 * j)));
				s1 = _mm512_dpbusd_epi32(s1, wv[j + 1], _mm512_set1_epi32(ld32(x + 4 * j + 4)));
			}
			acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(dx[k][b])),
			    _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[k]);
		}
	}
}

VNNI static void
packed_act_512(const uint8_t *P, const uint8_t *act, int n_tok, int64_t n_in, float *y, int64_t n_out,
    int64_t g0, int64_t g1)
{
	int64_t nb = n_in / 32;
	size_t gb = (size_t)nb * (PACK_L + PACK_S), ab = q_act_bytes(n_in);

	for (int64_t g = g0; g < g1; g++) {
		const uint8_t *G = P + (size_t)g * gb;
		int64_t r = g * Q_PACK_ROWS, nr = n_out - r < Q_PACK_ROWS ? n_out - r : Q_PACK_ROWS;
		__mmask16 m = (__mmask16)((1u << nr) - 1);

		for (int tok = 0; tok < n_tok; tok += 4) {
			const uint8_t *a = act + (size_t)tok * ab;
			int nt = n_tok - tok < 4 ? n_tok - tok : 4;
			__m512 acc[4];

			switch (nt) {
			case 4: group_tile(4, G, nb, a, ab, acc); break;
			case 3: group_tile(3, G, nb, a, ab, acc); break;
			case 2: group_tile(2, G, nb, a, ab, acc); break;
			default: group_tile(1, G, nb, a, ab, acc); break;
			}
			for (int k = 0; k < nt; k++)
				_mm512_mask_storeu_ps(y + (size_t)(tok + k) * (size_t)n_out + (size_t)r, m, acc[k]);
		}
	}
}

void
q_matmul_packed_act(enum gguf_dtype t, const void *P, const void *act, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	(void)t;
	packed_act_512(P, act, n_tok, n_in, y, n_out, g0, g1);
}

#else	/* not x86: q_pack_supported is false, nothing is ever packed */

void
q_matmul_packed_act(enum gguf_dtype t, const void *P, const void *act, int n_tok, int64_t n_in,
    float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	(void)t, (void)P, (void)act, (void)n_tok, (void)n_in, (void)y, (void)n_out, (void)g0, (void)g1;
}

#endif
