/*
Unit test of the CP layouts (cp/layout.h) and the sharder's single-rank verbs
(cp/sharder.h), one process, no MPI.

Checked against:
  - the worked example of docs/DESIGN.md §2, as hand-written arrays;
  - an ownership oracle written here from the layout definitions of docs/DESIGN.md §2
    (which rank owns global index g), for cp 1..8 and many T: padded length,
    the indices every rank owns and their order, and which configs leave a rank
    without a real token (those must be rejected by cp_check_config);
  - closed forms of the causal pair count per rank (round_robin exactly balanced,
    contiguous about 2cp-1 times out of balance), against a brute-force count;
  - closed forms of striped's causal pairs per rank (within 1 + 2/Tl of balanced);
  - hand-computed local batches (inputs, targets, positions, document ids), with the
    documents masked or not, positions restarting at each document or not, and a
    loss mask (its zeros become ignored targets), and the length rules of the token
    verbs, including the text of their error messages.
The shard -> gather identity needs a Comm of several ranks: see test_shard_gather.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/layout.h"
#include "cp/sharder.h"
#include "test/lib/test_utils.h"

#define MAX_CP 8

// ----------------------------------------------------------------------------
// the oracle: the layouts of docs/DESIGN.md §2, written independently of cp/layout.h

static int oracle_pad_multiple(CpLayoutKind kind, int cp) {
    return kind == CP_LAYOUT_IDENTITY ? 1 : kind == CP_LAYOUT_STRIPED ? cp : 2 * cp;
}

// the smallest multiple of m that is >= T, by counting up
static int oracle_padded_len(CpLayoutKind kind, int T, int cp) {
    int m = oracle_pad_multiple(kind, cp);
    int P = T;
    while (P % m != 0) { P++; }
    return P;
}

// the rank that owns global index g of a row padded to P
static int oracle_owner(CpLayoutKind kind, int P, int cp, int g) {
    switch (kind) {
    case CP_LAYOUT_IDENTITY: return 0;
    case CP_LAYOUT_CONTIGUOUS: return g / (P / cp);
    case CP_LAYOUT_ROUND_ROBIN: {
        // 2cp chunks; rank r owns chunk r and its mirror 2cp-1-r
        int chunk = g / (P / (2 * cp));
        return chunk < cp ? chunk : 2 * cp - 1 - chunk;
    }
    case CP_LAYOUT_STRIPED: return g % cp; // token i to rank i mod cp
    case CP_LAYOUT_PACKED: case CP_LAYOUT_SOLVER: break; // not a function of (P, cp)
    }
    return -1;
}

// Every g that `rank` owns, ascending. The splitting layouts store their tokens in
// ascending global order (round_robin: chunk r comes before its mirror 2cp-1-r).
// Returns the count.
static int oracle_local_indices(CpLayoutKind kind, int P, int cp, int rank, int *indices) {
    int n = 0;
    for (int g = 0; g < P; g++) {
        if (oracle_owner(kind, P, cp, g) == rank) { indices[n++] = g; }
    }
    return n;
}

static int layout_valid_at(CpLayoutKind kind, int cp) {
    return kind != CP_LAYOUT_IDENTITY || cp == 1;
}

// ----------------------------------------------------------------------------
// docs/DESIGN.md §2's worked example, S = 10

static void check_example(CpLayoutKind kind, int cp, int expected_P, const int *expected, const char *name) {
    int P = cp_padded_len(kind, 10, cp);
    CHECK(P == expected_P, "%s: padded length %d, expected %d", name, P, expected_P);
    int Tl = P / cp;
    int got[16];
    for (int r = 0; r < cp; r++) {
        CHECK(cp_local_indices(kind, P, cp, r, got) == 0, "%s rank %d: refused", name, r);
        char what[64];
        snprintf(what, sizeof(what), "%s rank %d", name, r);
        check_int_array(what, got, expected + r * Tl, (size_t)Tl);
    }
}

static void test_worked_example(void) {
    const int rr2[] = {0, 1, 2, 9, 10, 11, /**/ 3, 4, 5, 6, 7, 8};
    const int rr4[] = {0, 1, 14, 15, /**/ 2, 3, 12, 13, /**/ 4, 5, 10, 11, /**/ 6, 7, 8, 9};
    const int contig2[] = {0, 1, 2, 3, 4, 5, /**/ 6, 7, 8, 9, 10, 11};
    // striped pads to a multiple of cp only: cp 2 keeps P = 10, cp 4 pads to 12
    const int striped2[] = {0, 2, 4, 6, 8, /**/ 1, 3, 5, 7, 9};
    const int striped4[] = {0, 4, 8, /**/ 1, 5, 9, /**/ 2, 6, 10, /**/ 3, 7, 11};
    check_example(CP_LAYOUT_ROUND_ROBIN, 2, 12, rr2, "round_robin cp 2");
    check_example(CP_LAYOUT_ROUND_ROBIN, 4, 16, rr4, "round_robin cp 4");
    check_example(CP_LAYOUT_CONTIGUOUS, 2, 12, contig2, "contiguous cp 2");
    check_example(CP_LAYOUT_STRIPED, 2, 10, striped2, "striped cp 2");
    check_example(CP_LAYOUT_STRIPED, 4, 12, striped4, "striped cp 4");
    const int ident[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    check_example(CP_LAYOUT_IDENTITY, 1, 10, ident, "identity cp 1");
}

