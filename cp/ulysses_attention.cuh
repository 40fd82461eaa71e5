/*
Ulysses attention on the GPU, and the Ulysses x ring hybrid: cp/ulysses_attention.h
step for step, with the tensors in device memory. The all-to-alls go through the
device transport's all_to_all (NCCL: grouped send/recv; -ct mpi: staged through
the host); one kernel moves the elements of an exchange into and out of the
all-to-all buffer, each thread one element, by the rule of cp/ulysses_exchange.h
that the CPU loops follow too. The group's row is held in the storage precision
(floatX) and the log-sum-exp in fp32; the all-to-all buffer is fp32 (bf16 elements
widened exactly, so the exchange rounds nothing, at twice the bytes bf16 would
need). The attention over the group's row is the GPU ring
(cp/ring_attention.cuh) over the R groups, a ring of one at -ca ulysses.

The group's coordinates (cp/ulysses_layout.h) are built on the host once per batch
(bind) over a host transport of the same ranks, and their slots copied to the
device; the ring takes the group's layout from the host, like any layout, and
prepares its tile visibility on the device (ring_attention_cuda_bind).
*/
#ifndef CP_ULYSSES_ATTENTION_CUH
#define CP_ULYSSES_ATTENTION_CUH

#include "attention_block.cuh"
#include "comm.h"
#include "ring_attention.cuh"
#include "sharder.h"
#include "ulysses_exchange.h"
#include "ulysses_layout.h"
#include "../llmc/attention_verbs.cuh"
#include "../llmc/cuda_common.cuh"

typedef struct {
    Comm *group;               // the Ulysses group (U ranks), on device memory
    Comm *group_host;          // the same ranks on host memory: the coordinates
    const ShardLayout *layout; // this batch's layout (host)
    int B, T, C, NH, U;        // T = local tokens per row; buffers fit these sizes
    UlyssesLayout coords;      // the group's row (host)
    int *slot;                 // (U, B, T) coords.slot on the device
    float *send, *recv;        // fp32 all-to-all buffers (device), U parts each, sized for the largest exchange
    floatX *qkv, *dqkv;        // (B, U*T, 3C/U) the group's row, this rank's heads (device)
    floatX *out, *dout;        // (B, U*T, C/U)
    float *lse;                // (B, NH/U, U*T)
    RingAttentionCuda ring;    // over the R groups, at (B, U*T, C/U, NH/U)
    size_t bytes;              // device memory init allocated
} UlyssesAttentionCuda;

// The device bytes init allocates for U x R ranks (ulysses_attention_bytes's twin: the
// group row's coordinates stay on the host, its slots go to the device; the ring over
// the R groups holds the row's coordinates and tile visibility on the device).
static size_t ulysses_attention_cuda_bytes(int U, int R, int B, int T, int C, int NH) {
    size_t bt = (size_t)B * T;
    return (size_t)U * bt * sizeof(int) + 2 * ulysses_buffer_floats(B, T, C, NH) * sizeof(float) +
           bt * 8 * (size_t)C * sizeof(floatX) + bt * NH * sizeof(float) +
           ring_attention_cuda_bytes(R, B, U * T, C / U, NH / U);
}

static void ulysses_attention_cuda_init(UlyssesAttentionCuda *ua, Comm *group, Comm *group_host, Comm *ring, int B,
                                        int T, int C, int NH) {
    memset(ua, 0, sizeof(*ua));
    int U = group->size;
    if (NH % U != 0) { fatal("ulysses: %d heads are not divisible by the Ulysses degree %d", NH, U); }
    if (group_host->size != U) { fatal("ulysses: the host group has %d ranks, the device group %d", group_host->size, U); }
    ua->group = group;
    ua->group_host = group_host;
    ua->B = B; ua->T = T; ua->C = C; ua->NH = NH; ua->U = U;
    ulysses_layout_init(&ua->coords, U, B, T);
    size_t bt = (size_t)B * T, buffer = ulysses_buffer_floats(B, T, C, NH);
    ua->slot = (int *)cuda_malloc_counted(&ua->bytes, (size_t)U * bt * sizeof(int));
    ua->send = (float *)cuda_malloc_counted(&ua->bytes, buffer * sizeof(float));
    ua->recv = (float *)cuda_malloc_counted(&ua->bytes, buffer * sizeof(float));
    ua->qkv = (floatX *)cuda_malloc_counted(&ua->bytes, bt * 3 * C * sizeof(floatX));
    ua->dqkv = (floatX *)cuda_malloc_counted(&ua->bytes, bt * 3 * C * sizeof(floatX));
    ua->out = (floatX *)cuda_malloc_counted(&ua->bytes, bt * C * sizeof(floatX));
    ua->dout = (floatX *)cuda_malloc_counted(&ua->bytes, bt * C * sizeof(floatX));
    ua->lse = (float *)cuda_malloc_counted(&ua->bytes, bt * NH * sizeof(float));
    ring_attention_cuda_init(&ua->ring, ring, B, U * T, C / U, NH / U);
    ua->bytes += ua->ring.bytes;
}

