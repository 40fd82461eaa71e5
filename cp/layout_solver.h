/*
The solver layout's assignment (-cl solver; cp/layout.h says what it is for): which
rank owns each chunk of a row, computed the same way on every rank from the row's
documents.

    1. Pad the row to a multiple of cp * chunk and cut it into n chunks of `chunk`
       tokens (a multiple of the 64-row tiles); every rank will own n / cp of them.
    2. Cost: the pairs the tiled kernels compute for the chunk's queries, its
       masked area in whole 64 x 64 tiles (cp/attention_area.h's tile_area: a
       tile of queries meets every key tile from its first query's document
       start to itself). Not the exact area: on short documents a chunk's work
       is mostly its masked diagonal tile, which the area leaves out, and a
       solver balancing the area left the largest rank 6% above the mean in
       tiles (documents of 300 tokens at T 4096, cp 4; dev/bench/layouts.sh).
    3. Balance (MagiAttention's dispatch solver): the chunks by decreasing cost
       (equal costs in row order), each to the least-loaded rank that still has
       room (equal loads: the lowest rank). Decreasing order is the classic
       longest-processing-time rule: the late, cheap chunks even out what the
       early, expensive ones left, so the largest rank ends near the mean.
    With documents masked (one causal document is balanced in both measures by
    step 3 alone, and has nothing to keep together):
    4. Even the area too: the tiles decide the time, but the exact area (the
       pairs that count) can stay 5% uneven where tiles are even. While the rank
       with the largest area (the lowest such) is more than half the slack above
       the mean, make the swap of one of its chunks with another rank's that
       leaves both below its area by the most (ties: the lower chunks), keeping
       both ranks' tiles within the limit: the greedy's largest plus
       CP_SOLVER_SLACK_PERCENT of the mean.
    5. Locality: count the (rank, document) pairs, a rank holding a real token
       of a document. Then go over the pairs of chunks (a, b), a < b, on
       different ranks, in that order, and swap them when that lowers the pair
       count and leaves both ranks within the tiles' limit and within
       CP_SOLVER_SLACK_PERCENT of the mean above step 4's largest area; repeat
       until a pass swaps nothing. Swaps keep every rank's chunk count; each
       lowers the count, so it ends.

What it optimises, then: first the largest rank's tiles (the time of the tiled
kernels), then within 1% of that its area, then within 1% of both the number of
ranks each document spreads over.

Why the swaps: balancing work alone spreads each document over every rank (its
expensive last chunk to one rank, its cheaper first chunks to the others), so every
rank needs K/V from every other for that document. Fewer ranks per document is
less to send for an exchange that sends K/V only to the ranks whose queries see it
(18% to 35% fewer pairs on rows of short documents in test_solver_layout), for at
most 1% of balance. On the documents of dev/bench/layouts.sh (log-normal, mean
311 tokens) at T 4096 and 16384, cp 4 and 8: tiles and area within 1.023 of the
mean, 1.9 to 2.7 ranks per document where striped and packed put each on every
rank. Everything is integer arithmetic in a fixed order: the same data gives every
rank the same layout.

Cost: each rank runs it for each row of each batch on the host. The swaps try
n^2 / 2 pairs of chunks a pass, step 4 n^2 / cp a swap: at chunks of 64, about a
millisecond a row at T 16384, cp 8 with documents of hundreds of tokens; 0.2 s at
T 65536, cp 8 with documents of up to 600 tokens, 0.8 s with documents of 1 to 4
tokens (one core, -O3, measured while the 2 cores ran at a load average of 12).
*/
#ifndef CP_LAYOUT_SOLVER_H
#define CP_LAYOUT_SOLVER_H

#include <stdlib.h>
#include <string.h>
#include "attention_area.h"
#include "../llmc/utils.h"

#define CP_SOLVER_TILE 64          // the solver's chunks are whole tiles (ATTN_TILE_Q rows)
#define CP_SOLVER_DEFAULT_CHUNK 64 // one tile: the finest balance the tiles allow
#define CP_SOLVER_SLACK_PERCENT 1  // locality may cost up to this much of the mean load

// The solver's padded length of a row of T tokens: whole chunks on every rank.
static int cp_solver_padded_len(int T, int cp, int chunk) {
    int m = cp * chunk;
    return (T + m - 1) / m * m;
}

typedef struct {
    long long cost; // the pairs the tiled kernels compute for the chunk's queries
    int index;      // the chunk's place in the row
} CpChunk;

// the most expensive chunk first; equal costs in row order
static int cp_chunk_cmp(const void *a, const void *b) {
    const CpChunk *x = (const CpChunk *)a, *y = (const CpChunk *)b;
    if (x->cost != y->cost) { return x->cost < y->cost ? 1 : -1; }
    return (x->index > y->index) - (x->index < y->index);
}

