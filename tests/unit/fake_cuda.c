/*
 * fake_cuda.c: a stand-in for the CUDA module (kvchat-cuda.so) with no
 * CUDA in it, so that the loader and --device auto's fallback are tested
 * on machines without a GPU (tests/e2e/test_cuda_module.sh). What it does
 * is chosen by FAKE_CUDA: "nodevice" (no device, with a reason),
 * "initfail" (one device whose init fails, as a model too large for it
 * would), "oldabi" (another interface version), "check" (one device whose
 * init runs the real module's first step, cuda/support.c's
 * cu_model_check, built in here: a model it refuses is refused in its
 * words; one it takes fails after it, saying it passed).
 */
#include "backend/backend.h"
#include "cuda/support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *
mode(void)
{
	const char *m = getenv("FAKE_CUDA");

	return m ? m : "";
}

static void
say(char *err, size_t errlen, const char *msg)
{
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "%s", msg);
}

static int
fake_init(void **ctx, const struct kvc_model *m, const struct kvc_backend_params *p, char *err,
    size_t errlen)
{
	int rc;

	(void)p;
	*ctx = NULL;
	if (strcmp(mode(), "check") == 0) {
		if ((rc = cu_model_check(m, err, errlen)) != KVC_OK)
			return rc;
		say(err, errlen, "cuda: the model passed cu_model_check (fake module)");
		return KVC_EUNSUPPORTED;
	}
	say(err, errlen, "cuda: cannot allocate 4096.0 MiB for weights (fake module)");
	return KVC_ENOMEM;
}

static int
fake_count(char *why, size_t whylen)
{
	if (strcmp(mode(), "nodevice") == 0) {
		say(why, whylen, "no CUDA-capable device is detected (fake module)");
		return 0;
	}
	return 1;
}

/* kvc_buf_printf is the program's, as for the real module (cuda/host.syms) */
static void
fake_devices(struct kvc_buf *out)
{
	kvc_buf_printf(out, "cuda: device 0: Fake GPU, compute 8.0, 1.0 GiB\n");
}

static const struct kvc_backend_i fake_backend = { .name = "cuda", .init = fake_init };

static struct kvc_cuda_module fake = {
	KVC_CUDA_ABI, PACKAGE_VERSION, "sm_80 (fake)", &fake_backend, fake_count, fake_devices,
};

const struct kvc_cuda_module *
kvc_cuda_module_get(void)
{
	if (strcmp(mode(), "oldabi") == 0)
		fake.abi = KVC_CUDA_ABI + 1;
	return &fake;
}
