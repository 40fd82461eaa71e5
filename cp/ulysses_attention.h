/*
Ulysses attention on the CPU (DeepSpeed-Ulysses), and its two-level form with the
ring (USP; TransformerEngine's a2a+p2p): -ca ulysses and -ca hybrid.

A Ulysses group of U ranks (cp/mesh.h) holds U * T tokens, T per rank, with all
NH heads each. One all-to-all turns that into: every rank holds all U * T tokens
of the group for NH / U heads (rank u: heads [u*NH/U, (u+1)*NH/U)). Attention
never mixes heads, so each rank then attends its heads over the group's whole row,
with masks from the tokens' global coordinates (cp/ulysses_layout.h orders the row
by global index), and one all-to-all sends each token's output back to its owner.

That attention is the ring (cp/ring_attention.h) over the R = cp / U groups: rank
(g, u) passes the K/V blocks of its heads around the ranks (0, u), (1, u), ...,
which hold the same heads of the other groups' tokens. -ca ulysses is U = cp,
R = 1: a ring of one, i.e. the block attention (cp/attention_block.h) over the
whole padded row. -ca hybrid is 1 < U < cp. Every layout and documents work
unchanged: only the indices say which keys a query sees.

Per layer, with per-token sizes in floats and one all-to-all sending (U-1)/U of
what it is given:
    forward   q|k|v (3C) in, output and log-sum-exp (C + NH) back
    backward  q|k|v, output, output gradient and log-sum-exp (5C + NH) in,
              dq|dk|dv (3C) back
plus the ring's messages across the groups at R > 1. The backward sends q|k|v and
the output again because one instance serves every layer and keeps nothing between
the forward and the backward (a Ulysses that kept each layer's head-sharded
q|k|v and output would send dO in and dq|dk|dv back: 4C). At U = cp the messages
do not depend on the sequence's causal structure and their count is U-1 per
exchange, one exchange each way per pass; the ring's is cp-1 dependent steps.

Memory per rank: the all-to-all buffers (2 x (5C + NH) floats per local token),
the group-row tensors (8C + 3NH), and the ring's at (U*T tokens, C/U channels),
which is the same size as a ring at (T, C): O(B * T * C), shrinking as 1/cp.
*/
#ifndef CP_ULYSSES_ATTENTION_H
#define CP_ULYSSES_ATTENTION_H

#include "attention_block.h"
#include "comm.h"
#include "ring_attention.h"
#include "sharder.h"
#include "ulysses_layout.h"
#include "../llmc/attention_verbs.h"
#include "../llmc/utils.h"

typedef struct {
    Comm *group;               // the Ulysses group (U ranks)
    const ShardLayout *layout; // this step's layout: coordinates of the local tokens
    int B, T, C, NH, U;        // T = local tokens per row; buffers fit these sizes
    UlyssesLayout coords;      // the group's row: its tokens' coordinates, and where each one sits
    size_t part_floats;        // floats of one all-to-all part, the largest exchange's
    float *send, *recv;        // all-to-all buffers, U parts each
    float *qkv, *dqkv;         // (B, U*T, 3C/U) the group's row, this rank's heads
    float *out, *dout;         // (B, U*T, C/U)
    float *lse_heads;          // (B, NH/U, U*T) the ring's log-sum-exp
    float *lse_tokens;         // (B, U*T, NH/U) the same, token-major, as it travels
    float *lse_local;          // (B, T, NH) the model's log-sum-exp, token-major
    RingAttention ring;        // over the R groups, at (B, U*T, C/U, NH/U)
    size_t bytes;              // everything init allocated
} UlyssesAttention;

