/*
The block attention of cp/attention_block.h by tiles (flash-style), what the BLAS
build runs: the same (o, lse) merge and the same dQ, dK, dV as the plain loops
there, up to the order of fp32 sums. Read the loops first: they are the
definition; this file is how the same numbers come fast on a CPU.
test/test_attention_tiles.c checks the tiles against the loops.

Per (b, h) the local queries are cut into tiles of ATTN_TILE_Q rows and the
block's keys into tiles of ATTN_TILE_K. A tile pair is skipped, fully visible
(no mask evaluated) or masked, by block_visibility of the two tiles' coordinate
ranges (the rule of cp/block_mask.h at tile size). Per tile pair, with Q_t, K_t,
V_t, dO_t the tiles' rows, all products by cblas_sgemm:

  forward (one query tile, over its key tiles, online softmax in fp32)
    S = scale Q_t K_t^T (-inf where masked),  m' = max(m, rowmax S)
    P = exp(S - m'),  l = l exp(m - m') + rowsum P,  acc = acc exp(m - m') + P V_t
    then o_blk = acc / l, lse_blk = m + log l, merged as merge_block_row
  backward (one head, its key tiles in order, each over its query tiles), P
  recomputed from the saved lse, D = rowsum(dO * O), all three as rows per key
  (S^T, P^T, dS^T), so that two of the three products below are NN:
    P^T = exp(S^T - lse),  dP^T = V_t dO_t^T,  dS^T = P^T * (dP^T - D)
    dV_t += P^T dO_t,  dK_t += scale dS^T Q_t,  dQ_t += scale (dS^T)^T K_t

Only tiles are stored: per thread an S and a dS tile and the running acc, m, l
of one query tile. The forward's work items are (b, h, query tile), handed out
dynamically over the OpenMP threads, so that every core is busy even when B * NH
is smaller than their number. The backward's are (b, h): one thread owns a
head's dQ, dK and dV, so it computes each tile pair's P and dS once (five
products a pair, not the seven of a pass over query tiles for dQ and another
over key tiles for dK and dV, which the GPU's thousands of blocks a head need);
below B * NH items some threads wait. Each output row is written by one item in
a fixed order (no atomics), so the result does not depend on the thread count.
Inside the parallel loop OpenBLAS's OpenMP build runs each sgemm on the calling
thread. exp is vec_expf, which vectorises.

The tile sizes are OpenBLAS's: its small-matrix kernels (no packing) take the
products of these shapes (dev/bench/README.md has the measurements).
*/
// cp/attention_block.h includes this file where its types are defined (before
// its attend_block_forward, which calls the tiles): the include below, outside
// the guard, makes the same order when this file is included first.
#include "attention_block.h"
#ifndef CP_ATTENTION_BLOCK_TILED_H
#define CP_ATTENTION_BLOCK_TILED_H

#include <cblas.h>
#include "../llmc/vec_exp.h"

#define ATTN_TILE_Q 64
#define ATTN_TILE_K 64

// What the tiled kernels need of the queries and one visiting block.
typedef struct {
    const AttentionQueries *aq;
    const KVBlock *blk;
    int T, HS;
    int q_tiles, k_tiles; // tiles per row
    float scale;
    SubBlock *q_ranges;   // (B, q_tiles) coordinate ranges of the query tiles
    SubBlock *k_ranges;   // (B, k_tiles) of the key tiles
} TiledBlock;

// the tiles of size `tile` of the T tokens of each row: ranges (B, tiles)
static void tile_ranges(SubBlock *ranges, const int *index, const int *document, int B, int T, int tile, int tiles) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < tiles; t++) {
            int start = t * tile, end = start + tile < T ? start + tile : T;
            ranges[(size_t)b * tiles + t] = sub_block_range(index + (size_t)b * T, document + (size_t)b * T, start, end);
        }
    }
}

