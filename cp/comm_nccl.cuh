/*
The transport on device memory over NCCL (the GPU trainer's default, -ct nccl).

One rank per GPU: NCCL refuses two ranks of one communicator on the same device
(use cp/comm_mpi_staged.cuh for that). The communicator is built over an MPI
communicator: its rank 0 makes the ncclUniqueId and broadcasts it with MPI, so the
same code works within a node and across nodes.

Every operation runs on the transport's own stream, ordered against the compute
stream with events (cp/comm_cuda.cuh). A ring step is one ncclGroupStart/End
holding the send to rank+1 and the receive from rank-1, so neither blocks the other;
an all-to-all-v is one group of the sends and receives whose counts are not zero.

No hang when a peer fails or stops: NCCL work whose peer died, stopped, or whose
network broke never completes, and the host waiting for the compute stream
behind it would wait forever. The host cannot see NCCL's progress directly (it
queues work and later waits for a stream), so every operation records a
milestone behind it on the transport's stream: an event, with the verb and the
peer it waits for. The watcher polls them, and every communicator's asynchronous
error, while the host waits for a stream (cuda_stream_wait), and at every new
operation. Progress is a milestone passed; the clock runs only while one is
outstanding, from the later of the last milestone passed and the first
outstanding one queued; a beacon of a rank that works alone restarts it too.
GPT2CP_TIMEOUT seconds without progress (cp/comm_watchdog.h),
or an asynchronous error, abort the communicators and end the job with the
reason: a wait covering a whole long backward pass is fine as long as its ring
steps keep passing. A ring step names the rank it receives from, and so does an
all-to-all-v that receives from one rank; a collective (or an all-to-all-v from
several) cannot tell which rank is missing (the host's arrival is not the GPU's),
and says so.
*/
#ifndef CP_COMM_NCCL_CUH
#define CP_COMM_NCCL_CUH

#include <mpi.h>
#include <nccl.h>
#include "comm.h"
#include "comm_cuda.cuh"
#include "comm_mpi.h"
#include "comm_watchdog.h"

static void nccl_check(ncclResult_t result, const char *file, int line) {
    if (result != ncclSuccess) {
        fatal("NCCL error at %s:%d: %s", file, line, ncclGetErrorString(result));
    }
}
#define ncclCheck(result) nccl_check((result), __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// watching for failures and progress

#define COMM_NCCL_MAX_LIVE 8
static ncclComm_t comm_nccl_live[COMM_NCCL_MAX_LIVE]; // this process's communicators
static int comm_nccl_num_live = 0;

// a window of outstanding milestones: [passed, issued) of a ring of events
#define COMM_NCCL_MILESTONES 64
typedef struct {
    cudaEvent_t event;  // recorded on a transport's stream behind the operation
    const char *verb;
    int peer;           // the world rank it waits for, -1 for a collective
} CommNcclMilestone;
static CommNcclMilestone comm_nccl_milestones[COMM_NCCL_MILESTONES];
static long comm_nccl_issued = 0, comm_nccl_passed = 0;
static double comm_nccl_progress_at = 0.0; // when the clock last started (comm_clock)

static void comm_nccl_abort_all(void) {
    for (int i = 0; i < comm_nccl_num_live; i++) { ncclCommAbort(comm_nccl_live[i]); }
    comm_nccl_num_live = 0;
    cuda_wait_watcher = NULL;
}

// moves past every milestone the GPU has reached
static void comm_nccl_pass(void) {
    while (comm_nccl_passed < comm_nccl_issued) {
        cudaError_t reached = cudaEventQuery(comm_nccl_milestones[comm_nccl_passed % COMM_NCCL_MILESTONES].event);
        if (reached == cudaErrorNotReady) { return; }
        cudaCheck(reached);
        comm_nccl_passed++;
        comm_nccl_progress_at = comm_clock();
    }
}

// the cuda_wait_watcher of llmc/cuda_common.cuh while any communicator lives
static void comm_nccl_watch(void) {
    for (int i = 0; i < comm_nccl_num_live; i++) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t result = ncclCommGetAsyncError(comm_nccl_live[i], &async);
        if (result == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) { continue; }
        const char *reason = ncclGetErrorString(result != ncclSuccess ? result : async);
        comm_nccl_abort_all();
        fatal("NCCL failed while this rank waited for the GPU: %s (a peer rank failed, or the network)", reason);
    }
    comm_nccl_pass();
    if (comm_watchdog_poll() > 0) { comm_nccl_progress_at = comm_clock(); } // another rank works alone
    double expired_for = comm_clock() - comm_nccl_progress_at - comm_timeout;
    if (comm_nccl_passed == comm_nccl_issued || expired_for <= 0.0) { return; }
    // a collective's milestone does not say which rank it waits for: any silent one
    const CommNcclMilestone *m = &comm_nccl_milestones[comm_nccl_passed % COMM_NCCL_MILESTONES];
    int running;
    int named = comm_stall_named(m->peer >= 0 ? &m->peer : NULL, 1, expired_for, &running);
    if (named == 0) { return; } // every awaited rank still runs: the one nearest the stall names it
    comm_nccl_abort_all();
    if (m->peer < 0 && running) { comm_no_progress("a rank of the collective (NCCL does not say which)", m->verb); }
    comm_no_progress_from(comm_named, named, running, m->verb);
}

