/*
The attention algorithms a CP group can run (-ca): how its ranks share keys and
values. ring passes K/V blocks around the ring (cp/ring_attention.h), all-gather
gathers them all once per layer (cp/allgather_attention.h), ulysses trades heads
for tokens by all-to-all so that each rank attends whole rows for NH / cp heads,
and hybrid does the all-to-all in groups of U ranks and the ring across the
groups (cp/ulysses_attention.h; cp/mesh.h says which ranks), and groupcast sends
each K/V token only to the ranks whose queries see it, in -co stages
(cp/groupcast_attention.h). Same attention, same verbs; cp/attention.h (CPU) and
cp/attention.cuh (GPU) hold any of them.
*/
#ifndef CP_ATTENTION_KIND_H
#define CP_ATTENTION_KIND_H

#include <string.h>

typedef enum {
    CP_ATTENTION_RING = 0,
    CP_ATTENTION_ALLGATHER = 1,
    CP_ATTENTION_ULYSSES = 2,
    CP_ATTENTION_HYBRID = 3,
    CP_ATTENTION_GROUPCAST = 4
} CpAttentionKind;

static const char *cp_attention_names[] = {"ring", "allgather", "ulysses", "hybrid", "groupcast"};
#define CP_NUM_ATTENTIONS 5

// parse a -ca value; returns -1 when the name is unknown
static int cp_attention_from_name(const char *name) {
    for (int i = 0; i < CP_NUM_ATTENTIONS; i++) {
        if (strcmp(name, cp_attention_names[i]) == 0) { return i; }
    }
    return -1;
}

#endif // CP_ATTENTION_KIND_H
