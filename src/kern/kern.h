/*
 * kern.h: the CPU kernels, one table per instruction set: "scalar" (any
 * CPU); on x86-64 "avx2" (AVX2 + FMA + F16C), "avx2vnni" (that and
 * AVX-VNNI: avx2's table with vpdpbusd in its int8 products, bitwise the
 * same results), "avx512" (AVX2 and AVX512 F, VL, BW, VNNI); on aarch64 "neon" (Advanced SIMD), "neondot" (that and
 * the ARMv8.2 dot product). Each table's files are compiled with their
 * own flags (kern.am); the CPU is probed once (kvc_cpu_features) and the
 * CPU backend takes its table at init (kern_find), so nothing below it
 * asks the CPU again.
 *
 * The matrix products are per weight type: a table's rows_f / rows_act /
 * packed arrays are indexed by enum gguf_dtype, and a type a SIMD table
 * leaves NULL (or a shape its entry declines by returning false) runs the
 * scalar reference of quant.h (q_dot, q_dot_act) instead. A new weight type
 * is added by writing its scalar reference in quant and, when it has one,
 * filling its SIMD entries here.
 *
 * Results: within a table every (row, token) of a product is bitwise the
 * same whatever the batch, the tile it shares or the thread that ran it
 * (batch independence, tests/unit/test_quant.c, test_forward.c). Tables
 * sum in different orders, so their results may differ in the last bits,
 * each within quant.h's bounds.
 */
#ifndef KVC_KERN_H
#define KVC_KERN_H

#include "quant/quant.h"

/* Weight types a table's arrays cover (enum gguf_dtype values below this). */
#define KERN_NTYPE 40

/*
 * Rows [r0, r1) of W (rows rb bytes apart) times n_tok tokens of n_in
 * values: y[tok * n_out + r]. rows_f takes float x (tokens n_in apart),
 * rows_act int8 activations (q_act_prepare's layout, tokens ab bytes
 * apart). false: this entry does not take the shape; the scalar one runs.
 */
typedef bool kern_rows_f_fn(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
typedef bool kern_rows_act_fn(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* Groups [g0, g1) of a matrix packed by q_pack (quant.h), as q_pack describes. */
typedef void kern_packed_fn(enum gguf_dtype t, const uint8_t *P, const uint8_t *act, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t g0, int64_t g1);

/*
 * Attention of a tile of queries that read the same KV head: each cache
 * row is read, and converted to float, once per block of KERN_ATT_PB
 * positions for all the tile's queries instead of once per query. A
 * query's arithmetic (its scores, softmax and weighted sum, in position
 * order) is the same whatever else is in its tile, so its output does not
 * depend on the batch: decode runs the same code with the tiles it gets.
 */
#define KERN_ATT_PB 64

struct kern_att_tile {
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
	size_t s_stride;	/* >= max hi + KERN_ATT_PB */
	float *buf;		/* kern_att_buf_floats(hd) floats */
	/*
	 * [nq] each query's sink logit (gpt-oss's attn_sinks: one more score,
	 * with no value row, in the softmax's max and sum), or NULL: none
	 */
	const float *sink;
};

/* Floats of a tile's buf for head size hd. */
size_t kern_att_buf_floats(int hd);

struct kern {
	const char *name;		/* "scalar", "avx2", "avx2vnni", "avx512", "neon", "neondot" (KVCHAT_KERNELS) */
	unsigned need;			/* KVC_CPU_* bits the CPU must have */
	kern_rows_f_fn *const *rows_f;		/* [KERN_NTYPE] float activations */
	kern_rows_act_fn *const *rows_act;	/* [KERN_NTYPE] int8 activations */
	kern_packed_fn *const *packed;		/* [KERN_NTYPE] packed matrices, or NULL: none */
	bool (*pack_fits)(int64_t n_in);	/* whether packed takes rows of n_in values */
	/* x (n_in values, a multiple of 32) as int8 per block of 32, q_act_prepare's d and levels */
	void (*act_prepare)(const float *x, int64_t n_in, void *act);
	void (*att_tile)(const struct kern_att_tile *t);
	/* Q8_0 cache rows (kern_kvq8_quantize): sum_i row[i0 + i] * b[i], y[i] += a * row[i0 + i], i < n */
	float (*kvq8_dot)(const void *row, int i0, const float *b, int n);
	void (*kvq8_axpy)(float *y, float a, const void *row, int i0, int n);
	/* y[i] = x[i] * w[i] / sqrt(mean(x^2) + eps), the sum of squares in double (y may alias x) */
	void (*rmsnorm)(float *y, const float *x, const float *w, int n, float eps);
	/* d[i] = x[i] as IEEE half, rounded to nearest even (q_f32_to_fp16's bits) */
	void (*f32_to_f16)(uint16_t *d, const float *x, int n);
	/*
	 * g[i] = act(g[i]) * u[i] (u NULL: times 1), act SiLU or GELU (tanh
	 * form); an element's value does not depend on n or where g starts.
	 */
	void (*act)(float *g, const float *u, int64_t n, bool gelu);
};

/* The i-th table compiled into this program, or NULL past the last. */
const struct kern *kern_list(int i);
/* Whether this CPU runs k. */
bool kern_runs(const struct kern *k);
/* The best table this CPU runs. */
const struct kern *kern_best(void);
/*
 * The table named name ("scalar", "avx2", ...); NULL, "" or "auto":
 * kern_best(). KVC_EINVAL for a name that is no table, KVC_EUNSUPPORTED
 * for one this CPU cannot run or another architecture's, each with a
 * message naming it.
 */
int kern_find(const char *name, const struct kern **out, char *err, size_t errlen);

/* Products through k's entry for t, else the scalar reference (kern.h's top). */
void kern_matmul(const struct kern *k, enum gguf_dtype t, const void *W, size_t rb, const float *x,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
void kern_matmul_act(const struct kern *k, enum gguf_dtype t, const void *W, size_t rb,
    const void *act, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* One row and one token: exactly what kern_matmul / kern_matmul_act give it. */
float kern_dot(const struct kern *k, enum gguf_dtype t, const void *row, const float *x, int64_t n);
float kern_dot_act(const struct kern *k, enum gguf_dtype t, const void *row, const void *act, int64_t n);

/*
 * Whether k has a packed kernel for t at n_in (then the backend packs the
 * matrix with q_pack at load); kern_matmul_packed runs it.
 */
bool kern_packs(const struct kern *k, enum gguf_dtype t, int64_t n_in);
void kern_matmul_packed(const struct kern *k, enum gguf_dtype t, const void *P, const void *act,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t g0, int64_t g1);

/*
 * Q8_0 cache rows: x[0..n) (n a multiple of 32) rounded to n/32 of GGUF's
 * 34-byte Q8_0 blocks at dst (fp16 scale d, then 32 int8 q; element =
 * d * q); a head's slice may start and end inside a block.
 */
void kern_kvq8_quantize(const float *x, void *dst, int n);

#endif
