/*
Layer normalisation over the channels of each token (eps 1e-5, as GPT-2).
Saves mean and reciprocal standard deviation per token for the backward pass.
*/
#ifndef LLMC_LAYERNORM_H
#define LLMC_LAYERNORM_H

#include <math.h>
#include <stddef.h>

// out: (B, T, C)   mean, rstd: (B, T)   inp: (B, T, C)   weight, bias: (C)
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int B, int T, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float *x = inp + (size_t)bt * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) { m += x[i]; }
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + (size_t)bt * C;
        for (int i = 0; i < C; i++) { o[i] = s * (x[i] - m) * weight[i] + bias[i]; }
        mean[bt] = m;
        rstd[bt] = s;
    }
}

// Accumulates into dinp, dweight, dbias.
// dweight and dbias sum over tokens: a per-thread partial would change the order
// of the sums between thread counts, so tokens are walked in order per channel.
static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean, const float *rstd,
                               int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float *dout_bt = dout + (size_t)bt * C;
        const float *inp_bt = inp + (size_t)bt * C;
        float *dinp_bt = dinp + (size_t)bt * C;
        float mean_bt = mean[bt];
        float rstd_bt = rstd[bt];
        // the two reductions of the layernorm gradient
        float dnorm_mean = 0.0f;
        float dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm_bti = (inp_bt[i] - mean_bt) * rstd_bt;
            float dnorm_i = weight[i] * dout_bt[i];
            dnorm_mean += dnorm_i;
            dnorm_norm_mean += dnorm_i * norm_bti;
        }
        dnorm_mean = dnorm_mean / C;
        dnorm_norm_mean = dnorm_norm_mean / C;
        for (int i = 0; i < C; i++) {
            float norm_bti = (inp_bt[i] - mean_bt) * rstd_bt;
            float dnorm_i = weight[i] * dout_bt[i];
            dinp_bt[i] += (dnorm_i - dnorm_mean - norm_bti * dnorm_norm_mean) * rstd_bt;
        }
    }
    // each channel's sums in token order, as one loop per channel would add them, but
    // 16 channels (a cache line of a row) at a time: a row's line is read once, not
    // once per channel
    #pragma omp parallel for
    for (int i0 = 0; i0 < C; i0 += 16) {
        int n = C - i0 < 16 ? C - i0 : 16;
        float dw[16] = {0.0f}, db[16] = {0.0f};
        for (int bt = 0; bt < B * T; bt++) {
            const float *x = inp + (size_t)bt * C + i0;
            const float *d = dout + (size_t)bt * C + i0;
            for (int i = 0; i < n; i++) {
                float norm_bti = (x[i] - mean[bt]) * rstd[bt];
                dw[i] += norm_bti * d[i];
                db[i] += d[i];
            }
        }
        for (int i = 0; i < n; i++) {
            dweight[i0 + i] += dw[i];
            dbias[i0 + i] += db[i];
        }
    }
}

#endif // LLMC_LAYERNORM_H
