/*
 * sub_bench.c: kvchat bench: prefill and decode speed of a model, median of
 * several runs, and the memory bandwidth decode achieves (decode is bound by
 * reading every weight plus the KV cache once per token).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sub_common.h"
#include "cli/progress.h"
#include "sampler/sampler.h"
#include "engine/engine.h"

static const char bench_usage[] =
    "usage: kvchat bench -m FILE [-p 512] [-n 128] [-d 0] [--threads N] [-r REPS]\n"
    "                    [--kv-type f16|f32|q8_0] [--device auto|cpu|cuda] [--gpu N]\n";

static int
usage(const char *why, const char *arg)
{
	return sub_usage("bench", bench_usage, why, arg);
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
median(double *v, int n)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* What the command line asks for. */
struct bench_opts {
	struct kvc_engine_params ep;
	const char *model;
	long n_p;	/* prompt tokens, timed as one prefill */
	long n_n;	/* tokens decoded one at a time */
	long depth;	/* history prefilled once, untimed, before each timed prefill (TTFT after it) */
	long reps;	/* runs, of which the median is reported */
};

/* 0 to go on, -1 after printing --help, or 2 after a usage error. */
static int
parse_args(int argc, char **argv, struct bench_opts *o)
{
	/* Every option but --help takes a value: step over both. */
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL, *why;
		int eo;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(bench_usage, stdout);
			return -1;
		} else if (val == NULL) {
			return usage("option needs a value or is unknown", a);
		} else if ((eo = sub_engine_option(a, val, &o->ep, &why)) != 0) {
			if (eo < 0)
				return usage(why, val);
		} else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
			o->model = val;
		} else if (strcmp(a, "-p") == 0) {
			if (kvc_parse_long(val, 0, 1L << 20, &o->n_p) != KVC_OK)
				return usage("bad -p", val);
		} else if (strcmp(a, "-n") == 0) {
			if (kvc_parse_long(val, 0, 1L << 20, &o->n_n) != KVC_OK)
				return usage("bad -n", val);
		} else if (strcmp(a, "-d") == 0 || strcmp(a, "--depth") == 0) {
			if (kvc_parse_long(val, 0, 1L << 20, &o->depth) != KVC_OK)
				return usage("bad -d", val);
		} else if (strcmp(a, "-r") == 0 || strcmp(a, "--reps") == 0) {
			if (kvc_parse_long(val, 1, 15, &o->reps) != KVC_OK)
				return usage("bad -r (1..15)", val);
		} else {
			return usage("unknown argument", a);
		}
	}
	if (o->model == NULL)
		return usage("no model given (-m FILE)", NULL);
	if (o->n_p + o->n_n < 1)
		return usage("nothing to measure (-p 0 -n 0)", NULL);
	return 0;
}

/* The model, its weight types, and the table of medians and achieved bandwidth. */
static void
report(struct kvc_engine *e, const struct bench_opts *o, double *pre, double *dec, int n_runs)
{
	const struct kvc_model *m = eng_model(e);
	double pre_med = median(pre, n_runs), dec_med = median(dec, n_runs);
	double p0 = (double)o->depth + (o->n_p > 0 ? (double)o->n_p : 1);
	/* decode step k attends over p0 + k + 1 positions: mean over k in [0, n) */
	double kv_per_tok = (double)eng_kv_bytes_per_pos(e) * (p0 + 0.5 * (double)(o->n_n + 1));
	double bytes_per_tok = (double)m->weight_bytes + kv_per_tok;
	const struct gguf_file *f = eng_gguf(e);
	double by_type[GGML_TYPE_COUNT] = { 0 };

	printf("model:   %s (%s, %.1f M params", o->model, model_arch_name(m->hp.arch), (double)m->n_params / 1e6);
	/* experts: only n_expert_used of each layer's are read per token, and counted so */
	if (m->hp.n_expert > 0)
		printf(", %.1f M active: %d of %d experts", (double)m->n_params_active / 1e6,
		    m->hp.n_expert_used, m->hp.n_expert);
	printf(", %.1f MiB read per token)\n", (double)m->weight_bytes / (1024.0 * 1024.0));
	/* Files called "Q4_K" mix types; say which, by size. */
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor(f, i);

		if ((int)t->type >= 0 && t->type < GGML_TYPE_COUNT)
			by_type[t->type] += (double)t->nbytes;
	}
	printf("weights:");
	for (int t = 0; t < GGML_TYPE_COUNT; t++)
		if (by_type[t] > 0)
			printf(" %s %.1f MiB", gguf_dtype_name((enum gguf_dtype)t),
			    by_type[t] / (1024.0 * 1024.0));
	printf("\n");
	printf("backend: %s, threads %d, CPU kernels %s, KV cache %s; median of %d run%s\n",
	    eng_backend_name(e), o->ep.n_threads > 0 ? o->ep.n_threads : kvc_n_cores(), cli_kernels_name(),
	    gguf_dtype_name(eng_kv_type(e)), n_runs, n_runs == 1 ? "" : "s");
	printf("\n| test    | tokens | tok/s    | bytes read/token | achieved GB/s |\n");
	printf("|---------|--------|----------|------------------|---------------|\n");
	if (o->depth > 0)
		printf("history: %ld tokens before each run's prefill (prefilled once, not timed); time to "
		    "first token of the prefill: %.1f ms\n", o->depth, pre_med > 0 ? 1e3 * (double)o->n_p / pre_med : 0);
	if (o->n_p > 0)
		printf("| prefill | %6ld | %8.2f |                  |               |\n", o->n_p,
		    pre_med);
	if (o->n_n > 0)
		printf("| decode  | %6ld | %8.2f | %13.1f MB | %13.2f |\n", o->n_n, dec_med,
		    bytes_per_tok / 1e6, bytes_per_tok * dec_med / 1e9);
}

