/*
What every CUDA file of the GPU trainer shares: checked CUDA and cuBLAS calls, the
compute stream and the cuBLASLt handle, launch arithmetic, warp and block reductions,
and the deterministic column sums that stand in for float atomics.

Every CUDA call goes through cudaCheck / cublasCheck, which name the file and line
and end the job through fatal() (llmc/utils.h, so an MPI job ends on every rank).
Every kernel launch is followed by cudaCheckLaunch(): a bad launch configuration
is reported at the launch, not at some later call.

One compute stream (cuda_ctx.stream) carries every kernel and cuBLAS call. It is
created non-blocking, and nothing here ever uses the legacy default stream: the
transports' streams (cp/comm_cuda.cuh) then never wait on compute by accident,
only where an event says so.

The host waits for the compute stream in one place, cuda_stream_wait, which
counts the waits (cuda_ctx.host_waits: the GPU trainer's steps are held to one
each). Uploads never make it wait: they go through pinned staging memory
(cuda_upload), as a copy from pageable memory may block the host until the stream
reaches it.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include "precision.cuh"
#include "utils.h"

// ----------------------------------------------------------------------------
// checked calls

static void cuda_check(cudaError_t err, const char *file, int line) {
    if (err != cudaSuccess) {
        fatal("CUDA error at %s:%d: %s (%s)", file, line, cudaGetErrorString(err), cudaGetErrorName(err));
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)
// after every kernel launch
#define cudaCheckLaunch() cuda_check(cudaGetLastError(), __FILE__, __LINE__)

static void cublas_check(cublasStatus_t status, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fatal("cuBLAS error at %s:%d: %s (%d)", file, line, cublasGetStatusString(status), (int)status);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)

// The number of CUDA devices; 0 where there is no usable one, and then `why` (if
// not NULL, why_size bytes) says why, so that a broken installation is not
// mistaken for a machine without a GPU: "no CUDA device found" when the runtime
// sees none, "no CUDA driver found" when libcuda cannot be loaded (the runtime
// calls that an insufficient driver), else the runtime's own error (a driver older
// than the runtime, devices busy or unavailable, ...). Never a crash.
static int cuda_device_count(char *why, size_t why_size) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) { return count; }
    (void)cudaGetLastError(); // clear the sticky error of a driverless machine
    if (why != NULL) {
        void *driver = err == cudaErrorInsufficientDriver ? dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) : NULL;
        if (driver == NULL && err == cudaErrorInsufficientDriver) { driver = dlopen("libcuda.so.1", RTLD_LAZY); }
        if (err == cudaSuccess || err == cudaErrorNoDevice) {
            snprintf(why, why_size, "no CUDA device found");
        } else if (err == cudaErrorInsufficientDriver && driver == NULL) {
            snprintf(why, why_size, "no CUDA driver found (libcuda.so.1 cannot be loaded: %s)", dlerror());
        } else {
            snprintf(why, why_size, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
        }
        if (driver != NULL) { dlclose(driver); }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the context: device, compute stream, cuBLASLt

#define CUBLASLT_WORKSPACE_BYTES (32u << 20) // cuBLASLt's scratch: its recommendation for Hopper

// What a cuBLASLt matmul's descriptor, layouts and algorithm depend on
// (llmc/matmul.cuh): all ints, so that keys compare with memcmp
typedef struct {
    int ta, tb;              // cublasOperation_t of A and B
    int m, n, k, lda, ldb, ldd;
    int a_type, b_type, d_type, compute, epilogue;
    int bias_align, aux_align; // the epilogue pointers' alignment, up to 256 bytes (0: none)
} MatmulKey;

// One kind of matmul as cuBLASLt runs it, made the first time it is called and
// kept for the run (llmc/matmul.cuh says why)
typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;  // the epilogue's pointers are set at each call
    cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
    cublasLtMatmulAlgo_t algo;
    int found;                  // 0: cuBLASLt has no algorithm for it
} MatmulPlan;

// Pinned staging of the uploads (cuda_upload). Each upload takes the next bytes of
// `buffer`; every copy out of it runs on the compute stream, so all of it is free
// again once the host has waited for that stream (cuda_stream_wait). A stretch
// between two waits that needs more than the buffer holds moves on to a larger one
// (at least twice the size, and room for the whole stretch so far), and the
// outgrown buffers are freed at the next wait: the buffer settles at the largest
// stretch, and a steady training step allocates nothing.
#define UPLOAD_MIN_BYTES (64u << 10)
#define UPLOAD_ALIGN 64
#define UPLOAD_OUTGROWN_MAX 64 // each outgrown buffer is at most half the next one's size
typedef struct {
    char *buffer;    // pinned
    size_t used, capacity;
    size_t stretch;  // bytes taken since the last wait, in every buffer, with alignment
    void *outgrown[UPLOAD_OUTGROWN_MAX];
    int num_outgrown;
} UploadStaging;

typedef struct {
    int device;
    int tf32;                    // -f: TF32 tensor cores in the FP32 build's matmuls
    int multiprocessors;         // the device's SMs (how many blocks fill it)
    cudaStream_t stream;         // the compute stream
    cublasLtHandle_t cublaslt;   // the matmuls (llmc/matmul.cuh), on the compute stream
    void *cublaslt_workspace;    // (CUBLASLT_WORKSPACE_BYTES) device
    MatmulPlan *plans;           // host (plans_capacity), the first num_plans made
    int num_plans, plans_capacity;
    void *scratch;               // device scratch of the deterministic reductions
    size_t scratch_bytes;
    UploadStaging uploads;
    long host_waits;             // times the host has waited for a stream (cuda_stream_wait)
} CudaContext;

static CudaContext cuda_ctx = {-1, 0, 0, NULL, NULL, NULL, NULL, 0, 0, NULL, 0, {NULL, 0, 0, 0, {NULL}, 0}, 0};

static void cuda_init(int device, int tf32) {
    cuda_ctx.device = device;
    cuda_ctx.tf32 = tf32;
    cudaCheck(cudaSetDevice(device));
    cudaCheck(cudaDeviceGetAttribute(&cuda_ctx.multiprocessors, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaStreamCreateWithFlags(&cuda_ctx.stream, cudaStreamNonBlocking));
    // TF32 is chosen per call, by the compute type of each matmul (llmc/matmul.cuh)
    cublasCheck(cublasLtCreate(&cuda_ctx.cublaslt));
    cudaCheck(cudaMalloc(&cuda_ctx.cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES));
}

// Set by a transport whose work can hang the stream when a peer fails (NCCL,
// cp/comm_nccl.cuh): called again and again while the host waits for a stream, it
// ends the job when it sees a failure, or no progress for too long (its own clock).
static void (*cuda_wait_watcher)(void) = NULL;

// the upload staging's outgrown buffers freed, and all of it free again: after a
// wait for the compute stream, which ran every copy out of it
static void upload_staging_release(UploadStaging *u) {
    for (int i = 0; i < u->num_outgrown; i++) { cudaCheck(cudaFreeHost(u->outgrown[i])); }
    u->num_outgrown = 0;
    u->used = 0;
    u->stretch = 0;
}

// Waits on the host until `stream` has done all its queued work; polls, so that
// the watcher sees a hang, where one is installed. Every host wait for the device
// in the trainer goes through here (the MPI staged transport's own waits for its
// copies aside, cp/comm_mpi_staged.cuh), so cuda_ctx.host_waits counts them.
static void cuda_stream_wait(cudaStream_t stream) {
    cuda_ctx.host_waits++;
    if (cuda_wait_watcher == NULL) {
        cudaCheck(cudaStreamSynchronize(stream));
    } else {
        cudaError_t status;
        while ((status = cudaStreamQuery(stream)) == cudaErrorNotReady) { cuda_wait_watcher(); }
        cudaCheck(status);
    }
    if (stream == cuda_ctx.stream) { upload_staging_release(&cuda_ctx.uploads); }
}

static void cuda_sync(void) {
    cuda_stream_wait(cuda_ctx.stream);
}

// Destroys the matmul plans made so far (llmc/matmul.cuh makes them again as needed).
static void cuda_matmul_plans_free(void) {
    for (int i = 0; i < cuda_ctx.num_plans; i++) {
        MatmulPlan *p = &cuda_ctx.plans[i];
        cublasCheck(cublasLtMatrixLayoutDestroy(p->d_layout));
        cublasCheck(cublasLtMatrixLayoutDestroy(p->b_layout));
        cublasCheck(cublasLtMatrixLayoutDestroy(p->a_layout));
        cublasCheck(cublasLtMatmulDescDestroy(p->desc));
    }
    free(cuda_ctx.plans);
    cuda_ctx.plans = NULL;
    cuda_ctx.num_plans = cuda_ctx.plans_capacity = 0;
}

static void cuda_free_context(void) {
    if (cuda_ctx.stream) { cuda_sync(); } // the last uploads out of the staging
    cuda_matmul_plans_free();
    if (cuda_ctx.uploads.buffer) { cudaCheck(cudaFreeHost(cuda_ctx.uploads.buffer)); }
    if (cuda_ctx.scratch) { cudaCheck(cudaFree(cuda_ctx.scratch)); }
    if (cuda_ctx.cublaslt_workspace) { cudaCheck(cudaFree(cuda_ctx.cublaslt_workspace)); }
    if (cuda_ctx.cublaslt) { cublasCheck(cublasLtDestroy(cuda_ctx.cublaslt)); }
    if (cuda_ctx.stream) { cudaCheck(cudaStreamDestroy(cuda_ctx.stream)); }
    memset(&cuda_ctx.uploads, 0, sizeof(cuda_ctx.uploads));
    cuda_ctx.scratch = NULL;
    cuda_ctx.scratch_bytes = 0;
    cuda_ctx.cublaslt = NULL;
    cuda_ctx.cublaslt_workspace = NULL;
    cuda_ctx.stream = NULL;
}

// ----------------------------------------------------------------------------
// memory

static void *cuda_malloc_check(size_t bytes, const char *file, int line) {
    void *ptr = NULL;
    cudaError_t err = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
        fatal("cannot allocate %zu bytes of device memory at %s:%d: %s", bytes, file, line, cudaGetErrorString(err));
    }
    return ptr;
}
#define cudaMallocCheck(bytes) cuda_malloc_check((bytes), __FILE__, __LINE__)

// cudaMallocCheck that adds the size to *bytes: a holder of device buffers counts
// what it allocates (cp/'s attention algorithms report it against their estimate)
static void *cuda_malloc_counted(size_t *bytes, size_t size) {
    *bytes += size;
    return cudaMallocCheck(size);
}

static void *cuda_malloc_host_check(size_t bytes, const char *file, int line) {
    void *ptr = NULL;
    cudaError_t err = cudaMallocHost(&ptr, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
        fatal("cannot allocate %zu bytes of pinned host memory at %s:%d: %s", bytes, file, line,
              cudaGetErrorString(err));
    }
    return ptr;
}
#define cudaMallocHostCheck(bytes) cuda_malloc_host_check((bytes), __FILE__, __LINE__)

// a larger staging buffer with room for this stretch's uploads so far and `bytes`
// more; the current one is freed at the next wait (copies out of it may be queued)
static void upload_staging_grow(UploadStaging *u, size_t bytes) {
    if (u->num_outgrown == UPLOAD_OUTGROWN_MAX) {
        fatal("upload staging: outgrown %d times between two waits for the device", UPLOAD_OUTGROWN_MAX);
    }
    size_t capacity = 2 * u->capacity > UPLOAD_MIN_BYTES ? 2 * u->capacity : UPLOAD_MIN_BYTES;
    if (capacity < u->stretch + bytes) { capacity = u->stretch + bytes; }
    if (u->buffer) { u->outgrown[u->num_outgrown++] = u->buffer; }
    u->buffer = (char *)cudaMallocHostCheck(capacity);
    u->capacity = capacity;
    u->used = 0;
}

// host -> device on the compute stream, staged through pinned memory: returns at
// once, without waiting for the device, and `src` may be reused at once. For what
// the steps upload (ids, the embeddings' buckets, the attention's coordinates).
static void cuda_upload(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) { return; }
    UploadStaging *u = &cuda_ctx.uploads;
    size_t offset = (u->used + UPLOAD_ALIGN - 1) / UPLOAD_ALIGN * UPLOAD_ALIGN;
    if (offset + bytes > u->capacity) {
        upload_staging_grow(u, bytes);
        offset = 0;
    }
    memcpy(u->buffer + offset, src, bytes);
    cudaCheck(cudaMemcpyAsync(dst, u->buffer + offset, bytes, cudaMemcpyHostToDevice, cuda_ctx.stream));
    u->used = offset + bytes;
    u->stretch += bytes + UPLOAD_ALIGN;
}

// host -> device straight from pageable memory, for what goes up once and is too
// large to stage (the model's weights and moments): the host may wait inside until
// the stream reaches the copy; `src` may be reused on return.
static void cuda_upload_pageable(void *dst, const void *src, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_ctx.stream));
}

// device -> host on the compute stream: returns once the data is there (after all
// earlier work of the stream)
static void cuda_download(void *dst, const void *src, size_t bytes) {
    // a copy into pageable memory blocks the host inside cudaMemcpyAsync until the
    // stream reaches it: wait for the stream first, where a watcher can see a hang
    cuda_sync();
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_sync();
}

// Device scratch of at least `bytes`. Grows only when asked for more than ever
// before (a model reserves its largest need at init, so a training step never
// reallocates: cudaFree would synchronise the device).
static void *cuda_scratch(size_t bytes) {
    if (bytes > cuda_ctx.scratch_bytes) {
        if (cuda_ctx.scratch) {
            cuda_sync();
            cudaCheck(cudaFree(cuda_ctx.scratch));
        }
        cuda_ctx.scratch = cudaMallocCheck(bytes);
        cuda_ctx.scratch_bytes = bytes;
    }
    return cuda_ctx.scratch;
}

// ----------------------------------------------------------------------------
// launch arithmetic and reductions

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

// blocks of `threads` covering n items
static unsigned int grid_for(size_t n, int threads) {
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    if (blocks > 0x7fffffffu) { fatal("launch of %zu items is too large for one grid", n); }
    return (unsigned int)(blocks == 0 ? 1 : blocks);
}

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

#endif // LLMC_CUDA_COMMON_CUH
