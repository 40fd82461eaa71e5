/*
Attention of this rank's queries to one K/V block on the GPU, flash-style on the
tensor cores: the computation of cp/attention_block.h (same (o, lse) per visiting
block, same log-sum-exp merge, same backward formulas), tiled. Every GPU algorithm
repeats it once per block it meets: cp/ring_attention.cuh passes the blocks around
a ring (cp/ulysses_attention.cuh runs that ring over its groups' rows),
cp/allgather_attention.cuh gathers them all at once. This file holds the plain
kernels (the FP32 build's, and the readable reference of the BF16 build's
FlashAttention-2 kernels, cp/attention_block_flash.cuh, which compute the same
thing), the launches of both, and the steps every algorithm takes around them;
what they work on is defined beside it:
  cp/attention_queries.cuh  what stays on this rank (AttentionQueriesCuda), the
                            run's precision and tile rows
  cp/kv_block.cuh           the visiting K/V block, where its dK | dV go
  cp/block_mask.cuh    the batch's coordinates and tile visibility (the GPU
                            twin of cp/block_mask.h)
  cp/attention_row_steps.cuh  the kernels' per-row steps: online softmax, the
                            (o, lse) merge, the dK, dV store
  llmc/mma_tiles.cuh        the warp products, their fragments, tile loads

Data, all token-major (no head <-> token permutes): token t of batch row b is row
b * T + t of its tensor and head h its columns [h HS, (h + 1) HS). q, k, v and dO
are in the build's storage precision (floatX, llmc/precision.cuh): q is read with
stride 3C from the qkv activation, the visiting block's k and v with their own
stride (3C for this rank's own block, read from qkv; C in a travelling buffer).
What is summed over blocks stays fp32: the output is merged in place into fp32
rows (B, T, C), dQ summed into fp32 rows, and each block's dK, dV written in fp32
(or straight into the floatX dqkv where the block is the only one, cp 1). In the
FP32 build those fp32 rows are out and dqkv themselves; in the BF16 build an fp32
(B, T, C) buffer (AttentionQueriesCuda.acc) holds them until the pass writes the
floatX result once (attention_forward_end_cuda, attention_backward_end_cuda).
The plain kernels convert the tiles to fp32 as they load them into shared memory.

Tiles: R rows of queries or keys (R = 64; 32 at HS 128, for registers and shared
memory), one warp per 16 rows. Each (query tile, key tile) pair is computed as the
batch's visibility table says (cp/block_mask.cuh, built once per batch, so the
layers' passes only read it): BLOCK_SKIP computes nothing, BLOCK_FULL evaluates
no mask, BLOCK_MASKED evaluates pair_visible per element (and the bounds of a
partial tile at the end of a row).

The plain kernels (grid: tiles x NH x B, HS and the precision are template
parameters; the BF16 build's are described in their file):

  forward      per query tile: Q in shared memory; for each visible key tile,
               K and V loaded coalesced into shared memory, S = Q K^T, the
               one-pass online softmax of S scale (running max m and sum l per
               row, in base 2), O_blk += P V. Then lse_blk = (the row's max of
               S scale) + log l, o_blk = O_blk / l, merged into the running
               (out, lse) in the CPU's stable form.
  backward dQ  per query tile: for each visible key tile, P = exp(S - lse) from
               the saved lse, dP = dO V^T, dS = P (dP - D) scale, dQ += dS K.
  backward dKV per key tile of the block: for each visible query tile,
               P^T = exp(K Q^T scale - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D)
               scale, dV += P^T dO, dK += dS^T Q. Every key row is written (0
               where no query sees it), so the output needs no zeroing.
  D            (row_dot_kernel, once per backward pass, before the blocks)
               D = rowsum(dO * O) per query row and head, one thread per row.

Products: every matrix product is one warp's C (16 x 8n) += A (16 x k) B (k x 8n)
from shared memory (warp_mma, llmc/mma_tiles.cuh), in the run's precision
(AttentionQueriesCuda.precision, the kernels' template parameter P):
  MMA_TF32  (FP32 build, -f 1) the tensor cores: mma.sync m16n8k8 with TF32
            inputs, fp32 accumulation (llmc/mma.cuh);
  MMA_FP32  (FP32 build, -f 0) the same tiling and fragments, each lane summing
            its own elements' products with fp32 FMAs in k order: exact fp32,
            the mode validated against the CPU twin;
  MMA_BF16  (BF16 build) the tensor cores: mma.sync m16n8k16 with bf16 inputs,
            fp32 accumulation, in the FlashAttention-2 kernels. Q, K, V and dO
            are bf16 already (exact in the fragments); P and dS, computed in
            fp32, are rounded to bf16 as the A operand of P V, dS K, P^T dO and
            dS^T Q, as flash-attention does.
Softmax, the running max and sum, lse, D = rowsum(dO * O) and the (o, lse) merge
are fp32 in every mode.
Each output element is computed by one lane in a fixed order: no atomics, the
same bits every run.

One file over 500 lines because the three plain kernels share their tile walk
(PlainTileBlock) and their launches share one dispatch over head sizes and
product modes: split, each part would need the other to be read.
*/
#ifndef CP_ATTENTION_BLOCK_CUH
#define CP_ATTENTION_BLOCK_CUH

