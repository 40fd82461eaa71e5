/*
Group-cast attention on the GPU (-ca groupcast): cp/groupcast_attention.h stage
for stage, with the block computations of cp/attention_block.cuh and every buffer
in device memory (the plan, the stages and the pad rule are in the CPU header and
cp/groupcast_plan.h).

The plan is the CPU's, built on the host at bind from every rank's coordinates (an
all_gather over the CP group on host memory, as Ulysses' bind: no wait for the
device), and its send and receive lists are copied to the device once per bind.
The tokens move packed, a row of k | v (2C, floatX) per token in list order
(cp/groupcast_tokens.cuh), one all_to_all_v per stage, stage i + 1 posted before
stage i's blocks are attended (the transport's stream moves it meanwhile, ordered
by events as the ring's, cp/comm_cuda.cuh).

A source's received tokens are unpacked into a K/V block of T slots at their
sender's places ((B, T, C) k then v, as the all-gather holds every rank's): the
block kernels read whole tiles, so a tile keeps the sender's index ranges, and
the slots not sent hold zeros (cleared at bind; a masked key's value is still
multiplied by 0) with the unsent coordinates (GROUPCAST_UNSENT_INDEX, _DOCUMENT:
no query sees them) in this rank's copy of every rank's coordinates, from which
the tile visibility is computed at bind: a tile of unsent slots is skipped, and a
query sees exactly the keys the CPU twin's unpacked block shows it. Each source
has a block of its own (the CPU twin reuses one), since the GPU attends a block
while the next one is unpacked.

Backward: K/V exchanged again (nothing kept from the forward, as the
all-gather), each source's fp32 dK | dV written into a block of its own, the rows
of its tokens packed in the order they came and returned per stage with the
reverse all_to_all_v, posted as soon as the stage is computed. The owner adds
them, once all are home, to its own block's dK | dV, the peers in increasing rank
order, one launch each (a fixed order, no atomics: the same bits every run). The
returns are waited for one stage late, so that at most three exchanges are in
flight (the next stage's K/V and two returns), whatever the stages.

At cp 1 nothing travels: the kernels read qkv and write dK, dV into dqkv, as the
ring's.
*/
#ifndef CP_GROUPCAST_ATTENTION_CUH
#define CP_GROUPCAST_ATTENTION_CUH

#include "attention_block.cuh"
#include "comm.h"
#include "groupcast_attention.h" // the stages, the unsent coordinates, the sources' order
#include "groupcast_plan.h"
#include "groupcast_tokens.cuh"
#include "sharder.h"
#include "../llmc/attention_verbs.cuh"
#include "../llmc/cuda_common.cuh"

typedef struct {
    Comm *comm;                   // the CP group, on device memory
    Comm *host;                   // the CP group, on host memory: the coordinates' gather
    int B, T, C, NH, S;           // T = local tokens per row; buffers fit these sizes; S stages
    size_t kv_bytes;              // bytes of one source's K/V block, k and v (B, T, C) each, floatX
    size_t dkv_bytes;             // bytes of one dK | dV block, (B, T, C) each, fp32
    GroupcastPlan plan;           // host: this batch's need-table and every rank's coordinates
    int *seen;                    // host (cp, 2, B, T): the coordinates the kernels see (unsent slots marked)
    GroupcastStage *kv_stages;    // (S) host: K/V rows (floatX) of each stage
    GroupcastStage *dkv_stages;   // (S) host: the same parts in dK | dV rows (fp32), for the reverse
    size_t *stage_arrays;         // host (2, S, 4, cp): what the stages point into
    int *send_index, *recv_index; // device copies of the plan's lists
    floatX *kv_send, *kv_recv;    // ((cp - 1) B T, 2C) tokens' k | v, in list order
    char *kv_peers;               // (cp - 1) sources' K/V blocks, the one at ring distance d in slot d - 1
    float *dkv_peers;             // (cp - 1) sources' dK | dV blocks, as kv_peers
    float *dkv_send, *dkv_recv;   // ((cp - 1) B T, 2C) tokens' dK | dV, in list order
    float *dkv_own;               // this rank's dK | dV, its peers' partials added in
    AttentionQueriesCuda queries; // the local queries' state and the batch's coordinates
    size_t bytes;                 // device memory init allocated
} GroupcastAttentionCuda;

