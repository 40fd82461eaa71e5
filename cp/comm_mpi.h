/*
The transport on host memory over MPI: the CPU twin's, and the host-memory groups
of the GPU trainer. A program that uses it starts MPI with mpi_runtime_init
(cp/mpi_runtime.h), which also reads the watchdog's GPT2CP_TIMEOUT.

No wait blocks in MPI: every verb posts non-blocking requests (MPI_Isend/Irecv,
MPI_Iallreduce, MPI_Iallgather, MPI_Ialltoall, ...) and waits for them in one test
loop, comm_mpi_wait, under the progress watchdog of cp/comm_watchdog.h: the clock
restarts whenever a request completes or a beacon arrives; GPT2CP_TIMEOUT seconds
without any ends the job, naming the rank that did not answer. What has no
non-blocking form (MPI_Init, MPI_Finalize, making communicators) runs under
COMM_BLOCKING.

MPI counts are int: a transfer larger than COMM_MPI_MAX_BYTES (1 GiB) goes in
pieces of at most that many bytes, each its own request (a ring step) or its own
collective. A piece of the verbs whose buffers hold one part per rank (all_gather,
all_to_all) is the same slice of every rank's part: an MPI datatype of the slice
whose extent is a whole part; reduce_scatter_sum copies the slices together first
(MPI reduces no derived datatype). (GPT2CP_TEST_MPI_MAX_BYTES
lowers the limit, for the tests of the pieces: test/test_comm_mpi.c, test/e2e_zero.sh.)

Who did not answer:
  - a ring exchange: the rank it receives from (rank-1) while the receive is
    pending, else the rank it sends to (rank+1);
  - an all-to-all-v (point to point, like the ring: one Isend or Irecv per piece
    and peer with a nonzero count, none for a zero count): the peers whose
    messages have not all come while any is pending, else the peers that have
    not taken all of ours;
  - a collective: each rank, on entering collective number n of a Comm, posts an
    empty message to every other rank of it on a side communicator (a duplicate,
    so nothing else can match them). Every rank keeps one receive posted per peer
    and counts what arrives, inside comm_mpi_wait's loop: a peer whose count is
    below n has not reached collective n. Those ranks are named (all of them, when
    none is missing: the ranks arrived and the exchange itself stalled). Empty
    messages carry no buffer, so the sends are released at once and never waited.
  - of those, only the ones that fell silent, or else any silent rank of the job
    (cp/comm_watchdog.h): never a peer that is itself waiting.

One file over 500 lines because every verb above is built on the same two pieces,
the bounded pieces of a large message and the wait that names silent peers, and
reads best beside them.
*/
#ifndef CP_COMM_MPI_H
#define CP_COMM_MPI_H

#include <mpi.h>
#include <unistd.h>
#include "comm.h"
#include "comm_watchdog.h"
#include "mpi_runtime.h"
#include "../llmc/utils.h"

// MPI counts are int: move big buffers in pieces of at most 1 GiB
#define COMM_MPI_MAX_BYTES ((size_t)1 << 30)
// MPI's non-blocking all-reduce (Open MPI's libnbc) mallocs a scratch buffer of
// the whole message at every call and frees it at its end: the gradient all-reduce
// goes in pieces of at most this, so that the scratch stays small, and below the
// CPU trainer's mmap threshold (1 MiB, train_gpt2cp_cpu.c, which checks it), so that every call
// reuses the same heap memory. A scratch of its own mmap would be faulted in page
// by page at every call: with 64 MiB pieces a -e d12 step at cp 2 took 6.6-7.3 s
// instead of 4.9-5.0 s (dev/bench/README.md).
#define COMM_MPI_REDUCE_PIECE_BYTES ((size_t)512 << 10)

typedef struct {
    MPI_Comm comm;
    MPI_Comm arrivals;     // a duplicate of comm: the collectives' arrival notices
    int *world_ranks;      // (size) each rank's world rank, for the messages
    int *awaited;          // (size) the ranks a stalled verb waits for
    size_t max_bytes;      // the most bytes one MPI call moves (COMM_MPI_MAX_BYTES)
    long collectives;      // the collectives this rank has entered
    long *arrived;         // (size) the collectives each rank is known to have entered
    // what comm_mpi_wait tests: the posted arrival receive of each rank
    // (MPI_REQUEST_NULL for this rank itself), then the verb's requests
    MPI_Request *requests; // (size + op_capacity)
    int *completed;        // (size + op_capacity) MPI_Testsome's indices
    int ops, op_capacity;  // the verb's requests now, and room for them
    // a point-to-point exchange's requests (ring, all-to-all-v): the peer of each
    // (op_capacity), the first `op_receives` of them receives
    int *op_peers;
    int op_receives;
} CommMPI;