#include "attention_block_flash.cuh"
#include "attention_queries.cuh"
#include "attention_row_steps.cuh"
#include "kv_block.cuh"
#include "block_mask.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/mma_tiles.cuh"

// the plain kernels' tiles (MMA_TF32 or MMA_FP32)
template <MmaPrecision P, int HS> struct AttnTile {
    static_assert(P != MMA_BF16, "the BF16 build's kernels are cp/attention_block_flash.cuh's");
    static constexpr int ROWS = attention_tile_rows(HS); // rows of a query or key tile
    static constexpr int WARPS = ROWS / 16;              // one warp per 16 rows
    static constexpr int THREADS = WARPS * WARP_SIZE;
    // Row strides in shared memory (floats), padded so that a warp's fragment loads
    // hit distinct banks: lane (g, t) reads one float per element, at g ld + t
    // (wants ld = 4 mod 32) or at t ld + g (wants ld = 8).
    static constexpr int LD_NK = HS + 4; // read as A, or as B with (k, n) at [n][k]
    static constexpr int LD_KN = HS + 8; // read as B with (k, n) at [k][n]
    static constexpr int LD_P = ROWS + 4; // a warp's 16 rows of probabilities
};

// What a plain kernel's thread works on: its block's own tile of (b, h) (a query
// tile; the dK dV kernel's: a key tile), where its lane's accumulator elements lie
// in the tiles (the mma's layout, llmc/mma.cuh: lane (g, t) holds rows g and g + 8
// of its warp's 16, columns 2 t and 2 t + 1 of each 8-column block), the loads of
// (b, h)'s tiles and coordinates into shared memory (fp32, zeros past T), and the
// two products both backward kernels start a tile pair with.
template <MmaPrecision P, int HS> struct PlainTileBlock {
    using Tl = AttnTile<P, HS>;
    static constexpr int R = Tl::ROWS, NT = R / 8;
    const AttnBlockArgs &p;
    int tile, h, b; // blockIdx
    int warp, g, t; // the lane is (g, t) = (lane / 4, lane % 4) of warp `warp`
    int T;          // tokens of a batch row
    int tile_row0;  // the tile's first token: tile R
    size_t brow;    // the batch row's first token row: b T
    __device__ PlainTileBlock(const AttnBlockArgs &args) : p(args) {
        tile = blockIdx.x; h = blockIdx.y; b = blockIdx.z;
        warp = threadIdx.x / WARP_SIZE;
        int lane = threadIdx.x % WARP_SIZE;
        g = lane >> 2; t = lane & 3;
        T = p.T;
        tile_row0 = tile * R;
        brow = (size_t)b * T;
    }
    // the tile row of the lane's row r (r 0: g, r 1: g + 8 of its warp's 16)
    __device__ int lane_row(int r) const { return warp * 16 + g + 8 * r; }
    // the tile column of element i (0..3) of the lane's 8-column block n
    __device__ int lane_col(int n, int i) const { return 8 * n + 2 * t + (i & 1); }
    // f(n, i, row, col) for element i (0..3) of each of the lane's 8-column blocks n of a
    // (16, R) fragment: row its tile row, col its tile column
    template <typename F> __device__ void for_each_element(F f) const {
        #pragma unroll
        for (int n = 0; n < NT; n++) {
            #pragma unroll
            for (int i = 0; i < 4; i++) { f(n, i, lane_row(i >> 1), lane_col(n, i)); }
        }
    }
    // how query tile qt sees key tile kt: BLOCK_SKIP, _FULL or _MASKED (uniform over the block)
    __device__ int sees(int qt, int kt) const {
        return p.vis[((size_t)b * p.tiles + qt) * p.tiles + kt];
    }
    // shared (R, ld) <- head h of tokens [row0, row0 + R): queries, output gradients, keys, values
    __device__ void queries_load(float *dst, int ld, int row0) const {
        tile_load<HS, R, Tl::THREADS>(dst, ld, p.q + brow * p.q_stride + h * HS, p.q_stride, row0, T);
    }
    __device__ void dout_load(float *dst, int ld, int row0) const {
        tile_load<HS, R, Tl::THREADS>(dst, ld, p.dout + brow * p.C + h * HS, p.C, row0, T);
    }
    __device__ void keys_load(float *dst, int ld, int row0) const {
        tile_load<HS, R, Tl::THREADS>(dst, ld, p.k + brow * p.kv_stride + h * HS, p.kv_stride, row0, T);
    }
    __device__ void values_load(float *dst, int ld, int row0) const {
        tile_load<HS, R, Tl::THREADS>(dst, ld, p.v + brow * p.kv_stride + h * HS, p.kv_stride, row0, T);
    }
    // shared (2, R) <- the indices, then the documents, of queries or keys [row0, row0 + R)
    __device__ void query_coords_load(int *dst, int row0) const {
        coords_load<R, Tl::THREADS>(dst, p.q_index + brow, p.q_doc + brow, row0, T);
    }
    __device__ void key_coords_load(int *dst, int row0) const {
        coords_load<R, Tl::THREADS>(dst, p.k_index + brow, p.k_doc + brow, row0, T);
    }
    // what the backward kernels load of tokens [row0, row0 + R): the queries and their
    // output gradients, or the keys and their values, (R, ld) each, with the tokens'
    // coordinates (2, R)
    __device__ void query_side_load(float *qs, float *dos, int ld, int *coords, int row0) const {
        queries_load(qs, ld, row0);
        dout_load(dos, ld, row0);
        query_coords_load(coords, row0);
    }
    __device__ void key_side_load(float *ks, float *vs, int ld, int *coords, int row0) const {
        keys_load(ks, ld, row0);
        values_load(vs, ld, row0);
        key_coords_load(coords, row0);
    }
    // s = x y^T and dp = u w^T for the warp's 16 rows of x and u: the dQ kernel's
    // S = Q K^T and dP = dO V^T, the dK dV kernel's S^T = K Q^T and dP^T = V dO^T
    // x, u: (R, LD_NK)   y, w: (R, LD_KN)   s, dp: (16, R) in fragments
    __device__ void backward_products(float s[NT][4], float dp[NT][4], const float *x, const float *y, const float *u,
                                      const float *w) const {
        fragments_zero<NT>(s);
        fragments_zero<NT>(dp);
        warp_mma<P, NT, HS, B_NK>(s, x + warp * 16 * Tl::LD_NK, Tl::LD_NK, y, Tl::LD_KN);
        warp_mma<P, NT, HS, B_NK>(dp, u + warp * 16 * Tl::LD_NK, Tl::LD_NK, w, Tl::LD_KN);
    }
};

