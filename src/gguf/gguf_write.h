/*
 * gguf_write.h: build a GGUF v3 file in memory and write it out. Used by the
 * fixture generator (tests), convert-llama2c and tests of the reader.
 * Keys and tensors are written in the order they are added.
 */
#ifndef KVC_GGUF_WRITE_H
#define KVC_GGUF_WRITE_H

#include "gguf.h"

struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);	/* NULL on ENOMEM */
void gguf_writer_free(struct gguf_writer *w);

/* Each returns 0 or KVC_ENOMEM. Strings and arrays are copied. */
int gguf_w_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_w_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_w_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_w_f32(struct gguf_writer *w, const char *key, float v);
int gguf_w_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_w_str(struct gguf_writer *w, const char *key, const char *v);
int gguf_w_arr_str(struct gguf_writer *w, const char *key, const char *const *v, size_t n);
/* strings with explicit lengths (may contain NUL bytes) */
int gguf_w_arr_strn(struct gguf_writer *w, const char *key, const char *const *v, const size_t *lens, size_t n);
int gguf_w_arr_f32(struct gguf_writer *w, const char *key, const float *v, size_t n);
int gguf_w_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, size_t n);
/* Raw key with any scalar/array payload already encoded (for hostile-file tests). */
int gguf_w_raw(struct gguf_writer *w, const char *key, enum gguf_type type, const void *payload, size_t len);

/* ne[0] innermost. data is copied; nbytes must equal gguf_dtype_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]. */
int gguf_w_tensor(struct gguf_writer *w, const char *name, enum gguf_dtype type,
    uint32_t n_dims, const int64_t *ne, const void *data, size_t nbytes);

/*
 * Streaming, for models too large to hold in memory: declare tensors with
 * data == NULL (nbytes is still given), then gguf_w_stream_open writes the
 * header and tensor infos to path.tmp, gguf_w_stream_data appends each
 * declared tensor's bytes in declaration order (possibly in several pieces),
 * and gguf_w_stream_close checks every tensor was complete and renames the
 * file into place.
 */
int gguf_w_stream_open(struct gguf_writer *w, const char *path, char *err, size_t errlen);
int gguf_w_stream_data(struct gguf_writer *w, const void *data, size_t nbytes, char *err, size_t errlen);
int gguf_w_stream_close(struct gguf_writer *w, char *err, size_t errlen);

/* general.alignment used for padding (default 32). */
void gguf_w_set_alignment(struct gguf_writer *w, uint32_t align);

/* Serialise to memory (caller frees *out) or to a file (written to path.tmp, then renamed). */
int gguf_w_to_mem(struct gguf_writer *w, void **out, size_t *len);
int gguf_w_write(struct gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
