/*
 * sub_opts.c: the one option parser of the subcommands with an option
 * table (generate, perplexity, batch). Each subcommand declares its own
 * rows (name, alias, kind, where the value goes, its range); the rows
 * several share come from one place: the engine options
 * (sub_engine_option), --ctx (sub_ctx_option) and the sampler rows of the
 * settings table the chat's /set reads (conv_setting_table), so an option
 * is spelt, ranged and refused the same way everywhere.
 */
#include <stdio.h>
#include <string.h>

#include "conv/conv.h"
#include "sub_common.h"

/* The engine's options: their values are sub_engine_option's to check. */
static const char *const engine_names[][2] = {
	{ "--threads", "-t" }, { "--kv-type", NULL }, { "--device", NULL }, { "--gpu", NULL },
};

static bool
is_name(const char *a, const char *name, const char *alias)
{
	return strcmp(a, name) == 0 || (alias != NULL && strcmp(a, alias) == 0);
}

static const struct sub_opt *
own_row(const struct sub_opts_spec *c, const char *a)
{
	for (const struct sub_opt *r = c->opts; r->name; r++)
		if (is_name(a, r->name, r->alias))
			return r;
	return NULL;
}

/* Whether a is one of the rows every spec with ep / ctx / set shares. */
static bool
shared_row(const struct sub_opts_spec *c, const char *a, const struct conv_setting **smp)
{
	*smp = NULL;
	if (c->ep != NULL)
		for (size_t k = 0; k < sizeof engine_names / sizeof engine_names[0]; k++)
			if (is_name(a, engine_names[k][0], engine_names[k][1]))
				return true;
	if (c->ep != NULL && c->ctx && is_name(a, "--ctx", "-c"))
		return true;
	if (c->set != NULL && strncmp(a, "--", 2) == 0 &&
	    (*smp = conv_setting_by_opt(a + 2)) != NULL && (*smp)->smp)
		return true;
	*smp = NULL;
	return false;
}

/* One of the shared rows with its value: -1 to go on, or 2 (said). */
static int
apply_shared(const struct sub_opts_spec *c, const struct conv_setting *smp, const char *a,
    const char *val)
{
	const char *why = "bad value";
	char bad[64];

	if (smp != NULL) {
		snprintf(bad, sizeof bad, "bad %s", a);
		return conv_setting_apply(c->set, smp, a, val, NULL, 0) == KVC_OK ? -1 :
		    sub_usage(c->name, c->usage, bad, val);
	}
	if (sub_engine_option(a, val, c->ep, &why) > 0 || sub_ctx_option(a, val, c->ep, &why) > 0)
		return -1;
	return sub_usage(c->name, c->usage, why, val);
}

/* A row of the subcommand's own table with its value: -1 to go on, or 2 (said). */
static int
apply_own(const struct sub_opts_spec *c, const struct sub_opt *r, const char *val)
{
	switch (r->kind) {
	case SUB_OPT_FLAG:
		*(bool *)r->dst = true;
		return -1;
	case SUB_OPT_STR:
		*(const char **)r->dst = val;
		return -1;
	case SUB_OPT_LONG:
		if (kvc_parse_long(val, r->lo, r->hi, (long *)r->dst) == KVC_OK)
			return -1;
		break;
	case SUB_OPT_FN:
		if (r->fn(r->dst, val) == 0)
			return -1;
		break;
	}
	return sub_usage(c->name, c->usage, r->bad ? r->bad : "bad value", val);
}

int
sub_parse_opts(const struct sub_opts_spec *c, int argc, char **argv)
{
	const struct conv_setting *smp;
	const struct sub_opt *r;
	const char *a, *val;
	int rc;

	for (int i = 1; i < argc; i++) {
		a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(c->usage, stdout);
			return 0;
		}
		r = own_row(c, a);
		if (r == NULL && !shared_row(c, a, &smp))
			return sub_usage(c->name, c->usage, a[0] == '-' ? "unknown option" :
			    "unexpected argument", a);
		if (r != NULL && r->kind == SUB_OPT_FLAG) {
			*(bool *)r->dst = true;
			continue;
		}
		if (i + 1 >= argc)
			return sub_usage(c->name, c->usage, "option needs a value", a);
		val = argv[++i];
		rc = r != NULL ? apply_own(c, r, val) : apply_shared(c, smp, a, val);
		if (rc >= 0)
			return rc;
	}
	return -1;
}
