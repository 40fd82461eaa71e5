/*
Group-cast attention on the CPU (-ca groupcast): MagiAttention's zero-redundant
exchange. The all-gather (cp/allgather_attention.h) sends every rank's K/V block
to every rank; group-cast sends each K/V token only to the ranks whose queries
see it (cp/groupcast_plan.h: the need-table, built once per bind from every
rank's tokens' coordinates, gathered with all_gather like Ulysses' bind), with
one all_to_all_v per stage.

Forward: this rank's K and V (2C floats per token, all heads: the token's k|v
run of the qkv activation) are packed per peer in the order of the plan's send
lists. The peers split by ring distance into S stages (-co S, 1 <= S <= cp-1;
groupcast_stage_first); stage i+1's exchange is posted before stage i's blocks
are attended, so that the transfer overlaps compute. The local queries meet the
own block first, then the sources r-1, r-2, ... (the ring's and the all-gather's
order) with the same block computation and log-sum-exp merge
(cp/attention_block.h). Each source's received tokens are unpacked, one source at
a time, into a K/V block of T slots at their sender's local positions (so a tile
keeps the sender's index ranges and cp/block_mask.h skips what it skipped for the
all-gather); a slot the source did not send gets the global index INT_MAX and
document -2, which no query sees (k_index <= q_index fails, and no query has
document -2: a pad query's is -1), and zero keys and values.

Pads (document -1) are never sent: a pad query sees only its own rank's pads
where the ring shows it every pad before it. A pad's target is ignored, so its
output carries no loss, and what it reaches are pads too: every real token's
output and gradient are those of the ring; the pads' own rows differ.

Backward: the same exchange of K/V again (the forward's is not kept: one
instance serves every layer, as for the all-gather), the probabilities recomputed
from O and LSE, each source's partial dK | dV computed in a block of its own and
packed into the place its K/V arrived at, and returned to the owner with the
reverse all_to_all_v (counts and buffers swapped), posted per stage as soon as
the stage is done. The owner sums them in a fixed order, its own block's first,
then the peers' in increasing rank order, so runs are bit for bit reproducible.

Memory (groupcast_attention_bytes, which the run's estimate counts): the queries,
the own K/V block and one source's, the own dK | dV and one source's, the plan,
and send and receive buffers of the worst case, every token needed by every peer
((cp-1) B T 2C floats each, like the all-gather's cp blocks): sized once at init,
never grown per batch, so the estimate stays exact. Bytes sent: groupcast_cost
(cp/attention_cost.h), exactly the needed tokens' K and V.
*/
#ifndef CP_GROUPCAST_ATTENTION_H
#define CP_GROUPCAST_ATTENTION_H

#include <limits.h>
#include "attention_block.h"
#include "comm.h"
#include "groupcast_plan.h"
#include "sharder.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/utils.h"

// the coordinates of a slot a source did not send: no query sees it
#define GROUPCAST_UNSENT_INDEX INT_MAX
#define GROUPCAST_UNSENT_DOCUMENT (-2)

// One stage's all_to_all_v arguments (cp entries each): to the peers and from the
// sources at its ring distances, bytes into the send and receive buffers.
typedef struct {
    size_t *send_bytes, *send_offset, *recv_bytes, *recv_offset;
} GroupcastStage;

typedef struct {
    Comm *comm;                // the CP group
    const ShardLayout *layout; // this batch's layout: coordinates of the local tokens
    int B, T, C, NH, S;        // T = local tokens per row; S stages
    GroupcastPlan plan;        // this batch's need-table
    GroupcastStage *stages;    // (S)
    size_t *stage_arrays;      // (max stages, 4, cp) what the stages point into
    float *send, *recv;        // ((cp-1) B T, 2C) tokens' K|V (backward: their dK|dV back), in list order
    void *kv_own, *kv_peer;    // the own K/V block, and one source's
    float *dkv_own, *dkv_peer; // 2 x (B, NH, T, HS) each
    AttentionQueries queries;  // the local queries and their state
    size_t bytes;              // everything init allocated
} GroupcastAttention;

// the floats of one token's K|V (or dK|dV)
static size_t groupcast_token_floats(int C) { return 2 * (size_t)C; }

// the most stages cp ranks take: one per ring distance
static int groupcast_max_stages(int cp) { return cp > 1 ? cp - 1 : 1; }

