/*
Attention of this rank's queries to one K/V block on the GPU: cp/attention_block.h
with the block computations as CUDA kernels and everything in device memory. Both
GPU algorithms repeat it once per block they meet: cp/ring_attention.cuh passes the
blocks around a ring, cp/allgather_attention.cuh gathers them all at once.
Visibility comes from global coordinates only (cp/block_mask.h, whose functions
are host-device): whole sub-block pairs that nothing sees are skipped, fully
visible ones evaluate no mask.

Kernels (HS = C / NH <= ATTN_HS_MAX):

  forward      one warp per query row. Lanes take 32 keys at a time for the scores
               (q in shared memory), a first pass finds the row's max, the second
               sums p = exp(s - max) and accumulates p v with the lanes over the HS
               dimensions (the 32 p's broadcast by shuffles). The block's (o, lse)
               is merged into the running state in the CPU's stable form.
  backward dQ  one warp per query row: dQ_i += sum_j ds_ij k_j, ds from p recomputed
               from the saved lse.
  backward dKV one warp per key row: dK_j = sum_i ds_ij q_i, dV_j = sum_i p_ij dO_i
               over the visible queries of this rank, p and ds recomputed likewise.

Each output row is written by one warp, which walks its keys (or queries) in
increasing order: no atomics, the same bits every run, and the CPU's order of
accumulation over the block.
*/
#ifndef CP_ATTENTION_BLOCK_CUH
#define CP_ATTENTION_BLOCK_CUH

#include "attention_block.h" // KVBlock, kv_block_view and the sizes: the same block layout
#include "block_mask.h"
#include "sharder.h"
#include "../llmc/cuda_common.cuh"

#define ATTN_HS_MAX 256
#define ATTN_DIMS_PER_LANE (ATTN_HS_MAX / WARP_SIZE)
#define ATTN_WARPS 4 // rows per thread block

// The visibility of one batch row's sub-block pairs against the visiting block.
typedef struct {
    BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS]; // [query sub-block][key sub-block]
    SubBlock qs[RING_SUBBLOCKS];
    SubBlock ks[RING_SUBBLOCKS];
} RowVisibility;

// What stays on this rank while the K/V blocks come by (device), head-major.
typedef struct {
    int B, T, C, NH;    // T = local tokens per row
    float *q;           // (B, NH, T, HS)
    float *o;           // (B, NH, T, HS) output
    float *dout;        // (B, NH, T, HS) output gradient
    float *dq;          // (B, NH, T, HS)
    float *drow;        // (B, NH, T) D = rowsum(dO * O)
    int *q_index;       // (B, T) global index of the queries (the own block may travel away)
    int *q_doc;         // (B, T) their document ids
    RowVisibility *vis; // (B) the visiting block's visibility, per batch row
} AttentionQueriesCuda;

// cudaMallocCheck that adds the size to *bytes: each algorithm reports what it holds
static void *attention_cuda_alloc(size_t *bytes, size_t size) {
    *bytes += size;
    return cudaMallocCheck(size);
}

// bytes attention_queries_cuda_init allocates (the run's memory estimate adds
// them up before anything is allocated; cp/attention.cuh checks that init matches)
static size_t attention_queries_cuda_bytes(int B, int T, int C, int NH) {
    return 4 * (size_t)B * T * C * sizeof(float) + (size_t)B * NH * T * sizeof(float) +
           2 * (size_t)B * T * sizeof(int) + (size_t)B * sizeof(RowVisibility);
}

static void attention_queries_cuda_init(AttentionQueriesCuda *aq, int B, int T, int C, int NH, size_t *bytes) {
    if (C % NH != 0) { fatal("channels %d are not divisible by heads %d", C, NH); }
    if (C / NH > ATTN_HS_MAX) { fatal("head size %d exceeds the GPU attention's maximum %d", C / NH, ATTN_HS_MAX); }
    memset(aq, 0, sizeof(*aq));
    aq->B = B; aq->T = T; aq->C = C; aq->NH = NH;
    size_t n = (size_t)B * T * C; // = B * NH * T * HS
    aq->q = (float *)attention_cuda_alloc(bytes, n * sizeof(float));
    aq->o = (float *)attention_cuda_alloc(bytes, n * sizeof(float));
    aq->dout = (float *)attention_cuda_alloc(bytes, n * sizeof(float));
    aq->dq = (float *)attention_cuda_alloc(bytes, n * sizeof(float));
    aq->drow = (float *)attention_cuda_alloc(bytes, (size_t)B * NH * T * sizeof(float));
    aq->q_index = (int *)attention_cuda_alloc(bytes, (size_t)B * T * sizeof(int));
    aq->q_doc = (int *)attention_cuda_alloc(bytes, (size_t)B * T * sizeof(int));
    aq->vis = (RowVisibility *)attention_cuda_alloc(bytes, (size_t)B * sizeof(RowVisibility));
}

