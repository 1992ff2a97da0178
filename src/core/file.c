/*
 * file.c: private files and folders. Conversations (the database, exports,
 * stats, the line history) are written so that other local users can
 * neither read them nor redirect the writes: files 0600, folders 0700,
 * folders that are the user's own, temporary files that cannot be
 * pre-planted, no write through a link someone else could have made.
 * docs/SECURITY.md states the rules these functions implement.
 */
#include "kvc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int
kvc_home_dir(char *buf, size_t len, char *err, size_t errlen)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	/* A relative or empty $HOME would put the data under whatever the
	 * current folder is; the password database names the real one. */
	if (h == NULL || h[0] != '/') {
		pw = getpwuid(geteuid());
		h = pw != NULL ? pw->pw_dir : NULL;
		if (h == NULL || h[0] != '/') {
			kvc_err(err, errlen, "no home folder: $HOME is not an absolute path and "
			    "the password database has none for uid %ld", (long)geteuid());
			return KVC_ENOTFOUND;
		}
	}
	if ((size_t)snprintf(buf, len, "%s", h) >= len) {
		kvc_err(err, errlen, "home folder path too long: %s", h);
		return KVC_ERANGE;
	}
	return KVC_OK;
}

int
kvc_dir_of(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');
	size_t n;

	if (slash == NULL)
		return (size_t)snprintf(buf, len, ".") >= len ? KVC_ERANGE : KVC_OK;
	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= len)
		return KVC_ERANGE;
	memcpy(buf, path, n);
	buf[n] = '\0';
	return KVC_OK;
}

/* Whether gid is the user's private group (user-private-group systems make
 * folders group-writable with umask 002; that group holds the user only). */
static bool
private_group(gid_t gid)
{
	struct passwd *pw = getpwuid(geteuid());
	struct group *gr;

	if (pw == NULL || pw->pw_gid != gid || (gr = getgrgid(gid)) == NULL)
		return false;
	if (gr->gr_name == NULL || strcmp(gr->gr_name, pw->pw_name) != 0)
		return false;
	for (char **m = gr->gr_mem; m != NULL && *m != NULL; m++)
		if (strcmp(*m, pw->pw_name) != 0)
			return false;
	return true;
}

static bool
others_can_write(const struct stat *st)
{
	return (st->st_mode & S_IWOTH) || ((st->st_mode & S_IWGRP) && !private_group(st->st_gid));
}

/* The checks on one folder of real (a resolved path); top is the folder
 * that will hold the files, the others are above it. */
static int
check_one(const char *dir, const char *top, bool is_top, char *err, size_t errlen)
{
	struct stat st;
	uid_t me = geteuid();

	if (lstat(dir, &st) != 0) {
		kvc_err(err, errlen, "%s: %s", dir, strerror(errno));
		return KVC_EIO;
	}
	if (!S_ISDIR(st.st_mode)) {
		kvc_err(err, errlen, "%s: not a folder", dir);
		return KVC_EINVAL;
	}
	if (is_top) {
		/* Root's folders are fine: root is out of reach of any file mode, and
		 * a database there may be opened read-only by its other users. */
		if (st.st_uid != me && st.st_uid != 0) {
			kvc_err(err, errlen, "%s: refusing a folder owned by uid %ld (you are uid "
			    "%ld): its owner could read or replace the files", dir,
			    (long)st.st_uid, (long)me);
			return KVC_EINVAL;
		}
		if (others_can_write(&st)) {
			kvc_err(err, errlen, "%s: refusing a folder others can write (mode %04o): "
			    "chmod 700 %s, or choose another folder", dir,
			    (unsigned)(st.st_mode & 07777), dir);
			return KVC_EINVAL;
		}
		return KVC_OK;
	}
	if (st.st_uid != me && st.st_uid != 0) {
		kvc_err(err, errlen, "%s: refusing it: %s, on its path, is owned by uid %ld "
		    "(you are uid %ld), who could replace it", top, dir, (long)st.st_uid,
		    (long)me);
		return KVC_EINVAL;
	}
	/* A sticky folder (/tmp) lets others add entries but not rename ours. */
	if (others_can_write(&st) && !(st.st_mode & S_ISVTX)) {
		kvc_err(err, errlen, "%s: refusing it: %s, on its path, can be written by "
		    "others (mode %04o) and is not sticky, so it could be replaced", top, dir,
		    (unsigned)(st.st_mode & 07777));
		return KVC_EINVAL;
	}
	return KVC_OK;
}

