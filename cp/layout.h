/*
Context-parallel layouts: which global token positions each CP rank owns.

A layout is nothing but an index map. For a row padded to P tokens, rank r of cp
ranks owns P/cp positions, listed in the order it stores them locally. Everything
downstream (masks, position embeddings, shard, gather) is derived from these global
indices, so no other code ever asks which layout produced a shard.

    identity     cp = 1: the one rank owns [0, T), no padding.
    contiguous   pad to a multiple of 2*cp; rank r owns [r*P/cp, (r+1)*P/cp).
    round_robin  pad to a multiple of 2*cp; split into 2*cp chunks of c = P/(2*cp);
                 rank r owns chunk r, then chunk 2*cp-1-r. Under a causal mask the
                 early chunks are cheap and the late ones expensive, so pairing
                 chunk r with its mirror gives every rank the same attention work
                 (the "head-tail" or "zigzag" balancing).

Example, T = 10, cp = 2 -> P = 12:
    round_robin  r0 = [0 1 2 9 10 11]   r1 = [3 4 5 6 7 8]
    contiguous   r0 = [0 1 2 3 4 5]     r1 = [6 7 8 9 10 11]
*/
#ifndef CP_LAYOUT_H
#define CP_LAYOUT_H

#include <string.h>

typedef enum {
    CP_LAYOUT_IDENTITY = 0,
    CP_LAYOUT_CONTIGUOUS = 1,
    CP_LAYOUT_ROUND_ROBIN = 2,
} CpLayoutKind;

static const char *cp_layout_names[] = {"identity", "contiguous", "round_robin"};
#define CP_NUM_LAYOUTS 3

// parse a -cl value; returns -1 when the name is unknown
static int cp_layout_from_name(const char *name) {
    for (int i = 0; i < CP_NUM_LAYOUTS; i++) {
        if (strcmp(name, cp_layout_names[i]) == 0) { return i; }
    }
    return -1;
}

// What each rank must be divisible into. identity pads nothing; both splitting
// layouts pad to 2*cp so that every rank's share splits into two equal halves
// (round_robin needs the two chunks, ring attention's half-block skipping uses the
// halves of every layout).
static int cp_pad_multiple(CpLayoutKind kind, int cp) {
    return kind == CP_LAYOUT_IDENTITY ? 1 : 2 * cp;
}

static int cp_padded_len(CpLayoutKind kind, int T, int cp) {
    int m = cp_pad_multiple(kind, cp);
    return (T + m - 1) / m * m;
}

// Global positions owned by `rank`, in local order.
// indices: (P / cp,)
static void cp_local_indices(CpLayoutKind kind, int P, int cp, int rank, int *indices) {
    int local_len = P / cp;
    switch (kind) {
    case CP_LAYOUT_IDENTITY:
    case CP_LAYOUT_CONTIGUOUS:
        // identity is contiguous with cp = 1
        for (int i = 0; i < local_len; i++) { indices[i] = rank * local_len + i; }
        break;
    case CP_LAYOUT_ROUND_ROBIN: {
        int chunk = P / (2 * cp);
        int mirror = 2 * cp - 1 - rank;
        for (int i = 0; i < chunk; i++) {
            indices[i] = rank * chunk + i;
            indices[chunk + i] = mirror * chunk + i;
        }
        break;
    }
    }
}

#endif // CP_LAYOUT_H
