/*
 * repl.c: the chat command: options, finding the model, the conversation to
 * talk to, and the loop (readline on a terminal, one message per line
 * otherwise).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "cli/cli.h"
#include "cmd.h"
#include "cli/discover.h"
#include "cli/progress.h"

/*
 * The one piece of state a signal handler may touch. It is handed to the
 * conversation code explicitly (conv_io.interrupt) and never read elsewhere.
 */
static volatile sig_atomic_t repl_sigint;

static void
on_sigint(int sig)
{
	(void)sig;
	repl_sigint = 1;
}

/* ---- options ---- */

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

enum open_mode { OPEN_NEW, OPEN_SESSION, OPEN_RESUME };

struct chat_opts {
	const char *model;
	const char *db;
	enum open_mode mode;
	const char *name;		/* --session NAME, --resume X, --new TITLE */
	const char *system;
	const char *template_name;
	struct kvc_engine_params ep;
	struct conv_settings set;
	unsigned set_mask;
	size_t kv_budget;
	bool kv_budget_given;
	enum conv_overflow overflow;
	const char *stats_json;
	bool no_color;
};

static int
usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "kvchat: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'kvchat --help'.\n");
	return 2;
}

static int
parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return end != s && *end == '\0' && errno == 0 && *out >= lo && *out <= hi ? 0 : -1;
}

static int
parse_float(const char *s, float *out)
{
	char *end;

	errno = 0;
	*out = strtof(s, &end);
	return end != s && *end == '\0' && errno == 0 ? 0 : -1;
}

/* "512M", "2G", "1.5G", "4096" (bytes). */
static int
parse_size(const char *s, size_t *out)
{
	char *end;
	double v, mul = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno != 0 || v < 0)
		return -1;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: return -1;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end != '\0')
		return -1;
	*out = (size_t)(v * mul);
	return 0;
}

static int
parse_opts(int argc, char **argv, struct chat_opts *o)
{
	long v;
	float f;
	int c;

	memset(o, 0, sizeof *o);
	o->ep = kvc_engine_default_params();
	o->set = conv_default_settings();
	o->overflow = CONV_OVERFLOW_DROP;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:n:h", chat_options, NULL)) != -1) {
		const char *a = optarg;

		switch (c) {
		case 'm': o->model = a; break;
		case OPT_DB: o->db = a; break;
		case OPT_SESSION: o->mode = OPEN_SESSION; o->name = a; break;
		case OPT_RESUME:
		case OPT_NEW:
			o->mode = c == OPT_RESUME ? OPEN_RESUME : OPEN_NEW;
			/* The argument is optional: "--resume 3" as well as "--resume=3". */
			if (a == NULL && optind < argc && argv[optind][0] != '-')
				a = argv[optind++];
			o->name = a;
			break;
		case OPT_SYSTEM: o->system = a; break;
		case OPT_TEMPLATE:
			if (chat_family_from_name(a) < 0)
				return usage_error("unknown chat template '%s' (chatml, llama3, llama2, "
				    "mistral, phi3, deepseek, gemma)", a);
			o->template_name = a;
			break;
		case 'n':
			if (parse_int(a, 0, 1L << 30, &v))
				return usage_error("-n: not a token count: '%s'", a);
			o->set.max_tokens = (int)v;
			o->set_mask |= KVC_SET_MAX_TOKENS;
			break;
		case OPT_TEMP:
			if (parse_float(a, &f))
				return usage_error("--temp: not a number: '%s'", a);
			o->set.smp.temp = f;
			o->set_mask |= KVC_SET_TEMP;
			break;
		case OPT_TOP_K:
			if (parse_int(a, 0, 1L << 30, &v))
				return usage_error("--top-k: not a count: '%s'", a);
			o->set.smp.top_k = (int)v;
			o->set_mask |= KVC_SET_TOP_K;
			break;
		case OPT_TOP_P:
			if (parse_float(a, &f))
				return usage_error("--top-p: not a number: '%s'", a);
			o->set.smp.top_p = f;
			o->set_mask |= KVC_SET_TOP_P;
			break;
		case OPT_MIN_P:
			if (parse_float(a, &f))
				return usage_error("--min-p: not a number: '%s'", a);
			o->set.smp.min_p = f;
			o->set_mask |= KVC_SET_MIN_P;
			break;
		case OPT_REPEAT:
			if (parse_float(a, &f))
				return usage_error("--repeat-penalty: not a number: '%s'", a);
			o->set.smp.repeat_penalty = f;
			o->set_mask |= KVC_SET_REPEAT;
			break;
		case OPT_SEED: {
			char *end;
			errno = 0;
			o->set.smp.seed = strtoull(a, &end, 10);
			if (end == a || *end || errno || a[0] == '-')
				return usage_error("--seed: not a number: '%s'", a);
			o->set_mask |= KVC_SET_SEED;
			break;
		}
		case OPT_THREADS:
			if (parse_int(a, 1, 4096, &v))
				return usage_error("--threads: not a thread count: '%s'", a);
			o->ep.n_threads = (int)v;
			break;
		case OPT_CTX:
			if (parse_int(a, 16, 1L << 24, &v))
				return usage_error("--ctx: not a context size: '%s'", a);
			o->ep.n_ctx = (int)v;
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
			if (parse_size(a, &o->kv_budget))
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
			if (parse_int(a, 0, 1024, &v))
				return usage_error("--gpu: not a device number: '%s'", a);
			o->ep.gpu = (int)v;
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

/* ---- files ---- */

/* mkdir -p of path's directory part. */
static int
mkdir_parents(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n >= sizeof buf)
		return -1;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return 0;
}

/* $VAR/rest, or $HOME/fallback/rest. */
static void
xdg_path(char *buf, size_t len, const char *var, const char *fallback, const char *rest)
{
	const char *d = getenv(var), *home = getenv("HOME");

	if (d != NULL && d[0] == '/')
		snprintf(buf, len, "%s/%s", d, rest);
	else
		snprintf(buf, len, "%s/%s/%s", home ? home : ".", fallback, rest);
}

/* Half of physical memory: room for caches without pushing the weights out. */
static size_t
default_kv_budget(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psz <= 0)
		return 0;
	return (size_t)pages * (size_t)psz / 2;
}

