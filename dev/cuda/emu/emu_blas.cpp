/*
cuBLASLt for the emulation: the subset llmc/matmul.cuh calls, as an operation on
the stream of the call. One matmul is a plain column-major loop: each element of D
is the k-ordered sum of the products in double, taken to fp32 (the GPU's fp32
accumulator), then, in fp32, alpha times that plus beta times C, then the epilogue
(bias, GELU with its pre-activation in aux), and last the rounding to D's type
(bf16: round to nearest even, as cuda_bf16.h). The bias gradient of BGRADB is the
same kind of sum over k of op(B), per column. GELU is the tanh formula of
llmc/gelu.cuh in the same float operations, so the fused and the separate GELU
agree bit for bit.

The call's descriptor, layouts and scalars are copied when it is made (the caller
may destroy them at once, as matmul.cuh does); the matrices are read and written
when the stream runs it, and each of their columns is checked as one access of
the operation (emu_memory.cpp).
*/
#include "cublasLt.h"
#include "emu_internal.h"

struct EmuLtHandle { int unused; };
struct EmuLtDesc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    void *bias = nullptr, *aux = nullptr;
    int64_t aux_ld = 0;
};
struct EmuLtLayout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct EmuLtPreference { int unused; };

int emu_cublaslt_refuse_bgradb = 0;

using namespace emu;

const char *cublasGetStatusString(cublasStatus_t status) {
    return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new EmuLtHandle; return 0; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return 0; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType) {
    *d = new EmuLtDesc;
    return 0;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return 0; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
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
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    *l = new EmuLtLayout{type, rows, cols, ld};
    return 0;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return 0; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = new EmuLtPreference; return 0; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return 0; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
    return 0;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *r,
                                              int *found) {
    if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB && emu_cublaslt_refuse_bgradb) {
        *found = 0;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(r, 0, sizeof(*r));
    *found = 1;
    return 0;
}

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }
static float read_as_float(const void *p, cudaDataType t, size_t i) {
    return t == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}
static void write_from_float(void *p, cudaDataType t, size_t i, float x) {
    if (t == CUDA_R_16BF) { ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x); } else { ((float *)p)[i] = x; }
}
static float gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + cube)));
}

struct Matmul {
    EmuLtDesc d;
    EmuLtLayout a, b, c, dl;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
};

// every column of a stored column-major matrix, as one access each
static void access_matrix(const void *p, const EmuLtLayout &l, bool write, const char *what) {
    size_t es = type_bytes(l.type);
    for (uint64_t j = 0; j < l.cols; j++) { access_range((const char *)p + j * l.ld * es, l.rows * es, write, what); }
}
static void initialise_matrix(void *p, const EmuLtLayout &l) {
    size_t es = type_bytes(l.type);
    for (uint64_t j = 0; j < l.cols; j++) { mark_initialised((char *)p + j * l.ld * es, l.rows * es); }
}

static bool run_matmul(Operation *op) {
    const Matmul &mm = *(const Matmul *)op->state;
    const EmuLtDesc &d = mm.d;
    const char *what = op->what.c_str();
    size_t m = mm.dl.rows, n = mm.dl.cols, k = d.ta == CUBLAS_OP_N ? mm.a.cols : mm.a.rows;
    bool bias = d.epilogue == CUBLASLT_EPILOGUE_BIAS || d.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool gelu_on = d.epilogue == CUBLASLT_EPILOGUE_GELU || d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                   d.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool aux = d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool bgradb = d.epilogue == CUBLASLT_EPILOGUE_BGRADB;
    access_matrix(mm.A, mm.a, false, what);
    access_matrix(mm.B, mm.b, false, what);
    if (mm.beta != 0.0f) { access_matrix(mm.C, mm.c, false, what); }
    size_t es = type_bytes(mm.dl.type);
    if (bias) { access_range(d.bias, m * es, false, what); }
    // the bias gradient first: D may be the same memory as C, and BGRADB reads only B
    if (bgradb) {
        access_range(d.bias, n * es, true, what);
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t l = 0; l < k; l++) {
                s += read_as_float(mm.B, mm.b.type, d.tb == CUBLAS_OP_N ? l + j * mm.b.ld : j + l * mm.b.ld);
            }
            write_from_float(d.bias, mm.dl.type, j, (float)s);
        }
        mark_initialised(d.bias, n * es);
    }
    for (size_t j = 0; j < n; j++) {
        for (size_t i = 0; i < m; i++) {
            double s = 0;
            for (size_t l = 0; l < k; l++) {
                float x = read_as_float(mm.A, mm.a.type, d.ta == CUBLAS_OP_N ? i + l * mm.a.ld : l + i * mm.a.ld);
                float y = read_as_float(mm.B, mm.b.type, d.tb == CUBLAS_OP_N ? l + j * mm.b.ld : j + l * mm.b.ld);
                s += (double)x * y;
            }
            float acc = mm.alpha * (float)s;
            if (mm.beta != 0.0f) { acc += mm.beta * read_as_float(mm.C, mm.c.type, i + j * mm.c.ld); }
            if (bias) { acc += read_as_float(d.bias, mm.dl.type, i); }
            if (aux) { write_from_float(d.aux, mm.dl.type, i + j * d.aux_ld, acc); }
            write_from_float(mm.D, mm.dl.type, i + j * mm.dl.ld, gelu_on ? gelu(acc) : acc);
        }
    }
    access_matrix(mm.D, mm.dl, true, what);
    initialise_matrix(mm.D, mm.dl);
    if (aux) {
        EmuLtLayout al{mm.dl.type, m, n, d.aux_ld};
        access_matrix(d.aux, al, true, what);
        initialise_matrix(d.aux, al);
    }
    return true;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t al, const void *B, cublasLtMatrixLayout_t bl, const void *beta,
                              const void *C, cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t stream) {
    Matmul *mm = new Matmul{*desc, *al, *bl, *cl, *dl, *(const float *)alpha, *(const float *)beta, A, B, C, D};
    enqueue(stream, "cublasLtMatmul", __builtin_return_address(0), run_matmul, mm,
            [](void *p) { delete (Matmul *)p; });
    device_progress((int)random_below(3));
    return 0;
}
