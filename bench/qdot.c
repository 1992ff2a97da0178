/*
 * qdot: throughput of kern_matmul (float activations) and
 * kern_matmul_act (int8 activations) per weight type, in GB/s of weight
 * bytes, for a matrix much larger than the caches (decode: one token) and
 * for a batch (prefill-like: n_tok tokens, GFLOP/s). Threads split the rows
 * as the CPU backend does. An int8 column of 0 means no integer kernel.
 *
 *   bench/qdot [-s MiB] [-n N_IN (multiple of 32; K-quants: of 256)] [-t THREADS] [-b BATCH] [-r REPEATS]
 *              [-T TYPE (one type only, e.g. q4_0: for callgrind)] [--scalar]
 * The kernel table is KVCHAT_KERNELS's (kern_find), --scalar forces "scalar".
 */
#include "config.h"

#include "kern/kern.h"
#include "quant/quant_ref.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

struct job {
	bool act;		/* integer kernels on prepared activations */
	const void *xa;		/* prepared activations (q_act_prepare) */
	const struct kern *k;
	enum gguf_dtype t;
	const uint8_t *W;
	size_t rb;
	const float *x;
	int n_tok;
	int64_t n_in, n_out, r0, r1;
	float *y;
};

static void *
run(void *arg)
{
	struct job *j = arg;

	if (j->act)
		kern_matmul_act(j->k, j->t, j->W, j->rb, j->xa, j->n_tok, j->n_in, j->y, j->n_out, j->r0, j->r1);
	else
		kern_matmul(j->k, j->t, j->W, j->rb, j->x, j->n_tok, j->n_in, j->y, j->n_out, j->r0, j->r1);
	return NULL;
}

static double
matmul(struct job *base, int nt)
{
	pthread_t th[64];
	struct job jobs[64];
	int64_t per = (base->n_out + nt - 1) / nt;
	bool made[64] = {false};
	double t0 = kvc_now();

	/* the activations are prepared once per matmul, before the threads split the rows */
	if (base->act)
		for (int tok = 0; tok < base->n_tok; tok++)
			base->k->act_prepare(base->x + (size_t)tok * (size_t)base->n_in, base->n_in,
			    (uint8_t *)base->xa + (size_t)tok * q_act_bytes(base->n_in));

	for (int i = 0; i < nt; i++) {
		jobs[i] = *base;
		jobs[i].r0 = i * per;
		jobs[i].r1 = (i + 1) * per < base->n_out ? (i + 1) * per : base->n_out;
		if (i > 0)
			made[i] = pthread_create(&th[i], NULL, run, &jobs[i]) == 0;
		if (i > 0 && !made[i])
			run(&jobs[i]);
	}
	run(&jobs[0]);
	for (int i = 1; i < nt; i++)
		if (made[i])
			pthread_join(th[i], NULL);
	return kvc_now() - t0;
}

