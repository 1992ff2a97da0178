/*
 * gguf.h: read-only access to GGUF v2/v3 model files.
 *
 * File layout (little-endian):
 *   u32 magic "GGUF", u32 version (2 or 3), u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 value_type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
 *                 u64 offset (relative to the data section) },
 *   padding to general.alignment (default 32), tensor data.
 * A string is u64 length + bytes (no NUL). An array value is u32 elem_type,
 * u64 count, then the elements (arrays may nest).
 *
 * Every length, count and offset is checked against the file size before
 * use; allocations are bounded by the file's size. Tensor data is mmap'ed.
 * The file is untrusted: any problem is reported as one line naming the file
 * and what is wrong, and gguf_open returns KVC_EFORMAT (or KVC_EIO).
 */
#ifndef KVC_GGUF_H
#define KVC_GGUF_H

#include "core/kvc.h"

enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
	GGUF_TYPE_COUNT
};

/* Tensor element types (ggml's numbering, part of the file format). */
enum gguf_dtype {
	GGML_TYPE_F32 = 0,
	GGML_TYPE_F16 = 1,
	GGML_TYPE_Q4_0 = 2,
	GGML_TYPE_Q4_1 = 3,
	GGML_TYPE_Q5_0 = 6,
	GGML_TYPE_Q5_1 = 7,
	GGML_TYPE_Q8_0 = 8,
	GGML_TYPE_Q8_1 = 9,
	GGML_TYPE_Q2_K = 10,
	GGML_TYPE_Q3_K = 11,
	GGML_TYPE_Q4_K = 12,
	GGML_TYPE_Q5_K = 13,
	GGML_TYPE_Q6_K = 14,
	GGML_TYPE_Q8_K = 15,
	GGML_TYPE_IQ2_XXS = 16,
	GGML_TYPE_IQ2_XS = 17,
	GGML_TYPE_IQ3_XXS = 18,
	GGML_TYPE_IQ1_S = 19,
	GGML_TYPE_IQ4_NL = 20,
	GGML_TYPE_IQ3_S = 21,
	GGML_TYPE_IQ2_S = 22,
	GGML_TYPE_IQ4_XS = 23,
	GGML_TYPE_I8 = 24,
	GGML_TYPE_I16 = 25,
	GGML_TYPE_I32 = 26,
	GGML_TYPE_I64 = 27,
	GGML_TYPE_F64 = 28,
	GGML_TYPE_IQ1_M = 29,
	GGML_TYPE_BF16 = 30,
	GGML_TYPE_TQ1_0 = 34,
	GGML_TYPE_TQ2_0 = 35,
	GGML_TYPE_MXFP4 = 39,
	GGML_TYPE_COUNT = 40
};

/* Elements per block and bytes per block of a tensor type; 0 if unknown. */
int64_t gguf_dtype_block(enum gguf_dtype t);
size_t gguf_dtype_size(enum gguf_dtype t);
/* "F16", "Q4_K", ...; "?" if unknown. */
const char *gguf_dtype_name(enum gguf_dtype t);
/* Bytes of one row of ne0 elements; 0 if ne0 is not a multiple of the block size or the type is unknown. */
size_t gguf_dtype_row_size(enum gguf_dtype t, int64_t ne0);

/* A string inside the file: not NUL-terminated, points into the mapping. */
struct gguf_str {
	const char *ptr;
	uint64_t len;
};

struct gguf_tensor {
	const char *name;	/* NUL-terminated copy */
	uint32_t n_dims;	/* 1..4 */
	int64_t ne[4];		/* elements per dimension, ne[0] innermost; unused dims are 1 */
	enum gguf_dtype type;
	uint64_t offset;	/* from the start of the data section */
	size_t nbytes;		/* checked to lie inside the file */
	const void *data;	/* into the mapping */
};

struct gguf_file;

/* Open and validate a file; mmap tensor data. 0 or KVC_EIO/KVC_EFORMAT/KVC_ENOMEM. */
int gguf_open(struct gguf_file **out, const char *path, char *err, size_t errlen);
/* Same over a caller-owned buffer that must outlive the handle (fuzzing, tests). */
int gguf_open_mem(struct gguf_file **out, const void *data, size_t size,
    const char *name, char *err, size_t errlen);
void gguf_close(struct gguf_file *f);

const char *gguf_path(const struct gguf_file *f);
uint32_t gguf_version(const struct gguf_file *f);
uint64_t gguf_file_size(const struct gguf_file *f);
uint32_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_data_offset(const struct gguf_file *f);
/* Whether the tensor data is the file mapped (gguf_open), not a caller's buffer (gguf_open_mem). */
bool gguf_mapped(const struct gguf_file *f);

