/*
NCCL over MPI, with NCCL's semantics as the trainer relies on them:

  communicators  ncclGetUniqueId makes an id naming its maker; ncclCommInitRank is
                 collective over the nranks that pass that id: each tells the
                 maker its rank, the maker answers with the table of world ranks,
                 and the members build an MPI communicator of their own
                 (MPI_Comm_create_group), so one NCCL rank is one MPI rank of it
  operations     stream-ordered: a call enqueues an operation on its stream and
                 returns; the device posts it (nonblocking MPI) when the stream
                 gets to it and the stream waits until MPI completes it. Every rank
                 must issue a communicator's collectives in the same order, as
                 NCCL requires; a communicator's operations stay on one stream
  groups         ncclGroupStart/End: the operations in between are one operation
                 of their stream, posted together and complete together, so a
                 send and a receive in one group never wait for each other (out
                 of a group, a send waits for its receive as in NCCL)
  failure        ncclCommAbort abandons the communicator's operations;
                 ncclCommGetAsyncError reports ncclSuccess until then

For the watchdog tests: EMU_NCCL_STOP=KIND[:N] stops (SIGSTOP) the process of world
rank EMU_NCCL_STOP_RANK (default 1) as its device posts its N-th (default first)
operation of KIND (send, recv, all_reduce, all_gather, reduce_scatter,
broadcast), so that its peers wait for it for ever.

The buffers are checked as the operation's accesses when it is posted (its sends
read, its receives write, emu_memory.cpp), and what it received counts as written.
*/
#include <mpi.h>
#include <signal.h>
#include <unistd.h>
#include <vector>
#include "emu_internal.h"
#include "nccl.h"

struct EmuNcclComm {
    MPI_Comm mpi;  // the members, in NCCL rank order
    int rank, size;
    bool aborted;
    int stream;    // the stream index of its operations (0: none yet)
};

namespace emu {

MPI_Comm mpi_world(); // emu_mpi.cpp: the emulator's own duplicate of MPI_COMM_WORLD

enum NcclKind { NCCL_SEND, NCCL_RECV, NCCL_ALL_REDUCE, NCCL_ALL_GATHER, NCCL_REDUCE_SCATTER, NCCL_BROADCAST };
static const char *kind_names[] = {"send", "recv", "all_reduce", "all_gather", "reduce_scatter", "broadcast"};
static const char *call_names[] = {"ncclSend", "ncclRecv", "ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                   "ncclBroadcast"};

struct NcclItem {
    NcclKind kind;
    const void *send;
    void *recv;
    size_t count;          // elements: per rank for all_gather and reduce_scatter, as NCCL counts them
    ncclDataType_t type;
    int peer;              // send/recv: the peer; broadcast: the root
    ncclComm_t comm;
};
struct NcclGroup {
    std::vector<NcclItem> items;
    std::vector<MPI_Request> requests;
    bool posted;
};

static int group_depth;
static std::vector<NcclItem> group_items EMU_EARLY;
static cudaStream_t group_stream;
static const void *group_site;
static int stop_kind = -1, stop_after, stop_seen;

static MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclChar: return MPI_BYTE;
    case ncclInt32: return MPI_INT;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    }
    report("api", format("NCCL data type %d is not emulated", (int)t));
}
static size_t type_bytes(ncclDataType_t t) { return t == ncclChar ? 1 : t == ncclFloat64 ? 8 : 4; }

static void maybe_stop(NcclKind kind) {
    if ((int)kind != stop_kind || ++stop_seen != stop_after) { return; }
    fprintf(stderr, "EMU: stopping this rank in NCCL %s (EMU_NCCL_STOP)\n", kind_names[kind]);
    fflush(stderr);
    raise(SIGSTOP);
}

static const int P2P_TAG = 7;

