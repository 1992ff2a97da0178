/*
 * sub_generate.c: kvchat generate: raw completion (no chat template).
 * Generated text (or ids) to stdout as it comes; timings to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sub_common.h"
#include "cli/progress.h"
#include "conv/conv.h"
#include "engine/engine.h"
#include "sampler/sampler.h"

static const char gen_usage[] =
    "usage: kvchat generate -m FILE [-p TEXT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "                       [--min-p P] [--repeat-penalty R] [--seed S] [--ids] [--threads N]\n"
    "                       [--ctx N] [--kv-type f16|f32|q8_0] [--device auto|cpu|cuda] [--gpu N]\n"
    "                       [--draft MODEL | --lookup N] [--spec-k K]\n"
    "                       [--prompt-ids ID,...] [--logprobs K] [--json] [--force ID,...]\n";

static int
usage(const char *why, const char *arg)
{
	return sub_usage("generate", gen_usage, why, arg);
}

struct gen_opts {
	struct kvc_engine_params ep;
	struct conv_settings set;	/* only set.smp: -n is not max_tokens */
	const char *model, *prompt;
	long n_predict;			/* -1: the default */
	bool ids;			/* print ids, not text */
	const char *draft;		/* --draft MODEL, or NULL */
	long lookup;			/* --lookup N (0: off) */
	long spec_k;			/* --spec-k K: proposals per pass */
	bool json;			/* --json: one JSON object per step */
	long logprobs;			/* --logprobs K (0: none) */
	struct kvc_tokens prompt_ids;	/* --prompt-ids: the prompt as it is */
	struct kvc_tokens force;	/* --force: teacher forcing */
	bool have_prompt_ids, have_force;
};

/*
 * "2,651,9" or "2 651 9" appended to out: decimal ids, each separated from
 * the next by one comma or by spaces (both may be padded with spaces).
 * An empty entry ("1,,2", a comma at either end), a sign ("-0", "+1") or
 * any other character is KVC_EINVAL; KVC_ENOMEM when out cannot grow.
 */
static int
parse_ids(const char *s, struct kvc_tokens *out)
{
	char buf[16];
	long v;
	size_t n, sp;

	s += strspn(s, " ");
	if (*s == '\0')
		return KVC_EINVAL;
	while (*s) {
		n = strspn(s, "0123456789");
		if (n == 0 || n >= sizeof buf)
			return KVC_EINVAL;
		memcpy(buf, s, n);
		buf[n] = 0;
		if (kvc_parse_long(buf, 0, INT32_MAX, &v) != KVC_OK)
			return KVC_EINVAL;
		if (kvc_tokens_push(out, (int32_t)v) != KVC_OK)
			return KVC_ENOMEM;
		s += n;
		sp = strspn(s, " ");
		s += sp;
		if (*s == ',') {
			s++;
			s += strspn(s, " ");
			if (*s == '\0')
				return KVC_EINVAL;	/* a comma with nothing after it */
		} else if (sp == 0 && *s != '\0') {
			return KVC_EINVAL;
		}
	}
	return KVC_OK;
}

/* --prompt-ids and --force: the ids, and that they were given. */
static int
prompt_ids_opt(void *arg, const char *val)
{
	struct gen_opts *o = arg;

	o->have_prompt_ids = true;
	return parse_ids(val, &o->prompt_ids);
}

static int
force_opt(void *arg, const char *val)
{
	struct gen_opts *o = arg;

	o->have_force = true;
	return parse_ids(val, &o->force);
}

/*
 * The command line into o by generate's option table (with the engine
 * options, --ctx and the settings table's sampler rows): -1 to go on, else
 * the exit status (0 after --help, 2 for a usage error).
 */
