/*
 * kern_scalar.c: the scalar table's products and element-wise kernels,
 * built for any CPU. The products are quant's reference (q_dot, q_dot_act)
 * row by row, token by token; every SIMD table falls back to them for a
 * type or shape it has no entry for.
 */
#include "kern_int.h"
#include "quant/quant_iq.h"

#include <math.h>

/* sqrt(2/pi) and the cubic coefficient of the tanh form of GELU */
#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f

bool
kern_scalar_rows_f(enum gguf_dtype t, const uint8_t *W, size_t rb, const float *x, int n_tok,
    int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		for (int tok = 0; tok < n_tok; tok++)
			y[(size_t)tok * (size_t)n_out + (size_t)r] =
			    q_dot(t, W + (size_t)r * rb, x + (size_t)tok * (size_t)n_in, n_in);
	return true;
}

bool
kern_scalar_rows_act(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		for (int tok = 0; tok < n_tok; tok++)
			y[(size_t)tok * (size_t)n_out + (size_t)r] =
			    q_dot_act(t, W + (size_t)r * rb, act + (size_t)tok * ab, n_in);
	return true;
}

/*
 * quant_iq.h's types: quant's loop that decodes a row's block once for up
 * to Q_IQ_TOKENS tokens, each result q_dot_act's bit for bit.
 */
bool
kern_scalar_rows_act_iq(enum gguf_dtype t, const uint8_t *W, size_t rb, const uint8_t *act,
    size_t ab, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	q_iq_matmul_rows_act(t, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
	return true;
}

/* Every type of quant.h: the reference takes them all. */
#define ALL_Q(fn)								\
	[GGML_TYPE_Q8_0] = fn, [GGML_TYPE_Q4_0] = fn, [GGML_TYPE_Q4_1] = fn,	\
	[GGML_TYPE_Q5_0] = fn, [GGML_TYPE_Q5_1] = fn, [GGML_TYPE_Q3_K] = fn,	\
	[GGML_TYPE_Q4_K] = fn, [GGML_TYPE_Q5_K] = fn, [GGML_TYPE_Q6_K] = fn

kern_rows_f_fn *const kern_scalar_rows_f_t[KERN_NTYPE] = {
	[GGML_TYPE_F32] = kern_scalar_rows_f, [GGML_TYPE_F16] = kern_scalar_rows_f,
	[GGML_TYPE_BF16] = kern_scalar_rows_f, ALL_Q(kern_scalar_rows_f),
};

kern_rows_act_fn *const kern_scalar_rows_act_t[KERN_NTYPE] = {
	ALL_Q(kern_scalar_rows_act), KERN_SCALAR_IQ_ROWS_ACT,
};

void
kern_scalar_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
	double ss = 0;
	float sc;
	int i;

	for (i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	sc = (float)(1.0 / sqrt(ss / n + eps));
	for (i = 0; i < n; i++)
		y[i] = x[i] * sc * w[i];
}

void
kern_scalar_f32_to_f16(uint16_t *d, const float *x, int n)
{
	for (int i = 0; i < n; i++)
		d[i] = q_f32_to_fp16(x[i]);
}

/*
 * act(x) through libm, as x / (1 + e^(-s)): SiLU with s = x, GELU's tanh
 * form 0.5 x (1 + tanh z) with s = 2z (1 + tanh z = 2 / (1 + e^(-2z))), the
 * form the SIMD tables use. Written with tanhf, GELU lost every digit below
 * x = -9 (1 + tanh z rounds to 0 there: -0 for about -1e-30, test_act.c).
 */
static float
act1(float x, bool gelu)
{
	float s = gelu ? 2 * GELU_K0 * x * (1.0f + GELU_K1 * x * x) : x;

	return x / (1.0f + expf(-s));
}

void
kern_scalar_act(float *g, const float *u, int64_t n, bool gelu)
{
	for (int64_t i = 0; i < n; i++)
		g[i] = u != NULL ? act1(g[i], gelu) * u[i] : act1(g[i], gelu);
}
