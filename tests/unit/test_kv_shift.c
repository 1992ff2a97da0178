/*
 * test_kv_shift.c: the RoPE shift behind --ctx-overflow slide.
 *
 * 1. kv_shift_rows against float64: rows x rotated to position p in
 *    double and stored in the cache type, shifted by -d, must equal x
 *    rotated to p - d in double, for both pairings (adjacent, NeoX), a
 *    partial rope_dim and frequency factors in inv_freq. Per rotated pair
 *    of magnitude r (and every unrotated element, of magnitude r = |x|):
 *     - F32: one rounding of the stored input, the rotation's float
 *       products and sums, one rounding out: <= 8 * 2^-24 * r;
 *     - F16 (u = 2^-11): the stored pair is off by <= u each, the rotation
 *       mixes them (|cos e0 - sin e1| <= |e0| + |e1| <= 2u r), the result
 *       is rounded again (u r): <= 3u r, plus the F32 term;
 *     - Q8_0 (c = 1/254 + 2^-11 of the block's largest magnitude A): in,
 *       both elements of the pair (their blocks' A_in, up to 2c max A_in),
 *       out c A_out: <= 2c A_in + c A_out, plus the F32 term.
 * 2. The backend: a cache holding tokens t[0..n) with positions [keep,
 *    keep + d) dropped by kv_shift, against a cache that computed t[0..keep)
 *    + t[keep + d..n) at their new positions. Layer 0's K and V depend on
 *    the token alone (not on the context), so there the shifted rows must
 *    equal the recomputed ones: V exactly, K within the F32 bound above (a
 *    float32 RoPE at the new position against the float64 shift of a float32
 *    RoPE at the old one: 16 * 2^-24 r, r the pair's magnitude).
 */
#include "backend/backend.h"
#include "backend/kv_shift.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#define C_Q8 (1.0 / 254 + 1.0 / 2048)

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

/* y = x rotated to position pos (double), one head of hd with rope_dim rd */
static void
rope64(const double *x, double *y, int hd, int rd, bool neox, const double *inv, double pos)
{
	for (int i = 0; i < hd; i++)
		y[i] = x[i];
	for (int i = 0; i < rd / 2; i++) {
		int a = neox ? i : 2 * i, b = neox ? i + rd / 2 : 2 * i + 1;
		double c = cos(pos * inv[i]), s = sin(pos * inv[i]);

		y[a] = x[a] * c - x[b] * s;
		y[b] = x[a] * s + x[b] * c;
	}
}

static double
blockmax(const double *v, int i)
{
	double m = 0;

	for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
		m = fmax(m, fabs(v[j]));
	return m;
}

/* One configuration: returns the worst error / bound ratio. */
static double
shift_case(enum gguf_dtype type, int n_kv, int hd, int rd, bool neox, bool factors, int pos, int d)
{
	int w = n_kv * hd, half = rd / 2;
	size_t rb = kvc_kv_row_bytes(type, w);
	double inv[128], x[512], in[512], want[512], worst = 0;
	float f[512], got[512];
	unsigned char row[2048];
	struct kv_rope r = { n_kv, hd, rd, neox, inv };

	for (int i = 0; i < half; i++)
		inv[i] = pow(10000.0, -2.0 * i / rd) / (factors ? 1 + 7 * test_urand(&rng) : 1);
	for (int i = 0; i < w; i++)
		x[i] = (test_urand(&rng) * 2 - 1) * (i % 7 == 0 ? 4 : 1);
	for (int h = 0; h < n_kv; h++) {
		rope64(x + h * hd, in + h * hd, hd, rd, neox, inv, pos);
		rope64(x + h * hd, want + h * hd, hd, rd, neox, inv, pos - d);
	}
	for (int i = 0; i < w; i++)
		f[i] = (float)in[i];
	kvc_kv_row_from_f32(type, f, row, w);
	test_cond(kv_shift_rows(row, 1, type, &r, -d, f) == KVC_OK, "kv_shift_rows failed");
	kvc_kv_row_to_f32(type, row, got, w);
	for (int h = 0; h < n_kv; h++) {
		for (int j = 0; j < hd; j++) {
			int i = h * hd + j, a = j, b = j;	/* the pair of element j */
			double rr, bound;

			if (j < rd) {
				int p = neox ? j % half : j / 2;

				a = neox ? p : 2 * p;
				b = neox ? p + half : 2 * p + 1;
			}
			rr = hypot(x[h * hd + a], x[h * hd + b]);
			if (a == b)
				rr = fabs(x[i]);
			bound = 8 * ldexp(rr, -24);
			if (type == GGML_TYPE_F16)
				bound += 3 * ldexp(rr, -11);
			if (type == GGML_TYPE_Q8_0)
				bound += 2 * C_Q8 * fmax(blockmax(in, h * hd + a), blockmax(in, h * hd + b)) +
				    C_Q8 * blockmax(want, i);
			worst = fmax(worst, fabs(got[i] - want[i]) / bound);
		}
	}
	(void)rb;
	return worst;
}

static void
test_rows(void)
{
	static const enum gguf_dtype types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0 };
	/* (n_kv, head_dim, rope_dim) */
	static const int shapes[][3] = { { 2, 64, 64 }, { 1, 128, 128 }, { 4, 8, 8 }, { 2, 64, 32 } };
	double worst = 0;

	for (int t = 0; t < 3; t++)
		for (int s = 0; s < 4; s++)
			for (int neox = 0; neox < 2; neox++)
				for (int k = 0; k < 4; k++) {
					int pos = 100 + k * 1777, d = 1 + k * 613;
					double q = shift_case(types[t], shapes[s][0], shapes[s][1], shapes[s][2],
					    neox, k % 2, pos, d);

					test_cond(q <= 1, "%s %dx%d rope %d %s pos %d by -%d: %.3g of the bound",
					    gguf_dtype_name(types[t]), shapes[s][0], shapes[s][1], shapes[s][2],
					    neox ? "neox" : "adjacent", pos, d, q);
					worst = fmax(worst, q);
				}
	printf("shifted rows vs float64 at the new position: worst %.3f of the bound\n", worst);
}

