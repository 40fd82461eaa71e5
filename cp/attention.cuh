/*
The attention of a run on the GPU: cp/attention.h with the CUDA ring, all-gather,
Ulysses and group-cast attention (cp/ring_attention.cuh, cp/allgather_attention.cuh,
cp/ulysses_attention.cuh, cp/groupcast_attention.cuh).
*/
#ifndef CP_ATTENTION_CUH
#define CP_ATTENTION_CUH

#include "allgather_attention.cuh"
#include "attention_kind.h"
#include "groupcast_attention.cuh"
#include "ring_attention.cuh"
#include "ulysses_attention.cuh"

// The groups an algorithm may talk over (cp/mesh.h), on device memory, and the CP
// and Ulysses groups on host memory too (group-cast's and Ulysses' coordinates are
// gathered on the host).
typedef struct {
    Comm *cp;
    Comm *cp_host;
    Comm *ulysses;
    Comm *ulysses_host;
    Comm *ring;
} CpAttentionCommsCuda;

typedef struct {
    CpAttentionKind kind;
    CpAttentionCommsCuda comms;
    int B, T, C, NH;                  // the sizes the buffers fit (T local tokens per row)
    int stages;                       // groupcast: its stages (-co)
    RingAttentionCuda ring;           // kind ring
    AllgatherAttentionCuda allgather; // kind allgather
    UlyssesAttentionCuda ulysses;     // kinds ulysses and hybrid
    GroupcastAttentionCuda groupcast; // kind groupcast
} CpAttentionCuda;

// The device bytes an attention of this kind holds per rank (cp/attention.h's
// cp_attention_bytes, for the GPU's buffers)
static size_t cp_attention_cuda_bytes(CpAttentionKind kind, int cp, int U, int B, int T, int C, int NH) {
    switch (kind) {
    case CP_ATTENTION_RING: return ring_attention_cuda_bytes(cp, B, T, C, NH);
    case CP_ATTENTION_ALLGATHER: return allgather_attention_cuda_bytes(cp, B, T, C, NH);
    case CP_ATTENTION_GROUPCAST: return groupcast_attention_cuda_bytes(cp, B, T, C, NH);
    default: return ulysses_attention_cuda_bytes(U, cp / U, B, T, C, NH);
    }
}

// stages: groupcast's (-co; the other kinds take 1)
static void cp_attention_cuda_init(CpAttentionCuda *a, CpAttentionKind kind, CpAttentionCommsCuda comms, int stages,
                                   int B, int T, int C, int NH) {
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->comms = comms;
    a->stages = stages;
    a->B = B; a->T = T; a->C = C; a->NH = NH;
    size_t held = 0;
    switch (kind) {
    case CP_ATTENTION_RING: ring_attention_cuda_init(&a->ring, comms.cp, B, T, C, NH); held = a->ring.bytes; break;
    case CP_ATTENTION_ALLGATHER:
        allgather_attention_cuda_init(&a->allgather, comms.cp, B, T, C, NH);
        held = a->allgather.bytes;
        break;
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID:
        ulysses_attention_cuda_init(&a->ulysses, comms.ulysses, comms.ulysses_host, comms.ring, B, T, C, NH);
        held = a->ulysses.bytes;
        break;
    case CP_ATTENTION_GROUPCAST:
        groupcast_attention_cuda_init(&a->groupcast, comms.cp, comms.cp_host, stages, B, T, C, NH);
        held = a->groupcast.bytes;
        break;
    }
    int U = comms.ulysses ? comms.ulysses->size : 1; // no Ulysses groups for ring and allgather
    size_t counted = cp_attention_cuda_bytes(kind, comms.cp->size, U, B, T, C, NH);
    if (held != counted) {
        fatal("the %s attention allocated %zu device bytes, cp_attention_cuda_bytes counts %zu: the memory "
              "estimate is out of date", cp_attention_names[kind], held, counted);
    }
}

static void cp_attention_cuda_free(CpAttentionCuda *a) {
    switch (a->kind) {
    case CP_ATTENTION_RING: ring_attention_cuda_free(&a->ring); break;
    case CP_ATTENTION_ALLGATHER: allgather_attention_cuda_free(&a->allgather); break;
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID: ulysses_attention_cuda_free(&a->ulysses); break;
    case CP_ATTENTION_GROUPCAST: groupcast_attention_cuda_free(&a->groupcast); break;
    }
}

// The verbs for a batch's layout; rebuilds the buffers for another local length.
// Prepares the batch's coordinates and tile visibility on the device (a collective
// over the CP group; for ulysses and hybrid over the Ulysses group, then the ring of
// groups; for groupcast over the CP group on the host, which also builds its plan): bind once per batch, and the forward and backward passes of every layer
// use them.
static AttentionVerbsCuda cp_attention_cuda_bind(CpAttentionCuda *a, const ShardLayout *layout) {
    if (layout->B != a->B || layout->local_len != a->T) {
        cp_attention_cuda_free(a);
        cp_attention_cuda_init(a, a->kind, a->comms, a->stages, layout->B, layout->local_len, a->C, a->NH);
    }
    switch (a->kind) {
    case CP_ATTENTION_RING:
        ring_attention_cuda_bind(&a->ring, layout);
        return ring_attention_cuda_verbs(&a->ring);
    case CP_ATTENTION_ALLGATHER:
        allgather_attention_cuda_bind(&a->allgather, layout);
        return allgather_attention_cuda_verbs(&a->allgather);
    case CP_ATTENTION_GROUPCAST:
        groupcast_attention_cuda_bind(&a->groupcast, layout);
        return groupcast_attention_cuda_verbs(&a->groupcast);
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID: break;
    }
    ulysses_attention_cuda_bind(&a->ulysses, layout);
    return ulysses_attention_cuda_verbs(&a->ulysses);
}

#endif // CP_ATTENTION_CUH
