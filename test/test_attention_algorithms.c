/*
MPI test of the context-parallel attention algorithms, ring attention
(cp/ring_attention.h), all-gather attention (cp/allgather_attention.h), Ulysses
(U = np), the Ulysses x ring hybrid (cp/ulysses_attention.h; U 2 x R 2 at
np 4, U 1 x R np otherwise) and group-cast (cp/groupcast_attention.h, every
stage count 1..np-1), against the single-process reference (test/lib/reference_attention.h, itself checked by finite
differences in test_attention_reference.c).

Every rank draws the same Q, K, V and dO for the whole (B, T) sequence, computes
the reference on its own copy in double, then shards them with the layout
(cp_shard_batch, cp_shard_tokens with zero fills), runs each algorithm's forward
and backward (through the AttentionVerbs the trainers call) over a Comm of all
ranks, gathers O, LSE, dQ, dK, dV back to global order (cp_gather_tokens, trim)
and compares element by element, for layouts identity (np 1), contiguous,
round_robin, striped, packed and solver (whole chunks of 64 in any order over the
ranks), T = 3, 7, 16, 37, 100 (most need padding), and with
document masking (an EOT token opens a new document, as in cp_row_documents).

Tolerance against the reference |got - ref| <= 1e-5 + 1e-5 |ref|. Both run in
fp32: each output is a sum of at most T = 100 terms of size O(1) (inputs
U(-1, 1), HS = 8, so scores are below ~3 and LSE below ~8), whose rounding error
is ~ sqrt(T) * 6e-8 * O(1) ~ 1e-6, and the block-wise log-sum-exp merges add a
few ulps of LSE. The absolute part covers the many O(1) values, the relative part
the few larger dK, dV and LSE.

The all-gather must also equal the ring closely, |ag - ring| <= 1e-6 + 1e-6 |ring|:
it meets the same blocks in the same order with the same block functions, so O,
LSE and dQ have the same rounding; dK and dV differ only in the order in which the
cp ranks' shares are summed (the ring adds them as the accumulator travels, the
reduce-scatter in its own order), a few fp32 ulps of values below ~10.

Ulysses and the hybrid attend a row ordered otherwise, in blocks of other sizes,
so they are held to the reference's tolerance only.

Group-cast meets the same blocks as the all-gather, less the tokens no query of
the rank sees, and sums dK, dV in its own fixed order: the reference's tolerance,
and the ring's closeness (1e-6) too. Its stage counts change when a transfer is
waited for, never what is computed: every S gives the bits of S = 1. And it sends
what its plan says: the bytes it posts to all_to_all_v (a Comm that counts them
around the MPI one), forward and backward, are groupcast_cost's
(cp/attention_cost.h; the plan itself is checked pair by pair in
test_groupcast_plan.c).

It also checks, without running anything, that the sub-block visibility tables
skip what the layouts say must be skipped (cp/block_mask.h), see
check_block_skipping.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/allgather_attention.h"
#include "cp/attention_cost.h"
#include "cp/comm_mpi.h"
#include "cp/groupcast_attention.h"
#include "cp/mesh.h"
#include "cp/ring_attention.h"
#include "cp/sharder.h"
#include "cp/ulysses_attention.h"
#include "test/lib/reference_attention.h"
#include "test/lib/test_comm.h"
#include "test/lib/test_utils.h"

#define B 2
#define NH 12 // divisible by every np of the suite (1 to 4): Ulysses gives each rank NH / np heads
#define HS 8
#define C (NH * HS)
#define MAX_SEQ_LEN 128
#define DOC_TOKEN 3
#define ATOL 1e-5
#define RTOL 1e-5
#define ATOL_RING 1e-6 // all-gather against the ring
#define RTOL_RING 1e-6

enum { RING, ALLGATHER, ULYSSES, HYBRID, GROUPCAST, NUM_ALGORITHMS };
static const char *algorithm_names[NUM_ALGORITHMS] = {"ring", "allgather", "ulysses", "hybrid", "groupcast"};
#define NUM_QUANTITIES 5
static const char *quantity_names[NUM_QUANTITIES] = {"O", "LSE", "dQ", "dK", "dV"};
// the worst |got - ref| of each algorithm and quantity over all cases, and of
// |allgather - ring|, for the log
static double worst_diff[NUM_ALGORITHMS][NUM_QUANTITIES];
static double worst_vs_ring[NUM_QUANTITIES];
static double worst_groupcast_vs_ring[NUM_QUANTITIES];
static int groupcast_runs;

// the bytes posted to all_to_all_v since the count was last cleared
static size_t posted_bytes;

static void *counting_all_to_all_v_start(Comm *comm, const void *send_buf, const size_t *send_bytes,
                                         const size_t *send_offset, void *recv_buf, const size_t *recv_bytes,
                                         const size_t *recv_offset) {
    for (int j = 0; j < comm->size; j++) { posted_bytes += send_bytes[j]; }
    return comm_mpi_all_to_all_v_start(comm, send_buf, send_bytes, send_offset, recv_buf, recv_bytes, recv_offset);
}

// Document of every token of a row, counted here: the number of document tokens at
// positions 1..t (one at t = 0 opens document 0, which is open anyway).
static void count_documents(const int *row, int T, int *doc) {
    for (int t = 0; t < T; t++) {
        int n = 0;
        for (int s = 1; s <= t; s++) { n += row[s] == DOC_TOKEN; }
        doc[t] = n;
    }
}

// Random tokens that are never the document token; with documents, a few document
// tokens at fixed places: at t = 0, two adjacent ones, one at the very end.
static void make_inputs(Rng *rng, int *inputs, int T, int with_documents) {
    for (int i = 0; i < B * T; i++) { inputs[i] = DOC_TOKEN + 1 + rand_below(rng, 40); }
    if (!with_documents) { return; }
    int row0[] = {0, 9, 10, 23}, row1[] = {4, T / 2, T - 1};
    for (int k = 0; k < 4; k++) { if (row0[k] < T) { inputs[row0[k]] = DOC_TOKEN; } }
    for (int k = 0; k < 3; k++) { inputs[T + row1[k]] = DOC_TOKEN; }
}

// The five quantities of one run in global order: O (B, T, C), LSE (B, NH, T),
// and dQ, dK, dV each (B, T, C), split out of dqkv to name the one that differs.
typedef struct {
    double *q[NUM_QUANTITIES];
    size_t n[NUM_QUANTITIES];
} Outputs;

static void outputs_init(Outputs *o, int T) {
    size_t nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    for (int q = 0; q < NUM_QUANTITIES; q++) {
        o->n[q] = q == 1 ? nlse : nout;
        o->q[q] = (double *)mallocCheck(o->n[q] * sizeof(double));
    }
}

static void outputs_free(Outputs *o) {
    for (int q = 0; q < NUM_QUANTITIES; q++) { free(o->q[q]); }
}

// out: (B, T, C)   lse: (B, NH, T)   dqkv: (B, T, 3C)
static void outputs_fill(Outputs *o, const double *out, const double *lse, const double *dqkv, int T) {
    memcpy(o->q[0], out, o->n[0] * sizeof(double));
    memcpy(o->q[1], lse, o->n[1] * sizeof(double));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        for (int which = 0; which < 3; which++) {
            for (int c = 0; c < C; c++) { o->q[2 + which][bt * C + c] = dqkv[bt * 3 * C + which * C + c]; }
        }
    }
}

// a new double array holding x: (n)
static double *widen(const float *x, size_t n) {
    double *d = (double *)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) { d[i] = x[i]; }
    return d;
}

// got against expected, quantity by quantity; worst: the worst diffs to update
static void compare(const Outputs *got, const Outputs *expected, double atol, double rtol, double *worst,
                    const char *what, const char *layout, int T, int documents) {
    for (int q = 0; q < NUM_QUANTITIES; q++) {
        CloseCheck cc;
        close_begin(&cc, atol, rtol, "%s T %d%s: %s %s", layout, T, documents ? " documents" : "", what,
                    quantity_names[q]);
        for (size_t i = 0; i < got->n[q]; i++) {
            close_add(&cc, i, got->q[q][i], expected->q[q][i]);
            double d = fabs(got->q[q][i] - expected->q[q][i]);
            if (d > worst[q]) { worst[q] = d; }
        }
        close_end(&cc);
    }
}

// Runs one algorithm's forward and backward on this rank's shard and gathers its
// outputs into global order.   qkv_l: (B, Tl, 3C)   dout_l: (B, Tl, C)
// cost: when not NULL, the bytes the forward and the backward must post (group-cast's)
static void run_algorithm(Comm *comm, CpSharder *sh, AttentionVerbs attn, const float *qkv_l, const float *dout_l,
                          Outputs *result, const AttentionCost *cost) {
    int T = sh->layout.original_seq_len, Tl = sh->layout.local_len;
    size_t lqkv = (size_t)B * Tl * 3 * C, lout = (size_t)B * Tl * C, llse = (size_t)B * NH * Tl;
    float *out_l = (float *)mallocCheck(lout * sizeof(float));
    float *lse_l = (float *)mallocCheck(llse * sizeof(float));
    float *lse_tok = (float *)mallocCheck(llse * sizeof(float));
    float *dqkv_l = (float *)mallocCheck(lqkv * sizeof(float));
    posted_bytes = 0;
    attn.forward(attn.ctx, out_l, lse_l, qkv_l);
    if (cost != NULL) {
        CHECK(posted_bytes == cost->forward_bytes, "groupcast forward posted %zu bytes, its plan counts %zu",
              posted_bytes, cost->forward_bytes);
    }
    posted_bytes = 0;
    attn.backward(attn.ctx, dqkv_l, dout_l, qkv_l, out_l, lse_l);
    if (cost != NULL) {
        CHECK(posted_bytes == cost->backward_bytes, "groupcast backward posted %zu bytes, its plan counts %zu",
              posted_bytes, cost->backward_bytes);
    }
    // lse is (B, NH, Tl): make it token-major (B, Tl, NH) so that it gathers like a token tensor
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < Tl; t++) { lse_tok[((size_t)b * Tl + t) * NH + h] = lse_l[((size_t)b * NH + h) * Tl + t]; }
        }
    }
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *out = (float *)mallocCheck(nout * sizeof(float));
    float *lse_g = (float *)mallocCheck(nlse * sizeof(float));
    float *lse = (float *)mallocCheck(nlse * sizeof(float));
    float *dqkv = (float *)mallocCheck(nqkv * sizeof(float));
    CHECK(cp_gather_tokens(sh, comm, out_l, (size_t)B * Tl, C * sizeof(float), 1, out) == CP_OK, "gather out: %s", sh->error);
    CHECK(cp_gather_tokens(sh, comm, lse_tok, (size_t)B * Tl, NH * sizeof(float), 1, lse_g) == CP_OK, "gather lse: %s", sh->error);
    CHECK(cp_gather_tokens(sh, comm, dqkv_l, (size_t)B * Tl, 3 * C * sizeof(float), 1, dqkv) == CP_OK, "gather dqkv: %s", sh->error);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) { lse[((size_t)b * NH + h) * T + t] = lse_g[((size_t)b * T + t) * NH + h]; }
        }
    }
    double *out_d = widen(out, nout), *lse_d = widen(lse, nlse), *dqkv_d = widen(dqkv, nqkv);
    outputs_fill(result, out_d, lse_d, dqkv_d, T);
    free(out_l); free(lse_l); free(lse_tok); free(dqkv_l); free(out); free(lse_g); free(lse); free(dqkv);
    free(out_d); free(lse_d); free(dqkv_d);
}

// The Ulysses groups and rings of the algorithms ULYSSES (U = np) and HYBRID.
typedef struct {
    Comm *ulysses[2], *ring[2]; // [0]: ULYSSES, [1]: HYBRID
} UlyssesComms;

static int hybrid_degree(int np) { return np == 4 ? 2 : 1; } // np 4: U 2 x R 2; else the ring of U 1

static UlyssesComms ulysses_comms_init(Comm *comm) {
    UlyssesComms uc;
    int degrees[2] = {comm->size, hybrid_degree(comm->size)};
    for (int i = 0; i < 2; i++) {
        Mesh m = mesh_init(comm->rank, comm->size, comm->size, degrees[i]);
        MPI_Comm u, r;
        MPI_Comm_split(comm_mpi_handle(comm), m.ring_rank, m.ulysses_rank, &u);
        MPI_Comm_split(comm_mpi_handle(comm), m.ulysses_rank, m.ring_rank, &r);
        uc.ulysses[i] = comm_mpi_create(u);
        uc.ring[i] = comm_mpi_create(r);
    }
    return uc;
}

static void ulysses_comms_free(UlyssesComms *uc) {
    for (int i = 0; i < 2; i++) { uc->ulysses[i]->destroy(uc->ulysses[i]); uc->ring[i]->destroy(uc->ring[i]); }
}

static UlyssesComms ucomms;

static void run_case(Comm *comm, CpLayoutKind kind, int T, int with_documents) {
    int np = comm->size;
    const char *name = cp_layout_names[kind];
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    // the same data on every rank
    Rng rng;
    rng_seed(&rng, 1000 + T + 7 * with_documents);
    float *qkv = (float *)mallocCheck(nqkv * sizeof(float));
    float *dout = (float *)mallocCheck(nout * sizeof(float));
    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    int *targets = (int *)callocCheck((size_t)B * T, sizeof(int));
    fill_uniform(&rng, qkv, nqkv, -1.0f, 1.0f);
    fill_uniform(&rng, dout, nout, -1.0f, 1.0f);
    make_inputs(&rng, inputs, T, with_documents);

    // the reference, in double, on this rank's copy of the whole sequence
    double *qkv_d = widen(qkv, nqkv);
    double *dout_d = widen(dout, nout);
    double *ref_out = (double *)mallocCheck(nout * sizeof(double));
    double *ref_lse = (double *)mallocCheck(nlse * sizeof(double));
    double *ref_dqkv = (double *)mallocCheck(nqkv * sizeof(double));
    int *doc = NULL;
    if (with_documents) {
        doc = (int *)mallocCheck((size_t)B * T * sizeof(int));
        for (int b = 0; b < B; b++) { count_documents(inputs + b * T, T, doc + b * T); }
    }
    ref_attention_forward(ref_out, ref_lse, qkv_d, doc, B, T, C, NH);
    ref_attention_backward(ref_dqkv, dout_d, qkv_d, doc, B, T, C, NH);
    Outputs ref;
    outputs_init(&ref, T);
    outputs_fill(&ref, ref_out, ref_lse, ref_dqkv, T);

    // shard, run each algorithm, gather
    CpSharder sh;
    cp_sharder_init(&sh, kind, comm->rank, np, MAX_SEQ_LEN,
                    with_documents ? cp_masked_documents(DOC_TOKEN) : cp_no_documents());
    CHECK(cp_shard_batch(&sh, inputs, targets, NULL, B, T) == CP_OK, "%s T %d: shard_batch: %s", name, T, sh.error);
    int Tl = sh.layout.local_len;
    float *qkv_l = (float *)mallocCheck((size_t)B * Tl * 3 * C * sizeof(float));
    float *dout_l = (float *)mallocCheck((size_t)B * Tl * C * sizeof(float));
    float zeros[3 * C] = {0};
    CHECK(cp_shard_tokens(&sh, qkv, 3 * C * sizeof(float), B, T, zeros, qkv_l) == CP_OK, "shard qkv: %s", sh.error);
    CHECK(cp_shard_tokens(&sh, dout, C * sizeof(float), B, T, zeros, dout_l) == CP_OK, "shard dout: %s", sh.error);
    RingAttention ra;
    ring_attention_init(&ra, comm, B, Tl, C, NH);
    ring_attention_bind(&ra, &sh.layout);
    AllgatherAttention ag;
    allgather_attention_init(&ag, comm, B, Tl, C, NH);
    allgather_attention_bind(&ag, &sh.layout);
    UlyssesAttention ua[2];
    for (int i = 0; i < 2; i++) {
        ulysses_attention_init(&ua[i], ucomms.ulysses[i], ucomms.ring[i], B, Tl, C, NH);
        ulysses_attention_bind(&ua[i], &sh.layout);
    }
    AttentionVerbs verbs[NUM_ALGORITHMS] = {ring_attention_verbs(&ra), allgather_attention_verbs(&ag),
                                            ulysses_attention_verbs(&ua[0]), ulysses_attention_verbs(&ua[1])};
    Outputs got[NUM_ALGORITHMS];
    for (int a = 0; a < GROUPCAST; a++) {
        outputs_init(&got[a], T);
        run_algorithm(comm, &sh, verbs[a], qkv_l, dout_l, &got[a], NULL);
        compare(&got[a], &ref, ATOL, RTOL, worst_diff[a], algorithm_names[a], name, T, with_documents);
    }
    compare(&got[ALLGATHER], &got[RING], ATOL_RING, RTOL_RING, worst_vs_ring, "allgather vs ring", name, T,
            with_documents);
    // group-cast at every stage count, over a Comm that counts the bytes it posts
    Comm counting = *comm;
    counting.all_to_all_v_start = counting_all_to_all_v_start;
    for (int S = 1; S <= (np > 1 ? np - 1 : 1); S++) {
        GroupcastAttention ga;
        groupcast_attention_init(&ga, &counting, S, B, Tl, C, NH);
        groupcast_attention_bind(&ga, &sh.layout);
        AttentionCost cost = groupcast_cost(&ga.plan, C);
        Outputs *o = &got[GROUPCAST], staged;
        if (S > 1) { o = &staged; }
        outputs_init(o, T);
        run_algorithm(comm, &sh, groupcast_attention_verbs(&ga), qkv_l, dout_l, o, &cost);
        char what[32];
        snprintf(what, sizeof(what), "groupcast -co %d", S);
        compare(o, &ref, ATOL, RTOL, worst_diff[GROUPCAST], what, name, T, with_documents);
        if (S == 1) {
            compare(o, &got[RING], ATOL_RING, RTOL_RING, worst_groupcast_vs_ring, "groupcast vs ring", name, T,
                    with_documents);
        } else {
            double exact[NUM_QUANTITIES] = {0};
            compare(o, &got[GROUPCAST], 0.0, 0.0, exact, "groupcast -co S vs -co 1", name, T, with_documents);
            outputs_free(o);
        }
        groupcast_attention_free(&ga);
        groupcast_runs++;
    }

    for (int a = 0; a < NUM_ALGORITHMS; a++) { outputs_free(&got[a]); }
    outputs_free(&ref);
    ring_attention_free(&ra);
    allgather_attention_free(&ag);
    for (int i = 0; i < 2; i++) { ulysses_attention_free(&ua[i]); }
    cp_sharder_free(&sh);
    free(qkv); free(dout); free(inputs); free(targets); free(qkv_d); free(dout_d); free(ref_out); free(ref_lse);
    free(ref_dqkv); free(doc); free(qkv_l); free(dout_l);
}

// ----------------------------------------------------------------------------
// block skipping, structurally

// What must be skipped, derived from the layouts (one document). The local tokens
// split into halves (of sizes n[0], n[1]: Tl/2 rounded down and up); the ring meets
// the block of rank src:
//   src == rank  the diagonal: the first half of queries lies before the second
//                half of keys (SKIP), the second half of queries after the whole
//                first half of keys (FULL), the halves against themselves are
//                triangles (MASKED; FULL when a half is one token)
//   contiguous   src < rank: every key before every query, all FULL;
//                src > rank: every key after every query, all SKIP
//   round_robin  halves are chunks: queries r, 2cp-1-r; keys s, 2cp-1-s
//                s < r: chunk r sees chunk s, not chunk 2cp-1-s > r:  [FULL SKIP; FULL SKIP]
//                s > r: chunk r sees neither; 2cp-1-r sees both:      [SKIP SKIP; FULL FULL]
//   striped      query i is r + i cp, key j is src + j cp: query half a lies after
//                key half c < a (FULL) and before key half c > a (SKIP); half a
//                against half a is a triangle (MASKED), or with one token each
//                the pair itself: FULL for src < rank, SKIP for src > rank
// An empty half (a block of one token) meets nothing: SKIP.
// So round_robin computes half of every off-diagonal block, contiguous all or
// nothing, and striped the same shape at every step as on the diagonal.
static void expected_visibility(CpLayoutKind kind, int rank, int src, int Tl, BlockVisibility e[2][2]) {
    int n[2] = {Tl / 2, Tl - Tl / 2};
    if (src == rank) {
        for (int a = 0; a < 2; a++) { e[a][a] = n[a] == 1 ? BLOCK_FULL : BLOCK_MASKED; }
        e[0][1] = BLOCK_SKIP;
        e[1][0] = BLOCK_FULL;
    }
    for (int a = 0; a < 2 && src != rank; a++) {
        for (int c = 0; c < 2; c++) {
            if (kind == CP_LAYOUT_CONTIGUOUS) { e[a][c] = src < rank ? BLOCK_FULL : BLOCK_SKIP; }
            else if (kind == CP_LAYOUT_STRIPED) {
                if (a != c) { e[a][c] = a > c ? BLOCK_FULL : BLOCK_SKIP; }
                else if (n[a] > 1) { e[a][c] = BLOCK_MASKED; }
                else { e[a][c] = src < rank ? BLOCK_FULL : BLOCK_SKIP; }
            }
            else if (src < rank) { e[a][c] = c == 0 ? BLOCK_FULL : BLOCK_SKIP; }
            else { e[a][c] = a == 1 ? BLOCK_FULL : BLOCK_SKIP; }
        }
    }
    for (int a = 0; a < 2; a++) {
        for (int c = 0; c < 2; c++) {
            if (n[a] == 0 || n[c] == 0) { e[a][c] = BLOCK_SKIP; }
        }
    }
}

static void check_block_skipping(CpLayoutKind kind, int T, int rank, int np) {
    CHECK(RING_SUBBLOCKS == 2, "the expected tables are written for halves, RING_SUBBLOCKS is %d", RING_SUBBLOCKS);
    int P = cp_padded_len(kind, T, np), Tl = P / np;
    int *q_index = (int *)mallocCheck((size_t)Tl * sizeof(int));
    int *k_index = (int *)mallocCheck((size_t)Tl * sizeof(int));
    int *docs = (int *)callocCheck((size_t)Tl, sizeof(int));
    cp_local_indices(kind, P, np, rank, q_index);
    int skipped = 0;
    for (int step = 0; step < np; step++) {
        int src = (rank - step + np) % np;
        cp_local_indices(kind, P, np, src, k_index);
        BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS], e[2][2];
        SubBlock qs[RING_SUBBLOCKS], ks[RING_SUBBLOCKS];
        block_visibility_table(q_index, docs, k_index, docs, Tl, vis, qs, ks);
        expected_visibility(kind, rank, src, Tl, e);
        for (int a = 0; a < 2; a++) {
            for (int c = 0; c < 2; c++) {
                CHECK(vis[a][c] == e[a][c], "%s T %d rank %d, block of rank %d: sub-blocks (q %d, k %d) are %d, "
                      "expected %d (0 skip, 1 full, 2 masked)", cp_layout_names[kind], T, rank, src, a, c,
                      vis[a][c], e[a][c]);
                skipped += vis[a][c] == BLOCK_SKIP;
            }
        }
    }
    // the diagonal skips one of 4; round_robin half of every other block
    if (kind == CP_LAYOUT_ROUND_ROBIN) {
        CHECK(skipped == 1 + 2 * (np - 1), "round_robin T %d rank %d: %d sub-block pairs skipped, expected %d",
              T, rank, skipped, 1 + 2 * (np - 1));
    }
    free(q_index); free(k_index); free(docs);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    Comm *comm = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    int np = comm->size;
    ucomms = ulysses_comms_init(comm);
    int Ts[] = {3, 7, 16, 37, 100}; // 3 and 7 (at np 4): sub-blocks of one token
    int num_T = (int)(sizeof(Ts) / sizeof(Ts[0]));
    int tested = 0;
    for (int kind = 0; kind < CP_NUM_LAYOUTS; kind++) {
        if (kind == CP_LAYOUT_IDENTITY && np != 1) { continue; }
        for (int i = 0; i < num_T; i++) {
            if (kind == CP_LAYOUT_PACKED) {
                // packed splits documents: it needs them, and its pad slots sit between them
                if (Ts[i] >= 37) { run_case(comm, (CpLayoutKind)kind, Ts[i], 1); tested++; }
                continue;
            }
            if (kind == CP_LAYOUT_SOLVER) {
                // whole chunks of 64 in any order over the ranks (most of them pad at these T),
                // with and without documents; its blocks are not the fixed layouts' halves
                run_case(comm, (CpLayoutKind)kind, Ts[i], 0);
                tested++;
                if (Ts[i] >= 37) { run_case(comm, (CpLayoutKind)kind, Ts[i], 1); tested++; }
                continue;
            }
            CpSharder probe;
            cp_sharder_init(&probe, (CpLayoutKind)kind, comm->rank, np, MAX_SEQ_LEN, cp_no_documents());
            if (cp_check_config(&probe, Ts[i]) != CP_OK) { continue; } // a rank without a real token
            run_case(comm, (CpLayoutKind)kind, Ts[i], 0);
            tested++;
            if (Ts[i] >= 37) { // the document tokens are placed up to t = 23
                run_case(comm, (CpLayoutKind)kind, Ts[i], 1);
                tested++;
            }
            if (np >= 2) { check_block_skipping((CpLayoutKind)kind, Ts[i], comm->rank, np); }
        }
    }
    // contiguous, round_robin and striped with and without documents, less the configs
    // that leave a rank without a real token (np 3 contiguous T 3 and 7, np 4 T 3)
    CHECK(tested >= 3 * (num_T + 2) - 4, "only %d cases ran", tested);
    if (comm->rank == 0) {
        printf("test_attention_algorithms np %d: OK, %d cases", np, tested);
        for (int a = 0; a < NUM_ALGORITHMS; a++) {
            printf("; worst |%s - ref|:", algorithm_names[a]);
            for (int q = 0; q < NUM_QUANTITIES; q++) { printf(" %s %.2g", quantity_names[q], worst_diff[a][q]); }
        }
        printf("; worst |allgather - ring|:");
        for (int q = 0; q < NUM_QUANTITIES; q++) { printf(" %s %.2g", quantity_names[q], worst_vs_ring[q]); }
        printf("; worst |groupcast - ring|:");
        for (int q = 0; q < NUM_QUANTITIES; q++) { printf(" %s %.2g", quantity_names[q], worst_groupcast_vs_ring[q]); }
        printf(" (hybrid U %d x R %d; groupcast %d runs over stages 1..%d)\n", hybrid_degree(np),
               np / hybrid_degree(np), groupcast_runs, np > 1 ? np - 1 : 1);
    }
    ulysses_comms_free(&ucomms);
    comm->destroy(comm);
    MPI_Finalize();
    return 0;
}
