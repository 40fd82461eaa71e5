/*
The BF16 build's block attention kernels, built as FlashAttention-2 is: the same
computation as the plain kernels of cp/attention_block.cuh (the readable
reference, and the FP32 build's kernels) with MMA_BF16 products, so the same
(o, lse) per visiting block, the same merge, the same backward formulas and the
same bf16 rounding of P and dS as the A operand of a product. What differs is how
the tensor cores are fed:

  - tiles stay bf16 in shared memory (rows padded by 16 bytes, so that the 8 rows
    an ldmatrix reads fall in distinct banks) and reach the mma through ldmatrix
    (.trans where the operand is stored transposed: V in P V, dO and Q in the dV
    and dK products, K in dS K);
  - the operand that a loop keeps (the query tile's Q, and dO for dQ; the key
    tile's K for dK, dV, at HS <= 64) is loaded into A fragments once, before the
    loop, and held in registers;
  - S -> P stays in registers: the accumulators of S are the A fragment of P V
    (fragment_a_from_accumulators), likewise dS in dS K, P^T and dS^T in dV, dK;
  - the tiles the loop walks are double-buffered with cp.async (tiles_walk): tile
    i + 1 is copied into one stage while tile i is computed from the other;
  - exp2 is one ex2.approx.ftz (exp2_ftz, cp/attention_row_steps.cuh).

  forward   one block per 128 queries of (b, h) (8 warps, 16 rows each), walking
            the key tiles that any of its rows sees. The visibility table's tiles
            are the key tile's rows (attention_tile_rows: 64, or 32 at HS 128), so
            a query tile spans 2 or 4 of the table's rows: each warp reads the row
            its queries lie in, and skips, computes unmasked or masks on its own.
  dQ        the same tiles and walk (4 warps of 32 rows), with dO and each row's
            lse and D: P = exp(Q K^T scale - lse) and dP = dO V^T recomputed, dS =
            P (dP - D) scale, dQ += dS K held in registers across the key tiles
            and written once.
  dK, dV    one block per key tile of (b, h) (2 warps of 32 keys, K in
            registers), walking the query tiles that see it: S^T = K Q^T, dP^T =
            V dO^T, then dV += P^T dO, dK += dS^T Q.
A backward warp of 32 rows (at HS <= 64; 16 at 128, for registers) is two 16-row
tiles that share every B fragment it reads (warp_mma_bf16_rows): half the
shared-memory bytes per mma of a 16-row warp, the forward's, which bounds these
kernels (dev/bench/kernel_model.py). Its 32 rows' accumulators leave room for the
other operand 16 columns at a time (FlashTile::STEP).
The backward is FlashAttention-2's five products split in two kernels, as the plain
kernels are, recomputing S and dP for dQ (seven products where a fused kernel has
five). What that buys: every output element is summed by one lane in key (or
query) tile order, with no atomics and no partial sums in memory, so the same bits
every run and no memory beyond dQ itself; and both kernels launch one block per
tile (many waves at long T, the costliest blocks first), where a fused kernel must
either add dQ into memory once per key tile (a read-modify-write, or FA2's atomics
in its non-deterministic mode) or keep per-block partial sums (FA2's deterministic
mode). dev/bench/kernel_model.py weighs the two designs.
*/
#ifndef CP_ATTENTION_BLOCK_FLASH_CUH
#define CP_ATTENTION_BLOCK_FLASH_CUH

#include "attention_queries.cuh"
#include "attention_row_steps.cuh"
#include "block_mask.cuh"
#include "../llmc/async_copy.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/mma_tiles.cuh"

// the tiles in shared memory: the BF16 build's floatX (the FP32 build never launches these kernels)
typedef __nv_bfloat16 bf16;

