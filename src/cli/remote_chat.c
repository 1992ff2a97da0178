/*
 * remote_chat.c: kvchat --endpoint URL: the chat against a remote
 * OpenAI-compatible server (vLLM or SGLang across GPUs and machines,
 * llama-server, ollama, another kvchat serve), for models bigger than this
 * machine.
 *
 * No model is loaded here: each turn sends the whole conversation (the
 * server's prefix cache, when it has one, makes that cost only the new
 * message) and streams the reply (src/remote). Conversations are stored in
 * the local database as the chat stores them, history only (no KV
 * snapshot: the cache is the server's), each locked while open, titled
 * from the first message as the chat titles them. The REPL's commands work
 * here through the REPL's own table, history printing, listing and export:
 * any stored conversation, the chat's own included, can be continued on the
 * server from its messages. The settings (/set, the command line's sampling
 * options) are those the requests carry, each left to the server until
 * given; /system is the system message sent; /show says what is known here
 * (the endpoint, the model's name, the settings), not the remote model's
 * insides; /stats lists the stored turns' figures. The stats line gives
 * the time to first token, the decode rate and the server's cached_tokens
 * when it reports them. Ctrl-C stops a reply (kept, marked interrupted);
 * Ctrl-C or Ctrl-D at the prompt ends the chat.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/readline.h>
#include <readline/history.h>

#include "cli.h"
#include "remote_int.h"
#include "cli/repl/cmd.h"
#include "cli/repl/repl.h"
#include "conv/conv.h"
#include "remote/remote.h"
#include "sessions/store.h"

static const char remote_usage[] =
    "usage: kvchat --endpoint URL [--remote-model NAME] [--api-key-file F] [--db PATH]\n"
    "              [--resume ID|TITLE] [--system TEXT] [--temp T] [--top-p P] [--top-k K]\n"
    "              [--min-p P] [--repeat-penalty R] [--seed S] [-n N]\n"
    "  --endpoint URL        an OpenAI-compatible server, e.g. http://host:8000/v1\n"
    "  --remote-model NAME   the model to ask for (default: the first it lists)\n"
    "  --api-key-file F      send \"Authorization: Bearer KEY\", KEY the file's first line\n"
    "  --temp ... -n         sent with every request (unset: the server's defaults)\n"
    "In the chat every command of the local chat: /set NAME VALUE (or default) changes what\n"
    "the requests send, /system TEXT the system message, /show the endpoint, model and\n"
    "settings, /stats the stored turns' figures.\n";

static volatile sig_atomic_t remote_interrupt;

static void
on_sigint(int sig)
{
	(void)sig;
	remote_interrupt = 1;
}

static int
usage(const char *why, const char *arg)
{
	fprintf(stderr, "kvchat: %s%s%s\n%s", why, arg ? ": " : "", arg ? arg : "", remote_usage);
	return 2;
}

/* -1 to go on, else the exit status. */
static int
parse_args(int argc, char **argv, struct remote_opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		const struct conv_setting *row;
		char err[512];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(remote_usage, stdout);
			return 0;
		}
		if (v == NULL)
			return usage("option needs a value or is unknown", a);
		i++;
		if (strcmp(a, "--endpoint") == 0)
			o->rp.base_url = v;
		else if (strcmp(a, "--remote-model") == 0)
			o->rp.model = v;
		else if (strcmp(a, "--api-key-file") == 0)
			o->key_file = v;
		else if (strcmp(a, "--db") == 0)
			o->db = v;
		else if (strcmp(a, "--resume") == 0)
			o->resume = v;
		else if (strcmp(a, "--system") == 0)
			o->system = v;
		else if ((row = strcmp(a, "-n") == 0 ? conv_setting_find("max_tokens") :
		    strncmp(a, "--", 2) == 0 ? conv_setting_by_opt(a + 2) : NULL) != NULL) {
			if (conv_setting_apply(&o->set, row, a, v, err, sizeof err) != KVC_OK)
				return usage(err, NULL);
			o->given[row - conv_setting_table] = true;
		} else
			return usage("not an option of --endpoint", a);
	}
	return -1;
}

