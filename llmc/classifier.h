/*
The classifier: the lm head (logits = lnf @ wte^T, the tied embedding), softmax
over the vocabulary and cross-entropy against the target, over chunks of tokens.

Why chunks: a token's logits are Vp floats (201 KB at GPT-2's vocabulary, more
than all the layers of a small model keep per token), so holding the logits of
every local token would make the classifier the largest activation and grow it
with T. Instead the tokens go through in chunks of chunk_rows rows (at most 32 MiB
of logits, classifier_chunk_rows: 160 rows at GPT-2's vocabulary), and only one
chunk's logits exist at a time. The size is a trade: the chunk's three matmuls get
thinner and OpenBLAS runs them slower (on an idle machine, 2 threads, T 1024: 160
rows took 1.09-1.15x the unchunked classifier's time at C 768 and 1.10x at C 128;
320 rows, 64 MiB, 1.02-1.06x and 1.04x; 40 rows about 1.8x; dev/bench/README.md), while a
larger chunk is filled only from more local tokens, so below them the classifier's
memory grows with T / cp (at 64 MiB, a cp 4 rank of T 1024 would hold 256 rows).

Why the classifier's backward runs in the forward pass: the gradient of a chunk
needs its probabilities, which are gone once the next chunk overwrites them. Two
ways out: recompute each chunk's logits in the backward pass (one more lm-head
matmul per step, the largest matmul of a small model), or do the backward of the
chunk right away while its probabilities are there, as llm.c's fused classifier
does. This file does the latter: with a gradient asked for, each chunk is
    logits = lnf_chunk @ wte^T                         (n, Vp)
    loss, dlogits = (softmax(logits) - onehot(target)) * dloss   in place
    dwte += dlogits^T @ lnf_chunk,  dlnf_chunk = dlogits @ wte
so the forward pass of a training step needs dloss up front: the trainers count
the valid targets of the global batch (a property of the batch alone) before it.

A target of IGNORE_INDEX (the C twin of PyTorch's -100; the sharder gives it to
pad slots) has loss 0 and gradient 0. The rows are Vp long (the vocabulary padded
for fast matmuls); only the first V entries are real, the rest get gradient 0.

The softmax of a row is one pass for the maximum and one fused pass that writes
exp(logit - max) and sums it, both over SOFTMAX_LANES independent lanes so that
the compiler vectorises them (and with vec_expf, not libm's scalar expf); the
lanes' sums are added in double. The loss is log(sum) - (logit[target] - max).
*/
#ifndef LLMC_CLASSIFIER_H
#define LLMC_CLASSIFIER_H

#include <math.h>
#include <stddef.h>
#include "matmul.h"
#include "vec_exp.h"

// the target of a token that must not count
#define IGNORE_INDEX (-100)

// the logits of one chunk take at most this much memory
#define CLASSIFIER_CHUNK_BYTES ((size_t)32 << 20)
#define SOFTMAX_LANES 16

// Chunks of rows are rounded down to a multiple of this: OpenBLAS's threaded sgemm
// gives each thread a share of the chunk's rows and runs its kernel on 4 at a time,
// the rest by a slower edge path. At 166 rows (two threads of 83) the logits and
// dlnf products ran at 163 and 159 GFLOP/s, at 160 rows at 178 and 177 (C 768,
// OpenBLAS 0.3.21, Haswell kernels); with 32, up to 8 threads get whole blocks.
#define CLASSIFIER_CHUNK_ALIGN 32

// Rows per chunk for a vocabulary of Vp: as many as fit CLASSIFIER_CHUNK_BYTES,
// rounded down to a multiple of CLASSIFIER_CHUNK_ALIGN where that leaves any, at
// least one, and no more than the N tokens there are.
static int classifier_chunk_rows(int Vp, size_t N) {
    size_t rows = CLASSIFIER_CHUNK_BYTES / ((size_t)Vp * sizeof(float));
    if (rows >= CLASSIFIER_CHUNK_ALIGN) { rows -= rows % CLASSIFIER_CHUNK_ALIGN; }
    if (rows < 1) { rows = 1; }
    if (rows > N) { rows = N; }
    return (int)rows;
}

