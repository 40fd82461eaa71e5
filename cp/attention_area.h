/*
The work of attention: its masked area, the query-key pairs the mask keeps for
real queries, and the whole tiles the tiled kernels compute of it (below). This
is the one cost model of the layouts: the solver layout (cp/layout.h) balances
them over the ranks, and dev/cp_layout reports them per rank
(and checks it against its own count of the visible pairs, pair by pair).

cp/block_mask.h's rule, visible(q, k) = index_k <= index_q and document_k ==
document_q, with pads a document of their own, gives every real query of a row
kept in place (token i at index i) the keys from its document's first token to
itself:

    area(i) = i - start(i) + 1        start(i): the first token of i's document
                                      (0 when attention is not masked to documents)

and a pad query nothing worth counting: what it sees is thrown away (its target
is ignored), so a layout gains nothing by balancing it. A span's area is the sum
over its real queries; with one causal document the row's area is T (T + 1) / 2.

The tiled kernels (the GPU's, the CPU's BLAS build) compute more than the area: a
tile of 64 queries meets the row's key tiles whole, skipping only those that
cp/block_mask.h's range rule rules out (every key after every query, or document
ranges apart; a pad is document -1). Where the keys are cut into the same aligned
tiles as the queries (one rank holding the row, or the solver's whole-tile chunks
kept in place), the tiles a query tile [q, q + 64) computes are those from the one
holding start(q) up to its own:

    tile_area(q) = (q / 64 - start(q) / 64 + 1) * 64 * 64

with start(q) = 0 for a tile that holds the row's first pad and a real token
(documents -1 to its last: it meets every earlier tile) and the first pad's tile
for a tile of pads alone (it meets the pads). This is the work the solver
balances: its chunks are whole tiles, and on rows of short documents the area
misses most of it (a 64-token chunk of a 30-token document costs its whole
diagonal tile). dev/cp_layout checks it against the tiles it counts.
*/
#ifndef CP_ATTENTION_AREA_H
#define CP_ATTENTION_AREA_H

// The index in the row of the first token of each token's document: start(i).
// docs: (T) document ids   starts: (T)
static void cp_row_document_starts(const int *docs, int T, int *starts) {
    for (int t = 0; t < T; t++) { starts[t] = t > 0 && docs[t] == docs[t - 1] ? starts[t - 1] : t; }
}

// the keys the real query at index `index` of its row sees, its document starting at doc_start
static long long query_area(int index, int doc_start) { return (long long)index - doc_start + 1; }

// The area of the queries [start, end) of a row of T real tokens kept in place
// (slots from T on are pad and cost nothing).
// doc_starts: (T) from cp_row_document_starts, NULL: one document
static long long span_area(const int *doc_starts, int T, int start, int end) {
    long long area = 0;
    for (int i = start; i < end && i < T; i++) { area += query_area(i, doc_starts ? doc_starts[i] : 0); }
    return area;
}

// The pairs a tiled kernel computes for the query tiles of [start, end) (both
// multiples of tile) of a row of T real tokens kept in place and padded after T,
// with the keys in the same aligned tiles (the header's tile_area).
// doc_starts: (T) from cp_row_document_starts, NULL: one document
static long long span_tile_area(const int *doc_starts, int T, int start, int end, int tile) {
    long long area = 0;
    for (int q = start; q < end; q += tile) {
        int first = q >= T ? T : q + tile > T ? 0 : doc_starts ? doc_starts[q] : 0; // the first key seen
        area += (long long)(q / tile - first / tile + 1) * tile * tile;
    }
    return area;
}

#endif // CP_ATTENTION_AREA_H
