/*
Ring attention on the GPU: cp/ring_attention.h step for step, with the block
computations of cp/attention_block.cuh and the K/V blocks on device memory.

The ring is the CPU's: at step s rank r holds the block that started on rank
(r - s) mod cp; the exchange of the next block is posted (ring_start) before the
current block is computed, so that the transport's stream moves it while the
compute stream attends (double buffering; cp/comm_cuda.cuh orders the two streams
with events). Step 0 reads the own block where the qkv projection left it; the
travelling copy (k, v token-major, (B, T, C) each) is made once per pass, in the
storage precision (floatX: bf16 in the BF16 build, half the bytes of fp32). The
dK | dV accumulators travel in fp32, so that the sum around the ring loses
nothing; the running output and dQ are summed in fp32 rows (cp/attention_block.cuh:
out and dqkv themselves in the FP32 build, the queries' fp32 buffer in the BF16
one), and the dK | dV accumulator that came home is written into dqkv at the end.
At cp 1 nothing travels: no K/V or dK | dV buffers, the kernels read qkv and write
dK, dV into dqkv.

The batch's coordinates and tile visibility (ring_attention_cuda_bind, once
per batch) serve every layer's forward and backward.
*/
#ifndef CP_RING_ATTENTION_CUH
#define CP_RING_ATTENTION_CUH

#include "attention_block.cuh"
#include "comm.h"
#include "dkv_relay.h"
#include "sharder.h"
#include "../llmc/attention_verbs.cuh"
#include "../llmc/cuda_common.cuh"

typedef struct {
    Comm *comm;                   // the CP group, on device memory
    int B, T, C, NH;              // T = local tokens per row; buffers fit these sizes
    size_t kv_bytes;              // bytes of one travelling K/V block, k and v (B, T, C) each, floatX
    size_t dkv_bytes;             // bytes of one dK | dV block, (B, T, C) each, fp32
    floatX *kv_buf[2];            // double-buffered K/V blocks (device)
    float *dkv_buf[2];            // double-buffered dK | dV accumulators
    float *dkv_step;              // this step's dK | dV contribution
    AttentionQueriesCuda queries; // the local queries' state and the batch's coordinates
    size_t bytes;                 // device memory init allocated
} RingAttentionCuda;

// device bytes ring_attention_cuda_init allocates on a ring of cp ranks: the queries,
// and past cp 1 two K/V blocks and three dK | dV blocks (2 travelling, 1 per step)
static size_t ring_attention_cuda_bytes(int cp, int B, int T, int C, int NH) {
    size_t blocks = 2 * kv_block_cuda_bytes(B, T, C) + 3 * dkv_block_cuda_bytes(B, T, C);
    return attention_queries_cuda_bytes(cp, B, T, C, NH) + (cp > 1 ? blocks : 0);
}

static void ring_attention_cuda_init(RingAttentionCuda *ra, Comm *comm, int B, int T, int C, int NH) {
    memset(ra, 0, sizeof(*ra));
    attention_queries_cuda_init(&ra->queries, comm, B, T, C, NH, &ra->bytes);
    ra->comm = comm;
    ra->B = B; ra->T = T; ra->C = C; ra->NH = NH;
    ra->kv_bytes = kv_block_cuda_bytes(B, T, C);
    ra->dkv_bytes = dkv_block_cuda_bytes(B, T, C);
    if (comm->size > 1) { // at cp 1 nothing travels: the kernels read qkv and write dqkv
        for (int i = 0; i < 2; i++) {
            ra->kv_buf[i] = (floatX *)cuda_malloc_counted(&ra->bytes, ra->kv_bytes);
            ra->dkv_buf[i] = (float *)cuda_malloc_counted(&ra->bytes, ra->dkv_bytes);
        }
        ra->dkv_step = (float *)cuda_malloc_counted(&ra->bytes, ra->dkv_bytes);
    }
}

static void ring_attention_cuda_free(RingAttentionCuda *ra) {
    void *buffers[] = {ra->kv_buf[0], ra->kv_buf[1], ra->dkv_buf[0], ra->dkv_buf[1], ra->dkv_step};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) {
        if (buffers[i]) { cudaCheck(cudaFree(buffers[i])); }
    }
    attention_queries_cuda_free(&ra->queries);
    memset(ra, 0, sizeof(*ra));
}

// This batch's layout (host): coordinates and tile visibility for every layer's
// passes. A collective over the CP group.
static void ring_attention_cuda_bind(RingAttentionCuda *ra, const ShardLayout *layout) {
    attention_layout_cuda_prepare(&ra->queries.layout, ra->comm, layout);
}

