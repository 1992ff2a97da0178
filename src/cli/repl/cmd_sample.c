/*
 * cmd_sample.c: /set, the sampling settings of this conversation, in
 * kvchat's form (/set NAME VALUE) and ollama's (/set parameter NAME VALUE,
 * /set system TEXT, /set verbose, /set quiet).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"

static void
print_settings(const struct conv_settings *s)
{
	char seed[24] = "random";

	if (s->smp.seed != KVC_SEED_RANDOM)
		snprintf(seed, sizeof seed, "%" PRIu64, s->smp.seed);
	printf("temperature %g  top_k %d  top_p %g  min_p %g  repeat_penalty %g  seed %s"
	    "  max_tokens %d%s\n", (double)s->smp.temp, s->smp.top_k, (double)s->smp.top_p,
	    (double)s->smp.min_p, (double)s->smp.repeat_penalty, seed, s->max_tokens,
	    s->max_tokens ? "" : " (no limit)");
}

/* The first word of *p into word (cut to len), *p moved past it and the blanks after. */
static void
next_word(const char **p, char *word, size_t len)
{
	const char *s = *p;
	size_t n = strcspn(s, " \t");

	snprintf(word, len, "%.*s", (int)n, s);
	s += n;
	while (*s == ' ' || *s == '\t')
		s++;
	*p = s;
}

/* /set NAME VALUE: the name is checked before the value, the value against its range. */
static int
set_one(struct kvc_repl *r, const char *name, const char *value)
{
	struct conv_settings s = *conv_get_settings(r->cur);
	const struct conv_setting *row = conv_setting_find(name);
	char err[512], names[160], range[48];
	struct kvc_buf now = {0};

	if (row == NULL) {
		conv_setting_names(names, sizeof names);
		repl_error(r, "/set: unknown setting '%s' (%s; or system, verbose, quiet, think, effort, show-thinking)", name,
		    names);
		return 1;
	}
	if (value[0] == '\0') {
		conv_setting_range(row, range, sizeof range);
		(void)conv_setting_text(&s, row, &now);
		repl_error(r, "usage: /set %s VALUE (%s%snow %.*s)", row->name, range,
		    range[0] ? "; " : "", (int)now.n, now.p ? now.p : "");
		kvc_buf_free(&now);
		return 1;
	}
	if (conv_setting_apply(&s, row, name, value, err, sizeof err) ||
	    conv_set_settings(r->cur, &s, err, sizeof err)) {
		repl_error(r, "/set: %s", err);
		return 1;
	}
	/* Also the default of the conversations /new starts in this session. */
	if (conv_setting_find(name) != NULL)
		conv_setting_copy(&r->set, &s, conv_setting_find(name));
	print_settings(&s);
	return 0;
}

int
cmd_template_vars(struct kvc_repl *r)
{
	char vars[128];
	int k = 0;

	vars[0] = '\0';
	if (r->think >= 0)
		k = snprintf(vars, sizeof vars, "\"enable_thinking\": %s", r->think ? "true" : "false");
	if (r->effort)
		snprintf(vars + k, sizeof vars - (size_t)k, "%s\"reasoning_effort\": \"%s\"",
		    k ? ", " : "", r->effort);
	return conv_mgr_set_template_vars(r->mgr, vars);
}

/* /set think on|off|default, /set effort low|medium|high|default. */
static int
set_template_var(struct kvc_repl *r, bool think, const char *value)
{
	static const char *const efforts[] = { "low", "medium", "high" };
	const char *note = conv_mgr_family(r->mgr) == CHAT_JINJA ? "" :
	    " (only the model's own template reads it; this chat uses a built-in family)";

	if (think && (!strcmp(value, "on") || !strcmp(value, "off") || !strcmp(value, "default"))) {
		r->think = value[0] == 'd' ? -1 : value[1] == 'n';
	} else if (!think && !strcmp(value, "default")) {
		r->effort = NULL;
	} else if (!think) {
		for (size_t i = 0; i < 3; i++)
			if (!strcmp(value, efforts[i]))
				r->effort = efforts[i];
		if (!r->effort || strcmp(r->effort, value) != 0) {
			repl_error(r, "usage: /set effort low|medium|high|default");
			return 1;
		}
	} else {
		repl_error(r, "usage: /set think on|off|default");
		return 1;
	}
	if (cmd_template_vars(r) != 0) {
		repl_error(r, "/set: out of memory");
		return 1;
	}
	if (think)
		printf("think %s, from the next turn on%s\n", r->think < 0 ? "as the template's default" :
		    r->think ? "on" : "off", note);
	else
		printf("reasoning effort %s, from the next turn on%s\n", r->effort ? r->effort :
		    "as the template's default", note);
	return 0;
}

/* /set show-thinking on|off: the reasoning streamed dimmed, or one folded line. */
static int
set_show_thinking(struct kvc_repl *r, const char *value)
{
	if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0) {
		repl_error(r, "usage: /set show-thinking on|off");
		return 1;
	}
	r->show_thinking = value[1] == 'n';
	printf("reasoning %s\n", r->show_thinking ? "shown" : "folded to one line");
	return 0;
}

static int
cmd_set_exec(struct kvc_repl *r, const char *args)
{
	char name[32];

	if (args[0] == '\0') {
		print_settings(conv_get_settings(r->cur));
		printf("stats line %s (/set verbose, /set quiet)\n", r->quiet ? "off" : "on");
		return 0;
	}
	next_word(&args, name, sizeof name);
	if (strcmp(name, "parameter") == 0) {
		if (args[0] == '\0') {
			repl_error(r, "usage: /set parameter NAME VALUE");
			return 1;
		}
		next_word(&args, name, sizeof name);
	} else if (strcmp(name, "system") == 0) {
		return cmd_system_set(r, args);
	} else if (strcmp(name, "show-thinking") == 0) {
		return set_show_thinking(r, args);
	} else if (strcmp(name, "think") == 0 || strcmp(name, "effort") == 0) {
		return set_template_var(r, name[0] == 't', args);
	} else if (strcmp(name, "verbose") == 0 || strcmp(name, "quiet") == 0) {
		r->quiet = name[0] == 'q';
		printf("stats line %s\n", r->quiet ? "off" : "on");
		return 0;
	}
	return set_one(r, name, args);
}

/*
 * /help's line for /set names the rows of conv_setting_table in a string
 * constant (the entries are constants too); test_options checks that it
 * names every row.
 */
const struct kvc_cmd_entry cmd_sample_entries[] = {
	{ "set", "[parameter] NAME VALUE", "temperature, top_p, top_k, min_p, repeat_penalty, "
	    "seed, max_tokens; /set verbose|quiet: stats line on|off; /set system TEXT; "
	    "/set think on|off, /set effort low|medium|high: the model's template's "
	    "enable_thinking, reasoning_effort; /set show-thinking on|off: reasoning shown "
	    "or folded",
	    cmd_set_exec },
	{ NULL, NULL, NULL, NULL },
};
