/*
 * lock.c: a conversation open in one kvchat process is refused in another.
 * A row in `locks` names the holder (pid, host, boot id, process start
 * time); a holder that no longer runs is taken over, so a crash never leaves
 * a conversation locked for good.
 *
 * A holder on another host cannot be checked from here and is taken to be
 * alive; SESS_OPEN_FORCE_UNLOCK (--force-unlock) takes such a lock over. A
 * holder this machine sees running is never taken over, forced or not.
 *
 * sess_close lives here rather than beside sess_open in db.c: closing first
 * gives back the locks this handle took, and db.c, below this file, knows
 * nothing of locks. Only db.c and proc.c are called from here.
 */
#include "store_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct holder {
	int64_t pid;
	char host[256];
	char boot_id[64];	/* /proc/sys/kernel/random/boot_id, "" if unknown */
	int64_t start_time;	/* /proc/PID/stat field 22, clock ticks; 0 if unknown */
	char program[64];	/* /proc/PID/comm; "" if unknown */
	int64_t acquired;
};

static void
self_holder(struct holder *h)
{
	bool zombie;

	memset(h, 0, sizeof *h);
	h->pid = (int64_t)getpid();
	if (gethostname(h->host, sizeof h->host - 1) != 0)
		strcpy(h->host, "localhost");
	sess_proc_read_line("/proc/sys/kernel/random/boot_id", h->boot_id, sizeof h->boot_id);
	if (sess_proc_stat(h->pid, &h->start_time, &zombie) != 0)
		h->start_time = 0;
	sess_proc_program(h->pid, h->program, sizeof h->program);
}

static bool
same_holder(const struct holder *a, const struct holder *b)
{
	return a->pid == b->pid && strcmp(a->host, b->host) == 0 &&
	    strcmp(a->boot_id, b->boot_id) == 0 && a->start_time == b->start_time;
}

/* What is known of the process that wrote lock row h. */
enum liveness { HOLDER_GONE, HOLDER_RUNS, HOLDER_UNKNOWN };

static enum liveness
holder_alive(const struct holder *me, const struct holder *h)
{
	char prog[64];
	int64_t start;
	bool zombie = false;

	/* Another machine's processes cannot be checked from here. */
	if (strcmp(h->host, me->host) != 0)
		return HOLDER_UNKNOWN;
	if (h->boot_id[0] && me->boot_id[0] && strcmp(h->boot_id, me->boot_id) != 0)
		return HOLDER_GONE;	/* written before a reboot */
	if (h->pid <= 0 || (kill((pid_t)h->pid, 0) != 0 && errno == ESRCH))
		return HOLDER_GONE;
	if (sess_proc_stat(h->pid, &start, &zombie) != 0)
		return HOLDER_RUNS;	/* no /proc: a live pid is all we know */
	if (zombie)
		return HOLDER_GONE;
	if (h->start_time != 0)
		return start == h->start_time ? HOLDER_RUNS : HOLDER_GONE;
	/*
	 * The writer could not read its own start time, so a live pid is either
	 * the holder or a later process that got the same pid. Taking a live
	 * holder's lock would let two processes write one conversation, so only
	 * clear evidence counts: the pid now runs another program than the one
	 * that wrote the row (the row's program, or ours for a row from before
	 * version 3 named it). kvchat never exec()s, so a holder cannot have
	 * changed program itself. The same program name proves nothing either
	 * way; then the lock stands (--force-unlock does not touch it either).
	 */
	sess_proc_program(h->pid, prog, sizeof prog);
	if (prog[0] && strcmp(prog, h->program[0] ? h->program : me->program) != 0)
		return HOLDER_GONE;
	return HOLDER_RUNS;
}

/* The current holder of conv, if any: 1 found, 0 none, <0 error. */
static int
read_holder(struct sess_store *st, int64_t conv, struct holder *h, const char *what,
    char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc, ret;

	memset(h, 0, sizeof *h);
	ret = sess_prepare(st, &s, "SELECT pid, host, boot_id, start_time, program, acquired "
	    "FROM locks WHERE conv_id = ?1", what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, conv);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const unsigned char *host = sqlite3_column_text(s, 1);
		const unsigned char *boot = sqlite3_column_text(s, 2);

		h->pid = sqlite3_column_int64(s, 0);
		snprintf(h->host, sizeof h->host, "%s", host ? (const char *)host : "");
		snprintf(h->boot_id, sizeof h->boot_id, "%s", boot ? (const char *)boot : "");
		h->start_time = sqlite3_column_int64(s, 3);
		snprintf(h->program, sizeof h->program, "%s",
		    sqlite3_column_text(s, 4) ? (const char *)sqlite3_column_text(s, 4) : "");
		h->acquired = sqlite3_column_int64(s, 5);
		ret = 1;
	} else if (rc != SQLITE_DONE) {
		ret = sess_db_fail(st, rc, what, err, errlen);
	}
	sqlite3_finalize(s);
	return ret;
}

