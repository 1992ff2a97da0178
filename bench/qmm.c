/*
 * qmm: the thread CPU time of one kern_matmul_act call (int8 kernels),
 * or of one kern_matmul call for f32/f16/bf16 (float activations), for one
 * weight type and shape, and the weights' rate it implies. CPU time of the
 * calling thread counts only the time it ran, so on a machine shared with
 * other work the best of several rounds moves far less than wall-clock
 * rates do (it is still raised by a busy sibling hyperthread or a cold
 * cache). A round times enough calls back to back to last about 0.5 ms of
 * CPU time (a call on a cache-resident matrix takes a few microseconds,
 * near the clock's own cost); the figure is the best round's time per call.
 *
 *   bench/qmm TYPE N_TOK N_IN N_OUT [ROUNDS [TABLE|packed|TABLE-packed [COPIES]]]
 *   bench/qmm sweep [decode|prefill [ROUNDS [TABLE]]]
 *
 * e.g. bench/qmm q4_0 64 1024 1024 11 (prefill-shaped), bench/qmm q8_0 1
 * 1024 4864 21 (decode-shaped). Prints ms and GFLOP/s (2 flops per weight
 * and token), and the weights' read rate in GB/s. With COPIES (default 1)
 * distinct copies of the matrix, each call in a round takes the next copy:
 * with their total well past the last-level cache every call streams its
 * weights from memory, as decoding a whole model does, e.g. bench/qmm bf16
 * 1 896 4864 5 auto 256 (2.2 GB). TABLE scalar, avx2, avx512: that kernel
 * table (src/kern), auto: the best this CPU runs. packed: the best
 * table's packed kernel (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_NL,
 * MXFP4, IQ4_XS in the
 * avx2 and avx512 tables),
 * TABLE-packed that table's, each copy packed first (quant_pack.c),
 * untimed.
 *
 * sweep: the cache-resident figures of every type the decode target names
 * (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K) for each SIMD table
 * this CPU runs, GB/s of weights: decode is one token times a 2048 x 256
 * matrix (1 MiB at F16, so every type's weights stay in a 2 MiB L2),
 * prefill 128 tokens times the same matrix, in GFLOP/s; through the
 * table's packed kernel where it has one for the type (as the CPU backend
 * runs it), marked *. With TABLE, only that table's column.
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
	{ "iq1_s", GGML_TYPE_IQ1_S }, { "iq1_m", GGML_TYPE_IQ1_M },
};

#define N_TYPES (int)(sizeof types / sizeof types[0])

static bool
is_float(enum gguf_dtype t)
{
	return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

static int
type_index(const char *name)
{
	for (int i = 0; i < N_TYPES; i++)
		if (strcasecmp(name, types[i].name) == 0)
			return i;
	return -1;
}

/* One product's inputs: copies of the weights (and their packed form), the activations. */
struct job {
	const struct kern *k;
	enum gguf_dtype t;
	bool packed;
	int n_tok, copies;
	int64_t n_in, n_out, groups;
	size_t rb, wb, pb;
	uint8_t *W, *P, *act;
	float *xf, *y;
};

static void
job_free(struct job *j)
{
	free(j->W);
	free(j->P);
	free(j->act);
	free(j->xf);
	free(j->y);
}

