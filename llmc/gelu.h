/*
GELU, tanh approximation (as GPT-2):

    gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)

computed through 1 + tanh(u) = 2 sigmoid(2u), which needs one exp and no tanh or
cosh (tanh' = 1 - tanh^2 = 4 s (1 - s) with s = sigmoid(2u)):

    e = exp(-2u),  s = 1 / (1 + e),  1 - s = 1 / (1 + 1/e)
    gelu(x)  = x s
    gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2)

(1 - s from e, not by subtraction, which would cancel at large x; e = 0 and
e = inf give s and 1 - s exactly.)

With llmc/vec_exp.h both loops vectorise. The values are those of the tanh form
within fp32 rounding (and more accurate in the far negative tail, where
1 + tanh(u) cancels).
*/
#ifndef LLMC_GELU_H
#define LLMC_GELU_H

#include <math.h>
#include <stddef.h>
#include "vec_exp.h"

#define GELU_SCALING_FACTOR 0.7978845608028654f // sqrt(2 / pi)

// e = exp(-2u) of the tanh approximation at x: s = (1 + tanh(u)) / 2 = 1 / (1 + e)
static inline float gelu_exp(float x) {
    float u = GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
    return vec_expf(-2.0f * u);
}

// out, inp: (N)
static void gelu_forward(float *out, const float *inp, size_t N) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = x / (1.0f + gelu_exp(x));
    }
}

// dinp = dout * gelu'(inp), overwritten
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float e = gelu_exp(x);
        float s = 1.0f / (1.0f + e);
        float one_minus_s = 1.0f / (1.0f + 1.0f / e);
        float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (s + 2.0f * x * s * one_minus_s * du) * dout[i];
    }
}

#endif // LLMC_GELU_H
