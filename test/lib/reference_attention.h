/*
Reference causal self-attention for the tests, in double precision, on the whole
sequence of one process: the full (T, T) probability matrix per (row, head), no
blocks, no online softmax, nothing shared with cp/ring_attention.h. What the ring
computes across ranks must equal this (test_attention_algorithms.c); this itself is
checked by finite differences (test_attention_reference.c).

    visible(i, j) = j <= i  and  doc[j] == doc[i]       (doc NULL: one document)
    s_ij = q_i . k_j / sqrt(HS),  lse_i = log sum_{visible j} exp(s_ij)
    p_ij = exp(s_ij - lse_i) for visible j, else 0,   o_i = sum_j p_ij v_j

Backward of a loss with dL/do = dout, straight from the chain rule through the
softmax (dp_ij = dout_i . v_j, ds_ij = p_ij (dp_ij - sum_l p_il dp_il)):
    dv_j = sum_i p_ij dout_i,  dq_i = sum_j ds_ij k_j / sqrt(HS),  dk_j = sum_i ds_ij q_i / sqrt(HS)

Tensors as the model stores them:
    qkv (B, T, 3C): q, k, v at offsets 0, C, 2C of each token, head h at h*HS
    out (B, T, C), lse (B, NH, T), doc (B, T)
*/
#ifndef TEST_REFERENCE_ATTENTION_H
#define TEST_REFERENCE_ATTENTION_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int ref_visible(const int *doc_row, int i, int j) {
    return j <= i && (doc_row == NULL || doc_row[j] == doc_row[i]);
}

// the element d of q (which = 0), k (1) or v (2) of token t, head h, row b
static size_t ref_qkv_at(int b, int t, int which, int h, int d, int T, int C, int HS) {
    return ((size_t)b * T + t) * 3 * C + (size_t)which * C + (size_t)h * HS + d;
}

// probabilities p: (T, T) and lse: (T,) of row b, head h
static void ref_probabilities(double *p, double *lse, const double *qkv, const int *doc, int b, int h,
                              int T, int C, int NH) {
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    const int *doc_row = doc ? doc + (size_t)b * T : NULL;
    for (int i = 0; i < T; i++) {
        double *prow = p + (size_t)i * T;
        double maxval = -INFINITY;
        for (int j = 0; j < T; j++) {
            prow[j] = -INFINITY;
            if (!ref_visible(doc_row, i, j)) { continue; }
            double s = 0.0;
            for (int d = 0; d < HS; d++) {
                s += qkv[ref_qkv_at(b, i, 0, h, d, T, C, HS)] * qkv[ref_qkv_at(b, j, 1, h, d, T, C, HS)];
            }
            prow[j] = s * scale;
            if (prow[j] > maxval) { maxval = prow[j]; }
        }
        double sum = 0.0;
        for (int j = 0; j < T; j++) { sum += exp(prow[j] - maxval); } // exp(-inf) = 0
        lse[i] = maxval + log(sum);
        for (int j = 0; j < T; j++) { prow[j] = exp(prow[j] - lse[i]); }
    }
}

// out: (B, T, C)   lse: (B, NH, T)
static void ref_attention_forward(double *out, double *lse, const double *qkv, const int *doc,
                                  int B, int T, int C, int NH) {
    int HS = C / NH;
    double *p = (double *)malloc((size_t)T * T * sizeof(double));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            ref_probabilities(p, lse + ((size_t)b * NH + h) * T, qkv, doc, b, h, T, C, NH);
            for (int i = 0; i < T; i++) {
                for (int d = 0; d < HS; d++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++) { o += p[(size_t)i * T + j] * qkv[ref_qkv_at(b, j, 2, h, d, T, C, HS)]; }
                    out[((size_t)b * T + i) * C + h * HS + d] = o;
                }
            }
        }
    }
    free(p);
}

// dqkv: (B, T, 3C), overwritten   dout: (B, T, C)
static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, const int *doc,
                                   int B, int T, int C, int NH) {
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double *p = (double *)malloc((size_t)T * T * sizeof(double));
    double *dp = (double *)malloc((size_t)T * T * sizeof(double));
    double *lse = (double *)malloc((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(double));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            ref_probabilities(p, lse, qkv, doc, b, h, T, C, NH);
            const double *dout_bh = dout + (size_t)b * T * C + h * HS;
            // dp_ij = dout_i . v_j
            for (int i = 0; i < T; i++) {
                for (int j = 0; j < T; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) { s += dout_bh[(size_t)i * C + d] * qkv[ref_qkv_at(b, j, 2, h, d, T, C, HS)]; }
                    dp[(size_t)i * T + j] = s;
                }
            }
            for (int i = 0; i < T; i++) {
                double *prow = p + (size_t)i * T, *dprow = dp + (size_t)i * T;
                double pdp = 0.0;
                for (int l = 0; l < T; l++) { pdp += prow[l] * dprow[l]; }
                for (int j = 0; j < T; j++) {
                    if (prow[j] == 0.0) { continue; } // masked (or underflowed): no gradient
                    double ds = prow[j] * (dprow[j] - pdp);
                    for (int d = 0; d < HS; d++) {
                        dqkv[ref_qkv_at(b, i, 0, h, d, T, C, HS)] += ds * qkv[ref_qkv_at(b, j, 1, h, d, T, C, HS)] * scale;
                        dqkv[ref_qkv_at(b, j, 1, h, d, T, C, HS)] += ds * qkv[ref_qkv_at(b, i, 0, h, d, T, C, HS)] * scale;
                        dqkv[ref_qkv_at(b, j, 2, h, d, T, C, HS)] += prow[j] * dout_bh[(size_t)i * C + d];
                    }
                }
            }
        }
    }
    free(p);
    free(dp);
    free(lse);
}

#endif // TEST_REFERENCE_ATTENTION_H
