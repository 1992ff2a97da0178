/*
 * paths.c: where the chat program keeps its files (the XDG base
 * directories: database under data, history under state), creating their
 * folders private to the user, and the warning for a database others can
 * read. The rules are core's (kvc_dir_check, docs/SECURITY.md).
 */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>

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

/* Whether path exists and group or others may read or write it. */
static bool
file_exposed(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && (sb.st_mode & (S_IRWXG | S_IRWXO)) != 0;
}

/*
 * Whether the warning about the database's folder alone (its files are
 * private) was said before for this folder at this mode, and if not,
 * remembers that it now is. Such a folder shows others file names only
 * (sessions.db, models/: the README's mkdir made one so), so the warning
 * is said once, not at every start: the state folder's "exposure-noted"
 * holds one "MODE PATH" line per folder said. A change of mode says it
 * again. Without a usable state folder it is said every time.
 */
static bool
noted_before(const char *dir, unsigned mode, char *noted, size_t len)
{
	char line[4200], err[256], *all = NULL;
	size_t n = 0;
	bool seen = false;
	FILE *f;

	if (repl_xdg_path(noted, len, "XDG_STATE_HOME", ".local/state", "kvchat/exposure-noted",
	    err, sizeof err) != 0 || repl_private_dir(noted, err, sizeof err) != 0) {
		noted[0] = '\0';
		return false;
	}
	snprintf(line, sizeof line, "%04o %s\n", mode, dir);
	if ((f = fopen(noted, "r")) != NULL) {
		char row[4200];

		while (!seen && fgets(row, sizeof row, f) != NULL)
			seen = strcmp(row, line) == 0;
		if (!seen && fseek(f, 0, SEEK_END) == 0 && ftell(f) > 0 && ftell(f) < (1 << 20)) {
			n = (size_t)ftell(f);
			rewind(f);
			if ((all = malloc(n + strlen(line) + 1)) != NULL &&
			    fread(all, 1, n, f) != n) {
				free(all);
				all = NULL;
			}
		}
		fclose(f);
	}
	if (seen)
		return true;
	if (all == NULL && n == 0)
		all = malloc(strlen(line) + 1);
	if (all != NULL) {
		memcpy(all + n, line, strlen(line) + 1);
		(void)kvc_file_replace(noted, all, n + strlen(line), err, sizeof err);
		free(all);
	}
	return false;
}

void
repl_warn_exposed(struct kvc_repl *r, const char *db_path)
{
	static const char *const companions[] = { "-wal", "-shm", NULL };
	char msg[8192], line[12600], dir[4096], noted[4096] = "", side[4200];
	bool files = file_exposed(db_path);
	struct stat sb;

	if (!kvc_file_exposed(db_path, companions, msg, sizeof msg))
		return;
	for (int i = 0; companions[i] != NULL && !files; i++) {
		snprintf(side, sizeof side, "%s%s", db_path, companions[i]);
		files = file_exposed(side);
	}
	/* Only the folder: once per folder and mode. A readable file, always. */
	if (!files && kvc_dir_of(db_path, dir, sizeof dir) == KVC_OK && stat(dir, &sb) == 0) {
		if (noted_before(dir, (unsigned)(sb.st_mode & 07777), noted, sizeof noted))
			return;
		if (noted[0] != '\0') {
			snprintf(line, sizeof line, "warning: %s (said once for this folder and "
			    "mode; kvchat remembers it in %s)", msg, noted);
			repl_notice(r, line);
			return;
		}
	}
	snprintf(line, sizeof line, "warning: %s", msg);
	repl_notice(r, line);
}
