#pragma once
// cuBLASLt for the CUDA emulation: the subset llmc/matmul.cuh calls. One matmul is
// a plain column-major loop: each element of D is the k-ordered sum of the
// products in double, taken to fp32 (the GPU's fp32 accumulator), then, in fp32,
// alpha times that plus beta times C, then the epilogue (bias, GELU with its
// pre-activation in aux), and last the rounding to D's type (bf16: round to
// nearest even, as cuda_bf16.h). The bias gradient of BGRADB is the same kind of
// sum over k of op(B), per column. GELU is the tanh formula of llmc/gelu.cuh in
// the same float operations, so the fused and the separate GELU agree bit for bit.
// emu_cublaslt_refuse_bgradb = 1 makes the heuristic find no algorithm for
// BGRADB, so that a test can run matmul.cuh's path for that case.
#include "cublas_v2.h"
#include "cuda_bf16.h"

typedef void *cublasLtHandle_t;
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
enum { CUBLAS_STATUS_NOT_SUPPORTED = 15 };

struct EmuLtDesc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    void *bias = nullptr, *aux = nullptr;
    int64_t aux_ld = 0;
};
struct EmuLtLayout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
typedef EmuLtDesc *cublasLtMatmulDesc_t;
typedef EmuLtLayout *cublasLtMatrixLayout_t;
typedef void *cublasLtMatmulPreference_t;
typedef struct { int id; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; } cublasLtMatmulHeuristicResult_t;

static int emu_cublaslt_refuse_bgradb = 0;

static cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { static int x; *h = &x; return 0; }
static cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return 0; }
static cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType) { *d = new EmuLtDesc; return 0; }
static cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return 0; }
static cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void *value, size_t size) {
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: memcpy(&d->ta, value, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: memcpy(&d->tb, value, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: memcpy(&d->epilogue, value, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&d->bias, value, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&d->aux, value, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: memcpy(&d->aux_ld, value, size); break;
    }
    return 0;
}
static cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    *l = new EmuLtLayout{type, rows, cols, ld};
    return 0;
}
static cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return 0; }
static cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { static int x; *p = &x; return 0; }
static cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return 0; }
static cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                           const void *, size_t) { return 0; }
static cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *r,
                                                     int *found) {
    if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB && emu_cublaslt_refuse_bgradb) { *found = 0; return CUBLAS_STATUS_NOT_SUPPORTED; }
    memset(r, 0, sizeof(*r));
    *found = 1;
    return 0;
}

static float emu_lt_read(const void *p, cudaDataType t, size_t i) {
    return t == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}
static void emu_lt_write(void *p, cudaDataType t, size_t i, float x) {
    if (t == CUDA_R_16BF) { ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x); } else { ((float *)p)[i] = x; }
}
static float emu_lt_gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + cube)));
}

static cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t al, const void *B, cublasLtMatrixLayout_t bl, const void *beta,
                                     const void *C, cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                                     const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
    size_t m = dl->rows, n = dl->cols, k = d->ta == CUBLAS_OP_N ? al->cols : al->rows;
    float a_scale = *(const float *)alpha, b_scale = *(const float *)beta;
    int bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
               d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
               d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int aux = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    // the bias gradient first: D may be the same memory as C, and BGRADB reads only B
    if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB) {
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t l = 0; l < k; l++) {
                s += emu_lt_read(B, bl->type, d->tb == CUBLAS_OP_N ? l + j * bl->ld : j + l * bl->ld);
            }
            emu_lt_write(d->bias, dl->type, j, (float)s);
        }
    }
    for (size_t j = 0; j < n; j++) for (size_t i = 0; i < m; i++) {
        double s = 0;
        for (size_t l = 0; l < k; l++) {
            float x = emu_lt_read(A, al->type, d->ta == CUBLAS_OP_N ? i + l * al->ld : l + i * al->ld);
            float y = emu_lt_read(B, bl->type, d->tb == CUBLAS_OP_N ? l + j * bl->ld : j + l * bl->ld);
            s += (double)x * y;
        }
        float acc = a_scale * (float)s;
        if (b_scale != 0.0f) { acc += b_scale * emu_lt_read(C, cl->type, i + j * cl->ld); }
        if (bias) { acc += emu_lt_read(d->bias, dl->type, i); }
        if (aux) { emu_lt_write(d->aux, dl->type, i + j * d->aux_ld, acc); }
        emu_lt_write(D, dl->type, i + j * dl->ld, gelu ? emu_lt_gelu(acc) : acc);
    }
    return 0;
}
