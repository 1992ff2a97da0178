/*
 * launch_plan.h: the CUDA backend's host-side choices that depend only on
 * shapes and counts (launch_plan.c), plain C so that tests/unit/
 * test_cuda_plan.c checks them on machines without nvcc or a GPU.
 */
#ifndef KVC_CUDA_LAUNCH_PLAN_H
#define KVC_CUDA_LAUNCH_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Warps that share one row of a matrix-vector product (split-K inside a
 * block of 8 warps): 1, 2, 4 or 8, the fewest that give at least two
 * blocks per SM (n_sm > 0), so a 512-row K/V projection still fills the
 * device while a wide one keeps a row per warp.
 */
int mv_warps_per_row(int64_t n_out, int n_sm);

#define ATT_MAX_SPLIT 32	/* most splits of one token's attention over the cache */

/*
 * Splits of one token's attention over the cache (flash-decoding): enough
 * blocks (n_head_kv of them per split) for two per SM, at most
 * ATT_MAX_SPLIT and at most one per 64 positions of a context of n_ctx.
 * It depends on the cache's size, not on the position, so one decode graph
 * serves every position: short contexts leave splits empty (cheap: an
 * empty split reads nothing).
 */
int att_decode_splits(int n_sm, int n_head_kv, int n_ctx);

#ifdef __cplusplus
}
#endif

#endif
