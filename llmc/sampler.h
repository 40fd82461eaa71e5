/*
Sampling the next token from the logits of one position (temperature 1).
*/
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>

// logits: (V) of the position; coin: uniform in [0, 1)
static int sample_softmax(const float *logits, int V, float coin) {
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) { if (logits[i] > maxval) { maxval = logits[i]; } }
    double norm = 0.0;
    for (int i = 0; i < V; i++) { norm += expf(logits[i] - maxval); }
    double target = coin * norm;
    double cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += expf(logits[i] - maxval);
        if (target < cdf) { return i; }
    }
    return V - 1; // rounding left the coin past the end
}

#endif // LLMC_SAMPLER_H