static void attention_queries_cuda_free(AttentionQueriesCuda *aq) {
    void *buffers[] = {aq->q, aq->o, aq->dout, aq->dq, aq->drow, aq->q_index, aq->q_doc, aq->vis};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { cudaCheck(cudaFree(buffers[i])); }
    memset(aq, 0, sizeof(*aq));
}

// ----------------------------------------------------------------------------
// layout kernels

// heads (B, NH, T, HS) <- tokens (B, T, stride), head h at columns [h*HS, (h+1)*HS)
__global__ static void heads_from_tokens_kernel(float *heads, const float *tokens, int stride, int B, int T, int NH,
                                                int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) { return; }
    int d = (int)(idx % HS);
    int t = (int)((idx / HS) % T);
    int h = (int)((idx / ((size_t)HS * T)) % NH);
    int b = (int)(idx / ((size_t)HS * T * NH));
    heads[idx] = tokens[((size_t)b * T + t) * stride + (size_t)h * HS + d];
}

// tokens (B, T, stride) <- heads (B, NH, T, HS); the other columns are untouched
__global__ static void tokens_from_heads_kernel(float *tokens, const float *heads, int stride, int B, int T, int NH,
                                                int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) { return; }
    int d = (int)(idx % HS);
    int t = (int)((idx / HS) % T);
    int h = (int)((idx / ((size_t)HS * T)) % NH);
    int b = (int)(idx / ((size_t)HS * T * NH));
    tokens[((size_t)b * T + t) * stride + (size_t)h * HS + d] = heads[idx];
}

static void heads_from_tokens_cuda(float *heads, const float *tokens, int stride, int B, int T, int C, int NH) {
    size_t n = (size_t)B * T * C;
    heads_from_tokens_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(heads, tokens, stride, B, T, NH, C / NH);
    cudaCheckLaunch();
}

static void tokens_from_heads_cuda(float *tokens, const float *heads, int stride, int B, int T, int C, int NH) {
    size_t n = (size_t)B * T * C;
    tokens_from_heads_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(tokens, heads, stride, B, T, NH, C / NH);
    cudaCheckLaunch();
}

__global__ static void fill_kernel(float *x, float value, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] = value; }
}

// drow[r] = dout[r] . o[r], one thread per row, in the CPU's order
// drow: (rows)   dout, o: (rows, HS)
__global__ static void row_dot_kernel(float *drow, const float *dout, const float *o, size_t rows, int HS) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) { return; }
    float sum = 0.0f;
    for (int d = 0; d < HS; d++) { sum += dout[r * HS + d] * o[r * HS + d]; }
    drow[r] = sum;
}

// ----------------------------------------------------------------------------
// block kernels

// the visibility table of every batch row; one thread per row
// q_index, q_doc, k_index, k_doc: (B, T)
__global__ static void block_visibility_kernel(RowVisibility *vis, const int *q_index, const int *q_doc,
                                               const int *k_index, const int *k_doc, int B, int T) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) { return; }
    RowVisibility rv;
    size_t off = (size_t)b * T;
    block_visibility_table(q_index + off, q_doc + off, k_index + off, k_doc + off, T, rv.vis, rv.qs, rv.ks);
    vis[b] = rv;
}

__device__ static inline int sub_block_containing(const SubBlock *sbs, int i) {
    for (int s = 0; s < RING_SUBBLOCKS; s++) {
        if (i >= sbs[s].start && i < sbs[s].end) { return s; }
    }
    return 0; // unreachable: the sub-blocks tile [0, T)
}

__device__ static inline float dot_row(const float *a, const float *b, int n) {
    float sum = 0.0f;
    for (int d = 0; d < n; d++) { sum += a[d] * b[d]; }
    return sum;
}

// Whether query i sees key j under a sub-block pair's visibility.
__device__ static inline int pair_sees(BlockVisibility bv, int q_index, int q_doc, int k_index, int k_doc) {
    return bv == BLOCK_FULL || (bv == BLOCK_MASKED && pair_visible(q_index, q_doc, k_index, k_doc));
}

