/*
 * gguf.c: the GGUF v2/v3 reader. The whole file is mapped read-only and
 * parsed once by a bounds-checked cursor; the only allocations are sized by
 * counts that were first checked against the bytes left in the file, so a
 * hostile header cannot make us allocate more than a small multiple of the
 * file's own size.
 */
#include "gguf.h"
#include "gguf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DEPTH 8		/* nested arrays deeper than this are refused */
#define GGUF_MAX_KEY_LEN 65535
#define GGUF_MAX_DIMS 4

struct gguf_arr {
	enum gguf_type type;	/* element type */
	uint64_t n;		/* element count */
	const uint8_t *data;	/* numeric elements (in the mapping) */
	struct gguf_str *strs;	/* [n] for string arrays */
	struct gguf_arr *subs;	/* [n] for arrays of arrays */
};

struct gguf_kv {
	char *key;		/* NUL-terminated copy */
	enum gguf_type type;
	union {
		uint64_t u;	/* unsigned integers and bool */
		int64_t i;	/* signed integers */
		double f;	/* floats */
	} v;
	struct gguf_str s;	/* string value (in the mapping) */
	char *str;		/* NUL-terminated copy of a string value */
	struct gguf_arr arr;	/* array value */
};

struct gguf_file {
	char *path;
	const uint8_t *base;	/* whole file */
	uint64_t size;
	bool mapped;		/* base came from mmap (else caller's memory) */
	int fd;			/* the mapped file, kept for gguf_pread; -1 for memory */
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;
	int64_t n_kv;
	struct gguf_kv *kv;	/* [n_kv] */
	int64_t n_tensors;
	struct gguf_tensor *tensors;	/* [n_tensors] */
};

/* Bounds-checked reader over the mapping. Errors name the offset. */
struct cursor {
	const uint8_t *base;
	uint64_t size;
	uint64_t off;
	char *err;
	size_t errlen;
	const char *name;
};

static const struct {
	const char *name;
	int64_t blck;
	size_t size;
} dtypes[GGML_TYPE_COUNT] = {
	[GGML_TYPE_F32] = { "F32", 1, 4 },
	[GGML_TYPE_F16] = { "F16", 1, 2 },
	[GGML_TYPE_Q4_0] = { "Q4_0", 32, 18 },
	[GGML_TYPE_Q4_1] = { "Q4_1", 32, 20 },
	[GGML_TYPE_Q5_0] = { "Q5_0", 32, 22 },
	[GGML_TYPE_Q5_1] = { "Q5_1", 32, 24 },
	[GGML_TYPE_Q8_0] = { "Q8_0", 32, 34 },
	[GGML_TYPE_Q8_1] = { "Q8_1", 32, 36 },
	[GGML_TYPE_Q2_K] = { "Q2_K", 256, 84 },
	[GGML_TYPE_Q3_K] = { "Q3_K", 256, 110 },
	[GGML_TYPE_Q4_K] = { "Q4_K", 256, 144 },
	[GGML_TYPE_Q5_K] = { "Q5_K", 256, 176 },
	[GGML_TYPE_Q6_K] = { "Q6_K", 256, 210 },
	[GGML_TYPE_Q8_K] = { "Q8_K", 256, 292 },
	[GGML_TYPE_IQ2_XXS] = { "IQ2_XXS", 256, 66 },
	[GGML_TYPE_IQ2_XS] = { "IQ2_XS", 256, 74 },
	[GGML_TYPE_IQ3_XXS] = { "IQ3_XXS", 256, 98 },
	[GGML_TYPE_IQ1_S] = { "IQ1_S", 256, 50 },
	[GGML_TYPE_IQ4_NL] = { "IQ4_NL", 32, 18 },
	[GGML_TYPE_IQ3_S] = { "IQ3_S", 256, 110 },
	[GGML_TYPE_IQ2_S] = { "IQ2_S", 256, 82 },
	[GGML_TYPE_IQ4_XS] = { "IQ4_XS", 256, 136 },
	[GGML_TYPE_I8] = { "I8", 1, 1 },
	[GGML_TYPE_I16] = { "I16", 1, 2 },
	[GGML_TYPE_I32] = { "I32", 1, 4 },
	[GGML_TYPE_I64] = { "I64", 1, 8 },
	[GGML_TYPE_F64] = { "F64", 1, 8 },
	[GGML_TYPE_IQ1_M] = { "IQ1_M", 256, 56 },
	[GGML_TYPE_BF16] = { "BF16", 1, 2 },
	[GGML_TYPE_TQ1_0] = { "TQ1_0", 256, 54 },
	[GGML_TYPE_TQ2_0] = { "TQ2_0", 256, 66 },
	[GGML_TYPE_MXFP4] = { "MXFP4", 32, 17 },
};

