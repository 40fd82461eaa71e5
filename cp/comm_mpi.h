/*
The transport on host memory over MPI (the CPU twin's transport), and the MPI
runtime every trainer starts with: MPI_Init, and the hooks that turn any rank's
fatal error into the end of the whole job.
*/
#ifndef CP_COMM_MPI_H
#define CP_COMM_MPI_H

#include <mpi.h>
#include <time.h>
#include <unistd.h>
#include "comm.h"
#include "../llmc/utils.h"

// ----------------------------------------------------------------------------
// the runtime

static void mpi_abort_job(void) {
    MPI_Abort(MPI_COMM_WORLD, 1);
}

// The other ranks of a fatal_everywhere wait here for rank 0 to print and abort.
// The wait is bounded: should rank 0 not see the error after all, this rank
// stops waiting, prints its own line and ends the job itself.
static void mpi_wait_for_printer(void) {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    time_t start = time(NULL);
    int done = 0;
    while (!done && time(NULL) - start < 10) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        usleep(1000);
    }
}

static void mpi_runtime_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fatal_rank = rank;
    fatal_exit_hook = mpi_abort_job;
    fatal_wait_for_printer = mpi_wait_for_printer;
    // an MPI error is never recoverable here: let MPI end the job at once
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

// ----------------------------------------------------------------------------
// the transport

typedef struct {
    MPI_Comm comm;
} CommMPI;

typedef struct {
    MPI_Request requests[2];
} CommMPIExchange;

static MPI_Datatype comm_mpi_type(CommType type) {
    switch (type) {
    case COMM_FLOAT: return MPI_FLOAT;
    case COMM_DOUBLE: return MPI_DOUBLE;
    case COMM_INT32: return MPI_INT;
    }
    return MPI_BYTE;
}

static MPI_Comm comm_mpi_handle(Comm *comm) { return ((CommMPI *)comm->impl)->comm; }

// MPI counts are int: move big buffers in pieces of at most 1 GiB
#define COMM_MPI_MAX_BYTES ((size_t)1 << 30)

static void *comm_mpi_ring_start(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes) {
    if (bytes > COMM_MPI_MAX_BYTES) {
        fatal("ring message of %zu bytes exceeds the MPI transport's limit of %zu", bytes, COMM_MPI_MAX_BYTES);
    }
    CommMPIExchange *ex = (CommMPIExchange *)mallocCheck(sizeof(CommMPIExchange));
    int next = (comm->rank + 1) % comm->size;
    int prev = (comm->rank - 1 + comm->size) % comm->size;
    MPI_Comm mc = comm_mpi_handle(comm);
    MPI_Irecv(recv_buf, (int)bytes, MPI_BYTE, prev, 0, mc, &ex->requests[0]);
    MPI_Isend(send_buf, (int)bytes, MPI_BYTE, next, 0, mc, &ex->requests[1]);
    return ex;
}

static void comm_mpi_ring_wait(Comm *comm, void *exchange) {
    (void)comm;
    CommMPIExchange *ex = (CommMPIExchange *)exchange;
    MPI_Waitall(2, ex->requests, MPI_STATUSES_IGNORE);
    free(ex);
}

static void comm_mpi_all_reduce_sum(Comm *comm, void *buf, size_t count, CommType type) {
    size_t elem = comm_type_size(type);
    size_t max_count = COMM_MPI_MAX_BYTES / elem;
    char *p = (char *)buf;
    for (size_t done = 0; done < count; done += max_count) {
        size_t n = count - done < max_count ? count - done : max_count;
        MPI_Allreduce(MPI_IN_PLACE, p + done * elem, (int)n, comm_mpi_type(type), MPI_SUM, comm_mpi_handle(comm));
    }
}

static void comm_mpi_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    if (bytes_per_rank > COMM_MPI_MAX_BYTES) {
        fatal("all_gather of %zu bytes per rank exceeds the MPI transport's limit", bytes_per_rank);
    }
    MPI_Allgather(send_buf, (int)bytes_per_rank, MPI_BYTE, recv_buf, (int)bytes_per_rank, MPI_BYTE,
                  comm_mpi_handle(comm));
}

static void comm_mpi_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count,
                                        CommType type) {
    if (count * comm_type_size(type) > COMM_MPI_MAX_BYTES) {
        fatal("reduce_scatter_sum of %zu elements per rank exceeds the MPI transport's limit", count);
    }
    MPI_Reduce_scatter_block(send_buf, recv_buf, (int)count, comm_mpi_type(type), MPI_SUM, comm_mpi_handle(comm));
}

static void comm_mpi_all_to_all(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    if (bytes_per_rank > COMM_MPI_MAX_BYTES) {
        fatal("all_to_all of %zu bytes per rank exceeds the MPI transport's limit", bytes_per_rank);
    }
    MPI_Alltoall(send_buf, (int)bytes_per_rank, MPI_BYTE, recv_buf, (int)bytes_per_rank, MPI_BYTE,
                 comm_mpi_handle(comm));
}

static void comm_mpi_broadcast(Comm *comm, void *buf, size_t bytes, int root) {
    char *p = (char *)buf;
    for (size_t done = 0; done < bytes; done += COMM_MPI_MAX_BYTES) {
        size_t n = bytes - done < COMM_MPI_MAX_BYTES ? bytes - done : COMM_MPI_MAX_BYTES;
        MPI_Bcast(p + done, (int)n, MPI_BYTE, root, comm_mpi_handle(comm));
    }
}

static void comm_mpi_barrier(Comm *comm) {
    MPI_Barrier(comm_mpi_handle(comm));
}

static void comm_mpi_destroy(Comm *comm) {
    CommMPI *impl = (CommMPI *)comm->impl;
    if (impl->comm != MPI_COMM_WORLD && impl->comm != MPI_COMM_SELF) {
        MPI_Comm_free(&impl->comm);
    }
    free(impl);
    free(comm);
}

// Wraps an MPI communicator (the Comm takes ownership of communicators it did not
// get as MPI_COMM_WORLD or MPI_COMM_SELF).
static Comm *comm_mpi_create(MPI_Comm mc) {
    Comm *comm = (Comm *)callocCheck(1, sizeof(Comm));
    CommMPI *impl = (CommMPI *)mallocCheck(sizeof(CommMPI));
    impl->comm = mc;
    MPI_Comm_rank(mc, &comm->rank);
    MPI_Comm_size(mc, &comm->size);
    comm->impl = impl;
    comm->ring_start = comm_mpi_ring_start;
    comm->ring_wait = comm_mpi_ring_wait;
    comm->all_reduce_sum = comm_mpi_all_reduce_sum;
    comm->all_gather = comm_mpi_all_gather;
    comm->reduce_scatter_sum = comm_mpi_reduce_scatter_sum;
    comm->all_to_all = comm_mpi_all_to_all;
    comm->broadcast = comm_mpi_broadcast;
    comm->barrier = comm_mpi_barrier;
    comm->destroy = comm_mpi_destroy;
    return comm;
}

#endif // CP_COMM_MPI_H