// device bytes groupcast_attention_cuda_init allocates at cp ranks: the queries, and
// past cp 1 (cp - 1) sources' K/V and dK | dV blocks, the packed rows each way in
// their worst case (every token needed by every peer), this rank's dK | dV and the
// two lists (the same for every -co)
static size_t groupcast_attention_cuda_bytes(int cp, int B, int T, int C, int NH) {
    size_t peers = (size_t)(cp - 1) * (3 * kv_block_cuda_bytes(B, T, C) + 3 * dkv_block_cuda_bytes(B, T, C));
    size_t lists = 2 * (size_t)(cp - 1) * B * T * sizeof(int);
    size_t travelling = peers + dkv_block_cuda_bytes(B, T, C) + lists;
    return attention_queries_cuda_bytes(cp, B, T, C, NH) + (cp > 1 ? travelling : 0);
}

static void groupcast_attention_cuda_init(GroupcastAttentionCuda *g, Comm *comm, Comm *host, int S, int B, int T,
                                          int C, int NH) {
    int cp = comm->size;
    if (S < 1 || S > groupcast_max_stages(cp)) {
        fatal("groupcast: %d stages at cp %d (1 to cp - 1, or 1 at cp 1)", S, cp);
    }
    memset(g, 0, sizeof(*g));
    attention_queries_cuda_init(&g->queries, comm, B, T, C, NH, &g->bytes);
    g->comm = comm;
    g->host = host;
    g->B = B; g->T = T; g->C = C; g->NH = NH; g->S = S;
    g->kv_bytes = kv_block_cuda_bytes(B, T, C);
    g->dkv_bytes = dkv_block_cuda_bytes(B, T, C);
    if (cp == 1) { return; } // nothing travels: the kernels read qkv and write dqkv
    groupcast_plan_init(&g->plan, cp, comm->rank, B, T);
    g->seen = (int *)mallocCheck((size_t)cp * 2 * B * T * sizeof(int));
    g->stage_arrays = (size_t *)callocCheck((size_t)2 * S * 4 * cp, sizeof(size_t));
    g->kv_stages = (GroupcastStage *)mallocCheck(2 * (size_t)S * sizeof(GroupcastStage));
    g->dkv_stages = g->kv_stages + S;
    for (int i = 0; i < 2 * S; i++) {
        size_t *a = g->stage_arrays + (size_t)i * 4 * cp;
        GroupcastStage st = {a, a + cp, a + 2 * cp, a + 3 * cp};
        g->kv_stages[i] = st;
    }
    size_t peers = (size_t)(cp - 1), lists = peers * B * T * sizeof(int);
    g->send_index = (int *)cuda_malloc_counted(&g->bytes, lists);
    g->recv_index = (int *)cuda_malloc_counted(&g->bytes, lists);
    g->kv_send = (floatX *)cuda_malloc_counted(&g->bytes, peers * g->kv_bytes);
    g->kv_recv = (floatX *)cuda_malloc_counted(&g->bytes, peers * g->kv_bytes);
    g->kv_peers = (char *)cuda_malloc_counted(&g->bytes, peers * g->kv_bytes);
    g->dkv_peers = (float *)cuda_malloc_counted(&g->bytes, peers * g->dkv_bytes);
    g->dkv_send = (float *)cuda_malloc_counted(&g->bytes, peers * g->dkv_bytes);
    g->dkv_recv = (float *)cuda_malloc_counted(&g->bytes, peers * g->dkv_bytes);
    g->dkv_own = (float *)cuda_malloc_counted(&g->bytes, g->dkv_bytes);
}

static void groupcast_attention_cuda_free(GroupcastAttentionCuda *g) {
    if (g->comm->size > 1) {
        void *buffers[] = {g->send_index, g->recv_index, g->kv_send, g->kv_recv, g->kv_peers,
                           g->dkv_peers,  g->dkv_send,   g->dkv_recv, g->dkv_own};
        for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { cudaCheck(cudaFree(buffers[i])); }
        groupcast_plan_free(&g->plan);
        free(g->seen); free(g->stage_arrays); free(g->kv_stages);
    }
    attention_queries_cuda_free(&g->queries);
    memset(g, 0, sizeof(*g));
}

