/*
 * cmd.h: the REPL's /commands.
 *
 * Each command group lives in its own file (cmd_session.c, cmd_model.c,
 * cmd_sample.c) and exports a table of struct kvc_cmd_entry ending with a
 * NULL name; cmd.c gathers them above the groups, and /help and tab
 * completion read them. What the commands use of the REPL (error lines,
 * turns, switching) is below them, in repl.h.
 */
#ifndef KVC_CMD_H
#define KVC_CMD_H

#include <stdio.h>

#include "repl.h"

struct kvc_cmd_entry {
	const char *name;		/* without the slash: "new" */
	const char *args;		/* "[TITLE]", "" */
	const char *help;		/* one line */
	/* 0, or non-zero after printing what went wrong. */
	int (*exec)(struct kvc_repl *r, const char *args);
};

/* cmd_session.c, cmd_model.c, cmd_sample.c: NULL-name-terminated tables. */
extern const struct kvc_cmd_entry cmd_session_entries[];
extern const struct kvc_cmd_entry cmd_model_entries[];
extern const struct kvc_cmd_entry cmd_sample_entries[];

/* cmd_model.c: /system TEXT (also /set system TEXT); no text prints the prompt. */
int cmd_system_set(struct kvc_repl *r, const char *args);
/* cmd_sample.c: hands r->think and r->effort to the conversation layer as the
 * template's enable_thinking and reasoning_effort. 0 or KVC_ENOMEM. */
int cmd_template_vars(struct kvc_repl *r);

/* cmd_session.c: what /export writes, from a conv or from --endpoint's chat. */
struct repl_export_src {
	int64_t id;
	const char *title, *model, *system;	/* system NULL: none */
	const struct sess_msg **msgs;
	int n_msgs;
};
/* /export md|json FILE (args "md FILE") of x. 0, or 1 after saying why. */
int cmd_export_write(struct kvc_repl *r, const struct repl_export_src *x, const char *args);
/* /list: the stored conversations (r->st), the one whose id is cur (0: none)
 * starred, damaged rows named. 0, or 1 after saying why. */
int cmd_list_rows(struct kvc_repl *r, int64_t cur);
/* /delete's question at a terminal (r->tty): true to go on (always when not
 * at a terminal); "not deleted" said otherwise. */
bool cmd_confirm_delete(struct kvc_repl *r, int64_t id);

/* cmd.c */
/* The i-th command of all groups (help first), or NULL past the end. */
const struct kvc_cmd_entry *cmd_entry(int i);
/* The command called name, or the one name is another name for (/bye: quit). */
const struct kvc_cmd_entry *cmd_find(const char *name);
/* Run "/name args" (line starts with '/'). Returns the command's value, 1 if unknown. */
int cmd_exec(struct kvc_repl *r, const char *line);
/* Print /help's text (all commands) to f. */
void cmd_print_help(FILE *f);

#endif
