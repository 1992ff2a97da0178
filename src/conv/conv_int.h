/*
 * conv_int.h: what the files of the conversation module share (conv.h is
 * the public face): the manager and conversation records and the calls
 * one file offers the others.
 *
 * The files call downward only:
 *   conv.c, turn.c, system.c	open/close/delete; turns, undo, retry; /system
 *   residency.c		the LRU within kv_budget, restore and rebuild
 *   save.c			every write to the store: replies, snapshot chunks, settings
 *   slide.c			--ctx-overflow slide: the slid window and its key
 *   window.c			the token stream of the messages, the context window
 *   msgs.c, notice.c		the in-memory messages; notices and failed writes
 *   settings.c, generate.c	the settings codec; the generation loop (public)
 *   speculate.c		the proposals of speculative decoding (generate.c's)
 *
 * One owner for the tokens: the engine sequence holds the stream the cache
 * holds (msgs[win..n_msgs) rendered), and keeps it while evicted; when a
 * failed change leaves the sequence unusable it is dropped (seq = NULL) and
 * the stream is rendered again from the messages when next needed.
 */
#ifndef KVC_CONV_INT_H
#define KVC_CONV_INT_H

#include "conv.h"

/*
 * Long work under way (a prefill, a rebuild): what the engine's prefill
 * hook reports it as, and the flag that stops it (conv_work_begin).
 */
struct conv_work {
	const char *label;		/* "prefill", "rebuilding", ... */
	volatile sig_atomic_t *interrupt;	/* stop when set; NULL: not stoppable */
	bool started;			/* the progress callback was told it began */
};

struct conv_mgr {
	struct kvc_engine *e;		/* not owned */
	struct sess_store *st;		/* not owned */
	struct conv_params p;
	char *jinja;			/* copy of p.jinja */
	char *model_path;		/* copy of p.model_path */
	char *vars;			/* the template's variables (conv_mgr_set_template_vars), or NULL */
	struct conv *open;		/* open conversations, a list */
	uint64_t tick;			/* LRU clock */
	struct conv_work work;		/* the work the prefill hook reports */
	size_t test_at;			/* where the next of p.test_replies starts */
};

struct conv {
	struct conv_mgr *m;
	struct conv *next;
	int64_t id;
	char *title;
	char *system;			/* NULL: none (the family's default applies) */
	bool auto_title;		/* title is provisional until the first turn */
	struct conv_settings set;
	struct kvc_sampler *smp;
	/*
	 * id is 0 until the first message is stored: a conversation exists in
	 * the store (and holds its lock) only once it has something to keep.
	 */
	struct sess_msg *msgs;		/* [n_msgs] deep copies of what is stored */
	int n_msgs, cap_msgs;
	/*
	 * The window: msgs[win..n_msgs) are in the cache. When win > 0 the
	 * first of them (a user message) contributes the system prompt plus
	 * that message rendered afresh instead of its stored ids.
	 */
	int win;
	/*
	 * A slid window (slide.c): the cache holds the window's stream F as
	 * F[0, slide_keep) + F[slide_cut, end); slide_keep = 0: not slid.
	 */
	int slide_keep, slide_cut;
	/*
	 * The window key the store holds (conversations.window). It differs from
	 * conv_window_key(c, win) when the window moved in memory only (at open,
	 * the stored one no longer fitting its messages); the next write of a
	 * chunk sets it with the chunk, in one transaction (save.c).
	 */
	int64_t win_stored;
	struct kvc_seq *seq;		/* the stream; evicted or NULL when not resident */
	struct kvc_seq *draft;		/* the draft model's sequence (speculative decoding), or NULL */
	int snap_end;			/* stream positions covered by chunks on disk */
	int *chunk_ends;		/* pos1 of each chunk on disk, ascending */
	int n_chunk_ends, cap_chunk_ends;
	uint64_t last_used;		/* m->tick at last use */
	bool pend_resumed, pend_rebuilt;	/* reported by the next turn */
	int store_errors;		/* failed writes, reported by the next turn */
	/*
	 * The logits the last reply was sampled from first, so /retry needs
	 * no forward pass: [n_vocab] floats, valid when reply_logits_pos is
	 * the stream length they follow (-1: none).
	 */
	float *reply_logits;
	int reply_logits_pos;
};

