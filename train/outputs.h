/*
What a run writes, and the rules that keep it from losing or mixing up data:

  * a run owns its -o directory: rank 0 holds DIR/LOCK ("HOST PID START_TIME")
    from start to end (a run that fails removes it). A second run into the
    directory refuses, naming the first; the lock of a run that died (same host,
    its pid gone or another process's by its start time) is recognised and taken
    over with a note. A lock left by a run on another host cannot be checked from here: the
    message says which host and pid, and to remove the file if that run is gone.
  * no output (-tl, DIR/main.log, the lock, the checkpoint files in DIR) is a
    file any input flag names (every -i and -j file, -e, -tk, -hf: the flag table
    says which flags are inputs), read by this run or not: compared by device and
    inode, so symbolic and hard links are caught too.
*/
#ifndef TRAIN_OUTPUTS_H
#define TRAIN_OUTPUTS_H

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../llmc/dataloader.h"
#include "../llmc/utils.h"
#include "agree.h"
#include "config.h"

#define RUN_LOCK_NAME "LOCK"

// Creates dir and its parents; it must end up a directory. Returns 0, or -1 with
// the reason in why.
static int make_output_dir(const char *dir, char *why, size_t why_size) {
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                return problem(why, why_size, "-o '%s': cannot create directory '%s': %s", dir, path, strerror(errno));
            }
            *p = saved;
            if (saved == '\0') { break; }
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0) { return problem(why, why_size, "-o '%s': %s", dir, strerror(errno)); }
    if (!S_ISDIR(st.st_mode)) {
        return problem(why, why_size, "-o '%s': not a directory: it is %s", dir, file_type_name(st.st_mode));
    }
    return 0;
}

// The start time of process pid (clock ticks after boot, /proc/PID/stat field 22)
// and whether it is a zombie; 0 when it cannot be read. With the pid it tells a
// process apart from a later one that got the same pid.
static unsigned long long process_start_time(int pid, int *zombie) {
    char path[64], text[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    *zombie = 0;
    FILE *fp = fopen(path, "r");
    if (fp == NULL) { return 0; }
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    char *p = strrchr(text, ')'); // the command name may hold spaces and parentheses
    char state;
    unsigned long long start = 0;
    if (p == NULL || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                            &state, &start) != 2) {
        return 0;
    }
    *zombie = state == 'Z';
    return start;
}

// Whether the run that wrote a lock of this host is still running: its pid is
// there, not a zombie, and started when the lock says. A run that is being ended
// (a failed job's ranks are killed just as the launcher returns) gets 3 s to go.
static int lock_owner_running(int pid, unsigned long long start_time) {
    for (int wait = 0; wait < 60; wait++) {
        int zombie;
        unsigned long long start = process_start_time(pid, &zombie);
        int running = kill(pid, 0) == 0 || errno != ESRCH;
        if (!running || zombie || (start != 0 && start_time != 0 && start != start_time)) { return 0; }
        usleep(50000);
    }
    return 1;
}

static char run_lock_path[4200]; // the lock this process holds, "" for none

static void remove_run_lock(void) {
    if (run_lock_path[0] != '\0') { unlink(run_lock_path); }
    run_lock_path[0] = '\0';
}

