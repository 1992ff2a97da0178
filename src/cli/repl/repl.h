/*
 * repl.h: the chat program's state and what its parts offer each other.
 *
 * The parts, each below the ones that use it:
 *   notice.c	error and notice lines on stderr
 *   turn.c	one turn: the reply, the stats line, --stats-json; switching
 *		conversation
 *   paths.c	XDG paths, creating their folders private, exposure warning
 *   rows.c	stored rows shown without trusting them (/list)
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
#include "cli/wrap.h"

/* What the chat program holds while it runs (repl.c owns it). */
/* think.c: where a streaming reply is, reasoning or answer. */
enum repl_think_state { REPL_THINK_NONE, REPL_THINKING, REPL_ANSWER };
struct repl_think {
	enum repl_think_state state;
	int n_tokens;			/* the reasoning's tokens so far (conv_io.reasoning_tokens) */
};

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
	volatile sig_atomic_t *interrupt;	/* set by SIGINT: 1 echoed ^C, 2 not */
	bool quit;
	bool quiet;			/* /set quiet: no stats line at the terminal */
	struct kvc_progress prog;	/* the conversation layer's long work */
	int recap;			/* messages shown on resume (--recap) */
	int think;			/* enable_thinking for the model's template: 1, 0, -1 unset */
	const char *effort;		/* reasoning_effort: "low", "medium", "high" or NULL */
	struct repl_think stream;	/* the reply streaming now: reasoning or answer */
	struct kvc_wrap wrap;		/* its rows at a terminal, wrapped between words */
	int show_thinking;		/* reasoning shown: 1 yes, 0 folded, -1 default (at a terminal) */
};

/* think.c */
/* A piece of the reply's reasoning: dimmed at a terminal, folded, or not printed when piped. */
void repl_think_reasoning(struct kvc_repl *r, const char *s, size_t n);
/* A piece of the answer, as it is. */
void repl_think_text(struct kvc_repl *r, const char *s, size_t n);
/* After the reply: the colour reset, a folded line finished. */
void repl_think_end(struct kvc_repl *r);
/* A stored reply's reasoning (NULL: none) before its answer, as /history shows it. */
void repl_think_show(struct kvc_repl *r, const char *reasoning);

/* notice.c */
/*
 * More --threads than the cores this process may run on: cut to the cores,
 * saying so on stderr (the chat and every subcommand, before the engine
 * starts).
 */
struct kvc_engine_params;
void repl_cap_threads(struct kvc_engine_params *ep);

