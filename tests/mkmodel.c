/*
 * mkmodel: write a random-weight GGUF model (llama, qwen2, qwen3) with the
 * project's own vocabulary, tensor names and metadata keys as llama.cpp's
 * files have them. Tiny presets are test fixtures; real-shape presets
 * (qwen2.5-0.5b, qwen2.5-7b, llama3.1-8b) are for benchmarks.
 *
 * Weights are generated row by row from a seed derived from (--seed, tensor
 * index, row), so the file is the same whatever the thread count, and are
 * streamed to disk tensor by tensor: memory stays at one slab of rows.
 */
#include "config.h"

#include "fixture_vocab.h"
#include "gguf_write.h"
#include "quant.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum mk_arch { MK_LLAMA, MK_QWEN2, MK_QWEN3 };
static const char *const arch_names[] = {"llama", "qwen2", "qwen3"};

struct mk_cfg {
	enum mk_arch arch;
	const char *type_name;	/* f32 .. q4_k_m */
	enum ggml_type type;	/* matrices */
	enum ggml_type type_big;	/* output and ffn_down (Q6_K for *_k_m) */
	int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
	uint64_t seed;
	bool tied;
	bool rope_freqs;	/* llama 3.1 frequency factors */
	enum fixture_vocab_kind vocab;
	float rope_theta, rms_eps;
	const char *preset;
	int threads;
	bool quiet;
};

/* ---- random numbers ------------------------------------------------------- */

static uint64_t
splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* xoshiro-style generator state for one row */
struct rng { uint64_t s; };

