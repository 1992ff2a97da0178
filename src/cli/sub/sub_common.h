/*
 * sub_common.h: what the one-shot subcommands (generate, bench) share:
 * the usage-error exit and the engine options.
 */
#ifndef KVC_SUB_COMMON_H
#define KVC_SUB_COMMON_H

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
