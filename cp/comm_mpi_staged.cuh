/*
The transport on device memory over MPI, staged through pinned host buffers
(-ct mpi). It exists for several ranks sharing one GPU, which NCCL refuses: each
verb copies the device buffer to pinned host memory on the transport's stream,
runs the host transport's verb (cp/comm_mpi.h, with its progress watchdog) on it,
and copies the result back, ordered against the compute stream with events
(cp/comm_cuda.cuh).

A ring step, and an all-to-all-v (staged the same way, part by part), never
blocks the host at its start. ring_start queues the copy to
pinned memory (after the compute queued so far: the buffers' last writers) and
records an event behind it, then returns: the host goes on queueing the current
block's attention. MPI may read the pinned buffer only once the copy has landed,
so each exchange is handed to MPI as soon as its event says so: at any later
ring_start or ring_wait that finds it complete, or, at the latest, in its own
ring_wait, which then waits for that one event. Exchanges go to MPI in the order
they were started, so that every rank's sends and receives match alike. The MPI
transfer and the copy back run while the GPU works on the current block; the host
waits in ring_wait only for the transfer itself.

The collectives hand the host a buffer MPI reads at once, so they wait (for one
event) until the device data has landed; they are few per step.

Slower than NCCL, but the same algorithm and the same numbers, on any number of
ranks per GPU.
*/
#ifndef CP_COMM_MPI_STAGED_CUH
#define CP_COMM_MPI_STAGED_CUH

#include <mpi.h>
#include "comm.h"
#include "comm_cuda.cuh"
#include "comm_mpi.h"

typedef struct {
    Comm *host;             // the same group over MPI on host memory
    CommStreams streams;
    CommExchange slots[COMM_CUDA_SLOTS];
    long started;           // ring exchanges started so far
    long handed;            // of those, the ones handed to the host transport
    char *pinned;           // staging of the collectives
    size_t pinned_bytes;
    cudaEvent_t downloaded; // recorded once a collective's data is in `pinned`
} CommMpiStaged;

static CommMpiStaged *comm_staged_impl(Comm *comm) { return (CommMpiStaged *)comm->impl; }

// grows a pinned host buffer to at least `bytes` (only while nothing uses it)
static void pinned_reserve(void **buf, size_t *capacity, size_t bytes) {
    if (bytes <= *capacity) { return; }
    if (*buf) { cudaCheck(cudaFreeHost(*buf)); }
    cudaCheck(cudaMallocHost(buf, bytes));
    *capacity = bytes;
}

// Hands started exchanges to the host transport in the order they were started:
// each whose copy to host_send has landed, and, up to `until` (NULL: none), also
// those whose copy has not, waiting for it.
static void comm_staged_hand_over(CommMpiStaged *impl, const CommExchange *until) {
    for (;;) {
        CommExchange *ex = NULL;
        for (int i = 0; i < COMM_CUDA_SLOTS; i++) {
            if (impl->slots[i].busy && !impl->slots[i].posted && impl->slots[i].seq == impl->handed) {
                ex = &impl->slots[i];
            }
        }
        if (ex == NULL) { return; }
        if (until != NULL && !until->posted) {
            cudaCheck(cudaEventSynchronize(ex->copied));
        } else {
            cudaError_t landed = cudaEventQuery(ex->copied);
            if (landed == cudaErrorNotReady) { return; }
            cudaCheck(landed);
        }
        // MPI writes host_recv next. The slot's previous copy back out of it is done:
        // it ran on the transport's stream before this exchange's copy to host_send,
        // which the host has just seen land
        if (ex->recv_bytes == NULL) {
            ex->host_exchange = impl->host->ring_start(impl->host, ex->host_send, ex->host_recv, ex->bytes);
        } else {
            ex->host_exchange = impl->host->all_to_all_v_start(impl->host, ex->host_send, ex->send_bytes,
                                                               ex->send_offset, ex->host_recv, ex->recv_bytes,
                                                               ex->recv_offset);
        }
        ex->posted = 1;
        impl->handed++;
    }
}

// both staging buffers of a slot to at least `bytes`, once its last copy back has run
static void comm_staged_slot_reserve(CommExchange *ex, size_t bytes) {
    if (bytes <= ex->capacity) { return; }
    cudaCheck(cudaEventSynchronize(ex->done));
    size_t send_capacity = ex->capacity;
    pinned_reserve(&ex->host_send, &send_capacity, bytes);
    pinned_reserve(&ex->host_recv, &ex->capacity, bytes);
}

// The exchange is started once its copy to host_send is queued: it waits its turn to
// go to MPI (comm_staged_hand_over)
static void *comm_staged_queued(CommMpiStaged *impl, CommExchange *ex, void *recv_buf, size_t bytes) {
    cudaCheck(cudaEventRecord(ex->copied, impl->streams.stream));
    ex->recv_buf = recv_buf;
    ex->bytes = bytes;
    ex->seq = impl->started++;
    ex->posted = 0;
    comm_staged_hand_over(impl, NULL);
    return ex;
}

