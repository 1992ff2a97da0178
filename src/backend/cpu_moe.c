/*
 * cpu_moe.c: the feed-forward block of a mixture-of-experts layer on the
 * CPU (llama.cpp's build_moe_ffn for llama, qwen2moe, qwen3moe, gpt-oss,
 * glm4moe).
 *
 * Per token the router's logits (ffn_gate_inp, one product) go through a
 * softmax (glm4moe: a sigmoid each); the n_expert_used largest
 * probabilities (glm4moe: plus the layer's exp_probs_b, which steers only
 * the choice) pick the experts (ties: the lower index), and their
 * probabilities, renormalised to sum 1 when the architecture says so
 * (hp.expert_norm), then times hp.expert_scale, weight the experts' outputs.
 *
 * Execution: the batch's (token, rank) pairs are grouped by expert, each
 * expert's input rows gathered into one contiguous block, and the threads
 * take (expert, chunk of rows) items of one shared list: an item runs its
 * rows of the expert's gate and up (then SwiGLU) over all of that expert's
 * tokens as one tile, then, in a second list, its rows of down. Only the
 * experts some token selected are read, and each of their rows once per
 * batch: decode reads n_expert_used experts' rows, prefill each selected
 * expert's rows once for all its tokens. The experts stay in the file's
 * mapping in their stored type (model_expert views), never copied, except
 * the stacks of types the kernel table packs: each expert packed the
 * first time a token chooses it (cpu_pack_experts, before the products
 * that read it), the file's pages handed back (cpu_pack.c's
 * packs_experts), each expert's rows whole groups of the copy.
 *
 * Batch independence: every (row, token) result of the kernels is the same
 * whatever tokens share the call (quant.h), each gathered row is rounded
 * to int8 alone, and a token's outputs are summed in the order of its
 * ranks, so a token's result is bitwise the same in any batch
 * (tests/unit/test_moe.c checks prefill against one-token decode).
 *
 * Shared expert (qwen2moe, glm4moe): a dense SwiGLU FFN every token runs,
 * its output times sigmoid(ffn_gate_inp_shexp . x) where the file has that
 * gate (qwen2moe), added after the routed experts.
 *
 * gpt-oss (hp.gpt_oss): the router's logits get their bias, the largest
 * n_expert_used logits are chosen and weighted by the softmax over them
 * alone; gate, up and down get each expert's bias, and the activation is the
 * clamped SwiGLU (model.h). The biases are read to floats once (bias).
 */
#include "cpu_arch.h"
#include "cpu_int.h"
#include "quant/quant.h"
#include "threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Scratch for cap tokens (cap * n_expert_used grouped rows). */
struct cpu_moe {
	int cap;
	float *logit;		/* (cap, n_expert) router logits, then probabilities */
	float *score;		/* (n_expert) a token's probabilities + exp_probs_b (glm4moe) */
	float *probs_b;		/* (n_expert) the layer's exp_probs_b (glm4moe) */
	int *sel;		/* (cap, n_used) the selected experts, by rank */
	float *wt;		/* (cap, n_used) their weights */
	int *row;		/* (cap, n_used) the grouped row of (token, rank) */
	int *count, *first;	/* (n_expert) rows of each expert, its first grouped row */
	int *active;		/* (n_expert) the experts with rows, ascending */
	float *x;		/* (cap * n_used, n_embd) grouped inputs */
	float *g, *u;		/* (cap * n_used, n_ff_exp) gate (then SwiGLU), up */
	float *y;		/* (cap * n_used, n_embd) expert outputs */
	void *xq;		/* (cap * n_used) x q_act_bytes(max(n_embd, n_ff_exp)) */
	float *sh;		/* (cap, n_embd) the shared expert's output */
	float *shg;		/* (n_embd) the shared expert's gate vector */
	float *bias;		/* gpt-oss, per layer: router (n_expert), then per expert gate,
				 * up (n_ff_exp each) and down (n_embd) biases; else NULL */
};

void
cpu_moe_free(struct cpu_ctx *c)
{
	struct cpu_moe *mo = c->moe;

	if (mo == NULL)
		return;
	free(mo->logit);
	free(mo->score);
	free(mo->probs_b);
	free(mo->sel);
	free(mo->wt);
	free(mo->row);
	free(mo->count);
	free(mo->first);
	free(mo->active);
	free(mo->x);
	free(mo->g);
	free(mo->u);
	free(mo->y);
	free(mo->xq);
	free(mo->sh);
	free(mo->shg);
	free(mo->bias);
	free(mo);
	c->moe = NULL;
}