template <int HS> struct FlashTile {
    static constexpr int KEYS = attention_tile_rows(HS);   // a key tile: the visibility table's tile
    static constexpr int QUERIES = 128;                    // a query tile of the forward and dQ kernels
    static constexpr int SUBS = QUERIES / KEYS;            // the table's query tiles in one
    static constexpr int LD = HS + 8;                      // a bf16 tile's row stride: 16 bytes of padding
    // The forward's warps hold 32 query rows (two 16-row tiles that share every K
    // and V fragment read: half the shared-memory bytes per mma of 16 rows) where
    // the registers allow, at HS <= 64; two blocks an SM there
    static constexpr int FWD_TILES = HS <= 64 ? 2 : 1;
    static constexpr int FWD_THREADS = QUERIES / (16 * FWD_TILES) * WARP_SIZE;
    static constexpr int FWD_MIN_BLOCKS = HS <= 64 ? 2 : 1;
    // The backward's warps hold 32 rows (two 16-row tiles that share every B
    // fragment read: half the shared-memory bytes per mma of 16 rows) where the
    // registers allow, at HS <= 64, and take the other operand 16 columns a step
    // (32 would spill)
    static constexpr int BWD_TILES = HS <= 64 ? 2 : 1;     // 16-row tiles a warp
    static constexpr int BWD_ROWS = 16 * BWD_TILES;
    static constexpr int STEP = 16;                        // keys (dQ) or queries (dK, dV) a step
    static constexpr int DQ_THREADS = QUERIES / BWD_ROWS * WARP_SIZE;
    static constexpr int DKV_THREADS = KEYS / BWD_ROWS * WARP_SIZE;
};

template <int HS> static constexpr size_t flash_forward_shared_bytes() {
    using Ft = FlashTile<HS>;
    // Q, two stages of K and V (bf16); the queries' coordinates, two stages of the keys'
    return (size_t)(Ft::QUERIES + 4 * Ft::KEYS) * Ft::LD * sizeof(bf16) +
           (size_t)(2 * Ft::QUERIES + 4 * Ft::KEYS) * sizeof(int);
}

template <int HS> static constexpr size_t flash_backward_dq_shared_bytes() {
    using Ft = FlashTile<HS>;
    // the forward's, and dO
    return flash_forward_shared_bytes<HS>() + (size_t)Ft::QUERIES * Ft::LD * sizeof(bf16);
}

template <int HS> static constexpr size_t flash_backward_dkv_shared_bytes() {
    using Ft = FlashTile<HS>;
    // K, V, two stages of Q and dO (bf16); the keys' coordinates, two stages of the
    // queries' coordinates, lse and D
    return (size_t)6 * Ft::KEYS * Ft::LD * sizeof(bf16) + (size_t)(2 + 8) * Ft::KEYS * sizeof(int);
}

// the first key tile from kt on that one of `subs` rows of the table (row stride
// `tiles`) sees; tiles if none
__device__ static int next_seen_key_tile(const unsigned char *vis_rows, int subs, int tiles, int kt) {
    for (; kt < tiles; kt++) {
        for (int s = 0; s < subs; s++) {
            if (vis_rows[(size_t)s * tiles + kt] != BLOCK_SKIP) { return kt; }
        }
    }
    return tiles;
}

// the first query tile from qt on that sees key tile kt (vis: the batch row's table)
__device__ static int next_seeing_query_tile(const unsigned char *vis, int tiles, int kt, int qt) {
    for (; qt < tiles; qt++) {
        if (vis[(size_t)qt * tiles + kt] != BLOCK_SKIP) { return qt; }
    }
    return tiles;
}

// Walks the tiles tile, next(tile), ... (all of them < tiles) double-buffered with
// cp.async: load(i, s) issues the copies of tile i into stage s, and tile i + 1 is
// copied into one stage while body(i, s) computes tile i from the other. Copies the
// caller issued before land with the first tile's. Every thread of the block calls
// it, with the same tiles.
template <typename Next, typename Load, typename Body>
__device__ static __forceinline__ void tiles_walk(int tile, int tiles, Next next, Load load, Body body) {
    if (tile < tiles) { load(tile, 0); }
    cp_async_commit();
    for (int stage = 0; tile < tiles; stage ^= 1) {
        int after = next(tile);
        __syncthreads(); // every warp is done with the other stage (the tile before this one)
        if (after < tiles) { load(after, stage ^ 1); }
        cp_async_commit();
        cp_async_wait<1>(); // this thread's copies of this tile (and the caller's) have landed,
        __syncthreads();    // and every thread's
        body(tile, stage);
        tile = after;
    }
    cp_async_wait<0>(); // the caller's copies, where no tile was walked
}

