/*
The position table trained in row slices over the CP group, on the GPU: the twin
of cp/position_table.h, which explains the split. The routing (which tokens go
where, and the positions that come) is the host's, as the CPU twin's, over the
group's host communicator: the positions are host arrays from the sharder. The
rows travel in device memory over the device communicator, in floatX (the
residual's gradient as the backward leaves it), and the owner adds them into its
fp32 rows with the encoder's deterministic token buckets (llmc/encoder.cuh): each
row's tokens in arrival order, as the CPU loop adds them.
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
    int *d_send_tokens;     // (tokens) device: which rows of dout travel
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
    }
    pt->device_tokens = tokens;
    token_buckets_init(&pt->received, tokens, pt->host.room);
    pt->d_send_tokens = (int *)cudaMallocCheck((size_t)tokens * sizeof(int));
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
    }
    cudaCheck(cudaFree(pt->d_norms));
    position_table_free(&pt->host);
}

// rows[n] = dout[tokens[n]]   rows: (count, C)   dout: (any, C)   tokens: (count)
__global__ static void gather_rows_kernel(floatX *rows, const floatX *dout, const int *tokens, int count, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)count * C) { return; }
    size_t n = idx / C, c = idx % C;
    rows[idx] = dout[(size_t)tokens[n] * C + c];
}

// position_table_send_gradients on the device, after position_table_plan of the
// batch: dwpe ((room, C) fp32), dout ((tokens, C) floatX), send_rows and recv_rows
// ((tokens, C) floatX, dead scratch) in device memory.
static void position_table_send_gradients_cuda(PositionTableCuda *pt, float *dwpe, const floatX *dout,
                                               floatX *send_rows, floatX *recv_rows) {
    PositionTable *h = &pt->host;
    Comm *g = h->group;
    int P = g->size, C = h->C;
    position_table_cuda_reserve(pt, h->tokens);
    int *scratch = (int *)callocCheck(3 * (size_t)P, sizeof(int)), *zeros = scratch, *send_n = scratch + P,
        *recv_n = scratch + 2 * P;
    for (int k = 1; k < P; k++) {
        int to, from;
        position_table_round(h, k, 1, &to, &from, send_n, recv_n);
        if (send_n[to] > 0) {
            cuda_upload(pt->d_send_tokens, h->send_tokens + h->send_start[to], (size_t)send_n[to] * sizeof(int));
            size_t n = (size_t)send_n[to] * C;
            gather_rows_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(send_rows, dout, pt->d_send_tokens,
                                                                             send_n[to], C);
            cudaCheckLaunch();
        }
        g->all_to_all_v_wait(g, position_table_post(h, g, send_rows, zeros, send_n, recv_rows, zeros, recv_n,
                                                    (size_t)C * sizeof(floatX)));
        embedding_backward_cuda(dwpe, recv_rows, &pt->received, h->recv_positions + h->recv_start[from], recv_n[from],
                                h->begin, h->end, C);
    }
    free(scratch);
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
