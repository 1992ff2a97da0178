/*
 * srv_int.h: what the server's files share: the server, a request's job,
 * and the calls between them. Files call downward:
 *   http.c (libmicrohttpd: routes, auth, limits, responses)
 *     -> oai_req.c (a request body read into a job, with jansson)
 *     -> sched.c (the scheduler thread: slots, prefix reuse, batching)
 *        -> sched_pick.c (which waiting prefill gets the next slice)
 *        -> sched_conv.c (a request that is a stored conversation's turn)
 *        -> sched_save.c (an unnamed request stored as a conversation)
 *        -> sched_store.c (a prompt's prefix from the stored snapshots)
 *     -> job.c (a job's output queue between the threads; the server's log lines)
 *        -> oai_resp.c (response bodies, stream events, errors, with jansson)
 */
#ifndef KVC_SRV_INT_H
#define KVC_SRV_INT_H

#include <pthread.h>
#include <signal.h>

#include "server.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

#define SRV_MAX_STOP 4		/* stop strings a request may give (OpenAI's limit) */
#define SRV_STOP_LEN 256	/* and the bytes of each */
#define SRV_MAX_PARALLEL 64

enum srv_kind { SRV_CHAT, SRV_COMPLETION };

/*
 * One request, from its parse to its last byte sent. Shared by the
 * connection's thread and the scheduler: each holds a reference (refs,
 * under srv->mu); the fields marked "run" belong to the scheduler thread
 * alone, those marked "shared" are read and written under srv->mu.
 */
struct srv_job {
	struct kvc_server *srv;
	/* the request (set by oai_parse, read-only afterwards) */
	enum srv_kind kind;
	bool stream, include_usage;
	struct chat_msg *msgs;		/* chat: the messages, texts owned */
	size_t n_msgs;
	char *prompt;			/* completion: the prompt text */
	int max_tokens;
	struct kvc_sampler_params smp;
	char *stop[SRV_MAX_STOP];
	int n_stop;
	bool has_conv;			/* a stored conversation's turn */
	int64_t conv_id;		/* its id; 0 with has_conv: a new one */
	char id[48];			/* "chatcmpl-..." / "cmpl-..." */
	long created;			/* Unix time */
	/* run */
	struct kvc_tokens prompt_ids;
	struct kvc_sampler *sampler;
	struct tok_detok dt;
	struct kvc_tokens ids;		/* generated */
	struct kvc_buf text;		/* their text */
	size_t sent;			/* bytes of text already sent */
	size_t scanned;			/* bytes of text already searched for stop strings */
	int32_t next;			/* the sampled id the next pass appends */
	int n_prompt, n_gen;		/* prompt and completion tokens (usage) */
	int cached;			/* prompt positions reused */
	int computed;			/* prompt positions computed */
	bool prefilling;		/* its prefill has begun */
	unsigned long order;		/* placed in a slot: the scheduler's count (its age) */
	int waited;			/* passes its prefill was passed over (sched_pick.c) */
	double t_start, t_prefilled, t_end;	/* kvc_now() */
	const char *finish;		/* "stop" or "length" once finished */
	int32_t eog;			/* the end-of-generation id that ended it, or -1 */
	int64_t cont_id;		/* the stored conversation it continues (save_prompt), or 0 */
	int cont_len;			/* that conversation's stream: prompt_ids[0..cont_len) */
	int64_t conv_out;		/* the conversation written, 0: none */
	const char *conv_cache;		/* where its cache came from: "snapshot", "rebuilt", "resident" */
	/* shared */
	struct kvc_buf out;		/* bytes to send */
	size_t out_off;			/* bytes of out already sent */
	int status;			/* HTTP status once known (started), else 0 */
	bool started;			/* status known: the response may begin */
	bool done;			/* out is complete */
	volatile sig_atomic_t cancel;	/* the client went away: stop */
	int refs;
	pthread_cond_t cv;		/* started, done or more output */
	struct srv_job *next_q;		/* the waiting queue */
};

struct srv_sched;