// bytes groupcast_attention_init allocates at cp ranks (room for the most stages:
// the same for every -co)
static size_t groupcast_attention_bytes(int cp, int B, int T, int C, int NH) {
    size_t worst = (size_t)(cp - 1) * B * T * groupcast_token_floats(C) * sizeof(float);
    return attention_queries_bytes(B, T, C, NH) + 2 * kv_block_bytes(B, T, C) + 2 * dkv_block_bytes(B, T, C) +
           2 * worst + groupcast_plan_bytes(cp, B, T) + (size_t)groupcast_max_stages(cp) * 4 * cp * sizeof(size_t);
}

static void groupcast_attention_init(GroupcastAttention *ga, Comm *comm, int S, int B, int T, int C, int NH) {
    int cp = comm->size;
    if (S < 1 || S > groupcast_max_stages(cp)) {
        fatal("groupcast: %d stages at cp %d (1 to cp - 1, or 1 at cp 1)", S, cp);
    }
    memset(ga, 0, sizeof(*ga));
    attention_queries_init(&ga->queries, B, T, C, NH, &ga->bytes);
    ga->comm = comm;
    ga->B = B; ga->T = T; ga->C = C; ga->NH = NH; ga->S = S;
    groupcast_plan_init(&ga->plan, cp, comm->rank, B, T);
    ga->bytes += groupcast_plan_bytes(cp, B, T);
    ga->stage_arrays = (size_t *)attention_alloc(&ga->bytes, (size_t)groupcast_max_stages(cp) * 4 * cp * sizeof(size_t));
    ga->stages = (GroupcastStage *)mallocCheck((size_t)S * sizeof(GroupcastStage));
    for (int i = 0; i < S; i++) {
        size_t *a = ga->stage_arrays + (size_t)i * 4 * cp;
        GroupcastStage st = {a, a + cp, a + 2 * cp, a + 3 * cp};
        ga->stages[i] = st;
    }
    size_t worst = (size_t)(cp - 1) * B * T * groupcast_token_floats(C) * sizeof(float);
    ga->send = (float *)attention_alloc(&ga->bytes, worst);
    ga->recv = (float *)attention_alloc(&ga->bytes, worst);
    ga->kv_own = attention_alloc(&ga->bytes, kv_block_bytes(B, T, C));
    ga->kv_peer = attention_alloc(&ga->bytes, kv_block_bytes(B, T, C));
    ga->dkv_own = (float *)attention_alloc(&ga->bytes, dkv_block_bytes(B, T, C));
    ga->dkv_peer = (float *)attention_alloc(&ga->bytes, dkv_block_bytes(B, T, C));
}

static void groupcast_attention_free(GroupcastAttention *ga) {
    free(ga->stage_arrays); free(ga->stages); free(ga->send); free(ga->recv);
    free(ga->kv_own); free(ga->kv_peer); free(ga->dkv_own); free(ga->dkv_peer);
    groupcast_plan_free(&ga->plan);
    attention_queries_free(&ga->queries);
}

// Each of the S stages' counts and offsets in bytes, tokens of token_bytes each: every
// peer's offset into the send and receive buffers (the plan's lists), and counts only
// for the peers and sources at the stage's ring distances. The GPU twin sets its K|V
// and dK|dV stages (of other token sizes) with it too.
static void groupcast_stages_set(GroupcastStage *stages, const GroupcastPlan *p, int S, size_t token_bytes) {
    int cp = p->cp, me = p->rank;
    for (int i = 0; i < S; i++) {
        GroupcastStage *st = &stages[i];
        for (int j = 0; j < cp; j++) {
            st->send_bytes[j] = st->recv_bytes[j] = 0;
            st->send_offset[j] = (size_t)p->send_offset[j] * token_bytes;
            st->recv_offset[j] = (size_t)p->recv_offset[j] * token_bytes;
        }
        for (int d = groupcast_stage_first(cp, S, i); d < groupcast_stage_first(cp, S, i + 1); d++) {
            int to = (me + d) % cp, from = (me - d + cp) % cp;
            st->send_bytes[to] = (size_t)p->send_count[to] * token_bytes;
            st->recv_bytes[from] = (size_t)p->recv_count[from] * token_bytes;
        }
    }
}

// Collective over the CP group: this batch's layout, every rank's coordinates and
// the plan made of them, and each stage's counts and offsets.
static void groupcast_attention_bind(GroupcastAttention *ga, const ShardLayout *layout) {
    if (layout->B != ga->B || layout->local_len != ga->T) {
        fatal("groupcast: the layout (B %d, T %d) does not match the buffers (B %d, T %d)", layout->B,
              layout->local_len, ga->B, ga->T);
    }
    ga->layout = layout;
    Comm *comm = ga->comm;
    int me = comm->rank;
    size_t bt = (size_t)ga->B * ga->T;
    int *mine = ga->plan.coords + (size_t)me * 2 * bt; // in place: this rank's part of the gather
    memcpy(mine, layout->global_index, bt * sizeof(int));
    memcpy(mine + bt, layout->document, bt * sizeof(int));
    comm->all_gather(comm, mine, ga->plan.coords, 2 * bt * sizeof(int));
    groupcast_plan_build(&ga->plan);
    groupcast_stages_set(ga->stages, &ga->plan, ga->S, groupcast_token_floats(ga->C) * sizeof(float));
}

