/*
 * kern_int.h: the entries each instruction set's files give the tables of
 * kern.c; internal to src/kern. The x86 files are built only on x86-64,
 * the neon files only on aarch64, each with its own flags (kern.am), and
 * only called through a table the CPU runs (kern_runs).
 */
#ifndef KVC_KERN_INT_H
#define KVC_KERN_INT_H

#include "kern.h"

/* kern_scalar.c: the scalar reference, every type q_supported takes */
bool kern_scalar_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
bool kern_scalar_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
extern kern_rows_f_fn *const kern_scalar_rows_f_t[KERN_NTYPE];
extern kern_rows_act_fn *const kern_scalar_rows_act_t[KERN_NTYPE];
/* quant_iq.h's types: their block decoded once for several tokens (the neon tables use it too) */
bool kern_scalar_rows_act_iq(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
#define KERN_SCALAR_IQ_ROWS_ACT							\
	[GGML_TYPE_Q2_K] = kern_scalar_rows_act_iq, [GGML_TYPE_IQ4_NL] = kern_scalar_rows_act_iq, \
	[GGML_TYPE_IQ4_XS] = kern_scalar_rows_act_iq, [GGML_TYPE_MXFP4] = kern_scalar_rows_act_iq, \
	[GGML_TYPE_IQ3_XXS] = kern_scalar_rows_act_iq, [GGML_TYPE_IQ3_S] = kern_scalar_rows_act_iq, \
	[GGML_TYPE_IQ2_XXS] = kern_scalar_rows_act_iq, [GGML_TYPE_IQ2_XS] = kern_scalar_rows_act_iq, \
	[GGML_TYPE_IQ2_S] = kern_scalar_rows_act_iq, [GGML_TYPE_IQ1_S] = kern_scalar_rows_act_iq,	\
	[GGML_TYPE_IQ1_M] = kern_scalar_rows_act_iq
void kern_scalar_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
void kern_scalar_f32_to_f16(uint16_t *d, const float *x, int n);
void kern_scalar_act(float *g, const float *u, int64_t n, bool gelu);

/* kern_att.c: attention one query at a time, Q8_0 cache rows */
void kern_scalar_att_tile(const struct kern_att_tile *t);
float kern_scalar_kvq8_dot(const void *row, int i0, const float *b, int n);
void kern_scalar_kvq8_axpy(float *y, float a, const void *row, int i0, int n);

#if defined(__x86_64__)
#define KERN_X86 1
/* kern_avx2.c, kern_avx2_i8.c, kern_avx2_att.c, kern_avx2_vec.c, kern_avx2_pack.c */
bool kern_avx2_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
extern kern_rows_act_fn *const kern_avx2_rows_act[KERN_NTYPE];
void kern_avx2_act_prepare(const float *x, int64_t n_in, void *act);
void kern_avx2_att_tile(const struct kern_att_tile *t);
/* Query j's raw dot products in s[lo, hi) become its weights (divided by their sum). */
float kern_avx2_att_softmax(const struct kern_att_tile *t, int j);
float kern_avx2_kvq8_dot(const void *row, int i0, const float *b, int n);
void kern_avx2_kvq8_axpy(float *y, float a, const void *row, int i0, int n);
void kern_avx2_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
void kern_avx2_f32_to_f16(uint16_t *d, const float *x, int n);
void kern_avx2_act(float *g, const float *u, int64_t n, bool gelu);
/* kern_avx2_pack.c: the packed kernel (quant_pack.c's layout), half a group per vector */
extern kern_packed_fn *const kern_avx2_packed[KERN_NTYPE];
bool kern_avx2_pack_fits(int64_t n_in);
/* kern_avx2_packk.c: the packed K-quants (Q4_K, Q5_K, Q6_K), in the same arrays */
kern_packed_fn kern_avx2_packed_k;
/* kern_avx2_i8.c, kern_avx2_pack.c, kern_avx2_packk.c built with -mavxvnni (kern_x86.h's KERN_AVX2_SYM) */
extern kern_rows_act_fn *const kern_avx2vnni_rows_act[KERN_NTYPE];
extern kern_packed_fn *const kern_avx2vnni_packed[KERN_NTYPE];
bool kern_avx2vnni_pack_fits(int64_t n_in);
kern_packed_fn kern_avx2vnni_packed_k;
/* kern_avx2_iq.c: quant_iq.h's types (Q2_K, IQ*, MXFP4), in the avx2 tables */
bool kern_avx2_iq_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
struct q_iq_int;
/* q_iq_unpack of one block, the nibble types (IQ4_NL, IQ4_XS, MXFP4) with a table lookup */
void kern_avx2_iq_unpack(enum gguf_dtype t, const uint8_t *p, struct q_iq_int *o);
/* kern_avx2_iqn.c: MXFP4, IQ4_NL, IQ4_XS, Q2_K decoded in registers (false for other types) */
bool kern_avx2_iqn_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* kern_avx2_iqg.c: IQ2_XXS, IQ2_XS, IQ3_XXS decoded in registers (false for other types) */
bool kern_avx2_iqg_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* kern_avx2_iqs.c: IQ3_S, IQ2_S, IQ1_S, IQ1_M decoded in registers (false for other types) */
bool kern_avx2_iqs_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
#define KERN_AVX2_IQ_ROWS_ACT							\
	[GGML_TYPE_Q2_K] = kern_avx2_iqn_rows_act, [GGML_TYPE_IQ4_NL] = kern_avx2_iqn_rows_act,	\
	[GGML_TYPE_IQ4_XS] = kern_avx2_iqn_rows_act, [GGML_TYPE_MXFP4] = kern_avx2_iqn_rows_act,	\
	[GGML_TYPE_IQ3_XXS] = kern_avx2_iqg_rows_act, [GGML_TYPE_IQ3_S] = kern_avx2_iqs_rows_act,	\
	[GGML_TYPE_IQ2_XXS] = kern_avx2_iqg_rows_act, [GGML_TYPE_IQ2_XS] = kern_avx2_iqg_rows_act,	\
	[GGML_TYPE_IQ2_S] = kern_avx2_iqs_rows_act, [GGML_TYPE_IQ1_S] = kern_avx2_iqs_rows_act,	\
	[GGML_TYPE_IQ1_M] = kern_avx2_iqs_rows_act

/* kern_avx512.c, kern_avx512_i8.c, kern_avx512_att.c, kern_avx512_pack.c */
bool kern_avx512_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
extern kern_rows_act_fn *const kern_avx512_rows_act[KERN_NTYPE];
void kern_avx512_att_tile(const struct kern_att_tile *t);
extern kern_packed_fn *const kern_avx512_packed[KERN_NTYPE];
bool kern_avx512_pack_fits(int64_t n_in);
/* kern_avx512_packk.c: the packed K-quants (Q4_K, Q5_K, Q6_K), in the same array */
kern_packed_fn kern_avx512_packed_k;
/* kern_avx512_iq.c: quant_iq.h's types in the avx512 table */
bool kern_avx512_iq_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* kern_avx512_iqn.c: MXFP4, IQ4_NL, IQ4_XS, Q2_K decoded in registers (false for other types) */
bool kern_avx512_iqn_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* kern_avx512_iqg.c: IQ2_XXS, IQ2_XS, IQ3_XXS decoded in registers (false for other types) */
bool kern_avx512_iqg_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
/* kern_avx512_iqs.c: IQ3_S, IQ2_S, IQ1_S, IQ1_M decoded in registers (false for other types) */
bool kern_avx512_iqs_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
#define KERN_AVX512_IQ_ROWS_ACT							\
	[GGML_TYPE_Q2_K] = kern_avx512_iqn_rows_act, [GGML_TYPE_IQ4_NL] = kern_avx512_iqn_rows_act,	\
	[GGML_TYPE_IQ4_XS] = kern_avx512_iqn_rows_act, [GGML_TYPE_MXFP4] = kern_avx512_iqn_rows_act,	\
	[GGML_TYPE_IQ3_XXS] = kern_avx512_iqg_rows_act, [GGML_TYPE_IQ3_S] = kern_avx512_iqs_rows_act,	\
	[GGML_TYPE_IQ2_XXS] = kern_avx512_iqg_rows_act, [GGML_TYPE_IQ2_XS] = kern_avx512_iqg_rows_act,	\
	[GGML_TYPE_IQ2_S] = kern_avx512_iqs_rows_act, [GGML_TYPE_IQ1_S] = kern_avx512_iqs_rows_act,	\
	[GGML_TYPE_IQ1_M] = kern_avx512_iqs_rows_act
#endif

#if defined(__aarch64__)
#define KERN_ARM 1
/* kern_neon.c (any aarch64 CPU), kern_neon_dot.c (+dotprod) */
extern kern_rows_act_fn *const kern_neon_rows_act[KERN_NTYPE];
extern kern_rows_act_fn *const kern_neondot_rows_act[KERN_NTYPE];
bool kern_neon_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1);
void kern_neon_act_prepare(const float *x, int64_t n_in, void *act);
#endif

#endif
