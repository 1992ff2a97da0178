/*
 * kv_check.c: the cache arguments every backend accepts (kv_create's type
 * and size, forward's positions), checked in one place below the backends
 * and the registry that lists them.
 */
#include "config.h"

#include "backend.h"

int
kvc_backend_kv_check(int n_ctx, enum gguf_dtype kv_type, char *err, size_t errlen)
{
	if (kv_type != GGML_TYPE_F16 && kv_type != GGML_TYPE_F32) {
		kvc_err(err, errlen, "KV cache type %s is not supported (F16, F32)", gguf_dtype_name(kv_type));
		return KVC_EUNSUPPORTED;
	}
	if (n_ctx < 1) {
		kvc_err(err, errlen, "bad context size %d", n_ctx);
		return KVC_EINVAL;
	}
	return KVC_OK;
}

int
kvc_backend_forward_check(int n, int pos0, int n_valid, int n_ctx, char *err, size_t errlen)
{
	if (n < 1 || pos0 < 0 || pos0 > n_valid) {
		kvc_err(err, errlen, "bad forward: %d tokens at position %d (cache holds %d)",
		    n, pos0, n_valid);
		return KVC_EINVAL;
	}
	if (n > n_ctx - pos0) {
		kvc_err(err, errlen, "context full: %d + %d positions exceed %d", pos0, n, n_ctx);
		return KVC_ERANGE;
	}
	return KVC_OK;
}

int
kvc_kv_window_cap(const struct kvc_hparams *hp, int n_ctx)
{
	int cap;

	if (hp->n_swa <= 0 || hp->n_swa > n_ctx)
		return n_ctx;
	cap = KVC_KV_WINDOW_KEEP(hp->n_swa) + KVC_KV_WINDOW_SLACK;
	return cap < n_ctx ? cap : n_ctx;
}