static void ulysses_attention_cuda_free(UlyssesAttentionCuda *ua) {
    void *buffers[] = {ua->slot, ua->send, ua->recv, ua->qkv, ua->dqkv, ua->out, ua->dout, ua->lse};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { cudaCheck(cudaFree(buffers[i])); }
    ring_attention_cuda_free(&ua->ring);
    ulysses_layout_free(&ua->coords);
    memset(ua, 0, sizeof(*ua));
}

// Collective over the Ulysses group and then the ring of groups: this batch's layout,
// the group's row made of it, and the row's coordinates and tile visibility on the
// device for every layer's passes (once per batch).
static void ulysses_attention_cuda_bind(UlyssesAttentionCuda *ua, const ShardLayout *layout) {
    ua->layout = layout;
    ulysses_layout_build(&ua->coords, ua->group_host, layout);
    cuda_upload(ua->slot, ua->coords.slot, (size_t)ua->U * ua->B * ua->T * sizeof(int));
    ring_attention_cuda_bind(&ua->ring, &ua->coords.layout);
}

// one thread per element of the all-to-all buffer: from (into_buffer) or to its place on `side`
__global__ static void ulysses_move_kernel(UlyssesExchange x, float *buf, const int *slot, int side, int into_buffer,
                                           size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    int k;
    size_t at = ulysses_element_at(&x, slot, i, side, &k);
    void *base = side == ULYSSES_LOCAL ? x.local[k] : x.group[k];
    if (x.bytes[k] == (int)sizeof(float)) {
        float *p = (float *)base + at;
        if (into_buffer) { buf[i] = *p; } else { *p = buf[i]; }
    } else { // floatX: exact in fp32, and buf holds only what was floatX
        floatX *p = (floatX *)base + at;
        if (into_buffer) { buf[i] = to_float(*p); } else { *p = to_floatX(buf[i]); }
    }
}

static void ulysses_move_cuda(const UlyssesExchange *x, float *buf, const int *slot, int side, int into_buffer) {
    size_t n = x->U * ulysses_exchange_part(x);
    ulysses_move_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(*x, buf, slot, side, into_buffer, n);
    cudaCheckLaunch();
}

// local -> group (from = ULYSSES_LOCAL) or group -> local, through one all-to-all
static void ulysses_exchange_run_cuda(UlyssesAttentionCuda *ua, const UlyssesExchange *x, int from) {
    ulysses_move_cuda(x, ua->send, ua->slot, from, 1);
    ua->group->all_to_all(ua->group, ua->send, ua->recv, ulysses_exchange_part(x) * sizeof(float));
    ulysses_move_cuda(x, ua->recv, ua->slot, 1 - from, 0);
}

// a floatX tensor of an exchange
static void ulysses_exchange_add_floatx(UlyssesExchange *x, const floatX *local, floatX *group, int fields,
                                        int width) {
    ulysses_exchange_add_sized(x, (void *)local, group, (int)sizeof(floatX), fields, width, 0);
}

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the UlyssesAttentionCuda.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void ulysses_attention_cuda_forward(void *ctx, floatX *out, float *lse, const floatX *qkv) {
    UlyssesAttentionCuda *ua = (UlyssesAttentionCuda *)ctx;
    int C = ua->C, NH = ua->NH;
    UlyssesExchange in = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add_floatx(&in, qkv, ua->qkv, 3, C);
    ulysses_exchange_run_cuda(ua, &in, ULYSSES_LOCAL);
    ring_attention_cuda_forward(&ua->ring, ua->out, ua->lse, ua->qkv);
    UlyssesExchange back = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add_floatx(&back, out, ua->out, 1, C);
    ulysses_exchange_add(&back, lse, ua->lse, 1, NH, 1);
    ulysses_exchange_run_cuda(ua, &back, ULYSSES_GROUP);
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C), all device
static void ulysses_attention_cuda_backward(void *ctx, floatX *dqkv, const floatX *dout,
                                            const floatX *qkv, const floatX *out, const float *lse) {
    UlyssesAttentionCuda *ua = (UlyssesAttentionCuda *)ctx;
    int C = ua->C, NH = ua->NH;
    UlyssesExchange in = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add_floatx(&in, qkv, ua->qkv, 3, C);
    ulysses_exchange_add_floatx(&in, out, ua->out, 1, C);
    ulysses_exchange_add_floatx(&in, dout, ua->dout, 1, C);
    ulysses_exchange_add(&in, (float *)lse, ua->lse, 1, NH, 1);
    ulysses_exchange_run_cuda(ua, &in, ULYSSES_LOCAL);
    ring_attention_cuda_backward(&ua->ring, ua->dqkv, ua->dout, ua->qkv, ua->out, ua->lse);
    UlyssesExchange back = ulysses_exchange(ua->U, ua->B, ua->T);
    ulysses_exchange_add_floatx(&back, dqkv, ua->dqkv, 3, C);
    ulysses_exchange_run_cuda(ua, &back, ULYSSES_GROUP);
}

// the GPU model's attention verbs (device pointers), computed by Ulysses (and the ring across its groups)
static AttentionVerbsCuda ulysses_attention_cuda_verbs(UlyssesAttentionCuda *ua) {
    AttentionVerbsCuda verbs = {ua, ulysses_attention_cuda_forward, ulysses_attention_cuda_backward};
    return verbs;
}

#endif // CP_ULYSSES_ATTENTION_CUH
