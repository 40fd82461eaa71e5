/*
The group-cast plan: which of this rank's K/V tokens each peer needs, and which
of every peer's tokens this rank receives (MagiAttention's zero-redundant
exchange, cp/groupcast_attention.h). Plain C on flat int arrays in host memory,
no transport: the CPU and the GPU group-cast build the same plan.

The need-table. A query sees a key when (cp/block_mask.h)

    visible(q, k)  =  index_k <= index_q  and  document_k == document_q

so token k of rank s is needed by rank r != s iff some query of r in the same row
sees it:

    needed(k, r)  =  document_k >= 0  and  index_k <= last(r, row, document_k)

where last(r, row, d) is the largest global index of a query of rank r in that
row with document d (none: k is not needed). Pads (document -1) are never sent: a
pad query then sees only its own rank's pads, not the ring's view of every pad
before it. A pad's output carries no loss (its target is ignored) and the ones it
reaches are pads too, so nothing real changes; the attention's pad rows simply
differ from the single-rank run's.

The plan is built per batch, the same on every rank, from every rank's tokens'
coordinates (an all_gather over the CP group at bind: (cp, 2, B, T) ints, rank
i's global index (B, T) then its document (B, T)), in O(cp * B * P) with P = cp * T:
per row, last(r, d) for every rank and document (one pass over the row's P
tokens), then one test per (token, peer).

    send list of peer j   this rank's local tokens that j needs, as flat indices
                          b * T + t, ascending
    recv list of peer i   the tokens of rank i this rank needs, as rank i's flat
                          indices, in the same order as rank i's send list for it

Counts and offsets (prefix sums) per peer; a peer that needs nothing has count 0
and gets no message; the own rank's counts are 0; at cp 1 nothing is sent.

Example (the layouts of cp/layout.h), T = 10, cp = 2, round_robin, P = 12:
    r0 = [0 1 2 9 10 11]   r1 = [3 4 5 6 7 8]   (10 and 11 pad)
  one causal document: last(r0, 0) = 9, last(r1, 0) = 8
    r0 sends r1   indices 0 1 2      (local 0 1 2; 9 > 8, 10 and 11 pad)
    r1 sends r0   indices 3 4 5 6 7 8 (local 0..5: all of them, 8 <= 9)
  documents [0, 6) and [6, 10) (-dm 1): last(r0) = {doc 0: 2, doc 1: 9},
  last(r1) = {doc 0: 5, doc 1: 8}
    r0 sends r1   indices 0 1 2      (document 0, <= 5; 9 of document 1 > 8)
    r1 sends r0   indices 6 7 8      (local 3 4 5: document 1, <= 9; 3 4 5 of
                                      document 0 are all > 2)
  The ring sends every rank's 6 tokens (and their coordinates) to the other at
  every step: 12 tokens where group-cast sends 9, or 6 with documents.

Bytes per layer and rank (groupcast_cost, cp/attention_cost.h, which both the
attention and dev/cp_layout use): forward the K and V of the send lists, 2 C
floats per token; backward the same again (the backward does not keep the
forward's, as all-gather attention) plus the partial dK | dV of the receive lists
returned to their owners, 2 C floats per token; once per bind the coordinates'
all-gather, (cp - 1) * 2 * B * T ints.

Stages (-co S): the peers split by ring distance d = (r - s) mod cp into S groups
of consecutive distances, 1 <= S <= cp - 1; a pair's messages go in the stage of
its distance (groupcast_stage_first), the same on both sides.
*/
#ifndef CP_GROUPCAST_PLAN_H
#define CP_GROUPCAST_PLAN_H

#include <stdlib.h>
#include <string.h>
#include "../llmc/utils.h"

typedef struct {
    int cp, rank, B, T; // T local tokens per row
    int *coords;        // (cp, 2, B, T) every rank's global index | document, rank i's at i * 2 * B * T
    int *send_count;    // (cp) tokens this rank sends peer j (0 for itself)
    int *send_offset;   // (cp + 1) where peer j's list starts in send_index; [cp]: the total
    int *send_index;    // (cp * B * T room) this rank's flat indices b * T + t, per peer ascending
    int *recv_count;    // (cp) tokens this rank receives from peer i (0 from itself)
    int *recv_offset;   // (cp + 1)
    int *recv_index;    // (cp * B * T room) rank i's flat indices, as in its send list for this rank
    int *last;          // (cp, P) one row's last(r, d): the largest query index of rank r in document d, or -1
} GroupcastPlan;

// the bytes groupcast_plan_init allocates (the run's memory estimate counts them)
static size_t groupcast_plan_bytes(int cp, int B, int T) {
    size_t bt = (size_t)B * T, P = (size_t)cp * T;
    return (2 * (size_t)cp * bt + 2 * (size_t)cp * bt + 4 * (size_t)cp + 2 + (size_t)cp * P) * sizeof(int);
}