// MagiAttention's greedy: the chunks in `order` (most expensive first) each to the
// least-loaded rank with room, ties to the lowest rank. Returns the largest load.
// order: (n)   owner: (n)   load: (cp)
static long long cp_solver_greedy(const CpChunk *order, int n, int cp, int *owner, long long *load) {
    int *count = (int *)callocCheck((size_t)cp, sizeof(int));
    long long largest = 0;
    for (int r = 0; r < cp; r++) { load[r] = 0; }
    for (int k = 0; k < n; k++) {
        int pick = -1;
        for (int r = 0; r < cp; r++) {
            if (count[r] < n / cp && (pick < 0 || load[r] < load[pick])) { pick = r; }
        }
        owner[order[k].index] = pick;
        load[pick] += order[k].cost;
        count[pick]++;
        largest = load[pick] > largest ? load[pick] : largest;
    }
    free(count);
    return largest;
}

// Moves a chunk of documents [lo, hi] from rank `from` to rank `to` in the count of
// each document's chunks per rank; returns the change in (rank, document) pairs.
// held: (documents, cp)
static int cp_solver_move(int *held, int cp, int lo, int hi, int from, int to) {
    int change = 0;
    for (int d = lo; d <= hi; d++) {
        change -= --held[(size_t)d * cp + from] == 0;
        change += held[(size_t)d * cp + to]++ == 0;
    }
    return change;
}

// One measure of a rank's work: each chunk's cost, each rank's load, and the most
// a swap may leave on a rank.
typedef struct {
    const long long *cost; // (n)
    long long *load;       // (cp)
    long long limit;
} CpSolverMeasure;

// Whether swapping chunks a (on rank r) and b (on rank s) leaves both ranks within
// the measure's limit.
static int cp_solver_swap_fits(const CpSolverMeasure *m, int a, int r, int b, int s) {
    return m->load[r] - m->cost[a] + m->cost[b] <= m->limit && m->load[s] - m->cost[b] + m->cost[a] <= m->limit;
}

static void cp_solver_swap(CpSolverMeasure *m, int a, int r, int b, int s) {
    m->load[r] += m->cost[b] - m->cost[a];
    m->load[s] += m->cost[a] - m->cost[b];
}

// Evens the area (the second measure) within the tiles' limit (the first): while
// the rank with the largest area (the lowest such rank) is more than half the
// slack above the mean, the swap of one of its chunks with a chunk of another rank
// that leaves both ranks' areas below its area by the most, both within the tiles'
// limit (ties: the lower a, then b). The largest area never grows and the loads'
// sorted list falls at each swap, so it ends; n * n swaps at the most, to bound
// the time.
// owner: (n)
static void cp_solver_even_area(CpSolverMeasure *tiles, CpSolverMeasure *area, long long area_total, int n, int cp,
                                int *owner) {
    for (long long swaps = 0; swaps < (long long)n * n; swaps++) {
        int r = 0;
        for (int k = 1; k < cp; k++) { r = area->load[k] > area->load[r] ? k : r; }
        // within half the slack of the mean is even enough: the swaps of locality may add the slack
        if (area->load[r] * cp * 200 <= area_total * (200 + CP_SOLVER_SLACK_PERCENT)) { return; }
        int best_a = -1, best_b = -1;
        long long best = area->load[r];
        for (int a = 0; a < n; a++) {
            if (owner[a] != r) { continue; }
            for (int b = 0; b < n; b++) {
                int s = owner[b];
                if (s == r || area->cost[b] >= area->cost[a] || !cp_solver_swap_fits(tiles, a, r, b, s)) { continue; }
                long long new_r = area->load[r] - area->cost[a] + area->cost[b];
                long long new_s = area->load[s] - area->cost[b] + area->cost[a];
                long long worse = new_r > new_s ? new_r : new_s;
                if (worse < best) { best = worse; best_a = a; best_b = b; }
            }
        }
        if (best_a < 0) { return; }
        int s = owner[best_b];
        cp_solver_swap(tiles, best_a, r, best_b, s);
        cp_solver_swap(area, best_a, r, best_b, s);
        owner[best_a] = s;
        owner[best_b] = r;
    }
}

