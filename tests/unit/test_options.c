/*
 * test_options: the chat program's sampling options against the settings
 * table (conv_setting_table): --help shows each row's option line as the
 * row words it, /set's help line names every row, and each row's option
 * (and -n) sets that setting alone and marks it given.
 */
#include "gguf/gguf.h"
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "cli/cli.h"
#include "cli/repl/cmd.h"
#include "cli/repl/options.h"

/* kvchat --help, as one string (the caller frees it). */
static char *
help_text(void)
{
	char *p = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&p, &n);

	if (f == NULL)
		return NULL;
	cli_help(f, cmd_print_help);
	fclose(f);
	return p;
}

/* row's value in s as the settings text writes it, in buf. */
static const char *
setting_text(const struct conv_settings *s, const struct conv_setting *row, char *buf,
    size_t len)
{
	struct kvc_buf b = {0};

	snprintf(buf, len, "%s", conv_setting_text(s, row, &b) == 0 && b.p ? b.p : "?");
	kvc_buf_free(&b);
	return buf;
}

static void
test_help(void)
{
	const struct kvc_cmd_entry *set = cmd_find("set");
	const struct conv_setting *row;
	char *help = help_text(), head[64], line[256];

	test_cond(help != NULL, "--help text");
	test_cond(set != NULL, "/set in the command table");
	if (help == NULL || set == NULL)
		return;
	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		row = &conv_setting_table[i];
		if (row->short_opt)
			snprintf(head, sizeof head, "-%c, --%s %s", row->short_opt, row->opt,
			    row->metavar);
		else
			snprintf(head, sizeof head, "--%s %s", row->opt, row->metavar);
		snprintf(line, sizeof line, "\n  %-24s%s\n", head, row->help);
		test_cond(strstr(help, line) != NULL, "--help has no line '%.*s'",
		    (int)strlen(line) - 2, line + 1);
		test_cond(strstr(set->help, row->name) != NULL, "/set's help '%s' misses %s",
		    set->help, row->name);
	}
	free(help);
}

/* Parse "kvchat OPT VALUE" into o: what repl_parse_opts returns. */
static int
parse1(const char *opt, const char *value, struct repl_opts *o)
{
	char *argv[] = { "kvchat", (char *)opt, (char *)value, NULL };

	return repl_parse_opts(3, argv, o);
}

/*
 * The ranges of the settings table, as the command line applies them: the
 * borders the sampler gives a meaning to are taken, one step past is a
 * usage error.
 */
static void
test_ranges(void)
{
	static const struct { const char *opt, *value; int rc; } cases[] = {
		{ "--temp", "0", 0 }, { "--temp", "-1", 2 }, { "--temp", "-0.001", 2 },
		{ "--temp", "inf", 2 }, { "--temp", "nan", 2 }, { "--temp", "100", 0 },
		{ "--top-p", "1", 0 }, { "--top-p", "2", 2 }, { "--top-p", "0", 2 },
		{ "--top-p", "1e-9", 0 }, { "--top-p", "-0.5", 2 }, { "--top-p", "1e-50", 2 },
		{ "--top-k", "0", 0 }, { "--top-k", "-1", 2 },
		{ "--min-p", "0", 0 }, { "--min-p", "1", 0 }, { "--min-p", "1.01", 2 },
		{ "--min-p", "-0.1", 2 },
		{ "--repeat-penalty", "0", 2 }, { "--repeat-penalty", "0.5", 0 },
		{ "--repeat-penalty", "-1", 2 },
		{ "--max-tokens", "0", 0 }, { "--max-tokens", "-1", 2 },
	};
	const struct conv_setting *row;
	struct conv_settings s = conv_default_settings();
	struct repl_opts o;
	char err[256];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		test_cond(parse1(cases[i].opt, cases[i].value, &o) == cases[i].rc,
		    "%s %s: want %d", cases[i].opt, cases[i].value, cases[i].rc);
	/* The refusal says the range. */
	row = conv_setting_find("top_p");
	test_cond(row && conv_setting_apply(&s, row, "--top-p", "2", err, sizeof err) ==
	    KVC_ERANGE && strstr(err, "in (0, 1]") && strstr(err, "'2'"), "top_p 2: %s", err);
	row = conv_setting_find("temp");
	test_cond(row && conv_setting_apply(&s, row, "temp", "-1", err, sizeof err) ==
	    KVC_ERANGE && strstr(err, ">= 0"), "temp -1: %s", err);
	test_cond(s.smp.temp == conv_default_settings().smp.temp, "a refused value is not kept");
	/* A stored text with a value out of range keeps the default (older databases). */
	conv_settings_parse("temp=-3;top_p=0.5", &s);
	test_cond(s.smp.temp == conv_default_settings().smp.temp && s.smp.top_p == 0.5f,
	    "stored temp=-3 ignored, top_p=0.5 read");
}

