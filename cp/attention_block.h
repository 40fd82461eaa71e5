/*
Attention of this rank's queries to one block of keys and values, on the CPU: the
computation both context-parallel attention algorithms repeat once per block they
meet. cp/ring_attention.h passes the blocks around a ring, cp/allgather_attention.h
gathers them all at once; cp/attention_block.cuh is the GPU twin of this file.

A K/V block holds the keys and values of one rank's T local tokens with their
global coordinates. The queries stay where they are (AttentionQueries), with the
running output and log-sum-exp they accumulate over the blocks. Which pairs are
visible comes from the tokens' global coordinates only (cp/block_mask.h), so the
same code serves every layout, and blocks or half-blocks that nothing sees are
skipped.

Forward, per query row i, merged block by block (fp32, stable log-sum-exp form):
    s_ij = q_i . k_j / sqrt(HS)  for visible j of the block
    lse_blk = m + log(sum_j exp(s_ij - m)),  o_blk = sum_j exp(s_ij - lse_blk) v_j
    lse_new = max(lse, lse_blk) + log1p(exp(-|lse - lse_blk|))
    o = o * exp(lse - lse_new) + o_blk * exp(lse_blk - lse_new)
The state starts empty (lse = -inf) and takes the first block a query sees as is.
Both algorithms meet the rank's own block first: every query sees itself, so after
it every row is finite.

Backward recomputes each block's probabilities from the saved lse:
    p_ij = exp(s_ij - lse_i),  D_i = dO_i . O_i
    dV_j += p_ij dO_i,  ds_ij = p_ij (dO_i . v_j - D_i)
    dQ_i += ds_ij k_j / sqrt(HS),  dK_j += ds_ij q_i / sqrt(HS)
dQ accumulates here; the block's dK and dV go to the caller's buffer, since they
belong to the block's owner.

No T x T score matrix is ever stored: the queries' state is O(B * T * C).

Two implementations compute this: the plain loops (attend_block_*_loops, one
query row at a time: the readable definition, and what NO_BLAS=1 runs) and the
tiled one (attend_block_*_tiled, flash-style tiles whose products go to
cblas_sgemm, the BLAS build's; its section below says exactly what it computes).
test/test_attention_tiles.c checks the tiles against the loops.
*/
#ifndef CP_ATTENTION_BLOCK_H
#define CP_ATTENTION_BLOCK_H

#include <math.h>
#include <string.h>
#include "block_mask.h"
#include "sharder.h"
#include "../llmc/utils.h"
#ifndef NO_BLAS
#include <cblas.h>
#include "../llmc/vec_exp.h"
#endif

// One rank's keys and values as they travel: one buffer, so that one message
// carries it, and cp of them side by side are an all-gather's result.
//   k, v:      (B, NH, T, HS)
//   index:     (B, T)  global index of each token in its padded row
//   document:  (B, T)  document id of each token
typedef struct {
    float *k;
    float *v;
    int *index;
    int *document;
} KVBlock;

// bytes of one K/V block, and of the dK | dV of one block, 2 x (B, NH, T, HS)
static size_t kv_block_bytes(int B, int T, int C) {
    return 2 * (size_t)B * T * C * sizeof(float) + 2 * (size_t)B * T * sizeof(int);
}

static size_t dkv_block_bytes(int B, int T, int C) {
    return 2 * (size_t)B * T * C * sizeof(float);
}

static KVBlock kv_block_view(void *buf, int B, int NH, int T, int HS) {
    size_t n = (size_t)B * NH * T * HS;
    KVBlock blk;
    blk.k = (float *)buf;
    blk.v = blk.k + n;
    blk.index = (int *)(blk.v + n);
    blk.document = blk.index + (size_t)B * T;
    return blk;
}

// What stays on this rank while the K/V blocks come by, head-major.
typedef struct {
    int B, T, C, NH;     // T = local tokens per row
    const int *index;    // (B, T) global index of each query: this step's layout
    const int *document; // (B, T) document id of each query
    float *q;            // (B, NH, T, HS)
    float *o;            // (B, NH, T, HS) output
    float *dout;         // (B, NH, T, HS) output gradient
    float *dq;           // (B, NH, T, HS)
    float *drow;         // (B, NH, T) D = rowsum(dO * O)
    float *scores;       // (B, NH, T) one row of scores per (b, h), reused
} AttentionQueries;

