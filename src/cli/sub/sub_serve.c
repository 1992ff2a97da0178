/*
 * sub_serve.c: kvchat serve: the command line of the OpenAI-compatible
 * server (src/server): the model, the database its conversations share
 * with the chat, the address and the key; then it serves until SIGINT or
 * SIGTERM.
 *
 * Safe by default: it binds to 127.0.0.1; any address that is not a
 * loopback one needs --api-key-file (or an explicit --no-auth). The key is
 * read from a file, never from the command line, where ps would show it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/repl/repl.h"
#include "conv/conv.h"
#include "server/server.h"
#include "sub_common.h"

static const char serve_usage[] =
    "usage: kvchat serve -m FILE [--host ADDR] [--port N] [--parallel B] [--db PATH]\n"
    "                    [--api-key-file F | --no-auth] [--max-tokens N] [--timeout S]\n"
    "                    [--max-queue N] [--kv-budget SIZE] [--keep-unnamed N] [--grace S]\n"
    "                    [--chat-template NAME] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
    "                    [--repeat-penalty R] [--seed S] [--quiet] [--no-warmup]\n"
    "                    [--threads N] [--ctx N]\n"
    "                    [--kv-type f16|f32|q8_0] [--device auto|cpu|cuda] [--gpu N]\n"
    "\n"
    "  -m, --model FILE    the GGUF model to serve (named after the file in /v1/models)\n"
    "  --host ADDR         address to listen on (default 127.0.0.1); another than a\n"
    "                      loopback one needs --api-key-file or --no-auth\n"
    "  --port N            port (default 8080; 0: a free one, said on stderr)\n"
    "  --parallel B, -B B  requests decoded together, each with a resident cache (default 4)\n"
    "  --db PATH           the conversations' database (default the chat's)\n"
    "  --api-key-file F    every request but /health needs \"Authorization: Bearer KEY\",\n"
    "                      KEY the file's first line\n"
    "  --no-auth           serve a non-loopback address without a key\n"
    "  --max-tokens N      the most a request may ask for, and its default (default 2048)\n"
    "  --timeout S         close a connection idle for S seconds (default 60)\n"
    "  --max-queue N       requests that may wait for a sequence; more get 429 (default 64)\n"
    "  --kv-budget SIZE    memory the idle sequences' caches (and the stored conversations'\n"
    "                      open for a request) may keep, e.g. 512M; the least recently used\n"
    "                      lets go first (default: no limit)\n"
    "  --keep-unnamed N    unnamed chat requests are stored as conversations titled \"api: ...\"\n"
    "                      (a client resending its history continues its own); the N most\n"
    "                      recent are kept, older ones deleted (default 100; 0: store none)\n"
    "  --grace S           on SIGINT or SIGTERM, new requests get 503 and running ones\n"
    "                      may finish for S seconds (default 30); then, or at a second\n"
    "                      signal, they are ended (a stored conversation's reply so far\n"
    "                      kept, marked interrupted) and the server exits 0\n"
    "  --chat-template NAME  the template of /v1/chat/completions (default: the model's)\n"
    "  --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed\n"
    "                      a request's sampling when it says none (the chat's defaults)\n"
    "  --threads N (-t), --ctx N (-c), --kv-type T, --device D, --gpu N\n"
    "                      the engine, as the chat's (--ctx: each sequence's context)\n"
    "  --quiet, -q         no line per request on stderr\n"
    "  --no-warmup         listen at once; by default a short pass runs through the model\n"
    "                      first, and each sequence takes back the cache of one of the\n"
    "                      stored conversations used last (from its snapshot), so that\n"
    "                      after a restart the first requests are as fast as before it\n"
    "Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions\n"
    "(stream, stream_options.include_usage, max_tokens, max_completion_tokens, temperature,\n"
    "top_p, top_k, min_p, repeat_penalty, seed, stop, n = 1; \"conversation\": ID or \"new\",\n"
    "or the header X-Kvchat-Conversation: a stored conversation's turn, as kvchat --resume\n"
    "opens it). Responses: usage with prompt_tokens_details.cached_tokens, timings as\n"
    "llama-server's.\n";

#define SERVE_KEY_MAX 4096

struct serve_opts {
	struct kvc_engine_params ep;
	struct srv_params sp;
	const char *model, *db, *key_file, *template_name;
	bool no_auth, quiet;
	int grace_s;			/* --grace: seconds running requests may finish in */
	char key[SERVE_KEY_MAX];
};

static int
usage(const char *why, const char *arg)
{
	return sub_usage("serve", serve_usage, why, arg);
}

