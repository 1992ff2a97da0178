/*
 * cpu_pack.c: the CPU backend's packed copies of weight matrices.
 *
 * Where the kernel table has a packed kernel for a matrix's type
 * (kern_packs: Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4, IQ4_XS in the
 * avx2 and avx512 tables; and the stacks of experts of those types,
 * packs_experts), the matrix is rearranged once,
 * here, when the backend starts, and its products run on the copy: the
 * integer kernel then does several times fewer instructions per
 * multiply-add (quant_pack.c). The copy is the matrix's size, so the
 * file's bytes of a packed matrix must not stay resident beside it: when
 * the model is the file mapped (gguf_mapped), each matrix is read with
 * pread in slices of about 8 MiB into one slice buffer and packed from
 * there, never through the mapping, and its range of the mapping is then
 * released (gguf_release: unmapped and kept apart from its neighbours'
 * large mappings, still readable from the page cache), matrix by matrix,
 * so the peak is the copies plus one slice. The embedding rows of a tied
 * output matrix, which is packed, are read the same way, one row per
 * token (cpu_pack_embd_row). The slices report the load's progress and
 * stop it at the caller's interrupt flag. Stacks of experts are packed an
 * expert at a time, as the tokens first choose them (cpu_pack_experts).
 * The copies are kept in a table sorted by weight address, looked up once
 * per product.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* SCHED_IDLE */
#endif
#include "cpu_int.h"
#include "quant/quant.h"
#include "threadpool.h"

#include "gguf/gguf.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct cpu_pack {
	const struct kvc_weight *w;
	void *p;		/* q_pack_bytes(w) bytes, 64-byte aligned */
	unsigned char *ready;	/* a stack of experts: which experts p holds yet (cpu_pack_experts); else NULL */
};

/* An expert of a stack to pack: its rows of pk->w into its groups of pk->p. */
struct xpack_item {
	const struct cpu_pack *pk;
	int e;
	bool done;	/* packed (not when the forward stopped first) */
};

/*
 * Groups [0, ng) of the rows at W (n_out of them) into P, the threads
 * splitting them. With f, W is the slice buffer and each thread first
 * reads its own groups' rows into it from the mapping's range at src, so
 * the copies out of the page cache run in parallel as the packing does
 * (a read that fails sets failed; the caller then reads the slice again
 * alone, for the error's message).
 */
struct pack_job {
	enum gguf_dtype type;
	const void *W;
	size_t row_bytes;
	int64_t n_in, n_out, ng;
	void *P;
	const struct gguf_file *f;
	const char *src;
	int failed;
};

static void
pack_run(void *arg, int ith, int nth)
{
	struct pack_job *j = arg;
	int64_t g0 = j->ng * ith / nth, g1 = j->ng * (ith + 1) / nth;
	int64_t r0 = g0 * Q_PACK_ROWS, r1 = g1 * Q_PACK_ROWS < j->n_out ? g1 * Q_PACK_ROWS : j->n_out;

	if (g0 >= g1)
		return;
	if (j->f != NULL && r0 < r1 &&
	    gguf_pread(j->f, j->src + (size_t)r0 * j->row_bytes, (size_t)(r1 - r0) * j->row_bytes,
		(char *)j->W + (size_t)r0 * j->row_bytes, NULL, 0) != KVC_OK) {
		__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
		return;
	}
	q_pack(j->type, j->W, j->row_bytes, j->n_in, j->n_out, j->P, g0, g1);
}

/* A slice's rows are read (and the load's progress told) about 8 MiB at a time. */
#define PACK_SLICE_BYTES ((size_t)8 << 20)

/* What packing the matrices shares: the file, the slice buffer, the progress. */
struct pack_load {
	struct cpu_ctx *c;
	const struct kvc_backend_params *p;
	const struct gguf_file *f;	/* the mapped file the weights are in, or NULL */
	void *buf;			/* a slice's rows read from f */
	size_t buf_bytes;
	uint64_t done;			/* weight bytes handled, for the progress */
	uint64_t total;			/* of done's: the model's bytes read per token, or those packed if more */
};