int
kvc_dir_check(const char *dir, char *err, size_t errlen)
{
	char *real = realpath(dir, NULL);
	int ret;

	if (real == NULL) {
		kvc_err(err, errlen, "%s: %s", dir, strerror(errno));
		return errno == ENOENT ? KVC_ENOTFOUND : KVC_EIO;
	}
	ret = check_one(real, real, true, err, errlen);
	/* Every folder above, from the top one down to "/". */
	for (char *p = strrchr(real, '/'); ret == KVC_OK && p != NULL; p = strrchr(real, '/')) {
		char keep = p[1];

		if (p == real) {
			p[1] = '\0';	/* "/" itself */
			ret = check_one(real, dir, false, err, errlen);
			p[1] = keep;
			break;
		}
		*p = '\0';
		ret = check_one(real, dir, false, err, errlen);
	}
	free(real);
	return ret;
}

/* mkdir one folder 0700 exactly; an existing one is fine (checked later). */
static int
mkdir_private(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, KVC_DIR_MODE) != 0) {
		if (errno == EEXIST)
			return KVC_OK;
		kvc_err(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
		return KVC_EIO;
	}
	/* The umask may have taken bits away; put them back. (By path: under
	 * umask 0777 the new folder cannot even be opened. Were it swapped in
	 * between, the check that follows refuses the path.) */
	if (chmod(dir, KVC_DIR_MODE) != 0) {
		kvc_err(err, errlen, "cannot set the mode of folder %s: %s", dir, strerror(errno));
		return KVC_EIO;
	}
	return KVC_OK;
}

int
kvc_mkdirs_private(const char *dir, char *err, size_t errlen)
{
	char *buf = strdup(dir);
	int ret = KVC_OK;

	if (buf == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	for (char *p = buf + 1; ret == KVC_OK && *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		ret = mkdir_private(buf, err, errlen);
		*p = '/';
	}
	if (ret == KVC_OK && buf[0] != '\0')
		ret = mkdir_private(buf, err, errlen);
	free(buf);
	return ret == KVC_OK ? kvc_dir_check(dir, err, errlen) : ret;
}

int
kvc_file_create_private(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, KVC_FILE_MODE);

	if (fd < 0) {
		if (errno == EEXIST)
			return 0;
		kvc_err(err, errlen, "cannot create %s: %s", path, strerror(errno));
		return KVC_EIO;
	}
	if (fchmod(fd, KVC_FILE_MODE) != 0) {
		kvc_err(err, errlen, "cannot set the mode of %s: %s", path, strerror(errno));
		close(fd);
		(void)unlink(path);
		return KVC_EIO;
	}
	close(fd);
	return 1;
}

/* fd of path's folder (O_DIRECTORY) and a pointer to its last component. */
static int
open_parent(const char *path, const char **base, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd;

	*base = slash ? slash + 1 : path;
	if (kvc_dir_of(path, dir, sizeof dir) != KVC_OK) {
		kvc_err(err, errlen, "%s: path too long", path);
		return KVC_ERANGE;
	}
	if (**base == '\0') {
		kvc_err(err, errlen, "%s: is a folder, not a file", path);
		return KVC_EINVAL;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		kvc_err(err, errlen, "%s: cannot open its folder: %s", path, strerror(errno));
		return KVC_EIO;
	}
	return fd;
}

