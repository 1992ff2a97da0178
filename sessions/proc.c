/*
 * proc.c: facts about other processes, read from /proc, that the store
 * needs to name or judge a lock holder: a process's start time and state,
 * the program it runs, and which process holds a POSIX byte-range lock on a
 * file (/proc/locks). The bottom of the module: it calls no other file of
 * it and touches no database.
 *
 * Everything here is best effort: on a system without /proc the answers
 * are "unknown" (-1, ""), and callers treat unknown as "cannot check".
 */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

void
sess_proc_read_line(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (f == NULL)
		return;
	if (fgets(buf, (int)n, f) == NULL)
		buf[0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

int
sess_proc_stat(int64_t pid, int64_t *start, bool *zombie)
{
	char path[64], buf[1024], *p, *tok, *save = NULL;
	size_t n;
	FILE *f;
	int field;

	snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The command name may hold spaces and parentheses: skip to the last ')'. */
	p = strrchr(buf, ')');
	if (p == NULL)
		return -1;
	for (field = 3, tok = strtok_r(p + 1, " ", &save); tok;
	    field++, tok = strtok_r(NULL, " ", &save)) {
		if (field == 3)
			*zombie = tok[0] == 'Z' || tok[0] == 'X';
		if (field == 22) {
			*start = strtoll(tok, NULL, 10);
			return 0;
		}
	}
	return -1;
}

void
sess_proc_program(int64_t pid, char *buf, size_t n)
{
	char path[64];

	snprintf(path, sizeof path, "/proc/%lld/comm", (long long)pid);
	sess_proc_read_line(path, buf, n);
}

/*
 * One line of /proc/locks, e.g.
 *   "3: POSIX  ADVISORY  WRITE 4242 fe:01:1234567 120 120"
 * (waiters are listed as "3: -> POSIX ..." and are skipped). The device is
 * major:minor in hex, the range inclusive, "EOF" for an open end.
 */
static bool
lock_line_holds(const char *line, dev_t dev, ino_t ino, int64_t byte, int64_t *pid)
{
	char kind[16], type[16], mode[16], start_s[32], end_s[32];
	unsigned maj, min;
	unsigned long long inode;
	long long p, start, end;

	if (strstr(line, "->") != NULL)
		return false;
	if (sscanf(line, "%*[^:]: %15s %15s %15s %lld %x:%x:%llu %31s %31s", kind, mode, type,
	    &p, &maj, &min, &inode, start_s, end_s) != 9)
		return false;
	if (strcmp(kind, "POSIX") != 0 && strcmp(kind, "OFDLCK") != 0)
		return false;
	if (strcmp(type, "WRITE") != 0 || maj != major(dev) || min != minor(dev) ||
	    inode != (unsigned long long)ino)
		return false;
	start = strtoll(start_s, NULL, 10);
	end = strcmp(end_s, "EOF") == 0 ? INT64_MAX : strtoll(end_s, NULL, 10);
	if (byte < start || byte > end)
		return false;
	*pid = p;
	return true;
}

int64_t
sess_proc_lock_holder(const char *file, int64_t byte)
{
	struct stat sb;
	char line[512];
	int64_t pid = -1, me = (int64_t)getpid();
	FILE *f;

	if (stat(file, &sb) != 0)
		return -1;
	f = fopen("/proc/locks", "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL) {
		int64_t p;

		/* An OFD lock shows pid -1; our own locks are never the answer. */
		if (lock_line_holds(line, sb.st_dev, sb.st_ino, byte, &p) && p > 0 && p != me) {
			pid = p;
			break;
		}
	}
	fclose(f);
	return pid;
}
