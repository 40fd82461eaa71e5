/*
The progress watchdog of both trainers: a wait on another rank (a ring exchange,
a collective) that sees no progress for GPT2CP_TIMEOUT seconds ends the job on
every rank, with one line naming the rank that did not answer:

    rank R: no progress from rank P for N s in <verb> (GPT2CP_TIMEOUT=N)

Without it a rank that is stopped rather than dead (SIGSTOP, a stuck NFS read, a
wedged GPU) hangs every other rank forever: MPI and NCCL notice a dead peer, not a
silent one. Progress, not total wait: a wait ends its clock each time one of its
requests completes (cp/comm_mpi.h), or one of the transport's operations on the
GPU completes (cp/comm_nccl.cuh), so a long but healthy step is never cut short;
only a wait during which nothing moved for the whole timeout ends the job.

GPT2CP_TIMEOUT: seconds, a positive number (fractions allowed); default 600, which
no healthy wait reaches (a wait spans at most one rank's compute between two
exchanges, far below that even at long context). Read once, at start-up, on every
rank; a bad value is a start-up error.

Ranks named are world ranks (the ones mpirun and every other message use), this
file's one MPI helper translates a group's rank into one.
*/
#ifndef CP_COMM_WATCHDOG_H
#define CP_COMM_WATCHDOG_H

#include <math.h>
#include <mpi.h>
#include <time.h>
#include "../llmc/utils.h"

#define COMM_TIMEOUT_DEFAULT 600.0

static double comm_timeout = COMM_TIMEOUT_DEFAULT; // seconds

// Reads GPT2CP_TIMEOUT; a bad value ends the job (on every rank: all see the same
// environment, and rank 0 prints).
static void comm_timeout_init(void) {
    const char *env = getenv("GPT2CP_TIMEOUT");
    if (env == NULL) { return; }
    char *end;
    errno = 0;
    double seconds = strtod(env, &end);
    if (end == env || *end != '\0' || errno != 0 || !isfinite(seconds) || !(seconds > 0.0)) {
        fatal_everywhere("GPT2CP_TIMEOUT='%s': expected a positive number of seconds (the longest a wait on another "
                         "rank may see no progress; default %.0f)", env, COMM_TIMEOUT_DEFAULT);
    }
    comm_timeout = seconds;
}

// monotonic seconds
static double comm_clock(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

// Ends the job: `from` says who did not answer ("rank 3", "ranks 1, 2"), `verb` in
// what. Every rank that times out prints its own line; the first abort ends all.
__attribute__((noreturn))
static void comm_no_progress(const char *from, const char *verb) {
    fatal("no progress from %s for %g s in %s (GPT2CP_TIMEOUT=%g)", from, comm_timeout, verb, comm_timeout);
}

// the world rank of rank `rank` of `mc`
static int comm_world_rank(MPI_Comm mc, int rank) {
    MPI_Group group, world;
    MPI_Comm_group(mc, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int world_rank;
    MPI_Group_translate_ranks(group, 1, &rank, world, &world_rank);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return world_rank;
}

#endif // CP_COMM_WATCHDOG_H
