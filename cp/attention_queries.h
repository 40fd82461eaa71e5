/*
What stays on this rank while the K/V blocks come by, on the CPU: the queries
head-major, the output and its log-sum-exp merged block by block, and for the
backward dO, O, D = rowsum(dO * O) and dQ (AttentionQueries); how they are loaded
from the qkv activation with this rank's own K/V block, and written back. Every
CPU algorithm holds one; the block computation (cp/attention_block.h) reads it for
every block it meets. The GPU twin is cp/attention_queries.cuh.
*/
#ifndef CP_ATTENTION_QUERIES_H
#define CP_ATTENTION_QUERIES_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#include "kv_block.h"
#include "sharder.h"
#include "../llmc/utils.h"

// The queries and what they accumulate, head-major.
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

#endif // CP_ATTENTION_QUERIES_H
