/* cmd_sample.c: /set NAME VALUE, the sampling settings of this conversation. */
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

static int
cmd_set_exec(struct kvc_repl *r, const char *args)
{
	struct conv_settings s = *conv_get_settings(r->cur);
	char name[32], err[512], names[160];
	const char *value;
	size_t n;

	if (args[0] == '\0') {
		print_settings(&s);
		return 0;
	}
	value = strchr(args, ' ');
	n = value ? (size_t)(value - args) : strlen(args);
	if (value == NULL || n >= sizeof name) {
		conv_setting_names(names, sizeof names);
		repl_error(r, "usage: /set NAME VALUE (%s)", names);
		return 1;
	}
	memcpy(name, args, n);
	name[n] = '\0';
	while (*value == ' ')
		value++;
	if (conv_settings_set(&s, name, value, err, sizeof err) ||
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

/*
 * /help's line for /set names the rows of conv_setting_table in a string
 * constant (the entries are constants too); test_options checks that it
 * names every row.
 */
const struct kvc_cmd_entry cmd_sample_entries[] = {
	{ "set", "NAME VALUE", "temperature, top_p, top_k, min_p, repeat_penalty, seed, "
	    "max_tokens", cmd_set_exec },
	{ NULL, NULL, NULL, NULL },
};
