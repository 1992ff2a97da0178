/*
 * support.h: what the CUDA backend can run, decided from the model alone
 * (support.c, plain C, so that tests/unit/test_cuda_support.c checks it on
 * machines without nvcc or a GPU).
 */
#ifndef KVC_CUDA_SUPPORT_H
#define KVC_CUDA_SUPPORT_H

#include <stdbool.h>

#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The weight types the GPU computes: F32, F16, BF16 and the types of
 * mv_i8.cu (block_dot decodes them all); the IQ lattice types and MXFP4
 * run on the CPU.
 */
bool cu_dev_type_ok(enum gguf_dtype t);

/*
 * KVC_OK when the CUDA backend runs m; else KVC_EUNSUPPORTED with a
 * one-line message naming what it lacks (experts, a head shape, a weight
 * type and the tensor that has it, a float matrix not 32 columns wide)
 * and that the CPU backend runs it: with --device auto that line is the
 * notice of the fallback to the CPU (eng_open).
 */
int cu_model_check(const struct kvc_model *m, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