static inline float
uniform(struct rng *r)	/* [-1, 1) */
{
	/* xorshift64*: cheap and good enough for weights */
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	uint64_t v = r->s * 0x2545F4914F6CDD1Dull;
	return (float)(v >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* ---- tensor plan ------------------------------------------------------------ */

enum mk_kind { K_MATRIX, K_NORM, K_BIAS, K_ROPE_FREQS };

struct mk_tensor {
	char name[64];
	enum ggml_type type;
	enum mk_kind kind;
	uint32_t n_dims;
	int64_t ne[2];		/* ne[0] = n_in, ne[1] = rows */
};

struct plan {
	struct mk_tensor *t;
	size_t n, cap;
};

static int
plan_add(struct plan *p, const struct mk_cfg *c, const char *name, enum mk_kind kind,
    enum ggml_type want, int64_t n_in, int64_t rows)
{
	struct mk_tensor *t;

	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		struct mk_tensor *q = realloc(p->t, cap * sizeof *q);
		if (q == NULL)
			return KVC_ENOMEM;
		p->t = q;
		p->cap = cap;
	}
	t = &p->t[p->n++];
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->kind = kind;
	t->n_dims = kind == K_MATRIX ? 2 : 1;
	t->ne[0] = n_in;
	t->ne[1] = rows;
	t->type = kind == K_MATRIX ? want : GGML_TYPE_F32;
	if (q_row_bytes(t->type, n_in) == 0) {
		/*
		 * Real files fall back to another type for rows the block does not
		 * divide; llama.cpp's choice: Q4_K -> Q5_0, Q5_K -> Q5_1, else Q8_0
		 * (F16 when even 32 does not divide). Q3_K: llama.cpp now takes
		 * IQ4_NL, which kvchat does not compute with; older versions took
		 * Q4_0, which is what the fixture uses.
		 */
		enum ggml_type fb = t->type == GGML_TYPE_Q4_K ? GGML_TYPE_Q5_0 :
		    t->type == GGML_TYPE_Q5_K ? GGML_TYPE_Q5_1 :
		    t->type == GGML_TYPE_Q3_K ? GGML_TYPE_Q4_0 : GGML_TYPE_Q8_0;
		if (q_row_bytes(fb, n_in) == 0)
			fb = GGML_TYPE_F16;
		/* one note per tensor kind: layer 0 speaks for every layer */
		if (!c->quiet && (strncmp(name, "blk.", 4) != 0 || strncmp(name, "blk.0.", 6) == 0))
			fprintf(stderr, "mkmodel: note: %s%s has rows of %lld, not a multiple of %lld: %s instead of %s\n",
			    name, strncmp(name, "blk.0.", 6) == 0 ? " (and every layer's)" : "", (long long)n_in, (long long)q_block_elems(t->type),
			    ggml_type_name(fb), ggml_type_name(t->type));
		t->type = fb;
	}
	return 0;
}

static int
make_plan(struct plan *p, const struct mk_cfg *c)
{
	int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_head_kv * c->head_dim;
	char name[64];
	int rc = 0;

	rc |= plan_add(p, c, "token_embd.weight", K_MATRIX, c->type, c->n_embd, c->n_vocab);
	rc |= plan_add(p, c, "output_norm.weight", K_NORM, 0, c->n_embd, 1);
	if (!c->tied)
		rc |= plan_add(p, c, "output.weight", K_MATRIX, c->type_big, c->n_embd, c->n_vocab);
	if (c->rope_freqs)
		rc |= plan_add(p, c, "rope_freqs.weight", K_ROPE_FREQS, 0, c->head_dim / 2, 1);
	for (int l = 0; l < c->n_layer && rc == 0; l++) {
#define T(suffix, kind, type, n_in, rows) do {					\
		snprintf(name, sizeof name, "blk.%d.%s", l, suffix);		\
		rc |= plan_add(p, c, name, kind, type, n_in, rows);		\
	} while (0)
		T("attn_norm.weight", K_NORM, 0, c->n_embd, 1);
		T("attn_q.weight", K_MATRIX, c->type, c->n_embd, q_dim);
		T("attn_k.weight", K_MATRIX, c->type, c->n_embd, kv_dim);
		T("attn_v.weight", K_MATRIX, c->type, c->n_embd, kv_dim);
		if (c->arch == MK_QWEN2) {
			T("attn_q.bias", K_BIAS, 0, q_dim, 1);
			T("attn_k.bias", K_BIAS, 0, kv_dim, 1);
			T("attn_v.bias", K_BIAS, 0, kv_dim, 1);
		}
		if (c->arch == MK_QWEN3) {
			T("attn_q_norm.weight", K_NORM, 0, c->head_dim, 1);
			T("attn_k_norm.weight", K_NORM, 0, c->head_dim, 1);
		}
		T("attn_output.weight", K_MATRIX, c->type, q_dim, c->n_embd);
		T("ffn_norm.weight", K_NORM, 0, c->n_embd, 1);
		T("ffn_gate.weight", K_MATRIX, c->type, c->n_embd, c->n_ff);
		T("ffn_up.weight", K_MATRIX, c->type, c->n_embd, c->n_ff);
		T("ffn_down.weight", K_MATRIX, c->type_big, c->n_ff, c->n_embd);
#undef T
	}
	return rc;
}

/* ---- weight generation ------------------------------------------------------- */

/* Llama 3.1 RoPE frequency factors: factor 8, low/high frequency factors 1/4, original context 8192. */
static void
llama31_freq_factors(const struct mk_cfg *c, float *out, int n)
{
	const double scale = 8, lo = 1, hi = 4, old_ctx = 8192;
	const double lo_wave = old_ctx / lo, hi_wave = old_ctx / hi;

	for (int i = 0; i < n; i++) {
		double freq = pow(c->rope_theta, -2.0 * i / c->head_dim);
		double wave = 2 * 3.14159265358979323846 / freq;
		if (wave < hi_wave) {
			out[i] = 1;
		} else if (wave > lo_wave) {
			out[i] = (float)scale;
		} else {
			double smooth = (old_ctx / wave - lo) / (hi - lo);
			out[i] = (float)(1 / ((1 - smooth) / scale + smooth));
		}
	}
}