/* ---- model ---- */

static char *
pick_model(const struct chat_opts *o, bool tty)
{
	struct disc_model *v = NULL;
	char err[512], sz[32], *path = NULL, *line;
	int n = 0;
	long k;

	if (o->model) {
		if (disc_resolve(o->model, &path, err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: %s\n", err);
			return NULL;
		}
		return path;
	}
	if (disc_find_all(&v, &n, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: %s\n", err);
		return NULL;
	}
	if (n == 0) {
		fprintf(stderr, "kvchat: no model found; give one with -m FILE, or:\n%s",
		    disc_help_where());
		return NULL;
	}
	if (n == 1 || !tty) {
		if (n > 1)
			fprintf(stderr, "kvchat: using %s (of %d models found; -m chooses)\n",
			    v[0].name, n);
		path = strdup(v[0].path);
		disc_free(v, n);
		return path;
	}
	fprintf(stderr, "Models found:\n");
	for (int i = 0; i < n; i++)
		fprintf(stderr, "  %2d  %-48s %8s  %-7s %s\n", i + 1, v[i].name,
		    disc_format_size(v[i].size, sz, sizeof sz), v[i].type, v[i].arch);
	for (;;) {
		line = readline("Model number: ");
		if (line == NULL)
			break;
		if (parse_int(line, 1, n, &k) == 0) {
			path = strdup(v[k - 1].path);
			free(line);
			break;
		}
		free(line);
	}
	disc_free(v, n);
	return path;
}

/* ---- output ---- */

/* conv_params.progress: the bar on stderr for a snapshot restore. */
static void
repl_progress(void *arg, const char *label, uint64_t done, uint64_t total)
{
	struct kvc_repl *r = arg;

	if (label == NULL)
		progress_end(&r->prog);
	else if (done == 0)
		progress_start(&r->prog, label, total);
	else
		progress_set(&r->prog, done, total);
}

static void
repl_notice(void *arg, const char *line)
{
	struct kvc_repl *r = arg;
	bool color = r->tty && kvc_use_color(2) && r->color;

	fflush(stdout);
	fprintf(stderr, "%skvchat: %s%s\n", kvc_sgr(color, KVC_SGR_YELLOW), line,
	    kvc_sgr(color, KVC_SGR_RESET));
}

static int
on_text(void *arg, const char *s, size_t n)
{
	(void)arg;
	fwrite(s, 1, n, stdout);
	fflush(stdout);
	return 0;
}

void
repl_print_stats(struct kvc_repl *r, FILE *f, const struct conv_stats *s)
{
	bool color = r->color && f == stdout;

	fprintf(f, "%s[ttft %.0f ms | prompt %d: %d reused, %d computed, %.0f tok/s | "
	    "%d tokens, %.1f tok/s | ctx %d/%d", kvc_sgr(color, KVC_SGR_DIM), s->ttft_ms,
	    s->prompt_tokens, s->reused_tokens, s->prefill_tokens, s->prefill_tps,
	    s->gen_tokens, s->decode_tps, s->context_used, s->context_total);
	if (s->dropped_tokens)
		fprintf(f, " | context full: dropped %d tokens of old exchanges", s->dropped_tokens);
	if (s->resumed_from_snapshot)
		fprintf(f, " | resumed from snapshot");
	if (s->rebuilt)
		fprintf(f, " | rebuilt");
	if (s->interrupted)
		fprintf(f, " | interrupted");
	if (s->ctx_full)
		fprintf(f, " | stopped: context full");
	fprintf(f, "]%s\n", kvc_sgr(color, KVC_SGR_RESET));
	fflush(f);
}

static void
write_stats_json(struct kvc_repl *r, const struct conv_stats *s)
{
	struct kvc_buf b = {0};
	FILE *f;
	int rc;

	rc = kvc_buf_printf(&b, "{\"turn\":%d,\"conversation_id\":%" PRId64 ",\"title\":",
	    r->turn, conv_id(r->cur));
	rc = rc ? rc : cmd_json_str(&b, conv_title(r->cur));
	rc = rc ? rc : kvc_buf_printf(&b, ",\"prompt_tokens\":%d,\"reused_tokens\":%d,"
	    "\"prefill_tokens\":%d,\"gen_tokens\":%d,\"ttft_ms\":%.3f,\"prefill_tps\":%.3f,"
	    "\"decode_tps\":%.3f,\"context_used\":%d,\"context_total\":%d,"
	    "\"resumed_from_snapshot\":%s,\"rebuilt\":%s,\"dropped_tokens\":%d,"
	    "\"interrupted\":%s,\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"ctx_used\":%d,"
	    "\"ctx_size\":%d,\"store_errors\":%d}\n", s->prompt_tokens, s->reused_tokens, s->prefill_tokens,
	    s->gen_tokens, s->ttft_ms, s->prefill_tps, s->decode_tps, s->context_used,
	    s->context_total, s->resumed_from_snapshot ? "true" : "false",
	    s->rebuilt ? "true" : "false", s->dropped_tokens, s->interrupted ? "true" : "false",
	    s->prefill_tps, s->decode_tps, s->context_used, s->context_total, s->store_errors);
	if (rc == 0) {
		f = fopen(r->stats_json, "a");
		if (f == NULL || fwrite(b.p, 1, b.n, f) != b.n || fclose(f) != 0)
			cmd_error(r, "cannot append to %s", r->stats_json);
	}
	kvc_buf_free(&b);
}

int
repl_turn(struct kvc_repl *r, const char *text, bool retry)
{
	struct conv_stats s;
	struct conv_io io;
	char err[512];
	int rc;

	memset(&io, 0, sizeof io);
	io.on_text = on_text;
	io.arg = r;
	io.interrupt = r->interrupt;
	io.t_enter = kvc_now();
	*r->interrupt = 0;
	rc = retry ? conv_retry(r->cur, &io, &s, err, sizeof err) :
	    conv_turn(r->cur, text, &io, &s, err, sizeof err);
	*r->interrupt = 0;
	if (rc) {
		cmd_error(r, "%s", err);
		return 1;
	}
	r->turn++;
	if (r->tty) {
		printf("%s\n", s.interrupted ? " ^C" : "");
		repl_print_stats(r, stdout, &s);
	} else {
		printf("\n\n");
		fflush(stdout);
		repl_print_stats(r, stderr, &s);
	}
	if (r->stats_json)
		write_stats_json(r, &s);
	return 0;
}

void
repl_switch(struct kvc_repl *r, struct conv *c)
{
	r->cur = c;
}

/* Command-line settings win over what a resumed conversation stored. */
static void
apply_cli_settings(struct kvc_repl *r, struct conv *c)
{
	struct conv_settings s = *conv_get_settings(c);
	unsigned m = r->set_mask;

	if (m == 0)
		return;
	if (m & KVC_SET_TEMP) s.smp.temp = r->set.smp.temp;
	if (m & KVC_SET_TOP_K) s.smp.top_k = r->set.smp.top_k;
	if (m & KVC_SET_TOP_P) s.smp.top_p = r->set.smp.top_p;
	if (m & KVC_SET_MIN_P) s.smp.min_p = r->set.smp.min_p;
	if (m & KVC_SET_REPEAT) s.smp.repeat_penalty = r->set.smp.repeat_penalty;
	if (m & KVC_SET_SEED) s.smp.seed = r->set.smp.seed;
	if (m & KVC_SET_MAX_TOKENS) s.max_tokens = r->set.max_tokens;
	(void)conv_set_settings(c, &s, NULL, 0);
}

/* ---- input ---- */

/* "\n" (two characters) in a non-interactive line stands for a newline. */
static void
unescape_newlines(char *s)
{
	char *w = s;

	for (const char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] == 'n') {
			*w++ = '\n';
			p++;
		} else {
			*w++ = *p;
		}
	}
	*w = '\0';
}

