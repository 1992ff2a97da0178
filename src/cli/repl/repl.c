/*
 * repl.c: the chat command, put together: the command line, the model
 * (given or found), the database, the engine, the conversation to talk to,
 * then the terminal loop or batch mode (loop.c). repl.h lists the parts.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <readline/readline.h>

#include "cmd.h"
#include "options.h"
#include "cli/cli.h"
#include "cli/colour.h"
#include "cli/discover.h"
#include "model/model.h"

/*
 * The one piece of state a signal handler may touch. It is handed to the
 * conversation code explicitly (conv_io.interrupt) and never read elsewhere.
 */
static volatile sig_atomic_t repl_sigint;

/*
 * 1 when the terminal echoed the ^C itself (ECHO and ECHOCTL on as the key
 * came), 2 when it did not: the turn then prints the mark. Read here, not
 * when the turn ends, as the terminal's mode may have changed in between
 * (readline turns the echo off while a line is read). tcgetattr is
 * async-signal-safe.
 */
static void
on_sigint(int sig)
{
	struct termios t;
	int e = errno;

	(void)sig;
	repl_sigint = tcgetattr(0, &t) == 0 && (t.c_lflag & ECHO) && (t.c_lflag & ECHOCTL) ? 1 : 2;
	errno = e;
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
pick_model(const struct repl_opts *o, bool tty)
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
		/* The folder as it is now, not its default: XDG_DATA_HOME may move it. */
		path = disc_models_dir();
		fprintf(stderr, "kvchat: no model found; give one with -m FILE, or:\n%s"
		    "Put a .gguf file in %s/ (or pass it with -m FILE).\n", disc_help_where(),
		    path ? path : "$XDG_DATA_HOME/kvchat/models");
		free(path);
		return NULL;
	}
	if (n == 1 || !tty) {
		int first = 0;

		/* the first one kvchat can run (or the first, to say why not) */
		while (first < n - 1 && v[first].why[0] != '\0')
			first++;
		if (v[first].why[0] != '\0')
			first = 0;
		if (n > 1)
			fprintf(stderr, "kvchat: using %s (of %d models found; -m chooses)\n",
			    v[first].name, n);
		path = strdup(v[first].path);
		disc_free(v, n);
		return path;
	}
	fprintf(stderr, "Models found:\n");
	for (int i = 0; i < n; i++) {
		fprintf(stderr, "  %2d  %-48s %8s  %-7s %s\n", i + 1, v[i].name,
		    disc_format_size(v[i].size, sz, sizeof sz), v[i].type, v[i].arch);
		if (v[i].why[0] != '\0')
			fprintf(stderr, "      cannot run: %s\n", v[i].why);
	}
	for (;;) {
		line = readline("Model number: ");
		if (line == NULL)
			break;
		if (kvc_parse_long(line, 1, n, &k) == KVC_OK && v[k - 1].why[0] != '\0') {
			fprintf(stderr, "kvchat cannot run %s: %s\n", v[k - 1].name, v[k - 1].why);
		} else if (kvc_parse_long(line, 1, n, &k) == KVC_OK) {
			path = strdup(v[k - 1].path);
			free(line);
			break;
		}
		free(line);
	}
	disc_free(v, n);
	return path;
}

/*
 * --resume or --session of a stored conversation without -m: the model it
 * was made with, when its file is still there (NULL otherwise, and the
 * caller offers the models found). Its ids are that model's tokens; another
 * vocabulary would have to tokenize its text afresh.
 */
static char *
conversation_model(struct kvc_repl *r, const struct repl_opts *o)
{
	struct sess_conv row = {0};
	char err[512], *path = NULL;
	int64_t id;
	int rc;

	if (o->mode == OPEN_RESUME && o->name == NULL)
		rc = sess_conv_latest(r->st, &id, err, sizeof err);
	else
		rc = sess_conv_find(r->st, o->name, &id, err, sizeof err);
	if (rc != 0 || sess_conv_get(r->st, id, &row, err, sizeof err) != 0)
		return NULL;
	if (row.model_path != NULL && access(row.model_path, R_OK) == 0) {
		path = strdup(row.model_path);
		if (path != NULL)
			fprintf(stderr, "kvchat: using %s, the model conversation %lld was made "
			    "with (-m chooses another)\n", path, (long long)id);
	} else if (row.model_path != NULL) {
		fprintf(stderr, "kvchat: conversation %lld was made with %s, which is gone (%s); "
		    "choose another model: if its vocabulary differs, the messages are "
		    "tokenized afresh for it\n", (long long)id, row.model_path, strerror(errno));
	}
	sess_conv_clear(&row);
	return path;
}

