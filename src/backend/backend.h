/*
 * backend.h: the one interface compute backends implement (internal).
 *
 * A backend runs the transformer's forward pass for a batch of consecutive
 * tokens of one sequence, reading and extending that sequence's KV cache,
 * which the backend owns and stores where it computes (RAM for the CPU,
 * GPU memory for CUDA). The engine above knows nothing else about it.
 * Chosen once at start-up; members marked (optional) may be NULL.
 */
#ifndef KVC_BACKEND_H
#define KVC_BACKEND_H

#include <signal.h>

#include "core/kvc.h"
#include "model/model.h"

struct kvc_backend_params {
	int n_threads;		/* CPU worker threads (0 = number of cores) */
	int gpu;		/* CUDA device ordinal */
	/* called with done/total while weights load or upload (optional, may be NULL) */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
	/*
	 * Keep windowed layers' caches whole (the computation before they were
	 * bounded), for tests to compare the bounded caches against.
	 */
	bool kv_whole;
	/*
	 * The cache type the caller will create (0 = F32: any the backend
	 * takes). A backend that cannot hold it refuses at init, so that
	 * --device auto can run on another one instead.
	 */
	enum gguf_dtype kv_type;
	/*
	 * The CPU kernel table by name ("scalar", "avx2", "avx512"; NULL or
	 * "auto": the best this CPU runs); init refuses one the CPU cannot run.
	 */
	const char *kernels;
	/*
	 * The caller's interrupt flag (optional): set (by a SIGINT handler, say)
	 * while the weights load, init stops with KVC_EINTR and frees what it made.
	 * CPU: set while a prefill's forward (more than one token) packs the
	 * experts its tokens first chose, the forward stops with KVC_EINTR and
	 * none of its positions count (the packed experts stay packed).
	 * Last, so that the members before it keep their places for a CUDA
	 * module built before it (KVC_CUDA_ABI).
	 */
	volatile sig_atomic_t *interrupt;
	/*
	 * CPU: the most bytes the packed copies of a mixture of experts' stacks
	 * may bring the packed weights to (0: 85 % of the machine's memory);
	 * past it the stacks stay mapped from the file, which the kernel can
	 * page in and out. After interrupt, for the same reason.
	 */
	uint64_t pack_limit;
	/*
	 * CPU: pack the experts of packed stacks ahead, in a thread of idle
	 * priority that waits while a forward runs, instead of only each the
	 * first time a token chooses it: for a chat or a server, whose idle
	 * time then hides the packing from their first turns.
	 */
	bool pack_ahead;
	/*
	 * CPU: pack every expert of packed stacks at init, as part of the load,
	 * instead of each the first time a token chooses it: for `kvchat bench`,
	 * whose timed runs are then the speed once packed, as llama-bench's are
	 * after its load (which repacks). Ctrl-C (interrupt) stops it as it stops
	 * the load.
	 */
	bool pack_experts_now;
};

enum kvc_kv_part { KVC_KV_K = 0, KVC_KV_V = 1 };

/*
 * A token to pick where the logits are (sample below), as src/sampler's
 * smp_sample would from the same logits: its parameters, the history's
 * last ids for the repetition penalty, its generator's state.
 */
struct kvc_sample_req {
	float temp;		/* <= 0: greedy (the rest ignored) */
	int top_k;		/* <= 0: off */
	float top_p, min_p, repeat_penalty;
	const int32_t *recent;	/* the last n_recent ids of the sequence (penalised) */
	int n_recent;
	uint64_t rng;		/* the generator's state before the draw (smp_rng_state) */
};

struct kvc_backend_i {
	const char *name;	/* "cpu", "cuda" */

	/* Prepare to run m (which must outlive the context). */
	int (*init)(void **ctx, const struct kvc_model *m,
	    const struct kvc_backend_params *p, char *err, size_t errlen);
	void (*free)(void *ctx);	/* after every kv of ctx was destroyed */

	/*
	 * A KV cache for up to n_ctx positions of element type kv_type
	 * (GGML_TYPE_F16 or GGML_TYPE_F32; both backends also take
	 * GGML_TYPE_Q8_0 when n_head_kv * head_dim is a multiple of 32, in the
	 * same row bytes). Memory may be committed lazily as
	 * positions are used. (How many caches stay resident is the
	 * conversation layer's choice, not the backend's.)
	 */
	int (*kv_create)(void *ctx, int n_ctx, enum gguf_dtype kv_type,
	    void **kv, char *err, size_t errlen);
	void (*kv_destroy)(void *ctx, void *kv);
	/* Bytes currently committed by kv (optional). */
	size_t (*kv_bytes)(void *ctx, void *kv);

	/*
	 * Run tokens[0..n) at positions pos0 .. pos0+n-1: write their K and V
	 * into kv and attend causally over kv[0 .. pos0+n). Positions at or past
	 * pos0 in kv are overwritten (this is how truncation works). logits (if
	 * not NULL) receives n_vocab floats: for the last token, or for every
	 * token (n x n_vocab, row-major) when all_logits is true.
	 */
	int (*forward)(void *ctx, void *kv, const int32_t *tokens, int n, int pos0,
	    float *logits, bool all_logits, char *err, size_t errlen);

