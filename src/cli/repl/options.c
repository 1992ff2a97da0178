/*
 * options.c: the chat program's command line: getopt_long over the options
 * kvchat(1) documents, each value checked with the strict parsers of
 * core/kvc.h; a bad value is a usage error (exit status 2). The sampling
 * options are the rows of the settings table (conv_setting_table).
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "options.h"
#include "cli/cli.h"

enum {
	OPT_DB = 256, OPT_SESSION, OPT_RESUME, OPT_NEW, OPT_SYSTEM, OPT_TEMPLATE,
	OPT_THREADS, OPT_CTX, OPT_KV_TYPE, OPT_KV_BUDGET, OPT_OVERFLOW, OPT_KEEP, OPT_DRAFT,
	OPT_LOOKUP, OPT_SPEC_K, OPT_DEVICE, OPT_GPU, OPT_STATS_JSON, OPT_NO_COLOR, OPT_VERSION,
	OPT_RECAP, OPT_FORCE_UNLOCK, OPT_THINK, OPT_EFFORT, OPT_SHOW_THINKING,
	OPT_SETTING = 512,	/* + the row of conv_setting_table */
};

/* repl_opts.set_mask has one bit per row. */
_Static_assert(CONV_N_SETTINGS <= sizeof(unsigned) * CHAR_BIT, "a mask bit per setting");

/* The options that are not settings; build_options adds those. */
static const struct option fixed_options[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "db", required_argument, NULL, OPT_DB },
	{ "session", required_argument, NULL, OPT_SESSION },
	{ "resume", optional_argument, NULL, OPT_RESUME },
	{ "new", optional_argument, NULL, OPT_NEW },
	{ "system", required_argument, NULL, OPT_SYSTEM },
	{ "chat-template", required_argument, NULL, OPT_TEMPLATE },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "ctx", required_argument, NULL, OPT_CTX },
	{ "kv-type", required_argument, NULL, OPT_KV_TYPE },
	{ "kv-budget", required_argument, NULL, OPT_KV_BUDGET },
	{ "ctx-overflow", required_argument, NULL, OPT_OVERFLOW },
	{ "keep", required_argument, NULL, OPT_KEEP },
	{ "draft", required_argument, NULL, OPT_DRAFT },
	{ "lookup", required_argument, NULL, OPT_LOOKUP },
	{ "spec-k", required_argument, NULL, OPT_SPEC_K },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "gpu", required_argument, NULL, OPT_GPU },
	{ "stats-json", required_argument, NULL, OPT_STATS_JSON },
	{ "recap", required_argument, NULL, OPT_RECAP },
	{ "no-color", no_argument, NULL, OPT_NO_COLOR },
	{ "think", required_argument, NULL, OPT_THINK },
	{ "reasoning-effort", required_argument, NULL, OPT_EFFORT },
	{ "show-thinking", no_argument, NULL, OPT_SHOW_THINKING },
	{ "force-unlock", no_argument, NULL, OPT_FORCE_UNLOCK },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

#define N_FIXED (sizeof fixed_options / sizeof fixed_options[0] - 1)

/* All long options for getopt_long, and the short ones ("m:h" and the settings'). */
static struct option chat_options[N_FIXED + CONV_N_SETTINGS + 1];
static char short_options[8 + 2 * CONV_N_SETTINGS];

static void
build_options(void)
{
	const struct conv_setting *row;
	size_t n = 4;

	memcpy(short_options, ":m:h", n);
	memcpy(chat_options, fixed_options, N_FIXED * sizeof fixed_options[0]);
	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		row = &conv_setting_table[i];
		chat_options[N_FIXED + i] = (struct option){ row->opt, required_argument, NULL,
		    OPT_SETTING + i };
		if (row->short_opt) {
			short_options[n++] = row->short_opt;
			short_options[n++] = ':';
		}
	}
	short_options[n] = '\0';
	memset(&chat_options[N_FIXED + CONV_N_SETTINGS], 0, sizeof chat_options[0]);
}

static int
usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "kvchat: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'kvchat --help'.\n");
	return 2;
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

