/*
 * job.c: a request's job between the connection's thread, which waits for
 * its status and sends its output, and the scheduler, which writes that
 * output. Both hold a reference; the last one out frees it. Every shared
 * field is read and written under the server's one mutex, and the job's
 * condition variable wakes the connection.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv_int.h"

void
srv_log(struct kvc_server *s, const char *fmt, ...)
{
	char line[600];
	va_list ap;

	if (s->p.log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	s->p.log(s->p.log_arg, line);
}

struct srv_job *
job_new(struct kvc_server *s, enum srv_kind kind)
{
	struct srv_job *j = calloc(1, sizeof *j);

	if (j == NULL)
		return NULL;
	if (pthread_cond_init(&j->cv, NULL) != 0) {
		free(j);
		return NULL;
	}
	j->srv = s;
	j->kind = kind;
	j->refs = 1;
	j->eog = -1;
	j->created = (long)time(NULL);
	pthread_mutex_lock(&s->mu);
	/* ids need only be unique within the server's life; the time tells runs apart */
	snprintf(j->id, sizeof j->id, "%s-%lx%04lx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
	    (unsigned long)j->created, ++s->n_jobs & 0xffff);
	pthread_mutex_unlock(&s->mu);
	return j;
}

static void
job_free(struct srv_job *j)
{
	for (size_t i = 0; i < j->n_msgs; i++)
		free((char *)j->msgs[i].text);
	free(j->msgs);
	free(j->prompt);
	for (int i = 0; i < j->n_stop; i++)
		free(j->stop[i]);
	kvc_tokens_free(&j->prompt_ids);
	kvc_tokens_free(&j->ids);
	kvc_buf_free(&j->text);
	kvc_buf_free(&j->out);
	if (j->sampler)
		smp_free(j->sampler);
	pthread_cond_destroy(&j->cv);
	free(j);
}

void
job_unref(struct srv_job *j)
{
	struct kvc_server *s = j->srv;
	bool last;

	pthread_mutex_lock(&s->mu);
	last = --j->refs == 0;
	pthread_mutex_unlock(&s->mu);
	if (last)
		job_free(j);
}

int
job_emit(struct srv_job *j, const char *p, size_t n)
{
	int rc;

	pthread_mutex_lock(&j->srv->mu);
	rc = kvc_buf_append(&j->out, p, n);
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->srv->mu);
	return rc;
}

void
job_start(struct srv_job *j, int status)
{
	pthread_mutex_lock(&j->srv->mu);
	j->status = status;
	j->started = true;
	/* a chat stream opens with the role, as OpenAI's does */
	if (j->stream && j->kind == SRV_CHAT)
		(void)oai_event(&j->out, j, "", 0, true, NULL);
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->srv->mu);
}

void
job_done(struct srv_job *j, int status)
{
	pthread_mutex_lock(&j->srv->mu);
	if (!j->started)
		j->status = status;
	j->started = j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->srv->mu);
}

void
job_fail(struct srv_job *j, int status, const char *msg)
{
	struct kvc_buf b = {0};

	pthread_mutex_lock(&j->srv->mu);
	if (j->started && j->stream) {
		/* the 200 is gone: an error event ends the stream */
		if (kvc_buf_append(&b, "data: ", 6) == KVC_OK && oai_error(&b, status, msg) == KVC_OK &&
		    kvc_buf_append(&b, "\n\ndata: [DONE]\n\n", 16) == KVC_OK)
			(void)kvc_buf_append(&j->out, b.p, b.n);
	} else {
		j->out.n = 0;
		j->status = status;
		(void)oai_error(&j->out, status, msg);
	}
	j->started = j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->srv->mu);
	kvc_buf_free(&b);
}

/* Bytes at the end of text[0..n) that could begin one of the job's stop strings. */
static size_t
holdback(const struct srv_job *j, const char *text, size_t n)
{
	const char *const *tmpl = j->kind == SRV_CHAT ? chat_stop_strings(j->srv->p.family) : NULL;
	size_t best = 0;

	for (int pass = 0; pass < 2; pass++) {
		int count = pass == 0 ? j->n_stop : SRV_MAX_STOP * 4;

		for (int i = 0; i < count; i++) {
			const char *s = pass == 0 ? j->stop[i] : tmpl ? tmpl[i] : NULL;
			size_t len;

			if (s == NULL)
				break;
			len = strlen(s);
			for (size_t k = len - 1; k > best; k--)
				if (k <= n && memcmp(text + n - k, s, k) == 0) {
					best = k;
					break;
				}
		}
	}
	return best;
}

int
job_send_text(struct srv_job *j, bool final)
{
	size_t upto = j->text.n;
	int rc = KVC_OK;

	if (!j->stream)
		return KVC_OK;
	if (!final)
		upto -= holdback(j, j->text.p, j->text.n);
	if (upto <= j->sent)
		return KVC_OK;
	pthread_mutex_lock(&j->srv->mu);
	rc = oai_event(&j->out, j, j->text.p + j->sent, upto - j->sent, false, NULL);
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->srv->mu);
	j->sent = upto;
	return rc;
}

void
job_finish_ok(struct srv_job *j)
{
	int rc = job_send_text(j, true);

	pthread_mutex_lock(&j->srv->mu);
	if (j->stream) {
		rc |= oai_event(&j->out, j, NULL, 0, false, j->finish ? j->finish : "stop");
		rc |= oai_stream_end(&j->out, j);
	} else {
		j->out.n = 0;
		rc = oai_body(&j->out, j);
		j->status = 200;
	}
	if (rc != KVC_OK && !j->stream) {
		j->out.n = 0;
		j->status = 500;
		(void)oai_error(&j->out, 500, "out of memory");
	}
	j->started = j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->srv->mu);
}

void
job_cancel(struct srv_job *j)
{
	pthread_mutex_lock(&j->srv->mu);
	j->cancel = 1;
	pthread_cond_broadcast(&j->srv->wake);
	pthread_mutex_unlock(&j->srv->mu);
}

int
job_wait_started(struct srv_job *j)
{
	int st;

	pthread_mutex_lock(&j->srv->mu);
	while (!j->started)
		pthread_cond_wait(&j->cv, &j->srv->mu);
	st = j->status;
	pthread_mutex_unlock(&j->srv->mu);
	return st;
}

bool
job_wait_until(struct srv_job *j, bool done, int ms)
{
	struct timespec ts;
	bool reached;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&j->srv->mu);
	while (!(reached = done ? j->done : j->started))
		if (pthread_cond_timedwait(&j->cv, &j->srv->mu, &ts) != 0)
			break;
	reached = done ? j->done : j->started;
	pthread_mutex_unlock(&j->srv->mu);
	return reached;
}

void
job_wait_done(struct srv_job *j)
{
	pthread_mutex_lock(&j->srv->mu);
	while (!j->done)
		pthread_cond_wait(&j->cv, &j->srv->mu);
	pthread_mutex_unlock(&j->srv->mu);
}

size_t
job_read(struct srv_job *j, char *buf, size_t max)
{
	size_t n;

	pthread_mutex_lock(&j->srv->mu);
	while (j->out_off == j->out.n && !j->done)
		pthread_cond_wait(&j->cv, &j->srv->mu);
	n = j->out.n - j->out_off;
	if (n > max)
		n = max;
	if (n > 0)
		memcpy(buf, j->out.p + j->out_off, n);
	j->out_off += n;
	pthread_mutex_unlock(&j->srv->mu);
	return n;
}
