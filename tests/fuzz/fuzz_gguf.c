/*
 * fuzz_gguf.c: libFuzzer entry for the GGUF reader. Parses the input and,
 * when it is accepted, touches everything the API exposes, so that any
 * offset the reader let through is actually dereferenced under ASan.
 */
#include <stdint.h>
#include <stddef.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned
walk_arr(const struct gguf_arr *a, int depth)
{
	unsigned acc = 0;
	uint64_t n = gguf_arr_n(a);
	struct gguf_str s;
	int64_t x;
	double d;

	for (uint64_t j = 0; j < n && j < 4096; j++) {
		switch (gguf_arr_type(a)) {
		case GGUF_TYPE_STRING:
			if (gguf_arr_str(a, j, &s) == 0 && s.len)
				acc += (unsigned char)s.ptr[s.len - 1];
			break;
		case GGUF_TYPE_ARRAY:
			if (depth < 16)
				acc += walk_arr(gguf_arr_sub(a, j), depth + 1);
			break;
		case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
			if (gguf_arr_float(a, j, &d) == 0)
				acc += d > 0;
			break;
		default:
			if (gguf_arr_int(a, j, &x) == 0)
				acc += (unsigned)x;
		}
	}
	return acc;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf_file *f;
	char err[256];
	volatile unsigned acc = 0;

	if (gguf_open_mem(&f, data, size, "fuzz", err, sizeof err) != 0)
		return 0;
	for (int64_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_arr *a = gguf_kv_arr(f, i);
		acc += (unsigned)gguf_kv_key(f, i)[0];
		if (a != NULL)
			acc += walk_arr(a, 0);
		(void)gguf_get_str(f, gguf_kv_key(f, i), "");
	}
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor(f, i);
		if (t->nbytes)
			acc += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
	}
	(void)acc;
	gguf_close(f);
	return 0;
}
