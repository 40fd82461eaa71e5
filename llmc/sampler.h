/*
Sampling: the token a sample starts from, and the next token from the logits of
one position (temperature 1).
*/
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>

// The token a sample starts after, for a model of V tokens: the tokenizer's EOT
// (eot; -1 without a tokenizer), else GPT-2's EOT 50256 (gpt2_eot), else token 0
// when the vocabulary is too small to hold it. Never a token outside [0, V).
static int sample_start_token(int V, int eot, int gpt2_eot) {
    if (eot >= 0 && eot < V) { return eot; }
    if (gpt2_eot < V) { return gpt2_eot; }
    return 0;
}

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