// ----------------------------------------------------------------------------
// every layout, cp 1..8, many T

#define GUARD 4
#define GUARD_VALUE (-7777)

// Returns whether cp_check_config accepted the config (after checking that it
// should have), or -1 where the layout does not exist at this cp.
static int check_layout_config(CpLayoutKind kind, int cp, int T) {
    const char *name = cp_layout_names[kind];
    CpSharder sh;
    cp_sharder_init(&sh, kind, 0, cp, 1 << 20, cp_no_documents());
    if (!layout_valid_at(kind, cp)) {
        CHECK(cp_check_config(&sh, T) == CP_ERROR, "%s at cp %d T %d: accepted, but the layout needs cp 1", name, cp, T);
        CHECK(sh.error[0] != '\0', "%s at cp %d: rejected without a message", name, cp);
        return -1;
    }
    int P = cp_padded_len(kind, T, cp);
    int expected_P = oracle_padded_len(kind, T, cp);
    CHECK(P == expected_P, "%s cp %d T %d: padded length %d, expected %d", name, cp, T, P, expected_P);
    CHECK(P % cp == 0, "%s cp %d T %d: padded length %d is not divisible by cp", name, cp, T, P);
    int Tl = P / cp;
    int *got = (int *)mallocCheck((size_t)(Tl + GUARD) * sizeof(int));
    int *expected = (int *)mallocCheck((size_t)P * sizeof(int));
    int *seen = (int *)callocCheck((size_t)P, sizeof(int));
    int first_empty_rank = -1;
    for (int r = 0; r < cp; r++) {
        for (int i = 0; i < Tl + GUARD; i++) { got[i] = GUARD_VALUE; }
        CHECK(cp_local_indices(kind, P, cp, r, got) == 0, "%s cp %d T %d rank %d: refused", name, cp, T, r);
        for (int i = Tl; i < Tl + GUARD; i++) {
            CHECK(got[i] == GUARD_VALUE, "%s cp %d T %d rank %d: wrote past its %d local indices", name, cp, T, r, Tl);
        }
        // the same count on every rank, and exactly the oracle's indices in its order
        int n = oracle_local_indices(kind, P, cp, r, expected);
        CHECK(n == Tl, "%s cp %d T %d rank %d: oracle owns %d tokens, layout gives every rank %d", name, cp, T, r, n, Tl);
        char what[96];
        snprintf(what, sizeof(what), "%s cp %d T %d rank %d local indices", name, cp, T, r);
        check_int_array(what, got, expected, (size_t)Tl);
        int real = 0;
        for (int i = 0; i < Tl; i++) {
            CHECK(got[i] >= 0 && got[i] < P, "%s cp %d T %d rank %d: index %d outside [0, %d)", name, cp, T, r, got[i], P);
            CHECK(!seen[got[i]], "%s cp %d T %d: index %d owned twice", name, cp, T, got[i]);
            seen[got[i]] = 1;
            real += got[i] < T;
        }
        // (got equals the oracle's list here, so this is the oracle's verdict)
        if (real == 0 && first_empty_rank < 0) { first_empty_rank = r; }
    }
    for (int g = 0; g < P; g++) { CHECK(seen[g], "%s cp %d T %d: index %d owned by no rank", name, cp, T, g); }
    // a config is valid exactly when every rank owns a real token
    int rc = cp_check_config(&sh, T);
    if (first_empty_rank >= 0) {
        CHECK(rc == CP_ERROR, "%s cp %d T %d: rank %d owns no real token, but the config was accepted",
              name, cp, T, first_empty_rank);
        char rank_text[32];
        snprintf(rank_text, sizeof(rank_text), "rank %d", first_empty_rank);
        CHECK(strstr(sh.error, rank_text) != NULL && strstr(sh.error, name) != NULL,
              "%s cp %d T %d: the message does not name the layout and the empty rank %d: '%s'",
              name, cp, T, first_empty_rank, sh.error);
    } else {
        CHECK(rc == CP_OK, "%s cp %d T %d: every rank owns a real token, but rejected: %s", name, cp, T, sh.error);
    }
    free(got);
    free(expected);
    free(seen);
    return rc == CP_OK;
}

