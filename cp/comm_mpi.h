/*
The transport on host memory over MPI: the CPU twin's, and the host-memory groups
of the GPU trainer. A program that uses it starts MPI with mpi_runtime_init
(cp/mpi_runtime.h), which also reads the watchdog's GPT2CP_TIMEOUT.

No wait blocks in MPI: every verb posts non-blocking requests (MPI_Isend/Irecv,
MPI_Iallreduce, MPI_Iallgather, ...) and waits for them in one test loop,
comm_mpi_wait, under the progress watchdog of cp/comm_watchdog.h: the clock
restarts whenever a request completes; GPT2CP_TIMEOUT seconds without any ends
the job, naming the rank that did not answer.

Who did not answer:
  - a ring exchange: the rank it receives from (rank-1) while the receive is
    pending, else the rank it sends to (rank+1);
  - a collective: each rank, on entering collective number n of a Comm, posts an
    empty message to every other rank of it on a side communicator (a duplicate,
    so nothing else can match them). Every rank keeps one receive posted per peer
    and counts what arrives, inside comm_mpi_wait's loop: a peer whose count is
    below n has not reached collective n. Those ranks are named (all of them, when
    none is missing: the ranks arrived and the exchange itself stalled). Empty
    messages carry no buffer, so the sends are released at once and never waited.
    Known limit: in a world-wide collective with dp > 1, a rank has been seen to
    name a peer that was itself waiting in that collective (test/e2e_watchdog.sh); the
    first line, from a rank that waits on the stopped one, names the right rank.
*/
#ifndef CP_COMM_MPI_H
#define CP_COMM_MPI_H

#include <mpi.h>
#include <unistd.h>
#include "comm.h"
#include "comm_watchdog.h"
#include "mpi_runtime.h"
#include "../llmc/utils.h"

// the requests of one wait: a ring exchange's receive and send, or one collective
#define COMM_MPI_OPS 2

typedef struct {
    MPI_Comm comm;
    MPI_Comm arrivals;     // a duplicate of comm: the collectives' arrival notices
    int *world_ranks;      // (size) each rank's world rank, for the messages
    long collectives;      // the collectives this rank has entered
    long *arrived;         // (size) the collectives each rank is known to have entered
    // what comm_mpi_wait tests: COMM_MPI_OPS requests of the verb, then the posted
    // arrival receive of each rank (MPI_REQUEST_NULL for this rank itself)
    MPI_Request *requests; // (COMM_MPI_OPS + size)
    int *completed;        // (COMM_MPI_OPS + size) MPI_Testsome's indices
} CommMPI;

typedef struct {
    MPI_Request requests[2]; // receive from rank-1, send to rank+1
} CommMPIExchange;

static MPI_Datatype comm_mpi_type(CommType type) {
    switch (type) {
    case COMM_FLOAT: return MPI_FLOAT;
    case COMM_DOUBLE: return MPI_DOUBLE;
    case COMM_INT32: return MPI_INT;
    }
    return MPI_BYTE;
}

// MPI counts are int: move big buffers in pieces of at most 1 GiB
#define COMM_MPI_MAX_BYTES ((size_t)1 << 30)

static CommMPI *comm_mpi_impl(Comm *comm) { return (CommMPI *)comm->impl; }
static MPI_Comm comm_mpi_handle(Comm *comm) { return comm_mpi_impl(comm)->comm; }

// seconds between two polls of a wait beyond which this rank itself was not running
#define COMM_MPI_POLL_GAP 0.25

// the arrival notices are empty: this only gives MPI a valid address
static char comm_mpi_empty;

static void comm_mpi_post_arrival(CommMPI *impl, int peer) {
    MPI_Irecv(&comm_mpi_empty, 0, MPI_BYTE, peer, 0, impl->arrivals, &impl->requests[COMM_MPI_OPS + peer]);
}