// A point-to-point exchange in flight (ring_start, all_to_all_v_start): its
// receives first, then its sends, and the peer of each.
typedef struct {
    int count, receives;
    MPI_Request *requests; // (count)
    int *peers;            // (count)
} CommMPIExchange;

static MPI_Datatype comm_mpi_type(CommType type) {
    switch (type) {
    case COMM_FLOAT: return MPI_FLOAT;
    case COMM_DOUBLE: return MPI_DOUBLE;
    case COMM_INT32: return MPI_INT;
    }
    return MPI_BYTE;
}

static CommMPI *comm_mpi_impl(Comm *comm) { return (CommMPI *)comm->impl; }
static MPI_Comm comm_mpi_handle(Comm *comm) { return comm_mpi_impl(comm)->comm; }

// The elements of `elem_bytes` bytes one piece of a transfer holds: as many as the
// limit allows, at least one.
static size_t comm_mpi_piece_count(const CommMPI *impl, size_t elem_bytes) {
    size_t n = impl->max_bytes / elem_bytes;
    return n > 0 ? n : 1;
}

// Room for n requests of a verb (requests of a transfer in pieces).
static MPI_Request *comm_mpi_ops(CommMPI *impl, int size, int n) {
    if (n > impl->op_capacity) {
        impl->requests = (MPI_Request *)realloc(impl->requests, (size_t)(size + n) * sizeof(MPI_Request));
        impl->completed = (int *)realloc(impl->completed, (size_t)(size + n) * sizeof(int));
        impl->op_peers = (int *)realloc(impl->op_peers, (size_t)n * sizeof(int));
        if (impl->requests == NULL || impl->completed == NULL || impl->op_peers == NULL) {
            fatal("out of memory for MPI requests");
        }
        impl->op_capacity = n;
    }
    impl->ops = n;
    for (int i = 0; i < n; i++) { impl->requests[size + i] = MPI_REQUEST_NULL; }
    return impl->requests + size;
}

// seconds between two polls of a wait beyond which this rank itself was not running
#define COMM_MPI_POLL_GAP 0.25

// the arrival notices are empty: this only gives MPI a valid address
static char comm_mpi_empty;

static void comm_mpi_post_arrival(CommMPI *impl, int peer) {
    MPI_Irecv(&comm_mpi_empty, 0, MPI_BYTE, peer, 0, impl->arrivals, &impl->requests[peer]);
}

// whether every request of the verb is done
static int comm_mpi_ops_done(const CommMPI *impl, int size) {
    for (int i = 0; i < impl->ops; i++) {
        if (impl->requests[size + i] != MPI_REQUEST_NULL) { return 0; }
    }
    return 1;
}

// The ranks of the Comm a stalled verb waits for: into who, how many.
typedef int (*CommMPIAwaited)(Comm *comm, int *who);

// A wait without progress for GPT2CP_TIMEOUT and `expired_for` seconds more: ends
// the job naming the awaited ranks that fell silent, or returns to wait on
// (cp/comm_watchdog.h says when).
static void comm_mpi_stalled(Comm *comm, CommMPIAwaited awaited, double expired_for, const char *verb) {
    CommMPI *impl = comm_mpi_impl(comm);
    int n = awaited(comm, impl->awaited);
    for (int i = 0; i < n; i++) { impl->awaited[i] = impl->world_ranks[impl->awaited[i]]; }
    int running;
    int named = comm_stall_named(impl->awaited, n, expired_for, &running);
    if (named > 0) { comm_no_progress_from(comm_named, named, running, verb); }
}