static void test_all_configs(void) {
    int extra_T[] = {97, 100, 127, 128, 129, 255, 1000, 1001, 1023, 1024, 1025, 4097};
    int num_T = 70 + (int)(sizeof(extra_T) / sizeof(extra_T[0]));
    int rejected = 0, accepted = 0;
    for (int cp = 1; cp <= MAX_CP; cp++) {
        for (int ti = 0; ti < num_T; ti++) {
            int T = ti < 70 ? ti + 1 : extra_T[ti - 70];
            // the layouts that are a function of (T, cp) alone; packed depends on the
            // data and has its own test (test_packed_layout.c)
            for (int kind = 0; kind < CP_NUM_LAYOUTS; kind++) {
                if (cp_layout_depends_on_data((CpLayoutKind)kind)) { continue; }
                int ok = check_layout_config((CpLayoutKind)kind, cp, T);
                accepted += ok == 1;
                rejected += ok == 0;
            }
        }
    }
    // both branches of the validity check were exercised
    CHECK(rejected > 0 && accepted > 0, "accepted %d configs, rejected %d", accepted, rejected);
    // the general errors
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_CONTIGUOUS, 0, 2, 16, cp_no_documents());
    CHECK(cp_check_config(&sh, 0) == CP_ERROR && sh.error[0], "T = 0 accepted");
    cp_sharder_init(&sh, CP_LAYOUT_CONTIGUOUS, 0, 0, 16, cp_no_documents());
    CHECK(cp_check_config(&sh, 8) == CP_ERROR && sh.error[0], "cp 0 accepted");
}

// ----------------------------------------------------------------------------
// causal work balance

// pairs (q, k) with k <= q, both real, for the queries `rank` owns; by brute force
static long causal_pairs_of_rank(CpLayoutKind kind, int T, int cp, int rank) {
    int P = cp_padded_len(kind, T, cp), Tl = P / cp;
    int *idx = (int *)mallocCheck((size_t)Tl * sizeof(int));
    cp_local_indices(kind, P, cp, rank, idx);
    long pairs = 0;
    for (int i = 0; i < Tl; i++) {
        if (idx[i] >= T) { continue; }
        for (int k = 0; k < T; k++) { pairs += k <= idx[i]; }
    }
    free(idx);
    return pairs;
}

