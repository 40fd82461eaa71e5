/*
The MPI runtime every gpt2cp program starts with (both trainers, the MPI tests
and benchmarks): MPI_Init, and the hooks that turn any rank's fatal error
(llmc/utils.h: fatal, fatal_everywhere) into the end of the whole job, on every
rank, within seconds. It also reads GPT2CP_TIMEOUT for the transports' progress
watchdog (cp/comm_watchdog.h).
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

// The other ranks of a fatal_everywhere wait here for rank 0 to print and abort.
// The wait is bounded: should rank 0 not see the error after all, this rank
// stops waiting, prints its own line and ends the job itself.
static void mpi_wait_for_printer(void) {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    time_t start = time(NULL);
    int done = 0;
    while (!done && time(NULL) - start < 10) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        usleep(1000);
    }
}

static void mpi_runtime_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fatal_rank = rank;
    fatal_exit_hook = mpi_abort_job;
    fatal_wait_for_printer = mpi_wait_for_printer;
    // an MPI error is never recoverable here: let MPI end the job at once
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    comm_timeout_init();
}

#endif // CP_MPI_RUNTIME_H