/*
 * Options that work but cost the user: a context past the one the model
 * was trained with (replies degrade there). Said once, at start. (More
 * threads than cores are cut to the cores before the engine starts:
 * repl_cap_threads.)
 */
static void
warn_engine_options(const struct repl_opts *o, const struct kvc_engine *e)
{
	int train = eng_model(e)->hp.n_ctx_train;

	if (o->ep.n_ctx > 0 && train > 0 && eng_n_ctx(e) > train)
		fprintf(stderr, "kvchat: warning: --ctx %d is above the %d positions the model was "
		    "trained with; replies past %d may degrade\n", eng_n_ctx(e), train, train);
}

/*
 * conv_params.progress: a snapshot restore as a bar; a prefill or rebuild
 * (in positions) as counts, rate and time left; on stderr, shown only when
 * it lasts, cleared when done.
 */
static void
repl_progress(void *arg, const char *label, uint64_t done, uint64_t total)
{
	struct kvc_repl *r = arg;

	if (label == NULL)
		progress_end(&r->prog);
	else if (done == 0 && strcmp(label, "restoring snapshot") == 0)
		progress_start(&r->prog, label, total);
	else if (done == 0)
		progress_start_rate(&r->prog, label, total);
	else
		progress_set(&r->prog, done, total);
}

/* Command-line settings win over what a resumed conversation stored. */
static void
apply_cli_settings(struct kvc_repl *r, struct conv *c)
{
	struct conv_settings s = *conv_get_settings(c);
	unsigned m = r->set_mask;
	char err[512];

	if (m == 0)
		return;
	for (int i = 0; i < CONV_N_SETTINGS; i++)
		if (m & 1u << i)
			conv_setting_copy(&s, &r->set, &conv_setting_table[i]);
	/* Refused by the store, they are not applied either: say so. */
	if (conv_set_settings(c, &s, err, sizeof err) != 0)
		repl_error(r, "the command-line settings were not applied: %s", err);
}

/*
 * --session NAME: find or create and lock it in one store transaction, so
 * two kvchats started together with the same name share one conversation
 * (the second then finds it locked) instead of making two.
 */
static int
claim_session(struct kvc_repl *r, const struct repl_opts *o, int64_t *id, char *err,
    size_t errlen)
{
	struct kvc_buf sb = {0};
	char *real;
	bool created = false;
	int rc;

	if (conv_settings_format(&r->set, &sb))
		return KVC_ENOMEM;
	rc = sess_conv_claim(r->st, o->name, eng_fingerprint(r->e),
	    chat_family_name(conv_mgr_family(r->mgr)), o->system, sb.p, id, &created, err, errlen);
	kvc_buf_free(&sb);
	/* Which model file and vocabulary its ids will belong to (conversation_model). */
	if (rc == 0 && created) {
		real = realpath(r->model_path, NULL);
		rc = sess_conv_set_model(r->st, *id, real ? real : r->model_path,
		    eng_vocab_fingerprint(r->e), err, errlen);
		free(real);
	}
	return rc;
}

/* sess_set_wait_notice: who holds the database while we wait for it. */
static void
wait_notice(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, "kvchat: %s\n", msg);
}

/* ---- the command ---- */

