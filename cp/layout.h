/*
Context-parallel layouts: which global token positions each CP rank owns.

A layout is nothing but an index map. For a row padded to P tokens, rank r of cp
ranks owns P/cp positions, listed in the order it stores them locally. Everything
downstream (masks, position embeddings, shard, gather) is derived from these global
indices, so no other code ever asks which layout produced a shard.

    identity     cp = 1: the one rank owns [0, T), no padding.
    contiguous   pad to a multiple of 2*cp; rank r owns [r*P/cp, (r+1)*P/cp).
    round_robin  pad to a multiple of 2*cp; split into 2*cp chunks of c = P/(2*cp);
                 rank r owns chunk r, then chunk 2*cp-1-r. Under a causal mask the
                 early chunks are cheap and the late ones expensive, so pairing
                 chunk r with its mirror gives every rank the same attention work
                 (the "head-tail" or "zigzag" balancing).

    striped      pad to a multiple of cp; rank r owns r, r + cp, r + 2cp, ... (token i
                 goes to rank i mod cp), as ring-flash-attention's stripe variant and
                 Striped Attention (Brandon et al., 2023). Every block of every rank
                 then spans the whole row, so under a causal mask each rank's work is
                 even at every ring step, not only summed over the ring, without
                 cutting the row into 2*cp chunks; and a rank holds 1/cp of every
                 document, so documents balance too. Its index sets are strided, not
                 contiguous: cp/block_mask.h decides from their ranges alone.
    packed       documents (each opened by an EOT token) are laid out one after
                 another, each padded to a multiple of 2*cp and split head-tail
                 over the ranks on its own, like TransformerEngine's THD format:
                 with document masking every document is a small causal
                 attention, and the head-tail split balances each one. The layout
                 depends on the data: the row's padded length is the sum of its
                 padded documents, the batch's P the longest row (shorter rows end
                 in a pad region split the same way).

    solver       MagiAttention's dispatch solver, with locality. Pad to a multiple
                 of cp * chunk (-cc, whole 64-row tiles of the tiled attention),
                 tokens in place (slot g is token g, pads at the end); cut the row
                 into chunks of `chunk` tokens, each costing what the tiled kernels
                 compute for its queries: their masked area (causal, and only their
                 document's keys with -dm 1) in whole 64 x 64 tiles
                 (cp/attention_area.h); give every rank the same number of chunks, so that the
                 token-local layers (matmuls, layernorms, the loss) stay balanced
                 too, chosen greedily: the most expensive chunk first, each to the
                 least-loaded rank that has room. This keeps the largest rank's work
                 near the mean for any mask, where the fixed patterns balance one
                 shape each (round_robin one causal document, packed each document
                 by padding it to 2*cp, striped everything but with every tile
                 mixed). What it adds to MagiAttention's, which balances area only
                 and so spreads a document over every rank: with -dm 1, swaps of two
                 chunks between two ranks that even the exact area as well, then
                 swaps that lower the number of (rank, document) pairs, as long as
                 both ranks stay within CP_SOLVER_SLACK_PERCENT of the mean above
                 the largest rank. A document's chunks then
                 sit on few ranks, so an exchange that sends K/V only to the ranks
                 whose queries see it has less to send, for at most 1% of balance.
                 Every choice is made on integers in a fixed order (ties to the
                 lower chunk and rank index), so every rank computes the same layout
                 from the same data (cp/layout_solver.h: the rule step by step). A rank stores its chunks in increasing global
                 order: each tile of its tokens is one contiguous range, which
                 cp/block_mask.h skips or keeps whole. One long causal row balances
                 exactly with an even number of chunks per rank (the greedy pairs
                 early and late chunks, as round_robin does); an odd number leaves
                 up to about one chunk's area of imbalance.

Example, T = 10, cp = 2 -> P = 12 (striped: P = 10):
    round_robin  r0 = [0 1 2 9 10 11]   r1 = [3 4 5 6 7 8]
    contiguous   r0 = [0 1 2 3 4 5]     r1 = [6 7 8 9 10 11]
    striped      r0 = [0 2 4 6 8]       r1 = [1 3 5 7 9]
Packed, documents [0, 6) and [6, 10) at cp 2: padded to 8 and 4, P = 12;
    r0 = [0 1 6 7 8 11]   r1 = [2 3 4 5 9 10]   (slots 6 and 7 are pad)
Solver, one document of T = 256 at cp 2, chunk 64: chunks 0..3 compute 1, 2, 3, 4
tiles of 4096 pairs and go 3 -> r0, 2 -> r1, 1 -> r1 (the least load), 0 -> r0 (the
only room):
    r0 = [0-63 192-255]   r1 = [64-191]   (5 tiles each; 16448 visible pairs each)
*/
#ifndef CP_LAYOUT_H
#define CP_LAYOUT_H

