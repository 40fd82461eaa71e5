/*
Which query-key pairs of two blocks can see each other, decided per sub-block.

Ring attention meets a visiting K/V block at every step. Whether a query sees a key
depends only on the two tokens' global coordinates:

    visible(q, k)  =  index_k <= index_q  and  document_k == document_q

(index = position in the padded row, document = document id: 0 for every real
token when documents are not masked, and -1 for a pad, so that no real query sees
a pad key; cp/sharder.h). Each side is cut into RING_SUBBLOCKS
sub-blocks (halves); for a pair of sub-blocks the ranges of index and document
decide at once whether

    BLOCK_SKIP    no pair is visible: nothing is computed
    BLOCK_FULL    every pair is visible: no mask is evaluated
    BLOCK_MASKED  some pairs are: the mask is evaluated per pair

With round_robin the halves are exactly the two chunks a rank owns, so this is the
classic zigzag skipping; with contiguous it skips the upper triangle of blocks
(`dev/cp_layout -steps 1` prints every rank's table at every ring step). No
layout is named here: the ranges come from the indices alone. The tiled CPU
attention (cp/attention_block_tiled.h) applies the same rule to its tiles
(sub_block_range over a tile); cp/block_mask.cuh, the GPU twin of this file,
applies it to each pair of tiles the GPU kernels meet.
*/
#ifndef CP_BLOCK_MASK_H
#define CP_BLOCK_MASK_H

#include "../llmc/host_device.h" // the same functions serve the CPU loops and the CUDA kernels

#define RING_SUBBLOCKS 2

typedef enum { BLOCK_SKIP = 0, BLOCK_FULL = 1, BLOCK_MASKED = 2 } BlockVisibility;

typedef struct {
    int start, end;         // token range [start, end) within the block
    int index_lo, index_hi; // min and max global index
    int doc_lo, doc_hi;     // min and max document id
} SubBlock;

// the tokens [start, end) of a block and the ranges of their coordinates
HOST_DEVICE static SubBlock sub_block_range(const int *index, const int *document, int start, int end) {
    SubBlock sb;
    sb.start = start;
    sb.end = end;
    sb.index_lo = sb.doc_lo = 0x7fffffff;
    sb.index_hi = sb.doc_hi = -0x7fffffff;
    for (int i = start; i < end; i++) {
        if (index[i] < sb.index_lo) { sb.index_lo = index[i]; }
        if (index[i] > sb.index_hi) { sb.index_hi = index[i]; }
        if (document[i] < sb.doc_lo) { sb.doc_lo = document[i]; }
        if (document[i] > sb.doc_hi) { sb.doc_hi = document[i]; }
    }
    return sb;
}

// sub-block s of a block of T tokens: [s*T/n, (s+1)*T/n)
HOST_DEVICE static SubBlock sub_block_of(const int *index, const int *document, int T, int s) {
    return sub_block_range(index, document, s * T / RING_SUBBLOCKS, (s + 1) * T / RING_SUBBLOCKS);
}

HOST_DEVICE static BlockVisibility block_visibility(const SubBlock *q, const SubBlock *k) {
    if (q->end == q->start || k->end == k->start) { return BLOCK_SKIP; }
    if (q->index_hi < k->index_lo) { return BLOCK_SKIP; } // every key lies after every query
    if (q->doc_hi < k->doc_lo || k->doc_hi < q->doc_lo) { return BLOCK_SKIP; } // no document in common
    int one_document = q->doc_lo == q->doc_hi && k->doc_lo == k->doc_hi && q->doc_lo == k->doc_lo;
    if (one_document && q->index_lo >= k->index_hi) { return BLOCK_FULL; }
    return BLOCK_MASKED;
}

HOST_DEVICE static int pair_visible(int q_index, int q_doc, int k_index, int k_doc) {
    return k_index <= q_index && k_doc == q_doc;
}

// The visibility of every (query sub-block, key sub-block) pair of one row.
// vis: (RING_SUBBLOCKS, RING_SUBBLOCKS), [query sub-block][key sub-block]
HOST_DEVICE static void block_visibility_table(const int *q_index, const int *q_doc, const int *k_index, const int *k_doc,
                                   int T, BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS],
                                   SubBlock qs[RING_SUBBLOCKS], SubBlock ks[RING_SUBBLOCKS]) {
    for (int s = 0; s < RING_SUBBLOCKS; s++) {
        qs[s] = sub_block_of(q_index, q_doc, T, s);
        ks[s] = sub_block_of(k_index, k_doc, T, s);
    }
    for (int a = 0; a < RING_SUBBLOCKS; a++) {
        for (int b = 0; b < RING_SUBBLOCKS; b++) {
            vis[a][b] = block_visibility(&qs[a], &ks[b]);
        }
    }
}

#endif // CP_BLOCK_MASK_H