// mallocCheck that adds the size to *bytes: each algorithm reports what it holds
static void *attention_alloc(size_t *bytes, size_t size) {
    *bytes += size;
    return mallocCheck(size);
}

// bytes attention_queries_init allocates (the run's memory estimate adds them up
// before anything is allocated; cp/attention.h checks that init matches)
static size_t attention_queries_bytes(int B, int T, int C, int NH) {
    return 4 * (size_t)B * T * C * sizeof(float) + 2 * (size_t)B * NH * T * sizeof(float);
}

static void attention_queries_init(AttentionQueries *aq, int B, int T, int C, int NH, size_t *bytes) {
    if (C % NH != 0) { fatal("channels %d are not divisible by heads %d", C, NH); }
    memset(aq, 0, sizeof(*aq));
    aq->B = B; aq->T = T; aq->C = C; aq->NH = NH;
    size_t n = (size_t)B * T * C; // = B * NH * T * HS
    aq->q = (float *)attention_alloc(bytes, n * sizeof(float));
    aq->o = (float *)attention_alloc(bytes, n * sizeof(float));
    aq->dout = (float *)attention_alloc(bytes, n * sizeof(float));
    aq->dq = (float *)attention_alloc(bytes, n * sizeof(float));
    aq->drow = (float *)attention_alloc(bytes, (size_t)B * NH * T * sizeof(float));
    aq->scores = (float *)attention_alloc(bytes, (size_t)B * NH * T * sizeof(float));
}

static void attention_queries_free(AttentionQueries *aq) {
    free(aq->q); free(aq->o); free(aq->dout); free(aq->dq); free(aq->drow); free(aq->scores);
}

// (B, T, C) token-major <-> (B, NH, T, HS) head-major; `stride` is the row length
// of the token-major tensor (3C for the qkv tensor, C for the attention output)
static void heads_from_tokens(float *heads, const float *tokens, int stride, int B, int T, int C, int NH) {
    int HS = C / NH;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *src = tokens + ((size_t)b * T + t) * stride;
            for (int h = 0; h < NH; h++) {
                memcpy(heads + (((size_t)b * NH + h) * T + t) * HS, src + h * HS, HS * sizeof(float));
            }
        }
    }
}

static void tokens_from_heads(float *tokens, const float *heads, int stride, int B, int T, int C, int NH) {
    int HS = C / NH;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *dst = tokens + ((size_t)b * T + t) * stride;
            for (int h = 0; h < NH; h++) {
                memcpy(dst + h * HS, heads + (((size_t)b * NH + h) * T + t) * HS, HS * sizeof(float));
            }
        }
    }
}

static float dot(const float *a, const float *b, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }
    return sum;
}

// Fills the queries and this rank's own K/V block from the qkv activation and the layout.
// qkv: (B, T, 3C), q and k and v at offsets 0, C, 2C of each token
static void attention_load(AttentionQueries *aq, const ShardLayout *lay, KVBlock *own, const float *qkv) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH;
    if (lay == NULL || lay->B != B || lay->local_len != T) {
        fatal("attention: the layout does not match the buffers (B %d, T %d)", B, T);
    }
    aq->index = lay->global_index;
    aq->document = lay->document;
    heads_from_tokens(aq->q, qkv, 3 * C, B, T, C, NH);
    heads_from_tokens(own->k, qkv + C, 3 * C, B, T, C, NH);
    heads_from_tokens(own->v, qkv + 2 * C, 3 * C, B, T, C, NH);
    memcpy(own->index, lay->global_index, (size_t)B * T * sizeof(int));
    memcpy(own->document, lay->document, (size_t)B * T * sizeof(int));
}

// attention_load, and the empty state: no block seen yet.   lse: (B, NH, T)
static void attention_forward_begin(AttentionQueries *aq, const ShardLayout *lay, KVBlock *own, const float *qkv,
                                    float *lse) {
    attention_load(aq, lay, own, qkv);
    size_t rows = (size_t)aq->B * aq->NH * aq->T;
    for (size_t i = 0; i < rows; i++) { lse[i] = -INFINITY; }
}

