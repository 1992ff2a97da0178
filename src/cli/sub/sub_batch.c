/*
 * sub_batch.c: kvchat batch: many prompts from a JSONL file, decoded
 * together with continuous batching.
 *
 * Up to --parallel B requests run at once, each in its own engine sequence
 * (its own KV cache and positions) with its own sampler. Every step appends
 * one token to each running sequence in one forward pass
 * (eng_seq_decode_multi: on the CPU every weight row is read once for all
 * B tokens, which is the whole gain on a memory-bound machine); a request
 * that finishes leaves at once, and the waiting ones that fill the free
 * slots are prefilled together, in one pass (eng_seq_append_multi), and
 * join at the next step. Each sequence's logits, prefill and decode, are
 * those it would get alone, bit for bit, so a greedy request's output does
 * not depend on B or on its neighbours. Output lines go out in input order as
 * soon as every earlier request is done; a bad input line gets an error
 * line (its line number in the message), the others run, and the exit
 * status is then 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/json_text.h"
#include "cli/progress.h"
#include "conv/conv.h"
#include "sub_batch.h"
#include "sub_common.h"

static const char batch_usage[] =
    "usage: kvchat batch -m FILE -f PROMPTS.jsonl [-o OUT.jsonl] [--parallel B] [-n N]\n"
    "                    [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
    "                    [--seed S] [--chat-template NAME] [--quiet] [--threads N] [--ctx N]\n"
    "                    [--kv-type f16|f32|q8_0] [--device auto|cpu|cuda] [--gpu N]\n";

#define BATCH_MAX_PARALLEL 256

struct batch_opts {
	struct kvc_engine_params ep;
	struct conv_settings set;	/* the sampler defaults */
	const char *model, *in, *out, *template_name;
	long parallel, n_predict;
	bool quiet;			/* no per-request lines */
};

static int
usage(const char *why, const char *arg)
{
	return sub_usage("batch", batch_usage, why, arg);
}

/* --chat-template: a family kvchat knows. */
static int
template_opt(void *arg, const char *val)
{
	if (chat_family_from_name(val) < 0)
		return -1;
	*(const char **)arg = val;
	return 0;
}

/*
 * The command line into o by batch's option table (with the engine
 * options, --ctx and the settings table's sampler rows, the defaults of
 * every request): -1 to go on, else the exit status.
 */
static int
parse_args(int argc, char **argv, struct batch_opts *o)
{
	const struct sub_opt opts[] = {
		SUB_STR("--model", "-m", &o->model),
		SUB_STR("--file", "-f", &o->in),
		SUB_STR("--output", "-o", &o->out),
		SUB_FN("--chat-template", NULL, template_opt, &o->template_name,
		    "unknown chat template"),
		SUB_LONG("--parallel", "-B", &o->parallel, 1, BATCH_MAX_PARALLEL,
		    "bad --parallel (1 to 256)"),
		SUB_LONG("-n", NULL, &o->n_predict, 0, 1L << 30, "bad -n"),
		SUB_FLAG("--quiet", "-q", &o->quiet),
		SUB_END,
	};
	const struct sub_opts_spec spec = {
		.name = "batch", .usage = batch_usage, .opts = opts,
		.ep = &o->ep, .ctx = true, .set = &o->set,
	};

	return sub_parse_opts(&spec, argc, argv);
}

/* The whole input (a file, or stdin for "-") into b, NUL-terminated. 0, or 1 with a message said. */
static int
read_input(const char *path, struct kvc_buf *b)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char chunk[65536];
	size_t n;

	if (f == NULL) {
		fprintf(stderr, "kvchat: batch: %s: %s\n", path, strerror(errno));
		return 1;
	}
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		if (kvc_buf_append(b, chunk, n) != KVC_OK) {
			fprintf(stderr, "kvchat: batch: out of memory reading %s\n", path);
			if (f != stdin)
				fclose(f);
			return 1;
		}
	if (ferror(f) || kvc_buf_append(b, "", 0) != KVC_OK) {
		fprintf(stderr, "kvchat: batch: cannot read %s\n", path);
		if (f != stdin)
			fclose(f);
		return 1;
	}
	if (f != stdin)
		fclose(f);
	return 0;
}