/*
 * gguf_io.c. n bytes of the file from p (a pointer into it, as a tensor's
 * data) into dst, read with pread(2) from a mapped file so that no page of
 * the mapping is touched (from a caller's buffer: copied). 0, KVC_EINVAL
 * (the range is not inside the file) or KVC_EIO.
 */
int gguf_pread(const struct gguf_file *f, const void *p, size_t n, void *dst,
    char *err, size_t errlen);
/*
 * The whole pages of [p, p + n) of a mapped file are unmapped and set
 * apart from their neighbours' mapping: for data a caller has copied and
 * will not read again. The bytes stay readable (faulted in again from the
 * page cache when read). Nothing for a caller's buffer or a range outside
 * the file.
 */
void gguf_release(const struct gguf_file *f, const void *p, size_t n);

/* Metadata key/value pairs, in file order. */
int64_t gguf_n_kv(const struct gguf_file *f);
const char *gguf_kv_key(const struct gguf_file *f, int64_t i);	/* NUL-terminated */
enum gguf_type gguf_kv_type(const struct gguf_file *f, int64_t i);
/* Index of key or -1. */
int64_t gguf_find_key(const struct gguf_file *f, const char *key);

/*
 * Typed getters with defaults: the default is returned when the key is
 * absent or its value cannot represent the requested type (any integer type
 * converts to another when the value fits; floats convert to float).
 */
int64_t gguf_get_int(const struct gguf_file *f, const char *key, int64_t def);
double gguf_get_float(const struct gguf_file *f, const char *key, double def);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool def);
/* NUL-terminated copy owned by the file handle; def if absent or not a string. */
const char *gguf_get_str(const struct gguf_file *f, const char *key, const char *def);

/* Scalar by index (type must match one of the scalar kinds; else 0/def). */
int gguf_kv_int(const struct gguf_file *f, int64_t i, int64_t *out);	/* 0 or KVC_EINVAL */
int gguf_kv_float(const struct gguf_file *f, int64_t i, double *out);
int gguf_kv_str(const struct gguf_file *f, int64_t i, struct gguf_str *out);

/*
 * Arrays. gguf_arr_type/n give the element type and count of key i (or of a
 * nested array). Numeric arrays: gguf_arr_data returns the raw little-endian
 * elements inside the mapping (possibly unaligned: memcpy them out).
 * String arrays: gguf_arr_str gives element j in O(1).
 * Nested arrays: gguf_arr_sub gives element j as an array handle.
 */
struct gguf_arr;	/* opaque; owned by the file */
const struct gguf_arr *gguf_kv_arr(const struct gguf_file *f, int64_t i);	/* NULL if not an array */
const struct gguf_arr *gguf_get_arr(const struct gguf_file *f, const char *key);
enum gguf_type gguf_arr_type(const struct gguf_arr *a);
uint64_t gguf_arr_n(const struct gguf_arr *a);
const void *gguf_arr_data(const struct gguf_arr *a);	/* NULL for string/array elements */
int gguf_arr_str(const struct gguf_arr *a, uint64_t j, struct gguf_str *out);
const struct gguf_arr *gguf_arr_sub(const struct gguf_arr *a, uint64_t j);
/* Element j of a numeric array converted, or KVC_EINVAL. */
int gguf_arr_int(const struct gguf_arr *a, uint64_t j, int64_t *out);
int gguf_arr_float(const struct gguf_arr *a, uint64_t j, double *out);

/* Tensors. */
int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Size in bytes of one value of a scalar gguf type; 0 for string/array. */
size_t gguf_type_size(enum gguf_type t);
const char *gguf_type_name(enum gguf_type t);


/* ---- the writer (gguf_write.c) ----
 * Builds a GGUF v3 file in memory (or streams it) and writes it out: the
 * fixture generator, convert-llama2c and the reader's tests use it. Keys
 * and tensors are written in the order they are added. */
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
 * header and tensor infos to a new path.XXXXXX, gguf_w_stream_data appends each
 * declared tensor's bytes in declaration order (possibly in several pieces),
 * and gguf_w_stream_close checks every tensor was complete and renames the
 * file into place.
 */
int gguf_w_stream_open(struct gguf_writer *w, const char *path, char *err, size_t errlen);
int gguf_w_stream_data(struct gguf_writer *w, const void *data, size_t nbytes, char *err, size_t errlen);
int gguf_w_stream_close(struct gguf_writer *w, char *err, size_t errlen);

/* general.alignment used for padding (default 32). */
void gguf_w_set_alignment(struct gguf_writer *w, uint32_t align);

/* Serialise to memory (caller frees *out) or to a file (written to a new
 * path.XXXXXX beside it, then renamed). */
int gguf_w_to_mem(struct gguf_writer *w, void **out, size_t *len);
int gguf_w_write(struct gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