struct kvc_server {
	struct srv_params p;
	struct kvc_engine *e;
	struct MHD_Daemon *d;
	int port;
	pthread_mutex_t mu;		/* jobs' shared fields, the queue, stopping */
	pthread_cond_t wake;		/* the scheduler: a job arrived or was cancelled */
	struct srv_job *q_head, *q_tail;
	int n_queue;
	int n_active;			/* jobs taken from the queue and not yet ended */
	int n_req;			/* requests between their headers and their end (http.c) */
	int n_sending;			/* of those, the ones whose job was queued */
	bool stopping;			/* srv_drain: new requests get 503, running ones go on */
	volatile sig_atomic_t quit;	/* srv_stop: what still runs ends now (read unlocked by hooks) */
	struct srv_job *turn;		/* the stored conversation's turn running, or NULL */
	unsigned long n_jobs;		/* ids */
	struct srv_sched *sched;
};

/* job.c */
struct srv_job *job_new(struct kvc_server *s, enum srv_kind kind);
void job_unref(struct srv_job *j);
/* Append to the job's output and wake its connection. 0 or KVC_ENOMEM. */
int job_emit(struct srv_job *j, const char *p, size_t n);
/* The response may begin with status (200 for a stream whose events follow). */
void job_start(struct srv_job *j, int status);
/* The output is complete (a non-streamed job: out is the whole body). */
void job_done(struct srv_job *j, int status);
/* Fail: the error body as the output (or, once a stream began, an error event). */
void job_fail(struct srv_job *j, int status, const char *msg);
/*
 * Stream the job's text not sent yet, but for what could be the start of
 * one of its stop strings (final: all of it). 0 or KVC_ENOMEM. Nothing for
 * a non-streamed job, whose body is built at the end.
 */
int job_send_text(struct srv_job *j, bool final);
/*
 * The job ended well: the rest of a stream (its text, the finish event,
 * usage, [DONE]) or the whole non-streamed body, then done.
 */
void job_finish_ok(struct srv_job *j);
/* The client went away. */
void job_cancel(struct srv_job *j);
/* Wait until the job started (or ended); its status. */
int job_wait_started(struct srv_job *j);
void job_wait_done(struct srv_job *j);
/* Wait up to ms for the job to start (done: to end); whether it did. */
bool job_wait_until(struct srv_job *j, bool done, int ms);
/*
 * Up to max bytes of output into buf, waiting for some: the count, 0 at
 * the end of the output.
 */
size_t job_read(struct srv_job *j, char *buf, size_t max);

/* oai_resp.c: bodies and events, appended to out; 0 or KVC_ENOMEM. */
const char *oai_error_type(int status);
int oai_error(struct kvc_buf *out, int status, const char *msg);
int oai_models(struct kvc_buf *out, const char *model_id, long created);
/* A stream event carrying text[0..n) (role with the first one), or finish_reason. */
int oai_event(struct kvc_buf *out, const struct srv_job *j, const char *text, size_t n,
    bool first, const char *finish);
/* The stream's end: the usage event if asked for, then [DONE]. */
int oai_stream_end(struct kvc_buf *out, const struct srv_job *j);
/* The non-streamed body of a finished job. */
int oai_body(struct kvc_buf *out, const struct srv_job *j);

/* oai_req.c: read body into j; 0, or the HTTP status (400, 404) with err. */
int oai_parse(struct srv_job *j, const char *body, size_t n, const char *conv_header,
    char *err, size_t errlen);

