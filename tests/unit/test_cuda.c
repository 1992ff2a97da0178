/*
 * test_cuda.c: the CUDA backend against the CPU backend, through the
 * engine, on fixture models of every architecture and weight type:
 * last-position logits after a prefill and after decodes agree within a
 * per-type tolerance, 256 greedy tokens agree on F32/F16 models, delta
 * prefill equals full prefill on the GPU, and a snapshot restored into a
 * fresh sequence gives identical next-token logits. SKIPs without a device.
 *
 * Tolerances (relative to max |logit|): the GPU runs prefill through f16
 * GEMMs (weights and activations rounded to f16, ~2^-11 relative each)
 * and accumulates in a different order, so F32/F16/BF16 models get 2e-2.
 * For the quantised types the CPU backend rounds activations to int8 per
 * 32 (quant.h) and the GPU does not: tests/unit/test_forward.c derives that
 * error as at most 0.05 rho of the logits' scale (rho = 2 for the types
 * with a block offset: Q4_1, Q5_1, Q4_K, Q5_K; 1 otherwise), so they get
 * 2e-2 + 0.05 rho.
 */
#include "gguf/gguf.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"

#ifdef HAVE_CUDA
static char err[512];
static const char *archs[] = { "llama", "qwen2", "qwen3" };
static const char *types[] = { "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q3_k", "q4_k",
	"q5_k", "q6_k" };

static double
max_rel_diff(const float *a, const float *b, int n)
{
	double md = 0, mx = 0;

	for (int i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (d > md)
			md = d;
		if (fabs(b[i]) > mx)
			mx = fabs(b[i]);
	}
	return mx > 0 ? md / mx : md;
}

