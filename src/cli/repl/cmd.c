/*
 * cmd.c: the REPL's command table (the groups' tables in /help's order),
 * /help, and dispatch of a "/name args" line.
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

static int cmd_help_exec(struct kvc_repl *r, const char *args);

static const struct kvc_cmd_entry cmd_help_entry = {
	"help", "", "this list", cmd_help_exec,
};

/* Groups in the order /help lists them. */
static const struct kvc_cmd_entry *const cmd_groups[] = {
	cmd_session_entries, cmd_model_entries, cmd_sample_entries,
};

const struct kvc_cmd_entry *
cmd_entry(int i)
{
	if (i < 0)
		return NULL;
	if (i == 0)
		return &cmd_help_entry;
	i--;
	for (size_t g = 0; g < sizeof cmd_groups / sizeof cmd_groups[0]; g++) {
		for (const struct kvc_cmd_entry *e = cmd_groups[g]; e->name; e++)
			if (i-- == 0)
				return e;
	}
	return NULL;
}

/*
 * Other programs' names for the same commands (ollama's /bye and /?,
 * llama-cli's /regen), so that people's habits work. /help shows them on
 * the command's line; completion offers only the command's own name.
 */
static const struct { const char *alias, *name; } cmd_aliases[] = {
	{ "bye", "quit" }, { "exit", "quit" }, { "?", "help" }, { "regen", "retry" },
};

const struct kvc_cmd_entry *
cmd_find(const char *name)
{
	const struct kvc_cmd_entry *e;

	for (size_t k = 0; k < sizeof cmd_aliases / sizeof cmd_aliases[0]; k++)
		if (strcmp(name, cmd_aliases[k].alias) == 0)
			name = cmd_aliases[k].name;
	for (int i = 0; (e = cmd_entry(i)) != NULL; i++)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

int
cmd_exec(struct kvc_repl *r, const char *line)
{
	const struct kvc_cmd_entry *e;
	char name[32];
	size_t n = 0;

	if (*line == '/')
		line++;
	while (line[n] && line[n] != ' ' && line[n] != '\t' && n < sizeof name - 1) {
		name[n] = line[n];
		n++;
	}
	name[n] = '\0';
	line += n;
	while (*line == ' ' || *line == '\t')
		line++;
	e = cmd_find(name);
	if (e == NULL) {
		repl_error(r, "unknown command '/%s' (/help lists them)", name);
		return 1;
	}
	return e->exec(r, line);
}

void
cmd_print_help(FILE *f)
{
	const struct kvc_cmd_entry *e;
	char head[48];
	int n;

	for (int i = 0; (e = cmd_entry(i)) != NULL; i++) {
		snprintf(head, sizeof head, "/%s%s%s", e->name, e->args[0] ? " " : "", e->args);
		fprintf(f, "  %-26s %s", head, e->help);
		n = 0;
		for (size_t k = 0; k < sizeof cmd_aliases / sizeof cmd_aliases[0]; k++)
			if (strcmp(cmd_aliases[k].name, e->name) == 0)
				fprintf(f, "%s/%s", n++ ? ", " : "; also ", cmd_aliases[k].alias);
		fputc('\n', f);
	}
}

static int
cmd_help_exec(struct kvc_repl *r, const char *args)
{
	printf("Commands:\n");
	cmd_print_help(stdout);
	printf("Input: a line is one message; end a line with \\ to continue it, or wrap\n"
	    "several lines in \"\"\" ... \"\"\". Ctrl-C stops a reply or drops what is being typed;\n"
	    "Ctrl-D drops an unfinished \"\"\" block, and at an empty prompt leaves (as /quit).\n"
	    "Settings: /set changes this conversation's, and they stay the defaults of the\n"
	    "conversations /new starts in this session.\n");
	return 0;
}
