/*
 * paths.c: where the chat program keeps its files (the XDG base
 * directories: database under data, history under state), creating their
 * folders private to the user, and the warning for a database others can
 * read. The rules are core's (kvc_dir_check, docs/SECURITY.md).
 */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "repl.h"

int
repl_private_dir(const char *path, char *err, size_t errlen)
{
	char dir[4096];

	if (kvc_dir_of(path, dir, sizeof dir) != KVC_OK) {
		kvc_err(err, errlen, "%s: path too long", path);
		return KVC_ERANGE;
	}
	return kvc_mkdirs_private(dir, err, errlen);
}

int
repl_xdg_path(char *buf, size_t len, const char *var, const char *fallback, const char *rest,
    char *err, size_t errlen)
{
	const char *d = getenv(var);
	char home[4096];
	int rc;

	/* The XDG spec ignores a relative $XDG_*_HOME; so does kvchat. */
	if (d != NULL && d[0] == '/') {
		if ((size_t)snprintf(buf, len, "%s/%s", d, rest) >= len)
			goto long_path;
		return KVC_OK;
	}
	if ((rc = kvc_home_dir(home, sizeof home, err, errlen)) != KVC_OK)
		return rc;
	if ((size_t)snprintf(buf, len, "%s/%s/%s", home, fallback, rest) < len)
		return KVC_OK;
long_path:
	kvc_err(err, errlen, "the path of %s is too long", rest);
	return KVC_ERANGE;
}

void
repl_warn_exposed(struct kvc_repl *r, const char *db_path)
{
	static const char *const companions[] = { "-wal", "-shm", NULL };
	char msg[8192], line[8300];

	if (!kvc_file_exposed(db_path, companions, msg, sizeof msg))
		return;
	snprintf(line, sizeof line, "warning: %s", msg);
	repl_notice(r, line);
}