// posts one item's MPI operation, after checking its buffers as this operation's accesses
static void post(NcclItem &it, std::vector<MPI_Request> &requests, const char *what) {
    EmuNcclComm *c = it.comm;
    size_t bytes = it.count * type_bytes(it.type);
    MPI_Datatype t = mpi_type(it.type);
    int n = (int)it.count;
    MPI_Request r = MPI_REQUEST_NULL;
    maybe_stop(it.kind);
    switch (it.kind) {
    case NCCL_SEND:
        access_range(it.send, bytes, false, what);
        PMPI_Isend(it.send, n, t, it.peer, P2P_TAG, c->mpi, &r);
        break;
    case NCCL_RECV:
        access_range(it.recv, bytes, true, what);
        PMPI_Irecv(it.recv, n, t, it.peer, P2P_TAG, c->mpi, &r);
        break;
    case NCCL_ALL_REDUCE:
        if (it.send != it.recv) { access_range(it.send, bytes, false, what); }
        access_range(it.recv, bytes, true, what);
        PMPI_Iallreduce(it.send == it.recv ? MPI_IN_PLACE : it.send, it.recv, n, t, MPI_SUM, c->mpi, &r);
        break;
    case NCCL_ALL_GATHER: {
        bool in_place = (const char *)it.send == (char *)it.recv + c->rank * bytes;
        if (!in_place) { access_range(it.send, bytes, false, what); }
        access_range(it.recv, bytes * c->size, true, what);
        PMPI_Iallgather(in_place ? MPI_IN_PLACE : it.send, n, t, it.recv, n, t, c->mpi, &r);
        break;
    }
    case NCCL_REDUCE_SCATTER:
        access_range(it.send, bytes * c->size, false, what);
        access_range(it.recv, bytes, true, what);
        PMPI_Ireduce_scatter_block(it.send, it.recv, n, t, MPI_SUM, c->mpi, &r);
        break;
    case NCCL_BROADCAST:
        if (c->rank == it.peer && it.send != it.recv) {
            access_range(it.send, bytes, false, what);
            access_range(it.recv, bytes, true, what);
            raw_copy(it.recv, it.send, bytes);
        }
        access_range(it.recv, bytes, c->rank != it.peer, what);
        PMPI_Ibcast(it.recv, n, t, it.peer, c->mpi, &r);
        break;
    }
    requests.push_back(r);
}

static void received(const NcclItem &it) {
    size_t bytes = it.count * type_bytes(it.type);
    switch (it.kind) {
    case NCCL_SEND: break;
    case NCCL_ALL_GATHER: mark_initialised(it.recv, bytes * it.comm->size); break;
    default: mark_initialised(it.recv, bytes); break;
    }
}

static bool run_group(Operation *op) {
    NcclGroup *g = (NcclGroup *)op->state;
    for (const NcclItem &it : g->items) {
        if (it.comm->aborted) { return true; } // abandoned: nothing will complete it
    }
    if (!g->posted) {
        for (NcclItem &it : g->items) { post(it, g->requests, op->what.c_str()); }
        g->posted = true;
    }
    int done = 0;
    PMPI_Testall((int)g->requests.size(), g->requests.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) { return false; }
    for (const NcclItem &it : g->items) { received(it); }
    return true;
}

// the items gathered since the group began (or the one call outside a group) as one operation
static void flush() {
    if (group_items.empty()) { return; }
    int stream = stream_index(group_stream);
    std::string what;
    for (const NcclItem &it : group_items) {
        if (it.comm->stream == 0) { it.comm->stream = stream; }
        if (it.comm->stream != stream) {
            report("api", format("%s at %s: an NCCL communicator's operations go on stream %d, this one on stream %d",
                                 call_names[it.kind], source_of(group_site).c_str(), it.comm->stream, stream));
        }
        what += what.empty() ? call_names[it.kind] : std::string(" + ") + call_names[it.kind];
    }
    if (group_items.size() > 1) { what = "NCCL group (" + what + ")"; }
    NcclGroup *g = new NcclGroup{group_items, {}, false};
    group_items.clear();
    enqueue(group_stream, what, group_site, run_group, g, [](void *p) { delete (NcclGroup *)p; });
    device_progress((int)random_below(3));
}

static ncclResult_t add(NcclItem it, cudaStream_t stream, const void *site) {
    if (it.comm == nullptr) { return ncclInvalidArgument; }
    if (!group_items.empty() && stream != group_stream) {
        report("api", format("%s at %s: one NCCL group on two streams", call_names[it.kind], source_of(site).c_str()));
    }
    if (group_items.empty()) { group_site = site; }
    group_stream = stream;
    group_items.push_back(it);
    if (group_depth == 0) { flush(); }
    return ncclSuccess;
}

} // namespace emu

using namespace emu;

const char *ncclGetErrorString(ncclResult_t r) {
    static const char *names[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
                                  "invalid argument", "invalid usage", "remote process exited or there was a network error",
                                  "NCCL operation in progress"};
    return r >= 0 && r <= 7 ? names[r] : "unknown result";
}