// This batch's layout (host): every rank's coordinates gathered on the host, the
// plan built, the coordinates as the kernels see them (each source's unsent slots
// marked) and the lists uploaded, the tile visibility computed from those, the
// sources' blocks cleared. A collective over the CP group.
static void groupcast_attention_cuda_bind(GroupcastAttentionCuda *g, const ShardLayout *layout) {
    AttentionLayoutCuda *al = &g->queries.layout;
    if (g->comm->size == 1) {
        attention_layout_cuda_prepare(al, g->comm, layout);
        return;
    }
    attention_layout_cuda_check(al, layout);
    GroupcastPlan *p = &g->plan;
    int cp = p->cp, me = p->rank;
    size_t bt = (size_t)g->B * g->T;
    int *mine = p->coords + (size_t)me * 2 * bt; // in place: this rank's part of the gather
    memcpy(mine, layout->global_index, bt * sizeof(int));
    memcpy(mine + bt, layout->document, bt * sizeof(int));
    g->host->all_gather(g->host, mine, p->coords, 2 * bt * sizeof(int));
    groupcast_plan_build(p);
    for (int r = 0; r < cp; r++) {
        int *index = g->seen + (size_t)r * 2 * bt, *document = index + bt;
        if (r == me) {
            memcpy(index, mine, 2 * bt * sizeof(int));
            continue;
        }
        for (size_t i = 0; i < bt; i++) {
            index[i] = GROUPCAST_UNSENT_INDEX;
            document[i] = GROUPCAST_UNSENT_DOCUMENT;
        }
        for (int i = p->recv_offset[r]; i < p->recv_offset[r + 1]; i++) {
            int f = p->recv_index[i];
            index[f] = groupcast_index(p, r, 0)[f];
            document[f] = groupcast_document(p, r, 0)[f];
        }
    }
    cuda_upload(al->coords, g->seen, (size_t)cp * 2 * bt * sizeof(int));
    attention_layout_cuda_tile(al);
    cuda_upload(g->send_index, p->send_index, (size_t)p->send_offset[cp] * sizeof(int));
    cuda_upload(g->recv_index, p->recv_index, (size_t)p->recv_offset[cp] * sizeof(int));
    cudaCheck(cudaMemsetAsync(g->kv_peers, 0, (size_t)(cp - 1) * g->kv_bytes, cuda_ctx.stream));
    groupcast_stages_set(g->kv_stages, p, g->S, groupcast_token_floats(g->C) * sizeof(floatX));
    groupcast_stages_set(g->dkv_stages, p, g->S, groupcast_token_floats(g->C) * sizeof(float));
}

// the source at ring distance d: rank r - d
static int groupcast_source_cuda(const GroupcastAttentionCuda *g, int d) {
    return (g->comm->rank - d + g->comm->size) % g->comm->size;
}

// Posts stage i's exchange of K|V (reverse: of dK|dV back to the owners, the
// buffers and counts swapped); NULL when there is no stage i.
static void *groupcast_post_cuda(GroupcastAttentionCuda *g, int i, int reverse) {
    if (i >= g->S || g->comm->size == 1) { return NULL; }
    Comm *comm = g->comm;
    if (reverse) {
        const GroupcastStage *st = &g->dkv_stages[i];
        return comm->all_to_all_v_start(comm, g->dkv_send, st->recv_bytes, st->recv_offset, g->dkv_recv,
                                        st->send_bytes, st->send_offset);
    }
    const GroupcastStage *st = &g->kv_stages[i];
    return comm->all_to_all_v_start(comm, g->kv_send, st->send_bytes, st->send_offset, g->kv_recv, st->recv_bytes,
                                    st->recv_offset);
}

static void groupcast_wait_cuda(GroupcastAttentionCuda *g, void *exchange) {
    if (exchange != NULL) { g->comm->all_to_all_v_wait(g->comm, exchange); }
}

// This rank's K|V of every peer's send list into the send buffer, in list order.
// qkv: (B, T, 3C): a token's k|v is the run of 2C from C on
static void groupcast_pack_cuda(GroupcastAttentionCuda *g, const floatX *qkv) {
    const GroupcastPlan *p = &g->plan;
    tokens_pack<floatX>(g->kv_send, qkv + g->C, qkv + 2 * g->C, 3 * g->C, g->send_index, p->send_offset[p->cp], g->C);
}