// ----------------------------------------------------------------------------
// the kernels

template <MmaPrecision P, int HS> static constexpr size_t forward_shared_floats() {
    using Tl = AttnTile<P, HS>;
    // q, k (LD_NK), v (LD_KN), a warp's P per warp, 4 R coordinates
    return (size_t)Tl::ROWS * (2 * Tl::LD_NK + Tl::LD_KN) + Tl::WARPS * 16 * Tl::LD_P + 4 * Tl::ROWS;
}

// One query tile of (b, h) against the visiting block, merged into (o, lse).
template <MmaPrecision P, int HS>
__global__ static void __launch_bounds__(AttnTile<P, HS>::THREADS) attend_forward_kernel(AttnBlockArgs p) {
    using Tl = AttnTile<P, HS>;
    constexpr int R = Tl::ROWS, NT = R / 8, DT = HS / 8;
    extern __shared__ float shared[];
    float *qs = shared;                    // (R, LD_NK)
    float *ks = qs + R * Tl::LD_NK;        // (R, LD_NK)
    float *vs = ks + R * Tl::LD_NK;        // (R, LD_KN)
    float *ps = vs + R * Tl::LD_KN;        // (WARPS, 16, LD_P)
    int *coords = (int *)(ps + Tl::WARPS * 16 * Tl::LD_P); // (4, R)
    PlainTileBlock<P, HS> tb(p);
    int qt = tb.tile, T = tb.T, q0 = tb.tile_row0;
    tb.queries_load(qs, Tl::LD_NK, q0);
    tb.query_coords_load(coords, q0);
    float acc[DT][4];
    fragments_zero<DT>(acc);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // rows g and g + 8 of the warp
    float *pw = ps + tb.warp * 16 * Tl::LD_P;
    for (int kt = 0; kt < p.tiles; kt++) {
        int v = tb.sees(qt, kt);
        if (v == BLOCK_SKIP) { continue; } // uniform over the block
        int k0 = kt * R;
        __syncthreads(); // the last tile's K, V and coordinates are read
        tb.keys_load(ks, Tl::LD_NK, k0);
        tb.values_load(vs, Tl::LD_KN, k0);
        tb.key_coords_load(coords + 2 * R, k0);
        __syncthreads();
        float s[NT][4];
        fragments_zero<NT>(s);
        warp_mma<P, NT, HS, B_NK>(s, qs + tb.warp * 16 * Tl::LD_NK, Tl::LD_NK, ks, Tl::LD_NK);
        tb.for_each_element([&](int n, int i, int qr, int kc) {
            if (v == BLOCK_MASKED && !tile_pair_sees<R, R>(coords, coords + 2 * R, q0, qr, k0, kc, T)) {
                s[n][i] = -INFINITY;
            }
        });
        online_softmax_step<NT, DT>(s, p.scale_log2, m, l, acc);
        fragments_store<NT>(pw, Tl::LD_P, s);
        __syncwarp();
        // the next tile's first __syncthreads orders these reads of P before its writes
        warp_mma<P, DT, R, B_KN>(acc, pw, Tl::LD_P, vs, Tl::LD_KN);
    }
    output_merge<HS>(p, acc, m, l, tb.b, tb.h, q0 + tb.warp * 16);
}

