/*
 * test_gguf.c: the GGUF reader against files the writer makes (every value
 * type, nested arrays, tensors, alignment), against the real vocabulary
 * files in ../shared/data when present, and against hostile input:
 * truncations, bit flips and crafted headers must give one clean error.
 */
#include "test.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

static char err[512];

static void
put(unsigned char **p, const void *v, size_t n)
{
	memcpy(*p, v, n);
	*p += n;
}

static void
test_roundtrip(void)
{
	struct gguf_writer *w = gguf_writer_new();
	struct gguf_file *f;
	const char *strs[] = { "a", "", "\xe4\xb8\xad\xe6\x96\x87" };
	float fv[] = { 1.5f, -2.0f };
	int32_t iv[] = { 7, -9, 11 };
	float tdata[2 * 64];
	int64_t ne[2] = { 64, 2 };
	void *mem;
	size_t len;
	double d;
	int64_t x;
	struct gguf_str s;
	const struct gguf_arr *a;
	/* nested: array of 2 arrays of u8 {1,2} and {3} */
	unsigned char nested[64], *np = nested;
	uint32_t u8t = GGUF_TYPE_UINT8, arrt = GGUF_TYPE_ARRAY;
	uint64_t two = 2, one = 1;
	uint8_t b12[2] = { 1, 2 }, b3 = 3;
	int8_t i8 = -5;

	put(&np, &arrt, 4); put(&np, &two, 8);
	put(&np, &u8t, 4); put(&np, &two, 8); put(&np, b12, 2);
	put(&np, &u8t, 4); put(&np, &one, 8); put(&np, &b3, 1);

	for (int i = 0; i < 128; i++)
		tdata[i] = (float)i * 0.25f;
	test_cond(w != NULL, "writer");
	test_cond(gguf_w_str(w, "general.architecture", "llama") == 0, "str");
	test_cond(gguf_w_u32(w, "llama.block_count", 3) == 0, "u32");
	test_cond(gguf_w_i32(w, "neg", -4) == 0, "i32");
	test_cond(gguf_w_u64(w, "big", 1ull << 40) == 0, "u64");
	test_cond(gguf_w_f32(w, "eps", 1e-5f) == 0, "f32");
	test_cond(gguf_w_bool(w, "flag", true) == 0, "bool");
	test_cond(gguf_w_raw(w, "i8", GGUF_TYPE_INT8, &i8, 1) == 0, "raw i8");
	test_cond(gguf_w_arr_str(w, "strs", strs, 3) == 0, "arr str");
	test_cond(gguf_w_arr_f32(w, "fv", fv, 2) == 0, "arr f32");
	test_cond(gguf_w_arr_i32(w, "iv", iv, 3) == 0, "arr i32");
	test_cond(gguf_w_raw(w, "nested", GGUF_TYPE_ARRAY, nested, (size_t)(np - nested)) == 0, "nested");
	test_cond(gguf_w_tensor(w, "t0", GGML_TYPE_F32, 2, ne, tdata, sizeof tdata) == 0, "tensor");
	test_cond(gguf_w_tensor(w, "t1", GGML_TYPE_F32, 1, ne, tdata, 64 * 4) == 0, "tensor");
	gguf_w_set_alignment(w, 64);
	test_cond(gguf_w_to_mem(w, &mem, &len) == 0, "to_mem");
	gguf_writer_free(w);

	test_cond(gguf_open_mem(&f, mem, len, "rt", err, sizeof err) == 0, "open: %s", err);
	if (f == NULL) {
		free(mem);
		return;
	}
	test_cond(gguf_version(f) == 3, "version");
	test_cond(gguf_alignment(f) == 64, "alignment %u", gguf_alignment(f));
	test_cond(strcmp(gguf_get_str(f, "general.architecture", ""), "llama") == 0, "str value");
	test_cond(gguf_get_int(f, "llama.block_count", 0) == 3, "u32 value");
	test_cond(gguf_get_int(f, "neg", 0) == -4, "i32 value");
	test_cond(gguf_get_int(f, "big", 0) == (1ll << 40), "u64 value");
	test_cond(gguf_get_int(f, "i8", 0) == -5, "i8 value");
	test_cond(fabs(gguf_get_float(f, "eps", 0) - 1e-5) < 1e-10, "f32 value");
	test_cond(gguf_get_bool(f, "flag", false), "bool value");
	test_cond(gguf_get_int(f, "absent", 42) == 42, "default");
	test_cond(strcmp(gguf_get_str(f, "eps", "dflt"), "dflt") == 0, "type mismatch gives default");
	a = gguf_get_arr(f, "strs");
	test_cond(a && gguf_arr_n(a) == 3 && gguf_arr_type(a) == GGUF_TYPE_STRING, "str array");
	test_cond(a && gguf_arr_str(a, 2, &s) == 0 && s.len == 6 && memcmp(s.ptr, strs[2], 6) == 0, "str elem");
	test_cond(a && gguf_arr_str(a, 1, &s) == 0 && s.len == 0, "empty str elem");
	test_cond(a && gguf_arr_str(a, 3, &s) != 0, "out of range elem");
	a = gguf_get_arr(f, "fv");
	test_cond(a && gguf_arr_float(a, 1, &d) == 0 && d == -2.0, "f32 elem");
	a = gguf_get_arr(f, "iv");
	test_cond(a && gguf_arr_int(a, 1, &x) == 0 && x == -9, "i32 elem");
	a = gguf_get_arr(f, "nested");
	test_cond(a && gguf_arr_n(a) == 2 && gguf_arr_type(a) == GGUF_TYPE_ARRAY, "nested outer");
	if (a) {
		const struct gguf_arr *s0 = gguf_arr_sub(a, 0), *s1 = gguf_arr_sub(a, 1);
		test_cond(s0 && gguf_arr_n(s0) == 2 && gguf_arr_int(s0, 1, &x) == 0 && x == 2, "nested[0][1]");
		test_cond(s1 && gguf_arr_n(s1) == 1 && gguf_arr_int(s1, 0, &x) == 0 && x == 3, "nested[1][0]");
	}
	test_cond(gguf_n_tensors(f) == 2, "tensors");
	{
		const struct gguf_tensor *t = gguf_find_tensor(f, "t0");
		test_cond(t && t->ne[0] == 64 && t->ne[1] == 2 && t->nbytes == sizeof tdata, "t0 shape");
		test_cond(t && memcmp(t->data, tdata, sizeof tdata) == 0, "t0 data");
		test_cond(t && ((uintptr_t)t->data - (uintptr_t)mem) % 64 == 0, "t0 aligned");
		t = gguf_find_tensor(f, "t1");
		test_cond(t && t->offset % 64 == 0 && memcmp(t->data, tdata, 256) == 0, "t1 data");
	}
	gguf_close(f);
	free(mem);
}