// The query-tile kernels' walk: the key tiles that any row of a 128-query tile sees
// (vis_rows: its `subs` rows of the table), with their K, V and coordinates copied
// into stage s of ks, vs and k_coords; body(kt, s) computes one.
template <int HS, int THREADS, typename Body>
__device__ static __forceinline__ void seen_key_tiles_walk(const AttnBlockArgs &p, int b, int h,
                                                           const unsigned char *vis_rows, int subs, bf16 *ks,
                                                           bf16 *vs, int *k_coords, Body body) {
    using Ft = FlashTile<HS>;
    constexpr int KR = Ft::KEYS, LD = Ft::LD;
    int T = p.T;
    size_t brow = (size_t)b * T;
    const floatX *k_src = p.k + brow * p.kv_stride + h * HS, *v_src = p.v + brow * p.kv_stride + h * HS;
    auto next = [&](int kt) { return next_seen_key_tile(vis_rows, subs, p.tiles, kt + 1); };
    auto load = [&](int kt, int s) {
        rows_load_async<HS, KR, LD, THREADS>(ks + s * KR * LD, k_src, p.kv_stride, kt * KR, T);
        rows_load_async<HS, KR, LD, THREADS>(vs + s * KR * LD, v_src, p.kv_stride, kt * KR, T);
        words_load_async<KR, THREADS>(k_coords + s * 2 * KR, p.k_index + brow, kt * KR, T);
        words_load_async<KR, THREADS>(k_coords + s * 2 * KR + KR, p.k_doc + brow, kt * KR, T);
    };
    tiles_walk(next_seen_key_tile(vis_rows, subs, p.tiles, 0), p.tiles, next, load, body);
}

// A query-tile kernel's block: its tile of 128 queries of (b, h), the longest rows
// first (under a causal mask the last query tile sees the most key tiles, and a
// launch's blocks start in blockIdx order), the table's rows of those queries
// (fewer at the end of the row) and the one warp w's ROWS rows lie in (w ROWS / KR).
template <int HS, int ROWS> struct QueryTileBlock {
    int qb, h, b, q0, subs, sub;
    const unsigned char *vis_rows;
    __device__ QueryTileBlock(const AttnBlockArgs &p) {
        using Ft = FlashTile<HS>;
        qb = gridDim.x - 1 - blockIdx.x; h = blockIdx.y; b = blockIdx.z;
        q0 = qb * Ft::QUERIES;
        vis_rows = p.vis + ((size_t)b * p.tiles + qb * Ft::SUBS) * p.tiles;
        subs = min(Ft::SUBS, p.tiles - qb * Ft::SUBS);
        sub = threadIdx.x / WARP_SIZE * ROWS / Ft::KEYS;
    }
    // how the warp's rows see key tile kt: BLOCK_SKIP, _FULL or _MASKED (uniform over the warp)
    __device__ int sees(const AttnBlockArgs &p, int kt) const {
        return sub < subs ? vis_rows[(size_t)sub * p.tiles + kt] : BLOCK_SKIP;
    }
};

