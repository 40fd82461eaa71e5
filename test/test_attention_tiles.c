/*
Unit test of the tiled BLAS block attention (attend_block_*_tiled,
cp/attention_block_tiled.h) against the plain loops (attend_block_*_loops in
cp/attention_block.h, the NO_BLAS reference, itself checked against
test/lib/reference_attention.h by test_attention_algorithms).

One rank's view of a ring, in one process: the local queries of rank `rank` meet the
K/V blocks of every rank of a cp group of np, own block first, as the ring meets them,
each visit merged into (O, LSE); the backward meets them again with the final LSE
and dQ accumulates, each block's dK | dV in its own buffer. Both versions run from
the same inputs; O, LSE, dQ and every block's dK, dV must agree.

Coordinates come from the layouts' own code: cp_local_indices (identity,
contiguous, round_robin, striped: strided indices, so every tile spans the whole
row and the diagonal tiles of every block are masked) and cp_row_layout (packed, documents split head-tail, pad
slots with document -1), with documents opened at a few global positions (row 0)
or one document (row 1). Local lengths cross the tiles (64 x 64) oddly: 1,
63, 65, 100, 191 = 3*64 - 1 (contiguous, striped), 2, 66, 130, 190 (round_robin and packed
need even lengths), so tiles are partial, and tiles are skipped, fully visible and
masked. Head sizes 8, 24, 64, 80.

Tolerance |tiled - loops| <= 1e-5 + 1e-5 |loops|. Both are fp32 computations of
the same sums in a different order: sgemm's dot products and sums over up to
4 * 191 keys against one running sum per row; the online softmax rescales partial
sums by exp(m - m') (a few ulps) where the loops use one max; vec_expf is within
2 ulp of expf. Inputs are O(1) (q, k in U(-2, 2) so that the scores spread over
about +-5 and the running max changes from tile to tile; v, dO in U(-1, 1)), so
O, dQ, dK, dV are O(1) and their reassociation error is ~ sqrt(n) * 6e-8 ~ 2e-6;
1e-5 leaves a margin, while a wrong mask, a lost tile, a missed rescale or a wrong
transpose shows up at 1e-2 or more.

The tiled version must also be deterministic: it is run with 1 and with 3 OpenMP
threads and must give the same bits.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "cp/attention_block_tiled.h"
#include "cp/layout.h"
#include "test/lib/test_utils.h"

#define B 2
#define NH 3
#define MAX_NP 4
#define ATOL 1e-5
#define RTOL 1e-5

// the worst |tiled - loops| over all cases, for the log: O, LSE, dQ, dK, dV
#define NUM_QUANTITIES 5
static const char *quantity_names[NUM_QUANTITIES] = {"O", "LSE", "dQ", "dK", "dV"};
static double worst_diff[NUM_QUANTITIES];

// The global index and document of each local token of `rank`, one row.
// row: which batch row (row 0 has several documents when `documents`, row 1 one)
// index, document: (Tl)
static void row_coordinates(CpLayoutKind kind, int np, int rank, int Tl, int documents, int row, Rng *rng,
                            int *index, int *document) {
    int P = np * Tl;
    if (kind != CP_LAYOUT_PACKED) {
        cp_local_indices(kind, P, np, rank, index);
        // documents open at a few global positions: 0, P/3, P/3 + 1, 2P/3 + 5, P - 1
        int opens[] = {P / 3, P / 3 + 1, 2 * P / 3 + 5, P - 1};
        for (int i = 0; i < Tl; i++) {
            int d = 0;
            for (int k = 0; k < 4; k++) { d += documents && row == 0 && opens[k] > 0 && index[i] >= opens[k]; }
            document[i] = d;
        }
        return;
    }
    // packed: documents of random lengths whose padded sizes fit in P, the rest pad
    int *docs = (int *)mallocCheck((size_t)P * sizeof(int));
    int *slot_original = (int *)mallocCheck((size_t)P * sizeof(int));
    int T = 0, used = 0, n_docs = 0;
    for (;;) {
        int len = row == 1 ? P - 1 : 1 + rand_below(rng, P / 3 + 1);
        int padded = (len + 2 * np - 1) / (2 * np) * (2 * np);
        if (used + padded > P) { break; }
        for (int i = 0; i < len; i++) { docs[T + i] = n_docs; }
        T += len; used += padded; n_docs++;
        if (row == 1) { break; }
    }
    CHECK(T > 0, "packed row %d of P %d holds no document", row, P);
    cp_row_layout(kind, docs, T, P, np, CP_SOLVER_DEFAULT_CHUNK, rank, index, slot_original);
    for (int i = 0; i < Tl; i++) {
        int original = slot_original[index[i]];
        document[i] = original >= 0 ? docs[original] : -1;
    }
    free(docs); free(slot_original);
}

// Everything one run needs: the queries of `rank` and the np K/V blocks.
typedef struct {
    int np, rank, Tl, HS;
    int index[MAX_NP][B * 256], document[MAX_NP][B * 256]; // (B, Tl) per rank
    float *q, *k[MAX_NP], *v[MAX_NP], *dout;               // (B, NH, Tl, HS)
} Inputs;

// The outputs of one run: O, LSE after the forward over every block, dQ and each
// block's dK | dV after the backward.
typedef struct {
    float *o, *lse, *dq;   // (B, NH, Tl, HS), (B, NH, Tl), (B, NH, Tl, HS)
    float *dkv[MAX_NP];    // 2 x (B, NH, Tl, HS) per block
} Results;

static void results_init(Results *r, const Inputs *in) {
    size_t n = (size_t)B * NH * in->Tl * in->HS;
    r->o = (float *)mallocCheck(n * sizeof(float));
    r->lse = (float *)mallocCheck((size_t)B * NH * in->Tl * sizeof(float));
    r->dq = (float *)mallocCheck(n * sizeof(float));
    for (int s = 0; s < in->np; s++) { r->dkv[s] = (float *)mallocCheck(2 * n * sizeof(float)); }
}

static void results_free(Results *r, int np) {
    free(r->o); free(r->lse); free(r->dq);
    for (int s = 0; s < np; s++) { free(r->dkv[s]); }
}

typedef void (*BlockForward)(AttentionQueries *, const KVBlock *, float *);
typedef void (*BlockBackward)(AttentionQueries *, const KVBlock *, const float *, float *);

// The ring's order of blocks for `rank`: step s meets the block of (rank - s) mod np.
static int source_of(const Inputs *in, int step) { return (in->rank - step + in->np) % in->np; }

// Runs one version through every block, forward then backward. The backward takes
// O and LSE from `fwd_out` (the loops' forward), so both backwards see the same O.
static void run(const Inputs *in, BlockForward forward, BlockBackward backward, const Results *fwd_out,
                Results *r) {
    int Tl = in->Tl, HS = in->HS, C = NH * HS;
    size_t n = (size_t)B * NH * Tl * HS, rows = (size_t)B * NH * Tl;
    size_t bytes = 0;
    AttentionQueries aq;
    attention_queries_init(&aq, B, Tl, C, NH, &bytes);
    aq.index = in->index[in->rank];
    aq.document = in->document[in->rank];
    memcpy(aq.q, in->q, n * sizeof(float));
    KVBlock blk[MAX_NP];
    for (int s = 0; s < in->np; s++) {
        blk[s].k = in->k[s]; blk[s].v = in->v[s];
        blk[s].index = (int *)in->index[s]; blk[s].document = (int *)in->document[s];
    }
    for (size_t i = 0; i < rows; i++) { r->lse[i] = -INFINITY; }
    for (int step = 0; step < in->np; step++) { forward(&aq, &blk[source_of(in, step)], r->lse); }
    memcpy(r->o, aq.o, n * sizeof(float));

    const float *o = fwd_out ? fwd_out->o : r->o, *lse = fwd_out ? fwd_out->lse : r->lse;
    memcpy(aq.o, o, n * sizeof(float));
    memcpy(aq.dout, in->dout, n * sizeof(float));
    for (size_t i = 0; i < rows; i++) { aq.drow[i] = dot(aq.dout + i * HS, aq.o + i * HS, HS); }
    memset(aq.dq, 0, n * sizeof(float));
    for (int step = 0; step < in->np; step++) {
        int src = source_of(in, step);
        memset(r->dkv[src], 0, 2 * n * sizeof(float));
        backward(&aq, &blk[src], lse, r->dkv[src]);
    }
    memcpy(r->dq, aq.dq, n * sizeof(float));
    attention_queries_free(&aq);
}

static void compare(const float *got, const float *expected, size_t n, int quantity, const char *what) {
    CloseCheck cc;
    close_begin(&cc, ATOL, RTOL, "%s: %s", what, quantity_names[quantity]);
    for (size_t i = 0; i < n; i++) {
        close_add(&cc, i, got[i], expected[i]);
        double d = fabs((double)got[i] - expected[i]);
        if (d > worst_diff[quantity]) { worst_diff[quantity] = d; }
    }
    close_end(&cc);
}

static void check_same_bits(const Results *a, const Results *b, const Inputs *in, const char *what) {
    size_t n = (size_t)B * NH * in->Tl * in->HS, rows = (size_t)B * NH * in->Tl;
    CHECK(memcmp(a->o, b->o, n * sizeof(float)) == 0, "%s: O differs between 1 and 3 threads", what);
    CHECK(memcmp(a->lse, b->lse, rows * sizeof(float)) == 0, "%s: LSE differs between 1 and 3 threads", what);
    CHECK(memcmp(a->dq, b->dq, n * sizeof(float)) == 0, "%s: dQ differs between 1 and 3 threads", what);
    for (int s = 0; s < in->np; s++) {
        CHECK(memcmp(a->dkv[s], b->dkv[s], 2 * n * sizeof(float)) == 0,
              "%s: dK | dV of block %d differs between 1 and 3 threads", what, s);
    }
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static void run_case(CpLayoutKind kind, int np, int rank, int Tl, int documents, int HS) {
    CHECK(np <= MAX_NP && Tl <= 256, "case too large");
    char what[160];
    snprintf(what, sizeof(what), "%s np %d rank %d Tl %d HS %d%s", cp_layout_names[kind], np, rank, Tl, HS,
             documents ? " documents" : "");
    Inputs in;
    in.np = np; in.rank = rank; in.Tl = Tl; in.HS = HS;
    Rng rng;
    rng_seed(&rng, 7u + 131u * (unsigned)Tl + 17u * (unsigned)HS + 3u * (unsigned)rank + (unsigned)kind);
    for (int s = 0; s < np; s++) {
        for (int b = 0; b < B; b++) {
            // packed draws its documents per row: the same for every rank of the group
            Rng row_rng;
            rng_seed(&row_rng, 1000u + (unsigned)b + 10u * (unsigned)Tl);
            row_coordinates(kind, np, s, Tl, documents, b, &row_rng, in.index[s] + b * Tl, in.document[s] + b * Tl);
        }
    }
    size_t n = (size_t)B * NH * Tl * HS;
    in.q = (float *)mallocCheck(n * sizeof(float));
    in.dout = (float *)mallocCheck(n * sizeof(float));
    fill_uniform(&rng, in.q, n, -2.0f, 2.0f);
    fill_uniform(&rng, in.dout, n, -1.0f, 1.0f);
    for (int s = 0; s < np; s++) {
        in.k[s] = (float *)mallocCheck(n * sizeof(float));
        in.v[s] = (float *)mallocCheck(n * sizeof(float));
        fill_uniform(&rng, in.k[s], n, -2.0f, 2.0f);
        fill_uniform(&rng, in.v[s], n, -1.0f, 1.0f);
    }

    Results loops, tiled, tiled_3;
    results_init(&loops, &in); results_init(&tiled, &in); results_init(&tiled_3, &in);
    set_threads(1);
    run(&in, attend_block_forward_loops, attend_block_backward_loops, NULL, &loops);
    run(&in, attend_block_forward_tiled, attend_block_backward_tiled, &loops, &tiled);
    set_threads(3);
    run(&in, attend_block_forward_tiled, attend_block_backward_tiled, &loops, &tiled_3);
    set_threads(1);

    size_t rows = (size_t)B * NH * Tl;
    for (size_t i = 0; i < rows; i++) { CHECK(isfinite(loops.lse[i]), "%s: loops LSE[%zu] not finite", what, i); }
    compare(tiled.o, loops.o, n, 0, what);
    compare(tiled.lse, loops.lse, rows, 1, what);
    compare(tiled.dq, loops.dq, n, 2, what);
    for (int s = 0; s < np; s++) {
        compare(tiled.dkv[s], loops.dkv[s], n, 3, what);
        compare(tiled.dkv[s] + n, loops.dkv[s] + n, n, 4, what);
    }
    check_same_bits(&tiled, &tiled_3, &in, what);

    results_free(&loops, np); results_free(&tiled, np); results_free(&tiled_3, np);
    free(in.q); free(in.dout);
    for (int s = 0; s < np; s++) { free(in.k[s]); free(in.v[s]); }
}

int main(void) {
    CHECK(ATTN_TILE_Q == 64 && ATTN_TILE_K == 64, "the lengths below are chosen around tiles of 64; ATTN_TILE_Q, "
          "ATTN_TILE_K are %d, %d", ATTN_TILE_Q, ATTN_TILE_K);
    int head_sizes[] = {8, 24, 64, 80};
    int odd_lengths[] = {1, 63, 65, 100, 191};
    int even_lengths[] = {2, 66, 130, 190};
    int cases = 0;
    for (int h = 0; h < 4; h++) {
        int HS = head_sizes[h];
        for (int i = 0; i < 5; i++) {
            run_case(CP_LAYOUT_IDENTITY, 1, 0, odd_lengths[i], 0, HS);
            run_case(CP_LAYOUT_CONTIGUOUS, 3, 1, odd_lengths[i], i % 2, HS); // blocks before (full), after (skip)
            run_case(CP_LAYOUT_STRIPED, 3, i % 3, odd_lengths[i], i % 2, HS); // blocks interleaved with the rank's
            cases += 3;
        }
        for (int i = 0; i < 4; i++) {
            run_case(CP_LAYOUT_ROUND_ROBIN, 2, i % 2, even_lengths[i], 0, HS);
            run_case(CP_LAYOUT_ROUND_ROBIN, 4, 2, even_lengths[i], 1, HS);
            run_case(CP_LAYOUT_PACKED, 2, 1, even_lengths[i], 1, HS);
            cases += 3;
        }
    }
    printf("test_attention_tiles: OK, %d cases; worst |tiled - loops|:", cases);
    for (int q = 0; q < NUM_QUANTITIES; q++) { printf(" %s %.2g", quantity_names[q], worst_diff[q]); }
    printf("\n");
    return 0;
}
