/*
 * options.c: the chat program's command line: getopt_long over the options
 * kvchat(1) documents, each value checked with the strict parsers of
 * core/kvc.h; a bad value is a usage error (exit status 2).
 */
#include <float.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "options.h"
#include "cli/cli.h"

enum {
	OPT_DB = 256, OPT_SESSION, OPT_RESUME, OPT_NEW, OPT_SYSTEM, OPT_TEMPLATE, OPT_TEMP,
	OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT, OPT_SEED, OPT_THREADS, OPT_CTX,
	OPT_KV_TYPE, OPT_KV_BUDGET, OPT_OVERFLOW, OPT_DEVICE, OPT_GPU, OPT_STATS_JSON,
	OPT_NO_COLOR, OPT_VERSION,
};

static const struct option chat_options[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "db", required_argument, NULL, OPT_DB },
	{ "session", required_argument, NULL, OPT_SESSION },
	{ "resume", optional_argument, NULL, OPT_RESUME },
	{ "new", optional_argument, NULL, OPT_NEW },
	{ "system", required_argument, NULL, OPT_SYSTEM },
	{ "chat-template", required_argument, NULL, OPT_TEMPLATE },
	{ "max-tokens", required_argument, NULL, 'n' },
	{ "temp", required_argument, NULL, OPT_TEMP },
	{ "top-k", required_argument, NULL, OPT_TOP_K },
	{ "top-p", required_argument, NULL, OPT_TOP_P },
	{ "min-p", required_argument, NULL, OPT_MIN_P },
	{ "repeat-penalty", required_argument, NULL, OPT_REPEAT },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "ctx", required_argument, NULL, OPT_CTX },
	{ "kv-type", required_argument, NULL, OPT_KV_TYPE },
	{ "kv-budget", required_argument, NULL, OPT_KV_BUDGET },
	{ "ctx-overflow", required_argument, NULL, OPT_OVERFLOW },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "gpu", required_argument, NULL, OPT_GPU },
	{ "stats-json", required_argument, NULL, OPT_STATS_JSON },
	{ "no-color", no_argument, NULL, OPT_NO_COLOR },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

static int
usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "kvchat: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'kvchat --help'.\n");
	return 2;
}

/* A float option's value: any finite number a float holds. */
static int
parse_float(const char *s, float *out)
{
	double d;

	if (kvc_parse_double(s, -FLT_MAX, FLT_MAX, &d) != KVC_OK)
		return -1;
	*out = (float)d;
	return 0;
}

/* An int option's value in [lo, hi]. */
static int
parse_int(const char *s, long lo, long hi, int *out)
{
	long v;

	if (kvc_parse_long(s, lo, hi, &v) != KVC_OK)
		return -1;
	*out = (int)v;
	return 0;
}

/*
 * The sampling settings (stored with the conversation): 0, 2 after a usage
 * error, or 1 when c is not one of them.
 */
static int
sampling_opt(int c, const char *a, struct repl_opts *o)
{
	struct kvc_sampler_params *smp = &o->set.smp;

	switch (c) {
	case 'n':
		if (parse_int(a, 0, 1L << 30, &o->set.max_tokens))
			return usage_error("-n: not a token count: '%s'", a);
		o->set_mask |= KVC_SET_MAX_TOKENS;
		break;
	case OPT_TEMP:
		if (parse_float(a, &smp->temp))
			return usage_error("--temp: not a number: '%s'", a);
		o->set_mask |= KVC_SET_TEMP;
		break;
	case OPT_TOP_K:
		if (parse_int(a, 0, 1L << 30, &smp->top_k))
			return usage_error("--top-k: not a count: '%s'", a);
		o->set_mask |= KVC_SET_TOP_K;
		break;
	case OPT_TOP_P:
		if (parse_float(a, &smp->top_p))
			return usage_error("--top-p: not a number: '%s'", a);
		o->set_mask |= KVC_SET_TOP_P;
		break;
	case OPT_MIN_P:
		if (parse_float(a, &smp->min_p))
			return usage_error("--min-p: not a number: '%s'", a);
		o->set_mask |= KVC_SET_MIN_P;
		break;
	case OPT_REPEAT:
		if (parse_float(a, &smp->repeat_penalty))
			return usage_error("--repeat-penalty: not a number: '%s'", a);
		o->set_mask |= KVC_SET_REPEAT;
		break;
	case OPT_SEED:
		if (kvc_parse_seed(a, &smp->seed) != KVC_OK)
			return usage_error("--seed: not a number: '%s'", a);
		o->set_mask |= KVC_SET_SEED;
		break;
	default:
		return 1;
	}
	return 0;
}

