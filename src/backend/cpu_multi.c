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
		/* KVC_OK: only a prompt's cpu_forward stops at the interrupt flag (fwd_stoppable) */
		(void)cpu_forward_rows(c, (struct cpu_kv *const *)(kvs + done), tokens + done, pos + done, nc,
		    logits + (size_t)done * c->hp.n_vocab, 0);
		for (i = done; i < done + nc; i++)
			((struct cpu_kv *)kvs[i])->n_valid = pos[i] + 1;
	}
	return KVC_OK;
}

/*
 * The prefill of several sequences in one pass: their prompts' tokens are
 * the rows of one batch, cut in chunks of CPU_CHUNK rows whatever sequence
 * they belong to, so that each weight row read serves every prompt (a new
 * request's prefill no longer runs alone). A sequence's rows keep their
 * order across chunks, which is all its attention needs: within a chunk
 * every row's K and V are stored before any row attends. In a chunk the
 * rows that end a sequence go last, so that one product gives their logits
 * (cpu_forward_rows computes the rows from lo on). Rows are
 * batch-independent, so every sequence gets the bits cpu_forward gives it
 * alone (tests/unit/test_forward_multi.c).
 */
int
cpu_prefill_multi(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens, const int *n_tok,
    const int *pos0, float *logits, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kvr[CPU_CHUNK];
	int32_t tokr[CPU_CHUNK];
	int posr[CPU_CHUNK], i, j, rc, max_pos = 0, total = 0;
	size_t nv = (size_t)c->hp.n_vocab, off = 0;

	if (n_seq < 1 || kvs == NULL || tokens == NULL || n_tok == NULL || pos0 == NULL ||
	    logits == NULL) {
		kvc_err(err, errlen, "prefill_multi: bad arguments (%d sequences)", n_seq);
		return KVC_EINVAL;
	}
	for (i = 0; i < n_seq; i++) {
		struct cpu_kv *kv = kvs[i];

		if (n_tok[i] < 1) {
			kvc_err(err, errlen, "prefill_multi: sequence %d has no tokens", i);
			return KVC_EINVAL;
		}
		if ((rc = kvc_backend_forward_check(n_tok[i], pos0[i], kv->n_valid, kv->n_ctx, err,
		    errlen)))
			return rc;
		if (c->m->pos_embd.data != NULL && pos0[i] + n_tok[i] > c->m->pos_embd.n_out) {
			kvc_err(err, errlen, "position %d is past the model's %lld learned positions",
			    pos0[i] + n_tok[i] - 1, (long long)c->m->pos_embd.n_out);
			return KVC_ERANGE;
		}
		for (j = 0; j < n_tok[i]; j++)
			if (tokens[off + j] < 0 || tokens[off + j] >= c->hp.n_vocab) {
				kvc_err(err, errlen, "token id %d out of range (vocabulary %d)",
				    tokens[off + j], c->hp.n_vocab);
				return KVC_EINVAL;
			}
		off += (size_t)n_tok[i];
		for (j = 0; j < i; j++)
			if (kvs[j] == kv) {
				kvc_err(err, errlen, "prefill_multi: sequences %d and %d share a cache", j, i);
				return KVC_EINVAL;
			}
		if (pos0[i] + n_tok[i] > max_pos)
			max_pos = pos0[i] + n_tok[i];
		total += n_tok[i];
	}
	for (i = 0; i < n_seq; i++)
		if ((rc = cpu_kv_prepare(c, kvs[i], pos0[i], n_tok[i], err, errlen)))
			return rc;
	if ((rc = cpu_reserve_scratch(c, total < CPU_CHUNK ? total : CPU_CHUNK, max_pos, err, errlen)))
		return rc;
	for (i = 0; i < n_seq; i++)
		((struct cpu_kv *)kvs[i])->n_valid = pos0[i];	/* what lies past pos0 is replaced */
	/* seq, k: the next row, token k of sequence seq; off its place in tokens */
	int seq = 0, k = 0;

	off = 0;
	while (seq < n_seq) {
		int n = 0, n_end = 0, first_end = -1, s0 = seq, k0 = k;
		size_t off0 = off;

		/* rows that do not end their sequence first, then those that do */
		for (int pass = 0; pass < 2; pass++) {
			seq = s0;
			k = k0;
			off = off0;
			for (int taken = 0; taken < CPU_CHUNK && seq < n_seq; taken++) {
				bool last = k == n_tok[seq] - 1;

				if (last == (pass == 1)) {
					kvr[n] = kvs[seq];
					tokr[n] = tokens[off + (size_t)k];
					posr[n++] = pos0[seq] + k;
				}
				if (last && pass == 1 && first_end < 0)
					first_end = seq;
				n_end += last && pass == 1;
				if (++k == n_tok[seq]) {
					off += (size_t)n_tok[seq];
					seq++;
					k = 0;
				}
			}
		}
		/* room in each cache for all its rows of this chunk at once (a bounded
		 * window trimmed for its last row alone could drop what its first needs) */
		for (int sq = s0, kk = k0, left = n; left > 0; sq++, kk = 0) {
			int m = n_tok[sq] - kk < left ? n_tok[sq] - kk : left;

			cpu_kv_room(c, kvs[sq], pos0[sq] + kk, m);
			left -= m;
		}
		(void)cpu_forward_rows(c, kvr, tokr, posr, n, n_end ? logits + (size_t)first_end * nv : NULL,
		    n - n_end);	/* KVC_OK, as above */
		for (j = 0; j < n; j++)
			if (kvr[j]->n_valid < posr[j] + 1)
				kvr[j]->n_valid = posr[j] + 1;
	}
	return KVC_OK;
}