// Waits until the verb's requests are done, counting arrival notices meanwhile.
// Once nothing at all completed (and no beacon came) for GPT2CP_TIMEOUT seconds,
// the stall is judged at every poll (comm_mpi_stalled) until the job ends or a
// request completes.
// Polls: a busy loop for the first millisecond without progress (a ring step's
// partner is usually about to answer), then short sleeps, so that a rank waiting
// for a slow peer leaves the cores to the ranks that compute. Time this rank was
// not running (itself stopped, or starved of a core: a gap between two polls far
// longer than a sleep) is not held against the others: the clock starts again.
static void comm_mpi_wait(Comm *comm, CommMPIAwaited awaited, const char *verb) {
    CommMPI *impl = comm_mpi_impl(comm);
    int size = comm->size, total = size + impl->ops;
    double last = comm_clock(), polled = last;
    for (;;) {
        int count;
        MPI_Testsome(total, impl->requests, &count, impl->completed, MPI_STATUSES_IGNORE);
        if (count == MPI_UNDEFINED) { return; } // nothing active: one rank, all done
        for (int i = 0; i < count; i++) {
            int peer = impl->completed[i];
            if (peer < size) {
                impl->arrived[peer]++;
                comm_mpi_post_arrival(impl, peer);
            }
        }
        if (comm_mpi_ops_done(impl, size)) { return; }
        int beacons = comm_watchdog_poll();
        double now = comm_clock();
        if (count > 0 || now - polled > COMM_MPI_POLL_GAP || beacons > 0) {
            last = now;
        } else if (now - last > comm_timeout) {
            comm_mpi_stalled(comm, awaited, now - last - comm_timeout, verb);
        }
        polled = now;
        if (now - last > 1e-3) { usleep(now - last > 1e-2 ? 500 : 20); }
    }
}

// The pieces of at most max_bytes that `bytes` go in (a zero count: none)
static int comm_mpi_pieces(const CommMPI *impl, size_t bytes) {
    size_t piece = comm_mpi_piece_count(impl, 1);
    return (int)((bytes + piece - 1) / piece);
}

// An exchange with room for `count` requests, of which the first `receives` receives.
static CommMPIExchange *comm_mpi_exchange(int count, int receives) {
    CommMPIExchange *ex = (CommMPIExchange *)mallocCheck(sizeof(CommMPIExchange));
    ex->count = count;
    ex->receives = receives;
    ex->requests = (MPI_Request *)mallocCheck((size_t)count * sizeof(MPI_Request));
    ex->peers = (int *)mallocCheck((size_t)count * sizeof(int));
    return ex;
}

// Posts `bytes` of buf to or from peer in pieces of at most max_bytes (one tag: MPI
// delivers the messages between two ranks in the order posted), as the exchange's
// requests from *at on. receive: MPI_Irecv, else MPI_Isend.
static void comm_mpi_post(Comm *comm, CommMPIExchange *ex, int *at, int receive, int peer, const void *buf,
                          size_t bytes) {
    CommMPI *impl = comm_mpi_impl(comm);
    size_t piece = comm_mpi_piece_count(impl, 1);
    for (size_t done = 0; done < bytes; done += piece) {
        size_t n = bytes - done < piece ? bytes - done : piece;
        ex->peers[*at] = peer;
        if (receive) {
            MPI_Irecv((char *)buf + done, (int)n, MPI_BYTE, peer, 0, impl->comm, &ex->requests[*at]);
        } else {
            MPI_Isend((const char *)buf + done, (int)n, MPI_BYTE, peer, 0, impl->comm, &ex->requests[*at]);
        }
        (*at)++;
    }
}

// One ring step, in pieces of at most max_bytes: every piece's receive and send
// are posted at once (a step of 0 bytes posts none, on every rank alike).
static void *comm_mpi_ring_start(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes) {
    int pieces = comm_mpi_pieces(comm_mpi_impl(comm), bytes);
    CommMPIExchange *ex = comm_mpi_exchange(2 * pieces, pieces);
    int next = (comm->rank + 1) % comm->size;
    int prev = (comm->rank - 1 + comm->size) % comm->size;
    int at = 0;
    comm_mpi_post(comm, ex, &at, 1, prev, recv_buf, bytes);
    comm_mpi_post(comm, ex, &at, 0, next, send_buf, bytes);
    return ex;
}

// A stalled point-to-point exchange waits for the peers whose messages have not
// all come while any receive is pending, else for the peers that have not taken
// all of ours (the ring: rank-1, else rank+1). Each peer named once.
static int comm_mpi_exchange_awaited(Comm *comm, int *who) {
    const CommMPI *impl = comm_mpi_impl(comm);
    const MPI_Request *ops = impl->requests + comm->size;
    int n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++) {
        int from = pass == 0 ? 0 : impl->op_receives, to = pass == 0 ? impl->op_receives : impl->ops;
        for (int i = from; i < to; i++) {
            if (ops[i] == MPI_REQUEST_NULL) { continue; }
            int seen = 0;
            for (int j = 0; j < n; j++) { seen |= who[j] == impl->op_peers[i]; }
            if (!seen) { who[n++] = impl->op_peers[i]; }
        }
    }
    return n;
}

