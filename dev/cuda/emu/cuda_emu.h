/*
A CPU emulation of the CUDA subset gpt2cp uses, to run the GPU code's logic on a
machine without a GPU (dev/cuda/emu/run.sh). Not a simulator of the hardware:

  - every thread of a block is a ucontext fiber; a block's fibers run until each
    reaches a barrier (__syncthreads, __syncwarp, or either half of a shuffle), and
    a barrier opens once every live thread of its warp (or block) is waiting, so
    warp shuffles and block reductions compute what they compute on a GPU
  - blocks run one after another; __shared__ becomes static (one block at a time),
    the dynamic shared memory one buffer
  - device memory is host memory; every stream, event and copy is synchronous, so
    races between the compute and the transport streams cannot show here
  - cublasGemmEx is a plain column-major loop (double accumulation), and the math
    functions are the host's libm: only the ordering of sums matches the GPU's
It catches index arithmetic, launch geometry, shuffles, barriers, uninitialised
reads (cudaMalloc fills 0x5A) and the ring's buffer choreography.
*/
#pragma once
#include <unistd.h>
#include <ucontext.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
static inline int min(int a, int b) { return a < b ? a : b; }
static inline size_t min(size_t a, size_t b) { return a < b ? a : b; }

struct EmuFiber {
    ucontext_t ctx;
    dim3 tidx;
    int state; // 0 runnable, 1 warp barrier, 2 block barrier, 3 done
    uint64_t slot;
    char *stack;
};
static std::vector<EmuFiber> emu_fibers;
static EmuFiber *emu_cur = nullptr;
static ucontext_t emu_sched;
static dim3 emu_block_idx, emu_block_dim, emu_grid_dim;
static std::function<void()> *emu_body = nullptr;
static char emu_dynamic_shared[1 << 16];
#define threadIdx (emu_cur->tidx)
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
static const size_t EMU_STACK = 256 * 1024;

static void emu_wait(int state) { emu_cur->state = state; swapcontext(&emu_cur->ctx, &emu_sched); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; emu_wait(1); }
static inline void __syncthreads() { emu_wait(2); }
template <typename T> static inline T emu_shfl(T v, int src_lane) {
    static_assert(sizeof(T) <= 8, "");
    memcpy(&emu_cur->slot, &v, sizeof(T));
    emu_wait(1);
    size_t me = emu_cur - emu_fibers.data();
    size_t base = me - me % 32;
    T out;
    memcpy(&out, &emu_fibers[base + (src_lane & 31)].slot, sizeof(T));
    emu_wait(1);
    return out;
}
template <typename T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl(v, src); }
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int m) {
    int lane = (int)((emu_cur - emu_fibers.data()) % 32);
    return emu_shfl(v, lane ^ m);
}
static void emu_trampoline() { (*emu_body)(); emu_cur->state = 3; swapcontext(&emu_cur->ctx, &emu_sched); }

static void emu_run_block(int nthreads) {
    if ((int)emu_fibers.size() < nthreads) {
        size_t old = emu_fibers.size();
        emu_fibers.resize(nthreads);
        for (size_t i = old; i < (size_t)nthreads; i++) emu_fibers[i].stack = (char *)malloc(EMU_STACK);
    }
    for (int t = 0; t < nthreads; t++) {
        EmuFiber &f = emu_fibers[t];
        f.tidx = dim3(t % emu_block_dim.x, (t / emu_block_dim.x) % emu_block_dim.y, t / (emu_block_dim.x * emu_block_dim.y));
        f.state = 0;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = EMU_STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, emu_trampoline, 0);
    }
    for (;;) {
        for (int t = 0; t < nthreads; t++) {
            if (emu_fibers[t].state == 0) { emu_cur = &emu_fibers[t]; swapcontext(&emu_sched, &emu_fibers[t].ctx); }
        }
        int done = 0, released = 0;
        for (int t = 0; t < nthreads; t++) done += emu_fibers[t].state == 3;
        if (done == nthreads) return;
        // warp barriers: every live lane of the warp waits at one
        for (int w = 0; w < nthreads; w += 32) {
            int live = 0, waiting = 0;
            for (int t = w; t < w + 32 && t < nthreads; t++) {
                if (emu_fibers[t].state != 3) live++;
                if (emu_fibers[t].state == 1) waiting++;
            }
            if (live > 0 && waiting == live) {
                for (int t = w; t < w + 32 && t < nthreads; t++) if (emu_fibers[t].state == 1) emu_fibers[t].state = 0;
                released = 1;
            }
        }
        if (!released) {
            int live = 0, waiting = 0;
            for (int t = 0; t < nthreads; t++) { if (emu_fibers[t].state != 3) live++; if (emu_fibers[t].state == 2) waiting++; }
            if (live > 0 && waiting == live) {
                for (int t = 0; t < nthreads; t++) if (emu_fibers[t].state == 2) emu_fibers[t].state = 0;
                released = 1;
            }
        }
        if (!released) { fprintf(stderr, "EMU DEADLOCK (block %u,%u)\n", emu_block_idx.x, emu_block_idx.y); abort(); }
    }
}

template <typename K> struct EmuLauncher {
    K kernel; dim3 grid, block;
    template <typename... A> void operator()(A... args) {
        if (block.x * block.y * block.z > 1024 || grid.x == 0) { fprintf(stderr, "EMU bad launch\n"); abort(); }
        std::function<void()> body = [&]() { kernel(args...); };
        emu_body = &body;
        emu_grid_dim = grid; emu_block_dim = block;
        for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
            emu_block_idx = dim3(x, y, z);
            memset(emu_dynamic_shared, 0xAB, sizeof(emu_dynamic_shared));
            emu_run_block(block.x * block.y * block.z);
        }
    }
};
template <typename K> static EmuLauncher<K> make_launcher(K k, dim3 g, dim3 b, size_t shared = 0, void *stream = nullptr) {
    if (shared > sizeof(emu_dynamic_shared)) { fprintf(stderr, "EMU too much shared\n"); abort(); }
    (void)stream; return EmuLauncher<K>{k, g, b};
}

// ---- runtime
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorNotReady = 600, cudaErrorNoDevice = 100 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
static const char *cudaGetErrorString(cudaError_t) { return "emu error"; }
static const char *cudaGetErrorName(cudaError_t) { return "emuError"; }
static cudaError_t cudaGetLastError() { return cudaSuccess; }
static int emu_device_count = 1;
static cudaError_t cudaGetDeviceCount(int *n) { *n = emu_device_count; return cudaSuccess; }
static cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { static int x; *s = &x; return cudaSuccess; }
static cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
static cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
static cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { static int x; *e = &x; return cudaSuccess; }
static cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
static cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
static cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
static cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
static cudaError_t cudaMalloc(void **p, size_t n) { *p = malloc(n); memset(*p, 0x5A, n); return *p ? cudaSuccess : 2; }
template <typename T> static cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
// the emulated device's memory is the host's: its free and physical pages
static cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * page;
    *total_bytes = (size_t)sysconf(_SC_PHYS_PAGES) * page;
    return cudaSuccess;
}
static cudaError_t cudaMallocHost(void **p, size_t n) { *p = malloc(n); return cudaSuccess; }
static cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
static cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memmove(d, s, n); return cudaSuccess; }
static cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { memset(d, v, n); return cudaSuccess; }
