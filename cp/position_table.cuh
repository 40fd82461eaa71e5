/*
The position table trained in row slices over the CP group, on the GPU: the twin
of cp/position_table.h, which explains the split. The routing (which tokens go
where, and the positions that come) is the host's, as the CPU twin's, over the
group's host communicator: the positions are host arrays from the sharder. The
rows travel in device memory over the device communicator, in floatX (the
residual's gradient as the backward leaves it), and the owner adds them into its
fp32 rows with the encoder's deterministic token buckets (llmc/encoder.cuh): each
row's tokens in arrival order, as the CPU loop adds them. Before each forward
pass the weights' rows travel the other way (position_table_fetch_rows_cuda), in
floatX, the copy the encoder reads.
*/
#ifndef CP_POSITION_TABLE_CUH
#define CP_POSITION_TABLE_CUH

#include "position_table.h"
#include "../llmc/adamw.cuh"
#include "../llmc/encoder.cuh"

typedef struct {
    PositionTable host;     // the rows, the routing and the communicators
    int device_tokens;      // the room of the two below, in tokens a pass
    TokenBuckets received;  // the arriving rows by position: (tokens) over the room's rows
    int *d_send_tokens;     // (tokens) device: which rows of dout travel, or where the fetched rows go
    int *d_positions;       // (tokens) device: the positions whose weights' rows travel
    double *d_norms;        // (3) device: the squared norms of the gradient's parts
} PositionTableCuda;

// position_table_reserve on the device too: the arriving rows' buckets and the
// routed tokens (what position_table_device_bytes counts) grow with the host's.
static void position_table_cuda_reserve(PositionTableCuda *pt, int tokens) {
    position_table_reserve(&pt->host, tokens);
    if (tokens <= pt->device_tokens || pt->host.group->size == 1) { return; }
    if (pt->device_tokens > 0) {
        cuda_sync(); // the last exchange's kernels may still read them
        token_buckets_free(&pt->received);
        cudaCheck(cudaFree(pt->d_send_tokens));
        cudaCheck(cudaFree(pt->d_positions));
    }
    pt->device_tokens = tokens;
    token_buckets_init(&pt->received, tokens, pt->host.room);
    pt->d_send_tokens = (int *)cudaMallocCheck((size_t)tokens * sizeof(int));
    pt->d_positions = (int *)cudaMallocCheck((size_t)tokens * sizeof(int));
}

// position_table_init's arguments: group in device memory, group_host its host twin.
static void position_table_cuda_init(PositionTableCuda *pt, Comm *group, Comm *group_host, Comm *replicas, int max_T,
                                     int C, int tokens) {
    memset(pt, 0, sizeof(*pt));
    position_table_init(&pt->host, group, group_host, replicas, max_T, C, 0);
    pt->d_norms = (double *)cudaMallocCheck(3 * sizeof(double));
    position_table_cuda_reserve(pt, tokens);
}

static void position_table_cuda_free(PositionTableCuda *pt) {
    cuda_sync();
    if (pt->device_tokens > 0) {
        token_buckets_free(&pt->received);
        cudaCheck(cudaFree(pt->d_send_tokens));
        cudaCheck(cudaFree(pt->d_positions));
    }
    cudaCheck(cudaFree(pt->d_norms));
    position_table_free(&pt->host);
}

// position_rows_pack: rows[n] = src[at[n] - first]   rows: (count, C)   src: (any, C)   at: (count)
__global__ static void pack_rows_kernel(floatX *rows, const floatX *src, const int *at, int first, int count, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)count * C) { return; }
    size_t n = idx / C, c = idx % C;
    rows[idx] = src[(size_t)(at[n] - first) * C + c];
}

// position_rows_unpack's copy: dst[at[n]] = rows[n]   rows: (count, C)   dst: (any, C)   at: (count)
__global__ static void scatter_rows_kernel(floatX *dst, const floatX *rows, const int *at, int count, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)count * C) { return; }
    size_t n = idx / C, c = idx % C;
    dst[(size_t)at[n] * C + c] = rows[idx];
}

