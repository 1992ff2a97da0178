/*
 * gguf_write.c: GGUF v3 writer. Metadata is encoded into a byte buffer as
 * keys are added; tensor data is either held (copied) or streamed later.
 */
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct w_tensor {
	char *name;
	enum gguf_dtype type;
	uint32_t n_dims;
	int64_t ne[4];
	size_t nbytes;
	void *data;		/* NULL when streamed */
	uint64_t offset;	/* in the data section */
};

struct gguf_writer {
	struct kvc_buf kv;	/* encoded key/value pairs */
	uint64_t n_kv;
	struct w_tensor *t;
	size_t n_t, cap_t;
	uint32_t alignment;
	/* streaming state */
	FILE *fp;
	char *path, *tmp;
	size_t cur;		/* tensor being streamed */
	size_t cur_done;	/* bytes of it written */
	uint64_t pos;		/* bytes of data section written */
};

struct gguf_writer *
gguf_writer_new(void)
{
	struct gguf_writer *w = calloc(1, sizeof *w);

	if (w != NULL)
		w->alignment = 32;
	return w;
}

void
gguf_writer_free(struct gguf_writer *w)
{
	if (w == NULL)
		return;
	for (size_t i = 0; i < w->n_t; i++) {
		free(w->t[i].name);
		free(w->t[i].data);
	}
	free(w->t);
	kvc_buf_free(&w->kv);
	if (w->fp != NULL) {
		fclose(w->fp);
		remove(w->tmp);
	}
	free(w->path);
	free(w->tmp);
	free(w);
}

void
gguf_w_set_alignment(struct gguf_writer *w, uint32_t align)
{
	w->alignment = align ? align : 32;
}

static int
put_u32(struct kvc_buf *b, uint32_t v)
{
	return kvc_buf_append(b, &v, 4);
}

static int
put_u64(struct kvc_buf *b, uint64_t v)
{
	return kvc_buf_append(b, &v, 8);
}

static int
put_strn(struct kvc_buf *b, const char *s, size_t len)
{
	if (put_u64(b, len) != KVC_OK)
		return KVC_ENOMEM;
	return kvc_buf_append(b, s, len);
}

static int
put_key(struct gguf_writer *w, const char *key, enum gguf_type type)
{
	if (put_strn(&w->kv, key, strlen(key)) != KVC_OK || put_u32(&w->kv, type) != KVC_OK)
		return KVC_ENOMEM;
	w->n_kv++;
	return KVC_OK;
}

int
gguf_w_raw(struct gguf_writer *w, const char *key, enum gguf_type type, const void *payload, size_t len)
{
	if (put_key(w, key, type) != KVC_OK)
		return KVC_ENOMEM;
	return kvc_buf_append(&w->kv, payload, len);
}

int gguf_w_u32(struct gguf_writer *w, const char *k, uint32_t v) { return gguf_w_raw(w, k, GGUF_TYPE_UINT32, &v, 4); }
int gguf_w_i32(struct gguf_writer *w, const char *k, int32_t v) { return gguf_w_raw(w, k, GGUF_TYPE_INT32, &v, 4); }
int gguf_w_u64(struct gguf_writer *w, const char *k, uint64_t v) { return gguf_w_raw(w, k, GGUF_TYPE_UINT64, &v, 8); }
int gguf_w_f32(struct gguf_writer *w, const char *k, float v) { return gguf_w_raw(w, k, GGUF_TYPE_FLOAT32, &v, 4); }

int
gguf_w_bool(struct gguf_writer *w, const char *k, bool v)
{
	uint8_t b = v ? 1 : 0;

	return gguf_w_raw(w, k, GGUF_TYPE_BOOL, &b, 1);
}

int
gguf_w_str(struct gguf_writer *w, const char *key, const char *v)
{
	if (put_key(w, key, GGUF_TYPE_STRING) != KVC_OK)
		return KVC_ENOMEM;
	return put_strn(&w->kv, v, strlen(v));
}

static int
put_arr_header(struct gguf_writer *w, const char *key, enum gguf_type et, size_t n)
{
	if (put_key(w, key, GGUF_TYPE_ARRAY) != KVC_OK || put_u32(&w->kv, et) != KVC_OK)
		return KVC_ENOMEM;
	return put_u64(&w->kv, n);
}

int
gguf_w_arr_strn(struct gguf_writer *w, const char *key, const char *const *v, const size_t *lens, size_t n)
{
	if (put_arr_header(w, key, GGUF_TYPE_STRING, n) != KVC_OK)
		return KVC_ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (put_strn(&w->kv, v[i], lens ? lens[i] : strlen(v[i])) != KVC_OK)
			return KVC_ENOMEM;
	return KVC_OK;
}