// Source src's received tokens into its block (at ring distance d) at their
// sender's slots; the other slots stay as bind left them (zero, unsent)
static KVBlockCuda groupcast_unpack_cuda(GroupcastAttentionCuda *g, int d) {
    const GroupcastPlan *p = &g->plan;
    int src = groupcast_source_cuda(g, d), C = g->C, first = p->recv_offset[src];
    floatX *k = (floatX *)(g->kv_peers + (size_t)(d - 1) * g->kv_bytes);
    tokens_unpack<floatX, false>(k, k + (size_t)g->B * g->T * C, C, g->kv_recv + (size_t)first * 2 * C,
                                 g->recv_index + first, p->recv_count[src], C);
    return kv_block_cuda_view(k, g->B, g->T, C, src);
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the GroupcastAttentionCuda.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void groupcast_attention_cuda_forward(void *ctx, floatX *out, float *lse, const floatX *qkv) {
    GroupcastAttentionCuda *g = (GroupcastAttentionCuda *)ctx;
    int cp = g->comm->size;
    float *o = attention_forward_begin_cuda(&g->queries, out, lse);
    if (cp > 1) { groupcast_pack_cuda(g, qkv); }
    void *next = groupcast_post_cuda(g, 0, 0);
    attend_block_forward_cuda(&g->queries, qkv, kv_block_cuda_own(qkv, g->C, g->comm->rank), o, lse);
    for (int i = 0; i < g->S && cp > 1; i++) {
        void *now = next;
        next = groupcast_post_cuda(g, i + 1, 0);
        groupcast_wait_cuda(g, now);
        for (int d = groupcast_stage_first(cp, g->S, i); d < groupcast_stage_first(cp, g->S, i + 1); d++) {
            attend_block_forward_cuda(&g->queries, qkv, groupcast_unpack_cuda(g, d), o, lse);
        }
    }
    attention_forward_end_cuda(&g->queries, out);
}

// Adds every peer's returned dK|dV of this rank's tokens to the own block's, the
// peers in increasing rank order (a fixed order: the same bits every run).
static void groupcast_sum_gradients_cuda(GroupcastAttentionCuda *g) {
    const GroupcastPlan *p = &g->plan;
    size_t n = (size_t)g->B * g->T * g->C;
    for (int peer = 0; peer < p->cp; peer++) {
        int first = p->send_offset[peer];
        tokens_unpack<float, true>(g->dkv_own, g->dkv_own + n, g->C, g->dkv_recv + (size_t)first * 2 * g->C,
                                   g->send_index + first, p->send_count[peer], g->C);
    }
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void groupcast_attention_cuda_backward(void *ctx, floatX *dqkv, const floatX *dout,
                                              const floatX *qkv, const floatX *out, const float *lse) {
    GroupcastAttentionCuda *g = (GroupcastAttentionCuda *)ctx;
    int B = g->B, T = g->T, C = g->C;
    int cp = g->comm->size;
    attention_backward_begin_cuda(&g->queries, dout, out);
    int dq_stride;
    float *dq = attention_dq_rows_cuda(&g->queries, dqkv, &dq_stride);
    KVBlockCuda own = kv_block_cuda_own(qkv, C, g->comm->rank);
    if (cp == 1) { // one block, at home: dK, dV straight into dqkv
        attend_block_backward_cuda(&g->queries, qkv, own, dout, lse, dq, dq_stride, 0, dkv_rows_dqkv(dqkv, C));
        attention_backward_end_cuda(&g->queries, dqkv);
        return;
    }
    const GroupcastPlan *p = &g->plan;
    size_t n = (size_t)B * T * C;
    groupcast_pack_cuda(g, qkv);
    void *next = groupcast_post_cuda(g, 0, 0);
    // dQ written by the own block, added to after; all of the own dK | dV written
    attend_block_backward_cuda(&g->queries, qkv, own, dout, lse, dq, dq_stride, 0, dkv_rows_fp32(g->dkv_own, B, T, C));
    void *back = NULL; // the previous stage's returning dK|dV
    for (int i = 0; i < g->S; i++) {
        void *now = next;
        next = groupcast_post_cuda(g, i + 1, 0);
        groupcast_wait_cuda(g, now);
        for (int d = groupcast_stage_first(cp, g->S, i); d < groupcast_stage_first(cp, g->S, i + 1); d++) {
            int src = groupcast_source_cuda(g, d), first = p->recv_offset[src];
            float *dkv = g->dkv_peers + (size_t)(d - 1) * 2 * n;
            attend_block_backward_cuda(&g->queries, qkv, groupcast_unpack_cuda(g, d), dout, lse, dq, dq_stride, 1,
                                       dkv_rows_fp32(dkv, B, T, C));
            // the rows of src's tokens, in the order they came
            tokens_pack<float>(g->dkv_send + (size_t)first * 2 * C, dkv, dkv + n, C, g->recv_index + first,
                               p->recv_count[src], C);
        }
        void *sent = groupcast_post_cuda(g, i, 1);
        groupcast_wait_cuda(g, back);
        back = sent;
    }
    groupcast_wait_cuda(g, back);
    groupcast_sum_gradients_cuda(g);
    dkv_to_dqkv_cuda(dqkv, g->dkv_own, B, T, C);
    attention_backward_end_cuda(&g->queries, dqkv);
}

// the GPU model's attention verbs (device pointers), computed by group-cast attention
static AttentionVerbsCuda groupcast_attention_cuda_verbs(GroupcastAttentionCuda *g) {
    AttentionVerbsCuda verbs = {g, groupcast_attention_cuda_forward, groupcast_attention_cuda_backward};
    return verbs;
}

#endif // CP_GROUPCAST_ATTENTION_CUH
