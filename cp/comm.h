/*
The transport: a small closed set of verbs with open implementations.

    ring_start / ring_wait   send a buffer to rank+1 and receive one from rank-1,
                             without blocking, so that compute overlaps the exchange
    all_reduce_sum           elementwise sum over the ranks, in place
    all_gather               every rank's buffer, concatenated in rank order
    reduce_scatter_sum       the elementwise sum over the ranks of a buffer of
                             size parts; each rank receives its own part of the sum
    all_to_all               a buffer of size parts: part j goes to rank j, and
                             part i of the result came from rank i (a transpose of
                             the parts over the ranks)
    all_to_all_v_start /     the all-to-all of parts of any size (zero included:
    all_to_all_v_wait        no message then), without blocking: group-cast
                             attention sends each K/V token only to the ranks
                             whose queries see it (cp/groupcast_attention.h)
    broadcast                root's buffer to every rank
    barrier

Implementations (each a table of its verbs, which comm_new copies into a Comm):
    cp/comm_mpi.h            MPI on host memory (the CPU twin)
    cp/comm_nccl.cuh         NCCL on device memory (the GPU trainer)
    cp/comm_mpi_staged.cuh   MPI on device memory through host copies, for several
                             ranks sharing one GPU (NCCL refuses that)

A Comm spans one group of ranks: the CP group of a data-parallel replica (for the
ring and the token gather) or the whole world (for gradients and the loss). The
buffers are in whatever memory the implementation works on.
*/
#ifndef CP_COMM_H
#define CP_COMM_H

#include <stddef.h>
#include "../llmc/utils.h"

typedef enum { COMM_FLOAT, COMM_DOUBLE, COMM_INT32 } CommType;

typedef struct Comm Comm;
struct Comm {
    int rank;  // this rank's index in the group
    int size;  // ranks in the group
    void *impl; // the implementation's own state
    // Posts one ring step as a single group: send `bytes` of send_buf to rank+1,
    // receive `bytes` into recv_buf from rank-1 (both mod size). Returns a handle
    // for ring_wait; the buffers must not be touched until then.
    void *(*ring_start)(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes);
    void (*ring_wait)(Comm *comm, void *exchange);
    void (*all_reduce_sum)(Comm *comm, void *buf, size_t count, CommType type);
    // recv_buf holds size * bytes_per_rank bytes, rank i's part at i * bytes_per_rank;
    // send_buf is either apart from recv_buf or exactly this rank's part of it (in place,
    // as ZeRO-1 gathers the parameters: train/zero.h)
    void (*all_gather)(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank);
    // send_buf holds size * count elements, the part for rank i at i * count; recv_buf
    // (count elements, not overlapping send_buf) gets this rank's part of the elementwise
    // sum of every rank's send_buf. The all-gather's mirror: it sends each part home.
    void (*reduce_scatter_sum)(Comm *comm, const void *send_buf, void *recv_buf, size_t count, CommType type);
    // send_buf and recv_buf (not overlapping) hold size * bytes_per_rank bytes: part j
    // of send_buf goes to rank j, part i of recv_buf comes from rank i (its part for
    // this rank). Ulysses attention trades heads for tokens with it.
    void (*all_to_all)(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank);
    // Posts one all-to-all-v without blocking: send_bytes[j] bytes at send_buf + send_offset[j]
    // go to rank j, and recv_bytes[i] bytes from rank i land at recv_buf + recv_offset[i]
    // (arrays of comm->size entries). A zero count posts no message: a peer that needs
    // nothing gets none. The own rank's entries must be 0 (the caller copies its own part).
    // Returns a handle for all_to_all_v_wait; buffers and arrays stay untouched until then.
    // Several may be in flight (posted in the same order on every rank, waited in any).
    void *(*all_to_all_v_start)(Comm *comm, const void *send_buf, const size_t *send_bytes, const size_t *send_offset,
                                void *recv_buf, const size_t *recv_bytes, const size_t *recv_offset);
    void (*all_to_all_v_wait)(Comm *comm, void *exchange);
    void (*broadcast)(Comm *comm, void *buf, size_t bytes, int root);
    void (*barrier)(Comm *comm);
    void (*destroy)(Comm *comm);
};

// A Comm of `size` ranks, this one `rank`, over an implementation's state `impl`,
// whose verbs are those of `verbs` (the implementation's table: a Comm with only
// its verbs set).
static Comm *comm_new(const Comm *verbs, void *impl, int rank, int size) {
    Comm *comm = (Comm *)mallocCheck(sizeof(Comm));
    *comm = *verbs;
    comm->rank = rank;
    comm->size = size;
    comm->impl = impl;
    return comm;
}

static size_t comm_type_size(CommType type) {
    switch (type) {
    case COMM_FLOAT: return sizeof(float);
    case COMM_DOUBLE: return sizeof(double);
    case COMM_INT32: return sizeof(int);
    }
    return 0;
}

// The slice [*begin, *end) of n units that rank `rank` of `size` holds when n is
// split into equal slices, n / size each, and the last rank also holds the fewer
// than size left over: nothing is padded.
static void comm_slice(size_t n, int rank, int size, size_t *begin, size_t *end) {
    size_t S = n / (size_t)size;
    *begin = (size_t)rank * S;
    *end = rank == size - 1 ? n : *begin + S;
}

// The rank whose comm_slice of n units holds unit u (u < n).
static int comm_slice_holder(size_t n, int size, size_t u) {
    size_t S = n / (size_t)size;
    if (S == 0) { return size - 1; } // fewer units than ranks: the last holds them all
    return u / S < (size_t)size ? (int)(u / S) : size - 1;
}

// Every rank's buf (n units of unit_bytes, in the comm's memory) becomes the
// slices' holders' (comm_slice): the equal slices gathered in place, and the last
// rank's leftover broadcast.
static void comm_gather_slices(Comm *comm, void *buf, size_t n, size_t unit_bytes) {
    if (comm->size == 1) { return; }
    size_t S = n / (size_t)comm->size, gathered = S * (size_t)comm->size;
    char *bytes = (char *)buf;
    if (S > 0) { comm->all_gather(comm, bytes + (size_t)comm->rank * S * unit_bytes, bytes, S * unit_bytes); }
    if (n > gathered) { comm->broadcast(comm, bytes + gathered * unit_bytes, (n - gathered) * unit_bytes, comm->size - 1); }
}

#endif // CP_COMM_H