// Waits until the verb's requests (impl->requests[0, COMM_MPI_OPS)) are done,
// counting arrival notices meanwhile. Returns 1 then, or 0 once nothing at all
// completed for GPT2CP_TIMEOUT seconds (every notice that came is counted by then).
// Polls: a busy loop for the first millisecond without progress (a ring step's
// partner is usually about to answer), then short sleeps, so that a rank waiting
// for a slow peer leaves the cores to the ranks that compute. Time this rank was
// not running (itself stopped, or starved of a core: a gap between two polls far
// longer than a sleep) is not held against the others: the clock starts again.
static int comm_mpi_wait(CommMPI *impl, int size) {
    int total = COMM_MPI_OPS + size;
    double last = comm_clock(), polled = last;
    for (;;) {
        int count;
        MPI_Testsome(total, impl->requests, &count, impl->completed, MPI_STATUSES_IGNORE);
        if (count == MPI_UNDEFINED) { return 1; } // nothing active: one rank, all done
        for (int i = 0; i < count; i++) {
            int peer = impl->completed[i] - COMM_MPI_OPS;
            if (peer >= 0) {
                impl->arrived[peer]++;
                comm_mpi_post_arrival(impl, peer);
            }
        }
        if (impl->requests[0] == MPI_REQUEST_NULL && impl->requests[1] == MPI_REQUEST_NULL) { return 1; }
        double now = comm_clock();
        if (count > 0 || now - polled > COMM_MPI_POLL_GAP) {
            last = now;
        } else if (now - last > comm_timeout) {
            return 0;
        }
        polled = now;
        if (now - last > 1e-3) { usleep(now - last > 1e-2 ? 500 : 20); }
    }
}

// ends the job, naming the ranks of the group `who` (n of them) in world ranks
__attribute__((noreturn))
static void comm_mpi_no_progress(CommMPI *impl, const int *who, int n, const char *verb) {
    char from[256];
    int len = snprintf(from, sizeof(from), n == 1 ? "rank" : "ranks");
    for (int i = 0; i < n && len < (int)sizeof(from) - 16; i++) {
        len += snprintf(from + len, sizeof(from) - len, "%s %d", i == 0 ? "" : ",", impl->world_ranks[who[i]]);
    }
    comm_no_progress(from, verb);
}

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
    CommMPI *impl = comm_mpi_impl(comm);
    CommMPIExchange *ex = (CommMPIExchange *)exchange;
    impl->requests[0] = ex->requests[0];
    impl->requests[1] = ex->requests[1];
    free(ex);
    if (!comm_mpi_wait(impl, comm->size)) {
        // the block to receive has not come, or the next rank does not take ours
        int peer = impl->requests[0] != MPI_REQUEST_NULL ? (comm->rank - 1 + comm->size) % comm->size
                                                         : (comm->rank + 1) % comm->size;
        comm_mpi_no_progress(impl, &peer, 1, "ring exchange");
    }
}

// Enters the next collective: tells every other rank so. Returns where the
// collective's request goes.
static MPI_Request *comm_mpi_enter(Comm *comm) {
    CommMPI *impl = comm_mpi_impl(comm);
    impl->collectives++;
    for (int peer = 0; peer < comm->size; peer++) {
        if (peer == comm->rank) { continue; }
        MPI_Request notice;
        MPI_Isend(&comm_mpi_empty, 0, MPI_BYTE, peer, 0, impl->arrivals, &notice);
        MPI_Request_free(&notice);
    }
    return &impl->requests[0];
}

// Waits for the collective entered last; on a timeout names the ranks that have
// not entered it.
static void comm_mpi_finish(Comm *comm, const char *verb) {
    CommMPI *impl = comm_mpi_impl(comm);
    if (comm_mpi_wait(impl, comm->size)) { return; }
    int *missing = (int *)mallocCheck(comm->size * sizeof(int));
    int n = 0;
    for (int peer = 0; peer < comm->size; peer++) {
        if (peer != comm->rank && impl->arrived[peer] < impl->collectives) { missing[n++] = peer; }
    }
    for (int peer = 0; n == 0 && peer < comm->size; peer++) {
        if (peer != comm->rank) { missing[n++] = peer; } // all arrived: the exchange itself stalled
    }
    comm_mpi_no_progress(impl, missing, n, verb);
}

static void comm_mpi_all_reduce_sum(Comm *comm, void *buf, size_t count, CommType type) {
    size_t elem = comm_type_size(type);
    size_t max_count = COMM_MPI_MAX_BYTES / elem;
    char *p = (char *)buf;
    for (size_t done = 0; done < count; done += max_count) {
        size_t n = count - done < max_count ? count - done : max_count;
        MPI_Iallreduce(MPI_IN_PLACE, p + done * elem, (int)n, comm_mpi_type(type), MPI_SUM, comm_mpi_handle(comm),
                       comm_mpi_enter(comm));
        comm_mpi_finish(comm, "all_reduce_sum");
    }
}