// One tile of 128 queries of (b, h) against the visiting block, merged into (o, lse).
// A warp holds 16 FWD_TILES query rows (M 16-row tiles).
template <int HS>
__global__ static void __launch_bounds__(FlashTile<HS>::FWD_THREADS, FlashTile<HS>::FWD_MIN_BLOCKS)
    attend_forward_flash_kernel(AttnBlockArgs p) {
    using Ft = FlashTile<HS>;
    constexpr int QR = Ft::QUERIES, KR = Ft::KEYS, LD = Ft::LD, THREADS = Ft::FWD_THREADS;
    constexpr int M = Ft::FWD_TILES, ROWS = 16 * M, NT = KR / 8, DT = HS / 8, KS = HS / 16;
    extern __shared__ float shared[]; // no static shared memory: offset 0, 16-byte aligned
    bf16 *qs = (bf16 *)shared;                 // (QR, LD) the queries
    bf16 *ks = qs + QR * LD;                   // (2, KR, LD) keys, two stages
    bf16 *vs = ks + 2 * KR * LD;               // (2, KR, LD) values, two stages
    int *q_coords = (int *)(vs + 2 * KR * LD); // (2, QR) the queries' indices, documents
    int *k_coords = q_coords + 2 * QR;         // (2, 2, KR) the keys', two stages
    QueryTileBlock<HS, ROWS> blk(p);
    int warp = threadIdx.x / WARP_SIZE, T = p.T, q0 = blk.q0, row0 = warp * ROWS;
    size_t brow = (size_t)blk.b * T;
    rows_load_async<HS, QR, LD, THREADS>(qs, p.q + brow * p.q_stride + blk.h * HS, p.q_stride, q0, T);
    words_load_async<QR, THREADS>(q_coords, p.q_index + brow, q0, T);
    words_load_async<QR, THREADS>(q_coords + QR, p.q_doc + brow, q0, T);
    uint32_t qf[KS][M][4]; // the warp's query rows, A fragments of Q K^T
    float acc[M][DT][4];   // P V, unnormalised
    float mx[M][2], l[M][2]; // the lane's rows of each tile (g, g + 8): running max (base 2) and sum
    fragments_zero_rows<M, DT>(acc);
    #pragma unroll
    for (int m = 0; m < M; m++) {
        mx[m][0] = mx[m][1] = -INFINITY;
        l[m][0] = l[m][1] = 0.0f;
    }
    bool first = true;
    seen_key_tiles_walk<HS, THREADS>(p, blk.b, blk.h, blk.vis_rows, blk.subs, ks, vs, k_coords, [&](int kt, int stage) {
        if (first) {
            fragments_a_bf16_rows<KS, M>(qf, qs, LD, row0);
            first = false;
        }
        int v = blk.sees(p, kt);
        if (v == BLOCK_SKIP) { return; }
        const bf16 *kst = ks + stage * KR * LD, *vst = vs + stage * KR * LD;
        float s[M][NT][4];
        fragments_zero_rows<M, NT>(s);
        #pragma unroll
        for (int k = 0; k < KS; k++) { warp_mma_bf16_rows<M, NT, B_NK>(s, qf[k], kst, LD, 16 * k); }
        #pragma unroll
        for (int m = 0; m < M; m++) {
            if (v == BLOCK_MASKED) { // (the rows' coordinates are read here, to hold no registers across the loop)
                LaneRows rows = lane_rows_load<QR>(q_coords, row0 + 16 * m, q0, T);
                scores_mask<NT, KR, true>(s[m], rows, k_coords + stage * 2 * KR, kt * KR, T);
            }
            online_softmax_step<NT, DT>(s[m], p.scale_log2, mx[m], l[m], acc[m]);
        }
        #pragma unroll
        for (int j = 0; j < NT / 2; j++) { // P V, 16 keys a step, P from the accumulators of S
            uint32_t pa[M][4];
            #pragma unroll
            for (int m = 0; m < M; m++) { fragment_a_from_accumulators(pa[m], s[m][2 * j], s[m][2 * j + 1]); }
            warp_mma_bf16_rows<M, DT, B_KN>(acc, pa, vst, LD, 16 * j);
        }
    });
    #pragma unroll
    for (int m = 0; m < M; m++) { output_merge<HS>(p, acc[m], mx[m], l[m], blk.b, blk.h, q0 + row0 + 16 * m); }
}

