/*
Ring attention on the GPU: cp/ring_attention.h step for step, with the block
computations of cp/attention_block.cuh and the K/V blocks on device memory.

The ring is the CPU's: at step s rank r holds the block that started on rank
(r - s) mod cp; the exchange of the next block is posted (ring_start) before the
current block is computed, so that the transport's stream moves it while the
compute stream attends (double buffering; cp/comm_cuda.cuh orders the two streams
with events). cp = 1 is the same code: one block, no K/V message, and the dK/dV
accumulator's one hop is a device copy.
*/
#ifndef CP_RING_ATTENTION_CUH
#define CP_RING_ATTENTION_CUH

#include "attention_block.cuh"
#include "comm.h"
#include "sharder.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/cuda_common.cuh"

typedef struct {
    Comm *comm;                   // the CP group, on device memory
    const ShardLayout *layout;    // this step's layout (host): coordinates of the local tokens
    int B, T, C, NH;              // T = local tokens per row; buffers fit these sizes
    size_t kv_bytes;              // bytes of one travelling K/V block
    size_t dkv_bytes;             // bytes of one travelling dK/dV accumulator
    void *kv_buf[2];              // double-buffered K/V blocks (device)
    float *dkv_buf[2];            // double-buffered dK | dV accumulators, each 2 x (B, NH, T, HS)
    float *dkv_step;              // this step's dK | dV contribution, 2 x (B, NH, T, HS)
    AttentionQueriesCuda queries; // the local queries and their state
    size_t bytes;                 // device memory init allocated
} RingAttentionCuda;

// device bytes ring_attention_cuda_init allocates: the queries, 2 K/V blocks, 3 dK/dV blocks
static size_t ring_attention_cuda_bytes(int B, int T, int C, int NH) {
    return attention_queries_cuda_bytes(B, T, C, NH) + 2 * kv_block_bytes(B, T, C) + 3 * dkv_block_bytes(B, T, C);
}

static void ring_attention_cuda_init(RingAttentionCuda *ra, Comm *comm, int B, int T, int C, int NH) {
    memset(ra, 0, sizeof(*ra));
    attention_queries_cuda_init(&ra->queries, B, T, C, NH, &ra->bytes);
    ra->comm = comm;
    ra->B = B; ra->T = T; ra->C = C; ra->NH = NH;
    ra->kv_bytes = kv_block_bytes(B, T, C);
    ra->dkv_bytes = dkv_block_bytes(B, T, C);
    for (int i = 0; i < 2; i++) {
        ra->kv_buf[i] = attention_cuda_alloc(&ra->bytes, ra->kv_bytes);
        ra->dkv_buf[i] = (float *)attention_cuda_alloc(&ra->bytes, ra->dkv_bytes);
    }
    ra->dkv_step = (float *)attention_cuda_alloc(&ra->bytes, ra->dkv_bytes);
}

static void ring_attention_cuda_free(RingAttentionCuda *ra) {
    void *buffers[] = {ra->kv_buf[0], ra->kv_buf[1], ra->dkv_buf[0], ra->dkv_buf[1], ra->dkv_step};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { cudaCheck(cudaFree(buffers[i])); }
    attention_queries_cuda_free(&ra->queries);
    memset(ra, 0, sizeof(*ra));
}

__global__ static void add_inplace_kernel(float *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] += src[i]; }
}

// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void ring_attention_cuda_forward(RingAttentionCuda *ra, float *out, float *lse, const float *qkv) {
    int B = ra->B, T = ra->T, NH = ra->NH, HS = ra->C / NH;
    int cp = ra->comm->size;
    KVBlock blk[2] = {kv_block_view(ra->kv_buf[0], B, NH, T, HS), kv_block_view(ra->kv_buf[1], B, NH, T, HS)};
    attention_forward_begin_cuda(&ra->queries, ra->layout, &blk[0], qkv, lse);
    int cur = 0;
    for (int step = 0; step < cp; step++) {
        void *exchange = NULL;
        if (step < cp - 1) {
            // post the hand-off of this block before computing on it
            exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        attend_block_forward_cuda(&ra->queries, &blk[cur], lse);
        if (exchange) {
            ra->comm->ring_wait(ra->comm, exchange);
            cur = 1 - cur;
        }
    }
    attention_forward_end_cuda(&ra->queries, out);
}

// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void ring_attention_cuda_backward(RingAttentionCuda *ra, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse) {
    int B = ra->B, T = ra->T, NH = ra->NH, HS = ra->C / NH;
    int cp = ra->comm->size;
    size_t n = (size_t)B * NH * T * HS;
    KVBlock blk[2] = {kv_block_view(ra->kv_buf[0], B, NH, T, HS), kv_block_view(ra->kv_buf[1], B, NH, T, HS)};
    attention_backward_begin_cuda(&ra->queries, ra->layout, &blk[0], qkv, dout, out);
    int cur = 0;            // K/V buffer in use
    int acc = 0;            // accumulator buffer that belongs to the current block
    void *dkv_exchange = NULL;
    for (int step = 0; step < cp; step++) {
        void *kv_exchange = NULL;
        if (step < cp - 1) {
            kv_exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        attend_block_backward_cuda(&ra->queries, &blk[cur], lse, ra->dkv_step); // writes all of dkv_step
        if (dkv_exchange) {
            // the accumulator of this block, from the rank that held it last step
            ra->comm->ring_wait(ra->comm, dkv_exchange);
            add_inplace_kernel<<<grid_for(2 * n, 256), 256, 0, cuda_ctx.stream>>>(ra->dkv_buf[acc], ra->dkv_step, 2 * n);
            cudaCheckLaunch();
        } else {
            cudaCheck(cudaMemcpyAsync(ra->dkv_buf[acc], ra->dkv_step, ra->dkv_bytes, cudaMemcpyDeviceToDevice,
                                      cuda_ctx.stream));
        }
        // pass it on: to the next holder of this block, or home after the last step
        dkv_exchange = ra->comm->ring_start(ra->comm, ra->dkv_buf[acc], ra->dkv_buf[1 - acc], ra->dkv_bytes);
        acc = 1 - acc;
        if (kv_exchange) {
            ra->comm->ring_wait(ra->comm, kv_exchange);
            cur = 1 - cur;
        }
    }
    ra->comm->ring_wait(ra->comm, dkv_exchange);
    // dkv_buf[acc] now holds the complete dK | dV of this rank's own block
    attention_backward_end_cuda(&ra->queries, dqkv, ra->dkv_buf[acc]);
}

static void ring_attention_cuda_forward_verb(void *ctx, float *out, float *lse, const float *qkv) {
    ring_attention_cuda_forward((RingAttentionCuda *)ctx, out, lse, qkv);
}

static void ring_attention_cuda_backward_verb(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                              const float *out, const float *lse) {
    ring_attention_cuda_backward((RingAttentionCuda *)ctx, dqkv, dout, qkv, out, lse);
}

// the GPU model's attention verbs (device pointers), computed by this ring
static AttentionVerbs ring_attention_cuda_verbs(RingAttentionCuda *ra) {
    AttentionVerbs verbs = {ra, ring_attention_cuda_forward_verb, ring_attention_cuda_backward_verb};
    return verbs;
}

#endif // CP_RING_ATTENTION_CUH