/* Row r of tensor t as floats. */
static void
gen_row(const struct mk_cfg *c, const struct mk_tensor *t, size_t ti, int64_t r, float *x)
{
	uint64_t s = c->seed * 0x100000001B3ull ^ ((uint64_t)ti << 40) ^ (uint64_t)r;
	struct rng g;
	int64_t n = t->ne[0];

	splitmix(&s);
	g.s = splitmix(&s) | 1;
	switch (t->kind) {
	case K_MATRIX: {
		/* uniform with standard deviation 1/sqrt(n_in): activations keep their scale */
		float a = sqrtf(3.0f / (float)n);
		for (int64_t i = 0; i < n; i++)
			x[i] = a * uniform(&g);
		break;
	}
	case K_NORM:
		for (int64_t i = 0; i < n; i++)
			x[i] = 1.0f + 0.1f * uniform(&g);
		break;
	case K_BIAS:
		for (int64_t i = 0; i < n; i++)
			x[i] = 0.1f * uniform(&g);
		break;
	case K_ROPE_FREQS:
		llama31_freq_factors(c, x, (int)n);
		break;
	}
}

struct job {
	const struct mk_cfg *c;
	const struct mk_tensor *t;
	size_t ti;
	int64_t r0, r1;		/* rows of this job */
	uint8_t *out;		/* row r0's bytes */
	size_t row_bytes;
	int rc;
};

static void *
run_job(void *arg)
{
	struct job *j = arg;
	float *x = malloc((size_t)j->t->ne[0] * sizeof *x);

	if (x == NULL) {
		j->rc = KVC_ENOMEM;
		return NULL;
	}
	for (int64_t r = j->r0; r < j->r1 && j->rc == 0; r++) {
		gen_row(j->c, j->t, j->ti, r, x);
		j->rc = q_quantize_row(j->t->type, x, j->out + (size_t)(r - j->r0) * j->row_bytes, j->t->ne[0]);
	}
	free(x);
	return NULL;
}

/* Generate rows [r0, r1) of tensor ti into out, on c->threads threads. */
static int
gen_rows(const struct mk_cfg *c, const struct mk_tensor *t, size_t ti, int64_t r0, int64_t r1, uint8_t *out)
{
	enum { MAX_THREADS = 64 };
	struct job jobs[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	bool created[MAX_THREADS];
	int nt = c->threads < 1 ? 1 : c->threads > MAX_THREADS ? MAX_THREADS : c->threads;
	size_t rb = q_row_bytes(t->type, t->ne[0]);
	int64_t n = r1 - r0, per;
	int rc = 0;

	if (n < nt)
		nt = (int)n;
	per = (n + nt - 1) / nt;
	for (int i = 0; i < nt; i++) {
		int64_t a = r0 + i * per, b = a + per < r1 ? a + per : r1;
		jobs[i] = (struct job){c, t, ti, a, b, out + (size_t)(a - r0) * rb, rb, 0};
		created[i] = false;
		if (a >= b)
			continue;
		if (nt > 1 && pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0)
			created[i] = true;
		else
			run_job(&jobs[i]);	/* no thread: do it here */
	}
	for (int i = 0; i < nt; i++) {
		if (created[i])
			pthread_join(th[i], NULL);
		if (jobs[i].rc != 0)
			rc = jobs[i].rc;
	}
	return rc;
}

/* ---- configuration --------------------------------------------------------------- */

static int
parse_type(struct mk_cfg *c, const char *s)
{
	static const struct { const char *name; enum ggml_type t, big; } types[] = {
		{"f32", GGML_TYPE_F32, GGML_TYPE_F32}, {"f16", GGML_TYPE_F16, GGML_TYPE_F16},
		{"bf16", GGML_TYPE_BF16, GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0, GGML_TYPE_Q8_0},
		{"q4_0", GGML_TYPE_Q4_0, GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1, GGML_TYPE_Q4_1},
		{"q5_0", GGML_TYPE_Q5_0, GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1, GGML_TYPE_Q5_1},
		{"q3_k", GGML_TYPE_Q3_K, GGML_TYPE_Q3_K}, {"q4_k", GGML_TYPE_Q4_K, GGML_TYPE_Q4_K},
		{"q5_k", GGML_TYPE_Q5_K, GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K, GGML_TYPE_Q6_K},
		{"q4_k_m", GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}, {"q5_k_m", GGML_TYPE_Q5_K, GGML_TYPE_Q6_K},
	};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		if (strcmp(s, types[i].name) == 0) {
			c->type_name = types[i].name;
			c->type = types[i].t;
			c->type_big = types[i].big;
			return 0;
		}
	}
	return -1;
}

