/*
 * paths.c: where the chat program keeps its files (the XDG base
 * directories: database under data, history under state) and creating
 * their folders.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "repl.h"

int
repl_mkdir_parents(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n >= sizeof buf)
		return -1;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return 0;
}

void
repl_xdg_path(char *buf, size_t len, const char *var, const char *fallback, const char *rest)
{
	const char *d = getenv(var), *home = getenv("HOME");

	if (d != NULL && d[0] == '/')
		snprintf(buf, len, "%s/%s", d, rest);
	else
		snprintf(buf, len, "%s/%s/%s", home ? home : ".", fallback, rest);
}
