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

#ifdef __cplusplus
}
#endif

#endif
