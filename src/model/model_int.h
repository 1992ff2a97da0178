/*
 * model_int.h: what the files of src/model share; model.h is the module's
 * public face. The files call downward only:
 *
 *   model.c          model_load: the architecture, then the rest in order
 *   model_hparams.c  the keys every architecture shares, RoPE scaling, gemma's, gpt-oss's
 *   model_layer.c    one layer's tensors; which names an architecture may carry
 *   model_experts.c  mixture-of-experts keys and tensors
 *   model_read.c     one key or one tensor, checked; views of a matrix's rows
 *
 * Every int-returning function returns 0 or a negative KVC_E* code with
 * the message in l->err (KVC_EFORMAT: an inconsistent file, KVC_EUNSUPPORTED:
 * something kvchat does not implement, named).
 */
#ifndef KVC_MODEL_INT_H
#define KVC_MODEL_INT_H

#include "model.h"

/* Generous bounds that keep every size product far from overflow. */
#define MODEL_MAX_DIM (1 << 24)
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_EXPERTS 4096

/* One load in progress: the model filled, its file, where errors go. */
struct model_loader {
	struct kvc_model *m;
	const struct gguf_file *f;
	const char *arch;	/* key prefix: general.architecture */
	char *err;
	size_t errlen;
};

/* model_read.c */
/* Integer key ARCH.name into *out; absent: def, or an error when def < 0. */
int model_hp_int(struct model_loader *l, const char *name, int64_t def, int *out);
/* Number key ARCH.name into *out; absent: def, or an error when required. */
int model_hp_float(struct model_loader *l, const char *name, double def, bool required, float *out);
/* Tensor name of n_out rows of n_in into w (counted in n_params); optional and absent: w->data NULL. */
int model_tensor(struct model_loader *l, struct kvc_weight *w, const char *name, int64_t n_in,
    int64_t n_out, bool optional);
/* A required 3-D stack of n_expert matrices (n_out, n_in), as one matrix of n_expert * n_out rows. */
int model_tensor3(struct model_loader *l, struct kvc_weight *w, const char *name, int64_t n_in,
    int64_t n_out, int64_t n_expert);
/* model_tensor of "blk.IL.SUFFIX". */
int model_layer_tensor(struct model_loader *l, struct kvc_weight *w, int il, const char *suffix,
    int64_t n_in, int64_t n_out, bool optional);
/* Rows [r0, r0 + n) of f as a matrix of its own (a vector: its elements). */
struct kvc_weight model_view(const struct kvc_weight *f, int64_t r0, int64_t n);

/* model_experts.c */
/* The experts' keys into l->m->hp (nothing for a dense file); needs n_ff read. */
int model_read_experts(struct model_loader *l);
/* Layer il's router, expert stacks and shared expert; the bytes read per token counted. */
int model_load_experts(struct model_loader *l, struct kvc_layer_weights *w, int il);

/* model_hparams.c */
/* Every hyper-parameter of l->m->hp, architecture set, validated. */
int model_read_hparams(struct model_loader *l);

/* model_layer.c */
/* Layer il's tensors: presence, shapes and types, and their bytes counted. */
int model_load_layer(struct model_loader *l, int il);
/* True when the loaded model has a use for tensor name (any other is refused). */
bool model_known_tensor(const struct kvc_model *m, const char *name);

#endif
