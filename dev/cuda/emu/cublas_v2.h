#pragma once
#include "cuda_emu.h"
typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0 };
typedef void *cublasHandle_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 } cublasComputeType_t;
typedef enum { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_PEDANTIC_MATH } cublasMath_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
#define CUBLAS_GEMM_DEFAULT 0
static const char *cublasGetStatusString(cublasStatus_t) { return "emu cublas"; }
static cublasStatus_t cublasCreate(cublasHandle_t *h) { static int x; *h = &x; return 0; }
static cublasStatus_t cublasDestroy(cublasHandle_t) { return 0; }
static cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return 0; }
static cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
// column-major C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C
static cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType, int lda, const void *B, cudaDataType,
                                   int ldb, const void *beta, void *C, cudaDataType, int ldc, cublasComputeType_t, int) {
    const float *a = (const float *)A, *b = (const float *)B;
    float *c = (float *)C;
    float al = *(const float *)alpha, be = *(const float *)beta;
    for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) {
        double s = 0;
        for (int l = 0; l < k; l++) {
            float x = ta == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
            float y = tb == CUBLAS_OP_N ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb];
            s += (double)x * y;
        }
        float *cij = c + i + (size_t)j * ldc;
        *cij = (float)(al * s + (be == 0.0f ? 0.0 : be * *cij));
    }
    return 0;
}
