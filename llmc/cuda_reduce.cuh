/*
Reductions on the GPU: a warp's values summed or maxed through shuffles, a block's
through shared memory (block_reduce: each warp reduces its own, then one warp the
warps' results), and column sums of a (rows, cols) matrix that are the same bits
every run: the bias gradients' and the layernorm weights' sums over the tokens,
where float atomics would make the order of the sum, and so the result, change
from run to run.
*/
#ifndef LLMC_CUDA_REDUCE_CUH
#define LLMC_CUDA_REDUCE_CUH

#include "cuda_common.cuh"

__device__ static inline float warp_reduce_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) { v += __shfl_xor_sync(FULL_MASK, v, offset); }
    return v;
}

__device__ static inline float warp_reduce_max(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) { v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset)); }
    return v;
}

__device__ static inline double warp_reduce_sum_double(double v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) { v += __shfl_xor_sync(FULL_MASK, v, offset); }
    return v;
}

// Block-wide reductions for blocks of at most 1024 threads (a multiple of 32).
// Every thread gets the result. shared: WARP_SIZE values of scratch. Each warp
// reduces its values (WARP_REDUCE, one of the above), then every warp reduces the
// warps' results, identity standing in past the last warp.
template <typename T, T (*WARP_REDUCE)(T)> __device__ static inline T block_reduce(T v, T *shared, T identity) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int warps = blockDim.x / WARP_SIZE;
    v = WARP_REDUCE(v);
    __syncthreads(); // shared may still be read by an earlier reduction
    if (lane == 0) { shared[warp] = v; }
    __syncthreads();
    v = lane < warps ? shared[lane] : identity;
    return WARP_REDUCE(v);
}

__device__ static inline float block_reduce_max(float v, float *shared) {
    return block_reduce<float, warp_reduce_max>(v, shared, -INFINITY);
}

__device__ static inline float block_reduce_sum(float v, float *shared) {
    return block_reduce<float, warp_reduce_sum>(v, shared, 0.0f);
}

__device__ static inline double block_reduce_sum_double(double v, double *shared) {
    return block_reduce<double, warp_reduce_sum_double>(v, shared, 0.0);
}

// ----------------------------------------------------------------------------
// deterministic column sums
//
// Gradients of biases and layernorm weights sum a (rows, cols) tensor over its
// rows. Float atomics would make the order of that sum, and so the result, change
// from run to run. Instead two stages, each in a fixed order:
//
//   stage one (the caller's kernel, launched on column_sums_grid): the rows are cut
//     into `chunks` chunks of about COLUMN_SUM_CHUNK_ROWS rows. A block of
//     COLUMN_SUM_COLS x COLUMN_SUM_LANES threads takes 32 columns of one chunk;
//     row lane y sums the chunk's rows y, y + 8, ... (each warp reads 32 adjacent
//     floats of one row: coalesced), and column_lanes_sum adds the 8 lanes in lane
//     order. partials[chunk][col] = the chunk's sum.
//   stage two (column_sums_finish): out[col] += the chunks' sums, 32 lanes of
//     chunks per column added the same way.
//
// The number of chunks depends on the rows only, so the same input gives the same
// bits every run; many rows give many chunks, so the grid fills the GPU whatever
// the width (one thread per column, as before, left a d12 bias gradient with 768
// threads each walking every row one after another).

#define COLUMN_SUM_COLS 32        // columns of a block: one warp across a row
#define COLUMN_SUM_LANES 8        // row lanes of a stage-one block
#define COLUMN_SUM_CHUNK_ROWS 64  // rows of a chunk, until there are COLUMN_SUM_CHUNKS
#define COLUMN_SUM_CHUNKS 256     // the most chunks: partials need at most that many rows

// the chunks for `rows` rows
static int column_sums_chunks(int rows) {
    int chunks = (rows + COLUMN_SUM_CHUNK_ROWS - 1) / COLUMN_SUM_CHUNK_ROWS;
    return chunks < 1 ? 1 : chunks > COLUMN_SUM_CHUNKS ? COLUMN_SUM_CHUNKS : chunks;
}

// rows of chunk k: [k*rows/chunks, (k+1)*rows/chunks)
__device__ static inline int column_chunk_start(int rows, int chunks, int k) {
    return (int)((long long)k * rows / chunks);
}

// The sum over the block's row lanes (threadIdx.y) of v, per column (threadIdx.x),
// in lane order; valid in the threads of lane 0. Every thread of the block must
// call it. lanes: blockDim.y * COLUMN_SUM_COLS floats of shared memory.
__device__ static inline float column_lanes_sum(float v, float *lanes) {
    __syncthreads(); // lanes may still be read by an earlier call
    lanes[threadIdx.y * COLUMN_SUM_COLS + threadIdx.x] = v;
    __syncthreads();
    float sum = 0.0f;
    if (threadIdx.y == 0) {
        for (unsigned y = 0; y < blockDim.y; y++) { sum += lanes[y * COLUMN_SUM_COLS + threadIdx.x]; }
    }
    return sum;
}

// out[col] += sum over chunks of partials[chunk][col]
// out: (cols)   partials: (chunks, cols); blocks of COLUMN_SUM_COLS x WARP_SIZE
__global__ static void column_sums_finish_kernel(float *out, const float *partials, int cols, int chunks) {
    __shared__ float lanes[WARP_SIZE * COLUMN_SUM_COLS];
    int col = blockIdx.x * COLUMN_SUM_COLS + threadIdx.x;
    float sum = 0.0f;
    if (col < cols) {
        for (int k = threadIdx.y; k < chunks; k += blockDim.y) { sum += partials[(size_t)k * cols + col]; }
    }
    sum = column_lanes_sum(sum, lanes);
    if (threadIdx.y == 0 && col < cols) { out[col] += sum; }
}

static void column_sums_finish(float *out, const float *partials, int cols, int chunks) {
    dim3 block(COLUMN_SUM_COLS, WARP_SIZE);
    column_sums_finish_kernel<<<grid_for(cols, COLUMN_SUM_COLS), block, 0, cuda_ctx.stream>>>(out, partials, cols, chunks);
    cudaCheckLaunch();
}

// the launch of a stage one: blocks of COLUMN_SUM_COLS x COLUMN_SUM_LANES threads,
// one per 32 columns and chunk
static dim3 column_sums_grid(int cols, int chunks) {
    return dim3(grid_for(cols, COLUMN_SUM_COLS), chunks);
}
static dim3 column_sums_block(void) {
    return dim3(COLUMN_SUM_COLS, COLUMN_SUM_LANES);
}

#endif // LLMC_CUDA_REDUCE_CUH
