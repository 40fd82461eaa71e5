/*
The process mesh: world = dp x cp. Ranks [k*cp, (k+1)*cp) form CP group k, the
ranks of one data-parallel replica that share its sequences. Ranks with the same
CP rank across replicas form a DP group.
*/
#ifndef CP_MESH_H
#define CP_MESH_H

#include "../llmc/utils.h"

typedef struct {
    int world_rank, world_size;
    int cp_rank, cp_size; // place in the CP group, and its size
    int dp_rank, dp_size; // which replica, and how many
} Mesh;

static Mesh mesh_init(int world_rank, int world_size, int cp_size) {
    if (cp_size < 1) { fatal_everywhere("-cp %d: the context-parallel size must be at least 1", cp_size); }
    if (world_size % cp_size != 0) {
        fatal_everywhere("-cp %d does not divide the %d ranks of the job (world = dp x cp)", cp_size, world_size);
    }
    Mesh m;
    m.world_rank = world_rank;
    m.world_size = world_size;
    m.cp_size = cp_size;
    m.cp_rank = world_rank % cp_size;
    m.dp_size = world_size / cp_size;
    m.dp_rank = world_rank / cp_size;
    return m;
}

#endif // CP_MESH_H
