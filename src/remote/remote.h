/*
 * remote.h: a client of an OpenAI-compatible server (vLLM, SGLang,
 * llama-server, ollama, another kvchat serve) for kvchat --endpoint, on
 * libcurl: one streamed chat completion at a time, its text handed over as
 * it arrives, its figures (time to first token, decode rate, the server's
 * cached_tokens when it reports them) at the end.
 */
#ifndef KVC_REMOTE_H
#define KVC_REMOTE_H

#include <signal.h>

#include "core/kvc.h"

struct rmt_params {
	const char *base_url;		/* "http://host:8000/v1" (without the endpoint) */
	const char *model;		/* the model to ask for (NULL: rmt_first_model) */
	const char *api_key;		/* bearer key, or NULL */
	/* what the request asks for; each left out (the server's default) when unset */
	double temperature;		/* < 0: unset */
	double top_p, min_p;		/* < 0: unset */
	int top_k;			/* < 0: unset */
	double repeat_penalty;		/* < 0: unset; sent as repeat_penalty (llama-server's,
					   kvchat serve's name) and repetition_penalty (vLLM's) */
	bool has_seed;
	uint64_t seed;
	int max_tokens;			/* 0: unset */
	long timeout_s;			/* connect timeout (the stream itself has none) */
};

struct rmt_msg {
	const char *role;		/* "system", "user", "assistant" */
	const char *text;
};

struct rmt_stats {
	double ttft_ms;			/* request sent to the first text */
	double decode_tps;		/* completion tokens / time after the first, when counted */
	int prompt_tokens, completion_tokens;	/* from the server's usage; -1 when not given */
	int cached_tokens;		/* usage.prompt_tokens_details.cached_tokens; -1 when not given */
	char finish[16];		/* finish_reason: "stop", "length", ... ("" when not given) */
	bool interrupted;		/* *interrupt or on_text stopped it */
};

/* Once per process, before any thread: libcurl's global set-up. 0 or KVC_EIO. */
int rmt_global_init(void);
void rmt_global_cleanup(void);

/*
 * The first model GET base_url/models lists, into out. 0, KVC_EIO (no
 * answer, or not a success: err says what the server said), KVC_EFORMAT.
 */
int rmt_first_model(const struct rmt_params *p, char *out, size_t len, char *err, size_t errlen);

/*
 * POST base_url/chat/completions with msgs[0..n), streamed: every piece of
 * the reply goes to on_text (a non-zero return stops) and is appended to
 * reply; *interrupt set (e.g. by SIGINT) stops at once. 0 (also when
 * stopped: st->interrupted), KVC_EIO (no connection, an HTTP error: err
 * holds the server's message), KVC_EFORMAT (not a stream of events) or
 * KVC_ENOMEM.
 */
int rmt_chat(const struct rmt_params *p, const struct rmt_msg *msgs, size_t n,
    int (*on_text)(void *arg, const char *s, size_t len), void *arg,
    volatile sig_atomic_t *interrupt, struct kvc_buf *reply, struct rmt_stats *st,
    char *err, size_t errlen);

#endif
