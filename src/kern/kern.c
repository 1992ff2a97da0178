/*
 * kern.c: the kernel tables, one per instruction set, the choice of one
 * (the best this CPU runs, or the one KVCHAT_KERNELS names) and the
 * products through a table with the scalar reference behind every entry.
 */
#include "kern_int.h"

#include <stdio.h>
#include <string.h>

static const struct kern scalar = {
	.name = "scalar",
	.need = 0,
	.rows_f = kern_scalar_rows_f_t,
	.rows_act = kern_scalar_rows_act_t,
	.packed = NULL,
	.act_prepare = q_act_prepare,
	.att_tile = kern_scalar_att_tile,
	.kvq8_dot = kern_scalar_kvq8_dot,
	.kvq8_axpy = kern_scalar_kvq8_axpy,
	.rmsnorm = kern_scalar_rmsnorm,
	.f32_to_f16 = kern_scalar_f32_to_f16,
	.act = kern_scalar_act,
};

#ifdef KERN_X86
static kern_rows_f_fn *const avx2_rows_f[KERN_NTYPE] = {
	[GGML_TYPE_F32] = kern_avx2_rows_f, [GGML_TYPE_F16] = kern_avx2_rows_f,
	[GGML_TYPE_BF16] = kern_avx2_rows_f,
};

static const struct kern avx2 = {
	.name = "avx2",
	.need = KVC_CPU_AVX2,
	.rows_f = avx2_rows_f,
	.rows_act = kern_avx2_rows_act,
	.packed = kern_avx2_packed,
	.pack_fits = kern_avx2_pack_fits,
	.act_prepare = kern_avx2_act_prepare,
	.att_tile = kern_avx2_att_tile,
	.kvq8_dot = kern_avx2_kvq8_dot,
	.kvq8_axpy = kern_avx2_kvq8_axpy,
	.rmsnorm = kern_avx2_rmsnorm,
	.f32_to_f16 = kern_avx2_f32_to_f16,
	.act = kern_avx2_act,
};

/* avx2's table with AVX-VNNI in the int8 products: bitwise the same results */
static const struct kern avx2vnni = {
	.name = "avx2vnni",
	.need = KVC_CPU_AVX2 | KVC_CPU_AVXVNNI,
	.rows_f = avx2_rows_f,
	.rows_act = kern_avx2vnni_rows_act,
	.packed = kern_avx2vnni_packed,
	.pack_fits = kern_avx2vnni_pack_fits,
	.act_prepare = kern_avx2_act_prepare,
	.att_tile = kern_avx2_att_tile,
	.kvq8_dot = kern_avx2_kvq8_dot,
	.kvq8_axpy = kern_avx2_kvq8_axpy,
	.rmsnorm = kern_avx2_rmsnorm,
	.f32_to_f16 = kern_avx2_f32_to_f16,
	.act = kern_avx2_act,
};

static kern_rows_f_fn *const avx512_rows_f[KERN_NTYPE] = {
	[GGML_TYPE_F32] = kern_avx512_rows_f, [GGML_TYPE_F16] = kern_avx512_rows_f,
	[GGML_TYPE_BF16] = kern_avx512_rows_f,
};

/* AVX-512's own products and prefill attention; the row-wise kernels are avx2's */
static const struct kern avx512 = {
	.name = "avx512",
	.need = KVC_CPU_AVX2 | KVC_CPU_AVX512,
	.rows_f = avx512_rows_f,
	.rows_act = kern_avx512_rows_act,
	.packed = kern_avx512_packed,
	.pack_fits = kern_avx512_pack_fits,
	.act_prepare = kern_avx2_act_prepare,
	.att_tile = kern_avx512_att_tile,
	.kvq8_dot = kern_avx2_kvq8_dot,
	.kvq8_axpy = kern_avx2_kvq8_axpy,
	.rmsnorm = kern_avx2_rmsnorm,
	.f32_to_f16 = kern_avx2_f32_to_f16,
	.act = kern_avx2_act,
};
#endif

#ifdef KERN_ARM
static kern_rows_f_fn *const neon_rows_f[KERN_NTYPE] = {
	[GGML_TYPE_F32] = kern_neon_rows_f, [GGML_TYPE_F16] = kern_neon_rows_f,
	[GGML_TYPE_BF16] = kern_neon_rows_f,
};

/* Attention, the Q8_0 cache and the element-wise kernels are the scalar table's. */
static const struct kern neon = {
	.name = "neon",
	.need = KVC_CPU_NEON,
	.rows_f = neon_rows_f,
	.rows_act = kern_neon_rows_act,
	.packed = NULL,
	.act_prepare = kern_neon_act_prepare,
	.att_tile = kern_scalar_att_tile,
	.kvq8_dot = kern_scalar_kvq8_dot,
	.kvq8_axpy = kern_scalar_kvq8_axpy,
	.rmsnorm = kern_scalar_rmsnorm,
	.f32_to_f16 = kern_scalar_f32_to_f16,
	.act = kern_scalar_act,
};