int64_t
gguf_dtype_block(enum gguf_dtype t)
{
	if ((unsigned)t >= GGML_TYPE_COUNT)
		return 0;
	return dtypes[t].blck;
}

size_t
gguf_dtype_size(enum gguf_dtype t)
{
	if ((unsigned)t >= GGML_TYPE_COUNT)
		return 0;
	return dtypes[t].size;
}

const char *
gguf_dtype_name(enum gguf_dtype t)
{
	if ((unsigned)t >= GGML_TYPE_COUNT || dtypes[t].name == NULL)
		return "?";
	return dtypes[t].name;
}

size_t
gguf_dtype_row_size(enum gguf_dtype t, int64_t ne0)
{
	int64_t blck = gguf_dtype_block(t);
	size_t out;

	if (blck <= 0 || ne0 < 0 || ne0 % blck != 0)
		return 0;
	if (!kvc_mul_ok((size_t)(ne0 / blck), gguf_dtype_size(t), &out))
		return 0;
	return out;
}

size_t
gguf_type_size(enum gguf_type t)
{
	switch (t) {
	case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
	case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
	case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
	case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
	default: return 0;
	}
}

const char *
gguf_type_name(enum gguf_type t)
{
	static const char *names[GGUF_TYPE_COUNT] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
		"string", "array", "u64", "i64", "f64",
	};
	if ((unsigned)t >= GGUF_TYPE_COUNT)
		return "?";
	return names[t];
}

static int
cur_fail(struct cursor *c, const char *what)
{
	kvc_err(c->err, c->errlen, "%s: %s (at byte %llu of %llu)", c->name, what,
	    (unsigned long long)c->off, (unsigned long long)c->size);
	return KVC_EFORMAT;
}

/*
 * A read that would run past the end of the file: most often a download
 * that stopped, so the message says the file looks truncated (a lying
 * count in a damaged or hostile file reads the same way).
 */
static int
cur_short(struct cursor *c, const char *what)
{
	kvc_err(c->err, c->errlen, "%s: the file looks truncated (an interrupted download or "
	    "copy?): %s (at byte %llu, the file ends at %llu)", c->name, what,
	    (unsigned long long)c->off, (unsigned long long)c->size);
	return KVC_EFORMAT;
}

static uint64_t
cur_left(const struct cursor *c)
{
	return c->size - c->off;
}

static int
cur_bytes(struct cursor *c, void *dst, size_t n, const char *what)
{
	if (cur_left(c) < n)
		return cur_short(c, what);
	memcpy(dst, c->base + c->off, n);
	c->off += n;
	return KVC_OK;
}

/* GGUF is little-endian; this reader assumes a little-endian host (x86-64, arm64). */
static int
cur_u32(struct cursor *c, uint32_t *v, const char *what)
{
	return cur_bytes(c, v, 4, what);
}

static int
cur_u64(struct cursor *c, uint64_t *v, const char *what)
{
	return cur_bytes(c, v, 8, what);
}

static int
cur_str(struct cursor *c, struct gguf_str *s, const char *what)
{
	uint64_t len;
	int rc;

	if ((rc = cur_u64(c, &len, what)) != KVC_OK)
		return rc;
	if (len > cur_left(c))
		return cur_short(c, what);
	s->ptr = (const char *)c->base + c->off;
	s->len = len;
	c->off += len;
	return KVC_OK;
}

static char *
str_dup(const struct gguf_str *s)
{
	char *p = malloc((size_t)s->len + 1);

	if (p == NULL)
		return NULL;
	memcpy(p, s->ptr, (size_t)s->len);
	p[s->len] = '\0';
	return p;
}

static void
arr_free(struct gguf_arr *a)
{
	if (a->subs != NULL) {
		for (uint64_t j = 0; j < a->n; j++)
			arr_free(&a->subs[j]);
	}
	free(a->subs);
	free(a->strs);
	a->subs = NULL;
	a->strs = NULL;
}

