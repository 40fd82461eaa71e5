/*
Attention of this rank's queries to one block of keys and values, on the CPU: the
computation every context-parallel attention algorithm repeats once per block it
meets. cp/ring_attention.h passes the blocks around a ring, cp/allgather_attention.h
gathers them all at once, cp/ulysses_attention.h runs the ring over rows of its
groups' tokens. What a block is (KVBlock) and what stays on the rank while the
blocks come by (AttentionQueries) have their own files, cp/kv_block.h and
cp/attention_queries.h. The GPU twins: cp/attention_block.cuh (the kernels),
cp/kv_block.cuh and cp/attention_queries.cuh.

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
#include "attention_queries.h"
#include "block_mask.h"
#include "kv_block.h"
#include "sharder.h"
#include "../llmc/utils.h"

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
