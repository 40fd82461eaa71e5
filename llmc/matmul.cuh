/*
The linear layer on the GPU (llmc/matmul.h): out = inp @ weight^T + bias, weight
(OC, C) as in llm.c. The matmuls go to cuBLAS; fp32 storage, and the compute type
follows -f: CUBLAS_COMPUTE_32F_FAST_TF32 with TF32 on, plain CUBLAS_COMPUTE_32F
with it off (the validation runs).

cuBLAS is column-major. A row-major (R, K) matrix is the column-major (K, R)
matrix with leading dimension K, i.e. its transpose. Each call below writes the
row-major formula as its column-major transpose.
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "cuda_common.cuh"

// C (m, n) = alpha * op(A) op(B) + beta * C, all column-major fp32
static void sgemm_cuda(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    const float alpha = 1.0f;
    cublasComputeType_t compute = cuda_ctx.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasCheck(cublasGemmEx(cuda_ctx.cublas, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
                             &beta, C, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
}

// out[bt, j] += bias[j]; out: (BT, OC)
__global__ static void add_bias_kernel(float *out, const float *bias, int BT, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * OC) { return; }
    out[idx] += bias[idx % OC];
}

// out: (B, T, OC)   inp: (B, T, C)   weight: (OC, C)   bias: (OC) or NULL
static void matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                                int B, int T, int C, int OC) {
    int BT = B * T;
    // out^T (OC, BT) = weight (OC, C) @ inp^T (C, BT); weight is column-major (C, OC) -> transposed
    sgemm_cuda(CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, weight, C, inp, C, 0.0f, out, OC);
    if (bias != NULL) {
        size_t n = (size_t)BT * OC;
        add_bias_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(out, bias, BT, OC);
        cudaCheckLaunch();
    }
}

// Stage one of dbias (the column sums of cuda_common.cuh): partials[k][j] = sum of
// dout[bt, j] over the rows of chunk k
// partials: (chunks, OC)   dout: (BT, OC)
__global__ static void bias_backward_kernel(float *partials, const float *dout, int BT, int OC, int chunks) {
    __shared__ float lanes[COLUMN_SUM_LANES * COLUMN_SUM_COLS];
    int j = blockIdx.x * COLUMN_SUM_COLS + threadIdx.x;
    int k = blockIdx.y;
    float sum = 0.0f;
    if (j < OC) {
        int end = column_chunk_start(BT, chunks, k + 1);
        for (int bt = column_chunk_start(BT, chunks, k) + threadIdx.y; bt < end; bt += COLUMN_SUM_LANES) {
            sum += dout[(size_t)bt * OC + j];
        }
    }
    sum = column_lanes_sum(sum, lanes);
    if (threadIdx.y == 0 && j < OC) { partials[(size_t)k * OC + j] = sum; }
}

// Accumulates into dinp (B, T, C), dweight (OC, C) and dbias (OC) (dbias may be NULL).
static void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, int B, int T, int C, int OC) {
    int BT = B * T;
    // dinp += dout @ weight: dinp^T (C, BT) += weight^T (C, OC) @ dout^T (OC, BT)
    sgemm_cuda(CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, weight, C, dout, OC, 1.0f, dinp, C);
    // dweight += dout^T @ inp: dweight^T (C, OC) += inp^T (C, BT) @ dout (BT, OC)
    sgemm_cuda(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, inp, C, dout, OC, 1.0f, dweight, C);
    if (dbias != NULL) {
        int chunks = column_sums_chunks(BT);
        float *partials = (float *)cuda_scratch((size_t)chunks * OC * sizeof(float));
        bias_backward_kernel<<<column_sums_grid(OC, chunks), column_sums_block(), 0, cuda_ctx.stream>>>(
            partials, dout, BT, OC, chunks);
        cudaCheckLaunch();
        column_sums_finish(dbias, partials, OC, chunks);
    }
}

#endif // LLMC_MATMUL_CUH
