/*
 * repl.h: the chat program's state and what its parts offer each other.
 *
 * The parts, each below the ones that use it:
 *   notice.c	error and notice lines on stderr
 *   turn.c	one turn: the reply, the stats line, --stats-json; switching
 *		conversation
 *   paths.c	XDG paths and creating their folders
 *   input.c	reading one message at the terminal (Ctrl-C, \ and """)
 *   history.c	the line-editing history file
 *   complete.c	tab completion of /commands, titles, settings
 *   cmd*.c	the /commands (cmd.h)
 *   loop.c	the terminal loop and batch mode
 *   options.c	the command line (options.h)
 *   repl.c	repl_main: model, database, engine, conversation, loop
 */
#ifndef KVC_REPL_H
#define KVC_REPL_H

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
	unsigned set_mask;		/* bit i: conv_setting_table[i] was given */
	size_t kv_budget;		/* bytes, 0 = unlimited */
	bool tty;			/* interactive (stdin is a terminal) */
	bool color;			/* colour on stdout */
	const char *stats_json;		/* --stats-json PATH or NULL */
	int turn;			/* turns run by this process */
	volatile sig_atomic_t *interrupt;	/* set by SIGINT */
	bool quit;
	struct kvc_progress prog;	/* the conversation layer's long work */
	int recap;			/* messages shown on resume (--recap) */
};

/* notice.c */
/* An error line "kvchat: ..." on stderr (red on a terminal); r may be NULL. */
void repl_error(struct kvc_repl *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A notice line "kvchat: LINE" on stderr (yellow on a terminal); arg is the
 * struct kvc_repl, the shape of conv_params.notice. */
void repl_notice(void *arg, const char *line);

/* turn.c */
/* Run one turn (or a retry when retry is true) and print reply and stats. */
int repl_turn(struct kvc_repl *r, const char *text, bool retry);
/* Make c (already open) the conversation being talked to. */
void repl_switch(struct kvc_repl *r, struct conv *c);
/*
 * Print the last n messages of the current conversation (n < 0: all) as
 * they were shown live: each user message after the prompt, each reply as
 * it streamed.
 */
void repl_show_msgs(struct kvc_repl *r, int n);
/* "conversation 3 (title), 4 messages", or "new conversation (title)" before it is stored. */
void repl_describe(struct kvc_repl *r, char *buf, size_t len);
/* Print the stats line of one turn to f (dim when f is stdout and colour is on). */
void repl_print_stats(struct kvc_repl *r, FILE *f, const struct conv_stats *s);

/* paths.c */
/* $VAR/rest, or $HOME/fallback/rest when $VAR is unset or not absolute. */
void repl_xdg_path(char *buf, size_t len, const char *var, const char *fallback,
    const char *rest);
/* mkdir -p of path's folder part (mode 0700). 0, or -1 with errno set. */
int repl_mkdir_parents(const char *path);

/* input.c */
/*
 * One message read at the terminal: a line, lines joined by a trailing
 * backslash, or a """ block. NULL at EOF; "" when Ctrl-C cancelled the
 * input. The caller frees it.
 */
char *repl_read_input(struct kvc_repl *r, const char *prompt);

/* history.c: the history file at path into readline's history, and back. */
void repl_history_load(const char *path);
void repl_history_save(const char *path);

/* complete.c: tab completion of whole lines for r's session; _end stops it. */
void repl_complete_begin(struct kvc_repl *r);
void repl_complete_end(void);

/* loop.c: the two ways to talk; each returns the process exit status. */
int repl_loop_terminal(struct kvc_repl *r);
int repl_loop_batch(struct kvc_repl *r);

#endif
