/*
 * sub_store.c: the subcommands that work on the conversation database as a
 * whole: `kvchat backup` (a consistent single-file copy, safe while kvchat
 * runs) and `kvchat recover` (salvage what can still be read from a
 * damaged database into a new one).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/repl/repl.h"
#include "sessions/store.h"
#include "sub_common.h"

static const char backup_usage[] =
	"usage: kvchat backup [--db PATH] [--force] FILE\n"
	"  Write a consistent copy of the conversation database to FILE (mode 0600),\n"
	"  one file with no -wal beside it; kvchat may keep running meanwhile.\n"
	"  --db PATH   database to copy (default $XDG_DATA_HOME/kvchat/sessions.db)\n"
	"  --force     replace FILE if it exists (otherwise refused)\n";

static const char recover_usage[] =
	"usage: kvchat recover IN OUT\n"
	"  Copy every conversation, message and snapshot chunk that can still be read\n"
	"  from the damaged database IN into the new database OUT (refused if it\n"
	"  exists). IN is only read. Then use OUT with --db, or move it into place.\n";

int
sub_backup(int argc, char **argv)
{
	const char *db = NULL, *file = NULL;
	struct sess_store *st;
	char err[1024], dbbuf[4096];
	bool force = false;
	int i, rc;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(backup_usage, stdout);
			return 0;
		} else if (strcmp(argv[i], "--force") == 0) {
			force = true;
		} else if (strcmp(argv[i], "--db") == 0) {
			if (++i == argc)
				return sub_usage("backup", backup_usage, "--db needs a path", NULL);
			db = argv[i];
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			return sub_usage("backup", backup_usage, "unknown option", argv[i]);
		} else if (file == NULL) {
			file = argv[i];
		} else {
			return sub_usage("backup", backup_usage, "one FILE only", argv[i]);
		}
	}
	if (file == NULL)
		return sub_usage("backup", backup_usage, "no FILE given", NULL);
	if (db == NULL) {
		if (repl_xdg_path(dbbuf, sizeof dbbuf, "XDG_DATA_HOME", ".local/share",
		    "kvchat/sessions.db", err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: backup: %s\n", err);
			return 1;
		}
		db = dbbuf;
	}
	/* Read-only: a backup never creates, migrates or locks the database. */
	rc = sess_open_ex(&st, db, SESS_OPEN_READONLY, err, sizeof err);
	if (rc == 0) {
		rc = sess_backup(st, file, force, err, sizeof err);
		sess_close(st);
	}
	if (rc != 0) {
		fprintf(stderr, "kvchat: backup: %s\n", err);
		return 1;
	}
	fprintf(stderr, "kvchat: backup: %s written\n", file);
	return 0;
}

int
sub_recover(int argc, char **argv)
{
	struct sess_recover_stats s;
	char err[1024];
	int rc;

	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(recover_usage, stdout);
		return 0;
	}
	if (argc != 3)
		return sub_usage("recover", recover_usage, "IN and OUT needed", NULL);
	rc = sess_recover(argv[1], argv[2], &s, err, sizeof err);
	if (rc != 0) {
		fprintf(stderr, "kvchat: recover: %s\n", err);
		return 1;
	}
	printf("recovered %d conversations, %d messages, %d snapshot rows into %s\n",
	    s.convs, s.msgs, s.chunks, argv[2]);
	if (s.placeholders)
		printf("%d of the conversations had lost their row: their messages are kept under "
		    "the title 'recovered conversation ID'\n", s.placeholders);
	if (s.bad_rows || s.bad_tables)
		printf("lost: %d unreadable rows%s\n", s.bad_rows,
		    s.bad_tables ? ", and at least one table could not be read at all" : "");
	return 0;
}