static int
open_conversation(struct kvc_repl *r, const struct repl_opts *o)
{
	char err[512];
	int64_t id;
	int rc;

	/*
	 * A title several conversations have names none of them: they are
	 * listed (as /resume TITLE does) and the user gives the id.
	 */
	switch (o->mode) {
	case OPEN_SESSION:
		rc = sess_conv_find(r->st, o->name, &id, err, sizeof err);
		if (rc == 0 && (rc = repl_pick_conv(r, "--session", o->name, stderr, &id)) != 0)
			return rc;
		/* None yet: made and locked in one transaction, so two first uses
		 * of a name make one conversation (a read-only store makes none). */
		if (rc == KVC_ENOTFOUND && !sess_readonly(r->st, NULL))
			rc = claim_session(r, o, &id, err, sizeof err);
		if (rc == 0)
			rc = conv_open(r->mgr, id, &r->cur, err, sizeof err);
		break;
	case OPEN_RESUME:
		if (o->name && (rc = repl_pick_conv(r, "--resume", o->name, stderr, &id)) != 0)
			return rc;
		rc = o->name ? 0 : sess_conv_latest(r->st, &id, err, sizeof err);
		if (rc == KVC_ENOTFOUND)
			kvc_err(err, sizeof err, "no conversation to resume in %s", r->db_path);
		if (rc == 0)
			rc = conv_open(r->mgr, id, &r->cur, err, sizeof err);
		break;
	default:
		if (sess_readonly(r->st, NULL)) {
			/* Nothing new can be stored: show the latest one instead. */
			rc = sess_conv_latest(r->st, &id, err, sizeof err);
			if (rc == 0) {
				repl_notice(r, "the database is read-only: opened the most recent "
				    "conversation instead of a new one");
				rc = conv_open(r->mgr, id, &r->cur, err, sizeof err);
			}
			break;
		}
		rc = conv_new(r->mgr, o->name, o->system, &r->set, &r->cur, err, sizeof err);
		break;
	}
	if (rc == KVC_EINTR) {
		/*
		 * Ctrl-C during the rebuild of its cache: the conversation is
		 * open, whole, and the next turn rebuilds. At a terminal the chat
		 * goes on; a batch stops before its first line, as a shell would.
		 */
		repl_error(r, "%s", err);
		*r->interrupt = 0;
		if (!r->tty) {
			repl_error(r, "stopped by Ctrl-C: no line was sent");
			return rc;
		}
		rc = 0;
	}
	if (rc) {
		fprintf(stderr, "kvchat: %s\n", err);
		return rc;
	}
	if (o->mode != OPEN_NEW && !sess_readonly(r->st, NULL)) {
		apply_cli_settings(r, r->cur);
		if (o->system && conv_n_msgs(r->cur) == 0) {
			if (conv_set_system(r->cur, o->system, err, sizeof err) != 0)
				repl_error(r, "--system was not applied: %s", err);
		} else if (o->system && (conv_system(r->cur) == NULL ||
		    strcmp(conv_system(r->cur), o->system) != 0))
			repl_notice(r, "--system ignored: the conversation already has messages "
			    "(/system changes it, recomputing the conversation)");
	}
	return 0;
}

/*
 * The database: at --db or under $XDG_DATA_HOME, in a private folder,
 * opened read-only when it cannot be written. 0, or -1 with the reason
 * said on stderr.
 */
