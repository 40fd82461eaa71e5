/*
A K/V block on the CPU: the keys and values of one rank's T local tokens with their
global coordinates, as the attention algorithms pass it around (the ring), gather
it (all-gather) or hand it to the block computation (cp/attention_block.h). The
coordinates travel with the block, so that the rank it reaches knows which of its
pairs are visible (cp/block_mask.h) whatever the layout. The GPU twin is
cp/kv_block.cuh.
*/
#ifndef CP_KV_BLOCK_H
#define CP_KV_BLOCK_H

#include <stddef.h>

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

#endif // CP_KV_BLOCK_H