static int
run_batch(struct kvc_repl *r)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int status = 0;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		unescape_newlines(line);
		if (kvc_utf8_valid_prefix(line, strlen(line)) != strlen(line)) {
			cmd_error(r, "input line is not valid UTF-8");
			status = 1;
			break;
		}
		if (repl_turn(r, line, false) != 0) {
			status = 1;
			break;
		}
	}
	if (n < 0 && *r->interrupt && status == 0) {
		/* Ctrl-C while waiting for input: everything is saved, leave like a shell tool. */
		status = 130;
	}
	free(line);
	return status;
}

/*
 * readline's callback interface calls a handler without a user argument, so
 * the line it delivers passes through these file-local variables.
 */
static char *rl_line_got;
static bool rl_line_done;
/* The REPL for completion (readline's generators take no user argument either). */
static struct kvc_repl *rl_repl;

static void
rl_on_line(char *line)
{
	rl_line_got = line;
	rl_line_done = true;
	rl_callback_handler_remove();
}

/* One line with Ctrl-C clearing it: NULL at EOF; *cancelled when Ctrl-C was pressed. */
static char *
read_line(struct kvc_repl *r, const char *prompt, bool *cancelled)
{
	*cancelled = false;
	rl_line_got = NULL;
	rl_line_done = false;
	*r->interrupt = 0;
	rl_callback_handler_install(prompt, rl_on_line);
	while (!rl_line_done) {
		fd_set fds;
		int n;

		FD_ZERO(&fds);
		FD_SET(fileno(rl_instream), &fds);
		n = select(fileno(rl_instream) + 1, &fds, NULL, NULL, NULL);
		if (n < 0 && errno == EINTR) {
			if (*r->interrupt) {
				*r->interrupt = 0;
				rl_replace_line("", 0);
				rl_crlf();
				rl_callback_handler_remove();
				*cancelled = true;
				return NULL;
			}
			continue;
		}
		if (n < 0)
			break;
		rl_callback_read_char();
	}
	return rl_line_got;
}

