/*
 * cpu_pack.c: the CPU backend's packed copies of weight matrices.
 *
 * Where quant.h has a packed kernel for a matrix's type on this CPU
 * (q_pack_supported: Q8_0, Q4_0, Q5_0 on AVX512-VNNI), the matrix is rearranged once,
 * here, when the backend starts, and its products run on the copy: the
 * integer kernel then does several times fewer instructions per
 * multiply-add (quant_pack.c). The copy costs the matrix's size in memory
 * (the file's pages are left to the page cache: the program no longer
 * reads them, except token embeddings, which stay in the file's layout).
 * The copies are kept in a table sorted by weight address, looked up once
 * per product.
 */
#include "cpu_int.h"
#include "quant/quant.h"
#include "threadpool.h"

#include <stdlib.h>
#include <string.h>

struct cpu_pack {
	const struct kvc_weight *w;
	void *p;		/* q_pack_bytes(w) bytes, 64-byte aligned */
};

struct pack_job {
	const struct kvc_weight *w;
	void *p;
};

static void
pack_run(void *arg, int ith, int nth)
{
	const struct pack_job *j = arg;
	int64_t ng = (j->w->n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;

	q_pack(j->w->type, j->w->data, j->w->row_bytes, j->w->n_in, j->w->n_out, j->p,
	    ng * ith / nth, ng * (ith + 1) / nth);
}

static int
by_weight(const void *a, const void *b)
{
	const struct cpu_pack *x = a, *y = b;

	return x->w < y->w ? -1 : x->w > y->w;
}

/* Matrices a product reads: per layer Q, K, V, O, gate, up, down; then the output. */
static int
list_matrices(const struct kvc_model *m, const struct kvc_weight **ws)
{
	int n = 0;

	for (int il = 0; il < m->hp.n_layer; il++) {
		const struct kvc_layer_weights *l = &m->layers[il];
		const struct kvc_weight *each[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up,
		    &l->w_down };

		for (size_t i = 0; i < sizeof each / sizeof *each; i++)
			if (ws)
				ws[n++] = each[i];
			else
				n++;
	}
	if (ws)
		ws[n] = &m->output;
	return n + 1;
}

int
cpu_pack_init(struct cpu_ctx *c, char *err, size_t errlen)
{
	int n = list_matrices(c->m, NULL);
	const struct kvc_weight **ws = malloc((size_t)n * sizeof *ws);

	c->packs = calloc((size_t)n, sizeof *c->packs);
	if (ws == NULL || c->packs == NULL) {
		free(ws);
		kvc_err(err, errlen, "out of memory for the packed weights' table");
		return KVC_ENOMEM;
	}
	list_matrices(c->m, ws);
	for (int i = 0; i < n; i++) {
		const struct kvc_weight *w = ws[i];
		size_t sz;

		if (w->data == NULL || !q_pack_supported(w->type, w->n_in))
			continue;
		sz = q_pack_bytes(w->type, w->n_in, w->n_out);
		struct pack_job j = { w, aligned_alloc(64, (sz + 63) / 64 * 64) };
		if (j.p == NULL) {
			free(ws);
			kvc_err(err, errlen, "out of memory packing a %lld x %lld matrix (%.1f MiB)",
			    (long long)w->n_out, (long long)w->n_in, sz / 1048576.0);
			return KVC_ENOMEM;
		}
		tp_run(c->pool, pack_run, &j);
		c->packs[c->n_packs++] = (struct cpu_pack){ w, j.p };
		c->pack_bytes += sz;
	}
	free(ws);
	qsort(c->packs, (size_t)c->n_packs, sizeof *c->packs, by_weight);
	return KVC_OK;
}

const void *
cpu_pack_find(const struct cpu_ctx *c, const struct kvc_weight *w)
{
	int lo = 0, hi = c->n_packs;

	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (c->packs[mid].w == w)
			return c->packs[mid].p;
		if (c->packs[mid].w < w)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

void
cpu_pack_free(struct cpu_ctx *c)
{
	for (int i = 0; i < c->n_packs; i++)
		free(c->packs[i].p);
	free(c->packs);
	c->packs = NULL;
	c->n_packs = 0;
	c->pack_bytes = 0;
}