// Records a milestone behind the operation just queued on `stream`. A full window
// records none: its outstanding milestones keep timing the wait.
static void comm_nccl_milestone(cudaStream_t stream, const char *verb, int peer) {
    comm_nccl_watch();
    if (comm_nccl_issued - comm_nccl_passed == COMM_NCCL_MILESTONES) { return; }
    if (comm_nccl_issued == comm_nccl_passed) { comm_nccl_progress_at = comm_clock(); }
    CommNcclMilestone *m = &comm_nccl_milestones[comm_nccl_issued % COMM_NCCL_MILESTONES];
    cudaCheck(cudaEventRecord(m->event, stream));
    m->verb = verb;
    m->peer = peer;
    comm_nccl_issued++;
}

static void comm_nccl_watch_add(ncclComm_t nccl) {
    if (comm_nccl_num_live == COMM_NCCL_MAX_LIVE) { fatal("more than %d NCCL communicators", COMM_NCCL_MAX_LIVE); }
    if (comm_nccl_num_live == 0) {
        for (int i = 0; i < COMM_NCCL_MILESTONES; i++) {
            cudaCheck(cudaEventCreateWithFlags(&comm_nccl_milestones[i].event, cudaEventDisableTiming));
        }
        comm_nccl_issued = comm_nccl_passed = 0;
    }
    comm_nccl_live[comm_nccl_num_live++] = nccl;
    cuda_wait_watcher = comm_nccl_watch;
}

static void comm_nccl_watch_remove(ncclComm_t nccl) {
    for (int i = 0; i < comm_nccl_num_live; i++) {
        if (comm_nccl_live[i] == nccl) { comm_nccl_live[i] = comm_nccl_live[--comm_nccl_num_live]; }
    }
    if (comm_nccl_num_live == 0) {
        cuda_wait_watcher = NULL;
        for (int i = 0; i < COMM_NCCL_MILESTONES; i++) { cudaCheck(cudaEventDestroy(comm_nccl_milestones[i].event)); }
    }
}

// ----------------------------------------------------------------------------
// the transport

typedef struct {
    Comm *host;       // the same group over MPI on host memory: creation and the barrier
    int *world_ranks; // (size) each group rank's world rank: the peer a milestone names
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
        comm_nccl_milestone(impl->streams.stream, "ring exchange", impl->world_ranks[prev]);
    }
    cudaCheck(cudaEventRecord(ex->done, impl->streams.stream));
    return ex;
}

static void comm_nccl_ring_wait(Comm *comm, void *exchange) {
    comm_exchange_finish(&comm_nccl_impl(comm)->streams, (CommExchange *)exchange);
}

// One group of a send per peer with bytes for it and a receive per peer with bytes
// from it (both sides agree: rank i's send_bytes[j] is rank j's recv_bytes[i]), posted
// on the transport's stream and waited for as a ring step is. Its milestone names the
// sender when there is one (as the ring's does), and any silent rank when there are
// several (as a collective's does); with none it records no milestone.
static void *comm_nccl_all_to_all_v_start(Comm *comm, const void *send_buf, const size_t *send_bytes,
                                          const size_t *send_offset, void *recv_buf, const size_t *recv_bytes,
                                          const size_t *recv_offset) {
    CommNccl *impl = comm_nccl_impl(comm);
    CommExchange *ex = comm_exchange_acquire(impl->slots);
    comm_streams_after_compute(&impl->streams);
    int senders = 0, sender = -1, messages = 0;
    ncclCheck(ncclGroupStart());
    for (int peer = 0; peer < comm->size; peer++) {
        if (send_bytes[peer] > 0) {
            ncclCheck(ncclSend((const char *)send_buf + send_offset[peer], send_bytes[peer], ncclChar, peer,
                               impl->nccl, impl->streams.stream));
            messages++;
        }
        if (recv_bytes[peer] > 0) {
            ncclCheck(ncclRecv((char *)recv_buf + recv_offset[peer], recv_bytes[peer], ncclChar, peer, impl->nccl,
                               impl->streams.stream));
            senders++;
            sender = peer;
            messages++;
        }
    }
    ncclCheck(ncclGroupEnd());
    if (messages > 0) {
        comm_nccl_milestone(impl->streams.stream, "all_to_all_v", senders == 1 ? impl->world_ranks[sender] : -1);
    }
    cudaCheck(cudaEventRecord(ex->done, impl->streams.stream));
    return ex;
}

