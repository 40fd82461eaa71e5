/*
The attention of a run on the CPU: ring, all-gather, Ulysses, the hybrid of
Ulysses and the ring, or group-cast (-ca, cp/attention_kind.h) behind one
interface, so that the trainer never branches on the algorithm.

Buffers fit one local length. Binding a batch's layout of another length rebuilds
them at that length: the packed layout's length depends on the data (the trainer
keeps it from shrinking, so this happens only when a batch needs more room).
Binding is collective over the Ulysses group for ulysses and hybrid, and over the
CP group for groupcast (their ranks all-gather their tokens' coordinates), so
every rank of a CP group binds alike.
A trainer binds once per batch: the forward and the backward pass of a
micro-batch, every layer of both, use the verbs one bind returns.
*/
#ifndef CP_ATTENTION_H
#define CP_ATTENTION_H

#include "allgather_attention.h"
#include "attention_kind.h"
#include "groupcast_attention.h"
#include "ring_attention.h"
#include "ulysses_attention.h"

// The groups an algorithm may talk over (cp/mesh.h): the CP group, and its split
// into Ulysses groups and the rings across them.
typedef struct {
    Comm *cp;
    Comm *ulysses;
    Comm *ring;
} CpAttentionComms;

typedef struct {
    CpAttentionKind kind;
    CpAttentionComms comms;
    int B, T, C, NH;              // the sizes the buffers fit (T local tokens per row)
    int stages;                   // groupcast: its stages (-co)
    RingAttention ring;           // kind ring
    AllgatherAttention allgather; // kind allgather
    UlyssesAttention ulysses;     // kinds ulysses and hybrid
    GroupcastAttention groupcast; // kind groupcast
} CpAttention;

// The bytes an attention of this kind holds per rank at cp ranks (Ulysses groups
// of U), B rows of T local tokens: what the run's memory estimate counts before
// allocating (train/memory.h), and what init must allocate.
static size_t cp_attention_bytes(CpAttentionKind kind, int cp, int U, int B, int T, int C, int NH) {
    switch (kind) {
    case CP_ATTENTION_RING: return ring_attention_bytes(B, T, C, NH);
    case CP_ATTENTION_ALLGATHER: return allgather_attention_bytes(cp, B, T, C, NH);
    case CP_ATTENTION_GROUPCAST: return groupcast_attention_bytes(cp, B, T, C, NH);
    default: return ulysses_attention_bytes(U, B, T, C, NH);
    }
}

// stages: groupcast's (-co; the other kinds take 1)
static void cp_attention_init(CpAttention *a, CpAttentionKind kind, CpAttentionComms comms, int stages, int B, int T,
                              int C, int NH) {
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->comms = comms;
    a->stages = stages;
    a->B = B; a->T = T; a->C = C; a->NH = NH;
    size_t held = 0;
    switch (kind) {
    case CP_ATTENTION_RING: ring_attention_init(&a->ring, comms.cp, B, T, C, NH); held = a->ring.bytes; break;
    case CP_ATTENTION_ALLGATHER:
        allgather_attention_init(&a->allgather, comms.cp, B, T, C, NH);
        held = a->allgather.bytes;
        break;
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID:
        ulysses_attention_init(&a->ulysses, comms.ulysses, comms.ring, B, T, C, NH);
        held = a->ulysses.bytes;
        break;
    case CP_ATTENTION_GROUPCAST:
        groupcast_attention_init(&a->groupcast, comms.cp, stages, B, T, C, NH);
        held = a->groupcast.bytes;
        break;
    }
    int U = comms.ulysses ? comms.ulysses->size : 1; // no Ulysses groups for ring and allgather
    size_t counted = cp_attention_bytes(kind, comms.cp->size, U, B, T, C, NH);
    if (held != counted) {
        fatal("the %s attention allocated %zu bytes, cp_attention_bytes counts %zu: the memory estimate is out of "
              "date", cp_attention_names[kind], held, counted);
    }
}

static void cp_attention_free(CpAttention *a) {
    switch (a->kind) {
    case CP_ATTENTION_RING: ring_attention_free(&a->ring); break;
    case CP_ATTENTION_ALLGATHER: allgather_attention_free(&a->allgather); break;
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID: ulysses_attention_free(&a->ulysses); break;
    case CP_ATTENTION_GROUPCAST: groupcast_attention_free(&a->groupcast); break;
    }
}

// The verbs for a batch's layout (the coordinates of the local tokens); rebuilds
// the buffers for another local length.
static AttentionVerbs cp_attention_bind(CpAttention *a, const ShardLayout *layout) {
    if (layout->B != a->B || layout->local_len != a->T) {
        cp_attention_free(a);
        cp_attention_init(a, a->kind, a->comms, a->stages, layout->B, layout->local_len, a->C, a->NH);
    }
    switch (a->kind) {
    case CP_ATTENTION_RING:
        ring_attention_bind(&a->ring, layout);
        return ring_attention_verbs(&a->ring);
    case CP_ATTENTION_ALLGATHER:
        allgather_attention_bind(&a->allgather, layout);
        return allgather_attention_verbs(&a->allgather);
    case CP_ATTENTION_GROUPCAST:
        groupcast_attention_bind(&a->groupcast, layout);
        return groupcast_attention_verbs(&a->groupcast);
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID: break;
    }
    ulysses_attention_bind(&a->ulysses, layout);
    return ulysses_attention_verbs(&a->ulysses);
}

#endif // CP_ATTENTION_H