static void ulysses_attention_init(UlyssesAttention *ua, Comm *group, Comm *ring, int B, int T, int C, int NH) {
    memset(ua, 0, sizeof(*ua));
    int U = group->size;
    if (NH % U != 0) { fatal("ulysses: %d heads are not divisible by the Ulysses degree %d", NH, U); }
    ua->group = group;
    ua->B = B; ua->T = T; ua->C = C; ua->NH = NH; ua->U = U;
    ulysses_layout_init(&ua->coords, U, B, T);
    ua->bytes += 5 * (size_t)U * B * T * sizeof(int);
    size_t bt = (size_t)B * T;
    ua->part_floats = bt * (5 * (size_t)C + NH) / U;
    ua->send = (float *)attention_alloc(&ua->bytes, U * ua->part_floats * sizeof(float));
    ua->recv = (float *)attention_alloc(&ua->bytes, U * ua->part_floats * sizeof(float));
    ua->qkv = (float *)attention_alloc(&ua->bytes, bt * 3 * C * sizeof(float));
    ua->dqkv = (float *)attention_alloc(&ua->bytes, bt * 3 * C * sizeof(float));
    ua->out = (float *)attention_alloc(&ua->bytes, bt * C * sizeof(float));
    ua->dout = (float *)attention_alloc(&ua->bytes, bt * C * sizeof(float));
    ua->lse_heads = (float *)attention_alloc(&ua->bytes, bt * NH * sizeof(float));
    ua->lse_tokens = (float *)attention_alloc(&ua->bytes, bt * NH * sizeof(float));
    ua->lse_local = (float *)attention_alloc(&ua->bytes, bt * NH * sizeof(float));
    ring_attention_init(&ua->ring, ring, B, U * T, C / U, NH / U);
    ua->bytes += ua->ring.bytes;
}

static void ulysses_attention_free(UlyssesAttention *ua) {
    float *buffers[] = {ua->send, ua->recv, ua->qkv, ua->dqkv, ua->out, ua->dout,
                        ua->lse_heads, ua->lse_tokens, ua->lse_local};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { free(buffers[i]); }
    ring_attention_free(&ua->ring);
    ulysses_layout_free(&ua->coords);
}

// Collective over the Ulysses group: this step's layout, and the group's row made of it.
static void ulysses_attention_bind(UlyssesAttention *ua, const ShardLayout *layout) {
    ua->layout = layout;
    ulysses_layout_build(&ua->coords, ua->group, layout);
    ua->ring.layout = &ua->coords.layout;
}

// One token-major tensor of an exchange. On this rank: local (B, T, fields * width),
// each field's width channels in U chunks (heads). In the group's row: group
// (B, U*T, fields * width/U), this rank's chunk of every field.
typedef struct {
    float *local;
    float *group;
    int fields, width;
} UlyssesTensor;

static size_t ulysses_token_floats(const UlyssesTensor *x, int n, int U) {
    size_t floats = 0;
    for (int k = 0; k < n; k++) { floats += (size_t)x[k].fields * x[k].width / U; }
    return floats;
}

// local -> group: part j of the message is chunk j of every token's fields, each
// token's (tensor, field) chunks side by side; part i received (from group rank i)
// goes to the slots of rank i's tokens in the group's row.
static void ulysses_to_group(UlyssesAttention *ua, const UlyssesTensor *x, int n) {
    int U = ua->U, B = ua->B, T = ua->T;
    size_t per_token = ulysses_token_floats(x, n, U), part = (size_t)B * T * per_token;
    #pragma omp parallel for collapse(2)
    for (int j = 0; j < U; j++) {
        for (int bt = 0; bt < B * T; bt++) {
            float *dst = ua->send + j * part + bt * per_token;
            for (int k = 0; k < n; k++) {
                int chunk = x[k].width / U;
                const float *src = x[k].local + (size_t)bt * x[k].fields * x[k].width + j * chunk;
                for (int f = 0; f < x[k].fields; f++, dst += chunk) {
                    memcpy(dst, src + (size_t)f * x[k].width, chunk * sizeof(float));
                }
            }
        }
    }
    ua->group->all_to_all(ua->group, ua->send, ua->recv, part * sizeof(float));
    #pragma omp parallel for collapse(2)
    for (int i = 0; i < U; i++) {
        for (int bt = 0; bt < B * T; bt++) {
            int b = bt / T;
            size_t row = (size_t)b * U * T + ua->coords.slot[(size_t)i * B * T + bt];
            const float *src = ua->recv + i * part + bt * per_token;
            for (int k = 0; k < n; k++) {
                size_t len = (size_t)x[k].fields * x[k].width / U;
                memcpy(x[k].group + row * len, src, len * sizeof(float));
                src += len;
            }
        }
    }
}

