/*
 * conv.h: the conversation manager, the turn logic of the chat program.
 *
 * A conversation is a store row, its messages (each with the exact token ids
 * it added to the stream) and an engine sequence whose cache holds the
 * stream. A turn renders only the delta of the new user message, appends it
 * (computing only those positions), generates, and commits user message,
 * reply and a snapshot chunk of the new cache positions in one transaction.
 *
 * Several conversations may be open at once; their caches stay resident
 * within a byte budget and the least recently used one is evicted (its
 * snapshot stays on disk and restores it when it is used again).
 *
 * The context window: when a turn would not fit, the default policy keeps
 * the system prompt and drops the oldest whole exchanges from the cache
 * (never from the database), down to about half the context at once so
 * the recompute is paid once every several turns. The window (the index
 * of the stream's first message) is remembered in the conversation's
 * window column; every snapshot chunk carries the window it was computed
 * over and a hash of the model and of the tokens up to its end (snapshot
 * version 2, checked at restore), so a snapshot is only ever restored over
 * the tokens it was made from.
 */
#ifndef KVC_CONV_H
#define KVC_CONV_H

#include <signal.h>

#include "core/kvc.h"
#include "chat/chat.h"
#include "engine/engine.h"
#include "sampler/sampler.h"
#include "sessions/store.h"

enum conv_overflow {
	CONV_OVERFLOW_DROP,	/* drop the oldest exchanges down to about half the
				 * context at once, recompute what is kept (default) */
	CONV_OVERFLOW_STOP,	/* refuse the turn */
	/* keep the first positions and the recent ones, re-rotate, no recompute */
	CONV_OVERFLOW_SLIDE,
};

struct conv_params {
	enum chat_family family;
	const char *jinja;		/* the model's template text, or NULL */
	const char *model_path;		/* the model's file, recorded with each new conversation; may be NULL */
	size_t kv_budget;		/* bytes for all resident caches; 0 = unlimited */
	enum conv_overflow overflow;
	int keep;			/* slide: positions kept at the front; 0 = the system prompt, or 4 */
	/* speculative decoding of replies: a draft model (same vocabulary, not owned) or prompt lookup */
	struct kvc_engine *draft;
	int lookup;			/* longest n-gram prompt lookup matches; 0: off */
	int spec_k;			/* proposals per pass; 0: 4 with a draft, 8 with lookup */
	/* One-line notices (rebuilds, evictions, dropped history); optional. */
	void (*notice)(void *arg, const char *line);
	void *notice_arg;
	/*
	 * Progress of long work (restoring a snapshot): called with done = 0
	 * when it starts, with each advance, and with label = NULL when it
	 * ends; units are cache positions. Optional: the conversation layer
	 * draws nothing itself.
	 */
	void (*progress)(void *arg, const char *label, uint64_t done, uint64_t total);
	void *progress_arg;
	/*
	 * Set by the caller's SIGINT handler: stops a rebuild of a cache
	 * (conv_open, conv_activate, or the turn that needs one) between
	 * slices, with KVC_EINTR; the conversation stays as it was, its cache
	 * rebuilt when next used. May be NULL (rebuilds run to the end).
	 */
	volatile sig_atomic_t *interrupt;
	/*
	 * Tests only (KVCHAT_TEST_REPLIES): each line is the next reply, forced
	 * instead of sampled: its text (\\n a newline) tokenised with special
	 * tokens parsed; the model still computes every id, and the reply runs
	 * through the reasoning split, the store and the next render as a
	 * sampled one does. It ends where the line does. Not copied: it must
	 * outlive the manager. NULL: replies are sampled.
	 */
	const char *test_replies;
};

/* Per-conversation generation settings (persisted as the settings text). */
struct conv_settings {
	struct kvc_sampler_params smp;
	int max_tokens;			/* reply cap; 0 = until end of turn or full context */
};
struct conv_settings conv_default_settings(void);

/*
 * The settings, one row each, in the order /set lists them: everything
 * that names, parses or shows a setting (the settings text, /set, the
 * chat's command line, tab completion, kvchat generate) reads this table.
 */