// Waits for a point-to-point exchange and frees it.
static void comm_mpi_exchange_wait(Comm *comm, CommMPIExchange *ex, const char *verb) {
    CommMPI *impl = comm_mpi_impl(comm);
    MPI_Request *ops = comm_mpi_ops(impl, comm->size, ex->count);
    memcpy(ops, ex->requests, (size_t)ex->count * sizeof(MPI_Request));
    memcpy(impl->op_peers, ex->peers, (size_t)ex->count * sizeof(int));
    impl->op_receives = ex->receives;
    free(ex->requests);
    free(ex->peers);
    free(ex);
    comm_mpi_wait(comm, comm_mpi_exchange_awaited, verb);
}

static void comm_mpi_ring_wait(Comm *comm, void *exchange) {
    comm_mpi_exchange_wait(comm, (CommMPIExchange *)exchange, "ring exchange");
}

// The all-to-all-v: for every peer with a nonzero count its pieces (at most
// max_bytes each), receives first; a zero count posts nothing.
static void *comm_mpi_all_to_all_v_start(Comm *comm, const void *send_buf, const size_t *send_bytes,
                                         const size_t *send_offset, void *recv_buf, const size_t *recv_bytes,
                                         const size_t *recv_offset) {
    CommMPI *impl = comm_mpi_impl(comm);
    if (send_bytes[comm->rank] != 0 || recv_bytes[comm->rank] != 0) {
        fatal("all_to_all_v: rank %d's own entries must be 0 (the caller copies its own part)", comm->rank);
    }
    int receives = 0, count = 0;
    for (int peer = 0; peer < comm->size; peer++) {
        receives += comm_mpi_pieces(impl, recv_bytes[peer]);
        count += comm_mpi_pieces(impl, send_bytes[peer]);
    }
    count += receives;
    CommMPIExchange *ex = comm_mpi_exchange(count, receives);
    int at = 0;
    for (int peer = 0; peer < comm->size; peer++) {
        comm_mpi_post(comm, ex, &at, 1, peer, (char *)recv_buf + recv_offset[peer], recv_bytes[peer]);
    }
    for (int peer = 0; peer < comm->size; peer++) {
        comm_mpi_post(comm, ex, &at, 0, peer, (const char *)send_buf + send_offset[peer], send_bytes[peer]);
    }
    return ex;
}

static void comm_mpi_all_to_all_v_wait(Comm *comm, void *exchange) {
    comm_mpi_exchange_wait(comm, (CommMPIExchange *)exchange, "all_to_all_v");
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
    return comm_mpi_ops(impl, comm->size, 1);
}

// A stalled collective waits for the ranks that have not entered it; for all the
// others when every one has (the exchange itself stalled).
static int comm_mpi_collective_awaited(Comm *comm, int *who) {
    const CommMPI *impl = comm_mpi_impl(comm);
    int n = 0;
    for (int peer = 0; peer < comm->size; peer++) {
        if (peer != comm->rank && impl->arrived[peer] < impl->collectives) { who[n++] = peer; }
    }
    for (int peer = 0; n == 0 && peer < comm->size; peer++) {
        if (peer != comm->rank) { who[n++] = peer; }
    }
    return n;
}

// Waits for the collective entered last.
static void comm_mpi_finish(Comm *comm, const char *verb) {
    comm_mpi_wait(comm, comm_mpi_collective_awaited, verb);
}

// A slice of every rank's part of a buffer that holds one part per rank: n bytes,
// and the next rank's slice a whole part (stride bytes) on. *count: how many of
// the returned type the call moves per rank. Freed with comm_mpi_slice_free.
static MPI_Datatype comm_mpi_slice(size_t n, size_t stride, int *count) {
    if (n == stride) { // the whole part: no datatype of its own
        *count = (int)n;
        return MPI_BYTE;
    }
    MPI_Datatype run, slice;
    MPI_Type_contiguous((int)n, MPI_BYTE, &run);
    MPI_Type_create_resized(run, 0, (MPI_Aint)stride, &slice);
    MPI_Type_commit(&slice);
    MPI_Type_free(&run);
    *count = 1;
    return slice;
}

