/*
The process mesh of cp/mesh.h as MPI communicators: the world, this replica's CP
group, the DP group of this CP rank, this rank alone, and the CP group's Ulysses
group and ring. MPI_Comm_split with the mesh's ranks as colours and keys, so
each communicator's ranks are in the mesh's order. The trainers wrap them in the
transports they talk over (cp/comm_mpi.h on host memory, or the GPU's).
*/
#ifndef CP_MESH_MPI_H
#define CP_MESH_MPI_H

#include <mpi.h>
#include "mesh.h"

// The mesh's six communicators (U = ulysses_size). The caller owns (wraps) all six.
typedef struct {
    MPI_Comm world, cp, dp, self, ulysses, ring;
} MeshComms;

static Mesh mesh_split_mpi(int cp_size, int ulysses_size, MeshComms *mc) {
    int world_rank, world_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    Mesh m = mesh_init(world_rank, world_size, cp_size, ulysses_size);
    MPI_Comm_dup(MPI_COMM_WORLD, &mc->world);
    MPI_Comm_split(MPI_COMM_WORLD, m.dp_rank, m.cp_rank, &mc->cp);
    MPI_Comm_split(MPI_COMM_WORLD, m.cp_rank, m.dp_rank, &mc->dp);
    MPI_Comm_dup(MPI_COMM_SELF, &mc->self);
    MPI_Comm_split(mc->cp, m.ring_rank, m.ulysses_rank, &mc->ulysses);
    MPI_Comm_split(mc->cp, m.ulysses_rank, m.ring_rank, &mc->ring);
    return m;
}

#endif // CP_MESH_MPI_H