static bool
ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/*
 * One message: a line, lines joined by a trailing backslash, or a """
 * block. NULL at EOF; "" when Ctrl-C cancelled the input.
 */
static char *
read_input(struct kvc_repl *r, const char *prompt)
{
	struct kvc_buf b = {0};
	bool cancelled, block = false;
	char *line;

	for (;;) {
		line = read_line(r, b.n || block ? "... " : prompt, &cancelled);
		if (cancelled) {
			kvc_buf_free(&b);
			return strdup("");
		}
		if (line == NULL) {
			if (b.n == 0 && !block) {
				kvc_buf_free(&b);
				return NULL;
			}
			break;	/* EOF ends the message that was being typed */
		}
		if (!block && b.n == 0 && strncmp(line, "\"\"\"", 3) == 0) {
			const char *rest = line + 3;

			block = true;
			if (strlen(rest) >= 3 && ends_with(rest, "\"\"\"")) {
				(void)kvc_buf_append(&b, rest, strlen(rest) - 3);
				free(line);
				break;
			}
			(void)kvc_buf_append(&b, rest, strlen(rest));
			if (rest[0] != '\0')
				(void)kvc_buf_append(&b, "\n", 1);
			free(line);
			continue;
		}
		if (block) {
			if (ends_with(line, "\"\"\"")) {
				(void)kvc_buf_append(&b, line, strlen(line) - 3);
				free(line);
				/* No trailing newline from the closing line. */
				while (b.n > 0 && b.p[b.n - 1] == '\n')
					b.n--;
				break;
			}
			(void)kvc_buf_append(&b, line, strlen(line));
			(void)kvc_buf_append(&b, "\n", 1);
			free(line);
			continue;
		}
		if (ends_with(line, "\\")) {
			(void)kvc_buf_append(&b, line, strlen(line) - 1);
			(void)kvc_buf_append(&b, "\n", 1);
			free(line);
			continue;
		}
		(void)kvc_buf_append(&b, line, strlen(line));
		free(line);
		break;
	}
	if (kvc_buf_append(&b, "", 0) != 0) {
		kvc_buf_free(&b);
		return strdup("");
	}
	b.p[b.n] = '\0';
	return b.p;
}