/* llama.cpp's general.file_type numbering */
static uint32_t
file_type(const struct mk_cfg *c)
{
	static const struct { const char *name; uint32_t ft; } fts[] = {
		{"f32", 0}, {"f16", 1}, {"q4_0", 2}, {"q4_1", 3}, {"q8_0", 7}, {"q5_0", 8},
		{"q5_1", 9}, {"q3_k", 11}, {"q4_k", 14}, {"q4_k_m", 15},
		{"q5_k", 16}, {"q5_k_m", 17}, {"q6_k", 18}, {"bf16", 32},
	};
	for (size_t i = 0; i < sizeof fts / sizeof fts[0]; i++)
		if (strcmp(c->type_name, fts[i].name) == 0)
			return fts[i].ft;
	return 0;
}

static int
apply_preset(struct mk_cfg *c, const char *p)
{
	c->preset = p;
	if (strcmp(p, "tiny") == 0) {
		/* small enough for every test; widths multiples of 256 so K-quants apply everywhere */
		c->n_embd = 256;
		c->n_layer = 2;
		c->n_head = c->arch == MK_QWEN3 ? 8 : 4;	/* qwen3: head size independent of width */
		c->n_head_kv = 2;
		c->head_dim = 64;
		c->n_ff = 512;
		c->n_vocab = 0;
		c->n_ctx = 512;
		c->tied = c->arch == MK_QWEN2;
	} else if (strcmp(p, "qwen2.5-0.5b") == 0) {
		c->arch = MK_QWEN2;
		c->n_embd = 896; c->n_layer = 24; c->n_head = 14; c->n_head_kv = 2; c->head_dim = 64;
		c->n_ff = 4864; c->n_vocab = 151936; c->n_ctx = 32768; c->tied = true;
	} else if (strcmp(p, "qwen2.5-7b") == 0) {
		c->arch = MK_QWEN2;
		c->n_embd = 3584; c->n_layer = 28; c->n_head = 28; c->n_head_kv = 4; c->head_dim = 128;
		c->n_ff = 18944; c->n_vocab = 152064; c->n_ctx = 32768; c->tied = false;
	} else if (strcmp(p, "llama3.1-8b") == 0) {
		c->arch = MK_LLAMA;
		c->n_embd = 4096; c->n_layer = 32; c->n_head = 32; c->n_head_kv = 8; c->head_dim = 128;
		c->n_ff = 14336; c->n_vocab = 128256; c->n_ctx = 131072; c->tied = false;
		c->rope_freqs = true;
	} else {
		return -1;
	}
	return 0;
}

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: mkmodel -o OUT.gguf [--preset tiny|qwen2.5-0.5b|qwen2.5-7b|llama3.1-8b]\n"
	    "       [--arch llama|qwen2|qwen3] [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q3_k|q4_k|q5_k|q6_k|q4_k_m|q5_k_m]\n"
	    "       [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--head-dim N]\n"
	    "       [--n-ff N] [--n-vocab N] [--ctx N] [--seed S] [--tied|--untied]\n"
	    "       [--vocab bpe|spm] [--rope-freqs] [--rope-theta F] [--threads N] [--quiet]\n"
	    "Defaults: --preset tiny --arch llama --type f32 --seed 1 --vocab bpe.\n"
	    "Rows a K-quant block does not divide are written as Q8_0 (a note says so).\n");
}