/* The row of conv_setting_table that getopt_long's c stands for, or -1. */
static int
setting_of(int c)
{
	if (c >= OPT_SETTING && c < OPT_SETTING + CONV_N_SETTINGS)
		return c - OPT_SETTING;
	for (int i = 0; i < CONV_N_SETTINGS; i++)
		if (conv_setting_table[i].short_opt != 0 && conv_setting_table[i].short_opt == c)
			return i;
	return -1;
}

/*
 * The sampling settings (stored with the conversation): 0, 2 after a usage
 * error, or 1 when c is not one of them.
 */
static int
sampling_opt(int c, const char *a, struct repl_opts *o)
{
	const struct conv_setting *row;
	char label[40], err[256];
	int i;

	if ((i = setting_of(c)) < 0)
		return 1;
	row = &conv_setting_table[i];
	/* Named in its short form when it has one, as kvchat(1) lists it first. */
	if (row->short_opt)
		snprintf(label, sizeof label, "-%c", row->short_opt);
	else
		snprintf(label, sizeof label, "--%s", row->opt);
	if (conv_setting_apply(&o->set, row, label, a, err, sizeof err) != KVC_OK)
		return usage_error("%s", err);
	o->set_mask |= 1u << i;
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
		/* more threads than cores: warned once the engine is open (repl.c) */
		break;
	case OPT_CTX:
		if (parse_int(a, 16, 1L << 24, &o->ep.n_ctx))
			return usage_error("--ctx: not a context size: '%s'", a);
		break;
	case OPT_KV_TYPE:
		if (eng_kv_type_parse(a, &o->ep.kv_type) != KVC_OK)
			return usage_error("--kv-type: f16, f32 or q8_0, not '%s'", a);
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
		else if (strcmp(a, "slide") == 0)
			o->overflow = CONV_OVERFLOW_SLIDE;
		else
			return usage_error("--ctx-overflow: drop, stop or slide, not '%s'", a);
		break;
	case OPT_DRAFT:
		o->draft = a;
		break;
	case OPT_LOOKUP:
		if (parse_int(a, 1, 64, &o->lookup))
			return usage_error("--lookup: an n-gram length 1..64, not '%s'", a);
		break;
	case OPT_SPEC_K:
		if (parse_int(a, 1, CONV_SPEC_MAX, &o->spec_k))
			return usage_error("--spec-k: 1..16 proposals, not '%s'", a);
		break;
	case OPT_KEEP:
		if (parse_int(a, 1, 1 << 19, &o->keep))
			return usage_error("--keep: not a number of positions: '%s'", a);
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
	/* a chat waits for its user: the experts pack meanwhile */
	o->ep.pack_ahead = true;
	o->ep.kernels = cli_kernels();
	o->set = conv_default_settings();
	o->overflow = CONV_OVERFLOW_DROP;
	o->recap = 2;	/* the last exchange */
	o->think = -1;
	o->show_thinking = -1;
	build_options();
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, short_options, chat_options, NULL)) != -1) {
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
			if (chat_family_from_name(a) < 0 && access(a, R_OK) != 0)
				return usage_error("unknown chat template '%s' (a Jinja template file, or "
				    "chatml, llama3, llama2, mistral, phi3, deepseek, gemma, glm, chatglm3)", a);
			o->template_name = a;
			break;
		case OPT_STATS_JSON: o->stats_json = a; break;
		case OPT_RECAP: {
			long v;

			if (kvc_parse_long(a, 0, 1000000, &v) != KVC_OK)
				return usage_error("--recap: not a number of messages: '%s'", a);
			o->recap = (int)v;
			break;
		}
		case OPT_NO_COLOR: o->no_color = true; break;
		case OPT_THINK:
			if (strcmp(a, "on") != 0 && strcmp(a, "off") != 0)
				return usage_error("--think wants on or off, not '%s'", a);
			o->think = a[1] == 'n';
			break;
		case OPT_EFFORT:
			if (strcmp(a, "low") != 0 && strcmp(a, "medium") != 0 && strcmp(a, "high") != 0)
				return usage_error("--reasoning-effort wants low, medium or high, not '%s'", a);
			o->effort = a;
			break;
		case OPT_SHOW_THINKING: o->show_thinking = 1; break;
		case OPT_FORCE_UNLOCK: o->force_unlock = true; break;
		case 'h':
			cli_help(stdout, cmd_print_help);
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