// Posts stage i's exchange of K|V (reverse: of dK|dV back to the owners, the
// buffers and counts swapped); NULL when there is no stage i.
static void *groupcast_post(GroupcastAttention *ga, int i, int reverse) {
    if (i >= ga->S || ga->comm->size == 1) { return NULL; }
    const GroupcastStage *st = &ga->stages[i];
    Comm *comm = ga->comm;
    if (reverse) {
        return comm->all_to_all_v_start(comm, ga->recv, st->recv_bytes, st->recv_offset, ga->send, st->send_bytes,
                                        st->send_offset);
    }
    return comm->all_to_all_v_start(comm, ga->send, st->send_bytes, st->send_offset, ga->recv, st->recv_bytes,
                                    st->recv_offset);
}

static void groupcast_wait(GroupcastAttention *ga, void *exchange) {
    if (exchange != NULL) { ga->comm->all_to_all_v_wait(ga->comm, exchange); }
}

// This rank's K|V of every peer's send list into the send buffer, in list order.
// qkv: (B, T, 3C): a token's k|v is the run of 2C floats from C on
static void groupcast_pack(GroupcastAttention *ga, const float *qkv) {
    const GroupcastPlan *p = &ga->plan;
    int C = ga->C, total = p->send_offset[p->cp];
    size_t tf = groupcast_token_floats(C);
    #pragma omp parallel for
    for (int i = 0; i < total; i++) {
        memcpy(ga->send + (size_t)i * tf, qkv + (size_t)p->send_index[i] * 3 * C + C, tf * sizeof(float));
    }
}

// Source src's received tokens into the peer block at their sender's slots; the
// other slots unsent (no query sees them) with zero K and V.
static KVBlock groupcast_unpack(GroupcastAttention *ga, int src) {
    const GroupcastPlan *p = &ga->plan;
    int B = ga->B, T = ga->T, C = ga->C, NH = ga->NH, HS = C / NH;
    size_t bt = (size_t)B * T, tf = groupcast_token_floats(C);
    KVBlock blk = kv_block_view(ga->kv_peer, B, NH, T, HS);
    memset(blk.k, 0, 2 * bt * C * sizeof(float)); // k, then v
    for (size_t i = 0; i < bt; i++) {
        blk.index[i] = GROUPCAST_UNSENT_INDEX;
        blk.document[i] = GROUPCAST_UNSENT_DOCUMENT;
    }
    const int *index = groupcast_index(p, src, 0), *document = groupcast_document(p, src, 0);
    int first = p->recv_offset[src], n = p->recv_count[src];
    #pragma omp parallel for
    for (int i = 0; i < n; i++) {
        int f = p->recv_index[first + i], b = f / T, t = f % T;
        const float *kv = ga->recv + (size_t)(first + i) * tf;
        blk.index[f] = index[f];
        blk.document[f] = document[f];
        for (int h = 0; h < NH; h++) {
            size_t at = (((size_t)b * NH + h) * T + t) * HS;
            memcpy(blk.k + at, kv + h * HS, HS * sizeof(float));
            memcpy(blk.v + at, kv + C + h * HS, HS * sizeof(float));
        }
    }
    return blk;
}

// The peer block's dK|dV of source src's tokens into the places their K|V came in.
static void groupcast_pack_gradients(GroupcastAttention *ga, int src) {
    const GroupcastPlan *p = &ga->plan;
    int T = ga->T, C = ga->C, NH = ga->NH, HS = C / NH;
    size_t n_block = (size_t)ga->B * T * C, tf = groupcast_token_floats(C);
    int first = p->recv_offset[src], n = p->recv_count[src];
    #pragma omp parallel for
    for (int i = 0; i < n; i++) {
        int f = p->recv_index[first + i], b = f / T, t = f % T;
        float *dkv = ga->recv + (size_t)(first + i) * tf;
        for (int h = 0; h < NH; h++) {
            size_t at = (((size_t)b * NH + h) * T + t) * HS;
            memcpy(dkv + h * HS, ga->dkv_peer + at, HS * sizeof(float));
            memcpy(dkv + C + h * HS, ga->dkv_peer + n_block + at, HS * sizeof(float));
        }
    }
}