#include <string.h>
#include "layout_solver.h"

typedef enum {
    CP_LAYOUT_IDENTITY = 0,
    CP_LAYOUT_CONTIGUOUS = 1,
    CP_LAYOUT_ROUND_ROBIN = 2,
    CP_LAYOUT_PACKED = 3,
    CP_LAYOUT_STRIPED = 4,
    CP_LAYOUT_SOLVER = 5,
} CpLayoutKind;

static const char *cp_layout_names[] = {"identity", "contiguous", "round_robin", "packed", "striped", "solver"};
#define CP_NUM_LAYOUTS 6

// packed and solver depend on the data (cp_row_layout); the others are a function
// of (P, cp) (cp_local_indices)
static int cp_layout_depends_on_data(CpLayoutKind kind) { return kind == CP_LAYOUT_PACKED || kind == CP_LAYOUT_SOLVER; }

// parse a -cl value; returns -1 when the name is unknown
static int cp_layout_from_name(const char *name) {
    for (int i = 0; i < CP_NUM_LAYOUTS; i++) {
        if (strcmp(name, cp_layout_names[i]) == 0) { return i; }
    }
    return -1;
}

// What each rank must be divisible into. identity pads nothing; striped pads to cp,
// one stripe per rank; contiguous and round_robin pad to 2*cp so that every rank's
// share splits into two equal halves (round_robin needs the two chunks; ring
// attention's half-block skipping takes the halves of any length); solver to whole
// tiles on every rank (its chunks, a multiple of tiles, may pad more:
// cp_solver_padded_len).
static int cp_pad_multiple(CpLayoutKind kind, int cp) {
    return kind == CP_LAYOUT_IDENTITY ? 1 : kind == CP_LAYOUT_STRIPED ? cp
           : kind == CP_LAYOUT_SOLVER ? CP_SOLVER_TILE * cp : 2 * cp;
}

static int cp_padded_len(CpLayoutKind kind, int T, int cp) {
    int m = cp_pad_multiple(kind, cp);
    return (T + m - 1) / m * m;
}

// Appends rank's head and tail chunks of the span [start, start + len) (len a
// multiple of 2*cp) to indices; returns the new count.
static int cp_head_tail_span(int start, int len, int cp, int rank, int *indices, int count) {
    int chunk = len / (2 * cp);
    for (int i = 0; i < chunk; i++) { indices[count++] = start + rank * chunk + i; }
    for (int i = 0; i < chunk; i++) { indices[count++] = start + (2 * cp - 1 - rank) * chunk + i; }
    return count;
}

