/*
 * history.c: the line-editing history file. It keeps one entry per line; a
 * multi-line entry (a """ block) has its newlines written as \n and
 * backslashes as \\, which the first line announces. A file without that
 * line (readline's own format) is read as plain lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

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

/* Written to a temporary file and renamed, so a crash leaves the old file whole. */
void
repl_history_save(const char *path)
{
	char tmp[4200];
	FILE *f;
	bool ok;

	snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
	f = fopen(tmp, "w");
	if (f == NULL)
		return;
	(void)fchmod(fileno(f), 0600);
	ok = fprintf(f, "%s\n", HIST_MAGIC) > 0;
	for (int i = 0; ok && i < history_length; i++) {
		HIST_ENTRY *h = history_get(history_base + i);

		if (h == NULL || h->line == NULL)
			continue;
		for (const char *p = h->line; ok && *p; p++)
			ok = (*p == '\n' ? fputs("\\n", f) : *p == '\\' ? fputs("\\\\", f) :
			    putc(*p, f)) >= 0;
		ok = ok && putc('\n', f) >= 0;
	}
	if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
		(void)unlink(tmp);
}