// Adds every peer's returned dK|dV of this rank's tokens to the own block's, the
// peers in increasing rank order (a fixed order: the same bits every run).
static void groupcast_sum_gradients(GroupcastAttention *ga) {
    const GroupcastPlan *p = &ga->plan;
    int T = ga->T, C = ga->C, NH = ga->NH, HS = C / NH;
    size_t n_block = (size_t)ga->B * T * C, tf = groupcast_token_floats(C);
    for (int peer = 0; peer < p->cp; peer++) {
        int first = p->send_offset[peer], n = p->send_count[peer];
        // a token appears once per peer's list: the rows of one peer never collide
        #pragma omp parallel for
        for (int i = 0; i < n; i++) {
            int f = p->send_index[first + i], b = f / T, t = f % T;
            const float *dkv = ga->send + (size_t)(first + i) * tf;
            for (int h = 0; h < NH; h++) {
                size_t at = (((size_t)b * NH + h) * T + t) * HS;
                for (int x = 0; x < HS; x++) {
                    ga->dkv_own[at + x] += dkv[h * HS + x];
                    ga->dkv_own[n_block + at + x] += dkv[C + h * HS + x];
                }
            }
        }
    }
}

// the source at ring distance d: rank r - d
static int groupcast_source(const GroupcastAttention *ga, int d) {
    return (ga->comm->rank - d + ga->comm->size) % ga->comm->size;
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the GroupcastAttention.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void groupcast_attention_forward(void *ctx, float *out, float *lse, const float *qkv) {
    GroupcastAttention *ga = (GroupcastAttention *)ctx;
    int cp = ga->comm->size;
    KVBlock own = kv_block_view(ga->kv_own, ga->B, ga->NH, ga->T, ga->C / ga->NH);
    attention_forward_begin(&ga->queries, ga->layout, &own, qkv, lse);
    groupcast_pack(ga, qkv);
    void *next = groupcast_post(ga, 0, 0);
    attend_block_forward(&ga->queries, &own, lse);
    for (int i = 0; i < ga->S && cp > 1; i++) {
        void *now = next;
        next = groupcast_post(ga, i + 1, 0);
        groupcast_wait(ga, now);
        for (int d = groupcast_stage_first(cp, ga->S, i); d < groupcast_stage_first(cp, ga->S, i + 1); d++) {
            KVBlock blk = groupcast_unpack(ga, groupcast_source(ga, d));
            attend_block_forward(&ga->queries, &blk, lse);
        }
    }
    attention_forward_end(&ga->queries, out);
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void groupcast_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse) {
    GroupcastAttention *ga = (GroupcastAttention *)ctx;
    int cp = ga->comm->size;
    KVBlock own = kv_block_view(ga->kv_own, ga->B, ga->NH, ga->T, ga->C / ga->NH);
    attention_backward_begin(&ga->queries, ga->layout, &own, qkv, dout, out);
    groupcast_pack(ga, qkv);
    void *next = groupcast_post(ga, 0, 0);
    memset(ga->dkv_own, 0, dkv_block_bytes(ga->B, ga->T, ga->C)); // the CPU block backward accumulates
    attend_block_backward(&ga->queries, &own, lse, ga->dkv_own);
    void **back = (void **)callocCheck((size_t)ga->S, sizeof(void *)); // each stage's returning dK|dV
    for (int i = 0; i < ga->S && cp > 1; i++) {
        void *now = next;
        next = groupcast_post(ga, i + 1, 0);
        groupcast_wait(ga, now);
        for (int d = groupcast_stage_first(cp, ga->S, i); d < groupcast_stage_first(cp, ga->S, i + 1); d++) {
            int src = groupcast_source(ga, d);
            KVBlock blk = groupcast_unpack(ga, src);
            memset(ga->dkv_peer, 0, dkv_block_bytes(ga->B, ga->T, ga->C));
            attend_block_backward(&ga->queries, &blk, lse, ga->dkv_peer);
            groupcast_pack_gradients(ga, src);
        }
        back[i] = groupcast_post(ga, i, 1);
    }
    for (int i = 0; i < ga->S; i++) { groupcast_wait(ga, back[i]); }
    free(back);
    groupcast_sum_gradients(ga);
    attention_backward_end(&ga->queries, dqkv, ga->dkv_own);
}

// the model's attention verbs, computed by group-cast attention
static AttentionVerbs groupcast_attention_verbs(GroupcastAttention *ga) {
    AttentionVerbs verbs = {ga, groupcast_attention_forward, groupcast_attention_backward};
    return verbs;
}

#endif // CP_GROUPCAST_ATTENTION_H
