/*
The MPI calls of the code under test, through MPI's profiling interface: each
wrapper does what the call does (PMPI_*), and the emulation three things more.

  the device moves on while the host waits in MPI. A GPU runs its queued work
  whatever its host does; the emulated device runs only when the host calls the
  runtime, so a rank whose host sat in MPI while its device owed a peer an NCCL
  operation would hang a job that runs on GPUs. Every wrapper that polls or
  waits runs the device (emu_streams.cpp), and the blocking collectives become
  their nonblocking twins waited for that way.

  pinned host memory that MPI reads or writes is checked as the host's access
  (emu_memory.cpp) when the call is made: a buffer handed to MPI before the copy
  that fills it is ordered before the host, or while a copy still reads it, is a
  race.

  the memory MPI copies internally is MPI's: the process's memcpy does not check
  it as the code under test's (ACTOR_MPI).

MPI_Init also makes the emulator's own duplicate of MPI_COMM_WORLD, on which NCCL's
communicators are built (emu_nccl.cpp).
*/
#include <mpi.h>
#include <sched.h>
#include <unistd.h>
#include "emu_internal.h"

namespace emu {

static MPI_Comm world = MPI_COMM_NULL;
MPI_Comm mpi_world() { return world; }

// the actor is MPI for the call's length
struct InMpi {
    Actor saved;
    InMpi() : saved(ctx.actor) { ctx.actor = ACTOR_MPI; }
    ~InMpi() { ctx.actor = saved; }
};

static size_t bytes_of(int count, MPI_Datatype type) {
    int size = 0;
    PMPI_Type_size(type, &size);
    return count > 0 ? (size_t)count * (size_t)size : 0;
}

static void host_buffer(const void *buf, int count, MPI_Datatype type, bool write, const char *call) {
    if (buf != MPI_IN_PLACE && buf != nullptr) { host_range(buf, bytes_of(count, type), write, call); }
}

// waits for a request, running the device meanwhile
static int wait_running_device(MPI_Request *request, MPI_Status *status) {
    int done = 0, idle = 0, rc;
    for (;;) {
        rc = PMPI_Test(request, &done, status);
        if (rc != MPI_SUCCESS || done) { return rc; }
        if (device_progress(1)) { idle = 0; } else if (++idle > 100) { usleep(200); } else { sched_yield(); }
    }
}

} // namespace emu

using namespace emu;

extern "C" {

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) { PMPI_Comm_dup(MPI_COMM_WORLD, &world); }
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) { PMPI_Comm_dup(MPI_COMM_WORLD, &world); }
    return rc;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request *request) {
    InMpi in;
    host_buffer(buf, count, type, false, "MPI_Isend");
    return PMPI_Isend(buf, count, type, dest, tag, comm, request);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *request) {
    InMpi in;
    host_buffer(buf, count, type, true, "MPI_Irecv");
    return PMPI_Irecv(buf, count, type, source, tag, comm, request);
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    InMpi in;
    int rc = PMPI_Test(request, flag, status);
    if (rc == MPI_SUCCESS && !*flag) { device_progress(1); }
    return rc;
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    InMpi in;
    int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    if (rc == MPI_SUCCESS && *outcount == 0) { device_progress(1); }
    return rc;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    InMpi in;
    return wait_running_device(request, status);
}

int MPI_Iallreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
    InMpi in;
    host_buffer(send, count, type, false, "MPI_Iallreduce");
    host_buffer(recv, count, type, true, "MPI_Iallreduce");
    return PMPI_Iallreduce(send, recv, count, type, op, comm, request);
}

int MPI_Iallgather(const void *send, int send_count, MPI_Datatype send_type, void *recv, int recv_count,
                   MPI_Datatype recv_type, MPI_Comm comm, MPI_Request *request) {
    InMpi in;
    int size;
    PMPI_Comm_size(comm, &size);
    host_buffer(send, send_count, send_type, false, "MPI_Iallgather");
    host_buffer(recv, recv_count * size, recv_type, true, "MPI_Iallgather");
    return PMPI_Iallgather(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}

int MPI_Ireduce_scatter_block(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                              MPI_Request *request) {
    InMpi in;
    int size;
    PMPI_Comm_size(comm, &size);
    host_buffer(send, count * size, type, false, "MPI_Ireduce_scatter_block");
    host_buffer(recv, count, type, true, "MPI_Ireduce_scatter_block");
    return PMPI_Ireduce_scatter_block(send, recv, count, type, op, comm, request);
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request *request) {
    InMpi in;
    int rank;
    PMPI_Comm_rank(comm, &rank);
    host_buffer(buf, count, type, rank != root, "MPI_Ibcast");
    return PMPI_Ibcast(buf, count, type, root, comm, request);
}

int MPI_Ialltoall(const void *send, int send_count, MPI_Datatype send_type, void *recv, int recv_count,
                  MPI_Datatype recv_type, MPI_Comm comm, MPI_Request *request) {
    InMpi in;
    int size;
    PMPI_Comm_size(comm, &size);
    host_buffer(send, send_count * size, send_type, false, "MPI_Ialltoall");
    host_buffer(recv, recv_count * size, recv_type, true, "MPI_Ialltoall");
    return PMPI_Ialltoall(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
    InMpi in;
    return PMPI_Ibarrier(comm, request);
}

// ---- the blocking collectives: their nonblocking twins, waited for with the device running

int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    MPI_Request r;
    int rc = MPI_Iallreduce(send, recv, count, type, op, comm, &r);
    return rc == MPI_SUCCESS ? MPI_Wait(&r, MPI_STATUS_IGNORE) : rc;
}

int MPI_Alltoall(const void *send, int send_count, MPI_Datatype send_type, void *recv, int recv_count,
                 MPI_Datatype recv_type, MPI_Comm comm) {
    MPI_Request r;
    int rc = MPI_Ialltoall(send, send_count, send_type, recv, recv_count, recv_type, comm, &r);
    return rc == MPI_SUCCESS ? MPI_Wait(&r, MPI_STATUS_IGNORE) : rc;
}

int MPI_Gather(const void *send, int send_count, MPI_Datatype send_type, void *recv, int recv_count,
               MPI_Datatype recv_type, int root, MPI_Comm comm) {
    MPI_Request r;
    int rc;
    {
        InMpi in;
        int rank, size;
        PMPI_Comm_rank(comm, &rank);
        PMPI_Comm_size(comm, &size);
        host_buffer(send, send_count, send_type, false, "MPI_Gather");
        if (rank == root) { host_buffer(recv, recv_count * size, recv_type, true, "MPI_Gather"); }
        rc = PMPI_Igather(send, send_count, send_type, recv, recv_count, recv_type, root, comm, &r);
    }
    return rc == MPI_SUCCESS ? MPI_Wait(&r, MPI_STATUS_IGNORE) : rc;
}

int MPI_Barrier(MPI_Comm comm) {
    MPI_Request r;
    int rc = MPI_Ibarrier(comm, &r);
    return rc == MPI_SUCCESS ? MPI_Wait(&r, MPI_STATUS_IGNORE) : rc;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    MPI_Request r;
    int rc = MPI_Ibcast(buf, count, type, root, comm, &r);
    return rc == MPI_SUCCESS ? MPI_Wait(&r, MPI_STATUS_IGNORE) : rc;
}

} // extern "C"