enum conv_setting_kind {
	CONV_SET_REAL,			/* a float, parsed as a double in [lo, hi] ((lo, hi] if lo_open) */
	CONV_SET_INT,			/* an int in [lo, hi] */
	CONV_SET_SEED,			/* a uint64_t seed, or "random" (also "-1") */
};

struct conv_setting {
	const char *name;		/* the /set name: "temperature" */
	const char *alias;		/* another name /set takes ("temp"), or NULL */
	const char *key;		/* its key in the settings text (name or alias) */
	const char *opt;		/* the command-line option, without "--" */
	char short_opt;			/* its one-letter form, or 0 */
	const char *metavar;		/* the option's value as --help shows it */
	enum conv_setting_kind kind;
	double lo, hi;			/* accepted values (REAL, INT) */
	bool lo_open;			/* lo itself is refused (top_p > 0) */
	size_t off;			/* where it lives: offsetof(struct conv_settings, ...) */
	bool smp;			/* a sampler parameter (kvchat generate takes it too) */
	const char *help;		/* what --help says of the option, after its column */
};

#define CONV_N_SETTINGS 7
extern const struct conv_setting conv_setting_table[];

/* The row whose name or alias is name, or NULL. */
const struct conv_setting *conv_setting_find(const char *name);
/* The row whose option is opt (without "--"), or NULL. */
const struct conv_setting *conv_setting_by_opt(const char *opt);
/*
 * Parse value (NULL counts as "") as row's kind and store it in s. On
 * KVC_EINVAL (not a number) or KVC_ERANGE (out of the row's range) s is
 * untouched and the message starts with label ("temp: not a number: 'x'").
 */
int conv_setting_apply(struct conv_settings *s, const struct conv_setting *row,
    const char *label, const char *value, char *err, size_t errlen);
/* Copy row's value from src to dst. */
void conv_setting_copy(struct conv_settings *dst, const struct conv_settings *src,
    const struct conv_setting *row);
/* Append row's value in s as the settings text writes it ("0.8", "40", "random"). */
int conv_setting_text(const struct conv_settings *s, const struct conv_setting *row,
    struct kvc_buf *out);
/*
 * The accepted range of row in words, as the refusals and /set's usage say
 * it: ">= 0", "in (0, 1]", "> 0"; "" for the seed.
 */
void conv_setting_range(const struct conv_setting *row, char *buf, size_t len);
/* The /set names, comma-separated: "temperature, top_p, ..., max_tokens". */
void conv_setting_names(char *buf, size_t len);

/* "temp=0.8;top_p=0.95;...": format s into out. */
int conv_settings_format(const struct conv_settings *s, struct kvc_buf *out);
/* Parse text over s (unknown names, and values out of range, ignored). */
void conv_settings_parse(const char *text, struct conv_settings *s);
/*
 * Whether text reads whole as a settings text: KVC_OK, or KVC_EFORMAT with
 * what is wrong (the first unreadable pair, an unknown name, a value out of
 * range). For naming a damaged row; conv_settings_parse still reads the rest.
 */
int conv_settings_check(const char *text, char *err, size_t errlen);
/*
 * Set one setting by its /set name or alias (conv_setting_table).
 * KVC_EINVAL with a message if unknown or not a number, KVC_ERANGE with a
 * message if out of range.
 */
int conv_settings_set(struct conv_settings *s, const char *name, const char *value,
    char *err, size_t errlen);