/* Completion over whole lines: "/re" -> "/resume ", "/resume ti" -> "/resume title". */
static char *
complete_gen(const char *text, int state)
{
	static char **cands;
	static int n_cands, next;

	if (state == 0) {
		struct kvc_buf b = {0};
		const struct kvc_cmd_entry *e;
		struct sess_conv *v;
		int n;

		for (int i = 0; i < n_cands; i++)
			free(cands[i]);
		free(cands);
		cands = NULL;
		n_cands = next = 0;
		/* Collect candidates as NUL-separated strings, then split. */
		if (strchr(text, ' ') == NULL) {
			for (int i = 0; (e = cmd_entry(i)) != NULL; i++)
				(void)kvc_buf_printf(&b, "/%s%c", e->name, 0);
		} else if (strncmp(text, "/resume ", 8) == 0 || strncmp(text, "/delete ", 8) == 0) {
			if (rl_repl && sess_conv_list(rl_repl->st, &v, &n, NULL, 0) == 0) {
				for (int i = 0; i < n; i++)
					(void)kvc_buf_printf(&b, "%.8s%s%c", text, v[i].title, 0);
				sess_conv_list_free(v, n);
			}
		} else if (strncmp(text, "/set ", 5) == 0) {
			static const char *const names[] = { "temperature", "top_p", "top_k",
			    "min_p", "repeat_penalty", "seed", "max_tokens" };
			for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
				(void)kvc_buf_printf(&b, "/set %s%c", names[i], 0);
		} else if (strncmp(text, "/export ", 8) == 0) {
			(void)kvc_buf_printf(&b, "/export md%c/export json%c", 0, 0);
		}
		for (size_t off = 0; off < b.n; off += strlen(b.p + off) + 1) {
			char **nv;

			if (strncmp(b.p + off, text, strlen(text)) != 0)
				continue;
			nv = realloc(cands, (size_t)(n_cands + 1) * sizeof *nv);
			if (nv == NULL)
				break;
			cands = nv;
			if ((cands[n_cands] = strdup(b.p + off)) != NULL)
				n_cands++;
		}
		kvc_buf_free(&b);
	}
	if (next < n_cands)
		return strdup(cands[next++]);
	return NULL;
}

static char **
complete(const char *text, int start, int end)
{
	(void)end;
	rl_attempted_completion_over = 1;
	if (start != 0 || text[0] != '/')
		return NULL;
	rl_completion_append_character = strchr(text, ' ') ? '\0' : ' ';
	return rl_completion_matches(text, complete_gen);
}