static int
parse_arr(struct cursor *c, struct gguf_arr *a, int depth)
{
	uint32_t type;
	uint64_t n;
	size_t esize;
	int rc;

	if (depth > GGUF_MAX_DEPTH)
		return cur_fail(c, "arrays nested too deeply");
	if ((rc = cur_u32(c, &type, "truncated array header")) != KVC_OK)
		return rc;
	if (type >= GGUF_TYPE_COUNT)
		return cur_fail(c, "unknown array element type");
	if ((rc = cur_u64(c, &n, "truncated array header")) != KVC_OK)
		return rc;
	a->type = (enum gguf_type)type;
	a->n = n;
	esize = gguf_type_size(a->type);
	if (esize != 0) {
		if (n > cur_left(c) / esize)
			return cur_short(c, "array runs past end of file");
		a->data = c->base + c->off;
		c->off += n * esize;
		return KVC_OK;
	}
	if (a->type == GGUF_TYPE_STRING) {
		/* each string needs at least its 8-byte length */
		if (n > cur_left(c) / 8)
			return cur_short(c, "string array count exceeds file size");
		a->strs = calloc(n ? n : 1, sizeof *a->strs);
		if (a->strs == NULL)
			return KVC_ENOMEM;
		for (uint64_t j = 0; j < n; j++)
			if ((rc = cur_str(c, &a->strs[j], "string array element runs past end of file")) != KVC_OK)
				return rc;
		return KVC_OK;
	}
	/* arrays of arrays: each needs at least a 12-byte header */
	if (n > cur_left(c) / 12)
		return cur_short(c, "nested array count exceeds file size");
	a->subs = calloc(n ? n : 1, sizeof *a->subs);
	if (a->subs == NULL)
		return KVC_ENOMEM;
	for (uint64_t j = 0; j < n; j++)
		if ((rc = parse_arr(c, &a->subs[j], depth + 1)) != KVC_OK)
			return rc;
	return KVC_OK;
}

static int
parse_kv(struct cursor *c, struct gguf_kv *kv, int64_t idx)
{
	struct gguf_str key;
	uint32_t type;
	uint8_t b[8];
	int rc;

	if ((rc = cur_str(c, &key, "truncated key")) != KVC_OK)
		return rc;
	if (key.len == 0 || key.len > GGUF_MAX_KEY_LEN)
		return cur_fail(c, "key of invalid length");
	if ((kv->key = str_dup(&key)) == NULL)
		return KVC_ENOMEM;
	if (strlen(kv->key) != key.len)
		return cur_fail(c, "key contains a NUL byte");
	if ((rc = cur_u32(c, &type, "truncated value type")) != KVC_OK)
		return rc;
	if (type >= GGUF_TYPE_COUNT) {
		char msg[128];
		snprintf(msg, sizeof msg, "key %lld has unknown value type %u", (long long)idx, type);
		return cur_fail(c, msg);
	}
	kv->type = (enum gguf_type)type;
	switch (kv->type) {
	case GGUF_TYPE_STRING:
		if ((rc = cur_str(c, &kv->s, "string value runs past end of file")) != KVC_OK)
			return rc;
		if ((kv->str = str_dup(&kv->s)) == NULL)
			return KVC_ENOMEM;
		return KVC_OK;
	case GGUF_TYPE_ARRAY:
		return parse_arr(c, &kv->arr, 1);
	default:
		break;
	}
	if ((rc = cur_bytes(c, b, gguf_type_size(kv->type), "truncated value")) != KVC_OK)
		return rc;
	switch (kv->type) {
	case GGUF_TYPE_UINT8: kv->v.u = b[0]; break;
	case GGUF_TYPE_INT8: kv->v.i = (int8_t)b[0]; break;
	case GGUF_TYPE_BOOL:
		if (b[0] > 1)
			return cur_fail(c, "bool value other than 0 or 1");
		kv->v.u = b[0];
		break;
	case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; break; }
	case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
	case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; break; }
	case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
	case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
	case GGUF_TYPE_UINT64: memcpy(&kv->v.u, b, 8); break;
	case GGUF_TYPE_INT64: memcpy(&kv->v.i, b, 8); break;
	case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f, b, 8); break;
	default: break;
	}
	return KVC_OK;
}