__global__ static void add_inplace_kernel(float *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] += src[i]; }
}

// the relay's sum on the device (cp/dkv_relay.h), on the compute stream
static void dkv_add_cuda(void *acc, const void *step, size_t bytes, int first) {
    if (first) {
        cudaCheck(cudaMemcpyAsync(acc, step, bytes, cudaMemcpyDeviceToDevice, cuda_ctx.stream));
        return;
    }
    size_t n = bytes / sizeof(float);
    add_inplace_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>((float *)acc, (const float *)step, n);
    cudaCheckLaunch();
}

// the block that started on rank (r - step) mod cp, which rank r holds at `step`
static KVBlockCuda ring_block(const RingAttentionCuda *ra, const floatX *qkv, const floatX *buf, int step) {
    Comm *comm = ra->comm;
    if (step == 0) { return kv_block_cuda_own(qkv, ra->C, comm->rank); }
    return kv_block_cuda_view(buf, ra->B, ra->T, ra->C, (comm->rank - step + comm->size) % comm->size);
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the RingAttentionCuda.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void ring_attention_cuda_forward(void *ctx, floatX *out, float *lse, const floatX *qkv) {
    RingAttentionCuda *ra = (RingAttentionCuda *)ctx;
    int cp = ra->comm->size;
    float *o = attention_forward_begin_cuda(&ra->queries, out, lse);
    if (cp > 1) { kv_block_cuda_fill(ra->kv_buf[0], qkv, ra->B, ra->T, ra->C); }
    int cur = 0;
    for (int step = 0; step < cp; step++) {
        void *exchange = NULL;
        if (step < cp - 1) {
            // post the hand-off of this block before computing on it
            exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        attend_block_forward_cuda(&ra->queries, qkv, ring_block(ra, qkv, ra->kv_buf[cur], step), o, lse);
        if (exchange) {
            ra->comm->ring_wait(ra->comm, exchange);
            cur = 1 - cur;
        }
    }
    attention_forward_end_cuda(&ra->queries, out);
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void ring_attention_cuda_backward(void *ctx, floatX *dqkv, const floatX *dout,
                                         const floatX *qkv, const floatX *out, const float *lse) {
    RingAttentionCuda *ra = (RingAttentionCuda *)ctx;
    int B = ra->B, T = ra->T, C = ra->C;
    int cp = ra->comm->size;
    attention_backward_begin_cuda(&ra->queries, dout, out);
    int dq_stride;
    float *dq = attention_dq_rows_cuda(&ra->queries, dqkv, &dq_stride);
    if (cp == 1) { // one block, at home: dK, dV straight into dqkv
        attend_block_backward_cuda(&ra->queries, qkv, ring_block(ra, qkv, NULL, 0), dout, lse, dq, dq_stride, 0,
                                   dkv_rows_dqkv(dqkv, C));
        attention_backward_end_cuda(&ra->queries, dqkv);
        return;
    }
    kv_block_cuda_fill(ra->kv_buf[0], qkv, B, T, C);
    int cur = 0; // K/V buffer in use
    DkvRelay relay = dkv_relay_start(ra->comm, ra->dkv_buf[0], ra->dkv_buf[1], ra->dkv_bytes, dkv_add_cuda);
    for (int step = 0; step < cp; step++) {
        void *kv_exchange = NULL;
        if (step < cp - 1) {
            kv_exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        // dQ written at the first step, added to after; all of dkv_step written
        attend_block_backward_cuda(&ra->queries, qkv, ring_block(ra, qkv, ra->kv_buf[cur], step), dout, lse, dq,
                                   dq_stride, step > 0, dkv_rows_fp32(ra->dkv_step, B, T, C));
        dkv_relay_step(&relay, ra->dkv_step);
        if (kv_exchange) {
            ra->comm->ring_wait(ra->comm, kv_exchange);
            cur = 1 - cur;
        }
    }
    dkv_to_dqkv_cuda(dqkv, (const float *)dkv_relay_finish(&relay), B, T, C);
    attention_backward_end_cuda(&ra->queries, dqkv);
}

// the GPU model's attention verbs (device pointers), computed by this ring
static AttentionVerbsCuda ring_attention_cuda_verbs(RingAttentionCuda *ra) {
    AttentionVerbsCuda verbs = {ra, ring_attention_cuda_forward, ring_attention_cuda_backward};
    return verbs;
}

#endif // CP_RING_ATTENTION_CUH
