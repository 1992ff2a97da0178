/*
 * cpu_int.h: what the CPU backend's files share: its context (model,
 * scratch, thread pool, RoPE tables) and its KV caches. Internal to
 * src/backend; the rest of the program sees only kvc_backend_i.
 */
#ifndef KVC_CPU_INT_H
#define KVC_CPU_INT_H

#include "backend.h"
#include "kern/kern.h"

#include <pthread.h>

/*
 * A cache. Layers hold rows in slots: slot = position - base[layer]. Full
 * layers keep every position (base 0, cap slots). Windowed layers
 * (model_layer_swa) are bounded when kvc_kv_window_cap is below n_ctx: they
 * keep at most win_max slots (wcap allocated) and, when a forward would run
 * past them, move their last KVC_KV_WINDOW_KEEP rows to the front and
 * raise base ("trimmed"); they hold positions [base, n_valid). Rows stay
 * contiguous, so the attention kernels read them as they did.
 */
struct cpu_kv {
	int n_ctx;		/* most positions it may hold */
	int cap;		/* slots allocated per full layer */
	int n_valid;		/* positions [0, n_valid) hold data (from base in bounded layers) */
	int n_win;		/* bounded windowed layers (0: every layer is full) */
	int win_max;		/* most slots a bounded layer holds */
	int wcap;		/* slots allocated per bounded layer */
	int *base;		/* [n_layer] position in slot 0 (0 but in trimmed bounded layers) */
	bool *bounded;		/* [n_layer] */
	enum gguf_dtype type;	/* GGML_TYPE_F16, GGML_TYPE_F32 or GGML_TYPE_Q8_0 */
	size_t row_bytes;	/* kv_dim elements of type (kvc_kv_row_bytes) */
	void **k, **v;		/* [n_layer] -> (cap, kv_dim) */
	struct cpu_kv *next;	/* list of the context's caches */
};

/* Small per-layer vectors, dequantised to float once at init. */
struct cpu_vecs {
	float *attn_norm, *ffn_norm;	/* (n_embd) */
	float *bq, *bk, *bv;		/* (q_dim), (kv_dim) x2, or NULL */
	float *q_norm, *k_norm;		/* (head_dim) or NULL */
	float *attn_post_norm, *ffn_post_norm;	/* gemma (n_embd), else NULL */
	float *attn_norm_b, *ffn_norm_b, *bo, *b_up, *b_down;	/* gpt2's biases, else NULL */
	float *sinks;			/* gpt-oss: (n_head) attention sinks, else NULL */
};

struct cpu_ctx {
	const struct kvc_model *m;
	struct kvc_hparams hp;
	int q_dim, kv_dim;		/* n_head * head_dim, n_head_kv * head_dim */
	struct tp_pool *pool;
	const struct kern *kern;	/* the kernel table, chosen once at init (src/kern) */
	bool kv_whole;			/* kvc_backend_params.kv_whole: no bounded layers */

	float *vec_mem;			/* backing store of vecs and out_norm */
	struct cpu_vecs *vecs;		/* [n_layer] */
	float *out_norm;		/* (n_embd) */
	float *out_norm_b;		/* gpt2: (n_embd), else NULL */
	double *inv_freq;		/* (rope_dim/2): freq_scale * theta^(-2i/d) / factor[i] */
	double *inv_freq_swa;		/* (rope_dim/2): the same for windowed layers */

	/* scratch for up to cap_tok tokens, token-major */
	int cap_tok;
	float *x;			/* (cap_tok, n_embd) residual stream */
	float *xb;			/* (cap_tok, max(n_embd, q_dim)) normed input / product out */
	float *q;			/* (cap_tok, q_dim) */
	float *k, *v;			/* (cap_tok, kv_dim) */
	float *att;			/* (cap_tok, q_dim) attention output */
	float *hb, *hb2;		/* (cap_tok, ff_max) */
	int ff_max;			/* widest dense FFN: n_ff, or a shared expert's n_ff_shexp */
	float *rope_cs;			/* (2, cap_tok, rope_dim/2, 2) cos, sin: global, windowed layers */
	void *xq;			/* (cap_tok) x q_act_bytes(act_in): int8 activations */
	int64_t act_in;			/* widest product input, rounded up to 32 elements */
	int cap_att;			/* positions the per-thread attention rows hold */
	size_t att_stride;		/* floats of att_s per thread (cpu.c's att_scratch) */
	float *att_s;			/* (n_threads, att_stride): scores and row blocks */
	float *att_o;			/* (n_threads, head_dim) accumulators */

	size_t kv_used;			/* bytes committed by all caches */
	struct cpu_kv *caches;

	struct cpu_moe *moe;		/* cpu_moe.c's scratch (mixture-of-experts models), or NULL */

