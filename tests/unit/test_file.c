/*
 * test_file.c: core's private files and folders (file.c, issue 10): modes
 * whatever the umask, the home folder from the password database, which
 * folders are refused, writes that a planted link or file cannot redirect,
 * atomic replacement through a fresh temporary name, the exposure warning.
 */
#include "core/kvc.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];
static char errbuf[1024];
#define ERR errbuf, sizeof errbuf

static const char *
path_in(const char *name)
{
	return test_path(tmpdir, name);
}

static unsigned
mode_of(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffff;
}

static void
write_text(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	if (f != NULL) {
		fputs(s, f);
		fclose(f);
	}
}

/* The file's contents (up to 255 bytes) in a static buffer. */
static const char *
read_text(const char *path)
{
	static char buf[256];
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f != NULL) {
		n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return f ? buf : "(missing)";
}

static void
test_home(void)
{
	struct passwd *pw = getpwuid(geteuid());
	const char *vals[] = { NULL, "", "relative/home" };
	char buf[4096], small[4];

	setenv("HOME", "/some/where", 1);
	test_cond(kvc_home_dir(buf, sizeof buf, ERR) == 0 && strcmp(buf, "/some/where") == 0,
	    "absolute $HOME is used: %s", buf);
	test_cond(kvc_home_dir(small, sizeof small, ERR) == KVC_ERANGE, "short buffer");
	for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
		if (vals[i] == NULL)
			unsetenv("HOME");
		else
			setenv("HOME", vals[i], 1);
		if (pw == NULL || pw->pw_dir == NULL || pw->pw_dir[0] != '/') {
			test_cond(kvc_home_dir(buf, sizeof buf, ERR) == KVC_ENOTFOUND,
			    "no passwd home: an error, not the current folder");
			continue;
		}
		test_cond(kvc_home_dir(buf, sizeof buf, ERR) == 0 && strcmp(buf, pw->pw_dir) == 0,
		    "$HOME %s: the passwd home %s, got %s", vals[i] ? vals[i] : "unset",
		    pw->pw_dir, buf);
	}
}

static void
test_dir_of(void)
{
	char buf[64];

	test_cond(kvc_dir_of("/a/b/c.db", buf, sizeof buf) == 0 && strcmp(buf, "/a/b") == 0, "%s", buf);
	test_cond(kvc_dir_of("c.db", buf, sizeof buf) == 0 && strcmp(buf, ".") == 0, "%s", buf);
	test_cond(kvc_dir_of("/c.db", buf, sizeof buf) == 0 && strcmp(buf, "/") == 0, "%s", buf);
	test_cond(kvc_dir_of("x/y", buf, sizeof buf) == 0 && strcmp(buf, "x") == 0, "%s", buf);
	test_cond(kvc_dir_of("/aaaaaaaa/b", buf, 4) == KVC_ERANGE, "too long");
}

static void
test_mkdirs(void)
{
	static const mode_t masks[] = { 0, 022, 077, 0777 };
	char name[64];

	for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
		mode_t old = umask(masks[i]);
		int rc;

		snprintf(name, sizeof name, "mk%zu/a/b", i);
		rc = kvc_mkdirs_private(path_in(name), ERR);
		umask(old);
		test_cond(rc == 0, "umask %03o: %s", (unsigned)masks[i], errbuf);
		snprintf(name, sizeof name, "mk%zu", i);
		test_cond(mode_of(path_in(name)) == 0700, "umask %03o: %s is %o", (unsigned)masks[i],
		    name, mode_of(path_in(name)));
		snprintf(name, sizeof name, "mk%zu/a/b", i);
		test_cond(mode_of(path_in(name)) == 0700, "umask %03o: %s is %o", (unsigned)masks[i],
		    name, mode_of(path_in(name)));
	}
	/* An existing folder keeps its mode (it is checked, not changed). */
	mkdir(path_in("keep"), 0700);
	chmod(path_in("keep"), 0750);
	test_cond(kvc_mkdirs_private(path_in("keep"), ERR) == 0, "%s", errbuf);
	test_cond(mode_of(path_in("keep")) == 0750, "mode kept");
	/* And one others can write is refused. */
	mkdir(path_in("ww"), 0700);
	chmod(path_in("ww"), 0777);
	test_cond(kvc_mkdirs_private(path_in("ww/sub"), ERR) == KVC_EINVAL, "world-writable above");
	test_cond(mode_of(path_in("ww/sub")) == 0700, "created before the check");
}

