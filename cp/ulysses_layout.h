/*
The coordinates of a Ulysses group's tokens (host memory; the CPU and the GPU
Ulysses attention share it). After the all-to-all each rank of a group of U
ranks holds the tokens of all U ranks, for NH / U heads: they form the group's
row, which the attention then treats as one rank's local tokens.

Each rank's (B, T) global indices and document ids are all-gathered in the group
once per batch, when the trainer binds the attention to the batch's layout (the
same for every layer and both passes), and each
group row is ordered by global index: token t of row b that came from group rank
i sits at slot[i][b][t] of the group's row. Ordering by index (and not by rank)
keeps a sub-block's indices contiguous wherever the layout allows, so that
cp/block_mask.h skips what it can: at U = cp the group's row is the whole padded
row in order, and the causal half that nothing sees is never computed. Nothing
here knows which layout made the indices.
*/
#ifndef CP_ULYSSES_LAYOUT_H
#define CP_ULYSSES_LAYOUT_H

#include <stdlib.h>
#include <string.h>
#include "comm.h"
#include "sharder.h"
#include "../llmc/utils.h"

typedef struct {
    int U, B, T;        // ranks in the group, rows, local tokens per row of each rank
    ShardLayout layout; // (B, U*T) the group's row: B, local_len = U*T, global_index, document
    int *slot;          // (U, B, T) position in the group's row of each rank's local token
    int *gathered;      // (U, 2, B, T) every group rank's global index | document
} UlyssesLayout;

static void ulysses_layout_init(UlyssesLayout *g, int U, int B, int T) {
    memset(g, 0, sizeof(*g));
    g->U = U; g->B = B; g->T = T;
    size_t n = (size_t)U * B * T;
    g->layout.B = B;
    g->layout.local_len = U * T;
    g->layout.global_index = (int *)mallocCheck(n * sizeof(int));
    g->layout.document = (int *)mallocCheck(n * sizeof(int));
    g->slot = (int *)mallocCheck(n * sizeof(int));
    g->gathered = (int *)mallocCheck(2 * n * sizeof(int));
}

static size_t ulysses_layout_bytes(const UlyssesLayout *g) { return 5 * (size_t)g->U * g->B * g->T * sizeof(int); }

static void ulysses_layout_free(UlyssesLayout *g) {
    free(g->layout.global_index); free(g->layout.document); free(g->slot); free(g->gathered);
    memset(g, 0, sizeof(*g));
}

typedef struct {
    int index;  // global index
    int source; // i * T + t: group rank i, local token t
} UlyssesToken;

static int ulysses_token_cmp(const void *a, const void *b) {
    int x = ((const UlyssesToken *)a)->index, y = ((const UlyssesToken *)b)->index;
    return (x > y) - (x < y);
}

// Collective over the group (host memory): the group's row of this batch's layout.
static void ulysses_layout_build(UlyssesLayout *g, Comm *group_host, const ShardLayout *local) {
    int U = g->U, B = g->B, T = g->T;
    if (local->B != B || local->local_len != T || group_host->size != U) {
        fatal("ulysses: the layout (B %d, T %d) or the group (%d ranks) does not match the buffers (B %d, T %d, U %d)",
              local->B, local->local_len, group_host->size, B, T, U);
    }
    size_t bt = (size_t)B * T;
    int *mine = (int *)mallocCheck(2 * bt * sizeof(int)); // index | document of this rank
    memcpy(mine, local->global_index, bt * sizeof(int));
    memcpy(mine + bt, local->document, bt * sizeof(int));
    group_host->all_gather(group_host, mine, g->gathered, 2 * bt * sizeof(int));
    free(mine);
    UlyssesToken *row = (UlyssesToken *)mallocCheck((size_t)U * T * sizeof(UlyssesToken));
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < U; i++) {
            for (int t = 0; t < T; t++) {
                row[i * T + t].index = g->gathered[(size_t)i * 2 * bt + (size_t)b * T + t];
                row[i * T + t].source = i * T + t;
            }
        }
        qsort(row, (size_t)U * T, sizeof(UlyssesToken), ulysses_token_cmp);
        for (int p = 0; p < U * T; p++) {
            if (p > 0 && row[p].index == row[p - 1].index) {
                fatal("ulysses: two tokens of row %d hold global index %d: the layout is not a partition", b,
                      row[p].index);
            }
            int i = row[p].source / T, t = row[p].source % T;
            g->slot[((size_t)i * B + b) * T + t] = p;
            g->layout.global_index[(size_t)b * U * T + p] = row[p].index;
            g->layout.document[(size_t)b * U * T + p] = g->gathered[(size_t)i * 2 * bt + bt + (size_t)b * T + t];
        }
    }
    free(row);
}

#endif // CP_ULYSSES_LAYOUT_H