static int
parse_tensor_info(struct cursor *c, struct gguf_tensor *t, int64_t idx)
{
	struct gguf_str name;
	uint32_t n_dims, type;
	uint64_t offset;
	char msg[160];
	int rc;

	if ((rc = cur_str(c, &name, "truncated tensor name")) != KVC_OK)
		return rc;
	if (name.len == 0 || name.len > GGUF_MAX_KEY_LEN)
		return cur_fail(c, "tensor name of invalid length");
	if ((t->name = str_dup(&name)) == NULL)
		return KVC_ENOMEM;
	if ((rc = cur_u32(c, &n_dims, "truncated tensor info")) != KVC_OK)
		return rc;
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
		snprintf(msg, sizeof msg, "tensor '%s' has %u dimensions (1 to 4 allowed)", t->name, n_dims);
		return cur_fail(c, msg);
	}
	t->n_dims = n_dims;
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < n_dims; d++) {
		uint64_t ne;
		if ((rc = cur_u64(c, &ne, "truncated tensor shape")) != KVC_OK)
			return rc;
		if (ne > (uint64_t)INT64_MAX) {
			snprintf(msg, sizeof msg, "tensor '%s' has a negative dimension", t->name);
			return cur_fail(c, msg);
		}
		t->ne[d] = (int64_t)ne;
	}
	if ((rc = cur_u32(c, &type, "truncated tensor type")) != KVC_OK)
		return rc;
	if (type >= GGML_TYPE_COUNT || dtypes[type].blck == 0) {
		snprintf(msg, sizeof msg, "tensor '%s' has unknown type %u", t->name, type);
		return cur_fail(c, msg);
	}
	t->type = (enum gguf_dtype)type;
	if ((rc = cur_u64(c, &offset, "truncated tensor offset")) != KVC_OK)
		return rc;
	t->offset = offset;
	if (t->ne[0] % gguf_dtype_block(t->type) != 0) {
		snprintf(msg, sizeof msg, "tensor '%s': row of %lld elements is not a multiple of %s's block size",
		    t->name, (long long)t->ne[0], gguf_dtype_name(t->type));
		return cur_fail(c, msg);
	}
	(void)idx;
	return KVC_OK;
}

/* Check each tensor's extent now that the data section's start is known. */
static int
check_tensor_extents(struct gguf_file *f, char *err, size_t errlen)
{
	for (int64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		size_t bytes = gguf_dtype_row_size(t->type, t->ne[0]);
		uint64_t start;

		for (int d = 1; d < GGUF_MAX_DIMS; d++) {
			if (!kvc_mul_ok(bytes, (size_t)t->ne[d], &bytes)) {
				kvc_err(err, errlen, "%s: tensor '%s' is impossibly large", f->path, t->name);
				return KVC_EFORMAT;
			}
		}
		if (t->offset % f->alignment != 0) {
			kvc_err(err, errlen, "%s: tensor '%s' offset %llu is not aligned to %u",
			    f->path, t->name, (unsigned long long)t->offset, f->alignment);
			return KVC_EFORMAT;
		}
		if (t->offset > f->size - f->data_offset ||
		    bytes > f->size - f->data_offset - t->offset) {
			kvc_err(err, errlen, "%s: tensor '%s' (%zu bytes at data offset %llu) runs past the end of the file (%llu bytes): truncated?",
			    f->path, t->name, bytes, (unsigned long long)t->offset,
			    (unsigned long long)f->size);
			return KVC_EFORMAT;
		}
		start = f->data_offset + t->offset;
		t->nbytes = bytes;
		t->data = f->base + start;
		for (int64_t j = 0; j < i; j++)
			if (strcmp(f->tensors[j].name, t->name) == 0) {
				kvc_err(err, errlen, "%s: duplicate tensor '%s'", f->path, t->name);
				return KVC_EFORMAT;
			}
	}
	return KVC_OK;
}