/* The key file's first line. 0, or 1 said. */
static int
read_key(struct remote_opts *o)
{
	FILE *f = fopen(o->key_file, "r");

	if (f == NULL) {
		fprintf(stderr, "kvchat: %s: %s\n", o->key_file, strerror(errno));
		return 1;
	}
	if (fgets(o->key, sizeof o->key, f) == NULL)
		o->key[0] = '\0';
	fclose(f);
	o->key[strcspn(o->key, "\r\n")] = '\0';
	o->rp.api_key = o->key;
	return 0;
}

static int
print_text(void *arg, const char *s, size_t n)
{
	(void)arg;
	fwrite(s, 1, n, stdout);
	fflush(stdout);
	return 0;
}

/* The messages to send: the system prompt, then every stored message. NULL on ENOMEM. */
static struct rmt_msg *
history(const struct remote_chat *c, size_t *n)
{
	struct rmt_msg *m = calloc((size_t)c->n_msgs + 1, sizeof *m);

	*n = 0;
	if (m == NULL)
		return NULL;
	if (c->system != NULL && c->system[0] != '\0')
		m[(*n)++] = (struct rmt_msg){ "system", c->system };
	for (int i = 0; i < c->n_msgs; i++)
		m[(*n)++] = (struct rmt_msg){ c->msgs[i].role == SESS_USER ? "user" : "assistant",
		    c->msgs[i].text };
	return m;
}

/* Forget the last message in memory (its text, and the reasoning and ids a chat-made one has). */
static void
forget_last(struct remote_chat *c)
{
	c->n_msgs--;
	free(c->msgs[c->n_msgs].text);
	free(c->msgs[c->n_msgs].reasoning);
	free(c->msgs[c->n_msgs].ids);
}

/* Append a copy of text as role to the messages in memory. 0 or KVC_ENOMEM. */
static int
remember(struct remote_chat *c, enum sess_role role, const char *text, bool interrupted)
{
	struct sess_msg *nm = realloc(c->msgs, ((size_t)c->n_msgs + 1) * sizeof *nm);

	if (nm == NULL)
		return KVC_ENOMEM;
	c->msgs = nm;
	memset(&nm[c->n_msgs], 0, sizeof *nm);
	nm[c->n_msgs].role = role;
	nm[c->n_msgs].interrupted = interrupted;
	if ((nm[c->n_msgs].text = strdup(text)) == NULL)
		return KVC_ENOMEM;
	c->n_msgs++;
	return KVC_OK;
}