// out: (B, T, C), once every block has been merged
static void attention_forward_end(AttentionQueries *aq, float *out) {
    tokens_from_heads(out, aq->o, aq->C, aq->B, aq->T, aq->C, aq->NH);
}

// attention_load, and what backward needs of the forward's result: dO, O, D; dQ = 0.
// dout, out: (B, T, C)
static void attention_backward_begin(AttentionQueries *aq, const ShardLayout *lay, KVBlock *own, const float *qkv,
                                     const float *dout, const float *out) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH, HS = C / NH;
    attention_load(aq, lay, own, qkv);
    heads_from_tokens(aq->dout, dout, C, B, T, C, NH);
    heads_from_tokens(aq->o, out, C, B, T, C, NH);
    size_t rows = (size_t)B * NH * T;
    for (size_t r = 0; r < rows; r++) {
        aq->drow[r] = dot(aq->dout + r * HS, aq->o + r * HS, HS);
    }
    memset(aq->dq, 0, rows * HS * sizeof(float));
}

// dqkv (B, T, 3C) <- dQ, and the complete dK | dV of this rank's own block
// dkv: 2 x (B, NH, T, HS)
static void attention_backward_end(AttentionQueries *aq, float *dqkv, const float *dkv) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH;
    size_t n = (size_t)B * T * C;
    tokens_from_heads(dqkv, aq->dq, 3 * C, B, T, C, NH);
    tokens_from_heads(dqkv + C, dkv, 3 * C, B, T, C, NH);
    tokens_from_heads(dqkv + 2 * C, dkv + n, 3 * C, B, T, C, NH);
}

// One (batch row b, head h) of the local queries against one K/V block: which of
// their sub-block pairs meet, the tokens' coordinates and the head's rows.
typedef struct {
    BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS]; // [query sub-block][key sub-block]
    SubBlock qs[RING_SUBBLOCKS], ks[RING_SUBBLOCKS];
    const int *qi, *qd;     // (T) global index and document of the queries
    const int *ki, *kd;     // (T) the same of the keys
    size_t bh;              // b * NH + h
    const float *q, *k, *v; // (T, HS) each
} HeadBlock;

static HeadBlock head_block(const AttentionQueries *aq, const KVBlock *blk, int b, int h) {
    int T = aq->T, HS = aq->C / aq->NH;
    HeadBlock hb;
    hb.qi = aq->index + (size_t)b * T;
    hb.qd = aq->document + (size_t)b * T;
    hb.ki = blk->index + (size_t)b * T;
    hb.kd = blk->document + (size_t)b * T;
    block_visibility_table(hb.qi, hb.qd, hb.ki, hb.kd, T, hb.vis, hb.qs, hb.ks);
    hb.bh = (size_t)b * aq->NH + h;
    hb.q = aq->q + hb.bh * T * HS;
    hb.k = blk->k + hb.bh * T * HS;
    hb.v = blk->v + hb.bh * T * HS;
    return hb;
}

// whether query i (of query sub-block a) sees key j (of key sub-block c)
static int head_block_sees(const HeadBlock *hb, int a, int c, int i, int j) {
    return hb->vis[a][c] == BLOCK_FULL ||
           (hb->vis[a][c] == BLOCK_MASKED && pair_visible(hb->qi[i], hb->qd[i], hb->ki[j], hb->kd[j]));
}

// Merges one block's result for a query row into the row's running (o, lse): the
// block's o_blk / sum with lse_blk = log(sum) + its max score.   o, o_blk: (HS)
static void merge_block_row(float *o, float *lse, const float *o_blk, float sum, float lse_blk, int HS) {
    float lse_old = *lse;
    if (lse_old == -INFINITY) {
        // the first block this query sees: take it as is
        for (int d = 0; d < HS; d++) { o[d] = o_blk[d] / sum; }
        *lse = lse_blk;
        return;
    }
    float lse_new = fmaxf(lse_old, lse_blk) + log1pf(expf(-fabsf(lse_old - lse_blk)));
    float w_old = expf(lse_old - lse_new);
    float w_blk = expf(lse_blk - lse_new) / sum;
    for (int d = 0; d < HS; d++) { o[d] = o[d] * w_old + o_blk[d] * w_blk; }
    *lse = lse_new;
}

