/*
 * kv_check.c: the arguments every backend's kv_create accepts, checked in
 * one place (below the backends and the registry that lists them).
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