/*
 * w's rows in slices: each read from the file (pread: the mapping is never
 * touched) into the slice buffer and packed from there into P, at the
 * slice's groups. A memory model is packed where it lies.
 */
static int
pack_matrix(struct pack_load *L, const struct kvc_weight *w, void *P, char *err, size_t errlen)
{
	size_t gb = q_pack_group_bytes(w->type, w->n_in / 32);
	int64_t ng = (w->n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;
	int64_t step = (int64_t)(PACK_SLICE_BYTES / (Q_PACK_ROWS * w->row_bytes)) + 1;
	int rc;

	for (int64_t g = 0; g < ng; g += step) {
		int64_t g1 = g + step < ng ? g + step : ng, r0 = g * Q_PACK_ROWS;
		int64_t r1 = g1 * Q_PACK_ROWS < w->n_out ? g1 * Q_PACK_ROWS : w->n_out;
		const char *rows = (const char *)w->data + (size_t)r0 * w->row_bytes;
		size_t n = (size_t)(r1 - r0) * w->row_bytes;
		struct pack_job j = { w->type, rows, w->row_bytes, w->n_in, r1 - r0, g1 - g,
		    (char *)P + (size_t)g * gb, NULL, NULL, 0 };

		if (L->p && L->p->interrupt && *L->p->interrupt) {
			kvc_err(err, errlen, "interrupted while packing the weights");
			return KVC_EINTR;
		}
		if (L->f != NULL) {
			if (n > L->buf_bytes) {
				free(L->buf);
				L->buf_bytes = 0;
				if ((L->buf = malloc(n)) == NULL) {
					kvc_err(err, errlen, "out of memory for a slice of the weights");
					return KVC_ENOMEM;
				}
				L->buf_bytes = n;
			}
			j.W = L->buf;
			j.f = L->f;
			j.src = rows;
		}
		tp_run(L->c->pool, pack_run, &j);
		if (j.failed) {
			if ((rc = gguf_pread(L->f, rows, n, L->buf, err, errlen)) != KVC_OK)
				return rc;
			j.f = NULL;
			tp_run(L->c->pool, pack_run, &j);
		}
		L->done += n;
		if (L->p && L->p->progress)
			L->p->progress(L->p->progress_arg, L->done, L->total);
	}
	return KVC_OK;
}

static int
by_weight(const void *a, const void *b)
{
	const struct cpu_pack *x = a, *y = b;

	return x->w < y->w ? -1 : x->w > y->w;
}

/*
 * Whether a stack of experts (model_expert) is offered for packing: when
 * each expert is whole groups of 16 rows, so that expert e's copy is groups
 * [e * rows / 16, (e + 1) * rows / 16) of the stack's; cpu_pack_init then
 * takes it where the table has a packed kernel for its type. A prefill's
 * tokens reach each expert a few dozen at a time, and the unpacked tiles
 * run those at half the packed kernel's rate or less (a Q4_K_M qwen3moe
 * fixture's prefill was 0.42x ik_llama.cpp's with its Q4_K/Q6_K experts
 * unpacked). The copy is the file's size or a few per cent more
 * (quant_pack.c: Q4_K 2.8 %, Q5_K 2.3 %, IQ4_XS 1.5 %), and the stack's
 * pages of the file are handed back like any packed matrix's, so each
 * expert is resident once (the copy).
 *
 * An expert is packed the first time a token chooses it
 * (cpu_pack_experts), not at load: packing them all, and the kernel
 * zeroing that many fresh pages, made the qwen3moe fixture's start 3.5-4.0
 * s against 0.5 s with them mapped, longer than llama.cpp's load with its
 * repacking, for experts a short chat may never reach; a first prefill
 * packs the ones it chooses, which is no more work than the load did. The
 * expert's products run only after it is packed, so they always run on the
 * copy, whatever chose it first: the results do not depend on the order
 * the experts were reached in. Stacks of other types stay mapped from the
 * file (cpu_moe.c).
 */
static bool
packs_experts(const struct kvc_model *m, const struct kvc_weight *w)
{
	return w->data != NULL && m->hp.n_expert > 0 && w->n_out % m->hp.n_expert == 0 &&
	    (w->n_out / m->hp.n_expert) % Q_PACK_ROWS == 0;
}

/*
 * Matrices a product reads: per layer Q, K, V, O, gate, up, down, the
 * stacks of experts packs_experts takes (if experts); then the output.
 */
static int
list_matrices(const struct kvc_model *m, const struct kvc_weight **ws, bool experts)
{
	int n = 0;

	for (int il = 0; il < m->hp.n_layer; il++) {
		const struct kvc_layer_weights *l = &m->layers[il];
		const struct kvc_weight *each[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up,
		    &l->w_down, &l->gate_exps, &l->up_exps, &l->down_exps };

		for (size_t i = 0; i < sizeof each / sizeof *each; i++) {
			if (i >= 7 && (!experts || !packs_experts(m, each[i])))
				continue;
			if (ws)
				ws[n] = each[i];
			n++;
		}
	}
	if (ws)
		ws[n] = &m->output;
	return n + 1;
}

/* Whether w is a layer's stack of experts (packed expert by expert, cpu_pack_experts). */
static bool
is_stack(const struct kvc_model *m, const struct kvc_weight *w)
{
	for (int il = 0; il < m->hp.n_layer; il++) {
		const struct kvc_layer_weights *l = &m->layers[il];

		if (w == &l->gate_exps || w == &l->up_exps || w == &l->down_exps)
			return true;
	}
	return false;
}

/*
 * The file's bytes of the matrices of ws the table packs at load (the
 * stacks of experts are packed later), and all their copies' bytes (64-byte
 * aligned), the stacks' included.
 */
static void
pack_sizes(const struct cpu_ctx *c, const struct kvc_weight **ws, int n, uint64_t *file, size_t *copies)
{
	*file = 0;
	*copies = 0;
	for (int i = 0; i < n; i++)
		if (ws[i]->data != NULL && kern_packs(c->kern, ws[i]->type, ws[i]->n_in)) {
			if (!is_stack(c->m, ws[i]))
				*file += (uint64_t)ws[i]->n_out * ws[i]->row_bytes;
			*copies += (q_pack_bytes(ws[i]->type, ws[i]->n_in, ws[i]->n_out) + 63) / 64 * 64;
		}
}

/* pack_limit, or 85 % of the machine's memory (0: not known, no limit) */
static uint64_t
pack_limit(const struct kvc_backend_params *p)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);

	if (p && p->pack_limit > 0)
		return p->pack_limit;
	return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 100 * 85 : 0;
}

