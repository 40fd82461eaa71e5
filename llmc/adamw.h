/*
AdamW with llm.c's conventions: beta1 0.9, beta2 0.95, eps 1e-8, decoupled weight
decay on the 2-D tensors only, and gradients scaled down so that their global
norm is at most 1.0 (the scale is computed by the caller from global_norm_squared).
*/
#ifndef LLMC_ADAMW_H
#define LLMC_ADAMW_H

#include <math.h>
#include <stddef.h>

#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f
#define GRAD_CLIP 1.0f

// sum of squares of all gradients, accumulated in double so the order of the
// threads' partial sums barely matters
static double global_norm_squared(const float *grads, size_t n) {
    double sum = 0.0;
    #pragma omp parallel for reduction(+ : sum)
    for (size_t i = 0; i < n; i++) { sum += (double)grads[i] * grads[i]; }
    return sum;
}

// the factor that brings the gradient's global norm down to GRAD_CLIP
static float grad_clip_scale(float grad_norm) {
    return grad_norm > GRAD_CLIP ? GRAD_CLIP / grad_norm : 1.0f;
}

// One AdamW step over n parameters. t is the 1-based step count.
// params, grads, m, v: (n)
static void adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float weight_decay, float grad_scale, int t) {
    float beta1_correction = 1.0f - powf(ADAMW_BETA1, (float)t);
    float beta2_correction = 1.0f - powf(ADAMW_BETA2, (float)t);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float grad = grads[i] * grad_scale;
        float mi = ADAMW_BETA1 * m[i] + (1.0f - ADAMW_BETA1) * grad;
        float vi = ADAMW_BETA2 * v[i] + (1.0f - ADAMW_BETA2) * grad * grad;
        m[i] = mi;
        v[i] = vi;
        float m_hat = mi / beta1_correction;
        float v_hat = vi / beta2_correction;
        params[i] -= lr * (m_hat / (sqrtf(v_hat) + ADAMW_EPS) + weight_decay * params[i]);
    }
}

#endif // LLMC_ADAMW_H