/* A run: the requests, the running slots and the figures. */
struct batch {
	struct kvc_engine *e;
	const struct batch_opts *o;
	struct batch_req *reqs;
	int n_req;
	int next_wait;			/* the next request to start */
	int next_out;			/* the next request to write */
	int fd;				/* where output lines go */
	int n_slot;			/* --parallel */
	struct kvc_seq **seq;		/* [n_slot] sequences, reused by request after request */
	struct batch_req **slot;	/* [n_slot] the request running there, or NULL */
	int n_active;
	const char *const *stop;	/* the template's stop strings (messages form), or NULL */
	struct kvc_buf piece, line;	/* scratch */
	struct kvc_progress pb;
	int n_done, n_err;
	/* prefill passes (requests started together share one): their time, their count */
	double t_prefill;
	int n_prefill_passes;
	/* decode steps: their time, the tokens they appended, their count */
	double t_decode;
	long n_decoded;
	int n_steps;
};

/* r's output line, appended to line: its text and ids, or its error. 0 or KVC_ENOMEM. */
static int
batch_line(const struct batch_req *r, struct kvc_buf *line)
{
	json_t *o = json_object(), *ids = NULL;
	bool bad = false;
	int rc;

	cli_json_put(o, "index", json_integer(r->index), &bad);
	if (r->error != NULL) {
		cli_json_put(o, "line", json_integer(r->line), &bad);
		cli_json_put(o, "error", cli_json_cstr(r->error), &bad);
	} else {
		cli_json_put(o, "text", cli_json_text(r->text.p, r->text.n), &bad);
		cli_json_put(o, "ids", ids = json_array(), &bad);
		for (size_t i = 0; !bad && i < r->ids.n; i++)
			bad = json_array_append_new(ids, json_integer(r->ids.v[i])) != 0;
		cli_json_put(o, "prompt_tokens", json_integer((json_int_t)r->prompt.n), &bad);
		cli_json_put(o, "gen_tokens", json_integer((json_int_t)r->ids.n), &bad);
		cli_json_put(o, "stop", json_string(r->stop), &bad);
	}
	rc = bad ? KVC_ENOMEM : cli_json_line(o, 0, line);
	json_decref(o);
	return rc;
}

/* Write the output lines every earlier request of which is done. 0, KVC_ENOMEM or KVC_EIO (said). */
static int
write_ready(struct batch *b)
{
	for (; b->next_out < b->n_req; b->next_out++) {
		struct batch_req *r = &b->reqs[b->next_out];
		int rc = KVC_OK;

		if (r->error == NULL && r->stop == NULL)
			break;
		b->line.n = 0;
		rc = batch_line(r, &b->line);
		if (rc != KVC_OK)
			return KVC_ENOMEM;	/* said by batch_main */
		if (kvc_write_all(b->fd, b->line.p, b->line.n) != KVC_OK) {
			fprintf(stderr, "kvchat: batch: writing %s: %s\n", b->o->out ? b->o->out :
			    "standard output", strerror(errno));
			return KVC_EIO;
		}
		/* the figures stay for the summary, the rest is not needed any more */
		kvc_buf_free(&r->text);
		if (r->sampler)
			smp_free(r->sampler);
		r->sampler = NULL;
	}
	return KVC_OK;
}

/* r is done (stop: "eos" or "length"); its slot is free again. */
static void
finish(struct batch *b, struct batch_req *r, const char *stop, bool cut)
{
	b->piece.n = 0;
	/* after a stop string the text ends where the string began */
	if (!cut && tok_detok_flush(&r->dt, &b->piece) == 0)
		(void)kvc_buf_append(&r->text, b->piece.p, b->piece.n);
	if (r->text.p == NULL)
		(void)kvc_buf_append(&r->text, "", 0);
	r->stop = stop;
	r->t_end = kvc_now();
	r->seq = NULL;
	b->n_done++;
	progress_set(&b->pb, (uint64_t)b->n_done, 0);
}

/*
 * With r's logits at hand: sample its next id and see whether it ends the
 * request, as kvchat generate's loop does (an end-of-generation id ends it
 * unsaid; the cap, or a full context, after the id). 1 when r runs on
 * (r->next goes into the next pass), 0 when it finished, KVC_ENOMEM.
 */