static void ahead_start(struct cpu_ctx *c);

/* Rows an expert is read and packed in at a time (about 64 KiB of a Q4_K stack). */
#define XPACK_ROWS (4 * Q_PACK_ROWS)

/*
 * A stack of experts, registered at load and packed expert by expert as
 * the tokens first choose them (cpu_pack_experts): nothing is read yet, and
 * the scratch that reading an expert needs grows to the stack's rows.
 */
static int
stack_init(struct cpu_ctx *c, struct cpu_pack *pk, char *err, size_t errlen)
{
	size_t each = (size_t)XPACK_ROWS * pk->w->row_bytes;

	if ((pk->ready = calloc((size_t)c->m->hp.n_expert, 1)) == NULL) {
		kvc_err(err, errlen, "out of memory for the experts' table");
		return KVC_ENOMEM;
	}
	if (each > c->xpack_each)
		c->xpack_each = each;
	c->n_xtotal += c->m->hp.n_expert;
	return KVC_OK;
}

/*
 * Every expert of the packed stacks now, layer by layer on the pool's threads
 * (kvc_backend_params.pack_experts_now), the load's progress told per layer
 * and its interrupt flag looked at between layers.
 */
static int
pack_every_expert(struct cpu_ctx *c, struct pack_load *L, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int *all;

	if (c->n_xtotal == 0)
		return KVC_OK;
	if ((all = malloc((size_t)hp->n_expert * sizeof *all)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	for (int e = 0; e < hp->n_expert; e++)
		all[e] = e;
	for (int il = 0; il < hp->n_layer; il++) {
		const struct kvc_layer_weights *lw = &c->m->layers[il];
		const struct kvc_weight *st[] = { &lw->gate_exps, &lw->up_exps, &lw->down_exps };

		if (L->p->interrupt && *L->p->interrupt) {
			free(all);
			kvc_err(err, errlen, "interrupted while packing the experts");
			return KVC_EINTR;
		}
		if (lw->gate_inp.data == NULL)
			continue;
		(void)cpu_pack_experts(c, lw, all, hp->n_expert);	/* not a forward: it cannot stop */
		for (int s = 0; s < 3; s++)
			if (cpu_pack_find(c, st[s]) != NULL)
				L->done += q_pack_bytes(st[s]->type, st[s]->n_in, st[s]->n_out);
		if (L->p->progress)
			L->p->progress(L->p->progress_arg, L->done < L->total ? L->done : L->total, L->total);
	}
	free(all);
	return KVC_OK;
}

int
cpu_pack_init(struct cpu_ctx *c, const struct kvc_backend_params *p, char *err, size_t errlen)
{
	int n = list_matrices(c->m, NULL, true), rc = KVC_OK;
	const struct kvc_weight **ws = malloc((size_t)n * sizeof *ws);
	struct pack_load L = { c, p, NULL, NULL, 0, 0, c->m->weight_bytes };
	uint64_t packed, limit = pack_limit(p);
	size_t arena, at = 0;

	if (c->m->file != NULL && gguf_mapped(c->m->file))
		L.f = c->m->file;
	c->packs = calloc((size_t)n, sizeof *c->packs);
	if (ws == NULL || c->packs == NULL) {
		free(ws);
		kvc_err(err, errlen, "out of memory for the packed weights' table");
		return KVC_ENOMEM;
	}
	list_matrices(c->m, ws, true);
	pack_sizes(c, ws, n, &packed, &arena);
	/*
	 * Experts packed are resident whole from the load on; a model bigger
	 * than the machine's memory keeps its stacks mapped instead, where the
	 * chosen experts' pages come and go, rather than being killed for
	 * memory halfway through its load.
	 */
	if (limit > 0 && arena > limit && c->m->hp.n_expert > 0) {
		n = list_matrices(c->m, ws, false);
		pack_sizes(c, ws, n, &packed, &arena);
		c->experts_mapped = true;
	}
	/* packed expert stacks are read whole, more than weight_bytes counts (the active experts) */
	if (packed > L.total)
		L.total = packed;
	/*
	 * One allocation for every copy, in 2 MiB pages where the kernel gives
	 * them (transparent huge pages, asked for: the default setting is
	 * "madvise"): the copies' first touch, while packing, is then one page
	 * fault per 2 MiB instead of 512 (a 3.4 GB qwen3moe fixture's load:
	 * 3.0-3.2 s against 4.0-6.0 s in 4 KiB pages; its decode measured the
	 * same either way).
	 */
	arena = (arena + ((size_t)2 << 20) - 1) / ((size_t)2 << 20) * ((size_t)2 << 20);
	if (arena > 0 && (c->pack_arena = aligned_alloc((size_t)2 << 20, arena)) == NULL) {
		free(ws);
		kvc_err(err, errlen, "out of memory for the packed weights (%.1f MiB)", arena / 1048576.0);
		return KVC_ENOMEM;
	}
#ifdef MADV_HUGEPAGE
	if (arena > 0)
		(void)madvise(c->pack_arena, arena, MADV_HUGEPAGE);	/* a hint: 4 KiB pages work too */
#endif
	for (int i = 0; i < n && rc == KVC_OK; i++) {
		const struct kvc_weight *w = ws[i];
		size_t sz;
		void *pk;

		if (w->data == NULL || !kern_packs(c->kern, w->type, w->n_in))
			continue;
		sz = q_pack_bytes(w->type, w->n_in, w->n_out);
		pk = (char *)c->pack_arena + at;
		at += (sz + 63) / 64 * 64;
		c->packs[c->n_packs++] = (struct cpu_pack){ w, pk, NULL };
		c->pack_bytes += sz;
		if (is_stack(c->m, w))
			rc = stack_init(c, &c->packs[c->n_packs - 1], err, errlen);
		else
			rc = pack_matrix(&L, w, pk, err, errlen);
		/* its pages, if anything read them, now, before the next is packed */
		if (rc == KVC_OK && L.f != NULL)
			gguf_release(L.f, w->data, (size_t)w->n_out * w->row_bytes);
	}
	c->pack_released = L.f != NULL && c->n_packs > 0;
	c->xpack_file = L.f;
	if (rc == KVC_OK && c->xpack_each > 0 &&
	    ((c->xpack_buf = malloc((size_t)tp_size(c->pool) * c->xpack_each)) == NULL ||
	    (c->xpack_items = malloc((size_t)3 * (size_t)c->m->hp.n_expert * sizeof *c->xpack_items)) == NULL)) {
		kvc_err(err, errlen, "out of memory for packing the experts");
		rc = KVC_ENOMEM;
	}
	/* a tied output packed: its rows, the embeddings, are read as needed (cpu_pack_embd_row) */
	if (rc == KVC_OK && L.f != NULL && cpu_pack_find(c, &c->m->output) != NULL &&
	    c->m->output.data == c->m->tok_embd.data &&
	    (c->embd_row = malloc(c->m->tok_embd.row_bytes)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		rc = KVC_ENOMEM;
	}
	free(L.buf);
	free(ws);
	qsort(c->packs, (size_t)c->n_packs, sizeof *c->packs, by_weight);
	if (rc == KVC_OK && p != NULL && p->pack_experts_now)
		rc = pack_every_expert(c, &L, err, errlen);
	if (rc == KVC_OK && p != NULL && p->pack_ahead)
		ahead_start(c);
	return rc;
}

const void *
cpu_pack_expert(const struct cpu_ctx *c, const struct kvc_weight *stack, int e)
{
	const char *p = cpu_pack_find(c, stack);
	int64_t groups = stack->n_out / c->m->hp.n_expert / Q_PACK_ROWS;

	return p == NULL ? NULL : p + (size_t)e * (size_t)groups * q_pack_group_bytes(stack->type, stack->n_in / 32);
}

static struct cpu_pack *
find(const struct cpu_ctx *c, const struct kvc_weight *w)
{
	int lo = 0, hi = c->n_packs;

	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (c->packs[mid].w == w)
			return &c->packs[mid];
		if (c->packs[mid].w < w)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const void *
cpu_pack_find(const struct cpu_ctx *c, const struct kvc_weight *w)
{
	const struct cpu_pack *pk = find(c, w);

	return pk == NULL ? NULL : pk->p;
}

struct xpack_job {
	struct cpu_ctx *c;
	struct xpack_item *it;
	int n;
	int next;
};

/*
 * Expert e of the stack pk: its rows read with pread (the mapping is never
 * touched, as at load) into buf (xpack_each bytes), XPACK_ROWS at a time,
 * and packed from there into its groups of the copy. A read that fails
 * (the file gone bad under us) packs from the mapping instead.
 */
static void
pack_expert(const struct cpu_ctx *c, const struct cpu_pack *pk, int e, char *buf)
{
	const struct kvc_weight *w = pk->w;
	int64_t rows = w->n_out / c->m->hp.n_expert, ng = rows / Q_PACK_ROWS;
	int64_t step = (int64_t)(c->xpack_each / ((size_t)Q_PACK_ROWS * w->row_bytes));
	size_t gb = q_pack_group_bytes(w->type, w->n_in / 32);
	const char *src = (const char *)w->data + (size_t)e * (size_t)rows * w->row_bytes;
	char *dst = (char *)pk->p + (size_t)e * (size_t)ng * gb;

	for (int64_t g = 0; g < ng; g += step) {
		int64_t g1 = g + step < ng ? g + step : ng, n = (g1 - g) * Q_PACK_ROWS;
		const void *W = src + (size_t)g * Q_PACK_ROWS * w->row_bytes;

		if (c->xpack_file != NULL &&
		    gguf_pread(c->xpack_file, W, (size_t)n * w->row_bytes, buf, NULL, 0) == KVC_OK)
			W = buf;
		q_pack(w->type, W, w->row_bytes, w->n_in, n, dst + (size_t)g * gb, 0, g1 - g);
	}
}

/* The pool's threads take the job's experts in turn, each with its own slice of xpack_buf. */
static void
xpack_run(void *arg, int ith, int nth)
{
	struct xpack_job *j = arg;
	char *buf = (char *)j->c->xpack_buf + (size_t)ith * j->c->xpack_each;
	int it;

	(void)nth;
	while ((it = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n) {
		/* each expert is a few milliseconds: the flag is looked at between them */
		if (j->c->fwd_stoppable && *j->c->interrupt)
			continue;
		pack_expert(j->c, j->it[it].pk, j->it[it].e, buf);
		j->it[it].done = true;
	}
}

/* ready[e]: not packed, packed, or being packed (by the thread packing ahead or a forward that took it) */
enum { X_NONE = 0, X_READY = 1, X_AHEAD = 2 };

bool
cpu_pack_experts(struct cpu_ctx *c, const struct kvc_layer_weights *lw, const int *active, int n_active)
{
	const struct kvc_weight *stacks[] = { &lw->gate_exps, &lw->up_exps, &lw->down_exps };
	struct xpack_item *items = c->xpack_items;
	struct xpack_job j = { c, items, 0, 0 };
	int n_done = 0;

	if (__atomic_load_n(&c->n_xready, __ATOMIC_ACQUIRE) == c->n_xtotal)
		return true;
	if (c->xahead_on)
		pthread_mutex_lock(&c->xmu);
	for (int s = 0; s < 3; s++) {
		struct cpu_pack *pk = find(c, stacks[s]);

		for (int a = 0; pk != NULL && pk->ready != NULL && a < n_active; a++) {
			/* one the thread packing ahead has in hand: it finishes it, then waits for us */
			while (pk->ready[active[a]] == X_AHEAD)
				pthread_cond_wait(&c->xcv, &c->xmu);
			if (pk->ready[active[a]] == X_NONE) {
				pk->ready[active[a]] = X_AHEAD;
				items[j.n++] = (struct xpack_item){ pk, active[a], false };
			}
		}
	}
	if (c->xahead_on)
		pthread_mutex_unlock(&c->xmu);
	if (j.n == 0)
		return true;
	if (j.n == 1)
		xpack_run(&j, 0, 1);
	else
		tp_run(c->pool, xpack_run, &j);
	if (c->xahead_on)
		pthread_mutex_lock(&c->xmu);
	/* those a stopped forward left are not packed, as before: a later forward packs them */
	for (int i = 0; i < j.n; i++) {
		items[i].pk->ready[items[i].e] = items[i].done ? X_READY : X_NONE;
		n_done += items[i].done;
	}
	__atomic_add_fetch(&c->n_xready, n_done, __ATOMIC_RELEASE);
	if (c->xahead_on)
		pthread_mutex_unlock(&c->xmu);
	return n_done == j.n;
}

/*
 * The thread packing ahead (kvc_backend_params.pack_ahead): every expert of
 * the packed stacks, layer by layer, one at a time, at the scheduler's
 * idle priority, and never while a forward runs (cpu_pack_hold): it packs
 * in the time a chat waits for its user or a server for its requests, so
 * that a first turn finds its experts packed. It stops at cpu_pack_free.
 */
static void *
xpack_ahead(void *arg)
{
	struct cpu_ctx *c = arg;

#ifdef SCHED_IDLE
	struct sched_param sp = { 0 };

	(void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);	/* a hint: it waits for forwards anyway */
#endif
	for (int i = 0; i < c->n_packs; i++) {
		struct cpu_pack *pk = &c->packs[i];

		for (int e = 0; pk->ready != NULL && e < c->m->hp.n_expert; e++) {
			pthread_mutex_lock(&c->xmu);
			while (c->xhold > 0 && !c->xstop)
				pthread_cond_wait(&c->xcv, &c->xmu);
			if (c->xstop) {
				pthread_mutex_unlock(&c->xmu);
				return NULL;
			}
			if (pk->ready[e] != X_NONE) {
				pthread_mutex_unlock(&c->xmu);
				continue;
			}
			pk->ready[e] = X_AHEAD;
			pthread_mutex_unlock(&c->xmu);
			pack_expert(c, pk, e, c->xahead_buf);
			pthread_mutex_lock(&c->xmu);
			pk->ready[e] = X_READY;
			__atomic_add_fetch(&c->n_xready, 1, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&c->xcv);
			pthread_mutex_unlock(&c->xmu);
		}
	}
	return NULL;
}

void
cpu_pack_hold(struct cpu_ctx *c, bool on)
{
	if (!c->xahead_on)
		return;
	pthread_mutex_lock(&c->xmu);
	c->xhold += on ? 1 : -1;
	if (c->xhold == 0)
		pthread_cond_broadcast(&c->xcv);
	pthread_mutex_unlock(&c->xmu);
}

/* Start the thread packing ahead; without it (no memory, no thread) experts pack as they are chosen. */
static void
ahead_start(struct cpu_ctx *c)
{
	if (c->n_xtotal == 0 || (c->xahead_buf = malloc(c->xpack_each)) == NULL)
		return;
	if (pthread_mutex_init(&c->xmu, NULL) != 0) {
		free(c->xahead_buf);
		c->xahead_buf = NULL;
		return;
	}
	if (pthread_cond_init(&c->xcv, NULL) != 0) {
		pthread_mutex_destroy(&c->xmu);
		free(c->xahead_buf);
		c->xahead_buf = NULL;
		return;
	}
	c->xahead_on = true;
	if (pthread_create(&c->xahead, NULL, xpack_ahead, c) != 0) {
		c->xahead_on = false;
		pthread_cond_destroy(&c->xcv);
		pthread_mutex_destroy(&c->xmu);
		free(c->xahead_buf);
		c->xahead_buf = NULL;
	}
}

void
cpu_pack_free(struct cpu_ctx *c)
{
	if (c->xahead_on) {
		pthread_mutex_lock(&c->xmu);
		c->xstop = true;
		pthread_cond_broadcast(&c->xcv);
		pthread_mutex_unlock(&c->xmu);
		pthread_join(c->xahead, NULL);
		pthread_cond_destroy(&c->xcv);
		pthread_mutex_destroy(&c->xmu);
		c->xahead_on = false;
	}
	free(c->xahead_buf);
	c->xahead_buf = NULL;
	free(c->pack_arena);
	c->pack_arena = NULL;
	for (int i = 0; i < c->n_packs; i++)
		free(c->packs[i].ready);
	free(c->xpack_buf);
	free(c->xpack_items);
	c->xpack_buf = NULL;
	c->xpack_items = NULL;
	c->xpack_each = 0;
	c->n_xtotal = c->n_xready = 0;
	free(c->packs);
	free(c->embd_row);
	c->embd_row = NULL;
	c->packs = NULL;
	c->n_packs = 0;
	c->pack_bytes = 0;
}

const void *
cpu_pack_embd_row(struct cpu_ctx *c, int32_t tok)
{
	const struct kvc_weight *e = &c->m->tok_embd;
	const char *row = (const char *)e->data + (size_t)tok * e->row_bytes;

	/* a failed read (the file gone bad under us) reads the mapping instead */
	if (c->embd_row != NULL && gguf_pread(c->m->file, row, e->row_bytes, c->embd_row, NULL, 0) == KVC_OK)
		return c->embd_row;
	return row;
}