static int64_t
moe_act_in(const struct kvc_hparams *hp)
{
	int64_t n = hp->n_embd > hp->n_ff_exp ? hp->n_embd : hp->n_ff_exp;

	return (n + 31) / 32 * 32;
}

/* Floats of one layer's biases in cpu_moe.bias. */
static size_t
bias_floats(const struct kvc_hparams *hp)
{
	return (size_t)hp->n_expert * (1 + 2 * (size_t)hp->n_ff_exp + (size_t)hp->n_embd);
}

/* Layer il's router bias; expert e's gate, up and down biases follow at layer_bias(il, e). */
static float *
router_bias(const struct cpu_ctx *c, int il)
{
	return c->moe->bias + (size_t)il * bias_floats(&c->hp);
}

static float *
expert_bias(const struct cpu_ctx *c, int il, int e)
{
	const struct kvc_hparams *hp = &c->hp;

	return router_bias(c, il) + hp->n_expert + (size_t)e * (2 * (size_t)hp->n_ff_exp + hp->n_embd);
}

/* Every layer's biases to floats (block size 1 types, model_load checked). */
static void
read_biases(struct cpu_ctx *c)
{
	const struct kvc_hparams *hp = &c->hp;
	int F = hp->n_ff_exp, E = hp->n_embd;

	for (int il = 0; il < hp->n_layer; il++) {
		const struct kvc_layer_weights *lw = &c->m->layers[il];

		q_dequant_row(lw->gate_inp_b.type, lw->gate_inp_b.data, router_bias(c, il), hp->n_expert);
		for (int e = 0; e < hp->n_expert; e++) {
			float *b = expert_bias(c, il, e);

			q_dequant_row(lw->gate_exps_b.type, (const char *)lw->gate_exps_b.data +
			    (size_t)e * lw->gate_exps_b.row_bytes, b, F);
			q_dequant_row(lw->up_exps_b.type, (const char *)lw->up_exps_b.data +
			    (size_t)e * lw->up_exps_b.row_bytes, b + F, F);
			q_dequant_row(lw->down_exps_b.type, (const char *)lw->down_exps_b.data +
			    (size_t)e * lw->down_exps_b.row_bytes, b + 2 * F, E);
		}
	}
}

int
cpu_moe_reserve(struct cpu_ctx *c, int n_tok, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->hp;
	struct cpu_moe *mo;
	size_t t = (size_t)n_tok, k = (size_t)hp->n_expert_used, ne = (size_t)hp->n_expert;
	size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp;

	if (hp->n_expert == 0 || (c->moe != NULL && c->moe->cap >= n_tok))
		return 0;
	cpu_moe_free(c);
	mo = c->moe = calloc(1, sizeof *mo);
	if (mo == NULL)
		goto oom;
	mo->logit = malloc(t * ne * sizeof *mo->logit);
	mo->score = malloc(ne * sizeof *mo->score);
	mo->probs_b = malloc(ne * sizeof *mo->probs_b);
	mo->sel = malloc(t * k * sizeof *mo->sel);
	mo->wt = malloc(t * k * sizeof *mo->wt);
	mo->row = malloc(t * k * sizeof *mo->row);
	mo->count = malloc(ne * sizeof *mo->count);
	mo->first = malloc(ne * sizeof *mo->first);
	mo->active = malloc(ne * sizeof *mo->active);
	mo->x = malloc(t * k * E * sizeof *mo->x);
	mo->g = malloc(t * k * F * sizeof *mo->g);
	mo->u = malloc(t * k * F * sizeof *mo->u);
	mo->y = malloc(t * k * E * sizeof *mo->y);
	mo->xq = malloc(t * k * q_act_bytes(moe_act_in(hp)));
	mo->sh = malloc(t * E * sizeof *mo->sh);
	mo->shg = malloc(E * sizeof *mo->shg);
	if (hp->gpt_oss)
		mo->bias = malloc((size_t)hp->n_layer * bias_floats(hp) * sizeof *mo->bias);
	if (!mo->logit || !mo->score || !mo->probs_b || !mo->sel || !mo->wt || !mo->row || !mo->count ||
	    !mo->first || !mo->active || !mo->x || !mo->g || !mo->u || !mo->y || !mo->xq || !mo->sh || !mo->shg ||
	    (hp->gpt_oss && mo->bias == NULL))
		goto oom;
	if (hp->gpt_oss)
		read_biases(c);
	mo->cap = n_tok;
	return 0;
oom:
	cpu_moe_free(c);
	kvc_err(err, errlen, "out of memory for the experts of a batch of %d tokens", n_tok);
	return KVC_ENOMEM;
}