int
gguf_w_arr_str(struct gguf_writer *w, const char *key, const char *const *v, size_t n)
{
	return gguf_w_arr_strn(w, key, v, NULL, n);
}

int
gguf_w_arr_f32(struct gguf_writer *w, const char *key, const float *v, size_t n)
{
	if (put_arr_header(w, key, GGUF_TYPE_FLOAT32, n) != KVC_OK)
		return KVC_ENOMEM;
	return kvc_buf_append(&w->kv, v, n * sizeof *v);
}

int
gguf_w_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
	if (put_arr_header(w, key, GGUF_TYPE_INT32, n) != KVC_OK)
		return KVC_ENOMEM;
	return kvc_buf_append(&w->kv, v, n * sizeof *v);
}

int
gguf_w_tensor(struct gguf_writer *w, const char *name, enum gguf_dtype type,
    uint32_t n_dims, const int64_t *ne, const void *data, size_t nbytes)
{
	struct w_tensor *t;
	size_t want;

	if (n_dims < 1 || n_dims > 4)
		return KVC_EINVAL;
	want = gguf_dtype_row_size(type, ne[0]);
	for (uint32_t d = 1; d < n_dims; d++)
		want *= (size_t)ne[d];
	if (want == 0 || want != nbytes)
		return KVC_EINVAL;
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? 2 * w->cap_t : 64;
		struct w_tensor *p = realloc(w->t, cap * sizeof *p);
		if (p == NULL)
			return KVC_ENOMEM;
		w->t = p;
		w->cap_t = cap;
	}
	t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	if ((t->name = strdup(name)) == NULL)
		return KVC_ENOMEM;
	t->type = type;
	t->n_dims = n_dims;
	for (int d = 0; d < 4; d++)
		t->ne[d] = d < (int)n_dims ? ne[d] : 1;
	t->nbytes = nbytes;
	if (data != NULL) {
		if ((t->data = malloc(nbytes)) == NULL) {
			free(t->name);
			return KVC_ENOMEM;
		}
		memcpy(t->data, data, nbytes);
	}
	w->n_t++;
	return KVC_OK;
}

static uint64_t
align_up(uint64_t x, uint32_t a)
{
	return (x + a - 1) / a * a;
}

/* Header, metadata and tensor infos, padded to the alignment. */
static int
encode_head(struct gguf_writer *w, struct kvc_buf *out)
{
	uint64_t off = 0;
	int rc = KVC_OK;

	rc |= kvc_buf_append(out, "GGUF", 4);
	rc |= put_u32(out, 3);
	rc |= put_u64(out, w->n_t);
	rc |= put_u64(out, w->n_kv + (w->alignment != 32));
	rc |= kvc_buf_append(out, w->kv.p, w->kv.n);
	if (w->alignment != 32) {
		rc |= put_strn(out, "general.alignment", 17);
		rc |= put_u32(out, GGUF_TYPE_UINT32);
		rc |= put_u32(out, w->alignment);
	}
	for (size_t i = 0; i < w->n_t; i++) {
		struct w_tensor *t = &w->t[i];
		rc |= put_strn(out, t->name, strlen(t->name));
		rc |= put_u32(out, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims; d++)
			rc |= put_u64(out, (uint64_t)t->ne[d]);
		rc |= put_u32(out, t->type);
		t->offset = off;
		rc |= put_u64(out, off);
		off = align_up(off + t->nbytes, w->alignment);
	}
	if (w->n_t > 0)
		while (out->n % w->alignment)
			rc |= kvc_buf_append(out, "", 1);
	return rc ? KVC_ENOMEM : KVC_OK;
}

int
gguf_w_to_mem(struct gguf_writer *w, void **out, size_t *len)
{
	struct kvc_buf b = { 0 };

	if (encode_head(w, &b) != KVC_OK)
		goto nomem;
	for (size_t i = 0; i < w->n_t; i++) {
		struct w_tensor *t = &w->t[i];
		if (t->data == NULL) {
			kvc_buf_free(&b);
			return KVC_EINVAL;
		}
		if (kvc_buf_append(&b, t->data, t->nbytes) != KVC_OK)
			goto nomem;
		if (i + 1 < w->n_t)
			while (b.n % w->alignment)
				if (kvc_buf_append(&b, "", 1) != KVC_OK)
					goto nomem;
	}
	*out = b.p;
	*len = b.n;
	return KVC_OK;
nomem:
	kvc_buf_free(&b);
	return KVC_ENOMEM;
}

