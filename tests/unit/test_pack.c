/*
 * test_pack: the CPU backend's packed copies (cpu_pack.c). A model of
 * Q8_0, Q4_0 and Q5_0 matrices with a tied Q8_0 output, opened twice:
 * mapped from a file (the packed matrices' pages are then handed back, and
 * the embedding rows of the tied output read back from the file) and from a
 * buffer (left alone). Both must give bitwise the same logits, prefill and
 * decode, and the backend's description must say what was packed and
 * released. In every kernel table this CPU runs: where the table has no
 * packed kernel (scalar), nothing is packed and the description
 * says nothing of it.
 */
#include "backend/backend.h"
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "test.h"

#include <unistd.h>

enum { E = 256, FF = 512, NH = 4, NKV = 2, HD = 64, V = 320, NL = 2, N_TOK = 9 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float
frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void
add(struct gguf_writer *w, const char *name, enum gguf_dtype t, int64_t n_in, int64_t n_out, float sc,
    float off)
{
	size_t rb = gguf_dtype_row_size(t, n_in);
	float *row = malloc((size_t)n_in * sizeof *row);
	uint8_t *data = malloc(rb * (size_t)n_out);
	int64_t ne[2] = { n_in, n_out };

	for (int64_t r = 0; r < n_out; r++) {
		for (int64_t i = 0; i < n_in; i++)
			row[i] = off + sc * frand();
		q_quantize_row(t, row, data + (size_t)r * rb, n_in);
	}
	gguf_w_tensor(w, name, t, n_out == 1 ? 1 : 2, ne, data, rb * (size_t)n_out);
	free(row);
	free(data);
}

static struct gguf_writer *
build(void)
{
	struct gguf_writer *w = gguf_writer_new();
	char n[64];

	gguf_w_str(w, "general.architecture", "llama");
	gguf_w_u32(w, "llama.context_length", 64);
	gguf_w_u32(w, "llama.embedding_length", E);
	gguf_w_u32(w, "llama.block_count", NL);
	gguf_w_u32(w, "llama.feed_forward_length", FF);
	gguf_w_u32(w, "llama.attention.head_count", NH);
	gguf_w_u32(w, "llama.attention.head_count_kv", NKV);
	gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
	add(w, "token_embd.weight", GGML_TYPE_Q8_0, E, V, 1.0f, 0);	/* tied: also the output */
	add(w, "output_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
	for (int l = 0; l < NL; l++) {
#define T(s, t, a, b, sc, off) (snprintf(n, sizeof n, "blk.%d.%s", l, s), add(w, n, t, a, b, sc, off))
		T("attn_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
		T("attn_q.weight", GGML_TYPE_Q4_0, E, NH * HD, 0.12f, 0);
		T("attn_k.weight", GGML_TYPE_Q4_0, E, NKV * HD, 0.12f, 0);
		T("attn_v.weight", GGML_TYPE_Q4_0, E, NKV * HD, 0.06f, 0);
		T("attn_output.weight", GGML_TYPE_Q5_0, NH * HD, E, 0.06f, 0);
		T("ffn_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
		T("ffn_gate.weight", GGML_TYPE_Q4_0, E, FF, 0.12f, 0);
		T("ffn_up.weight", GGML_TYPE_Q5_0, E, FF, 0.06f, 0);
		T("ffn_down.weight", GGML_TYPE_Q8_0, FF, E, 0.04f, 0);
#undef T
	}
	return w;
}

/* Prefill of N_TOK tokens (all logits), then one decode step; the backend's description into line. */
static int
run(struct gguf_file *f, const struct kern *k, float *lg, char *line, size_t linelen)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	struct kvc_backend_params bp = { .n_threads = 2, .kernels = k->name };
	struct kvc_model m;
	struct kvc_buf d = {0};
	void *ctx = NULL, *kv = NULL;
	int32_t tok[N_TOK + 1];
	char err[256];
	int rc;

	for (int i = 0; i <= N_TOK; i++)
		tok[i] = (int32_t)((i * 37 + 5) % V);
	if ((rc = model_load(&m, f, err, sizeof err)) != 0) {
		fprintf(stderr, "model_load: %s\n", err);
		return rc;
	}
	if ((rc = be->init(&ctx, &m, &bp, err, sizeof err)) == 0 &&
	    (rc = be->kv_create(ctx, 64, GGML_TYPE_F32, &kv, err, sizeof err)) == 0 &&
	    (rc = be->forward(ctx, kv, tok, N_TOK, 0, lg, true, err, sizeof err)) == 0)
		rc = be->forward(ctx, kv, tok + N_TOK, 1, N_TOK, lg + (size_t)N_TOK * V, false, err,
		    sizeof err);
	if (rc != 0)
		fprintf(stderr, "backend: %s\n", err);
	if (ctx != NULL) {
		be->describe(ctx, &d);
		snprintf(line, linelen, "%s", d.p ? d.p : "");
		kvc_buf_free(&d);
	}
	if (kv != NULL)
		be->kv_destroy(ctx, kv);
	if (ctx != NULL)
		be->free(ctx);
	model_free(&m);
	return rc;
}

int
main(void)
{
	struct gguf_writer *w = build();
	struct gguf_file *fm = NULL, *fb = NULL;
	char path[] = "/tmp/kvchat-test-pack.XXXXXX", err[256], lm[1024] = "", lb[1024] = "";
	void *mem = NULL;
	size_t len = 0;
	static float a[(N_TOK + 1) * V], b[(N_TOK + 1) * V];
	int fd = mkstemp(path);

	test_cond(fd >= 0, "temp file");
	if (fd < 0)
		return test_done();
	close(fd);
	test_cond(gguf_w_to_mem(w, &mem, &len) == 0 && gguf_w_write(w, path, err, sizeof err) == 0,
	    "write the model");
	test_cond(gguf_open(&fm, path, err, sizeof err) == 0 && gguf_mapped(fm), "open mapped: %s", err);
	test_cond(gguf_open_mem(&fb, mem, len, "buffer", err, sizeof err) == 0 && !gguf_mapped(fb),
	    "open buffer: %s", err);
	for (int i = 0; fm != NULL && fb != NULL && kern_list(i) != NULL; i++) {
		const struct kern *k = kern_list(i);

		if (!kern_runs(k))
			continue;
		test_cond(run(fm, k, a, lm, sizeof lm) == 0, "%s mapped forward", k->name);
		test_cond(run(fb, k, b, lb, sizeof lb) == 0, "%s buffer forward", k->name);
		test_cond(memcmp(a, b, sizeof a) == 0, "%s: mapped (pages released) and buffer logits differ",
		    k->name);
		if (kern_packs(k, GGML_TYPE_Q8_0, E)) {
			const char *line = "packed: 15 Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q5_K/Q6_K/IQ4_NL/MXFP4/IQ4_XS matrices";
			/* 2 layers x 7 matrices + the tied output */
			test_cond(strstr(lm, line) != NULL &&
			    strstr(lm, "file pages handed back") != NULL, "mapped: %s", lm);
			test_cond(strstr(lb, line) != NULL &&
			    strstr(lb, "handed back") == NULL, "buffer: %s", lb);
		} else {
			test_cond(strstr(lm, "packed") == NULL, "no packing without a packed kernel: %s", lm);
		}
		printf("%s\n", lm);
	}
	if (fm != NULL)
		gguf_close(fm);
	if (fb != NULL)
		gguf_close(fb);
	unlink(path);
	free(mem);
	gguf_writer_free(w);
	return test_done();
}
