/*
Ulysses attention on the CPU (DeepSpeed-Ulysses), and its two-level form with the
ring (USP; TransformerEngine's a2a+p2p): -ca ulysses and -ca hybrid.

A Ulysses group of U ranks (cp/mesh.h) holds U * T tokens, T per rank, with all
NH heads each. One all-to-all turns that into: every rank holds all U * T tokens
of the group for NH / U heads (rank u: heads [u*NH/U, (u+1)*NH/U)). Attention
never mixes heads, so each rank then attends its heads over the group's whole row,
with masks from the tokens' global coordinates (cp/ulysses_layout.h orders the row
by global index), and one all-to-all sends each token's output back to its owner.

That attention is the ring (cp/ring_attention.h) over the R = cp / U groups: rank
(g, u) passes the K/V blocks of its heads around the ranks (0, u), (1, u), ...,
which hold the same heads of the other groups' tokens. -ca ulysses is U = cp,
R = 1: a ring of one, i.e. the block attention (cp/attention_block.h) over the
whole padded row. -ca hybrid is 1 < U < cp. Every layout and documents work
unchanged: only the indices say which keys a query sees.

Per layer, with per-token sizes in floats and one all-to-all sending (U-1)/U of
what it is given:
    forward   q|k|v (3C) in, output and log-sum-exp (C + NH) back
    backward  q|k|v, output, output gradient and log-sum-exp (5C + NH) in,
              dq|dk|dv (3C) back
plus the ring's messages across the groups at R > 1. The backward sends q|k|v and
the output again because one instance serves every layer and keeps nothing between
the forward and the backward (a Ulysses that kept each layer's head-sharded
q|k|v and output would send dO in and dq|dk|dv back: 4C). At U = cp the messages
do not depend on the sequence's causal structure and their count is U-1 per
exchange, one exchange each way per pass; the ring's is cp-1 dependent steps.

Memory per rank: the all-to-all buffers (2 x (5C + NH) floats per local token),
the group-row tensors (8C + NH), and the ring's at (U*T tokens, C/U channels),
which is the same size as a ring at (T, C): O(B * T * C), shrinking as 1/cp.
cp/ulysses_exchange.h says where each element goes; cp/ulysses_attention.cuh is
the GPU twin.
*/
#ifndef CP_ULYSSES_ATTENTION_H
#define CP_ULYSSES_ATTENTION_H

#include "attention_block.h"
#include "comm.h"
#include "ring_attention.h"
#include "sharder.h"
#include "ulysses_exchange.h"
#include "ulysses_layout.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/utils.h"

typedef struct {
    Comm *group;               // the Ulysses group (U ranks)
    const ShardLayout *layout; // this batch's layout: coordinates of the local tokens
    int B, T, C, NH, U;        // T = local tokens per row; buffers fit these sizes
    UlyssesLayout coords;      // the group's row: its tokens' coordinates, and where each one sits
    float *send, *recv;        // all-to-all buffers, U parts each, sized for the largest exchange
    float *qkv, *dqkv;         // (B, U*T, 3C/U) the group's row, this rank's heads
    float *out, *dout;         // (B, U*T, C/U)
    float *lse;                // (B, NH/U, U*T)
    RingAttention ring;        // over the R groups, at (B, U*T, C/U, NH/U)
    size_t bytes;              // everything init allocated
} UlyssesAttention;

// What init allocates for Ulysses groups of U ranks (cp/attention.h's count for the
// memory estimate): the group row's coordinates, the exchange buffers, the group
// row's q, k, v, output and their gradients, and the ring over the groups.
static size_t ulysses_attention_bytes(int U, int B, int T, int C, int NH) {
    size_t bt = (size_t)B * T;
    return 5 * (size_t)U * bt * sizeof(int) + 2 * ulysses_buffer_floats(B, T, C, NH) * sizeof(float) +
           bt * (8 * (size_t)C + NH) * sizeof(float) + ring_attention_bytes(B, U * T, C / U, NH / U);
}