static void *comm_staged_ring_start(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    CommStreams *s = &impl->streams;
    CommExchange *ex = comm_exchange_acquire(impl->slots);
    comm_streams_after_compute(s);
    if (comm->size == 1) {
        comm_cuda_self_ring(s, send_buf, recv_buf, bytes);
        cudaCheck(cudaEventRecord(ex->done, s->stream));
        return ex;
    }
    comm_staged_slot_reserve(ex, bytes);
    cudaCheck(cudaMemcpyAsync(ex->host_send, send_buf, bytes, cudaMemcpyDeviceToHost, s->stream));
    return comm_staged_queued(impl, ex, recv_buf, bytes);
}

// the bytes a buffer of parts spans: the end of its last part
static size_t comm_parts_extent(const size_t *bytes, const size_t *offset, int n) {
    size_t end = 0;
    for (int i = 0; i < n; i++) {
        if (bytes[i] > 0 && offset[i] + bytes[i] > end) { end = offset[i] + bytes[i]; }
    }
    return end;
}

// An all-to-all-v staged as a ring step is: the parts to send copied to host_send at
// their own offsets (nothing between them is read), the host transport's
// all-to-all-v once they have landed, and the parts received copied back to theirs
// (so that what lies between them on the device, this rank's own part, is untouched)
static void *comm_staged_all_to_all_v_start(Comm *comm, const void *send_buf, const size_t *send_bytes,
                                            const size_t *send_offset, void *recv_buf, const size_t *recv_bytes,
                                            const size_t *recv_offset) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    CommStreams *s = &impl->streams;
    CommExchange *ex = comm_exchange_acquire(impl->slots);
    comm_streams_after_compute(s);
    if (comm->size == 1) { // the own rank's counts are 0: nothing moves
        cudaCheck(cudaEventRecord(ex->done, s->stream));
        return ex;
    }
    size_t send_extent = comm_parts_extent(send_bytes, send_offset, comm->size);
    size_t recv_extent = comm_parts_extent(recv_bytes, recv_offset, comm->size);
    comm_staged_slot_reserve(ex, send_extent > recv_extent ? send_extent : recv_extent);
    for (int peer = 0; peer < comm->size; peer++) {
        if (send_bytes[peer] == 0) { continue; }
        cudaCheck(cudaMemcpyAsync((char *)ex->host_send + send_offset[peer], (const char *)send_buf + send_offset[peer],
                                  send_bytes[peer], cudaMemcpyDeviceToHost, s->stream));
    }
    ex->send_bytes = send_bytes; ex->send_offset = send_offset;
    ex->recv_bytes = recv_bytes; ex->recv_offset = recv_offset;
    return comm_staged_queued(impl, ex, recv_buf, recv_extent);
}

static void comm_staged_ring_wait(Comm *comm, void *exchange) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    CommStreams *s = &impl->streams;
    CommExchange *ex = (CommExchange *)exchange;
    if (comm->size > 1) {
        comm_staged_hand_over(impl, ex);
        if (ex->recv_bytes == NULL) {
            impl->host->ring_wait(impl->host, ex->host_exchange);
            cudaCheck(cudaMemcpyAsync(ex->recv_buf, ex->host_recv, ex->bytes, cudaMemcpyHostToDevice, s->stream));
        } else {
            impl->host->all_to_all_v_wait(impl->host, ex->host_exchange);
            for (int peer = 0; peer < comm->size; peer++) {
                if (ex->recv_bytes[peer] == 0) { continue; }
                cudaCheck(cudaMemcpyAsync((char *)ex->recv_buf + ex->recv_offset[peer],
                                          (const char *)ex->host_recv + ex->recv_offset[peer], ex->recv_bytes[peer],
                                          cudaMemcpyHostToDevice, s->stream));
            }
        }
        ex->host_exchange = NULL;
        cudaCheck(cudaEventRecord(ex->done, s->stream));
    }
    comm_exchange_finish(s, ex);
    comm_staged_hand_over(impl, NULL);
}

// Copies `bytes` of device memory into the staging buffer at `offset` (growing it
// to `total` bytes first) once the compute stream has written it; returns the
// staging buffer once the data is there, ready for the host.
static char *comm_staged_download(CommMpiStaged *impl, const void *buf, size_t bytes, size_t offset, size_t total) {
    CommStreams *s = &impl->streams;
    comm_streams_after_compute(s);
    if (total > impl->pinned_bytes) {
        cudaCheck(cudaStreamSynchronize(s->stream)); // earlier copies out of the staging buffer are done
        pinned_reserve((void **)&impl->pinned, &impl->pinned_bytes, total);
    }
    // stream order: an earlier copy back out of the staging buffer has run before this
    cudaCheck(cudaMemcpyAsync(impl->pinned + offset, buf, bytes, cudaMemcpyDeviceToHost, s->stream));
    cudaCheck(cudaEventRecord(impl->downloaded, s->stream));
    cudaCheck(cudaEventSynchronize(impl->downloaded));
    return impl->pinned;
}