/* Figures of one turn (the stats line and --stats-json). */
struct conv_stats {
	int prompt_tokens;		/* tokens this turn's user delta added */
	int reused_tokens;		/* positions kept from the cache */
	int prefill_tokens;		/* positions computed for this turn's prompt */
	int gen_tokens;			/* reply tokens */
	int reasoning_tokens;		/* of them, those of its reasoning (and its markup) */
	int dropped_tokens;		/* history positions dropped (context overflow) */
	int dropped_msgs;		/* messages that left the window (context overflow) */
	int recomputed_tokens;		/* positions of kept history computed again after a drop */
	double recompute_ms;		/* their share of the prefill time, ms */
	int slid_tokens;		/* positions slid away (--ctx-overflow slide), none recomputed */
	/*
	 * Cached positions of earlier turns given up because the model's
	 * template now renders them otherwise (the turn's prompt, prompt_tokens,
	 * then holds their new rendering), and why (a static string; NULL when
	 * the cache was kept whole)
	 */
	int rewritten_tokens;
	const char *rewrite_why;
	int spec_proposed, spec_accepted;	/* speculative proposals made, and kept */
	int forward_passes;		/* decode passes of the main model */
	double ttft_ms;			/* io->t_enter to the first reply token written, ms */
	double prefill_tps;		/* prefill_tokens / prefill wall time */
	double decode_tps;		/* reply tokens / decode wall time */
	int context_used, context_total;	/* positions */
	bool resumed_from_snapshot;	/* cache restored from the snapshot before this turn */
	bool rebuilt;			/* cache rebuilt from stored tokens before this turn */
	bool interrupted;		/* stopped by the user */
	bool ctx_full;			/* reply stopped because the context is full */
	/*
	 * Snapshot or settings writes that failed since the last turn (each
	 * one was noticed); the conversation went on without them.
	 */
	int store_errors;
};

/* How a turn talks to its caller. */
struct conv_io {
	/*
	 * The reply's answer as it streams (valid UTF-8 pieces, without the
	 * reasoning or its markup); non-zero return stops.
	 */
	int (*on_text)(void *arg, const char *s, size_t n);
	/* Its reasoning as it streams (may be NULL: not shown); as on_text. */
	int (*on_reasoning)(void *arg, const char *s, size_t n);
	/* If not NULL: the reasoning's tokens so far (and its markup), kept up to date. */
	int *reasoning_tokens;
	void *arg;
	/* Set by the caller's SIGINT handler: stop generating at once. May be NULL. */
	volatile sig_atomic_t *interrupt;
	double t_enter;			/* kvc_now() when the user pressed Enter (0 = at call) */
};

/*
 * The one generation loop, for chat replies (conv_turn, conv_retry) and raw
 * completions (kvchat generate): sample, run the id through the model,
 * detokenize, stream; stop at the end of generation, a stop string, the
 * cap, a full context or an interrupt. Text that could be the start of a
 * stop string is held back until it is known not to be one.
 */
enum conv_gen_mode {
	/*
	 * A chat reply: each id is run through the model as soon as it is
	 * sampled, so the cache holds the whole reply for the next turn; the
	 * end-of-turn id is part of the reply; NUL bytes become U+FFFD (a
	 * reply is stored as a C string).
	 */
	CONV_GEN_REPLY,
	/*
	 * A raw completion: an id is run through the model only when another
	 * follows it (the last one needs no cache position, so a prompt of p
	 * tokens in a context of n gets up to n - p + 1); the end-of-generation
	 * id ends it unsaid; the bytes pass as they are.
	 */
	CONV_GEN_COMPLETION,
};

/*
 * Speculative decoding (speculate.c): where proposals come from. The draft
 * sequence (on a second engine with the same vocabulary) keeps its cache
 * between runs and is rewound to what the main sequence holds.
 */
#define CONV_SPEC_MAX 16	/* proposals per forward pass, at most */
struct conv_spec {
	struct kvc_seq *draft;		/* draft model's sequence, or NULL */
	int lookup;			/* prompt lookup: longest n-gram matched; 0: off */
	int k;				/* proposals per pass (1..CONV_SPEC_MAX) */
};
/*
 * Up to max proposals to follow ctx[0..n) into out; returns how many (0:
 * none), or a negative KVC_E* with the message.
 */
int conv_spec_propose(struct conv_spec *sp, const int32_t *ctx, int n, int32_t *out, int max,
    char *err, size_t errlen);

struct conv_gen_params {
	enum conv_gen_mode mode;
	int max_tokens;			/* at most this many ids; < 0: no cap */
	const char *const *stop;	/* stop strings (chat_stop_strings), or NULL */
	unsigned detok_flags;		/* TOK_DETOK_* */
	/* Text as it streams (valid UTF-8 pieces); non-zero return stops. Optional. */
	int (*on_text)(void *arg, const char *s, size_t n);
	/* Each id as it counts; non-zero return stops. Optional. */
	int (*on_id)(void *arg, int32_t id);
	void *arg;
	volatile sig_atomic_t *interrupt;	/* stop at once when set; may be NULL */
	/* What the first id is sampled from when the sequence has no logits at hand, or NULL. */
	const float *first_logits;
	/* Ids taken instead of sampled, in order (tests); the reply ends after them. */
	const int32_t *forced;
	int n_forced;
	/* [n_vocab] or NULL: gets a copy of the logits the first id is sampled from. */
	float *keep_first_logits;
	struct conv_spec *spec;		/* speculative decoding, or NULL */
};

