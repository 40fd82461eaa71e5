/*
Ring attention on the CPU: causal self-attention over a sequence that is split
across the ranks of a CP group.

Every rank holds the queries, keys and values of its own tokens. The K/V blocks
travel around the ring: at step s = 0..cp-1 rank r holds the block that started on
rank (r - s) mod cp, attends its queries to it (cp/attention_block.h: visibility,
sub-block skipping, the log-sum-exp merge), and passes it on to rank r + 1. After
cp steps every query has met every key. The same code serves every layout and
cp = 1 (one block, no messages).

Backward meets the blocks in the same order. dQ stays here. dK and dV belong to
the block's owner: their accumulators travel with the block, gaining each rank's
share, and one last hop brings them home.

Double buffering: the exchange of the next block is posted before the current
block is computed, so communication overlaps compute. In backward the accumulator
cannot leave before this rank has added to it, so its hop overlaps the next step.

Memory per rank is O(B * T_local * C): two K/V blocks, two dK/dV accumulators and
one step's contribution, besides the queries' state. Per layer each rank sends
(cp - 1) K/V blocks forward, and (cp - 1) K/V blocks plus cp dK/dV accumulators
backward (cp/allgather_attention.h compares the all-gather).
*/
#ifndef CP_RING_ATTENTION_H
#define CP_RING_ATTENTION_H

#include "attention_block.h"
#include "comm.h"
#include "dkv_relay.h"
#include "sharder.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/utils.h"

typedef struct {
    Comm *comm;                // the CP group
    const ShardLayout *layout; // this batch's layout: coordinates of the local tokens
    int B, T, C, NH;           // T = local tokens per row; buffers fit these sizes
    size_t kv_bytes;           // bytes of one travelling K/V block
    size_t dkv_bytes;          // bytes of one travelling dK/dV accumulator
    void *kv_buf[2];           // double-buffered K/V blocks
    float *dkv_buf[2];         // double-buffered dK | dV accumulators, each 2 x (B, NH, T, HS)
    float *dkv_step;           // this step's dK | dV contribution, 2 x (B, NH, T, HS)
    AttentionQueries queries;  // the local queries and their state
    size_t bytes;              // everything init allocated
} RingAttention;

// bytes ring_attention_init allocates: the queries, 2 K/V blocks, 3 dK/dV blocks
static size_t ring_attention_bytes(int B, int T, int C, int NH) {
    return attention_queries_bytes(B, T, C, NH) + 2 * kv_block_bytes(B, T, C) + 3 * dkv_block_bytes(B, T, C);
}

static void ring_attention_init(RingAttention *ra, Comm *comm, int B, int T, int C, int NH) {
    memset(ra, 0, sizeof(*ra));
    attention_queries_init(&ra->queries, B, T, C, NH, &ra->bytes);
    ra->comm = comm;
    ra->B = B; ra->T = T; ra->C = C; ra->NH = NH;
    ra->kv_bytes = kv_block_bytes(B, T, C);
    ra->dkv_bytes = dkv_block_bytes(B, T, C);
    for (int i = 0; i < 2; i++) {
        ra->kv_buf[i] = attention_alloc(&ra->bytes, ra->kv_bytes);
        ra->dkv_buf[i] = (float *)attention_alloc(&ra->bytes, ra->dkv_bytes);
    }
    ra->dkv_step = (float *)attention_alloc(&ra->bytes, ra->dkv_bytes);
}

static void ring_attention_free(RingAttention *ra) {
    for (int i = 0; i < 2; i++) { free(ra->kv_buf[i]); free(ra->dkv_buf[i]); }
    free(ra->dkv_step);
    attention_queries_free(&ra->queries);
}

// This batch's layout: the coordinates of the local tokens, for every layer's passes
// (the GPU twin's bind also prepares its tile visibility).
static void ring_attention_bind(RingAttention *ra, const ShardLayout *layout) { ra->layout = layout; }