	struct cpu_pack *packs;		/* cpu_pack.c: packed matrices, by weight address */
	void *pack_arena;		/* all of their copies, one allocation */
	bool experts_mapped;		/* expert stacks left mapped: packed, they would pass pack_limit */
	int n_packs;
	size_t pack_bytes;		/* their bytes */
	bool pack_released;		/* the file's pages of them handed back */
	void *embd_row;			/* a tied, packed output: one embedding row read from the file */
	/* cpu_pack_experts: stacks of experts packed as their experts are first chosen */
	int n_xtotal, n_xready;		/* experts of packed stacks, of which packed so far */
	const struct gguf_file *xpack_file;	/* read with pread, or NULL: packed where they lie */
	void *xpack_buf;		/* (n_threads, xpack_each) rows read from the file */
	size_t xpack_each;
	struct xpack_item *xpack_items;	/* (3 * n_expert) one layer's experts to pack */
	/* the thread packing experts ahead (kvc_backend_params.pack_ahead) */
	bool xahead_on;
	pthread_t xahead;
	void *xahead_buf;		/* (xpack_each) its rows read from the file */
	pthread_mutex_t xmu;		/* the stacks' ready states, xhold, xstop */
	pthread_cond_t xcv;		/* an expert packed, xhold back to 0, or xstop */
	int xhold;			/* forwards running: it waits */
	bool xstop;
	/*
	 * The caller's interrupt flag (kvc_backend_params.interrupt), and whether
	 * the forward running may stop at it: a prefill's (cpu_forward, more than
	 * one token, no logits of every row), whose first pass may pack many
	 * experts between two looks of the engine at the flag.
	 */
	volatile sig_atomic_t *interrupt;
	bool fwd_stoppable;
};

struct mm_task {
	const struct kvc_weight *w;	/* w->n_in == the job's n_in */
	float *y;			/* (n_tok, w->n_out) */
};

/* Products that read the same input, run in one dispatch. */
struct mm_job {
	const float *x;		/* (n_tok, n_in) */
	struct mm_task t[3];
	int n_task;
	int n_tok;
	bool swiglu;		/* t[0] = gate, t[1] = up: t[0].y = act(gate) * up */
	bool gelu;		/* act = GELU (tanh form), else SiLU */
	/* filled by cpu_matmul() */
	int64_t n_in;
	const void *xq;		/* (n_tok) x q_act_bytes(n_in): x as int8, or NULL */
	const void *pk[3];	/* t[i]'s packed copy (cpu_pack.c), or NULL */
};

/*
 * cpu_mm.c. cpu_matmul: run the products of j, the threads taking chunks of
 * their rows; when one of them has an integer kernel the input is rounded to
 * int8 first (into c->xq), once for all of them. n_tok <= cap_tok.
 * cpu_mm_rows: rows [r0, r1) of task i of a job whose n_in, xq and pk are
 * set, for every token (the kernels give each (row, token) the same bits
 * whatever the rows and tokens around it). cpu_act_prep: n_tok rows of x
 * rounded to int8 activations (the table's act_prepare) into xq, threads
 * splitting them.
 */
void cpu_matmul(struct cpu_ctx *c, struct mm_job *j);
void cpu_mm_rows(const struct kern *k, const struct mm_job *j, int i, int64_t r0, int64_t r1);
void cpu_act_prep(struct cpu_ctx *c, const float *x, void *xq, int n_tok, int64_t n_in);

/*
 * cpu_moe.c: a mixture-of-experts layer's FFN. cpu_moe_reserve: scratch for
 * n_tok tokens (nothing for dense models); cpu_moe_ffn: layer il's FFN over
 * the n normed rows in xb, its output into xb.
 */
int cpu_moe_reserve(struct cpu_ctx *c, int n_tok, char *err, size_t errlen);
void cpu_moe_free(struct cpu_ctx *c);
/* cpu_moe_ffn: KVC_OK, or KVC_EINTR when the experts it needed were not packed (cpu_pack_experts) */
int cpu_moe_ffn(struct cpu_ctx *c, int il, int n);

/* cpu_pack.c: packed copies of the matrices that have a packed kernel here. */
int cpu_pack_init(struct cpu_ctx *c, const struct kvc_backend_params *p, char *err, size_t errlen);
/* Token tok's embedding row, in tok_embd's type: the mapping's, or a copy read from the file. */
const void *cpu_pack_embd_row(struct cpu_ctx *c, int32_t tok);
const void *cpu_pack_find(const struct cpu_ctx *c, const struct kvc_weight *w);
/*
 * Expert e's packed copy within its stack's (cpu_pack.c's packs_experts), or
 * NULL: not packed. cpu_pack_experts packs layer lw's experts of active (of
 * its packed stacks) that no token chose before; a product reads an
 * expert's copy only after it (cpu_moe.c), so it is always the packed copy.
 * In a forward that may stop (fwd_stoppable) it packs no more experts once
 * the interrupt flag is set and returns false: the forward must then stop
 * before any product (the experts it did pack stay packed).
 */
const void *cpu_pack_expert(const struct cpu_ctx *c, const struct kvc_weight *stack, int e);
bool cpu_pack_experts(struct cpu_ctx *c, const struct kvc_layer_weights *lw, const int *active, int n_active);
/* A forward starts (on) or ends: the thread packing ahead, if any, waits while one runs. */
void cpu_pack_hold(struct cpu_ctx *c, bool on);
void cpu_pack_free(struct cpu_ctx *c);