// position_table_exchange on the device, after position_table_plan of the batch:
// src ((tokens, C) dout towards the owners, (room, C) the weights' floatX copy
// towards the tokens), send_rows and recv_rows ((tokens, C) dead scratch) in
// device memory, floatX. Towards the owners the rows are added into dwpe ((room,
// C) fp32) with the encoder's token buckets; towards the tokens they are copied
// into rows ((tokens, C) floatX). The lists go up on the compute stream, so each
// kernel reads its round's.
static void position_table_exchange_cuda(PositionTableCuda *pt, int towards_owners, const floatX *src,
                                         floatX *send_rows, floatX *recv_rows, float *dwpe, floatX *rows) {
    PositionTable *h = &pt->host;
    int C = h->C;
    position_table_cuda_reserve(pt, h->tokens);
    int *d_send_at = towards_owners ? pt->d_send_tokens : pt->d_positions;
    for (int k = 1; k < h->group->size; k++) {
        PositionRound r = position_table_round(h, k, towards_owners);
        if (r.sends > 0) {
            cuda_upload(d_send_at, r.send_at, (size_t)r.sends * sizeof(int));
            size_t n = (size_t)r.sends * C;
            pack_rows_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(send_rows, src, d_send_at, r.send_first,
                                                                           r.sends, C);
            cudaCheckLaunch();
        }
        position_table_send_round(h, send_rows, recv_rows, (size_t)C * sizeof(floatX));
        if (towards_owners) {
            embedding_backward_cuda(dwpe, recv_rows, &pt->received, r.recv_at, r.receives, h->begin, h->end, C);
        } else if (r.receives > 0) {
            cuda_upload(pt->d_send_tokens, r.recv_at, (size_t)r.receives * sizeof(int));
            size_t n = (size_t)r.receives * C;
            scatter_rows_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(rows, recv_rows, pt->d_send_tokens,
                                                                              r.receives, C);
            cudaCheckLaunch();
        }
    }
}

// position_table_fetch_rows on the device, after position_table_plan of the
// batch: wpe ((room, C), this rank's rows of the weights' floatX copy), rows
// ((tokens, C)) and scratch ((2 tokens, C), dead) in device memory, floatX.
static void position_table_fetch_rows_cuda(PositionTableCuda *pt, const floatX *wpe, floatX *rows, floatX *scratch) {
    floatX *recv_rows = scratch + (size_t)pt->host.pass_tokens * pt->host.C;
    position_table_exchange_cuda(pt, 0, wpe, scratch, recv_rows, NULL, rows);
}

static void position_table_fetch_rows_cuda_verb(void *table, const floatX *wpe_rows, floatX *rows, floatX *scratch) {
    position_table_fetch_rows_cuda((PositionTableCuda *)table, wpe_rows, rows, scratch);
}

// The verb a model whose weights hold this rank's rows only fetches the others with.
static EncoderRowsVerbCuda position_table_rows_verb_cuda(PositionTableCuda *pt) {
    return (EncoderRowsVerbCuda){pt, position_table_fetch_rows_cuda_verb};
}

// position_table_send_gradients on the device, after position_table_plan of the
// batch: dwpe ((room, C) fp32), dout ((tokens, C) floatX), send_rows and recv_rows
// ((tokens, C) floatX, dead scratch) in device memory.
static void position_table_send_gradients_cuda(PositionTableCuda *pt, float *dwpe, const floatX *dout,
                                               floatX *send_rows, floatX *recv_rows) {
    position_table_exchange_cuda(pt, 1, dout, send_rows, recv_rows, dwpe, NULL);
}

// position_table_sum_gradients on the device: grads (n) device; the squared norm
// goes to the device double *norm_squared, where the step's end reads it.
static void position_table_sum_gradients_cuda(PositionTableCuda *pt, Comm *world, float *grads, size_t n, size_t at,
                                              double *norm_squared) {
    PositionTable *h = &pt->host;
    size_t rows = (size_t)h->room * h->C, after = at + rows;
    world->all_reduce_sum(world, grads, at, COMM_FLOAT);
    world->all_reduce_sum(world, grads + after, n - after, COMM_FLOAT);
    h->replicas->all_reduce_sum(h->replicas, grads + at, rows, COMM_FLOAT);
    global_norm_squared_cuda(pt->d_norms, grads, at);
    global_norm_squared_cuda(pt->d_norms + 1, grads + after, n - after);
    global_norm_squared_cuda(pt->d_norms + 2, grads + at, (size_t)(h->end - h->begin) * h->C);
    h->group->all_reduce_sum(h->group, pt->d_norms + 2, 1, COMM_DOUBLE);
    sum_partials_kernel<<<1, WARP_SIZE, 0, cuda_ctx.stream>>>(norm_squared, pt->d_norms, 3);
    cudaCheckLaunch();
}

#endif // CP_POSITION_TABLE_CUH