// T a multiple of 2cp (no padding). Query q has q + 1 keys, so a run of n queries
// starting at a has n*a + n(n+1)/2 pairs:
//   contiguous, Tl = T/cp:  rank r has Tl*Tl*r + Tl(Tl+1)/2
//   round_robin, c = T/2cp: chunks r and 2cp-1-r give c*c*(2cp-1) + c(c+1), the same
//                           for every rank
// so round_robin's max/min is exactly 1 and contiguous's is
//   (Tl*Tl*(cp-1) + Tl(Tl+1)/2) / (Tl(Tl+1)/2) = 1 + 2 Tl (cp-1) / (Tl+1)  ~ 2cp - 1.
static void check_balance(int T, int cp) {
    long rr_min = -1, rr_max = -1, ct_min = -1, ct_max = -1;
    long Tl = T / cp, c = T / (2 * cp);
    for (int r = 0; r < cp; r++) {
        long rr = causal_pairs_of_rank(CP_LAYOUT_ROUND_ROBIN, T, cp, r);
        long ct = causal_pairs_of_rank(CP_LAYOUT_CONTIGUOUS, T, cp, r);
        long rr_expected = c * c * (2 * cp - 1) + c * (c + 1);
        long ct_expected = Tl * Tl * r + Tl * (Tl + 1) / 2;
        CHECK(rr == rr_expected, "round_robin T %d cp %d rank %d: %ld causal pairs, expected %ld", T, cp, r, rr, rr_expected);
        CHECK(ct == ct_expected, "contiguous T %d cp %d rank %d: %ld causal pairs, expected %ld", T, cp, r, ct, ct_expected);
        if (rr_min < 0 || rr < rr_min) { rr_min = rr; }
        if (rr > rr_max) { rr_max = rr; }
        if (ct_min < 0 || ct < ct_min) { ct_min = ct; }
        if (ct > ct_max) { ct_max = ct; }
    }
    double rr_ratio = (double)rr_max / rr_min, ct_ratio = (double)ct_max / ct_min;
    double ct_ratio_expected = 1.0 + 2.0 * Tl * (cp - 1) / (Tl + 1.0);
    CHECK(rr_ratio == 1.0, "round_robin T %d cp %d: max/min causal work %.4f, expected exactly 1", T, cp, rr_ratio);
    CHECK(fabs(ct_ratio - ct_ratio_expected) < 1e-9, "contiguous T %d cp %d: max/min %.6f, expected %.6f",
          T, cp, ct_ratio, ct_ratio_expected);
    printf("balance T %d cp %d: round_robin max/min %.3f, contiguous %.3f\n", T, cp, rr_ratio, ct_ratio);
}

// striped, T a multiple of cp, Tl = T/cp: rank r owns queries r + i cp, i < Tl, with
// r + i cp + 1 keys each: Tl (r + 1) + cp Tl (Tl - 1) / 2 pairs. The last rank does
// (cp - 1) Tl pairs more than the first, so max/min = 1 + (cp - 1) Tl / (Tl + cp Tl (Tl - 1) / 2),
// below 1 + 2 / (Tl - 1): balanced to the last 2/Tl, with no chunking.
static void check_striped_balance(int T, int cp) {
    long Tl = T / cp, mn = -1, mx = -1;
    for (int r = 0; r < cp; r++) {
        long w = causal_pairs_of_rank(CP_LAYOUT_STRIPED, T, cp, r);
        long expected = Tl * (r + 1) + cp * Tl * (Tl - 1) / 2;
        CHECK(w == expected, "striped T %d cp %d rank %d: %ld causal pairs, expected %ld", T, cp, r, w, expected);
        if (mn < 0 || w < mn) { mn = w; }
        if (w > mx) { mx = w; }
    }
    double ratio = (double)mx / mn, expected = 1.0 + (cp - 1.0) * Tl / (Tl + cp * Tl * (Tl - 1) / 2.0);
    CHECK(fabs(ratio - expected) < 1e-12 && ratio < 1.0 + 2.0 / (Tl - 1), "striped T %d cp %d: max/min %.6f, expected %.6f",
          T, cp, ratio, expected);
    printf("balance T %d cp %d: striped max/min %.4f\n", T, cp, ratio);
}

