/* cmd_session.c: /new /list /resume /rename /delete /undo /retry /clear /stats /export /quit. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <readline/readline.h>

#include "cmd.h"
#include "cli/colour.h"
#include "cli/json_text.h"

static int
cmd_new_exec(struct kvc_repl *r, const char *args)
{
	char err[512];
	char t[256];
	struct conv *c;

	if (conv_new(r->mgr, args[0] ? args : NULL, r->system, &r->set, &c, err, sizeof err)) {
		repl_error(r, "/new: %s", err);
		return 1;
	}
	repl_switch(r, c);
	printf("new conversation (%s): saved with its first message\n",
	    repl_title(conv_title(c), t, sizeof t));
	return 0;
}

int
cmd_list_rows(struct kvc_repl *r, int64_t cur)
{
	struct sess_conv *v;
	char err[512], bad[512];
	int n, n_bad = 0;

	if (sess_conv_list(r->st, &v, &n, err, sizeof err)) {
		repl_error(r, "/list: %s", err);
		return 1;
	}
	if (n == 0)
		printf("no conversations\n");
	/* A damaged row is listed cleaned, and named below. */
	for (int i = 0; i < n; i++)
		repl_print_conv_row(r, stdout, &v[i], cur != 0 && v[i].id == cur);
	fflush(stdout);
	for (int i = 0; i < n; i++)
		if (repl_conv_damage(&v[i], bad, sizeof bad) != NULL && ++n_bad)
			repl_error(r, "/list: conversation %" PRId64 " is damaged: %s", v[i].id, bad);
	sess_conv_list_free(v, n);
	return n_bad ? 1 : 0;
}

static int
cmd_list_exec(struct kvc_repl *r, const char *args)
{
	return cmd_list_rows(r, r->cur ? conv_id(r->cur) : 0);
}

static int
cmd_resume_exec(struct kvc_repl *r, const char *args)
{
	char err[512], t[256];
	struct conv *c;
	int64_t id;
	int n, rc;

	if (args[0] == '\0') {
		if (sess_conv_latest(r->st, &id, err, sizeof err)) {
			repl_error(r, "/resume: %s", err);
			return 1;
		}
	} else if (repl_pick_conv(r, "/resume", args, stdout, &id)) {
		return 1;
	}
	*r->interrupt = 0;
	rc = conv_open(r->mgr, id, &c, err, sizeof err);
	*r->interrupt = 0;
	if (rc == KVC_EINTR) {
		/* Ctrl-C in the rebuild of its cache: switched to all the same. */
		printf("%s", repl_tty_echoes_ctl() ? "\n" : " ^C\n");
		repl_error(r, "/resume: %s", err);
	} else if (rc) {
		repl_error(r, "/resume: %s", err);
		return 1;
	}
	repl_switch(r, c);
	(void)conv_stream(c, &n);
	printf("conversation %" PRId64 " (%s): %d messages, %d tokens\n", conv_id(c),
	    repl_title(conv_title(c), t, sizeof t), conv_n_msgs(c), n);
	if (r->recap > 0)
		repl_show_msgs(r, r->recap, true);
	return 0;
}

static int
cmd_rename_exec(struct kvc_repl *r, const char *args)
{
	char err[512];

	if (args[0] == '\0') {
		repl_error(r, "usage: /rename TITLE");
		return 1;
	}
	if (conv_rename(r->cur, args, err, sizeof err)) {
		repl_error(r, "/rename: %s", err);
		return 1;
	}
	return 0;
}

/* At a terminal, "[y/N]" before a delete; piped input is not asked. */
bool
cmd_confirm_delete(struct kvc_repl *r, int64_t id)
{
	struct sess_conv row = {0};
	char q[640], t[256], *a;
	bool yes;

	if (!r->tty || !isatty(0))
		return true;
	if (sess_conv_get(r->st, id, &row, NULL, 0) != 0)
		return true;	/* the delete says what is wrong */
	snprintf(q, sizeof q, "delete conversation %" PRId64 " (%s, %d messages)? [y/N] ", id,
	    repl_title(row.title, t, sizeof t), row.n_msgs);
	sess_conv_clear(&row);
	a = readline(q);
	yes = a != NULL && (strcmp(a, "y") == 0 || strcmp(a, "Y") == 0 || strcmp(a, "yes") == 0);
	free(a);
	if (!yes)
		printf("not deleted\n");
	return yes;
}

