/*
 * cpu_simd.h: the CPU backend's attention kernels over one cache row
 * (cpu_simd.c); internal to the backend module.
 */
#ifndef KVC_CPU_SIMD_H
#define KVC_CPU_SIMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86_SIMD 1
#endif

/* sum_i a[i] * b[i], a an F32 or F16 row */
float cpu_dot_f32(const float *a, const float *b, int n);
float cpu_dot_f16(const uint16_t *a, const float *b, int n);
/* y[i] += a * x[i], x an F32 or F16 row */
void cpu_axpy_f32(float *y, float a, const float *x, int n);
void cpu_axpy_f16(float *y, float a, const uint16_t *x, int n);

/*
 * Attention of a tile of queries that read the same KV head (cpu_att_tile):
 * each cache row is read, and converted to float, once per block of
 * CPU_ATT_PB positions for all the tile's queries instead of once per query.
 * A query's arithmetic (its scores, softmax and weighted sum, in position
 * order) is the same whatever else is in its tile, so its output does not
 * depend on the batch: decode runs the same code with the tiles it gets.
 */
#define CPU_ATT_PB 64

struct cpu_att_tile {
	const char *k, *v;	/* position p's row of the head: k + p * rb (F16 or F32 elements) */
	size_t rb;
	bool f16;
	int hd;			/* head size */
	int nq;			/* queries in the tile */
	const float *const *q;	/* [nq] queries (hd floats) */
	float *const *o;	/* [nq] outputs (hd floats) */
	const int *lo, *hi;	/* [nq] positions [lo, hi) each query attends to */
	float scale, cap;	/* score = d * scale, or cap * tanh(d * scale / cap) when cap > 0 */
	float *s;		/* nq rows of s_stride floats, indexed by position */
	size_t s_stride;	/* >= max hi + CPU_ATT_PB */
	float *buf;		/* cpu_att_buf_floats(hd) floats */
};

size_t cpu_att_buf_floats(int hd);
void cpu_att_tile(const struct cpu_att_tile *t);

#ifdef HAVE_X86_SIMD
/* The same with AVX2+FMA+F16C: only call when kvc_cpu_avx2() is true. */
float cpu_dot_f32_avx(const float *a, const float *b, int n);
float cpu_dot_f16_avx(const uint16_t *a, const float *b, int n);
void cpu_axpy_f32_avx(float *y, float a, const float *x, int n);
void cpu_axpy_f16_avx(float *y, float a, const uint16_t *x, int n);
void cpu_att_tile_avx(const struct cpu_att_tile *t);
/* sum of x[i]^2 in double (eight running sums), for RMSNorm */
double cpu_sumsq_avx(const float *x, int n);
/* y[i] = x[i] * sc * w[i] (y may alias x): RMSNorm's scaling, the scalar loop's bits */
void cpu_scale_mul_avx(float *y, const float *x, float sc, const float *w, int n);
/* d[i] = x[i] as IEEE half, rounded to nearest even (q_f32_to_fp16's bits) */
void cpu_f32_to_f16_avx(uint16_t *d, const float *x, int n);
/* Query j's raw dot products in s[lo, hi) become its weights (divided by their sum). */
float cpu_att_softmax_avx(const struct cpu_att_tile *t, int j);

/*
 * cpu_att512.c: the same tile with AVX-512 and sixteen queries in a
 * vector's lanes, bitwise the same outputs as cpu_att_tile_avx; worth it
 * for tiles of more than eight queries (prefill). Call only when
 * cpu_att_avx512_cpu() and cpu_att_tile_avx512_fits(t) are true.
 */
bool cpu_att_avx512_cpu(void);
bool cpu_att_tile_avx512_fits(const struct cpu_att_tile *t);
void cpu_att_tile_avx512(const struct cpu_att_tile *t);
#endif

#endif
