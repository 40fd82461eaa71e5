/*
The attention verbs: the one place where tokens meet other tokens, so the one
layer the model does not compute itself. Whoever splits the sequence supplies
them: cp/attention.h, by the algorithm of -ca over the ranks of a CP group (ring,
all-gather, Ulysses or their hybrid); with one rank it is plain causal attention.
T below is the number of tokens this rank holds. llmc/attention_verbs.cuh is the
GPU model's twin, on device memory.

An algorithm's two passes are the verbs themselves: NAME_forward and NAME_backward
take ctx, the algorithm's struct, as their first argument, and NAME_verbs(algorithm)
returns them with it (cp/ring_attention.h: ring_attention_forward,
ring_attention_backward, ring_attention_verbs).
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

#endif // LLMC_ATTENTION_VERBS_H
