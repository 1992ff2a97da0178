/*
 * snapshot.h: the byte layout of a KV snapshot (snapshot.c); internal to
 * the engine module, whose eng_seq_kv_save/eng_seq_kv_load fill and read
 * the rows through the backend.
 */
#ifndef KVC_ENG_SNAPSHOT_H
#define KVC_ENG_SNAPSHOT_H

#include "backend/backend.h"

#define ENG_SNAP_HEADER 40	/* bytes of the fixed header (every version from 2) */

/* What the header says. */
struct eng_snap {
	uint32_t version;	/* 2, 3 or 4 (eng_snap_put_header chooses) */
	uint32_t kv_type;	/* ggml type of the cache elements */
	uint32_t n_layer;
	uint32_t kv_dim;	/* elements per row: n_head_kv * head_dim */
	uint32_t pos0, n;	/* the blob holds positions [pos0, pos0 + n) */
	uint32_t win_from;	/* windowed layers' rows are real from here (pos0: all) */
	uint64_t bind;		/* eng_snap_bind of the fingerprint and tokens [0, pos0 + n) */
	/*
	 * n_layer flags, 1 for a windowed layer (version 4: its rows start
	 * at win_from); NULL for versions 2 and 3. Read from the blob, or the
	 * writer's own array.
	 */
	const unsigned char *swa;
};

/*
 * What binds a chunk to its stream: FNV-1a 64 over the fingerprint's
 * characters (no NUL), then each of tokens[0..n) as 4 little-endian bytes.
 */
uint64_t eng_snap_bind(const char *fingerprint, const int32_t *tokens, size_t n);

/*
 * The version h is written as: 2 when every row is real (win_from ==
 * pos0); else 4 when h->swa is given (the windowed layers' absent rows left
 * out), 3 when not (they are zeros). Sets h->version and returns it.
 */
uint32_t eng_snap_choose_version(struct eng_snap *h);
/* Bytes of the header: ENG_SNAP_HEADER, and version 4's layer flags. */
size_t eng_snap_header_bytes(const struct eng_snap *h);
/* The first position whose rows layer's parts hold (win_from or pos0). */
uint32_t eng_snap_layer_first(const struct eng_snap *h, int layer);
/*
 * Bytes of one of layer's parts (K or V rows), each row_bytes long (kv_dim
 * elements of the cache type: kvc_kv_row_bytes).
 */
size_t eng_snap_part_bytes(const struct eng_snap *h, size_t row_bytes, int layer);
/* Bytes of the whole blob: header and every layer's K and V rows. */
size_t eng_snap_bytes(const struct eng_snap *h, size_t row_bytes);
/* Where layer's K or V rows start in the blob. */
size_t eng_snap_part_offset(const struct eng_snap *h, size_t row_bytes, int layer, enum kvc_kv_part part);
/* Write the header for h (its version chosen) into p[0..eng_snap_header_bytes). */
void eng_snap_put_header(unsigned char *p, const struct eng_snap *h);
/*
 * Read the header of blob[0..len) into h, checking what needs no engine:
 * the magic, the version and the reserved word (versions 3 and 4: win_from
 * inside the chunk, version 4's flags 0 or 1; version 2: win_from = pos0). 0, KVC_ENOTFOUND for a
 * version 1 blob (well formed, but bound to nothing), or KVC_ECORRUPT, with
 * a message; the caller checks the shape against its own, the length
 * against eng_snap_bytes and the bind word against its tokens.
 */
int eng_snap_get_header(const void *blob, size_t len, struct eng_snap *h, char *err, size_t errlen);

#endif
