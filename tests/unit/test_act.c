/*
 * test_act.c: the FFN activations of the CPU backend (cpu_arch.c over each
 * kernel table's act), SiLU and GELU's tanh form, against float64, and
 * their independence from how a thread's row range is cut.
 *
 * Bound: on AVX2 CPUs y = x / (1 + e^(-s)) with a polynomial e^x of
 * relative error <= 2e-7 and four float roundings (s, the sum, the
 * division, the product with u): about 5e-7 relative to y. s itself is a
 * float product whose relative error (3 * 2^-24) enters e^(-s) as an
 * absolute error of |s| * 2e-7 in the exponent; where e^(-s) dominates
 * (s < 0, y tiny) that is |s| * 2e-7 relative to y, at most 88 * 2e-7 =
 * 1.8e-5. Allowed: 1e-6 |y| + 2e-7 |s| |y| + 1e-30 (and libm on other CPUs
 * is well inside).
 */
#include "backend/cpu_arch.h"
#include "test.h"

#include <math.h>
#include <string.h>

static double
ref_act(double x, bool gelu, double *s)
{
	*s = gelu ? 2 * sqrt(2 / 3.14159265358979323846) * x * (1 + 0.044715 * x * x) : x;
	/* 0.5 x (1 + tanh(s/2)) = x / (1 + e^(-s)); the second form keeps its
	 * relative precision where tanh rounds to -1 */
	return x / (1 + exp(-*s));
}

static void
accuracy(const struct kern *k, bool gelu)
{
	enum { N = 4001 };
	static float g[N], u[N], x[N];
	int i, bad = 0;
	double worst = 0;

	for (i = 0; i < N; i++) {
		/* -40 .. 40 in steps of 0.02, then a few extremes */
		x[i] = (float)((i - 2000) * 0.02);
		u[i] = 1.0f;
	}
	x[0] = -1e4f, x[1] = 1e4f, x[2] = -88.5f, x[3] = 1e-20f, x[4] = -1e-20f, x[5] = 0.0f;
	memcpy(g, x, sizeof g);
	cpu_gate_act(k, g, u, 0, N, gelu);
	for (i = 0; i < N; i++) {
		double s, r = ref_act(x[i], gelu, &s), e = fabs(g[i] - r);
		double tol = 1e-6 * fabs(r) + 2e-7 * fabs(s) * fabs(r) + 1e-30;

		if (!(e <= tol) && bad++ < 5)
			fprintf(stderr, "  %s(%g) = %.9g, float64 %.9g\n", gelu ? "gelu" : "silu",
			    x[i], g[i], r);
		if (fabs(r) > 1e-30 && e / fabs(r) > worst)
			worst = e / fabs(r);
	}
	test_cond(bad == 0, "%s within the bound at %d points (%d outside)", gelu ? "gelu" : "silu",
	    N, bad);
	printf("# %s: largest relative error %.3g\n", gelu ? "gelu" : "silu", worst);

	/* the gate: act(g) * u */
	for (i = 0; i < N; i++)
		u[i] = (float)(i % 7) - 3.0f;
	memcpy(g, x, sizeof g);
	cpu_gate_act(k, g, u, 0, N, gelu);
	for (bad = 0, i = 0; i < N; i++) {
		double s, r = ref_act(x[i], gelu, &s) * u[i];

		if (!(fabs(g[i] - r) <= 1e-6 * fabs(r) + 2e-7 * fabs(s) * fabs(r) + 1e-30))
			bad++;
	}
	test_cond(bad == 0, "%s times the up projection within the bound (%d outside)",
	    gelu ? "gelu" : "silu", bad);
}

/* every cut of [0, n) into [0, k) and [k, n) gives the same bits as one call */
static void
cuts(const struct kern *k, bool gelu)
{
	enum { N = 37 };
	float x[N], u[N], whole[N], part[N];
	int i, cut, diff = 0;

	for (i = 0; i < N; i++) {
		x[i] = (float)sin(i * 1.7) * 6.0f;
		u[i] = (float)cos(i * 0.3);
	}
	memcpy(whole, x, sizeof x);
	cpu_gate_act(k, whole, u, 0, N, gelu);
	for (cut = 0; cut <= N; cut++) {
		memcpy(part, x, sizeof x);
		cpu_gate_act(k, part, u, 0, cut, gelu);
		cpu_gate_act(k, part, u, cut, N, gelu);
		diff += memcmp(part, whole, sizeof whole) != 0;
	}
	test_cond(diff == 0, "%s %s: %d of %d cuts of the range change a bit", k->name,
	    gelu ? "gelu" : "silu", diff, N + 1);
}

/* gpt2's GELU(x + b) equals the gate's GELU of the sum, bit for bit */
static void
gelu_bias(const struct kern *k)
{
	enum { N = 29 };
	float x[N], b[N], sum[N], one[N];
	int i;

	for (i = 0; i < N; i++) {
		x[i] = (float)sin(i * 0.9) * 4.0f;
		b[i] = (float)cos(i * 2.1);
		sum[i] = x[i] + b[i];
		one[i] = 1.0f;
	}
	cpu_gelu_bias(k, x, b, N);
	cpu_gate_act(k, sum, one, 0, N, true);
	test_cond(memcmp(x, sum, sizeof x) == 0, "gelu_bias equals gelu of x + b");
}

int
main(void)
{
	/* every kernel table this CPU runs */
	for (int i = 0; kern_list(i) != NULL; i++) {
		const struct kern *k = kern_list(i);

		if (!kern_runs(k))
			continue;
		printf("kernels %s\n", k->name);
		accuracy(k, false);
		accuracy(k, true);
		cuts(k, false);
		cuts(k, true);
		gelu_bias(k);
	}
	return test_done();
}
