/*
What the two device-memory transports (cp/comm_nccl.cuh, cp/comm_mpi_staged.cuh)
share: their own stream, ordered against the compute stream by events, and the
pool of ring exchanges in flight.

The contract of every verb on device memory is stream order, not host order:

    ring_start   the transport's stream waits for all the compute stream has
                 queued (the send buffer is written there, and the receive buffer
                 may still be read there), then moves the data. Returns at once.
    ring_wait    the compute stream waits for the exchange; the host need not.
    collectives  the same two steps around the collective: once the verb returns,
                 whatever the compute stream queues next sees the result.

Events, never device-wide synchronisation, order the two streams, so the exchange
of the next K/V block overlaps the attention of the current one. The transports
keep the compute stream in their own state (CommStreams): the Comm verbs of
cp/comm.h stay as they are.

With one rank the ring is a device copy on the transport's stream (NCCL needs no
self send; MPI need not see the data).
*/
#ifndef CP_COMM_CUDA_CUH
#define CP_COMM_CUDA_CUH

#include "comm.h"
#include "../llmc/cuda_common.cuh"

typedef struct {
    cudaStream_t compute; // the stream that writes and reads the buffers
    cudaStream_t stream;  // the transport's own stream
    cudaEvent_t ready;    // recorded on compute, waited on by stream
    cudaEvent_t done;     // recorded on stream, waited on by compute (collectives)
} CommStreams;

static void comm_streams_init(CommStreams *s, cudaStream_t compute) {
    s->compute = compute;
    cudaCheck(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
}

static void comm_streams_free(CommStreams *s) {
    cudaCheck(cudaStreamSynchronize(s->stream));
    cudaCheck(cudaEventDestroy(s->ready));
    cudaCheck(cudaEventDestroy(s->done));
    cudaCheck(cudaStreamDestroy(s->stream));
}

// the transport's stream waits for everything queued on the compute stream so far
static void comm_streams_after_compute(CommStreams *s) {
    cudaCheck(cudaEventRecord(s->ready, s->compute));
    cudaCheck(cudaStreamWaitEvent(s->stream, s->ready, 0));
}

// the compute stream waits for everything queued on the transport's stream so far,
// marked by `event` (an exchange's own event, or the collectives' `done`)
static void comm_streams_compute_after(CommStreams *s, cudaEvent_t event) {
    cudaCheck(cudaEventRecord(event, s->stream));
    cudaCheck(cudaStreamWaitEvent(s->compute, event, 0));
}

// ----------------------------------------------------------------------------
// exchanges in flight: ring steps and all-to-all-v's

// Ring attention has at most two exchanges in flight (backward: the next K/V block
// and the accumulator of the current one), group-cast attention as many as its
// stages overlap; a few more slots cost nothing.
#define COMM_CUDA_SLOTS 4

typedef struct {
    int busy;
    cudaEvent_t done;    // recorded on the transport's stream once the data has moved
    // the staged transport's host side (unused by NCCL)
    cudaEvent_t copied;  // recorded on the transport's stream once host_send holds the data
    long seq;            // the exchange's number: MPI gets them in this order
    int posted;          // the host transport has the exchange (host_exchange)
    void *host_send;     // pinned, `capacity` bytes
    void *host_recv;     // pinned, `capacity` bytes
    size_t capacity;
    void *host_exchange; // the host transport's handle, NULL for a one-rank copy
    void *recv_buf;      // device destination of host_recv
    size_t bytes;
    // an all-to-all-v's parts (the caller's arrays, untouched until its wait); NULL
    // for a ring step
    const size_t *send_bytes, *send_offset, *recv_bytes, *recv_offset;
} CommExchange;

static void comm_exchanges_init(CommExchange *slots) {
    for (int i = 0; i < COMM_CUDA_SLOTS; i++) {
        memset(&slots[i], 0, sizeof(slots[i]));
        cudaCheck(cudaEventCreateWithFlags(&slots[i].done, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&slots[i].copied, cudaEventDisableTiming));
    }
}

static void comm_exchanges_free(CommExchange *slots) {
    for (int i = 0; i < COMM_CUDA_SLOTS; i++) {
        if (slots[i].busy) { fatal("a ring exchange is still in flight at the transport's destruction"); }
        cudaCheck(cudaEventDestroy(slots[i].done));
        cudaCheck(cudaEventDestroy(slots[i].copied));
        if (slots[i].host_send) { cudaCheck(cudaFreeHost(slots[i].host_send)); }
        if (slots[i].host_recv) { cudaCheck(cudaFreeHost(slots[i].host_recv)); }
    }
}

static CommExchange *comm_exchange_acquire(CommExchange *slots) {
    for (int i = 0; i < COMM_CUDA_SLOTS; i++) {
        if (!slots[i].busy) {
            slots[i].busy = 1;
            slots[i].host_exchange = NULL;
            slots[i].send_bytes = slots[i].send_offset = slots[i].recv_bytes = slots[i].recv_offset = NULL;
            return &slots[i];
        }
    }
    fatal("more than %d ring exchanges in flight: a ring_start without its ring_wait?", COMM_CUDA_SLOTS);
}

// The one-rank ring: receive what was sent, on the transport's stream.
static void comm_cuda_self_ring(CommStreams *s, const void *send_buf, void *recv_buf, size_t bytes) {
    if (send_buf != recv_buf) {
        cudaCheck(cudaMemcpyAsync(recv_buf, send_buf, bytes, cudaMemcpyDeviceToDevice, s->stream));
    }
}

// ring_wait's common part: compute waits for the exchange's event; the slot is free
static void comm_exchange_finish(CommStreams *s, CommExchange *ex) {
    cudaCheck(cudaStreamWaitEvent(s->compute, ex->done, 0));
    ex->busy = 0;
}

#endif // CP_COMM_CUDA_CUH