/* As uid 65534: a folder of root's (0755) is accepted, one of another user's
 * is not. Run in a child that drops to that uid; skipped if it cannot. */
static void
test_root_folder_for_others(void)
{
	int status = -1;
	pid_t pid;

	mkdir(path_in("rootdir"), 0755);
	chmod(tmpdir, 0711);
	if ((pid = fork()) == 0) {
		int ok = setgid(65534) == 0 && setuid(65534) == 0 &&
		    kvc_dir_check(path_in("rootdir"), NULL, 0) == 0 &&
		    kvc_dir_check(path_in("theirs"), NULL, 0) == 0;

		_exit(ok ? 0 : 1);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	chmod(tmpdir, 0700);
	test_cond(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "as uid 65534: root's folder and its own are accepted (status %d)", status);
}

static void
test_dir_check(void)
{
	mkdir(path_in("own"), 0700);
	test_cond(kvc_dir_check(path_in("own"), ERR) == 0, "own 0700: %s", errbuf);
	chmod(path_in("own"), 0755);
	test_cond(kvc_dir_check(path_in("own"), ERR) == 0, "own 0755 (readable) is used: %s", errbuf);
	chmod(path_in("own"), 0703);
	test_cond(kvc_dir_check(path_in("own"), ERR) == KVC_EINVAL, "others can write");
	test_cond(strstr(errbuf, "others can write") && strstr(errbuf, path_in("own")),
	    "message names the folder and why: %s", errbuf);
	chmod(path_in("own"), 01777);
	test_cond(kvc_dir_check(path_in("own"), ERR) == KVC_EINVAL, "sticky is no excuse for the folder itself");
	test_cond(kvc_dir_check(path_in("missing"), ERR) == KVC_ENOTFOUND, "missing");
	write_text(path_in("afile"), "x");
	test_cond(kvc_dir_check(path_in("afile"), ERR) == KVC_EINVAL, "a file is not a folder");

	/* Above the folder: world-writable only with the sticky bit. */
	mkdir(path_in("open"), 0700);
	mkdir(path_in("open/mine"), 0700);
	chmod(path_in("open"), 0777);
	test_cond(kvc_dir_check(path_in("open/mine"), ERR) == KVC_EINVAL, "non-sticky 0777 above");
	test_cond(strstr(errbuf, "on its path") != NULL, "%s", errbuf);
	chmod(path_in("open"), 01777);
	test_cond(kvc_dir_check(path_in("open/mine"), ERR) == 0, "sticky 1777 above: %s", errbuf);
	/* A link to a private folder is judged by where it leads. */
	symlink(path_in("open/mine"), path_in("link"));
	test_cond(kvc_dir_check(path_in("link"), ERR) == 0, "link to own folder: %s", errbuf);
	chmod(path_in("open"), 0777);
	test_cond(kvc_dir_check(path_in("link"), ERR) == KVC_EINVAL, "link resolved: %s", errbuf);

	if (geteuid() != 0)
		return;
	/* Root can make folders owned by someone else (uid 65534). */
	mkdir(path_in("theirs"), 0700);
	mkdir(path_in("theirs/mine"), 0700);
	test_cond(chown(path_in("theirs"), 65534, 65534) == 0, "chown");
	test_cond(kvc_dir_check(path_in("theirs"), ERR) == KVC_EINVAL, "owned by another");
	test_cond(strstr(errbuf, "uid 65534") != NULL, "%s", errbuf);
	test_cond(kvc_dir_check(path_in("theirs/mine"), ERR) == KVC_EINVAL,
	    "inside a folder another user owns");
	mkdir(path_in("grp"), 0700);
	test_cond(chown(path_in("grp"), 0, 65534) == 0, "chgrp");
	chmod(path_in("grp"), 0770);
	test_cond(kvc_dir_check(path_in("grp"), ERR) == KVC_EINVAL,
	    "writable by a group that is not the user's own");
	test_root_folder_for_others();
}

static void
test_create_private(void)
{
	mode_t old = umask(0);

	test_cond(kvc_file_create_private(path_in("db"), ERR) == 1, "created: %s", errbuf);
	test_cond(mode_of(path_in("db")) == 0600, "umask 0: 0600, got %o", mode_of(path_in("db")));
	chmod(path_in("db"), 0644);
	test_cond(kvc_file_create_private(path_in("db"), ERR) == 0, "exists");
	test_cond(mode_of(path_in("db")) == 0644, "an existing file is left alone");
	umask(0777);
	test_cond(kvc_file_create_private(path_in("db2"), ERR) == 1, "umask 777: %s", errbuf);
	test_cond(mode_of(path_in("db2")) == 0600, "umask 777: 0600, got %o", mode_of(path_in("db2")));
	umask(old);
	test_cond(kvc_file_create_private(path_in("nodir/db"), ERR) == KVC_EIO, "no folder");
}

/* Writes s through kvc_file_open_write; returns its code. */
static int
open_write(const char *path, bool append, const char *s)
{
	int fd = kvc_file_open_write(path, append, ERR);

	if (fd < 0)
		return fd;
	test_cond(kvc_write_all(fd, s, strlen(s)) == 0, "write");
	close(fd);
	return 0;
}

static void
test_open_write(void)
{
	mode_t old = umask(0);

	test_cond(open_write(path_in("out"), false, "one\n") == 0, "%s", errbuf);
	test_cond(mode_of(path_in("out")) == 0600, "umask 0: 0600, got %o", mode_of(path_in("out")));
	test_cond(open_write(path_in("out"), true, "two\n") == 0, "append: %s", errbuf);
	test_cond(strcmp(read_text(path_in("out")), "one\ntwo\n") == 0, "appended");
	test_cond(open_write(path_in("out"), false, "three\n") == 0, "truncate: %s", errbuf);
	test_cond(strcmp(read_text(path_in("out")), "three\n") == 0, "truncated");
	umask(old);

	/* A folder others can write (sticky, like /tmp) with a planted link. */
	mkdir(path_in("pub"), 0700);
	chmod(path_in("pub"), 01777);
	write_text(path_in("victim"), "precious\n");
	symlink(path_in("victim"), path_in("pub/link"));
	test_cond(open_write(path_in("pub/link"), false, "stolen\n") < 0, "link in a shared folder");
	test_cond(strstr(errbuf, "link") != NULL, "says it is a link: %s", errbuf);
	test_cond(open_write(path_in("pub/link"), true, "stolen\n") < 0, "appending too");
	test_cond(strcmp(read_text(path_in("victim")), "precious\n") == 0, "victim untouched");
	/* The user's own file there is fine; and so is a link in the user's own folder. */
	test_cond(open_write(path_in("pub/mine"), false, "ok\n") == 0, "%s", errbuf);
	test_cond(open_write(path_in("pub/mine"), true, "ok\n") == 0, "%s", errbuf);
	/* A hard link there to another of the user's files: not written. */
	test_cond(link(path_in("victim"), path_in("pub/hard")) == 0, "link");
	test_cond(open_write(path_in("pub/hard"), false, "stolen\n") == KVC_EINVAL, "hard link");
	test_cond(strcmp(read_text(path_in("victim")), "precious\n") == 0, "victim untouched");
	symlink(path_in("victim"), path_in("ownlink"));
	test_cond(open_write(path_in("ownlink"), true, "more\n") == 0, "own link: %s", errbuf);
	test_cond(strcmp(read_text(path_in("victim")), "precious\nmore\n") == 0, "through own link");
	test_cond(open_write(path_in("nodir/x"), false, "x") < 0, "missing folder");

	if (geteuid() != 0)
		return;
	write_text(path_in("pub/theirs"), "theirs\n");
	test_cond(chown(path_in("pub/theirs"), 65534, 65534) == 0, "chown");
	chmod(path_in("pub/theirs"), 0666);
	test_cond(open_write(path_in("pub/theirs"), true, "secret\n") == KVC_EINVAL,
	    "another user's file in a shared folder");
	test_cond(strcmp(read_text(path_in("pub/theirs")), "theirs\n") == 0, "not written");
}

static int
count_entries(const char *dir)
{
	char cmd[600];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
	if ((p = popen(cmd, "r")) != NULL) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

static void
test_replace(void)
{
	char planted[600];
	mode_t old = umask(0);

	mkdir(path_in("st"), 0700);
	test_cond(kvc_file_replace(path_in("st/history"), "a\n", 2, ERR) == 0, "%s", errbuf);
	test_cond(strcmp(read_text(path_in("st/history")), "a\n") == 0, "written");
	test_cond(mode_of(path_in("st/history")) == 0600, "umask 0: 0600, got %o",
	    mode_of(path_in("st/history")));
	umask(old);
	/* The old temporary name, history.PID.tmp, planted as a link: never used. */
	write_text(path_in("victim2"), "precious\n");
	snprintf(planted, sizeof planted, "%s.%ld.tmp", path_in("st/history"), (long)getpid());
	symlink(path_in("victim2"), planted);
	test_cond(kvc_file_replace(path_in("st/history"), "b\n", 2, ERR) == 0, "%s", errbuf);
	test_cond(strcmp(read_text(path_in("victim2")), "precious\n") == 0, "planted link not followed");
	test_cond(strcmp(read_text(path_in("st/history")), "b\n") == 0, "replaced");
	test_cond(count_entries(path_in("st")) == 2, "no temporary file left: %d",
	    count_entries(path_in("st")));
	/* A link at the target itself is replaced, not written through. */
	symlink(path_in("victim2"), path_in("st/target"));
	test_cond(kvc_file_replace(path_in("st/target"), "c\n", 2, ERR) == 0, "%s", errbuf);
	test_cond(strcmp(read_text(path_in("victim2")), "precious\n") == 0, "target link not followed");
	test_cond(mode_of(path_in("st/target")) == 0600, "now a private file");
	test_cond(kvc_file_replace(path_in("nodir/h"), "x", 1, ERR) == KVC_EIO, "missing folder");
}

static void
test_exposed(void)
{
	static const char *const sfx[] = { "-wal", "-shm", NULL };
	char msg[2048], want[700];

	mkdir(path_in("ex"), 0700);
	write_text(path_in("ex/s.db"), "");
	chmod(path_in("ex/s.db"), 0600);
	test_cond(!kvc_file_exposed(path_in("ex/s.db"), sfx, msg, sizeof msg), "private: no warning");
	test_cond(!kvc_file_exposed(path_in("ex/none.db"), sfx, msg, sizeof msg), "missing: none");
	chmod(path_in("ex/s.db"), 0644);
	write_text(path_in("ex/s.db-wal"), "");
	chmod(path_in("ex/s.db-wal"), 0640);
	test_cond(kvc_file_exposed(path_in("ex/s.db"), sfx, msg, sizeof msg), "0644: warned");
	snprintf(want, sizeof want, "chmod 600 %s %s-wal", path_in("ex/s.db"), path_in("ex/s.db"));
	test_cond(strstr(msg, want) != NULL, "names the chmod '%s': %s", want, msg);
	test_cond(strchr(msg, '\n') == NULL, "one line");
	test_cond(mode_of(path_in("ex/s.db")) == 0644, "nothing changed");
	chmod(path_in("ex/s.db"), 0600);
	chmod(path_in("ex/s.db-wal"), 0600);
	chmod(path_in("ex"), 0755);
	test_cond(kvc_file_exposed(path_in("ex/s.db"), sfx, msg, sizeof msg), "folder 0755: warned");
	snprintf(want, sizeof want, "chmod 700 %s", path_in("ex"));
	test_cond(strstr(msg, want) != NULL && strstr(msg, "chmod 600") == NULL, "%s", msg);
	/* File and folder both: the two are separated (issue 26: they ran together). */
	chmod(path_in("ex/s.db"), 0644);
	test_cond(kvc_file_exposed(path_in("ex/s.db"), sfx, msg, sizeof msg), "both: warned");
	snprintf(want, sizeof want, "%s (mode 0644), %s (mode 0755)", path_in("ex/s.db"),
	    path_in("ex"));
	test_cond(strstr(msg, want) != NULL, "both listed apart '%s': %s", want, msg);
	chmod(path_in("ex/s.db"), 0600);
	chmod(path_in("ex"), 0711);
	test_cond(!kvc_file_exposed(path_in("ex/s.db"), sfx, msg, sizeof msg),
	    "a folder others can only pass through: no warning");
	/* A path that needs quoting for the shell. */
	mkdir(path_in("a b"), 0700);
	write_text(path_in("a b/it's.db"), "");
	chmod(path_in("a b/it's.db"), 0604);
	test_cond(kvc_file_exposed(path_in("a b/it's.db"), NULL, msg, sizeof msg), "warned");
	snprintf(want, sizeof want, "chmod 600 '%s/a b/it'\\''s.db'", tmpdir);
	test_cond(strstr(msg, want) != NULL, "quoted '%s': %s", want, msg);
}

int
main(void)
{
	char cmd[700];
	const char *t = getenv("TMPDIR");

	snprintf(tmpdir, sizeof tmpdir, "%s/kvc-file-XXXXXX", t && t[0] == '/' ? t : "/tmp");
	if (mkdtemp(tmpdir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_home();
	test_dir_of();
	test_mkdirs();
	test_dir_check();
	test_create_private();
	test_open_write();
	test_replace();
	test_exposed();
	snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s'; rm -rf '%s'", tmpdir, tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return test_done();
}
