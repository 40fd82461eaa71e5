/*
The linear layer on the GPU (llmc/matmul.h): out = inp @ weight^T + bias, weight
(OC, C) as in llm.c, through cuBLASLt with its epilogues doing the work around
the product:

    forward   out = inp @ weight^T + bias              EPILOGUE_BIAS
              with pre_gelu: pre_gelu = that,
              out = gelu(pre_gelu)                     EPILOGUE_GELU_AUX_BIAS
    backward  dinp = dout @ weight                     (overwritten)
              dweight += dout^T @ inp,
              dbias += column sums of dout             EPILOGUE_BGRADB, the bias
                                                       gradient of the same GEMM

Types follow the build (llmc/precision.cuh): the activations, inp, weight, bias
and dinp are floatX; dweight and dbias are fp32, so in the BF16 build the bf16
products are accumulated straight into fp32 gradients (cuBLASLt's C/D in fp32,
compute in fp32). The FP32 build computes in fp32 throughout, with TF32 tensor
cores when -f 1 (CUBLAS_COMPUTE_32F_FAST_TF32) and in full fp32 with -f 0.

The GELU epilogue is the tanh approximation of llmc/gelu.cuh; its leading
dimension must be a multiple of 8, otherwise the product is followed by
gelu_forward_cuda. BGRADB writes its bias gradient rather than adding to it, so
it goes to scratch and is added to dbias; should cuBLASLt offer no algorithm for
it, the GEMM runs without it and the bias gradient comes from the deterministic
column sums of cuda_reduce.cuh (the path of the plain build).

cuBLASLt is column-major. A row-major (R, K) matrix is the column-major (K, R)
matrix with leading dimension K, i.e. its transpose. Each call below writes the
row-major formula as its column-major transpose.

Plans. A matmul needs a descriptor, three matrix layouts and an algorithm from
cuBLASLt's heuristic, and making them costs host time at every call (a heuristic
query is tens of microseconds; a d12 training step makes about 150 calls), while
none of it depends on the data: only on the shapes, transposes, types, epilogue
and compute type (the key, MatmulKey of cuda_common.cuh). So each kind of call is
planned once, the first time it is seen, into a table of the context
(cuda_ctx.plans) that later calls look up; cuda_free_context destroys them. A
run makes a few dozen kinds (each linear layer forward and backward, the
classifier's chunk and its last partial chunk, the sampler's one row, a longer
packed batch's shapes); the table grows by doubling should a run make more. The
epilogue's bias and aux pointers differ from layer to layer, so they are set on
the plan's descriptor at each call: cublasLtMatmul reads the descriptor when it
is called (the caller may destroy it right after, as llm.c does), so the next
call's pointers cannot reach a product already queued. The heuristic never sees
A, B or D (it assumes them 256-byte aligned, as before), but sees the epilogue's
pointers, so their alignment is part of the key.
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "gelu.cuh"

// the alignment of an epilogue pointer as the key holds it: its largest power of
// two up to 256 bytes, 0 for none
static int matmul_pointer_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    if (a == 0) { return 0; }
    uintptr_t low = a & (~a + 1);
    return low > 256 ? 256 : (int)low;
}

// The plan of `key`: looked up, or made and kept.
static const MatmulPlan *matmul_plan(const MatmulKey *key, void *bias, void *aux) {
    for (int i = 0; i < cuda_ctx.num_plans; i++) {
        if (memcmp(&cuda_ctx.plans[i].key, key, sizeof(*key)) == 0) { return &cuda_ctx.plans[i]; }
    }
    if (cuda_ctx.num_plans == cuda_ctx.plans_capacity) {
        cuda_ctx.plans_capacity = cuda_ctx.plans_capacity > 0 ? 2 * cuda_ctx.plans_capacity : 32;
        cuda_ctx.plans = (MatmulPlan *)realloc(cuda_ctx.plans, (size_t)cuda_ctx.plans_capacity * sizeof(MatmulPlan));
        if (cuda_ctx.plans == NULL) { fatal("out of host memory for %d matmul plans", cuda_ctx.plans_capacity); }
    }
    MatmulPlan *p = &cuda_ctx.plans[cuda_ctx.num_plans++];
    memset(p, 0, sizeof(*p));
    p->key = *key;
    cublasOperation_t ta = (cublasOperation_t)key->ta, tb = (cublasOperation_t)key->tb;
    cublasLtEpilogue_t epilogue = (cublasLtEpilogue_t)key->epilogue;
    int m = key->m, n = key->n, k = key->k;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)key->compute, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias != NULL) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux != NULL) {
        int64_t ld = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                   sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    // the stored shapes: op(A) is (m, k), so A itself is (m, k) or (k, m)
    cublasCheck(cublasLtMatrixLayoutCreate(&p->a_layout, (cudaDataType)key->a_type, ta == CUBLAS_OP_N ? m : k,
                                           ta == CUBLAS_OP_N ? k : m, key->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->b_layout, (cudaDataType)key->b_type, tb == CUBLAS_OP_N ? k : n,
                                           tb == CUBLAS_OP_N ? n : k, key->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->d_layout, (cudaDataType)key->d_type, m, n, key->ldd));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t workspace = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                     sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(cuda_ctx.cublaslt, p->desc, p->a_layout, p->b_layout,
                                                           p->d_layout, p->d_layout, pref, 1, &heuristic, &found);
    if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) { cublasCheck(status); }
    p->found = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->found) { p->algo = heuristic.algo; }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return p;
}

// One column-major GEMM: D (m, n) = op(A) (m, k) op(B) (k, n) + beta D, with an
// epilogue. bias: the epilogue's vector (BIAS: length m; BGRADB: length n, written);
// aux: GELU_AUX_BIAS's pre-activation (m, n), leading dimension m. Returns 0 when
// cuBLASLt has no algorithm for this epilogue (nothing computed), 1 when done.
static int gemm_cuda(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
                     cudaDataType a_type, int lda, const void *B, cudaDataType b_type, int ldb, float beta, void *D,
                     cudaDataType d_type, int ldd, cublasLtEpilogue_t epilogue, void *bias, void *aux) {
    cublasComputeType_t compute = d_type == CUDA_R_32F && a_type == CUDA_R_32F && cuda_ctx.tf32
                                      ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    MatmulKey key = {(int)ta, (int)tb, m, n, k, lda, ldb, ldd, (int)a_type, (int)b_type, (int)d_type, (int)compute,
                     (int)epilogue, matmul_pointer_align(bias), matmul_pointer_align(aux)};
    const MatmulPlan *p = matmul_plan(&key, bias, aux);
    if (!p->found) { return 0; }
    if (bias != NULL) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux != NULL) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                   sizeof(aux)));
    }
    const float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(cuda_ctx.cublaslt, p->desc, &alpha, A, p->a_layout, B, p->b_layout, &beta, D,
                               p->d_layout, D, p->d_layout, &p->algo, cuda_ctx.cublaslt_workspace,
                               CUBLASLT_WORKSPACE_BYTES, cuda_ctx.stream));
    return 1;
}

// a GEMM that must run: no algorithm is an error naming the shape
static void gemm_cuda_required(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
                               cudaDataType a_type, int lda, const void *B, cudaDataType b_type, int ldb, float beta,
                               void *D, cudaDataType d_type, int ldd, cublasLtEpilogue_t epilogue, void *bias,
                               void *aux) {
    if (!gemm_cuda(ta, tb, m, n, k, A, a_type, lda, B, b_type, ldb, beta, D, d_type, ldd, epilogue, bias, aux)) {
        fatal("cuBLASLt has no algorithm for a %d x %d x %d matmul (epilogue %d)", m, n, k, (int)epilogue);
    }
}

// out: (B, T, OC)   pre_gelu: NULL or (B, T, OC)   inp: (B, T, C)   weight: (OC, C)   bias: (OC) or NULL
static void matmul_forward_cuda(floatX *out, floatX *pre_gelu, const floatX *inp, const floatX *weight,
                                const floatX *bias, int B, int T, int C, int OC) {
    int BT = B * T;
    int fused_gelu = pre_gelu != NULL && OC % 8 == 0;
    cublasLtEpilogue_t epilogue = fused_gelu ? (bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                             : (bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    // without the fused GELU the product goes to pre_gelu, and the gelu kernel follows
    floatX *product = pre_gelu != NULL && !fused_gelu ? pre_gelu : out;
    // out^T (OC, BT) = weight (OC, C) @ inp^T (C, BT); weight is column-major (C, OC) -> transposed
    gemm_cuda_required(CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, weight, FLOATX_CUDA_TYPE, C, inp, FLOATX_CUDA_TYPE, C,
                       0.0f, product, FLOATX_CUDA_TYPE, OC, epilogue, (void *)bias, fused_gelu ? pre_gelu : NULL);
    if (product == pre_gelu) { gelu_forward_cuda(out, pre_gelu, (size_t)BT * OC); }
}

// Stage one of dbias (the column sums of cuda_reduce.cuh): partials[k][j] = sum of
// dout[bt, j] over the rows of chunk k
// partials: (chunks, OC)   dout: (BT, OC)
__global__ static void bias_backward_kernel(float *partials, const floatX *dout, int BT, int OC, int chunks) {
    __shared__ float lanes[COLUMN_SUM_LANES * COLUMN_SUM_COLS];
    int j = blockIdx.x * COLUMN_SUM_COLS + threadIdx.x;
    int k = blockIdx.y;
    float sum = 0.0f;
    if (j < OC) {
        int end = column_chunk_start(BT, chunks, k + 1);
        for (int bt = column_chunk_start(BT, chunks, k) + threadIdx.y; bt < end; bt += COLUMN_SUM_LANES) {
            sum += to_float(dout[(size_t)bt * OC + j]);
        }
    }
    sum = column_lanes_sum(sum, lanes);
    if (threadIdx.y == 0 && j < OC) { partials[(size_t)k * OC + j] = sum; }
}

// out[i] += add[i]   (n)
__global__ static void add_to_kernel(float *out, const float *add, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] += add[i]; }
}

// dinp: (B, T, C) overwritten   dweight: (OC, C) and dbias: (OC) or NULL, fp32, accumulated
// dout: (B, T, OC)   inp: (B, T, C)   weight: (OC, C)
static void matmul_backward_cuda(floatX *dinp, float *dweight, float *dbias, const floatX *dout, const floatX *inp,
                                 const floatX *weight, int B, int T, int C, int OC) {
    int BT = B * T;
    // dinp = dout @ weight: dinp^T (C, BT) = weight^T (C, OC) @ dout^T (OC, BT)
    gemm_cuda_required(CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, weight, FLOATX_CUDA_TYPE, C, dout, FLOATX_CUDA_TYPE, OC,
                       0.0f, dinp, FLOATX_CUDA_TYPE, C, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    // dweight += dout^T @ inp: dweight^T (C, OC) += inp^T (C, BT) @ dout (BT, OC); B = dout is the
    // column-major (OC, BT) matrix taken transposed, and BGRADB sums it over k = BT: dbias
    float *dbias_step = dbias != NULL ? (float *)cuda_scratch((size_t)OC * sizeof(float)) : NULL;
    int with_bias_grad = dbias != NULL &&
                         gemm_cuda(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, inp, FLOATX_CUDA_TYPE, C, dout,
                                   FLOATX_CUDA_TYPE, OC, 1.0f, dweight, CUDA_R_32F, C, CUBLASLT_EPILOGUE_BGRADB,
                                   dbias_step, NULL);
    if (with_bias_grad) {
        add_to_kernel<<<grid_for(OC, 256), 256, 0, cuda_ctx.stream>>>(dbias, dbias_step, OC);
        cudaCheckLaunch();
        return;
    }
    gemm_cuda_required(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, inp, FLOATX_CUDA_TYPE, C, dout, FLOATX_CUDA_TYPE, OC,
                       1.0f, dweight, CUDA_R_32F, C, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
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
