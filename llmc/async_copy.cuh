/*
Asynchronous copies from global to shared memory (sm_80 and later), each in one
small device function so that the CUDA emulation (dev/cuda/emu) can stand in for
it, as llmc/mma.cuh's instructions:

    cp_async_cg16        cp.async.cg.shared.global [dst], [src], 16, src_bytes:
                         16 bytes, cached in L2 only (tiles read once per block);
                         the first src_bytes (0 to 16) come from src, the rest of
                         the 16 are zeros, and with src_bytes 0 nothing is read
                         (the rows past a sequence's end)
    cp_async_ca<BYTES>   cp.async.ca.shared.global, 4, 8 or 16 bytes, cached in L1
                         too, likewise zero-filled past src_bytes
    cp_async_commit      cp.async.commit_group: the copies this thread issued since
                         its last commit form one group
    cp_async_wait<N>     cp.async.wait_group N: waits until at most the N most recent
                         of this thread's committed groups are still in flight: every
                         older group's copies have landed in shared memory

A copy is the issuing thread's: the wait orders only its own copies, and only
committed ones (a copy issued after the last commit_group stays in flight). The
other threads of the block see the data after the wait and a __syncthreads that
every one of them reaches after it. Until its group has been waited for, the
destination must be neither read nor written, by any thread, and the source must
not change; a thread must not exit with a copy in flight (the emulator reports
each). dst (shared memory) and src (global memory) are aligned to the copy's size.

Built from them: rows_load_async (rows of a 16-bit tensor into a padded shared
tile) and words_load_async (a run of 4-byte elements), both zero past a length.
*/
#ifndef LLMC_ASYNC_COPY_CUH
#define LLMC_ASYNC_COPY_CUH

#include <stdint.h>
#include <cuda_runtime.h>

__device__ static __forceinline__ void cp_async_cg16(void *dst, const void *src, int src_bytes) {
#ifdef CUDA_EMU
    emu_cp_async(dst, src, 16, src_bytes);
#else
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}

template <int BYTES> __device__ static __forceinline__ void cp_async_ca(void *dst, const void *src, int src_bytes) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async.ca copies 4, 8 or 16 bytes");
#ifdef CUDA_EMU
    emu_cp_async(dst, src, BYTES, src_bytes);
#else
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(src), "n"(BYTES), "r"(src_bytes)
                 : "memory");
#endif
}

__device__ static __forceinline__ void cp_async_commit() {
#ifdef CUDA_EMU
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int N> __device__ static __forceinline__ void cp_async_wait() {
#ifdef CUDA_EMU
    emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// shared (ROWS, LD) <- COLS columns of rows [row0, row0 + ROWS) of a row-major 16-bit
// tensor of T rows (row stride `stride` elements from src, which points at the first
// column wanted), 16 bytes a copy, consecutive threads on consecutive pieces of a
// row; rows at or past T are zeros (nothing is read). Issued, not committed. COLS
// and LD are multiples of 8, src and stride 16-byte aligned.
template <int COLS, int ROWS, int LD, int THREADS, typename T16>
__device__ static __forceinline__ void rows_load_async(T16 *tile, const T16 *src, size_t stride, int row0, int T) {
    static_assert(sizeof(T16) == 2 && COLS % 8 == 0 && LD % 8 == 0, "16-bit rows in 16-byte pieces");
    constexpr int PIECES = COLS / 8;
    #pragma unroll 1
    for (int idx = threadIdx.x; idx < ROWS * PIECES; idx += THREADS) {
        int r = idx / PIECES, c = idx % PIECES;
        int in = row0 + r < T;
        cp_async_cg16(tile + r * LD + 8 * c, in ? src + (size_t)(row0 + r) * stride + 8 * c : src, in ? 16 : 0);
    }
}

// shared (ROWS) <- the 4-byte elements [row0, row0 + ROWS) of src, zeros at or past T.
// Issued, not committed.
template <int ROWS, int THREADS, typename T4>
__device__ static __forceinline__ void words_load_async(T4 *dst, const T4 *src, int row0, int T) {
    static_assert(sizeof(T4) == 4, "4-byte elements");
    #pragma unroll 1
    for (int r = threadIdx.x; r < ROWS; r += THREADS) {
        int in = row0 + r < T;
        cp_async_ca<4>(dst + r, in ? src + row0 + r : src, in ? 4 : 0);
    }
}

#endif // LLMC_ASYNC_COPY_CUH
