/*
Warp products of fp32 tiles in shared memory, and what a tiled kernel does around
them: the building blocks of the block attention's kernels (cp/attention_block.cuh),
written for any tiles (nothing here knows what they hold).

warp_mma: one warp's C (16 x 8 NT) += A (16 x K) B (K x 8 NT), A row-major in
shared memory, B in either of two layouts (B_NK, B_KN) so that neither operand
needs a transpose; each lane holds its elements of C in the accumulator layout of
the m16n8k8 and m16n8k16 mma (llmc/mma.cuh; the same for both). The product is
in one of three precisions (MmaPrecision, a template parameter):
  MMA_TF32  the tensor cores: mma.sync m16n8k8 with TF32 inputs (each operand
            rounded as it is loaded into its fragment), fp32 accumulation;
  MMA_FP32  the same tiling and fragments, each lane summing its own elements'
            products with fp32 FMAs in k order: exact fp32, no tensor cores;
  MMA_BF16  the tensor cores: mma.sync m16n8k16 with bf16 inputs (each operand
            rounded to bf16 as it is loaded, exact where it was bf16 already),
            fp32 accumulation.

Around the product: fragments_zero, fragments_store (a warp's 16 rows of C into
shared memory, e.g. as the A of the next product), tile_load (rows of a tensor in
the storage precision, llmc/precision.cuh, into an fp32 tile), row_max4 and
row_sum4 (across the 4 lanes that hold one row of C).
*/
#ifndef LLMC_MMA_TILES_CUH
#define LLMC_MMA_TILES_CUH

#include <stdint.h>
#include "cuda_common.cuh"
#include "mma.cuh"

// how warp_mma multiplies (the header says what each one is)
typedef enum { MMA_FP32 = 0, MMA_TF32 = 1, MMA_BF16 = 2 } MmaPrecision;

// The B operand's layout in shared memory: element (k, n) at b[n ldb + k] (B_NK,
// e.g. the keys of Q K^T) or at b[k ldb + n] (B_KN, e.g. the values of P V).
enum { B_NK = 0, B_KN = 1 };

template <int BL> __device__ static __forceinline__ float b_at(const float *b, int ldb, int k, int n) {
    return BL == B_NK ? b[n * ldb + k] : b[k * ldb + n];
}

// elements (k, n) and (k + 1, n) of B (k even), as one bf16 pair: B_NK has them side
// by side (one 8-byte load), B_KN in two rows
template <int BL> __device__ static __forceinline__ uint32_t b_pair_bf16(const float *b, int ldb, int k, int n) {
    if constexpr (BL == B_NK) {
        float2 x = *(const float2 *)&b[n * ldb + k];
        return bf16x2_from_floats(x.x, x.y);
    } else {
        return bf16x2_from_floats(b[k * ldb + n], b[(k + 1) * ldb + n]);
    }
}

// elements (r, k) and (r, k + 1) of a row-major A (k even), as one bf16 pair
__device__ static __forceinline__ uint32_t a_pair_bf16(const float *a, int lda, int r, int k) {
    float2 x = *(const float2 *)&a[r * lda + k];
    return bf16x2_from_floats(x.x, x.y);
}

