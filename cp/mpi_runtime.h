/*
The MPI runtime every gpt2cp program starts with (both trainers, the MPI tests
and benchmarks): MPI_Init, and the hooks that turn any rank's fatal error
(llmc/utils.h: fatal, fatal_everywhere) into the end of the whole job, on every
rank, within seconds. It also reads GPT2CP_TIMEOUT for the transports' progress
watchdog (cp/comm_watchdog.h), posts the watchdog's progress beacons, and learns
which ranks share this node (the GPU trainer picks its device by them). What waits
for every rank here (MPI_Init, making communicators, MPI_Finalize) runs under the
watchdog's timer, COMM_BLOCKING.
*/
#ifndef CP_MPI_RUNTIME_H
#define CP_MPI_RUNTIME_H

#include <mpi.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "comm_watchdog.h"
#include "../llmc/utils.h"

// MPI_Abort asks the launcher to end every rank. A rank cut off from the launcher
// (its host lost from the network) can wait in it for ever: an alarm ends this
// rank after MPI_ABORT_GRACE_SECONDS regardless.
#define MPI_ABORT_GRACE_SECONDS 5
static void mpi_abort_job(void) {
    signal(SIGALRM, SIG_DFL);
    alarm(MPI_ABORT_GRACE_SECONDS);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

// fatal_everywhere's meeting: a duplicate of the world, so that no other collective
// can match its barrier
static MPI_Comm mpi_fatal_comm = MPI_COMM_NULL;
#define MPI_FATAL_MEETING_SECONDS 10

// Every rank of a fatal_everywhere meets here: 1 once every rank has come, 0 after
// MPI_FATAL_MEETING_SECONDS without them (a rank that did not see the error: the
// job is then aborted).
static int mpi_fatal_all_reached(void) {
    MPI_Request request;
    MPI_Ibarrier(mpi_fatal_comm, &request);
    time_t start = time(NULL);
    int done = 0;
    while (!done && time(NULL) - start < MPI_FATAL_MEETING_SECONDS) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) { usleep(1000); }
    }
    return done;
}

static void mpi_runtime_finalize(void);

// After an error every rank reached: MPI's own end on every rank, then status 1.
static void mpi_agreed_exit(void) {
    mpi_runtime_finalize();
    exit(1);
}

// the ranks on this node (the ones that share its memory), and this one's index
// among them: known once MPI runs (mpi_runtime_init)
static int mpi_node_size = 1, mpi_node_rank = 0;

static void mpi_runtime_init(int *argc, char ***argv) {
    // MPI_Init waits for every rank: under the timer of GPT2CP_TIMEOUT (its default
    // when the value is bad: that is reported once MPI can end the job)
    comm_timeout_from_env(&comm_timeout);
    COMM_BLOCKING("MPI_Init", MPI_Init(argc, argv));
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fatal_rank = rank;
    fatal_exit_hook = mpi_abort_job;
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &mpi_fatal_comm));
    fatal_all_reached = mpi_fatal_all_reached;
    fatal_agreed_exit_hook = mpi_agreed_exit;
    // an MPI error is never recoverable here: let MPI end the job at once
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    comm_timeout_init();
    comm_beacon_init();
    MPI_Comm node;
    COMM_BLOCKING("MPI_Comm_split_type", MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                                             &node));
    MPI_Comm_size(node, &mpi_node_size);
    MPI_Comm_rank(node, &mpi_node_rank);
    MPI_Comm_free(&node);
}

// The end of the job's MPI: the watchdog's receives are cancelled, and MPI_Finalize
// (which waits for every rank) runs under the timer.
static void mpi_runtime_finalize(void) {
    comm_beacon_finalize();
    MPI_Comm_free(&mpi_fatal_comm);
    COMM_BLOCKING("MPI_Finalize", MPI_Finalize());
    // past MPI's end an error ends this process alone
    fatal_all_reached = NULL;
    fatal_agreed_exit_hook = NULL;
    fatal_exit_hook = NULL;
}

#endif // CP_MPI_RUNTIME_H