static int
parse_args(int argc, char **argv, struct gen_opts *o)
{
	const struct sub_opt opts[] = {
		SUB_STR("--model", "-m", &o->model),
		SUB_STR("--prompt", "-p", &o->prompt),
		SUB_FN("--prompt-ids", NULL, prompt_ids_opt, o,
		    "bad --prompt-ids (token ids separated by commas)"),
		SUB_FN("--force", NULL, force_opt, o, "bad --force (token ids separated by commas)"),
		SUB_LONG("--logprobs", NULL, &o->logprobs, 1, 1000, "bad --logprobs (1 to 1000)"),
		SUB_LONG("-n", NULL, &o->n_predict, 0, 1L << 30, "bad -n"),
		SUB_STR("--draft", NULL, &o->draft),
		SUB_LONG("--lookup", NULL, &o->lookup, 1, 64, "bad --lookup (1..64)"),
		SUB_LONG("--spec-k", NULL, &o->spec_k, 1, CONV_SPEC_MAX, "bad --spec-k (1..16)"),
		SUB_FLAG("--ids", NULL, &o->ids),
		SUB_FLAG("--json", NULL, &o->json),
		SUB_END,
	};
	const struct sub_opts_spec spec = {
		.name = "generate", .usage = gen_usage, .opts = opts,
		.ep = &o->ep, .ctx = true, .set = &o->set,
	};
	int rc = sub_parse_opts(&spec, argc, argv);

	/* The one range generate has narrower than the table's: a penalty > 0. */
	if (rc < 0 && o->set.smp.repeat_penalty <= 0)
		rc = usage("bad --repeat-penalty (it must be above 0)", NULL);
	return rc;
}

