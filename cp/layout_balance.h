/*
What a layout costs on one batch, from every CP rank's shard of it (the sharders
of all the ranks, made in one process: the trainers' start-up table on rank 0,
dev/cp_layout):

  - its balance: the largest rank's attention work over the mean over the ranks,
    summed over the rows, in the two measures of cp/attention_area.h:

        area   the masked area of the rank's real queries: the pairs that count
        tiles  the pairs the tiled kernels (the GPU's, the CPU's BLAS build)
               compute for the rank's queries: each tile of 64 of its local rows
               against every rank's tiles, kept whole unless cp/block_mask.h's
               range rule skips the pair (what the solver layout balances)

    This is the work of the algorithms that attend a rank's queries to every
    rank's K/V (ring, all-gather, group-cast); Ulysses attends every token of its
    group for its heads, so there the layout's balance counts only in the
    hybrid's ring.
  - group-cast's bytes, the one algorithm whose messages depend on the batch:
    every rank's plan (cp/groupcast_plan.h) built from the shards' coordinates,
    and its groupcast_cost (cp/attention_cost.h).

dev/cp_layout -tile 64 -m dN counts the balance pair by pair per rank and prints
both; test/e2e_documents.sh checks the start-up table's against it.
*/
#ifndef CP_LAYOUT_BALANCE_H
#define CP_LAYOUT_BALANCE_H

#include <stdlib.h>
#include <string.h>
#include "attention_area.h"
#include "attention_cost.h"
#include "block_mask.h"
#include "groupcast_plan.h"
#include "sharder.h" // cp/layout_solver.h: CP_SOLVER_TILE, the tiled kernels' rows per tile

typedef struct {
    double area, tiles; // the largest rank's over the mean (1: even)
} CpLayoutBalance;

// Shards the batch (inputs, targets: (B, T)) for every rank of `cp`, as each rank
// would with sharders set up alike (kind, max_positions, documents, the solver's
// chunk, the minimum padded length). sh: (cp) sharders, for the caller to free
// with cp_sharder_free. Returns CP_ERROR with the reason in sh[0].error.
static int cp_shard_every_rank(CpSharder *sh, int cp, CpLayoutKind kind, int max_positions, CpDocuments documents,
                               int chunk, int min_padded_len, const int *inputs, const int *targets, int B, int T) {
    int status = CP_OK;
    for (int r = 0; r < cp; r++) {
        cp_sharder_init(&sh[r], kind, r, cp, max_positions, documents);
        sh[r].chunk = chunk;
        sh[r].min_padded_len = min_padded_len;
    }
    for (int r = 0; r < cp && status == CP_OK; r++) {
        status = cp_shard_batch(&sh[r], inputs, targets, NULL, B, T);
        if (status != CP_OK && r != 0) { memcpy(sh[0].error, sh[r].error, sizeof(sh[0].error)); }
    }
    return status;
}

static double largest_over_mean(const long long *x, int n) {
    long long max = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        max = x[i] > max ? x[i] : max;
        sum += x[i];
    }
    return sum > 0 ? (double)max * n / sum : 1.0;
}

// The balance of the batch `inputs` (B, T) over the ranks' shards sh (cp).
static CpLayoutBalance cp_layout_balance(const CpSharder *sh, int cp, const int *inputs, int B, int T) {
    int Tl = sh[0].layout.local_len, nt = (Tl + CP_SOLVER_TILE - 1) / CP_SOLVER_TILE;
    int masked = sh[0].documents.mask_attention;
    long long *area = (long long *)callocCheck((size_t)cp, sizeof(long long));
    long long *tiles = (long long *)callocCheck((size_t)cp, sizeof(long long));
    int *docs = (int *)mallocCheck((size_t)T * sizeof(int)), *starts = (int *)mallocCheck((size_t)T * sizeof(int));
    SubBlock *tile = (SubBlock *)mallocCheck((size_t)cp * nt * sizeof(SubBlock)); // (cp, nt) of one row
    for (int b = 0; b < B; b++) {
        cp_row_documents(inputs + (size_t)b * T, T, sh[0].documents.token, docs);
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
    CpLayoutBalance out = {largest_over_mean(area, cp), largest_over_mean(tiles, cp)};
    free(area);
    free(tiles);
    free(docs);
    free(starts);
    free(tile);
    return out;
}

// Group-cast's messages per layer under the ranks' shards sh (cp) of one batch: the
// mean bytes over the ranks (rounded down) with the largest rank's messages, and in
// *most the largest rank's count of each column.
static AttentionCost cp_groupcast_batch_cost(const CpSharder *sh, int cp, int C, AttentionCost *most_out) {
    int B = sh[0].layout.B, Tl = sh[0].layout.local_len;
    size_t bt = (size_t)B * Tl;
    AttentionCost most = {0, 0, 0, 0, 0, 0}, sum = {0, 0, 0, 0, 0, 0};
    GroupcastPlan p;
    groupcast_plan_init(&p, cp, 0, B, Tl);
    for (int r = 0; r < cp; r++) {
        memcpy(p.coords + (size_t)r * 2 * bt, sh[r].layout.global_index, bt * sizeof(int));
        memcpy(p.coords + (size_t)r * 2 * bt + bt, sh[r].layout.document, bt * sizeof(int));
    }
    for (int r = 0; r < cp; r++) {
        p.rank = r;
        groupcast_plan_build(&p);
        AttentionCost a = groupcast_cost(&p, C);
        sum.forward_bytes += a.forward_bytes;
        sum.backward_bytes += a.backward_bytes;
        if (a.forward_bytes > most.forward_bytes) { most.forward_bytes = a.forward_bytes; }
        if (a.forward_messages > most.forward_messages) { most.forward_messages = a.forward_messages; }
        if (a.backward_bytes > most.backward_bytes) { most.backward_bytes = a.backward_bytes; }
        if (a.backward_messages > most.backward_messages) { most.backward_messages = a.backward_messages; }
        most.step_bytes = a.step_bytes;
        most.step_messages = a.step_messages;
    }
    groupcast_plan_free(&p);
    *most_out = most;
    AttentionCost mean = most;
    mean.forward_bytes = sum.forward_bytes / cp;
    mean.backward_bytes = sum.backward_bytes / cp;
    return mean;
}

#endif // CP_LAYOUT_BALANCE_H
