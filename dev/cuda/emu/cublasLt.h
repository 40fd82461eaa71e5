#pragma once
// cuBLASLt for the CUDA emulation: the subset llmc/matmul.cuh calls (emu_blas.cpp
// computes it). Descriptors and layouts are plain records the calls read at once;
// a matmul is an operation on its stream.
// emu_cublaslt_refuse_bgradb = 1 makes the heuristic find no algorithm for BGRADB,
// so that a test can run matmul.cuh's path for that case.
#include "cublas_v2.h"
#include "cuda_bf16.h"

typedef struct EmuLtHandle *cublasLtHandle_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12
} cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 } cublasLtMatmulPreferenceAttributes_t;

typedef struct EmuLtDesc *cublasLtMatmulDesc_t;
typedef struct EmuLtLayout *cublasLtMatrixLayout_t;
typedef struct EmuLtPreference *cublasLtMatmulPreference_t;
typedef struct { int id; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; } cublasLtMatmulHeuristicResult_t;

extern int emu_cublaslt_refuse_bgradb;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *value, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *value,
                                                    size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *found);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a_layout, const void *B, cublasLtMatrixLayout_t b_layout,
                              const void *beta, const void *C, cublasLtMatrixLayout_t c_layout, void *D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream);
