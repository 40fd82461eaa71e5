/*
What every CUDA file of the GPU trainer shares: checked CUDA and cuBLAS calls, the
compute stream and the cuBLASLt handle, device memory and uploads, launch
arithmetic. The warp and block reductions and the deterministic column sums are
llmc/cuda_reduce.cuh's.

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
// launch arithmetic

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

// blocks of `threads` covering n items
static unsigned int grid_for(size_t n, int threads) {
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    if (blocks > 0x7fffffffu) { fatal("launch of %zu items is too large for one grid", n); }
    return (unsigned int)(blocks == 0 ? 1 : blocks);
}

#endif // LLMC_CUDA_COMMON_CUH
