/*
 * http.c: the HTTP side of kvchat serve, on libmicrohttpd: one thread per
 * connection (a streamed response's reader waits for the scheduler's next
 * piece), routes, the bearer key, the limits, and the responses.
 *
 * A request is refused as early as it can be: a wrong path or method, a
 * missing or wrong key, a Content-Length over the limit are answered from
 * the headers, before any of the body is read; a body that grows past the
 * limit without announcing it is dropped as it arrives and answered 413.
 * Every error is in OpenAI's shape ({"error": {"message", "type", ...}}).
 */
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "srv_int.h"

enum route { R_NONE, R_HEALTH, R_MODELS, R_CHAT, R_COMPLETION };

/* One connection's request while its body arrives. */
struct req {
	enum route route;
	struct kvc_buf body;
	bool too_big;
	bool answered;			/* a response is queued already */
	bool has_job;			/* a job was queued for it (counted in n_sending) */
};

struct srv_params
srv_default_params(void)
{
	struct srv_params p;

	memset(&p, 0, sizeof p);
	p.host = "127.0.0.1";
	p.port = 8080;
	p.parallel = 4;
	p.max_tokens = 2048;
	p.max_body = 4u << 20;
	p.max_queue = 64;
	p.keep_unnamed = 100;
	p.timeout_s = 60;
	p.model_id = "kvchat";
	p.defaults = conv_default_settings();
	return p;
}

bool
srv_key_equal(const char *given, size_t n_given, const char *want)
{
	size_t n_want = strlen(want), n = n_given > n_want ? n_given : n_want;
	unsigned char d = n_given != n_want;

	/* every byte of the longer one is looked at, whatever differs first */
	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)((i < n_given ? given[i] : 0) ^ (i < n_want ? want[i] : 0));
	return d == 0;
}

static void
log_line(struct kvc_server *s, const char *method, const char *url, int status)
{
	char line[300];

	if (s->p.log == NULL)
		return;
	snprintf(line, sizeof line, "%s %.200s -> %d", method, url, status);
	s->p.log(s->p.log_arg, line);
}

