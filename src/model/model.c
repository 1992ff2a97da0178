/*
 * model.c: read a transformer's hyper-parameters and locate its weights in
 * a GGUF, checking everything a backend will rely on: presence, shape and
 * type of every tensor, and that the file asks for nothing kvchat does not
 * implement. Keys and tensor names are llama.cpp's.
 *
 * The files below it (model_int.h) call downward: model_hparams.c (keys),
 * model_layer.c (a layer's tensors, the names an architecture may carry),
 * model_experts.c (mixture-of-experts keys and tensors), model_read.c (one
 * key or tensor, checked).
 */
#include "model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *
model_arch_name(enum kvc_arch a)
{
	switch (a) {
	case KVC_ARCH_LLAMA: return "llama";
	case KVC_ARCH_QWEN2: return "qwen2";
	case KVC_ARCH_QWEN3: return "qwen3";
	case KVC_ARCH_GEMMA2: return "gemma2";
	case KVC_ARCH_GEMMA3: return "gemma3";
	case KVC_ARCH_PHI3: return "phi3";
	case KVC_ARCH_CHATGLM: return "chatglm";
	case KVC_ARCH_GLM4: return "glm4";
	case KVC_ARCH_GPT2: return "gpt2";
	case KVC_ARCH_QWEN3MOE: return "qwen3moe";
	case KVC_ARCH_QWEN2MOE: return "qwen2moe";
	case KVC_ARCH_GPT_OSS: return "gpt-oss";
	case KVC_ARCH_GLM4MOE: return "glm4moe";
	}
	return "?";
}

void
model_ffn_desc(const struct kvc_hparams *hp, char *buf, size_t n)
{
	int k;

	if (hp->n_expert == 0) {
		snprintf(buf, n, "ffn %d", hp->n_ff);
		return;
	}
	k = snprintf(buf, n, "ffn %d x %d experts, %d per token", hp->n_ff_exp, hp->n_expert,
	    hp->n_expert_used);
	if (k > 0 && (size_t)k < n && hp->n_ff_shexp > 0)
		k += snprintf(buf + k, n - (size_t)k, ", shared %d", hp->n_ff_shexp);
	if (k > 0 && (size_t)k < n && hp->n_layer_dense > 0)
		snprintf(buf + k, n - (size_t)k, ", first %d layers dense (ffn %d)", hp->n_layer_dense,
		    hp->n_ff);
}

