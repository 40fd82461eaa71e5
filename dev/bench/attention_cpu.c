/*
attention_cpu: the time of one block pair of the CPU block attention
(cp/attention_block.h), the tiled BLAS version (cp/attention_block_tiled.h)
against the plain loops.

    make bench_attention_cpu
    OMP_NUM_THREADS=2 ./bench_attention_cpu                      T_local 1024 2048 4096 8192
    OMP_NUM_THREADS=2 ./bench_attention_cpu -t 1024 -v tiled     one length, one version

A block pair is what the ring computes once per step and layer: the local queries
of one rank against one K/V block, B = 1, NH heads of HS (default 4 x 64), T_local
tokens on both sides, random data. Two blocks:
    full      the queries' global indices all after the keys' (a block from an
              earlier rank under contiguous): every pair visible, no mask
    diagonal  the rank's own block: causal, about half of the pairs visible
Forward is attend_block_forward_*, the block's (o, lse) merged into an empty state;
backward attend_block_backward_* with the forward's lse (dQ and the block's dK,
dV; D = rowsum(dO O) is computed once beforehand, as attention_backward_begin
does). Each is repeated until it has run for -s seconds (default 1, at least once),
and the fastest run is reported, in ms of wall time, and beside it the CPU time of
that run over all threads (on an idle machine about threads x wall; more wall
than CPU / threads means other processes took the cores). Output: one line per
(T, block, version).
dev/bench/attention_torch.py times PyTorch's attention on the same shapes.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "../../cp/attention_block_tiled.h"
#include "../../llmc/rand.h"

#ifdef NO_BLAS
#error "bench_attention_cpu compares the tiled BLAS attention with the loops: build it with OpenBLAS"
#endif

static double clock_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A measurement: the fastest run's wall time and the CPU time of that run, in ms.
typedef struct {
    double wall_ms, cpu_ms;
} Timing;

// runs fn(arg) until min_seconds of wall time have passed (at least once)
static Timing fastest(void (*fn)(void *), void *arg, double min_seconds) {
    Timing best = {1e30, 0.0};
    double spent = 0.0;
    for (int run = 0; run == 0 || spent < min_seconds; run++) {
        double w0 = clock_seconds(CLOCK_MONOTONIC), c0 = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
        fn(arg);
        double wall = clock_seconds(CLOCK_MONOTONIC) - w0, cpu = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
        spent += wall;
        if (wall * 1e3 < best.wall_ms) { best.wall_ms = wall * 1e3; best.cpu_ms = cpu * 1e3; }
    }
    return best;
}

static void fill(Rng *rng, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) { x[i] = 2.0f * rng_uniform(rng) - 1.0f; }
}

typedef struct {
    const char *name;
    void (*forward)(AttentionQueries *, const KVBlock *, float *);
    void (*backward)(AttentionQueries *, const KVBlock *, const float *, float *);
} Version;

static const Version versions[] = {
    {"tiled", attend_block_forward_tiled, attend_block_backward_tiled},
    {"loops", attend_block_forward_loops, attend_block_backward_loops},
};

// One version on one block: what a run of its forward or backward needs.
typedef struct {
    const Version *ver;
    AttentionQueries *aq;
    const KVBlock *blk;
    float *lse, *dkv;
    size_t dkv_floats;
} BlockRun;

static void run_forward(void *arg) {
    BlockRun *r = (BlockRun *)arg;
    size_t rows = (size_t)r->aq->B * r->aq->NH * r->aq->T;
    for (size_t i = 0; i < rows; i++) { r->lse[i] = -INFINITY; } // an empty state: this block first
    r->ver->forward(r->aq, r->blk, r->lse);
}

static void run_backward(void *arg) {
    BlockRun *r = (BlockRun *)arg;
    memset(r->dkv, 0, r->dkv_floats * sizeof(float));
    r->ver->backward(r->aq, r->blk, r->lse, r->dkv);
}

// forward, then backward from the forward's O and lse
static void time_block(BlockRun *r, double min_seconds, Timing *forward, Timing *backward) {
    AttentionQueries *aq = r->aq;
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    int HS = aq->C / aq->NH;
    *forward = fastest(run_forward, r, min_seconds);
    // what backward needs of the forward: D = rowsum(dO * O)
    for (size_t i = 0; i < rows; i++) { aq->drow[i] = dot(aq->dout + i * HS, aq->o + i * HS, HS); }
    *backward = fastest(run_backward, r, min_seconds);
}

static void bench_length(int T, int NH, int HS, const char *only, double min_seconds) {
    int B = 1, C = NH * HS;
    size_t bytes = 0;
    AttentionQueries aq;
    attention_queries_init(&aq, B, T, C, NH, &bytes);
    size_t n = (size_t)B * T * C;
    void *kv_buf = mallocCheck(kv_block_bytes(B, T, C));
    KVBlock blk = kv_block_view(kv_buf, B, NH, T, HS);
    float *lse = (float *)mallocCheck((size_t)B * NH * T * sizeof(float));
    float *dkv = (float *)mallocCheck(dkv_block_bytes(B, T, C));
    int *q_index = (int *)mallocCheck((size_t)T * sizeof(int));
    int *zeros = (int *)callocCheck((size_t)T, sizeof(int));
    Rng rng;
    rng_seed(&rng, 42);
    fill(&rng, aq.q, n); fill(&rng, blk.k, n); fill(&rng, blk.v, n); fill(&rng, aq.dout, n);
    memset(aq.dq, 0, n * sizeof(float));
    aq.document = zeros;
    memcpy(blk.document, zeros, (size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) { blk.index[t] = t; }
    const char *blocks[] = {"full", "diagonal"};
    for (int which = 0; which < 2; which++) {
        // full: the queries sit right after the keys; diagonal: the same tokens
        for (int t = 0; t < T; t++) { q_index[t] = which == 0 ? T + t : t; }
        aq.index = q_index;
        for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]); v++) {
            if (only && strcmp(only, versions[v].name) != 0) { continue; }
            BlockRun run = {&versions[v], &aq, &blk, lse, dkv, 2 * n};
            Timing fwd, bwd;
            time_block(&run, min_seconds, &fwd, &bwd);
            printf("T_local %5d  %-8s  %-5s  forward %10.2f ms (cpu %10.2f)  backward %10.2f ms (cpu %10.2f)\n", T,
                   blocks[which], versions[v].name, fwd.wall_ms, fwd.cpu_ms, bwd.wall_ms, bwd.cpu_ms);
            fflush(stdout);
        }
    }
    attention_queries_free(&aq);
    free(kv_buf); free(lse); free(dkv); free(q_index); free(zeros);
}

static const char *usage = "usage: bench_attention_cpu [-t T_local[,T_local...]] [-n heads] [-h head size] "
                           "[-v tiled|loops] [-s seconds per measurement]";

// a positive int, or the usage line
static int positive_int(const char *flag, const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v <= 0 || v > 1 << 20) { fatal("%s '%s': a positive integer\n%s", flag, s, usage); }
    return (int)v;
}

int main(int argc, char **argv) {
    char lengths[256] = "1024,2048,4096,8192";
    int NH = 4, HS = 64;
    const char *only = NULL;
    double min_seconds = 1.0;
    if (argc % 2 == 0) { fatal("%s", usage); }
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *flag = argv[i], *value = argv[i + 1];
        if (strcmp(flag, "-t") == 0) {
            if (strlen(value) >= sizeof(lengths)) { fatal("-t: list too long\n%s", usage); }
            strcpy(lengths, value);
        } else if (strcmp(flag, "-n") == 0) { NH = positive_int(flag, value); }
        else if (strcmp(flag, "-h") == 0) { HS = positive_int(flag, value); }
        else if (strcmp(flag, "-v") == 0) {
            if (strcmp(value, "tiled") != 0 && strcmp(value, "loops") != 0) { fatal("-v '%s': tiled or loops", value); }
            only = value;
        } else if (strcmp(flag, "-s") == 0) {
            char *end;
            min_seconds = strtod(value, &end);
            if (end == value || *end != '\0' || !(min_seconds >= 0.0)) { fatal("-s '%s': seconds >= 0\n%s", value, usage); }
        } else { fatal("unknown flag %s\n%s", flag, usage); }
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("# block attention, B 1, NH %d, HS %d, %d OpenMP threads, tiles %d queries x %d keys\n", NH, HS, threads, ATTN_TILE_Q, ATTN_TILE_K);
    for (char *tok = strtok(lengths, ","); tok != NULL; tok = strtok(NULL, ",")) {
        bench_length(positive_int("-t", tok), NH, HS, only, min_seconds);
    }
    return 0;
}