template <MmaPrecision P, int HS> static constexpr size_t backward_shared_floats() {
    using Tl = AttnTile<P, HS>;
    // two tiles read as A or B_NK, two read as B_KN as well (LD_KN), a warp's P,
    // 4 R coordinates, lse and D of R rows
    return (size_t)Tl::ROWS * (2 * Tl::LD_NK + 2 * Tl::LD_KN) + Tl::WARPS * 16 * Tl::LD_P + 6 * Tl::ROWS;
}

// dQ of one query tile of (b, h) from the visiting block.
template <MmaPrecision P, int HS>
__global__ static void __launch_bounds__(AttnTile<P, HS>::THREADS) attend_backward_dq_kernel(AttnBlockArgs p) {
    using Tl = AttnTile<P, HS>;
    constexpr int R = Tl::ROWS, NT = R / 8, DT = HS / 8;
    extern __shared__ float shared[];
    float *qs = shared;                    // (R, LD_NK) queries
    float *dos = qs + R * Tl::LD_NK;       // (R, LD_NK) their output gradients
    float *vs = dos + R * Tl::LD_NK;       // (R, LD_KN) values (read as B_NK)
    float *ks = vs + R * Tl::LD_KN;        // (R, LD_KN) keys (read as B_NK and B_KN)
    float *ps = ks + R * Tl::LD_KN;        // (WARPS, 16, LD_P) dS
    int *coords = (int *)(ps + Tl::WARPS * 16 * Tl::LD_P); // (4, R)
    PlainTileBlock<P, HS> tb(p);
    int qt = tb.tile, T = tb.T, q0 = tb.tile_row0;
    tb.query_side_load(qs, dos, Tl::LD_NK, coords, q0);
    float lse[2], drow[2]; // rows g and g + 8 of the warp
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + tb.lane_row(r);
        size_t row = ((size_t)tb.b * p.NH + tb.h) * T + i;
        lse[r] = i < T ? p.lse[row] : 0.0f;
        drow[r] = i < T ? p.drow[row] : 0.0f;
    }
    float acc[DT][4];
    fragments_zero<DT>(acc);
    float *pw = ps + tb.warp * 16 * Tl::LD_P;
    for (int kt = 0; kt < p.tiles; kt++) {
        int v = tb.sees(qt, kt);
        if (v == BLOCK_SKIP) { continue; }
        int k0 = kt * R;
        __syncthreads();
        tb.key_side_load(ks, vs, Tl::LD_KN, coords + 2 * R, k0);
        __syncthreads();
        float s[NT][4], dp[NT][4];
        tb.backward_products(s, dp, qs, ks, dos, vs);
        tb.for_each_element([&](int n, int i, int qr, int kc) {
            int r = i >> 1;
            float ds = 0.0f;
            if (v == BLOCK_FULL || tile_pair_sees<R, R>(coords, coords + 2 * R, q0, qr, k0, kc, T)) {
                float pr = expf(s[n][i] * p.scale - lse[r]);
                ds = pr * (dp[n][i] - drow[r]) * p.scale;
            }
            s[n][i] = ds;
        });
        fragments_store<NT>(pw, Tl::LD_P, s);
        __syncwarp();
        // the next tile's first __syncthreads orders these reads of dS before its writes
        warp_mma<P, DT, R, B_KN>(acc, pw, Tl::LD_P, ks, Tl::LD_KN);
    }
    dq_rows_store<HS>(p, acc, tb.b, tb.h, q0 + tb.warp * 16);
}

