/*
 * remote_int.h: what kvchat --endpoint's two files share: the chat's
 * options and state (remote_chat.c, the loop, turns and history commands)
 * and its settings commands below it (remote_set.c).
 */
#ifndef KVC_REMOTE_INT_H
#define KVC_REMOTE_INT_H

#include "conv/conv.h"
#include "remote/remote.h"
#include "sessions/store.h"
#include "cli/repl/repl.h"

struct remote_opts {
	struct rmt_params rp;
	struct conv_settings set;	/* the settings the requests carry... */
	bool given[CONV_N_SETTINGS];	/* ...those given (conv_setting_table's rows) */
	bool quiet;			/* no stats line (/set quiet) */
	const char *db, *key_file, *resume, *system;
	char key[4096];
	char model[256];
};

struct remote_chat {
	struct remote_opts *o;
	struct sess_store *st;
	int64_t id;			/* 0 until the first message is stored */
	struct sess_msg *msgs;		/* the conversation's messages */
	int n_msgs;
	char *system;
	char title[64];			/* as stored */
	struct kvc_repl shell;		/* what the REPL's printing and /export read */
};

/* remote_set.c */
/* Fill o->rp with what the next request asks for: the settings given, the server's defaults for the rest. */
void remote_request_settings(struct remote_opts *o);
/* /set, /system, /show, /stats (args after the name): 0, or 1 after saying why. */
int remote_set_cmd(struct remote_chat *c, const char *args);
int remote_system_cmd(struct remote_chat *c, const char *text);
int remote_show_cmd(struct remote_chat *c, const char *what);
void remote_stats_cmd(const struct remote_chat *c);

#endif