static int
cmd_delete_exec(struct kvc_repl *r, const char *args)
{
	char err[512], t[256];
	int64_t id;
	struct conv *c;

	if (args[0] == '\0' && conv_id(r->cur) == 0) {
		/* Nothing stored yet: it is only left behind. */
		printf("this conversation has no messages: nothing to delete\n");
		return 0;
	}
	if (args[0] == '\0')
		id = conv_id(r->cur);
	else if (repl_pick_conv(r, "/delete", args, stdout, &id))
		return 1;
	if (!cmd_confirm_delete(r, id))
		return 0;
	if (conv_id(r->cur) == id) {
		/* Its replacement first: a failed delete leaves the current one as it was. */
		if (conv_new(r->mgr, NULL, r->system, &r->set, &c, err, sizeof err)) {
			repl_error(r, "/delete: %s", err);
			return 1;
		}
		if (conv_delete(r->cur, err, sizeof err)) {
			repl_error(r, "/delete: %s", err);
			conv_close(c);
			return 1;
		}
		repl_switch(r, c);
		printf("deleted conversation %" PRId64 "; new conversation (%s)\n", id,
		    repl_title(conv_title(c), t, sizeof t));
		return 0;
	}
	/* Not brought into memory first; one in use elsewhere is refused by its lock. */
	if (conv_mgr_delete(r->mgr, id, err, sizeof err)) {
		repl_error(r, "/delete: %s", err);
		return 1;
	}
	printf("deleted conversation %" PRId64 "\n", id);
	return 0;
}

static int
cmd_undo_exec(struct kvc_repl *r, const char *args)
{
	char err[512];
	int n;

	if (conv_undo(r->cur, err, sizeof err)) {
		repl_error(r, "/undo: %s", err);
		return 1;
	}
	(void)conv_stream(r->cur, &n);
	printf("dropped the last exchange (%d messages, %d tokens left)\n", conv_n_msgs(r->cur), n);
	return 0;
}

static int
cmd_retry_exec(struct kvc_repl *r, const char *args)
{
	return repl_turn(r, NULL, true);
}

static int
cmd_clear_exec(struct kvc_repl *r, const char *args)
{
	char err[512], t[256];

	if (conv_clear(r->cur, err, sizeof err)) {
		repl_error(r, "/clear: %s", err);
		return 1;
	}
	printf("conversation %s cleared\n", repl_title(conv_title(r->cur), t, sizeof t));
	return 0;
}

static int
cmd_stats_exec(struct kvc_repl *r, const char *args)
{
	int turn = 0;

	printf("%4s %9s %8s %8s %10s %6s %10s %s\n", "turn", "ttft_ms", "reused", "prefill",
	    "prefill/s", "gen", "decode/s", "");
	for (int i = 0; i < conv_n_msgs(r->cur); i++) {
		const struct sess_msg *x = conv_msg(r->cur, i);

		if (x->role != SESS_ASSISTANT)
			continue;
		turn++;
		printf("%4d %9.1f %8d %8d %10.1f %6d %10.1f %s\n", turn, x->stats.ttft_ms,
		    x->stats.reused_tokens, x->stats.prefill_tokens, x->stats.prefill_tps,
		    x->stats.gen_tokens, x->stats.decode_tps, x->interrupted ? "interrupted" : "");
	}
	if (turn == 0)
		printf("no turns yet\n");
	return 0;
}

static int
cmd_history_exec(struct kvc_repl *r, const char *args)
{
	long n = -1;

	if (args[0] && kvc_parse_long(args, 0, 1000000, &n) != KVC_OK) {
		repl_error(r, "usage: /history [N] (the last N messages)");
		return 1;
	}
	if (conv_n_msgs(r->cur) == 0)
		printf("no messages yet\n");
	repl_show_msgs(r, (int)n, false);
	return 0;
}

static const char *
role_name(enum sess_role role)
{
	return role == SESS_ASSISTANT ? "assistant" : role == SESS_SYSTEM ? "system" : "user";
}

static int
export_json(const struct repl_export_src *x, struct kvc_buf *b)
{
	json_t *o = json_object(), *list = json_array();
	bool bad = false;
	int rc;

	cli_json_put(o, "id", json_integer(x->id), &bad);
	cli_json_put(o, "title", cli_json_cstr(x->title), &bad);
	cli_json_put(o, "model", cli_json_cstr(x->model), &bad);
	cli_json_put(o, "system", x->system ? cli_json_cstr(x->system) : json_null(), &bad);
	cli_json_put(o, "messages", list, &bad);
	for (int i = 0; !bad && i < x->n_msgs; i++) {
		const struct sess_msg *m = x->msgs[i];
		json_t *e = json_object();

		bad = json_array_append_new(list, e) != 0;
		cli_json_put(e, "role", json_string(role_name(m->role)), &bad);
		cli_json_put(e, "text", cli_json_cstr(m->text), &bad);
		if (m->reasoning)
			cli_json_put(e, "reasoning", cli_json_cstr(m->reasoning), &bad);
		cli_json_put(e, "tokens", json_integer(m->n_ids), &bad);
		cli_json_put(e, "interrupted", json_boolean(m->interrupted), &bad);
	}
	rc = bad ? KVC_ENOMEM : cli_json_line(o, 0, b);
	json_decref(o);
	return rc;
}

