/*
 * qmm: the thread CPU time of one kern_matmul_act call (int8 kernels),
 * or of one kern_matmul call for f32/f16/bf16 (float activations), the
 * minimum over repeats, for one weight type and shape. CPU time of the
 * calling thread counts only the time it ran, so on a machine shared with
 * other work the minimum moves far less than wall-clock rates do (it is
 * still raised by a busy sibling hyperthread or a cold cache).
 *
 *   bench/qmm TYPE N_TOK N_IN N_OUT [REPEATS [scalar|avx2|avx512|auto|packed [COPIES]]]
 *
 * e.g. bench/qmm q4_0 64 1024 1024 11 (prefill-shaped), bench/qmm q8_0 1
 * 1024 4864 21 (decode-shaped). Prints ms and GFLOP/s (2 flops per weight
 * and token), and the weights' read rate in GB/s. With COPIES (default 1)
 * distinct copies of the matrix, a repeat is one call on each copy in turn
 * and its time their mean: with their total well past the last-level cache
 * every call streams its weights from memory, as decoding a whole model
 * does, e.g. bench/qmm bf16 1 896 4864 5 auto 256 (2.2 GB). scalar, avx2,
 * avx512: that kernel table (src/kern), auto: the best this CPU runs.
 * packed: the best table's packed kernel (Q8_0, Q4_0, Q5_0 in the avx512
 * table), each copy packed first (quant_pack.c), untimed.
 */
#include "config.h"

#include "kern/kern.h"
#include "quant/quant_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static double
cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const struct { const char *name; enum gguf_dtype t; } types[] = {
	{ "q8_0", GGML_TYPE_Q8_0 }, { "q4_0", GGML_TYPE_Q4_0 }, { "q4_1", GGML_TYPE_Q4_1 },
	{ "q5_0", GGML_TYPE_Q5_0 }, { "q5_1", GGML_TYPE_Q5_1 }, { "q3_k", GGML_TYPE_Q3_K },
	{ "q4_k", GGML_TYPE_Q4_K }, { "q5_k", GGML_TYPE_Q5_K }, { "q6_k", GGML_TYPE_Q6_K },
	{ "f32", GGML_TYPE_F32 }, { "f16", GGML_TYPE_F16 }, { "bf16", GGML_TYPE_BF16 },
	{ "q2_k", GGML_TYPE_Q2_K }, { "iq4_nl", GGML_TYPE_IQ4_NL }, { "iq4_xs", GGML_TYPE_IQ4_XS },
	{ "mxfp4", GGML_TYPE_MXFP4 }, { "iq3_xxs", GGML_TYPE_IQ3_XXS }, { "iq3_s", GGML_TYPE_IQ3_S },
	{ "iq2_xxs", GGML_TYPE_IQ2_XXS }, { "iq2_xs", GGML_TYPE_IQ2_XS }, { "iq2_s", GGML_TYPE_IQ2_S },
};

