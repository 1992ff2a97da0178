/*
 * backend.c: the registry of compute backends: which one a --device
 * choice ("auto", "cpu", "cuda") means on this build and this machine, and
 * what kvchat --version says about them.
 */
#include "config.h"

#include "backend.h"

#include <string.h>

/*
 * The CUDA backend's table, or NULL with the reason in why: not built,
 * or built from another version of kvchat.
 */
static const struct kvc_cuda_module *
cuda_module(char *why, size_t whylen)
{
#ifdef HAVE_CUDA
	const struct kvc_cuda_module *mod = kvc_cuda_module_get();

	if (mod->abi != KVC_CUDA_ABI || strcmp(mod->version, PACKAGE_VERSION) != 0) {
		kvc_err(why, whylen, "the CUDA backend is from kvchat %s (interface %d), this is %s (%d)",
		    mod->version, mod->abi, PACKAGE_VERSION, KVC_CUDA_ABI);
		return NULL;
	}
	return mod;
#else
	kvc_err(why, whylen, "this kvchat was built without the CUDA backend");
	return NULL;
#endif
}

bool
kvc_backend_is_auto(const char *device)
{
	return device == NULL || device[0] == '\0' || strcmp(device, "auto") == 0;
}

int
kvc_backend_pick(const struct kvc_backend_i **out, const char *device, char *err, size_t errlen)
{
	const struct kvc_cuda_module *mod;
	char why[256] = "";

	if (kvc_backend_is_auto(device)) {
		/* no CUDA backend or no device is the common case, not worth a word */
		mod = cuda_module(why, sizeof why);
		*out = mod != NULL && mod->device_count(why, sizeof why) > 0 ? mod->backend : &kvc_backend_cpu;
		return KVC_OK;
	}
	if (strcmp(device, "cpu") == 0) {
		*out = &kvc_backend_cpu;
		return KVC_OK;
	}
	if (strcmp(device, "cuda") == 0) {
		if ((mod = cuda_module(why, sizeof why)) == NULL) {
			kvc_err(err, errlen, "device cuda: %s (use --device cpu)", why);
			return KVC_EUNSUPPORTED;
		}
		if (mod->device_count(why, sizeof why) <= 0) {
			kvc_err(err, errlen, "device cuda: no usable CUDA device: %s (use --device cpu)", why);
			return KVC_EUNSUPPORTED;
		}
		*out = mod->backend;
		return KVC_OK;
	}
	kvc_err(err, errlen, "unknown device '%s' (expected auto, cpu or cuda)", device);
	return KVC_EINVAL;
}

void
kvc_backend_version(struct kvc_buf *out)
{
	const struct kvc_cuda_module *mod;
	char why[256] = "";

#ifdef HAVE_CUDA
	kvc_buf_printf(out, "backends: cpu, cuda\n");
#else
	kvc_buf_printf(out, "backends: cpu\n");
#endif
	if ((mod = cuda_module(why, sizeof why)) == NULL) {
		kvc_buf_printf(out, "cuda: %s\n", why);
		return;
	}
	kvc_buf_printf(out, "cuda: built for %s\n", mod->archs);
	if (mod->device_count(why, sizeof why) <= 0)
		kvc_buf_printf(out, "cuda: no device: %s\n", why);
	else
		mod->describe_devices(out);
}
