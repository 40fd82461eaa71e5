/*
The CUDA subset gpt2cp uses, emulated on the CPU so that the GPU code runs, and is
checked, on a machine without a GPU (dev/cuda/emu/run.sh builds and runs it). This
header is what the code under test sees; the emulator itself is the runtime beside
it (emu_*.cpp, emu_internal.h), built once and linked to every emulated binary.

What it does (docs/DESIGN.md, "The CUDA emulation", says what each check is for):

  threads     every thread of a block is a fiber (emu_threads.cpp); between
              synchronisation points the threads of a block run in an order drawn
              from the seed (EMU_SEED; printed, so a failure replays), the blocks of
              a grid too, each block with fresh shared memory
  collectives __syncthreads, __syncwarp, the shuffles, __ballot_sync, the
              tensor-core instructions and ldmatrix (emu_mma.cpp) wait for the
              lanes they name; synccheck reports a barrier or collective the named
              threads do not all reach together, from one call site, alive
  cp.async    copies from global to shared memory land at the issuing thread's
              cp.async.wait_group that covers them (emu_async_copy.cpp); until
              then an access to the destination is a racecheck report, and a
              thread that exits with a copy in flight a synccheck one
  memory      one arena holds shared memory, pinned host memory and device memory
              (emu_memory.cpp); the code under test is compiled with clang's thread
              sanitizer instrumentation, whose hooks the emulator implements: every
              load and store is checked against shadow memory (racecheck: accesses
              of two threads that no barrier orders; initcheck: reads of memory
              nothing wrote; memcheck: accesses outside any allocation; the host
              dereferencing device memory). Fresh memory holds a signalling NaN.
  streams     work on a stream is deferred and run in an order drawn from the seed
              within what streams, events and synchronisations allow
              (emu_streams.cpp); each stream carries a vector clock, so two
              operations that touch the same word with nothing ordering them are
              reported whatever order they ran in
  libraries   cuBLAS/cuBLASLt as plain loops on a stream (emu_blas.cpp); NCCL over
              MPI (emu_nccl.cpp), its operations matched as NCCL matches them
  limits      the launch limits of an H100/H200 (sm_90): block and grid sizes, 48 KiB
              of shared memory without cudaFuncSetAttribute, 227 KiB with it
Every finding is one report naming the check, the kernel or operation, the threads
and the source lines, and ends the process (exit 66, or the MPI job).
*/
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#define CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// __shared__ is rewritten by run.sh (emu_static_shared, emu_dynamic_shared): a
// declaration it missed does not compile
#define __shared__ __shared__must_be_rewritten_by_run_sh

struct alignas(8) float2 { float x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline size_t min(size_t a, size_t b) { return a < b ? a : b; }

// ---- the thread's coordinates: the running fiber's, kept current by the runtime
extern const dim3 *emu_thread_idx;
extern dim3 emu_block_idx, emu_block_dim, emu_grid_dim;
#define threadIdx (*emu_thread_idx)
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

// ---- synchronisation and warp collectives (emu_threads.cpp). The call site of
// each is the return address inside the kernel, so these stay inlined there.
void emu_syncthreads();
void emu_syncwarp(unsigned mask);
// every lane of `mask` hands in `bytes` (<= 16); `all` gets lane l's at all + l * bytes
void emu_warp_collective(const char *what, unsigned mask, const void *mine, size_t bytes, void *all);
// the lane `src` of a shuffle reads from: a lane outside `mask` is a synccheck report
void emu_shuffle_source_check(unsigned mask, int src);
int emu_lane();

__attribute__((always_inline)) static inline void __syncthreads() { emu_syncthreads(); }
__attribute__((always_inline)) static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_syncwarp(mask); }

template <typename T>
__attribute__((always_inline)) static inline T emu_shuffle(const char *what, unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 16, "a shuffle moves at most 16 bytes here");
    T all[32];
    emu_warp_collective(what, mask, &v, sizeof(T), all);
    emu_shuffle_source_check(mask, src);
    return all[src];
}
// the source lane within a segment of `width` lanes, as the PTX ISA's shfl.sync computes it
static inline int emu_segment_lane(int lane, int src, int width) { return (lane & ~(width - 1)) + (src & (width - 1)); }
template <typename T>
__attribute__((always_inline)) static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu_shuffle("__shfl_sync", mask, v, emu_segment_lane(emu_lane(), src, width));
}
template <typename T>
__attribute__((always_inline)) static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = emu_lane(), src = lane ^ lane_mask;
    // a lane past its segment reads its own value
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) { src = lane; }
    return emu_shuffle("__shfl_xor_sync", mask, v, src);
}
template <typename T>
__attribute__((always_inline)) static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int lane = emu_lane(), src = lane + (int)delta;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) { src = lane; }
    return emu_shuffle("__shfl_down_sync", mask, v, src);
}
__attribute__((always_inline)) static inline unsigned __ballot_sync(unsigned mask, int predicate) {
    int all[32], mine = predicate != 0;
    emu_warp_collective("__ballot_sync", mask, &mine, sizeof(int), all);
    unsigned bits = 0;
    for (int l = 0; l < 32; l++) { bits |= (unsigned)((mask >> l & 1u) && all[l]) << l; }
    return bits;
}

