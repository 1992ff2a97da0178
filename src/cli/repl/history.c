/*
 * history.c: the line-editing history file. It keeps one entry per line; a
 * multi-line entry (a """ block) has its newlines written as \n and
 * backslashes as \\, which the first line announces. A file without that
 * line (readline's own format) is read as plain lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <readline/history.h>

#include "repl.h"

#define HIST_MAGIC "#kvchat-history v2: \\n is a newline, \\\\ a backslash"

/* Undo the escapes of a v2 line in place. */
static void
unescape(char *line)
{
	char *w = line;

	for (const char *p = line; *p; p++) {
		if (p[0] == '\\' && (p[1] == 'n' || p[1] == '\\')) {
			*w++ = p[1] == 'n' ? '\n' : '\\';
			p++;
		} else {
			*w++ = *p;
		}
	}
	*w = '\0';
}

void
repl_history_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	bool esc = false, first = true;

	if (f == NULL)
		return;
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (first && strcmp(line, HIST_MAGIC) == 0) {
			esc = true;
			first = false;
			continue;
		}
		first = false;
		if (esc)
			unescape(line);
		if (line[0] != '\0')
			add_history(line);
	}
	free(line);
	fclose(f);
}

/* Written to a new private file beside it and renamed (kvc_file_replace), so
 * a crash leaves the old file whole and a planted link is never written to. */
int
repl_history_save(const char *path, char *err, size_t errlen)
{
	struct kvc_buf b = {0};
	int rc;

	rc = kvc_buf_printf(&b, "%s\n", HIST_MAGIC);
	for (int i = 0; rc == KVC_OK && i < history_length; i++) {
		HIST_ENTRY *h = history_get(history_base + i);

		if (h == NULL || h->line == NULL)
			continue;
		for (const char *p = h->line; rc == KVC_OK && *p; p++)
			rc = *p == '\n' ? kvc_buf_append(&b, "\\n", 2) :
			    *p == '\\' ? kvc_buf_append(&b, "\\\\", 2) : kvc_buf_append(&b, p, 1);
		rc = rc == KVC_OK ? kvc_buf_append(&b, "\n", 1) : rc;
	}
	if (rc != KVC_OK)
		kvc_err(err, errlen, "%s: not saved: out of memory", path);
	else
		rc = kvc_file_replace(path, b.p, b.n, err, errlen);
	kvc_buf_free(&b);
	return rc;
}