/*
 * The engine and memory options: 0, 2 after a usage error, or 1 when c is
 * not one of them.
 */
static int
engine_opt(int c, const char *a, struct repl_opts *o)
{
	switch (c) {
	case OPT_THREADS:
		if (parse_int(a, 1, 4096, &o->ep.n_threads))
			return usage_error("--threads: not a thread count: '%s'", a);
		break;
	case OPT_CTX:
		if (parse_int(a, 16, 1L << 24, &o->ep.n_ctx))
			return usage_error("--ctx: not a context size: '%s'", a);
		break;
	case OPT_KV_TYPE:
		if (strcmp(a, "f16") == 0)
			o->ep.kv_type = GGML_TYPE_F16;
		else if (strcmp(a, "f32") == 0)
			o->ep.kv_type = GGML_TYPE_F32;
		else
			return usage_error("--kv-type: f16 or f32, not '%s'", a);
		break;
	case OPT_KV_BUDGET:
		if (kvc_parse_size(a, &o->kv_budget) != KVC_OK)
			return usage_error("--kv-budget: not a size (512M, 2G): '%s'", a);
		o->kv_budget_given = true;
		break;
	case OPT_OVERFLOW:
		if (strcmp(a, "drop") == 0)
			o->overflow = CONV_OVERFLOW_DROP;
		else if (strcmp(a, "stop") == 0)
			o->overflow = CONV_OVERFLOW_STOP;
		else
			return usage_error("--ctx-overflow: drop or stop, not '%s'", a);
		break;
	case OPT_DEVICE:
		if (strcmp(a, "auto") && strcmp(a, "cpu") && strcmp(a, "cuda"))
			return usage_error("--device: auto, cpu or cuda, not '%s'", a);
		o->ep.device = a;
		break;
	case OPT_GPU:
		if (parse_int(a, 0, 1024, &o->ep.gpu))
			return usage_error("--gpu: not a device number: '%s'", a);
		break;
	default:
		return 1;
	}
	return 0;
}

/* Which conversation to talk to: --session, --resume, --new. */
static void
open_opt(int c, const char *a, int argc, char **argv, struct repl_opts *o)
{
	if (c == OPT_SESSION) {
		o->mode = OPEN_SESSION;
		o->name = a;
		return;
	}
	o->mode = c == OPT_RESUME ? OPEN_RESUME : OPEN_NEW;
	/* The argument is optional: "--resume 3" as well as "--resume=3". */
	if (a == NULL && optind < argc && argv[optind][0] != '-')
		a = argv[optind++];
	o->name = a;
}

int
repl_parse_opts(int argc, char **argv, struct repl_opts *o)
{
	int c, rc;

	memset(o, 0, sizeof *o);
	o->ep = kvc_engine_default_params();
	o->set = conv_default_settings();
	o->overflow = CONV_OVERFLOW_DROP;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:n:h", chat_options, NULL)) != -1) {
		const char *a = optarg;

		rc = sampling_opt(c, a, o);
		if (rc == 1)
			rc = engine_opt(c, a, o);
		if (rc == 0)
			continue;
		if (rc != 1)
			return rc;
		switch (c) {
		case 'm': o->model = a; break;
		case OPT_DB: o->db = a; break;
		case OPT_SESSION:
		case OPT_RESUME:
		case OPT_NEW:
			open_opt(c, a, argc, argv, o);
			break;
		case OPT_SYSTEM: o->system = a; break;
		case OPT_TEMPLATE:
			if (chat_family_from_name(a) < 0)
				return usage_error("unknown chat template '%s' (chatml, llama3, llama2, "
				    "mistral, phi3, deepseek, gemma)", a);
			o->template_name = a;
			break;
		case OPT_STATS_JSON: o->stats_json = a; break;
		case OPT_NO_COLOR: o->no_color = true; break;
		case 'h':
			cli_help(stdout);
			return -1;
		case OPT_VERSION:
			printf("kvchat %s\n", PACKAGE_VERSION);
			return -1;
		case ':':
			return usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	return 0;
}