// group -> local, the mirror: part i carries the slots of rank i's tokens, part j
// received is chunk j of this rank's tokens.
static void ulysses_to_local(UlyssesAttention *ua, const UlyssesTensor *x, int n) {
    int U = ua->U, B = ua->B, T = ua->T;
    size_t per_token = ulysses_token_floats(x, n, U), part = (size_t)B * T * per_token;
    #pragma omp parallel for collapse(2)
    for (int i = 0; i < U; i++) {
        for (int bt = 0; bt < B * T; bt++) {
            int b = bt / T;
            size_t row = (size_t)b * U * T + ua->coords.slot[(size_t)i * B * T + bt];
            float *dst = ua->send + i * part + bt * per_token;
            for (int k = 0; k < n; k++) {
                size_t len = (size_t)x[k].fields * x[k].width / U;
                memcpy(dst, x[k].group + row * len, len * sizeof(float));
                dst += len;
            }
        }
    }
    ua->group->all_to_all(ua->group, ua->send, ua->recv, part * sizeof(float));
    #pragma omp parallel for collapse(2)
    for (int j = 0; j < U; j++) {
        for (int bt = 0; bt < B * T; bt++) {
            const float *src = ua->recv + j * part + bt * per_token;
            for (int k = 0; k < n; k++) {
                int chunk = x[k].width / U;
                float *dst = x[k].local + (size_t)bt * x[k].fields * x[k].width + j * chunk;
                for (int f = 0; f < x[k].fields; f++, src += chunk) {
                    memcpy(dst + (size_t)f * x[k].width, src, chunk * sizeof(float));
                }
            }
        }
    }
}

// out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ulysses_attention_forward(UlyssesAttention *ua, float *out, float *lse, const float *qkv) {
    int B = ua->B, T = ua->T, C = ua->C, NH = ua->NH, U = ua->U, NHu = NH / U;
    UlyssesTensor in[] = {{(float *)qkv, ua->qkv, 3, C}};
    ulysses_to_group(ua, in, 1);
    ring_attention_forward(&ua->ring, ua->out, ua->lse_heads, ua->qkv);
    tokens_from_heads(ua->lse_tokens, ua->lse_heads, NHu, B, U * T, NHu, NHu);
    UlyssesTensor back[] = {{out, ua->out, 1, C}, {ua->lse_local, ua->lse_tokens, 1, NH}};
    ulysses_to_local(ua, back, 2);
    heads_from_tokens(lse, ua->lse_local, NH, B, T, NH, NH);
}

// dqkv: (B, T, 3C) (overwritten)   dout, out: (B, T, C)   lse: (B, NH, T)   qkv: (B, T, 3C)
static void ulysses_attention_backward(UlyssesAttention *ua, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse) {
    int B = ua->B, T = ua->T, C = ua->C, NH = ua->NH, U = ua->U, NHu = NH / U;
    tokens_from_heads(ua->lse_local, lse, NH, B, T, NH, NH);
    UlyssesTensor in[] = {{(float *)qkv, ua->qkv, 3, C}, {(float *)out, ua->out, 1, C},
                          {(float *)dout, ua->dout, 1, C}, {ua->lse_local, ua->lse_tokens, 1, NH}};
    ulysses_to_group(ua, in, 4);
    heads_from_tokens(ua->lse_heads, ua->lse_tokens, NHu, B, U * T, NHu, NHu);
    ring_attention_backward(&ua->ring, ua->dqkv, ua->dout, ua->qkv, ua->out, ua->lse_heads);
    UlyssesTensor back[] = {{dqkv, ua->dqkv, 3, C}};
    ulysses_to_local(ua, back, 1);
}

static void ulysses_attention_forward_verb(void *ctx, float *out, float *lse, const float *qkv) {
    ulysses_attention_forward((UlyssesAttention *)ctx, out, lse, qkv);
}

static void ulysses_attention_backward_verb(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                            const float *out, const float *lse) {
    ulysses_attention_backward((UlyssesAttention *)ctx, dqkv, dout, qkv, out, lse);
}

// the model's attention verbs, computed by Ulysses (and the ring across its groups)
static AttentionVerbs ulysses_attention_verbs(UlyssesAttention *ua) {
    AttentionVerbs verbs = {ua, ulysses_attention_forward_verb, ulysses_attention_backward_verb};
    return verbs;
}

#endif // CP_ULYSSES_ATTENTION_H
