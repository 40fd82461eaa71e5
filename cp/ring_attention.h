/*
Ring attention on the CPU: causal self-attention over a sequence that is split
across the ranks of a CP group.

Every rank holds the queries, keys and values of its own tokens. The K/V blocks
travel around the ring: at step s = 0..cp-1 rank r holds the block that started on
rank (r - s) mod cp, attends its queries to it, and passes it on to rank r + 1.
After cp steps every query has met every key. Which pairs are visible comes from
the tokens' global coordinates only (cp/block_mask.h), so the same code serves
every layout and cp = 1 (one block, no messages).

Forward, per query row i, merged block by block (fp32, stable log-sum-exp form):
    s_ij = q_i . k_j / sqrt(HS)  for visible j of the block
    lse_blk = m + log(sum_j exp(s_ij - m)),  o_blk = sum_j exp(s_ij - lse_blk) v_j
    lse_new = max(lse, lse_blk) + log1p(exp(-|lse - lse_blk|))
    o = o * exp(lse - lse_new) + o_blk * exp(lse_blk - lse_new)
The state starts empty (lse = -inf) and takes the diagonal block as is: every
query sees itself, so after step 0 every row is finite.

Backward recomputes each block's probabilities from the saved lse:
    p_ij = exp(s_ij - lse_i),  D_i = dO_i . O_i
    dV_j += p_ij dO_i,  ds_ij = p_ij (dO_i . v_j - D_i)
    dQ_i += ds_ij k_j / sqrt(HS),  dK_j += ds_ij q_i / sqrt(HS)
dQ stays here. dK and dV belong to the block's owner: their accumulators travel
with the block, gaining each rank's share, and one last hop brings them home.

Double buffering: the exchange of the next block is posted before the current
block is computed, so communication overlaps compute. In backward the accumulator
cannot leave before this rank has added to it, so its hop overlaps the next step.

Memory per rank is O(B * T_local * C): no T x T score matrix is ever stored.
*/
#ifndef CP_RING_ATTENTION_H
#define CP_RING_ATTENTION_H

#include <math.h>
#include "comm.h"
#include "block_mask.h"
#include "sharder.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/utils.h"

// One block as it travels: one buffer, so that one message carries it.
//   k, v:      (B, NH, T, HS)
//   index:     (B, T)  global index of each token in its padded row
//   document:  (B, T)  document id of each token
typedef struct {
    float *k;
    float *v;
    int *index;
    int *document;
} KVBlock;

typedef struct {
    Comm *comm;               // the CP group
    const ShardLayout *layout; // this step's layout: coordinates of the local tokens
    int B, T, C, NH;          // T = local tokens per row; buffers fit these sizes
    size_t kv_bytes;          // bytes of one travelling K/V block
    size_t dkv_bytes;         // bytes of one travelling dK/dV accumulator
    void *kv_buf[2];          // double-buffered K/V blocks
    float *dkv_buf[2];        // double-buffered dK | dV accumulators, each 2 x (B, NH, T, HS)
    float *dkv_step;          // this step's dK | dV contribution, 2 x (B, NH, T, HS)
    float *q;                 // (B, NH, T, HS)
    float *o;                 // (B, NH, T, HS) output, head-major
    float *dout;              // (B, NH, T, HS) output gradient, head-major
    float *dq;                // (B, NH, T, HS)
    float *drow;              // (B, NH, T) D = rowsum(dO * O)
    float *scores;            // (B, NH, T) one row of scores per (b, h), reused
} RingAttention;

static KVBlock kv_block_view(void *buf, int B, int NH, int T, int HS) {
    size_t n = (size_t)B * NH * T * HS;
    KVBlock blk;
    blk.k = (float *)buf;
    blk.v = blk.k + n;
    blk.index = (int *)(blk.v + n);
    blk.document = blk.index + (size_t)B * T;
    return blk;
}