/* One option at argv[*i]: -1 to go on, else the exit status. */
static int
parse_opt(int argc, char **argv, int *i, struct serve_opts *o)
{
	const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL, *why;
	const struct conv_setting *row;
	long v;
	int eo;

	if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
		fputs(serve_usage, stdout);
		return 0;
	}
	if (strcmp(a, "--no-warmup") == 0) {
		o->sp.no_warmup = true;
		return -1;
	}
	if (strcmp(a, "--no-auth") == 0 || strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
		*(a[2] == 'n' ? &o->no_auth : &o->quiet) = true;
		return -1;
	}
	if (val == NULL)
		return usage("option needs a value or is unknown", a);
	(*i)++;
	if ((eo = sub_engine_option(a, val, &o->ep, &why)) != 0 ||
	    (eo = sub_ctx_option(a, val, &o->ep, &why)) != 0)
		return eo < 0 ? usage(why, val) : -1;
	if (strncmp(a, "--", 2) == 0 && (row = conv_setting_by_opt(a + 2)) != NULL && row->smp) {
		if (conv_setting_apply(&o->sp.defaults, row, a, val, NULL, 0) != KVC_OK)
			return usage("bad value", a);
		return -1;
	}
	if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0)
		o->model = val;
	else if (strcmp(a, "--host") == 0)
		o->sp.host = val;
	else if (strcmp(a, "--port") == 0) {
		if (kvc_parse_long(val, 0, 65535, &v) != KVC_OK)
			return usage("bad --port (0 to 65535)", val);
		o->sp.port = (int)v;
	} else if (strcmp(a, "--parallel") == 0 || strcmp(a, "-B") == 0) {
		if (kvc_parse_long(val, 1, 64, &v) != KVC_OK)
			return usage("bad --parallel (1 to 64)", val);
		o->sp.parallel = (int)v;
	} else if (strcmp(a, "--max-tokens") == 0) {
		if (kvc_parse_long(val, 1, 1L << 20, &v) != KVC_OK)
			return usage("bad --max-tokens", val);
		o->sp.max_tokens = (int)v;
	} else if (strcmp(a, "--timeout") == 0) {
		if (kvc_parse_long(val, 1, 86400, &v) != KVC_OK)
			return usage("bad --timeout (1 to 86400 seconds)", val);
		o->sp.timeout_s = (int)v;
	} else if (strcmp(a, "--grace") == 0) {
		if (kvc_parse_long(val, 0, 86400, &v) != KVC_OK)
			return usage("bad --grace (0 to 86400 seconds)", val);
		o->grace_s = (int)v;
	} else if (strcmp(a, "--max-queue") == 0) {
		if (kvc_parse_long(val, 0, 4096, &v) != KVC_OK)
			return usage("bad --max-queue (0 to 4096)", val);
		o->sp.max_queue = (int)v;
	} else if (strcmp(a, "--keep-unnamed") == 0) {
		if (kvc_parse_long(val, 0, 1000000, &v) != KVC_OK)
			return usage("bad --keep-unnamed (0 to 1000000)", val);
		o->sp.keep_unnamed = (int)v;
	} else if (strcmp(a, "--kv-budget") == 0) {
		if (kvc_parse_size(val, &o->sp.kv_budget) != KVC_OK)
			return usage("--kv-budget: not a size (512M, 2G)", val);
		o->sp.conv.kv_budget = o->sp.kv_budget;
	} else if (strcmp(a, "--db") == 0)
		o->db = val;
	else if (strcmp(a, "--api-key-file") == 0)
		o->key_file = val;
	else if (strcmp(a, "--chat-template") == 0) {
		if (chat_family_from_name(val) < 0)
			return usage("unknown chat template", val);
		o->template_name = val;
	} else
		return usage("unknown argument", a);
	return -1;
}

/* The key: the file's first line, trimmed. 0, or 1 with the message said. */
static int
read_key(struct serve_opts *o)
{
	FILE *f = fopen(o->key_file, "r");
	size_t n;

	if (f == NULL) {
		fprintf(stderr, "kvchat: serve: %s: %s\n", o->key_file, strerror(errno));
		return 1;
	}
	if (fgets(o->key, sizeof o->key, f) == NULL)
		o->key[0] = '\0';
	fclose(f);
	n = strcspn(o->key, "\r\n");
	while (n > 0 && (o->key[n - 1] == ' ' || o->key[n - 1] == '\t'))
		n--;
	o->key[n] = '\0';
	if (n < 8) {
		fprintf(stderr, "kvchat: serve: %s: the key must be a line of at least 8 characters\n",
		    o->key_file);
		return 1;
	}
	return 0;
}

static bool
loopback(const char *host)
{
	return strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
	    strncmp(host, "127.", 4) == 0;
}

static void
log_line(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "kvchat: serve: %s\n", line);
}

/* The model's name as /v1/models lists it: the file's name without ".gguf". */
static void
model_id(const char *path, char *buf, size_t len)
{
	const char *b = strrchr(path, '/');
	size_t n;

	b = b ? b + 1 : path;
	n = strlen(b);
	if (n > 5 && strcmp(b + n - 5, ".gguf") == 0)
		n -= 5;
	snprintf(buf, len, "%.*s", (int)n, b);
}

/*
 * Wait until nothing runs any more, grace_s seconds at most, or until a
 * second signal of set. The wait is sigtimedwait's: the signals stay
 * blocked (the server's threads never see them) and one ends it at once.
 */
