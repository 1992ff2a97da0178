/*
 * cuda_err.cu: the CUDA backend's error reporting: a runtime call's or a
 * kernel launch's error as a message naming it (KVCHAT_CUDA_SYNC=1
 * synchronises after every launch so the failing kernel is the one named).
 */
#include "cuda_int.h"
#include "dev_util.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * After a kernel launch: the launch's error and, with KVCHAT_CUDA_SYNC=1,
 * the kernel's own (the stream is synchronised), naming the kernel.
 */
int
cu_launched(struct cuda_ctx *c, const char *kernel, char *err, size_t errlen)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess && c->sync_check)
		e = cudaStreamSynchronize(c->stream);
	if (e == cudaSuccess)
		return KVC_OK;
	kvc_err(err, errlen, "cuda: kernel %s failed: %s%s", kernel, cudaGetErrorString(e),
	    c->sync_check ? "" : " (KVCHAT_CUDA_SYNC=1 names the kernel that failed)");
	return e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
}

/* KVC_OK, or the error of a failed runtime call with its name and reason. */
int
cu_call(cudaError_t e, const char *what, char *err, size_t errlen)
{
	if (e == cudaSuccess)
		return KVC_OK;
	kvc_err(err, errlen, "cuda: %s failed: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
}

