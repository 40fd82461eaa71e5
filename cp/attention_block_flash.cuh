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
    and dK products, K in dS K, dS in dS K);
  - the operand that a loop keeps (the query tile's rows in the forward, the key
    tile's K and V in the backward) is loaded into A fragments once, before the
    loop, and held in registers;
  - S -> P stays in registers: the accumulators of S are the A fragment of P V
    (fragment_a_from_accumulators), likewise P^T and dS^T in the backward;
  - the tiles the loop walks are double-buffered with cp.async: tile i + 1 is
    copied into one stage while tile i is computed from the other.

  forward   one block per 128 queries of (b, h) (8 warps, 16 rows each), walking
            the key tiles that any of its rows sees. The visibility table's tiles
            are the key tile's rows (attention_tile_rows: 64, or 32 at HS 128), so
            a query tile spans 2 or 4 of the table's rows: each warp reads the row
            its queries lie in, and skips, computes unmasked or masks on its own.
  backward  the five products of FlashAttention-2, per key tile (one warp per 16
            keys, K and V in registers), walking the query tiles that see it:
              S^T = K Q^T, dP^T = V dO^T            (P^T, dS^T in registers)
              dV += P^T dO, dK += dS^T Q            (summed over the query tiles)
              dQ_part += dS K                       (dS^T through shared memory)
            dQ is summed over key tiles. A block takes the key tiles split,
            split + splits, ... in turn, and adds its dQ into a slice of its own
            (AttnBlockArgs.dq_parts, zeroed first): within a slice the key tiles
            add in order, and the slices are summed in order afterwards
            (dq_parts_sum_kernel). No atomics: the same bits every run, at the cost
            of splits x (B, T, C) fp32 of memory and one pass over it
            (attention_dq_splits chooses the splits).
*/
#ifndef CP_ATTENTION_BLOCK_FLASH_CUH
#define CP_ATTENTION_BLOCK_FLASH_CUH

#include "attention_queries.cuh"
#include "attention_row_steps.cuh"
#include "tile_visibility.cuh"
#include "../llmc/cp_async.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/mma_tiles.cuh"

// the tiles in shared memory: the BF16 build's floatX (the FP32 build never launches these kernels)
typedef __nv_bfloat16 bf16;

template <int HS> struct FlashTile {
    static constexpr int KEYS = attention_tile_rows(HS);   // a key tile: the visibility table's tile
    static constexpr int QUERIES = 128;                    // a forward query tile
    static constexpr int SUBS = QUERIES / KEYS;            // the table's query tiles in one
    static constexpr int FWD_THREADS = QUERIES / 16 * WARP_SIZE;
    static constexpr int BWD_THREADS = KEYS / 16 * WARP_SIZE; // one warp per 16 keys (and 16 queries for dQ)
    static constexpr int LD = HS + 8;                      // a bf16 tile's row stride: 16 bytes of padding
    static constexpr int LD_DS = KEYS + 8;                 // dS^T's row stride
    // at HS <= 64 two forward blocks fit an SM's registers; at 128 the warp's
    // query fragments and output need more than 128 registers a thread
    static constexpr int FWD_MIN_BLOCKS = HS <= 64 ? 2 : 1;
};

template <int HS> static constexpr size_t flash_forward_shared_bytes() {
    using Ft = FlashTile<HS>;
    // Q, two stages of K and V (bf16); the queries' coordinates, two stages of the keys'
    return (size_t)(Ft::QUERIES + 4 * Ft::KEYS) * Ft::LD * sizeof(bf16) +
           (size_t)(2 * Ft::QUERIES + 4 * Ft::KEYS) * sizeof(int);
}

template <int HS> static constexpr size_t flash_backward_shared_bytes() {
    using Ft = FlashTile<HS>;
    // K, V, two stages of Q and dO, dS^T (bf16); the keys' coordinates, two stages of
    // the queries' coordinates, lse and D
    return (size_t)(6 * Ft::KEYS * Ft::LD + Ft::KEYS * Ft::LD_DS) * sizeof(bf16) +
           (size_t)(2 + 8) * Ft::KEYS * sizeof(int);
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

// One tile of 128 queries of (b, h) against the visiting block, merged into (o, lse).
template <int HS>
__global__ static void __launch_bounds__(FlashTile<HS>::FWD_THREADS, FlashTile<HS>::FWD_MIN_BLOCKS)
    attend_forward_flash_kernel(AttnBlockArgs p) {
    using Ft = FlashTile<HS>;
    constexpr int QR = Ft::QUERIES, KR = Ft::KEYS, LD = Ft::LD, THREADS = Ft::FWD_THREADS;
    constexpr int NT = KR / 8, DT = HS / 8, KS = HS / 16;
    extern __shared__ float shared[]; // no static shared memory: offset 0, 16-byte aligned
    bf16 *qs = (bf16 *)shared;                 // (QR, LD) the queries
    bf16 *ks = qs + QR * LD;                   // (2, KR, LD) keys, two stages
    bf16 *vs = ks + 2 * KR * LD;               // (2, KR, LD) values, two stages
    int *q_coords = (int *)(vs + 2 * KR * LD); // (2, QR) the queries' indices, documents
    int *k_coords = q_coords + 2 * QR;         // (2, 2, KR) the keys', two stages
    int qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / WARP_SIZE;
    int T = p.T, q0 = qb * QR;
    size_t brow = (size_t)b * T;
    const floatX *k_src = p.k + brow * p.kv_stride + h * HS, *v_src = p.v + brow * p.kv_stride + h * HS;
    // the table's rows of these queries (fewer at the end of the row); warp w's 16
    // rows lie in row w 16 / KR of them
    const unsigned char *vis_rows = p.vis + ((size_t)b * p.tiles + qb * Ft::SUBS) * p.tiles;
    int subs = min(Ft::SUBS, p.tiles - qb * Ft::SUBS), sub = warp * 16 / KR;
    // stage s <- key tile kt's K, V and coordinates (issued)
    auto load_keys = [&](int kt, int s) {
        rows_load_async<HS, KR, LD, THREADS>(ks + s * KR * LD, k_src, p.kv_stride, kt * KR, T);
        rows_load_async<HS, KR, LD, THREADS>(vs + s * KR * LD, v_src, p.kv_stride, kt * KR, T);
        words_load_async<KR, THREADS>(k_coords + s * 2 * KR, p.k_index + brow, kt * KR, T);
        words_load_async<KR, THREADS>(k_coords + s * 2 * KR + KR, p.k_doc + brow, kt * KR, T);
    };
    rows_load_async<HS, QR, LD, THREADS>(qs, p.q + brow * p.q_stride + h * HS, p.q_stride, q0, T);
    words_load_async<QR, THREADS>(q_coords, p.q_index + brow, q0, T);
    words_load_async<QR, THREADS>(q_coords + QR, p.q_doc + brow, q0, T);
    int kt = next_seen_key_tile(vis_rows, subs, p.tiles, 0);
    if (kt < p.tiles) { load_keys(kt, 0); }
    cp_async_commit();
    uint32_t qf[KS][4]; // the warp's 16 query rows, A fragments of Q K^T
    float acc[DT][4];   // P V, unnormalised
    fragments_zero<DT>(acc);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // the lane's rows of the warp (g, g + 8)
    for (int stage = 0, first = 1; kt < p.tiles; stage ^= 1, first = 0) { // kt: uniform over the block
        int next = next_seen_key_tile(vis_rows, subs, p.tiles, kt + 1);
        __syncthreads(); // every warp is done with the other stage (the tile before this one)
        if (next < p.tiles) { load_keys(next, stage ^ 1); }
        cp_async_commit();
        cp_async_wait<1>(); // this thread's copies of tile kt (and of the queries) have landed,
        __syncthreads();    // and every thread's
        if (first) {
            #pragma unroll
            for (int k = 0; k < KS; k++) { fragment_a_bf16(qf[k], qs, LD, warp * 16, 16 * k); }
        }
        int v = sub < subs ? vis_rows[(size_t)sub * p.tiles + kt] : BLOCK_SKIP; // uniform over the warp
        if (v != BLOCK_SKIP) {
            const bf16 *kst = ks + stage * KR * LD, *vst = vs + stage * KR * LD;
            float s[NT][4];
            fragments_zero<NT>(s);
            #pragma unroll
            for (int k = 0; k < KS; k++) { warp_mma_bf16<NT, B_NK>(s, qf[k], kst, LD, 16 * k); }
            if (v == BLOCK_MASKED) { // (the rows' coordinates are read here, to hold no registers across the loop)
                LaneRows rows = lane_rows_load<QR>(q_coords, warp * 16, q0, T);
                scores_mask<NT, KR, true>(s, rows, k_coords + stage * 2 * KR, kt * KR, T);
            }
            online_softmax_step<NT, DT>(s, p.scale_log2, m, l, acc);
            #pragma unroll
            for (int j = 0; j < NT / 2; j++) { // P V, 16 keys a step, P from the accumulators of S
                uint32_t pa[4];
                fragment_a_from_accumulators(pa, s[2 * j], s[2 * j + 1]);
                warp_mma_bf16<DT, B_KN>(acc, pa, vst, LD, 16 * j);
            }
        }
        kt = next;
    }
    cp_async_wait<0>(); // the queries' copies, where no key tile was seen
    output_merge<HS>(p, acc, m, l, b, h, q0 + warp * 16);
}

// dK, dV of the key tiles split, split + splits, ... of the visiting block, (b, h),
// and their dQ added into slice `split` of dq_parts.
template <int HS>
__global__ static void __launch_bounds__(FlashTile<HS>::BWD_THREADS, 2) attend_backward_flash_kernel(AttnBlockArgs p) {
    using Ft = FlashTile<HS>;
    constexpr int R = Ft::KEYS, LD = Ft::LD, LDS = Ft::LD_DS, THREADS = Ft::BWD_THREADS;
    constexpr int NT = R / 8, DT = HS / 8, KS = HS / 16;
    extern __shared__ float shared[]; // no static shared memory: offset 0, 16-byte aligned
    bf16 *ks = (bf16 *)shared;                 // (R, LD) the key tile
    bf16 *vs = ks + R * LD;                    // (R, LD) its values
    bf16 *qs = vs + R * LD;                    // (2, R, LD) queries, two stages
    bf16 *dos = qs + 2 * R * LD;               // (2, R, LD) their output gradients
    bf16 *dsts = dos + 2 * R * LD;             // (R, LDS) dS^T: [key][query]
    int *k_coords = (int *)(dsts + R * LDS);   // (2, R) the keys' indices, documents
    int *q_coords = k_coords + 2 * R;          // (2, 2, R) the queries', two stages
    float *q_rows = (float *)(q_coords + 4 * R); // (2, 2, R) the queries' lse and D, two stages
    int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane >> 2, t = lane & 3;
    int T = p.T;
    size_t brow = (size_t)b * T, bh = ((size_t)b * p.NH + h) * T;
    const floatX *q_src = p.q + brow * p.q_stride + h * HS, *do_src = p.dout + brow * p.C + h * HS;
    const unsigned char *vis = p.vis + (size_t)b * p.tiles * p.tiles; // [query tile][key tile]
    float *dq_part = p.dq_parts + (size_t)split * gridDim.z * T * p.C + brow * p.C + h * HS;
    // stage s <- query tile qt's Q, dO, coordinates, lse and D (issued)
    auto load_queries = [&](int qt, int s) {
        rows_load_async<HS, R, LD, THREADS>(qs + s * R * LD, q_src, p.q_stride, qt * R, T);
        rows_load_async<HS, R, LD, THREADS>(dos + s * R * LD, do_src, p.C, qt * R, T);
        words_load_async<R, THREADS>(q_coords + s * 2 * R, p.q_index + brow, qt * R, T);
        words_load_async<R, THREADS>(q_coords + s * 2 * R + R, p.q_doc + brow, qt * R, T);
        words_load_async<R, THREADS>(q_rows + s * 2 * R, p.lse + bh, qt * R, T);
        words_load_async<R, THREADS>(q_rows + s * 2 * R + R, p.drow + bh, qt * R, T);
    };
    for (int kt = split; kt < p.tiles; kt += gridDim.x) {
        int k0 = kt * R;
        __syncthreads(); // the last key tile's K, V, dS^T and stages are read
        rows_load_async<HS, R, LD, THREADS>(ks, p.k + brow * p.kv_stride + h * HS, p.kv_stride, k0, T);
        rows_load_async<HS, R, LD, THREADS>(vs, p.v + brow * p.kv_stride + h * HS, p.kv_stride, k0, T);
        words_load_async<R, THREADS>(k_coords, p.k_index + brow, k0, T);
        words_load_async<R, THREADS>(k_coords + R, p.k_doc + brow, k0, T);
        int qt = next_seeing_query_tile(vis, p.tiles, kt, 0);
        if (qt < p.tiles) { load_queries(qt, 0); }
        cp_async_commit();
        // the warp's 16 keys and values, A fragments of K Q^T and V dO^T, held in
        // registers at HS <= 64; at 128 they would take 64 of them: read per use there
        constexpr bool HOLD_KV = HS <= 64;
        uint32_t kf[HOLD_KV ? KS : 1][4], vf[HOLD_KV ? KS : 1][4];
        LaneRows rows;                 // their coordinates
        float acc_dk[DT][4], acc_dv[DT][4];
        fragments_zero<DT>(acc_dk);
        fragments_zero<DT>(acc_dv);
        for (int stage = 0, first = 1; qt < p.tiles; stage ^= 1, first = 0) { // qt: uniform over the block
            int next = next_seeing_query_tile(vis, p.tiles, kt, qt + 1);
            // the other stage was last read before the last tile's barrier after dS^T
            if (next < p.tiles) { load_queries(next, stage ^ 1); }
            cp_async_commit();
            cp_async_wait<1>(); // this thread's copies of query tile qt (and of the keys) have landed,
            __syncthreads();    // and every thread's
            if (first) {
                #pragma unroll
                for (int k = 0; k < (HOLD_KV ? KS : 0); k++) {
                    fragment_a_bf16(kf[k], ks, LD, warp * 16, 16 * k);
                    fragment_a_bf16(vf[k], vs, LD, warp * 16, 16 * k);
                }
                rows = lane_rows_load<R>(k_coords, warp * 16, k0, T);
            }
            int q0 = qt * R;
            const bf16 *qst = qs + stage * R * LD, *dost = dos + stage * R * LD;
            const float *lse = q_rows + stage * 2 * R, *drow = lse + R;
            // transposed scores: rows are this warp's keys, columns the tile's queries
            float st[NT][4], dpt[NT][4];
            fragments_zero<NT>(st);
            fragments_zero<NT>(dpt);
            #pragma unroll
            for (int k = 0; k < KS; k++) {
                if constexpr (HOLD_KV) {
                    warp_mma_bf16<NT, B_NK>(st, kf[k], qst, LD, 16 * k);
                    warp_mma_bf16<NT, B_NK>(dpt, vf[k], dost, LD, 16 * k);
                } else {
                    uint32_t a[4];
                    fragment_a_bf16(a, ks, LD, warp * 16, 16 * k);
                    warp_mma_bf16<NT, B_NK>(st, a, qst, LD, 16 * k);
                    fragment_a_bf16(a, vs, LD, warp * 16, 16 * k);
                    warp_mma_bf16<NT, B_NK>(dpt, a, dost, LD, 16 * k);
                }
            }
            if (vis[(size_t)qt * p.tiles + kt] == BLOCK_MASKED) { // uniform over the block
                scores_mask<NT, R, false>(st, rows, q_coords + stage * 2 * R, q0, T);
            }
            // P^T = exp(S^T scale - lse) = exp2(S^T scale_log2 - lse log2(e)) (0 where
            // masked), dS^T = P^T (dP^T - D) scale
            #pragma unroll
            for (int n = 0; n < NT; n++) {
                float2 lse2 = *(const float2 *)&lse[8 * n + 2 * t], d2 = *(const float2 *)&drow[8 * n + 2 * t];
                lse2.x *= LOG2E_F;
                lse2.y *= LOG2E_F;
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    float pt = exp2f(fmaf(st[n][i], p.scale_log2, -((i & 1) ? lse2.y : lse2.x)));
                    dpt[n][i] = pt * (dpt[n][i] - ((i & 1) ? d2.y : d2.x)) * p.scale;
                    st[n][i] = pt;
                }
            }
            // dV += P^T dO, dK += dS^T Q, 16 queries a step; dS^T also to shared
            #pragma unroll
            for (int j = 0; j < NT / 2; j++) {
                uint32_t pa[4], dsa[4];
                fragment_a_from_accumulators(pa, st[2 * j], st[2 * j + 1]);
                fragment_a_from_accumulators(dsa, dpt[2 * j], dpt[2 * j + 1]);
                warp_mma_bf16<DT, B_KN>(acc_dv, pa, dost, LD, 16 * j);
                warp_mma_bf16<DT, B_KN>(acc_dk, dsa, qst, LD, 16 * j);
                // the A fragment's registers: (row g | g + 8, column 2t | 2t + 8) pairs
                #pragma unroll
                for (int a = 0; a < 4; a++) {
                    int row = warp * 16 + g + 8 * (a & 1), col = 16 * j + 2 * t + 8 * (a >> 1);
                    *(uint32_t *)&dsts[row * LDS + col] = dsa[a];
                }
            }
            __syncthreads(); // every warp's dS^T is in shared memory
            // dQ_part += dS K: this warp's 16 queries of the tile, 16 keys a step
            float acc_dq[DT][4];
            fragments_zero<DT>(acc_dq);
            #pragma unroll
            for (int j = 0; j < R / 16; j++) {
                uint32_t da[4];
                fragment_a_bf16_trans(da, dsts, LDS, warp * 16, 16 * j);
                warp_mma_bf16<DT, B_KN>(acc_dq, da, ks, LD, 16 * j);
            }
            #pragma unroll
            for (int r = 0; r < 2; r++) {
                int i = q0 + warp * 16 + g + 8 * r;
                if (i >= T) { continue; }
                float *row = dq_part + (size_t)i * p.C;
                #pragma unroll
                for (int d = 0; d < DT; d++) {
                    float2 *pair = (float2 *)&row[8 * d + 2 * t];
                    float2 x = *pair;
                    x.x += acc_dq[d][2 * r];
                    x.y += acc_dq[d][2 * r + 1];
                    *pair = x;
                }
            }
            qt = next;
        }
        cp_async_wait<0>(); // the keys' copies, where no query tile sees them
        dkv_rows_store<HS>(p, acc_dk, acc_dv, b, h, k0 + warp * 16); // 0 where no query sees a key
    }
}

// dq[r][c] = (dq_add ? dq[r][c] : 0) + the sum over the slices of parts[s][r][c], in
// slice order
// dq: (rows, dq_stride) fp32   parts: (splits, rows, C)
__global__ static void dq_parts_sum_kernel(float *dq, int dq_stride, int dq_add, const float *parts, int splits,
                                           size_t rows, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * C) { return; }
    float sum = 0.0f;
    for (int s = 0; s < splits; s++) { sum += parts[(size_t)s * rows * C + idx]; }
    float *d = dq + (idx / C) * dq_stride + idx % C;
    *d = dq_add ? *d + sum : sum;
}

#endif // CP_ATTENTION_BLOCK_FLASH_CUH
