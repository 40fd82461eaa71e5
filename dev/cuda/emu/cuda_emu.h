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
  - the tensor-core instructions (mma.sync m16n8k8 TF32 and m16n8k16 bf16, through
    llmc/mma.cuh) are warp-collective exchanges: each lane hands in its fragment
    registers, the warp's A, B and C are assembled from the fragment layout the PTX
    ISA documents for the shape, and each lane takes its own elements of D; inputs
    are rounded to TF32 as cvt.rna.tf32.f32 does, to bf16 as cvt.rn.bf16x2.f32 does
    (cuda_bf16.h), so a kernel's fragment indexing is tested for real
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
#define __launch_bounds__(...)
#define CUDA_EMU 1
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
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
alignas(16) static char emu_dynamic_shared[1 << 18]; // 256 KiB: more than a Hopper block may take (227 KiB)
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

// Warp-collective: every lane of the warp hands in `bytes` (<= 64) and gets all 32
// lanes' values, lane l's at all + l * bytes.
static unsigned char emu_exchange_slots[1024][64];
static inline void emu_warp_exchange(const void *mine, size_t bytes, void *all) {
    size_t me = emu_cur - emu_fibers.data();
    size_t base = me - me % 32;
    memcpy(emu_exchange_slots[me], mine, bytes);
    emu_wait(1);
    for (int l = 0; l < 32; l++) { memcpy((unsigned char *)all + l * bytes, emu_exchange_slots[base + l], bytes); }
    emu_wait(1); // no lane overwrites its slot before every lane has read it
}

// cvt.rna.tf32.f32: keep 10 mantissa bits, round to nearest, ties away from zero
// (on the magnitude: adding half of the dropped part's unit rounds ties up); the
// result is an fp32 bit pattern whose low 13 bits are zero. NaN and Inf pass.
static inline unsigned emu_tf32_from_float(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) { return u; }
    return (u + 0x1000u) & 0xffffe000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 d, a, b, c, computed from the
// PTX ISA's fragment layout (section "Matrix Fragments for mma.m16n8k8", .tf32):
// groupID = lane >> 2, threadID_in_group = lane % 4;
//   A (16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8 x 8):  b0 (t, g), b1 (t + 4, g)                    [row = k, col = n]
//   C, D (16 x 8): c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// The products of TF32 values are exact in fp32; they are summed in k order.
static inline void emu_mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    struct Frag { unsigned a[4], b[2]; float c[4]; } mine, all[32];
    for (int i = 0; i < 4; i++) { mine.a[i] = a[i]; mine.c[i] = c[i]; }
    mine.b[0] = b[0]; mine.b[1] = b[1];
    emu_warp_exchange(&mine, sizeof(mine), all);
    float A[16][8], B[8][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l % 4;
        const Frag &f = all[l];
        A[g][t] = __uint_as_float(f.a[0]);
        A[g + 8][t] = __uint_as_float(f.a[1]);
        A[g][t + 4] = __uint_as_float(f.a[2]);
        A[g + 8][t + 4] = __uint_as_float(f.a[3]);
        B[t][g] = __uint_as_float(f.b[0]);
        B[t + 4][g] = __uint_as_float(f.b[1]);
        C[g][2 * t] = f.c[0];
        C[g][2 * t + 1] = f.c[1];
        C[g + 8][2 * t] = f.c[2];
        C[g + 8][2 * t + 1] = f.c[3];
    }
    // the tensor core reads only the TF32 bits of its inputs
    for (int r = 0; r < 16; r++) for (int k = 0; k < 8; k++) A[r][k] = __uint_as_float(__float_as_uint(A[r][k]) & 0xffffe000u);
    for (int k = 0; k < 8; k++) for (int n = 0; n < 8; n++) B[k][n] = __uint_as_float(__float_as_uint(B[k][n]) & 0xffffe000u);
    int lane = (int)((emu_cur - emu_fibers.data()) % 32), g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = C[row][col];
        for (int k = 0; k < 8; k++) { sum += A[row][k] * B[k][col]; }
        d[i] = sum;
    }
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c, from the PTX
// ISA's fragment layout (section "Matrix Fragments for mma.m16n8k16 with floating
// point type"); each register holds two bf16, the lower index in the low 16 bits:
//   A (16 x 16): a0 (g, 2t | 2t + 1), a1 (g + 8, 2t | 2t + 1),
//                a2 (g, 2t + 8 | 2t + 9), a3 (g + 8, 2t + 8 | 2t + 9)
//   B (16 x 8):  b0 (2t | 2t + 1, g), b1 (2t + 8 | 2t + 9, g)   [row = k, col = n]
//   C, D (16 x 8): as m16n8k8
// A bf16 holds 8 significant bits, so the product of two is exact in fp32 (16 bits);
// the products are summed in fp32 in k order.
static inline float emu_bf16_low(unsigned r) { return __uint_as_float(r << 16); }
static inline float emu_bf16_high(unsigned r) { return __uint_as_float(r & 0xffff0000u); }
static inline void emu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    struct Frag { unsigned a[4], b[2]; float c[4]; } mine, all[32];
    for (int i = 0; i < 4; i++) { mine.a[i] = a[i]; mine.c[i] = c[i]; }
    mine.b[0] = b[0]; mine.b[1] = b[1];
    emu_warp_exchange(&mine, sizeof(mine), all);
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l % 4;
        const Frag &f = all[l];
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
            A[row][col] = emu_bf16_low(f.a[i]);
            A[row][col + 1] = emu_bf16_high(f.a[i]);
        }
        for (int i = 0; i < 2; i++) {
            B[2 * t + 8 * i][g] = emu_bf16_low(f.b[i]);
            B[2 * t + 8 * i + 1][g] = emu_bf16_high(f.b[i]);
        }
        C[g][2 * t] = f.c[0];
        C[g][2 * t + 1] = f.c[1];
        C[g + 8][2 * t] = f.c[2];
        C[g + 8][2 * t + 1] = f.c[3];
    }
    int lane = (int)((emu_cur - emu_fibers.data()) % 32), g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = C[row][col];
        for (int k = 0; k < 16; k++) { sum += A[row][k] * B[k][col]; }
        d[i] = sum;
    }
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
    K kernel; dim3 grid, block; size_t shared;
    template <typename... A> void operator()(A... args) {
        if (block.x * block.y * block.z > 1024 || grid.x == 0) { fprintf(stderr, "EMU bad launch\n"); abort(); }
        std::function<void()> body = [&]() { kernel(args...); };
        emu_body = &body;
        emu_grid_dim = grid; emu_block_dim = block;
        for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
            emu_block_idx = dim3(x, y, z);
            memset(emu_dynamic_shared, 0xAB, shared);
            emu_run_block(block.x * block.y * block.z);
        }
    }
};
template <typename K> static EmuLauncher<K> make_launcher(K k, dim3 g, dim3 b, size_t shared = 0, void *stream = nullptr) {
    if (shared > sizeof(emu_dynamic_shared)) { fprintf(stderr, "EMU too much shared\n"); abort(); }
    (void)stream; return EmuLauncher<K>{k, g, b, shared};
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
static cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t) {
    for (size_t r = 0; r < height; r++) { memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width); }
    return cudaSuccess;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename K> static cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
static cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { memset(d, v, n); return cudaSuccess; }