// The row a warp works on: row = (b * NH + h) * T + t, one of `rows`.
typedef struct {
    size_t row, bh; // the row, and its (b, h) row of T
    int t, b;       // its token and batch row
    int lane, warp;
} WarpRow;

__device__ static inline WarpRow warp_row(int NH, int T) {
    WarpRow w;
    w.lane = threadIdx.x % WARP_SIZE;
    w.warp = threadIdx.x / WARP_SIZE;
    w.row = (size_t)blockIdx.x * ATTN_WARPS + w.warp;
    w.t = (int)(w.row % T);
    w.bh = w.row / T;
    w.b = (int)(w.bh / NH);
    return w;
}

// acc[r] += weight * x[lane + r * WARP_SIZE]: a lane's share of a row of HS
// (inlined, so that acc stays in registers)
__device__ static __forceinline__ void lane_axpy(float *acc, float weight, const float *x, int lane, int HS) {
    #pragma unroll
    for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) {
        int d = lane + r * WARP_SIZE;
        if (d < HS) { acc[r] += weight * x[d]; }
    }
}

// x[lane + r * WARP_SIZE] = acc[r]
__device__ static __forceinline__ void lane_store(float *x, const float *acc, int lane, int HS) {
    #pragma unroll
    for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) {
        int d = lane + r * WARP_SIZE;
        if (d < HS) { x[d] = acc[r]; }
    }
}

// Attends every local query row to the visiting block and merges into (o, lse).
// o, q: (B, NH, T, HS)   lse: (B, NH, T)   k, v: (B, NH, T, HS) of the block
// q_index, q_doc, k_index, k_doc: (B, T)   vis: (B)
// one warp per query row; dynamic shared memory ATTN_WARPS x HS floats (the queries)
__global__ static void attend_forward_kernel(float *o, float *lse, const float *q, const float *k,
                                             const float *v, const int *q_index, const int *q_doc,
                                             const int *k_index, const int *k_doc, const RowVisibility *vis,
                                             int NH, int T, int HS, size_t rows, float scale) {
    extern __shared__ float shared[];
    WarpRow w = warp_row(NH, T); // a query row
    if (w.row >= rows) { return; } // the whole warp
    int lane = w.lane, i = w.t, b = w.b;
    size_t row = w.row, bh = w.bh;
    const RowVisibility *rv = &vis[b];
    int a = sub_block_containing(rv->qs, i);
    float *qrow = shared + (size_t)w.warp * HS;
    for (int d = lane; d < HS; d += WARP_SIZE) { qrow[d] = q[row * HS + d]; }
    __syncwarp();
    const float *kb = k + bh * T * HS;
    const float *vb = v + bh * T * HS;
    const int *ki = k_index + (size_t)b * T, *kd = k_doc + (size_t)b * T;
    int qi = q_index[(size_t)b * T + i], qd = q_doc[(size_t)b * T + i];

    // pass 1: the max score over the visible keys
    float maxval = -INFINITY;
    for (int c = 0; c < RING_SUBBLOCKS; c++) {
        BlockVisibility bv = rv->vis[a][c];
        if (bv == BLOCK_SKIP) { continue; }
        for (int j = rv->ks[c].start + lane; j < rv->ks[c].end; j += WARP_SIZE) {
            if (!pair_sees(bv, qi, qd, ki[j], kd[j])) { continue; }
            maxval = fmaxf(maxval, dot_row(qrow, kb + (size_t)j * HS, HS) * scale);
        }
    }
    maxval = warp_reduce_max(maxval);
    if (maxval == -INFINITY) { return; } // nothing of this block is visible to query i (warp-uniform)

    // pass 2: the block's own softmax, o_blk = sum p v and its normaliser
    float sum = 0.0f;
    float acc[ATTN_DIMS_PER_LANE];
    #pragma unroll
    for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) { acc[r] = 0.0f; }
    for (int c = 0; c < RING_SUBBLOCKS; c++) {
        BlockVisibility bv = rv->vis[a][c];
        if (bv == BLOCK_SKIP) { continue; }
        int end = rv->ks[c].end;
        for (int base = rv->ks[c].start; base < end; base += WARP_SIZE) {
            int j = base + lane;
            float p = 0.0f;
            if (j < end && pair_sees(bv, qi, qd, ki[j], kd[j])) {
                p = expf(dot_row(qrow, kb + (size_t)j * HS, HS) * scale - maxval);
            }
            sum += p;
            int count = min(WARP_SIZE, end - base);
            for (int t = 0; t < count; t++) {
                float pt = __shfl_sync(FULL_MASK, p, t);
                lane_axpy(acc, pt, vb + (size_t)(base + t) * HS, lane, HS);
            }
        }
    }
    sum = warp_reduce_sum(sum);
    float lse_blk = maxval + logf(sum);
    float lse_old = lse[row];
    __syncwarp(); // every lane has read lse_old before lane 0 writes
    float *orow = o + row * HS;
    if (lse_old == -INFINITY) {
        // the first block this query sees: take it as is
        #pragma unroll
        for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) { acc[r] = acc[r] / sum; }
        lane_store(orow, acc, lane, HS);
        if (lane == 0) { lse[row] = lse_blk; }
    } else {
        float lse_new = fmaxf(lse_old, lse_blk) + log1pf(expf(-fabsf(lse_old - lse_blk)));
        float w_old = expf(lse_old - lse_new);
        float w_blk = expf(lse_blk - lse_new) / sum;
        #pragma unroll
        for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) {
            int d = lane + r * WARP_SIZE;
            if (d < HS) { orow[d] = orow[d] * w_old + acc[r] * w_blk; }
        }
        if (lane == 0) { lse[row] = lse_new; }
    }
}

