/*
The checks that every rank runs the same job: one collective verdict on
problems a rank finds alone (fail_if_any_rank), and the comparison of each
rank's view of the job (its flags; its model and data) with rank 0's.
*/
#ifndef TRAIN_AGREE_H
#define TRAIN_AGREE_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "../cp/comm_mpi.h"
#include "../llmc/checksum.h"
#include "../llmc/dataloader.h"
#include "../llmc/gpt2.h"
#include "../llmc/utils.h"
#include "config.h"
#include "job_comm.h"

// the cores of this machine that are online
static int available_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

// An OMP_NUM_THREADS beyond the cores this rank may use (a typo, a value meant for
// another machine) makes the OpenMP runtime crash or run out of memory at the
// first parallel loop, with no line naming the rank: such a value is clamped to
// the cores, and one that is not a number gets OpenMP's default, each with a note.
static void clamp_omp_threads(void) {
#ifdef _OPENMP
    const char *env = getenv("OMP_NUM_THREADS");
    if (env == NULL) { return; }
    int cores = available_cores();
    char *end;
    errno = 0;
    long v = strtol(env, &end, 10); // the first value of a list "N,M" is this level's
    if (errno == 0 && end != env && (*end == '\0' || *end == ',') && v >= 1 && v <= cores) { return; }
    if (errno == ERANGE || (end != env && v > cores)) {
        omp_set_num_threads(cores);
        printf("note: rank %d: OMP_NUM_THREADS=%s is more than the %d core(s) of this machine: %d thread(s)\n",
               fatal_rank, env, cores, cores);
    } else {
        printf("note: rank %d: OMP_NUM_THREADS=%s is not a number of threads: OpenMP's default, %d thread(s)\n",
               fatal_rank, env, omp_get_max_threads());
    }
#endif
}

// MPI, a line naming the rank on every fatal signal (llmc/utils.h), and a sane
// number of OpenMP threads
static void train_runtime_init(int *argc, char ***argv) {
    mpi_runtime_init(argc, argv);
    fatal_install_signal_handlers();
    clamp_omp_threads();
    job_comm_init();
}

// -h (or --help) given to some ranks only (an MPMD launch) must not leave the
// others waiting in a collective for ranks that left: every rank learns whether
// any rank was asked, and all of them stop alike. asked: this rank's -h.
static int help_asked_anywhere(int asked) {
    int ranks_asked = asked != 0;
    job_comm()->all_reduce_sum(job_comm(), &ranks_asked, 1, COMM_INT32);
    int size = job_comm()->size;
    if (ranks_asked > 0 && ranks_asked < size && fatal_rank == 0) {
        printf("note: -h was given to %d of the %d ranks: every rank stops\n", ranks_asked, size);
    }
    return ranks_asked > 0;
}

// Collective over the world: does any rank have a problem (why != NULL)? If one
// has, the job ends on every rank with the reason of the lowest such rank, printed
// once by rank 0 (so that no other rank's abort cuts it off) and naming that rank.
// Problems a rank finds in its own files come here instead of fatal(), so that the
// others do not wait for it in their next collective.
static void fail_if_any_rank(const char *why) {
    Comm *world = job_comm();
    int rank = world->rank, size = world->size;
    int mine = why != NULL, *has_problem = (int *)mallocCheck((size_t)size * sizeof(int));
    world->all_gather(world, &mine, has_problem, sizeof(int));
    int first = size;
    for (int r = size - 1; r >= 0; r--) {
        if (has_problem[r]) { first = r; }
    }
    free(has_problem);
    if (first == size) { return; }
    char reason[1024];
    if (rank == first) { snprintf(reason, sizeof(reason), "%s", why); }
    world->broadcast(world, reason, sizeof(reason), first);
    fatal_everywhere("rank %d: %s", first, reason);
}

// What one rank sees of the job as named values (its flags; its model and data),
// fixed-size so that rank 0 can broadcast its own for every rank to compare. A
// value is compared whole, by the checksum of all of it (a path can be longer than
// the text kept for messages).
#define VIEW_FIELDS 64
typedef struct {
    int count;
    struct {
        char name[32];
        char value[224];  // the value, cut to fit, for messages
        uint64_t checksum; // of the whole value
    } fields[VIEW_FIELDS];
} JobView;

__attribute__((format(printf, 3, 4)))
static void view_add(JobView *view, const char *name, const char *fmt, ...) {
    if (view->count == VIEW_FIELDS) { fatal("a JobView holds at most %d fields", VIEW_FIELDS); }
    snprintf(view->fields[view->count].name, sizeof(view->fields[0].name), "%s", name);
    va_list args, again;
    va_start(args, fmt);
    va_copy(again, args);
    int length = vsnprintf(NULL, 0, fmt, args);
    char *whole = (char *)mallocCheck((size_t)(length > 0 ? length : 0) + 1);
    vsnprintf(whole, (size_t)(length > 0 ? length : 0) + 1, fmt, again);
    va_end(again);
    va_end(args);
    snprintf(view->fields[view->count].value, sizeof(view->fields[0].value), "%s", whole);
    view->fields[view->count].checksum = fnv1a(FNV_OFFSET, whole, strlen(whole));
    free(whole);
    view->count++;
}