static int
take(struct batch *b, struct batch_req *r)
{
	const struct kvc_tokenizer *tok = eng_tokenizer(b->e);
	const char *hit = NULL;
	int32_t id;

	if ((int)r->ids.n >= r->max_tokens) {
		finish(b, r, "length", false);
		return 0;
	}
	id = smp_sample(r->sampler, eng_seq_logits(r->seq), eng_seq_tokens(r->seq),
	    (size_t)eng_seq_n_pos(r->seq));
	if (tok_is_eog(tok, id)) {
		finish(b, r, "eos", false);
		return 0;
	}
	b->piece.n = 0;
	if (kvc_tokens_push(&r->ids, id) != KVC_OK ||
	    (tok_detok_push(tok, &r->dt, id, &b->piece) == 0 &&
	    kvc_buf_append(&r->text, b->piece.p, b->piece.n) != KVC_OK))
		return KVC_ENOMEM;
	/* the messages form stops at the template's stop strings as the chat does */
	for (const char *const *s = r->chat ? b->stop : NULL; s && *s && hit == NULL; s++)
		if (r->text.n > 0)
			hit = strstr(r->text.p, *s);
	if (hit != NULL) {
		r->text.n = (size_t)(hit - r->text.p);
		r->text.p[r->text.n] = '\0';
		finish(b, r, "eos", true);
		return 0;
	}
	if ((int)r->ids.n >= r->max_tokens || eng_seq_n_pos(r->seq) >= eng_n_ctx(b->e)) {
		finish(b, r, "length", false);
		return 0;
	}
	r->next = id;
	return 1;
}

/* r's prefill failed (err): its error line; 0, or KVC_ENOMEM. */
static int
prefill_failed(struct batch *b, struct batch_req *r, const char *err)
{
	struct kvc_buf m = {0};

	if (kvc_buf_printf(&m, "line %d: prefill: %s", r->line, err))
		return KVC_ENOMEM;
	r->error = m.p;
	b->n_err++;
	b->n_done++;
	progress_set(&b->pb, (uint64_t)b->n_done, 0);
	return KVC_OK;
}

/* r prefilled in slot k (st its figures): its first id. 0 (r runs, or finished already), or a fatal code. */
static int
prefilled(struct batch *b, int k, struct batch_req *r, const struct eng_stats *st)
{
	int rc;

	r->t_prefilled = kvc_now();
	r->prompt_computed = st->n_computed;
	r->t_prefill = st->t_prefill;
	r->seq = b->seq[k];
	rc = take(b, r);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		b->slot[k] = r;
		b->n_active++;
	}
	return KVC_OK;
}

/*
 * Start the n requests rs in the free slots ks: their prompts prefilled
 * together in one pass (eng_seq_append_multi: each weight row read once
 * for all of them, each prompt getting the bits of its own prefill), then
 * each one's first id. Should the pass fail, each is prefilled alone, so
 * that a request's error line names its own fault. 0 (each runs, finished
 * already, or failed with its error line), else a fatal code.
 */