static void comm_mpi_slice_free(MPI_Datatype type) {
    if (type != MPI_BYTE) { MPI_Type_free(&type); }
}

// The scratch memory an all-reduce of `bytes` holds on a rank: a piece's (the
// memory estimate counts it, train/memory.h).
static size_t comm_mpi_all_reduce_scratch(size_t bytes) {
    return bytes < COMM_MPI_REDUCE_PIECE_BYTES ? bytes : COMM_MPI_REDUCE_PIECE_BYTES;
}

static void comm_mpi_all_reduce_sum(Comm *comm, void *buf, size_t count, CommType type) {
    size_t elem = comm_type_size(type);
    size_t max_count = comm_mpi_piece_count(comm_mpi_impl(comm), elem);
    if (max_count > COMM_MPI_REDUCE_PIECE_BYTES / elem) { max_count = COMM_MPI_REDUCE_PIECE_BYTES / elem; }
    char *p = (char *)buf;
    for (size_t done = 0; done < count; done += max_count) {
        size_t n = count - done < max_count ? count - done : max_count;
        MPI_Iallreduce(MPI_IN_PLACE, p + done * elem, (int)n, comm_mpi_type(type), MPI_SUM, comm_mpi_handle(comm),
                       comm_mpi_enter(comm));
        comm_mpi_finish(comm, "all_reduce_sum");
    }
}

static void comm_mpi_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    size_t max = comm_mpi_piece_count(comm_mpi_impl(comm), 1);
    // in place (send_buf is this rank's part of recv_buf): MPI needs MPI_IN_PLACE then
    int in_place = send_buf == (const char *)recv_buf + (size_t)comm->rank * bytes_per_rank;
    size_t done = 0;
    do {
        size_t n = bytes_per_rank - done < max ? bytes_per_rank - done : max;
        int count;
        MPI_Datatype slice = comm_mpi_slice(n, bytes_per_rank, &count);
        MPI_Iallgather(in_place ? MPI_IN_PLACE : (const char *)send_buf + done, (int)n, MPI_BYTE,
                       (char *)recv_buf + done, count, slice, comm_mpi_handle(comm), comm_mpi_enter(comm));
        comm_mpi_finish(comm, "all_gather");
        comm_mpi_slice_free(slice);
        done += n;
    } while (done < bytes_per_rank);
}

// MPI's reductions take no derived datatypes: in pieces, the slice of every part is
// first copied into a buffer of its own (at most COMM_MPI_STAGE_BYTES)
#define COMM_MPI_STAGE_BYTES ((size_t)64 << 20)

static void comm_mpi_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count,
                                        CommType type) {
    CommMPI *impl = comm_mpi_impl(comm);
    size_t elem = comm_type_size(type);
    if (count * elem <= impl->max_bytes) {
        MPI_Ireduce_scatter_block(send_buf, recv_buf, (int)count, comm_mpi_type(type), MPI_SUM, impl->comm,
                                  comm_mpi_enter(comm));
        comm_mpi_finish(comm, "reduce_scatter_sum");
        return;
    }
    size_t stage_bytes = impl->max_bytes < COMM_MPI_STAGE_BYTES ? impl->max_bytes : COMM_MPI_STAGE_BYTES;
    size_t max = stage_bytes / (elem * (size_t)comm->size);
    if (max == 0) { max = 1; }
    char *stage = (char *)mallocCheck(max * elem * (size_t)comm->size);
    for (size_t done = 0; done < count; done += max) {
        size_t n = count - done < max ? count - done : max;
        for (int part = 0; part < comm->size; part++) {
            memcpy(stage + (size_t)part * n * elem, (const char *)send_buf + ((size_t)part * count + done) * elem,
                   n * elem);
        }
        MPI_Ireduce_scatter_block(stage, (char *)recv_buf + done * elem, (int)n, comm_mpi_type(type), MPI_SUM,
                                  impl->comm, comm_mpi_enter(comm));
        comm_mpi_finish(comm, "reduce_scatter_sum");
    }
    free(stage);
}