/*
 * The history file keeps one entry per line; a multi-line entry (a """
 * block) has its newlines written as \n and backslashes as \\, which the
 * first line announces. A file without that line (readline's own format)
 * is read as plain lines.
 */
#define HIST_MAGIC "#kvchat-history v2: \\n is a newline, \\\\ a backslash"

static void
history_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	bool esc = false, first = true;

	if (f == NULL)
		return;
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (first && strcmp(line, HIST_MAGIC) == 0) {
			esc = true;
			first = false;
			continue;
		}
		first = false;
		if (esc) {
			char *w = line;

			for (const char *p = line; *p; p++) {
				if (p[0] == '\\' && (p[1] == 'n' || p[1] == '\\')) {
					*w++ = p[1] == 'n' ? '\n' : '\\';
					p++;
				} else {
					*w++ = *p;
				}
			}
			*w = '\0';
		}
		if (line[0] != '\0')
			add_history(line);
	}
	free(line);
	fclose(f);
}

static void
history_save(const char *path)
{
	char tmp[4200];
	FILE *f;
	bool ok;

	snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
	f = fopen(tmp, "w");
	if (f == NULL)
		return;
	(void)fchmod(fileno(f), 0600);
	ok = fprintf(f, "%s\n", HIST_MAGIC) > 0;
	for (int i = 0; ok && i < history_length; i++) {
		HIST_ENTRY *h = history_get(history_base + i);

		if (h == NULL || h->line == NULL)
			continue;
		for (const char *p = h->line; ok && *p; p++)
			ok = (*p == '\n' ? fputs("\\n", f) : *p == '\\' ? fputs("\\\\", f) :
			    putc(*p, f)) >= 0;
		ok = ok && putc('\n', f) >= 0;
	}
	if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
		(void)unlink(tmp);
}

static int
run_repl(struct kvc_repl *r)
{
	char hist[4096], prompt[64];
	char *text;

	xdg_path(hist, sizeof hist, "XDG_STATE_HOME", ".local/state", "kvchat/history");
	(void)mkdir_parents(hist);
	using_history();
	stifle_history(2000);
	history_load(hist);
	rl_repl = r;
	rl_readline_name = "kvchat";
	/* Whole-line completion: titles may hold spaces. */
	rl_basic_word_break_characters = "\n";
	rl_completer_word_break_characters = "\n";
	rl_attempted_completion_function = complete;
	rl_catch_signals = 0;

	printf("kvchat: conversation %" PRId64 " (%s), %d messages. /help for commands.\n",
	    conv_id(r->cur), conv_title(r->cur), conv_n_msgs(r->cur));
	snprintf(prompt, sizeof prompt, "%s>>> %s", kvc_sgr(r->color, KVC_SGR_BOLD),
	    kvc_sgr(r->color, KVC_SGR_RESET));
	if (r->color)
		snprintf(prompt, sizeof prompt, "\001%s\002>>> \001%s\002", KVC_SGR_BOLD,
		    KVC_SGR_RESET);
	while (!r->quit) {
		text = read_input(r, prompt);
		if (text == NULL) {
			putchar('\n');
			break;
		}
		if (text[0] == '\0') {
			free(text);
			continue;
		}
		add_history(text);
		if (text[0] == '/' && text[1] != '/')
			(void)cmd_exec(r, text);
		else
			(void)repl_turn(r, text[0] == '/' ? text + 1 : text, false);
		free(text);
	}
	history_save(hist);
	rl_repl = NULL;
	return 0;
}

/* ---- the command ---- */