/* Layer 0 of a shifted cache against one computed at the new positions. */
static void
test_backend(const char *path, const char *what)
{
	const struct kvc_backend_i *be = &kvc_backend_cpu;
	struct gguf_file *gf = NULL;
	struct kvc_model m;
	struct kvc_backend_params bp = { .n_threads = 2 };
	void *ctx = NULL, *a = NULL, *b = NULL;
	char err[256];
	int n = 40, keep = 5, d = 13, w, hd, rd, nm = 40 - 13;
	int32_t t[40], u[40];
	float *ka, *kb, *va, *vb;
	double worst = 0;
	bool v_same;

	memset(&m, 0, sizeof m);
	if (gguf_open(&gf, path, err, sizeof err) || model_load(&m, gf, err, sizeof err) ||
	    be->init(&ctx, &m, &bp, err, sizeof err)) {
		test_cond(0, "%s: %s", what, err);
		goto out;
	}
	w = m.hp.n_head_kv * m.hp.head_dim;
	hd = m.hp.head_dim;
	rd = m.hp.rope_dim;
	for (int i = 0; i < n; i++)
		t[i] = (int32_t)((i * 37 + 5) % m.hp.n_vocab);
	memcpy(u, t, (size_t)keep * sizeof *u);
	memcpy(u + keep, t + keep + d, (size_t)(n - keep - d) * sizeof *u);
	if (be->kv_create(ctx, 64, GGML_TYPE_F32, &a, err, sizeof err) ||
	    be->kv_create(ctx, 64, GGML_TYPE_F32, &b, err, sizeof err) ||
	    be->forward(ctx, a, t, n, 0, NULL, false, err, sizeof err) ||
	    be->kv_shift(ctx, a, keep, d, err, sizeof err) ||
	    be->forward(ctx, b, u, nm, 0, NULL, false, err, sizeof err)) {
		test_cond(0, "%s: %s", what, err);
		goto out;
	}
	ka = malloc((size_t)(nm + 1) * w * sizeof *ka);
	kb = malloc((size_t)nm * w * sizeof *kb);
	va = malloc((size_t)nm * w * sizeof *va);
	vb = malloc((size_t)nm * w * sizeof *vb);
	test_cond(be->kv_read(ctx, a, 0, KVC_KV_K, 0, nm + 1, ka, err, sizeof err) != 0,
	    "%s: a position past the shifted end is still readable", what);
	be->kv_read(ctx, a, 0, KVC_KV_K, 0, nm, ka, err, sizeof err);
	be->kv_read(ctx, b, 0, KVC_KV_K, 0, nm, kb, err, sizeof err);
	be->kv_read(ctx, a, 0, KVC_KV_V, 0, nm, va, err, sizeof err);
	be->kv_read(ctx, b, 0, KVC_KV_V, 0, nm, vb, err, sizeof err);
	v_same = memcmp(va, vb, (size_t)nm * w * sizeof *va) == 0;
	for (int p = 0; p < nm; p++)
		for (int i = 0; i < w; i++) {
			int j = i % hd, pa = j, pb = j;
			double rr;

			if (j < rd) {
				int q = m.hp.rope_neox ? j % (rd / 2) : j / 2;

				pa = m.hp.rope_neox ? q : 2 * q;
				pb = m.hp.rope_neox ? q + rd / 2 : 2 * q + 1;
			}
			rr = hypot(kb[(size_t)p * w + i - j + pa], kb[(size_t)p * w + i - j + pb]);
			worst = fmax(worst, fabs(ka[(size_t)p * w + i] - kb[(size_t)p * w + i]) /
			    (16 * ldexp(rr, -24) + 1e-30));
		}
	test_cond(v_same, "%s: layer 0 V moved, not equal to V computed at the new positions", what);
	test_cond(worst <= 1, "%s: layer 0 K shifted vs computed at the new positions: %.3g of the bound",
	    what, worst);
	printf("%s: layer 0 K shifted by -%d vs computed there: worst %.3f of the bound\n", what, d, worst);
	free(ka);
	free(kb);
	free(va);
	free(vb);
out:
	if (a)
		be->kv_destroy(ctx, a);
	if (b)
		be->kv_destroy(ctx, b);
	if (ctx)
		be->free(ctx);
	model_free(&m);
	if (gf)
		gguf_close(gf);
}

int
main(void)
{
	const char *bd = getenv("top_builddir"), *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	static const char *const args[] = { "--arch llama", "--arch qwen2", "--arch llama --rope-freqs" };
	char path[600], cmd[1400];

	test_rows();
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/kvc-shift-%d-%d.gguf", tmp, (int)getpid(), i);
		snprintf(cmd, sizeof cmd, "'%s/tests/fixtures/mkmodel' -o '%s' --preset tiny %s --type f32 "
		    "--quiet >/dev/null", bd ? bd : ".", path, args[i]);
		if (system(cmd) != 0) {
			test_cond(0, "%s failed", cmd);
			continue;
		}
		test_backend(path, args[i]);
		remove(path);
	}
	return test_done();
}