int
main(int argc, char **argv)
{
	static const enum gguf_dtype types[] = {
		GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
		GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
		GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
	};
	static const char *const names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
		"Q3_K", "Q4_K", "Q5_K", "Q6_K"};
	size_t mib = 256;
	int64_t n_in = 4096;
	int nt = 1, batch = 16, reps = 3, o;
	const char *table = getenv("KVCHAT_KERNELS");
	const struct kern *k;
	char err[256];
	const char *only = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--scalar") == 0) {
			table = "scalar";
			memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
			argc--;
			i--;
		}
	}
	while ((o = getopt(argc, argv, "s:n:t:b:r:T:")) != -1) {
		switch (o) {
		case 's': mib = (size_t)atol(optarg); break;
		case 'n': n_in = atol(optarg); break;
		case 't': nt = atoi(optarg); break;
		case 'b': batch = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'T': only = optarg; break;
		default:
			fprintf(stderr, "usage: qdot [-s MiB] [-n N_IN] [-t THREADS] [-b BATCH] [-r REPEATS] [-T TYPE] [--scalar]\n");
			return 2;
		}
	}
	if (kern_find(table, &k, err, sizeof err)) {
		fprintf(stderr, "qdot: %s\n", err);
		return 2;
	}
	if (nt < 1 || nt > 64 || n_in <= 0 || n_in % 32 != 0 || batch < 1) {
		fprintf(stderr, "qdot: need 1 <= threads <= 64, N_IN a multiple of 32, batch >= 1\n");
		return 2;
	}
	float *x = malloc((size_t)n_in * (size_t)batch * sizeof *x), *w = malloc((size_t)n_in * sizeof *w);
	uint64_t s = 88172645463325252ull;
	for (int64_t i = 0; i < n_in * batch; i++) {
		s ^= s << 13; s ^= s >> 7; s ^= s << 17;
		x[i] = (float)(s >> 40) / 16777216.0f - 0.5f;
	}
	printf("kernels %s, %d thread(s), n_in %lld, %zu MiB of weights per type, batch %d\n",
	    k->name, nt, (long long)n_in, mib, batch);
	void *xa = malloc(q_act_bytes(n_in) * (size_t)batch);
	printf("weight GB/s per decode matmul (1 token), GFLOP/s for a batch of %d tokens;\n"
	    "int8: activations rounded to int8 per 32 (kern_matmul_act), float: kern_matmul\n", batch);
	printf("type   float GB/s  int8 GB/s  float GFLOP/s  int8 GFLOP/s\n");
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum gguf_dtype t = types[ti];
		size_t rb = q_row_bytes(t, n_in);
		if (only != NULL && strcasecmp(only, names[ti]) != 0)
			continue;
		if (rb == 0) {	/* the K-quants need N_IN % 256 == 0 */
			printf("%-5s  (rows of %lld are not whole blocks)\n", names[ti], (long long)n_in);
			continue;
		}
		int64_t n_out = (int64_t)((mib << 20) / rb);
		uint8_t *W = malloc((size_t)n_out * rb);
		float *y = malloc((size_t)n_out * (size_t)batch * sizeof *y);
		if (W == NULL || y == NULL) {
			fprintf(stderr, "qdot: out of memory\n");
			return 1;
		}
		/* 16 distinct random rows, repeated: the bytes differ in cache lines, not in content */
		for (int r = 0; r < 16 && r < n_out; r++) {
			for (int64_t i = 0; i < n_in; i++) {
				s ^= s << 13; s ^= s >> 7; s ^= s << 17;
				w[i] = (float)(s >> 40) / 16777216.0f - 0.5f;
			}
			q_quantize_row(t, w, W + (size_t)r * rb, n_in);
		}
		for (int64_t r = 16; r < n_out; r++)
			memcpy(W + (size_t)r * rb, W + (size_t)(r % 16) * rb, rb);
		double res[2][2] = {{0, 0}, {0, 0}};	/* [act][decode GB/s, batch GFLOP/s] */
		int64_t rows_b = n_out / 8 > 0 ? n_out / 8 : n_out;
		for (int act = 0; act < 2; act++) {
			if (act && !q_act_supported(t))
				continue;
			struct job j = {act == 1, xa, k, t, W, rb, x, 1, n_in, n_out, 0, n_out, y};
			double best = 1e30, bestb = 1e30;
			for (int r = 0; r < reps; r++) {
				double tt = matmul(&j, nt);
				best = tt < best ? tt : best;
			}
			/* a batch over an eighth of the rows: each row is reused from cache per token */
			j.n_tok = batch;
			j.n_out = rows_b;
			for (int r = 0; r < reps; r++) {
				double tt = matmul(&j, nt);
				bestb = tt < bestb ? tt : bestb;
			}
			res[act][0] = (double)n_out * (double)rb / best / 1e9;
			res[act][1] = 2.0 * (double)rows_b * (double)n_in * batch / bestb / 1e9;
		}
		printf("%-5s  %10.2f  %9.2f  %13.2f  %12.2f\n", names[ti], res[0][0], res[1][0], res[0][1], res[1][1]);
		free(W);
		free(y);
	}
	free(x);
	free(w);
	free(xa);
	return 0;
}