static int
open_conversation(struct kvc_repl *r, const struct chat_opts *o)
{
	char err[512];
	int64_t id;
	int rc;

	switch (o->mode) {
	case OPEN_SESSION:
		rc = sess_conv_find(r->st, o->name, &id, err, sizeof err);
		if (rc == KVC_ENOTFOUND)
			rc = conv_new(r->mgr, o->name, o->system, &r->set, &r->cur, err, sizeof err);
		else if (rc == 0)
			rc = conv_open(r->mgr, id, &r->cur, err, sizeof err);
		break;
	case OPEN_RESUME:
		rc = o->name ? sess_conv_find(r->st, o->name, &id, err, sizeof err) :
		    sess_conv_latest(r->st, &id, err, sizeof err);
		if (rc == KVC_ENOTFOUND && o->name == NULL)
			kvc_err(err, sizeof err, "no conversation to resume in %s", r->db_path);
		if (rc == 0)
			rc = conv_open(r->mgr, id, &r->cur, err, sizeof err);
		break;
	default:
		rc = conv_new(r->mgr, o->name, o->system, &r->set, &r->cur, err, sizeof err);
		break;
	}
	if (rc) {
		fprintf(stderr, "kvchat: %s\n", err);
		return rc;
	}
	if (o->mode != OPEN_NEW) {
		apply_cli_settings(r, r->cur);
		if (o->system && conv_n_msgs(r->cur) == 0)
			(void)conv_set_system(r->cur, o->system, NULL, 0);
		else if (o->system && (conv_system(r->cur) == NULL ||
		    strcmp(conv_system(r->cur), o->system) != 0))
			repl_notice(r, "--system ignored: the conversation already has messages "
			    "(/system changes it, recomputing the conversation)");
	}
	return 0;
}

int
repl_main(int argc, char **argv)
{
	struct chat_opts o;
	struct kvc_repl r;
	struct kvc_progress prog;
	struct conv_params cp;
	struct sigaction sa;
	char err[512], dbbuf[4096];
	char *model = NULL;
	const char *jinja;
	int rc, status = 1, fam;

	rc = parse_opts(argc, argv, &o);
	if (rc < 0)
		return 0;	/* --help, --version */
	if (rc > 0)
		return rc;
	memset(&r, 0, sizeof r);
	r.tty = isatty(0) && isatty(1);
	r.color = r.tty && !o.no_color && kvc_use_color(1);
	r.interrupt = &repl_sigint;
	r.set = o.set;
	r.set_mask = o.set_mask;
	r.system = o.system;
	r.stats_json = o.stats_json;
	r.kv_budget = o.kv_budget_given ? o.kv_budget : default_kv_budget();

	/* SIGINT stops a reply or clears the line; no SA_RESTART so reads wake up. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);

	model = pick_model(&o, r.tty);
	if (model == NULL)
		return 1;
	r.model_path = model;
	if (o.db)
		r.db_path = o.db;
	else {
		xdg_path(dbbuf, sizeof dbbuf, "XDG_DATA_HOME", ".local/share", "kvchat/sessions.db");
		r.db_path = dbbuf;
	}
	if (mkdir_parents(r.db_path) != 0) {
		fprintf(stderr, "kvchat: cannot create the folder of %s\n", r.db_path);
		goto out;
	}
	if (sess_open(&r.st, r.db_path, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: %s: %s\n", r.db_path, err);
		goto out;
	}

	progress_start(&prog, "loading weights", 0);
	o.ep.progress = progress_update;
	o.ep.progress_arg = &prog;
	rc = eng_open(&r.e, model, &o.ep, err, sizeof err);
	progress_end(&prog);
	if (rc) {
		fprintf(stderr, "kvchat: %s: %s\n", model, err);
		goto out;
	}

	jinja = gguf_get_str(eng_gguf(r.e), "tokenizer.chat_template", NULL);
	if (o.template_name)
		fam = chat_family_from_name(o.template_name);
	else if ((fam = jinja ? chat_detect(jinja) : -1) < 0) {
		fprintf(stderr, "kvchat: %s; using chatml (--chat-template chooses)\n",
		    jinja ? "unrecognised chat template" : "the model has no chat template");
		fam = CHAT_CHATML;
	}
	memset(&cp, 0, sizeof cp);
	cp.family = (enum chat_family)fam;
	cp.jinja = jinja;
	cp.kv_budget = r.kv_budget;
	cp.overflow = o.overflow;
	cp.notice = repl_notice;
	cp.notice_arg = &r;
	cp.progress = repl_progress;
	cp.progress_arg = &r;
	if (conv_mgr_new(&r.mgr, r.e, r.st, &cp, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: %s\n", err);
		goto out;
	}
	if (open_conversation(&r, &o) != 0)
		goto out;
	status = r.tty ? run_repl(&r) : run_batch(&r);
out:
	conv_mgr_free(r.mgr);
	eng_close(r.e);
	sess_close(r.st);
	free(model);
	return status;
}