static int
parse(struct gguf_file *f, char *err, size_t errlen)
{
	struct cursor c = { f->base, f->size, 0, err, errlen, f->path };
	char magic[4];
	uint64_t n_tensors, n_kv;
	int64_t ai;
	int rc;

	if (f->size < 4 || memcmp(f->base, GGUF_MAGIC, 4) != 0) {
		kvc_err(err, errlen, "%s: not a GGUF file (bad magic)", f->path);
		return KVC_EFORMAT;
	}
	if ((rc = cur_bytes(&c, magic, 4, "truncated header")) != KVC_OK ||
	    (rc = cur_u32(&c, &f->version, "truncated header")) != KVC_OK)
		return rc;
	if (f->version != 2 && f->version != 3) {
		kvc_err(err, errlen, "%s: GGUF version %u is not supported (2 and 3 are)", f->path, f->version);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = cur_u64(&c, &n_tensors, "truncated header")) != KVC_OK ||
	    (rc = cur_u64(&c, &n_kv, "truncated header")) != KVC_OK)
		return rc;
	/* a key/value pair takes at least 13 bytes, a tensor info at least 32 */
	if (n_kv > cur_left(&c) / 13)
		return cur_short(&c, "metadata count exceeds what the file can hold");
	if (n_tensors > cur_left(&c) / 32)
		return cur_short(&c, "tensor count exceeds what the file can hold");
	f->kv = calloc(n_kv ? n_kv : 1, sizeof *f->kv);
	f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
	if (f->kv == NULL || f->tensors == NULL)
		return KVC_ENOMEM;
	for (uint64_t i = 0; i < n_kv; i++) {
		f->n_kv = (int64_t)i + 1;
		if ((rc = parse_kv(&c, &f->kv[i], (int64_t)i)) != KVC_OK)
			return rc;
		for (uint64_t j = 0; j < i; j++)
			if (strcmp(f->kv[j].key, f->kv[i].key) == 0) {
				kvc_err(err, errlen, "%s: duplicate key '%s'", f->path, f->kv[i].key);
				return KVC_EFORMAT;
			}
	}
	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if ((ai = gguf_find_key(f, "general.alignment")) >= 0) {
		int64_t a;
		if (gguf_kv_int(f, ai, &a) != KVC_OK || a <= 0 || a > (1 << 20) || (a & (a - 1)) != 0) {
			kvc_err(err, errlen, "%s: general.alignment must be a power of two up to 1 MiB", f->path);
			return KVC_EFORMAT;
		}
		f->alignment = (uint32_t)a;
	}
	for (uint64_t i = 0; i < n_tensors; i++) {
		f->n_tensors = (int64_t)i + 1;
		if ((rc = parse_tensor_info(&c, &f->tensors[i], (int64_t)i)) != KVC_OK)
			return rc;
	}
	/* Data starts at the next multiple of the alignment (if there are tensors). */
	f->data_offset = c.off;
	if (f->data_offset % f->alignment != 0)
		f->data_offset += f->alignment - f->data_offset % f->alignment;
	if (f->n_tensors > 0 && f->data_offset > f->size) {
		kvc_err(err, errlen, "%s: truncated before the tensor data", f->path);
		return KVC_EFORMAT;
	}
	if (f->data_offset > f->size)
		f->data_offset = f->size;
	return check_tensor_extents(f, err, errlen);
}

static int
open_common(struct gguf_file *f, struct gguf_file **out, char *err, size_t errlen)
{
	int rc = parse(f, err, errlen);

	if (rc != KVC_OK) {
		if (rc == KVC_ENOMEM)
			kvc_err(err, errlen, "%s: out of memory while reading metadata", f->path);
		gguf_close(f);
		return rc;
	}
	*out = f;
	return KVC_OK;
}

int
gguf_open(struct gguf_file **out, const char *path, char *err, size_t errlen)
{
	struct gguf_file *f;
	struct stat st;
	void *map;
	int fd;

	*out = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		kvc_err(err, errlen, "%s: %s", path, strerror(errno));
		return KVC_EIO;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		kvc_err(err, errlen, "%s: not a regular file", path);
		close(fd);
		return KVC_EIO;
	}
	if (st.st_size == 0) {
		kvc_err(err, errlen, "%s: empty file", path);
		close(fd);
		return KVC_EFORMAT;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		kvc_err(err, errlen, "%s: cannot map: %s", path, strerror(errno));
		close(fd);
		return KVC_EIO;
	}
	if ((f = calloc(1, sizeof *f)) == NULL || (f->path = strdup(path)) == NULL) {
		free(f);
		munmap(map, (size_t)st.st_size);
		close(fd);
		kvc_err(err, errlen, "%s: out of memory", path);
		return KVC_ENOMEM;
	}
	f->base = map;
	f->size = (uint64_t)st.st_size;
	f->mapped = true;
	f->fd = fd;
	return open_common(f, out, err, errlen);
}