static int
argmax(const float *v, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

static int
open_engine(struct kvc_engine **e, const char *path, const char *dev)
{
	struct kvc_engine_params p = kvc_engine_default_params();

	p.device = dev;
	p.kv_type = GGML_TYPE_F32;
	p.n_ctx = 512;
	return eng_open(e, path, &p, err, sizeof err);
}

static void
compare_model(const char *path, const char *arch, const char *type)
{
	struct kvc_engine *ec = NULL, *eg = NULL;
	struct kvc_seq *sc = NULL, *sg = NULL, *s2 = NULL;
	struct eng_stats st;
	int32_t prompt[24];
	bool flt = !strcmp(type, "f32") || !strcmp(type, "f16") || !strcmp(type, "bf16");
	bool offset = !strcmp(type, "q4_1") || !strcmp(type, "q5_1") || !strcmp(type, "q4_k") ||
	    !strcmp(type, "q5_k");
	double tol = flt ? 2e-2 : 2e-2 + 0.05 * (offset ? 2 : 1);
	int nv, greedy_n = (!strcmp(type, "f32") || !strcmp(type, "f16")) ? 256 : 32;
	int agree = 0;

	if (open_engine(&ec, path, "cpu") != 0 || open_engine(&eg, path, "cuda") != 0) {
		test_cond(0, "%s/%s: open: %s", arch, type, err);
		goto out;
	}
	nv = eng_n_vocab(ec);
	for (int i = 0; i < 24; i++)
		prompt[i] = (int32_t)((i * 37 + 11) % nv);
	eng_seq_new(ec, &sc, err, sizeof err);
	eng_seq_new(eg, &sg, err, sizeof err);
	test_cond(eng_seq_append(sc, prompt, 24, &st, err, sizeof err) == 0, "cpu prefill: %s", err);
	test_cond(eng_seq_append(sg, prompt, 24, &st, err, sizeof err) == 0, "gpu prefill: %s", err);
	test_cond(max_rel_diff(eng_seq_logits(sg), eng_seq_logits(sc), nv) < tol,
	    "%s/%s prefill logits differ: %g", arch, type, max_rel_diff(eng_seq_logits(sg), eng_seq_logits(sc), nv));
	/* greedy decode on both, each feeding its own choice */
	for (int i = 0; i < greedy_n; i++) {
		int32_t tc = argmax(eng_seq_logits(sc), nv), tg = argmax(eng_seq_logits(sg), nv);
		if (tc != tg)
			break;
		agree++;
		if (eng_seq_n_pos(sc) + 1 >= 512)
			break;
		eng_seq_append(sc, &tc, 1, &st, err, sizeof err);
		eng_seq_append(sg, &tg, 1, &st, err, sizeof err);
	}
	test_cond(agree == greedy_n || eng_seq_n_pos(sc) + 1 >= 512,
	    "%s/%s: greedy tokens agree for %d of %d", arch, type, agree, greedy_n);

	/* delta prefill == full prefill on the GPU */
	{
		struct kvc_seq *a = NULL, *b = NULL;
		float *la = malloc((size_t)nv * 4);
		eng_seq_new(eg, &a, err, sizeof err);
		eng_seq_new(eg, &b, err, sizeof err);
		eng_seq_append(a, prompt, 10, &st, err, sizeof err);
		eng_seq_append(a, prompt + 10, 14, &st, err, sizeof err);
		test_cond(st.n_computed == 14, "delta computed %d", st.n_computed);
		memcpy(la, eng_seq_logits(a), (size_t)nv * 4);
		eng_seq_append(b, prompt, 24, &st, err, sizeof err);
		test_cond(max_rel_diff(la, eng_seq_logits(b), nv) < 1e-3, "%s/%s gpu delta vs full: %g",
		    arch, type, max_rel_diff(la, eng_seq_logits(b), nv));
		/* snapshot -> restore -> identical next-token logits */
		{
			struct kvc_buf blob = { 0 };
			int32_t next = 5;
			float *l1 = malloc((size_t)nv * 4);
			test_cond(eng_seq_kv_save(b, 0, 24, &blob, err, sizeof err) == 0, "save: %s", err);
			eng_seq_new(eg, &s2, err, sizeof err);
			test_cond(eng_seq_kv_load(s2, prompt, blob.p, blob.n, err, sizeof err) == 0, "load: %s", err);
			eng_seq_append(b, &next, 1, &st, err, sizeof err);
			memcpy(l1, eng_seq_logits(b), (size_t)nv * 4);
			eng_seq_append(s2, &next, 1, &st, err, sizeof err);
			test_cond(st.n_computed == 1, "restored seq computed %d", st.n_computed);
			test_cond(memcmp(l1, eng_seq_logits(s2), (size_t)nv * 4) == 0,
			    "%s/%s restored logits not identical", arch, type);
			free(l1);
			kvc_buf_free(&blob);
		}
		free(la);
		eng_seq_free(a);
		eng_seq_free(b);
	}
out:
	eng_seq_free(s2);
	eng_seq_free(sc);
	eng_seq_free(sg);
	eng_close(ec);
	eng_close(eg);
}
#endif

int
main(void)
{
#ifndef HAVE_CUDA
	test_skip("kvchat was built without the CUDA backend");
#else
	const char *bd = getenv("top_builddir");
	char dir[] = "/tmp/kvchat-cuda-XXXXXX", cmd[8192], path[4096];

	if (kvc_cuda_device_count() == 0)
		test_skip("no CUDA device present");
	if (bd == NULL || mkdtemp(dir) == NULL)
		test_skip("top_builddir not set");
	for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
		for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
			snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, archs[a], types[t]);
			snprintf(cmd, sizeof cmd, "'%s/tests/fixtures/mkmodel' -o '%s' --preset tiny --arch %s --type %s --seed %zu >/dev/null",
			    bd, path, archs[a], types[t], a * 10 + t + 1);
			if (system(cmd) != 0) {
				test_cond(0, "mkmodel %s/%s failed", archs[a], types[t]);
				continue;
			}
			compare_model(path, archs[a], types[t]);
			unlink(path);
		}
	}
	rmdir(dir);
	return test_done();
#endif
}
