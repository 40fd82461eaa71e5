/*
The residual stream on the GPU (llmc/residual.h): out = a + b. Its gradient flows
unchanged to both inputs, so there is no backward kernel.
*/
#ifndef LLMC_RESIDUAL_CUH
#define LLMC_RESIDUAL_CUH

#include "cuda_common.cuh"

// out, inp1, inp2: (N)
__global__ static void residual_forward_kernel(float *out, const float *inp1, const float *inp2, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = inp1[i] + inp2[i]; }
}

static void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N) {
    residual_forward_kernel<<<grid_for(N, 256), 256, 0, cuda_ctx.stream>>>(out, inp1, inp2, N);
    cudaCheckLaunch();
}

#endif // LLMC_RESIDUAL_CUH
