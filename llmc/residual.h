/*
The residual stream: out = a + b. Its gradient flows unchanged to both inputs,
so the backward pass needs no kernel of its own (see gpt2_backward).
*/
#ifndef LLMC_RESIDUAL_H
#define LLMC_RESIDUAL_H

#include <stddef.h>

// out, inp1, inp2: (N)
static void residual_forward(float *out, const float *inp1, const float *inp2, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) { out[i] = inp1[i] + inp2[i]; }
}

#endif // LLMC_RESIDUAL_H
