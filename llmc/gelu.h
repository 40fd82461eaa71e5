/*
GELU, tanh approximation (as GPT-2).
*/
#ifndef LLMC_GELU_H
#define LLMC_GELU_H

#include <math.h>
#include <stddef.h>

#define GELU_SCALING_FACTOR 0.7978845608028654f // sqrt(2 / pi)

// out, inp: (N)
static void gelu_forward(float *out, const float *inp, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
}

// dinp = dout * gelu'(inp), overwritten
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
        float tanh_out = tanhf(tanh_arg);
        float cosh_out = coshf(tanh_arg);
        float sech_out = 1.0f / (cosh_out * cosh_out);
        float local_grad = 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local_grad * dout[i];
    }
}

#endif // LLMC_GELU_H