/* Tokens a forward runs in one pass at most (a prefill's chunk): bounds the scratch. */
#define CPU_CHUNK 128

/* cpu.c: the vtable's context and forward entries (cpu_backend.c holds the vtable). */
int cpu_init(void **out, const struct kvc_model *m, const struct kvc_backend_params *p,
    char *err, size_t errlen);
void cpu_free(void *ctx);
int cpu_forward(void *ctx, void *kvp, const int32_t *tokens, int n, int pos0, float *logits,
    bool all_logits, char *err, size_t errlen);
void cpu_describe(void *ctx, struct kvc_buf *out);
/* Make scratch hold n_tok (<= CPU_CHUNK) rows attending over up to n_pos positions. */
int cpu_reserve_scratch(struct cpu_ctx *c, int n_tok, int n_pos, char *err, size_t errlen);
/*
 * Every layer over n (<= cap_tok) token rows, row t being token tok[t] at
 * position pos[t] of cache kv[t]: its K and V are stored there and it
 * attends causally over that cache's positions [0, pos[t]]. A prefill
 * chunk is one cache at consecutive positions; a multi-sequence decode
 * step one row per cache. Every product runs over all n rows at once, and
 * each row's result is independent of the others (the kernels are bitwise
 * batch-independent). The caller has checked the rows and reserved caches
 * and scratch. Logits of rows [lo, n) into out ((n - lo) x n_vocab), none
 * when out is NULL. KVC_OK, or KVC_EINTR when a forward that may stop
 * (fwd_stoppable) did: the rows' K and V are then partly stored.
 */
int cpu_forward_rows(struct cpu_ctx *c, struct cpu_kv *const *kv, const int32_t *tok,
    const int *pos, int n, float *out, int lo);

/*
 * cpu_rows.c: the per-token steps between the products, threads splitting
 * the n tokens. cpu_rows_qkv: layer il's Q/K/V rows in place (biases, Q/K
 * norms, RoPE), row t's K and V stored into kv[t] at pos[t].
 * cpu_rows_residual: when add, x += xb (xb first given bias and the
 * post-norm post, either may be NULL); then xb = the block input norm of x
 * with weights nw, nb when nw is not NULL.
 */
void cpu_rows_qkv(struct cpu_ctx *c, struct cpu_kv *const *kv, const int *pos, int il, int n);
void cpu_rows_residual(struct cpu_ctx *c, int n, bool add, const float *bias, const float *post,
    const float *nw, const float *nb);
/* A block's input norm: the table's RMSNorm (gpt2: LayerNorm). */
void cpu_norm(const struct cpu_ctx *c, float *y, const float *x, const float *w, const float *b);

/* cpu_multi.c: the forward_multi and prefill_multi entries. */
int cpu_forward_multi(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens,
    const int *pos, float *logits, char *err, size_t errlen);
int cpu_prefill_multi(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens,
    const int *n_tok, const int *pos0, float *logits, char *err, size_t errlen);

/* cpu_kv.c: the vtable's cache entries, and what the forward needs of them. */
int cpu_kv_create(void *ctx, int n_ctx, enum gguf_dtype kv_type, void **out, char *err,
    size_t errlen);
void cpu_kv_destroy(void *ctx, void *kvp);
size_t cpu_kv_bytes(void *ctx, void *kv);
int cpu_kv_read(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    void *dst, char *err, size_t errlen);
int cpu_kv_write(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    const void *src, char *err, size_t errlen);
int cpu_kv_shift(void *ctx, void *kvp, int p0, int n_drop, char *err, size_t errlen);
int cpu_kv_lowest(void *ctx, void *kvp);
/*
 * Make kv hold positions [0, n_pos) (bounded layers: their last ones, at
 * most win_max): doubling, capped by n_ctx.
 */
int cpu_kv_reserve(struct cpu_ctx *c, struct cpu_kv *kv, int n_pos, char *err, size_t errlen);
/*
 * Before a forward of n tokens at pos0: KVC_ENOTFOUND when a bounded layer
 * no longer holds the window pos0 attends to; else reserve pos0 + n.
 */
int cpu_kv_prepare(struct cpu_ctx *c, struct cpu_kv *kv, int pos0, int n, char *err, size_t errlen);
/* Before a chunk of n tokens at pos: trim the bounded layers so they fit. */
void cpu_kv_room(struct cpu_ctx *c, struct cpu_kv *kv, int pos, int n);
/* The slot of position pos in layer il. */
static inline int cpu_kv_slot(const struct cpu_kv *kv, int il, int pos) { return pos - kv->base[il]; }
/* Slot `slot` of one layer's K or V (base) from n floats, in the cache's type. */
void cpu_kv_store_row(const struct cpu_ctx *c, const struct cpu_kv *kv, void *base, int slot,
    const float *src, int n);
/* A line on the bounded layers for /show (nothing when there are none). */
void cpu_kv_describe(const struct cpu_ctx *c, struct kvc_buf *out);

#endif