// ---- tensor cores (emu_mma.cpp): warp-collective, every lane of the warp
// cvt.rna.tf32.f32: keep 10 mantissa bits, round to nearest, ties away from zero
// (on the magnitude); the low 13 bits of the result are zero. NaN and Inf pass.
static inline unsigned emu_tf32_from_float(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) { return u; }
    return (u + 0x1000u) & 0xffffe000u;
}
void emu_mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]);
void emu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]);
// ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16 (`matrices`: 1, 2, 4):
// every lane of the warp; lane l's row address is read for l < 8 x matrices, as its
// own access of shared memory (emu_mma.cpp)
void emu_ldmatrix(unsigned *r, int matrices, bool trans, const void *row);

// ---- asynchronous copies (emu_async_copy.cpp): cp.async of `bytes` (4, 8, 16), the
// first src_bytes from src and zeros after; commit_group; wait_group `pending`.
// The call site of each is its return address in the kernel, as for the collectives.
void emu_cp_async(void *dst, const void *src, int bytes, int src_bytes);
void emu_cp_async_commit();
void emu_cp_async_wait(int pending);

// ---- shared memory of the running block (run.sh rewrites the declarations)
void *emu_dynamic_shared();
// run.sh puts this first in a kernel declared __launch_bounds__(max_threads): a
// launch of more threads per block fails, as on the GPU
void emu_launch_bounds_check(unsigned max_threads);
// __launch_bounds__(max_threads, min_blocks): the second asks the register
// allocator for room for min_blocks resident blocks, nothing a launch can break
static inline void emu_launch_bounds_check(unsigned max_threads, unsigned) { emu_launch_bounds_check(max_threads); }
void *emu_static_shared_alloc(const char *file, int line, size_t bytes, size_t align);
template <typename A> static inline A &emu_static_shared(const char *file, int line) {
    return *(A *)emu_static_shared_alloc(file, line, sizeof(A), alignof(A));
}

// ---- launches: kernel<<<grid, block, shared, stream>>>(args) becomes
// make_launcher(kernel, grid, block, shared, stream)(args) (run.sh); the arguments
// are copied as a launch copies them, and the kernel runs when its stream gets to it.
typedef struct EmuStream *cudaStream_t;
struct EmuLaunch {
    const void *kernel;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    const void *site;             // the launch's return address in the host code
    void (*invoke)(void *params); // runs the kernel body for the current thread
    void (*destroy)(void *params);
    void *params;                 // the arguments, copied
    size_t params_bytes;
};
void emu_launch(const EmuLaunch &launch);
template <typename K> struct EmuLauncher {
    K kernel;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    template <typename... A> __attribute__((noinline)) void operator()(A... args) {
        typedef std::tuple<K, A...> Params;
        EmuLaunch l;
        l.kernel = (const void *)kernel;
        l.grid = grid; l.block = block; l.shared = shared; l.stream = stream;
        l.site = __builtin_return_address(0);
        l.invoke = [](void *p) { std::apply([](K k, A... a) { k(a...); }, *(Params *)p); };
        l.destroy = [](void *p) { delete (Params *)p; };
        l.params = new Params(kernel, args...);
        l.params_bytes = sizeof(Params);
        emu_launch(l);
    }
};
template <typename K>
static EmuLauncher<K> make_launcher(K kernel, dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = nullptr) {
    return EmuLauncher<K>{kernel, grid, block, shared, stream};
}

// ---- the mutation test (mutations.sh): EMU_MUTATE=N skips synchronisation site N
// of the library code, which rewrite.py numbered
extern int emu_mutation;
static inline bool emu_mutated(int site) { return emu_mutation == site; }
template <typename R, typename... A> static R emu_skipped(A...) { return R(); }
template <typename R, typename... A> static inline auto emu_site(int site, R (*f)(A...)) -> R (*)(A...) {
    return emu_mutated(site) ? &emu_skipped<R, A...> : f;
}

// ---- the runtime API (emu_streams.cpp, emu_memory.cpp)
typedef int cudaError_t;
enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9, cudaErrorInsufficientDriver = 35, cudaErrorDevicesUnavailable = 46,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600, cudaErrorLaunchOutOfResources = 701
};
typedef struct EmuEvent *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };

const char *cudaGetErrorString(cudaError_t err);
const char *cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
template <typename T> static cudaError_t cudaMalloc(T **ptr, size_t bytes) { return cudaMalloc((void **)ptr, bytes); }
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream);
cudaError_t emu_func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value);
template <typename K> static cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute attr, int value) {
    return emu_func_set_attribute((const void *)kernel, attr, value);
}
