/*
Warp products of tiles in shared memory, and what a tiled kernel does around them:
the building blocks of the block attention's kernels (cp/attention_block.cuh,
cp/attention_block_flash.cuh), written for any tiles (nothing here knows what they
hold). Each lane holds its elements of C in the accumulator layout of the m16n8k8
and m16n8k16 mma (llmc/mma.cuh; the same for both). A product is in one of three
precisions (MmaPrecision):
  MMA_TF32  the tensor cores: mma.sync m16n8k8 with TF32 inputs (each operand
            rounded as it is loaded into its fragment), fp32 accumulation;
  MMA_FP32  the same tiling and fragments, each lane summing its own elements'
            products with fp32 FMAs in k order: exact fp32, no tensor cores;
  MMA_BF16  the tensor cores: mma.sync m16n8k16 with bf16 inputs, fp32
            accumulation.

fp32 tiles (the FP32 build's kernels): warp_mma, one warp's C (16 x 8 NT) += A
(16 x K) B (K x 8 NT) in MMA_TF32 or MMA_FP32, A row-major in shared memory, B in
either of two layouts (B_NK, B_KN) so that neither operand needs a transpose; around
it fragments_zero, fragments_store (a warp's 16 rows of C into shared memory, e.g.
as the A of the next product), tile_load (rows of a tensor in the storage
precision, llmc/precision.cuh, into an fp32 tile), row_max4 and row_sum4 (across
the 4 lanes that hold one row of C).

bf16 tiles (the BF16 build's kernels), MMA_BF16 through ldmatrix: fragment_a_bf16
and fragment_a_bf16_trans (an A fragment into registers, once for a loop),
warp_mma_bf16 (C += A B, A in registers, B from shared memory in either layout;
warp_mma_bf16_rows for a warp of several 16-row tiles sharing each B fragment),
fragment_a_from_accumulators (a product's C as the next product's A).
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

// C (16 x 8 NT) += A (16 x K) B (K x 8 NT) for one warp; A row-major in shared
// memory (lda), B as BL says. c[n][i] is row g + 8 (i / 2), column 8 n + 2 t + i % 2
// (g = lane / 4, t = lane % 4), the mma's accumulator layout, in both precisions.
template <MmaPrecision P, int NT, int K, int BL>
__device__ static __forceinline__ void warp_mma(float c[NT][4], const float *a, int lda, const float *b, int ldb) {
    static_assert(P != MMA_BF16, "bf16 products read bf16 tiles: warp_mma_bf16");
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

// the same for the M 16-row tiles of a warp (warp_mma_bf16_rows' accumulators)
template <int M, int NT> __device__ static __forceinline__ void fragments_zero_rows(float c[M][NT][4]) {
    #pragma unroll
    for (int m = 0; m < M; m++) { fragments_zero<NT>(c[m]); }
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

// ----------------------------------------------------------------------------
// bf16 tiles in shared memory, fed to m16n8k16 through ldmatrix (llmc/mma.cuh's
// header gives the lane addressing of each form). Tiles are row-major with a row
// stride `ld` (elements) that keeps rows 16-byte aligned; k0, n0, row0 and m0 are
// multiples of 16 (of 8 for row0).

// a (16 x 16) A fragment: rows row0 .. row0 + 15, columns k0 .. k0 + 15 of the tile
__device__ static __forceinline__ void fragment_a_bf16(uint32_t a[4], const __nv_bfloat16 *tile, int ld, int row0, int k0) {
    int lane = threadIdx.x % WARP_SIZE;
    ldmatrix<4, false>(a, tile + (row0 + lane % 16) * ld + k0 + 8 * (lane / 16));
}

// the A fragments of a warp's M 16-row tiles from row0, every 16 columns of K:
// f[k][m] holds rows row0 + 16 m .. + 15, columns 16 k .. 16 k + 15 (the A operands
// of warp_mma_bf16_rows over a k dimension of 16 KS)
template <int KS, int M>
__device__ static __forceinline__ void fragments_a_bf16_rows(uint32_t f[KS][M][4], const __nv_bfloat16 *tile, int ld,
                                                             int row0) {
    #pragma unroll
    for (int k = 0; k < KS; k++) {
        #pragma unroll
        for (int m = 0; m < M; m++) { fragment_a_bf16(f[k][m], tile, ld, row0 + 16 * m, 16 * k); }
    }
}

// the A fragment of the transpose of the tile: A (m, k) = tile[k][m], m from m0, k from k0
__device__ static __forceinline__ void fragment_a_bf16_trans(uint32_t a[4], const __nv_bfloat16 *tile, int ld, int m0,
                                                             int k0) {
    int lane = threadIdx.x % WARP_SIZE;
    ldmatrix<4, true>(a, tile + (k0 + 8 * (lane / 16) + lane % 8) * ld + m0 + 8 * (lane / 8 % 2));
}

// C_m (16 x 8 NT) += A_m (16 x 16, a fragment in registers) B (16 x 8 NT) for the M
// row tiles m of a warp's 16 M rows, B the rows k0 .. k0 + 15 of the tile's k
// dimension in the layout BL (B_NK: element (k, n) at tile[n][k]; B_KN: at
// tile[k][n]), two n-blocks per ldmatrix. Each B fragment is read from shared memory
// once for all M row tiles: a warp of 32 rows reads half the bytes per mma that a
// warp of 16 does. NT is even.
template <int M, int NT, int BL>
__device__ static __forceinline__ void warp_mma_bf16_rows(float c[M][NT][4], const uint32_t a[M][4],
                                                          const __nv_bfloat16 *tile, int ld, int k0) {
    static_assert(NT % 2 == 0, "two n-blocks per ldmatrix");
    int lane = threadIdx.x % WARP_SIZE;
    #pragma unroll
    for (int n = 0; n < NT; n += 2) {
        uint32_t b[4]; // b0, b1 of n-block n, then of n-block n + 1
        if constexpr (BL == B_NK) {
            ldmatrix<4, false>(b, tile + (8 * n + 8 * (lane / 16) + lane % 8) * ld + k0 + 8 * (lane / 8 % 2));
        } else {
            ldmatrix<4, true>(b, tile + (k0 + 8 * (lane / 8 % 2) + lane % 8) * ld + 8 * n + 8 * (lane / 16));
        }
        #pragma unroll
        for (int m = 0; m < M; m++) {
            mma_m16n8k16_bf16(c[m][n], a[m], b, c[m][n]);
            mma_m16n8k16_bf16(c[m][n + 1], a[m], b + 2, c[m][n + 1]);
        }
    }
}

// the same for one row tile: C (16 x 8 NT) += A (16 x 16) B (16 x 8 NT)
template <int NT, int BL>
__device__ static __forceinline__ void warp_mma_bf16(float c[NT][4], const uint32_t a[4], const __nv_bfloat16 *tile, int ld,
                                                     int k0) {
    warp_mma_bf16_rows<1, NT, BL>((float(*)[NT][4])c, (const uint32_t(*)[4])a, tile, ld, k0);
}

// The A fragment of columns 16 j .. 16 j + 15 of a warp's C (16 x 8 NT), from the
// accumulators of its n-blocks 2 j and 2 j + 1 (c0, c1), rounded to bf16: a
// product's result feeds the next product from registers (llmc/mma.cuh's header).
__device__ static __forceinline__ void fragment_a_from_accumulators(uint32_t a[4], const float c0[4],
                                                                   const float c1[4]) {
    a[0] = bf16x2_from_floats(c0[0], c0[1]);
    a[1] = bf16x2_from_floats(c0[2], c0[3]);
    a[2] = bf16x2_from_floats(c1[0], c1[1]);
    a[3] = bf16x2_from_floats(c1[2], c1[3]);
}

#endif // LLMC_MMA_TILES_CUH
