/*
All-gather attention on the CPU (the Llama 3 way of context parallelism): every
rank gathers the keys and values of the whole sequence once per layer and attends
its own queries to them, instead of passing blocks around a ring
(cp/ring_attention.h). The two compute the same attention and provide the same
verbs, so a trainer can take either.

Forward: each rank's K/V block (keys, values, global index and document of its
local tokens, the ring's travelling block) is all-gathered, the cp blocks side by
side in rank order. The local queries then meet every block, in the ring's order
(own block first, then ranks r-1, r-2, ...), through the same block computation,
visibility rule and sub-block skipping (cp/attention_block.h) and the same
log-sum-exp merge: O, LSE and dQ come out with the ring's bits.

Backward gathers the blocks again (the forward's gather is not kept: one instance
serves every layer), recomputes the probabilities from O and LSE, accumulates dK
and dV for ALL gathered keys in full-length buffers, and one reduce_scatter_sum
brings each block's sum home to its owner. dQ stays local.

Cost per layer and rank, with P = cp * T the padded row and one K/V block
2 * B * T * C floats (plus its B * T indices and documents):

                  memory (besides the queries' O(B T C))   floats sent per rank
    ring          2 K/V blocks + 3 dK/dV blocks            forward  (cp-1) K/V blocks
                  = O(B * P/cp * C)                         backward (cp-1) K/V + cp dK/dV
    all-gather    (cp+1) K/V blocks + (cp+1) dK/dV blocks  forward  (cp-1) K/V blocks
                  = O(B * P * C)                            backward (cp-1) K/V + (cp-1) dK/dV

(for bandwidth-optimal collectives). The volumes are about equal; the all-gather
trades memory that grows with the whole sequence for one collective per pass
instead of cp dependent steps, and does not overlap the transfer with compute.
With grouped-query attention (Llama 3) the K/V blocks are a fraction of the
queries' size, which is what makes it cheap there; GPT-2 has as many K/V heads as
query heads. dev/bench/README.md has the measured bytes at T = 4096.
*/
#ifndef CP_ALLGATHER_ATTENTION_H
#define CP_ALLGATHER_ATTENTION_H

#include "attention_block.h"
#include "comm.h"
#include "sharder.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/utils.h"

typedef struct {
    Comm *comm;                // the CP group
    const ShardLayout *layout; // this batch's layout: coordinates of the local tokens
    int B, T, C, NH;           // T = local tokens per row; buffers fit these sizes
    size_t kv_bytes;           // bytes of one rank's K/V block
    size_t dkv_bytes;          // bytes of one rank's dK | dV
    void *kv_own;              // this rank's K/V block, its part of the gather
    char *kv_all;              // every rank's K/V block, rank i's at i * kv_bytes
    float *dkv_all;            // dK | dV of every rank's block, rank i's 2 x (B, NH, T, HS) at i * dkv_bytes
    float *dkv_own;            // the sum over the ranks of this rank's dK | dV, 2 x (B, NH, T, HS)
    AttentionQueries queries;  // the local queries and their state
    size_t bytes;              // everything init allocated
} AllgatherAttention;

// bytes allgather_attention_init allocates at cp ranks: the queries, (cp + 1) K/V
// blocks and (cp + 1) dK/dV blocks (the transport's own scratch not included)
static size_t allgather_attention_bytes(int cp, int B, int T, int C, int NH) {
    return attention_queries_bytes(B, T, C, NH) + (size_t)(cp + 1) * (kv_block_bytes(B, T, C) + dkv_block_bytes(B, T, C));
}

static void allgather_attention_init(AllgatherAttention *ag, Comm *comm, int B, int T, int C, int NH) {
    memset(ag, 0, sizeof(*ag));
    attention_queries_init(&ag->queries, B, T, C, NH, &ag->bytes);
    ag->comm = comm;
    ag->B = B; ag->T = T; ag->C = C; ag->NH = NH;
    ag->kv_bytes = kv_block_bytes(B, T, C);
    ag->dkv_bytes = dkv_block_bytes(B, T, C);
    int cp = comm->size;
    ag->kv_own = attention_alloc(&ag->bytes, ag->kv_bytes);
    ag->kv_all = (char *)attention_alloc(&ag->bytes, cp * ag->kv_bytes);
    ag->dkv_all = (float *)attention_alloc(&ag->bytes, cp * ag->dkv_bytes);
    ag->dkv_own = (float *)attention_alloc(&ag->bytes, ag->dkv_bytes);
}

static void allgather_attention_free(AllgatherAttention *ag) {
    free(ag->kv_own); free(ag->kv_all); free(ag->dkv_all); free(ag->dkv_own);
    attention_queries_free(&ag->queries);
}

// This batch's layout: the coordinates of the local tokens, for every layer's passes
// (the GPU twin's bind also prepares its tile visibility).
static void allgather_attention_bind(AllgatherAttention *ag, const ShardLayout *layout) { ag->layout = layout; }

// The rank whose gathered block is met at step s: (r - s) mod cp, the ring's order.
static int allgather_source(const Comm *comm, int step) {
    return (comm->rank - step + comm->size) % comm->size;
}

static KVBlock allgather_block(const AllgatherAttention *ag, int rank) {
    return kv_block_view(ag->kv_all + rank * ag->kv_bytes, ag->B, ag->NH, ag->T, ag->C / ag->NH);
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the AllgatherAttention.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void allgather_attention_forward(void *ctx, float *out, float *lse, const float *qkv) {
    AllgatherAttention *ag = (AllgatherAttention *)ctx;
    Comm *comm = ag->comm;
    KVBlock own = kv_block_view(ag->kv_own, ag->B, ag->NH, ag->T, ag->C / ag->NH);
    attention_forward_begin(&ag->queries, ag->layout, &own, qkv, lse);
    comm->all_gather(comm, ag->kv_own, ag->kv_all, ag->kv_bytes);
    for (int step = 0; step < comm->size; step++) {
        KVBlock blk = allgather_block(ag, allgather_source(comm, step));
        attend_block_forward(&ag->queries, &blk, lse);
    }
    attention_forward_end(&ag->queries, out);
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void allgather_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse) {
    AllgatherAttention *ag = (AllgatherAttention *)ctx;
    Comm *comm = ag->comm;
    size_t dkv_floats = ag->dkv_bytes / sizeof(float);
    KVBlock own = kv_block_view(ag->kv_own, ag->B, ag->NH, ag->T, ag->C / ag->NH);
    attention_backward_begin(&ag->queries, ag->layout, &own, qkv, dout, out);
    comm->all_gather(comm, ag->kv_own, ag->kv_all, ag->kv_bytes);
    memset(ag->dkv_all, 0, comm->size * ag->dkv_bytes); // the CPU block backward accumulates
    for (int step = 0; step < comm->size; step++) {
        int src = allgather_source(comm, step);
        KVBlock blk = allgather_block(ag, src);
        attend_block_backward(&ag->queries, &blk, lse, ag->dkv_all + src * dkv_floats);
    }
    // every rank's share of block i, summed, to rank i
    comm->reduce_scatter_sum(comm, ag->dkv_all, ag->dkv_own, dkv_floats, COMM_FLOAT);
    attention_backward_end(&ag->queries, dqkv, ag->dkv_own);
}

// the model's attention verbs, computed by all-gather attention
static AttentionVerbs allgather_attention_verbs(AllgatherAttention *ag) {
    AttentionVerbs verbs = {ag, allgather_attention_forward, allgather_attention_backward};
    return verbs;
}

#endif // CP_ALLGATHER_ATTENTION_H