/* sched.c */
int sched_start(struct kvc_server *s, char *err, size_t errlen);
/* s->quit set: the thread ends what runs, joins, and everything is freed. */
void sched_stop(struct kvc_server *s);
/* One line to the server's log (p.log), if it has one. */
void srv_log(struct kvc_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Queue j (taking a reference): 0, or 429 (queue full) / 503 (stopping). */
int sched_submit(struct kvc_server *s, struct srv_job *j);

/*
 * sched_store.c: when a stored conversation of this model shares more than
 * better_than tokens with prompt[0..n), restore its snapshot into seq up to
 * that prefix (seq's cache is replaced). Returns the positions restored (0:
 * none; seq then unchanged, or emptied when a restore failed), *from the
 * conversation's id. *ix is the index of stored streams, made on first use.
 */
struct srv_store_index;
int store_prefix(struct kvc_server *s, struct srv_store_index **ix, struct kvc_seq *seq,
    const int32_t *prompt, int n, int better_than, int64_t *from);
void store_index_free(struct srv_store_index *ix);
/*
 * Before the server listens: the caches of the most recently used stored
 * conversations of this model, one per sequence of seqs[0..n), restored
 * from their snapshots (each as far as its chunks go), within budget
 * bytes of cache (0: no limit). The sequences restored; *n_pos their
 * positions. A restore that fails leaves its sequence empty.
 */
int store_preload(struct kvc_server *s, struct srv_store_index **ix, struct kvc_seq **seqs, int n,
    size_t budget, int *n_pos);
/*
 * The hash of a system prompt and messages, one text at a time (h0 NULL to
 * begin); roles: chat_role's numbers, equal to sess_role's.
 */
uint64_t store_hist_hash(const char *text, int role, const uint64_t *h0);
/*
 * The conversation of an unnamed request (titled "api: "), of this model
 * and whole in its window, whose system prompt and messages are exactly
 * j's but its last (a user message): *id, its stream (the ids the cache
 * held) in stream and its last reply's ids in reply; *id 0 when there is
 * none. 0 or KVC_ENOMEM.
 */
int store_history(struct kvc_server *s, struct srv_store_index **ix, const struct srv_job *j,
    int64_t *id, struct kvc_tokens *stream, struct kvc_tokens *reply);

/*
 * sched_save.c: the prompt of an unnamed chat request that continues a
 * stored one (its history resent): that conversation's stream, exactly the
 * ids the model saw and produced, then the new message rendered after it
 * (as the chat renders a turn). 1 when it is (j->prompt_ids set, j->cont_id
 * and j->cont_len), 0 when not (the caller renders the messages), or a
 * KVC_E* code with err.
 */
int save_prompt(struct kvc_server *s, struct srv_store_index **ix, struct srv_job *j,
    char *err, size_t errlen);
/*
 * Store the finished unnamed chat request j (its prompt and
 * reply, the cache seq holds as a snapshot chunk), continuing the stored
 * conversation it resends, or as a new one (--keep-unnamed bounds them).
 * Sets j->conv_out; a failure is logged, never the request's.
 */
void save_unnamed(struct kvc_server *s, struct srv_store_index **ix, struct kvc_seq *seq,
    struct srv_job *j);

/*
 * sched_pick.c: the prefills waiting in the slots compete for one slice a
 * pass (the decode step of the running requests follows each). The next
 * slice goes to the prefill with the least left to compute, a prefill's
 * wait counting against what it has left: each pass it is passed over
 * counts as 1/SRV_PREFILL_AGING of a slice done, so a newcomer with a
 * short prompt goes before a long prefill under way (its time to first
 * token is its own prompt's, not the queue's) while a long prompt is not
 * starved by a stream of short ones (it goes first after about
 * SRV_PREFILL_AGING times its own slices of waiting). Among equals the
 * oldest goes first, and one under way keeps going (what it has done
 * lowers its rest faster than waiting lowers the others'), so prompts
 * arriving together finish one after another, not all at the end.
 */
#define SRV_PREFILL_AGING 4
struct srv_pending {
	int remaining;			/* prompt positions still to compute */
	int waited;			/* passes it was passed over */
	unsigned long order;		/* smaller: placed earlier */
};
/* The index in p[0..n) (n > 0) of the prefill that gets the next slice of slice_pos positions. */
int sched_pick_prefill(const struct srv_pending *p, int n, int slice_pos);
/*
 * Whether a prefill stops after one slice: when requests are decoding
 * (their next step must not wait for a whole prompt), when other prefills
 * wait in the slots, or when a newcomer waits in the queue for a free slot
 * (it is placed, and may go first, at the next pass).
 */
bool sched_slice_prefill(bool decoding, int n_pending, bool newcomer);

/*
 * sched_conv.c: run j as a turn of its stored conversation (scheduler
 * thread). A client that leaves, at any moment, stops the turn: before its
 * reply the turn is taken back whole, during it the reply so far is stored
 * marked interrupted; either way one "the client went away after N tokens"
 * line is logged, as for the slots' requests.
 */
void sched_conv_run(struct kvc_server *s, struct conv_mgr *m, struct srv_job *j);

#endif
