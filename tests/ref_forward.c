/* ref_forward.c: the float64 reference forward (see ref_forward.h). */
#include "ref_forward.h"
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor `name` (n_out rows of n_in) as doubles, or NULL when absent. */
static double *
load(const struct gguf_file *f, const char *name, int64_t n_in, int64_t n_out, bool *bad)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);
	size_t rb = ggml_row_size(t ? t->type : GGML_TYPE_F32, n_in);
	float *row;
	double *w;
	int64_t r, i;

	if (t == NULL)
		return NULL;
	if (t->ne[0] != n_in || t->ne[1] != n_out) {
		fprintf(stderr, "ref_forward: %s has the wrong shape\n", name);
		*bad = true;
		return NULL;
	}
	row = malloc((size_t)n_in * sizeof *row);
	w = malloc((size_t)(n_in * n_out) * sizeof *w);
	for (r = 0; r < n_out; r++) {
		q_dequant_row(t->type, (const char *)t->data + (size_t)r * rb, row, n_in);
		for (i = 0; i < n_in; i++)
			w[r * n_in + i] = row[i];
	}
	free(row);
	return w;
}

static double *
need(const struct gguf_file *f, const char *name, int64_t n_in, int64_t n_out, bool *bad)
{
	double *w = load(f, name, n_in, n_out, bad);

	if (w == NULL && !*bad) {
		fprintf(stderr, "ref_forward: %s missing\n", name);
		*bad = true;
	}
	return w;
}

/* y[r] = sum_i W[r][i] x[i] (+ b[r]) */
static void
matvec(double *y, const double *W, const double *b, const double *x, int n_in, int n_out)
{
	for (int r = 0; r < n_out; r++) {
		double s = b ? b[r] : 0;
		for (int i = 0; i < n_in; i++)
			s += W[(size_t)r * n_in + i] * x[i];
		y[r] = s;
	}
}

static void
rmsnorm(double *y, const double *x, const double *w, int n, double eps)
{
	double ss = 0;

	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		y[i] = x[i] * ss * w[i];
}

/* Rotate pairs of one head at position pos. */
static void
rope(double *x, int pos, const struct ref_config *c, bool neox, const double *factors)
{
	int half = c->rope_dim / 2;

	for (int i = 0; i < half; i++) {
		double freq = pow(c->rope_theta, -2.0 * i / c->rope_dim) * c->rope_freq_scale;
		double a, x0, x1;
		int j0 = neox ? i : 2 * i, j1 = neox ? i + half : 2 * i + 1;

		if (factors)
			freq /= factors[i];
		a = pos * freq;
		x0 = x[j0];
		x1 = x[j1];
		x[j0] = x0 * cos(a) - x1 * sin(a);
		x[j1] = x0 * sin(a) + x1 * cos(a);
	}
}

