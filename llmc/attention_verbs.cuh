/*
The attention verbs of the GPU model (llmc/attention_verbs.h on device memory),
in the build's storage precision (llmc/precision.cuh): the activations they read
and write are floatX, the log-sum-exp of each query row stays fp32. cp/ supplies
them (cp/attention.cuh: ring, all-gather, Ulysses or their hybrid); the GPU model
only calls them. An algorithm's file writes them out as llmc/attention_verbs.h
says (cp/ring_attention.cuh: ring_attention_cuda_verbs).
*/
#ifndef LLMC_ATTENTION_VERBS_CUH
#define LLMC_ATTENTION_VERBS_CUH

#include "attention_verbs.h"
#include "precision.cuh"

typedef struct {
    void *ctx;
    // out: (B, T, C)   lse: (B, NH, T) log-sum-exp of each query row   qkv: (B, T, 3C)
    void (*forward)(void *ctx, floatX *out, float *lse, const floatX *qkv);
    // dqkv: (B, T, 3C), overwritten   dout, out: (B, T, C)   lse: (B, NH, T)
    void (*backward)(void *ctx, floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out,
                     const float *lse);
} AttentionVerbsCuda;

#endif // LLMC_ATTENTION_VERBS_CUH