static int
start(struct batch *b, const int *ks, struct batch_req *const *rs, int n)
{
	struct kvc_seq *seqs[BATCH_MAX_PARALLEL], *ms[BATCH_MAX_PARALLEL];
	const int32_t *toks[BATCH_MAX_PARALLEL], *mt[BATCH_MAX_PARALLEL];
	int n_tok[BATCH_MAX_PARALLEL], mn[BATCH_MAX_PARALLEL], i, m = 0, rc = KVC_EINVAL;
	struct eng_stats st[BATCH_MAX_PARALLEL], mst[BATCH_MAX_PARALLEL];
	bool together[BATCH_MAX_PARALLEL];
	char err[512] = "";
	double t0 = kvc_now();

	for (i = 0; i < n; i++) {
		struct batch_req *r = rs[i];

		r->t_start = t0;
		if (smp_new(&r->sampler, &r->smp, eng_n_vocab(b->e)) != KVC_OK)
			return KVC_ENOMEM;
		tok_detok_init(&r->dt, r->chat ? 0 : TOK_DETOK_KEEP_LEADING_SPACE);
		seqs[i] = b->seq[ks[i]];
		(void)eng_seq_truncate(seqs[i], 0);
		toks[i] = r->prompt.v;
		n_tok[i] = (int)r->prompt.n;
		/* an empty prompt has nothing to share a pass with */
		together[i] = n_tok[i] > 0;
		if (together[i]) {
			ms[m] = seqs[i];
			mt[m] = toks[i];
			mn[m++] = n_tok[i];
		}
	}
	if (m > 1) {
		rc = eng_seq_append_multi(ms, m, mt, mn, mst, err, sizeof err);
		if (rc == KVC_ENOMEM)
			return rc;
		if (rc == KVC_OK) {
			b->n_prefill_passes++;
			b->t_prefill += kvc_now() - t0;
		}
	}
	for (i = 0, m = 0; i < n; i++) {
		if (together[i])
			st[i] = mst[m++];
		if (rc != KVC_OK || !together[i]) {
			/* alone (one request, or the shared pass refused) */
			double t1 = kvc_now();
			int rc1 = eng_seq_append(seqs[i], toks[i], n_tok[i], &st[i], err, sizeof err);

			b->n_prefill_passes++;
			b->t_prefill += kvc_now() - t1;
			if (rc1 == KVC_ENOMEM)
				return rc1;
			if (rc1 != KVC_OK) {
				if (prefill_failed(b, rs[i], err) != KVC_OK)
					return KVC_ENOMEM;
				continue;
			}
		}
		int rc2 = prefilled(b, ks[i], rs[i], &st[i]);

		if (rc2 != KVC_OK)
			return rc2;
	}
	return KVC_OK;
}

/* One pass: every running request's next id, appended together. 0, or a fatal code. */
static int
step(struct batch *b)
{
	struct kvc_seq *seqs[BATCH_MAX_PARALLEL];
	int32_t toks[BATCH_MAX_PARALLEL];
	char err[512] = "";
	double t0 = kvc_now();
	int n = 0, rc;

	for (int k = 0; k < b->n_slot; k++)
		if (b->slot[k] != NULL) {
			seqs[n] = b->seq[k];
			toks[n++] = b->slot[k]->next;
		}
	rc = eng_seq_decode_multi(seqs, n, toks, err, sizeof err);
	if (rc != KVC_OK) {
		fprintf(stderr, "kvchat: batch: decode: %s\n", err);
		return rc;
	}
	for (int k = 0; k < b->n_slot; k++) {
		struct batch_req *r = b->slot[k];

		if (r == NULL)
			continue;
		rc = take(b, r);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			b->slot[k] = NULL;
			b->n_active--;
		}
	}
	b->t_decode += kvc_now() - t0;
	b->n_decoded += n;
	b->n_steps++;
	return KVC_OK;
}

/*
 * Fill the free slots with waiting requests, all started together (a bad
 * input line's request is only counted); again while a started one
 * finished at once and left its slot free. 0, or a fatal code.
 */
static int
fill_slots(struct batch *b)
{
	int rc;

	while (b->next_wait < b->n_req && b->n_active < b->n_slot) {
		struct batch_req *rs[BATCH_MAX_PARALLEL];
		int ks[BATCH_MAX_PARALLEL], n = 0;

		for (int k = 0; k < b->n_slot && b->next_wait < b->n_req; k++) {
			struct batch_req *r;

			if (b->slot[k] != NULL)
				continue;
			r = &b->reqs[b->next_wait++];
			if (r->error != NULL) {
				b->n_err++;
				b->n_done++;
				progress_set(&b->pb, (uint64_t)b->n_done, 0);
				k--;	/* the slot is still free */
				continue;
			}
			ks[n] = k;
			rs[n++] = r;
		}
		if (n > 0 && (rc = start(b, ks, rs, n)) != KVC_OK)
			return rc;
		if ((rc = write_ready(b)) != KVC_OK)
			return rc;
	}
	return KVC_OK;
}

/* Continuous batching until every request is done. 0, or a fatal code (message said). */
static int
run(struct batch *b)
{
	int rc;

	for (;;) {
		if ((rc = fill_slots(b)) != KVC_OK)
			return rc;
		if (b->n_active == 0)
			break;
		if ((rc = step(b)) != KVC_OK || (rc = write_ready(b)) != KVC_OK)
			return rc;
	}
	return write_ready(b);
}