/* notice.c */
void conv_notice(struct conv_mgr *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A write that failed but the conversation goes on without: noticed, counted. */
void conv_store_failed(struct conv *c, const char *what, const char *why);
/*
 * Until conv_work_end, the engine's prefills report to conv_params.progress
 * as label and stop with KVC_EINTR when *interrupt (if not NULL) is set.
 */
void conv_work_begin(struct conv_mgr *m, const char *label, volatile sig_atomic_t *interrupt);
void conv_work_end(struct conv_mgr *m);

/* msgs.c */
char *conv_strdup(const char *s);
/* Append a deep copy of x to c->msgs. */
int conv_msgs_push(struct conv *c, const struct sess_msg *x);
/* Forget msgs[k..n_msgs). */
void conv_msgs_drop(struct conv *c, int k);

/* slide.c */
/* What the store keys the window and the chunks with: win, and the slide. */
int64_t conv_window_key(const struct conv *c, int win);
/* Take a stored key apart into c->win and the slide; KVC_ECORRUPT (all reset) if it does not fit the messages. */
int conv_window_open(struct conv *c, int64_t key);
void conv_slide_reset(struct conv *c);
/* The stream the cache holds, of the messages before to: the window's, slid. */
int conv_build_cached(const struct conv *c, int to, struct kvc_tokens *out, char *err,
    size_t errlen);
/* Whether message k starts inside the slid-away part (a rewind to it cannot keep the slide). */
bool conv_slide_cuts(const struct conv *c, int k);
/* Free need more positions by sliding the cache; *slid = positions dropped. */
int conv_slide(struct conv *c, int need, int *slid, char *err, size_t errlen);

/* window.c */
/* [system] + msgs[from..to) (+ user) in chat.h's form; *v is malloc'ed. */
int conv_chat_list(const struct conv *c, int from, int to, const char *user,
    struct chat_msg **v, size_t *n);
/* The system prompt plus msgs[k] (or user) with the generation prompt. */
int conv_render_head(const struct conv *c, int k, const char *user, struct kvc_tokens *out,
    char *err, size_t errlen);
/*
 * Every message's ids rendered afresh from its text with this model's
 * tokenizer and template, for a conversation made with a model of another
 * vocabulary (its stored ids mean other text here); replies become their
 * text's tokens.
 */
int conv_retokenize(struct conv *c, char *err, size_t errlen);
/* The stream of window k over msgs[0..to). */
int conv_build_stream(const struct conv *c, int k, int to, struct kvc_tokens *out,
    char *err, size_t errlen);
/* Smallest window start >= from (a user message) whose stream fits in limit. */
int conv_fit_window(const struct conv *c, int from, int limit, int *k_out, char *err,
    size_t errlen);
/* KVC_ERANGE (with a message) if text is too long for the context by its bytes alone. */
int conv_check_length(const struct conv *c, const char *text, char *err, size_t errlen);
/* Positions kept free for a reply when deciding whether a prompt fits. */
int conv_reply_reserve(const struct conv *c);
/*
 * A turn's prompt does not fit after the stream (--ctx-overflow drop): the
 * window it starts (*win) and the tokens the cache must hold for it (out),
 * dropping old exchanges down to about half the context at once.
 */
int conv_plan_window(const struct conv *c, const char *text, const struct kvc_tokens *delta,
    int reserve, int *win, struct kvc_tokens *out, char *err, size_t errlen);

/* save.c */
const char *conv_kv_type_name(enum gguf_dtype t);
/* The chunks on disk: one more ends at pos1; those past n_pos are gone. */
int conv_chunks_push(struct conv *c, int pos1);
void conv_chunks_trim(struct conv *c, int n_pos);
/*
 * msgs[0..n) and a chunk of the cache from the end of the chunks on disk
 * to the end of the sequence (keyed by window win), in one transaction.
 * keep >= 0: the messages from index keep on and the chunks past position
 * n_keep are taken back in the same transaction (/retry).
 */
int conv_commit_reply(struct conv *c, const struct sess_msg *msgs, int n, int keep,
    int n_keep, int64_t win, char *err, size_t errlen);
/*
 * A turn's reply msg on a new window (key): in one transaction the old
 * chunks go, the reply and a chunk of the whole cache are stored and the
 * conversation's window becomes key (sess_turn_commit_window).
 */
int conv_commit_window(struct conv *c, const struct sess_msg *msg, int64_t key, char *err,
    size_t errlen);
/*
 * An /undo that chose the window again (key), its cache already computed
 * over msgs[0..keep): in one transaction the messages from keep on and
 * every chunk go, the window becomes key and a chunk of the whole cache is
 * stored (sess_rewind_window), so a kill leaves the old conversation or
 * the new one with its snapshot, never one without.
 */
int conv_commit_rewind(struct conv *c, int keep, int64_t key, char *err, size_t errlen);
/*
 * A new system prompt, the cache already synced to the stream with the
 * first message's new ids ids0[0..n0): the prompt, those ids, the window
 * and a chunk of the whole cache in one transaction, the old chunks gone
 * (sess_conv_replace_system).
 */
int conv_commit_system(struct conv *c, const char *system, const int32_t *ids0, int n0,
    char *err, size_t errlen);
/*
 * Make c a stored conversation (no-op if it is one): create its row, titled
 * from first when the title is provisional, and take its lock.
 */
int conv_store_new(struct conv *c, const char *first, char *err, size_t errlen);
/* Take back a conversation conv_store_new just stored: its row goes, id is 0 again. */
void conv_unstore(struct conv *c, bool auto_title);
/* The whole cache as one chunk (after a rebuild); a failure is noticed and counted. */
void conv_save_snapshot(struct conv *c);
int conv_save_settings(struct conv *c, char *err, size_t errlen);

/* reason.c */
/* A reply being told apart into reasoning and answer (chat_reason). */
struct conv_reason {
	struct chat_reason cr;
	const struct conv_io *io;	/* where each part goes */
	int n_tokens;			/* ids that came while the reasoning streamed */
};
/*
 * Route the reply through the splitter: gp's on_text, on_id and arg are
 * set to it (and its detokenizer flags for harmony); the parts go to io's
 * on_text and on_reasoning.
 */
void conv_reason_begin(const struct conv *c, struct conv_reason *r, const struct conv_io *io,
    struct conv_gen_params *gp);
/*
 * The reply is over: rec's text becomes the answer and its reasoning the
 * reasoning (NULL if none), both owned by r; st->reasoning_tokens.
 */
int conv_reason_end(struct conv_reason *r, struct sess_msg *rec, struct conv_stats *st);
void conv_reason_free(struct conv_reason *r);
/* The next line of p.test_replies as ids (none left: out stays empty). */
int conv_test_reply(struct conv_mgr *m, struct kvc_tokens *out, char *err, size_t errlen);

/* rerender.c */
/* A turn's prompt from a whole render with the model's own template. */
struct conv_rerender {
	struct kvc_tokens target;	/* the render: messages (+ user text, + generation prompt) */
	int *spans;			/* [n_msgs + 1]: each message's tokens in it, then the user's */
	int first;			/* first message whose tokens differ from its stored ones (n_msgs: none) */
	int keep;			/* positions of the cache the render starts with */
	const char *why;		/* why the cache is cut short of its end, or NULL */
};
/* Whether a turn renders the whole conversation: the model's own template, window 0, not slid. */
bool conv_rerender_applies(const struct conv *c);
/* Render msgs[0..n_msgs) (+ user, + the generation prompt) and compare it with the cache. */
int conv_rerender(struct conv *c, const char *user, bool add_gen, int n_msgs,
    struct conv_rerender *rr, char *err, size_t errlen);
/*
 * Store what the render changed (sess_conv_retoken: msgs[first..n_msgs)
 * get their tokens in it, later messages keep theirs, chunks past keep go,
 * user appended if not NULL) and take it into c->msgs.
 */
int conv_rerender_store(struct conv *c, const struct conv_rerender *rr, int n_msgs,
    const struct sess_msg *user, char *err, size_t errlen);
void conv_rerender_free(struct conv_rerender *rr);
/*
 * /retry's prompt, msgs[0..u] with the generation prompt, rendered whole:
 * when the cache does not hold exactly it (an /undo left a rewritten
 * turn's stream), the store takes its tokens and the cache is synced to
 * it (*done, *n_pos its length, es the prefill). A prompt the cache holds,
 * or one that cannot be rendered whole, is left to the caller.
 */
int conv_rerender_prompt(struct conv *c, int u, int *n_pos, struct eng_stats *es, bool *done,
    char *err, size_t errlen);

/* residency.c */
/* Evict least recently used caches (never keep's) until extra more bytes fit. */
void conv_mgr_fit(struct conv_mgr *m, const struct conv *keep, size_t extra);
/* Release the cache, keep the tokens (the snapshot brings the cache back). */
void conv_evict(struct conv *c);
/* Forget the sequence: the stream is rendered again from the messages. */
void conv_drop_seq(struct conv *c);

/* render.c: chat_render / chat_render_delta with m's family, template and variables. */
int conv_render(const struct conv_mgr *m, const struct chat_msg *msgs, size_t n, bool add_gen,
    struct kvc_tokens *out, char *err, size_t errlen);
int conv_render_delta(const struct conv_mgr *m, const struct chat_msg *msgs, size_t n_prev, size_t n,
    bool add_gen, struct kvc_tokens *out, char *err, size_t errlen);

#endif
