/*
GELU on the GPU, tanh approximation (llmc/gelu.h). Elementwise: the same
formula as the CPU, one thread per element.
*/
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define GELU_SCALING_FACTOR_CUDA 0.7978845608028654f // sqrt(2 / pi)

// out, inp: (N)
__global__ static void gelu_forward_kernel(float *out, const float *inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR_CUDA * (x + cube)));
}

// dinp = dout * gelu'(inp); dinp may be dout (in place, as gpt2_backward uses it)
__global__ static void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALING_FACTOR_CUDA * (x + cube);
    float tanh_out = tanhf(tanh_arg);
    float cosh_out = coshf(tanh_arg);
    float sech_out = 1.0f / (cosh_out * cosh_out);
    float local_grad = 0.5f * (1.0f + tanh_out) +
                       x * 0.5f * sech_out * GELU_SCALING_FACTOR_CUDA * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local_grad * dout[i];
}

static void gelu_forward_cuda(float *out, const float *inp, size_t N) {
    gelu_forward_kernel<<<grid_for(N, 256), 256, 0, cuda_ctx.stream>>>(out, inp, N);
    cudaCheckLaunch();
}

static void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N) {
    gelu_backward_kernel<<<grid_for(N, 256), 256, 0, cuda_ctx.stream>>>(dinp, inp, dout, N);
    cudaCheckLaunch();
}

#endif // LLMC_GELU_CUH
