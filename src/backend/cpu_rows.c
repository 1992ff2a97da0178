/*
 * cpu_rows.c: the per-token steps of a layer between its matrix products
 * (cpu.c): the block input norms; biases, per-head Q/K norms, RoPE and the
 * K/V stores after the Q/K/V products; the residual additions with gemma's
 * post-norms. Each token's row is computed alone by the same code, so the
 * threads split a chunk's tokens between them: on a 512-token prefill of
 * Gemma 3 270M these steps ran on one thread while the other waited, about
 * 4% of the single-thread time. One or a few tokens (decode) stay on the
 * calling thread: waking a worker would cost more than the step.
 */
#include "backend.h"
#include "cpu_arch.h"
#include "cpu_int.h"
#include "threadpool.h"

#include <math.h>

/* Tokens below which a step runs on the calling thread alone. */
#define ROWS_MIN_SPLIT 4

void
cpu_norm(const struct cpu_ctx *c, float *y, const float *x, const float *w, const float *b)
{
	if (c->hp.layer_norm)
		cpu_layernorm(y, x, w, b, c->hp.n_embd, c->hp.rms_eps);
	else
		c->kern->rmsnorm(y, x, w, c->hp.n_embd, c->hp.rms_eps);
}

/* A step over a chunk's tokens; see cpu_rows_qkv and cpu_rows_residual. */
struct rows_job {
	struct cpu_ctx *c;
	struct cpu_kv *const *kv;
	const int *pos;
	int il, n;
	bool add;			/* residual: x += xb, xb first given bias and post */
	const float *bias, *post;
	const float *nw, *nb;		/* then xb = norm(x), when nw is not NULL */
};

static void
rows_split(const struct rows_job *j, int ith, int nth, int *t0, int *t1)
{
	*t0 = (int)((int64_t)j->n * ith / nth);
	*t1 = (int)((int64_t)j->n * (ith + 1) / nth);
}

static void
rows_run(struct cpu_ctx *c, tp_fn fn, struct rows_job *j)
{
	if (j->n < ROWS_MIN_SPLIT)
		fn(j, 0, 1);
	else
		tp_run(c->pool, fn, j);
}

static void
qkv_run(void *arg, int ith, int nth)
{
	const struct rows_job *j = arg;
	struct cpu_ctx *c = j->c;
	const struct kvc_hparams *hp = &c->hp;
	const struct cpu_vecs *v = &c->vecs[j->il];
	const float *cs_all = c->rope_cs + (model_layer_swa(hp, j->il) ?
	    (size_t)c->cap_tok * hp->rope_dim : 0);
	int hd = hp->head_dim, t, t0, t1, h, i;

	rows_split(j, ith, nth, &t0, &t1);
	for (t = t0; t < t1; t++) {
		float *q = c->q + (size_t)t * c->q_dim, *k = c->k + (size_t)t * c->kv_dim;
		float *vv = c->v + (size_t)t * c->kv_dim;
		const float *cs = cs_all + (size_t)t * hp->rope_dim;
		struct cpu_kv *kv = j->kv[t];
		int slot = cpu_kv_slot(kv, j->il, j->pos[t]);

		if (v->bq) {
			for (i = 0; i < c->q_dim; i++)
				q[i] += v->bq[i];
			for (i = 0; i < c->kv_dim; i++) {
				k[i] += v->bk[i];
				vv[i] += v->bv[i];
			}
		}
		for (h = 0; h < hp->n_head; h++) {
			if (v->q_norm)
				c->kern->rmsnorm(q + h * hd, q + h * hd, v->q_norm, hd, hp->rms_eps);
			cpu_rope(q + h * hd, cs, hp->rope_dim, hp->rope_neox);
		}
		for (h = 0; h < hp->n_head_kv; h++) {
			if (v->k_norm)
				c->kern->rmsnorm(k + h * hd, k + h * hd, v->k_norm, hd, hp->rms_eps);
			cpu_rope(k + h * hd, cs, hp->rope_dim, hp->rope_neox);
		}
		cpu_kv_store_row(c, kv, kv->k[j->il], slot, k, c->kv_dim);
		cpu_kv_store_row(c, kv, kv->v[j->il], slot, vv, c->kv_dim);
	}
}

void
cpu_rows_qkv(struct cpu_ctx *c, struct cpu_kv *const *kv, const int *pos, int il, int n)
{
	struct rows_job j = { c, kv, pos, il, n, false, NULL, NULL, NULL, NULL };

	rows_run(c, qkv_run, &j);
}

static void
residual_run(void *arg, int ith, int nth)
{
	const struct rows_job *j = arg;
	struct cpu_ctx *c = j->c;
	int E = c->hp.n_embd, t, t0, t1, i;

	rows_split(j, ith, nth, &t0, &t1);
	for (t = t0; t < t1; t++) {
		float *x = c->x + (size_t)t * E, *xb = c->xb + (size_t)t * E;

		if (j->add) {
			if (j->bias != NULL)
				for (i = 0; i < E; i++)
					xb[i] += j->bias[i];
			if (j->post != NULL)
				c->kern->rmsnorm(xb, xb, j->post, E, c->hp.rms_eps);
			for (i = 0; i < E; i++)
				x[i] += xb[i];
		}
		if (j->nw != NULL)
			cpu_norm(c, xb, x, j->nw, j->nb);
	}
}

void
cpu_rows_residual(struct cpu_ctx *c, int n, bool add, const float *bias, const float *post,
    const float *nw, const float *nb)
{
	struct rows_job j = { c, NULL, NULL, 0, n, add, bias, post, nw, nb };

	rows_run(c, residual_run, &j);
}