enum {
	O_ARCH = 256, O_TYPE, O_EMBD, O_LAYER, O_HEAD, O_HEADKV, O_HEADDIM, O_FF, O_VOCABN,
	O_CTX, O_SEED, O_TIED, O_UNTIED, O_VOCAB, O_PRESET, O_ROPEF, O_THETA, O_THREADS, O_QUIET,
};

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"arch", 1, 0, O_ARCH}, {"type", 1, 0, O_TYPE}, {"n-embd", 1, 0, O_EMBD},
		{"n-layer", 1, 0, O_LAYER}, {"n-head", 1, 0, O_HEAD}, {"n-head-kv", 1, 0, O_HEADKV},
		{"head-dim", 1, 0, O_HEADDIM}, {"n-ff", 1, 0, O_FF}, {"n-vocab", 1, 0, O_VOCABN},
		{"ctx", 1, 0, O_CTX}, {"seed", 1, 0, O_SEED}, {"tied", 0, 0, O_TIED},
		{"untied", 0, 0, O_UNTIED}, {"vocab", 1, 0, O_VOCAB}, {"preset", 1, 0, O_PRESET},
		{"rope-freqs", 0, 0, O_ROPEF}, {"rope-theta", 1, 0, O_THETA}, {"threads", 1, 0, O_THREADS},
		{"quiet", 0, 0, O_QUIET}, {"help", 0, 0, 'h'}, {0, 0, 0, 0},
	};
	struct mk_cfg c = {0};
	const char *out = NULL, *preset = "tiny", *arch = NULL;
	/* explicit sizes override the preset: collect them first */
	long ov[O_QUIET + 1];
	char err[256];
	int o;

	for (int i = 0; i <= O_QUIET; i++)
		ov[i] = -1;
	parse_type(&c, "f32");
	c.seed = 1;
	c.vocab = FIXTURE_VOCAB_BPE;
	long nproc = sysconf(_SC_NPROCESSORS_ONLN);
	c.threads = nproc > 0 ? (int)nproc : 1;
	double theta = -1;
	while ((o = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (o) {
		case 'o': out = optarg; break;
		case 'h': usage(stdout); return 0;
		case O_ARCH: arch = optarg; break;
		case O_TYPE:
			if (parse_type(&c, optarg) != 0) {
				fprintf(stderr, "mkmodel: unknown --type %s\n", optarg);
				return 2;
			}
			break;
		case O_PRESET: preset = optarg; break;
		case O_SEED: c.seed = strtoull(optarg, NULL, 0); break;
		case O_TIED: ov[O_TIED] = 1; break;
		case O_UNTIED: ov[O_TIED] = 0; break;
		case O_ROPEF: ov[O_ROPEF] = 1; break;
		case O_THETA: theta = atof(optarg); break;
		case O_QUIET: c.quiet = true; break;
		case O_VOCAB:
			if (strcmp(optarg, "bpe") == 0)
				c.vocab = FIXTURE_VOCAB_BPE;
			else if (strcmp(optarg, "spm") == 0)
				c.vocab = FIXTURE_VOCAB_SPM;
			else {
				fprintf(stderr, "mkmodel: --vocab is bpe or spm\n");
				return 2;
			}
			break;
		case O_EMBD: case O_LAYER: case O_HEAD: case O_HEADKV: case O_HEADDIM:
		case O_FF: case O_VOCABN: case O_CTX: case O_THREADS: {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v <= 0 || v > 100000000) {
				fprintf(stderr, "mkmodel: bad number '%s'\n", optarg);
				return 2;
			}
			ov[o] = v;
			break;
		}
		default: usage(stderr); return 2;
		}
	}
	if (out == NULL || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (arch != NULL) {
		int a;
		for (a = 0; a < 3 && strcmp(arch, arch_names[a]) != 0; a++)
			;
		if (a == 3) {
			fprintf(stderr, "mkmodel: unknown --arch %s\n", arch);
			return 2;
		}
		c.arch = (enum mk_arch)a;
	}
	if (apply_preset(&c, preset) != 0) {
		fprintf(stderr, "mkmodel: unknown --preset %s\n", preset);
		return 2;
	}
	if (arch != NULL && strcmp(preset, "tiny") != 0) {
		int a;
		for (a = 0; a < 3 && strcmp(arch, arch_names[a]) != 0; a++)
			;
		c.arch = (enum mk_arch)a;	/* a real shape with another architecture's layout */
	}
	if (ov[O_EMBD] > 0) c.n_embd = (int)ov[O_EMBD];
	if (ov[O_LAYER] > 0) c.n_layer = (int)ov[O_LAYER];
	if (ov[O_HEAD] > 0) c.n_head = (int)ov[O_HEAD];
	if (ov[O_HEADKV] > 0) c.n_head_kv = (int)ov[O_HEADKV];
	if (ov[O_HEADDIM] > 0) c.head_dim = (int)ov[O_HEADDIM];
	if (ov[O_FF] > 0) c.n_ff = (int)ov[O_FF];
	if (ov[O_VOCABN] > 0) c.n_vocab = (int)ov[O_VOCABN];
	if (ov[O_CTX] > 0) c.n_ctx = (int)ov[O_CTX];
	if (ov[O_THREADS] > 0) c.threads = (int)ov[O_THREADS];
	if (ov[O_TIED] >= 0) c.tied = ov[O_TIED] == 1;
	if (ov[O_ROPEF] >= 0) c.rope_freqs = true;
	c.rope_theta = theta > 0 ? (float)theta : c.arch == MK_LLAMA ? (c.rope_freqs ? 500000.0f : 10000.0f) : 1000000.0f;
	c.rms_eps = c.arch == MK_LLAMA ? 1e-5f : 1e-6f;
	if (ov[O_HEADDIM] <= 0 && ov[O_EMBD] > 0 && c.arch != MK_QWEN3)
		c.head_dim = c.n_embd / c.n_head;
	if (c.n_head % c.n_head_kv != 0 || c.head_dim % 2 != 0) {
		fprintf(stderr, "mkmodel: n_head (%d) must be a multiple of n_head_kv (%d), head_dim (%d) even\n",
		    c.n_head, c.n_head_kv, c.head_dim);
		return 2;
	}

	struct gguf_writer *w = gguf_writer_new();
	struct plan plan = {0};
	int32_t n_vocab = 0, own = fixture_vocab_size(c.vocab);
	if (w == NULL || own < 0) {
		fprintf(stderr, "mkmodel: out of memory\n");
		return 1;
	}
	if (c.n_vocab > 0 && c.n_vocab < own) {
		fprintf(stderr, "mkmodel: --n-vocab %d is smaller than the fixture vocabulary (%d)\n", c.n_vocab, own);
		return 2;
	}
	const char *an = arch_names[c.arch];
	char key[128], name[128];
	int rc = 0;
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", an, suffix), key)
	snprintf(name, sizeof name, "kvchat fixture %s %s %s", an, c.preset, c.type_name);
	rc |= gguf_w_str(w, "general.architecture", an);
	rc |= gguf_w_str(w, "general.name", name);
	rc |= gguf_w_u32(w, "general.file_type", file_type(&c));
	if (c.type != GGML_TYPE_F32 && c.type != GGML_TYPE_F16 && c.type != GGML_TYPE_BF16)
		rc |= gguf_w_u32(w, "general.quantization_version", 2);
	rc |= gguf_w_u32(w, K("context_length"), (uint32_t)c.n_ctx);
	rc |= gguf_w_u32(w, K("embedding_length"), (uint32_t)c.n_embd);
	rc |= gguf_w_u32(w, K("block_count"), (uint32_t)c.n_layer);
	rc |= gguf_w_u32(w, K("feed_forward_length"), (uint32_t)c.n_ff);
	rc |= gguf_w_u32(w, K("attention.head_count"), (uint32_t)c.n_head);
	rc |= gguf_w_u32(w, K("attention.head_count_kv"), (uint32_t)c.n_head_kv);
	rc |= gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), c.rms_eps);
	rc |= gguf_w_f32(w, K("rope.freq_base"), c.rope_theta);
	rc |= gguf_w_u32(w, K("rope.dimension_count"), (uint32_t)c.head_dim);
	if (c.arch == MK_QWEN3 || c.head_dim * c.n_head != c.n_embd) {
		rc |= gguf_w_u32(w, K("attention.key_length"), (uint32_t)c.head_dim);
		rc |= gguf_w_u32(w, K("attention.value_length"), (uint32_t)c.head_dim);
	}
	rc |= fixture_vocab_add(w, c.vocab, c.n_vocab, &n_vocab);
	c.n_vocab = n_vocab;
	rc |= gguf_w_u32(w, K("vocab_size"), (uint32_t)c.n_vocab);
