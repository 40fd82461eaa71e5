/*
The communicators the MPI tests build their transports on (cp/comm_mpi.h,
cp/comm_mpi_staged.cuh, cp/comm_nccl.cuh): each transport gets a duplicate of
MPI_COMM_WORLD or MPI_COMM_SELF of its own, so that no message of one meets
another's, nor the test's own MPI calls on the world. The transport owns the
duplicate and frees it when it is destroyed.
*/
#ifndef TEST_COMM_H
#define TEST_COMM_H

#include <mpi.h>

// a new communicator over the ranks of `parent`, collective over them
static MPI_Comm comm_duplicate(MPI_Comm parent) {
    MPI_Comm dup;
    MPI_Comm_dup(parent, &dup);
    return dup;
}

#endif // TEST_COMM_H