// dQ of one tile of 128 queries of (b, h) from the visiting block: per key tile that
// its rows see, STEP keys at a time, P = exp(Q K^T scale - lse) and dP = dO V^T
// recomputed, dS = P (dP - D) scale, dQ += dS K; written to p.dq (or added,
// p.dq_add). A warp holds BWD_ROWS query rows (M 16-row tiles).
template <int HS>
__global__ static void __launch_bounds__(FlashTile<HS>::DQ_THREADS, 1) attend_backward_dq_flash_kernel(AttnBlockArgs p) {
    using Ft = FlashTile<HS>;
    constexpr int QR = Ft::QUERIES, KR = Ft::KEYS, LD = Ft::LD, THREADS = Ft::DQ_THREADS;
    constexpr int M = Ft::BWD_TILES, ROWS = Ft::BWD_ROWS, NS = Ft::STEP / 8, DT = HS / 8, KS = HS / 16;
    extern __shared__ float shared[]; // no static shared memory: offset 0, 16-byte aligned
    bf16 *qs = (bf16 *)shared;                 // (QR, LD) the queries
    bf16 *dos = qs + QR * LD;                  // (QR, LD) their output gradients
    bf16 *ks = dos + QR * LD;                  // (2, KR, LD) keys, two stages
    bf16 *vs = ks + 2 * KR * LD;               // (2, KR, LD) values, two stages
    int *q_coords = (int *)(vs + 2 * KR * LD); // (2, QR) the queries' indices, documents
    int *k_coords = q_coords + 2 * QR;         // (2, 2, KR) the keys', two stages
    QueryTileBlock<HS, ROWS> blk(p);
    int warp = threadIdx.x / WARP_SIZE, g = threadIdx.x % WARP_SIZE >> 2, T = p.T, q0 = blk.q0;
    int row0 = warp * ROWS; // the warp's first row in the tile
    size_t brow = (size_t)blk.b * T, bh = ((size_t)blk.b * p.NH + blk.h) * T;
    rows_load_async<HS, QR, LD, THREADS>(qs, p.q + brow * p.q_stride + blk.h * HS, p.q_stride, q0, T);
    rows_load_async<HS, QR, LD, THREADS>(dos, p.dout + brow * p.C + blk.h * HS, p.C, q0, T);
    words_load_async<QR, THREADS>(q_coords, p.q_index + brow, q0, T);
    words_load_async<QR, THREADS>(q_coords + QR, p.q_doc + brow, q0, T);
    float lse2[M][2], drow[M][2]; // the lane's rows (g, g + 8 of each tile): lse log2(e), D
    #pragma unroll
    for (int m = 0; m < M; m++) {
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            int i = q0 + row0 + 16 * m + g + 8 * r;
            lse2[m][r] = i < T ? p.lse[bh + i] * LOG2E_F : 0.0f;
            drow[m][r] = i < T ? p.drow[bh + i] : 0.0f;
        }
    }
    uint32_t qf[KS][M][4], dof[KS][M][4]; // the warp's rows of Q and dO, A fragments of Q K^T and dO V^T
    float acc[M][DT][4];                  // dQ
    fragments_zero_rows<M, DT>(acc);
    bool first = true;
    seen_key_tiles_walk<HS, THREADS>(p, blk.b, blk.h, blk.vis_rows, blk.subs, ks, vs, k_coords, [&](int kt, int stage) {
        if (first) {
            fragments_a_bf16_rows<KS, M>(qf, qs, LD, row0);
            fragments_a_bf16_rows<KS, M>(dof, dos, LD, row0);
            first = false;
        }
        int v = blk.sees(p, kt);
        if (v == BLOCK_SKIP) { return; }
        #pragma unroll 1
        for (int c0 = 0; c0 < KR; c0 += Ft::STEP) { // the key tile's columns c0 .. c0 + STEP - 1
            const bf16 *kst = ks + (stage * KR + c0) * LD, *vst = vs + (stage * KR + c0) * LD;
            float s[M][NS][4], dp[M][NS][4];
            fragments_zero_rows<M, NS>(s);
            fragments_zero_rows<M, NS>(dp);
            #pragma unroll
            for (int k = 0; k < KS; k++) {
                warp_mma_bf16_rows<M, NS, B_NK>(s, qf[k], kst, LD, 16 * k);
                warp_mma_bf16_rows<M, NS, B_NK>(dp, dof[k], vst, LD, 16 * k);
            }
            #pragma unroll
            for (int m = 0; m < M; m++) {
                if (v == BLOCK_MASKED) {
                    LaneRows rows = lane_rows_load<QR>(q_coords, row0 + 16 * m, q0, T);
                    scores_mask<NS, KR, true>(s[m], rows, k_coords + stage * 2 * KR + c0, kt * KR + c0, T);
                }
                // P = exp(S scale - lse) = exp2(S scale_log2 - lse log2(e)) (0 where masked)
                #pragma unroll
                for (int n = 0; n < NS; n++) {
                    #pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float pr = exp2_ftz(fmaf(s[m][n][i], p.scale_log2, -lse2[m][i >> 1]));
                        dp[m][n][i] = pr * (dp[m][n][i] - drow[m][i >> 1]) * p.scale;
                    }
                }
            }
            #pragma unroll
            for (int j = 0; j < NS / 2; j++) { // dQ += dS K, 16 keys a step, dS from the accumulators of dP
                uint32_t da[M][4];
                #pragma unroll
                for (int m = 0; m < M; m++) { fragment_a_from_accumulators(da[m], dp[m][2 * j], dp[m][2 * j + 1]); }
                warp_mma_bf16_rows<M, DT, B_KN>(acc, da, kst, LD, 16 * j);
            }
        }
    });
    #pragma unroll
    for (int m = 0; m < M; m++) { dq_rows_store<HS>(p, acc[m], blk.b, blk.h, q0 + row0 + 16 * m); }
}

