/*
 * remote_set.c: kvchat --endpoint's settings and the commands that show
 * them. A setting is sent with every request once given (the command
 * line's sampling options, /set NAME VALUE) and left to the server until
 * then, or again after /set NAME default: a remote model's defaults are
 * the server's, not kvchat's. /system is the system message sent (stored
 * with the conversation); /show says what is known here (the endpoint, the
 * model's name, the settings), not the remote model's insides; /stats lists
 * the stored turns' figures as the server reported them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote_int.h"

/* What the next request asks for: the settings given; the server's defaults for the rest. */
void
remote_request_settings(struct remote_opts *o)
{
	const struct kvc_sampler_params *sp = &o->set.smp;
#define GIVEN(name) o->given[conv_setting_find(name) - conv_setting_table]

	o->rp.temperature = GIVEN("temperature") ? sp->temp : -1;
	o->rp.top_p = GIVEN("top_p") ? sp->top_p : -1;
	o->rp.top_k = GIVEN("top_k") ? sp->top_k : -1;
	o->rp.min_p = GIVEN("min_p") ? sp->min_p : -1;
	o->rp.repeat_penalty = GIVEN("repeat_penalty") ? sp->repeat_penalty : -1;
	/* "random": the server picks, as it does when no seed is sent */
	o->rp.has_seed = GIVEN("seed") && sp->seed != KVC_SEED_RANDOM;
	o->rp.seed = sp->seed;
	o->rp.max_tokens = GIVEN("max_tokens") ? o->set.max_tokens : 0;
#undef GIVEN
}

/* The settings, one a line, by the names /set takes; those not given are the server's. */
static void
show_settings(const struct remote_chat *c)
{
	struct kvc_buf v = {0};

	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		v.n = 0;
		if (!c->o->given[i])
			printf("%-15s (the server's default)\n", conv_setting_table[i].name);
		else if (conv_setting_text(&c->o->set, &conv_setting_table[i], &v) == 0 && v.p)
			printf("%-15s %.*s\n", conv_setting_table[i].name, (int)v.n, v.p);
	}
	kvc_buf_free(&v);
	printf("%-15s %s\n", "stats line", c->o->quiet ? "off" : "on");
}

/* Whether a message carries token ids: the conversation was made by a local chat. */
static bool
has_ids(const struct remote_chat *c)
{
	for (int i = 0; i < c->n_msgs; i++)
		if (c->msgs[i].n_ids > 0)
			return true;
	return false;
}

/* /system [TEXT]: the system message the requests send (stored with the conversation). */
int
remote_system_cmd(struct remote_chat *c, const char *text)
{
	char err[512];
	char *dup;

	if (*text == '\0') {
		printf("%s\n", c->system && c->system[0] ? c->system : "(none)");
		return 0;
	}
	/* a local chat's conversation: its token ids and snapshot would no longer match */
	if (c->id > 0 && has_ids(c)) {
		fprintf(stderr, "kvchat: /system: conversation %lld was made by a local chat, whose "
		    "cache holds its system prompt: change it there (kvchat -m MODEL --resume %lld)\n",
		    (long long)c->id, (long long)c->id);
		return 1;
	}
	if ((dup = strdup(text)) == NULL ||
	    (c->id > 0 && sess_conv_set_system(c->st, c->id, text, err, sizeof err) != KVC_OK)) {
		fprintf(stderr, "kvchat: /system: %s\n", dup ? err : "out of memory");
		free(dup);
		return 1;
	}
	free(c->system);
	c->system = dup;
	printf("system message set: the next request sends it%s\n", c->n_msgs > 0 ?
	    ", with the whole history" : "");
	return 0;
}

/* The first word of *p into w (cut to len), *p moved past it and the blanks after. */
static void
next_word(const char **p, char *w, size_t len)
{
	size_t n = strcspn(*p, " \t");

	snprintf(w, len, "%.*s", (int)n, *p);
	for (*p += n; **p == ' ' || **p == '\t'; (*p)++)
		;
}

