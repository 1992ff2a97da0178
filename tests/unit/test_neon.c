/*
 * test_neon [dotprod|nodot]: the aarch64 tables (src/kern/kern_neon*.c).
 * test_quant and test_forward check each table against the references and
 * for batch independence; this adds what holds between the two: "neon"
 * (SDOT emulated by widening multiplies) and "neondot" (SDOT) compute the
 * same exact integer sums in the same lanes and share the float work, so
 * every int8 product is bitwise equal in both, for every type, token count
 * and row range. And the choice: neon runs on any aarch64 CPU; neondot is
 * the best table where the CPU has the dot product and is refused by name
 * where it has not; an x86 table is refused as another architecture's.
 * The argument says which CPU tests/e2e/test_neon_qemu.sh asked qemu for
 * (none: the choice is not checked against it).
 */
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "test.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float
frand(void)	/* uniform in [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static const struct kern *
table(const char *name)
{
	for (int i = 0; kern_list(i) != NULL; i++)
		if (strcmp(kern_list(i)->name, name) == 0)
			return kern_list(i);
	return NULL;
}

/* neon and neondot on every int8 type: 2 shapes, 1-6 tokens, a few row ranges. */
static void
same_products(const struct kern *a, const struct kern *b)
{
	static const enum gguf_dtype types[] = {
		GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
		GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
	};
	static const int64_t ranges[][2] = { { 0, 9 }, { 1, 8 }, { 4, 5 } };
	enum { NMAX = 512, N_OUT = 9, N_TOK = 6 };
	static float x[N_TOK * NMAX], w[N_OUT * NMAX], ya[N_TOK * N_OUT], yb[N_TOK * N_OUT];
	static uint8_t W[N_OUT * NMAX * 2], act[N_TOK * (NMAX + 8 * NMAX / 32)];

	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum gguf_dtype t = types[ti];
		int64_t bs = q_block_elems(t);
		int bad = 0, runs = 0;
		/* one block of 256 or 7 of 32; two blocks of 256 or 16 of 32 */
		for (int64_t n = bs == 256 ? 256 : 224; n <= NMAX; n += bs == 256 ? 256 : 288) {
			size_t rb = q_row_bytes(t, n), ab = q_act_bytes(n);
			for (int i = 0; i < N_TOK * n; i++)
				x[i] = frand() * (1 + (float)((i / 32) % 4));
			for (int i = 0; i < N_OUT * n; i++)
				w[i] = frand() * (1 + (float)(i % 9) / 2);
			for (int r = 0; r < N_OUT; r++)
				q_quantize_row(t, w + r * n, W + r * rb, n);
			/* each table's own rounding of x: it must be the same too */
			for (int k = 0; k < N_TOK; k++)
				a->act_prepare(x + k * n, n, act + k * ab);
			for (int k = 0; k < N_TOK; k++) {
				uint8_t tmp[NMAX + 8 * NMAX / 32];
				b->act_prepare(x + k * n, n, tmp);
				bad += memcmp(tmp, act + k * ab, ab) != 0;
			}
			for (int nt = 1; nt <= N_TOK; nt++)
				for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
					int64_t r0 = ranges[ri][0], r1 = ranges[ri][1];
					memset(ya, 0, sizeof ya);
					memset(yb, 0, sizeof yb);
					kern_matmul_act(a, t, W, rb, act, nt, n, ya, N_OUT, r0, r1);
					kern_matmul_act(b, t, W, rb, act, nt, n, yb, N_OUT, r0, r1);
					bad += memcmp(ya, yb, sizeof ya) != 0;
					runs++;
				}
		}
		test_cond(bad == 0, "%s: %s and %s differ in %d of %d products", gguf_dtype_name(t), a->name,
		    b->name, bad, runs);
	}
}

int
main(int argc, char **argv)
{
	const struct kern *neon = table("neon"), *dot = table("neondot"), *k;
	const char *cpu = argc > 1 ? argv[1] : NULL;
	char err[160];

	test_cond(neon != NULL && dot != NULL, "both aarch64 tables are built in");
	if (neon == NULL || dot == NULL)
		return test_done();
	test_cond(kern_runs(neon), "neon runs on any aarch64 CPU");
	if (cpu != NULL && strcmp(cpu, "dotprod") == 0)
		test_cond(kern_runs(dot) && kern_best() == dot, "with SDOT: neondot is the best table (%s)",
		    kern_best()->name);
	if (cpu != NULL && strcmp(cpu, "nodot") == 0) {
		test_cond(!kern_runs(dot) && kern_best() == neon, "without SDOT: neon is the best table (%s)",
		    kern_best()->name);
		test_cond(kern_find("neondot", &k, err, sizeof err) == KVC_EUNSUPPORTED &&
		    strstr(err, "kernels 'neondot': this CPU cannot run them (it runs 'neon' at best)") != NULL,
		    "neondot refused by name: %s", err);
	}
	test_cond(kern_find("avx512", &k, err, sizeof err) == KVC_EUNSUPPORTED &&
	    strstr(err, "kernels 'avx512': x86-64 kernels, not built into this program "
	    "(it has scalar, neon, neondot or auto)") != NULL, "avx512 refused by name: %s", err);
	test_cond(kern_find("neon", &k, err, sizeof err) == KVC_OK && k == neon, "neon by name");
	if (kern_runs(dot))
		same_products(neon, dot);
	else
		printf("neondot: not on this CPU, the two tables not compared\n");
	return test_done();
}