struct EmuNcclId { uint32_t magic; int maker; uint32_t serial; };
static const uint32_t ID_MAGIC = 0x4e43434c;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static uint32_t serial;
    EmuNcclId e = {ID_MAGIC, 0, ++serial};
    PMPI_Comm_rank(mpi_world(), &e.maker);
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &e, sizeof(e));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    EmuNcclId e;
    memcpy(&e, id.internal, sizeof(e));
    if (e.magic != ID_MAGIC || nranks < 1 || rank < 0 || rank >= nranks) { return ncclInvalidArgument; }
    const char *stop = getenv("EMU_NCCL_STOP"), *stop_rank = getenv("EMU_NCCL_STOP_RANK");
    MPI_Comm world = mpi_world();
    int me;
    PMPI_Comm_rank(world, &me);
    if (stop != nullptr && me == (stop_rank ? atoi(stop_rank) : 1)) {
        for (int k = 0; k < 6; k++) {
            size_t n = strlen(kind_names[k]);
            if (strncmp(stop, kind_names[k], n) == 0 && (stop[n] == '\0' || stop[n] == ':')) {
                stop_kind = k;
                stop_after = stop[n] == ':' ? atoi(stop + n + 1) : 1;
            }
        }
    }
    // the handshake: (rank, world rank) to the maker, the table back from it
    int tag = 1000 + (int)(e.serial % 20000), mine[2] = {rank, me};
    MPI_Request sent;
    PMPI_Isend(mine, 2, MPI_INT, e.maker, tag, world, &sent);
    std::vector<int> table(nranks, -1);
    if (me == e.maker) {
        for (int i = 0; i < nranks; i++) {
            int got[2];
            PMPI_Recv(got, 2, MPI_INT, MPI_ANY_SOURCE, tag, world, MPI_STATUS_IGNORE);
            if (got[0] < 0 || got[0] >= nranks || table[got[0]] != -1) {
                report("api", format("ncclCommInitRank: rank %d of %d given twice or out of range", got[0], nranks));
            }
            table[got[0]] = got[1];
        }
        for (int i = 0; i < nranks; i++) { PMPI_Send(table.data(), nranks, MPI_INT, table[i], tag, world); }
    }
    PMPI_Recv(table.data(), nranks, MPI_INT, e.maker, tag, world, MPI_STATUS_IGNORE);
    PMPI_Wait(&sent, MPI_STATUS_IGNORE);
    MPI_Group world_group, members;
    PMPI_Comm_group(world, &world_group);
    PMPI_Group_incl(world_group, nranks, table.data(), &members);
    EmuNcclComm *c = new EmuNcclComm{MPI_COMM_NULL, rank, nranks, false, 0};
    PMPI_Comm_create_group(world, members, tag, &c->mpi);
    PMPI_Group_free(&members);
    PMPI_Group_free(&world_group);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == nullptr) { return ncclInvalidArgument; }
    PMPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm == nullptr) { return ncclInvalidArgument; }
    comm->aborted = true; // its MPI communicator stays: a stopped peer could never free it with us
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
    if (comm == nullptr) { return ncclInvalidArgument; }
    *async_error = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (group_depth == 0) { return ncclInvalidUsage; }
    if (--group_depth == 0) { flush(); }
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return add(NcclItem{NCCL_SEND, buf, nullptr, count, type, peer, comm}, stream, __builtin_return_address(0));
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
    return add(NcclItem{NCCL_RECV, nullptr, buf, count, type, peer, comm}, stream, __builtin_return_address(0));
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t,
                           ncclComm_t comm, cudaStream_t stream) {
    return add(NcclItem{NCCL_ALL_REDUCE, send, recv, count, type, -1, comm}, stream, __builtin_return_address(0));
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
    return add(NcclItem{NCCL_ALL_GATHER, send, recv, count, type, -1, comm}, stream, __builtin_return_address(0));
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t,
                               ncclComm_t comm, cudaStream_t stream) {
    return add(NcclItem{NCCL_REDUCE_SCATTER, send, recv, count, type, -1, comm}, stream, __builtin_return_address(0));
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    return add(NcclItem{NCCL_BROADCAST, send, recv, count, type, root, comm}, stream, __builtin_return_address(0));
}