static bool
is_float(enum gguf_dtype t)
{
	return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

int
main(int argc, char **argv)
{
	const char *table = "auto";
	const struct kern *k;
	char err[256];
	bool packed = false;
	int ti = -1, n_tok, reps = 11, copies = 1;
	int64_t n_in, n_out;

	if (argc < 5) {
		fprintf(stderr, "usage: qmm TYPE N_TOK N_IN N_OUT [REPEATS [scalar|avx2|avx512|auto|packed [COPIES]]]\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strcasecmp(argv[1], types[i].name) == 0)
			ti = (int)i;
	n_tok = atoi(argv[2]);
	n_in = atoll(argv[3]);
	n_out = atoll(argv[4]);
	if (argc > 5)
		reps = atoi(argv[5]);
	if (argc > 6 && strcmp(argv[6], "packed") == 0)
		packed = true;
	else if (argc > 6)
		table = argv[6];
	if (argc > 7)
		copies = atoi(argv[7]);
	if (ti < 0 || n_tok < 1 || n_out < 1 || reps < 1 || copies < 1 || q_row_bytes(types[ti].t, n_in) == 0) {
		fprintf(stderr, "qmm: need a type (q8_0 q4_0 q4_1 q5_0 q5_1 q3_k q4_k q5_k q6_k q2_k iq4_nl iq4_xs mxfp4 "
		    "iq3_xxs iq3_s iq2_xxs iq2_xs iq2_s f32 "
		    "f16 bf16), N_IN a multiple of its block, N_TOK, N_OUT, REPEATS, COPIES >= 1\n");
		return 2;
	}
	if (kern_find(table, &k, err, sizeof err)) {
		fprintf(stderr, "qmm: %s\n", err);
		return 2;
	}
	enum gguf_dtype t = types[ti].t;
	if (packed && !kern_packs(k, t, n_in)) {
		fprintf(stderr, "qmm: no packed kernel for %s on this CPU\n", types[ti].name);
		return 2;
	}
	size_t rb = q_row_bytes(t, n_in), ab = q_act_bytes(n_in), wb = rb * (size_t)n_out;
	uint8_t *W = malloc(wb * (size_t)copies), *act = malloc(ab * (size_t)n_tok);
	float *xf = malloc((size_t)n_tok * (size_t)n_in * sizeof *xf);
	float *w = malloc((size_t)n_in * sizeof *w), *x = malloc((size_t)n_in * sizeof *x);
	float *y = malloc((size_t)n_tok * (size_t)n_out * sizeof *y);
	if (!W || !act || !xf || !w || !x || !y) {
		fprintf(stderr, "qmm: out of memory\n");
		return 1;
	}
	srand(1);
	for (int64_t r = 0; r < n_out; r++) {
		for (int64_t i = 0; i < n_in; i++)
			w[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		q_quantize_row(t, w, W + (size_t)r * rb, n_in);
	}
	for (int c = 1; c < copies; c++)
		memcpy(W + wb * (size_t)c, W, wb);
	for (int tk = 0; tk < n_tok; tk++) {
		for (int64_t i = 0; i < n_in; i++)
			x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		memcpy(xf + (size_t)tk * (size_t)n_in, x, (size_t)n_in * sizeof *x);
		if (!is_float(t))
			k->act_prepare(x, n_in, act + (size_t)tk * ab);
	}
	size_t pb = packed ? q_pack_bytes(t, n_in, n_out) : 0;
	int64_t groups = (n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;
	uint8_t *P = packed ? malloc(pb * (size_t)copies) : NULL;
	if (packed && P == NULL) {
		fprintf(stderr, "qmm: out of memory\n");
		return 1;
	}
	for (int c = 0; packed && c < copies; c++)
		q_pack(t, W + wb * (size_t)c, rb, n_in, n_out, P + pb * (size_t)c, 0, groups);
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		double d = 0;
		for (int c = 0; c < copies; c++) {
			const uint8_t *Wc = W + wb * (size_t)c;
			double t0 = cpu_now();
			if (packed)
				kern_matmul_packed(k, t, P + pb * (size_t)c, act, n_tok, n_in, y, n_out, 0, groups);
			else if (is_float(t))
				kern_matmul(k, t, Wc, rb, xf, n_tok, n_in, y, n_out, 0, n_out);
			else
				kern_matmul_act(k, t, Wc, rb, act, n_tok, n_in, y, n_out, 0, n_out);
			d += cpu_now() - t0;
		}
		d /= copies;
		if (d < best)
			best = d;
	}
	printf("%s (%s) %d tok x %lld x %lld: %.3f ms, %.1f GFLOP/s, %.2f GB/s of weights\n",
	    types[ti].name, packed ? "packed" : k->name, n_tok, (long long)n_in,
	    (long long)n_out, best * 1e3, 2.0 * (double)n_in * (double)n_out * n_tok / best * 1e-9,
	    (double)wb / best * 1e-9);
	free(P);
	free(W);
	free(xf);
	free(act);
	free(w);
	free(x);
	free(y);
	return 0;
}
