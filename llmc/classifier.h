/*
The classifier: softmax over the vocabulary and cross-entropy against the target,
fused and in place, as llm.c's GPU classifier does.

Forward turns the logits into probabilities in place and writes each token's loss.
Backward turns the probabilities into the logits' gradient in place:
    dlogits = (probs - onehot(target)) * dloss
A target of IGNORE_INDEX (the C twin of PyTorch's -100; the sharder gives it to
pad slots) has loss 0 and gradient 0.

The rows are Vp long (the vocabulary padded for fast matmuls); only the first V
entries are real, the rest get probability 0 and gradient 0.
*/
#ifndef LLMC_CLASSIFIER_H
#define LLMC_CLASSIFIER_H

#include <math.h>
#include <stddef.h>

// the target of a token that must not count
#define IGNORE_INDEX (-100)

// logits: (B, T, Vp) -> probabilities in place   losses: (B, T)   targets: (B, T)
static void softmax_crossentropy_forward(float *logits, float *losses, const int *targets,
                                         int B, int T, int V, int Vp) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float *row = logits + (size_t)bt * Vp;
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++) { if (row[i] > maxval) { maxval = row[i]; } }
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            row[i] = expf(row[i] - maxval);
            sum += row[i];
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++) { row[i] *= inv; }
        for (int i = V; i < Vp; i++) { row[i] = 0.0f; }
        int target = targets[bt];
        losses[bt] = target == IGNORE_INDEX ? 0.0f : -logf(row[target]);
    }
}

// probs: (B, T, Vp) -> dlogits in place. dloss is the weight of one token's loss
// in the mean (1 / number of valid targets of the global batch).
static void softmax_crossentropy_backward(float *probs, const int *targets, float dloss,
                                          int B, int T, int Vp) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float *row = probs + (size_t)bt * Vp;
        int target = targets[bt];
        if (target == IGNORE_INDEX) {
            for (int i = 0; i < Vp; i++) { row[i] = 0.0f; }
            continue;
        }
        for (int i = 0; i < Vp; i++) { row[i] *= dloss; }
        row[target] -= dloss;
    }
}

#endif // LLMC_CLASSIFIER_H