// The forward pass, as the verbs call it (llmc/attention_verbs.h): ctx is the RingAttention.
// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ring_attention_forward(void *ctx, float *out, float *lse, const float *qkv) {
    RingAttention *ra = (RingAttention *)ctx;
    int B = ra->B, T = ra->T, NH = ra->NH, HS = ra->C / NH;
    int cp = ra->comm->size;
    KVBlock blk[2] = {kv_block_view(ra->kv_buf[0], B, NH, T, HS), kv_block_view(ra->kv_buf[1], B, NH, T, HS)};
    attention_forward_begin(&ra->queries, ra->layout, &blk[0], qkv, lse);
    // Step s meets the block that started on rank src = (rank - s) mod cp. Which
    // of its pairs the queries see is decided from the tokens' global indices
    // alone, per half of each side (block_visibility, cp/block_mask.h), so no
    // layout is named here. Under round_robin (zigzag), where rank r holds chunks
    // r and 2cp-1-r of the row as the two halves of its block, a step is one of
    // three cases:
    //   src == rank (step 0)  the own block: each query chunk against the same key
    //                         chunk is a causal triangle (masked), chunk 2cp-1-r
    //                         sees all of chunk r, chunk r nothing of 2cp-1-r
    //   src <  rank           key chunk src lies before both query chunks (full,
    //                         no mask), key chunk 2cp-1-src after both (skipped)
    //   src >  rank           both key chunks lie after query chunk r (skipped)
    //                         and before query chunk 2cp-1-r (full)
    // so every rank computes half a block at every step (test_attention_algorithms
    // checks these tables for every layout). To see them, `./cp_layout -t 16 -cp 4
    // -cl round_robin -steps 1` prints one line per (step, rank) from
    // block_visibility_table (q0, q1: query chunks r, 2cp-1-r; k0, k1: key chunks
    // src, 2cp-1-src): at step 0 q0k0 and q1k1 MASKED, q0k1 SKIP, q1k0 FULL; with
    // src < rank q0k0 and q1k0 FULL, q0k1 and q1k1 SKIP; with src > rank q0k0 and
    // q0k1 SKIP, q1k0 and q1k1 FULL. -cl contiguous and -cl striped print theirs.
    int cur = 0;
    for (int step = 0; step < cp; step++) {
        void *exchange = NULL;
        if (step < cp - 1) {
            // post the hand-off of this block before computing on it
            exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        attend_block_forward(&ra->queries, &blk[cur], lse);
        if (exchange) {
            ra->comm->ring_wait(ra->comm, exchange);
            cur = 1 - cur;
        }
    }
    attention_forward_end(&ra->queries, out);
}

// the relay's sum on the host (cp/dkv_relay.h)
static void dkv_add_host(void *acc, const void *step, size_t bytes, int first) {
    if (first) {
        memcpy(acc, step, bytes);
        return;
    }
    float *a = (float *)acc;
    const float *d = (const float *)step;
    for (size_t i = 0; i < bytes / sizeof(float); i++) { a[i] += d[i]; }
}

// The backward pass, as the verbs call it: ctx as the forward's.
// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ring_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse) {
    RingAttention *ra = (RingAttention *)ctx;
    int B = ra->B, T = ra->T, NH = ra->NH, HS = ra->C / NH;
    int cp = ra->comm->size;
    KVBlock blk[2] = {kv_block_view(ra->kv_buf[0], B, NH, T, HS), kv_block_view(ra->kv_buf[1], B, NH, T, HS)};
    attention_backward_begin(&ra->queries, ra->layout, &blk[0], qkv, dout, out);
    int cur = 0; // K/V buffer in use
    DkvRelay relay = dkv_relay_start(ra->comm, ra->dkv_buf[0], ra->dkv_buf[1], ra->dkv_bytes, dkv_add_host);
    for (int step = 0; step < cp; step++) {
        void *kv_exchange = NULL;
        if (step < cp - 1) {
            kv_exchange = ra->comm->ring_start(ra->comm, ra->kv_buf[cur], ra->kv_buf[1 - cur], ra->kv_bytes);
        }
        memset(ra->dkv_step, 0, ra->dkv_bytes);
        attend_block_backward(&ra->queries, &blk[cur], lse, ra->dkv_step);
        dkv_relay_step(&relay, ra->dkv_step);
        if (kv_exchange) {
            ra->comm->ring_wait(ra->comm, kv_exchange);
            cur = 1 - cur;
        }
    }
    attention_backward_end(&ra->queries, dqkv, (const float *)dkv_relay_finish(&relay));
}

// the model's attention verbs, computed by this ring
static AttentionVerbs ring_attention_verbs(RingAttention *ra) {
    AttentionVerbs verbs = {ra, ring_attention_forward, ring_attention_backward};
    return verbs;
}

#endif // CP_RING_ATTENTION_H
