/*
Attention of this rank's queries to one block of keys and values, on the CPU: the
computation every context-parallel attention algorithm repeats once per block it
meets. cp/ring_attention.h passes the blocks around a ring, cp/allgather_attention.h
gathers them all at once, cp/ulysses_attention.h runs the ring over rows of its
groups' tokens. The GPU twin of this file is cp/attention_block.cuh (the kernels),
with cp/attention_queries.cuh and cp/kv_block.cuh (AttentionQueries' and KVBlock's
twins).

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
Every algorithm meets the rank's own block first: every query sees itself, so
after it every row is finite.

Backward recomputes each block's probabilities from the saved lse:
    p_ij = exp(s_ij - lse_i),  D_i = dO_i . O_i
    dV_j += p_ij dO_i,  ds_ij = p_ij (dO_i . v_j - D_i)
    dQ_i += ds_ij k_j / sqrt(HS),  dK_j += ds_ij q_i / sqrt(HS)
dQ accumulates here; the block's dK and dV go to the caller's buffer, since they
belong to the block's owner.

No T x T score matrix is ever stored: the queries' state is O(B * T * C).

This file computes it in plain loops, one query row at a time
(attend_block_*_loops): the definition, and what NO_BLAS=1 runs. The BLAS build
runs the same computation by tiles whose products go to cblas_sgemm
(cp/attention_block_tiled.h, checked against these loops by
test/test_attention_tiles.c); attend_block_forward and attend_block_backward, at
the end, choose between the two.
*/
#ifndef CP_ATTENTION_BLOCK_H
#define CP_ATTENTION_BLOCK_H

#include <math.h>
#include <string.h>
#include "block_mask.h"
#include "sharder.h"
#include "../llmc/utils.h"

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
    const int *index;    // (B, T) global index of each query: this batch's layout
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
#include "attention_block_tiled.h"
#endif

// ----------------------------------------------------------------------------
// What the algorithms call: the tiles (cp/attention_block_tiled.h) in the BLAS
// build, the loops above with NO_BLAS.

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
