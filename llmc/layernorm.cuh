/*
Layer normalisation on the GPU (llmc/layernorm.h): eps 1e-5, mean and reciprocal
standard deviation saved per token for the backward pass.

One block per token row, of layernorm_threads(C) threads (up to 256): each thread
takes the channels i, i + threads, ... of the row (the block reads the row
coalesced), and the row's sums are block reductions, in a fixed order, so the
result is the same every run. A block per row, rather than a warp, keeps the
memory system busy with few rows too (a long-context rank at B 1), and each
thread's share of the row short. Mean and variance in two passes over the row, as
the CPU twin computes them (the second pass reads it from the cache).

The weight and bias gradients sum over all tokens: the deterministic two-stage
column sums of cuda_reduce.cuh rather than atomics.

Precision (llmc/precision.cuh): input, output, weight, bias and the gradients of the
input and output are floatX, read as fp32; the sums, the mean and rstd and the
weight and bias gradients are fp32.
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

#define LAYERNORM_MAX_THREADS 256

// threads of a row's block: whole warps, no more than the row has channels (up to 256)
static int layernorm_threads(int C) {
    int warps = (C + WARP_SIZE - 1) / WARP_SIZE;
    int threads = warps * WARP_SIZE;
    return threads > LAYERNORM_MAX_THREADS ? LAYERNORM_MAX_THREADS : threads;
}

// out: (N, C)   mean, rstd: (N)   inp: (N, C)   weight, bias: (C); one block per row
__global__ static void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                                const floatX *weight, const floatX *bias, int C) {
    __shared__ float scratch[WARP_SIZE];
    int row = blockIdx.x;
    const floatX *x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) { sum += to_float(x[i]); }
    float m = block_reduce_sum(sum, scratch) / C;
    float var = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float xshift = to_float(x[i]) - m;
        var += xshift * xshift;
    }
    var = block_reduce_sum(var, scratch) / C;
    float s = 1.0f / sqrtf(var + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        o[i] = to_floatX(s * (to_float(x[i]) - m) * to_float(weight[i]) + to_float(bias[i]));
    }
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

static void layernorm_forward_cuda(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                                   const floatX *bias, int B, int T, int C) {
    int N = B * T;
    if (N == 0) { return; }
    layernorm_forward_kernel<<<N, layernorm_threads(C), 0, cuda_ctx.stream>>>(out, mean, rstd, inp, weight, bias, C);
    cudaCheckLaunch();
}

// dinp += the input gradient of each row; one block per row
// dinp, dout, inp: (N, C)   weight: (C)   mean, rstd: (N)
__global__ static void layernorm_backward_input_kernel(floatX *dinp, const floatX *dout, const floatX *inp,
                                                       const floatX *weight, const float *mean, const float *rstd,
                                                       int C) {
    __shared__ float scratch[WARP_SIZE];
    int row = blockIdx.x;
    const floatX *dout_bt = dout + (size_t)row * C;
    const floatX *inp_bt = inp + (size_t)row * C;
    floatX *dinp_bt = dinp + (size_t)row * C;
    float mean_bt = mean[row], rstd_bt = rstd[row];
    // the two reductions of the layernorm gradient
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float norm_bti = (to_float(inp_bt[i]) - mean_bt) * rstd_bt;
        float dnorm_i = to_float(weight[i]) * to_float(dout_bt[i]);
        dnorm_mean += dnorm_i;
        dnorm_norm_mean += dnorm_i * norm_bti;
    }
    dnorm_mean = block_reduce_sum(dnorm_mean, scratch) / C;
    dnorm_norm_mean = block_reduce_sum(dnorm_norm_mean, scratch) / C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float norm_bti = (to_float(inp_bt[i]) - mean_bt) * rstd_bt;
        float dnorm_i = to_float(weight[i]) * to_float(dout_bt[i]);
        dinp_bt[i] = to_floatX(to_float(dinp_bt[i]) + (dnorm_i - dnorm_mean - norm_bti * dnorm_norm_mean) * rstd_bt);
    }
}

// Stage one of dweight and dbias (the column sums of cuda_reduce.cuh): the sums
// over each chunk of rows, per channel.
// partials: 2 x (chunks, C), dweight's then dbias's
__global__ static void layernorm_backward_params_kernel(float *partials, const floatX *dout, const floatX *inp,
                                                        const float *mean, const float *rstd, int N, int C,
                                                        int chunks) {
    __shared__ float lanes[COLUMN_SUM_LANES * COLUMN_SUM_COLS];
    int i = blockIdx.x * COLUMN_SUM_COLS + threadIdx.x;
    int k = blockIdx.y;
    float dw = 0.0f, db = 0.0f;
    if (i < C) {
        int end = column_chunk_start(N, chunks, k + 1);
        for (int bt = column_chunk_start(N, chunks, k) + threadIdx.y; bt < end; bt += COLUMN_SUM_LANES) {
            float dout_bti = to_float(dout[(size_t)bt * C + i]);
            float norm_bti = (to_float(inp[(size_t)bt * C + i]) - mean[bt]) * rstd[bt];
            dw += norm_bti * dout_bti;
            db += dout_bti;
        }
    }
    dw = column_lanes_sum(dw, lanes);
    db = column_lanes_sum(db, lanes);
    if (threadIdx.y == 0 && i < C) {
        partials[(size_t)k * C + i] = dw;
        partials[(size_t)(chunks + k) * C + i] = db;
    }
}

// Accumulates into dinp, dweight, dbias.
// dinp, dout, inp: (B, T, C) floatX   dweight, dbias: (C) fp32   weight: (C) floatX   mean, rstd: (B, T)
static void layernorm_backward_cuda(floatX *dinp, float *dweight, float *dbias, const floatX *dout, const floatX *inp,
                                    const floatX *weight, const float *mean, const float *rstd, int B, int T, int C) {
    int N = B * T;
    if (N == 0) { return; }
    layernorm_backward_input_kernel<<<N, layernorm_threads(C), 0, cuda_ctx.stream>>>(
        dinp, dout, inp, weight, mean, rstd, C);
    cudaCheckLaunch();
    int chunks = column_sums_chunks(N);
    float *partials = (float *)cuda_scratch(2 * (size_t)chunks * C * sizeof(float));
    layernorm_backward_params_kernel<<<column_sums_grid(C, chunks), column_sums_block(), 0, cuda_ctx.stream>>>(
        partials, dout, inp, mean, rstd, N, C, chunks);
    cudaCheckLaunch();
    column_sums_finish(dweight, partials, C, chunks);
    column_sums_finish(dbias, partials + (size_t)chunks * C, C, chunks);
}

#endif // LLMC_LAYERNORM_CUH
