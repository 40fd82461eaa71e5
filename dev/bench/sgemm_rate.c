/*
sgemm_rate: OpenBLAS's single-precision matrix product rate on this machine's
cores, the bar the CPU trainer's end-to-end speed is read against
(dev/bench/cpu_speed.sh): C = A B with A, B, C of N x N floats, the best of
REPEATS runs after one warm-up, in GFLOP/s (2 N^3 floating-point operations a run).

    make bench_sgemm
    OMP_NUM_THREADS=2 ./bench_sgemm          N 2048
    OMP_NUM_THREADS=2 ./bench_sgemm 4096

Output: one line, "sgemm N 2048: 197.3 GFLOP/s (best of 5, 87.1 ms)".
*/
#ifdef NO_BLAS
#error "bench_sgemm measures OpenBLAS's sgemm: build it without NO_BLAS=1, with OpenBLAS installed"
#endif
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../../llmc/utils.h"

#define REPEATS 5

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long N = 2048;
    char *end = NULL;
    if (argc == 2) { N = strtol(argv[1], &end, 10); }
    if (argc > 2 || (argc == 2 && (*end != '\0' || N < 1 || N > 32768))) {
        fprintf(stderr, "usage: %s [N: the matrices' size, 1 to 32768; default 2048]\n", argv[0]);
        return 1;
    }
    size_t n = (size_t)N * N;
    float *a = (float *)mallocCheck(n * sizeof(float)), *b = (float *)mallocCheck(n * sizeof(float));
    float *c = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { // small values whose products stay finite
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    double best = 1e30;
    for (int r = 0; r <= REPEATS; r++) { // run 0 is the warm-up
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)N, (int)N, 1.0f, a, (int)N, b, (int)N,
                    0.0f, c, (int)N);
        double t = now() - t0;
        if (r > 0 && t < best) { best = t; }
    }
    printf("sgemm N %ld: %.1f GFLOP/s (best of %d, %.1f ms)\n", N, 2.0 * N * N * N / best * 1e-9, REPEATS,
           best * 1e3);
    free(a);
    free(b);
    free(c);
    return 0;
}