// Global positions owned by `rank`, in local order, for the layouts that are a
// pure function of (P, cp): identity, contiguous, round_robin, striped. Returns 0, or -1
// (indices untouched) when the arguments break the contract: cp >= 1 (identity:
// cp 1), rank in [0, cp), P >= 0 a multiple of the layout's cp_pad_multiple
// (otherwise some slots would belong to no rank), and a layout that does not
// depend on the data (packed: cp_row_layout).
// indices: (P / cp,)
static int cp_local_indices(CpLayoutKind kind, int P, int cp, int rank, int *indices) {
    if (cp < 1 || rank < 0 || rank >= cp || P < 0 || (kind == CP_LAYOUT_IDENTITY && cp != 1)) { return -1; }
    if ((int)kind < 0 || (int)kind >= CP_NUM_LAYOUTS || cp_layout_depends_on_data(kind)) { return -1; }
    if (P % cp_pad_multiple(kind, cp) != 0) { return -1; }
    int local_len = P / cp;
    if (kind == CP_LAYOUT_ROUND_ROBIN) {
        cp_head_tail_span(0, P, cp, rank, indices, 0);
    } else if (kind == CP_LAYOUT_STRIPED) {
        for (int i = 0; i < local_len; i++) { indices[i] = rank + i * cp; }
    } else { // identity is contiguous with cp = 1
        for (int i = 0; i < local_len; i++) { indices[i] = rank * local_len + i; }
    }
    return 0;
}

// the end of the document that starts at `start` (docs: (T) document ids)
static int cp_document_end(const int *docs, int T, int start) {
    int end = start;
    while (end < T && docs[end] == docs[start]) { end++; }
    return end;
}

// The padded length of one row under packed: the sum of its documents, each
// rounded up to a multiple of 2*cp. docs: (T) document id of each token, starting
// at 0 and increasing by one at each new document.
static int cp_packed_row_len(const int *docs, int T, int cp) {
    int P = 0;
    for (int start = 0, end; start < T; start = end) {
        end = cp_document_end(docs, T, start);
        P += (end - start + 2 * cp - 1) / (2 * cp) * (2 * cp);
    }
    return P;
}

// The layout of one row padded to P: the padded slots `rank` owns, in local order,
// and for every padded slot the index in the original row (-1 for a pad slot).
// Returns 0, or -1 when the layout cannot split P (cp_local_indices' contract; the
// solver: P a multiple of cp * chunk, chunk >= 1).
// docs: (T) document ids where attention is masked to documents, NULL: none (packed
// needs them; the solver weighs its chunks by them)   chunk: the solver's chunk size
// indices: (P / cp)   slot_original: (P)
static int cp_row_layout(CpLayoutKind kind, const int *docs, int T, int P, int cp, int chunk, int rank,
                         int *indices, int *slot_original) {
    if (kind != CP_LAYOUT_PACKED) {
        for (int g = 0; g < P; g++) { slot_original[g] = g < T ? g : -1; }
    }
    if (kind == CP_LAYOUT_SOLVER) {
        if (chunk < 1 || cp < 1 || rank < 0 || rank >= cp || P < 0 || P % (cp * chunk) != 0) { return -1; }
        int *owner = (int *)mallocCheck((size_t)(P / chunk + 1) * sizeof(int)); // (P / chunk)
        cp_solver_owners(docs, T, P, cp, chunk, owner);
        int count = 0;
        for (int c = 0; c < P / chunk; c++) {
            for (int i = 0; i < chunk && owner[c] == rank; i++) { indices[count++] = c * chunk + i; }
        }
        free(owner);
        return 0;
    }
    if (!cp_layout_depends_on_data(kind)) { return cp_local_indices(kind, P, cp, rank, indices); }
    int count = 0, offset = 0;
    for (int start = 0, end; start < T; start = end) {
        end = cp_document_end(docs, T, start);
        int padded = (end - start + 2 * cp - 1) / (2 * cp) * (2 * cp);
        for (int i = 0; i < padded; i++) { slot_original[offset + i] = start + i < end ? start + i : -1; }
        count = cp_head_tail_span(offset, padded, cp, rank, indices, count);
        offset += padded;
    }
    // the row's share of the batch's padding, split like a document
    for (int g = offset; g < P; g++) { slot_original[g] = -1; }
    cp_head_tail_span(offset, P - offset, cp, rank, indices, count);
    return 0;
}

#endif // CP_LAYOUT_H
