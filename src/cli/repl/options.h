/* options.h: the chat program's command line, parsed. */
#ifndef KVC_OPTIONS_H
#define KVC_OPTIONS_H

#include "repl.h"

enum repl_open_mode { OPEN_NEW, OPEN_SESSION, OPEN_RESUME };

struct repl_opts {
	const char *model;
	const char *db;
	enum repl_open_mode mode;
	const char *name;		/* --session NAME, --resume X, --new TITLE */
	const char *system;
	const char *template_name;
	struct kvc_engine_params ep;
	struct conv_settings set;
	unsigned set_mask;		/* bit i: conv_setting_table[i] was given */
	size_t kv_budget;
	bool kv_budget_given;
	enum conv_overflow overflow;
	int keep;			/* --keep (0: the system prompt, or 4) */
	const char *draft;		/* --draft MODEL, or NULL */
	int lookup, spec_k;		/* --lookup N, --spec-k K (0: off / the default) */
	const char *stats_json;
	bool no_color;
	int recap;			/* messages shown on resume (--recap) */
	bool force_unlock;		/* take over locks that cannot be checked */
	int think;			/* --think on|off: enable_thinking 1 / 0; -1: the template's default */
	const char *effort;		/* --reasoning-effort low|medium|high, or NULL */
	int show_thinking;		/* --show-thinking: 1; -1: the default (shown at a terminal) */
};

/*
 * Parses argv into o (defaults for what is not given). Returns 0 to go on,
 * -1 when --help or --version has been printed (exit 0), or 2 after
 * printing a usage error on stderr.
 */
int repl_parse_opts(int argc, char **argv, struct repl_opts *o);

#endif
