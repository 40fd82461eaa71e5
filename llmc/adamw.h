/*
AdamW with llm.c's conventions: beta1 0.9, beta2 0.95, eps 1e-8, decoupled weight
decay on the 2-D tensors only, and gradients scaled down so that their global
norm is at most 1.0 (the scale is computed by the caller from global_norm_squared).
*/
#ifndef LLMC_ADAMW_H
#define LLMC_ADAMW_H

#include <math.h>
#include <stddef.h>

#include "host_device.h"

#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f
#define GRAD_CLIP 1.0f

// sum of squares of all gradients, accumulated in double so the order of the
// threads' partial sums barely matters; simd lets each thread keep one partial sum
// per vector lane (one chain of dependent adds would take 3x as long)
static double global_norm_squared(const float *grads, size_t n) {
    double sum = 0.0;
    #pragma omp parallel for simd reduction(+ : sum)
    for (size_t i = 0; i < n; i++) { sum += (double)grads[i] * grads[i]; }
    return sum;
}

// the factor that brings the gradient's global norm down to GRAD_CLIP
static float grad_clip_scale(float grad_norm) {
    return grad_norm > GRAD_CLIP ? GRAD_CLIP / grad_norm : 1.0f;
}

// What one AdamW step applies to every parameter: its learning rate, weight decay
// (0 for the tensors that take none) and gradient scale, and the bias corrections
// of its step count
typedef struct {
    float lr, weight_decay, grad_scale;
    float beta1_correction, beta2_correction; // 1 - beta1^t, 1 - beta2^t
} AdamWStep;

// step t (1-based), worked out once on the host for every parameter, for the CPU
// loop and the CUDA kernel alike
static AdamWStep adamw_step(float lr, float weight_decay, float grad_scale, int t) {
    AdamWStep s;
    s.lr = lr;
    s.weight_decay = weight_decay;
    s.grad_scale = grad_scale;
    s.beta1_correction = 1.0f - powf(ADAMW_BETA1, (float)t);
    s.beta2_correction = 1.0f - powf(ADAMW_BETA2, (float)t);
    return s;
}

// One parameter's update, the CPU loop's and the CUDA kernel's (llmc/adamw.cuh):
// its moments *m, *v updated from its gradient, the new parameter returned.
HOST_DEVICE static float adamw_parameter_update(AdamWStep s, float param, float grad, float *m, float *v) {
    float g = grad * s.grad_scale;
    float mi = ADAMW_BETA1 * *m + (1.0f - ADAMW_BETA1) * g;
    float vi = ADAMW_BETA2 * *v + (1.0f - ADAMW_BETA2) * g * g;
    *m = mi;
    *v = vi;
    float m_hat = mi / s.beta1_correction;
    float v_hat = vi / s.beta2_correction;
    return param - s.lr * (m_hat / (sqrtf(v_hat) + ADAMW_EPS) + s.weight_decay * param);
}

// One AdamW step over n parameters. t is the 1-based step count.
// params, grads, m, v: (n)
static void adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float weight_decay, float grad_scale, int t) {
    AdamWStep s = adamw_step(lr, weight_decay, grad_scale, t);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) { params[i] = adamw_parameter_update(s, params[i], grads[i], &m[i], &v[i]); }
}

#endif // LLMC_ADAMW_H