// The plain loops: attends the local queries to one K/V block, one query row at a
// time, and merges into (o, lse).   o: (B, NH, T, HS)   lse: (B, NH, T)
static void attend_block_forward_loops(AttentionQueries *aq, const KVBlock *blk, float *lse) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH, HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            HeadBlock hb = head_block(aq, blk, b, h);
            float *o = aq->o + hb.bh * T * HS;
            float *row_lse = lse + hb.bh * T;
            float *score = aq->scores + hb.bh * T; // score[j] for the keys j of this block
            for (int a = 0; a < RING_SUBBLOCKS; a++) {
                for (int i = hb.qs[a].start; i < hb.qs[a].end; i++) {
                    // scores of the visible keys, and their max
                    float maxval = -INFINITY;
                    int any = 0;
                    for (int c = 0; c < RING_SUBBLOCKS; c++) {
                        if (hb.vis[a][c] == BLOCK_SKIP) { continue; }
                        for (int j = hb.ks[c].start; j < hb.ks[c].end; j++) {
                            if (!head_block_sees(&hb, a, c, i, j)) {
                                score[j] = -INFINITY;
                                continue;
                            }
                            score[j] = dot(hb.q + (size_t)i * HS, hb.k + (size_t)j * HS, HS) * scale;
                            if (score[j] > maxval) { maxval = score[j]; }
                            any = 1;
                        }
                    }
                    if (!any) { continue; } // nothing of this block is visible to query i
                    // the block's own softmax: o_blk and lse_blk
                    float sum = 0.0f;
                    float o_blk[HS];
                    memset(o_blk, 0, sizeof(o_blk));
                    for (int c = 0; c < RING_SUBBLOCKS; c++) {
                        if (hb.vis[a][c] == BLOCK_SKIP) { continue; }
                        for (int j = hb.ks[c].start; j < hb.ks[c].end; j++) {
                            if (score[j] == -INFINITY) { continue; }
                            float p = expf(score[j] - maxval);
                            sum += p;
                            const float *vj = hb.v + (size_t)j * HS;
                            for (int d = 0; d < HS; d++) { o_blk[d] += p * vj[d]; }
                        }
                    }
                    merge_block_row(o + (size_t)i * HS, &row_lse[i], o_blk, sum, maxval + logf(sum), HS);
                }
            }
        }
    }
}

// The plain loops: adds one block's share to dQ and to the block's dK | dV.
// dkv: 2 x (B, NH, T, HS), zeroed by the caller
static void attend_block_backward_loops(AttentionQueries *aq, const KVBlock *blk, const float *lse, float *dkv) {
    int B = aq->B, T = aq->T, C = aq->C, NH = aq->NH, HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t n = (size_t)B * NH * T * HS;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            HeadBlock hb = head_block(aq, blk, b, h);
            size_t bh = hb.bh;
            const float *dout = aq->dout + bh * T * HS;
            const float *row_lse = lse + bh * T;
            const float *drow = aq->drow + bh * T;
            float *dq = aq->dq + bh * T * HS;
            float *dk = dkv + bh * T * HS;
            float *dv = dkv + n + bh * T * HS;
            for (int a = 0; a < RING_SUBBLOCKS; a++) {
                for (int i = hb.qs[a].start; i < hb.qs[a].end; i++) {
                    const float *qrow = hb.q + (size_t)i * HS;
                    const float *dorow = dout + (size_t)i * HS;
                    float *dqrow = dq + (size_t)i * HS;
                    for (int c = 0; c < RING_SUBBLOCKS; c++) {
                        if (hb.vis[a][c] == BLOCK_SKIP) { continue; }
                        for (int j = hb.ks[c].start; j < hb.ks[c].end; j++) {
                            if (!head_block_sees(&hb, a, c, i, j)) { continue; }
                            const float *kj = hb.k + (size_t)j * HS;
                            const float *vj = hb.v + (size_t)j * HS;
                            float p = expf(dot(qrow, kj, HS) * scale - row_lse[i]);
                            float ds = p * (dot(dorow, vj, HS) - drow[i]) * scale;
                            float *dkj = dk + (size_t)j * HS;
                            float *dvj = dv + (size_t)j * HS;
                            for (int d = 0; d < HS; d++) {
                                dvj[d] += p * dorow[d];
                                dqrow[d] += ds * kj[d];
                                dkj[d] += ds * qrow[d];
                            }
                        }
                    }
                }
            }
        }
    }
}