#undef K
	if (rc != 0 || make_plan(&plan, &c) != 0) {
		fprintf(stderr, "mkmodel: out of memory\n");
		return 1;
	}
	uint64_t total = 0;
	for (size_t i = 0; i < plan.n; i++) {
		struct mk_tensor *t = &plan.t[i];
		size_t nb = q_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
		total += nb;
		if ((rc = gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL, nb)) != 0) {
			fprintf(stderr, "mkmodel: %s: cannot declare tensor (%s)\n", t->name, kvc_strerror(rc));
			return 1;
		}
	}
	if ((rc = gguf_w_stream_open(w, out, err, sizeof err)) != 0) {
		fprintf(stderr, "mkmodel: %s\n", err);
		return 1;
	}
	/* slabs of rows up to ~64 MiB keep memory bounded for the big presets */
	double t0 = kvc_now();
	for (size_t i = 0; i < plan.n && rc == 0; i++) {
		struct mk_tensor *t = &plan.t[i];
		size_t rb = q_row_bytes(t->type, t->ne[0]);
		int64_t slab = (int64_t)((64u << 20) / rb);
		if (slab < 1)
			slab = 1;
		if (slab > t->ne[1])
			slab = t->ne[1];
		uint8_t *buf = malloc((size_t)slab * rb);
		if (buf == NULL) {
			fprintf(stderr, "mkmodel: out of memory\n");
			return 1;
		}
		for (int64_t r = 0; r < t->ne[1] && rc == 0; r += slab) {
			int64_t r1 = r + slab < t->ne[1] ? r + slab : t->ne[1];
			if ((rc = gen_rows(&c, t, i, r, r1, buf)) != 0)
				fprintf(stderr, "mkmodel: %s: %s\n", t->name, kvc_strerror(rc));
			else if ((rc = gguf_w_stream_data(w, buf, (size_t)(r1 - r) * rb, err, sizeof err)) != 0)
				fprintf(stderr, "mkmodel: %s\n", err);
		}
		free(buf);
	}
	if (rc == 0 && (rc = gguf_w_stream_close(w, err, sizeof err)) != 0)
		fprintf(stderr, "mkmodel: %s\n", err);
	if (rc == 0 && !c.quiet)
		fprintf(stderr, "mkmodel: %s: %s %s, %d layers, n_embd %d, n_vocab %d, %zu tensors, "
		    "%.1f MiB of weights in %.1f s\n", out, an, c.type_name, c.n_layer, c.n_embd,
		    c.n_vocab, plan.n, (double)total / 1048576.0, kvc_now() - t0);
	free(plan.t);
	gguf_writer_free(w);
	return rc == 0 ? 0 : 1;
}
