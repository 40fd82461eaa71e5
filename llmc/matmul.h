/*
The linear layer: out = inp @ weight^T + bias, as in llm.c (weight is (OC, C)).

These matmuls (the lm head and the MLP) are most of a CPU step, so they go to
cblas_sgemm when the build found a BLAS (OpenBLAS, OpenMP build); `make NO_BLAS=1`
builds the plain loops below instead, which are the readable definition.
*/
#ifndef LLMC_MATMUL_H
#define LLMC_MATMUL_H

#include <stddef.h>
#ifndef NO_BLAS
#include <cblas.h>
#endif

// out: (B, T, OC)   inp: (B, T, C)   weight: (OC, C)   bias: (OC) or NULL
static void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int T, int C, int OC) {
    int BT = B * T;
#ifndef NO_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C,
                1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias != NULL) {
        #pragma omp parallel for
        for (int bt = 0; bt < BT; bt++) {
            float *o = out + (size_t)bt * OC;
            for (int j = 0; j < OC; j++) { o[j] += bias[j]; }
        }
    }
#else
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const float *x = inp + (size_t)bt * C;
        float *o = out + (size_t)bt * OC;
        for (int j = 0; j < OC; j++) {
            const float *w = weight + (size_t)j * C;
            float val = bias != NULL ? bias[j] : 0.0f;
            for (int i = 0; i < C; i++) { val += x[i] * w[i]; }
            o[j] = val;
        }
    }
#endif
}

// dinp (B, T, C) overwritten with the input's gradient (each call's dinp is a fresh
// buffer, and writing it spares a memset and sgemm's read of it); the gradients
// accumulate into dweight (OC, C) and dbias (OC) (dbias may be NULL).
static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int B, int T, int C, int OC) {
    int BT = B * T;
#ifndef NO_BLAS
    // dinp = dout @ weight:  (BT, OC) x (OC, C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, C, OC,
                1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    // dweight += dout^T @ inp:  (OC, BT) x (BT, C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, BT,
                1.0f, dout, OC, inp, C, 1.0f, dweight, C);
#else
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const float *d = dout + (size_t)bt * OC;
        float *dx = dinp + (size_t)bt * C;
        for (int i = 0; i < C; i++) { dx[i] = 0.0f; }
        for (int j = 0; j < OC; j++) {
            const float *w = weight + (size_t)j * C;
            float dj = d[j];
            for (int i = 0; i < C; i++) { dx[i] += w[i] * dj; }
        }
    }
    #pragma omp parallel for
    for (int j = 0; j < OC; j++) {
        float *dw = dweight + (size_t)j * C;
        for (int bt = 0; bt < BT; bt++) {
            const float *x = inp + (size_t)bt * C;
            float dj = dout[(size_t)bt * OC + j];
            for (int i = 0; i < C; i++) { dw[i] += x[i] * dj; }
        }
    }
#endif
    if (dbias != NULL) {
        // each column's sum in token order, as one loop per column would add it, but
        // 16 columns (a cache line of dout's row) at a time: a row's line is read once
        #pragma omp parallel for
        for (int j0 = 0; j0 < OC; j0 += 16) {
            int n = OC - j0 < 16 ? OC - j0 : 16;
            float sum[16] = {0.0f};
            for (int bt = 0; bt < BT; bt++) {
                const float *d = dout + (size_t)bt * OC + j0;
                for (int j = 0; j < n; j++) { sum[j] += d[j]; }
            }
            for (int j = 0; j < n; j++) { dbias[j0 + j] += sum[j]; }
        }
    }
}

#endif // LLMC_MATMUL_H