static void ring_attention_init(RingAttention *ra, Comm *comm, int B, int T, int C, int NH) {
    if (C % NH != 0) { fatal("channels %d are not divisible by heads %d", C, NH); }
    memset(ra, 0, sizeof(*ra));
    ra->comm = comm;
    ra->B = B; ra->T = T; ra->C = C; ra->NH = NH;
    size_t n = (size_t)B * T * C; // = B * NH * T * HS
    ra->kv_bytes = 2 * n * sizeof(float) + 2 * (size_t)B * T * sizeof(int);
    ra->dkv_bytes = 2 * n * sizeof(float);
    for (int i = 0; i < 2; i++) {
        ra->kv_buf[i] = mallocCheck(ra->kv_bytes);
        ra->dkv_buf[i] = (float *)mallocCheck(ra->dkv_bytes);
    }
    ra->dkv_step = (float *)mallocCheck(ra->dkv_bytes);
    ra->q = (float *)mallocCheck(n * sizeof(float));
    ra->o = (float *)mallocCheck(n * sizeof(float));
    ra->dout = (float *)mallocCheck(n * sizeof(float));
    ra->dq = (float *)mallocCheck(n * sizeof(float));
    ra->drow = (float *)mallocCheck((size_t)B * NH * T * sizeof(float));
    ra->scores = (float *)mallocCheck((size_t)B * NH * T * sizeof(float));
}

static void ring_attention_free(RingAttention *ra) {
    for (int i = 0; i < 2; i++) { free(ra->kv_buf[i]); free(ra->dkv_buf[i]); }
    free(ra->dkv_step); free(ra->q); free(ra->o); free(ra->dout); free(ra->dq);
    free(ra->drow); free(ra->scores);
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

// Fills the first K/V block (this rank's own) from the qkv activation and the layout.
// qkv: (B, T, 3C), q and k and v at offsets 0, C, 2C of each token
static void ring_attention_load(RingAttention *ra, KVBlock *own, const float *qkv) {
    int B = ra->B, T = ra->T, C = ra->C, NH = ra->NH;
    heads_from_tokens(ra->q, qkv, 3 * C, B, T, C, NH);
    heads_from_tokens(own->k, qkv + C, 3 * C, B, T, C, NH);
    heads_from_tokens(own->v, qkv + 2 * C, 3 * C, B, T, C, NH);
    memcpy(own->index, ra->layout->global_index, (size_t)B * T * sizeof(int));
    memcpy(own->document, ra->layout->document, (size_t)B * T * sizeof(int));
}

static float dot(const float *a, const float *b, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }
    return sum;
}

// Attends the local queries to one K/V block and merges into (o, lse).
// o: (B, NH, T, HS)   lse: (B, NH, T)
static void attend_block_forward(RingAttention *ra, const KVBlock *blk, float *lse) {
    int B = ra->B, T = ra->T, C = ra->C, NH = ra->NH, HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    const int *q_index = ra->layout->global_index;
    const int *q_doc = ra->layout->document;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS];
            SubBlock qs[RING_SUBBLOCKS], ks[RING_SUBBLOCKS];
            const int *qi = q_index + (size_t)b * T, *qd = q_doc + (size_t)b * T;
            const int *ki = blk->index + (size_t)b * T, *kd = blk->document + (size_t)b * T;
            block_visibility_table(qi, qd, ki, kd, T, vis, qs, ks);
            size_t bh = (size_t)b * NH + h;
            const float *q = ra->q + bh * T * HS;
            const float *k = blk->k + bh * T * HS;
            const float *v = blk->v + bh * T * HS;
            float *o = ra->o + bh * T * HS;
            float *row_lse = lse + bh * T;
            float *score = ra->scores + bh * T; // score[j] for the keys j of this block
            for (int a = 0; a < RING_SUBBLOCKS; a++) {
                for (int i = qs[a].start; i < qs[a].end; i++) {
                    // scores of the visible keys, and their max
                    float maxval = -INFINITY;
                    int any = 0;
                    for (int c = 0; c < RING_SUBBLOCKS; c++) {
                        if (vis[a][c] == BLOCK_SKIP) { continue; }
                        for (int j = ks[c].start; j < ks[c].end; j++) {
                            if (vis[a][c] == BLOCK_MASKED && !pair_visible(qi[i], qd[i], ki[j], kd[j])) {
                                score[j] = -INFINITY;
                                continue;
                            }
                            score[j] = dot(q + (size_t)i * HS, k + (size_t)j * HS, HS) * scale;
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
                        if (vis[a][c] == BLOCK_SKIP) { continue; }
                        for (int j = ks[c].start; j < ks[c].end; j++) {
                            if (score[j] == -INFINITY) { continue; }
                            float p = expf(score[j] - maxval);
                            sum += p;
                            const float *vj = v + (size_t)j * HS;
                            for (int d = 0; d < HS; d++) { o_blk[d] += p * vj[d]; }
                        }
                    }
                    float lse_blk = maxval + logf(sum);
                    float *oi = o + (size_t)i * HS;
                    float lse_old = row_lse[i];
                    if (lse_old == -INFINITY) {
                        // the first block this query sees: take it as is
                        for (int d = 0; d < HS; d++) { oi[d] = o_blk[d] / sum; }
                        row_lse[i] = lse_blk;
                    } else {
                        float lse_new = fmaxf(lse_old, lse_blk) + log1pf(expf(-fabsf(lse_old - lse_blk)));
                        float w_old = expf(lse_old - lse_new);
                        float w_blk = expf(lse_blk - lse_new) / sum;
                        for (int d = 0; d < HS; d++) { oi[d] = oi[d] * w_old + o_blk[d] * w_blk; }
                        row_lse[i] = lse_new;
                    }
                }
            }
        }
    }
}

// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ring_attention_forward(RingAttention *ra, float *out, float *lse, const float *qkv) {
    int B = ra->B, T = ra->T, C = ra->C, NH = ra->NH, HS = C / NH;
    int cp = ra->comm->size;
    KVBlock blk[2] = {kv_block_view(ra->kv_buf[0], B, NH, T, HS), kv_block_view(ra->kv_buf[1], B, NH, T, HS)};
    ring_attention_load(ra, &blk[0], qkv);
    size_t rows = (size_t)B * NH * T;
    for (size_t i = 0; i < rows; i++) { lse[i] = -INFINITY; }
    int cur = 0;
    for (int step = 0; step < cp; step++) {
        void *exchange = NULL;
        if (step < cp - 1) {
            // post the hand-off of this block before computing on it
            exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        attend_block_forward(ra, &blk[cur], lse);
        if (exchange) {
            ra->comm->ring_wait(ra->comm, exchange);
            cur = 1 - cur;
        }
    }
    tokens_from_heads(out, ra->o, C, B, T, C, NH);
}

// Adds one block's share to dQ and to the block's dK | dV contribution.
// dkv: 2 x (B, NH, T, HS), zeroed by the caller
static void attend_block_backward(RingAttention *ra, const KVBlock *blk, const float *lse, float *dkv) {
    int B = ra->B, T = ra->T, C = ra->C, NH = ra->NH, HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    const int *q_index = ra->layout->global_index;
    const int *q_doc = ra->layout->document;
    size_t n = (size_t)B * NH * T * HS;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS];
            SubBlock qs[RING_SUBBLOCKS], ks[RING_SUBBLOCKS];
            const int *qi = q_index + (size_t)b * T, *qd = q_doc + (size_t)b * T;
            const int *ki = blk->index + (size_t)b * T, *kd = blk->document + (size_t)b * T;
            block_visibility_table(qi, qd, ki, kd, T, vis, qs, ks);
            size_t bh = (size_t)b * NH + h;
            const float *q = ra->q + bh * T * HS;
            const float *k = blk->k + bh * T * HS;
            const float *v = blk->v + bh * T * HS;
            const float *dout = ra->dout + bh * T * HS;
            const float *row_lse = lse + bh * T;
            const float *drow = ra->drow + bh * T;
            float *dq = ra->dq + bh * T * HS;
            float *dk = dkv + bh * T * HS;
            float *dv = dkv + n + bh * T * HS;
            for (int a = 0; a < RING_SUBBLOCKS; a++) {
                for (int i = qs[a].start; i < qs[a].end; i++) {
                    const float *qrow = q + (size_t)i * HS;
                    const float *dorow = dout + (size_t)i * HS;
                    float *dqrow = dq + (size_t)i * HS;
                    for (int c = 0; c < RING_SUBBLOCKS; c++) {
                        if (vis[a][c] == BLOCK_SKIP) { continue; }
                        for (int j = ks[c].start; j < ks[c].end; j++) {
                            if (vis[a][c] == BLOCK_MASKED && !pair_visible(qi[i], qd[i], ki[j], kd[j])) { continue; }
                            const float *kj = k + (size_t)j * HS;
                            const float *vj = v + (size_t)j * HS;
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

// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ring_attention_backward(RingAttention *ra, float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse) {
    int B = ra->B, T = ra->T, C = ra->C, NH = ra->NH, HS = C / NH;
    int cp = ra->comm->size;
    size_t n = (size_t)B * NH * T * HS;
    KVBlock blk[2] = {kv_block_view(ra->kv_buf[0], B, NH, T, HS), kv_block_view(ra->kv_buf[1], B, NH, T, HS)};
    ring_attention_load(ra, &blk[0], qkv);
    heads_from_tokens(ra->dout, dout, C, B, T, C, NH);
    heads_from_tokens(ra->o, out, C, B, T, C, NH);
    size_t rows = (size_t)B * NH * T;
    for (size_t r = 0; r < rows; r++) {
        ra->drow[r] = dot(ra->dout + r * HS, ra->o + r * HS, HS);
    }
    memset(ra->dq, 0, n * sizeof(float));
    int cur = 0;            // K/V buffer in use
    int acc = 0;            // accumulator buffer that belongs to the current block
    void *dkv_exchange = NULL;
    for (int step = 0; step < cp; step++) {
        void *kv_exchange = NULL;
        if (step < cp - 1) {
            kv_exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        memset(ra->dkv_step, 0, ra->dkv_bytes);
        attend_block_backward(ra, &blk[cur], lse, ra->dkv_step);
        if (dkv_exchange) {
            // the accumulator of this block, from the rank that held it last step
            ra->comm->ring_wait(ra->comm, dkv_exchange);
            for (size_t i = 0; i < 2 * n; i++) { ra->dkv_buf[acc][i] += ra->dkv_step[i]; }
        } else {
            memcpy(ra->dkv_buf[acc], ra->dkv_step, ra->dkv_bytes);
        }
        // pass it on: to the next holder of this block, or home after the last step
        dkv_exchange = ra->comm->ring_start(ra->comm, ra->dkv_buf[acc], ra->dkv_buf[1 - acc], ra->dkv_bytes);
        acc = 1 - acc;
        if (kv_exchange) {
            ra->comm->ring_wait(ra->comm, kv_exchange);
            cur = 1 - cur;
        }
    }
    ra->comm->ring_wait(ra->comm, dkv_exchange);
    // dkv_buf[acc] now holds the complete dK | dV of this rank's own block
    tokens_from_heads(dqkv, ra->dq, 3 * C, B, T, C, NH);
    tokens_from_heads(dqkv + C, ra->dkv_buf[acc], 3 * C, B, T, C, NH);
    tokens_from_heads(dqkv + 2 * C, ra->dkv_buf[acc] + n, 3 * C, B, T, C, NH);
}

static void ring_attention_forward_verb(void *ctx, float *out, float *lse, const float *qkv) {
    ring_attention_forward((RingAttention *)ctx, out, lse, qkv);
}

static void ring_attention_backward_verb(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse) {
    ring_attention_backward((RingAttention *)ctx, dqkv, dout, qkv, out, lse);
}

// the model's attention verbs, computed by this ring
static AttentionVerbs ring_attention_verbs(RingAttention *ra) {
    AttentionVerbs verbs = {ra, ring_attention_forward_verb, ring_attention_backward_verb};
    return verbs;
}

#endif // CP_RING_ATTENTION_H