/*
 * Token t's experts from its router logits p: softmax over all experts (or
 * a sigmoid each), the n_used largest probabilities (plus bias b when not
 * NULL, into sc) in descending order, their weights.
 */
static void
route(const struct kvc_hparams *hp, float *p, const float *b, float *sc, int *sel, float *wt)
{
	int ne = hp->n_expert, k = hp->n_expert_used, e, r, i;
	float mx = -INFINITY, sum = 0;
	const float *s = p;

	/* gpt-oss chooses by the logits themselves; the others by their softmax or sigmoids */
	for (e = 0; e < ne && hp->expert_sigmoid; e++)
		p[e] = 1.0f / (1.0f + expf(-p[e]));
	for (e = 0; e < ne && !hp->gpt_oss && !hp->expert_sigmoid; e++)
		mx = p[e] > mx ? p[e] : mx;
	for (e = 0; e < ne && !hp->gpt_oss && !hp->expert_sigmoid; e++)
		sum += p[e] = expf(p[e] - mx);
	for (e = 0; e < ne && !hp->gpt_oss && !hp->expert_sigmoid; e++)
		p[e] /= sum;
	if (b != NULL) {
		for (e = 0; e < ne; e++)
			sc[e] = p[e] + b[e];
		s = sc;
	}
	/* insertion into the sorted top k: strictly larger moves up, so ties keep the lower index first */
	for (r = 0; r < k; r++)
		sel[r] = -1;
	for (e = 0; e < ne; e++) {
		for (r = k; r > 0 && (sel[r - 1] < 0 || s[e] > s[sel[r - 1]]); r--)
			;
		if (r == k)
			continue;
		for (i = k - 1; i > r; i--)
			sel[i] = sel[i - 1];
		sel[r] = e;
	}
	if (hp->gpt_oss) {
		/* softmax over the chosen logits (sel[0] holds the largest) */
		for (sum = 0, r = 0; r < k; r++)
			sum += wt[r] = expf(p[sel[r]] - p[sel[0]]);
		for (r = 0; r < k; r++)
			wt[r] /= sum;
		return;
	}
	for (sum = 0, r = 0; r < k; r++)
		sum += wt[r] = p[sel[r]];
	if (hp->expert_norm) {
		/* llama.cpp clamps the sum to F16's smallest normal */
		if (sum < 6.103515625e-5f)
			sum = 6.103515625e-5f;
		for (r = 0; r < k; r++)
			wt[r] /= sum;
	}
	/* 0 (absent) and 1 leave them, as llama.cpp */
	for (r = 0; r < k && hp->expert_scale != 0.0f && hp->expert_scale != 1.0f; r++)
		wt[r] *= hp->expert_scale;
}

static void
add_bias(float *y, const float *b, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		y[r] += b[r];
}

/* gpt-oss's clamped SwiGLU (ggml's swiglu_oai), element by element. */
static void
oai_act(float *g, const float *u, int64_t r0, int64_t r1, float alpha, float limit)
{
	for (int64_t r = r0; r < r1; r++) {
		float x = g[r] < limit ? g[r] : limit;
		float y = u[r] < -limit ? -limit : u[r] > limit ? limit : u[r];

		g[r] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
	}
}

/* The (expert, chunk of rows) items of one phase of the experts. */
struct moe_job {
	struct cpu_ctx *c;
	const struct kvc_layer_weights *lw;
	int il;
	bool down;		/* phase 2: down over the SwiGLU rows; else gate and up */
	int n_active;
	int64_t rows;		/* rows of each expert's matrix in this phase */
	int64_t chunk;		/* rows per item */
	int n_chunk;		/* items per expert */
	bool act;		/* mo->xq holds the rows as int8 activations */
	int next;
};

