/*
The tensor-core instructions the GPU kernels use, each in one small device
function, so that the CUDA emulation (dev/cuda/emu) can stand in for it: there the
wrapper calls the emulator's warp-collective version, which assembles the warp's
matrices from the fragment layout the PTX ISA documents and hands each lane its
elements of the result. A kernel that loads its fragments from the wrong rows or
columns then computes wrong numbers under the emulator too. The warp products of
shared-memory tiles built from them are llmc/mma_tiles.cuh's.

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

#endif // LLMC_MMA_CUH