#ifndef NO_BLAS
// ----------------------------------------------------------------------------
// Tiled block attention (flash-style), the BLAS build's: the same (o, lse) merge
// and the same dQ, dK, dV as the loops above, up to the order of fp32 sums.
//
// Per (b, h) the local queries are cut into tiles of ATTN_TILE_Q rows and the
// block's keys into tiles of ATTN_TILE_K. A tile pair is skipped, fully visible
// (no mask evaluated) or masked, by block_visibility of the two tiles' coordinate
// ranges (the rule of cp/block_mask.h at tile size). Per tile pair, with Q_t, K_t,
// V_t, dO_t the tiles' rows, all products by cblas_sgemm:
//
//   forward (one query tile, over its key tiles, online softmax in fp32)
//     S = scale Q_t K_t^T (-inf where masked),  m' = max(m, rowmax S)
//     P = exp(S - m'),  l = l exp(m - m') + rowsum P,  acc = acc exp(m - m') + P V_t
//     then o_blk = acc / l, lse_blk = m + log l, merged as merge_block_row
//   backward, P recomputed from the saved lse, D = rowsum(dO * O):
//     P = exp(S - lse),  dP = dO_t V_t^T,  dS = P * (dP - D)
//     dQ_t += scale dS K_t                   (per query tile, over its key tiles)
//     dV_t += P^T dO_t,  dK_t += scale dS^T Q_t   (per key tile, over its query tiles;
//                                            there S^T, P^T, dS^T are computed as such)
//
// Only tiles are stored: per thread an S and a dS tile and the running acc, m, l
// of one query tile. The work items are (b, h, tile) for every tile of every row
// and head, handed out dynamically over the OpenMP threads, so that every core is
// busy even when B * NH is smaller than their number; each output row is written
// by one item in a fixed order (no atomics), so the result does not depend on the
// thread count. Inside the parallel loop OpenBLAS's OpenMP build runs each sgemm
// on the calling thread. exp is vec_expf, which vectorises.
//
// The tile sizes are OpenBLAS's: its small-matrix kernels (no packing) take the
// products of these shapes (dev/bench/README.md has the measurements).

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
// the key tiles' backward needs as rows (so that every later product is NN).
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

// P = exp(S - lse) and dS = P * (dP - D) of one tile pair of head bh, dP = dO_t V_t^T:
// what both backward passes need. With `by_keys` both come transposed (rows are
// keys): P^T and dS^T from S^T and dP^T = V_t dO_t^T.
// P, dS: (nq, nk), or (nk, nq) by keys, row stride tile_stride
static void tile_probabilities(float *P, float *dS, const TiledBlock *tb, const TilePair *tp, size_t bh,
                               const float *lse, int by_keys) {
    int T = tb->T, HS = tb->HS, ld = tile_stride(by_keys);
    const AttentionQueries *aq = tb->aq;
    const float *q = aq->q + (bh * T + tp->i0) * HS;
    const float *k = tb->blk->k + (bh * T + tp->j0) * HS;
    const float *v = tb->blk->v + (bh * T + tp->j0) * HS;
    const float *dout = aq->dout + (bh * T + tp->i0) * HS;
    const float *row_lse = lse + bh * T + tp->i0; // (nq) per query
    const float *drow = aq->drow + bh * T + tp->i0;
    tile_scores(P, tp, q, k, HS, tb->scale, by_keys);
    int rows = by_keys ? tp->nk : tp->nq, cols = by_keys ? tp->nq : tp->nk;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, HS,
                1.0f, by_keys ? v : dout, HS, by_keys ? dout : v, HS, 0.0f, dS, ld);
    for (int r = 0; r < rows; r++) {
        float *p = P + r * ld, *ds = dS + r * ld;
        if (by_keys) { // column c is query c
            #pragma omp simd
            for (int c = 0; c < cols; c++) {
                p[c] = vec_expf(p[c] - row_lse[c]);
                ds[c] = p[c] * (ds[c] - drow[c]);
            }
        } else {       // row r is query r
            float lse_r = row_lse[r], d_r = drow[r];
            #pragma omp simd
            for (int c = 0; c < cols; c++) {
                p[c] = vec_expf(p[c] - lse_r);
                ds[c] = p[c] * (ds[c] - d_r);
            }
        }
    }
}