int
model_load(struct kvc_model *m, const struct gguf_file *f, char *err, size_t errlen)
{
	struct model_loader l = { m, f, NULL, err, errlen };
	struct kvc_hparams *hp = &m->hp;
	const struct gguf_tensor *te;
	const char *arch;
	int64_t i;
	int rc, il;

	memset(m, 0, sizeof *m);
	m->file = f;
	arch = gguf_get_str(f, "general.architecture", NULL);
	if (arch == NULL) {
		kvc_err(err, errlen, "%s: no general.architecture", gguf_path(f));
		return KVC_EFORMAT;
	}
	if (strcmp(arch, "llama") == 0)
		hp->arch = KVC_ARCH_LLAMA;
	else if (strcmp(arch, "qwen2") == 0)
		hp->arch = KVC_ARCH_QWEN2;
	else if (strcmp(arch, "qwen3") == 0)
		hp->arch = KVC_ARCH_QWEN3;
	else if (strcmp(arch, "gemma2") == 0)
		hp->arch = KVC_ARCH_GEMMA2;
	else if (strcmp(arch, "gemma3") == 0)
		hp->arch = KVC_ARCH_GEMMA3;
	else if (strcmp(arch, "phi3") == 0)
		hp->arch = KVC_ARCH_PHI3;
	else if (strcmp(arch, "chatglm") == 0)
		hp->arch = KVC_ARCH_CHATGLM;
	else if (strcmp(arch, "glm4") == 0)
		hp->arch = KVC_ARCH_GLM4;
	else if (strcmp(arch, "gpt2") == 0)
		hp->arch = KVC_ARCH_GPT2;
	else if (strcmp(arch, "qwen3moe") == 0)
		hp->arch = KVC_ARCH_QWEN3MOE;
	else if (strcmp(arch, "qwen2moe") == 0)
		hp->arch = KVC_ARCH_QWEN2MOE;
	else if (strcmp(arch, "gpt-oss") == 0)
		hp->arch = KVC_ARCH_GPT_OSS;
	else if (strcmp(arch, "glm4moe") == 0)
		hp->arch = KVC_ARCH_GLM4MOE;
	else {
		kvc_err(err, errlen, "%s: architecture '%s' is not supported "
		    "(llama, qwen2, qwen3, gemma2, gemma3, phi3, chatglm, glm4, gpt2, qwen2moe, qwen3moe, gpt-oss, glm4moe)",
		    gguf_path(f), arch);
		return KVC_EUNSUPPORTED;
	}
	l.arch = arch;
	if ((rc = model_read_hparams(&l)))
		goto fail;

	/* the vocabulary size is the embedding's row count */
	te = gguf_find_tensor(f, "token_embd.weight");
	if ((rc = model_tensor(&l, &m->tok_embd, "token_embd.weight", hp->n_embd, te ? te->ne[1] : 1, false)))
		goto fail;
	if (m->tok_embd.n_out < 1 || m->tok_embd.n_out > INT32_MAX / 2) {
		kvc_err(err, errlen, "%s: bad vocabulary size %lld", gguf_path(f),
		    (long long)m->tok_embd.n_out);
		rc = KVC_EFORMAT;
		goto fail;
	}
	hp->n_vocab = (int)m->tok_embd.n_out;
	if ((rc = model_tensor(&l, &m->output_norm, "output_norm.weight", hp->n_embd, 1, false)) ||
	    (rc = model_tensor(&l, &m->output, "output.weight", hp->n_embd, hp->n_vocab, true)) ||
	    (rc = model_tensor(&l, &m->rope_freqs, "rope_freqs.weight", hp->rope_dim / 2, 1, true)) ||
	    (rc = model_tensor(&l, &m->pos_embd, "position_embd.weight", hp->n_embd, hp->n_ctx_train,
	    hp->arch != KVC_ARCH_GPT2)) ||
	    (rc = model_tensor(&l, &m->output_norm_b, "output_norm.bias", hp->n_embd, 1, hp->arch != KVC_ARCH_GPT2)))
		goto fail;
	if (m->rope_freqs.data != NULL && hp->arch != KVC_ARCH_LLAMA) {
		kvc_err(err, errlen, "%s: rope_freqs.weight is not supported for %s", gguf_path(f), arch);
		rc = KVC_EUNSUPPORTED;
		goto fail;
	}
	if (m->output.data == NULL)
		m->output = m->tok_embd;	/* tied */
	/* the output matrix is read whole for every token, tied or not (a tied
	 * one is most of Gemma 3 270M's reads: 262,144 rows) */
	m->weight_bytes += m->output.row_bytes * (size_t)m->output.n_out;
	m->weight_bytes += m->output_norm.row_bytes;

	m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
	if (m->layers == NULL) {
		kvc_err(err, errlen, "out of memory for %d layers", hp->n_layer);
		rc = KVC_ENOMEM;
		goto fail;
	}
	for (il = 0; il < hp->n_layer; il++)
		if ((rc = model_load_layer(&l, il)))
			goto fail;
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const char *name = gguf_tensor(f, i)->name;

		if (strncmp(name, "rope_factors_", 13) == 0) {
			kvc_err(err, errlen, "%s: LongRoPE (tensor %s) is not supported", gguf_path(f), name);
			rc = KVC_EUNSUPPORTED;
			goto fail;
		}
		if (!model_known_tensor(m, name)) {
			kvc_err(err, errlen, "%s: tensor %s is not implemented for %s",
			    gguf_path(f), name, arch);
			rc = KVC_EUNSUPPORTED;
			goto fail;
		}
	}
	return 0;
fail:
	model_free(m);
	return rc;
}

void
model_free(struct kvc_model *m)
{
	if (m == NULL)
		return;
	free(m->layers);
	m->layers = NULL;
}
