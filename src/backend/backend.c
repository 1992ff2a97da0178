/*
 * backend.c: the registry of compute backends: which one a --device
 * choice ("auto", "cpu", "cuda") means on this build and this machine.
 */
#include "config.h"

#include "backend.h"

#include <string.h>

int
kvc_backend_pick(const struct kvc_backend_i **out, const char *device, char *err, size_t errlen)
{
	if (device == NULL || device[0] == '\0' || strcmp(device, "auto") == 0) {
#ifdef HAVE_CUDA
		if (kvc_cuda_device_count() > 0) {
			*out = &kvc_backend_cuda;
			return KVC_OK;
		}
#endif
		*out = &kvc_backend_cpu;
		return KVC_OK;
	}
	if (strcmp(device, "cpu") == 0) {
		*out = &kvc_backend_cpu;
		return KVC_OK;
	}
	if (strcmp(device, "cuda") == 0) {
#ifdef HAVE_CUDA
		if (kvc_cuda_device_count() > 0) {
			*out = &kvc_backend_cuda;
			return KVC_OK;
		}
		kvc_err(err, errlen, "device cuda: no usable CUDA device found (check the driver, or use --device cpu)");
		return KVC_EUNSUPPORTED;
#else
		kvc_err(err, errlen, "device cuda: this kvchat was built without the CUDA backend (use --device cpu)");
		return KVC_EUNSUPPORTED;
#endif
	}
	kvc_err(err, errlen, "unknown device '%s' (expected auto, cpu or cuda)", device);
	return KVC_EINVAL;
}
