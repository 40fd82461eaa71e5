/*
What every block attention kernel does around its matrix products, one warp's 16
rows at a time, in the accumulator layout of the mma (llmc/mma.cuh: lane (g, t) =
(lane / 4, lane % 4) holds rows g and g + 8, columns 8 n + 2 t and 8 n + 2 t + 1 of
each 8-column block n). The plain kernels (cp/attention_block.cuh) and the
FlashAttention-2 ones (cp/attention_block_flash.cuh) share them, so that the two
differ only in how they feed the tensor cores:

  AttnBlockArgs        what one launch reads and writes
  online_softmax_step  a key tile's scores -> probabilities, the running max and
                       sum of each row rescaled (the one-pass online softmax, in
                       base 2: one fma and one exp2 a score)
  output_merge         the block's (o, lse) merged into the running (o, lse) in
                       the CPU's stable form (cp/attention_block.h)
  dq_rows_store        a query tile's dQ rows written or added to, fp32
  dkv_rows_store       a key tile's dK, dV rows written, fp32 or floatX
  exp2_ftz             2^x in one instruction
*/
#ifndef CP_ATTENTION_ROW_STEPS_CUH
#define CP_ATTENTION_ROW_STEPS_CUH

#include "kv_block.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/mma_tiles.cuh"

// What one launch of a block kernel reads and writes: rows (B, T, stride), token t
// of batch row b at row b T + t, head h at columns [h HS, (h + 1) HS).
typedef struct {
    const floatX *q; int q_stride;      // the queries: qkv, stride 3C
    const floatX *k, *v; int kv_stride; // the visiting block's keys and values
    float *o;                           // (B, T, C) the fp32 running output (forward)
    float *lse;                         // (B, NH, T) running (forward) or final (backward) log-sum-exp
    const floatX *dout;                 // (B, T, C) output gradient
    const float *drow;                  // (B, NH, T) D = rowsum(dO * O)
    float *dq; int dq_stride; int dq_add; // fp32 dQ rows: written (dq_add 0) or added to (plain kernels)
    DkvRowsCuda dkv;                    // the block's dK, dV contribution, written
    const int *q_index, *q_doc;         // (B, T) coordinates of the queries
    const int *k_index, *k_doc;         // (B, T) of the block's keys
    const unsigned char *vis;           // (B, tiles, tiles) [query tile][key tile]
    int T, C, NH, tiles;
    float scale;                        // 1 / sqrt(HS)
    float scale_log2;                   // scale log2(e): the softmax's base-2 scale
} AttnBlockArgs;

// The softmax works in base 2: exp(scale x) = exp2(scale log2(e) x), so that a
// probability is one fma and one exp2 of a raw score (AttnBlockArgs.scale_log2).
#define LOG2E_F 1.44269504088896341f
#define LN2_F 0.693147180559945309f

// 2^x as one ex2.approx.ftz: exp2f compiles to ex2.approx too, with extra steps
// that keep results below 2^-126 (denormals) instead of flushing them to 0. The
// softmax's probabilities are at most 1 and summed with the row's largest (1), so
// such a probability adds nothing there, and in P V, dS and dQ it is as good as 0.
__device__ static __forceinline__ float exp2_ftz(float x) {
#ifdef CUDA_EMU
    float r = exp2f(x);
    return r < 1.17549435e-38f ? 0.0f : r; // FLT_MIN, the smallest normal float
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

// s: a key tile's raw scores q.k of the warp's rows (-inf where not visible), NT
// blocks of 8 keys; turned into exp2(s scale_log2 - m_new) with m_new the row's new
// running max of s scale_log2, and the row's running sum l and output
// accumulators rescaled to it. m stays in those base-2 units (output_merge).
template <int NT, int DT>
__device__ static __forceinline__ void online_softmax_step(float s[NT][4], float scale_log2, float m[2], float l[2],
                                                           float acc[DT][4]) {
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
        #pragma unroll
        for (int n = 0; n < NT; n++) { mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1])); }
        float m_new = fmaxf(m[r], row_max4(mx) * scale_log2);
        // a row that has seen no visible key yet keeps m = -inf and p = 0
        float base = m_new == -INFINITY ? 0.0f : m_new;
        float alpha = exp2_ftz(m[r] - base);
        float sum = 0.0f;
        #pragma unroll
        for (int n = 0; n < NT; n++) {
            #pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; e++) {
                s[n][e] = exp2_ftz(fmaf(s[n][e], scale_log2, -base));
                sum += s[n][e];
            }
        }
        l[r] = l[r] * alpha + row_sum4(sum);
        m[r] = m_new;
        #pragma unroll
        for (int d = 0; d < DT; d++) { acc[d][2 * r] *= alpha; acc[d][2 * r + 1] *= alpha; }
    }
}