static void test_balance(void) {
    check_striped_balance(1024, 4);
    check_striped_balance(96, 3);
    check_striped_balance(64, 8);
    check_balance(1024, 4); // contiguous: 1 + 2*256*3/257 = 6.977
    check_balance(1024, 2);
    check_balance(96, 3);
    check_balance(64, 8);
    // with padding, round_robin loses at most the last 2cp-1 queries (the end of rank
    // 0's mirror chunk), each with at most T pairs, from a rank whose balanced share
    // is W = total/cp: max/min <= W / (W - (2cp-1) T). T = 1001, cp = 3: <= 1.016
    int T = 1001, cp = 3;
    long total = (long)T * (T + 1) / 2, mn = -1, mx = -1;
    for (int r = 0; r < cp; r++) {
        long w = causal_pairs_of_rank(CP_LAYOUT_ROUND_ROBIN, T, cp, r);
        if (mn < 0 || w < mn) { mn = w; }
        if (w > mx) { mx = w; }
    }
    double W = (double)total / cp, bound = W / (W - (2.0 * cp - 1) * T);
    CHECK((double)mx / mn <= bound, "round_robin T %d cp %d padded: max/min %.4f above the bound %.4f",
          T, cp, (double)mx / mn, bound);
}

// ----------------------------------------------------------------------------
// cp_shard_batch on a known batch

#define EX_B 2
#define EX_T 10
#define EX_DOC 9 // the document token of the example rows
static const int ex_inputs[EX_B * EX_T] = {
    9, 4, 5, 9, 6, 7, 8, 9, 1, 2,
    1, 2, 9, 9, 3, 4, 5, 6, 7, 8,
};
// An EOT opens a new document and belongs to it; one at t = 0 opens document 0.
static const int ex_documents[EX_B * EX_T] = {
    0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
    0, 0, 1, 2, 2, 2, 2, 2, 2, 2,
};
// each token's offset from the first token of its document (the EOT that opens it)
static const int ex_document_positions[EX_B * EX_T] = {
    0, 1, 2, 0, 1, 2, 3, 0, 1, 2,
    0, 1, 0, 0, 1, 2, 3, 4, 5, 6,
};
// a loss mask: which targets count
static const unsigned char ex_loss_mask[EX_B * EX_T] = {
    1, 0, 0, 1, 1, 0, 1, 1, 1, 0,
    0, 1, 1, 1, 0, 0, 0, 1, 1, 1,
};

static int ex_target(int b, int t) { return 200 + 10 * b + t; }

// Shards the example batch with sh (already initialised, possibly already used;
// with the example's loss mask, or none) and checks every local array token by
// token against the oracle.
static void check_shard_example(CpSharder *sh, int B, int T, int with_loss_mask) {
    const char *name = cp_layout_names[sh->kind];
    int cp = sh->cp_size, rank = sh->cp_rank;
    int inputs[EX_B * EX_T], targets[EX_B * EX_T];
    unsigned char loss_mask[EX_B * EX_T];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = ex_inputs[b * EX_T + t];
            targets[b * T + t] = ex_target(b, t);
            loss_mask[b * T + t] = ex_loss_mask[b * EX_T + t];
        }
    }
    int rc = cp_shard_batch(sh, inputs, targets, with_loss_mask ? loss_mask : NULL, B, T);
    CHECK(rc == CP_OK, "%s cp %d rank %d T %d: shard_batch failed: %s", name, cp, rank, T, sh->error);
    const ShardLayout *lay = &sh->layout;
    int P = oracle_padded_len(sh->kind, T, cp), Tl = P / cp;
    CHECK(lay->B == B && lay->original_seq_len == T && lay->padded_seq_len == P && lay->local_len == Tl,
          "%s cp %d rank %d: layout B %d T %d P %d Tl %d, expected %d %d %d %d", name, cp, rank,
          lay->B, lay->original_seq_len, lay->padded_seq_len, lay->local_len, B, T, P, Tl);
    int own[32];
    oracle_local_indices(sh->kind, P, cp, rank, own);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < Tl; i++) {
            int li = b * Tl + i, g = own[i], real = g < T;
            const char *where = real ? "real" : "pad";
            CHECK(lay->global_index[li] == g, "%s cp %d rank %d (b %d, i %d): global_index %d, expected %d",
                  name, cp, rank, b, i, lay->global_index[li], g);
            int oi = real ? g : -1;
            CHECK(lay->original_index[li] == oi, "%s cp %d rank %d (b %d, i %d, %s): original_index %d, expected %d",
                  name, cp, rank, b, i, where, lay->original_index[li], oi);
            int in = real ? inputs[b * T + g] : 0;
            CHECK(sh->local.inputs[li] == in, "%s cp %d rank %d (b %d, i %d, %s): input %d, expected %d",
                  name, cp, rank, b, i, where, sh->local.inputs[li], in);
            // a pad's target and a masked one are ignored
            int counts = real && (!with_loss_mask || ex_loss_mask[b * EX_T + g]);
            int tg = counts ? targets[b * T + g] : IGNORE_INDEX;
            CHECK(sh->local.targets[li] == tg, "%s cp %d rank %d (b %d, i %d, %s): target %d, expected %d",
                  name, cp, rank, b, i, where, sh->local.targets[li], tg);
            int pos = lay->position[li];
            if (real) {
                int expected = sh->documents.restart_positions ? ex_document_positions[b * EX_T + g] : g;
                CHECK(pos == expected, "%s cp %d rank %d (b %d, i %d): position %d, expected %d", name, cp, rank, b,
                      i, pos, expected);
            } else {
                CHECK(pos >= 0 && pos < sh->max_positions, "%s cp %d rank %d (b %d, i %d, pad %d): position %d "
                      "outside [0, %d)", name, cp, rank, b, i, g, pos, sh->max_positions);
            }
            // real tokens: document 0 unless masked, else the hand-computed ids; pads: -1
            int doc = !real ? -1 : (!sh->documents.mask_attention ? 0 : ex_documents[b * EX_T + g]);
            CHECK(lay->document[li] == doc, "%s cp %d rank %d (b %d, i %d, %s): document %d, expected %d",
                  name, cp, rank, b, i, where, lay->document[li], doc);
        }
    }
}

