/*
 * snapshot.c: the KV snapshot codec. Layout (versions 2 and 3, all
 * little-endian, independent of any backend's memory layout;
 * docs/ARCHITECTURE.md, "KV snapshot layout"):
 *
 *   header, 40 bytes: "KVC1", u32 version, u32 cache type (ggml type
 *   number), u32 n_layer, u32 kv_dim, u32 pos0, u32 n, u32 win_from
 *   (version 2: reserved = 0, every row is real; version 3: the windowed
 *   layers' rows of positions [pos0, win_from) were no longer held when
 *   the chunk was saved and are zeros, pos0 < win_from <= pos0 + n),
 *   u64 bind (eng_snap_bind: the engine's fingerprint and every token id
 *   of positions [0, pos0 + n));
 *   then for each layer: K rows [n][kv_dim], then V rows [n][kv_dim],
 *   elements in the cache type (F32, F16, or Q8_0 blocks of 32 with an
 *   fp16 scale: 34 bytes per 32 elements).
 *
 * The bind word ties a chunk to the tokens it was computed from and the
 * model that computed them: a chunk moved to another conversation, or a
 * blob of another model filed under this one's fingerprint, no longer
 * matches the stream it is restored over, and is refused instead of
 * silently changing the replies. Version 1 (32 bytes, no bind word) is
 * refused the same way: nothing says what its rows were made from. A chunk
 * whose rows are all real is still written as version 2, so a kvchat
 * that predates version 3 reads it; one with absent rows is version 3,
 * which such a kvchat refuses (it would take the zeros for rows).
 *
 * The integers are written byte by byte so the layout does not depend on
 * the host; the cache elements are little-endian IEEE values on every
 * platform kvchat runs on, so the rows are copied as they come.
 */
#include "snapshot.h"

#include <string.h>

#define SNAP_VERSION 3
#define SNAP_V1_HEADER 32	/* version 1: the header without the bind word */

static void
put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t
get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t
eng_snap_part_bytes(const struct eng_snap *h, size_t row_bytes)
{
	return (size_t)h->n * row_bytes;
}

size_t
eng_snap_bytes(const struct eng_snap *h, size_t row_bytes)
{
	return ENG_SNAP_HEADER + 2 * (size_t)h->n_layer * eng_snap_part_bytes(h, row_bytes);
}

size_t
eng_snap_part_offset(const struct eng_snap *h, size_t row_bytes, int layer, enum kvc_kv_part part)
{
	return ENG_SNAP_HEADER + (size_t)(2 * layer + (int)part) * eng_snap_part_bytes(h, row_bytes);
}

uint64_t
eng_snap_bind(const char *fingerprint, const int32_t *tokens, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a 64 */

	for (const char *c = fingerprint; *c; c++) {
		h ^= (unsigned char)*c;
		h *= 0x100000001b3ULL;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)tokens[i];

		for (int k = 0; k < 4; k++) {
			h ^= (v >> (8 * k)) & 0xFF;
			h *= 0x100000001b3ULL;
		}
	}
	return h;
}

void
eng_snap_put_header(unsigned char *p, const struct eng_snap *h)
{
	memcpy(p, "KVC1", 4);
	put_u32(p + 4, h->win_from > h->pos0 ? SNAP_VERSION : 2);
	put_u32(p + 8, h->kv_type);
	put_u32(p + 12, h->n_layer);
	put_u32(p + 16, h->kv_dim);
	put_u32(p + 20, h->pos0);
	put_u32(p + 24, h->n);
	put_u32(p + 28, h->win_from > h->pos0 ? h->win_from : 0);
	put_u32(p + 32, (uint32_t)h->bind);
	put_u32(p + 36, (uint32_t)(h->bind >> 32));
}

int
eng_snap_get_header(const void *blob, size_t len, struct eng_snap *h, char *err, size_t errlen)
{
	const unsigned char *b = blob;
	uint32_t version;

	if (len < SNAP_V1_HEADER || memcmp(b, "KVC1", 4) != 0) {
		kvc_err(err, errlen, "KV snapshot: not a kvchat snapshot (%zu bytes, bad magic)", len);
		return KVC_ECORRUPT;
	}
	version = get_u32(b + 4);
	if (version == 1) {
		kvc_err(err, errlen, "KV snapshot: version 1, from an older kvchat, does not record "
		    "the tokens it was computed from");
		return KVC_ENOTFOUND;
	}
	if (version < 2 || version > SNAP_VERSION || len < ENG_SNAP_HEADER ||
	    (version == 2 && get_u32(b + 28) != 0)) {
		kvc_err(err, errlen, "KV snapshot: version %u (reserved %u, %zu bytes), this kvchat "
		    "reads versions 2 and %d", version, get_u32(b + 28), len, SNAP_VERSION);
		return KVC_ECORRUPT;
	}
	h->kv_type = get_u32(b + 8);
	h->n_layer = get_u32(b + 12);
	h->kv_dim = get_u32(b + 16);
	h->pos0 = get_u32(b + 20);
	h->n = get_u32(b + 24);
	h->win_from = version == 2 ? h->pos0 : get_u32(b + 28);
	if (version == 3 && (h->win_from <= h->pos0 || h->win_from - h->pos0 > h->n)) {
		kvc_err(err, errlen, "KV snapshot: windowed rows from %u outside positions [%u, %u]",
		    h->win_from, h->pos0, h->pos0 + h->n);
		return KVC_ECORRUPT;
	}
	h->bind = (uint64_t)get_u32(b + 32) | (uint64_t)get_u32(b + 36) << 32;
	return KVC_OK;
}
