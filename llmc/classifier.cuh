/*
The classifier on the GPU (llmc/classifier.h): the lm head, softmax and
cross-entropy over chunks of chunk_rows tokens, so that only one chunk's logits
exist; in a training step the chunk's backward runs right after its forward, as
on the CPU (see there why). Per chunk:
    logits = lnf_chunk @ wte^T                                      cuBLAS
    losses, and with grad dlogits = (probs - onehot) * dloss        one kernel
    dwte += dlogits^T @ lnf_chunk,  dlnf_chunk = dlogits @ wte      cuBLAS

The kernel takes one block per token row: the maximum over the first V logits,
the normaliser summed in double (as on the CPU), the loss log(sum) -
(logit[target] - max), and with grad the row overwritten by its gradient (the
padded V..Vp get 0; an ignored target IGNORE_INDEX gets loss 0 and gradient 0).

Precision (llmc/precision.cuh): the chunk's logits are floatX, and so is the
gradient written over them; the softmax and the losses are fp32, read from the
floatX logits; dwte is fp32. No fp32 copy of the probabilities exists, for the
chunk or any token.
*/
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include "classifier.h"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "matmul.cuh"

#define CLASSIFIER_THREADS 512

// logits: (N, Vp) floatX -> dlogits in place with grad   losses: (N) fp32   targets: (N)
// dloss_weight: a device float, dloss (read with grad only); one block per row
__global__ static void softmax_crossentropy_kernel(floatX *logits, float *losses, const int *targets, int V, int Vp,
                                                   const float *dloss_weight, int grad) {
    __shared__ float shared_max[WARP_SIZE];
    __shared__ double shared_sum[WARP_SIZE];
    floatX *row = logits + (size_t)blockIdx.x * Vp;
    int target = targets[blockIdx.x];
    float target_logit = target == IGNORE_INDEX ? 0.0f : to_float(row[target]); // read before any thread writes
    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) { maxval = fmaxf(maxval, to_float(row[i])); }
    maxval = block_reduce_max(maxval, shared_max);
    double sum = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) { sum += expf(to_float(row[i]) - maxval); }
    sum = block_reduce_sum_double(sum, shared_sum); // its barriers also order the read above before the writes
    if (grad) {
        float dloss = *dloss_weight;
        float scale = target == IGNORE_INDEX ? 0.0f : (float)(dloss / sum);
        for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
            float g = i < V ? expf(to_float(row[i]) - maxval) * scale : 0.0f;
            if (i == target) { g -= dloss; }
            row[i] = to_floatX(g);
        }
    }
    if (threadIdx.x == 0) {
        losses[blockIdx.x] = target == IGNORE_INDEX ? 0.0f : (float)(log(sum) - (target_logit - maxval));
    }
}

static void softmax_crossentropy_rows_cuda(floatX *logits, float *losses, const int *targets, int N, int V, int Vp,
                                           const float *dloss, int grad) {
    // whole warps, up to CLASSIFIER_THREADS, no more than the row has entries
    int threads = (Vp + WARP_SIZE - 1) / WARP_SIZE * WARP_SIZE;
    threads = threads > CLASSIFIER_THREADS ? CLASSIFIER_THREADS : threads;
    softmax_crossentropy_kernel<<<N, threads, 0, cuda_ctx.stream>>>(logits, losses, targets, V, Vp, dloss, grad);
    cudaCheckLaunch();
}

// classifier_forward on the device: the losses of N tokens, chunk_rows at a time;
// with dlnf (not NULL) also dlnf (overwritten) and dwte (accumulated).
// losses: (N) fp32   dlnf: (N, C) floatX or NULL   dwte: (Vp, C) fp32   logits: (chunk_rows, Vp) floatX scratch
// lnf: (N, C) floatX   wte: (Vp, C) floatX   targets: (N), all device
// dloss: a device float (read with dlnf only): the weight of one token's loss,
// computed on the device in a training step (cp/loss.cuh), so that no host waits for it
static void classifier_forward_cuda(float *losses, floatX *dlnf, float *dwte, floatX *logits, const floatX *lnf,
                                    const floatX *wte, const int *targets, const float *dloss, int N, int chunk_rows,
                                    int C, int V, int Vp) {
    for (int start = 0; start < N; start += chunk_rows) {
        int n = N - start < chunk_rows ? N - start : chunk_rows;
        const floatX *x = lnf + (size_t)start * C;
        matmul_forward_cuda(logits, NULL, x, wte, NULL, 1, n, C, Vp);
        softmax_crossentropy_rows_cuda(logits, losses + start, targets + start, n, V, Vp, dloss, dlnf != NULL);
        if (dlnf != NULL) {
            matmul_backward_cuda(dlnf + (size_t)start * C, dwte, NULL, logits, x, wte, 1, n, C, Vp);
        }
    }
}

// The logits of one token. out: (Vp) floatX   lnf: (C) the token's   wte: (Vp, C), all device
static void classifier_logits_cuda(floatX *out, const floatX *lnf, const floatX *wte, int C, int Vp) {
    matmul_forward_cuda(out, NULL, lnf, wte, NULL, 1, 1, C, Vp);
}

#endif // LLMC_CLASSIFIER_CUH
