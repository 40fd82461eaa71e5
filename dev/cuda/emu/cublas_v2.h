#pragma once
// cuBLAS for the CUDA emulation: the types and status gpt2cp's code names (its
// matmuls go through cuBLASLt, cublasLt.h).
#include "cuda_emu.h"
typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 } cublasComputeType_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
const char *cublasGetStatusString(cublasStatus_t status);
