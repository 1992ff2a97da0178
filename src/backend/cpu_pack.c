/*
 * cpu_pack.c: the CPU backend's packed copies of weight matrices.
 *
 * Where the kernel table has a packed kernel for a matrix's type
 * (kern_packs: Q8_0, Q4_0, Q5_0 in the avx2 and avx512 tables), the matrix is rearranged once,
 * here, when the backend starts, and its products run on the copy: the
 * integer kernel then does several times fewer instructions per
 * multiply-add (quant_pack.c). The copy is the matrix's size; the
 * matrices are packed in slices of about 8 MiB and, when the model is the
 * file mapped (gguf_mapped), each slice's pages are handed back as soon as
 * it is packed
 * (madvise MADV_DONTNEED: they stay in the page cache, and are read again
 * from it if touched, as the embedding rows of a tied output matrix are),
 * so the weights are never resident twice.
 * The copies are kept in a table sorted by weight address, looked up once
 * per product.
 */
#include "cpu_int.h"
#include "quant/quant.h"
#include "threadpool.h"

#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct cpu_pack {
	const struct kvc_weight *w;
	void *p;		/* q_pack_bytes(w) bytes, 64-byte aligned */
};

/* Groups [g0, g1) of w into p, the threads splitting them. */
struct pack_job {
	const struct kvc_weight *w;
	void *p;
	int64_t g0, g1;
};

static void
pack_run(void *arg, int ith, int nth)
{
	const struct pack_job *j = arg;
	int64_t ng = j->g1 - j->g0;

	q_pack(j->w->type, j->w->data, j->w->row_bytes, j->w->n_in, j->w->n_out, j->p,
	    j->g0 + ng * ith / nth, j->g0 + ng * (ith + 1) / nth);
}

/* Groups per slice: a slice's rows are released before the next is packed. */
#define PACK_SLICE_BYTES ((size_t)8 << 20)

/*
 * The whole pages of w's mapped rows [r0, r1) back to the kernel (a failure
 * only leaves them resident).
 */
static void
release(const struct kvc_weight *w, int64_t r0, int64_t r1)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)w->data + (uintptr_t)w->row_bytes * (uintptr_t)r0;
	uintptr_t b = (uintptr_t)w->data + (uintptr_t)w->row_bytes * (uintptr_t)r1;

	if (pg <= 0)
		return;
	a = (a + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
	b = b / (uintptr_t)pg * (uintptr_t)pg;
	if (b > a)
		(void)madvise((void *)a, b - a, MADV_DONTNEED);
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

		if (w->data == NULL || !kern_packs(c->kern, w->type, w->n_in))
			continue;
		sz = q_pack_bytes(w->type, w->n_in, w->n_out);
		void *p = aligned_alloc(64, (sz + 63) / 64 * 64);
		int64_t ng = (w->n_out + Q_PACK_ROWS - 1) / Q_PACK_ROWS;
		int64_t step = (int64_t)(PACK_SLICE_BYTES / (Q_PACK_ROWS * w->row_bytes)) + 1;
		bool mapped = c->m->file != NULL && gguf_mapped(c->m->file);

		if (p == NULL) {
			free(ws);
			kvc_err(err, errlen, "out of memory packing a %lld x %lld matrix (%.1f MiB)",
			    (long long)w->n_out, (long long)w->n_in, sz / 1048576.0);
			return KVC_ENOMEM;
		}
		/* in slices, so that the file's rows and their copy are never both resident */
		for (int64_t g = 0; g < ng; g += step) {
			struct pack_job j = { w, p, g, g + step < ng ? g + step : ng };

			tp_run(c->pool, pack_run, &j);
			if (mapped)
				release(w, j.g0 * Q_PACK_ROWS, j.g1 * Q_PACK_ROWS < w->n_out ?
				    j.g1 * Q_PACK_ROWS : w->n_out);
		}
		c->pack_released |= mapped;
		c->packs[c->n_packs++] = (struct cpu_pack){ w, p };
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