// dQ of every local query row against the visiting block, accumulated into dq.
// dq, q, dout: (B, NH, T, HS)   lse, drow: (B, NH, T)   k, v: the block's (B, NH, T, HS)
// one warp per query row; dynamic shared memory 2 x ATTN_WARPS x HS floats (q and dO rows)
__global__ static void attend_backward_dq_kernel(float *dq, const float *q, const float *k, const float *v,
                                                 const float *dout, const float *lse, const float *drow,
                                                 const int *q_index, const int *q_doc, const int *k_index,
                                                 const int *k_doc, const RowVisibility *vis, int NH, int T,
                                                 int HS, size_t rows, float scale) {
    extern __shared__ float shared[];
    WarpRow w = warp_row(NH, T); // a query row
    if (w.row >= rows) { return; }
    int lane = w.lane, i = w.t, b = w.b;
    size_t row = w.row, bh = w.bh;
    const RowVisibility *rv = &vis[b];
    int a = sub_block_containing(rv->qs, i);
    float *qrow = shared + (size_t)w.warp * 2 * HS;
    float *dorow = qrow + HS;
    for (int d = lane; d < HS; d += WARP_SIZE) {
        qrow[d] = q[row * HS + d];
        dorow[d] = dout[row * HS + d];
    }
    __syncwarp();
    const float *kb = k + bh * T * HS;
    const float *vb = v + bh * T * HS;
    const int *ki = k_index + (size_t)b * T, *kd = k_doc + (size_t)b * T;
    int qi = q_index[(size_t)b * T + i], qd = q_doc[(size_t)b * T + i];
    float lse_i = lse[row], d_i = drow[row];
    float acc[ATTN_DIMS_PER_LANE];
    #pragma unroll
    for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) {
        int d = lane + r * WARP_SIZE;
        acc[r] = d < HS ? dq[row * HS + d] : 0.0f;
    }
    for (int c = 0; c < RING_SUBBLOCKS; c++) {
        BlockVisibility bv = rv->vis[a][c];
        if (bv == BLOCK_SKIP) { continue; }
        int end = rv->ks[c].end;
        for (int base = rv->ks[c].start; base < end; base += WARP_SIZE) {
            int j = base + lane;
            float ds = 0.0f;
            if (j < end && pair_sees(bv, qi, qd, ki[j], kd[j])) {
                float p = expf(dot_row(qrow, kb + (size_t)j * HS, HS) * scale - lse_i);
                ds = p * (dot_row(dorow, vb + (size_t)j * HS, HS) - d_i) * scale;
            }
            int count = min(WARP_SIZE, end - base);
            for (int t = 0; t < count; t++) {
                float dst = __shfl_sync(FULL_MASK, ds, t);
                lane_axpy(acc, dst, kb + (size_t)(base + t) * HS, lane, HS);
            }
        }
    }
    lane_store(dq + row * HS, acc, lane, HS);
}