/* The prompt's ids, or BOS alone without a prompt; 0, or 1 with a message said. */
static int
prompt_ids(const struct kvc_engine *e, const char *prompt, struct kvc_tokens *in)
{
	const struct kvc_tokenizer *tok = eng_tokenizer(e);
	char err[512] = "";

	if (prompt) {
		unsigned flags = tok_add_bos_default(tok) ? TOK_ADD_BOS : 0;

		if (tok_encode(tok, prompt, strlen(prompt), flags, in, err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: generate: prompt: %s\n", err);
			return 1;
		}
	}
	if (in->n == 0) {
		if (tok_bos(tok) < 0) {
			fprintf(stderr, "kvchat: generate: the model has no BOS token to start from; give a prompt with -p\n");
			return 1;
		}
		if (kvc_tokens_push(in, tok_bos(tok)) != 0) {
			fprintf(stderr, "kvchat: generate: out of memory\n");
			return 1;
		}
	}
	if (in->n > (size_t)eng_n_ctx(e)) {
		fprintf(stderr, "kvchat: generate: the prompt has %zu tokens, the context only %d (--ctx)\n",
		    in->n, eng_n_ctx(e));
		return 1;
	}
	return 0;
}

/* The completion goes to stdout as it comes: text, or ids separated by spaces. */
static int
put_text(void *arg, const char *s, size_t n)
{
	(void)arg;
	fwrite(s, 1, n, stdout);
	fflush(stdout);
	return 0;
}

static int
put_id(void *arg, int32_t id)
{
	int *n = arg;

	printf((*n)++ > 0 ? " %d" : "%d", (int)id);
	fflush(stdout);
	return 0;
}

static void
print_timings(struct kvc_engine *e, size_t n_prompt, const struct eng_stats *st,
    const struct conv_gen *g, double t_start, double t_end)
{
	double t_first = g->t_first > 0 ? g->t_first : t_end;

	fprintf(stderr, "kvchat: %s, %s cache: prompt %zu tokens, prefill %.1f tok/s (%.3f s); "
	    "first token after %.1f ms; %zu generated, decode %.1f tok/s\n",
	    eng_backend_name(e), gguf_dtype_name(eng_kv_type(e)), n_prompt,
	    st->t_prefill > 0 ? (double)st->n_computed / st->t_prefill : 0.0, st->t_prefill,
	    (t_first - t_start) * 1e3, g->ids.n,
	    g->ids.n > 1 && t_end > t_first ? (g->ids.n - 1) / (t_end - t_first) : 0.0);
	if (g->proposed > 0 || g->n_passes < g->n_decoded)
		fprintf(stderr, "kvchat: speculative: %d proposed, %d accepted (%.1f %%), %d forward "
		    "passes, %.2f tokens per pass\n", g->proposed, g->accepted,
		    g->proposed ? 100.0 * g->accepted / g->proposed : 0.0, g->n_passes,
		    g->n_passes ? (double)g->ids.n / g->n_passes : 0.0);
}

/*
 * Prefill the prompt and complete it, streaming to stdout; the timings
 * (from t_start) to stderr. 0, or 1 with a message said.
 */
static int
complete(struct kvc_engine *e, const struct gen_opts *o, const struct kvc_tokens *in,
    struct conv_spec *spec, double t_start)
{
	struct conv_gen_params gp;
	struct conv_gen g;
	struct kvc_sampler *smp = NULL;
	struct kvc_seq *s = NULL;
	struct eng_stats st;
	char err[512] = "";
	int rc = 1, n_put = 0;

	memset(&g, 0, sizeof g);
	memset(&gp, 0, sizeof gp);
	gp.mode = CONV_GEN_COMPLETION;
	/* The last id is never run through the model, so it needs no position. */
	gp.max_tokens = (int)(o->n_predict < 0 ? 256 : o->n_predict);
	if (gp.max_tokens > eng_n_ctx(e) - (int)in->n + 1)
		gp.max_tokens = eng_n_ctx(e) - (int)in->n + 1;
	/* A completion continues the prompt, so its first space is kept. */
	gp.detok_flags = o->prompt ? TOK_DETOK_KEEP_LEADING_SPACE : 0;
	gp.on_text = o->ids ? NULL : put_text;
	gp.on_id = o->ids ? put_id : NULL;
	gp.arg = &n_put;
	gp.spec = spec;
	if (smp_new(&smp, &o->set.smp, eng_n_vocab(e)) != 0) {
		fprintf(stderr, "kvchat: generate: out of memory\n");
		goto out;
	}
	if (eng_seq_new(e, &s, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: %s\n", err);
		goto out;
	}
	if (eng_seq_append(s, in->v, (int)in->n, &st, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: prefill: %s\n", err);
		goto out;
	}
	if (conv_generate(e, s, smp, &gp, &g, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: decode: %s\n", err);
		goto out;
	}
	if (o->ids || isatty(STDOUT_FILENO))
		putchar('\n');
	fflush(stdout);
	print_timings(e, in->n, &st, &g, t_start, kvc_now());
	rc = 0;
out:
	conv_gen_free(&g);
	eng_seq_free(s);
	if (smp)
		smp_free(smp);
	return rc;
}

int
sub_generate(int argc, char **argv)
{
	struct gen_opts o;
	struct kvc_engine *e = NULL, *de = NULL;
	struct kvc_tokens in = {0};
	struct conv_spec spec = { NULL, 0, 0 };
	char err[512] = "";
	double t_start;
	int rc, orc;

	memset(&o, 0, sizeof o);
	o.ep = kvc_engine_default_params();
	o.ep.notice = progress_notice;	/* why --device auto runs on the CPU */
	o.ep.kernels = cli_kernels();
	o.set = conv_default_settings();
	o.n_predict = -1;
	rc = parse_args(argc, argv, &o);
	if (rc < 0 && o.model == NULL)
		rc = usage("no model given (-m FILE)", NULL);
	if (rc < 0 && o.prompt != NULL && o.have_prompt_ids)
		rc = usage("-p and --prompt-ids exclude each other", NULL);
	if (rc < 0 && (orc = sub_eng_open(&e, o.model, &o.ep, err, sizeof err)) != 0) {
		fprintf(stderr, "kvchat: generate: %s\n", err);
		rc = orc == KVC_EINTR ? 130 : 1;
	}
	if (rc >= 0) {
		kvc_tokens_free(&o.prompt_ids);
		kvc_tokens_free(&o.force);
		return rc;
	}
	spec.lookup = (int)o.lookup;
	spec.k = (int)(o.spec_k > 0 ? o.spec_k : o.draft ? 4 : 8);
	if (o.draft && (rc = sub_open_draft(e, o.draft, &o.ep, &de, &spec.draft)) != 0) {
		eng_close(e);
		kvc_tokens_free(&o.prompt_ids);
		kvc_tokens_free(&o.force);
		return rc;
	}
	t_start = kvc_now();
	if (o.have_prompt_ids)
		rc = kvc_tokens_append(&in, o.prompt_ids.v, o.prompt_ids.n) == KVC_OK ? 0 : 1;
	else
		rc = prompt_ids(e, o.prompt, &in);
	if (rc == 0 && (o.json || o.logprobs > 0 || o.have_force)) {
		struct sub_score_opts so = { &o.set.smp, (int)o.n_predict, (int)o.logprobs, o.json,
		    o.prompt != NULL || o.have_prompt_ids, o.have_force ? &o.force : NULL };

		rc = sub_score_run(e, &in, &so);
	} else if (rc == 0) {
		rc = complete(e, &o, &in, o.draft || o.lookup ? &spec : NULL, t_start);
	}
	eng_seq_free(spec.draft);
	eng_close(de);
	eng_close(e);
	kvc_tokens_free(&in);
	kvc_tokens_free(&o.prompt_ids);
	kvc_tokens_free(&o.force);
	return rc;
}