/* An error line "kvchat: ..." on stderr (red on a terminal); r may be NULL. */
void repl_error(struct kvc_repl *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A notice line "kvchat: LINE" on stderr (yellow on a terminal); arg is the
 * struct kvc_repl, the shape of conv_params.notice. */
void repl_notice(void *arg, const char *line);

/* turn.c */
/*
 * Run one turn (or a retry when retry is true) and print reply and stats:
 * 0, or the conversation's KVC_E* code after printing its error
 * (KVC_ERANGE: the turn was refused as too long for the context), or
 * KVC_EINTR when Ctrl-C stopped it: in the rebuild of the cache or the
 * prefill (nothing stored), or in the reply (kept, marked interrupted).
 */
int repl_turn(struct kvc_repl *r, const char *text, bool retry);
/* Make c (already open) the conversation being talked to. */
void repl_switch(struct kvc_repl *r, struct conv *c);
/*
 * Print the last n messages of the current conversation (n < 0: all) as
 * they were shown live: each user message after the prompt, each reply as
 * it streamed. brief (the recap on resume): a long user message shows its
 * first lines and how much more /history shows.
 */
void repl_show_msgs(struct kvc_repl *r, int n, bool brief);
/* The same for the messages msgs[0..total) of a chat without a conv (--endpoint). */
void repl_show_list(struct kvc_repl *r, const struct sess_msg *const *msgs, int total, int n,
    bool brief);
/* "conversation 3 (title), 4 messages", or "new conversation (title)" before it is stored. */
void repl_describe(struct kvc_repl *r, char *buf, size_t len);
/* Print the stats line of one turn to f (dim when f is stdout and colour is on). */
void repl_print_stats(struct kvc_repl *r, FILE *f, const struct conv_stats *s);
/*
 * The --stats-json record of one turn (one line, newline included) appended
 * to b: stop is the stats line's reason ("max tokens", "context full",
 * "interrupted"; NULL: "eos", the model ended its turn); ttft_ms is null when
 * no reply token came; kv: the cache's type and bytes per position (in
 * memory, and in a snapshot). 0 or KVC_ENOMEM.
 */
struct repl_kv_facts {
	const char *type;
	size_t bytes_per_pos;		/* memory a further position takes (windowed layers bounded) */
	size_t snap_bytes_per_pos;	/* rows a position adds to a snapshot (0: bytes_per_pos) */
};
int repl_stats_record(struct kvc_buf *b, int turn, int64_t id, const char *title,
    const struct conv_stats *s, const char *stop, const struct repl_kv_facts *kv);

/* paths.c */
/* $VAR/rest, or HOME/fallback/rest when $VAR is unset or not absolute (HOME
 * from kvc_home_dir: the password database when $HOME is not absolute). 0
 * or a KVC_E* code with err set. */
int repl_xdg_path(char *buf, size_t len, const char *var, const char *fallback,
    const char *rest, char *err, size_t errlen);
/* The folder of path, created 0700 as needed and refused unless private
 * (kvc_mkdirs_private). 0 or a KVC_E* code with err set. */
int repl_private_dir(const char *path, char *err, size_t errlen);
/* A warning notice when the database at db_path, its -wal, -shm or folder
 * can be read by others (kvc_file_exposed); nothing is changed. */
void repl_warn_exposed(struct kvc_repl *r, const char *db_path);

/* rows.c: stored rows shown without trusting them. */
/*
 * in as it may be shown on a terminal, into out (len bytes, cut there):
 * bytes that are not UTF-8 become U+FFFD, control characters '?'. Returns
 * whether in needed no cleaning (out may be NULL with len 0 to ask only).
 */
bool repl_clean_text(const char *in, char *out, size_t len);
/*
 * title (a conversation's, as stored; NULL reads as "") cleaned as
 * repl_clean_text does, into buf: every message that names a conversation
 * shows its title through this, never raw. Returns buf.
 */
const char *repl_title(const char *title, char *buf, size_t len);
/* What is wrong with a listed conversation row, in buf; NULL when nothing is. */
const char *repl_conv_damage(const struct sess_conv *c, char *buf, size_t len);
/*
 * One /list row to f: a '*' when cur, id, date of the last change, message
 * count, title cleaned, "(damaged)" when it is (bold on a colour stdout
 * when cur).
 */
void repl_print_conv_row(struct kvc_repl *r, FILE *f, const struct sess_conv *c, bool cur);
/*
 * The conversation args names, for what ("/resume", "--resume"): an id, or
 * a title that one conversation has. 0 with *id set; otherwise the error is
 * said (prefixed with what) and KVC_ENOTFOUND returned, or KVC_EINVAL when
 * several conversations have the title (listed to f, as /list rows: none is
 * chosen), or the store's error.
 */
int repl_pick_conv(struct kvc_repl *r, const char *what, const char *args, FILE *f, int64_t *id);

/* input.c */
/*
 * One message read at the terminal: a line, lines joined by a trailing
 * backslash, or a """ block. NULL at EOF; "" when Ctrl-C cancelled the
 * input. The caller frees it.
 */
char *repl_read_input(struct kvc_repl *r, const char *prompt);
/*
 * Whether the terminal itself shows a Ctrl-C typed while no line is read
 * (echo with ECHOCTL: "^C"), so the program need not say it again.
 */
bool repl_tty_echoes_ctl(void);

/* history.c: the history file at path into readline's history, and back
 * (save: 0 or a KVC_E* code with err set). */
void repl_history_load(const char *path);
int repl_history_save(const char *path, char *err, size_t errlen);

/* complete.c: tab completion of whole lines for r's session; _end stops it. */
void repl_complete_begin(struct kvc_repl *r);
void repl_complete_end(void);

/* loop.c: the two ways to talk; each returns the process exit status. */
int repl_loop_terminal(struct kvc_repl *r);
int repl_loop_batch(struct kvc_repl *r);

#endif
