/*
Layer normalisation on the GPU (llmc/layernorm.h): eps 1e-5, mean and reciprocal
standard deviation saved per token for the backward pass.

One warp per token row: the row's reductions are warp shuffles. The weight and
bias gradients sum over all tokens; they use the deterministic two-stage column
sums of cuda_common.cuh rather than atomics.
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LAYERNORM_WARPS 8

// out: (N, C)   mean, rstd: (N)   inp: (N, C)   weight, bias: (C); one warp per row
__global__ static void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                                const float *weight, const float *bias, int N, int C) {
    int lane = threadIdx.x % WARP_SIZE;
    int row = blockIdx.x * LAYERNORM_WARPS + threadIdx.x / WARP_SIZE;
    if (row >= N) { return; }
    const float *x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += WARP_SIZE) { sum += x[i]; }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += WARP_SIZE) {
        float xshift = x[i] - m;
        var += xshift * xshift;
    }
    var = warp_reduce_sum(var) / C;
    float s = 1.0f / sqrtf(var + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += WARP_SIZE) { o[i] = s * (x[i] - m) * weight[i] + bias[i]; }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

static void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                   const float *bias, int B, int T, int C) {
    int N = B * T;
    layernorm_forward_kernel<<<grid_for(N, LAYERNORM_WARPS), LAYERNORM_WARPS * WARP_SIZE, 0, cuda_ctx.stream>>>(
        out, mean, rstd, inp, weight, bias, N, C);
    cudaCheckLaunch();
}

// dinp += the input gradient of each row; one warp per row
// dinp, dout, inp: (N, C)   weight: (C)   mean, rstd: (N)
__global__ static void layernorm_backward_input_kernel(float *dinp, const float *dout, const float *inp,
                                                       const float *weight, const float *mean, const float *rstd,
                                                       int N, int C) {
    int lane = threadIdx.x % WARP_SIZE;
    int row = blockIdx.x * LAYERNORM_WARPS + threadIdx.x / WARP_SIZE;
    if (row >= N) { return; }
    const float *dout_bt = dout + (size_t)row * C;
    const float *inp_bt = inp + (size_t)row * C;
    float *dinp_bt = dinp + (size_t)row * C;
    float mean_bt = mean[row], rstd_bt = rstd[row];
    // the two reductions of the layernorm gradient
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = lane; i < C; i += WARP_SIZE) {
        float norm_bti = (inp_bt[i] - mean_bt) * rstd_bt;
        float dnorm_i = weight[i] * dout_bt[i];
        dnorm_mean += dnorm_i;
        dnorm_norm_mean += dnorm_i * norm_bti;
    }
    dnorm_mean = warp_reduce_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_reduce_sum(dnorm_norm_mean) / C;
    for (int i = lane; i < C; i += WARP_SIZE) {
        float norm_bti = (inp_bt[i] - mean_bt) * rstd_bt;
        float dnorm_i = weight[i] * dout_bt[i];
        dinp_bt[i] += (dnorm_i - dnorm_mean - norm_bti * dnorm_norm_mean) * rstd_bt;
    }
}

// Stage one of dweight and dbias: the sums over each chunk of rows, per channel.
// partials: 2 x (COLUMN_SUM_CHUNKS, C), dweight's then dbias's
__global__ static void layernorm_backward_params_kernel(float *partials, const float *dout, const float *inp,
                                                        const float *mean, const float *rstd, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int k = blockIdx.y;
    if (i >= C) { return; }
    float dw = 0.0f, db = 0.0f;
    for (int bt = column_chunk_start(N, k); bt < column_chunk_start(N, k + 1); bt++) {
        float norm_bti = (inp[(size_t)bt * C + i] - mean[bt]) * rstd[bt];
        dw += norm_bti * dout[(size_t)bt * C + i];
        db += dout[(size_t)bt * C + i];
    }
    partials[(size_t)k * C + i] = dw;
    partials[(size_t)(COLUMN_SUM_CHUNKS + k) * C + i] = db;
}

// Accumulates into dinp, dweight, dbias.
static void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                    const float *weight, const float *mean, const float *rstd, int B, int T, int C) {
    int N = B * T;
    layernorm_backward_input_kernel<<<grid_for(N, LAYERNORM_WARPS), LAYERNORM_WARPS * WARP_SIZE, 0, cuda_ctx.stream>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    cudaCheckLaunch();
    float *partials = (float *)cuda_scratch(2 * (size_t)COLUMN_SUM_CHUNKS * C * sizeof(float));
    layernorm_backward_params_kernel<<<column_sums_grid(C, 128), 128, 0, cuda_ctx.stream>>>(
        partials, dout, inp, mean, rstd, N, C);
    cudaCheckLaunch();
    column_sums_finish(dweight, partials, C);
    column_sums_finish(dbias, partials + (size_t)COLUMN_SUM_CHUNKS * C, C);
}

#endif // LLMC_LAYERNORM_CUH
