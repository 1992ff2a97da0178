/*
 * test_stats_json: the --stats-json record of a turn (issue 13, "TTFT of an
 * interrupted turn is reported as such, never 0"). A reply stopped by
 * Ctrl-C before its first token has no time to first token: ttft_ms is
 * null, interrupted true and stop "interrupted"; every record says why the
 * reply stopped, as the stats line does, "eos" when the model ended it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "cli/repl/repl.h"

/* The record of s as a string (static buffer). */
static const char *
record(const struct conv_stats *s, const char *stop)
{
	static char out[4096];
	struct kvc_buf b = {0};
	struct repl_kv_facts kv = { "f16", 4096, 8192 };
	int rc = repl_stats_record(&b, 3, 7, "a \"title\"", s, stop, &kv);

	snprintf(out, sizeof out, "%s", rc == 0 && b.p ? b.p : "(failed)");
	kvc_buf_free(&b);
	return out;
}

int
main(void)
{
	struct conv_stats s;
	const char *r;

	/* Stopped after the prefill, before the first token. */
	memset(&s, 0, sizeof s);
	s.prompt_tokens = 40;
	s.prefill_tokens = 40;
	s.interrupted = true;
	r = record(&s, "interrupted");
	test_cond(strstr(r, "\"ttft_ms\":null") != NULL, "no first token, ttft null: %s", r);
	test_cond(strstr(r, "\"ttft_ms\":0") == NULL, "never a ttft of 0: %s", r);
	test_cond(strstr(r, "\"interrupted\":true") != NULL, "interrupted kept: %s", r);
	/* memory per position (windowed layers bounded) and snapshot rows per position apart */
	test_cond(strstr(r, "\"kv_bytes_per_pos\":4096,\"snapshot_bytes_per_pos\":8192") != NULL,
	    "kv bytes, memory and snapshot: %s", r);
	test_cond(strstr(r, "\"stop\":\"interrupted\"") != NULL, "stop reason: %s", r);
	test_cond(strstr(r, "\"gen_tokens\":0") != NULL, "no tokens: %s", r);

	/* Stopped after some tokens: the time to the first one stands. */
	s.gen_tokens = 5;
	s.ttft_ms = 12.5;
	r = record(&s, "interrupted");
	test_cond(strstr(r, "\"ttft_ms\":12.5,") != NULL, "ttft of a started reply: %s", r);

	/* The model ended its turn (no reason from the stats line): eos. */
	s.interrupted = false;
	r = record(&s, NULL);
	test_cond(strstr(r, "\"stop\":\"eos\"") != NULL, "stop eos: %s", r);
	test_cond(strstr(r, "\"interrupted\":false") != NULL, "not interrupted: %s", r);
	r = record(&s, "max tokens");
	test_cond(strstr(r, "\"stop\":\"max tokens\"") != NULL, "stop max tokens: %s", r);
	r = record(&s, "context full");
	test_cond(strstr(r, "\"stop\":\"context full\"") != NULL, "stop context full: %s", r);

	/* One object on one line; the title escaped. */
	test_cond(r[0] == '{' && strchr(r, '\n') == r + strlen(r) - 1 && r[strlen(r) - 2] == '}',
	    "one object, one line: %s", r);
	test_cond(strstr(r, "\"title\":\"a \\\"title\\\"\"") != NULL, "title escaped: %s", r);
	test_cond(strstr(r, "\"turn\":3,\"conversation_id\":7,") != NULL, "turn and id: %s", r);
	return test_done();
}
