/*
The encoder on the GPU: token embedding plus position embedding (llmc/encoder.h).

Positions are the global position ids the sharder gave each local token, as on
the CPU. The backward pass must add every token's gradient into the row of its
token id and of its position; two tokens may share a row. Instead of float
atomics (whose order changes from run to run) the host sorts the tokens by row
once per batch (the ids are on the host anyway, they came from the sharder), and
one thread per (row, channel) adds its tokens in token order: the very order of
the CPU loop, so the sums are deterministic and match the CPU's association.

Precision (llmc/precision.cuh): the embeddings and the output are floatX, added in
fp32; the gradients of the tables are fp32, accumulated in fp32 from the floatX
gradient of the residual stream.
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include "cuda_common.cuh"

// encoder.h's EncoderRowsVerb on the device: rows and scratch in device memory,
// floatX (the weights' copy the encoder reads).
typedef struct {
    void *ctx;
    void (*fetch)(void *ctx, const floatX *wpe_rows, floatX *rows, floatX *scratch);
} EncoderRowsVerbCuda;

// out: (B, T, C)   inp, pos: (B, T) device   wte: (Vp, C)   wpe: (wpe_end - wpe_begin, C), row wpe_begin first
// other_rows: (B, T, C), the wpe row of each token whose position lies outside
// [wpe_begin, wpe_end), read in its place (NULL where every position lies inside)
__global__ static void encoder_forward_kernel(floatX *out, const int *inp, const int *pos, const floatX *wte,
                                              const floatX *wpe, int wpe_begin, int wpe_end, const floatX *other_rows,
                                              int BT, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * C) { return; }
    int bt = (int)(idx / C), i = (int)(idx % C), p = pos[bt];
    const floatX *wpe_p = p >= wpe_begin && p < wpe_end ? wpe + (size_t)(p - wpe_begin) * C : other_rows + (size_t)bt * C;
    out[idx] = to_floatX(to_float(wte[(size_t)inp[bt] * C + i]) + to_float(wpe_p[i]));
}

static void encoder_forward_cuda(floatX *out, const int *inp, const int *pos, const floatX *wte, const floatX *wpe,
                                 int wpe_begin, int wpe_end, const floatX *other_rows, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(out, inp, pos, wte, wpe, wpe_begin, wpe_end,
                                                                         other_rows, B * T, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// backward

// The tokens of one step grouped by the row (token id or position) they add to:
// bucket k adds to row rows[k] the tokens order[starts[k] .. starts[k+1]), each
// bucket in increasing token order.
typedef struct {
    int capacity;  // BT
    int num_rows;  // rows of the table (Vp or maxT)
    int buckets;   // non-empty buckets of the current step
    int *order;    // host (BT)
    int *starts;   // host (BT + 1)
    int *rows;     // host (BT)
    int *counts;   // host (num_rows + 1), the counting sort's scratch
    int *d_order;  // device copies of the three above
    int *d_starts;
    int *d_rows;
} TokenBuckets;

static void token_buckets_init(TokenBuckets *tb, int BT, int num_rows) {
    memset(tb, 0, sizeof(*tb));
    tb->capacity = BT;
    tb->num_rows = num_rows;
    tb->order = (int *)mallocCheck((size_t)BT * sizeof(int));
    tb->starts = (int *)mallocCheck(((size_t)BT + 1) * sizeof(int));
    tb->rows = (int *)mallocCheck((size_t)BT * sizeof(int));
    tb->counts = (int *)mallocCheck(((size_t)num_rows + 1) * sizeof(int));
    tb->d_order = (int *)cudaMallocCheck((size_t)BT * sizeof(int));
    tb->d_starts = (int *)cudaMallocCheck(((size_t)BT + 1) * sizeof(int));
    tb->d_rows = (int *)cudaMallocCheck((size_t)BT * sizeof(int));
}

static void token_buckets_free(TokenBuckets *tb) {
    free(tb->order); free(tb->starts); free(tb->rows); free(tb->counts);
    cudaCheck(cudaFree(tb->d_order));
    cudaCheck(cudaFree(tb->d_starts));
    cudaCheck(cudaFree(tb->d_rows));
    memset(tb, 0, sizeof(*tb));
}

// A stable counting sort of the BT tokens by key (host), then the buckets to the
// device. The table's rows are the keys [first, end) (row key - first); a token
// whose key lies outside adds to no row here. keys: (BT) host, each in [0, num_rows)
static void token_buckets_build(TokenBuckets *tb, const int *keys, int BT, int first, int end) {
    if (BT > tb->capacity) { fatal("token buckets: %d tokens, room for %d", BT, tb->capacity); }
    if (first < 0 || first > end || end - first > tb->num_rows) {
        fatal("token buckets: rows [%d, %d), room for %d", first, end, tb->num_rows);
    }
    int *counts = tb->counts, rows = end - first, kept = 0;
    memset(counts, 0, ((size_t)rows + 1) * sizeof(int));
    for (int i = 0; i < BT; i++) {
        if (keys[i] < 0) { fatal("token buckets: row %d is negative", keys[i]); }
        if (keys[i] < first || keys[i] >= end) { continue; }
        counts[keys[i] - first + 1]++;
        kept++;
    }
    // counts[r] becomes the start of row r in order; the non-empty rows become buckets
    tb->buckets = 0;
    for (int r = 0; r < rows; r++) {
        if (counts[r + 1] > 0) {
            tb->rows[tb->buckets] = r;
            tb->starts[tb->buckets] = counts[r];
            tb->buckets++;
        }
        counts[r + 1] += counts[r];
    }
    tb->starts[tb->buckets] = kept;
    for (int i = 0; i < BT; i++) { // increasing i within a row: stable
        if (keys[i] >= first && keys[i] < end) { tb->order[counts[keys[i] - first]++] = i; }
    }
    cuda_upload(tb->d_order, tb->order, (size_t)kept * sizeof(int));
    cuda_upload(tb->d_starts, tb->starts, ((size_t)tb->buckets + 1) * sizeof(int));
    cuda_upload(tb->d_rows, tb->rows, (size_t)tb->buckets * sizeof(int));
}

// dtable[row, c] += dout[t, c] for the tokens t of each bucket, in token order
// dtable: (num_rows, C)   dout: (BT, C); grid (buckets, ceil(C / threads))
__global__ static void embedding_backward_kernel(float *dtable, const floatX *dout, const int *order,
                                                 const int *starts, const int *rows, int C) {
    int k = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float *dst = dtable + (size_t)rows[k] * C + c;
    float acc = *dst;
    for (int n = starts[k]; n < starts[k + 1]; n++) { acc += to_float(dout[(size_t)order[n] * C + c]); }
    *dst = acc;
}

// dtable: the rows [first, end) of a table, row first at 0; the tokens whose keys
// lie outside add nothing here
static void embedding_backward_cuda(float *dtable, const floatX *dout, TokenBuckets *tb, const int *keys, int BT,
                                    int first, int end, int C) {
    token_buckets_build(tb, keys, BT, first, end);
    if (tb->buckets == 0) { return; }
    dim3 grid(tb->buckets, grid_for(C, 128));
    embedding_backward_kernel<<<grid, 128, 0, cuda_ctx.stream>>>(dtable, dout, tb->d_order, tb->d_starts, tb->d_rows, C);
    cudaCheckLaunch();
}

// Accumulates into dwte and into the rows [wpe_begin, wpe_end) of the position
// table that dwpe holds (row wpe_begin first), as encoder_backward of encoder.h.
// dout: (B, T, C) device   inp, pos: (B, T) HOST (the sharder's arrays)
// wte_buckets: BT tokens over Vp rows; wpe_buckets: BT tokens over maxT rows
static void encoder_backward_cuda(float *dwte, float *dwpe, int wpe_begin, int wpe_end, const floatX *dout,
                                  const int *inp, const int *pos, int B, int T, int C, TokenBuckets *wte_buckets,
                                  TokenBuckets *wpe_buckets) {
    embedding_backward_cuda(dwte, dout, wte_buckets, inp, B * T, 0, wte_buckets->num_rows, C);
    embedding_backward_cuda(dwpe, dout, wpe_buckets, pos, B * T, wpe_begin, wpe_end, C);
}

#endif // LLMC_ENCODER_CUH