static TiledBlock tiled_block_begin(const AttentionQueries *aq, const KVBlock *blk) {
    TiledBlock tb;
    tb.aq = aq;
    tb.blk = blk;
    tb.T = aq->T;
    tb.HS = aq->C / aq->NH;
    tb.q_tiles = (aq->T + ATTN_TILE_Q - 1) / ATTN_TILE_Q;
    tb.k_tiles = (aq->T + ATTN_TILE_K - 1) / ATTN_TILE_K;
    tb.scale = 1.0f / sqrtf((float)tb.HS);
    tb.q_ranges = (SubBlock *)mallocCheck((size_t)aq->B * tb.q_tiles * sizeof(SubBlock));
    tb.k_ranges = (SubBlock *)mallocCheck((size_t)aq->B * tb.k_tiles * sizeof(SubBlock));
    tile_ranges(tb.q_ranges, aq->index, aq->document, aq->B, tb.T, ATTN_TILE_Q, tb.q_tiles);
    tile_ranges(tb.k_ranges, blk->index, blk->document, aq->B, tb.T, ATTN_TILE_K, tb.k_tiles);
    return tb;
}

static void tiled_block_end(TiledBlock *tb) {
    free(tb->q_ranges);
    free(tb->k_ranges);
}

// One query tile against one key tile of row b.
typedef struct {
    BlockVisibility vis;
    int i0, nq;             // query rows [i0, i0 + nq)
    int j0, nk;             // key rows [j0, j0 + nk)
    const int *qi, *qd;     // (nq) global index and document of the queries
    const int *ki, *kd;     // (nk) of the keys
} TilePair;

static TilePair tile_pair(const TiledBlock *tb, int b, int qt, int kt) {
    const SubBlock *qs = &tb->q_ranges[(size_t)b * tb->q_tiles + qt];
    const SubBlock *ks = &tb->k_ranges[(size_t)b * tb->k_tiles + kt];
    TilePair tp;
    tp.vis = block_visibility(qs, ks);
    tp.i0 = qs->start; tp.nq = qs->end - qs->start;
    tp.j0 = ks->start; tp.nk = ks->end - ks->start;
    size_t row = (size_t)b * tb->T;
    tp.qi = tb->aq->index + row + tp.i0;
    tp.qd = tb->aq->document + row + tp.i0;
    tp.ki = tb->blk->index + row + tp.j0;
    tp.kd = tb->blk->document + row + tp.j0;
    return tp;
}

// The row stride of a tile pair's score-shaped buffers: a row per query of
// ATTN_TILE_K keys, or with `by_keys` a row per key of ATTN_TILE_Q queries.
static int tile_stride(int by_keys) { return by_keys ? ATTN_TILE_Q : ATTN_TILE_K; }

// The scores of a tile pair, -inf where the mask hides a pair: S = scale Q_t K_t^T
// (nq, nk), or with `by_keys` its transpose S^T = scale K_t Q_t^T (nk, nq), which
// the backward needs as rows (so that its dK and dV products are NN).
// S: ATTN_TILE_Q * ATTN_TILE_K floats, row stride tile_stride   q: (nq, HS)   k: (nk, HS)
static void tile_scores(float *S, const TilePair *tp, const float *q, const float *k, int HS, float scale,
                        int by_keys) {
    int rows = by_keys ? tp->nk : tp->nq, cols = by_keys ? tp->nq : tp->nk, ld = tile_stride(by_keys);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, HS,
                scale, by_keys ? k : q, HS, by_keys ? q : k, HS, 0.0f, S, ld);
    if (tp->vis != BLOCK_MASKED) { return; }
    for (int i = 0; i < tp->nq; i++) {
        for (int j = 0; j < tp->nk; j++) {
            if (pair_visible(tp->qi[i], tp->qd[i], tp->ki[j], tp->kd[j])) { continue; }
            S[by_keys ? j * ld + i : i * ld + j] = -INFINITY;
        }
    }
}

