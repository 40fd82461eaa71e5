/*
The process mesh of cp/mesh.h as MPI communicators: the world, this replica's CP
group, the DP group of this CP rank, this rank alone, and the CP group's Ulysses
group and ring. MPI_Comm_split with the mesh's ranks as colours and keys, so
each communicator's ranks are in the mesh's order. The trainers wrap them in the
transports they talk over (cp/comm_mpi.h on host memory, or the GPU's).

MPI makes communicators only with blocking calls. So that a rank that never comes
is named rather than waited for, a watched barrier over every rank comes first
(the caller's transport over the world), and each call runs under the watchdog's
timer (COMM_BLOCKING, cp/comm_watchdog.h).
*/
#ifndef CP_MESH_MPI_H
#define CP_MESH_MPI_H

#include <mpi.h>
#include "comm.h"
#include "comm_watchdog.h"
#include "mesh.h"

// The mesh's six communicators (U = ulysses_size). The caller owns (wraps) all six.
typedef struct {
    MPI_Comm world, cp, dp, self, ulysses, ring;
} MeshComms;

// Collective over every rank of the world; world_comm: a transport over them all.
static Mesh mesh_split_mpi(int cp_size, int ulysses_size, Comm *world_comm, MeshComms *mc) {
    int world_rank, world_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    Mesh m = mesh_init(world_rank, world_size, cp_size, ulysses_size);
    world_comm->barrier(world_comm);
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &mc->world));
    COMM_BLOCKING("MPI_Comm_split", MPI_Comm_split(MPI_COMM_WORLD, m.dp_rank, m.cp_rank, &mc->cp));
    COMM_BLOCKING("MPI_Comm_split", MPI_Comm_split(MPI_COMM_WORLD, m.cp_rank, m.dp_rank, &mc->dp));
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_SELF, &mc->self));
    COMM_BLOCKING("MPI_Comm_split", MPI_Comm_split(mc->cp, m.ring_rank, m.ulysses_rank, &mc->ulysses));
    COMM_BLOCKING("MPI_Comm_split", MPI_Comm_split(mc->cp, m.ulysses_rank, m.ring_rank, &mc->ring));
    return m;
}

#endif // CP_MESH_MPI_H