/* /set [parameter] NAME VALUE|default, /set system TEXT, /set verbose|quiet. */
int
remote_set_cmd(struct remote_chat *c, const char *args)
{
	const struct conv_setting *row;
	char name[32], err[512], names[160];

	if (*args == '\0') {
		show_settings(c);
		return 0;
	}
	next_word(&args, name, sizeof name);
	if (strcmp(name, "parameter") == 0)
		next_word(&args, name, sizeof name);
	if (strcmp(name, "system") == 0)
		return remote_system_cmd(c, args);
	if (strcmp(name, "verbose") == 0 || strcmp(name, "quiet") == 0) {
		c->o->quiet = name[0] == 'q';
		printf("stats line %s\n", c->o->quiet ? "off" : "on");
		return 0;
	}
	if (strcmp(name, "think") == 0 || strcmp(name, "effort") == 0 ||
	    strcmp(name, "show-thinking") == 0) {
		fprintf(stderr, "kvchat: /set %s: the server renders the chat template and its "
		    "reasoning: set it there\n", name);
		return 1;
	}
	if ((row = conv_setting_find(name)) == NULL) {
		conv_setting_names(names, sizeof names);
		fprintf(stderr, "kvchat: /set: unknown setting '%s' (%s; or system, verbose, quiet)\n",
		    name, names);
		return 1;
	}
	if (*args == '\0') {
		fprintf(stderr, "kvchat: usage: /set %s VALUE|default\n", row->name);
		return 1;
	}
	if (strcmp(args, "default") == 0) {
		c->o->given[row - conv_setting_table] = false;
	} else if (conv_setting_apply(&c->o->set, row, name, args, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: /set: %s\n", err);
		return 1;
	} else {
		c->o->given[row - conv_setting_table] = true;
	}
	show_settings(c);
	return 0;
}

/* /stats: each stored turn's figures, as the server reported them (0 where it did not). */
void
remote_stats_cmd(const struct remote_chat *c)
{
	int turn = 0;

	printf("%4s %9s %8s %8s %6s %10s %s\n", "turn", "ttft_ms", "cached", "prefill", "gen",
	    "decode/s", "");
	for (int i = 0; i < c->n_msgs; i++) {
		const struct sess_msg *x = &c->msgs[i];

		if (x->role != SESS_ASSISTANT)
			continue;
		turn++;
		printf("%4d %9.1f %8d %8d %6d %10.1f %s\n", turn, x->stats.ttft_ms,
		    x->stats.reused_tokens, x->stats.prefill_tokens, x->stats.gen_tokens,
		    x->stats.decode_tps, x->interrupted ? "interrupted" : "");
	}
	if (turn == 0)
		printf("no turns yet\n");
}

/* /show [info|parameters|system|template]: what is known here of the remote chat. */
int
remote_show_cmd(struct remote_chat *c, const char *what)
{
	bool all = *what == '\0';
	char t[256];

	if (!all && strcmp(what, "info") && strcmp(what, "parameters") && strcmp(what, "system") &&
	    strcmp(what, "template")) {
		fprintf(stderr, "kvchat: usage: /show [info|parameters|system|template]\n");
		return 1;
	}
	if (all || strcmp(what, "info") == 0) {
		printf("%-12s %s\n", "endpoint", c->o->rp.base_url);
		printf("%-12s %s (served there: its size, cache and threads are the server's)\n",
		    "model", c->o->rp.model);
		if (c->id > 0)
			printf("%-12s %lld (%s), %d messages\n", "conversation", (long long)c->id,
			    repl_title(c->title, t, sizeof t), c->n_msgs);
		else
			printf("%-12s none stored yet\n", "conversation");
	}
	if (all || strcmp(what, "template") == 0)
		printf("%-12s the server's: it renders the messages this chat sends\n", "template");
	if (all)
		printf("%-12s ", "system");
	if (all || strcmp(what, "system") == 0)
		printf("%s\n", c->system && c->system[0] ? c->system : "(none)");
	if (all)
		printf("\n");
	if (all || strcmp(what, "parameters") == 0)
		show_settings(c);
	return 0;
}