/* Parse buf, expecting failure with a message naming the file. */
static int
expect_error(const void *buf, size_t len, const char *what)
{
	struct gguf_file *f;
	int rc;

	err[0] = '\0';
	rc = gguf_open_mem(&f, buf, len, "hostile.gguf", err, sizeof err);
	if (rc == 0) {
		gguf_close(f);
		test_cond(rc != 0, "%s: parsed", what);
		return 0;
	}
	test_cond(strncmp(err, "hostile.gguf: ", 14) == 0 && strchr(err, '\n') == NULL,
	    "%s: message '%s'", what, err);
	return 1;
}

static void
test_crafted(void)
{
	unsigned char buf[256], *p;
	uint32_t v3 = 3, v1 = 1, t;
	uint64_t n, z = 0;

	/* huge kv count */
	p = buf; put(&p, "GGUF", 4); put(&p, &v3, 4); put(&p, &z, 8);
	n = UINT64_MAX / 2; put(&p, &n, 8);
	expect_error(buf, (size_t)(p - buf) + 40, "huge n_kv");
	/* huge tensor count */
	p = buf; put(&p, "GGUF", 4); put(&p, &v3, 4); n = 1ull << 60; put(&p, &n, 8); put(&p, &z, 8);
	expect_error(buf, (size_t)(p - buf) + 40, "huge n_tensors");
	/* bad version */
	p = buf; put(&p, "GGUF", 4); put(&p, &v1, 4); put(&p, &z, 8); put(&p, &z, 8);
	expect_error(buf, (size_t)(p - buf), "version 1");
	/* bad magic */
	expect_error("GGUX\3\0\0\0", 8, "magic");
	/* string length past end */
	p = buf; put(&p, "GGUF", 4); put(&p, &v3, 4); put(&p, &z, 8); n = 1; put(&p, &n, 8);
	n = 1ull << 62; put(&p, &n, 8);
	expect_error(buf, (size_t)(p - buf) + 4, "key length");
	/* huge string array count */
	p = buf; put(&p, "GGUF", 4); put(&p, &v3, 4); put(&p, &z, 8); n = 1; put(&p, &n, 8);
	n = 1; put(&p, &n, 8); put(&p, "k", 1); t = GGUF_TYPE_ARRAY; put(&p, &t, 4);
	t = GGUF_TYPE_STRING; put(&p, &t, 4); n = 1ull << 40; put(&p, &n, 8);
	expect_error(buf, (size_t)(p - buf) + 16, "string array count");
	/* deeply nested arrays */
	p = buf; put(&p, "GGUF", 4); put(&p, &v3, 4); put(&p, &z, 8); n = 1; put(&p, &n, 8);
	n = 1; put(&p, &n, 8); put(&p, "k", 1); t = GGUF_TYPE_ARRAY; put(&p, &t, 4);
	for (int i = 0; i < 12; i++) {
		t = GGUF_TYPE_ARRAY; put(&p, &t, 4); n = 1; put(&p, &n, 8);
	}
	expect_error(buf, (size_t)(p - buf), "deep nesting");
	/* unknown value type */
	p = buf; put(&p, "GGUF", 4); put(&p, &v3, 4); put(&p, &z, 8); n = 1; put(&p, &n, 8);
	n = 1; put(&p, &n, 8); put(&p, "k", 1); t = 99; put(&p, &t, 4);
	expect_error(buf, (size_t)(p - buf) + 8, "value type");

	/* tensor running past the end, unknown type, bad alignment, duplicates */
	{
		struct gguf_writer *w = gguf_writer_new();
		float d[64] = { 0 };
		int64_t ne[1] = { 64 };
		void *mem;
		size_t len;

		gguf_w_tensor(w, "a", GGML_TYPE_F32, 1, ne, d, sizeof d);
		gguf_w_to_mem(w, &mem, &len);
		gguf_writer_free(w);
		expect_error(mem, len - 1, "tensor past end");
		{
			/* patch the type field: name "a" at offset 24+8, dims, ne, then type */
			unsigned char *m = mem;
			uint32_t bad = 31;
			memcpy(m + 24 + 8 + 1 + 4 + 8, &bad, 4);
			expect_error(mem, len, "tensor type");
		}
		free(mem);

		w = gguf_writer_new();
		gguf_w_tensor(w, "a", GGML_TYPE_F32, 1, ne, d, sizeof d);
		gguf_w_tensor(w, "a", GGML_TYPE_F32, 1, ne, d, sizeof d);
		gguf_w_to_mem(w, &mem, &len);
		gguf_writer_free(w);
		expect_error(mem, len, "duplicate tensor");
		free(mem);

		w = gguf_writer_new();
		gguf_w_u32(w, "general.alignment", 3);
		gguf_w_to_mem(w, &mem, &len);
		gguf_writer_free(w);
		expect_error(mem, len, "alignment 3");
		free(mem);
	}
}