// Copies the host result back to the device; the compute stream waits for it.
static void comm_staged_upload(CommMpiStaged *impl, void *buf, const char *host, size_t bytes) {
    CommStreams *s = &impl->streams;
    cudaCheck(cudaMemcpyAsync(buf, host, bytes, cudaMemcpyHostToDevice, s->stream));
    comm_streams_compute_after(s, s->done);
}

static void comm_staged_all_reduce_sum(Comm *comm, void *buf, size_t count, CommType type) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    size_t bytes = count * comm_type_size(type);
    char *host = comm_staged_download(impl, buf, bytes, 0, bytes);
    impl->host->all_reduce_sum(impl->host, host, count, type);
    comm_staged_upload(impl, buf, host, bytes);
}

// staging: [this rank's part | every rank's parts]
static void comm_staged_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    size_t all = bytes_per_rank * comm->size;
    char *host = comm_staged_download(impl, send_buf, bytes_per_rank, 0, bytes_per_rank + all);
    impl->host->all_gather(impl->host, host, host + bytes_per_rank, bytes_per_rank);
    comm_staged_upload(impl, recv_buf, host + bytes_per_rank, all);
}

// staging: [every rank's parts | this rank's sum]
static void comm_staged_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count,
                                           CommType type) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    size_t part = count * comm_type_size(type);
    size_t all = part * comm->size;
    char *host = comm_staged_download(impl, send_buf, all, 0, all + part);
    impl->host->reduce_scatter_sum(impl->host, host, host + all, count, type);
    comm_staged_upload(impl, recv_buf, host + all, part);
}

// staging: [every rank's parts to send | every rank's parts received]
static void comm_staged_all_to_all(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    size_t all = bytes_per_rank * comm->size;
    char *host = comm_staged_download(impl, send_buf, all, 0, 2 * all);
    impl->host->all_to_all(impl->host, host, host + all, bytes_per_rank);
    comm_staged_upload(impl, recv_buf, host + all, all);
}

static void comm_staged_broadcast(Comm *comm, void *buf, size_t bytes, int root) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    char *host = comm_staged_download(impl, buf, bytes, 0, bytes);
    impl->host->broadcast(impl->host, host, bytes, root);
    comm_staged_upload(impl, buf, host, bytes);
}

// every rank has arrived, and its queued GPU work is done
static void comm_staged_barrier(Comm *comm) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    cudaCheck(cudaStreamSynchronize(impl->streams.compute));
    impl->host->barrier(impl->host);
}

static void comm_staged_destroy(Comm *comm) {
    CommMpiStaged *impl = comm_staged_impl(comm);
    comm_streams_free(&impl->streams);
    comm_exchanges_free(impl->slots);
    cudaCheck(cudaEventDestroy(impl->downloaded));
    if (impl->pinned) { cudaCheck(cudaFreeHost(impl->pinned)); }
    impl->host->destroy(impl->host);
    free(impl);
    free(comm);
}

// cp/comm.h's verbs on device memory, staged through MPI on host memory; an
// all-to-all-v is waited for as a ring step is
static const Comm comm_staged_verbs = {
    .ring_start = comm_staged_ring_start,
    .ring_wait = comm_staged_ring_wait,
    .all_reduce_sum = comm_staged_all_reduce_sum,
    .all_gather = comm_staged_all_gather,
    .reduce_scatter_sum = comm_staged_reduce_scatter_sum,
    .all_to_all = comm_staged_all_to_all,
    .all_to_all_v_start = comm_staged_all_to_all_v_start,
    .all_to_all_v_wait = comm_staged_ring_wait,
    .broadcast = comm_staged_broadcast,
    .barrier = comm_staged_barrier,
    .destroy = comm_staged_destroy,
};

// Wraps the ranks of `mc` (taking ownership of mc unless it is MPI_COMM_WORLD or
// MPI_COMM_SELF). compute: the stream that produces and consumes the buffers.
static Comm *comm_mpi_staged_create(MPI_Comm mc, cudaStream_t compute) {
    CommMpiStaged *impl = (CommMpiStaged *)callocCheck(1, sizeof(CommMpiStaged));
    impl->host = comm_mpi_create(mc);
    comm_streams_init(&impl->streams, compute);
    comm_exchanges_init(impl->slots);
    cudaCheck(cudaEventCreateWithFlags(&impl->downloaded, cudaEventDisableTiming));
    return comm_new(&comm_staged_verbs, impl, impl->host->rank, impl->host->size);
}

#endif // CP_COMM_MPI_STAGED_CUH