// dK and dV of one key tile of the visiting block, (b, h), from this rank's queries.
template <MmaPrecision P, int HS>
__global__ static void __launch_bounds__(AttnTile<P, HS>::THREADS) attend_backward_dkv_kernel(AttnBlockArgs p) {
    using Tl = AttnTile<P, HS>;
    constexpr int R = Tl::ROWS, NT = R / 8, DT = HS / 8;
    extern __shared__ float shared[];
    float *ks = shared;                    // (R, LD_NK) keys of the tile
    float *vs = ks + R * Tl::LD_NK;        // (R, LD_NK) their values
    float *qs = vs + R * Tl::LD_NK;        // (R, LD_KN) queries (read as B_NK and B_KN)
    float *dos = qs + R * Tl::LD_KN;       // (R, LD_KN) their output gradients (likewise)
    float *ps = dos + R * Tl::LD_KN;       // (WARPS, 16, LD_P) P^T, then dS^T
    int *coords = (int *)(ps + Tl::WARPS * 16 * Tl::LD_P); // (4, R)
    float *lse_s = (float *)(coords + 4 * R); // (R) lse of the query tile
    float *drow_s = lse_s + R;                // (R) D of the query tile
    PlainTileBlock<P, HS> tb(p);
    int kt = tb.tile, T = tb.T, k0 = tb.tile_row0;
    tb.key_side_load(ks, vs, Tl::LD_NK, coords + 2 * R, k0);
    float acc_dk[DT][4], acc_dv[DT][4];
    fragments_zero<DT>(acc_dk);
    fragments_zero<DT>(acc_dv);
    float *pw = ps + tb.warp * 16 * Tl::LD_P;
    const float *lse_bh = p.lse + ((size_t)tb.b * p.NH + tb.h) * T;
    const float *drow_bh = p.drow + ((size_t)tb.b * p.NH + tb.h) * T;
    for (int qt = 0; qt < p.tiles; qt++) {
        int v = tb.sees(qt, kt);
        if (v == BLOCK_SKIP) { continue; }
        int q0 = qt * R;
        __syncthreads();
        tb.query_side_load(qs, dos, Tl::LD_KN, coords, q0);
        for (int r = threadIdx.x; r < R; r += Tl::THREADS) {
            lse_s[r] = q0 + r < T ? lse_bh[q0 + r] : 0.0f;
            drow_s[r] = q0 + r < T ? drow_bh[q0 + r] : 0.0f;
        }
        __syncthreads();
        // transposed scores: rows are this warp's keys, columns the tile's queries
        float st[NT][4], dpt[NT][4];
        tb.backward_products(st, dpt, ks, qs, vs, dos);
        tb.for_each_element([&](int n, int i, int kr, int qc) {
            float pt = 0.0f, dst = 0.0f;
            if (v == BLOCK_FULL || tile_pair_sees<R, R>(coords, coords + 2 * R, q0, qc, k0, kr, T)) {
                pt = expf(st[n][i] * p.scale - lse_s[qc]);
                dst = pt * (dpt[n][i] - drow_s[qc]) * p.scale;
            }
            st[n][i] = pt;
            dpt[n][i] = dst;
        });
        fragments_store<NT>(pw, Tl::LD_P, st);
        __syncwarp();
        warp_mma<P, DT, R, B_KN>(acc_dv, pw, Tl::LD_P, dos, Tl::LD_KN);
        __syncwarp();
        fragments_store<NT>(pw, Tl::LD_P, dpt);
        __syncwarp();
        // the next tile's first __syncthreads orders these reads of dS^T before its writes
        warp_mma<P, DT, R, B_KN>(acc_dk, pw, Tl::LD_P, qs, Tl::LD_KN);
    }
    dkv_rows_store<HS>(p, acc_dk, acc_dv, tb.b, tb.h, k0 + tb.warp * 16);
}

