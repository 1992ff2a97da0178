/*
 * test_store_reasoning.c: a reply's reasoning in its own column (schema
 * version 5): a database as version 4 left it opens, migrates and keeps
 * its messages (reasoning NULL); a reply stored with reasoning reads back
 * with it, one without it reads back NULL, and the column survives
 * reopening and a salvage (sess_recover).
 */
#include "core/kvc.h"
#include "sessions/store.h"
#include "sessions/store_int.h"
#include "test.h"
#include "test_sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char errbuf[512];
#define ERR errbuf, sizeof errbuf

int
main(void)
{
	char dir[] = "/tmp/kvchat-reason.XXXXXX", db[256], sql[4096];
	struct sess_store *st;
	struct sess_msg *v = NULL;
	int32_t ids[3] = { 7, 8, 9 };
	struct sess_msg turn[2];
	int n = 0, ret, k;

	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(db, sizeof db, "%s/v4.db", dir);
	/* Version 4: the store's own migration steps up to it, one row each. */
	test_cond(SESS_SCHEMA_VERSION == 5 && sess_n_migrations == 5, "this build writes version 5");
	for (k = 0; k < 4; k++)
		test_cond(test_sql_exec(db, 0, sess_migrations[k]) == SQLITE_OK, "step %d", k);
	snprintf(sql, sizeof sql, "INSERT INTO conversations (id, title, model_fp, template, "
	    "settings, created, updated, touched) VALUES (1, 'old', 'fp', 'chatml', '', 1, 1, 1);"
	    "INSERT INTO messages (conv_id, seq, role, text, tokens, created) VALUES "
	    "(1, 0, 1, 'hi', x'01000000', 1), (1, 1, 2, '<think>x</think>yes', x'02000000', 1);"
	    "PRAGMA user_version = 4; PRAGMA application_id = 1802920753;");
	test_cond(test_sql_exec(db, 0, sql) == SQLITE_OK, "version 4 rows");

	ret = sess_open(&st, db, ERR);
	test_cond(ret == 0, "open version 4: %s", errbuf);
	if (ret != 0)
		return test_done();
	test_cond(test_sql_int(db, SQLITE_OPEN_READONLY, "PRAGMA user_version") == 5, "migrated");
	ret = sess_msgs_load(st, 1, &v, &n, ERR);
	test_cond(ret == 0 && n == 2 && v[1].reasoning == NULL &&
	    strcmp(v[1].text, "<think>x</think>yes") == 0 && v[1].n_ids == 1 && v[1].ids[0] == 2,
	    "old reply as it was, no reasoning: %d %s", ret, errbuf);
	sess_msgs_free(v, n);

	memset(turn, 0, sizeof turn);
	turn[0].role = SESS_USER;
	turn[0].text = (char *)"why?";
	turn[0].ids = ids;
	turn[0].n_ids = 1;
	turn[1].role = SESS_ASSISTANT;
	turn[1].text = (char *)"Because.";
	turn[1].reasoning = (char *)"The user asks why.\nSay because.";
	turn[1].ids = ids;
	turn[1].n_ids = 3;
	ret = sess_turn_commit(st, 1, turn, 2, NULL, ERR);
	test_cond(ret == 0, "commit with reasoning: %s", errbuf);
	sess_close(st);

	ret = sess_open(&st, db, ERR);
	test_cond(ret == 0, "reopen: %s", errbuf);
	if (ret != 0)
		return test_done();
	ret = sess_msgs_load(st, 1, &v, &n, ERR);
	test_cond(ret == 0 && n == 4, "four messages: %d", n);
	if (ret == 0 && n == 4) {
		test_cond(v[2].reasoning == NULL, "a user message has none");
		test_cond(v[3].reasoning && strcmp(v[3].reasoning, turn[1].reasoning) == 0 &&
		    strcmp(v[3].text, "Because.") == 0 && v[3].n_ids == 3, "reasoning and answer apart");
	}
	sess_msgs_free(v, n);
	test_cond(test_sql_int(db, SQLITE_OPEN_READONLY, "SELECT count(*) FROM messages WHERE "
	    "reasoning IS NOT NULL") == 1, "one row has reasoning");
	test_cond(sess_check(st, ERR) == 0, "integrity: %s", errbuf);
	sess_close(st);

	/* A salvage keeps it. */
	struct sess_recover_stats rs;
	char out[300];

	snprintf(out, sizeof out, "%s/recovered.db", dir);
	ret = sess_recover(db, out, &rs, ERR);
	test_cond(ret == 0 && rs.msgs == 4, "recover: %d messages: %s", rs.msgs, errbuf);
	test_cond(test_sql_int(out, SQLITE_OPEN_READONLY, "SELECT count(*) FROM messages WHERE "
	    "reasoning = 'The user asks why.' || char(10) || 'Say because.'") == 1,
	    "the recovered file keeps the reasoning");
	snprintf(sql, sizeof sql, "rm -rf '%s'", dir);
	if (system(sql) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return test_done();
}
