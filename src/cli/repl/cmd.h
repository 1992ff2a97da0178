/*
 * cmd.h: the REPL's state and its /commands.
 *
 * Each command group lives in its own file (cmd_session.c, cmd_model.c,
 * cmd_sample.c) and exports a table of struct kvc_cmd_entry ending with a
 * NULL name; cmd.c gathers them, and /help and tab completion read them.
 */
#ifndef KVC_CMD_H
#define KVC_CMD_H

#include <signal.h>
#include <stdio.h>

#include "core/kvc.h"
#include "conv/conv.h"
#include "cli/progress.h"

/* What the chat program holds while it runs (repl.c owns it). */
struct kvc_repl {
	struct kvc_engine *e;
	struct sess_store *st;
	struct conv_mgr *mgr;
	struct conv *cur;		/* the conversation being talked to */
	const char *model_path;
	const char *db_path;
	const char *system;		/* --system, for /new */
	struct conv_settings set;	/* command-line settings, for /new */
	unsigned set_mask;		/* which of them were given (KVC_SET_*) */
	size_t kv_budget;		/* bytes, 0 = unlimited */
	bool tty;			/* interactive (stdin is a terminal) */
	bool color;			/* colour on stdout */
	const char *stats_json;		/* --stats-json PATH or NULL */
	int turn;			/* turns run by this process */
	volatile sig_atomic_t *interrupt;	/* set by SIGINT */
	bool quit;
	struct kvc_progress prog;	/* the conversation layer's long work */
};

/* Bits of kvc_repl.set_mask: settings given on the command line. */
enum {
	KVC_SET_TEMP = 1 << 0, KVC_SET_TOP_K = 1 << 1, KVC_SET_TOP_P = 1 << 2,
	KVC_SET_MIN_P = 1 << 3, KVC_SET_REPEAT = 1 << 4, KVC_SET_SEED = 1 << 5,
	KVC_SET_MAX_TOKENS = 1 << 6,
};

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

/* cmd.c */
/* The i-th command of all groups (help first), or NULL past the end. */
const struct kvc_cmd_entry *cmd_entry(int i);
const struct kvc_cmd_entry *cmd_find(const char *name);
/* Run "/name args" (line starts with '/'). Returns the command's value, 1 if unknown. */
int cmd_exec(struct kvc_repl *r, const char *line);
/* Print /help's text (all commands) to f. */
void cmd_print_help(FILE *f);
/* Append s as a JSON string literal (quotes included) to b. */
int cmd_json_str(struct kvc_buf *b, const char *s);
/* An error line "kvchat: ..." on stderr (red on a terminal). */
void cmd_error(struct kvc_repl *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* repl.c: what commands need from the REPL. */
/* Run one turn (or a retry when retry is true) and print reply and stats. */
int repl_turn(struct kvc_repl *r, const char *text, bool retry);
/* Switch to conversation c (already open), applying command-line settings. */
void repl_switch(struct kvc_repl *r, struct conv *c);
/* Print the stats line of one turn to the stats stream. */
void repl_print_stats(struct kvc_repl *r, FILE *f, const struct conv_stats *s);

#endif
