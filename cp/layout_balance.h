/*
A layout's balance on one batch: the largest rank's attention work over the mean
over the ranks, summed over the rows, in the two measures of cp/attention_area.h:

    area   the masked area of the rank's real queries: the pairs that count
    tiles  the pairs the tiled kernels (the GPU's, the CPU's BLAS build) compute for
           the rank's queries: each tile of 64 of its local rows against every
           rank's tiles, kept whole unless cp/block_mask.h's range rule skips the
           pair (what the solver layout balances)

This is the work of the algorithms that attend a rank's queries to every rank's
K/V blocks (ring, all-gather); Ulysses attends every token of its group for its
heads, so there the layout's balance counts only in the hybrid's ring. The
trainers' start-up table prints both for the data's first batch; dev/cp_layout
-tile 64 counts the same per rank pair by pair (its imbalance line), and
test/e2e_documents.sh checks that the two agree.
*/
#ifndef CP_LAYOUT_BALANCE_H
#define CP_LAYOUT_BALANCE_H

#include <stdlib.h>
#include "attention_area.h"
#include "block_mask.h"
#include "sharder.h" // cp/layout_solver.h: CP_SOLVER_TILE, the tiled kernels' rows per tile


typedef struct {
    double area, tiles; // the largest rank's over the mean (1: even)
    int local_len;      // Tl: the batch's tokens per rank and row
} CpLayoutBalance;

static double largest_over_mean(const long long *x, int n) {
    long long max = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        max = x[i] > max ? x[i] : max;
        sum += x[i];
    }
    return sum > 0 ? (double)max * n / sum : 1.0;
}

// The balance of the batch `inputs` (B, T) as every rank of `cp` shards it with
// sharders set up as sh0 (its kind, documents, chunk and minimum length; sh0's own
// rank is replaced by each in turn). Returns CP_ERROR with sh0->error set when the
// batch cannot be sharded.
static int cp_layout_balance(CpSharder *sh0, const int *inputs, const int *targets, int B, int T,
                             CpLayoutBalance *out) {
    int cp = sh0->cp_size;
    CpSharder *sh = (CpSharder *)mallocCheck((size_t)cp * sizeof(CpSharder));
    int status = CP_OK, made = 0;
    for (; made < cp && status == CP_OK; made++) {
        cp_sharder_init(&sh[made], sh0->kind, made, cp, sh0->max_positions, sh0->documents);
        sh[made].min_padded_len = sh0->min_padded_len;
        sh[made].chunk = sh0->chunk;
        status = cp_shard_batch(&sh[made], inputs, targets, NULL, B, T);
        if (status != CP_OK) { memcpy(sh0->error, sh[made].error, sizeof(sh0->error)); }
    }
    if (status == CP_OK) {
        int Tl = sh[0].layout.local_len, nt = (Tl + CP_SOLVER_TILE - 1) / CP_SOLVER_TILE;
        int masked = sh0->documents.mask_attention;
        long long *area = (long long *)callocCheck((size_t)cp, sizeof(long long));
        long long *tiles = (long long *)callocCheck((size_t)cp, sizeof(long long));
        int *docs = (int *)mallocCheck((size_t)T * sizeof(int)), *starts = (int *)mallocCheck((size_t)T * sizeof(int));
        SubBlock *tile = (SubBlock *)mallocCheck((size_t)cp * nt * sizeof(SubBlock)); // (cp, nt) of one row
        for (int b = 0; b < B; b++) {
            cp_row_documents(inputs + (size_t)b * T, T, sh0->documents.token, docs);
            cp_row_document_starts(docs, T, starts);
            for (int r = 0; r < cp; r++) {
                const ShardLayout *lay = &sh[r].layout;
                size_t row = (size_t)b * Tl;
                for (int i = 0; i < Tl; i++) {
                    int o = lay->original_index[row + i];
                    if (o >= 0) { area[r] += query_area(o, masked ? starts[o] : 0); }
                }
                for (int t = 0; t < nt; t++) {
                    int end = (t + 1) * CP_SOLVER_TILE < Tl ? (t + 1) * CP_SOLVER_TILE : Tl;
                    tile[(size_t)r * nt + t] = sub_block_range(lay->global_index + row, lay->document + row,
                                                               t * CP_SOLVER_TILE, end);
                }
            }
            for (int r = 0; r < cp; r++) {
                for (int q = 0; q < nt; q++) {
                    const SubBlock *qt = &tile[(size_t)r * nt + q];
                    for (int k = 0; k < cp * nt; k++) {
                        if (block_visibility(qt, &tile[k]) != BLOCK_SKIP) {
                            tiles[r] += (long long)(qt->end - qt->start) * (tile[k].end - tile[k].start);
                        }
                    }
                }
            }
        }
        out->local_len = Tl;
        out->area = largest_over_mean(area, cp);
        out->tiles = largest_over_mean(tiles, cp);
        free(area);
        free(tiles);
        free(docs);
        free(starts);
        free(tile);
    }
    for (int r = 0; r < made; r++) { cp_sharder_free(&sh[r]); }
    free(sh);
    return status;
}

#endif // CP_LAYOUT_BALANCE_H
