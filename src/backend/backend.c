/*
 * backend.c: the registry of compute backends: which one a --device
 * choice ("auto", "cpu", "cuda") means on this build and this machine, and
 * what kvchat --version says about them.
 */
#include "config.h"

#include "backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The CUDA module at path: loaded (RTLD_NOW, so a missing symbol is an
 * error here, not a crash later), its entry called and its interface
 * version checked; NULL with the reason in why. A module that loaded is
 * never closed: the engines that use it hold its vtable.
 */
static const struct kvc_cuda_module *
load_module(const char *path, char *why, size_t whylen)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	const struct kvc_cuda_module *mod;
	kvc_cuda_entry_fn entry;

	if (h == NULL) {
		kvc_err(why, whylen, "cannot load %s: %s", path, dlerror());
		return NULL;
	}
	*(void **)&entry = dlsym(h, KVC_CUDA_ENTRY);
	if (entry == NULL) {
		kvc_err(why, whylen, "%s is not a kvchat CUDA module (no %s)", path, KVC_CUDA_ENTRY);
		dlclose(h);
		return NULL;
	}
	mod = entry();
	if (mod == NULL || mod->abi != KVC_CUDA_ABI || strcmp(mod->version, PACKAGE_VERSION) != 0) {
		kvc_err(why, whylen, "%s is from kvchat %s (interface %d), this is %s (%d): reinstall it",
		    path, mod ? mod->version : "?", mod ? mod->abi : 0, PACKAGE_VERSION, KVC_CUDA_ABI);
		dlclose(h);
		return NULL;
	}
	return mod;
}

/*
 * The CUDA module (backend.h says where it is looked for), its path in
 * path; NULL with the reason in why.
 */
static const struct kvc_cuda_module *
cuda_module(char *path, size_t pathlen, char *why, size_t whylen)
{
	const char *env = getenv("KVCHAT_CUDA_MODULE");
	char exe[PATH_MAX];
	ssize_t n;

	if (env != NULL && env[0] != '\0') {
		snprintf(path, pathlen, "%s", env);
		if (access(path, F_OK) != 0) {
			kvc_err(why, whylen, "no CUDA module at %s (KVCHAT_CUDA_MODULE)", path);
			return NULL;
		}
		return load_module(path, why, whylen);
	}
	if ((n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
		char *slash;

		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL) {
			*slash = '\0';
			if (snprintf(path, pathlen, "%s/%s", exe, KVC_CUDA_MODULE_NAME) < (int)pathlen &&
			    access(path, F_OK) == 0)
				return load_module(path, why, whylen);
		}
	}
	snprintf(path, pathlen, "%s/%s", KVC_PKGLIBDIR, KVC_CUDA_MODULE_NAME);
	if (access(path, F_OK) == 0)
		return load_module(path, why, whylen);
#ifdef HAVE_CUDA
	kvc_err(why, whylen, "the CUDA module %s is not installed (nor beside kvchat)", path);
#else
	kvc_err(why, whylen, "this kvchat was built without the CUDA backend");
#endif
	return NULL;
}

/*
 * Whether an NVIDIA driver is present (its control device; WSL's GPU
 * device), checked before "auto" loads the module: a CPU-only machine
 * then maps none of the CUDA libraries (libcublas alone is ~100 MB).
 */
static bool
gpu_driver_present(void)
{
	return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
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
	char why[PATH_MAX + 256] = "", path[PATH_MAX] = "";

	if (kvc_backend_is_auto(device)) {
		/* no CUDA module or no device is the common case, not worth a word */
		const char *env = getenv("KVCHAT_CUDA_MODULE");

		if ((env == NULL || env[0] == '\0') && !gpu_driver_present()) {
			*out = &kvc_backend_cpu;
			return KVC_OK;
		}
		mod = cuda_module(path, sizeof path, why, sizeof why);
		*out = mod != NULL && mod->device_count(why, sizeof why) > 0 ? mod->backend : &kvc_backend_cpu;
		return KVC_OK;
	}
	if (strcmp(device, "cpu") == 0) {
		*out = &kvc_backend_cpu;
		return KVC_OK;
	}
	if (strcmp(device, "cuda") == 0) {
		if ((mod = cuda_module(path, sizeof path, why, sizeof why)) == NULL) {
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
	char why[PATH_MAX + 256] = "", path[PATH_MAX] = "";

#ifdef HAVE_CUDA
	kvc_buf_printf(out, "backends: cpu, cuda (module %s)\n", KVC_CUDA_MODULE_NAME);
#else
	kvc_buf_printf(out, "backends: cpu\n");
#endif
	if ((mod = cuda_module(path, sizeof path, why, sizeof why)) == NULL) {
		kvc_buf_printf(out, "cuda: %s\n", why);
		return;
	}
	kvc_buf_printf(out, "cuda: module %s, built for %s\n", path, mod->archs);
	if (mod->device_count(why, sizeof why) <= 0)
		kvc_buf_printf(out, "cuda: no device: %s\n", why);
	else
		mod->describe_devices(out);
}
