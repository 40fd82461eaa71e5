/*
The transport on device memory over NCCL (the GPU trainer's default, -ct nccl).

One rank per GPU: NCCL refuses two ranks of one communicator on the same device
(use cp/comm_mpi_staged.cuh for that). The communicator is built over an MPI
communicator: its rank 0 makes the ncclUniqueId and broadcasts it with MPI, so the
same code works within a node and across nodes.

Every operation runs on the transport's own stream, ordered against the compute
stream with events (cp/comm_cuda.cuh). A ring step is one ncclGroupStart/End
holding the send to rank+1 and the receive from rank-1, so neither blocks the other.
*/
#ifndef CP_COMM_NCCL_CUH
#define CP_COMM_NCCL_CUH

#include <mpi.h>
#include <nccl.h>
#include "comm.h"
#include "comm_cuda.cuh"

static void nccl_check(ncclResult_t result, const char *file, int line) {
    if (result != ncclSuccess) {
        fatal("NCCL error at %s:%d: %s", file, line, ncclGetErrorString(result));
    }
}
#define ncclCheck(result) nccl_check((result), __FILE__, __LINE__)

typedef struct {
    MPI_Comm mpi;     // the same group: creation and the barrier
    ncclComm_t nccl;
    CommStreams streams;
    CommExchange slots[COMM_CUDA_SLOTS];
} CommNccl;

static CommNccl *comm_nccl_impl(Comm *comm) { return (CommNccl *)comm->impl; }

static ncclDataType_t comm_nccl_type(CommType type) {
    switch (type) {
    case COMM_FLOAT: return ncclFloat32;
    case COMM_DOUBLE: return ncclFloat64;
    case COMM_INT32: return ncclInt32;
    }
    fatal("unknown CommType %d", (int)type);
}

static void *comm_nccl_ring_start(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes) {
    CommNccl *impl = comm_nccl_impl(comm);
    CommExchange *ex = comm_exchange_acquire(impl->slots);
    comm_streams_after_compute(&impl->streams);
    if (comm->size == 1) {
        comm_cuda_self_ring(&impl->streams, send_buf, recv_buf, bytes);
    } else {
        int next = (comm->rank + 1) % comm->size;
        int prev = (comm->rank - 1 + comm->size) % comm->size;
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclSend(send_buf, bytes, ncclChar, next, impl->nccl, impl->streams.stream));
        ncclCheck(ncclRecv(recv_buf, bytes, ncclChar, prev, impl->nccl, impl->streams.stream));
        ncclCheck(ncclGroupEnd());
    }
    cudaCheck(cudaEventRecord(ex->done, impl->streams.stream));
    return ex;
}

static void comm_nccl_ring_wait(Comm *comm, void *exchange) {
    comm_exchange_finish(&comm_nccl_impl(comm)->streams, (CommExchange *)exchange);
}

static void comm_nccl_all_reduce_sum(Comm *comm, void *buf, size_t count, CommType type) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclAllReduce(buf, buf, count, comm_nccl_type(type), ncclSum, impl->nccl, impl->streams.stream));
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

static void comm_nccl_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclAllGather(send_buf, recv_buf, bytes_per_rank, ncclChar, impl->nccl, impl->streams.stream));
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

static void comm_nccl_broadcast(Comm *comm, void *buf, size_t bytes, int root) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclBroadcast(buf, buf, bytes, ncclChar, root, impl->nccl, impl->streams.stream));
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

// every rank has arrived, and its queued GPU work is done
static void comm_nccl_barrier(Comm *comm) {
    CommNccl *impl = comm_nccl_impl(comm);
    cudaCheck(cudaStreamSynchronize(impl->streams.compute));
    MPI_Barrier(impl->mpi);
}

static void comm_nccl_destroy(Comm *comm) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_free(&impl->streams);
    comm_exchanges_free(impl->slots);
    ncclCheck(ncclCommDestroy(impl->nccl));
    if (impl->mpi != MPI_COMM_WORLD && impl->mpi != MPI_COMM_SELF) { MPI_Comm_free(&impl->mpi); }
    free(impl);
    free(comm);
}

// Builds the NCCL communicator of the ranks of `mc` (taking ownership of mc unless
// it is MPI_COMM_WORLD or MPI_COMM_SELF). The device must be set already.
// compute: the stream that produces and consumes the buffers passed to the verbs.
static Comm *comm_nccl_create(MPI_Comm mc, cudaStream_t compute) {
    Comm *comm = (Comm *)callocCheck(1, sizeof(Comm));
    CommNccl *impl = (CommNccl *)callocCheck(1, sizeof(CommNccl));
    impl->mpi = mc;
    MPI_Comm_rank(mc, &comm->rank);
    MPI_Comm_size(mc, &comm->size);
    ncclUniqueId id;
    if (comm->rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, mc);
    ncclCheck(ncclCommInitRank(&impl->nccl, comm->size, id, comm->rank));
    comm_streams_init(&impl->streams, compute);
    comm_exchanges_init(impl->slots);
    comm->impl = impl;
    comm->ring_start = comm_nccl_ring_start;
    comm->ring_wait = comm_nccl_ring_wait;
    comm->all_reduce_sum = comm_nccl_all_reduce_sum;
    comm->all_gather = comm_nccl_all_gather;
    comm->broadcast = comm_nccl_broadcast;
    comm->barrier = comm_nccl_barrier;
    comm->destroy = comm_nccl_destroy;
    return comm;
}

#endif // CP_COMM_NCCL_CUH