static void groupcast_plan_init(GroupcastPlan *p, int cp, int rank, int B, int T) {
    memset(p, 0, sizeof(*p));
    p->cp = cp; p->rank = rank; p->B = B; p->T = T;
    size_t bt = (size_t)B * T;
    p->coords = (int *)mallocCheck(2 * (size_t)cp * bt * sizeof(int));
    p->send_count = (int *)mallocCheck((size_t)cp * sizeof(int));
    p->recv_count = (int *)mallocCheck((size_t)cp * sizeof(int));
    p->send_offset = (int *)mallocCheck((size_t)(cp + 1) * sizeof(int));
    p->recv_offset = (int *)mallocCheck((size_t)(cp + 1) * sizeof(int));
    p->send_index = (int *)mallocCheck((size_t)cp * bt * sizeof(int));
    p->recv_index = (int *)mallocCheck((size_t)cp * bt * sizeof(int));
    p->last = (int *)mallocCheck((size_t)cp * cp * T * sizeof(int));
}

static void groupcast_plan_free(GroupcastPlan *p) {
    free(p->coords); free(p->send_count); free(p->recv_count); free(p->send_offset); free(p->recv_offset);
    free(p->send_index); free(p->recv_index); free(p->last);
    memset(p, 0, sizeof(*p));
}

// rank r's global index and document of row b: (T) each
static const int *groupcast_index(const GroupcastPlan *p, int r, int b) {
    return p->coords + (size_t)r * 2 * p->B * p->T + (size_t)b * p->T;
}

static const int *groupcast_document(const GroupcastPlan *p, int r, int b) {
    return groupcast_index(p, r, b) + (size_t)p->B * p->T;
}

// whether token t of rank s in row b is needed by rank r (last holds row b's)
static int groupcast_needed(const GroupcastPlan *p, int s, int b, int t, int r) {
    int d = groupcast_document(p, s, b)[t];
    return d >= 0 && groupcast_index(p, s, b)[t] <= p->last[(size_t)r * p->cp * p->T + d];
}

// Builds the lists from p->coords (filled by the caller: the all_gather of every
// rank's index | document). Exits naming the problem if a document id lies outside
// [-1, P) (the sharder's are in [0, T) and -1 for pads).
static void groupcast_plan_build(GroupcastPlan *p) {
    int cp = p->cp, me = p->rank, B = p->B, T = p->T, P = cp * T;
    size_t bt = (size_t)B * T;
    memset(p->send_count, 0, (size_t)cp * sizeof(int));
    memset(p->recv_count, 0, (size_t)cp * sizeof(int));
    // the lists grow in per-peer regions of room B * T, compacted at the end
    for (int b = 0; b < B; b++) {
        for (size_t i = 0; i < (size_t)cp * P; i++) { p->last[i] = -1; }
        for (int r = 0; r < cp; r++) {
            const int *index = groupcast_index(p, r, b), *doc = groupcast_document(p, r, b);
            int *last = p->last + (size_t)r * P;
            for (int t = 0; t < T; t++) {
                if (doc[t] < -1 || doc[t] >= P) {
                    fatal("groupcast: rank %d's token %d of row %d has document %d, outside [-1, %d)", r, t, b,
                          doc[t], P);
                }
                if (doc[t] >= 0 && index[t] > last[doc[t]]) { last[doc[t]] = index[t]; }
            }
        }
        for (int peer = 0; peer < cp; peer++) {
            if (peer == me) { continue; }
            for (int t = 0; t < T; t++) {
                if (groupcast_needed(p, me, b, t, peer)) {
                    p->send_index[(size_t)peer * bt + p->send_count[peer]++] = b * T + t;
                }
                if (groupcast_needed(p, peer, b, t, me)) {
                    p->recv_index[(size_t)peer * bt + p->recv_count[peer]++] = b * T + t;
                }
            }
        }
    }
    p->send_offset[0] = p->recv_offset[0] = 0;
    for (int peer = 0; peer < cp; peer++) {
        p->send_offset[peer + 1] = p->send_offset[peer] + p->send_count[peer];
        p->recv_offset[peer + 1] = p->recv_offset[peer] + p->recv_count[peer];
        // moving down in peer order: a region's new place never overlaps a later region's old one
        memmove(p->send_index + p->send_offset[peer], p->send_index + (size_t)peer * bt,
                (size_t)p->send_count[peer] * sizeof(int));
        memmove(p->recv_index + p->recv_offset[peer], p->recv_index + (size_t)peer * bt,
                (size_t)p->recv_count[peer] * sizeof(int));
    }
}

// Stage i of S holds the ring distances [groupcast_stage_first(i), groupcast_stage_first(i + 1)):
// 1 + i (cp - 1) / S on, rounded down, so that each of the S <= cp - 1 stages has one at least.
static int groupcast_stage_first(int cp, int S, int i) { return 1 + (int)((long)i * (cp - 1) / S); }

#endif // CP_GROUPCAST_PLAN_H