// Takes the lock of dir for this process; returns 0, or -1 with the reason in why.
// The lock file holds "HOST PID START_TIME".
static int take_run_lock(const char *dir, char *why, size_t why_size) {
    char path[4200], host[256] = "?";
    snprintf(path, sizeof(path), "%s/%s", dir, RUN_LOCK_NAME);
    gethostname(host, sizeof(host) - 1);
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0644);
        if (fd >= 0) {
            char line[400];
            int zombie;
            int n = snprintf(line, sizeof(line), "%s %d %llu\n", host, (int)getpid(),
                             process_start_time((int)getpid(), &zombie));
            int ok = write(fd, line, (size_t)n) == n && fsync(fd) == 0;
            int saved = errno;
            close(fd);
            if (!ok) { return problem(why, why_size, "cannot write its lock file '%s': %s", path, strerror(saved)); }
            snprintf(run_lock_path, sizeof(run_lock_path), "%s", path);
            fatal_cleanup_hook = remove_run_lock; // a run that fails frees its directory
            return 0;
        }
        if (errno != EEXIST) {
            return problem(why, why_size, "cannot create its lock file '%s': %s", path, strerror(errno));
        }
        char owner[256] = "", text[400] = "";
        int pid = -1;
        unsigned long long start_time = 0;
        FILE *fp = open_input_file(path, text, sizeof(text));
        if (fp != NULL) {
            if (fgets(text, sizeof(text), fp) == NULL || sscanf(text, "%255s %d %llu", owner, &pid, &start_time) < 2) {
                pid = -1;
            }
            fclose(fp);
        }
        if (pid <= 0) {
            return problem(why, why_size, "-o '%s' is locked by '%s', which names no run (a run starting this very "
                           "moment?); if no run uses the directory, remove the file", dir, path);
        }
        int same_host = strcmp(owner, host) == 0;
        if (!same_host || lock_owner_running(pid, start_time)) {
            return problem(why, why_size, "-o '%s' is in use by the run of pid %d on host %s (its lock file '%s'): "
                           "choose another -o%s", dir, pid, owner, path,
                           same_host ? "" : ", or remove the lock file if that run is gone");
        }
        printf("note: -o %s: taking over the lock of the run of pid %d on %s, which is no longer running\n", dir,
               pid, owner);
        if (unlink(path) != 0 && errno != ENOENT) {
            return problem(why, why_size, "cannot remove the stale lock file '%s': %s", path, strerror(errno));
        }
    }
    return problem(why, why_size, "-o '%s': another run took the lock '%s' at the same moment", dir, path);
}

// The start of a run with -o: every rank makes the directory (each writes its
// state file there), rank 0 takes the lock; a rank that cannot ends the job.
static void claim_output_dir(const TrainConfig *cfg) {
    if (cfg->output_dir == NULL) { return; }
    char why[1024];
    const char *problem_found = NULL;
    if (make_output_dir(cfg->output_dir, why, sizeof(why)) != 0) { problem_found = why; }
    fail_if_any_rank(problem_found);
    if (fatal_rank == 0 && take_run_lock(cfg->output_dir, why, sizeof(why)) != 0) { problem_found = why; }
    fail_if_any_rank(problem_found);
}

static void release_output_dir(void) {
    if (run_lock_path[0] == '\0') { return; }
    fatal_cleanup_hook = NULL;
    if (unlink(run_lock_path) != 0) { fatal("cannot remove the lock file '%s': %s", run_lock_path, strerror(errno)); }
    run_lock_path[0] = '\0';
}

// Whether name is one the run writes in its -o directory.
static int output_dir_name(const char *name) {
    return strcmp(name, "main.log") == 0 || strcmp(name, RUN_LOCK_NAME) == 0 || strncmp(name, "model_", 6) == 0 ||
           strncmp(name, "state_", 6) == 0 || strncmp(name, "DONE_", 5) == 0;
}

// Whether path names (or would name) a file the run writes in dir: its real
// directory is dir (same device and inode) and its name one of the run's.
static int in_output_dir(const char *path, const struct stat *dir) {
    char copy[4096], parent[PATH_MAX];
    snprintf(copy, sizeof(copy), "%s", path);
    char *slash = strrchr(copy, '/');
    const char *name = slash ? slash + 1 : copy;
    if (slash == copy) { snprintf(parent, sizeof(parent), "/"); }
    else if (slash) { *slash = '\0'; if (realpath(copy, parent) == NULL) { return 0; } }
    else if (realpath(".", parent) == NULL) { return 0; }
    struct stat st;
    return output_dir_name(name) && stat(parent, &st) == 0 && st.st_dev == dir->st_dev && st.st_ino == dir->st_ino;
}

// What a flag that takes a string is to the run's files: the name of input files
// (a glob: -i and -j match several), of an output, or no file. Every such flag of
// train_flags is listed here: one that is not ends the run at start-up, so that a
// new input flag can never be left out of the check below.
typedef enum { FLAG_NO_FILE, FLAG_INPUT, FLAG_OUTPUT } FlagFileRole;

static int flag_file_role(const char *flag) {
    static const struct {
        const char *flag;
        FlagFileRole role;
    } roles[] = {
        {"-i", FLAG_INPUT},   {"-j", FLAG_INPUT},    {"-e", FLAG_INPUT},    {"-tk", FLAG_INPUT},
        {"-hf", FLAG_INPUT},  {"-o", FLAG_OUTPUT},   {"-tl", FLAG_OUTPUT},  {"-k", FLAG_NO_FILE},
        {"-pi", FLAG_NO_FILE}, {"-pm", FLAG_NO_FILE}, {"-ps", FLAG_NO_FILE}, {"-pf", FLAG_NO_FILE},
        {"-pp", FLAG_NO_FILE}, {"-cl", FLAG_NO_FILE}, {"-ca", FLAG_NO_FILE}, {"-ct", FLAG_NO_FILE},
    };
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
        if (strcmp(roles[i].flag, flag) == 0) { return (int)roles[i].role; }
    }
    return -1;
}

