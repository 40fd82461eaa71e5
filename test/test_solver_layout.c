/*
Unit test of the solver layout (cp/layout.h, -cl solver) and its cost model
(cp/attention_area.h), one process, no MPI.

Checked against computations written here, not cp/'s:
  - the partition: on random rows (documents of random lengths, masked or not)
    at cp 1..8 and chunks of 64 and 128, every padded slot belongs to exactly one
    rank, every rank holds P / cp slots in increasing order, made of whole chunks,
    pads only from T on (slot g is token g), and the same data gives the same
    layout again;
  - the balance: each rank's masked area counted pair by pair (keys k <= q of the
    query's document), summed over the ranks, is the row's area, and span_area
    gives each chunk's pair count; each rank's tile area (what the tiled kernels
    compute: the pairs of every tile pair that block_mask.h's range rule keeps,
    counted here tile by tile from the tokens' indices and documents) is what
    span_tile_area, the solver's cost, gives, and the largest rank is at most the
    mean plus the most expensive chunk plus the locality slack
    (CP_SOLVER_SLACK_PERCENT of the mean);
  - one causal document with an even number of chunks per rank: as balanced as
    round_robin (both exactly);
  - locality: on rows of many short documents, fewer (rank, document) pairs than
    the balance-only greedy (MagiAttention's rule, written here, on the same tile
    areas), at a largest load in tiles, and a largest area, within the slack of
    that greedy's;
  - the sharder: chunk sizes that are not whole tiles refused with a message
    naming them, and its local tokens those of cp_row_layout.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/layout.h"
#include "cp/sharder.h"
#include "test/lib/test_utils.h"

#define MAX_T 4096

// document ids of a row of T tokens cut into documents of min_len..max_len tokens
static void random_documents(Rng *rng, int T, int min_len, int max_len, int *docs) {
    int doc = 0, left = min_len + (int)(rng_next_u64(rng) % (uint64_t)(max_len - min_len + 1));
    for (int t = 0; t < T; t++) {
        if (left == 0) {
            doc++;
            left = min_len + (int)(rng_next_u64(rng) % (uint64_t)(max_len - min_len + 1));
        }
        docs[t] = doc;
        left--;
    }
}

// The area the query at g sees, pair by pair: the real keys k <= g of its document
// (docs NULL: every real key k <= g).
static long long brute_query_area(const int *docs, int T, int g) {
    long long n = 0;
    for (int k = 0; k <= g && g < T; k++) { n += docs == NULL || docs[k] == docs[g]; }
    return n;
}

// The area of chunk c, pair by pair.
static long long brute_chunk_area(const int *docs, int T, int c, int chunk) {
    long long area = 0;
    for (int g = c * chunk; g < (c + 1) * chunk; g++) { area += brute_query_area(docs, T, g); }
    return area;
}

// slot g's document: docs[g] (0 for every real token when docs is NULL), -1 for a pad
static int slot_document(const int *docs, int T, int g) { return g >= T ? -1 : docs ? docs[g] : 0; }

// The pairs the tiled kernels compute for chunk c's queries, tile by tile in aligned
// tiles of TILE: a tile of queries and an earlier (or the same) tile of keys are
// computed whole unless their ranges of documents are apart.
#define TILE 64
static long long brute_chunk_tiles(const int *docs, int T, int c, int chunk) {
    long long pairs = 0;
    for (int qt = c * chunk / TILE; qt < (c + 1) * chunk / TILE; qt++) {
        int q_lo = slot_document(docs, T, qt * TILE), q_hi = q_lo;
        for (int g = qt * TILE; g < (qt + 1) * TILE; g++) {
            int d = slot_document(docs, T, g);
            q_lo = d < q_lo ? d : q_lo;
            q_hi = d > q_hi ? d : q_hi;
        }
        for (int kt = 0; kt <= qt; kt++) {
            int k_lo = slot_document(docs, T, kt * TILE), k_hi = k_lo;
            for (int g = kt * TILE; g < (kt + 1) * TILE; g++) {
                int d = slot_document(docs, T, g);
                k_lo = d < k_lo ? d : k_lo;
                k_hi = d > k_hi ? d : k_hi;
            }
            pairs += q_hi < k_lo || k_hi < q_lo ? 0 : TILE * TILE;
        }
    }
    return pairs;
}

typedef long long (*ChunkCost)(const int *docs, int T, int c, int chunk);

// owner: (P) the rank of each slot, from cp_row_layout for every rank; checks the partition
static void solver_owners(const int *docs, int T, int P, int cp, int chunk, int *owner, const char *what) {
    int Tl = P / cp;
    int *indices = (int *)mallocCheck((size_t)Tl * sizeof(int));
    int *slot_original = (int *)mallocCheck((size_t)P * sizeof(int));
    for (int g = 0; g < P; g++) { owner[g] = -1; }
    for (int r = 0; r < cp; r++) {
        CHECK(cp_row_layout(CP_LAYOUT_SOLVER, docs, T, P, cp, chunk, r, indices, slot_original) == 0,
              "%s rank %d: refused", what, r);
        for (int g = 0; g < P; g++) {
            CHECK(slot_original[g] == (g < T ? g : -1), "%s: slot %d holds token %d", what, g, slot_original[g]);
        }
        for (int i = 0; i < Tl; i++) {
            int g = indices[i];
            CHECK(g >= 0 && g < P, "%s rank %d: index %d outside [0, %d)", what, r, g, P);
            CHECK(owner[g] == -1, "%s: slot %d owned by ranks %d and %d", what, g, owner[g], r);
            CHECK(i == 0 || g > indices[i - 1], "%s rank %d: index %d after %d", what, r, g, indices[i - 1]);
            owner[g] = r;
        }
    }
    for (int g = 0; g < P; g++) {
        CHECK(owner[g] >= 0, "%s: slot %d owned by no rank", what, g);
        CHECK(owner[g] == owner[g / chunk * chunk], "%s: chunk %d split between ranks %d and %d", what, g / chunk,
              owner[g / chunk * chunk], owner[g]);
    }
    free(indices);
    free(slot_original);
}

// each rank's cost (area or tiles), chunk by chunk. load: (cp)   returns the most
// expensive chunk's
static long long brute_loads(ChunkCost cost, const int *docs, int T, int P, int cp, int chunk, const int *owner,
                             long long *load) {
    long long worst = 0;
    for (int r = 0; r < cp; r++) { load[r] = 0; }
    for (int c = 0; c < P / chunk; c++) {
        long long x = cost(docs, T, c, chunk);
        load[owner[c * chunk]] += x;
        if (x > worst) { worst = x; }
    }
    return worst;
}

static long long max_of(const long long *x, int n) {
    long long m = x[0];
    for (int i = 1; i < n; i++) { m = x[i] > m ? x[i] : m; }
    return m;
}

// (rank, document) pairs: how many ranks hold a real token of each document, summed
static int rank_document_pairs(const int *docs, int T, int cp, const int *owner) {
    int num_docs = docs[T - 1] + 1, pairs = 0;
    unsigned char *holds = (unsigned char *)callocCheck((size_t)num_docs * cp, 1);
    for (int g = 0; g < T; g++) { holds[(size_t)docs[g] * cp + owner[g]] = 1; }
    for (int i = 0; i < num_docs * cp; i++) { pairs += holds[i]; }
    free(holds);
    return pairs;
}

static void test_partition_and_balance(void) {
    Rng rng;
    rng_seed(&rng, 20241204);
    int *docs = (int *)mallocCheck(MAX_T * sizeof(int));
    int *owner = (int *)mallocCheck(2 * MAX_T * sizeof(int)), *again = (int *)mallocCheck(2 * MAX_T * sizeof(int));
    long long load[8];
    int cases = 0;
    for (int trial = 0; trial < 60; trial++) {
        int cp = 1 + trial % 8, chunk = trial % 3 == 2 ? 128 : 64, masked = trial % 2;
        int T = chunk + (int)(rng_next_u64(&rng) % 1500);
        random_documents(&rng, T, 1, 1 + (int)(rng_next_u64(&rng) % 400), docs);
        const int *d = masked ? docs : NULL;
        int P = cp_solver_padded_len(T, cp, chunk);
        CHECK(P >= T && P < T + cp * chunk && P % (cp * chunk) == 0, "T %d cp %d chunk %d: P %d", T, cp, chunk, P);
        char what[96];
        snprintf(what, sizeof(what), "T %d cp %d chunk %d%s", T, cp, chunk, masked ? " documents" : "");
        solver_owners(d, T, P, cp, chunk, owner, what);
        solver_owners(d, T, P, cp, chunk, again, what);
        CHECK(memcmp(owner, again, (size_t)P * sizeof(int)) == 0, "%s: two calls, two layouts", what);
        long long total = 0, row = 0;
        brute_loads(brute_chunk_area, d, T, P, cp, chunk, owner, load);
        for (int r = 0; r < cp; r++) { total += load[r]; }
        for (int g = 0; g < T; g++) { row += brute_query_area(d, T, g); }
        CHECK(total == row, "%s: the ranks hold %lld pairs, the row has %lld", what, total, row);
        // and the cost model agrees with the pairs and the tiles, chunk by chunk
        int *starts = (int *)mallocCheck((size_t)T * sizeof(int));
        cp_row_document_starts(docs, T, starts);
        for (int c = 0; c < P / chunk; c++) {
            long long pairs = brute_chunk_area(d, T, c, chunk), tiles = brute_chunk_tiles(d, T, c, chunk);
            long long area = span_area(masked ? starts : NULL, T, c * chunk, (c + 1) * chunk);
            long long tile_area = span_tile_area(masked ? starts : NULL, T, c * chunk, (c + 1) * chunk, TILE);
            CHECK(area == pairs, "%s chunk %d: span_area %lld, %lld pairs", what, c, area, pairs);
            CHECK(tile_area == tiles, "%s chunk %d: span_tile_area %lld, %lld pairs in tiles", what, c, tile_area,
                  tiles);
        }
        free(starts);
        // the balance, in what the solver balances: the tiles
        long long worst = brute_loads(brute_chunk_tiles, d, T, P, cp, chunk, owner, load);
        total = 0;
        for (int r = 0; r < cp; r++) { total += load[r]; }
        double mean = (double)total / cp, slack = (double)total * CP_SOLVER_SLACK_PERCENT / (100.0 * cp);
        CHECK(max_of(load, cp) <= mean + worst + slack, "%s: largest rank %lld, mean %.1f, largest chunk %lld",
              what, max_of(load, cp), mean, worst);
        cases++;
    }
    printf("partition and balance: %d random rows at cp 1..8, chunks of 64 and 128\n", cases);
    free(docs);
    free(owner);
    free(again);
}

// One causal document, 2k chunks per rank: the greedy pairs early and late chunks
// and balances exactly, as round_robin does.
static void test_causal_like_round_robin(void) {
    int chunk = 64;
    for (int cp = 2; cp <= 8; cp *= 2) {
        for (int k = 1; k <= 3; k++) {
            int T = 2 * k * cp * chunk, P = cp_solver_padded_len(T, cp, chunk);
            CHECK(P == T, "T %d cp %d: padded to %d", T, cp, P);
            int *owner = (int *)mallocCheck((size_t)P * sizeof(int));
            long long load[8], rr[8];
            char what[64];
            snprintf(what, sizeof(what), "causal T %d cp %d", T, cp);
            solver_owners(NULL, T, P, cp, chunk, owner, what);
            brute_loads(brute_chunk_area, NULL, T, P, cp, chunk, owner, load);
            // round_robin's, pair by pair over its indices
            int *idx = (int *)mallocCheck((size_t)(P / cp) * sizeof(int));
            for (int r = 0; r < cp; r++) {
                CHECK(cp_local_indices(CP_LAYOUT_ROUND_ROBIN, P, cp, r, idx) == 0, "round_robin P %d refused", P);
                rr[r] = 0;
                for (int i = 0; i < P / cp; i++) { rr[r] += brute_query_area(NULL, T, idx[i]); }
            }
            free(idx);
            long long row = (long long)T * (T + 1) / 2;
            CHECK(max_of(load, cp) <= max_of(rr, cp), "%s: solver's largest rank %lld, round_robin's %lld", what,
                  max_of(load, cp), max_of(rr, cp));
            CHECK(max_of(load, cp) * cp == row, "%s: largest rank %lld of a row of %lld pairs: not balanced", what,
                  max_of(load, cp), row);
            free(owner);
        }
    }
    printf("one causal document: as balanced as round_robin\n");
}

// MagiAttention's rule alone: chunks by decreasing cost (here the tiles; ties in
// row order), each to the least-loaded rank with room (ties to the lowest rank).
// owner: (P)
static void balance_only_greedy(const int *docs, int T, int P, int cp, int chunk, int *owner, long long *load) {
    int n = P / chunk;
    long long *area = (long long *)mallocCheck((size_t)n * sizeof(long long));
    int *placed = (int *)callocCheck((size_t)n, sizeof(int)), count[8] = {0};
    for (int c = 0; c < n; c++) { area[c] = brute_chunk_tiles(docs, T, c, chunk); }
    for (int r = 0; r < cp; r++) { load[r] = 0; }
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            if (!placed[c] && (best < 0 || area[c] > area[best])) { best = c; }
        }
        int to = -1;
        for (int r = 0; r < cp; r++) {
            if (count[r] < n / cp && (to < 0 || load[r] < load[to])) { to = r; }
        }
        placed[best] = 1;
        count[to]++;
        load[to] += area[best];
        for (int g = best * chunk; g < (best + 1) * chunk; g++) { owner[g] = to; }
    }
    free(area);
    free(placed);
}

static void test_locality(void) {
    Rng rng;
    rng_seed(&rng, 7);
    int T = MAX_T, chunk = 64;
    int *docs = (int *)mallocCheck(MAX_T * sizeof(int));
    int *owner = (int *)mallocCheck(MAX_T * sizeof(int)), *greedy = (int *)mallocCheck(MAX_T * sizeof(int));
    long long load[8], greedy_load[8];
    for (int cp = 2; cp <= 8; cp *= 2) {
        for (int row = 0; row < 3; row++) {
            random_documents(&rng, T, 8, 300, docs); // many short documents
            int P = cp_solver_padded_len(T, cp, chunk);
            char what[64];
            snprintf(what, sizeof(what), "short documents cp %d row %d", cp, row);
            solver_owners(docs, T, P, cp, chunk, owner, what);
            brute_loads(brute_chunk_tiles, docs, T, P, cp, chunk, owner, load);
            balance_only_greedy(docs, T, P, cp, chunk, greedy, greedy_load);
            int pairs = rank_document_pairs(docs, T, cp, owner), greedy_pairs = rank_document_pairs(docs, T, cp, greedy);
            long long total = 0;
            for (int r = 0; r < cp; r++) { total += load[r]; }
            double slack = (double)total * CP_SOLVER_SLACK_PERCENT / (100.0 * cp);
            printf("%s: %d documents, (rank, document) pairs %d (balance only: %d), largest rank %lld (balance "
                   "only: %lld, mean %.0f)\n", what, docs[T - 1] + 1, pairs, greedy_pairs, max_of(load, cp),
                   max_of(greedy_load, cp), (double)total / cp);
            CHECK(pairs < greedy_pairs, "%s: %d (rank, document) pairs, the balance-only greedy %d", what, pairs,
                  greedy_pairs);
            CHECK(max_of(load, cp) <= max_of(greedy_load, cp) + slack, "%s: largest rank %lld, balance only %lld",
                  what, max_of(load, cp), max_of(greedy_load, cp));
            // the area: evened within the tiles' slack, so no worse than the greedy's plus the slack
            long long area[8], greedy_area[8], area_total = 0;
            brute_loads(brute_chunk_area, docs, T, P, cp, chunk, owner, area);
            brute_loads(brute_chunk_area, docs, T, P, cp, chunk, greedy, greedy_area);
            for (int r = 0; r < cp; r++) { area_total += area[r]; }
            double mean_area = (double)area_total / cp;
            printf("%s: largest area over the mean %.3f (balance only: %.3f)\n", what, max_of(area, cp) / mean_area,
                   max_of(greedy_area, cp) / mean_area);
            CHECK(max_of(area, cp) <= max_of(greedy_area, cp) + mean_area * CP_SOLVER_SLACK_PERCENT / 100.0,
                  "%s: largest area %lld, balance only %lld", what, max_of(area, cp), max_of(greedy_area, cp));
        }
    }
    free(docs);
    free(owner);
    free(greedy);
}

static void test_sharder(void) {
    enum { T = 300, CP = 2, MAX_POS = 1024, EOT = 7 };
    int inputs[T], targets[T];
    for (int t = 0; t < T; t++) {
        inputs[t] = t % 90 == 0 ? EOT : 1 + t % 5;
        targets[t] = t;
    }
    CpSharder sh;
    int bad[] = {1, 63, 100, -64};
    for (int i = 0; i < 4; i++) {
        cp_sharder_init(&sh, CP_LAYOUT_SOLVER, 0, CP, MAX_POS, cp_masked_documents(EOT));
        sh.chunk = bad[i];
        CHECK(cp_shard_batch(&sh, inputs, targets, NULL, 1, T) == CP_ERROR, "chunk %d accepted", bad[i]);
        char expected[32];
        snprintf(expected, sizeof(expected), "chunk size %d", bad[i]);
        CHECK(strstr(sh.error, expected) != NULL, "chunk %d refused with '%s'", bad[i], sh.error);
    }
    int docs[T];
    cp_row_documents(inputs, T, EOT, docs);
    int P = cp_solver_padded_len(T, CP, 128);
    CHECK(P == 512, "T %d at cp %d in chunks of 128: P %d, expected 512", T, CP, P);
    int indices[256], slot_original[512];
    for (int r = 0; r < CP; r++) {
        cp_sharder_init(&sh, CP_LAYOUT_SOLVER, r, CP, MAX_POS, cp_masked_documents(EOT));
        sh.chunk = 128;
        CHECK(cp_shard_batch(&sh, inputs, targets, NULL, 1, T) == CP_OK, "rank %d: %s", r, sh.error);
        CHECK(sh.layout.padded_seq_len == P && sh.layout.local_len == P / CP, "rank %d: P %d, Tl %d", r,
              sh.layout.padded_seq_len, sh.layout.local_len);
        cp_row_layout(CP_LAYOUT_SOLVER, docs, T, P, CP, 128, r, indices, slot_original);
        for (int i = 0; i < P / CP; i++) {
            int g = indices[i];
            CHECK(sh.layout.global_index[i] == g, "rank %d local %d: index %d, expected %d", r, i,
                  sh.layout.global_index[i], g);
            CHECK(sh.local.targets[i] == (g < T ? g : IGNORE_INDEX), "rank %d local %d: target %d", r, i,
                  sh.local.targets[i]);
            CHECK(sh.layout.document[i] == (g < T ? docs[g] : -1), "rank %d local %d: document %d", r, i,
                  sh.layout.document[i]);
        }
        cp_sharder_free(&sh);
    }
    CHECK(cp_row_layout(CP_LAYOUT_SOLVER, docs, T, 500, CP, 128, 0, indices, slot_original) == -1,
          "P 500 at cp 2 in chunks of 128 accepted");
    CHECK(cp_row_layout(CP_LAYOUT_SOLVER, docs, T, 512, CP, 0, 0, indices, slot_original) == -1, "chunk 0 accepted");
    printf("sharder: chunk sizes refused, local tokens as cp_row_layout's\n");
}

int main(void) {
    test_partition_and_balance();
    test_causal_like_round_robin();
    test_locality();
    test_sharder();
    printf("PASS test_solver_layout\n");
    return 0;
}
