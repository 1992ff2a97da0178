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

/* "2,651,9" (commas or spaces) appended to out; KVC_OK or KVC_EINVAL / KVC_ENOMEM. */
static int
parse_ids(const char *s, struct kvc_tokens *out)
{
	char buf[16];
	long v;
	size_t n;

	while (*s) {
		if (*s == ',' || *s == ' ') {
			s++;
			continue;
		}
		n = strcspn(s, ", ");
		if (n >= sizeof buf)
			return KVC_EINVAL;
		memcpy(buf, s, n);
		buf[n] = 0;
		if (kvc_parse_long(buf, 0, INT32_MAX, &v) != KVC_OK)
			return KVC_EINVAL;
		if (kvc_tokens_push(out, (int32_t)v) != KVC_OK)
			return KVC_ENOMEM;
		s += n;
	}
	return out->n > 0 ? KVC_OK : KVC_EINVAL;
}

/*
 * A sampling option (a row of conv_setting_table that is a sampler
 * parameter) at a with its value val: -1 when a is none, else 0 or the
 * usage error's exit status.
 */
static int
sampling_opt(const char *a, const char *val, struct gen_opts *o)
{
	const struct conv_setting *row;
	char why[64];

	if (strncmp(a, "--", 2) != 0 || (row = conv_setting_by_opt(a + 2)) == NULL || !row->smp)
		return -1;
	snprintf(why, sizeof why, "bad %s", a);
	if (conv_setting_apply(&o->set, row, a, val, NULL, 0) != KVC_OK)
		return usage(why, val);
	/* The one range generate has narrower than the table's: a penalty > 0. */
	if (o->set.smp.repeat_penalty <= 0)
		return usage(why, val);
	return 0;
}

/*
 * One option at argv[*i] (its value at argv[*i + 1], consumed): -1 to go
 * on, else the exit status (0 after --help, 2 for a usage error).
 */
static int
parse_opt(int argc, char **argv, int *i, struct gen_opts *o)
{
	const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL, *why;
	int eo;

	if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
		fputs(gen_usage, stdout);
		return 0;
	}
	if (strcmp(a, "--ids") == 0) {
		o->ids = true;
		return -1;
	}
	if (strcmp(a, "--json") == 0) {
		o->json = true;
		return -1;
	}
	if (val == NULL && a[0] == '-')
		return usage("option needs a value or is unknown", a);
	(*i)++;
	if ((eo = sub_engine_option(a, val, &o->ep, &why)) != 0 ||
	    (eo = sub_ctx_option(a, val, &o->ep, &why)) != 0)
		return eo < 0 ? usage(why, val) : -1;
	if ((eo = sampling_opt(a, val, o)) >= 0)
		return eo > 0 ? eo : -1;
	if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0)
		o->model = val;
	else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0)
		o->prompt = val;
	else if (strcmp(a, "--prompt-ids") == 0) {
		o->have_prompt_ids = true;
		if (parse_ids(val, &o->prompt_ids) != KVC_OK)
			return usage("bad --prompt-ids (token ids separated by commas)", val);
	} else if (strcmp(a, "--force") == 0) {
		o->have_force = true;
		if (parse_ids(val, &o->force) != KVC_OK)
			return usage("bad --force (token ids separated by commas)", val);
	} else if (strcmp(a, "--logprobs") == 0) {
		if (kvc_parse_long(val, 1, 1000, &o->logprobs) != KVC_OK)
			return usage("bad --logprobs (1 to 1000)", val);
	}
	else if (strcmp(a, "-n") == 0) {
		if (kvc_parse_long(val, 0, 1L << 30, &o->n_predict) != KVC_OK)
			return usage("bad -n", val);
	} else if (strcmp(a, "--draft") == 0) {
		o->draft = val;
	} else if (strcmp(a, "--lookup") == 0) {
		if (kvc_parse_long(val, 1, 64, &o->lookup) != KVC_OK)
			return usage("bad --lookup (1..64)", val);
	} else if (strcmp(a, "--spec-k") == 0) {
		if (kvc_parse_long(val, 1, CONV_SPEC_MAX, &o->spec_k) != KVC_OK)
			return usage("bad --spec-k (1..16)", val);
	} else {
		return usage("unknown argument", a);
	}
	return -1;
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
	int rc;

	memset(&o, 0, sizeof o);
	o.ep = kvc_engine_default_params();
	o.ep.kernels = cli_kernels();
	o.set = conv_default_settings();
	o.n_predict = -1;
	rc = -1;
	for (int i = 1; i < argc && rc < 0; i++)
		rc = parse_opt(argc, argv, &i, &o);
	if (rc < 0 && o.model == NULL)
		rc = usage("no model given (-m FILE)", NULL);
	if (rc < 0 && o.prompt != NULL && o.have_prompt_ids)
		rc = usage("-p and --prompt-ids exclude each other", NULL);
	if (rc < 0 && eng_open(&e, o.model, &o.ep, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: %s\n", err);
		rc = 1;
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