// The visiting block's dK | dV contribution from this rank's queries: every key row
// is written (0 where no query sees it), so dkv needs no zeroing.
// dkv: 2 x (B, NH, T, HS), dK then dV   q, dout: (B, NH, T, HS)   lse, drow: (B, NH, T)
// one warp per key row; dynamic shared memory 2 x ATTN_WARPS x HS floats (k and v rows)
__global__ static void attend_backward_dkv_kernel(float *dkv, const float *q, const float *k, const float *v,
                                                  const float *dout, const float *lse, const float *drow,
                                                  const int *q_index, const int *q_doc, const int *k_index,
                                                  const int *k_doc, const RowVisibility *vis, int NH, int T,
                                                  int HS, size_t rows, float scale) {
    extern __shared__ float shared[];
    WarpRow w = warp_row(NH, T); // a key row of the block
    if (w.row >= rows) { return; }
    int lane = w.lane, j = w.t, b = w.b;
    size_t row = w.row, bh = w.bh;
    const RowVisibility *rv = &vis[b];
    int c = sub_block_containing(rv->ks, j);
    float *krow = shared + (size_t)w.warp * 2 * HS;
    float *vrow = krow + HS;
    for (int d = lane; d < HS; d += WARP_SIZE) {
        krow[d] = k[row * HS + d];
        vrow[d] = v[row * HS + d];
    }
    __syncwarp();
    const float *qb = q + bh * T * HS;
    const float *dob = dout + bh * T * HS;
    const float *lse_b = lse + bh * T;
    const float *drow_b = drow + bh * T;
    const int *qi = q_index + (size_t)b * T, *qd = q_doc + (size_t)b * T;
    int kj = k_index[(size_t)b * T + j], kdj = k_doc[(size_t)b * T + j];
    float acc_k[ATTN_DIMS_PER_LANE], acc_v[ATTN_DIMS_PER_LANE];
    #pragma unroll
    for (int r = 0; r < ATTN_DIMS_PER_LANE; r++) { acc_k[r] = 0.0f; acc_v[r] = 0.0f; }
    for (int a = 0; a < RING_SUBBLOCKS; a++) {
        BlockVisibility bv = rv->vis[a][c];
        if (bv == BLOCK_SKIP) { continue; }
        int end = rv->qs[a].end;
        for (int base = rv->qs[a].start; base < end; base += WARP_SIZE) {
            int i = base + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < end && pair_sees(bv, qi[i], qd[i], kj, kdj)) {
                p = expf(dot_row(qb + (size_t)i * HS, krow, HS) * scale - lse_b[i]);
                ds = p * (dot_row(dob + (size_t)i * HS, vrow, HS) - drow_b[i]) * scale;
            }
            int count = min(WARP_SIZE, end - base);
            for (int t = 0; t < count; t++) {
                float pt = __shfl_sync(FULL_MASK, p, t);
                float dst = __shfl_sync(FULL_MASK, ds, t);
                lane_axpy(acc_v, pt, dob + (size_t)(base + t) * HS, lane, HS);
                lane_axpy(acc_k, dst, qb + (size_t)(base + t) * HS, lane, HS);
            }
        }
    }
    size_t n = rows * HS; // dV follows dK
    lane_store(dkv + row * HS, acc_k, lane, HS);
    lane_store(dkv + n + row * HS, acc_v, lane, HS);
}

// ----------------------------------------------------------------------------
// the steps every algorithm takes

// Fills the queries and this rank's own K/V block from the qkv activation and the layout.
// qkv: (B, T, 3C), q and k and v at offsets 0, C, 2C of each token
static void attention_load_cuda(AttentionQueriesCuda *aq, const ShardLayout *lay, KVBlock *own, const float *qkv) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH;
    if (lay == NULL || lay->B != B || lay->local_len != T) {
        fatal("attention: the layout does not match the buffers (B %d, T %d)", B, T);
    }
    heads_from_tokens_cuda(aq->q, qkv, 3 * C, B, T, C, NH);
    heads_from_tokens_cuda(own->k, qkv + C, 3 * C, B, T, C, NH);
    heads_from_tokens_cuda(own->v, qkv + 2 * C, 3 * C, B, T, C, NH);
    size_t bytes = (size_t)B * T * sizeof(int);
    cuda_upload(own->index, lay->global_index, bytes);
    cuda_upload(own->document, lay->document, bytes);
    cuda_upload(aq->q_index, lay->global_index, bytes);
    cuda_upload(aq->q_doc, lay->document, bytes);
}

// attention_load_cuda, and the empty state: no block seen yet.   lse: (B, NH, T)
static void attention_forward_begin_cuda(AttentionQueriesCuda *aq, const ShardLayout *lay, KVBlock *own,
                                         const float *qkv, float *lse) {
    attention_load_cuda(aq, lay, own, qkv);
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    fill_kernel<<<grid_for(rows, 256), 256, 0, cuda_ctx.stream>>>(lse, -INFINITY, rows);
    cudaCheckLaunch();
}

