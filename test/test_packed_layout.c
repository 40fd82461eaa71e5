/*
The packed layout (cp/layout.h, cp/sharder.h): documents split head-tail one by one.

Checked against what the layout must be, computed here independently:
  - the worked example of cp/layout.h, by hand: documents [0, 6) and [6, 10) at
    cp 2 give P 12, r0 = [0 1 6 7 8 11], r1 = [2 3 4 5 9 10];
  - for random rows of documents (short and long, an EOT at t = 0 or not) and cp 1..8,
    with every rank's sharder built in this process:
      * P is the longest row's sum of documents rounded up to 2*cp (recomputed here);
      * the ranks' global indices cover [0, P) exactly once in every row, and every
        original token 0..T-1 appears exactly once, with its own input, target,
        document and position id;
      * each document's padded region is split evenly: every rank owns
        padded_len / cp of its slots (the head-tail balance), and of a document
        of length n padded to m, rank r's slots are chunk r and chunk 2cp-1-r;
      * inside a document, global order is original order (so causality by global
        index is causality in the row);
  - under mpirun: shard_tokens -> gather_tokens(trim) gives back the original
    tensor, and gather without trim puts the fill in every pad slot;
  - without document masking the layout is refused with a clear message.
*/
#include <mpi.h>
#include "test/lib/test_utils.h"
#include "cp/comm_mpi.h"
#include "cp/sharder.h"
#include "test/lib/test_comm.h"

#define EOT 7
#define MAX_POS 4096
#define B 3

static void worked_example(void) {
    int inputs[10] = {EOT, 1, 2, 3, 4, 5, EOT, 8, 9, 10};
    int targets[10] = {1, 2, 3, 4, 5, EOT, 8, 9, 10, 11};
    int expect_index[2][6] = {{0, 1, 6, 7, 8, 11}, {2, 3, 4, 5, 9, 10}};
    int expect_original[2][6] = {{0, 1, -1, -1, 6, 9}, {2, 3, 4, 5, 7, 8}};
    int expect_document[2][6] = {{0, 0, -1, -1, 1, 1}, {0, 0, 0, 0, 1, 1}};
    for (int r = 0; r < 2; r++) {
        CpSharder sh;
        cp_sharder_init(&sh, CP_LAYOUT_PACKED, r, 2, MAX_POS, cp_masked_documents(EOT));
        CHECK(cp_shard_batch(&sh, inputs, targets, NULL, 1, 10) == CP_OK, "worked example: %s", sh.error);
        CHECK(sh.layout.padded_seq_len == 12 && sh.layout.local_len == 6, "worked example: P %d, Tl %d",
              sh.layout.padded_seq_len, sh.layout.local_len);
        check_int_array("worked example global index", sh.layout.global_index, expect_index[r], 6);
        check_int_array("worked example original index", sh.layout.original_index, expect_original[r], 6);
        check_int_array("worked example document", sh.layout.document, expect_document[r], 6);
        cp_sharder_free(&sh);
    }
}

// A batch of B rows of T tokens with documents of random lengths; token t of row b
// is 100 * b + t + 100 (never EOT) except at document starts.
static void make_rows(Rng *rng, int T, int *inputs, int *targets) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = 100 + 1000 * b + t;
            targets[b * T + t] = -(100 + 1000 * b + t);
        }
        // row 0: many short documents; row 1: a few long ones; row 2: one document
        int mean_len = b == 0 ? 3 : (b == 1 ? T / 3 + 1 : 2 * T);
        for (int t = rand_below(rng, 2); t < T; t += 1 + rand_below(rng, 2 * mean_len)) {
            inputs[b * T + t] = EOT;
        }
    }
}

// the document of every token, computed here: a new one at every EOT after t = 0
static void documents_of(const int *row, int T, int *doc) {
    int d = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && row[t] == EOT) { d++; }
        doc[t] = d;
    }
}