	/*
	 * Copy part (K or V) of layer `layer` for positions [pos0, pos0+n) out of
	 * / into the cache, as n rows of n_head_kv*head_dim elements of the
	 * cache's type (kvc_kv_row_bytes each), rows contiguous. Used for
	 * snapshots.
	 */
	int (*kv_read)(void *ctx, void *kv, int layer, enum kvc_kv_part part,
	    int pos0, int n, void *dst, char *err, size_t errlen);
	int (*kv_write)(void *ctx, void *kv, int layer, enum kvc_kv_part part,
	    int pos0, int n, const void *src, char *err, size_t errlen);
	/*
	 * Windowed layers (model_layer_swa) may keep only their last positions
	 * (kvc_kv_window_cap): kv_read of a position such a layer no longer holds
	 * is KVC_ENOTFOUND, and a forward at pos0 whose windowed layers lack one
	 * of the positions [pos0 - n_swa + 1, pos0) is KVC_ENOTFOUND too (the
	 * caller recomputes from position 0 instead). kv_write ends the cache at
	 * pos0 + n like a forward (later positions are dropped); for a windowed
	 * layer K must be written before V over the same range (K's write makes
	 * the room), rows of positions below what the layer keeps are discarded,
	 * and src NULL says the positions [pos0, pos0 + n) are not held (the
	 * layer then holds nothing below pos0 + n; KVC_ENOTFOUND for a layer that
	 * keeps every position: the caller recomputes).
	 */

	/* Human-readable memory report for /show (optional). */
	void (*describe)(void *ctx, struct kvc_buf *out);

	/*
	 * Drop positions [p0, p0 + n_drop) of kv: the positions after them move
	 * down by n_drop and their K rows are rotated by -n_drop (RoPE shift),
	 * so they hold what the same tokens would give at their new positions
	 * up to rounding, without recomputing them (optional; --ctx-overflow
	 * slide recomputes without it). KVC_EINVAL when the range is not inside
	 * the computed positions. The CUDA backend leaves kv_lowest NULL
	 * (it keeps every position).
	 */
	int (*kv_shift)(void *ctx, void *kv, int p0, int n_drop, char *err, size_t errlen);
	/*
	 * The lowest position every windowed layer of kv still holds (0 when
	 * the model has none or nothing was let go); optional, NULL = 0.
	 */
	int (*kv_lowest)(void *ctx, void *kv);

	/*
	 * One decode step of n_seq sequences in one pass (optional): token
	 * tokens[i] at position pos[i] of cache kvs[i], each attending over its
	 * own cache [0, pos[i]] (no padding: the sequences may be at any
	 * positions). As forward with n = 1, positions at or past pos[i] in
	 * kvs[i] are overwritten. logits receives n_seq x n_vocab floats, row i
	 * for sequence i. The caches must be distinct. The CPU backend gives
	 * each sequence the logits its one-token forward gives, bit for bit
	 * (its products are batch-independent), so batching never changes a
	 * greedy reply there; the CUDA backend's rows go through its batched
	 * kernels, equal to its one-token forward to float rounding only
	 * (cuda/multi.cu), so on a GPU a near-tie may go the other way. On
	 * failure nothing is known of the caches' new positions (callers drop
	 * them).
	 */
	int (*forward_multi)(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens,
	    const int *pos, float *logits, char *err, size_t errlen);

	/*
	 * The prefill of n_seq sequences in one pass (optional): sequence i's
	 * n_tok[i] >= 1 tokens (the next n_tok[i] of tokens, the sequences'
	 * runs one after the other) at positions pos0[i] .. pos0[i] +
	 * n_tok[i] - 1 of cache kvs[i], as forward of each alone would run
	 * them (positions at or past pos0[i] overwritten). logits receives
	 * n_seq x n_vocab floats: row i after sequence i's last token. The
	 * caches must be distinct. Each sequence gets the bits forward gives
	 * it alone. On failure nothing is known of the caches' positions from
	 * pos0[i] on. The CUDA backend leaves it NULL: the engine then
	 * prefills the sequences one at a time.
	 */
	int (*prefill_multi)(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens,
	    const int *n_tok, const int *pos0, float *logits, char *err, size_t errlen);

	/*
	 * Sampling where the logits are (optional, all three or none; the CPU
	 * leaves them NULL). forward_keep runs as forward but keeps the last
	 * token's logits in the backend instead of copying them out; any later
	 * forward, of any cache, replaces them. logits_get copies them
	 * (n_vocab floats) when a caller wants them after all. sample picks the
	 * next token from them as smp_sample would (the same id, and in *rng
	 * the generator's state after its draw), so only the id crosses over;
	 * KVC_EUNSUPPORTED for a request it does not take (the caller then
	 * samples from logits_get's copy), KVC_EINVAL when no logits are kept.
	 */
	int (*forward_keep)(void *ctx, void *kv, const int32_t *tokens, int n, int pos0,
	    char *err, size_t errlen);
	int (*logits_get)(void *ctx, float *dst, char *err, size_t errlen);
	int (*sample)(void *ctx, const struct kvc_sample_req *r, int32_t *id, uint64_t *rng,
	    char *err, size_t errlen);
};