static void comm_nccl_all_reduce_sum(Comm *comm, void *buf, size_t count, CommType type) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclAllReduce(buf, buf, count, comm_nccl_type(type), ncclSum, impl->nccl, impl->streams.stream));
    comm_nccl_milestone(impl->streams.stream, "all_reduce_sum", -1);
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

static void comm_nccl_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclAllGather(send_buf, recv_buf, bytes_per_rank, ncclChar, impl->nccl, impl->streams.stream));
    comm_nccl_milestone(impl->streams.stream, "all_gather", -1);
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

static void comm_nccl_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count,
                                         CommType type) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclReduceScatter(send_buf, recv_buf, count, comm_nccl_type(type), ncclSum, impl->nccl,
                                impl->streams.stream));
    comm_nccl_milestone(impl->streams.stream, "reduce_scatter_sum", -1);
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
    comm_nccl_milestone(impl->streams.stream, "all_to_all", -1);
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

static void comm_nccl_broadcast(Comm *comm, void *buf, size_t bytes, int root) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_after_compute(&impl->streams);
    ncclCheck(ncclBroadcast(buf, buf, bytes, ncclChar, root, impl->nccl, impl->streams.stream));
    comm_nccl_milestone(impl->streams.stream, "broadcast", -1);
    comm_streams_compute_after(&impl->streams, impl->streams.done);
}

// every rank has arrived, and its queued GPU work is done
static void comm_nccl_barrier(Comm *comm) {
    CommNccl *impl = comm_nccl_impl(comm);
    cuda_stream_wait(impl->streams.compute);
    impl->host->barrier(impl->host);
}

static void comm_nccl_destroy(Comm *comm) {
    CommNccl *impl = comm_nccl_impl(comm);
    comm_streams_free(&impl->streams);
    comm_exchanges_free(impl->slots);
    comm_nccl_watch_remove(impl->nccl);
    ncclCheck(ncclCommDestroy(impl->nccl));
    impl->host->destroy(impl->host);
    free(impl->world_ranks);
    free(impl);
    free(comm);
}

// cp/comm.h's verbs on device memory over NCCL; an all-to-all-v is waited for as a
// ring step is
static const Comm comm_nccl_verbs = {
    .ring_start = comm_nccl_ring_start,
    .ring_wait = comm_nccl_ring_wait,
    .all_reduce_sum = comm_nccl_all_reduce_sum,
    .all_gather = comm_nccl_all_gather,
    .reduce_scatter_sum = comm_nccl_reduce_scatter_sum,
    .all_to_all = comm_nccl_all_to_all,
    .all_to_all_v_start = comm_nccl_all_to_all_v_start,
    .all_to_all_v_wait = comm_nccl_ring_wait,
    .broadcast = comm_nccl_broadcast,
    .barrier = comm_nccl_barrier,
    .destroy = comm_nccl_destroy,
};

// Builds the NCCL communicator of the ranks of `mc` (taking ownership of mc unless
// it is MPI_COMM_WORLD or MPI_COMM_SELF). The device must be set already.
// compute: the stream that produces and consumes the buffers passed to the verbs.
static Comm *comm_nccl_create(MPI_Comm mc, cudaStream_t compute) {
    CommNccl *impl = (CommNccl *)callocCheck(1, sizeof(CommNccl));
    impl->host = comm_mpi_create(mc);
    int rank = impl->host->rank, size = impl->host->size;
    impl->world_ranks = (int *)mallocCheck(size * sizeof(int));
    for (int r = 0; r < size; r++) { impl->world_ranks[r] = comm_world_rank(mc, r); }
    ncclUniqueId id;
    if (rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    impl->host->broadcast(impl->host, &id, sizeof(id), 0);
    COMM_BLOCKING("ncclCommInitRank", ncclCheck(ncclCommInitRank(&impl->nccl, size, id, rank)));
    comm_nccl_watch_add(impl->nccl);
    comm_streams_init(&impl->streams, compute);
    comm_exchanges_init(impl->slots);
    return comm_new(&comm_nccl_verbs, impl, rank, size);
}

#endif // CP_COMM_NCCL_CUH