struct conv_gen {
	struct kvc_tokens ids;		/* the ids that count */
	struct kvc_buf text;		/* their text, NUL-terminated */
	int n_decoded;			/* ids run through the model */
	int n_passes;			/* decode forward passes of the main model */
	int proposed, accepted;		/* speculative proposals made, and kept */
	double t_first;			/* kvc_now() when the first id was at hand; 0: none */
	int first_logits_pos;		/* positions keep_first_logits follows; -1: not copied */
	bool interrupted;		/* *interrupt, or on_text / on_id asked to stop */
	bool ctx_full;			/* stopped because the context is full */
};

/*
 * Generate after what s holds (its logits at hand, or first_logits). g is
 * set up here and holds what was generated even on an error (a failed
 * forward pass: what came before it stands); conv_gen_free releases it.
 */
int conv_generate(struct kvc_engine *e, struct kvc_seq *s, struct kvc_sampler *smp,
    const struct conv_gen_params *p, struct conv_gen *g, char *err, size_t errlen);
void conv_gen_free(struct conv_gen *g);

struct conv_mgr;
struct conv;

int conv_mgr_new(struct conv_mgr **out, struct kvc_engine *e, struct sess_store *st,
    const struct conv_params *p, char *err, size_t errlen);
/* Closes every open conversation (releasing locks) and frees the manager. */
void conv_mgr_free(struct conv_mgr *m);
struct kvc_engine *conv_mgr_engine(const struct conv_mgr *m);
struct sess_store *conv_mgr_store(const struct conv_mgr *m);
enum chat_family conv_mgr_family(const struct conv_mgr *m);
/*
 * The variables the model's own template (CHAT_JINJA) is rendered with from
 * the next turn on, as members of a JSON object without its braces
 * ("\"enable_thinking\": false"); NULL or "" for none. Families ignore them.
 * 0 or KVC_ENOMEM.
 */
int conv_mgr_set_template_vars(struct conv_mgr *m, const char *vars);
/* Bytes held by resident caches, and how many conversations are open / resident. */
size_t conv_mgr_kv_bytes(const struct conv_mgr *m, int *n_open, int *n_resident);

/*
 * A new conversation. It is stored (and claimed) with its first message:
 * until then conv_id is 0 and nothing of it is on disk. title NULL = the
 * start of the first user message. system may be NULL.
 */
int conv_new(struct conv_mgr *m, const char *title, const char *system,
    const struct conv_settings *s, struct conv **out, char *err, size_t errlen);
/*
 * Open a stored conversation (or return it if already open): claim it
 * (KVC_EBUSY if another process holds it), load its messages and bring its
 * cache back, from the snapshot when it matches, else by recomputing the
 * stored tokens (with a notice saying why). KVC_EINTR when a rebuild was
 * stopped (conv_params.interrupt): *out is set all the same, the
 * conversation open with its messages, its cache rebuilt when next used.
 */
int conv_open(struct conv_mgr *m, int64_t id, struct conv **out, char *err, size_t errlen);
/* Release the conversation's lock and cache. */
void conv_close(struct conv *c);
/* Delete it from the store and close it; on an error it stays open, unchanged. */
int conv_delete(struct conv *c, char *err, size_t errlen);
/*
 * Delete conversation id from the store without bringing it into memory:
 * if it is open here it is closed (its cache dropped). KVC_EBUSY if
 * another process holds it.
 */
int conv_mgr_delete(struct conv_mgr *m, int64_t id, char *err, size_t errlen);