// One query tile of head bh of row b against the whole block, merged into (o, lse).
// scratch: ATTN_TILE_Q * (ATTN_TILE_K + HS + 2) floats
static void tiled_forward_query_tile(const TiledBlock *tb, int b, size_t bh, int qt, float *lse, float *scratch) {
    int T = tb->T, HS = tb->HS, ld = tile_stride(0);
    float *S = scratch;                        // (ATTN_TILE_Q, ATTN_TILE_K) scores, then probabilities
    float *acc = S + ATTN_TILE_Q * ATTN_TILE_K; // (ATTN_TILE_Q, HS) sum of p v, unnormalised
    float *m = acc + ATTN_TILE_Q * HS;         // (ATTN_TILE_Q) running max
    float *l = m + ATTN_TILE_Q;                // (ATTN_TILE_Q) running sum of exp(s - m)
    const float *q = tb->aq->q + bh * T * HS, *k = tb->blk->k + bh * T * HS, *v = tb->blk->v + bh * T * HS;
    int i0 = qt * ATTN_TILE_Q, nq = T - i0 < ATTN_TILE_Q ? T - i0 : ATTN_TILE_Q;
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    memset(acc, 0, (size_t)nq * HS * sizeof(float));
    for (int kt = 0; kt < tb->k_tiles; kt++) {
        TilePair tp = tile_pair(tb, b, qt, kt);
        if (tp.vis == BLOCK_SKIP) { continue; }
        tile_scores(S, &tp, q + (size_t)i0 * HS, k + (size_t)tp.j0 * HS, HS, tb->scale, 0);
        for (int i = 0; i < nq; i++) {
            float *s = S + i * ld;
            float row_max = -INFINITY;
            #pragma omp simd reduction(max:row_max)
            for (int j = 0; j < tp.nk; j++) { row_max = s[j] > row_max ? s[j] : row_max; }
            float m_new = row_max > m[i] ? row_max : m[i];
            if (m_new == -INFINITY) { // no key of the block seen yet: no weights
                memset(s, 0, tp.nk * sizeof(float));
                continue;
            }
            float sum = 0.0f;
            #pragma omp simd reduction(+:sum)
            for (int j = 0; j < tp.nk; j++) {
                float p = vec_expf(s[j] - m_new);
                s[j] = p;
                sum += p;
            }
            float rescale = vec_expf(m[i] - m_new); // 0 while the row was empty
            float *a = acc + (size_t)i * HS;
            for (int d = 0; d < HS; d++) { a[d] *= rescale; }
            l[i] = l[i] * rescale + sum;
            m[i] = m_new;
        }
        // acc += P V_t
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, tp.nk,
                    1.0f, S, ld, v + (size_t)tp.j0 * HS, HS, 1.0f, acc, HS);
    }
    float *o = tb->aq->o + (bh * T + i0) * HS;
    float *row_lse = lse + bh * T + i0;
    for (int i = 0; i < nq; i++) {
        if (l[i] == 0.0f) { continue; } // nothing of this block is visible to query i
        merge_block_row(o + (size_t)i * HS, &row_lse[i], acc + (size_t)i * HS, l[i], m[i] + logf(l[i]), HS);
    }
}

// Attends the local queries to one K/V block and merges into (o, lse), by tiles.
// o: (B, NH, T, HS)   lse: (B, NH, T)
static void attend_block_forward_tiled(AttentionQueries *aq, const KVBlock *blk, float *lse) {
    TiledBlock tb = tiled_block_begin(aq, blk);
    int NH = aq->NH, tiles = tb.q_tiles;
    long items = (long)aq->B * NH * tiles;
    #pragma omp parallel
    {
        float *scratch = (float *)mallocCheck((size_t)ATTN_TILE_Q * (ATTN_TILE_K + tb.HS + 2) * sizeof(float));
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < items; item++) {
            size_t bh = (size_t)(item / tiles);
            tiled_forward_query_tile(&tb, (int)(bh / NH), bh, (int)(item % tiles), lse, scratch);
        }
        free(scratch);
    }
    tiled_block_end(&tb);
}

