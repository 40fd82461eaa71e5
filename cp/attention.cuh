/*
The attention of a run on the GPU: cp/attention.h with the CUDA ring and
all-gather attention (cp/ring_attention.cuh, cp/allgather_attention.cuh).
*/
#ifndef CP_ATTENTION_CUH
#define CP_ATTENTION_CUH

#include "allgather_attention.cuh"
#include "attention_kind.h"
#include "ring_attention.cuh"

typedef struct {
    CpAttentionKind kind;
    Comm *comm;                       // the CP group, on device memory
    int B, T, C, NH;                  // the sizes the buffers fit (T local tokens per row)
    RingAttentionCuda ring;           // kind ring
    AllgatherAttentionCuda allgather; // kind allgather
} CpAttentionCuda;

static void cp_attention_cuda_init(CpAttentionCuda *a, CpAttentionKind kind, Comm *comm, int B, int T, int C, int NH) {
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->comm = comm;
    a->B = B; a->T = T; a->C = C; a->NH = NH;
    if (kind == CP_ATTENTION_RING) { ring_attention_cuda_init(&a->ring, comm, B, T, C, NH); }
    else { allgather_attention_cuda_init(&a->allgather, comm, B, T, C, NH); }
}

static void cp_attention_cuda_free(CpAttentionCuda *a) {
    if (a->kind == CP_ATTENTION_RING) { ring_attention_cuda_free(&a->ring); }
    else { allgather_attention_cuda_free(&a->allgather); }
}

// The verbs for this step's layout; rebuilds the buffers for another local length.
// Prepares the step's coordinates and tile visibility on the device (a collective
// over the CP group): bind once per step, and every layer's passes use them.
static AttentionVerbs cp_attention_cuda_bind(CpAttentionCuda *a, const ShardLayout *layout) {
    if (layout->B != a->B || layout->local_len != a->T) {
        cp_attention_cuda_free(a);
        cp_attention_cuda_init(a, a->kind, a->comm, layout->B, layout->local_len, a->C, a->NH);
    }
    if (a->kind == CP_ATTENTION_RING) {
        ring_attention_cuda_set_layout(&a->ring, layout);
        return ring_attention_cuda_verbs(&a->ring);
    }
    allgather_attention_cuda_set_layout(&a->allgather, layout);
    return allgather_attention_cuda_verbs(&a->allgather);
}

#endif // CP_ATTENTION_CUH