/* The process's umask (read by setting it back at once; the writer runs
 * before any thread that creates files). */
static unsigned
current_umask(void)
{
	mode_t m = umask(077);

	umask(m);
	return (unsigned)m;
}

int
gguf_w_stream_open(struct gguf_writer *w, const char *path, char *err, size_t errlen)
{
	struct kvc_buf head = { 0 };
	int fd;

	if (encode_head(w, &head) != KVC_OK) {
		kvc_err(err, errlen, "%s: out of memory", path);
		return KVC_ENOMEM;
	}
	w->path = strdup(path);
	if (w->path == NULL) {
		kvc_buf_free(&head);
		return KVC_ENOMEM;
	}
	/* A fresh name beside path (never a planted path.tmp link); a model is
	 * no private data, so it gets the mode fopen would give. */
	fd = kvc_file_tmp_beside(path, 0666 & ~current_umask(), &w->tmp, err, errlen);
	if (fd < 0 || (w->fp = fdopen(fd, "wb")) == NULL) {
		if (fd >= 0) {
			kvc_err(err, errlen, "%s: %s", w->tmp, strerror(errno));
			close(fd);
			remove(w->tmp);
		}
		kvc_buf_free(&head);
		return fd < 0 ? fd : KVC_EIO;
	}
	if (fwrite(head.p, 1, head.n, w->fp) != head.n) {
		kvc_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
		kvc_buf_free(&head);
		return KVC_EIO;
	}
	kvc_buf_free(&head);
	w->cur = 0;
	w->cur_done = 0;
	w->pos = 0;
	return KVC_OK;
}

static int
write_all(struct gguf_writer *w, const void *p, size_t n, char *err, size_t errlen)
{
	if (n && fwrite(p, 1, n, w->fp) != n) {
		kvc_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
		return KVC_EIO;
	}
	w->pos += n;
	return KVC_OK;
}

int
gguf_w_stream_data(struct gguf_writer *w, const void *data, size_t nbytes, char *err, size_t errlen)
{
	static const char zeros[64];
	const char *p = data;

	while (nbytes > 0) {
		struct w_tensor *t;
		size_t take;

		if (w->cur >= w->n_t) {
			kvc_err(err, errlen, "%s: more tensor data than declared", w->tmp);
			return KVC_EINVAL;
		}
		t = &w->t[w->cur];
		/* pad up to this tensor's offset */
		while (w->pos < t->offset) {
			size_t pad = t->offset - w->pos;
			if (pad > sizeof zeros)
				pad = sizeof zeros;
			if (write_all(w, zeros, pad, err, errlen) != KVC_OK)
				return KVC_EIO;
		}
		take = t->nbytes - w->cur_done;
		if (take > nbytes)
			take = nbytes;
		if (write_all(w, p, take, err, errlen) != KVC_OK)
			return KVC_EIO;
		p += take;
		nbytes -= take;
		w->cur_done += take;
		if (w->cur_done == t->nbytes) {
			w->cur++;
			w->cur_done = 0;
		}
	}
	return KVC_OK;
}

int
gguf_w_stream_close(struct gguf_writer *w, char *err, size_t errlen)
{
	int rc;

	if (w->cur != w->n_t) {
		kvc_err(err, errlen, "%s: tensor '%s' incomplete", w->tmp,
		    w->cur < w->n_t ? w->t[w->cur].name : "?");
		return KVC_EINVAL;
	}
	rc = fflush(w->fp) == 0 && ferror(w->fp) == 0;
	rc = fclose(w->fp) == 0 && rc;
	w->fp = NULL;
	if (!rc) {
		kvc_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
		remove(w->tmp);
		return KVC_EIO;
	}
	if (rename(w->tmp, w->path) != 0) {
		kvc_err(err, errlen, "%s: cannot rename into place: %s", w->path, strerror(errno));
		remove(w->tmp);
		return KVC_EIO;
	}
	return KVC_OK;
}

int
gguf_w_write(struct gguf_writer *w, const char *path, char *err, size_t errlen)
{
	int rc;

	if ((rc = gguf_w_stream_open(w, path, err, errlen)) != KVC_OK)
		return rc;
	for (size_t i = 0; i < w->n_t; i++) {
		if (w->t[i].data == NULL) {
			kvc_err(err, errlen, "%s: tensor '%s' has no data", path, w->t[i].name);
			return KVC_EINVAL;
		}
		if ((rc = gguf_w_stream_data(w, w->t[i].data, w->t[i].nbytes, err, errlen)) != KVC_OK)
			return rc;
	}
	return gguf_w_stream_close(w, err, errlen);
}