/* Inside a write transaction: EBUSY if a live other process holds conv. */
static int
check_holder(struct sess_store *st, int64_t conv, const char *title, const struct holder *me,
    char *err, size_t errlen)
{
	struct holder h;
	enum liveness alive;
	char when[32];
	struct tm tm;
	time_t t;
	int ret = read_holder(st, conv, &h, "cannot lock conversation", err, errlen);

	if (ret <= 0)
		return ret;
	if (same_holder(&h, me))
		return KVC_OK;
	alive = holder_alive(me, &h);
	if (alive == HOLDER_GONE ||
	    (alive == HOLDER_UNKNOWN && (st->flags & SESS_OPEN_FORCE_UNLOCK)))
		return KVC_OK;
	t = (time_t)h.acquired;
	localtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
	if (alive == HOLDER_UNKNOWN)
		kvc_err(err, errlen, "conversation '%s' is locked by pid %lld%s%s on host %s "
		    "since %s, which this machine cannot check. If no kvchat runs there any "
		    "more (or the database was copied from there), start with --force-unlock "
		    "to take the lock over", title, (long long)h.pid, h.program[0] ? " " : "",
		    h.program, h.host, when);
	else
		kvc_err(err, errlen, "conversation '%s' is open in another kvchat process "
		    "(pid %lld) since %s", title, (long long)h.pid, when);
	return KVC_EBUSY;
}

int
sess_lock_check(struct sess_store *st, int64_t conv, const char *title,
    char *err, size_t errlen)
{
	struct holder me;

	self_holder(&me);
	return check_holder(st, conv, title, &me, err, errlen);
}

static int
remember(struct sess_store *st, int64_t conv)
{
	int64_t *nv;
	int i;

	for (i = 0; i < st->n_locked; i++)
		if (st->locked[i] == conv)
			return KVC_OK;
	if (st->n_locked == st->cap_locked) {
		int cap = st->cap_locked ? st->cap_locked * 2 : 8;

		nv = realloc(st->locked, (size_t)cap * sizeof *nv);
		if (nv == NULL)
			return KVC_ENOMEM;
		st->locked = nv;
		st->cap_locked = cap;
	}
	st->locked[st->n_locked++] = conv;
	return KVC_OK;
}

int
sess_lock_take(struct sess_store *st, int64_t conv, char *err, size_t errlen)
{
	static const char what[] = "cannot lock conversation";
	struct holder me;
	sqlite3_stmt *s = NULL;
	char *title = NULL;
	int rc, ret;

	self_holder(&me);
	ret = sess_conv_title(st, conv, &title, what, err, errlen);
	if (ret == KVC_OK)
		ret = check_holder(st, conv, title, &me, err, errlen);
	if (ret == KVC_OK)
		ret = sess_prepare(st, &s, "INSERT OR REPLACE INTO locks (conv_id, pid, host, "
		    "boot_id, start_time, acquired, program) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
		    what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, conv);
		sqlite3_bind_int64(s, 2, me.pid);
		sqlite3_bind_text(s, 3, me.host, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, me.boot_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 5, me.start_time);
		sqlite3_bind_int64(s, 6, sess_time());
		sqlite3_bind_text(s, 7, me.program, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE)
			ret = sess_db_fail(st, rc, what, err, errlen);
	}
	sqlite3_finalize(s);
	free(title);
	/* Forgetting only costs the release at sess_close; a dead pid is taken over. */
	if (ret == KVC_OK)
		(void)remember(st, conv);
	return ret;
}

int
sess_conv_lock(struct sess_store *st, int64_t conv, char *err, size_t errlen)
{
	static const char what[] = "cannot lock conversation";
	char *title = NULL;
	int ret;

	/* Read-only: nothing can be written, so nothing needs guarding. */
	if (st->readonly) {
		ret = sess_conv_title(st, conv, &title, what, err, errlen);
		free(title);
		return ret;
	}
	ret = sess_tx_begin(st, what, err, errlen);
	if (ret == KVC_OK)
		ret = sess_lock_take(st, conv, err, errlen);
	return sess_tx_end(st, ret, what, err, errlen);
}

void
sess_conv_unlock(struct sess_store *st, int64_t conv)
{
	struct holder me;
	sqlite3_stmt *s;
	int i;

	for (i = 0; i < st->n_locked; i++) {
		if (st->locked[i] == conv) {
			st->locked[i] = st->locked[--st->n_locked];
			break;
		}
	}
	if (st->readonly)
		return;
	self_holder(&me);
	/* Only our own row: the lock may have been taken over meanwhile. */
	if (sqlite3_prepare_v2(st->db, "DELETE FROM locks WHERE conv_id = ?1 AND pid = ?2 "
	    "AND host = ?3", -1, &s, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_int64(s, 1, conv);
	sqlite3_bind_int64(s, 2, me.pid);
	sqlite3_bind_text(s, 3, me.host, -1, SQLITE_STATIC);
	sqlite3_step(s);
	sqlite3_finalize(s);
}

void
sess_close(struct sess_store *st)
{
	if (st == NULL)
		return;
	while (st->n_locked > 0)
		sess_conv_unlock(st, st->locked[st->n_locked - 1]);
	sess_db_free(st);
}