int
ref_forward(const struct gguf_file *f, const struct ref_config *c,
    const int32_t *tokens, int n, double *logits)
{
	int E = c->n_embd, hd = c->head_dim, qd = c->n_head * hd, kvd = c->n_head_kv * hd;
	int F = c->n_ff, V = c->n_vocab;
	bool neox = strcmp(c->arch, "llama") != 0, bad = false;
	double *x = calloc((size_t)n * E, sizeof *x);		/* residual stream (n, E) */
	double *Q = malloc((size_t)n * qd * sizeof *Q);		/* (n, qd) */
	double *K = malloc((size_t)n * kvd * sizeof *K);	/* (n, kvd) */
	double *Vv = malloc((size_t)n * kvd * sizeof *Vv);	/* (n, kvd) */
	double *xn = malloc((size_t)E * sizeof *xn), *att = malloc((size_t)qd * sizeof *att);
	double *tmp = malloc((size_t)E * sizeof *tmp), *sc = malloc((size_t)n * sizeof *sc);
	double *g = malloc((size_t)F * sizeof *g), *u = malloc((size_t)F * sizeof *u);
	double *emb, *out, *onorm, *factors;
	char name[96];

	emb = need(f, "token_embd.weight", E, V, &bad);
	out = load(f, "output.weight", E, V, &bad);
	onorm = need(f, "output_norm.weight", E, 1, &bad);
	factors = load(f, "rope_freqs.weight", c->rope_dim / 2, 1, &bad);
	if (bad)
		goto done;

	/* embeddings */
	for (int t = 0; t < n; t++)
		memcpy(x + (size_t)t * E, emb + (size_t)tokens[t] * E, (size_t)E * sizeof *x);

	for (int l = 0; l < c->n_layer && !bad; l++) {
#define W(var, suffix, nin, nout, req) \
		snprintf(name, sizeof name, "blk.%d.%s", l, suffix); \
		double *var = req ? need(f, name, nin, nout, &bad) : load(f, name, nin, nout, &bad)
		W(an, "attn_norm.weight", E, 1, true);
		W(wq, "attn_q.weight", E, qd, true);
		W(wk, "attn_k.weight", E, kvd, true);
		W(wv, "attn_v.weight", E, kvd, true);
		W(bq, "attn_q.bias", qd, 1, false);
		W(bk, "attn_k.bias", kvd, 1, false);
		W(bv, "attn_v.bias", kvd, 1, false);
		W(qn, "attn_q_norm.weight", hd, 1, false);
		W(kn, "attn_k_norm.weight", hd, 1, false);
		W(wo, "attn_output.weight", qd, E, true);
		W(fn, "ffn_norm.weight", E, 1, true);
		W(wg, "ffn_gate.weight", E, F, true);
		W(wu, "ffn_up.weight", E, F, true);
		W(wd, "ffn_down.weight", F, E, true);
#undef W
		if (!bad) {
			/* Q, K, V of every position: biases, per-head norms, rotation */
			for (int t = 0; t < n; t++) {
				rmsnorm(xn, x + (size_t)t * E, an, E, c->rms_eps);
				matvec(Q + (size_t)t * qd, wq, bq, xn, E, qd);
				matvec(K + (size_t)t * kvd, wk, bk, xn, E, kvd);
				matvec(Vv + (size_t)t * kvd, wv, bv, xn, E, kvd);
				for (int h = 0; h < c->n_head; h++) {
					double *q = Q + (size_t)t * qd + h * hd;
					if (qn)
						rmsnorm(q, q, qn, hd, c->rms_eps);
					rope(q, t, c, neox, factors);
				}
				for (int h = 0; h < c->n_head_kv; h++) {
					double *k = K + (size_t)t * kvd + h * hd;
					if (kn)
						rmsnorm(k, k, kn, hd, c->rms_eps);
					rope(k, t, c, neox, factors);
				}
			}
			/* causal attention, head h reading key/value head h / (n_head / n_head_kv) */
			for (int t = 0; t < n; t++) {
				for (int h = 0; h < c->n_head; h++) {
					int kh = h / (c->n_head / c->n_head_kv);
					double mx = -INFINITY, sum = 0;

					for (int p = 0; p <= t; p++) {
						double s = 0;
						for (int d = 0; d < hd; d++)
							s += Q[(size_t)t * qd + h * hd + d] * K[(size_t)p * kvd + kh * hd + d];
						sc[p] = s / sqrt((double)hd);
						mx = fmax(mx, sc[p]);
					}
					for (int p = 0; p <= t; p++)
						sum += sc[p] = exp(sc[p] - mx);
					for (int d = 0; d < hd; d++) {
						double s = 0;
						for (int p = 0; p <= t; p++)
							s += sc[p] / sum * Vv[(size_t)p * kvd + kh * hd + d];
						att[h * hd + d] = s;
					}
				}
				matvec(tmp, wo, NULL, att, qd, E);
				for (int i = 0; i < E; i++)
					x[(size_t)t * E + i] += tmp[i];
				/* SwiGLU feed-forward */
				rmsnorm(xn, x + (size_t)t * E, fn, E, c->rms_eps);
				matvec(g, wg, NULL, xn, E, F);
				matvec(u, wu, NULL, xn, E, F);
				for (int i = 0; i < F; i++)
					g[i] = g[i] / (1 + exp(-g[i])) * u[i];
				matvec(tmp, wd, NULL, g, F, E);
				for (int i = 0; i < E; i++)
					x[(size_t)t * E + i] += tmp[i];
			}
		}
		free(an); free(wq); free(wk); free(wv); free(bq); free(bk); free(bv);
		free(qn); free(kn); free(wo); free(fn); free(wg); free(wu); free(wd);
	}
	/* final norm and output matrix (the embedding when tied) */
	for (int t = 0; t < n && !bad; t++) {
		rmsnorm(xn, x + (size_t)t * E, onorm, E, c->rms_eps);
		matvec(logits + (size_t)t * V, out ? out : emb, NULL, xn, E, V);
	}
done:
	free(x); free(Q); free(K); free(Vv); free(xn); free(att); free(tmp); free(sc);
	free(g); free(u); free(emb); free(out); free(onorm); free(factors);
	return bad ? -1 : 0;
}
