/*
 * sub_kld.h: kvchat perplexity's KL-divergence mode (sub_kld.c), as
 * llama-perplexity's --kl-divergence-base / --kl-divergence: one run saves
 * the log-probabilities of every scored position to a base file, a later
 * run of another quantisation or cache type over the same tokens compares
 * its own against them.
 *
 * Base file, version 1, little-endian:
 *   header, 32 bytes: "KVCKLD\0\0", u32 version = 1, u32 n_vocab, u32 n_ctx,
 *     u32 n_chunks, u32 n_scored (positions scored per chunk: n_ctx - 1 -
 *     n_ctx/2), u32 flags (bit 0: each chunk's first token was replaced by
 *     BOS);
 *   i32 tokens[n_chunks * n_ctx]: the text's tokens the chunks were cut
 *     from (before any BOS replacement);
 *   u64 FNV-1a of the header and the tokens;
 *   then per chunk, per scored position, one row: f64 lo, f64 step, u64
 *     FNV-1a of the row, u16 code[n_vocab], where log p(i) = lo + code[i] *
 *     step. hi = max log p; lo = max(min log p, hi - 32); step = (hi -
 *     lo) / 65535; codes are rounded to nearest, so each log-probability in
 *     [lo, hi] is off by at most delta = step / 2 <= 32 / 131070 = 2.4e-4,
 *     and below lo (p < e^-32 of the top one) it reads as lo.
 * 16 bits per entry: Gemma 3's 262144-entry vocabulary makes 0.5 MiB a row
 * (6 chunks of 512: 0.8 GB; float would be twice that).
 *
 * Error bound of the KL divergence read back. Let a_i = log p_i, the row
 * read back gives a_i + e_i with |e_i| <= delta; it is renormalised (log
 * sum exp subtracted), so a'_i = a_i + h_i with |h_i| <= 2 delta and
 * sum p_i e^h_i = 1. With d_i = a_i - log q_i and KL = sum p_i d_i:
 *   KL' - KL = sum p_i (e^h_i - 1)(d_i - KL) + sum p_i (h_i e^h_i - e^h_i + 1)
 * (the first sum may subtract KL because sum p_i (e^h_i - 1) = 0), and
 * |e^h - 1| <= |h| e^|h|, 0 <= h e^h - e^h + 1 <= h^2 e^|h| / 2, so
 *   |KL' - KL| <= 2 delta e^(2 delta) (sum_i p_i |d_i - KL| + delta)
 * per position: small in proportion to how much the two models differ
 * (0 for a model against its own base, up to 2.4e-4 times the spread of
 * d). Entries below lo add at most n_vocab e^(hi - 32) of probability.
 */
#ifndef KVC_SUB_KLD_H
#define KVC_SUB_KLD_H

#include <stdbool.h>
#include <stdint.h>

struct kld_base;

/*
 * Save mode: a new base file at path (written beside it and renamed over
 * it by kld_close(k, true), so a failed run leaves no half file and never
 * writes through a link). 0, or 1 with a message said.
 */
int kld_create(struct kld_base **out, const char *path, int n_vocab, int n_ctx, int n_chunks,
    const int32_t *tok, bool bos);
/*
 * Compare mode: open path and check that it was made with this vocabulary
 * size, context, BOS handling and the same tokens. *n_chunks: the chunks
 * asked for (-1: all the base has), set to those compared. n_text_tok:
 * tokens the text has. 0, or 1 with a message said.
 */
int kld_open(struct kld_base **out, const char *path, int n_vocab, int n_ctx, int *n_chunks,
    const int32_t *tok, size_t n_text_tok, bool bos);
/* One scored position's logits[0..n_vocab) and the next token: saved or compared. 0, or 1 with a message said. */
int kld_position(struct kld_base *k, const float *logits, int next);
/* Compare mode: the chunk's running line (after each chunk), the final statistics. */
void kld_chunk_line(const struct kld_base *k, int chunk);
void kld_report(const struct kld_base *k);
bool kld_comparing(const struct kld_base *k);
/* Close; save mode: keep the file only when ok. 0, or 1 with a message said. */
int kld_close(struct kld_base *k, bool ok);

#endif
