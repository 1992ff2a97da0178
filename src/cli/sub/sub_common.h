/*
 * sub_common.h: what the one-shot subcommands (generate, bench) share:
 * the usage-error exit and the engine options.
 */
#ifndef KVC_SUB_COMMON_H
#define KVC_SUB_COMMON_H

#include "engine/engine.h"

/*
 * Prints "kvchat: NAME: WHY[: ARG]" (when why is not NULL), then the usage
 * text, to stderr. Returns 2, the usage exit status.
 */
int sub_usage(const char *name, const char *usage, const char *why, const char *arg);

/*
 * Applies one engine option to ep: --threads/-t N, --kv-type f16|f32,
 * --device D, --gpu N (val is the option's value, not NULL).
 * Returns 1 when opt was one of them and val was good, 0 when opt is not
 * an engine option (ep untouched), -1 when val is bad, with *why set to
 * the message for sub_usage.
 */
int sub_engine_option(const char *opt, const char *val, struct kvc_engine_params *ep,
    const char **why);

/*
 * log p(tok) under softmax(logits[0..n)), in double precision throughout
 * (the sum over a 262k vocabulary would lose digits in float).
 */
double sub_log_softmax(const float *logits, int n, int tok);

#endif
