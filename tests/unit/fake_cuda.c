/*
 * fake_cuda.c: a stand-in for the CUDA module (kvchat-cuda.so) with no
 * CUDA in it, so that the loader and --device auto's fallback are tested
 * on machines without a GPU (tests/e2e/test_cuda_module.sh). What it does
 * is chosen by FAKE_CUDA: "nodevice" (no device, with a reason),
 * "initfail" (one device whose init fails, as a model too large for it
 * would), "oldabi" (another interface version), "check" (one device whose
 * init runs the real module's first step, cuda/support.c's
 * cu_model_check, built in here: a model it refuses is refused in its
 * words; one it takes fails after it, saying it passed), "cpu" (a device
 * whose backend is the program's CPU backend with the sampling members on
 * top: the logits kept in the module and sampled by cuda/sample_core.cuh's
 * host replay of the device's kernels, so the engine's path through
 * forward_keep, sample and logits_get runs without a GPU, and its text
 * must be the CPU backend's).
 */
#include "backend/backend.h"
#include "cuda/support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/sample_core.cuh"

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

/* "cpu": the program's CPU backend (exported to modules: cuda/host.syms) and the kept logits. */
struct keep {
	void *cpu;		/* the CPU backend's context */
	int n_vocab;
	float *logits;		/* (n_vocab) the last forward_keep's */
	bool kept;
	float *vals;		/* (n_vocab) sc_sample_host's scratch */
	struct sc_cand *c;	/* (SC_TOPK_MAX) */
	int32_t *ids;		/* (SC_STRETCH_MAX) */
	int n_sampled, n_copied;	/* sample and logits_get calls, told at free with FAKE_CUDA_COUNT set */
};

static void
keep_free(void *ctx)
{
	struct keep *k = ctx;

	if (k == NULL)
		return;
	if (getenv("FAKE_CUDA_COUNT") != NULL)
		fprintf(stderr, "fake-cuda: %d sampled, %d logits copied\n", k->n_sampled, k->n_copied);
	if (k->cpu)
		kvc_backend_cpu.free(k->cpu);
	free(k->logits);
	free(k->vals);
	free(k->c);
	free(k->ids);
	free(k);
}

static int
keep_init(void **ctx, const struct kvc_model *m, const struct kvc_backend_params *p, char *err, size_t errlen)
{
	struct keep *k = calloc(1, sizeof *k);
	int rc;

	*ctx = NULL;
	if (k == NULL)
		return KVC_ENOMEM;
	k->n_vocab = m->hp.n_vocab;
	k->logits = malloc((size_t)k->n_vocab * sizeof *k->logits);
	k->vals = malloc((size_t)k->n_vocab * sizeof *k->vals);
	k->c = malloc(SC_TOPK_MAX * sizeof *k->c);
	k->ids = malloc(SC_STRETCH_MAX * sizeof *k->ids);
	if (k->logits == NULL || k->vals == NULL || k->c == NULL || k->ids == NULL) {
		keep_free(k);
		return KVC_ENOMEM;
	}
	if ((rc = kvc_backend_cpu.init(&k->cpu, m, p, err, errlen)) != KVC_OK) {
		k->cpu = NULL;
		keep_free(k);
		return rc;
	}
	*ctx = k;
	return KVC_OK;
}

#define CPU(k) (((struct keep *)(k))->cpu)

static int
keep_kv_create(void *ctx, int n_ctx, enum gguf_dtype t, void **kv, char *err, size_t errlen)
{
	return kvc_backend_cpu.kv_create(CPU(ctx), n_ctx, t, kv, err, errlen);
}

static void
keep_kv_destroy(void *ctx, void *kv)
{
	kvc_backend_cpu.kv_destroy(CPU(ctx), kv);
}

static int
keep_forward(void *ctx, void *kv, const int32_t *tokens, int n, int pos0, float *logits, bool all,
    char *err, size_t errlen)
{
	((struct keep *)ctx)->kept = false;
	return kvc_backend_cpu.forward(CPU(ctx), kv, tokens, n, pos0, logits, all, err, errlen);
}

static int
keep_kv_read(void *ctx, void *kv, int l, enum kvc_kv_part part, int pos0, int n, void *dst, char *err,
    size_t errlen)
{
	return kvc_backend_cpu.kv_read(CPU(ctx), kv, l, part, pos0, n, dst, err, errlen);
}

static int
keep_kv_write(void *ctx, void *kv, int l, enum kvc_kv_part part, int pos0, int n, const void *src,
    char *err, size_t errlen)
{
	return kvc_backend_cpu.kv_write(CPU(ctx), kv, l, part, pos0, n, src, err, errlen);
}

static int
keep_forward_keep(void *ctx, void *kv, const int32_t *tokens, int n, int pos0, char *err, size_t errlen)
{
	struct keep *k = ctx;
	int rc = kvc_backend_cpu.forward(k->cpu, kv, tokens, n, pos0, k->logits, false, err, errlen);

	k->kept = rc == KVC_OK;
	return rc;
}

static int
keep_logits_get(void *ctx, float *dst, char *err, size_t errlen)
{
	struct keep *k = ctx;

	if (!k->kept) {
		say(err, errlen, "no logits kept (fake module)");
		return KVC_EINVAL;
	}
	memcpy(dst, k->logits, (size_t)k->n_vocab * sizeof *dst);
	k->n_copied++;
	return KVC_OK;
}

static int
keep_sample(void *ctx, const struct kvc_sample_req *r, int32_t *id, uint64_t *rng, char *err, size_t errlen)
{
	struct keep *k = ctx;

	if (!k->kept) {
		say(err, errlen, "no logits kept (fake module)");
		return KVC_EINVAL;
	}
	if (!sc_takes(r->temp, r->top_k, k->n_vocab)) {
		say(err, errlen, "sampled on the host (fake module)");
		return KVC_EUNSUPPORTED;
	}
	*rng = r->rng;
	k->n_sampled++;
	*id = sc_sample_host(k->logits, k->n_vocab, r->temp, r->top_k, r->top_p, r->min_p, r->repeat_penalty,
	    r->recent, r->n_recent, rng, 0, k->vals, k->c, k->ids);
	return KVC_OK;
}

static const struct kvc_backend_i keep_backend = {
	.name = "cuda", .init = keep_init, .free = keep_free, .kv_create = keep_kv_create,
	.kv_destroy = keep_kv_destroy, .forward = keep_forward, .kv_read = keep_kv_read,
	.kv_write = keep_kv_write, .forward_keep = keep_forward_keep, .logits_get = keep_logits_get,
	.sample = keep_sample,
};

static const struct kvc_backend_i fake_backend = { .name = "cuda", .init = fake_init };

static struct kvc_cuda_module fake = {
	KVC_CUDA_ABI, PACKAGE_VERSION, "sm_80 (fake)", &fake_backend, fake_count, fake_devices,
};

const struct kvc_cuda_module *
kvc_cuda_module_get(void)
{
	if (strcmp(mode(), "oldabi") == 0)
		fake.abi = KVC_CUDA_ABI + 1;
	if (strcmp(mode(), "cpu") == 0)
		fake.backend = &keep_backend;
	return &fake;
}
