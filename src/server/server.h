/*
 * server.h: kvchat serve, an OpenAI-compatible HTTP server over one engine.
 *
 * GET /health, GET /v1/models, POST /v1/chat/completions and POST
 * /v1/completions (also without the /v1 prefix), streamed as server-sent
 * events or not. One scheduler thread owns the engine: it keeps --parallel
 * sequences whose caches stay resident between requests, gives each new
 * request the sequence sharing the longest token prefix with its prompt
 * (only the rest is prefilled; usage.prompt_tokens_details.cached_tokens
 * says how much was reused), cuts prefills into slices between decode
 * steps, and decodes every running request in one forward_multi pass
 * (continuous batching). A request naming a stored conversation
 * ("conversation" field or X-Kvchat-Conversation header) runs as a chat
 * turn of that conversation (conv_turn): its lock is held for the request,
 * the cache comes back from the store's snapshot, and the turn is stored as
 * the REPL stores it.
 *
 * Safe by default: the caller binds to loopback unless it gives a key (or
 * chooses no authentication); bodies, max_tokens, waiting requests and idle
 * connections are bounded; no request names a file.
 */
#ifndef KVC_SERVER_H
#define KVC_SERVER_H

#include "core/kvc.h"
#include "chat/chat.h"
#include "conv/conv.h"
#include "engine/engine.h"
#include "sessions/store.h"

struct srv_params {
	const char *host;		/* address to bind: "127.0.0.1" (default), "::1", "0.0.0.0" */
	int port;			/* 0: any free port (srv_port says which) */
	int parallel;			/* sequences decoded together (default 4) */
	int max_tokens;			/* cap on a request's max_tokens, and its default (default 2048) */
	size_t max_body;		/* request body limit in bytes (default 4 MiB) */
	int max_queue;			/* requests waiting for a sequence; more get 429 (default 64) */
	int timeout_s;			/* idle connection timeout, seconds (default 60) */
	size_t kv_budget;		/* bytes the idle sequences' caches may keep; 0: no limit */
	const char *api_key;		/* bearer token every request but /health needs, or NULL */
	const char *model_id;		/* the name /v1/models lists and requests may give */
	enum chat_family family;	/* the chat template of /v1/chat/completions */
	const char *jinja;		/* the model's template text, or NULL */
	struct conv_settings defaults;	/* sampler defaults of a request that gives none */
	struct sess_store *store;	/* conversations, or NULL: the field is refused */
	int keep_unnamed;		/* unnamed chat requests' conversations kept (default 100; 0: none stored) */
	struct conv_params conv;	/* the conversation manager's parameters (store set) */
	bool no_warmup;			/* listen at once: no warm-up pass, no caches taken back (sched.c) */
	/* One line per request and per event (optional; called from several threads). */
	void (*log)(void *arg, const char *line);
	void *log_arg;
};
struct srv_params srv_default_params(void);

struct kvc_server;

/*
 * Start serving e (not owned; the server's scheduler thread is its only
 * user until srv_stop). 0, or KVC_EIO (cannot bind: message says why),
 * KVC_EINVAL or KVC_ENOMEM.
 */
int srv_start(struct kvc_server **out, struct kvc_engine *e, const struct srv_params *p,
    char *err, size_t errlen);
/* The port bound (the free one chosen for port 0). */
int srv_port(const struct kvc_server *s);
/*
 * The first step of stopping: from now on every new request, and every one
 * still waiting for a sequence, is answered 503 in OpenAI's error shape,
 * while the running ones go on to their end (and are stored as usual).
 */
void srv_drain(struct kvc_server *s);
/* Whether no request runs, waits, or is between its headers and its last byte. */
bool srv_idle(struct kvc_server *s);
/*
 * End what still runs (a stored conversation's turn keeps its reply so
 * far, marked interrupted; other requests get 503), stop listening, join
 * the threads, free. Drains first if srv_drain was not called.
 */
void srv_stop(struct kvc_server *s);

/* Constant-time comparison of a presented key with the expected one. */
bool srv_key_equal(const char *given, size_t n_given, const char *want);

#endif