static void
moe_run(void *arg, int ith, int nth)
{
	struct moe_job *j = arg;
	struct cpu_ctx *c = j->c;
	struct cpu_moe *mo = c->moe;
	const struct kvc_hparams *hp = &c->hp;
	int64_t E = hp->n_embd, F = hp->n_ff_exp, n_in = j->down ? F : E;
	size_t ab = q_act_bytes(n_in);
	int it, tok;

	(void)ith;
	(void)nth;
	while ((it = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_active * j->n_chunk) {
		int e = mo->active[it / j->n_chunk], f = mo->first[e], n = mo->count[e];
		int64_t r0 = (int64_t)(it % j->n_chunk) * j->chunk;
		int64_t r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
		struct kvc_weight w0, w1;
		struct mm_job mj;

		if (j->down) {
			w0 = model_expert(c->m, &j->lw->down_exps, e);
			mj = (struct mm_job){ mo->g + (size_t)f * F, { { &w0, mo->y + (size_t)f * E } },
			    1, n, false, false, n_in, NULL, { NULL } };
		} else {
			w0 = model_expert(c->m, &j->lw->gate_exps, e);
			w1 = model_expert(c->m, &j->lw->up_exps, e);
			mj = (struct mm_job){ mo->x + (size_t)f * E, { { &w0, mo->g + (size_t)f * F },
			    { &w1, mo->u + (size_t)f * F } }, 2, n, true, false, n_in, NULL, { NULL } };
		}
		if (j->act) {
			mj.xq = (const char *)mo->xq + (size_t)f * ab;
			/* packed stacks (cpu_pack.c): expert e's groups of their copy */
			mj.pk[0] = cpu_pack_expert(c, j->down ? &j->lw->down_exps : &j->lw->gate_exps, e);
			if (!j->down)
				mj.pk[1] = cpu_pack_expert(c, &j->lw->up_exps, e);
		}
		cpu_mm_rows(c->kern, &mj, 0, r0, r1);
		if (j->down) {
			if (hp->gpt_oss)
				for (tok = 0; tok < n; tok++)
					add_bias(mj.t[0].y + (size_t)tok * E, expert_bias(c, j->il, e) + 2 * F, r0, r1);
			continue;
		}
		cpu_mm_rows(c->kern, &mj, 1, r0, r1);
		for (tok = 0; tok < n; tok++) {
			float *g = mj.t[0].y + (size_t)tok * F, *u = mj.t[1].y + (size_t)tok * F;

			if (hp->gpt_oss) {
				add_bias(g, expert_bias(c, j->il, e), r0, r1);
				add_bias(u, expert_bias(c, j->il, e) + F, r0, r1);
				oai_act(g, u, r0, r1, hp->swiglu_alpha, hp->swiglu_limit);
			} else {
				cpu_gate_act(c->kern, g, u, r0, r1, false);
			}
		}
	}
}

/* One phase: the active experts' rows in items of about equal size, threads taking them in turn. */
static void
run_phase(struct cpu_ctx *c, const struct kvc_layer_weights *lw, bool down, int n_active,
    int n_rows)
{
	struct cpu_moe *mo = c->moe;
	const struct kvc_hparams *hp = &c->hp;
	int nth = tp_size(c->pool);
	int64_t rows = down ? hp->n_embd : hp->n_ff_exp, n_in = down ? hp->n_ff_exp : hp->n_embd;
	enum gguf_dtype t0 = down ? lw->down_exps.type : lw->gate_exps.type;
	enum gguf_dtype t1 = down ? t0 : lw->up_exps.type;
	struct moe_job j = { c, lw, (int)(lw - c->m->layers), down, n_active, rows, 0, 0, false, 0 };
	int64_t per = (rows * n_active + (int64_t)nth * 8 - 1) / ((int64_t)nth * 8);

	j.act = q_act_supported(t0) || q_act_supported(t1);
	if (j.act)
		cpu_act_prep(c, down ? mo->g : mo->x, mo->xq, n_rows, n_in);
	/* multiples of 16 rows, as cpu_matmul's chunks */
	j.chunk = nth == 1 ? rows : (per + 15) / 16 * 16;
	if (j.chunk < 16)
		j.chunk = 16;
	if (j.chunk > rows)
		j.chunk = rows;
	j.n_chunk = (int)((rows + j.chunk - 1) / j.chunk);
	if (n_active * j.n_chunk == 1)
		moe_run(&j, 0, 1);
	else
		tp_run(c->pool, moe_run, &j);
}

/* The shared expert over xb into mo->sh, times its sigmoid gate when there is one (qwen2moe). */
static void
shared_expert(struct cpu_ctx *c, const struct kvc_layer_weights *lw, int n)
{
	struct cpu_moe *mo = c->moe;
	int E = c->hp.n_embd, t, i;
	struct mm_job j = { c->xb, { { &lw->gate_shexp, c->hb }, { &lw->up_shexp, c->hb2 } },
	    2, n, true, false, 0, NULL, { NULL } };

	cpu_matmul(c, &j);
	j = (struct mm_job){ c->hb, { { &lw->down_shexp, mo->sh } }, 1, n, false, false, 0, NULL, { NULL } };
	cpu_matmul(c, &j);
	if (lw->gate_inp_shexp.data == NULL)
		return;
	q_dequant_row(lw->gate_inp_shexp.type, lw->gate_inp_shexp.data, mo->shg, E);
	for (t = 0; t < n; t++) {
		const float *x = c->xb + (size_t)t * E;
		float *s = mo->sh + (size_t)t * E, d = 0, g;

		for (i = 0; i < E; i++)
			d += mo->shg[i] * x[i];
		g = 1.0f / (1.0f + expf(-d));
		for (i = 0; i < E; i++)
			s[i] *= g;
	}
}

int
cpu_moe_ffn(struct cpu_ctx *c, int il, int n)
{
	const struct kvc_hparams *hp = &c->hp;
	const struct kvc_layer_weights *lw = &c->m->layers[il];
	struct cpu_moe *mo = c->moe;
	int E = hp->n_embd, ne = hp->n_expert, k = hp->n_expert_used, t, r, e, n_active = 0, at;
	struct mm_job j = { c->xb, { { &lw->gate_inp, mo->logit } }, 1, n, false, false, 0, NULL, { NULL } };

	cpu_matmul(c, &j);
	memset(mo->count, 0, (size_t)ne * sizeof *mo->count);
	for (t = 0; t < n && hp->gpt_oss; t++)
		add_bias(mo->logit + (size_t)t * ne, router_bias(c, il), 0, ne);
	if (lw->exp_probs_b.data != NULL)
		q_dequant_row(lw->exp_probs_b.type, lw->exp_probs_b.data, mo->probs_b, ne);
	for (t = 0; t < n; t++) {
		route(hp, mo->logit + (size_t)t * ne, lw->exp_probs_b.data ? mo->probs_b : NULL, mo->score,
		    mo->sel + (size_t)t * k, mo->wt + (size_t)t * k);
		for (r = 0; r < k; r++)
			mo->count[mo->sel[(size_t)t * k + r]]++;
	}
	/* rows grouped by expert, ascending; within an expert, by token */
	for (e = 0, at = 0; e < ne; e++) {
		mo->first[e] = at;
		at += mo->count[e];
		if (mo->count[e] > 0)
			mo->active[n_active++] = e;
		mo->count[e] = 0;
	}
	for (t = 0; t < n; t++)
		for (r = 0; r < k; r++) {
			e = mo->sel[(size_t)t * k + r];
			mo->row[(size_t)t * k + r] = mo->first[e] + mo->count[e]++;
			memcpy(mo->x + (size_t)mo->row[(size_t)t * k + r] * E, c->xb + (size_t)t * E,
			    (size_t)E * sizeof(float));
		}
	if (!cpu_pack_experts(c, lw, mo->active, n_active))
		return KVC_EINTR;	/* a prefill stopped: no product may read an unpacked expert */
	run_phase(c, lw, false, n_active, n * k);
	run_phase(c, lw, true, n_active, n * k);
	if (hp->n_ff_shexp > 0)
		shared_expert(c, lw, n);
	/* each token's sum in the order of its ranks, then the shared expert */
	for (t = 0; t < n; t++) {
		float *o = c->xb + (size_t)t * E;

		for (r = 0; r < k; r++) {
			const float *y = mo->y + (size_t)mo->row[(size_t)t * k + r] * E;
			float w = mo->wt[(size_t)t * k + r];

			for (int i = 0; i < E; i++)
				o[i] = r == 0 ? w * y[i] : o[i] + w * y[i];
		}
		if (hp->n_ff_shexp > 0)
			for (int i = 0; i < E; i++)
				o[i] += mo->sh[(size_t)t * E + i];
	}
	return KVC_OK;
}