static int
open_store(struct kvc_repl *r, const struct repl_opts *o, char *dbbuf, size_t dblen)
{
	char err[512];
	const char *ro_why;

	if (o->db)
		r->db_path = o->db;
	else if (repl_xdg_path(dbbuf, dblen, "XDG_DATA_HOME", ".local/share",
	    "kvchat/sessions.db", err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: cannot place the database: %s\n", err);
		return -1;
	} else
		r->db_path = dbbuf;
	/* The folder is made 0700 (and refused unless private) before the
	 * database, so the reason a path cannot be used is said here. */
	if (repl_private_dir(r->db_path, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: cannot use the folder of %s: %s\n", r->db_path, err);
		return -1;
	}
	/* sess_open creates the folder (0700) and the file (0600); one that
	 * exists already is the user's to fix, so only a warning. */
	repl_warn_exposed(r, r->db_path);
	/* The store's messages start with the path: print it once. */
	if (sess_open_ex(&r->st, r->db_path, SESS_OPEN_FALLBACK_RO |
	    (o->force_unlock ? SESS_OPEN_FORCE_UNLOCK : 0), err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: %s\n", err);
		return -1;
	}
	sess_set_wait_notice(r->st, wait_notice, NULL);
	if (sess_was_empty(r->st))
		fprintf(stderr, "kvchat: %s was an empty file (0 bytes), which kvchat never leaves: "
		    "it is a new database now; if it held conversations, they were lost before "
		    "this start (a backup or 'kvchat recover' of a copy may have them)\n", r->db_path);
	if (sess_readonly(r->st, &ro_why))
		fprintf(stderr, "kvchat: %s is open read-only (%s): /list, /resume, /history and /export "
		    "work; turns are refused\n", r->db_path, ro_why);
	return 0;
}

/* A template file's text (NUL-terminated, the caller frees it), or NULL with the reason said. */
static char *
read_template_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct kvc_buf b = {0};
	char chunk[16384];
	size_t n;

	if (!f) {
		fprintf(stderr, "kvchat: --chat-template %s: %s\n", path, strerror(errno));
		return NULL;
	}
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.n < (1u << 20))
		if (kvc_buf_append(&b, chunk, n) != 0)
			break;
	if (ferror(f) || b.n >= (1u << 20) || kvc_buf_append(&b, "", 1) != 0) {
		fprintf(stderr, "kvchat: --chat-template %s: unreadable or over 1 MiB\n", path);
		kvc_buf_free(&b);
		b.p = NULL;
	}
	fclose(f);
	return b.p;
}

/*
 * The chat's template: --chat-template NAME (a built-in family) or FILE (a
 * Jinja template), else the model's own tokenizer.chat_template rendered
 * as it is, else the family its architecture implies. A template the
 * renderer cannot run gives way to the detected family with a one-line
 * notice. Returns the family (CHAT_JINJA with *jinja the text) or -1.
 */
static int
pick_template(struct kvc_repl *r, const struct repl_opts *o, const char **jinja, char **owned)
{
	char err[512];
	int fam = chat_family_for_file(eng_gguf(r->e), jinja);

	int named = o->template_name ? chat_family_from_name(o->template_name) : -1;

	if (named >= 0 && named != CHAT_JINJA)
		return named;
	if (named == CHAT_JINJA && (!*jinja ||
	    chat_jinja_check(eng_tokenizer(r->e), *jinja, NULL, err, sizeof err) != 0)) {
		fprintf(stderr, "kvchat: --chat-template jinja: %s\n",
		    *jinja ? err : "the model has no chat template");
		return -1;
	}
	if (named == CHAT_JINJA)
		return CHAT_JINJA;
	if (o->template_name) {
		if ((*owned = read_template_file(o->template_name)) == NULL)
			return -1;
		if (chat_jinja_check(eng_tokenizer(r->e), *owned, NULL, err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: --chat-template %s: %s\n", o->template_name, err);
			return -1;
		}
		*jinja = *owned;
		return CHAT_JINJA;
	}
	if (*jinja && chat_jinja_check(eng_tokenizer(r->e), *jinja, NULL, err, sizeof err) == 0)
		return CHAT_JINJA;
	if (*jinja)
		fprintf(stderr, "kvchat: the model's chat template cannot be used (%s); using the %s "
		    "family\n", err, chat_family_name(fam < 0 ? CHAT_CHATML : (enum chat_family)fam));
	else if (fam < 0)
		fprintf(stderr, "kvchat: the model has no chat template; using chatml "
		    "(--chat-template chooses)\n");
	return fam < 0 ? CHAT_CHATML : fam;
}

/* --draft: its engine, with the model's context and the same vocabulary. 0 or 1. */
static int
open_draft(const struct repl_opts *o, struct kvc_engine *e, struct kvc_engine **draft)
{
	struct kvc_engine_params dp = o->ep;
	char err[512];

	dp.n_ctx = eng_n_ctx(e);
	dp.progress = NULL;
	if (eng_open(draft, o->draft, &dp, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: draft model %s: %s\n", o->draft, err);
		return 1;
	}
	if (!eng_same_vocab(e, *draft)) {
		fprintf(stderr, "kvchat: draft model %s: its vocabulary differs from the model's\n",
		    o->draft);
		return 1;
	}
	return 0;
}

/* The chat's state from its options, before anything is opened. */
static void
repl_init(struct kvc_repl *r, const struct repl_opts *o)
{
	memset(r, 0, sizeof *r);
	r->tty = isatty(0) && isatty(1);
	r->color = r->tty && !o->no_color && kvc_use_color(1);
	r->interrupt = &repl_sigint;
	r->set = o->set;
	r->set_mask = o->set_mask;
	r->system = o->system;
	r->stats_json = o->stats_json;
	r->recap = o->recap;
	r->kv_budget = o->kv_budget_given ? o->kv_budget : default_kv_budget();
}

int
repl_main(int argc, char **argv)
{
	struct repl_opts o;
	struct kvc_repl r;
	struct kvc_progress prog;
	struct conv_params cp;
	struct kvc_engine *draft = NULL;
	struct sigaction sa;
	char err[512], dbbuf[4096];
	char *model = NULL, *model_real = NULL, *tmpl_text = NULL, *test_replies = NULL;
	const char *jinja = NULL;
	int rc, status = 1, fam;

	rc = repl_parse_opts(argc, argv, &o);
	if (rc < 0)
		return 0;	/* --help, --version */
	if (rc > 0)
		return rc;
	repl_init(&r, &o);

	/* SIGINT stops a reply or clears the line; no SA_RESTART so reads wake up. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);

	/* A stored conversation runs on its own model unless -m says otherwise. */
	if (o.model == NULL && o.mode != OPEN_NEW) {
		if (open_store(&r, &o, dbbuf, sizeof dbbuf) != 0)
			return 1;
		model = conversation_model(&r, &o);
	}
	if (model == NULL && (model = pick_model(&o, r.tty)) == NULL) {
		sess_close(r.st);
		return 1;
	}
	r.model_path = model;
	if (r.st == NULL && open_store(&r, &o, dbbuf, sizeof dbbuf) != 0)
		goto out;
	/* Recorded with each new conversation, as one path wherever kvchat runs from. */
	model_real = realpath(model, NULL);

	repl_cap_threads(&o.ep);
	progress_start_load(&prog);
	o.ep.progress = progress_load;
	o.ep.progress_arg = &prog;
	o.ep.notice = progress_notice;
	o.ep.notice_arg = &prog;
	/* Ctrl-C stops the load: nothing is stored before the first message */
	o.ep.interrupt = r.interrupt;
	rc = eng_open(&r.e, model, &o.ep, err, sizeof err);
	progress_end(&prog);
	if (rc == KVC_EINTR) {
		fprintf(stderr, "kvchat: %s: interrupted while loading the model\n", model);
		status = 130;
		goto out;
	}
	if (rc) {
		/* the loader's messages name the file already: the path once */
		if (strncmp(err, model, strlen(model)) == 0)
			fprintf(stderr, "kvchat: %s\n", err);
		else
			fprintf(stderr, "kvchat: %s: %s\n", model, err);
		goto out;
	}

	warn_engine_options(&o, r.e);
	if (o.draft != NULL && open_draft(&o, r.e, &draft) != 0)
		goto out;
	if ((fam = pick_template(&r, &o, &jinja, &tmpl_text)) < 0)
		goto out;
	/* Tests only: replies forced one a turn (man page, ENVIRONMENT). */
	if (getenv("KVCHAT_TEST_REPLIES") != NULL &&
	    (test_replies = read_template_file(getenv("KVCHAT_TEST_REPLIES"))) == NULL)
		goto out;
	memset(&cp, 0, sizeof cp);
	cp.test_replies = test_replies;
	cp.family = (enum chat_family)fam;
	cp.jinja = jinja;
	cp.model_path = model_real ? model_real : model;
	cp.kv_budget = r.kv_budget;
	cp.overflow = o.overflow;
	cp.keep = o.keep;
	cp.draft = draft;
	cp.lookup = o.lookup;
	cp.spec_k = o.spec_k;
	cp.notice = repl_notice;
	cp.notice_arg = &r;
	cp.progress = repl_progress;
	cp.progress_arg = &r;
	cp.interrupt = r.interrupt;
	if (conv_mgr_new(&r.mgr, r.e, r.st, &cp, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: %s\n", err);
		goto out;
	}
	r.think = o.think;
	r.effort = o.effort;
	r.show_thinking = o.show_thinking;
	if (cmd_template_vars(&r) != 0) {
		fprintf(stderr, "kvchat: out of memory\n");
		goto out;
	}
	if ((rc = open_conversation(&r, &o)) != 0) {
		status = rc == KVC_EINTR ? 130 : 1;
		goto out;
	}
	status = r.tty ? repl_loop_terminal(&r) : repl_loop_batch(&r);
out:
	conv_mgr_free(r.mgr);
	eng_close(draft);
	eng_close(r.e);
	sess_close(r.st);
	free(model);
	free(model_real);
	free(tmpl_text);
	free(test_replies);
	return status;
}
