/*
The attention verbs: the one place where tokens meet other tokens, so the one
layer the model does not compute itself. Whoever splits the sequence supplies
them: cp/attention.h, by the algorithm of -ca over the ranks of a CP group (ring,
all-gather, Ulysses or their hybrid); with one rank it is plain causal attention.
T below is the number of tokens this rank holds. llmc/attention_verbs.cuh is the
GPU model's twin, on device memory.
*/
#ifndef LLMC_ATTENTION_VERBS_H
#define LLMC_ATTENTION_VERBS_H

typedef struct {
    void *ctx;
    // out: (B, T, C)   lse: (B, NH, T) log-sum-exp of each query row   qkv: (B, T, 3C)
    void (*forward)(void *ctx, float *out, float *lse, const float *qkv);
    // dqkv: (B, T, 3C), overwritten   dout, out: (B, T, C)   lse: (B, NH, T)
    void (*backward)(void *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                     const float *lse);
} AttentionVerbs;

// Defines NAME_verbs(ALGORITHM *a): the verbs (of type VERBS, on activations of
// type FLOAT) that call NAME_forward(a, out, lse, qkv) and NAME_backward(a, dqkv,
// dout, qkv, out, lse), the algorithm's two passes; ctx is the algorithm. The
// casts from ctx are the same for every algorithm, CPU (AttentionVerbs, float)
// and GPU (AttentionVerbsCuda, floatX), so they are written here once.
#define ATTENTION_VERBS_OF(NAME, ALGORITHM, VERBS, FLOAT)                                                     \
    static void NAME##_forward_verb(void *ctx, FLOAT *out, float *lse, const FLOAT *qkv) {                   \
        NAME##_forward((ALGORITHM *)ctx, out, lse, qkv);                                                      \
    }                                                                                                         \
    static void NAME##_backward_verb(void *ctx, FLOAT *dqkv, const FLOAT *dout, const FLOAT *qkv,             \
                                     const FLOAT *out, const float *lse) {                                    \
        NAME##_backward((ALGORITHM *)ctx, dqkv, dout, qkv, out, lse);                                         \
    }                                                                                                         \
    static VERBS NAME##_verbs(ALGORITHM *algorithm) {                                                         \
        VERBS verbs = {algorithm, NAME##_forward_verb, NAME##_backward_verb};                                 \
        return verbs;                                                                                         \
    }

#endif // LLMC_ATTENTION_VERBS_H
