/*
 * ceilings.cu: the two ceilings GPU figures are compared with, measured on
 * the machine at hand (see docs/BENCHMARKS.md): device-to-device copy
 * bandwidth and cuBLAS bf16 GEMM throughput.
 *
 * Copy: cudaMemcpy between two 2 GiB buffers filled with random bytes,
 * timed with events, best of 10 after a warm-up; bytes counted = read +
 * written (2 x size). GEMM: C = A . B with A, B, C bf16 of N x N
 * (N = 8192), A and B random in [-1, 1), f32 accumulation
 * (CUBLAS_COMPUTE_32F), 2 N^3 operations, best of 10 after two warm-ups. Prints one line each:
 *   copy_GBps <value>
 *   gemm_bf16_TFLOPs <value>
 * and exits non-zero on any CUDA or cuBLAS error.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call) do {								\
	cudaError_t e_ = (call);						\
	if (e_ != cudaSuccess) {						\
		fprintf(stderr, "ceilings: %s failed: %s\n", #call,		\
		    cudaGetErrorString(e_));					\
		exit(1);							\
	}									\
} while (0)
#define CB(call) do {								\
	cublasStatus_t s_ = (call);						\
	if (s_ != CUBLAS_STATUS_SUCCESS) {					\
		fprintf(stderr, "ceilings: %s failed: status %d\n", #call,	\
		    (int)s_);							\
		exit(1);							\
	}									\
} while (0)

/* Fill n 32-bit words with a xorshift stream (never all zeros). */
__global__ static void
fill_random(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		uint32_t x = (uint32_t)i * 2654435761u ^ seed;
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = x | 1u;
	}
}

/* Random bf16 in [-1, 1). */
__global__ static void
fill_bf16(__nv_bfloat16 *p, size_t n, uint32_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		uint32_t x = (uint32_t)i * 2654435761u ^ seed;
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = __float2bfloat16((float)(x >> 8) / 8388608.0f - 1.0f);
	}
}

static double
copy_bandwidth(void)
{
	const size_t bytes = (size_t)2 << 30;
	void *a, *b;
	cudaEvent_t e0, e1;
	float best = 1e30f;

	CK(cudaMalloc(&a, bytes));
	CK(cudaMalloc(&b, bytes));
	fill_random<<<1024, 256>>>((uint32_t *)a, bytes / 4, 12345u);
	fill_random<<<1024, 256>>>((uint32_t *)b, bytes / 4, 777u);
	CK(cudaGetLastError());
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));	/* warm-up */
	for (int r = 0; r < 10; r++) {
		float ms;
		/* alternate direction so neither buffer stays the source */
		CK(cudaEventRecord(e0));
		CK(cudaMemcpy(r % 2 ? a : b, r % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (ms < best)
			best = ms;
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaFree(a));
	CK(cudaFree(b));
	return 2.0 * (double)bytes / (best * 1e-3) / 1e9;
}

static double
gemm_bf16(int n)
{
	size_t elems = (size_t)n * n;
	__nv_bfloat16 *A, *B, *C;
	cublasHandle_t h;
	cudaEvent_t e0, e1;
	const float one = 1.f, zero = 0.f;
	float best = 1e30f;

	CK(cudaMalloc(&A, elems * 2));
	CK(cudaMalloc(&B, elems * 2));
	CK(cudaMalloc(&C, elems * 2));
	fill_bf16<<<1024, 256>>>(A, elems, 1u);
	fill_bf16<<<1024, 256>>>(B, elems, 2u);
	CK(cudaGetLastError());
	CB(cublasCreate(&h));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = -2; r < 10; r++) {	/* two warm-up runs */
		float ms;
		CK(cudaEventRecord(e0));
		CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n,
		    B, CUDA_R_16BF, n, &zero, C, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
		    CUBLAS_GEMM_DEFAULT));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 0 && ms < best)
			best = ms;
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CB(cublasDestroy(h));
	CK(cudaFree(A));
	CK(cudaFree(B));
	CK(cudaFree(C));
	return 2.0 * n * (double)n * n / (best * 1e-3) / 1e12;
}

int
main(void)
{
	int n_dev = 0;
	struct cudaDeviceProp prop;

	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		fprintf(stderr, "ceilings: no CUDA device\n");
		return 77;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
	    prop.totalGlobalMem / 1073741824.0);
	printf("copy_GBps %.1f\n", copy_bandwidth());
	printf("gemm_bf16_TFLOPs %.1f\n", gemm_bf16(8192));
	return 0;
}
