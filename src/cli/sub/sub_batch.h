/*
 * sub_batch.h: kvchat batch's requests, shared by sub_batch.c (the
 * command: scheduling, output, figures) and sub_batch_req.c (reading one
 * input line into a request).
 */
#ifndef KVC_SUB_BATCH_H
#define KVC_SUB_BATCH_H

#include "chat/chat.h"
#include "engine/engine.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

/* What every request starts from: the command line's defaults and the model's template. */
struct batch_defaults {
	struct kvc_sampler_params smp;	/* --temp, --top-k, ... (kvchat generate's defaults) */
	int max_tokens;			/* -n (default 256, as kvchat generate) */
	enum chat_family family;	/* the messages form's template */
	const char *jinja;		/* the model's template text, or NULL */
	bool fallback;			/* family is chatml for want of a recognised template */
};

/* One input line: a request, or the error that stands for it in the output. */
struct batch_req {
	int index;			/* among the input's non-blank lines, from 0 */
	int line;			/* in the input file, from 1 */
	char *error;			/* "line L: why", or NULL */
	bool chat;			/* the messages form (else a raw completion) */
	struct kvc_tokens prompt;	/* what is prefilled */
	int max_tokens;
	struct kvc_sampler_params smp;
	/* the run */
	struct kvc_sampler *sampler;
	struct kvc_seq *seq;		/* while it runs (owned by the scheduler's slots) */
	struct tok_detok dt;
	struct kvc_tokens ids;		/* generated */
	struct kvc_buf text;		/* their text */
	int32_t next;			/* the sampled id the next pass appends */
	const char *stop;		/* "eos" or "length" once finished, else NULL */
	double t_start, t_prefilled, t_end;	/* kvc_now() */
	int prompt_computed;		/* positions the prefill ran */
	double t_prefill;		/* its time */
};

/*
 * Read line text[0..n) (line `line`, request `index`) into r, tokenized
 * for the engine: a {"prompt": TEXT} or {"messages": [...]} object with
 * optional max_tokens and sampler settings (temperature, top_k, top_p,
 * min_p, repeat_penalty, seed). A bad line sets r->error instead (KVC_OK
 * all the same); only running out of memory returns KVC_ENOMEM.
 */
int batch_req_parse(struct batch_req *r, const char *text, size_t n, int line, int index,
    struct kvc_engine *e, const struct batch_defaults *d);
/* Release what r holds (not its sequence). */
void batch_req_free(struct batch_req *r);

#endif