/* The conversation is stored, and locked, with its first message. 0, or 1 said. */
static int
create(struct remote_chat *c, const char *first)
{
	char err[512], title[64], fp[300];

	(void)conv_title_from(first, title, sizeof title);
	snprintf(c->title, sizeof c->title, "%s", title);
	snprintf(fp, sizeof fp, "remote:%s", c->o->rp.model);
	if (sess_conv_create(c->st, title, fp, "remote", c->system, "", &c->id, err,
	    sizeof err) != KVC_OK || sess_conv_lock(c->st, c->id, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		return 1;
	}
	return 0;
}

/*
 * The reply to the stored history (ending with a user message), streamed,
 * stored and remembered. 0, or a KVC_E* code after saying why (nothing of
 * the reply is kept).
 */
static int
ask(struct remote_chat *c)
{
	struct sess_msg am;
	struct rmt_stats rs;
	struct rmt_msg *h;
	struct kvc_buf reply = {0};
	char err[512] = "";
	size_t n;
	int rc;

	if ((h = history(c, &n)) == NULL)
		return KVC_ENOMEM;
	remote_request_settings(c->o);
	remote_interrupt = 0;
	rc = rmt_chat(&c->o->rp, h, n, print_text, NULL, &remote_interrupt, &reply, &rs, err,
	    sizeof err);
	free(h);
	printf("\n\n");
	fflush(stdout);
	if (rc != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		kvc_buf_free(&reply);
		return rc;
	}
	memset(&am, 0, sizeof am);
	am.role = SESS_ASSISTANT;
	am.text = reply.p ? reply.p : (char *)"";
	am.interrupted = rs.interrupted;
	am.stats.ttft_ms = rs.ttft_ms;
	am.stats.gen_tokens = rs.completion_tokens > 0 ? rs.completion_tokens : 0;
	am.stats.reused_tokens = rs.cached_tokens > 0 ? rs.cached_tokens : 0;
	am.stats.prefill_tokens = rs.prompt_tokens > 0 && rs.cached_tokens >= 0 ?
	    rs.prompt_tokens - rs.cached_tokens : 0;
	am.stats.decode_tps = rs.decode_tps;
	if (sess_turn_commit(c->st, c->id, &am, 1, NULL, err, sizeof err) != KVC_OK ||
	    remember(c, SESS_ASSISTANT, am.text, rs.interrupted) != KVC_OK)
		fprintf(stderr, "kvchat: the reply was not stored: %s\n", err);
	else
		c->msgs[c->n_msgs - 1].stats = am.stats;	/* what /stats lists */
	if (c->o->quiet) {
		kvc_buf_free(&reply);
		return 0;
	}
	fprintf(stderr, "[%s: TTFT %.0f ms", c->o->rp.model, rs.ttft_ms);
	if (rs.completion_tokens >= 0)
		fprintf(stderr, ", %d tokens, %.1f tok/s", rs.completion_tokens, rs.decode_tps);
	if (rs.cached_tokens >= 0)
		fprintf(stderr, ", cached %d of %d prompt tokens", rs.cached_tokens, rs.prompt_tokens);
	fprintf(stderr, "%s]\n", rs.interrupted ? ", interrupted" : "");
	kvc_buf_free(&reply);
	return 0;
}

/* One turn. 0, or 1 (said; nothing of the turn is kept). */
static int
turn(struct remote_chat *c, const char *line)
{
	struct sess_msg um;
	char err[512] = "";

	if (c->id == 0 && create(c, line) != 0)
		return 1;
	memset(&um, 0, sizeof um);
	um.role = SESS_USER;
	um.text = (char *)line;
	if (sess_user_commit(c->st, c->id, &um, err, sizeof err) != KVC_OK ||
	    remember(c, SESS_USER, line, false) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err[0] ? err : "out of memory");
		return 1;
	}
	if (ask(c) != KVC_OK) {
		/* the message the server could not answer is taken back */
		(void)sess_rewind(c->st, c->id, c->n_msgs - 1, 0, err, sizeof err);
		forget_last(c);
		return 1;
	}
	return 0;
}