int
kvc_file_open_write(const char *path, bool append, char *err, size_t errlen)
{
	struct stat dst, st;
	const char *base;
	int dfd, fd = -1, flags, ret = KVC_EIO;
	bool shared, created = false;

	if ((dfd = open_parent(path, &base, err, errlen)) < 0)
		return dfd;
	if (fstat(dfd, &dst) != 0) {
		kvc_err(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	/* Someone else can put entries in this folder: a link or a file there
	 * may be theirs. The decision and the open use the same folder (dfd). */
	shared = others_can_write(&dst) || (dst.st_uid != geteuid() && dst.st_uid != 0);
	flags = O_WRONLY | O_CLOEXEC | O_NOCTTY | (append ? O_APPEND : 0) |
	    (shared ? O_NOFOLLOW : 0);
	/* Create it (then it is ours and 0600) or open what is there; loop in
	 * case it disappears in between. */
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		fd = openat(dfd, base, flags | O_CREAT | O_EXCL | O_NOFOLLOW, KVC_FILE_MODE);
		if (fd >= 0) {
			created = true;
			break;
		}
		if (errno != EEXIST)
			break;
		fd = openat(dfd, base, flags);
		if (fd < 0 && errno != ENOENT)
			break;
	}
	if (fd < 0) {
		if (shared && errno == ELOOP)
			kvc_err(err, errlen, "%s: is a link in a folder others can write; "
			    "not writing through it", path);
		else
			kvc_err(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) != 0) {
		kvc_err(err, errlen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (created && fchmod(fd, KVC_FILE_MODE) != 0) {
		kvc_err(err, errlen, "cannot set the mode of %s: %s", path, strerror(errno));
		goto fail;
	}
	/* A second hard link could be one planted to another of the user's files. */
	if (shared && !created && (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    st.st_nlink != 1)) {
		kvc_err(err, errlen, "%s: is not your own file (or has other links), in a "
		    "folder others can write; not writing to it", path);
		ret = KVC_EINVAL;
		goto fail;
	}
	if (!append && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) {
		kvc_err(err, errlen, "%s: cannot truncate: %s", path, strerror(errno));
		goto fail;
	}
	close(dfd);
	return fd;
fail:
	close(fd);
out:
	close(dfd);
	return ret;
}

int
kvc_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t w = write(fd, c, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return KVC_EIO;
		c += w;
		n -= (size_t)w;
	}
	return KVC_OK;
}

int
kvc_file_tmp_beside(const char *path, unsigned mode, char **tmp, char *err, size_t errlen)
{
	size_t len = strlen(path) + sizeof ".XXXXXX";
	int fd;

	if ((*tmp = malloc(len)) == NULL) {
		kvc_err(err, errlen, "%s: out of memory", path);
		return KVC_ENOMEM;
	}
	snprintf(*tmp, len, "%s.XXXXXX", path);
	if ((fd = mkostemp(*tmp, O_CLOEXEC)) < 0) {
		kvc_err(err, errlen, "%s: cannot create a temporary file beside it: %s", path,
		    strerror(errno));
		free(*tmp);
		*tmp = NULL;
		return KVC_EIO;
	}
	/* mkostemp's 0600 is cut by the umask like any mode: set it exactly. */
	if (fchmod(fd, (mode_t)mode) != 0) {
		kvc_err(err, errlen, "cannot set the mode of %s: %s", *tmp, strerror(errno));
		close(fd);
		(void)unlink(*tmp);
		free(*tmp);
		*tmp = NULL;
		return KVC_EIO;
	}
	return fd;
}

int
kvc_file_replace(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
	char *tmp, dir[PATH_MAX];
	int fd, dfd;

	if ((fd = kvc_file_tmp_beside(path, KVC_FILE_MODE, &tmp, err, errlen)) < 0)
		return fd;
	if (kvc_write_all(fd, data, n) != KVC_OK || fsync(fd) != 0) {
		kvc_err(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
		goto fail;
	}
	if (close(fd) != 0) {
		fd = -1;
		kvc_err(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
		goto fail;
	}
	fd = -1;
	/* rename replaces a link at path itself, never what it points to. */
	if (rename(tmp, path) != 0) {
		kvc_err(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
		goto fail;
	}
	free(tmp);
	/* The rename is durable once the folder is synced. */
	if (kvc_dir_of(path, dir, sizeof dir) == KVC_OK &&
	    (dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	return KVC_OK;
fail:
	if (fd >= 0)
		close(fd);
	(void)unlink(tmp);
	free(tmp);
	return KVC_EIO;
}

/* Appends s to b as one shell word (single-quoted when it needs quoting). */
static void
shell_word(struct kvc_buf *b, const char *s)
{
	if (s[strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789/._-+,:@%")] == '\0') {
		(void)kvc_buf_printf(b, " %s", s);
		return;
	}
	(void)kvc_buf_append(b, " '", 2);
	for (; *s; s++)
		(void)(*s == '\'' ? kvc_buf_append(b, "'\\''", 4) : kvc_buf_append(b, s, 1));
	(void)kvc_buf_append(b, "'", 1);
}

/* Adds path to the list and to the chmod words when group or others may
 * read or write it. */
static void
exposed_one(const char *path, struct kvc_buf *list, struct kvc_buf *fix, bool *any)
{
	struct stat st;

	if (stat(path, &st) != 0 || !(st.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)))
		return;
	/* The list is shared by the files and the folder: a separator after any entry. */
	(void)kvc_buf_printf(list, "%s%s (mode %04o)", list->n > 0 ? ", " : "", path,
	    (unsigned)(st.st_mode & 07777));
	shell_word(fix, path);
	*any = true;
}

bool
kvc_file_exposed(const char *path, const char *const *suffixes, char *msg, size_t len)
{
	struct kvc_buf list = {0}, files = {0}, folder = {0}, name = {0};
	char dir[PATH_MAX];
	bool any = false, dir_any = false;

	exposed_one(path, &list, &files, &any);
	for (size_t i = 0; suffixes != NULL && suffixes[i] != NULL; i++) {
		name.n = 0;
		if (kvc_buf_printf(&name, "%s%s", path, suffixes[i]) == KVC_OK)
			exposed_one(name.p, &list, &files, &any);
	}
	if (kvc_dir_of(path, dir, sizeof dir) == KVC_OK)
		exposed_one(dir, &list, &folder, &dir_any);
	if (any || dir_any)
		snprintf(msg, len, "others can read %s; to fix it: %s%s%s%s%s",
		    list.p ? list.p : "", dir_any ? "chmod 700" : "",
		    dir_any ? folder.p : "", dir_any && any ? " && " : "",
		    any ? "chmod 600" : "", any ? files.p : "");
	kvc_buf_free(&list);
	kvc_buf_free(&files);
	kvc_buf_free(&folder);
	kvc_buf_free(&name);
	return any || dir_any;
}
