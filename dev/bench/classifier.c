/*
classifier: the time of the CPU classifier of a training step (llmc/classifier.h:
lm-head matmul, softmax + cross-entropy + dlogits, dwte and dlnf matmuls) against
the number of token rows per chunk, and the logits memory each chunk size holds.
This is what CLASSIFIER_CHUNK_BYTES was chosen from: thin chunks make OpenBLAS's
three matmuls slower, a chunk of all N tokens is the unchunked computation.

    make bench_classifier
    OMP_NUM_THREADS=2 ./bench_classifier              d2's shape: N 1024, C 128
    OMP_NUM_THREADS=2 ./bench_classifier 1024 768     GPT-2 124M's channels

N tokens (default 1024), C channels (default 128), GPT-2's vocabulary (V 50257,
Vp 50304), random data. Each chunk size runs REPEATS times after one warm-up run;
the best time is printed, and the softmax's share of it (the rows alone).
Output: "rows  logits MiB  classifier ms  softmax ms" per chunk size.
*/
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../../llmc/classifier.h"
#include "../../llmc/rand.h"
#include "../../llmc/utils.h"

#define REPEATS 3
#define V 50257
#define VP 50304

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *random_floats(Rng *rng, size_t n, float scale) {
    float *x = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = scale * (2.0f * rng_uniform(rng) - 1.0f); }
    return x;
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 1024;
    int C = argc > 2 ? atoi(argv[2]) : 128;
    if (N < 1 || C < 1) { fatal("usage: %s [N tokens] [C channels]", argv[0]); }
    Rng rng;
    rng_seed(&rng, 1);
    float *lnf = random_floats(&rng, (size_t)N * C, 1.0f), *wte = random_floats(&rng, (size_t)VP * C, 0.1f);
    float *dwte = (float *)callocCheck((size_t)VP * C, sizeof(float));
    float *dlnf = (float *)mallocCheck((size_t)N * C * sizeof(float));
    float *losses = (float *)mallocCheck((size_t)N * sizeof(float));
    int *targets = (int *)mallocCheck((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) { targets[i] = (int)(rng_uniform(&rng) * V) % V; }
    printf("# N %d tokens, C %d, V %d (Vp %d); best of %d\n", N, C, V, VP, REPEATS);
    printf("# %6s %12s %15s %12s\n", "rows", "logits MiB", "classifier ms", "softmax ms");
    const int chunks[] = {40, 80, 160, 166, 320, 1024, 4096};
    for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
        int rows = chunks[k] < N ? chunks[k] : N;
        float *logits = (float *)mallocCheck((size_t)rows * VP * sizeof(float));
        double best = 1e30, best_softmax = 1e30;
        for (int rep = 0; rep <= REPEATS; rep++) {
            double t0 = now();
            classifier_forward(losses, dlnf, dwte, logits, lnf, wte, targets, 1e-3f, N, rows, C, V, VP);
            double t1 = now();
            // the softmax alone, over as many rows as the classifier did, chunk by chunk
            double softmax = 0.0;
            for (int start = 0; start < N; start += rows) {
                int n = N - start < rows ? N - start : rows;
                matmul_forward(logits, lnf + (size_t)start * C, wte, NULL, 1, n, C, VP);
                double s0 = now();
                softmax_crossentropy_rows(logits, losses + start, targets + start, n, V, VP, 1e-3f, 1);
                softmax += now() - s0;
            }
            if (rep > 0 && t1 - t0 < best) { best = t1 - t0; }
            if (rep > 0 && softmax < best_softmax) { best_softmax = softmax; }
        }
        printf("  %6d %12.1f %15.1f %12.1f\n", rows, (double)rows * VP * sizeof(float) / (1 << 20), best * 1e3,
               best_softmax * 1e3);
        free(logits);
        if (rows == N) { break; }
    }
    free(lnf); free(wte); free(dwte); free(dlnf); free(losses); free(targets);
    return 0;
}