// dQ of one query tile: its key tiles' scale dS K_t, in key order.
// scratch: 2 * ATTN_TILE_Q * ATTN_TILE_K floats
static void tiled_backward_query_tile(const TiledBlock *tb, int b, size_t bh, int qt, const float *lse,
                                      float *scratch) {
    int T = tb->T, HS = tb->HS;
    float *P = scratch, *dS = scratch + ATTN_TILE_Q * ATTN_TILE_K;
    for (int kt = 0; kt < tb->k_tiles; kt++) {
        TilePair tp = tile_pair(tb, b, qt, kt);
        if (tp.vis == BLOCK_SKIP) { continue; }
        tile_probabilities(P, dS, tb, &tp, bh, lse, 0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tp.nq, HS, tp.nk,
                    tb->scale, dS, tile_stride(0), tb->blk->k + (bh * T + tp.j0) * HS, HS,
                    1.0f, tb->aq->dq + (bh * T + tp.i0) * HS, HS);
    }
}

// dK and dV of one key tile: its query tiles' scale dS^T Q_t and P^T dO_t, in query order.
// dk, dv: (B, NH, T, HS)   scratch: 2 * ATTN_TILE_Q * ATTN_TILE_K floats
static void tiled_backward_key_tile(const TiledBlock *tb, int b, size_t bh, int kt, const float *lse,
                                    float *dk, float *dv, float *scratch) {
    int T = tb->T, HS = tb->HS, ld = tile_stride(1);
    float *PT = scratch, *dST = scratch + ATTN_TILE_Q * ATTN_TILE_K;
    for (int qt = 0; qt < tb->q_tiles; qt++) {
        TilePair tp = tile_pair(tb, b, qt, kt);
        if (tp.vis == BLOCK_SKIP) { continue; }
        tile_probabilities(PT, dST, tb, &tp, bh, lse, 1);
        size_t q_rows = (bh * T + tp.i0) * HS, k_rows = (bh * T + tp.j0) * HS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tp.nk, HS, tp.nq,
                    1.0f, PT, ld, tb->aq->dout + q_rows, HS, 1.0f, dv + k_rows, HS);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tp.nk, HS, tp.nq,
                    tb->scale, dST, ld, tb->aq->q + q_rows, HS, 1.0f, dk + k_rows, HS);
    }
}

// Adds one block's share to dQ and to the block's dK | dV, by tiles: one pass over
// the query tiles (dQ), one over the key tiles (dK, dV), each recomputing P.
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
        for (long item = 0; item < bhs * tb.q_tiles; item++) {
            size_t bh = (size_t)(item / tb.q_tiles);
            tiled_backward_query_tile(&tb, (int)(bh / NH), bh, (int)(item % tb.q_tiles), lse, scratch);
        }
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < bhs * tb.k_tiles; item++) {
            size_t bh = (size_t)(item / tb.k_tiles);
            tiled_backward_key_tile(&tb, (int)(bh / NH), bh, (int)(item % tb.k_tiles), lse, dk, dv, scratch);
        }
        free(scratch);
    }
    tiled_block_end(&tb);
}
#endif // NO_BLAS

// ----------------------------------------------------------------------------
// What the two algorithms call: the tiles in the BLAS build, the loops with NO_BLAS.

// o: (B, NH, T, HS)   lse: (B, NH, T)
static void attend_block_forward(AttentionQueries *aq, const KVBlock *blk, float *lse) {
#ifndef NO_BLAS
    attend_block_forward_tiled(aq, blk, lse);
#else
    attend_block_forward_loops(aq, blk, lse);
#endif
}

// dkv: 2 x (B, NH, T, HS), zeroed by the caller
static void attend_block_backward(AttentionQueries *aq, const KVBlock *blk, const float *lse, float *dkv) {
#ifndef NO_BLAS
    attend_block_backward_tiled(aq, blk, lse, dkv);
#else
    attend_block_backward_loops(aq, blk, lse, dkv);
#endif
}

#endif // CP_ATTENTION_BLOCK_H
