/*
What each context-parallel attention algorithm sends per layer, from the sizes
alone: the bytes that leave one rank and its point-to-point messages, forward and
backward, with collectives counted as their bandwidth-optimal schedules send (an
all-gather or a reduce-scatter over n ranks: n-1 parts, in n-1 dependent steps;
an all-to-all: its n-1 parts for the others, n-1 messages that need not wait for
each other). fp32 tensors and int32 coordinates, as the code sends them.

The other cost of attention, its work (the masked area each rank computes, and the
whole 64-row tiles the kernels compute of it, which the solver layout balances), is
cp/attention_area.h.

dev/cp_layout prints it for a (T, cp, model); dev/bench/attention_algorithms.c
counts the same quantities on the running code (and test/test_cp_layout.sh checks
that the two agree).

Per rank, B rows of Tl = P / cp local tokens, C channels, NH heads; a K/V block
(cp/attention_block.h) is 2 B Tl C floats and 2 B Tl ints, dK | dV 2 B Tl C floats.
    ring        forward  cp-1 K/V blocks                 backward  cp-1 K/V + cp dK|dV
    allgather   forward  cp-1 K/V blocks                 backward  cp-1 K/V + cp-1 dK|dV
    ulysses     forward  (U-1)/U of B Tl (3C + C + NH)   backward  (U-1)/U of B Tl (5C + NH + 3C)
                (U = cp; the messages do not grow with cp's ring steps: 2 (U-1) each way)
    hybrid      the all-to-all of ulysses over U ranks, plus the ring over R = cp / U
                ranks of blocks of U Tl tokens and C / U channels
    groupcast   depends on the batch, not on the sizes alone: groupcast_cost counts
                one rank's under its plan (cp/groupcast_plan.h): forward the K|V of
                the tokens its peers need (2C floats each, one message per peer
                that needs any), backward the same again and the partial dK|dV of
                the tokens it received back to their owners; per bind the
                coordinates' all-gather, cp-1 parts of 2 B Tl ints
*/
#ifndef CP_ATTENTION_COST_H
#define CP_ATTENTION_COST_H

#include <stddef.h>
#include "attention_block.h"
#include "attention_kind.h"
#include "groupcast_plan.h"

typedef struct {
    size_t forward_bytes, backward_bytes; // bytes that leave the rank, per layer
    long forward_messages, backward_messages;
    size_t step_bytes;                    // once per bind, a batch's (Ulysses: the coordinates of its group)
    long step_messages;
} AttentionCost;

// ring over n ranks of blocks of (B, Tl) tokens and C channels
static void ring_cost(AttentionCost *a, int n, int B, int Tl, int C) {
    if (n == 1) { return; }
    a->forward_bytes += (n - 1) * kv_block_bytes(B, Tl, C);
    a->forward_messages += n - 1;
    a->backward_bytes += (n - 1) * kv_block_bytes(B, Tl, C) + n * dkv_block_bytes(B, Tl, C);
    a->backward_messages += 2 * n - 1;
}

// the all-to-alls of Ulysses over U ranks: floats per local token in and back
static void ulysses_cost(AttentionCost *a, int U, int B, int Tl, int C, int NH) {
    if (U == 1) { return; }
    size_t tokens = (size_t)B * Tl, f = sizeof(float);
    a->forward_bytes += (U - 1) * (tokens * 3 * C / U + tokens * (C + NH) / U) * f;
    a->backward_bytes += (U - 1) * (tokens * (5 * C + NH) / U + tokens * 3 * C / U) * f;
    a->forward_messages += 2 * (U - 1);
    a->backward_messages += 2 * (U - 1);
    a->step_bytes += (U - 1) * tokens * 2 * sizeof(int);
    a->step_messages += U - 1;
}

// one rank's group-cast messages under its plan of a batch
static AttentionCost groupcast_cost(const GroupcastPlan *p, int C) {
    AttentionCost a = {0, 0, 0, 0, 0, 0};
    if (p->cp == 1) { return a; }
    size_t token = 2 * (size_t)C * sizeof(float);
    for (int peer = 0; peer < p->cp; peer++) {
        size_t sent = (size_t)p->send_count[peer] * token, received = (size_t)p->recv_count[peer] * token;
        a.forward_bytes += sent;
        a.forward_messages += sent > 0;
        a.backward_bytes += sent + received;
        a.backward_messages += (sent > 0) + (received > 0);
    }
    a.step_bytes = (size_t)(p->cp - 1) * 2 * p->B * p->T * sizeof(int);
    a.step_messages = p->cp - 1;
    return a;
}

// U: the Ulysses degree of kind hybrid (ulysses takes cp, the others 1)
// (groupcast's depends on the batch: groupcast_cost)
static AttentionCost attention_cost(CpAttentionKind kind, int cp, int U, int B, int Tl, int C, int NH) {
    AttentionCost a = {0, 0, 0, 0, 0, 0};
    switch (kind) {
    case CP_ATTENTION_RING: ring_cost(&a, cp, B, Tl, C); break;
    case CP_ATTENTION_ALLGATHER:
        if (cp == 1) { break; }
        a.forward_bytes = (cp - 1) * kv_block_bytes(B, Tl, C);
        a.forward_messages = cp - 1;
        a.backward_bytes = (cp - 1) * (kv_block_bytes(B, Tl, C) + dkv_block_bytes(B, Tl, C));
        a.backward_messages = 2 * (cp - 1);
        break;
    case CP_ATTENTION_ULYSSES: ulysses_cost(&a, cp, B, Tl, C, NH); break;
    case CP_ATTENTION_HYBRID:
        ulysses_cost(&a, U, B, Tl, C, NH);
        ring_cost(&a, cp / U, B, U * Tl, C / U);
        break;
    case CP_ATTENTION_GROUPCAST:
        fatal("attention_cost: group-cast's bytes depend on the batch; count them with groupcast_cost of its plan");
    }
    return a;
}

#endif // CP_ATTENTION_COST_H