// Merges the block's result for the warp's 16 query rows from row0 (acc = the
// unnormalised P V, m and l the rows' max (base 2, online_softmax_step) and sum:
// o_blk = acc / l, lse_blk = m ln 2 + log l) into the running (p.o, p.lse) of batch
// row b, head h.
template <int HS>
__device__ static __forceinline__ void output_merge(const AttnBlockArgs &p, const float acc[HS / 8][4],
                                                    const float m[2], const float l[2], int b, int h, int row0) {
    int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, t = lane & 3, T = p.T;
    size_t brow = (size_t)b * T;
    float lse_old[2];
    size_t lse_row[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = row0 + g + 8 * r;
        lse_row[r] = ((size_t)b * p.NH + h) * T + i;
        lse_old[r] = i < T ? p.lse[lse_row[r]] : 0.0f;
    }
    __syncwarp(); // the 4 lanes of a row have read lse before one of them writes it
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = row0 + g + 8 * r;
        if (i >= T || l[r] == 0.0f) { continue; } // past the row, or nothing of this block visible
        float lse_blk = m[r] * LN2_F + logf(l[r]);
        float *orow = p.o + (brow + i) * p.C + h * HS;
        float w_old = 0.0f, w_blk = 1.0f / l[r], lse_new = lse_blk;
        if (lse_old[r] != -INFINITY) {
            lse_new = fmaxf(lse_old[r], lse_blk) + log1pf(expf(-fabsf(lse_old[r] - lse_blk)));
            w_old = expf(lse_old[r] - lse_new);
            w_blk = expf(lse_blk - lse_new) / l[r];
        }
        #pragma unroll
        for (int d = 0; d < HS / 8; d++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float *oe = orow + 8 * d + 2 * t + e;
                float x = acc[d][2 * r + e] * w_blk;
                // the first block a query sees is taken as is
                *oe = lse_old[r] == -INFINITY ? x : *oe * w_old + x;
            }
        }
        if (t == 0) { p.lse[lse_row[r]] = lse_new; }
    }
}

// Writes the warp's 16 query rows from row0 of dQ (batch row b, head h) into the fp32
// rows p.dq, or adds them (p.dq_add: the blocks after the first).
template <int HS>
__device__ static __forceinline__ void dq_rows_store(const AttnBlockArgs &p, const float acc[HS / 8][4], int b, int h,
                                                     int row0) {
    int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = row0 + g + 8 * r;
        if (i >= p.T) { continue; }
        float *dqrow = p.dq + ((size_t)b * p.T + i) * p.dq_stride + h * HS;
        #pragma unroll
        for (int d = 0; d < HS / 8; d++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float *dqe = dqrow + 8 * d + 2 * t + e;
                *dqe = p.dq_add ? *dqe + acc[d][2 * r + e] : acc[d][2 * r + e];
            }
        }
    }
}

// Writes the warp's 16 key rows from row0 of dK and dV (batch row b, head h) where
// p.dkv says: fp32 rows, or floatX straight into dqkv.
template <int HS>
__device__ static __forceinline__ void dkv_rows_store(const AttnBlockArgs &p, const float acc_dk[HS / 8][4],
                                                      const float acc_dv[HS / 8][4], int b, int h, int row0) {
    int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int j = row0 + g + 8 * r;
        if (j >= p.T) { continue; }
        size_t at = ((size_t)b * p.T + j) * p.dkv.stride + h * HS;
        #pragma unroll
        for (int d = 0; d < HS / 8; d++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                size_t c = at + 8 * d + 2 * t + e;
                if (p.dkv.dk_f) { // uniform over the launch
                    p.dkv.dk_f[c] = acc_dk[d][2 * r + e];
                    p.dkv.dv_f[c] = acc_dv[d][2 * r + e];
                } else {
                    p.dkv.dk_x[c] = to_floatX(acc_dk[d][2 * r + e]);
                    p.dkv.dv_x[c] = to_floatX(acc_dv[d][2 * r + e]);
                }
            }
        }
    }
}

#endif // CP_ATTENTION_ROW_STEPS_CUH
