/*
All-gather attention on the GPU: cp/allgather_attention.h with the block
computations of cp/attention_block.cuh and every buffer in device memory (the
costs and the trade-off against the ring are in the CPU header).

Forward: this rank's K/V block (k, v token-major, copied from qkv, in the storage
precision floatX) is all-gathered on the transport's stream (the transport orders
it after the compute that wrote the block, and the compute after the gather,
cp/comm_cuda.cuh); the local queries then meet the cp blocks in the ring's order,
merging into the fp32 running output (cp/attention_block.cuh). Backward gathers
again, sums dQ in fp32 rows, writes every block's fp32 dK | dV contribution into
its own slot of the full-length buffer (the dKV kernel writes every row, so nothing
is zeroed), and one fp32 reduce_scatter_sum sends each block's sum home. The step's
coordinates and tile visibility (allgather_attention_cuda_bind, once per
step) serve every layer.
*/
#ifndef CP_ALLGATHER_ATTENTION_CUH
#define CP_ALLGATHER_ATTENTION_CUH

#include "allgather_attention.h" // allgather_source: the same order of the blocks
#include "attention_block.cuh"
#include "comm.h"
#include "sharder.h"
#include "../llmc/attention_verbs.cuh"
#include "../llmc/cuda_common.cuh"

typedef struct {
    Comm *comm;                   // the CP group, on device memory
    int B, T, C, NH;              // T = local tokens per row; buffers fit these sizes
    size_t kv_bytes;              // bytes of one rank's K/V block, k and v (B, T, C) each, floatX
    size_t dkv_bytes;             // bytes of one rank's dK | dV, (B, T, C) each, fp32
    floatX *kv_own;               // this rank's K/V block, its part of the gather (device)
    char *kv_all;                 // every rank's K/V block, rank i's at i * kv_bytes
    char *dkv_all;                // dK | dV of every rank's block, rank i's at i * dkv_bytes
    float *dkv_own;               // the sum over the ranks of this rank's dK | dV
    AttentionQueriesCuda queries; // the local queries' state and the batch's coordinates
    size_t bytes;                 // device memory init allocated
} AllgatherAttentionCuda;

// device bytes allgather_attention_cuda_init allocates at cp ranks: the queries,
// (cp + 1) K/V blocks and (cp + 1) dK | dV blocks
static size_t allgather_attention_cuda_bytes(int cp, int B, int T, int C, int NH) {
    return attention_queries_cuda_bytes(cp, B, T, C, NH) +
           (size_t)(cp + 1) * (kv_block_cuda_bytes(B, T, C) + dkv_block_cuda_bytes(B, T, C));
}

static void allgather_attention_cuda_init(AllgatherAttentionCuda *ag, Comm *comm, int B, int T, int C, int NH) {
    memset(ag, 0, sizeof(*ag));
    attention_queries_cuda_init(&ag->queries, comm, B, T, C, NH, &ag->bytes);
    ag->comm = comm;
    ag->B = B; ag->T = T; ag->C = C; ag->NH = NH;
    ag->kv_bytes = kv_block_cuda_bytes(B, T, C);
    ag->dkv_bytes = dkv_block_cuda_bytes(B, T, C);
    int cp = comm->size;
    ag->kv_own = (floatX *)cuda_malloc_counted(&ag->bytes, ag->kv_bytes);
    ag->kv_all = (char *)cuda_malloc_counted(&ag->bytes, cp * ag->kv_bytes);
    ag->dkv_all = (char *)cuda_malloc_counted(&ag->bytes, cp * ag->dkv_bytes);
    ag->dkv_own = (float *)cuda_malloc_counted(&ag->bytes, ag->dkv_bytes);
}

static void allgather_attention_cuda_free(AllgatherAttentionCuda *ag) {
    void *buffers[] = {ag->kv_own, ag->kv_all, ag->dkv_all, ag->dkv_own};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { cudaCheck(cudaFree(buffers[i])); }
    attention_queries_cuda_free(&ag->queries);
    memset(ag, 0, sizeof(*ag));
}

// This batch's layout (host): coordinates and tile visibility for every layer's
// passes. A collective over the CP group.
static void allgather_attention_cuda_bind(AllgatherAttentionCuda *ag, const ShardLayout *layout) {
    attention_layout_cuda_prepare(&ag->queries.layout, ag->comm, layout);
}

static KVBlockCuda allgather_block_cuda(const AllgatherAttentionCuda *ag, int rank) {
    return kv_block_cuda_view((const floatX *)(ag->kv_all + rank * ag->kv_bytes), ag->B, ag->T, ag->C, rank);
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the AllgatherAttentionCuda.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void allgather_attention_cuda_forward(void *ctx, floatX *out, float *lse,
                                             const floatX *qkv) {
    AllgatherAttentionCuda *ag = (AllgatherAttentionCuda *)ctx;
    Comm *comm = ag->comm;
    float *o = attention_forward_begin_cuda(&ag->queries, out, lse);
    kv_block_cuda_fill(ag->kv_own, qkv, ag->B, ag->T, ag->C);
    comm->all_gather(comm, ag->kv_own, ag->kv_all, ag->kv_bytes);
    for (int step = 0; step < comm->size; step++) {
        attend_block_forward_cuda(&ag->queries, qkv, allgather_block_cuda(ag, allgather_source(comm, step)), o, lse);
    }
    attention_forward_end_cuda(&ag->queries, out);
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void allgather_attention_cuda_backward(void *ctx, floatX *dqkv, const floatX *dout,
                                              const floatX *qkv, const floatX *out, const float *lse) {
    AllgatherAttentionCuda *ag = (AllgatherAttentionCuda *)ctx;
    Comm *comm = ag->comm;
    int C = ag->C;
    size_t n = (size_t)ag->B * ag->T * C;
    attention_backward_begin_cuda(&ag->queries, dout, out);
    int dq_stride;
    float *dq = attention_dq_rows_cuda(&ag->queries, dqkv, &dq_stride);
    kv_block_cuda_fill(ag->kv_own, qkv, ag->B, ag->T, C);
    comm->all_gather(comm, ag->kv_own, ag->kv_all, ag->kv_bytes);
    for (int step = 0; step < comm->size; step++) {
        int src = allgather_source(comm, step);
        float *dkv = (float *)(ag->dkv_all + src * ag->dkv_bytes);
        // dQ written at the first step, added to after; all of block src's dK | dV written
        attend_block_backward_cuda(&ag->queries, qkv, allgather_block_cuda(ag, src), dout, lse, dq, dq_stride,
                                   step > 0, dkv_rows_fp32(dkv, ag->B, ag->T, C));
    }
    // every rank's share of block i, summed, to rank i
    comm->reduce_scatter_sum(comm, ag->dkv_all, ag->dkv_own, 2 * n, COMM_FLOAT);
    dkv_to_dqkv_cuda(dqkv, ag->dkv_own, ag->B, ag->T, C);
    attention_backward_end_cuda(&ag->queries, dqkv);
}

// the GPU model's attention verbs (device pointers), computed by all-gather attention
static AttentionVerbsCuda allgather_attention_cuda_verbs(AllgatherAttentionCuda *ag) {
    AttentionVerbsCuda verbs = {ag, allgather_attention_cuda_forward, allgather_attention_cuda_backward};
    return verbs;
}

#endif // CP_ALLGATHER_ATTENTION_CUH