// The outputs of a run, as rank 0 compares each input with them.
typedef struct {
    const TrainConfig *cfg;
    struct stat dir, tl, log;
    int have_dir, have_tl, have_log;
} RunOutputs;

// Whether input file `path` (named by `flag`) is one of the outputs; writes the
// reason into why. An input that is not there is not compared: its reader says so.
static int input_is_output(const RunOutputs *o, const char *flag, const char *path, char *why, size_t why_size) {
    struct stat in;
    if (stat(path, &in) != 0) { return 0; }
    char real[PATH_MAX]; // the file a symbolic link leads to
    const char *resolved = realpath(path, real) != NULL ? real : path;
    if (o->have_tl && in.st_dev == o->tl.st_dev && in.st_ino == o->tl.st_ino) {
        snprintf(why, why_size, "-tl '%s' is the %s input '%s': the run would write over it", o->cfg->token_loss_path,
                 flag, path);
        return 1;
    }
    if ((o->have_log && in.st_dev == o->log.st_dev && in.st_ino == o->log.st_ino) ||
        (o->have_dir && in_output_dir(resolved, &o->dir))) {
        snprintf(why, why_size, "the %s input '%s' is a file the run writes in its -o directory '%s'", flag, path,
                 o->cfg->output_dir);
        return 1;
    }
    return 0;
}

// Rank 0 checks that no output of the run (-tl, and in -o main.log, the lock and
// the checkpoint files) is a file that any input flag names: every file of each
// flag that train_flags marks as an input (flag_file_role), every match of the
// -i and -j globs, whether or not this run reads it (a -j of a run that does not
// validate, the -tk of one that prints no sample: they are the user's files all
// the same). A clash ends the job on every rank naming both.
static void check_outputs_are_not_inputs(const TrainConfig *cfg) {
    char why[9000];
    const char *problem_found = NULL;
    if (fatal_rank == 0) {
        RunOutputs o;
        memset(&o, 0, sizeof(o));
        o.cfg = cfg;
        char log_path[PATH_MAX + 16];
        o.have_dir = cfg->output_dir != NULL && stat(cfg->output_dir, &o.dir) == 0;
        o.have_tl = cfg->token_loss_path != NULL && stat(cfg->token_loss_path, &o.tl) == 0;
        snprintf(log_path, sizeof(log_path), "%s/main.log", o.have_dir ? cfg->output_dir : "");
        o.have_log = o.have_dir && stat(log_path, &o.log) == 0;
        if (o.have_dir && cfg->token_loss_path != NULL && in_output_dir(cfg->token_loss_path, &o.dir)) {
            snprintf(why, sizeof(why), "-tl '%s' is a file the run writes in its -o directory '%s'",
                     cfg->token_loss_path, cfg->output_dir);
            problem_found = why;
        }
        TrainConfig copy = *cfg; // the flag table points into a TrainConfig
        Flag flags[MAX_FLAGS];
        int nflags = train_flags(&copy, flags, "");
        for (int f = 0; f < nflags && problem_found == NULL; f++) {
            if (flags[f].type != FLAG_STRING) { continue; }
            int role = flag_file_role(flags[f].name);
            if (role < 0) { fatal("flag %s takes a string but has no file role (train/outputs.h)", flags[f].name); }
            const char *value = *(const char **)flags[f].value;
            if (role != FLAG_INPUT || value == NULL) { continue; }
            if (strcmp(flags[f].name, "-e") == 0 && !init_is_checkpoint_file(value)) { continue; } // a descriptor
            glob_t matches;
            if (glob(value, GLOB_NOCHECK, NULL, &matches) != 0) { continue; } // nothing to compare
            for (size_t i = 0; i < matches.gl_pathc && problem_found == NULL; i++) {
                if (input_is_output(&o, flags[f].name, matches.gl_pathv[i], why, sizeof(why))) { problem_found = why; }
            }
            globfree(&matches);
        }
    }
    fail_if_any_rank(problem_found);
}

#endif // TRAIN_OUTPUTS_H