static void comm_mpi_all_to_all(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    size_t max = comm_mpi_piece_count(comm_mpi_impl(comm), 1);
    size_t done = 0;
    do {
        size_t n = bytes_per_rank - done < max ? bytes_per_rank - done : max;
        int count;
        MPI_Datatype slice = comm_mpi_slice(n, bytes_per_rank, &count);
        MPI_Ialltoall((const char *)send_buf + done, count, slice, (char *)recv_buf + done, count, slice,
                      comm_mpi_handle(comm), comm_mpi_enter(comm));
        comm_mpi_finish(comm, "all_to_all");
        comm_mpi_slice_free(slice);
        done += n;
    } while (done < bytes_per_rank);
}

static void comm_mpi_broadcast(Comm *comm, void *buf, size_t bytes, int root) {
    size_t max = comm_mpi_piece_count(comm_mpi_impl(comm), 1);
    char *p = (char *)buf;
    for (size_t done = 0; done < bytes; done += max) {
        size_t n = bytes - done < max ? bytes - done : max;
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
        MPI_Request *arrival = &impl->requests[peer];
        if (*arrival != MPI_REQUEST_NULL) {
            MPI_Cancel(arrival);
            MPI_Request_free(arrival); // cancelled (or matched): nothing is waited for
        }
    }
    MPI_Comm_free(&impl->arrivals);
    if (impl->comm != MPI_COMM_WORLD && impl->comm != MPI_COMM_SELF) {
        MPI_Comm_free(&impl->comm);
    }
    free_all(impl->world_ranks, impl->awaited, impl->arrived, impl->requests, impl->completed, impl->op_peers, impl,
             comm);
}

// the per-call limit: COMM_MPI_MAX_BYTES, or for tests GPT2CP_TEST_MPI_MAX_BYTES
static size_t comm_mpi_max_bytes(void) {
    const char *env = getenv("GPT2CP_TEST_MPI_MAX_BYTES");
    if (env == NULL) { return COMM_MPI_MAX_BYTES; }
    char *end;
    errno = 0;
    long long v = strtoll(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || v < 1 || (size_t)v > COMM_MPI_MAX_BYTES) {
        fatal("GPT2CP_TEST_MPI_MAX_BYTES='%s': expected a number of bytes from 1 to %zu", env, COMM_MPI_MAX_BYTES);
    }
    return (size_t)v;
}

// cp/comm.h's verbs over MPI on host memory
static const Comm comm_mpi_verbs = {
    .ring_start = comm_mpi_ring_start,
    .ring_wait = comm_mpi_ring_wait,
    .all_reduce_sum = comm_mpi_all_reduce_sum,
    .all_gather = comm_mpi_all_gather,
    .reduce_scatter_sum = comm_mpi_reduce_scatter_sum,
    .all_to_all = comm_mpi_all_to_all,
    .all_to_all_v_start = comm_mpi_all_to_all_v_start,
    .all_to_all_v_wait = comm_mpi_all_to_all_v_wait,
    .broadcast = comm_mpi_broadcast,
    .barrier = comm_mpi_barrier,
    .destroy = comm_mpi_destroy,
};

// Wraps an MPI communicator (the Comm takes ownership of communicators it did not
// get as MPI_COMM_WORLD or MPI_COMM_SELF). Collective over mc.
static Comm *comm_mpi_create(MPI_Comm mc) {
    CommMPI *impl = (CommMPI *)callocCheck(1, sizeof(CommMPI));
    impl->comm = mc;
    impl->max_bytes = comm_mpi_max_bytes();
    int rank, size;
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(mc, &impl->arrivals));
    impl->world_ranks = (int *)mallocCheck(size * sizeof(int));
    impl->awaited = (int *)mallocCheck(size * sizeof(int));
    for (int r = 0; r < size; r++) { impl->world_ranks[r] = comm_world_rank(mc, r); }
    impl->arrived = (long *)callocCheck(size, sizeof(long));
    impl->requests = (MPI_Request *)mallocCheck(size * sizeof(MPI_Request));
    impl->completed = (int *)mallocCheck(size * sizeof(int));
    impl->op_peers = (int *)mallocCheck(sizeof(int));
    for (int peer = 0; peer < size; peer++) {
        impl->requests[peer] = MPI_REQUEST_NULL;
        if (peer != rank) { comm_mpi_post_arrival(impl, peer); }
    }
    return comm_new(&comm_mpi_verbs, impl, rank, size);
}

#endif // CP_COMM_MPI_H
