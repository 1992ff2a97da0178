/*
 * cpu_multi.c: one decode step of several sequences in one forward pass.
 *
 * On a CPU, decoding is bound by reading the weights: a one-token forward
 * reads every weight row to multiply it with one activation row. Here the
 * sequences' next tokens are stacked as the rows of one batch
 * (cpu_forward_rows), so each weight row read serves all of them, while
 * each row's attention reads only its own cache up to its own position
 * (no padding, no shared positions). The tiled products give every row the
 * bits it gets alone, so each sequence's logits equal its one-token
 * forward's (tests/unit/test_forward_multi.c).
 */
#include "backend.h"
#include "cpu_int.h"

#include <stdlib.h>

int
cpu_forward_multi(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens, const int *pos,
    float *logits, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	int i, j, rc, done, max_pos = 0;

	if (n_seq < 1 || kvs == NULL || tokens == NULL || pos == NULL || logits == NULL) {
		kvc_err(err, errlen, "forward_multi: bad arguments (%d sequences)", n_seq);
		return KVC_EINVAL;
	}
	for (i = 0; i < n_seq; i++) {
		struct cpu_kv *kv = kvs[i];

		if ((rc = kvc_backend_forward_check(1, pos[i], kv->n_valid, kv->n_ctx, err, errlen)))
			return rc;
		if (c->m->pos_embd.data != NULL && pos[i] >= c->m->pos_embd.n_out) {
			kvc_err(err, errlen, "position %d is past the model's %lld learned positions",
			    pos[i], (long long)c->m->pos_embd.n_out);
			return KVC_ERANGE;
		}
		if (tokens[i] < 0 || tokens[i] >= c->hp.n_vocab) {
			kvc_err(err, errlen, "token id %d out of range (vocabulary %d)",
			    tokens[i], c->hp.n_vocab);
			return KVC_EINVAL;
		}
		/* two rows writing one cache would race, and the second would not see the first */
		for (j = 0; j < i; j++)
			if (kvs[j] == kv) {
				kvc_err(err, errlen, "forward_multi: sequences %d and %d share a cache", j, i);
				return KVC_EINVAL;
			}
		if (pos[i] + 1 > max_pos)
			max_pos = pos[i] + 1;
	}
	/* a bounded windowed layer must still hold the window behind pos[i] */
	for (i = 0; i < n_seq; i++)
		if ((rc = cpu_kv_prepare(c, kvs[i], pos[i], 1, err, errlen)))
			return rc;
	if ((rc = cpu_reserve_scratch(c, n_seq < CPU_CHUNK ? n_seq : CPU_CHUNK, max_pos, err, errlen)))
		return rc;
	/* more sequences than a chunk: passes of CPU_CHUNK rows (each row's result is the same) */
	for (done = 0; done < n_seq; done += CPU_CHUNK) {
		int nc = n_seq - done < CPU_CHUNK ? n_seq - done : CPU_CHUNK;

		for (i = done; i < done + nc; i++) {
			((struct cpu_kv *)kvs[i])->n_valid = pos[i];	/* what lies past pos is replaced */
			cpu_kv_room(c, kvs[i], pos[i], 1);
		}
		cpu_forward_rows(c, (struct cpu_kv *const *)(kvs + done), tokens + done, pos + done, nc,
		    logits + (size_t)done * c->hp.n_vocab, 0);
		for (i = done; i < done + nc; i++)
			((struct cpu_kv *)kvs[i])->n_valid = pos[i] + 1;
	}
	return KVC_OK;
}