static void test_shard_batch(void) {
    struct { CpLayoutKind kind; int cp; } cases[] = {
        {CP_LAYOUT_IDENTITY, 1}, {CP_LAYOUT_CONTIGUOUS, 1}, {CP_LAYOUT_CONTIGUOUS, 2}, {CP_LAYOUT_CONTIGUOUS, 3},
        {CP_LAYOUT_ROUND_ROBIN, 2}, {CP_LAYOUT_ROUND_ROBIN, 3}, {CP_LAYOUT_ROUND_ROBIN, 4},
        {CP_LAYOUT_STRIPED, 2}, {CP_LAYOUT_STRIPED, 3}, {CP_LAYOUT_STRIPED, 4},
    };
    int max_positions[] = {64, EX_T}; // EX_T: T == max_seq_len, the pads must still stay below it
    // no documents; masked (-dm 1); positions restarting (-rp 1) alone, and with masking
    CpDocuments documents[] = {cp_no_documents(), cp_masked_documents(EX_DOC), {EX_DOC, 0, 1}, {EX_DOC, 1, 1}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int r = 0; r < cases[c].cp; r++) {
            for (int m = 0; m < 2; m++) {
                for (int d = 0; d < 4; d++) {
                    CpSharder sh;
                    cp_sharder_init(&sh, cases[c].kind, r, cases[c].cp, max_positions[m], documents[d]);
                    check_shard_example(&sh, EX_B, EX_T, d % 2);
                    // the same sharder, the next step: a smaller batch replaces the whole layout
                    check_shard_example(&sh, 1, 9, 1 - d % 2);
                    cp_sharder_free(&sh);
                }
            }
        }
    }
    // a config that leaves a rank empty is refused by shard_batch too
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_CONTIGUOUS, 0, 4, 64, cp_no_documents());
    int one_token[1] = {5};
    CHECK(cp_shard_batch(&sh, one_token, one_token, NULL, 1, 1) == CP_ERROR, "T 1 at contiguous cp 4 was sharded");
    cp_sharder_free(&sh);
}

// ----------------------------------------------------------------------------
// the length rules of the token verbs

static int stub_all_gather_calls = 0;
static void stub_all_gather(Comm *comm, const void *send, void *recv, size_t bytes) {
    (void)comm; (void)send; (void)recv; (void)bytes;
    stub_all_gather_calls++;
}