static void ulysses_attention_init(UlyssesAttention *ua, Comm *group, Comm *ring, int B, int T, int C, int NH) {
    memset(ua, 0, sizeof(*ua));
    int U = group->size;
    if (NH % U != 0) { fatal("ulysses: %d heads are not divisible by the Ulysses degree %d", NH, U); }
    ua->group = group;
    ua->B = B; ua->T = T; ua->C = C; ua->NH = NH; ua->U = U;
    ulysses_layout_init(&ua->coords, U, B, T);
    ua->bytes += ulysses_layout_bytes(&ua->coords);
    size_t bt = (size_t)B * T, buffer = ulysses_buffer_floats(B, T, C, NH);
    ua->send = (float *)attention_alloc(&ua->bytes, buffer * sizeof(float));
    ua->recv = (float *)attention_alloc(&ua->bytes, buffer * sizeof(float));
    ua->qkv = (float *)attention_alloc(&ua->bytes, bt * 3 * C * sizeof(float));
    ua->dqkv = (float *)attention_alloc(&ua->bytes, bt * 3 * C * sizeof(float));
    ua->out = (float *)attention_alloc(&ua->bytes, bt * C * sizeof(float));
    ua->dout = (float *)attention_alloc(&ua->bytes, bt * C * sizeof(float));
    ua->lse = (float *)attention_alloc(&ua->bytes, bt * NH * sizeof(float));
    ring_attention_init(&ua->ring, ring, B, U * T, C / U, NH / U);
    ua->bytes += ua->ring.bytes;
}

static void ulysses_attention_free(UlyssesAttention *ua) {
    float *buffers[] = {ua->send, ua->recv, ua->qkv, ua->dqkv, ua->out, ua->dout, ua->lse};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { free(buffers[i]); }
    ring_attention_free(&ua->ring);
    ulysses_layout_free(&ua->coords);
}

// Collective over the Ulysses group: this batch's layout, and the group's row made of it.
static void ulysses_attention_bind(UlyssesAttention *ua, const ShardLayout *layout) {
    ua->layout = layout;
    ulysses_layout_build(&ua->coords, ua->group, layout);
    ring_attention_bind(&ua->ring, &ua->coords.layout);
}

// Every element of the all-to-all buffer from (into_buffer) or to its place on `side`.
static void ulysses_move(const UlyssesExchange *x, float *buf, const int *slot, int side, int into_buffer) {
    size_t n = x->U * ulysses_exchange_part(x);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float *p = ulysses_element(x, slot, i, side);
        if (into_buffer) { buf[i] = *p; } else { *p = buf[i]; }
    }
}

// local -> group (from = ULYSSES_LOCAL) or group -> local, through one all-to-all
static void ulysses_exchange_run(UlyssesAttention *ua, const UlyssesExchange *x, int from) {
    ulysses_move(x, ua->send, ua->coords.slot, from, 1);
    ua->group->all_to_all(ua->group, ua->send, ua->recv, ulysses_exchange_part(x) * sizeof(float));
    ulysses_move(x, ua->recv, ua->coords.slot, 1 - from, 0);
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the UlyssesAttention.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ulysses_attention_forward(void *ctx, float *out, float *lse, const float *qkv) {
    UlyssesAttention *ua = (UlyssesAttention *)ctx;
    int C = ua->C, NH = ua->NH;
    UlyssesExchange in = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add(&in, (float *)qkv, ua->qkv, 3, C, 0);
    ulysses_exchange_run(ua, &in, ULYSSES_LOCAL);
    ring_attention_forward(&ua->ring, ua->out, ua->lse, ua->qkv);
    UlyssesExchange back = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add(&back, out, ua->out, 1, C, 0);
    ulysses_exchange_add(&back, lse, ua->lse, 1, NH, 1);
    ulysses_exchange_run(ua, &back, ULYSSES_GROUP);
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ulysses_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse) {
    UlyssesAttention *ua = (UlyssesAttention *)ctx;
    int C = ua->C, NH = ua->NH;
    UlyssesExchange in = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add(&in, (float *)qkv, ua->qkv, 3, C, 0);
    ulysses_exchange_add(&in, (float *)out, ua->out, 1, C, 0);
    ulysses_exchange_add(&in, (float *)dout, ua->dout, 1, C, 0);
    ulysses_exchange_add(&in, (float *)lse, ua->lse, 1, NH, 1);
    ulysses_exchange_run(ua, &in, ULYSSES_LOCAL);
    ring_attention_backward(&ua->ring, ua->dqkv, ua->dout, ua->qkv, ua->out, ua->lse);
    UlyssesExchange back = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add(&back, dqkv, ua->dqkv, 3, C, 0);
    ulysses_exchange_run(ua, &back, ULYSSES_GROUP);
}

// the model's attention verbs, computed by Ulysses (and the ring across its groups)
static AttentionVerbs ulysses_attention_verbs(UlyssesAttention *ua) {
    AttentionVerbs verbs = {ua, ulysses_attention_forward, ulysses_attention_backward};
    return verbs;
}

#endif // CP_ULYSSES_ATTENTION_H
