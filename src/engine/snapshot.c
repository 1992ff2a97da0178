/*
 * snapshot.c: the KV snapshot codec. Layout (versions 2, 3 and 4, all
 * little-endian, independent of any backend's memory layout;
 * docs/ARCHITECTURE.md, "KV snapshot layout"):
 *
 *   header, 40 bytes: "KVC1", u32 version, u32 cache type (ggml type
 *   number), u32 n_layer, u32 kv_dim, u32 pos0, u32 n, u32 win_from
 *   (version 2: reserved = 0, every row is real; version 3: the windowed
 *   layers' rows of positions [pos0, win_from) were no longer held when
 *   the chunk was saved and are zeros, pos0 < win_from <= pos0 + n;
 *   version 4: the same rows, left out), u64 bind (eng_snap_bind: the
 *   engine's fingerprint and every token id of positions [0, pos0 + n));
 *   version 4 only: n_layer bytes, 1 for a windowed layer, 0 for a global
 *   one, padded with zeros to a multiple of 8;
 *   then for each layer: K rows [m][kv_dim], then V rows [m][kv_dim],
 *   elements in the cache type (F32, F16, or Q8_0 blocks of 32 with an
 *   fp16 scale: 34 bytes per 32 elements); m = n, but for a windowed
 *   layer of version 4, pos0 + n - win_from (positions [win_from, pos0 + n)).
 *
 * The bind word ties a chunk to the tokens it was computed from and the
 * model that computed them: a chunk moved to another conversation, or a
 * blob of another model filed under this one's fingerprint, no longer
 * matches the stream it is restored over, and is refused instead of
 * silently changing the replies. Version 1 (32 bytes, no bind word) is
 * refused the same way: nothing says what its rows were made from. A chunk
 * whose rows are all real is still written as version 2, so a kvchat
 * that predates version 3 reads it; one with absent rows is version 4
 * (a snapshot of a bounded cache as small as the cache), which such a
 * kvchat refuses (it has no rows for them); version 3 chunks, their absent
 * rows zeros, are still read.
 *
 * The integers are written byte by byte so the layout does not depend on
 * the host; the cache elements are little-endian IEEE values on every
 * platform kvchat runs on, so the rows are copied as they come.
 */
#include "snapshot.h"

#include <string.h>

#define SNAP_VERSION 4
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

uint32_t
eng_snap_choose_version(struct eng_snap *h)
{
	h->version = h->win_from <= h->pos0 ? 2 : h->swa != NULL ? 4 : 3;
	return h->version;
}

size_t
eng_snap_header_bytes(const struct eng_snap *h)
{
	return ENG_SNAP_HEADER + (h->version == 4 ? ((size_t)h->n_layer + 7) / 8 * 8 : 0);
}

uint32_t
eng_snap_layer_first(const struct eng_snap *h, int layer)
{
	return h->version == 4 && h->swa[layer] ? h->win_from : h->pos0;
}

size_t
eng_snap_part_bytes(const struct eng_snap *h, size_t row_bytes, int layer)
{
	return (size_t)(h->pos0 + h->n - eng_snap_layer_first(h, layer)) * row_bytes;
}

size_t
eng_snap_part_offset(const struct eng_snap *h, size_t row_bytes, int layer, enum kvc_kv_part part)
{
	size_t off = eng_snap_header_bytes(h);

	for (int l = 0; l < layer; l++)
		off += 2 * eng_snap_part_bytes(h, row_bytes, l);
	if (layer >= (int)h->n_layer)	/* the end of the blob (eng_snap_bytes): no such layer */
		return off;
	return off + (size_t)part * eng_snap_part_bytes(h, row_bytes, layer);
}

size_t
eng_snap_bytes(const struct eng_snap *h, size_t row_bytes)
{
	return eng_snap_part_offset(h, row_bytes, (int)h->n_layer, KVC_KV_K);
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
	put_u32(p + 4, h->version);
	put_u32(p + 8, h->kv_type);
	put_u32(p + 12, h->n_layer);
	put_u32(p + 16, h->kv_dim);
	put_u32(p + 20, h->pos0);
	put_u32(p + 24, h->n);
	put_u32(p + 28, h->version >= 3 ? h->win_from : 0);
	put_u32(p + 32, (uint32_t)h->bind);
	put_u32(p + 36, (uint32_t)(h->bind >> 32));
	if (h->version == 4) {
		memset(p + ENG_SNAP_HEADER, 0, eng_snap_header_bytes(h) - ENG_SNAP_HEADER);
		for (uint32_t l = 0; l < h->n_layer; l++)
			p[ENG_SNAP_HEADER + l] = h->swa[l] ? 1 : 0;
	}
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
		    "reads versions 2 to %d", version, get_u32(b + 28), len, SNAP_VERSION);
		return KVC_ECORRUPT;
	}
	h->kv_type = get_u32(b + 8);
	h->n_layer = get_u32(b + 12);
	h->kv_dim = get_u32(b + 16);
	h->pos0 = get_u32(b + 20);
	h->n = get_u32(b + 24);
	h->win_from = version == 2 ? h->pos0 : get_u32(b + 28);
	h->version = version;
	h->swa = NULL;
	if (version >= 3 && (h->win_from <= h->pos0 || h->win_from - h->pos0 > h->n)) {
		kvc_err(err, errlen, "KV snapshot: windowed rows from %u outside positions [%u, %u]",
		    h->win_from, h->pos0, h->pos0 + h->n);
		return KVC_ECORRUPT;
	}
	h->bind = (uint64_t)get_u32(b + 32) | (uint64_t)get_u32(b + 36) << 32;
	if (version == 4) {
		if (h->n_layer > 1u << 16 || len < eng_snap_header_bytes(h)) {
			kvc_err(err, errlen, "KV snapshot: version 4 with %u layers in %zu bytes",
			    h->n_layer, len);
			return KVC_ECORRUPT;
		}
		for (size_t i = ENG_SNAP_HEADER; i < eng_snap_header_bytes(h); i++)
			if (b[i] > 1 || (b[i] != 0 && i >= ENG_SNAP_HEADER + h->n_layer)) {
				kvc_err(err, errlen, "KV snapshot: bad layer flag %u at byte %zu", b[i], i);
				return KVC_ECORRUPT;
			}
		h->swa = b + ENG_SNAP_HEADER;
	}
	return KVC_OK;
}
