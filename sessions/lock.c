/*
 * lock.c: a conversation open in one kvchat process is refused in another.
 * A row in `locks` names the holder (pid, host, boot id, process start
 * time); a holder that no longer runs is taken over, so a crash never leaves
 * a conversation locked for good.
 *
 * sess_close lives here rather than beside sess_open in db.c: closing first
 * gives back the locks this handle took, and db.c, below this file, knows
 * nothing of locks. Only db.c is called from here.
 */
#include "store_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct holder {
	int64_t pid;
	char host[256];
	char boot_id[64];	/* /proc/sys/kernel/random/boot_id, "" if unknown */
	int64_t start_time;	/* /proc/PID/stat field 22, clock ticks; 0 if unknown */
};

static void
read_line(const char *path, char *buf, size_t n)
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

/* 0 and the start time / zombie flag of pid from /proc; -1 if unavailable. */
static int
proc_stat(int64_t pid, int64_t *start, bool *zombie)
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

static void
self_holder(struct holder *h)
{
	bool zombie;

	memset(h, 0, sizeof *h);
	h->pid = (int64_t)getpid();
	if (gethostname(h->host, sizeof h->host - 1) != 0)
		strcpy(h->host, "localhost");
	read_line("/proc/sys/kernel/random/boot_id", h->boot_id, sizeof h->boot_id);
	if (proc_stat(h->pid, &h->start_time, &zombie) != 0)
		h->start_time = 0;
}

static bool
same_holder(const struct holder *a, const struct holder *b)
{
	return a->pid == b->pid && strcmp(a->host, b->host) == 0 &&
	    strcmp(a->boot_id, b->boot_id) == 0 && a->start_time == b->start_time;
}

/* Whether the process that wrote lock row h may still run. */
static bool
holder_alive(const struct holder *me, const struct holder *h)
{
	int64_t start;
	bool zombie = false;

	/* Another machine's processes cannot be checked: assume alive. */
	if (strcmp(h->host, me->host) != 0)
		return true;
	if (h->boot_id[0] && me->boot_id[0] && strcmp(h->boot_id, me->boot_id) != 0)
		return false;	/* written before a reboot */
	if (h->pid <= 0 || (kill((pid_t)h->pid, 0) != 0 && errno == ESRCH))
		return false;
	if (proc_stat(h->pid, &start, &zombie) == 0) {
		if (zombie)
			return false;
		if (h->start_time != 0 && start != h->start_time)
			return false;	/* the pid was reused */
	}
	return true;
}

/* The current holder of conv, if any: 1 found, 0 none, <0 error. */
static int
read_holder(struct sess_store *st, int64_t conv, struct holder *h, const char *what,
    char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc, ret;

	memset(h, 0, sizeof *h);
	ret = sess_prepare(st, &s, "SELECT pid, host, boot_id, start_time FROM locks "
	    "WHERE conv_id = ?1", what, err, errlen);
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
	int ret = read_holder(st, conv, &h, "cannot lock conversation", err, errlen);

	if (ret <= 0)
		return ret;
	if (same_holder(&h, me) || !holder_alive(me, &h))
		return KVC_OK;
	if (strcmp(h.host, me->host) != 0)
		kvc_err(err, errlen, "conversation '%s' is open in another kvchat process "
		    "(pid %lld on host %s)", title, (long long)h.pid, h.host);
	else
		kvc_err(err, errlen, "conversation '%s' is open in another kvchat process "
		    "(pid %lld)", title, (long long)h.pid);
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
sess_conv_lock(struct sess_store *st, int64_t conv, char *err, size_t errlen)
{
	static const char what[] = "cannot lock conversation";
	struct holder me;
	sqlite3_stmt *s = NULL;
	char *title = NULL;
	int rc, ret;

	self_holder(&me);
	ret = sess_tx_begin(st, what, err, errlen);
	if (ret == KVC_OK)
		ret = sess_conv_title(st, conv, &title, what, err, errlen);
	if (ret == KVC_OK)
		ret = check_holder(st, conv, title, &me, err, errlen);
	if (ret == KVC_OK)
		ret = sess_prepare(st, &s, "INSERT OR REPLACE INTO locks (conv_id, pid, host, "
		    "boot_id, start_time, acquired) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
		    what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, conv);
		sqlite3_bind_int64(s, 2, me.pid);
		sqlite3_bind_text(s, 3, me.host, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, me.boot_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 5, me.start_time);
		sqlite3_bind_int64(s, 6, sess_time());
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE)
			ret = sess_db_fail(st, rc, what, err, errlen);
	}
	sqlite3_finalize(s);
	free(title);
	ret = sess_tx_end(st, ret, what, err, errlen);
	/* Forgetting only costs the release at sess_close; a dead pid is taken over. */
	if (ret == KVC_OK)
		(void)remember(st, conv);
	return ret;
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