/* One decoded token: the model's greedy choice, where a chat makes it (on CUDA the id alone comes back). */
static int
decode_one(struct kvc_engine *e, struct kvc_seq *s, char *err, size_t errlen)
{
	struct eng_sample_req greedy = { 0 };
	uint64_t rng;
	int32_t id;

	if (eng_seq_sample(s, &greedy, &id, &rng, err, errlen) != 0)
		id = smp_argmax(eng_seq_logits(s), eng_n_vocab(e));
	return eng_seq_append(s, &id, 1, NULL, err, errlen);
}

int
sub_bench(int argc, char **argv)
{
	struct bench_opts o = {
		.ep = kvc_engine_default_params(), .n_p = 512, .n_n = 128, .reps = 3,
	};
	struct kvc_engine *e = NULL;
	struct kvc_seq *s = NULL;
	int32_t *prompt = NULL;
	double pre[16], dec[16];
	int n_runs = 0, rc;
	char err[512] = "";

	o.ep.kernels = cli_kernels();
	if ((rc = parse_args(argc, argv, &o)) != 0)
		return rc < 0 ? 0 : rc;
	rc = 1;
	/* Exactly the positions the benchmark uses, whatever the model's own context. */
	o.ep.n_ctx = (int)(o.depth + o.n_p + o.n_n + 1);
	o.ep.notice = progress_notice;	/* why --device auto runs on the CPU */
	/* a mixture's experts all packed with the load, as llama-bench's repacking load does */
	o.ep.pack_experts_now = true;
	if ((rc = sub_eng_open(&e, o.model, &o.ep, err, sizeof err)) != 0) {
		fprintf(stderr, "kvchat: bench: %s\n", err);
		return rc == KVC_EINTR ? 130 : 1;
	}
	rc = 1;
	if (eng_seq_new(e, &s, err, sizeof err) != 0)
		goto fail;
	prompt = malloc((size_t)(o.depth + o.n_p + 1) * sizeof *prompt);
	if (prompt == NULL) {
		snprintf(err, sizeof err, "out of memory");
		goto fail;
	}
	/* A fixed pseudo-random prompt: the same work on every run and every build. */
	for (long i = 0; i <= o.depth + o.n_p; i++)
		prompt[i] = (int32_t)(((uint64_t)i * 2654435761u + 17) % (uint64_t)eng_n_vocab(e));
	/* the history once: each run truncates back to it and times only its own prefill */
	if (o.depth > 0 && eng_seq_append(s, prompt, (int)o.depth, NULL, err, sizeof err) != 0)
		goto fail;

	/*
	 * One untimed run first, as llama-bench's warm-up: the prompt's prefill
	 * and one decoded token. What a model's first tokens do once (the
	 * cache's pages are touched for the first time) is not the speed of its
	 * prefill or decode; nor is packing experts, done with the load here.
	 */
	eng_seq_truncate(s, (int)o.depth);
	if (eng_seq_append(s, prompt + o.depth, o.n_p > 0 ? (int)o.n_p : 1, NULL, err, sizeof err) != 0 ||
	    (o.n_n > 0 && decode_one(e, s, err, sizeof err) != 0))
		goto fail;
	for (int r = 0; r < o.reps; r++) {
		struct eng_stats st;
		double t0, t1;

		eng_seq_truncate(s, (int)o.depth);
		/* With -p 0 decoding starts from one token, which is not timed. */
		if (eng_seq_append(s, prompt + o.depth, o.n_p > 0 ? (int)o.n_p : 1, &st, err, sizeof err) != 0)
			goto fail;
		pre[r] = o.n_p > 0 ? (double)o.n_p / st.t_prefill : 0;
		t0 = kvc_now();
		for (long k = 0; k < o.n_n; k++)
			if (decode_one(e, s, err, sizeof err) != 0)
				goto fail;
		t1 = kvc_now();
		dec[r] = o.n_n > 0 ? (double)o.n_n / (t1 - t0) : 0;
		n_runs++;
		fprintf(stderr, "kvchat: bench: run %d/%ld: prefill %.2f tok/s, decode %.2f tok/s\n",
		    r + 1, o.reps, pre[r], dec[r]);
		/* Long runs on a slow machine: one more is enough for a median of two. */
		if (r >= 1 && st.t_prefill + (t1 - t0) > 120)
			break;
	}
	report(e, &o, pre, dec, n_runs);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "kvchat: bench: %s\n", err);
out:
	free(prompt);
	eng_seq_free(s);
	eng_close(e);
	return rc;
}
