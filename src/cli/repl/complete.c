/*
 * complete.c: tab completion over whole lines: "/re" -> "/resume ",
 * "/resume ti" -> "/resume title", "/set te" -> "/set temperature",
 * "/export j" -> "/export json".
 */
#include <stdlib.h>
#include <string.h>

#include <readline/readline.h>

#include "cmd.h"

/* The REPL whose titles are completed (readline's generators take no user argument). */
static struct kvc_repl *complete_repl;

/* Every completion of any line, as NUL-separated strings in b; text picks which group. */
static void
candidates(const char *text, struct kvc_buf *b)
{
	const struct kvc_cmd_entry *e;
	struct sess_conv *v;
	int n;

	if (strchr(text, ' ') == NULL) {
		for (int i = 0; (e = cmd_entry(i)) != NULL; i++)
			(void)kvc_buf_printf(b, "/%s%c", e->name, 0);
	} else if (strncmp(text, "/resume ", 8) == 0 || strncmp(text, "/delete ", 8) == 0) {
		if (complete_repl && sess_conv_list(complete_repl->st, &v, &n, NULL, 0) == 0) {
			for (int i = 0; i < n; i++)
				(void)kvc_buf_printf(b, "%.8s%s%c", text, v[i].title, 0);
			sess_conv_list_free(v, n);
		}
	} else if (strncmp(text, "/set ", 5) == 0) {
		for (int i = 0; i < CONV_N_SETTINGS; i++)
			(void)kvc_buf_printf(b, "/set %s%c", conv_setting_table[i].name, 0);
	} else if (strncmp(text, "/export ", 8) == 0) {
		(void)kvc_buf_printf(b, "/export md%c/export json%c", 0, 0);
	}
}

/* readline's generator: state 0 collects the matches, then each call returns the next. */
static char *
complete_gen(const char *text, int state)
{
	static char **cands;
	static int n_cands, next;

	if (state == 0) {
		struct kvc_buf b = {0};

		for (int i = 0; i < n_cands; i++)
			free(cands[i]);
		free(cands);
		cands = NULL;
		n_cands = next = 0;
		candidates(text, &b);
		for (size_t off = 0; off < b.n; off += strlen(b.p + off) + 1) {
			char **nv;

			if (strncmp(b.p + off, text, strlen(text)) != 0)
				continue;
			nv = realloc(cands, (size_t)(n_cands + 1) * sizeof *nv);
			if (nv == NULL)
				break;
			cands = nv;
			if ((cands[n_cands] = strdup(b.p + off)) != NULL)
				n_cands++;
		}
		kvc_buf_free(&b);
	}
	if (next < n_cands)
		return strdup(cands[next++]);
	return NULL;
}

static char **
complete(const char *text, int start, int end)
{
	(void)end;
	rl_attempted_completion_over = 1;
	if (start != 0 || text[0] != '/')
		return NULL;
	rl_completion_append_character = strchr(text, ' ') ? '\0' : ' ';
	return rl_completion_matches(text, complete_gen);
}

void
repl_complete_begin(struct kvc_repl *r)
{
	complete_repl = r;
	/* Whole-line completion: titles may hold spaces. */
	rl_basic_word_break_characters = "\n";
	rl_completer_word_break_characters = "\n";
	rl_attempted_completion_function = complete;
}

void
repl_complete_end(void)
{
	complete_repl = NULL;
}