// Locality: swaps of two chunks between two ranks (the counts stay equal) that
// lower the number of (rank, document) pairs while both ranks stay within the
// limits of both measures, in a fixed order (chunk a, then chunk b, by index),
// until a pass finds none. Every swap lowers the pairs, so it ends.
// doc_lo, doc_hi, owner: (n)
static void cp_solver_localise(CpSolverMeasure *tiles, CpSolverMeasure *area, const int *doc_lo, const int *doc_hi,
                               int n, int cp, int num_docs, int *owner) {
    int *held = (int *)callocCheck((size_t)num_docs * cp, sizeof(int)); // (documents, cp): chunks holding each
    for (int c = 0; c < n; c++) {
        for (int d = doc_lo[c]; d <= doc_hi[c]; d++) { held[(size_t)d * cp + owner[c]]++; }
    }
    for (int improved = 1; improved; ) {
        improved = 0;
        for (int a = 0; a < n; a++) {
            for (int b = a + 1; b < n; b++) {
                int r = owner[a], s = owner[b];
                if (r == s || !cp_solver_swap_fits(tiles, a, r, b, s) || !cp_solver_swap_fits(area, a, r, b, s)) {
                    continue;
                }
                int change = cp_solver_move(held, cp, doc_lo[a], doc_hi[a], r, s);
                change += cp_solver_move(held, cp, doc_lo[b], doc_hi[b], s, r);
                if (change >= 0) { // no better: undo
                    cp_solver_move(held, cp, doc_lo[b], doc_hi[b], r, s);
                    cp_solver_move(held, cp, doc_lo[a], doc_hi[a], s, r);
                    continue;
                }
                owner[a] = s;
                owner[b] = r;
                cp_solver_swap(tiles, a, r, b, s);
                cp_solver_swap(area, a, r, b, s);
                improved = 1;
            }
        }
    }
    free(held);
}

// The solver's assignment of a row padded to P (a multiple of cp * chunk): the rank
// that owns each chunk, as the header says: the greedy on tile area, then (documents
// masked only) the swaps that even the area and those of locality. docs: (T) document ids where attention is masked to documents (ids from 0,
// increasing by one at each new document), NULL: one causal document.
// owner: (P / chunk)
static void cp_solver_owners(const int *docs, int T, int P, int cp, int chunk, int *owner) {
    int n = P / chunk;
    int *starts = docs ? (int *)mallocCheck((size_t)T * sizeof(int)) : NULL; // (T)
    if (docs) { cp_row_document_starts(docs, T, starts); }
    CpChunk *order = (CpChunk *)mallocCheck((size_t)n * sizeof(CpChunk));
    long long *cost = (long long *)mallocCheck((size_t)n * sizeof(long long));
    long long total = 0;
    for (int c = 0; c < n; c++) {
        cost[c] = span_tile_area(starts, T, c * chunk, (c + 1) * chunk, CP_SOLVER_TILE);
        order[c].cost = cost[c];
        order[c].index = c;
        total += cost[c];
    }
    qsort(order, (size_t)n, sizeof(CpChunk), cp_chunk_cmp);
    long long *load = (long long *)mallocCheck((size_t)cp * sizeof(long long));
    long long largest = cp_solver_greedy(order, n, cp, owner, load);
    if (docs) {
        CpSolverMeasure tiles = {cost, load, largest + total * CP_SOLVER_SLACK_PERCENT / (100LL * cp)};
        long long *area = (long long *)mallocCheck((size_t)n * sizeof(long long));
        long long *area_load = (long long *)callocCheck((size_t)cp, sizeof(long long)), area_total = 0;
        for (int c = 0; c < n; c++) {
            area[c] = span_area(starts, T, c * chunk, (c + 1) * chunk);
            area_load[owner[c]] += area[c];
            area_total += area[c];
        }
        CpSolverMeasure areas = {area, area_load, 0};
        cp_solver_even_area(&tiles, &areas, area_total, n, cp, owner);
        // the documents of each chunk's real tokens [lo, hi] (none for a pad chunk: hi < lo)
        int *doc_lo = (int *)mallocCheck((size_t)n * sizeof(int)), *doc_hi = (int *)mallocCheck((size_t)n * sizeof(int));
        for (int c = 0; c < n; c++) {
            int first = c * chunk, last = (c + 1) * chunk < T ? (c + 1) * chunk - 1 : T - 1;
            doc_lo[c] = first <= last ? docs[first] : 0;
            doc_hi[c] = first <= last ? docs[last] : -1;
        }
        for (int r = 0; r < cp; r++) { areas.limit = area_load[r] > areas.limit ? area_load[r] : areas.limit; }
        areas.limit += area_total * CP_SOLVER_SLACK_PERCENT / (100LL * cp);
        cp_solver_localise(&tiles, &areas, doc_lo, doc_hi, n, cp, docs[T - 1] + 1, owner);
        free(doc_lo);
        free(doc_hi);
        free(area);
        free(area_load);
    }
    free(load);
    free(cost);
    free(order);
    free(starts);
}

#endif // CP_LAYOUT_SOLVER_H
