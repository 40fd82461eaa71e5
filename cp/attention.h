/*
The attention of a run on the CPU: ring or all-gather (-ca, cp/attention_kind.h)
behind one interface, so that the trainer never branches on the algorithm.

Buffers fit one local length. Binding a step's layout of another length rebuilds
them at that length: the packed layout's length depends on the data (the trainer
keeps it from shrinking, so this happens only when a batch needs more room).
*/
#ifndef CP_ATTENTION_H
#define CP_ATTENTION_H

#include "allgather_attention.h"
#include "attention_kind.h"
#include "ring_attention.h"

typedef struct {
    CpAttentionKind kind;
    Comm *comm;                   // the CP group
    int B, T, C, NH;              // the sizes the buffers fit (T local tokens per row)
    RingAttention ring;           // kind ring
    AllgatherAttention allgather; // kind allgather
} CpAttention;

// The bytes an attention of this kind holds per rank at cp ranks, B rows of T
// local tokens: what the run's memory estimate counts before allocating
// (train/memory.h), and what init must allocate.
static size_t cp_attention_bytes(CpAttentionKind kind, int cp, int B, int T, int C, int NH) {
    return kind == CP_ATTENTION_RING ? ring_attention_bytes(B, T, C, NH) : allgather_attention_bytes(cp, B, T, C, NH);
}

static void cp_attention_init(CpAttention *a, CpAttentionKind kind, Comm *comm, int B, int T, int C, int NH) {
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->comm = comm;
    a->B = B; a->T = T; a->C = C; a->NH = NH;
    if (kind == CP_ATTENTION_RING) { ring_attention_init(&a->ring, comm, B, T, C, NH); }
    else { allgather_attention_init(&a->allgather, comm, B, T, C, NH); }
    size_t held = kind == CP_ATTENTION_RING ? a->ring.bytes : a->allgather.bytes;
    size_t counted = cp_attention_bytes(kind, comm->size, B, T, C, NH);
    if (held != counted) {
        fatal("the %s attention allocated %zu bytes, cp_attention_bytes counts %zu: the memory estimate is out of "
              "date", cp_attention_names[kind], held, counted);
    }
}

static void cp_attention_free(CpAttention *a) {
    if (a->kind == CP_ATTENTION_RING) { ring_attention_free(&a->ring); }
    else { allgather_attention_free(&a->allgather); }
}

// The verbs for this step's layout (the coordinates of the local tokens).
static AttentionVerbs cp_attention_bind(CpAttention *a, const ShardLayout *layout) {
    if (layout->B != a->B || layout->local_len != a->T) {
        cp_attention_free(a);
        cp_attention_init(a, a->kind, a->comm, layout->B, layout->local_len, a->C, a->NH);
    }
    if (a->kind == CP_ATTENTION_RING) {
        a->ring.layout = layout;
        return ring_attention_verbs(&a->ring);
    }
    a->allgather.layout = layout;
    return allgather_attention_verbs(&a->allgather);
}

#endif // CP_ATTENTION_H