// drow[(b, h, t)] = dout . o over head h of token t in fp32, one thread per row, in the
// CPU's order (o as stored: in the BF16 build the bf16 output the next layer read)
// drow: (B, NH, T)   dout, o: (B, T, C)
__global__ static void row_dot_kernel(float *drow, const floatX *dout, const floatX *o, int B, int T, int C, int NH) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T) { return; }
    int t = (int)(idx % T), h = (int)((idx / T) % NH), HS = C / NH;
    size_t b = idx / ((size_t)T * NH);
    const floatX *x = dout + (b * T + t) * C + h * HS, *y = o + (b * T + t) * C + h * HS;
    float sum = 0.0f;
    for (int d = 0; d < HS; d++) { sum += to_float(x[d]) * to_float(y[d]); }
    drow[idx] = sum;
}

__global__ static void fill_kernel(float *x, float value, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] = value; }
}

// dst[r][c] = src[r][c] in the storage precision, rows x cols
// dst: (rows, dst_stride) floatX   src: (rows, src_stride) fp32
__global__ static void columns_to_floatx_kernel(floatX *dst, int dst_stride, const float *src, int src_stride,
                                                size_t rows, int cols) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) { return; }
    size_t r = idx / cols, c = idx % cols;
    dst[r * dst_stride + c] = to_floatX(src[r * src_stride + c]);
}

// ----------------------------------------------------------------------------
// launches: one per visiting block and pass

// Calls f with AttnKernel<precision, HS> for the run's precision and head size.
template <MmaPrecision P_, int HS_> struct AttnKernel {
    static constexpr MmaPrecision P = P_;
    static constexpr int HS = HS_;
};
template <MmaPrecision P, typename F> static void attention_dispatch_hs(int HS, F f) {
    switch (HS) {
    case 32: f(AttnKernel<P, 32>()); break;
    case 64: f(AttnKernel<P, 64>()); break;
    case 128: f(AttnKernel<P, 128>()); break;
    default: fatal("head size %d: the GPU attention is built for head sizes 32, 64 and 128", HS);
    }
}
// the kernels of the build's precisions only: BF16, or TF32 and exact fp32
template <typename F> static void attention_dispatch(MmaPrecision precision, int HS, F f) {
#ifdef ENABLE_BF16
    if (precision != MMA_BF16) { fatal("attention: precision %d in the BF16 build", (int)precision); }
    attention_dispatch_hs<MMA_BF16>(HS, f);
#else
    if (precision == MMA_TF32) { attention_dispatch_hs<MMA_TF32>(HS, f); }
    else if (precision == MMA_FP32) { attention_dispatch_hs<MMA_FP32>(HS, f); }
    else { fatal("attention: bf16 products in the FP32 build"); }
#endif
}

// The flash kernels copy rows 16 bytes at a time (cp.async): every row must start
// 16-byte aligned.
static void flash_rows_check(const void *base, size_t stride, const char *what) {
    if ((uintptr_t)base % 16 != 0 || stride * sizeof(floatX) % 16 != 0) {
        fatal("attention: %s rows are not 16-byte aligned (the BF16 kernels copy 16 bytes at a time)", what);
    }
}