/* rows.c: a stored title as it may reach a terminal. */
static void
test_clean_text(void)
{
	char out[64];

	test_cond(repl_clean_text("plain 中文", out, sizeof out) && strcmp(out, "plain 中文") == 0,
	    "clean text kept: '%s'", out);
	test_cond(!repl_clean_text("a\xff" "b", out, sizeof out) &&
	    strcmp(out, "a\xef\xbf\xbd" "b") == 0, "a bad byte becomes U+FFFD: '%s'", out);
	test_cond(!repl_clean_text("red\x1b[31m", out, sizeof out) && strcmp(out, "red?[31m") == 0,
	    "an escape becomes '?': '%s'", out);
	test_cond(!repl_clean_text("c1\xc2\x9b", out, sizeof out) && strcmp(out, "c1?") == 0,
	    "a C1 control becomes '?': '%s'", out);
	test_cond(repl_clean_text("abcdef", out, 4) && strcmp(out, "abc") == 0, "cut at len: '%s'",
	    out);
	test_cond(!repl_clean_text("ok\n", NULL, 0), "asking only");
}

static void
test_parse(void)
{
	const struct conv_settings dflt = conv_default_settings();
	const struct conv_setting *row;
	struct repl_opts o;
	char opt[64], want[64], got[64];
	int rc;

	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		row = &conv_setting_table[i];
		snprintf(opt, sizeof opt, "--%s", row->opt);
		/* 1: inside every row's range, and no row's default. */
		rc = parse1(opt, "1", &o);
		test_cond(rc == 0 && o.set_mask == 1u << i, "%s 1: rc %d, mask %#x", opt, rc,
		    o.set_mask);
		test_cond(strcmp(setting_text(&o.set, row, got, sizeof got), "1") == 0,
		    "%s 1 reads %s", opt, got);
		for (int k = 0; k < CONV_N_SETTINGS; k++)
			if (k != i)
				test_cond(strcmp(setting_text(&o.set, &conv_setting_table[k], got,
				    sizeof got), setting_text(&dflt, &conv_setting_table[k], want,
				    sizeof want)) == 0, "%s changed %s", opt, conv_setting_table[k].name);
		if (row->short_opt) {
			snprintf(opt, sizeof opt, "-%c", row->short_opt);
			rc = parse1(opt, "4", &o);
			test_cond(rc == 0 && o.set_mask == 1u << i &&
			    strcmp(setting_text(&o.set, row, got, sizeof got), "4") == 0,
			    "%s 4: rc %d, reads %s", opt, rc, got);
		}
		snprintf(opt, sizeof opt, "--%s", row->opt);
		test_cond(parse1(opt, "abc", &o) == 2, "%s abc is a usage error", opt);
	}
	test_cond(parse1("--seed", "random", &o) == 0 && o.set.smp.seed == KVC_SEED_RANDOM,
	    "--seed random");
	test_cond(parse1("--top-k", "1.5", &o) == 2, "--top-k 1.5 is a usage error");
	test_cond(parse1("-n", "-1", &o) == 2, "-n -1 is a usage error");
	test_ranges();
	test_cond(parse1("--ctx", "512", &o) == 0 && o.set_mask == 0 && o.ep.n_ctx == 512,
	    "--ctx is no setting");
}

int
main(void)
{
	test_help();
	test_parse();
	test_clean_text();
	return test_done();
}
