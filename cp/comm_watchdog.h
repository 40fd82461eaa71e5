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

Which rank is named: a stall spreads. With rank 3 stopped, rank 2 waits for it,
rank 0 for rank 2 (in another group's collective), rank 1 for rank 0; each wait
expires about GPT2CP_TIMEOUT after its own last progress, in no set order, and
each knows only the rank it waits for. So every rank that waits also says that
it runs: an empty "alive" message to every other rank at most every
GPT2CP_TIMEOUT / 4 seconds. An expired wait names only the awaited ranks that
have been silent (no alive message, no beacon) for GPT2CP_TIMEOUT / 2: at least
one message missed. While every rank it awaits is still heard from, the stall
lies further along: it names any rank of the world that fell silent (a
collective also waits for a rank that entered it and then stopped), and while
none has, it keeps waiting (a request that completes meanwhile ends its wait as
usual). Only if no rank falls silent within another GPT2CP_TIMEOUT (ranks
that all run and wait for each other: a deadlock, or a rank held in a blocking
call, which sends nothing) does it name every awaited rank, saying that they run.

Work one rank does alone for long (rank 0 sampling, a rank validating its data or
writing its checkpoint files) is progress too: such loops call note_progress
(llmc/utils.h), which sends a beacon, an empty message, to every other rank at
most every GPT2CP_TIMEOUT / 4 seconds; every wait counts an arriving beacon as
progress. So the others wait for a rank that works, and still name one that
stopped (its beacons stop with it).

What MPI offers only as a blocking call (MPI_Init, creating communicators,
MPI_Finalize, NCCL's communicator init) runs under COMM_BLOCKING: a timer that
ends this rank with one line once the call has waited GPT2CP_TIMEOUT seconds. A
blocking call cannot tell which rank is missing: where it matters a watched
barrier comes first, so that a rank that never arrives is named there.

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
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "../llmc/utils.h"

#define COMM_TIMEOUT_DEFAULT 600.0

static double comm_timeout = COMM_TIMEOUT_DEFAULT; // seconds

// GPT2CP_TIMEOUT into *seconds (the default when it is not set); -1 when it is
// not a positive number.
static int comm_timeout_from_env(double *seconds) {
    *seconds = COMM_TIMEOUT_DEFAULT;
    const char *env = getenv("GPT2CP_TIMEOUT");
    if (env == NULL) { return 0; }
    char *end;
    errno = 0;
    double value = strtod(env, &end);
    if (end == env || *end != '\0' || errno != 0 || !isfinite(value) || !(value > 0.0)) { return -1; }
    *seconds = value;
    return 0;
}

// Reads GPT2CP_TIMEOUT; a bad value ends the job (on every rank: all see the same
// environment, and rank 0 prints).
static void comm_timeout_init(void) {
    if (comm_timeout_from_env(&comm_timeout) != 0) {
        fatal_everywhere("GPT2CP_TIMEOUT='%s': expected a positive number of seconds (the longest a wait on another "
                         "rank may see no progress; default %.0f)", getenv("GPT2CP_TIMEOUT"), COMM_TIMEOUT_DEFAULT);
    }
}

// monotonic seconds
static double comm_clock(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

// Ends the job: `from` says who did not answer ("rank 3", "ranks 1, 2"), `verb` in
// what. Every rank that ends a wait prints its own line; the first abort ends all.
__attribute__((noreturn))
static void comm_no_progress(const char *from, const char *verb) {
    fatal("no progress from %s for %g s in %s (GPT2CP_TIMEOUT=%g)", from, comm_timeout, verb, comm_timeout);
}

// Ends the job naming world ranks named[0..n); running: they were still heard from.
__attribute__((noreturn))
static void comm_no_progress_from(const int *named, int n, int running, const char *verb) {
    char from[320];
    int len = snprintf(from, sizeof(from), n == 1 ? "rank" : "ranks");
    for (int i = 0; i < n && len < 200; i++) {
        len += snprintf(from + len, sizeof(from) - len, "%s %d", i == 0 ? "" : ",", named[i]);
    }
    if (running) { snprintf(from + len, sizeof(from) - len, " (running, but waiting too: no rank fell silent)"); }
    comm_no_progress(from, verb);
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

// ----------------------------------------------------------------------------
// blocking calls

static char comm_blocking_line[512]; // the line of an expired call, made before it
static size_t comm_blocking_len;

// SIGALRM while a blocking call waits: only async-signal-safe calls. A rank that
// ends without MPI_Finalize makes mpirun end every other rank.
static void comm_blocking_expired(int sig) {
    (void)sig;
    if (write(STDERR_FILENO, comm_blocking_line, comm_blocking_len) < 0) { /* nothing else is safe here */ }
    _exit(1);
}

// Arms the timer of a blocking call `what`.
static void comm_blocking_begin(const char *what) {
    int n = fatal_all_reached != NULL
                ? snprintf(comm_blocking_line, sizeof(comm_blocking_line), "error: rank %d: ", fatal_rank)
                : snprintf(comm_blocking_line, sizeof(comm_blocking_line), "error: ");
    snprintf(comm_blocking_line + n, sizeof(comm_blocking_line) - n, "no progress for %g s in %s, which waits for "
             "every rank of its group: a rank is stopped or gone (GPT2CP_TIMEOUT=%g)\n", comm_timeout, what,
             comm_timeout);
    comm_blocking_len = strlen(comm_blocking_line);
    install_signal_handler(SIGALRM, comm_blocking_expired, SA_RESTART);
    struct itimerval timer;
    memset(&timer, 0, sizeof(timer));
    timer.it_value.tv_sec = (time_t)comm_timeout;
    timer.it_value.tv_usec = (suseconds_t)((comm_timeout - (double)timer.it_value.tv_sec) * 1e6);
    if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) { timer.it_value.tv_usec = 1; }
    setitimer(ITIMER_REAL, &timer, NULL);
}

static void comm_blocking_end(void) {
    struct itimerval off;
    memset(&off, 0, sizeof(off));
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_DFL);
}

// A call that waits for every rank of a group and has no non-blocking form, under
// the timer (test/blocking_calls.sh checks that every such call of the trainers is
// written this way)
#define COMM_BLOCKING(what, call) \
    do {                           \
        comm_blocking_begin(what); \
        call;                      \
        comm_blocking_end();       \
    } while (0)

// ----------------------------------------------------------------------------
// beacons and alive messages: who works alone, who still runs

#define COMM_BEACON_TAG 0 // a beacon: this rank works alone (progress for the others)
#define COMM_ALIVE_TAG 1  // this rank runs and waits (not progress)

static MPI_Comm comm_beacon_comm = MPI_COMM_NULL; // a duplicate of the world: nothing else matches there
static MPI_Request *comm_beacon_recv;             // (world size) a beacon receive posted from each other rank
static MPI_Request *comm_alive_recv;              // (world size) an alive receive posted from each other rank
static double *comm_heard_at;                     // (world size) when each rank was last heard (comm_clock)
static int *comm_named;                           // (world size) the ranks an expired wait names
static int comm_beacon_rank, comm_beacon_size;
static double comm_beacon_sent_at = -1e300, comm_alive_sent_at = -1e300;
static char comm_beacon_byte; // the messages are empty: this only gives MPI a valid address

static void comm_watch_post(MPI_Request *request, int peer, int tag) {
    MPI_Irecv(&comm_beacon_byte, 0, MPI_BYTE, peer, tag, comm_beacon_comm, request);
}

// an empty message with `tag` to every other rank, never waited for
static void comm_watch_send_all(int tag) {
    for (int peer = 0; peer < comm_beacon_size; peer++) {
        if (peer == comm_beacon_rank) { continue; }
        MPI_Request sent;
        MPI_Isend(&comm_beacon_byte, 0, MPI_BYTE, peer, tag, comm_beacon_comm, &sent);
        MPI_Request_free(&sent);
    }
}

// whether the receive *request from peer has a message (then posted again)
static int comm_watch_received(MPI_Request *request, int peer, int tag) {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) { comm_watch_post(request, peer, tag); }
    return done;
}

// Sends a beacon to every other rank, unless one went less than GPT2CP_TIMEOUT / 4
// seconds ago (the note_progress hook of llmc/utils.h).
static void comm_beacon_send(void) {
    double now = comm_clock();
    if (comm_beacon_comm == MPI_COMM_NULL || now - comm_beacon_sent_at < comm_timeout / 4) { return; }
    comm_beacon_sent_at = now;
    comm_watch_send_all(COMM_BEACON_TAG);
}

// Every wait calls this at each poll: says this rank runs (at most every
// GPT2CP_TIMEOUT / 4 seconds), notes who was heard from. Returns how many beacons
// arrived since the last call (progress).
static int comm_watchdog_poll(void) {
    if (comm_beacon_comm == MPI_COMM_NULL) { return 0; }
    double now = comm_clock();
    if (now - comm_alive_sent_at >= comm_timeout / 4) {
        comm_alive_sent_at = now;
        comm_watch_send_all(COMM_ALIVE_TAG);
    }
    int beacons = 0;
    for (int peer = 0; peer < comm_beacon_size; peer++) {
        if (peer == comm_beacon_rank) { continue; }
        int beacon = comm_watch_received(&comm_beacon_recv[peer], peer, COMM_BEACON_TAG);
        int alive = comm_watch_received(&comm_alive_recv[peer], peer, COMM_ALIVE_TAG);
        if (beacon || alive) { comm_heard_at[peer] = now; }
        beacons += beacon;
    }
    return beacons;
}

// The ranks among awaited[0..n) (NULL: every rank of the world) not heard from for
// `silence` seconds (a negative silence: all of them), into comm_named; how many.
static int comm_silent_ranks(const int *awaited, int n, double now, double silence) {
    if (awaited == NULL) { n = comm_beacon_size; }
    int silent = 0;
    for (int i = 0; i < n; i++) {
        int peer = awaited != NULL ? awaited[i] : i;
        if (peer != comm_beacon_rank && now - comm_heard_at[peer] >= silence) { comm_named[silent++] = peer; }
    }
    return silent;
}

// A wait without progress for GPT2CP_TIMEOUT and `expired_for` seconds more, for
// the world ranks awaited[0..n) (NULL: any other rank of the world). Returns how
// many ranks to name, in comm_named: the awaited ones silent for GPT2CP_TIMEOUT / 2;
// when every one is heard from, any silent rank of the world (a stall's root: a
// collective also waits for a rank that entered it and then stopped, and a rank
// waits for one that waits in turn); none (0: wait on) while every rank is heard
// from, until expired_for reaches GPT2CP_TIMEOUT; then all the awaited, *running set.
static int comm_stall_named(const int *awaited, int n, double expired_for, int *running) {
    double now = comm_clock();
    *running = 0;
    int silent = comm_silent_ranks(awaited, n, now, comm_timeout / 2);
    if (silent == 0) { silent = comm_silent_ranks(NULL, 0, now, comm_timeout / 2); }
    if (silent > 0 || expired_for < comm_timeout) { return silent; }
    *running = 1;
    return comm_silent_ranks(awaited, n, now, -1.0);
}

// After MPI_Init: the messages' communicator and receives; installs note_progress.
static void comm_beacon_init(void) {
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &comm_beacon_comm));
    MPI_Comm_rank(comm_beacon_comm, &comm_beacon_rank);
    MPI_Comm_size(comm_beacon_comm, &comm_beacon_size);
    size_t size = (size_t)comm_beacon_size;
    comm_beacon_recv = (MPI_Request *)mallocCheck(size * sizeof(MPI_Request));
    comm_alive_recv = (MPI_Request *)mallocCheck(size * sizeof(MPI_Request));
    comm_heard_at = (double *)mallocCheck(size * sizeof(double));
    comm_named = (int *)mallocCheck(size * sizeof(int));
    double now = comm_clock();
    for (int peer = 0; peer < comm_beacon_size; peer++) {
        comm_beacon_recv[peer] = MPI_REQUEST_NULL;
        comm_alive_recv[peer] = MPI_REQUEST_NULL;
        comm_heard_at[peer] = now;
        if (peer != comm_beacon_rank) {
            comm_watch_post(&comm_beacon_recv[peer], peer, COMM_BEACON_TAG);
            comm_watch_post(&comm_alive_recv[peer], peer, COMM_ALIVE_TAG);
        }
    }
    progress_hook = comm_beacon_send;
}

static void comm_watch_cancel(MPI_Request *request) {
    if (*request == MPI_REQUEST_NULL) { return; }
    MPI_Cancel(request);
    MPI_Request_free(request);
}

// Before MPI_Finalize: the receives cancelled, note_progress a no-op again.
static void comm_beacon_finalize(void) {
    for (int peer = 0; peer < comm_beacon_size; peer++) {
        comm_watch_cancel(&comm_beacon_recv[peer]);
        comm_watch_cancel(&comm_alive_recv[peer]);
    }
    progress_hook = NULL;
    MPI_Comm_free(&comm_beacon_comm);
    free(comm_beacon_recv);
    free(comm_alive_recv);
    free(comm_heard_at);
    free(comm_named);
    comm_beacon_recv = comm_alive_recv = NULL;
    comm_heard_at = NULL;
    comm_named = NULL;
    comm_beacon_size = 0;
}

#endif // CP_COMM_WATCHDOG_H