/* The requests of the input's non-blank lines. 0, or 1 with a message said. */
static int
read_requests(struct batch *b, const struct kvc_buf *in, const struct batch_defaults *d)
{
	size_t cap = 0;
	int line = 0;

	for (const char *p = in->p, *end = in->p + in->n; p < end; ) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		size_t k;

		line++;
		for (k = 0; k < len && strchr(" \t\r", p[k]) != NULL; k++)
			;
		if (k < len) {
			if ((size_t)b->n_req == cap) {
				struct batch_req *nr;

				cap = cap ? cap * 2 : 64;
				if ((nr = realloc(b->reqs, cap * sizeof *nr)) == NULL)
					goto nomem;
				b->reqs = nr;
			}
			if (batch_req_parse(&b->reqs[b->n_req], p, len, line, b->n_req, b->e, d) != KVC_OK) {
				batch_req_free(&b->reqs[b->n_req]);
				goto nomem;
			}
			b->n_req++;
		}
		p += len + 1;
	}
	return 0;
nomem:
	fprintf(stderr, "kvchat: batch: out of memory reading the requests\n");
	return 1;
}

/* Per-request (unless --quiet) and total figures on stderr. */
static void
report(const struct batch *b, double t_wall)
{
	long n_prompt = 0, n_gen = 0;

	for (int i = 0; i < b->n_req; i++) {
		const struct batch_req *r = &b->reqs[i];
		double t_gen = r->t_end - r->t_prefilled;

		if (r->error != NULL || r->stop == NULL)
			continue;
		n_prompt += r->prompt_computed;
		n_gen += (long)r->ids.n;
		if (!b->o->quiet)
			fprintf(stderr, "kvchat: batch: #%d: prompt %zu tokens, prefill %.1f tok/s; "
			    "%zu generated in %.2f s, %.1f tok/s, stop %s\n", r->index, r->prompt.n,
			    r->t_prefill > 0 ? r->prompt_computed / r->t_prefill : 0.0, r->ids.n, t_gen,
			    t_gen > 0 ? r->ids.n / t_gen : 0.0, r->stop);
	}
	fprintf(stderr, "kvchat: batch: %d requests (%d failed), parallel %d, %s, %s cache: "
	    "prompt %ld tokens, prefill %.1f tok/s (%.2f s, %d passes); %ld generated; decode %.1f tok/s "
	    "aggregate (%ld tokens in %d passes, %.1f per pass, %.2f s); wall %.2f s, %.1f "
	    "generated tok/s overall\n", b->n_req, b->n_err, b->n_slot, eng_backend_name(b->e),
	    gguf_dtype_name(eng_kv_type(b->e)), n_prompt, b->t_prefill > 0 ? n_prompt / b->t_prefill : 0.0,
	    b->t_prefill, b->n_prefill_passes, n_gen, b->t_decode > 0 ? b->n_decoded / b->t_decode : 0.0, b->n_decoded,
	    b->n_steps, b->n_steps ? (double)b->n_decoded / b->n_steps : 0.0, b->t_decode, t_wall,
	    t_wall > 0 ? n_gen / t_wall : 0.0);
}

/*
 * The template of the messages form, as the chat picks it: the file's own
 * (rendered by src/jinja) unless --chat-template names a family, a family
 * when the file has none or its template cannot be used (said once).
 */
static void
pick_template(const struct batch_opts *o, struct kvc_engine *e, struct batch_defaults *d)
{
	char err[512];
	int fam = chat_family_for_file(eng_gguf(e), &d->jinja);
	int named = o->template_name ? chat_family_from_name(o->template_name) : -1;

	if (named >= 0 && named != CHAT_JINJA)
		fam = named;
	else if (d->jinja != NULL && chat_jinja_check(eng_tokenizer(e), d->jinja, NULL, err,
	    sizeof err) == 0)
		fam = CHAT_JINJA;
	else if (d->jinja != NULL)
		fprintf(stderr, "kvchat: batch: the model's chat template cannot be used (%s); "
		    "using a family\n", err);
	d->family = fam < 0 ? CHAT_CHATML : (enum chat_family)fam;
	d->fallback = fam < 0;
}