static void check_random_batch(Rng *rng, int T, int cp) {
    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    int *targets = (int *)mallocCheck((size_t)B * T * sizeof(int));
    int *doc = (int *)mallocCheck((size_t)B * T * sizeof(int));
    make_rows(rng, T, inputs, targets);
    // the expected P: each row's documents rounded up to 2cp, the longest row
    int P = 0;
    for (int b = 0; b < B; b++) {
        documents_of(inputs + b * T, T, doc + b * T);
        int row = 0, start = 0;
        for (int t = 1; t <= T; t++) {
            if (t == T || doc[b * T + t] != doc[b * T + start]) {
                row += ceil_div(t - start, 2 * cp) * 2 * cp;
                start = t;
            }
        }
        if (row > P) { P = row; }
    }
    CpSharder *sh = (CpSharder *)mallocCheck((size_t)cp * sizeof(CpSharder));
    for (int r = 0; r < cp; r++) {
        cp_sharder_init(&sh[r], CP_LAYOUT_PACKED, r, cp, MAX_POS, cp_masked_documents(EOT));
        CHECK(cp_shard_batch(&sh[r], inputs, targets, NULL, B, T) == CP_OK, "T %d cp %d rank %d: %s", T, cp, r, sh[r].error);
        CHECK(sh[r].layout.padded_seq_len == P, "T %d cp %d: P %d, expected %d", T, cp, sh[r].layout.padded_seq_len, P);
        CHECK(sh[r].layout.local_len * cp == P, "T %d cp %d: local length %d", T, cp, sh[r].layout.local_len);
    }
    int Tl = P / cp;
    int *owner = (int *)mallocCheck((size_t)P * sizeof(int));
    int *seen = (int *)mallocCheck((size_t)T * sizeof(int));
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < P; g++) { owner[g] = -1; }
        for (int t = 0; t < T; t++) { seen[t] = 0; }
        for (int r = 0; r < cp; r++) {
            const ShardLayout *lay = &sh[r].layout;
            int last_g_of_doc = -1, last_o_of_doc = -1, last_doc = -3;
            for (int i = 0; i < Tl; i++) {
                size_t li = (size_t)b * Tl + i;
                int g = lay->global_index[li], o = lay->original_index[li];
                CHECK(g >= 0 && g < P, "T %d cp %d row %d rank %d: index %d outside [0, %d)", T, cp, b, r, g, P);
                CHECK(owner[g] < 0, "T %d cp %d row %d: slot %d owned by ranks %d and %d", T, cp, b, g, owner[g], r);
                owner[g] = r;
                if (o < 0) {
                    CHECK(lay->document[li] == -1 && sh[r].local.targets[li] == IGNORE_INDEX && sh[r].local.inputs[li] == 0,
                          "T %d cp %d row %d rank %d: pad slot %d is not a pad", T, cp, b, r, g);
                    continue;
                }
                CHECK(o < T && !seen[o], "T %d cp %d row %d: original token %d twice or out of range", T, cp, b, o);
                seen[o] = 1;
                CHECK(sh[r].local.inputs[li] == inputs[b * T + o] && sh[r].local.targets[li] == targets[b * T + o]
                      && lay->position[li] == o && lay->document[li] == doc[b * T + o],
                      "T %d cp %d row %d rank %d: token %d carries the wrong input, target, position or document",
                      T, cp, b, r, o);
                // within a document a rank's tokens come in increasing order, in both
                // coordinates (chunk r before its mirror)
                if (doc[b * T + o] == last_doc) {
                    CHECK(g > last_g_of_doc && o > last_o_of_doc, "T %d cp %d row %d rank %d: document %d out of order",
                          T, cp, b, r, last_doc);
                }
                last_doc = doc[b * T + o];
                last_g_of_doc = g;
                last_o_of_doc = o;
            }
        }
        for (int g = 0; g < P; g++) { CHECK(owner[g] >= 0, "T %d cp %d row %d: slot %d owned by no rank", T, cp, b, g); }
        for (int t = 0; t < T; t++) { CHECK(seen[t], "T %d cp %d row %d: token %d lost", T, cp, b, t); }
        // the padded regions, from the documents: each document's length rounded up
        // to 2cp, then the row's pad region up to P; each split head-tail in chunks
        // of (region length) / 2cp
        int region_start = 0, doc_start = 0;
        for (int t = 1; t <= T + 1; t++) {
            int len;
            if (t <= T && (t == T || doc[b * T + t] != doc[b * T + doc_start])) {
                len = ceil_div(t - doc_start, 2 * cp) * 2 * cp;
                doc_start = t;
            } else if (t == T + 1) {
                len = P - region_start; // the row's share of the batch padding
            } else {
                continue;
            }
            int chunk = len / (2 * cp);
            for (int s = region_start; s < region_start + len; s++) {
                int c = (s - region_start) / chunk;
                int expected = c < cp ? c : 2 * cp - 1 - c;
                CHECK(owner[s] == expected, "T %d cp %d row %d: slot %d of region [%d, %d) owned by rank %d, expected %d",
                      T, cp, b, s, region_start, region_start + len, owner[s], expected);
            }
            region_start += len;
        }
        CHECK(region_start == P, "T %d cp %d row %d: regions end at %d, P is %d", T, cp, b, region_start, P);
    }
    for (int r = 0; r < cp; r++) { cp_sharder_free(&sh[r]); }
    free(sh); free(owner); free(seen); free(inputs); free(targets); free(doc);
}

