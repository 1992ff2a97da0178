/*
 * test_cuda_kvq8.c: the q8_0 KV cache's arithmetic as the CUDA kernels run
 * it (cuda/kv_q8.cuh, the very lines kernel_kv_store_q8, the slide's
 * kernel_kv_rotate_q8 and attention's Q8_0 reads compile) on the CPU,
 * against the CPU backend's: built without nvcc, so it runs everywhere.
 *
 * 1. kvq8_f32_to_fp16 (the integer rounding the device uses instead of its
 *    conversion instruction) equals src/quant's q_f32_to_fp16 on every
 *    exponent, a stride through all 2^32 bit patterns, the ties and the
 *    edges (65504, 65520, the subnormals, infinities, NaN).
 * 2. Rows quantised block by block with kvq8_quantize_block equal
 *    kern_kvq8_quantize's bytes (what the CPU backend stores and a snapshot
 *    holds): random rows of several scales, zero blocks, subnormal ones,
 *    levels that land on halves, a row up to fp16's overflow.
 * 3. kvq8_at reads each element as kvc_kv_row_to_f32 does, bit for bit.
 * A layout slip (a block's scale read one block over) must be caught.
 */
#include "test.h"

#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "kern/kern.h"
#include "quant/quant.h"

#include "cuda/kv_q8.cuh"

static uint64_t rng = 0x2545F4914F6CDD1DULL;

static uint32_t
next32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float
uni(void)
{
	return (float)next32() / 4294967296.0f * 2 - 1;
}

static float
from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

static void
check_fp16(void)
{
	static const float edge[] = { 0.f, -0.f, 65504.f, 65519.99f, 65520.f, -65520.f, 1e-8f, 2.9802322e-8f,
		5.9604645e-8f, 8.940697e-8f, 6.097555e-5f, 6.1035156e-5f, 1.f / 254, 0.00048828125f, 1e30f };
	uint64_t bad = 0, n = 0;

	for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++, n++)
		bad += kvq8_f32_to_fp16(edge[i]) != q_f32_to_fp16(edge[i]);
	bad += kvq8_f32_to_fp16(INFINITY) != q_f32_to_fp16(INFINITY);
	bad += kvq8_f32_to_fp16(-INFINITY) != q_f32_to_fp16(-INFINITY);
	bad += kvq8_f32_to_fp16(NAN) != q_f32_to_fp16(NAN);
	/* a stride coprime with 2^32 visits every exponent and many mantissas */
	for (uint64_t u = 0; u < (1ull << 32); u += 4099, n++)
		bad += kvq8_f32_to_fp16(from_bits((uint32_t)u)) != q_f32_to_fp16(from_bits((uint32_t)u));
	/* halfway cases of every half exponent: the 13 dropped bits exactly 0x1000 */
	for (uint32_t e = 100; e < 145; e++)
		for (uint32_t m = 0; m < 2048; m++, n++) {
			uint32_t u = e << 23 | m << 13 | 0x1000;
			bad += kvq8_f32_to_fp16(from_bits(u)) != q_f32_to_fp16(from_bits(u));
		}
	test_cond(bad == 0, "kvq8_f32_to_fp16: %llu of %llu differ from q_f32_to_fp16",
	    (unsigned long long)bad, (unsigned long long)n);
	for (uint32_t h = 0; h < 65536; h++) {
		float a = kvq8_fp16_to_f32((uint16_t)h), b = q_fp16_to_f32((uint16_t)h);
		if (memcmp(&a, &b, sizeof a) != 0 && !(isnan(a) && isnan(b))) {
			test_cond(0, "kvq8_fp16_to_f32(%#x) = %g, q_fp16_to_f32 %g", h, a, b);
			break;
		}
	}
}

/* Row kind k of n values into x. */
static void
fill(float *x, int n, int k)
{
	for (int i = 0; i < n; i++) {
		int blk = i / 32;
		switch (k) {
		case 0: x[i] = uni(); break;
		case 1: x[i] = uni() * 300.f; break;
		case 2: x[i] = blk % 3 == 0 ? 0.f : uni() * 1e-3f; break;
		case 3: x[i] = uni() * 1e-6f; break;				/* subnormal halves */
		case 4: x[i] = (float)((int)(uni() * 254)) * 0.5f; break;	/* x / d near halves */
		case 5: x[i] = uni() * 9e6f; break;				/* d past 65504: inf */
		default: x[i] = i % 32 == 7 ? 127.f : uni() * 127.f; break;	/* d = 1 exactly */
		}
	}
}

static void
check_rows(void)
{
	enum { W = 896 };
	size_t rb = kvc_kv_row_bytes(GGML_TYPE_Q8_0, W);
	float x[W], a[W];
	uint8_t want[W / 32 * 34], got[W / 32 * 34];
	int bad = 0, bad_at = 0, rows = 0, caught = 0;

	test_cond(rb == sizeof want, "row bytes %zu", rb);
	for (int k = 0; k < 7; k++)
		for (int r = 0; r < 200; r++, rows++) {
			fill(x, W, k);
			kern_kvq8_quantize(x, want, W);
			for (int b = 0; b < W / 32; b++)
				kvq8_quantize_block(x + 32 * b, got + 34 * b);
			bad += memcmp(want, got, rb) != 0;
			kvc_kv_row_to_f32(GGML_TYPE_Q8_0, want, a, W);
			for (int i = 0; i < W; i++) {
				float v = kvq8_at(want, i);
				bad_at += memcmp(&v, &a[i], sizeof v) != 0;
			}
			/* the same read one block over must not pass */
			for (int i = 0; i < W - 32 && k == 0; i++)
				if (kvq8_at(want, i + 32) != a[i]) {
					caught++;
					break;
				}
		}
	test_cond(bad == 0, "kvq8_quantize_block: %d of %d rows differ from kern_kvq8_quantize", bad, rows);
	test_cond(bad_at == 0, "kvq8_at: %d values differ from kvc_kv_row_to_f32", bad_at);
	test_cond(caught == 200, "a read one block over was not caught (%d of 200)", caught);
}

int
main(void)
{
	check_fp16();
	check_rows();
	return test_done();
}
