/*
 * busy.c: waiting for another process's write transaction, and naming it.
 * SQLite's own busy timeout waits in silence and then says only "database
 * is locked"; a kvchat stopped (Ctrl-Z, SIGSTOP, a debugger) in the middle
 * of a commit would leave the user guessing for half a minute. Our busy
 * handler says, after about a second, who holds the write lock (the pid
 * from /proc/locks, its program, and from kvchat's lock table the
 * conversation it has open and since when), and the failure at the end of
 * the wait names it again. Above proc.c, below db.c (which installs the
 * handler and words the failure).
 */
#include "store_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Where SQLite's unix VFS takes its locks (see os_unix.c). */
#define SHM_WRITE_LOCK_BYTE 120			/* WAL: the writer's byte of -shm */
#define RESERVED_LOCK_BYTE 0x40000001LL		/* rollback journal: RESERVED */

#define WAIT_ANNOUNCE_MS 1000
#define WAIT_STEP_MS 50

static double
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * From kvchat's lock table, through a connection of its own (the caller's
 * is inside a statement): the conversation pid has open, and since when.
 * pid < 0: the most recent lock of any other process. 1 found, 0 not.
 */
static int
table_holder(struct sess_store *st, int64_t *pid, char *what, size_t n)
{
	char host[256] = "localhost", when[32];
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int found = 0;

	if (gethostname(host, sizeof host - 1) != 0)
		strcpy(host, "localhost");
	if (sqlite3_open_v2(st->path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "SELECT l.pid, c.id, c.title, l.acquired FROM locks l "
	    "JOIN conversations c ON c.id = l.conv_id WHERE (?1 < 0 OR l.pid = ?1) "
	    "AND l.pid != ?2 AND l.host = ?3 ORDER BY l.acquired DESC LIMIT 1",
	    -1, &s, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(s, 1, *pid);
	sqlite3_bind_int64(s, 2, (int64_t)getpid());
	sqlite3_bind_text(s, 3, host, -1, SQLITE_STATIC);
	if (sqlite3_step(s) == SQLITE_ROW) {
		time_t t = (time_t)sqlite3_column_int64(s, 3);
		const unsigned char *title = sqlite3_column_text(s, 2);
		struct tm tm;

		localtime_r(&t, &tm);
		strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
		*pid = sqlite3_column_int64(s, 0);
		snprintf(what, n, "conversation %lld '%s' open since %s",
		    (long long)sqlite3_column_int64(s, 1), title ? (const char *)title : "", when);
		found = 1;
	}
out:
	sqlite3_finalize(s);
	sqlite3_close(db);
	return found;
}

void
sess_busy_describe(struct sess_store *st, char *buf, size_t n)
{
	char file[4200], prog[64] = "", conv[300] = "";
	int64_t pid;
	bool from_table = false;

	snprintf(file, sizeof file, "%s-shm", st->path);
	pid = sess_proc_lock_holder(file, SHM_WRITE_LOCK_BYTE);
	if (pid < 0)
		pid = sess_proc_lock_holder(st->path, RESERVED_LOCK_BYTE);
	if (pid < 0)
		from_table = table_holder(st, &pid, conv, sizeof conv) == 1;
	else
		(void)table_holder(st, &pid, conv, sizeof conv);
	if (pid < 0) {
		snprintf(buf, n, "another process (its pid is not known: /proc/locks does "
		    "not name it and no other kvchat holds a conversation here)");
		return;
	}
	sess_proc_program(pid, prog, sizeof prog);
	snprintf(buf, n, "%spid %lld (%s%s%s)", from_table ? "probably " : "", (long long)pid,
	    prog[0] ? prog : "program unknown", conv[0] ? ", " : "", conv);
}

int
sess_busy_handler(void *arg, int count)
{
	struct sess_store *st = arg;
	double now = mono_ms(), waited;

	if (count == 0) {
		st->wait_t0 = now;
		st->wait_told = false;
	}
	waited = now - st->wait_t0;
	if (waited >= st->wait_limit_ms)
		return 0;
	if (!st->wait_told && waited >= WAIT_ANNOUNCE_MS) {
		st->wait_told = true;
		sess_busy_describe(st, st->busy_who, sizeof st->busy_who);
		if (st->wait_fn) {
			char msg[700];

			snprintf(msg, sizeof msg, "%s: waiting for %s, which is in the middle of "
			    "writing to the database (stopped or slow?); giving up in %.0f s",
			    st->path, st->busy_who, (st->wait_limit_ms - waited) / 1e3);
			st->wait_fn(st->wait_arg, msg);
		}
	}
	sqlite3_sleep(WAIT_STEP_MS);
	return 1;
}