// out: (B, T, C), once every block has been merged
static void attention_forward_end_cuda(AttentionQueriesCuda *aq, float *out) {
    tokens_from_heads_cuda(out, aq->o, aq->C, aq->B, aq->T, aq->C, aq->NH);
}

// attention_load_cuda, and what backward needs of the forward's result: dO, O, D;
// dQ = 0.   dout, out: (B, T, C)
static void attention_backward_begin_cuda(AttentionQueriesCuda *aq, const ShardLayout *lay, KVBlock *own,
                                          const float *qkv, const float *dout, const float *out) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH, HS = C / NH;
    attention_load_cuda(aq, lay, own, qkv);
    heads_from_tokens_cuda(aq->dout, dout, C, B, T, C, NH);
    heads_from_tokens_cuda(aq->o, out, C, B, T, C, NH);
    size_t rows = (size_t)B * NH * T;
    row_dot_kernel<<<grid_for(rows, 256), 256, 0, cuda_ctx.stream>>>(aq->drow, aq->dout, aq->o, rows, HS);
    cudaCheckLaunch();
    cudaCheck(cudaMemsetAsync(aq->dq, 0, rows * HS * sizeof(float), cuda_ctx.stream));
}

// dqkv (B, T, 3C) <- dQ, and the complete dK | dV of this rank's own block
// dkv: 2 x (B, NH, T, HS)
static void attention_backward_end_cuda(AttentionQueriesCuda *aq, float *dqkv, const float *dkv) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH;
    size_t n = (size_t)B * T * C;
    tokens_from_heads_cuda(dqkv, aq->dq, 3 * C, B, T, C, NH);
    tokens_from_heads_cuda(dqkv + C, dkv, 3 * C, B, T, C, NH);
    tokens_from_heads_cuda(dqkv + 2 * C, dkv + n, 3 * C, B, T, C, NH);
}

static void block_visibility_cuda(AttentionQueriesCuda *aq, const KVBlock *blk) {
    block_visibility_kernel<<<grid_for(aq->B, 64), 64, 0, cuda_ctx.stream>>>(aq->vis, aq->q_index, aq->q_doc,
                                                                             blk->index, blk->document, aq->B, aq->T);
    cudaCheckLaunch();
}

// Attends the local queries to one K/V block and merges into (o, lse).
static void attend_block_forward_cuda(AttentionQueriesCuda *aq, const KVBlock *blk, float *lse) {
    int HS = aq->C / aq->NH;
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    block_visibility_cuda(aq, blk);
    size_t shared = (size_t)ATTN_WARPS * HS * sizeof(float);
    attend_forward_kernel<<<grid_for(rows, ATTN_WARPS), ATTN_WARPS * WARP_SIZE, shared, cuda_ctx.stream>>>(
        aq->o, lse, aq->q, blk->k, blk->v, aq->q_index, aq->q_doc, blk->index, blk->document, aq->vis, aq->NH, aq->T,
        HS, rows, 1.0f / sqrtf((float)HS));
    cudaCheckLaunch();
}

// Adds one block's share to dQ, and writes the block's dK | dV contribution.
// dkv: 2 x (B, NH, T, HS), every row written
static void attend_block_backward_cuda(AttentionQueriesCuda *aq, const KVBlock *blk, const float *lse, float *dkv) {
    int HS = aq->C / aq->NH;
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    float scale = 1.0f / sqrtf((float)HS);
    block_visibility_cuda(aq, blk);
    size_t shared = 2 * (size_t)ATTN_WARPS * HS * sizeof(float);
    unsigned int grid = grid_for(rows, ATTN_WARPS);
    attend_backward_dq_kernel<<<grid, ATTN_WARPS * WARP_SIZE, shared, cuda_ctx.stream>>>(
        aq->dq, aq->q, blk->k, blk->v, aq->dout, lse, aq->drow, aq->q_index, aq->q_doc, blk->index, blk->document,
        aq->vis, aq->NH, aq->T, HS, rows, scale);
    cudaCheckLaunch();
    attend_backward_dkv_kernel<<<grid, ATTN_WARPS * WARP_SIZE, shared, cuda_ctx.stream>>>(
        dkv, aq->q, blk->k, blk->v, aq->dout, lse, aq->drow, aq->q_index, aq->q_doc, blk->index, blk->document,
        aq->vis, aq->NH, aq->T, HS, rows, scale);
    cudaCheckLaunch();
}

#endif // CP_ATTENTION_BLOCK_CUH
