/*
AdamW and gradient-norm clipping on the GPU (llmc/adamw.h): one thread a
parameter runs the CPU's own update of it (adamw_parameter_update); the step's
bias corrections (adamw_step) and the clip scale (grad_clip_scale) are computed on
the host exactly as the CPU does.

The master weights, gradients and moments are fp32 in every build; the update
also writes each weight, rounded, into the model's copy in the storage precision
(llmc/precision.cuh; in the fp32 build that copy is the master weights
themselves), in the same pass.

The global norm is a sum of squares over all gradients in double. It is
deterministic: a grid that depends on n alone (norm_blocks: NORM_BLOCKS, fewer for
a small model) each sums a fixed strided subset, and one block then adds the block
sums in order.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "adamw.h"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

#define NORM_BLOCKS 512
#define NORM_THREADS 512
#define NORM_ITEMS 64 // gradients a thread sums at least, before the grid has NORM_BLOCKS blocks

// the blocks of the norm of n gradients: NORM_BLOCKS, or as many as give each
// thread NORM_ITEMS (a small model launches no idle blocks)
static int norm_blocks(size_t n) {
    size_t blocks = (n + (size_t)NORM_THREADS * NORM_ITEMS - 1) / ((size_t)NORM_THREADS * NORM_ITEMS);
    return blocks < 1 ? 1 : blocks > NORM_BLOCKS ? NORM_BLOCKS : (int)blocks;
}

// partials[block] = sum of grads[i]^2 over i = block*threads + thread + k*grid
__global__ static void norm_squared_partials_kernel(double *partials, const float *grads, size_t n) {
    __shared__ double shared[WARP_SIZE];
    double sum = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += (double)grads[i] * grads[i];
    }
    sum = block_reduce_sum_double(sum, shared);
    if (threadIdx.x == 0) { partials[blockIdx.x] = sum; }
}

// out[0] = sum of partials[0..count), one block
__global__ static void sum_partials_kernel(double *out, const double *partials, int count) {
    __shared__ double shared[WARP_SIZE];
    double sum = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) { sum += partials[i]; }
    sum = block_reduce_sum_double(sum, shared);
    if (threadIdx.x == 0) { out[0] = sum; }
}

// total: a device double, which gets the sum of squares (the host reads it when
// it needs it: once a training step, cp/loss.cuh)   grads: (n) device
static void global_norm_squared_cuda(double *total, const float *grads, size_t n) {
    double *partials = (double *)cuda_scratch(NORM_BLOCKS * sizeof(double));
    int blocks = norm_blocks(n);
    norm_squared_partials_kernel<<<blocks, NORM_THREADS, 0, cuda_ctx.stream>>>(partials, grads, n);
    cudaCheckLaunch();
    int threads = (blocks + WARP_SIZE - 1) / WARP_SIZE * WARP_SIZE; // one partial a thread
    sum_partials_kernel<<<1, threads, 0, cuda_ctx.stream>>>(total, partials, blocks);
    cudaCheckLaunch();
}

// adamw_parameter_update of every parameter, each rounded into params_x as well
// params, grads, m, v: (n) fp32   params_x: (n) floatX, params rounded (may be params itself in the fp32 build)
__global__ static void adamw_kernel(float *params, floatX *params_x, const float *grads, float *m, float *v, size_t n,
                                    AdamWStep s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float p = adamw_parameter_update(s, params[i], grads[i], &m[i], &v[i]);
    params[i] = p;
    params_x[i] = to_floatX(p);
}

// out[i] = in[i] rounded to floatX; out, in: (n)
__global__ static void round_to_floatX_kernel(floatX *out, const float *in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = to_floatX(in[i]); }
}

static void round_to_floatX_cuda(floatX *out, const float *in, size_t n) {
    round_to_floatX_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(out, in, n);
    cudaCheckLaunch();
}

// One AdamW step over n parameters, params_x their floatX copy. t is the 1-based step count.
static void adamw_update_cuda(float *params, floatX *params_x, const float *grads, float *m, float *v, size_t n,
                              float lr, float weight_decay, float grad_scale, int t) {
    AdamWStep s = adamw_step(lr, weight_decay, grad_scale, t);
    adamw_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(params, params_x, grads, m, v, n, s);
    cudaCheckLaunch();
}

#endif // LLMC_ADAMW_CUH