static void comm_mpi_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    if (bytes_per_rank > COMM_MPI_MAX_BYTES) {
        fatal("all_gather of %zu bytes per rank exceeds the MPI transport's limit", bytes_per_rank);
    }
    // in place (send_buf is this rank's part of recv_buf): MPI needs MPI_IN_PLACE then
    int in_place = send_buf == (const char *)recv_buf + (size_t)comm->rank * bytes_per_rank;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : send_buf, (int)bytes_per_rank, MPI_BYTE, recv_buf, (int)bytes_per_rank,
                   MPI_BYTE, comm_mpi_handle(comm), comm_mpi_enter(comm));
    comm_mpi_finish(comm, "all_gather");
}

static void comm_mpi_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count,
                                        CommType type) {
    if (count * comm_type_size(type) > COMM_MPI_MAX_BYTES) {
        fatal("reduce_scatter_sum of %zu elements per rank exceeds the MPI transport's limit", count);
    }
    MPI_Ireduce_scatter_block(send_buf, recv_buf, (int)count, comm_mpi_type(type), MPI_SUM, comm_mpi_handle(comm),
                              comm_mpi_enter(comm));
    comm_mpi_finish(comm, "reduce_scatter_sum");
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
        MPI_Ibcast(p + done, (int)n, MPI_BYTE, root, comm_mpi_handle(comm), comm_mpi_enter(comm));
        comm_mpi_finish(comm, "broadcast");
    }
}

static void comm_mpi_barrier(Comm *comm) {
    MPI_Ibarrier(comm_mpi_handle(comm), comm_mpi_enter(comm));
    comm_mpi_finish(comm, "barrier");
}

static void comm_mpi_destroy(Comm *comm) {
    CommMPI *impl = comm_mpi_impl(comm);
    for (int peer = 0; peer < comm->size; peer++) {
        MPI_Request *arrival = &impl->requests[COMM_MPI_OPS + peer];
        if (*arrival != MPI_REQUEST_NULL) {
            MPI_Cancel(arrival);
            MPI_Wait(arrival, MPI_STATUS_IGNORE); // cancelled (or matched): returns at once
        }
    }
    MPI_Comm_free(&impl->arrivals);
    if (impl->comm != MPI_COMM_WORLD && impl->comm != MPI_COMM_SELF) {
        MPI_Comm_free(&impl->comm);
    }
    free(impl->world_ranks);
    free(impl->arrived);
    free(impl->requests);
    free(impl->completed);
    free(impl);
    free(comm);
}

// Wraps an MPI communicator (the Comm takes ownership of communicators it did not
// get as MPI_COMM_WORLD or MPI_COMM_SELF). Collective over mc.
static Comm *comm_mpi_create(MPI_Comm mc) {
    Comm *comm = (Comm *)callocCheck(1, sizeof(Comm));
    CommMPI *impl = (CommMPI *)callocCheck(1, sizeof(CommMPI));
    impl->comm = mc;
    MPI_Comm_rank(mc, &comm->rank);
    MPI_Comm_size(mc, &comm->size);
    MPI_Comm_dup(mc, &impl->arrivals);
    int size = comm->size;
    impl->world_ranks = (int *)mallocCheck(size * sizeof(int));
    for (int r = 0; r < size; r++) { impl->world_ranks[r] = comm_world_rank(mc, r); }
    impl->arrived = (long *)callocCheck(size, sizeof(long));
    impl->requests = (MPI_Request *)mallocCheck((COMM_MPI_OPS + size) * sizeof(MPI_Request));
    impl->completed = (int *)mallocCheck((COMM_MPI_OPS + size) * sizeof(int));
    for (int i = 0; i < COMM_MPI_OPS + size; i++) { impl->requests[i] = MPI_REQUEST_NULL; }
    for (int peer = 0; peer < size; peer++) {
        if (peer != comm->rank) { comm_mpi_post_arrival(impl, peer); }
    }
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