/* xorshift for reproducible corruption */
static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void
test_real_vocab(const char *dir)
{
	static const char *names[] = { "llama-spm", "qwen2", "gpt-2", "falcon" };
	char path[4096];

	for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
		struct gguf_file *f;
		FILE *fp;
		unsigned char *buf, *copy;
		long len;
		uint64_t seed = 0x9e3779b97f4a7c15ull + k;
		int n_err = 0, n_ok = 0;

		snprintf(path, sizeof path, "%s/llama.cpp-vocab/ggml-vocab-%s.gguf", dir, names[k]);
		test_cond(gguf_open(&f, path, err, sizeof err) == 0, "open %s: %s", path, err);
		if (f == NULL)
			continue;
		test_cond(gguf_get_arr(f, "tokenizer.ggml.tokens") != NULL, "%s has tokens", names[k]);
		gguf_close(f);

		fp = fopen(path, "rb");
		fseek(fp, 0, SEEK_END);
		len = ftell(fp);
		rewind(fp);
		buf = malloc((size_t)len);
		copy = malloc((size_t)len);
		test_cond(fread(buf, 1, (size_t)len, fp) == (size_t)len, "read");
		fclose(fp);
		/*
		 * These files hold no tensors and parse exactly to their end, so
		 * every truncation must be refused.
		 */
		for (int i = 0; i < 300; i++) {
			size_t cut = i < 100 ? (size_t)i : (size_t)(rnd(&seed) % (uint64_t)len);
			memcpy(copy, buf, cut);
			n_err += expect_error(copy, cut, "truncated");
			/* past the 24-byte header, it says so (issue 26) */
			if (cut >= 24)
				test_cond(strstr(err, "looks truncated") != NULL,
				    "cut at %zu: '%s'", cut, err);
		}
		/* Bit flips may leave a valid file; what matters is no crash and a clean message. */
		for (int i = 0; i < 300; i++) {
			size_t at = i < 150 ? rnd(&seed) % 512 : rnd(&seed) % (uint64_t)len;
			memcpy(copy, buf, (size_t)len);
			copy[at] ^= (unsigned char)(1u << (rnd(&seed) % 8));
			err[0] = '\0';
			if (gguf_open_mem(&f, copy, (size_t)len, "hostile.gguf", err, sizeof err) == 0) {
				n_ok++;
				gguf_close(f);
			} else {
				n_err++;
				test_cond(strncmp(err, "hostile.gguf: ", 14) == 0, "flip message '%s'", err);
			}
		}
		printf("%s: %ld bytes, 300 truncations + 300 bit flips: %d refused, %d still valid\n",
		    names[k], len, n_err, n_ok);
		free(buf);
		free(copy);
	}
}

