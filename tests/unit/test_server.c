/*
 * test_server.c (issue 24): the server's pieces that need no engine: the
 * constant-time key comparison, a request body read into a job (types,
 * ranges, defaults, the model name, the conversation field), and a stream's
 * text held back while it could be the start of a stop string.
 */
#include <pthread.h>

#include "test.h"
#include "server/srv_int.h"

static struct kvc_server srv;

static struct srv_job *
parse(enum srv_kind kind, const char *body, const char *hdr, int *st, char *err, size_t errlen)
{
	struct srv_job *j = job_new(&srv, kind);

	*st = oai_parse(j, body, strlen(body), hdr, err, errlen);
	return j;
}

/* The status oai_parse gives body (the job freed). */
static int
status_of(enum srv_kind kind, const char *body)
{
	char err[512];
	int st;

	job_unref(parse(kind, body, NULL, &st, err, sizeof err));
	return st;
}

static void
test_keys(void)
{
	test_cond(srv_key_equal("abc12345", 8, "abc12345"), "the same key");
	test_cond(!srv_key_equal("abc12346", 8, "abc12345"), "last byte differs");
	test_cond(!srv_key_equal("abc1234", 7, "abc12345"), "a prefix");
	test_cond(!srv_key_equal("abc123456", 9, "abc12345"), "longer");
	test_cond(!srv_key_equal("", 0, "abc12345"), "empty");
	/* a NUL inside what was given is not the end of it */
	test_cond(!srv_key_equal("abc12345\0x", 10, "abc12345"), "with a NUL and more");
}

static void
test_parse(void)
{
	char err[512] = "";
	struct srv_job *j;
	int st;

	j = parse(SRV_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
	    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
	    "\"text\":\"b\"}]}],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
	    "\"max_completion_tokens\":7,\"temperature\":0,\"top_k\":3,\"seed\":42,"
	    "\"stop\":[\"x\",\"yz\"],\"user\":\"ignored\",\"logit_bias\":{}}", NULL, &st, err, sizeof err);
	test_cond(st == 0, "a full request: %d %s", st, err);
	test_cond(j->n_msgs == 2 && j->msgs[0].role == CHAT_SYSTEM && strcmp(j->msgs[1].text, "ab") == 0,
	    "messages, text parts joined");
	test_cond(j->stream && j->include_usage && j->max_tokens == 7, "stream, usage, max tokens");
	test_cond(j->smp.temp == 0 && j->smp.top_k == 3 && j->smp.seed == 42, "sampler settings");
	test_cond(j->n_stop == 2 && strcmp(j->stop[1], "yz") == 0, "stop strings");
	test_cond(!j->has_conv, "no conversation");
	job_unref(j);

	j = parse(SRV_COMPLETION, "{\"prompt\":[\"p\"]}", NULL, &st, err, sizeof err);
	test_cond(st == 0 && strcmp(j->prompt, "p") == 0, "a one-string prompt array");
	test_cond(j->max_tokens == srv.p.max_tokens && j->smp.temp == srv.p.defaults.smp.temp,
	    "the server's defaults");
	job_unref(j);

	j = parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "12", &st, err,
	    sizeof err);
	test_cond(st == 0 && j->has_conv && j->conv_id == 12, "the conversation header");
	job_unref(j);
	j = parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"conversation\":"
	    "\"new\"}", NULL, &st, err, sizeof err);
	test_cond(st == 0 && j->has_conv && j->conv_id == 0, "a new conversation");
	job_unref(j);

	test_cond(status_of(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
	    "\"model\":\"other\"}") == 404, "another model");
	test_cond(status_of(SRV_CHAT, "{\"messages\":[]}") == 400, "no messages");
	test_cond(status_of(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}")
	    == 400, "a NUL in a message");
	test_cond(status_of(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	    "\"image_url\"}]}]}") == 400, "an image part");
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\",\"temperature\":-1}") == 400,
	    "a negative temperature");
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\",\"min_p\":2}") == 400, "min_p > 1");
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":101}") == 400,
	    "max_tokens over the cap");
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\","
	    "\"e\"]}") == 400, "five stop strings");
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\",\"stop\":\"\"}") == 400,
	    "an empty stop string");
	{
		char body[600];

		snprintf(body, sizeof body, "{\"prompt\":\"x\",\"stop\":\"%0257d\"}", 0);
		test_cond(status_of(SRV_COMPLETION, body) == 400, "a stop string over 256 bytes");
		snprintf(body, sizeof body, "{\"prompt\":\"x\",\"stop\":\"%0256d\"}", 0);
		test_cond(status_of(SRV_COMPLETION, body) == 0, "one of 256 bytes");
	}
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\",\"conversation\":3}") == 400,
	    "a conversation on /v1/completions");
	test_cond(status_of(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
	    "\"conversation\":-3}") == 400, "a negative conversation id");
	test_cond(status_of(SRV_COMPLETION, "{\"prompt\":\"x\"} trailing") == 400, "trailing bytes");
}

/* What a streamed job sent: its content pieces joined. */
static void
sent_text(struct srv_job *j, char *out, size_t len)
{
	const char *p = j->out.p ? j->out.p : "";
	size_t n = 0;

	out[0] = '\0';
	while ((p = strstr(p, "\"text\":\"")) != NULL) {
		p += 8;
		while (*p && *p != '"' && n + 1 < len)
			out[n++] = *p++;
		out[n] = '\0';
	}
}

static void
test_holdback(void)
{
	struct srv_job *j = job_new(&srv, SRV_COMPLETION);
	char got[256];

	j->stream = true;
	j->stop[0] = strdup("STOP");
	j->n_stop = 1;
	(void)kvc_buf_append(&j->text, "hello ST", 8);
	test_cond(job_send_text(j, false) == KVC_OK, "send");
	sent_text(j, got, sizeof got);
	test_cond(strcmp(got, "hello ") == 0, "'ST' held back: '%s'", got);
	(void)kvc_buf_append(&j->text, "ay", 2);
	(void)job_send_text(j, false);
	sent_text(j, got, sizeof got);
	test_cond(strcmp(got, "hello STay") == 0, "released when it is not the stop: '%s'", got);
	(void)kvc_buf_append(&j->text, " S", 2);
	(void)job_send_text(j, true);
	sent_text(j, got, sizeof got);
	test_cond(strcmp(got, "hello STay S") == 0, "all of it at the end: '%s'", got);
	job_unref(j);
}

int
main(void)
{
	srv.p = srv_default_params();
	srv.p.model_id = "m";
	srv.p.max_tokens = 100;
	srv.p.store = (struct sess_store *)&srv;	/* a conversation may be named (never opened here) */
	pthread_mutex_init(&srv.mu, NULL);
	pthread_cond_init(&srv.wake, NULL);
	test_keys();
	test_parse();
	test_holdback();
	return test_done();
}