static void check_error_names(const CpSharder *sh, const char *needle, const char *situation) {
    CHECK(strstr(sh->error, needle) != NULL, "%s: the message does not mention '%s': '%s'", situation, needle, sh->error);
}

static void test_token_verbs(void) {
    // rank 1 of round_robin cp 4, T = 10 -> P = 16, rank 1 owns [2 3 12 13]
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_ROUND_ROBIN, 1, 4, 64, cp_no_documents());
    float x[EX_B * 16], out[EX_B * 4];
    for (int i = 0; i < EX_B * 16; i++) { x[i] = 0.5f + i; }
    float fill = -1.0f;
    for (int i = 0; i < EX_B * 4; i++) { out[i] = 12345.0f; }

    // no layout yet
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), EX_B, EX_T, &fill, out) == CP_ERROR,
          "shard_tokens before shard_batch succeeded");
    check_error_names(&sh, "shard_batch", "shard_tokens before shard_batch");
    CHECK(out[0] == 12345.0f, "shard_tokens before shard_batch wrote its output");
    Comm stub;
    memset(&stub, 0, sizeof(stub));
    stub.size = 4;
    stub.all_gather = stub_all_gather;
    sh.error[0] = '\0';
    CHECK(cp_gather_tokens(&sh, &stub, out, EX_B * 4, sizeof(float), 1, x) == CP_ERROR, "gather_tokens before shard_batch succeeded");
    check_error_names(&sh, "shard_batch", "gather_tokens before shard_batch");
    CHECK(stub_all_gather_calls == 0, "gather_tokens before shard_batch talked to the group");

    int targets[EX_B * EX_T];
    for (int i = 0; i < EX_B * EX_T; i++) { targets[i] = i; }
    CHECK(cp_shard_batch(&sh, ex_inputs, targets, NULL, EX_B, EX_T) == CP_OK, "shard_batch: %s", sh.error);
    const int owned[4] = {2, 3, 12, 13};

    // length T without a fill: its pad slots would have no value
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), EX_B, EX_T, NULL, out) == CP_ERROR,
          "a tensor of length T = 10 != P = 16 was sharded without a fill");
    check_error_names(&sh, "fill", "length T without a fill");

    // length T with a fill: (B, T) in the caller's coordinates, pads take the fill
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), EX_B, EX_T, &fill, out) == CP_OK, "length T with fill: %s", sh.error);
    for (int b = 0; b < EX_B; b++) {
        for (int i = 0; i < 4; i++) {
            float expected = owned[i] < EX_T ? x[b * EX_T + owned[i]] : fill;
            CHECK(out[b * 4 + i] == expected, "length T: (b %d, i %d) got %g, expected %g", b, i, out[b * 4 + i], expected);
        }
    }
    // length P: (B, P) in padded coordinates, sharded as is (no fill needed)
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), EX_B, 16, NULL, out) == CP_OK, "length P: %s", sh.error);
    for (int b = 0; b < EX_B; b++) {
        for (int i = 0; i < 4; i++) {
            float expected = x[b * 16 + owned[i]];
            CHECK(out[b * 4 + i] == expected, "length P: (b %d, i %d) got %g, expected %g", b, i, out[b * 4 + i], expected);
        }
    }
    // any other length is an error that names the length
    int bad_lengths[] = {0, 1, 9, 11, 15, 17, 32};
    for (size_t k = 0; k < sizeof(bad_lengths) / sizeof(bad_lengths[0]); k++) {
        int len = bad_lengths[k];
        CHECK(cp_shard_tokens(&sh, x, sizeof(float), EX_B, len, &fill, out) == CP_ERROR,
              "a tensor of length %d (T = 10, P = 16) was sharded", len);
        char text[32];
        snprintf(text, sizeof(text), "length %d", len);
        check_error_names(&sh, text, "a wrong length");
    }
    // a batch size other than the layout's
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), 1, 16, NULL, out) == CP_ERROR, "batch size 1 against a layout of 2");
    cp_sharder_free(&sh);

    // T == P: a tensor of the original length is already padded, no fill needed
    cp_sharder_init(&sh, CP_LAYOUT_ROUND_ROBIN, 1, 4, 64, cp_no_documents());
    int in16[16], tg16[16];
    for (int i = 0; i < 16; i++) { in16[i] = i; tg16[i] = i; }
    CHECK(cp_shard_batch(&sh, in16, tg16, NULL, 1, 16) == CP_OK, "T 16: %s", sh.error);
    CHECK(cp_shard_tokens(&sh, x, sizeof(float), 1, 16, NULL, out) == CP_OK, "T == P without fill: %s", sh.error);
    for (int i = 0; i < 4; i++) {
        int g = (i < 2 ? 2 : 12) + i % 2; // rank 1 owns chunks 1 and 6 of 2: [2 3 12 13]
        CHECK(out[i] == x[g], "T == P: i %d got %g, expected %g", i, out[i], x[g]);
    }
    cp_sharder_free(&sh);
}