/*
 * Rows a windowed layer's cache keeps when it is trimmed: the window (the
 * next position attends to n_swa - 1 earlier ones) plus as much again, so a
 * rewind of up to n_swa positions (/retry, /undo of a recent reply) still
 * finds its window.
 */
#define KVC_KV_WINDOW_KEEP(n_swa) (2 * (n_swa) - 1)
/* Positions a trimmed cache has room for past what it keeps: >= the CPU forward's chunk. */
#define KVC_KV_WINDOW_SLACK 128
/*
 * kv_check.c: the most positions a windowed layer's cache of a context of
 * n_ctx holds: KVC_KV_WINDOW_KEEP + KVC_KV_WINDOW_SLACK, or n_ctx when that
 * is not smaller (or the model has no windowed layers: n_swa 0).
 */
int kvc_kv_window_cap(const struct kvc_hparams *hp, int n_ctx);

/*
 * backend.c: the backend for device "auto" (CUDA when a device is usable,
 * else the CPU), "cpu" or "cuda" (NULL or "" = "auto"). KVC_EUNSUPPORTED
 * when CUDA is asked for but not built or no device is usable,
 * KVC_EINVAL for another name; the message says which. A CUDA backend
 * picked for "auto" may still fail its init (a model too large, an
 * architecture it lacks): the caller then runs on kvc_backend_cpu and
 * says so (eng_open).
 */
int kvc_backend_pick(const struct kvc_backend_i **out, const char *device, char *err, size_t errlen);
/* true for the device names that let the caller fall back to the CPU (NULL, "", "auto") */
bool kvc_backend_is_auto(const char *device);

/*
 * backend.c: the backends this build has and what this machine offers
 * them, for kvchat --version: "backends: cpu, cuda" then, for CUDA, the
 * code built (architectures) and the devices found or why none.
 */
void kvc_backend_version(struct kvc_buf *out);

/*
 * The arguments every kv_create accepts, checked once for all backends:
 * KVC_EUNSUPPORTED for a cache type other than F16/F32, KVC_EINVAL for
 * n_ctx < 1 (with the message), else KVC_OK.
 */
int kvc_backend_kv_check(int n_ctx, enum gguf_dtype kv_type, char *err, size_t errlen);
/*
 * The positions every forward accepts: n >= 1 new tokens starting at pos0
 * within the n_valid cached ones (KVC_EINVAL) and ending within n_ctx
 * (KVC_ERANGE, "context full"), with the message; else KVC_OK.
 */
int kvc_backend_forward_check(int n, int pos0, int n_valid, int n_ctx, char *err, size_t errlen);

/*
 * kv_q8.c: the row formats of the cache types. A row of n elements is n
 * floats (F32), n halves (F16, little-endian), or n/32 of GGUF's Q8_0
 * blocks (fp16 scale, 32 int8; 34 bytes). kvc_kv_row_bytes is 0 for
 * another type or a Q8_0 row whose n is not a multiple of 32. The
 * conversions return KVC_EUNSUPPORTED (EINVAL) in those cases; converting
 * to Q8_0 rounds as ggml does, to F16 to nearest even.
 */
size_t kvc_kv_row_bytes(enum gguf_dtype type, int n);
int kvc_kv_row_to_f32(enum gguf_dtype type, const void *src, float *dst, int n);
int kvc_kv_row_from_f32(enum gguf_dtype type, const float *src, void *dst, int n);

extern const struct kvc_backend_i kvc_backend_cpu;

/*
 * The CUDA backend (cuda/) as one table: what backend.c needs of it, and
 * the version the backend was built with, checked before anything else
 * of it is used.
 */
#define KVC_CUDA_ABI 2	/* 2: the vtable's sampling members */
struct kvc_cuda_module {
	int abi;				/* KVC_CUDA_ABI */
	const char *version;			/* PACKAGE_VERSION */
	const char *archs;			/* GPU code built: "sm_80 sm_86 + PTX compute_86" */
	const struct kvc_backend_i *backend;
	/* CUDA devices usable now; 0 with the runtime's reason in why when none */
	int (*device_count)(char *why, size_t whylen);
	/* one line per device: ordinal, name, compute capability, memory */
	void (*describe_devices)(struct kvc_buf *out);
};
/*
 * The module's one exported function (its name is KVC_CUDA_ENTRY), which
 * backend.c looks up with dlsym in, in order: $KVCHAT_CUDA_MODULE when
 * set (nothing else then), kvchat-cuda.so beside the running program, and
 * KVC_PKGLIBDIR/kvchat-cuda.so where make install puts it.
 */
#define KVC_CUDA_ENTRY "kvc_cuda_module_get"
#define KVC_CUDA_MODULE_NAME "kvchat-cuda.so"
typedef const struct kvc_cuda_module *(*kvc_cuda_entry_fn)(void);

#endif