/* Set up the run and do it. The exit status. */
static int
batch_main(struct batch *b, const struct batch_opts *o, const struct kvc_buf *in)
{
	struct batch_defaults d;
	char err[512] = "";
	double t0;
	int rc;

	d.smp = o->set.smp;
	d.max_tokens = (int)o->n_predict;
	pick_template(o, b->e, &d);
	if (read_requests(b, in, &d) != 0)
		return 1;
	for (int i = 0; i < b->n_req && d.fallback; i++)
		if (b->reqs[i].chat) {
			fprintf(stderr, "kvchat: batch: %s; the messages use chatml (--chat-template "
			    "chooses)\n", d.jinja ? "unrecognised chat template" :
			    "the model has no chat template");
			break;
		}
	b->stop = chat_stop_strings(d.family);
	b->n_slot = (int)o->parallel;
	b->seq = calloc((size_t)b->n_slot, sizeof *b->seq);
	b->slot = calloc((size_t)b->n_slot, sizeof *b->slot);
	if (b->seq == NULL || b->slot == NULL) {
		fprintf(stderr, "kvchat: batch: out of memory\n");
		return 1;
	}
	for (int k = 0; k < b->n_slot; k++)
		if (eng_seq_new(b->e, &b->seq[k], err, sizeof err) != KVC_OK) {
			fprintf(stderr, "kvchat: batch: %s\n", err);
			return 1;
		}
	b->fd = STDOUT_FILENO;
	if (o->out != NULL && (b->fd = kvc_file_open_write(o->out, false, err, sizeof err)) < 0) {
		fprintf(stderr, "kvchat: batch: %s\n", err);
		return 1;
	}
	t0 = kvc_now();
	progress_start(&b->pb, "batch", (uint64_t)b->n_req);
	rc = run(b);
	progress_end(&b->pb);
	if (rc == KVC_ENOMEM)
		fprintf(stderr, "kvchat: batch: out of memory\n");
	if (o->out != NULL && close(b->fd) != 0 && rc == KVC_OK) {
		fprintf(stderr, "kvchat: batch: writing %s: %s\n", o->out, strerror(errno));
		rc = KVC_EIO;
	}
	if (rc != KVC_OK)
		return 1;
	report(b, kvc_now() - t0);
	for (int i = 0; i < b->n_req; i++)
		if (b->reqs[i].error != NULL)
			fprintf(stderr, "kvchat: batch: %s\n", b->reqs[i].error);
	return b->n_err > 0 ? 1 : 0;
}

int
sub_batch(int argc, char **argv)
{
	struct batch_opts o;
	struct batch b;
	struct kvc_buf in = {0};
	char err[512] = "";
	int rc = -1;

	memset(&o, 0, sizeof o);
	memset(&b, 0, sizeof b);
	o.ep = kvc_engine_default_params();
	o.ep.notice = progress_notice;	/* why --device auto runs on the CPU */
	o.ep.kernels = cli_kernels();
	o.set = conv_default_settings();
	o.parallel = 4;
	o.n_predict = 256;
	rc = parse_args(argc, argv, &o);
	if (rc < 0 && o.model == NULL)
		rc = usage("no model given (-m FILE)", NULL);
	if (rc < 0 && o.in == NULL)
		rc = usage("no input given (-f PROMPTS.jsonl, - for standard input)", NULL);
	if (rc < 0 && read_input(o.in, &in) != 0)
		rc = 1;
	if (rc < 0 && eng_open(&b.e, o.model, &o.ep, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: batch: %s\n", err);
		rc = 1;
	}
	if (rc < 0) {
		b.o = &o;
		rc = batch_main(&b, &o, &in);
	}
	for (int i = 0; i < b.n_req; i++)
		batch_req_free(&b.reqs[i]);
	free(b.reqs);
	for (int k = 0; b.seq != NULL && k < b.n_slot; k++)
		eng_seq_free(b.seq[k]);
	free(b.seq);
	free(b.slot);
	kvc_buf_free(&b.piece);
	kvc_buf_free(&b.line);
	kvc_buf_free(&in);
	eng_close(b.e);
	return rc;
}