// the arguments every block kernel shares: queries, the block, its coordinates
static AttnBlockArgs attention_block_args(const AttentionQueriesCuda *aq, const floatX *qkv, KVBlockCuda blk) {
    const AttentionLayoutCuda *al = &aq->layout;
    int C = aq->C, HS = aq->C / aq->NH;
    AttnBlockArgs a;
    memset(&a, 0, sizeof(a));
    a.q = qkv; a.q_stride = 3 * C;
    a.k = blk.k; a.v = blk.v; a.kv_stride = blk.stride;
    a.q_index = layout_index(al, al->rank); a.q_doc = layout_document(al, al->rank);
    a.k_index = layout_index(al, blk.rank); a.k_doc = layout_document(al, blk.rank);
    a.vis = layout_visibility(al, blk.rank);
    a.T = aq->T; a.C = C; a.NH = aq->NH; a.tiles = al->tiles;
    a.scale = 1.0f / sqrtf((float)HS);
    a.scale_log2 = a.scale * LOG2E_F;
    if (aq->precision == MMA_BF16) {
        flash_rows_check(a.q, a.q_stride, "the queries'");
        flash_rows_check(a.k, a.kv_stride, "the keys'");
        flash_rows_check(a.v, a.kv_stride, "the values'");
    }
    return a;
}

// Launches one block kernel on the run's stream, grid x threads, with `bytes` of
// dynamic shared memory (allowed past the default 48 KiB first).
template <typename K>
static void attention_launch(K kernel, dim3 grid, int threads, size_t bytes, const AttnBlockArgs &a) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    kernel<<<grid, threads, bytes, cuda_ctx.stream>>>(a);
    cudaCheckLaunch();
}

// The kernels of one block in the run's precision and head size: the forward, or
// (backward 1) the backward's dQ then its dK, dV. A block of the flash forward and dQ
// kernels takes FlashTile::SUBS query tiles (flash_grid), of the others one tile (grid).
static void attention_block_launch(const AttentionQueriesCuda *aq, const AttnBlockArgs &a, int backward) {
    dim3 grid(a.tiles, aq->NH, aq->B);
    attention_dispatch(aq->precision, aq->C / aq->NH, [&](auto kernel) {
        constexpr MmaPrecision P = decltype(kernel)::P;
        constexpr int HS = decltype(kernel)::HS;
        if constexpr (P == MMA_BF16) {
            using Ft = FlashTile<HS>;
            dim3 flash_grid((a.tiles + Ft::SUBS - 1) / Ft::SUBS, aq->NH, aq->B);
            if (!backward) {
                attention_launch(attend_forward_flash_kernel<HS>, flash_grid, Ft::FWD_THREADS,
                                 flash_forward_shared_bytes<HS>(), a);
                return;
            }
            attention_launch(attend_backward_dq_flash_kernel<HS>, flash_grid, Ft::DQ_THREADS,
                             flash_backward_dq_shared_bytes<HS>(), a);
            attention_launch(attend_backward_dkv_flash_kernel<HS>, grid, Ft::DKV_THREADS,
                             flash_backward_dkv_shared_bytes<HS>(), a);
        } else {
            if (!backward) {
                attention_launch(attend_forward_kernel<P, HS>, grid, AttnTile<P, HS>::THREADS,
                                 forward_shared_floats<P, HS>() * sizeof(float), a);
                return;
            }
            size_t bytes = backward_shared_floats<P, HS>() * sizeof(float);
            attention_launch(attend_backward_dq_kernel<P, HS>, grid, AttnTile<P, HS>::THREADS, bytes, a);
            attention_launch(attend_backward_dkv_kernel<P, HS>, grid, AttnTile<P, HS>::THREADS, bytes, a);
        }
    });
}

// Attends the local queries to one K/V block and merges into the fp32 running (o, lse).
// o: (B, T, C) fp32 (attention_forward_begin_cuda's)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void attend_block_forward_cuda(AttentionQueriesCuda *aq, const floatX *qkv, KVBlockCuda blk, float *o,
                                      float *lse) {
    AttnBlockArgs a = attention_block_args(aq, qkv, blk);
    a.o = o;
    a.lse = lse;
    attention_block_launch(aq, a, 0);
}