static void
wait_idle(struct kvc_server *srv, const sigset_t *set, int grace_s)
{
	double end = kvc_now() + grace_s;

	while (!srv_idle(srv)) {
		struct timespec ts = { 0, 50 * 1000000L };
		double left = end - kvc_now();

		if (left <= 0) {
			fprintf(stderr, "kvchat: serve: --grace %d s over: ending what still runs\n",
			    grace_s);
			return;
		}
		if (left < 0.05)
			ts.tv_nsec = (long)(left * 1e9);
		if (sigtimedwait(set, NULL, &ts) > 0) {
			fprintf(stderr, "kvchat: serve: a second signal: ending what still runs\n");
			return;
		}
	}
}

/* Serve until SIGINT or SIGTERM. The exit status. */
static int
serve(struct serve_opts *o, struct kvc_engine *e, struct sess_store *st)
{
	struct kvc_server *srv;
	sigset_t set;
	char err[512] = "", name[256];
	int fam, sig = 0;

	model_id(o->model, name, sizeof name);
	o->sp.model_id = name;
	fam = chat_family_for_file(eng_gguf(e), &o->sp.jinja);
	if (o->template_name)
		fam = chat_family_from_name(o->template_name);
	if (fam < 0)
		fprintf(stderr, "kvchat: serve: %s; chats use chatml (--chat-template chooses)\n",
		    o->sp.jinja ? "unrecognised chat template" : "the model has no chat template");
	o->sp.family = fam < 0 ? CHAT_CHATML : (enum chat_family)fam;
	o->sp.store = st;
	o->sp.conv.family = o->sp.family;
	o->sp.conv.jinja = o->sp.jinja;
	o->sp.api_key = o->key_file ? o->key : NULL;
	if (!o->quiet)
		o->sp.log = log_line;
	/* the threads the server starts inherit this mask: the signals come here */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (srv_start(&srv, e, &o->sp, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: serve: %s\n", err);
		return 1;
	}
	fprintf(stderr, "kvchat: serve: listening on http://%s%s%s:%d/v1 (model %s, %s, parallel %d, "
	    "%s)\n", strchr(o->sp.host, ':') ? "[" : "", o->sp.host, strchr(o->sp.host, ':') ? "]" :
	    "", srv_port(srv), name, chat_family_name(o->sp.family), o->sp.parallel,
	    o->sp.api_key ? "key required" : "no key");
	while (sigwait(&set, &sig) != 0)
		;
	/* said once it holds: a client that reads it gets 503 */
	srv_drain(srv);
	fprintf(stderr, "kvchat: serve: %s: stopping: new requests get 503, running ones may finish "
	    "for %d s (a second signal ends them now)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
	    o->grace_s);
	wait_idle(srv, &set, o->grace_s);
	srv_stop(srv);
	fprintf(stderr, "kvchat: serve: stopped\n");
	return 0;
}

/* The database, at --db or where the chat keeps it. NULL with the message said. */
static struct sess_store *
open_db(const struct serve_opts *o)
{
	struct sess_store *st = NULL;
	char path[4096], err[512];
	const char *db = o->db;

	if (db == NULL) {
		if (repl_xdg_path(path, sizeof path, "XDG_DATA_HOME", ".local/share",
		    "kvchat/sessions.db", err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: serve: cannot place the database: %s\n", err);
			return NULL;
		}
		db = path;
	}
	if (repl_private_dir(db, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: serve: cannot use the folder of %s: %s\n", db, err);
		return NULL;
	}
	if (sess_open(&st, db, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: serve: %s\n", err);
		return NULL;
	}
	return st;
}

int
sub_serve(int argc, char **argv)
{
	struct serve_opts o;
	struct kvc_engine *e = NULL;
	struct sess_store *st = NULL;
	char err[512] = "";
	int rc = -1;

	memset(&o, 0, sizeof o);
	o.ep = kvc_engine_default_params();
	/* and a server for its requests */
	o.ep.pack_ahead = true;
	o.sp = srv_default_params();
	o.grace_s = 30;
	for (int i = 1; i < argc && rc < 0; i++)
		rc = parse_opt(argc, argv, &i, &o);
	if (rc < 0 && o.model == NULL)
		rc = usage("no model given (-m FILE)", NULL);
	if (rc < 0 && o.no_auth && o.key_file)
		rc = usage("--no-auth and --api-key-file exclude each other", NULL);
	if (rc < 0 && !loopback(o.sp.host) && !o.key_file && !o.no_auth) {
		fprintf(stderr, "kvchat: serve: %s is not a loopback address: anyone who reaches it "
		    "could use the model and read what it stores; give --api-key-file F (or "
		    "--no-auth if that is what you want)\n", o.sp.host);
		rc = 2;
	}
	if (rc < 0 && o.key_file && read_key(&o) != 0)
		rc = 1;
	if (rc < 0 && (st = open_db(&o)) == NULL)
		rc = 1;
	if (rc < 0 && eng_open(&e, o.model, &o.ep, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: serve: %s\n", err);
		rc = 1;
	}
	if (rc < 0)
		rc = serve(&o, e, st);
	eng_close(e);
	if (st != NULL)
		sess_close(st);
	memset(o.key, 0, sizeof o.key);
	return rc;
}