/*
 * One turn: user text in, reply streamed through io, everything committed.
 * KVC_ERANGE (nothing changed) if the input alone does not fit the context
 * or the policy is stop and the context is full. The user's message is
 * stored before the prefill (a kill keeps it; conv_open then notices the
 * reply was cut off, and a later turn leaves it with an empty reply marked
 * interrupted). The prefill checks io->interrupt between slices of about
 * 0.2 s: when it is set the turn is taken back whole (cache rewound,
 * nothing stored) and the call returns KVC_EINTR with st->interrupted. An
 * interrupted reply is committed marked interrupted; the call then returns
 * 0 and st->interrupted. Long prefills and rebuilds report through
 * conv_params.progress ("prefill", "rebuilding", in positions). A rebuild
 * of the cache before the turn, stopped by conv_params.interrupt, returns
 * KVC_EINTR without st->interrupted: nothing changed (err says so). On a
 * read-only store (sess_readonly) the turn, like conv_retry, is refused
 * with KVC_EIO before anything is computed, err saying why.
 */
int conv_turn(struct conv *c, const char *text, const struct conv_io *io,
    struct conv_stats *st, char *err, size_t errlen);
/*
 * Drop the last exchange from the store and the cache (or a last user
 * message left without a reply). KVC_ENOTFOUND if none.
 */
int conv_undo(struct conv *c, char *err, size_t errlen);
/*
 * Answer the last user message again: only the reply is taken back (store
 * and cache); its prompt is reused whole (prefill 0 when the first reply's
 * logits are still at hand, else the last position is recomputed).
 */
int conv_retry(struct conv *c, const struct conv_io *io, struct conv_stats *st,
    char *err, size_t errlen);
/* Drop every message (keeps title, system prompt and settings). */
int conv_clear(struct conv *c, char *err, size_t errlen);
int conv_rename(struct conv *c, const char *title, char *err, size_t errlen);
/*
 * Set the system prompt (NULL or "" = none). On a conversation with
 * messages the stream is rendered again with it, the cache synced (the
 * common prefix kept, usually only BOS) and the store rewritten in one
 * transaction with a fresh snapshot; *n_computed (if not NULL) gets the
 * positions computed. KVC_EINVAL if the template cannot render the history
 * with another system prompt without rewriting it, KVC_ERANGE if it would
 * no longer fit the context; nothing changes then.
 */
int conv_change_system(struct conv *c, const char *system, int *n_computed, char *err,
    size_t errlen);
/* conv_change_system without the count. */
int conv_set_system(struct conv *c, const char *system, char *err, size_t errlen);
int conv_set_settings(struct conv *c, const struct conv_settings *s, char *err, size_t errlen);
/*
 * Make sure the cache is resident (restoring it if evicted). KVC_EINTR: a
 * rebuild was stopped (conv_params.interrupt); the cache is rebuilt when
 * next used.
 */
int conv_activate(struct conv *c, char *err, size_t errlen);

/*
 * The title a first message gives, into t (len bytes): its first line, at
 * most 48 bytes of whole characters; a line cut there ends at the last
 * space before the cut (no word cut in half) unless that would leave less
 * than half of it. Its length; also for chats without a conv (--endpoint).
 */
size_t conv_title_from(const char *text, char *t, size_t len);

int64_t conv_id(const struct conv *c);
const char *conv_title(const struct conv *c);
const char *conv_system(const struct conv *c);
const struct conv_settings *conv_get_settings(const struct conv *c);
int conv_n_msgs(const struct conv *c);
const struct sess_msg *conv_msg(const struct conv *c, int i);
/*
 * Tokens of the stream the cache holds (the window), and their count: the
 * engine sequence's, kept while evicted; none while a failed change has
 * left the cache to be rebuilt from the messages on next use.
 */
const int32_t *conv_stream(const struct conv *c, int *n);
bool conv_resident(const struct conv *c);
/* The engine sequence (NULL while evicted); for tests and /show. */
struct kvc_seq *conv_seq(const struct conv *c);

/*
 * Bytes at the end of text[0..n) that could be the start of one of the
 * family's stop strings (chat_stop_strings), so a streamed reply holds them
 * back until the next piece decides; 0 for families without stop strings.
 */
size_t conv_stop_holdback(enum chat_family f, const char *text, size_t n);

#endif