// One block's share of the backward pass: fp32 dQ written (dq_add 0) or added to,
// with row stride dq_stride (attention_dq_rows_cuda's); the block's dK, dV
// contribution written where dkv says.
// dout: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void attend_block_backward_cuda(AttentionQueriesCuda *aq, const floatX *qkv, KVBlockCuda blk,
                                       const floatX *dout, const float *lse, float *dq, int dq_stride, int dq_add,
                                       DkvRowsCuda dkv) {
    AttnBlockArgs a = attention_block_args(aq, qkv, blk);
    a.lse = (float *)lse;
    a.dout = dout;
    if (aq->precision == MMA_BF16) { flash_rows_check(a.dout, a.C, "the output gradient's"); }
    a.drow = aq->drow;
    a.dq = dq; a.dq_stride = dq_stride; a.dq_add = dq_add;
    a.dkv = dkv;
    attention_block_launch(aq, a, 1);
}

// ----------------------------------------------------------------------------
// the steps every algorithm takes

// fp32 columns into the storage precision (columns_to_floatx_kernel)
static void columns_to_floatx_cuda(floatX *dst, int dst_stride, const float *src, int src_stride, size_t rows,
                                   int cols) {
    size_t n = rows * cols;
    columns_to_floatx_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(dst, dst_stride, src, src_stride, rows,
                                                                            cols);
    cudaCheckLaunch();
}

// The fp32 rows the blocks sum a result into: its own rows (C columns of `dst`) in the
// FP32 build, aq->acc (B, T, C) in the BF16 one.
static float *attention_sum_rows(AttentionQueriesCuda *aq, floatX *dst) {
#ifdef ENABLE_FP32
    return dst;
#else
    (void)dst;
    return aq->acc;
#endif
}

// dst's C columns (rows of dst_stride) <- the summed fp32 result, once, in the storage
// precision (nothing to do in the FP32 build, where the blocks summed into dst)
static void attention_sum_rows_end(AttentionQueriesCuda *aq, floatX *dst, int dst_stride) {
    if (attention_sums_in_place) { return; }
    columns_to_floatx_cuda(dst, dst_stride, aq->acc, aq->C, (size_t)aq->B * aq->T, aq->C);
}

// The empty state, no block seen yet: lse -inf. Returns the fp32 rows (B, T, C) the
// blocks merge the output into (attention_sum_rows).
// out: (B, T, C)   lse: (B, NH, T)
static float *attention_forward_begin_cuda(AttentionQueriesCuda *aq, floatX *out, float *lse) {
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    fill_kernel<<<grid_for(rows, 256), 256, 0, cuda_ctx.stream>>>(lse, -INFINITY, rows);
    cudaCheckLaunch();
    return attention_sum_rows(aq, out);
}

// out <- the merged fp32 output, once, in the storage precision
static void attention_forward_end_cuda(AttentionQueriesCuda *aq, floatX *out) {
    attention_sum_rows_end(aq, out, aq->C);
}

// What backward needs of the forward's result: D = rowsum(dO * O).   dout, out: (B, T, C)
static void attention_backward_begin_cuda(AttentionQueriesCuda *aq, const floatX *dout, const floatX *out) {
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    row_dot_kernel<<<grid_for(rows, 256), 256, 0, cuda_ctx.stream>>>(aq->drow, dout, out, aq->B, aq->T, aq->C,
                                                                     aq->NH);
    cudaCheckLaunch();
}

// The fp32 rows the blocks sum dQ into, and their stride: dqkv's dQ columns in the
// FP32 build, aq->acc (B, T, C) in the BF16 one.   dqkv: (B, T, 3C)
static float *attention_dq_rows_cuda(AttentionQueriesCuda *aq, floatX *dqkv, int *stride) {
    *stride = attention_sums_in_place ? 3 * aq->C : aq->C;
    return attention_sum_rows(aq, dqkv);
}

// dqkv's dQ columns <- the summed fp32 dQ, once
static void attention_backward_end_cuda(AttentionQueriesCuda *aq, floatX *dqkv) {
    attention_sum_rows_end(aq, dqkv, 3 * aq->C);
}

// dqkv's dK | dV columns <- a block's fp32 dK, dV (B, T, C) each
static void dkv_to_dqkv_cuda(floatX *dqkv, const float *dkv, int B, int T, int C) {
    size_t rows = (size_t)B * T;
    columns_to_floatx_cuda(dqkv + C, 3 * C, dkv, C, rows, C);
    columns_to_floatx_cuda(dqkv + 2 * C, 3 * C, dkv + rows * C, C, rows, C);
}

#endif // CP_ATTENTION_BLOCK_CUH