// C (16 x 8 NT) += A (16 x K) B (K x 8 NT) for one warp; A row-major in shared
// memory (lda), B as BL says. c[n][i] is row g + 8 (i / 2), column 8 n + 2 t + i % 2
// (g = lane / 4, t = lane % 4), the mma's accumulator layout, in both precisions.
template <MmaPrecision P, int NT, int K, int BL>
__device__ static __forceinline__ void warp_mma(float c[NT][4], const float *a, int lda, const float *b, int ldb) {
    int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, t = lane & 3;
    if constexpr (P == MMA_TF32) {
        #pragma unroll
        for (int k0 = 0; k0 < K; k0 += 8) {
            uint32_t af[4] = {tf32_from_float(a[g * lda + k0 + t]), tf32_from_float(a[(g + 8) * lda + k0 + t]),
                              tf32_from_float(a[g * lda + k0 + t + 4]),
                              tf32_from_float(a[(g + 8) * lda + k0 + t + 4])};
            #pragma unroll
            for (int n = 0; n < NT; n++) {
                uint32_t bf[2] = {tf32_from_float(b_at<BL>(b, ldb, k0 + t, 8 * n + g)),
                                  tf32_from_float(b_at<BL>(b, ldb, k0 + t + 4, 8 * n + g))};
                mma_m16n8k8_tf32(c[n], af, bf, c[n]);
            }
        }
    } else if constexpr (P == MMA_BF16) {
        #pragma unroll
        for (int k0 = 0; k0 < K; k0 += 16) {
            uint32_t af[4] = {a_pair_bf16(a, lda, g, k0 + 2 * t), a_pair_bf16(a, lda, g + 8, k0 + 2 * t),
                              a_pair_bf16(a, lda, g, k0 + 2 * t + 8), a_pair_bf16(a, lda, g + 8, k0 + 2 * t + 8)};
            #pragma unroll
            for (int n = 0; n < NT; n++) {
                uint32_t bf[2] = {b_pair_bf16<BL>(b, ldb, k0 + 2 * t, 8 * n + g),
                                  b_pair_bf16<BL>(b, ldb, k0 + 2 * t + 8, 8 * n + g)};
                mma_m16n8k16_bf16(c[n], af, bf, c[n]);
            }
        }
    } else {
        // each of the lane's elements sums its products in k order; A's two rows and
        // B's two columns of the lane are read once per k
        for (int k = 0; k < K; k++) {
            float a0 = a[g * lda + k], a1 = a[(g + 8) * lda + k];
            #pragma unroll
            for (int n = 0; n < NT; n++) {
                float b0 = b_at<BL>(b, ldb, k, 8 * n + 2 * t), b1 = b_at<BL>(b, ldb, k, 8 * n + 2 * t + 1);
                c[n][0] += a0 * b0;
                c[n][1] += a0 * b1;
                c[n][2] += a1 * b0;
                c[n][3] += a1 * b1;
            }
        }
    }
}

template <int NT> __device__ static __forceinline__ void fragments_zero(float c[NT][4]) {
    #pragma unroll
    for (int n = 0; n < NT; n++) {
        #pragma unroll
        for (int i = 0; i < 4; i++) { c[n][i] = 0.0f; }
    }
}

// A warp's 16 rows of a C fragment into shared memory (row stride ld).
template <int NT> __device__ static __forceinline__ void fragments_store(float *dst, int ld, const float c[NT][4]) {
    int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int n = 0; n < NT; n++) {
        #pragma unroll
        for (int i = 0; i < 4; i++) { dst[(g + 8 * (i >> 1)) * ld + 8 * n + 2 * t + (i & 1)] = c[n][i]; }
    }
}

// shared (R, ld) fp32 <- COLS columns of rows [row0, row0 + R) of a row-major floatX
// tensor of T rows (rows of `stride` elements from src, which points at the first
// column wanted, e.g. a head's first column of token-major activations),
// consecutive threads on consecutive elements of a row (coalesced; the activations
// are only element-aligned, so no wider loads); rows at or past T are zeros.
template <int COLS, int R, int THREADS>
__device__ static __forceinline__ void tile_load(float *tile, int ld, const floatX *src, size_t stride, int row0,
                                                 int T) {
    for (int idx = threadIdx.x; idx < R * COLS; idx += THREADS) {
        int r = idx / COLS, c = idx % COLS;
        tile[r * ld + c] = row0 + r < T ? to_float(src[(size_t)(row0 + r) * stride + c]) : 0.0f;
    }
}

// the max (or sum) of the 4 lanes holding one row of a C fragment
__device__ static __forceinline__ float row_max4(float v) {
    v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1));
    return fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 2));
}
__device__ static __forceinline__ float row_sum4(float v) {
    v += __shfl_xor_sync(FULL_MASK, v, 1);
    return v + __shfl_xor_sync(FULL_MASK, v, 2);
}

#endif // LLMC_MMA_TILES_CUH
