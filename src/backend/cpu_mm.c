/*
 * cpu_mm.c: the CPU backend's matrix products, threads splitting a
 * product's output rows (cpu_matmul), through the context's kernel table
 * (c->kern, src/kern): the packed copy cpu_pack.c made, the int8-activation
 * kernels (the input rounded once per product, cpu_act_prep), or float
 * activations. The layers (cpu.c) and the experts (cpu_moe.c) both run their
 * products here.
 */
#include "cpu_arch.h"
#include "cpu_int.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "threadpool.h"

#include <stdint.h>

/* A job's rows in chunks, handed out by mm_run. */
struct mm_split {
	const struct mm_job *j;
	const struct kern *k;	/* the context's kernel table */
	int64_t chunk;		/* rows per chunk */
	int n_chunk[3];		/* chunks of each task (swiglu: of the gate/up pair, in [0]) */
	int next;		/* the next chunk not yet taken, over all tasks */
};

void
cpu_mm_rows(const struct kern *k, const struct mm_job *j, int i, int64_t r0, int64_t r1)
{
	const struct kvc_weight *w = j->t[i].w;

	if (j->pk[i] != NULL)	/* r0 is a multiple of Q_PACK_ROWS (mm_chunks) */
		kern_matmul_packed(k, w->type, j->pk[i], j->xq, j->n_tok, j->n_in, j->t[i].y,
		    w->n_out, r0 / Q_PACK_ROWS, (r1 + Q_PACK_ROWS - 1) / Q_PACK_ROWS);
	else if (j->xq != NULL && q_act_supported(w->type))
		kern_matmul_act(k, w->type, w->data, w->row_bytes, j->xq,
		    j->n_tok, j->n_in, j->t[i].y, w->n_out, r0, r1);
	else
		kern_matmul(k, w->type, w->data, w->row_bytes, j->x, j->n_tok,
		    j->n_in, j->t[i].y, w->n_out, r0, r1);
}

/*
 * The threads take chunks of rows from a shared counter (one atomic add per
 * chunk) rather than fixed slices: a thread that starts late (the workers
 * wake after the caller has begun) or is slowed by other work on the machine
 * leaves its rows to the others, so the threads finish a product together
 * instead of the first ones waiting for the last. A row's result does not
 * depend on which thread computed it or on the chunk it was in.
 */
static void
mm_run(void *arg, int ith, int nth)
{
	struct mm_split *sp = arg;
	const struct mm_job *j = sp->j;
	int c, i, tok, nt = j->swiglu ? 1 : j->n_task;

	(void)ith;
	(void)nth;
	for (;;) {
		c = __atomic_fetch_add(&sp->next, 1, __ATOMIC_RELAXED);
		for (i = 0; i < nt && c >= sp->n_chunk[i]; i++)
			c -= sp->n_chunk[i];
		if (i == nt)
			return;
		int64_t n = j->t[i].w->n_out, r0 = c * sp->chunk;
		int64_t r1 = r0 + sp->chunk < n ? r0 + sp->chunk : n;
		if (!j->swiglu) {
			cpu_mm_rows(sp->k, j, i, r0, r1);
			continue;
		}
		cpu_mm_rows(sp->k, j, 0, r0, r1);
		cpu_mm_rows(sp->k, j, 1, r0, r1);
		for (tok = 0; tok < j->n_tok; tok++)
			cpu_gate_act(sp->k, j->t[0].y + tok * n, j->t[1].y + tok * n, r0, r1, j->gelu);
	}
}

/*
 * Rows per chunk: about MM_CHUNKS chunks per thread over all of a job's
 * rows, a multiple of Q_PACK_ROWS (16: a packed matrix's groups, and a
 * multiple of the kernels' row tiles) and at least 16.
 */
#define MM_CHUNKS 8

static void
mm_chunks(struct mm_split *sp, const struct mm_job *j, int nth)
{
	int64_t rows = 0, cs;
	int i, nt = j->swiglu ? 1 : j->n_task;

	for (i = 0; i < nt; i++)
		rows += j->t[i].w->n_out;
	cs = nth == 1 ? rows : (rows + (int64_t)nth * MM_CHUNKS - 1) / ((int64_t)nth * MM_CHUNKS);
	cs = (cs + Q_PACK_ROWS - 1) / Q_PACK_ROWS * Q_PACK_ROWS;
	sp->j = j;
	sp->chunk = cs < 16 ? 16 : cs;
	for (i = 0; i < 3; i++)
		sp->n_chunk[i] = i < nt ? (int)((j->t[i].w->n_out + sp->chunk - 1) / sp->chunk) : 0;
	sp->next = 0;
}

struct prep_job {
	const struct kern *k;
	const float *x;		/* (n_tok, n_in) */
	void *xq;		/* (n_tok) x q_act_bytes(n_in) */
	int n_tok;
	int64_t n_in;
};

/* Threads split the tokens; each token's row is rounded independently. */
static void
prep_run(void *arg, int ith, int nth)
{
	const struct prep_job *p = arg;
	int t0 = (int)((int64_t)p->n_tok * ith / nth), t1 = (int)((int64_t)p->n_tok * (ith + 1) / nth);
	size_t ab = q_act_bytes(p->n_in);
	int t;

	for (t = t0; t < t1; t++)
		p->k->act_prepare(p->x + (size_t)t * p->n_in, p->n_in, (char *)p->xq + (size_t)t * ab);
}

void
cpu_act_prep(struct cpu_ctx *c, const float *x, void *xq, int n_tok, int64_t n_in)
{
	struct prep_job p = { c->kern, x, xq, n_tok, n_in };

	/* one row is a few microseconds: not worth waking the workers */
	if (n_tok == 1)
		prep_run(&p, 0, 1);
	else
		tp_run(c->pool, prep_run, &p);
}

void
cpu_matmul(struct cpu_ctx *c, struct mm_job *j)
{
	struct mm_split sp;
	int i;

	j->n_in = j->t[0].w->n_in;
	j->xq = NULL;
	for (i = 0; i < j->n_task; i++) {
		j->pk[i] = cpu_pack_find(c, j->t[i].w);
		if (q_act_supported(j->t[i].w->type))
			j->xq = c->xq;
	}
	if (j->xq != NULL)
		cpu_act_prep(c, j->x, c->xq, j->n_tok, j->n_in);
	mm_chunks(&sp, j, tp_size(c->pool));
	sp.k = c->kern;
	tp_run(c->pool, mm_run, &sp);
}
