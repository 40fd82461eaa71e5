/*
The tensor-core instructions the GPU kernels use, and the shared-memory loads
that feed them, each in one small device function, so that the CUDA emulation
(dev/cuda/emu) can stand in for it: there the wrapper calls the emulator's
warp-collective version, which assembles the warp's matrices from the fragment
layout the PTX ISA documents and hands each lane its elements of the result. A
kernel that loads its fragments from the wrong rows or columns then computes wrong
numbers under the emulator too. The warp products of shared-memory tiles built
from them are llmc/mma_tiles.cuh's.

    tf32_from_float      cvt.rna.tf32.f32: fp32 -> TF32 (10 mantissa bits, round to
                         nearest, ties away), held in a 32-bit register
    mma_m16n8k8_tf32     mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32:
                         D (16 x 8) = A (16 x 8) B (8 x 8) + C, fp32 accumulation
    bf16x2_from_floats   cvt.rn.bf16x2.f32: two fp32 -> two bf16 (round to nearest,
                         ties to even) in one 32-bit register, the first in the low
                         16 bits (the lower k or column index of a fragment pair)
    mma_m16n8k16_bf16    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32:
                         D (16 x 8) = A (16 x 16) B (16 x 8) + C, fp32 accumulation
                         (a product of two bf16 is exact in fp32)
    ldmatrix<M, TRANS>   ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16
                         (PTX ISA, "Warp-level matrix load instruction: ldmatrix"):
                         M = 1, 2 or 4 matrices of 8 x 8 16-bit elements from shared
                         memory, each row 16 contiguous bytes (16-byte aligned).
                         Lanes 8i .. 8i + 7 give the addresses of rows 0 .. 7 of
                         matrix i (x1 reads lanes 0-7's, x2 0-15's); register i of
                         lane l receives elements (l / 4, 2 (l % 4)) and
                         (l / 4, 2 (l % 4) + 1) of matrix i, the first in the low
                         half. TRANS delivers the transpose: elements
                         (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).

The fragments of m16n8k8 with TF32 inputs (PTX ISA, "Matrix Fragments for
mma.m16n8k8"), g = lane / 4, t = lane % 4:

    A  a0 (g, t)    a1 (g + 8, t)    a2 (g, t + 4)    a3 (g + 8, t + 4)
    B  b0 (k = t, n = g)    b1 (k = t + 4, n = g)
    C  c0 (g, 2t)   c1 (g, 2t + 1)   c2 (g + 8, 2t)   c3 (g + 8, 2t + 1)    (D likewise)

The fragments of m16n8k16 with bf16 inputs (PTX ISA, "Matrix Fragments for
mma.m16n8k16 with floating point type"): each 32-bit register holds two bf16
elements a_i, a_i+1 of consecutive columns of A (consecutive k of B), the first in
the low half:

    A  a0 (g, 2t..2t+1)       a1 (g + 8, 2t..2t+1)
       a2 (g, 2t+8..2t+9)     a3 (g + 8, 2t+8..2t+9)
    B  b0 (k = 2t..2t+1, n = g)    b1 (k = 2t+8..2t+9, n = g)
    C  as for m16n8k8: c0 (g, 2t)  c1 (g, 2t + 1)  c2 (g + 8, 2t)  c3 (g + 8, 2t + 1)

So the accumulators of two adjacent n-blocks of an m16n8k16 product, c[n] and
c[n + 1] (columns 8n .. 8n + 15 of the same 16 rows), are in the lane that holds
them exactly the A fragment of those 16 columns: a0 = (c[n][0], c[n][1]), a1 =
(c[n][2], c[n][3]), a2 = (c[n + 1][0], c[n + 1][1]), a3 = (c[n + 1][2], c[n + 1][3]),
each pair converted to one bf16x2. A product's result feeds the next product
from registers.

ldmatrix's matrices are the fragments of m16n8k16 bf16 (register i of an x4 is
a_i of an A fragment, or b0, b1 of one n-block of B, then b0, b1 of the next), as
test_gpu_kernels checks against a plain product: an A fragment (16 x 16, row-major
in shared memory) is one x4 with lane l addressing row l % 16, column 8 (l / 16);
two B fragments (two n-blocks of 8) stored as (n, k) rows [n][k] (keys of Q K^T)
are one x4 with lane l addressing n-row 8 (l / 16) + l % 8, k column 8 (l / 8 % 2);
stored as (k, n) rows [k][n] (values of P V) the same x4 with .trans, lane l
addressing k-row 8 (l / 8 % 2) + l % 8, n column 8 (l / 16).
*/
#ifndef LLMC_MMA_CUH
#define LLMC_MMA_CUH

#include <stdint.h>
#include <cuda_bf16.h>

__device__ static __forceinline__ uint32_t tf32_from_float(float x) {
#ifdef CUDA_EMU
    return emu_tf32_from_float(x);
#else
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#endif
}

// d = a b + c for one warp; every lane of the warp must call it together
__device__ static __forceinline__ void mma_m16n8k8_tf32(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                        const float c[4]) {
#ifdef CUDA_EMU
    emu_mma_m16n8k8_tf32(d, a, b, c);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
#endif
}

__device__ static __forceinline__ uint32_t bf16x2_from_floats(float lo, float hi) {
#ifdef CUDA_EMU
    return (uint32_t)__float2bfloat16_rn(lo).__x | (uint32_t)__float2bfloat16_rn(hi).__x << 16;
#else
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); // d = {first source high, second low}
    return r;
#endif
}

// d = a b + c for one warp; every lane of the warp must call it together
__device__ static __forceinline__ void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                         const float c[4]) {
#ifdef CUDA_EMU
    emu_mma_m16n8k16_bf16(d, a, b, c);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
#endif
}

// ldmatrix: register i of this lane gets its elements of matrix i (the header says
// which); row: the shared-memory address of the row this lane gives (16 bytes,
// 16-byte aligned; lanes past 8 MATRICES give none that is read). Every lane of the
// warp must call it together.
template <int MATRICES, bool TRANS>
__device__ static __forceinline__ void ldmatrix(uint32_t r[MATRICES], const void *row) {
    static_assert(MATRICES == 1 || MATRICES == 2 || MATRICES == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef CUDA_EMU
    emu_ldmatrix(r, MATRICES, TRANS, row);
#else
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (MATRICES == 1 && !TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a) : "memory");
    } else if constexpr (MATRICES == 1) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a) : "memory");
    } else if constexpr (MATRICES == 2 && !TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a)
                     : "memory");
    } else if constexpr (MATRICES == 2) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1])
                     : "r"(a) : "memory");
    } else if constexpr (!TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    }
#endif
}

#endif // LLMC_MMA_CUH
