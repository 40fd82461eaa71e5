/*
GELU on the GPU, tanh approximation (llmc/gelu.h). Elementwise: the same
formula as the CPU, one thread per element. floatX in and out
(llmc/precision.cuh), computed in fp32.
*/
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define GELU_SCALING_FACTOR_CUDA 0.7978845608028654f // sqrt(2 / pi)

// gelu(x) in fp32; also the GELU epilogue of the fc matmul (llmc/matmul.cuh)
__device__ static inline float gelu_of(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR_CUDA * (x + cube)));
}

// out, inp: (N)
__global__ static void gelu_forward_kernel(floatX *out, const floatX *inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    out[i] = to_floatX(gelu_of(to_float(inp[i])));
}

// dinp = dout * gelu'(inp); dinp may be dout (in place, as gpt2_backward uses it)
__global__ static void gelu_backward_kernel(floatX *dinp, const floatX *inp, const floatX *dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALING_FACTOR_CUDA * (x + cube);
    float tanh_out = tanhf(tanh_arg);
    float cosh_out = coshf(tanh_arg);
    float sech_out = 1.0f / (cosh_out * cosh_out);
    float local_grad = 0.5f * (1.0f + tanh_out) +
                       x * 0.5f * sech_out * GELU_SCALING_FACTOR_CUDA * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = to_floatX(local_grad * to_float(dout[i]));
}

static void gelu_forward_cuda(floatX *out, const floatX *inp, size_t N) {
    gelu_forward_kernel<<<grid_for(N, 256), 256, 0, cuda_ctx.stream>>>(out, inp, N);
    cudaCheckLaunch();
}

static void gelu_backward_cuda(floatX *dinp, const floatX *inp, const floatX *dout, size_t N) {
    gelu_backward_kernel<<<grid_for(N, 256), 256, 0, cuda_ctx.stream>>>(dinp, inp, dout, N);
    cudaCheckLaunch();
}

#endif // LLMC_GELU_CUH