// dK, dV of one key tile of the visiting block, (b, h): the four products of
// FlashAttention-2 that sum over the query tiles seeing it, walking those query
// tiles, 32 queries a step:
//   S^T = K Q^T, dP^T = V dO^T          (P^T, dS^T in registers)
//   dV += P^T dO, dK += dS^T Q
// A warp holds BWD_ROWS keys (M 16-row tiles); their K fragments stay in registers
// at HS <= 64, their V fragments are read per step (both held would leave too few
// registers for 32 rows' dK and dV).
template <int HS>
__global__ static void __launch_bounds__(FlashTile<HS>::DKV_THREADS, 1) attend_backward_dkv_flash_kernel(AttnBlockArgs p) {
    using Ft = FlashTile<HS>;
    constexpr int R = Ft::KEYS, LD = Ft::LD, THREADS = Ft::DKV_THREADS;
    constexpr int M = Ft::BWD_TILES, ROWS = Ft::BWD_ROWS, NS = Ft::STEP / 8, DT = HS / 8, KS = HS / 16;
    extern __shared__ float shared[]; // no static shared memory: offset 0, 16-byte aligned
    bf16 *ks = (bf16 *)shared;                 // (R, LD) the key tile
    bf16 *vs = ks + R * LD;                    // (R, LD) its values
    bf16 *qs = vs + R * LD;                    // (2, R, LD) queries, two stages
    bf16 *dos = qs + 2 * R * LD;               // (2, R, LD) their output gradients
    int *k_coords = (int *)(dos + 2 * R * LD); // (2, R) the keys' indices, documents
    int *q_coords = k_coords + 2 * R;          // (2, 2, R) the queries', two stages
    float *q_rows = (float *)(q_coords + 4 * R); // (2, 2, R) the queries' lse and D, two stages
    int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / WARP_SIZE, t = threadIdx.x % 4;
    int T = p.T, k0 = kt * R, row0 = warp * ROWS; // row0: the warp's first key in the tile
    size_t brow = (size_t)b * T, bh = ((size_t)b * p.NH + h) * T;
    const floatX *q_src = p.q + brow * p.q_stride + h * HS, *do_src = p.dout + brow * p.C + h * HS;
    const unsigned char *vis = p.vis + (size_t)b * p.tiles * p.tiles; // [query tile][key tile]
    rows_load_async<HS, R, LD, THREADS>(ks, p.k + brow * p.kv_stride + h * HS, p.kv_stride, k0, T);
    rows_load_async<HS, R, LD, THREADS>(vs, p.v + brow * p.kv_stride + h * HS, p.kv_stride, k0, T);
    words_load_async<R, THREADS>(k_coords, p.k_index + brow, k0, T);
    words_load_async<R, THREADS>(k_coords + R, p.k_doc + brow, k0, T);
    constexpr bool HOLD_K = HS <= 64;
    uint32_t kf[HOLD_K ? KS : 1][M][4]; // the warp's keys, A fragments of K Q^T (at HS <= 64)
    float acc_dk[M][DT][4], acc_dv[M][DT][4];
    fragments_zero_rows<M, DT>(acc_dk);
    fragments_zero_rows<M, DT>(acc_dv);
    bool first = true;
    // stage s <- query tile qt's Q, dO, coordinates, lse and D (issued)
    auto load = [&](int qt, int s) {
        rows_load_async<HS, R, LD, THREADS>(qs + s * R * LD, q_src, p.q_stride, qt * R, T);
        rows_load_async<HS, R, LD, THREADS>(dos + s * R * LD, do_src, p.C, qt * R, T);
        words_load_async<R, THREADS>(q_coords + s * 2 * R, p.q_index + brow, qt * R, T);
        words_load_async<R, THREADS>(q_coords + s * 2 * R + R, p.q_doc + brow, qt * R, T);
        words_load_async<R, THREADS>(q_rows + s * 2 * R, p.lse + bh, qt * R, T);
        words_load_async<R, THREADS>(q_rows + s * 2 * R + R, p.drow + bh, qt * R, T);
    };
    auto next = [&](int qt) { return next_seeing_query_tile(vis, p.tiles, kt, qt + 1); };
    tiles_walk(next_seeing_query_tile(vis, p.tiles, kt, 0), p.tiles, next, load, [&](int qt, int stage) {
        if (first) {
            if constexpr (HOLD_K) { fragments_a_bf16_rows<KS, M>(kf, ks, LD, row0); }
            first = false;
        }
        int masked = vis[(size_t)qt * p.tiles + kt] == BLOCK_MASKED; // uniform over the block
        #pragma unroll 1
        for (int c0 = 0; c0 < R; c0 += Ft::STEP) { // the query tile's rows c0 .. c0 + STEP - 1
            const bf16 *qst = qs + (stage * R + c0) * LD, *dost = dos + (stage * R + c0) * LD;
            const float *lse = q_rows + stage * 2 * R + c0, *drow = lse + R;
            // transposed scores: rows are this warp's keys, columns the step's queries
            float st[M][NS][4], dpt[M][NS][4];
            fragments_zero_rows<M, NS>(st);
            fragments_zero_rows<M, NS>(dpt);
            #pragma unroll
            for (int k = 0; k < KS; k++) {
                uint32_t a[M][4];
                if constexpr (HOLD_K) {
                    warp_mma_bf16_rows<M, NS, B_NK>(st, kf[k], qst, LD, 16 * k);
                } else {
                    #pragma unroll
                    for (int m = 0; m < M; m++) { fragment_a_bf16(a[m], ks, LD, row0 + 16 * m, 16 * k); }
                    warp_mma_bf16_rows<M, NS, B_NK>(st, a, qst, LD, 16 * k);
                }
                #pragma unroll
                for (int m = 0; m < M; m++) { fragment_a_bf16(a[m], vs, LD, row0 + 16 * m, 16 * k); }
                warp_mma_bf16_rows<M, NS, B_NK>(dpt, a, dost, LD, 16 * k);
            }
            // P^T = exp(S^T scale - lse) = exp2(S^T scale_log2 - lse log2(e)) (0 where
            // masked), dS^T = P^T (dP^T - D) scale
            #pragma unroll
            for (int m = 0; m < M; m++) {
                if (masked) {
                    LaneRows rows = lane_rows_load<R>(k_coords, row0 + 16 * m, k0, T);
                    scores_mask<NS, R, false>(st[m], rows, q_coords + stage * 2 * R + c0, qt * R + c0, T);
                }
                #pragma unroll
                for (int n = 0; n < NS; n++) {
                    float2 lse2 = *(const float2 *)&lse[8 * n + 2 * t], d2 = *(const float2 *)&drow[8 * n + 2 * t];
                    lse2.x *= LOG2E_F;
                    lse2.y *= LOG2E_F;
                    #pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float pt = exp2_ftz(fmaf(st[m][n][i], p.scale_log2, -((i & 1) ? lse2.y : lse2.x)));
                        dpt[m][n][i] = pt * (dpt[m][n][i] - ((i & 1) ? d2.y : d2.x)) * p.scale;
                        st[m][n][i] = pt;
                    }
                }
            }
            // dV += P^T dO, dK += dS^T Q, 16 queries a step
            #pragma unroll
            for (int j = 0; j < NS / 2; j++) {
                uint32_t a[M][4];
                #pragma unroll
                for (int m = 0; m < M; m++) { fragment_a_from_accumulators(a[m], st[m][2 * j], st[m][2 * j + 1]); }
                warp_mma_bf16_rows<M, DT, B_KN>(acc_dv, a, dost, LD, 16 * j);
                #pragma unroll
                for (int m = 0; m < M; m++) { fragment_a_from_accumulators(a[m], dpt[m][2 * j], dpt[m][2 * j + 1]); }
                warp_mma_bf16_rows<M, DT, B_KN>(acc_dk, a, qst, LD, 16 * j);
            }
        }
    });
    #pragma unroll
    for (int m = 0; m < M; m++) { // 0 where no query sees a key
        dkv_rows_store<HS>(p, acc_dk[m], acc_dv[m], b, h, k0 + row0 + 16 * m);
    }
}

#endif // CP_ATTENTION_BLOCK_FLASH_CUH
