/*
 * kv_q8.c: the row formats of the cache types (F32, F16, Q8_0: GGUF's
 * 34-byte blocks, rounded as src/kern's kern_kvq8_quantize says) and the
 * conversions between them that snapshots of another type go through. The
 * kernels that read and write Q8_0 rows are src/kern's.
 */
#include "config.h"

#include "backend.h"
#include "kern/kern.h"
#include "quant/quant.h"

#include <string.h>

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

/* ---- row formats of the cache types (backend.h) ---- */

size_t
kvc_kv_row_bytes(enum gguf_dtype type, int n)
{
	if (n < 0)
		return 0;
	switch (type) {
	case GGML_TYPE_F32: return (size_t)n * 4;
	case GGML_TYPE_F16: return (size_t)n * 2;
	case GGML_TYPE_Q8_0: return n % QB ? 0 : (size_t)(n / QB) * QBYTES;
	default: return 0;
	}
}

int
kvc_kv_row_to_f32(enum gguf_dtype type, const void *src, float *dst, int n)
{
	const unsigned char *s = src;
	int i;

	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof *dst);
		return KVC_OK;
	case GGML_TYPE_F16:
		for (i = 0; i < n; i++)
			dst[i] = q_fp16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
		return KVC_OK;
	case GGML_TYPE_Q8_0:
		if (n % QB)
			return KVC_EINVAL;
		for (i = 0; i < n; i++)
			dst[i] = blk_d(s, i / QB) * (float)blk_q(s, i / QB)[i % QB];
		return KVC_OK;
	default:
		return KVC_EUNSUPPORTED;
	}
}

int
kvc_kv_row_from_f32(enum gguf_dtype type, const float *src, void *dst, int n)
{
	unsigned char *d = dst;
	int i;

	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof *src);
		return KVC_OK;
	case GGML_TYPE_F16:
		for (i = 0; i < n; i++) {
			uint16_t h = q_f32_to_fp16(src[i]);

			d[2 * i] = (unsigned char)(h & 0xff);
			d[2 * i + 1] = (unsigned char)(h >> 8);
		}
		return KVC_OK;
	case GGML_TYPE_Q8_0:
		if (n % QB)
			return KVC_EINVAL;
		kern_kvq8_quantize(src, dst, n);
		return KVC_OK;
	default:
		return KVC_EUNSUPPORTED;
	}
}