/* Seeds for the fuzzer: small valid files covering every value kind. */
static int
write_seeds(const char *dir)
{
	char path[4096];
	const char *strs[] = { "<s>", "\xe2\x96\x81\x61" };
	float fv[] = { 0.5f };
	float td[32] = { 1 };
	int64_t ne[2] = { 32, 1 };

	for (int k = 0; k < 3; k++) {
		struct gguf_writer *w = gguf_writer_new();
		void *mem;
		size_t len;
		FILE *fp;

		gguf_w_str(w, "general.architecture", "llama");
		gguf_w_u32(w, "llama.block_count", 1);
		if (k >= 1) {
			gguf_w_arr_str(w, "tokenizer.ggml.tokens", strs, 2);
			gguf_w_arr_f32(w, "tokenizer.ggml.scores", fv, 1);
			gguf_w_bool(w, "b", true);
		}
		if (k == 2) {
			gguf_w_tensor(w, "token_embd.weight", GGML_TYPE_F32, 2, ne, td, sizeof td);
			gguf_w_tensor(w, "q", GGML_TYPE_Q8_0, 1, ne, td, 34);
		}
		gguf_w_to_mem(w, &mem, &len);
		gguf_writer_free(w);
		snprintf(path, sizeof path, "%s/seed%d.gguf", dir, k);
		if ((fp = fopen(path, "wb")) == NULL)
			return 1;
		fwrite(mem, 1, len, fp);
		fclose(fp);
		free(mem);
	}
	return 0;
}

/* gguf_w_write goes through a fresh temporary name beside the target: a
 * link planted under the old fixed name path.tmp is never written through
 * (issue 10), and the file gets the mode fopen would give (0666 & ~umask). */
static void
test_write_tmp_name(void)
{
	char dir[] = "/tmp/kvc-gguf-XXXXXX", path[64], tmp[80], victim[64], buf[16] = "";
	struct gguf_writer *w = gguf_writer_new();
	struct stat st;
	char why[256];
	mode_t old;
	FILE *f;
	int rc;

	if (w == NULL || mkdtemp(dir) == NULL) {
		test_cond(0, "setup");
		gguf_writer_free(w);
		return;
	}
	snprintf(path, sizeof path, "%s/m.gguf", dir);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	snprintf(victim, sizeof victim, "%s/victim", dir);
	if ((f = fopen(victim, "w")) != NULL) {
		fputs("precious", f);
		fclose(f);
	}
	test_cond(symlink(victim, tmp) == 0, "symlink");
	gguf_w_u32(w, "a", 1);
	old = umask(027);
	rc = gguf_w_write(w, path, why, sizeof why);
	umask(old);
	test_cond(rc == 0, "write: %s", why);
	if ((f = fopen(victim, "r")) != NULL) {
		test_cond(fgets(buf, sizeof buf, f) != NULL, "read");
		fclose(f);
	}
	test_cond(strcmp(buf, "precious") == 0, "planted link not followed: %s", buf);
	test_cond(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640, "mode 0640 under umask 027");
	gguf_writer_free(w);
	unlink(tmp);
	unlink(victim);
	unlink(path);
	rmdir(dir);
}

