/*
 * sub_common.h: what the one-shot subcommands (generate, bench) share:
 * the usage-error exit and the engine options.
 */
#ifndef KVC_SUB_COMMON_H
#define KVC_SUB_COMMON_H

#include "conv/conv.h"
#include "engine/engine.h"
#include "sampler/sampler.h"

/*
 * Prints "kvchat: NAME: WHY[: ARG]" (when why is not NULL), then the usage
 * text, to stderr. Returns 2, the usage exit status.
 */
int sub_usage(const char *name, const char *usage, const char *why, const char *arg);

/*
 * Applies one engine option to ep: --threads/-t N, --kv-type f16|f32|q8_0,
 * --device D, --gpu N (val is the option's value, not NULL).
 * Returns 1 when opt was one of them and val was good, 0 when opt is not
 * an engine option (ep untouched), -1 when val is bad, with *why set to
 * the message for sub_usage.
 */
int sub_engine_option(const char *opt, const char *val, struct kvc_engine_params *ep,
    const char **why);

/*
 * --ctx/-c N for the subcommands whose context is the engine's (generate,
 * batch; perplexity's -c is its chunk length): 1 with ep->n_ctx set, 0 when
 * opt is neither, -1 when val is bad, with *why set.
 */
int sub_ctx_option(const char *opt, const char *val, struct kvc_engine_params *ep,
    const char **why);

/*
 * A subcommand's options as a table (sub_opts.c): each row names an option
 * (and its one-letter alias), what kind of value it takes and where the
 * value goes.
 */
enum sub_opt_kind {
	SUB_OPT_FLAG,		/* no value: *(bool *)dst = true */
	SUB_OPT_STR,		/* *(const char **)dst = the value as given */
	SUB_OPT_LONG,		/* *(long *)dst = the value, an integer in [lo, hi] */
	SUB_OPT_FN,		/* fn(dst, value): 0, or nonzero for a bad value */
};
struct sub_opt {
	const char *name;	/* "--model"; NULL ends the table */
	const char *alias;	/* "-m", or NULL */
	enum sub_opt_kind kind;
	void *dst;
	long lo, hi;		/* SUB_OPT_LONG's range */
	const char *bad;	/* the usage error for a bad value ("bad -n") */
	int (*fn)(void *dst, const char *val);
};
/* The rows, as a table reads best. */
#define SUB_FLAG(n, a, p) { .name = (n), .alias = (a), .kind = SUB_OPT_FLAG, .dst = (p) }
#define SUB_STR(n, a, p) { .name = (n), .alias = (a), .kind = SUB_OPT_STR, .dst = (p) }
#define SUB_LONG(n, a, p, l, h, b) \
	{ .name = (n), .alias = (a), .kind = SUB_OPT_LONG, .dst = (p), .lo = (l), .hi = (h), .bad = (b) }
#define SUB_FN(n, a, f, p, b) \
	{ .name = (n), .alias = (a), .kind = SUB_OPT_FN, .dst = (p), .bad = (b), .fn = (f) }
#define SUB_END { .name = NULL }
struct sub_opts_spec {
	const char *name;	/* "generate": the usage errors' prefix */
	const char *usage;	/* printed by --help (stdout) and after a usage error */
	const struct sub_opt *opts;
	/* The rows shared with other subcommands, each when not NULL / set: */
	struct kvc_engine_params *ep;	/* --threads/-t, --kv-type, --device, --gpu */
	bool ctx;			/* --ctx/-c: ep->n_ctx */
	struct conv_settings *set;	/* the settings table's sampler rows (--temp, ...) */
};
/*
 * Parses argv[1..argc) by the spec: -1 when every argument was good, else
 * the exit status: 0 after --help (the usage printed), 2 after a usage
 * error (an unknown option, a missing or bad value, an argument that is no
 * option), said on stderr with the usage.
 */
int sub_parse_opts(const struct sub_opts_spec *c, int argc, char **argv);

/*
 * eng_open with the "loading weights" bar on standard error when it is a
 * terminal and the load takes more than KVC_PROGRESS_DELAY (the packing of
 * a large model's weights), and the notices (why --device auto runs on the
 * CPU) printed clear of it. Where SIGINT has its default action, Ctrl-C
 * stops the load (KVC_EINTR, nothing left open) instead of killing the
 * program, and the action is restored after. ep's progress, notice argument
 * and interrupt flag are reset after: they lived only for the call.
 * Returns eng_open's code.
 */
int sub_eng_open(struct kvc_engine **e, const char *path, struct kvc_engine_params *ep, char *err,
    size_t errlen);

/*
 * Open the draft model path for speculative decoding beside main (same
 * engine options) and a sequence on it: 0, or 1 with the message said
 * (a draft whose vocabulary differs from main's is refused).
 */
int sub_open_draft(struct kvc_engine *main, const char *path, const struct kvc_engine_params *ep,
    struct kvc_engine **de, struct kvc_seq **ds);
/*
 * log p(tok) under softmax(logits[0..n)), in double precision throughout
 * (the sum over a 262k vocabulary would lose digits in float).
 */
double sub_log_softmax(const float *logits, int n, int tok);
/* log of the sum of exp(x[0..n)), in double (the log-softmax's denominator). */
double sub_log_sum_exp(const float *x, int n);

/* kvchat generate's scoring mode (sub_score.c). */
struct sub_score_opts {
	const struct kvc_sampler_params *smp;
	int n_predict;			/* steps; -1: 256, or all of force */
	int top_k;			/* --logprobs K (0: only the chosen id's) */
	bool json;			/* one JSON object per step instead of the text */
	bool keep_space;		/* the text continues a prompt: keep its first space */
	const struct kvc_tokens *force;	/* teacher forcing: the ids to append, or NULL */
};
/*
 * Prefill prompt, then per step: report the top_k log-probs (double
 * log-softmax of the final logits) and append the sampled or forced id.
 * Text then one line per step ("[step] id logprob | id logprob ..."), or
 * JSON lines {"step":i,"id":ID,"logprob":LP,"top":[[id,logprob],...]}.
 * 0, or 1 with a message said.
 */
int sub_score_run(struct kvc_engine *e, const struct kvc_tokens *prompt,
    const struct sub_score_opts *o);

#endif
