/*
The classifier on the GPU (llmc/classifier.h): softmax over the vocabulary fused
with the cross-entropy against the target, in place.

Forward: one block per token row turns the logits into probabilities in place
(the first V entries; the padded V..Vp get 0) and writes the token's loss, 0 for
the ignore target IGNORE_INDEX (pad slots). The normaliser is summed in double,
as on the CPU. Backward: dlogits = (probs - onehot(target)) * dloss in place,
all 0 for an ignored target; elementwise.
*/
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include "classifier.h"
#include "cuda_common.cuh"

#define CLASSIFIER_THREADS 512

// logits: (N, Vp) -> probabilities   losses: (N)   targets: (N); one block per row
__global__ static void softmax_crossentropy_forward_kernel(float *logits, float *losses, const int *targets,
                                                           int V, int Vp) {
    __shared__ float shared_max[WARP_SIZE];
    __shared__ double shared_sum[WARP_SIZE];
    float *row = logits + (size_t)blockIdx.x * Vp;
    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) { maxval = fmaxf(maxval, row[i]); }
    maxval = block_reduce_max(maxval, shared_max);
    double sum = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(row[i] - maxval);
        row[i] = e;
        sum += e;
    }
    sum = block_reduce_sum_double(sum, shared_sum);
    float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) { row[i] = i < V ? row[i] * inv : 0.0f; }
    __syncthreads(); // the target's probability may have been written by another thread
    if (threadIdx.x == 0) {
        int target = targets[blockIdx.x];
        losses[blockIdx.x] = target == IGNORE_INDEX ? 0.0f : -logf(row[target]);
    }
}

static void softmax_crossentropy_forward_cuda(float *logits, float *losses, const int *targets, int B, int T,
                                              int V, int Vp) {
    int N = B * T;
    softmax_crossentropy_forward_kernel<<<N, CLASSIFIER_THREADS, 0, cuda_ctx.stream>>>(logits, losses, targets, V, Vp);
    cudaCheckLaunch();
}

// probs: (N, Vp) -> dlogits in place   targets: (N)
__global__ static void softmax_crossentropy_backward_kernel(float *probs, const int *targets, float dloss, int N,
                                                            int Vp) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * Vp) { return; }
    int bt = (int)(idx / Vp), i = (int)(idx % Vp);
    int target = targets[bt];
    if (target == IGNORE_INDEX) {
        probs[idx] = 0.0f;
        return;
    }
    float g = probs[idx] * dloss;
    if (i == target) { g -= dloss; }
    probs[idx] = g;
}

static void softmax_crossentropy_backward_cuda(float *probs, const int *targets, float dloss, int B, int T, int Vp) {
    size_t n = (size_t)B * T * Vp;
    softmax_crossentropy_backward_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(probs, targets, dloss, B * T, Vp);
    cudaCheckLaunch();
}

#endif // LLMC_CLASSIFIER_CUH