/* /retry: the last reply (if any) is dropped and the last message answered again. */
static int
retry(struct remote_chat *c)
{
	char err[512];
	int keep = c->n_msgs;

	while (keep > 0 && c->msgs[keep - 1].role == SESS_ASSISTANT)
		keep--;
	if (keep == 0) {
		fprintf(stderr, "kvchat: nothing to retry\n");
		return 1;
	}
	if (keep < c->n_msgs && sess_rewind(c->st, c->id, keep, 0, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		return 1;
	}
	while (c->n_msgs > keep)
		forget_last(c);
	/* on failure the message stays, unanswered, as the chat leaves a cut-off reply */
	return ask(c) == KVC_OK ? 0 : 1;
}

/* /undo: the last exchange leaves the store and the history. */
static void
undo(struct remote_chat *c)
{
	char err[512];
	int keep = c->n_msgs;

	while (keep > 0 && c->msgs[keep - 1].role == SESS_ASSISTANT)
		keep--;
	if (keep > 0)
		keep--;
	if (keep == c->n_msgs || sess_rewind(c->st, c->id, keep, 0, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: nothing to undo\n");
		return;
	}
	while (c->n_msgs > keep)
		forget_last(c);
	fprintf(stderr, "kvchat: the last exchange is undone\n");
}

/*
 * The open conversation closed (it stays stored, its lock let go) and the
 * next message starts a new one, under the command line's --system, as
 * the chat's /new does.
 */
static void
close_conv(struct remote_chat *c)
{
	if (c->id > 0)
		sess_conv_unlock(c->st, c->id);
	c->id = 0;
	c->title[0] = '\0';
	while (c->n_msgs > 0)
		forget_last(c);
	free(c->system);
	c->system = c->o->system ? strdup(c->o->system) : NULL;
}

/*
 * Conversation id continued here (--resume, /resume): locked, its system
 * prompt, title and messages read; the one open before is closed only once
 * that worked, so a failure leaves the chat as it was. 0, or 1 said (what:
 * "--resume", "/resume").
 */
static int
open_conv(struct remote_chat *c, int64_t id, const char *what)
{
	struct sess_conv sc;
	struct sess_msg *msgs = NULL;
	char err[512], t[256];
	int n = 0;

	memset(&sc, 0, sizeof sc);
	if (sess_conv_lock(c->st, id, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s: %s\n", what, err);
		return 1;
	}
	if (sess_conv_get(c->st, id, &sc, err, sizeof err) != KVC_OK ||
	    sess_msgs_load(c->st, id, &msgs, &n, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s: %s\n", what, err);
		sess_conv_clear(&sc);
		sess_conv_unlock(c->st, id);
		return 1;
	}
	close_conv(c);
	free(c->system);
	free(c->msgs);
	c->system = sc.system ? strdup(sc.system) : NULL;
	c->msgs = msgs;
	c->n_msgs = n;
	c->id = id;
	snprintf(c->title, sizeof c->title, "%s", sc.title ? sc.title : "");
	sess_conv_clear(&sc);
	fprintf(stderr, "kvchat: conversation %lld (%s), %d messages\n", (long long)id,
	    repl_title(c->title, t, sizeof t), n);
	return 0;
}

/* --resume: the stored conversation by id or title. 0, or 1 said. */
static int
resume(struct remote_chat *c)
{
	char err[512];
	int64_t id;

	if (sess_conv_find(c->st, c->o->resume, &id, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		return 1;
	}
	return open_conv(c, id, "--resume");
}

/* /resume [ID|TITLE]: another stored conversation (default: the latest) continued here. */
static int
resume_cmd(struct remote_chat *c, const char *args)
{
	char err[512];
	int64_t id;

	if (args[0] == '\0') {
		if (sess_conv_latest(c->st, &id, err, sizeof err) != KVC_OK) {
			fprintf(stderr, "kvchat: /resume: %s\n", err);
			return 1;
		}
	} else if (repl_pick_conv(&c->shell, "/resume", args, stdout, &id) != 0) {
		return 1;
	}
	if (id == c->id) {
		printf("conversation %lld is this one\n", (long long)id);
		return 0;
	}
	return open_conv(c, id, "/resume");
}

/* /delete [ID|TITLE]: a stored conversation (default: this one, then a new one starts). */
static int
delete_cmd(struct remote_chat *c, const char *args)
{
	char err[512];
	int64_t id;

	if (args[0] == '\0' && c->id == 0) {
		printf("this conversation has no messages: nothing to delete\n");
		return 0;
	}
	if (args[0] == '\0')
		id = c->id;
	else if (repl_pick_conv(&c->shell, "/delete", args, stdout, &id) != 0)
		return 1;
	if (!cmd_confirm_delete(&c->shell, id))
		return 0;
	/* one held by another process (a chat, kvchat serve) is refused by its lock */
	if (sess_conv_delete(c->st, id, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: /delete: %s\n", err);
		return 1;
	}
	if (id == c->id) {
		c->id = 0;	/* gone with its lock */
		close_conv(c);
	}
	printf("deleted conversation %lld\n", (long long)id);
	return 0;
}

/* The REPL's commands that work on a remote engine, in /help's order. */
static const char *const remote_cmds[] = {
	"help", "new", "list", "resume", "delete", "rename", "undo", "retry", "clear", "history",
	"stats", "export", "quit", "show", "system", "set",
};

/* The messages as the REPL's printing and /export take them. NULL on ENOMEM. */
static const struct sess_msg **
msg_list(const struct remote_chat *c)
{
	const struct sess_msg **v = calloc(c->n_msgs > 0 ? (size_t)c->n_msgs : 1, sizeof *v);

	for (int i = 0; v != NULL && i < c->n_msgs; i++)
		v[i] = &c->msgs[i];
	return v;
}

/* "/name args" by the REPL's command table. 0, or 1 said. */
static int
command(struct remote_chat *c, const char *line)
{
	const struct kvc_cmd_entry *e;
	const struct sess_msg **v;
	char name[32], err[512];
	size_t n = 0;
	long k = -1;
	int rc = 0;

	for (line++; line[n] && line[n] != ' ' && line[n] != '\t' && n < sizeof name - 1; n++)
		name[n] = line[n];
	name[n] = '\0';
	for (line += n; *line == ' ' || *line == '\t'; line++)
		;
	if ((e = cmd_find(name)) == NULL) {
		fprintf(stderr, "kvchat: unknown command '/%s' (/help lists them)\n", name);
		return 1;
	}
	if (strcmp(e->name, "help") == 0) {
		printf("Commands with --endpoint:\n");
		for (size_t i = 0; i < sizeof remote_cmds / sizeof remote_cmds[0]; i++) {
			const struct kvc_cmd_entry *x = cmd_find(remote_cmds[i]);
			char head[48];

			snprintf(head, sizeof head, "/%s%s%s", x->name, x->args[0] ? " " : "", x->args);
			printf("  %-26s %s\n", head, x->help);
		}
		printf("/set and the sampling options change what the requests send; a setting never\n"
		    "given (or set to default) is left to the server.\n");
	} else if (strcmp(e->name, "quit") == 0) {
		c->shell.quit = true;
	} else if (strcmp(e->name, "undo") == 0) {
		undo(c);
	} else if (strcmp(e->name, "retry") == 0) {
		rc = retry(c);
	} else if (strcmp(e->name, "new") == 0) {
		close_conv(c);
		fprintf(stderr, "kvchat: new conversation\n");
	} else if (strcmp(e->name, "list") == 0) {
		rc = cmd_list_rows(&c->shell, c->id);
	} else if (strcmp(e->name, "resume") == 0) {
		rc = resume_cmd(c, line);
	} else if (strcmp(e->name, "delete") == 0) {
		rc = delete_cmd(c, line);
	} else if (strcmp(e->name, "clear") == 0) {
		if (c->id > 0 && sess_rewind(c->st, c->id, 0, 0, err, sizeof err) != KVC_OK) {
			fprintf(stderr, "kvchat: %s\n", err);
			return 1;
		}
		while (c->n_msgs > 0)
			forget_last(c);
	} else if (strcmp(e->name, "rename") == 0) {
		if (*line == '\0' || c->id == 0) {
			fprintf(stderr, "kvchat: %s\n", *line ? "nothing stored to rename yet" :
			    "usage: /rename TITLE");
			return 1;
		}
		if (sess_conv_rename(c->st, c->id, line, err, sizeof err) != KVC_OK) {
			fprintf(stderr, "kvchat: %s\n", err);
			return 1;
		}
		snprintf(c->title, sizeof c->title, "%s", line);
	} else if (strcmp(e->name, "history") == 0 || strcmp(e->name, "export") == 0) {
		if (e->name[0] == 'h' && *line && kvc_parse_long(line, 0, 1000000, &k) != KVC_OK) {
			fprintf(stderr, "kvchat: usage: /history [N] (the last N messages)\n");
			return 1;
		}
		if ((v = msg_list(c)) == NULL) {
			fprintf(stderr, "kvchat: out of memory\n");
			return 1;
		}
		if (e->name[0] == 'h') {
			if (c->n_msgs == 0)
				printf("no messages yet\n");
			repl_show_list(&c->shell, v, c->n_msgs, (int)k, false);
		} else {
			struct repl_export_src x = { c->id, c->title, c->o->rp.model, c->system, v,
			    c->n_msgs };

			rc = cmd_export_write(&c->shell, &x, line);
		}
		free(v);
	} else if (strcmp(e->name, "stats") == 0) {
		remote_stats_cmd(c);
	} else if (strcmp(e->name, "show") == 0) {
		rc = remote_show_cmd(c, line);
	} else if (strcmp(e->name, "system") == 0) {
		rc = remote_system_cmd(c, line);
	} else if (strcmp(e->name, "set") == 0) {
		rc = remote_set_cmd(c, line);
	} else {
		fprintf(stderr, "kvchat: /%s is not available with --endpoint: it needs a local "
		    "model (kvchat -m MODEL)\n", e->name);
		return 1;
	}
	return rc;
}

/* Lines until the end of input or /quit. The exit status. */
static int
loop(struct remote_chat *c)
{
	bool tty = isatty(STDIN_FILENO);
	char *line = NULL;
	size_t cap = 0;
	int status = 0;

	for (;;) {
		char *l;

		if (tty) {
			remote_interrupt = 0;
			free(line);
			line = readline("> ");
			if (line == NULL || remote_interrupt)
				break;
			if (*line)
				add_history(line);
			l = line;
		} else {
			if (getline(&line, &cap, stdin) < 0)
				break;
			line[strcspn(line, "\n")] = '\0';
			l = line;
		}
		if (*l == '\0')
			continue;
		if (l[0] == '/') {
			/* as at the chat's prompt: a command that fails said why, and the chat goes on */
			(void)command(c, l);
			if (c->shell.quit)
				break;
		} else if (turn(c, l) != 0)
			status = 1;
	}
	free(line);
	return status;
}

int
cli_remote_main(int argc, char **argv)
{
	struct remote_opts o;
	struct remote_chat c;
	struct sigaction sa;
	char path[4096], err[512];
	const char *db;
	int rc;

	memset(&o, 0, sizeof o);
	memset(&c, 0, sizeof c);
	o.set = conv_default_settings();
	c.o = &o;
	c.shell.tty = isatty(STDIN_FILENO);
	c.shell.show_thinking = -1;
	if ((rc = parse_args(argc, argv, &o)) >= 0)
		return rc;
	if (o.rp.base_url == NULL || strncmp(o.rp.base_url, "http", 4) != 0)
		return usage("--endpoint needs an http:// or https:// URL", o.rp.base_url);
	if (o.key_file != NULL && read_key(&o) != 0)
		return 1;
	if (rmt_global_init() != KVC_OK) {
		fprintf(stderr, "kvchat: cannot start libcurl\n");
		return 1;
	}
	rc = 1;
	if (o.rp.model == NULL) {
		if (rmt_first_model(&o.rp, o.model, sizeof o.model, err, sizeof err) != KVC_OK) {
			fprintf(stderr, "kvchat: %s\n", err);
			goto out;
		}
		o.rp.model = o.model;
	}
	db = o.db;
	if (db == NULL && repl_xdg_path(path, sizeof path, "XDG_DATA_HOME", ".local/share",
	    "kvchat/sessions.db", err, sizeof err) == 0)
		db = path;
	if (db == NULL || repl_private_dir(db, err, sizeof err) != 0 ||
	    sess_open(&c.st, db, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		goto out;
	}
	c.shell.st = c.st;	/* what the REPL's /list, /resume and /delete helpers read */
	c.system = o.system ? strdup(o.system) : NULL;
	if (o.resume != NULL && resume(&c) != 0)
		goto out;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	fprintf(stderr, "kvchat: %s at %s (history stored locally)\n", o.rp.model, o.rp.base_url);
	rc = loop(&c);
out:
	if (c.st != NULL) {
		if (c.id > 0)
			sess_conv_unlock(c.st, c.id);
		sess_close(c.st);
	}
	while (c.n_msgs > 0)
		forget_last(&c);
	free(c.msgs);
	free(c.system);
	memset(o.key, 0, sizeof o.key);
	rmt_global_cleanup();
	return rc;
}
