/*
Helpers shared by the GPU tests (test/test_gpu_*.cu).

    gpu_test_require_device   no usable CUDA device: print why and exit 77, which CTest
                              reports as skipped (SKIP_RETURN_CODE 77), not failed
    device_copy / host_copy   checked copies to and from the device
    poison_device             fills a device buffer with NaN before a kernel is run,
                              so an output the kernel forgets to write cannot pass
    check_rel                 ||got - expected|| / ||expected|| <= tol (2-norms over
                              the whole tensor, in double), printed either way

Why relative norms: the GPU sums in other orders than the CPU (warp trees, cuBLAS
blocking), so single elements near zero can differ by far more than their own size
while the tensor as a whole agrees to fp32 rounding. Each test states its bound.
*/
#ifndef TEST_GPU_TEST_UTILS_CUH
#define TEST_GPU_TEST_UTILS_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include "llmc/cuda_common.cuh"
#include "test/test_utils.h"

#define SKIP_RETURN_CODE 77

// Exits 77 (skipped) without a usable device, saying why; with MPI initialised,
// every rank finalises first.
static void gpu_test_require_device(int mpi_initialised) {
    char why[256];
    if (cuda_device_count(why, sizeof(why)) > 0) { return; }
    if (fatal_rank == 0) { printf("SKIP: %s (this test needs a GPU)\n", why); }
    if (mpi_initialised) { MPI_Finalize(); }
    exit(SKIP_RETURN_CODE);
}

static float *device_copy(const float *host, size_t n) {
    float *d = (float *)cudaMallocCheck(n * sizeof(float));
    cuda_upload(d, host, n * sizeof(float));
    return d;
}

static int *device_copy_int(const int *host, size_t n) {
    int *d = (int *)cudaMallocCheck(n * sizeof(int));
    cuda_upload(d, host, n * sizeof(int));
    return d;
}

// a new host array holding the device array
static float *host_copy(const float *device, size_t n) {
    float *h = (float *)mallocCheck(n * sizeof(float));
    cuda_download(h, device, n * sizeof(float));
    return h;
}

static void poison_device(void *device, size_t bytes) {
    cudaCheck(cudaMemsetAsync(device, 0xff, bytes, cuda_ctx.stream)); // 0xffffffff is a NaN
}

static int rel_failures = 0;

// got, expected: (n) host. Returns the relative error; a NaN or an error above tol fails.
static double check_rel(const char *what, const float *got, const float *expected, size_t n, double tol) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)expected[i];
        diff += d * d;
        norm += (double)expected[i] * expected[i];
    }
    double rel = sqrt(diff) / (norm > 0.0 ? sqrt(norm) : 1.0);
    int ok = rel <= tol; // false for a NaN
    printf("%-4s rank %d  %-44s rel err %.3e  (tol %.0e, n %zu)\n", ok ? "ok" : "FAIL", fatal_rank, what, rel, tol, n);
    if (!ok) { rel_failures++; }
    return rel;
}

// the device array against a host reference
static double check_rel_device(const char *what, const float *got_device, const float *expected, size_t n,
                               double tol) {
    float *got = host_copy(got_device, n);
    double rel = check_rel(what, got, expected, n, tol);
    free(got);
    return rel;
}

#endif // TEST_GPU_TEST_UTILS_CUH