int
gguf_open_mem(struct gguf_file **out, const void *data, size_t size,
    const char *name, char *err, size_t errlen)
{
	struct gguf_file *f;

	*out = NULL;
	if ((f = calloc(1, sizeof *f)) == NULL ||
	    (f->path = strdup(name ? name : "<memory>")) == NULL) {
		free(f);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	f->base = data;
	f->size = size;
	f->fd = -1;
	if (size == 0) {
		kvc_err(err, errlen, "%s: empty file", f->path);
		gguf_close(f);
		return KVC_EFORMAT;
	}
	return open_common(f, out, err, errlen);
}

void
gguf_close(struct gguf_file *f)
{
	if (f == NULL)
		return;
	for (int64_t i = 0; i < f->n_kv; i++) {
		free(f->kv[i].key);
		free(f->kv[i].str);
		arr_free(&f->kv[i].arr);
	}
	for (int64_t i = 0; i < f->n_tensors; i++)
		free((char *)f->tensors[i].name);
	free(f->kv);
	free(f->tensors);
	if (f->mapped)
		munmap((void *)f->base, (size_t)f->size);
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	free(f);
}

const char *gguf_path(const struct gguf_file *f) { return f->path; }
uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const struct gguf_file *f) { return f->size; }
bool gguf_mapped(const struct gguf_file *f) { return f->mapped; }
const uint8_t *gguf_base(const struct gguf_file *f) { return f->base; }
int gguf_fd(const struct gguf_file *f) { return f->fd; }
uint32_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }
int64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const char *
gguf_kv_key(const struct gguf_file *f, int64_t i)
{
	return (i >= 0 && i < f->n_kv) ? f->kv[i].key : NULL;
}

enum gguf_type
gguf_kv_type(const struct gguf_file *f, int64_t i)
{
	return (i >= 0 && i < f->n_kv) ? f->kv[i].type : GGUF_TYPE_COUNT;
}

int64_t
gguf_find_key(const struct gguf_file *f, const char *key)
{
	for (int64_t i = 0; i < f->n_kv; i++)
		if (strcmp(f->kv[i].key, key) == 0)
			return i;
	return -1;
}

static bool
type_is_signed(enum gguf_type t)
{
	return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 ||
	    t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

static bool
type_is_unsigned(enum gguf_type t)
{
	return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 ||
	    t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}

int
gguf_kv_int(const struct gguf_file *f, int64_t i, int64_t *out)
{
	const struct gguf_kv *kv;

	if (i < 0 || i >= f->n_kv)
		return KVC_EINVAL;
	kv = &f->kv[i];
	if (type_is_signed(kv->type)) {
		*out = kv->v.i;
		return KVC_OK;
	}
	if (type_is_unsigned(kv->type)) {
		if (kv->v.u > (uint64_t)INT64_MAX)
			return KVC_ERANGE;
		*out = (int64_t)kv->v.u;
		return KVC_OK;
	}
	return KVC_EINVAL;
}

int
gguf_kv_float(const struct gguf_file *f, int64_t i, double *out)
{
	const struct gguf_kv *kv;
	int64_t v;

	if (i < 0 || i >= f->n_kv)
		return KVC_EINVAL;
	kv = &f->kv[i];
	if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
		*out = kv->v.f;
		return KVC_OK;
	}
	if (gguf_kv_int(f, i, &v) == KVC_OK) {
		*out = (double)v;
		return KVC_OK;
	}
	return KVC_EINVAL;
}

int
gguf_kv_str(const struct gguf_file *f, int64_t i, struct gguf_str *out)
{
	if (i < 0 || i >= f->n_kv || f->kv[i].type != GGUF_TYPE_STRING)
		return KVC_EINVAL;
	*out = f->kv[i].s;
	return KVC_OK;
}

int64_t
gguf_get_int(const struct gguf_file *f, const char *key, int64_t def)
{
	int64_t v;

	if (gguf_kv_int(f, gguf_find_key(f, key), &v) != KVC_OK)
		return def;
	return v;
}

