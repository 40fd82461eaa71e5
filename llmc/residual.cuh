/*
The residual stream on the GPU (llmc/residual.h): out = a + b. Its gradient flows
unchanged to both inputs, so there is no backward kernel. floatX in and out
(llmc/precision.cuh), added in fp32.
*/
#ifndef LLMC_RESIDUAL_CUH
#define LLMC_RESIDUAL_CUH

#include "cuda_common.cuh"

// out, inp1, inp2: (N)
__global__ static void residual_forward_kernel(floatX *out, const floatX *inp1, const floatX *inp2, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = to_floatX(to_float(inp1[i]) + to_float(inp2[i])); }
}

static void residual_forward_cuda(floatX *out, const floatX *inp1, const floatX *inp2, size_t N) {
    residual_forward_kernel<<<grid_for(N, 256), 256, 0, cuda_ctx.stream>>>(out, inp1, inp2, N);
    cudaCheckLaunch();
}

#endif // LLMC_RESIDUAL_CUH