/* neon's table with SDOT in the int8 products */
static const struct kern neondot = {
	.name = "neondot",
	.need = KVC_CPU_NEON | KVC_CPU_DOTPROD,
	.rows_f = neon_rows_f,
	.rows_act = kern_neondot_rows_act,
	.packed = NULL,
	.act_prepare = kern_neon_act_prepare,
	.att_tile = kern_scalar_att_tile,
	.kvq8_dot = kern_scalar_kvq8_dot,
	.kvq8_axpy = kern_scalar_kvq8_axpy,
	.rmsnorm = kern_scalar_rmsnorm,
	.f32_to_f16 = kern_scalar_f32_to_f16,
	.act = kern_scalar_act,
};
#endif

/* Best last. */
static const struct kern *const tables[] = {
	&scalar,
#ifdef KERN_X86
	&avx2, &avx2vnni, &avx512,
#endif
#ifdef KERN_ARM
	&neon, &neondot,
#endif
};

/* Every table of every architecture, to refuse another's by name. */
static const struct {
	const char *name, *arch;
} all_names[] = {
	{ "avx2", "x86-64" }, { "avx2vnni", "x86-64" }, { "avx512", "x86-64" }, { "neon", "aarch64" }, { "neondot", "aarch64" },
};

#define N_TABLES (int)(sizeof tables / sizeof tables[0])

const struct kern *
kern_list(int i)
{
	return i >= 0 && i < N_TABLES ? tables[i] : NULL;
}

bool
kern_runs(const struct kern *k)
{
	return (kvc_cpu_features() & k->need) == k->need;
}

const struct kern *
kern_best(void)
{
	for (int i = N_TABLES - 1; i > 0; i--)
		if (kern_runs(tables[i]))
			return tables[i];
	return tables[0];
}

/* "scalar, avx2, avx512 or auto": the names of this program's tables. */
static void
names(char *s, size_t n)
{
	size_t o = 0;

	s[0] = '\0';
	for (int i = 0; i < N_TABLES && o < n; i++)
		o += (size_t)snprintf(s + o, n - o, "%s%s", i > 0 ? ", " : "", tables[i]->name);
	if (o < n)
		snprintf(s + o, n - o, " or auto");
}

int
kern_find(const char *name, const struct kern **out, char *err, size_t errlen)
{
	char list[96];

	if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) {
		*out = kern_best();
		return KVC_OK;
	}
	for (int i = 0; i < N_TABLES; i++) {
		if (strcmp(tables[i]->name, name) != 0)
			continue;
		if (!kern_runs(tables[i])) {
			kvc_err(err, errlen, "kernels '%s': this CPU cannot run them (it runs '%s' at best)",
			    name, kern_best()->name);
			return KVC_EUNSUPPORTED;
		}
		*out = tables[i];
		return KVC_OK;
	}
	names(list, sizeof list);
	for (size_t i = 0; i < sizeof all_names / sizeof all_names[0]; i++)
		if (strcmp(all_names[i].name, name) == 0) {
			kvc_err(err, errlen, "kernels '%s': %s kernels, not built into this program "
			    "(it has %s)", name, all_names[i].arch, list);
			return KVC_EUNSUPPORTED;
		}
	kvc_err(err, errlen, "kernels '%s': no such table (%s)", name, list);
	return KVC_EINVAL;
}

/* k's entry for t in the array e, or NULL. */
#define ENTRY(e, t) ((e) != NULL && (unsigned)(t) < KERN_NTYPE ? (e)[t] : NULL)

void
kern_matmul(const struct kern *k, enum gguf_dtype t, const void *W, size_t rb, const float *x,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	kern_rows_f_fn *f = ENTRY(k->rows_f, t);

	if (f == NULL || !f(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1))
		kern_scalar_rows_f(t, W, rb, x, n_tok, n_in, y, n_out, r0, r1);
}

void
kern_matmul_act(const struct kern *k, enum gguf_dtype t, const void *W, size_t rb,
    const void *act, int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t r0, int64_t r1)
{
	kern_rows_act_fn *f = ENTRY(k->rows_act, t);
	size_t ab = q_act_bytes(n_in);

	if (f == NULL || !f(t, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1))
		kern_scalar_rows_act(t, W, rb, act, ab, n_tok, n_in, y, n_out, r0, r1);
}

float
kern_dot(const struct kern *k, enum gguf_dtype t, const void *row, const float *x, int64_t n)
{
	float r;

	kern_matmul(k, t, row, 0, x, 1, n, &r, 1, 0, 1);
	return r;
}

float
kern_dot_act(const struct kern *k, enum gguf_dtype t, const void *row, const void *act, int64_t n)
{
	float r;

	kern_matmul_act(k, t, row, 0, act, 1, n, &r, 1, 0, 1);
	return r;
}

bool
kern_packs(const struct kern *k, enum gguf_dtype t, int64_t n_in)
{
	return ENTRY(k->packed, t) != NULL && q_pack_bytes(t, n_in, 1) != 0 && k->pack_fits(n_in);
}

void
kern_matmul_packed(const struct kern *k, enum gguf_dtype t, const void *P, const void *act,
    int n_tok, int64_t n_in, float *y, int64_t n_out, int64_t g0, int64_t g1)
{
	k->packed[t](t, P, act, n_tok, n_in, y, n_out, g0, g1);
}