static int
export_md(const struct repl_export_src *x, struct kvc_buf *b)
{
	int rc = kvc_buf_printf(b, "# %s\n\n", x->title ? x->title : "");

	if (rc == 0 && x->system)
		rc = kvc_buf_printf(b, "**System:** %s\n\n", x->system);
	for (int i = 0; rc == 0 && i < x->n_msgs; i++) {
		const struct sess_msg *m = x->msgs[i];

		/* the reasoning as a quoted block of its own, before the answer */
		if (m->reasoning) {
			rc = kvc_buf_printf(b, "## Assistant (thinking)\n\n> ");
			for (const char *p = m->reasoning; rc == 0 && *p; p++)
				rc = *p == '\n' ? kvc_buf_printf(b, "\n> ") : kvc_buf_append(b, p, 1);
			rc = rc ? rc : kvc_buf_printf(b, "\n\n");
		}
		rc = rc ? rc : kvc_buf_printf(b, "## %s\n\n%s%s\n\n", m->role == SESS_ASSISTANT ? "Assistant" :
		    "User", m->text, m->interrupted ? " *(interrupted)*" : "");
	}
	return rc;
}

int
cmd_export_write(struct kvc_repl *r, const struct repl_export_src *x, const char *args)
{
	struct kvc_buf b = {0};
	char fmt[8];
	char err[1024];
	const char *path;
	int rc, fd;

	path = strchr(args, ' ');
	if (path == NULL || (size_t)(path - args) >= sizeof fmt) {
		repl_error(r, "usage: /export md|json FILE");
		return 1;
	}
	memcpy(fmt, args, (size_t)(path - args));
	fmt[path - args] = '\0';
	while (*path == ' ')
		path++;
	if (strcmp(fmt, "md") == 0)
		rc = export_md(x, &b);
	else if (strcmp(fmt, "json") == 0)
		rc = export_json(x, &b);
	else {
		repl_error(r, "/export: format must be md or json");
		return 1;
	}
	if (rc) {
		kvc_buf_free(&b);
		repl_error(r, "/export: out of memory");
		return 1;
	}
	/* 0600 when created, never through a link planted by someone else. */
	fd = kvc_file_open_write(path, false, err, sizeof err);
	if (fd >= 0) {
		rc = kvc_write_all(fd, b.p, b.n);
		rc = close(fd) != 0 ? KVC_EIO : rc;
		snprintf(err, sizeof err, "%s", path);
	}
	if (fd < 0 || rc != 0) {
		repl_error(r, "/export: cannot write %s", err);
		kvc_buf_free(&b);
		return 1;
	}
	kvc_buf_free(&b);
	printf("wrote %s\n", path);
	return 0;
}

static int
cmd_export_exec(struct kvc_repl *r, const char *args)
{
	struct repl_export_src x = {
		conv_id(r->cur), conv_title(r->cur), r->model_path, conv_system(r->cur), NULL,
		conv_n_msgs(r->cur),
	};
	int rc;

	if ((x.msgs = calloc(x.n_msgs > 0 ? (size_t)x.n_msgs : 1, sizeof *x.msgs)) == NULL) {
		repl_error(r, "/export: out of memory");
		return 1;
	}
	for (int i = 0; i < x.n_msgs; i++)
		x.msgs[i] = conv_msg(r->cur, i);
	rc = cmd_export_write(r, &x, args);
	free(x.msgs);
	return rc;
}

static int
cmd_quit_exec(struct kvc_repl *r, const char *args)
{
	r->quit = true;
	return 0;
}

const struct kvc_cmd_entry cmd_session_entries[] = {
	{ "new", "[TITLE]", "start a new conversation", cmd_new_exec },
	{ "list", "", "list conversations (* = this one)", cmd_list_exec },
	{ "resume", "[ID|TITLE]", "switch to a stored conversation (default: the latest)",
	    cmd_resume_exec },
	{ "rename", "TITLE", "rename this conversation", cmd_rename_exec },
	{ "delete", "[ID|TITLE]", "delete a conversation (default: this one)", cmd_delete_exec },
	{ "undo", "", "drop the last exchange", cmd_undo_exec },
	{ "retry", "", "answer the last message again", cmd_retry_exec },
	{ "clear", "", "drop every message of this conversation", cmd_clear_exec },
	{ "history", "[N]", "print this conversation (its last N messages)", cmd_history_exec },
	{ "stats", "", "per-turn figures of this conversation", cmd_stats_exec },
	{ "export", "md|json FILE", "write this conversation to FILE", cmd_export_exec },
	{ "quit", "", "save and leave (also Ctrl-D)", cmd_quit_exec },
	{ NULL, NULL, NULL, NULL },
};