// Collective: every rank compares its view with rank 0's; the job ends, naming
// the first field that differs and both values, if any rank's does. `rule` says
// what must agree.
static void check_ranks_agree(const JobView *mine, const char *rule) {
    JobView *root = (JobView *)mallocCheck(sizeof(JobView));
    *root = *mine;
    job_comm()->broadcast(job_comm(), root, sizeof(JobView), 0);
    char why[1024];
    const char *problem_found = NULL;
    int n = mine->count > root->count ? mine->count : root->count;
    for (int i = 0; i < n && problem_found == NULL; i++) {
        const char *name = i < mine->count ? mine->fields[i].name : "(nothing)";
        const char *root_name = i < root->count ? root->fields[i].name : "(nothing)";
        if (strcmp(name, root_name) != 0) {
            snprintf(why, sizeof(why), "runs another trainer than rank 0 (field %s, rank 0: %s)", name, root_name);
            problem_found = why;
        } else if (mine->fields[i].checksum != root->fields[i].checksum) {
            snprintf(why, sizeof(why), "%s is %s, but %s on rank 0 (%s)", name, mine->fields[i].value,
                     root->fields[i].value, rule);
            problem_found = why;
        }
    }
    free(root);
    fail_if_any_rank(problem_found);
}

// llm.c's multi-node flags against mpirun's world: -pn must be the world size, -pr
// this rank (so an MPMD launch may give each rank its own), -pg at least the
// ranks on this node (llm.c's device is the rank modulo -pg). Each rank checks its
// own; the job ends on every rank if one does not fit.
static void check_launch_flags(const TrainConfig *cfg) {
    int rank, size, node_size = mpi_node_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char why[256];
    const char *problem_found = NULL;
    if (cfg->num_processes != 0 && cfg->num_processes != size) {
        snprintf(why, sizeof(why), "-pn %d, but mpirun started %d rank(s): drop -pn or start -np %d", cfg->num_processes,
                 size, cfg->num_processes);
        problem_found = why;
    } else if (cfg->process_rank != -1 && cfg->process_rank != rank) {
        snprintf(why, sizeof(why), "-pr %d, but mpirun made this process rank %d: drop -pr (mpirun numbers the ranks)",
                 cfg->process_rank, rank);
        problem_found = why;
    } else if (cfg->gpus_per_node != 0 && cfg->gpus_per_node < node_size) {
        snprintf(why, sizeof(why), "-pg %d, but mpirun put %d ranks on this node", cfg->gpus_per_node, node_size);
        problem_found = why;
    }
    fail_if_any_rank(problem_found);
}

// Every rank was started with the same flags (an MPMD launch, or a wrapper script,
// can give ranks different ones). Runs before anything collective depends on them.
static void check_flags_agree(TrainConfig *cfg, const char *transports) {
    JobView view;
    memset(&view, 0, sizeof(view));
    Flag flags[MAX_FLAGS];
    int nflags = train_flags(cfg, flags, transports);
    for (int i = 0; i < nflags; i++) {
        if (strcmp(flags[i].name, "-pr") == 0) { continue; } // each rank's own (check_launch_flags)
        char value[sizeof(view.fields[0].value)];
        format_flag_value(&flags[i], 9, value, sizeof(value)); // 9 digits tell any two floats apart
        view_add(&view, flags[i].name, "%s", value);
    }
    check_ranks_agree(&view, "every rank must be started with the same flags");
    check_launch_flags(cfg);
}

// Every rank holds the same model and reads the same data files (same flags can
// still name different files on different nodes). Before the first collective on
// the model: a rank with another model would broadcast or reduce the wrong sizes.
// val: the validation loader, NULL when the run does not validate.
static void check_model_and_data_agree(GPT2Config c, const DataLoader *train, const DataLoader *val) {
    JobView view;
    memset(&view, 0, sizeof(view));
    view_add(&view, "the model", "L %d, NH %d, C %d, maxT %d, V %d, Vp %d", c.num_layers, c.num_heads, c.channels,
             c.max_seq_len, c.vocab_size, c.padded_vocab_size);
    const DataLoader *loaders[2] = {train, val};
    const char *names[2] = {"the -i data", "the -j data"};
    for (int i = 0; i < (val != NULL ? 2 : 1); i++) {
        view_add(&view, names[i], "%zu file(s) of %zu tokens with fingerprint %016llx", loaders[i]->files.gl_pathc,
                 loaders[i]->total_tokens, (unsigned long long)loaders[i]->fingerprint);
    }
    check_ranks_agree(&view, "every rank must see the same model and data files");
}

#endif // TRAIN_AGREE_H