double
gguf_get_float(const struct gguf_file *f, const char *key, double def)
{
	double v;

	if (gguf_kv_float(f, gguf_find_key(f, key), &v) != KVC_OK)
		return def;
	return v;
}

bool
gguf_get_bool(const struct gguf_file *f, const char *key, bool def)
{
	int64_t i = gguf_find_key(f, key);

	if (i < 0 || f->kv[i].type != GGUF_TYPE_BOOL)
		return def;
	return f->kv[i].v.u != 0;
}

const char *
gguf_get_str(const struct gguf_file *f, const char *key, const char *def)
{
	int64_t i = gguf_find_key(f, key);

	if (i < 0 || f->kv[i].type != GGUF_TYPE_STRING)
		return def;
	return f->kv[i].str;
}

const struct gguf_arr *
gguf_kv_arr(const struct gguf_file *f, int64_t i)
{
	if (i < 0 || i >= f->n_kv || f->kv[i].type != GGUF_TYPE_ARRAY)
		return NULL;
	return &f->kv[i].arr;
}

const struct gguf_arr *
gguf_get_arr(const struct gguf_file *f, const char *key)
{
	return gguf_kv_arr(f, gguf_find_key(f, key));
}

enum gguf_type gguf_arr_type(const struct gguf_arr *a) { return a->type; }
uint64_t gguf_arr_n(const struct gguf_arr *a) { return a->n; }

const void *
gguf_arr_data(const struct gguf_arr *a)
{
	return a->data;
}

int
gguf_arr_str(const struct gguf_arr *a, uint64_t j, struct gguf_str *out)
{
	if (a->type != GGUF_TYPE_STRING || j >= a->n)
		return KVC_EINVAL;
	*out = a->strs[j];
	return KVC_OK;
}

const struct gguf_arr *
gguf_arr_sub(const struct gguf_arr *a, uint64_t j)
{
	if (a->type != GGUF_TYPE_ARRAY || j >= a->n)
		return NULL;
	return &a->subs[j];
}

int
gguf_arr_int(const struct gguf_arr *a, uint64_t j, int64_t *out)
{
	const uint8_t *p;

	if (a->data == NULL || j >= a->n)
		return KVC_EINVAL;
	p = a->data + j * gguf_type_size(a->type);
	switch (a->type) {
	case GGUF_TYPE_UINT8: *out = *p; return KVC_OK;
	case GGUF_TYPE_INT8: *out = (int8_t)*p; return KVC_OK;
	case GGUF_TYPE_BOOL: *out = *p != 0; return KVC_OK;
	case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); *out = x; return KVC_OK; }
	case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); *out = x; return KVC_OK; }
	case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); *out = x; return KVC_OK; }
	case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); *out = x; return KVC_OK; }
	case GGUF_TYPE_INT64: memcpy(out, p, 8); return KVC_OK;
	case GGUF_TYPE_UINT64: {
		uint64_t x;
		memcpy(&x, p, 8);
		if (x > (uint64_t)INT64_MAX)
			return KVC_ERANGE;
		*out = (int64_t)x;
		return KVC_OK;
	}
	default: return KVC_EINVAL;
	}
}

int
gguf_arr_float(const struct gguf_arr *a, uint64_t j, double *out)
{
	int64_t v;

	if (a->data == NULL || j >= a->n)
		return KVC_EINVAL;
	if (a->type == GGUF_TYPE_FLOAT32) {
		float x;
		memcpy(&x, a->data + j * 4, 4);
		*out = x;
		return KVC_OK;
	}
	if (a->type == GGUF_TYPE_FLOAT64) {
		memcpy(out, a->data + j * 8, 8);
		return KVC_OK;
	}
	if (gguf_arr_int(a, j, &v) != KVC_OK)
		return KVC_EINVAL;
	*out = (double)v;
	return KVC_OK;
}

const struct gguf_tensor *
gguf_tensor(const struct gguf_file *f, int64_t i)
{
	return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}

const struct gguf_tensor *
gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	for (int64_t i = 0; i < f->n_tensors; i++)
		if (strcmp(f->tensors[i].name, name) == 0)
			return &f->tensors[i];
	return NULL;
}