// under mpirun: shard -> gather is the identity, with trim and without
static void check_gather(Comm *comm, Rng *rng, int T) {
    int np = comm->size;
    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    int *targets = (int *)mallocCheck((size_t)B * T * sizeof(int));
    make_rows(rng, T, inputs, targets);
    float *x = (float *)mallocCheck((size_t)B * T * sizeof(float));
    for (int i = 0; i < B * T; i++) { x[i] = (float)i + 0.5f; }
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_PACKED, comm->rank, np, MAX_POS, cp_masked_documents(EOT));
    CHECK(cp_shard_batch(&sh, inputs, targets, NULL, B, T) == CP_OK, "gather T %d: %s", T, sh.error);
    int P = sh.layout.padded_seq_len, Tl = sh.layout.local_len;
    float fill = -7.0f;
    float *local = (float *)mallocCheck((size_t)B * Tl * sizeof(float));
    float *back = (float *)mallocCheck((size_t)B * T * sizeof(float));
    float *padded = (float *)mallocCheck((size_t)B * P * sizeof(float));
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), B, T, &fill, local) == CP_OK, "shard T %d: %s", T, sh.error);
    CHECK(cp_gather_tokens(&sh, comm, local, (size_t)B * Tl, sizeof(float), 1, back) == CP_OK, "gather T %d: %s", T, sh.error);
    for (int i = 0; i < B * T; i++) { CHECK(back[i] == x[i], "gather(trim) T %d: element %d is %g, expected %g", T, i, back[i], x[i]); }
    CHECK(cp_gather_tokens(&sh, comm, local, (size_t)B * Tl, sizeof(float), 0, padded) == CP_OK, "gather T %d: %s", T, sh.error);
    int pads = 0;
    for (int i = 0; i < B * P; i++) { pads += padded[i] == fill; }
    // all pad slots hold the fill; the real ones hold every x once
    CHECK(pads == B * P - B * T, "gather(no trim) T %d: %d fill slots, expected %d", T, pads, B * P - B * T);
    int *ints = (int *)mallocCheck((size_t)B * P * sizeof(int));
    CHECK(cp_gather_tokens(&sh, comm, sh.local.inputs, (size_t)B * Tl, sizeof(int), 1, ints) == CP_OK, "gather inputs: %s", sh.error);
    check_int_array("gathered inputs", ints, inputs, (size_t)B * T);
    cp_sharder_free(&sh);
    free(inputs); free(targets); free(x); free(local); free(back); free(padded); free(ints);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    Comm *comm = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));

    worked_example();
    Rng rng;
    rng_seed(&rng, 4242);
    int cases = 0;
    for (int cp = 1; cp <= 8; cp++) {
        int Ts[] = {1, 2, 5, 16, 37, 100, 257};
        for (int i = 0; i < (int)(sizeof(Ts) / sizeof(Ts[0])); i++) {
            for (int repeat = 0; repeat < 3; repeat++) { check_random_batch(&rng, Ts[i], cp); cases++; }
        }
    }
    // the same data on every rank (same seed) for the gather
    Rng shared;
    rng_seed(&shared, 99);
    for (int T = 5; T <= 150; T += 29) { check_gather(comm, &shared, T); }

    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_PACKED, 0, 2, MAX_POS, cp_no_documents());
    int row[4] = {1, 2, 3, 4};
    CHECK(cp_shard_batch(&sh, row, row, NULL, 1, 4) == CP_ERROR && strstr(sh.error, "document masking"),
          "packed without documents: '%s'", sh.error);

    if (comm->rank == 0) { printf("test_packed_layout np %d: OK (%d random batches)\n", comm->size, cases); }
    comm->destroy(comm);
    MPI_Finalize();
    return 0;
}