// The API's contract on bad arguments: an error return, never slots that belong to
// no rank, a write into the caller's buffer, or an allocation of a size gone negative.
static void test_contract_errors(void) {
    int idx[64];
    for (int i = 0; i < 64; i++) { idx[i] = GUARD_VALUE; }
    // padded lengths the layout's multiple (2 cp; striped: cp) does not divide: refused, idx untouched
    CpLayoutKind kinds[] = {CP_LAYOUT_CONTIGUOUS, CP_LAYOUT_ROUND_ROBIN, CP_LAYOUT_STRIPED};
    for (int cp = 2; cp <= 4; cp++) {
        for (int P = 1; P <= 24; P++) {
            for (int k = 0; k < 3; k++) {
                CpLayoutKind kind = kinds[k];
                int expected = P % (kind == CP_LAYOUT_STRIPED ? cp : 2 * cp) == 0 ? 0 : -1;
                int got = cp_local_indices(kind, P, cp, 0, idx);
                CHECK(got == expected, "%s P %d cp %d: returned %d, expected %d", cp_layout_names[kind], P, cp, got,
                      expected);
                if (expected != 0) { CHECK(idx[0] == GUARD_VALUE, "refused %s P %d cp %d wrote indices", cp_layout_names[kind], P, cp); }
                for (int i = 0; i < 64; i++) { idx[i] = GUARD_VALUE; }
            }
        }
    }
    CHECK(cp_local_indices(CP_LAYOUT_ROUND_ROBIN, 8, 2, 2, idx) == -1, "rank 2 of cp 2 accepted");
    CHECK(cp_local_indices(CP_LAYOUT_ROUND_ROBIN, 8, 2, -1, idx) == -1, "rank -1 accepted");
    CHECK(cp_local_indices(CP_LAYOUT_ROUND_ROBIN, 8, 0, 0, idx) == -1, "cp 0 accepted");
    CHECK(cp_local_indices(CP_LAYOUT_CONTIGUOUS, -4, 2, 0, idx) == -1, "P -4 accepted");
    CHECK(cp_local_indices(CP_LAYOUT_IDENTITY, 8, 2, 0, idx) == -1, "identity at cp 2 accepted");
    CHECK(cp_local_indices(CP_LAYOUT_PACKED, 8, 2, 0, idx) == -1, "packed (data-dependent) accepted");
    CHECK(idx[0] == GUARD_VALUE, "a refused call wrote indices");
    // a negative or zero batch size: the API's error, naming the batch size
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_ROUND_ROBIN, 0, 2, 64, cp_no_documents());
    int in[8] = {0};
    for (int B = -3; B <= 0; B++) {
        CHECK(cp_shard_batch(&sh, in, in, NULL, B, 8) == CP_ERROR, "shard_batch with B %d succeeded", B);
        check_error_names(&sh, "batch size", "a batch size below 1");
        CHECK(strstr(sh.error, "memory") == NULL, "B %d: %s", B, sh.error);
        CHECK(!sh.has_layout, "a refused batch left a layout");
    }
    cp_sharder_free(&sh);
}

int main(void) {
    test_contract_errors();
    test_worked_example();
    test_all_configs();
    test_balance();
    test_shard_batch();
    test_token_verbs();
    printf("test_layout: OK\n");
    return 0;
}
