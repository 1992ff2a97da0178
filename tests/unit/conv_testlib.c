/* conv_testlib.c: see conv_testlib.h. */
#include "conv_testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
conv_test_mkmodel(const char *out, const char *opts)
{
	char cmd[1024];
	const char *b = getenv("top_builddir");

	snprintf(cmd, sizeof cmd, "'%s/tests/fixtures/mkmodel' -o '%s' --preset tiny --arch qwen2 "
	    "--type f32 %s --quiet >/dev/null", b ? b : ".", out, opts);
	return system(cmd);
}

void
conv_test_notice(void *arg, const char *line)
{
	char *buf = arg;

	strncat(buf, line, CONV_TEST_NOTICES - strlen(buf) - 2);
	strcat(buf, "\n");
}

struct conv_mgr *
conv_test_mgr(struct kvc_engine *e, struct sess_store *st, struct conv_params *p)
{
	struct conv_mgr *m = NULL;
	char err[256];

	p->family = CHAT_CHATML;
	if (conv_mgr_new(&m, e, st, p, err, sizeof err) != 0)
		fprintf(stderr, "conv_mgr_new: %s\n", err);
	return m;
}

int
conv_test_stored_msgs(struct sess_store *st, int64_t id)
{
	struct sess_msg *v;
	int n = -1;

	if (sess_msgs_load(st, id, &v, &n, NULL, 0) != 0)
		return -1;
	sess_msgs_free(v, n);
	return n;
}
