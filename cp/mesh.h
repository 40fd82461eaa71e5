/*
The process mesh: world = dp x cp. Ranks [k*cp, (k+1)*cp) form CP group k, the
ranks of one data-parallel replica that share its sequences. Ranks with the same
CP rank across replicas form a DP group.

Ulysses attention splits a CP group further, cp = U x R (-ca ulysses: U = cp,
R = 1; -ca hybrid: U = -cu; every other algorithm: U = 1, R = cp). CP ranks
[g*U, (g+1)*U) form Ulysses group g, whose ranks trade heads for tokens by
all-to-all; the ranks at the same place u of every Ulysses group, CP ranks
u, u+U, u+2U, ..., form ring u, which passes K/V blocks. The all-to-all takes
neighbouring ranks because it is the exchange that cannot overlap compute and moves
the most bytes: on GPUs, ranks of one node (NVLink); the ring's messages overlap
compute and may cross nodes. Example, cp 6 = U 2 x R 3: Ulysses groups {0,1}
{2,3} {4,5}, rings {0,2,4} {1,3,5}.
*/
#ifndef CP_MESH_H
#define CP_MESH_H

#include "../llmc/utils.h"

typedef struct {
    int world_rank, world_size;
    int cp_rank, cp_size;           // place in the CP group, and its size
    int dp_rank, dp_size;           // which replica, and how many
    int ulysses_rank, ulysses_size; // place in the Ulysses group (U ranks), and U
    int ring_rank, ring_size;       // place in the ring across the Ulysses groups (R ranks), and R
} Mesh;

static Mesh mesh_init(int world_rank, int world_size, int cp_size, int ulysses_size) {
    if (cp_size < 1) { fatal_everywhere("-cp %d: the context-parallel size must be at least 1", cp_size); }
    if (world_size % cp_size != 0) {
        fatal_everywhere("-cp %d does not divide the %d ranks of the job (world = dp x cp)", cp_size, world_size);
    }
    if (ulysses_size < 1 || cp_size % ulysses_size != 0) {
        fatal_everywhere("Ulysses degree %d does not divide -cp %d (cp = U x R)", ulysses_size, cp_size);
    }
    Mesh m;
    m.world_rank = world_rank;
    m.world_size = world_size;
    m.cp_size = cp_size;
    m.cp_rank = world_rank % cp_size;
    m.dp_size = world_size / cp_size;
    m.dp_rank = world_rank / cp_size;
    m.ulysses_size = ulysses_size;
    m.ulysses_rank = m.cp_rank % ulysses_size;
    m.ring_size = cp_size / ulysses_size;
    m.ring_rank = m.cp_rank / ulysses_size;
    return m;
}

// The CP ranks of Ulysses group g (U of them) and of ring u (R), in group order.
static int mesh_ulysses_member(const Mesh *m, int g, int i) { return g * m->ulysses_size + i; }
static int mesh_ring_member(const Mesh *m, int u, int i) { return i * m->ulysses_size + u; }

#endif // CP_MESH_H