// One token's row: returns its loss; with grad, turns the logits into
// dlogits = (probs - onehot(target)) * dloss in place.
// row: (Vp) logits, of which the first V are real
static float softmax_crossentropy_row(float *row, int target, int V, int Vp, float dloss, int grad) {
    int Vb = V - V % SOFTMAX_LANES;
    float lane_max[SOFTMAX_LANES];
    for (int k = 0; k < SOFTMAX_LANES; k++) { lane_max[k] = -INFINITY; }
    for (int i = 0; i < Vb; i += SOFTMAX_LANES) {
        for (int k = 0; k < SOFTMAX_LANES; k++) {
            lane_max[k] = row[i + k] > lane_max[k] ? row[i + k] : lane_max[k];
        }
    }
    float maxval = -INFINITY;
    for (int k = 0; k < SOFTMAX_LANES; k++) { maxval = lane_max[k] > maxval ? lane_max[k] : maxval; }
    for (int i = Vb; i < V; i++) { maxval = row[i] > maxval ? row[i] : maxval; }
    float target_logit = target == IGNORE_INDEX ? 0.0f : row[target] - maxval;
    float lane_sum[SOFTMAX_LANES];
    for (int k = 0; k < SOFTMAX_LANES; k++) { lane_sum[k] = 0.0f; }
    for (int i = 0; i < Vb; i += SOFTMAX_LANES) {
        for (int k = 0; k < SOFTMAX_LANES; k++) {
            float e = vec_expf(row[i + k] - maxval);
            row[i + k] = e;
            lane_sum[k] += e;
        }
    }
    double sum = 0.0;
    for (int k = 0; k < SOFTMAX_LANES; k++) { sum += lane_sum[k]; }
    for (int i = Vb; i < V; i++) {
        row[i] = vec_expf(row[i] - maxval);
        sum += row[i];
    }
    if (grad) {
        float scale = target == IGNORE_INDEX ? 0.0f : (float)(dloss / sum);
        for (int i = 0; i < V; i++) { row[i] *= scale; }
        for (int i = V; i < Vp; i++) { row[i] = 0.0f; }
        if (target != IGNORE_INDEX) { row[target] -= dloss; }
    }
    return target == IGNORE_INDEX ? 0.0f : (float)(log(sum) - target_logit);
}

// logits: (N, Vp) -> dlogits in place with grad   losses: (N)   targets: (N)
static void softmax_crossentropy_rows(float *logits, float *losses, const int *targets, int N, int V, int Vp,
                                      float dloss, int grad) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        losses[i] = softmax_crossentropy_row(logits + (size_t)i * Vp, targets[i], V, Vp, dloss, grad);
    }
}

// The losses of N tokens, chunk_rows at a time; with dlnf (not NULL) also the
// classifier's backward: dlnf = dloss * d(sum of losses)/dlnf (overwritten) and
// dwte += its part of the embedding gradient.
// losses: (N)   dlnf: (N, C) or NULL   dwte: (Vp, C)   logits: (chunk_rows, Vp) scratch
// lnf: (N, C)   wte: (Vp, C)   targets: (N)
static void classifier_forward(float *losses, float *dlnf, float *dwte, float *logits, const float *lnf,
                               const float *wte, const int *targets, float dloss, int N, int chunk_rows,
                               int C, int V, int Vp) {
    for (int start = 0; start < N; start += chunk_rows) {
        int n = N - start < chunk_rows ? N - start : chunk_rows;
        const float *x = lnf + (size_t)start * C;
        matmul_forward(logits, x, wte, NULL, 1, n, C, Vp);
        softmax_crossentropy_rows(logits, losses + start, targets + start, n, V, Vp, dloss, dlnf != NULL);
        if (dlnf != NULL) {
            float *dx = dlnf + (size_t)start * C;
            matmul_backward(dx, dwte, NULL, logits, x, wte, 1, n, C, Vp);
        }
    }
}

// The logits of one token. out: (Vp)   lnf: (C) the token's   wte: (Vp, C)
static void classifier_logits(float *out, const float *lnf, const float *wte, int C, int Vp) {
    matmul_forward(out, lnf, wte, NULL, 1, 1, C, Vp);
}

#endif // LLMC_CLASSIFIER_H