/* Random weights quantised to t, random activations; 0, or 1 out of memory. */
static int
job_init(struct job *j)
{
	int64_t n_in = j->n_in;
	size_t ab = q_act_bytes(n_in);

	j->rb = q_row_bytes(j->t, n_in);
	j->wb = j->rb * (size_t)j->n_out;
	j->groups = (j->n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;
	j->pb = j->packed ? q_pack_bytes(j->t, n_in, j->n_out) : 0;
	j->W = malloc(j->wb * (size_t)j->copies);
	j->P = j->packed ? malloc(j->pb * (size_t)j->copies) : NULL;
	j->act = malloc(ab * (size_t)j->n_tok);
	/* on a cache line, as the CPU backend's scratch is (cpu.c) */
	j->xf = aligned_alloc(64, ((size_t)j->n_tok * (size_t)n_in * sizeof *j->xf + 63) / 64 * 64);
	j->y = malloc((size_t)j->n_tok * (size_t)j->n_out * sizeof *j->y);
	float *w = malloc((size_t)n_in * sizeof *w);
	if (!j->W || (j->packed && !j->P) || !j->act || !j->xf || !j->y || !w) {
		free(w);
		return 1;
	}
	srand(1);
	for (int64_t r = 0; r < j->n_out; r++) {
		for (int64_t i = 0; i < n_in; i++)
			w[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		q_quantize_row(j->t, w, j->W + (size_t)r * j->rb, n_in);
	}
	free(w);
	for (int c = 1; c < j->copies; c++)
		memcpy(j->W + j->wb * (size_t)c, j->W, j->wb);
	for (int tk = 0; tk < j->n_tok; tk++) {
		float *x = j->xf + (size_t)tk * (size_t)n_in;
		for (int64_t i = 0; i < n_in; i++)
			x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		if (!is_float(j->t))
			j->k->act_prepare(x, n_in, j->act + (size_t)tk * ab);
	}
	for (int c = 0; j->packed && c < j->copies; c++)
		q_pack(j->t, j->W + j->wb * (size_t)c, j->rb, n_in, j->n_out, j->P + j->pb * (size_t)c,
		    0, j->groups);
	return 0;
}

static void
job_call(const struct job *j, int c)
{
	const struct kern *k = j->k;

	if (j->packed)
		kern_matmul_packed(k, j->t, j->P + j->pb * (size_t)c, j->act, j->n_tok, j->n_in, j->y,
		    j->n_out, 0, j->groups);
	else if (is_float(j->t))
		kern_matmul(k, j->t, j->W + j->wb * (size_t)c, j->rb, j->xf, j->n_tok, j->n_in, j->y,
		    j->n_out, 0, j->n_out);
	else
		kern_matmul_act(k, j->t, j->W + j->wb * (size_t)c, j->rb, j->act, j->n_tok, j->n_in,
		    j->y, j->n_out, 0, j->n_out);
}

/* The best of `rounds` rounds' CPU seconds per call. */
static double
job_time(const struct job *j, int rounds)
{
	double t0 = cpu_now(), one;
	int calls = 1;

	job_call(j, 0);		/* warm: caches, pages, branch predictors */
	one = cpu_now() - t0;
	if (one < 5e-4)
		calls = one > 0 ? (int)(5e-4 / one) + 1 : 1000;
	if (calls < j->copies)
		calls = j->copies;
	double best = 1e30;
	for (int i = 0; i < rounds; i++) {
		t0 = cpu_now();
		for (int c = 0; c < calls; c++)
			job_call(j, c % j->copies);
		double d = (cpu_now() - t0) / calls;
		if (d < best)
			best = d;
	}
	return best;
}

/* The cache-resident table (see the top of this file). */
static int
sweep(bool prefill, int rounds, const char *only)
{
	static const char *const names[] = {
		"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k",
	};
	const struct kern *tabs[8];
	int nt = 0;

	for (int i = 0; kern_list(i) != NULL; i++)
		if (strcmp(kern_list(i)->name, "scalar") != 0 && kern_runs(kern_list(i)) && nt < 8 &&
		    (only == NULL || strcmp(kern_list(i)->name, only) == 0))
			tabs[nt++] = kern_list(i);
	if (only != NULL && nt == 0) {
		fprintf(stderr, "qmm: no SIMD table %s that this CPU runs\n", only);
		return 2;
	}
	printf("%s, %d x 2048 x 256, %s (thread CPU time, best of %d rounds)\n",
	    prefill ? "prefill" : "decode", prefill ? 128 : 1,
	    prefill ? "GFLOP/s" : "GB/s of weights", rounds);
	printf("%-6s", "type");
	for (int i = 0; i < nt; i++)
		printf(" %8s", tabs[i]->name);
	printf("\n");
	for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
		printf("%-6s", names[n]);
		for (int i = 0; i < nt; i++) {
			enum gguf_dtype t = types[type_index(names[n])].t;
			struct job j = { .k = tabs[i], .t = t, .packed = kern_packs(tabs[i], t, 2048),
			    .n_tok = prefill ? 128 : 1, .copies = 1, .n_in = 2048, .n_out = 256 };
			if (job_init(&j)) {
				fprintf(stderr, "qmm: out of memory\n");
				job_free(&j);
				return 1;
			}
			double s = job_time(&j, rounds);
			/* prefill: 2 flops per weight and token */
			printf(" %7.1f%c", (double)j.wb / s * 1e-9 * (prefill ?
			    2.0 * (double)j.n_in * (double)j.n_out * j.n_tok / (double)j.wb : 1.0),
			    j.packed ? '*' : ' ');
			fflush(stdout);
			job_free(&j);
		}
		printf("\n");
	}
	return 0;
}

int
main(int argc, char **argv)
{
	const char *table = "auto";
	char err[256];
	int ti, reps = 11;
	struct job j = { .copies = 1 };

	if (argc >= 2 && strcmp(argv[1], "sweep") == 0) {
		bool prefill = argc > 2 && strcmp(argv[2], "prefill") == 0;
		if (argc > 2 && !prefill && strcmp(argv[2], "decode") != 0) {
			fprintf(stderr, "qmm: sweep decode or sweep prefill\n");
			return 2;
		}
		reps = argc > 3 ? atoi(argv[3]) : 41;
		return reps < 1 ? 2 : sweep(prefill, reps, argc > 4 ? argv[4] : NULL);
	}
	if (argc < 5) {
		fprintf(stderr, "usage: qmm TYPE N_TOK N_IN N_OUT [ROUNDS [TABLE|packed|TABLE-packed [COPIES]]]\n"
		    "       qmm sweep [decode|prefill [ROUNDS [TABLE]]]\n");
		return 2;
	}
	ti = type_index(argv[1]);
	j.n_tok = atoi(argv[2]);
	j.n_in = atoll(argv[3]);
	j.n_out = atoll(argv[4]);
	if (argc > 5)
		reps = atoi(argv[5]);
	if (argc > 6) {
		/* packed, or TABLE-packed */
		size_t n = strlen(argv[6]);
		static char name[32];
		if (strcmp(argv[6], "packed") == 0) {
			j.packed = true;
		} else if (n > 7 && n < sizeof name + 7 && strcmp(argv[6] + n - 7, "-packed") == 0) {
			j.packed = true;
			memcpy(name, argv[6], n - 7);
			name[n - 7] = '\0';
			table = name;
		} else {
			table = argv[6];
		}
	}
	if (argc > 7)
		j.copies = atoi(argv[7]);
	if (ti < 0 || j.n_tok < 1 || j.n_out < 1 || reps < 1 || j.copies < 1 ||
	    q_row_bytes(types[ti].t, j.n_in) == 0) {
		fprintf(stderr, "qmm: need a type (q8_0 q4_0 q4_1 q5_0 q5_1 q3_k q4_k q5_k q6_k q2_k iq4_nl iq4_xs mxfp4 "
		    "iq3_xxs iq3_s iq2_xxs iq2_xs iq2_s iq1_s iq1_m f32 "
		    "f16 bf16), N_IN a multiple of its block, N_TOK, N_OUT, ROUNDS, COPIES >= 1\n");
		return 2;
	}
	if (kern_find(table, &j.k, err, sizeof err)) {
		fprintf(stderr, "qmm: %s\n", err);
		return 2;
	}
	j.t = types[ti].t;
	if (j.packed && !kern_packs(j.k, j.t, j.n_in)) {
		fprintf(stderr, "qmm: no packed kernel for %s on this CPU\n", types[ti].name);
		return 2;
	}
	if (job_init(&j)) {
		fprintf(stderr, "qmm: out of memory\n");
		job_free(&j);
		return 1;
	}
	double best = job_time(&j, reps);
	printf("%s (%s%s) %d tok x %lld x %lld: %.3f ms, %.1f GFLOP/s, %.2f GB/s of weights\n",
	    types[ti].name, j.k->name, j.packed ? " packed" : "", j.n_tok, (long long)j.n_in,
	    (long long)j.n_out, best * 1e3, 2.0 * (double)j.n_in * (double)j.n_out * j.n_tok / best * 1e-9,
	    (double)j.wb / best * 1e-9);
	job_free(&j);
	return 0;
}