/*
 * gguf_io.c: gguf_pread copies a tensor's bytes exactly, mapped or from a
 * buffer, and refuses a range outside the file; after gguf_release the
 * range still reads the same through the mapping,
 * and its pages are no longer mapped (RssFile falls by more than half its
 * size: the pages it shares with the header stay, as do the libraries').
 */
static long
rss_file_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "RssFile:", 8) == 0)
			v = atol(line + 8);
	if (f != NULL)
		fclose(f);
	return v;
}

static void
test_pread_release(void)
{
	enum { ROWS = 1024, COLS = 1024 };	/* 4 MiB of F32 */
	char dir[] = "/tmp/kvc-gguf-XXXXXX", path[64] = "";
	struct gguf_writer *w = gguf_writer_new();
	float *data = malloc((size_t)ROWS * COLS * sizeof *data), *back = malloc(4096 * sizeof *back);
	int64_t ne[2] = { COLS, ROWS };
	struct gguf_file *f = NULL, *fb = NULL;
	const struct gguf_tensor *t;
	void *mem = NULL;
	size_t len = 0, nb = (size_t)ROWS * COLS * sizeof *data;
	volatile float sum = 0;
	long before, after;
	char buf[8];

	if (w == NULL || data == NULL || back == NULL || mkdtemp(dir) == NULL) {
		test_cond(0, "setup");
		goto out;
	}
	for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
		data[i] = (float)(i % 9973) * 0.25f;
	snprintf(path, sizeof path, "%s/m.gguf", dir);
	test_cond(gguf_w_tensor(w, "t", GGML_TYPE_F32, 2, ne, data, nb) == 0, "tensor");
	test_cond(gguf_w_write(w, path, err, sizeof err) == 0, "write: %s", err);
	test_cond(gguf_w_to_mem(w, &mem, &len) == 0, "to mem");
	if (gguf_open(&f, path, err, sizeof err) != 0 || (t = gguf_find_tensor(f, "t")) == NULL) {
		test_cond(0, "open mapped: %s", err);
		goto out;
	}
	test_cond(gguf_pread(f, (const char *)t->data + 4096, 4096 * sizeof *back, back, err, sizeof err) == 0 &&
	    memcmp(back, data + 1024, 4096 * sizeof *back) == 0, "pread of a mapped file: %s", err);
	test_cond(gguf_pread(f, (const char *)t->data + nb - 4, 8, buf, err, sizeof err) == KVC_EINVAL,
	    "pread past the end refused");
	test_cond(gguf_pread(f, data, 4, buf, err, sizeof err) == KVC_EINVAL, "pread of another buffer refused");
	/* the whole tensor mapped, then handed back */
	for (size_t i = 0; i < (size_t)ROWS * COLS; i += 256)
		sum += ((const float *)t->data)[i];
	before = rss_file_kb();
	gguf_release(f, t->data, nb);
	after = rss_file_kb();
	test_cond(before < 0 || before - after >= (long)(nb / 2048),
	    "release unmaps the range: RssFile %ld -> %ld kB", before, after);
	test_cond(memcmp(t->data, data, nb) == 0, "a released range still reads the same");
	if (gguf_open_mem(&fb, mem, len, "buf", err, sizeof err) == 0 && (t = gguf_find_tensor(fb, "t")) != NULL) {
		test_cond(gguf_pread(fb, t->data, 4096 * sizeof *back, back, err, sizeof err) == 0 &&
		    memcmp(back, data, 4096 * sizeof *back) == 0, "pread of a buffer: %s", err);
		gguf_release(fb, t->data, nb);	/* nothing for a caller's buffer */
		test_cond(memcmp(t->data, data, nb) == 0, "a buffer is left alone");
	} else {
		test_cond(0, "open buffer: %s", err);
	}
	(void)sum;
out:
	gguf_close(f);
	gguf_close(fb);
	free(mem);
	free(data);
	free(back);
	gguf_writer_free(w);
	if (path[0] != '\0') {
		unlink(path);
		rmdir(dir);
	}
}

int
main(int argc, char **argv)
{
	const char *dir = test_shared_data();

	if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0)
		return write_seeds(argv[2]);

	test_roundtrip();
	test_crafted();
	test_write_tmp_name();
	test_pread_release();
	if (dir != NULL)
		test_real_vocab(dir);
	else
		printf("SKIP: real vocabulary files (../shared/data absent)\n");
	return test_done();
}
