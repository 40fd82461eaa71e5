/*
The transport on device memory over NCCL (the GPU trainer's default, -ct nccl).

One rank per GPU: NCCL refuses two ranks of one communicator on the same device
(use cp/comm_mpi_staged.cuh for that). The communicator is built over an MPI
communicator: its rank 0 makes the ncclUniqueId and broadcasts it with MPI, so the
same code works within a node and across nodes.

Every operation runs on the transport's own stream, ordered against the compute
stream with events (cp/comm_cuda.cuh). A ring step is one ncclGroupStart/End
holding the send to rank+1 and the receive from rank-1, so neither blocks the other.

No hang when a peer fails: NCCL work whose peer died, or whose network broke,
never completes, and the host waiting for the compute stream behind it would wait
forever. While the host waits (cuda_stream_wait), comm_nccl_watch polls every
communicator's asynchronous error and a deadline, GPT2CP_NCCL_TIMEOUT seconds
(default 60) for one wait; on either it aborts the communicators and ends the job
with the reason.
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

// ----------------------------------------------------------------------------
// watching for failures while the host waits

#define COMM_NCCL_MAX_LIVE 8
static ncclComm_t comm_nccl_live[COMM_NCCL_MAX_LIVE]; // this process's communicators
static int comm_nccl_num_live = 0;
static double comm_nccl_timeout = 60.0; // seconds

static void comm_nccl_abort_all(void) {
    for (int i = 0; i < comm_nccl_num_live; i++) { ncclCommAbort(comm_nccl_live[i]); }
    comm_nccl_num_live = 0;
    cuda_wait_watcher = NULL;
}

// the cuda_wait_watcher of llmc/cuda_common.cuh while any communicator lives
static void comm_nccl_watch(double waited_seconds) {
    for (int i = 0; i < comm_nccl_num_live; i++) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t result = ncclCommGetAsyncError(comm_nccl_live[i], &async);
        if (result == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) { continue; }
        const char *reason = ncclGetErrorString(result != ncclSuccess ? result : async);
        comm_nccl_abort_all();
        fatal("NCCL failed while this rank waited for the GPU: %s (a peer rank failed, or the network)", reason);
    }
    if (waited_seconds > comm_nccl_timeout) {
        comm_nccl_abort_all();
        fatal("the GPU made no progress for %.0f s: NCCL waits for a peer rank that is stuck or gone "
              "(GPT2CP_NCCL_TIMEOUT sets the limit in seconds)", comm_nccl_timeout);
    }
}

static void comm_nccl_watch_add(ncclComm_t nccl) {
    if (comm_nccl_num_live == COMM_NCCL_MAX_LIVE) { fatal("more than %d NCCL communicators", COMM_NCCL_MAX_LIVE); }
    const char *env = getenv("GPT2CP_NCCL_TIMEOUT");
    if (env != NULL) {
        char *end;
        comm_nccl_timeout = strtod(env, &end);
        if (end == env || *end != '\0' || !(comm_nccl_timeout > 0.0)) {
            fatal("GPT2CP_NCCL_TIMEOUT='%s': expected a positive number of seconds", env);
        }
    }
    comm_nccl_live[comm_nccl_num_live++] = nccl;
    cuda_wait_watcher = comm_nccl_watch;
}

static void comm_nccl_watch_remove(ncclComm_t nccl) {
    for (int i = 0; i < comm_nccl_num_live; i++) {
        if (comm_nccl_live[i] == nccl) { comm_nccl_live[i] = comm_nccl_live[--comm_nccl_num_live]; }
    }
    if (comm_nccl_num_live == 0) { cuda_wait_watcher = NULL; }
}

// ----------------------------------------------------------------------------
// the transport

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

static void comm_nccl_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count,
                                         CommType type) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclReduceScatter(send_buf, recv_buf, count, comm_nccl_type(type), ncclSum, impl->nccl,
                                impl->streams.stream));
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

// NCCL has no all-to-all collective: one grouped send and receive per peer
static void comm_nccl_all_to_all(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclGroupStart());
    for (int peer = 0; peer < comm->size; peer++) {
        ncclCheck(ncclSend((const char *)send_buf + peer * bytes_per_rank, bytes_per_rank, ncclChar, peer, impl->nccl,
                           impl->streams.stream));
        ncclCheck(ncclRecv((char *)recv_buf + peer * bytes_per_rank, bytes_per_rank, ncclChar, peer, impl->nccl,
                           impl->streams.stream));
    }
    ncclCheck(ncclGroupEnd());
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
    cuda_stream_wait(impl->streams.compute);
    MPI_Barrier(impl->mpi);
}

static void comm_nccl_destroy(Comm *comm) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_free(&impl->streams);
    comm_exchanges_free(impl->slots);
    comm_nccl_watch_remove(impl->nccl);
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
    comm_nccl_watch_add(impl->nccl);
    comm_streams_init(&impl->streams, compute);
    comm_exchanges_init(impl->slots);
    comm->impl = impl;
    comm->ring_start = comm_nccl_ring_start;
    comm->ring_wait = comm_nccl_ring_wait;
    comm->all_reduce_sum = comm_nccl_all_reduce_sum;
    comm->all_gather = comm_nccl_all_gather;
    comm->reduce_scatter_sum = comm_nccl_reduce_scatter_sum;
    comm->all_to_all = comm_nccl_all_to_all;
    comm->broadcast = comm_nccl_broadcast;
    comm->barrier = comm_nccl_barrier;
    comm->destroy = comm_nccl_destroy;
    return comm;
}

#endif // CP_COMM_NCCL_CUH