// P^T = exp(S^T - lse) and dS^T = P^T * (dP^T - D) of one tile pair of head bh,
// dP^T = V_t dO_t^T: rows are keys, columns queries.
// PT, dST: (nk, nq), row stride tile_stride(1)
static void tile_probabilities(float *PT, float *dST, const TiledBlock *tb, const TilePair *tp, size_t bh,
                               const float *lse) {
    int T = tb->T, HS = tb->HS, ld = tile_stride(1);
    const AttentionQueries *aq = tb->aq;
    const float *q = aq->q + (bh * T + tp->i0) * HS;
    const float *k = tb->blk->k + (bh * T + tp->j0) * HS;
    const float *v = tb->blk->v + (bh * T + tp->j0) * HS;
    const float *dout = aq->dout + (bh * T + tp->i0) * HS;
    const float *row_lse = lse + bh * T + tp->i0; // (nq) per query
    const float *drow = aq->drow + bh * T + tp->i0;
    tile_scores(PT, tp, q, k, HS, tb->scale, 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tp->nk, tp->nq, HS,
                1.0f, v, HS, dout, HS, 0.0f, dST, ld);
    for (int r = 0; r < tp->nk; r++) { // row r is key r, column c query c
        float *p = PT + r * ld, *ds = dST + r * ld;
        #pragma omp simd
        for (int c = 0; c < tp->nq; c++) {
            p[c] = vec_expf(p[c] - row_lse[c]);
            ds[c] = p[c] * (ds[c] - drow[c]);
        }
    }
}

// dQ, dK and dV of head bh of row b against the whole block: per key tile, in
// order, its query tiles' P^T and dS^T, then dV_t += P^T dO_t, dK_t += scale dS^T Q_t
// and dQ_t += scale dS K_t (dS^T read transposed). Each query tile's dQ gets its key
// tiles' terms in key order, each key tile's dK and dV its query tiles' in query order.
// dk, dv: (B, NH, T, HS)   scratch: 2 * ATTN_TILE_Q * ATTN_TILE_K floats
static void tiled_backward_head(const TiledBlock *tb, int b, size_t bh, const float *lse, float *dk, float *dv,
                                float *scratch) {
    int T = tb->T, HS = tb->HS, ld = tile_stride(1);
    float *PT = scratch, *dST = scratch + ATTN_TILE_Q * ATTN_TILE_K;
    for (int kt = 0; kt < tb->k_tiles; kt++) {
        for (int qt = 0; qt < tb->q_tiles; qt++) {
            TilePair tp = tile_pair(tb, b, qt, kt);
            if (tp.vis == BLOCK_SKIP) { continue; }
            tile_probabilities(PT, dST, tb, &tp, bh, lse);
            size_t q_rows = (bh * T + tp.i0) * HS, k_rows = (bh * T + tp.j0) * HS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tp.nk, HS, tp.nq,
                        1.0f, PT, ld, tb->aq->dout + q_rows, HS, 1.0f, dv + k_rows, HS);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tp.nk, HS, tp.nq,
                        tb->scale, dST, ld, tb->aq->q + q_rows, HS, 1.0f, dk + k_rows, HS);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, tp.nq, HS, tp.nk,
                        tb->scale, dST, ld, tb->blk->k + k_rows, HS, 1.0f, tb->aq->dq + q_rows, HS);
        }
    }
}

// Adds one block's share to dQ and to the block's dK | dV, by tiles, a head per item.
// dkv: 2 x (B, NH, T, HS), zeroed by the caller
static void attend_block_backward_tiled(AttentionQueries *aq, const KVBlock *blk, const float *lse, float *dkv) {
    TiledBlock tb = tiled_block_begin(aq, blk);
    int NH = aq->NH;
    long bhs = (long)aq->B * NH;
    float *dk = dkv, *dv = dkv + (size_t)aq->B * NH * aq->T * tb.HS;
    #pragma omp parallel
    {
        float *scratch = (float *)mallocCheck(2 * (size_t)ATTN_TILE_Q * ATTN_TILE_K * sizeof(float));
        #pragma omp for schedule(dynamic, 1)
        for (long bh = 0; bh < bhs; bh++) { tiled_backward_head(&tb, (int)(bh / NH), (size_t)bh, lse, dk, dv, scratch); }
        free(scratch);
    }
    tiled_block_end(&tb);
}
#endif // CP_ATTENTION_BLOCK_TILED_H