/* Queue a response of body[0..n) (copied) with status and content type. */
static enum MHD_Result
respond(struct MHD_Connection *conn, int status, const char *type, const char *body, size_t n,
    int64_t conv)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body,
	    MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (conv > 0) {
		char id[32];

		snprintf(id, sizeof id, "%lld", (long long)conv);
		MHD_add_response_header(r, "X-Kvchat-Conversation", id);
	}
	if (status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	ret = MHD_queue_response(conn, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result
respond_error(struct kvc_server *s, struct MHD_Connection *conn, const char *method,
    const char *url, int status, const char *msg)
{
	struct kvc_buf b = {0};
	enum MHD_Result ret;

	log_line(s, method, url, status);
	if (oai_error(&b, status, msg) != KVC_OK) {
		kvc_buf_free(&b);
		return MHD_NO;
	}
	ret = respond(conn, status, "application/json", b.p, b.n, 0);
	kvc_buf_free(&b);
	return ret;
}

static enum route
route_of(const char *url)
{
	if (strncmp(url, "/v1/", 4) == 0)
		url += 3;
	if (strcmp(url, "/health") == 0)
		return R_HEALTH;
	if (strcmp(url, "/models") == 0)
		return R_MODELS;
	if (strcmp(url, "/chat/completions") == 0)
		return R_CHAT;
	if (strcmp(url, "/completions") == 0)
		return R_COMPLETION;
	return R_NONE;
}

/* The key the request presents ("Authorization: Bearer KEY") matches. */
static bool
authorized(struct kvc_server *s, struct MHD_Connection *conn)
{
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_AUTHORIZATION);

	if (s->p.api_key == NULL)
		return true;
	if (h == NULL || strncmp(h, "Bearer ", 7) != 0)
		return false;
	return srv_key_equal(h + 7, strlen(h + 7), s->p.api_key);
}

/* A streamed response's bytes, as the scheduler writes them. */
static ssize_t
stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	size_t n = job_read(cls, buf, max);

	(void)pos;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

/* The response is gone (sent, or the client left): stop the job if it still runs. */
static void
stream_free(void *cls)
{
	job_cancel(cls);
	job_unref(cls);
}

/*
 * Whether the client of conn has gone: its end of the socket is closed
 * (or broken). A request's body is read whole before the job is queued,
 * so anything readable now is either the end of the stream or a next
 * pipelined request, which recv's peek tells apart.
 */
static bool
client_gone(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn,
	    MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd pf;
	char c;

	if (ci == NULL)
		return false;
	pf.fd = ci->connect_fd;
	pf.events = POLLIN;
	pf.revents = 0;
	if (poll(&pf, 1, 0) <= 0)
		return false;
	if (pf.revents & (POLLERR | POLLHUP | POLLNVAL))
		return true;
	return (pf.revents & POLLIN) && recv(pf.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/*
 * Wait for a non-streamed job to start (done: to end) while watching its
 * connection: the thread answering it sends nothing until the body is
 * whole, so libmicrohttpd would not notice a client that left; this does,
 * four times a second, and cancels the job (the scheduler stops it as it
 * stops a stream whose reader went away).
 */
static void
wait_watching(struct MHD_Connection *conn, struct srv_job *j, bool done)
{
	while (!job_wait_until(j, done, 250))
		if (!j->cancel && client_gone(conn))
			job_cancel(j);
}

/* A completion request whose body is in: parse, queue, answer. */
static enum MHD_Result
completion(struct kvc_server *s, struct MHD_Connection *conn, const char *method,
    const char *url, struct req *rq)
{
	struct srv_job *j = job_new(s, rq->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION);
	const char *hdr = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Kvchat-Conversation");
	struct MHD_Response *r;
	enum MHD_Result ret;
	char err[512] = "";
	int st;

	if (j == NULL)
		return respond_error(s, conn, method, url, 500, "out of memory");
	st = oai_parse(j, rq->body.p ? rq->body.p : "", rq->body.n, hdr, err, sizeof err);
	if (st == 0 && (st = sched_submit(s, j)) != 0)
		kvc_err(err, sizeof err, st == 429 ? "too many requests waiting: try again later" :
		    "the server is stopping");
	if (st != 0) {
		job_unref(j);
		return respond_error(s, conn, method, url, st, err);
	}
	rq->has_job = true;
	pthread_mutex_lock(&s->mu);
	s->n_sending++;
	pthread_mutex_unlock(&s->mu);
	if (!j->stream)
		wait_watching(conn, j, false);
	st = job_wait_started(j);
	if (!j->stream || st != 200) {
		if (!j->stream)
			wait_watching(conn, j, true);
		job_wait_done(j);
		log_line(s, method, url, j->status);
		ret = respond(conn, j->status, "application/json", j->out.p ? j->out.p : "", j->out.n,
		    j->conv_out);
		job_unref(j);
		return ret;
	}
	log_line(s, method, url, 200);
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j,
	    stream_free);
	if (r == NULL) {
		stream_free(j);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	if (j->conv_out > 0) {
		char id[32];

		snprintf(id, sizeof id, "%lld", (long long)j->conv_out);
		MHD_add_response_header(r, "X-Kvchat-Conversation", id);
	}
	ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* The headers are in: what can be refused from them is. */
static enum MHD_Result
first_call(struct kvc_server *s, struct MHD_Connection *conn, const char *url,
    const char *method, struct req *rq)
{
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_LENGTH);
	bool post = rq->route == R_CHAT || rq->route == R_COMPLETION, stopping;
	long len;

	pthread_mutex_lock(&s->mu);
	stopping = s->stopping;
	pthread_mutex_unlock(&s->mu);
	if (stopping) {
		/* /health too: a balancer in front sends the next requests elsewhere */
		rq->answered = true;
		return respond_error(s, conn, method, url, 503, "the server is stopping");
	}
	if (rq->route == R_NONE) {
		rq->answered = true;
		return respond_error(s, conn, method, url, 404, "no such endpoint (GET /health, GET "
		    "/v1/models, POST /v1/chat/completions, POST /v1/completions)");
	}
	if (strcmp(method, post ? "POST" : "GET") != 0) {
		rq->answered = true;
		return respond_error(s, conn, method, url, 405, post ? "use POST" : "use GET");
	}
	if (rq->route != R_HEALTH && !authorized(s, conn)) {
		rq->answered = true;
		return respond_error(s, conn, method, url, 401, "a valid API key is needed "
		    "(Authorization: Bearer KEY)");
	}
	if (cl != NULL && (kvc_parse_long(cl, 0, (long)s->p.max_body, &len) != KVC_OK)) {
		rq->answered = true;
		return respond_error(s, conn, method, url, 413, "the request body is over this "
		    "server's limit");
	}
	return MHD_YES;
}

static enum MHD_Result
handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
    const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct kvc_server *s = cls;
	struct req *rq = *con_cls;
	struct kvc_buf b = {0};
	enum MHD_Result ret;

	(void)version;
	if (rq == NULL) {
		if ((rq = calloc(1, sizeof *rq)) == NULL)
			return MHD_NO;
		rq->route = route_of(url);
		*con_cls = rq;
		/* counted until completed(): srv_idle waits for it */
		pthread_mutex_lock(&s->mu);
		s->n_req++;
		pthread_mutex_unlock(&s->mu);
		return first_call(s, conn, url, method, rq);
	}
	if (*upload_data_size > 0) {
		if (!rq->answered && !rq->too_big) {
			if (rq->body.n + *upload_data_size > s->p.max_body)
				rq->too_big = true;
			else if (kvc_buf_append(&rq->body, upload_data, *upload_data_size) != KVC_OK)
				return MHD_NO;
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (rq->answered)
		return MHD_YES;
	rq->answered = true;
	if (rq->too_big)
		return respond_error(s, conn, method, url, 413, "the request body is over this "
		    "server's limit");
	switch (rq->route) {
	case R_HEALTH:
		log_line(s, method, url, 200);
		return respond(conn, 200, "application/json", "{\"status\":\"ok\"}", 15, 0);
	case R_MODELS:
		if (oai_models(&b, s->p.model_id, (long)time(NULL)) != KVC_OK) {
			kvc_buf_free(&b);
			return MHD_NO;
		}
		log_line(s, method, url, 200);
		ret = respond(conn, 200, "application/json", b.p, b.n, 0);
		kvc_buf_free(&b);
		return ret;
	default:
		return completion(s, conn, method, url, rq);
	}
}

static void
completed(void *cls, struct MHD_Connection *conn, void **con_cls,
    enum MHD_RequestTerminationCode toe)
{
	struct kvc_server *s = cls;
	struct req *rq = *con_cls;

	(void)conn;
	(void)toe;
	if (rq != NULL) {
		pthread_mutex_lock(&s->mu);
		s->n_req--;
		s->n_sending -= rq->has_job;
		pthread_mutex_unlock(&s->mu);
		kvc_buf_free(&rq->body);
		free(rq);
		*con_cls = NULL;
	}
}

/* Whether a request whose job was queued is still being answered. */
static bool
sending(struct kvc_server *s)
{
	bool any;

	pthread_mutex_lock(&s->mu);
	any = s->n_sending > 0;
	pthread_mutex_unlock(&s->mu);
	return any;
}

/* host:port as a socket address; 0 or KVC_EINVAL with err. */
static int
resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len, char *err,
    size_t errlen)
{
	struct addrinfo hints, *ai = NULL;
	char ps[16];
	int rc;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(ps, sizeof ps, "%d", port);
	if ((rc = getaddrinfo(host, ps, &hints, &ai)) != 0 || ai == NULL) {
		kvc_err(err, errlen, "cannot use the address '%s': %s", host, gai_strerror(rc));
		return KVC_EINVAL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return KVC_OK;
}

int
srv_start(struct kvc_server **out, struct kvc_engine *e, const struct srv_params *p,
    char *err, size_t errlen)
{
	struct kvc_server *s;
	struct sockaddr_storage ss;
	socklen_t sslen;
	const union MHD_DaemonInfo *info;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
	int rc;

	*out = NULL;
	if (p->parallel < 1 || p->parallel > SRV_MAX_PARALLEL || p->model_id == NULL) {
		kvc_err(err, errlen, "--parallel must be 1 to %d", SRV_MAX_PARALLEL);
		return KVC_EINVAL;
	}
	if ((rc = resolve(p->host, p->port, &ss, &sslen, err, errlen)) != KVC_OK)
		return rc;
	if ((s = calloc(1, sizeof *s)) == NULL)
		return KVC_ENOMEM;
	s->p = *p;
	s->e = e;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->wake, NULL);
	if ((rc = sched_start(s, err, errlen)) != KVC_OK) {
		srv_stop(s);
		return rc;
	}
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, handler, s,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)(p->max_queue + p->parallel + 8),
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, (void *)s,
	    MHD_OPTION_END);
	if (s->d == NULL) {
		kvc_err(err, errlen, "cannot listen on %s port %d (in use, or not an address of this "
		    "machine?)", p->host, p->port);
		srv_stop(s);
		return KVC_EIO;
	}
	info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info != NULL ? info->port : p->port;
	*out = s;
	return KVC_OK;
}

int
srv_port(const struct kvc_server *s)
{
	return s->port;
}

void
srv_drain(struct kvc_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	/* the scheduler answers the waiting ones */
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->mu);
}

bool
srv_idle(struct kvc_server *s)
{
	bool idle;

	pthread_mutex_lock(&s->mu);
	idle = s->n_active == 0 && s->n_queue == 0 && s->n_req == 0;
	pthread_mutex_unlock(&s->mu);
	return idle;
}

void
srv_stop(struct kvc_server *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	s->quit = 1;
	/* a stored conversation's turn stops as if its client left, keeping its reply so far */
	if (s->turn != NULL)
		s->turn->cancel = 1;
	pthread_mutex_unlock(&s->mu);
	/* the scheduler ends every job first, so no connection waits on one */
	sched_stop(s);
	/*
	 * Their connections may still hold the last bytes (a reply srv_stop cut,
	 * a 503): stopping the daemon now would close them unsent. A client that
	 * reads nothing is not waited for past 5 s.
	 */
	for (int i = 0; i < 500 && s->d != NULL && sending(s); i++)
		nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
	if (s->d != NULL)
		MHD_stop_daemon(s->d);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
