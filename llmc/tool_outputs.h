/*
The files one run of a tool writes (./encode, dev/loss_mask, dev/cp_layout), kept
from destroying what the run reads and from leaving half a result behind.

1. Identity. Every output is compared with every input (the tokenizer included) and
   with every other output by the file the path names, not by its spelling: a path
   that exists by its device and inode (in.txt, ./in.txt, a hard link and a symbolic
   link to it are one file), a path that does not exist yet by the device and inode
   of its directory and its last component (new.bin and ./new.bin are one file).
   A clash ends the run with one line naming both paths, before anything is written.
   Two character devices may coincide (-o /dev/null -v /dev/null): they keep nothing.
2. Atomic writes. Each output is written to a temporary file beside it (the same
   directory: the rename cannot cross file systems), and only when every output of
   the run has been written, flushed and synced are they renamed into place. A run
   that fails before (a full disk, a file too large, a write error, a signal)
   removes its temporaries and leaves the old files as they were. The renames
   themselves are the one step that is not all or nothing: they follow one another,
   into directories that were just written. A character device (/dev/null, /dev/full)
   is written as it is: it cannot be renamed onto, and keeps nothing to lose.

    ToolOutputs outs = {0};
    tool_outputs_add(&outs, "-o", out_path);           // checks each output at once
    tool_outputs_check_input(&outs, "the input", in);  // each input against them
    ... read the inputs, compute ...
    FILE *fp = tool_output_open(&outs, 0);              // the temporary (or the device)
    fwriteCheck(..., fp, tool_output_name(&outs, 0));
    tool_outputs_commit(&outs);                          // renamed once every one is whole
*/
#ifndef LLMC_TOOL_OUTPUTS_H
#define LLMC_TOOL_OUTPUTS_H

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "utils.h"

#define TOOL_MAX_OUTPUTS 4

// What a path names: the file (exists), or the directory it would be made in and its name.
typedef struct {
    int exists;
    dev_t dev;
    ino_t ino;
    char name[NAME_MAX + 1]; // the last component, when !exists
} PathIdentity;

typedef struct {
    const char *flag; // how the user named it ("-o"), for messages
    const char *path;
    PathIdentity id;
    int device;       // a character device: written in place
    FILE *fp;
    char tmp_path[PATH_MAX + 16]; // the temporary while it exists, else ""
} ToolOutput;

typedef struct {
    ToolOutput out[TOOL_MAX_OUTPUTS];
    int n;
} ToolOutputs;

// the run's outputs, for the cleanup on a failure or a signal (one set per process)
static ToolOutputs *tool_outputs_active = NULL;

// Removes every temporary (async-signal-safe: unlink only).
static void tool_outputs_remove_temporaries(void) {
    if (tool_outputs_active == NULL) { return; }
    for (int i = 0; i < tool_outputs_active->n; i++) {
        if (tool_outputs_active->out[i].tmp_path[0]) { unlink(tool_outputs_active->out[i].tmp_path); }
    }
}

// SIGINT, SIGTERM, SIGHUP while writing: the temporaries go, then the signal's default
// action (SA_RESETHAND restored it) ends the process as it would have.
static void tool_outputs_on_signal(int sig) {
    tool_outputs_remove_temporaries();
    raise(sig);
}

// What path names (see PathIdentity); 0, or -1 with the reason in why.
static int path_identity(const char *path, PathIdentity *id, char *why, size_t why_size) {
    memset(id, 0, sizeof(*id));
    struct stat st;
    if (stat(path, &st) == 0) {
        *id = (PathIdentity){1, st.st_dev, st.st_ino, ""};
        return 0;
    }
    if (errno != ENOENT) { return problem(why, why_size, "%s", strerror(errno)); }
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (*name == '\0' || strlen(name) > NAME_MAX) { return problem(why, why_size, "not a file name"); }
    char dir[PATH_MAX];
    path_directory(path, dir, sizeof(dir));
    if (stat(dir, &st) != 0) { return problem(why, why_size, "its directory '%s': %s", dir, strerror(errno)); }
    if (!S_ISDIR(st.st_mode)) { return problem(why, why_size, "'%s' is not a directory", dir); }
    id->exists = 0;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    snprintf(id->name, sizeof(id->name), "%s", name);
    return 0;
}

static int path_identity_same(const PathIdentity *a, const PathIdentity *b) {
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && strcmp(a->name, b->name) == 0;
}

// Adds an output: its type (a regular file, a new one or a character device) and its
// directory are checked now, and it is compared with the outputs added before.
static void tool_outputs_add(ToolOutputs *o, const char *flag, const char *path) {
    if (o->n == TOOL_MAX_OUTPUTS) { fatal("%s '%s': more than %d outputs", flag, path, TOOL_MAX_OUTPUTS); }
    ToolOutput *t = &o->out[o->n];
    memset(t, 0, sizeof(*t));
    t->flag = flag;
    t->path = path;
    char why[PATH_MAX + 256];
    if (path_identity(path, &t->id, why, sizeof(why)) != 0) { fatal("cannot write %s '%s': %s", flag, path, why); }
    struct stat st;
    if (t->id.exists && stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
            fatal("cannot write %s '%s': it is %s, not a regular file", flag, path, file_type_name(st.st_mode));
        }
        t->device = S_ISCHR(st.st_mode);
    }
    for (int i = 0; i < o->n; i++) {
        if (path_identity_same(&o->out[i].id, &t->id) && !(t->device && o->out[i].device)) {
            fatal("%s '%s' and %s '%s' are the same file: each output needs its own", o->out[i].flag,
                  o->out[i].path, flag, path);
        }
    }
    o->n++;
    tool_outputs_active = o;
}

// Ends the run if the input at path (what: how the user named it; "-" is standard
// input) is one of the outputs: one not made yet too, which the output would make.
// An input whose directory cannot be found is left to its reader to report.
static void tool_outputs_check_input(const ToolOutputs *o, const char *what, const char *path) {
    PathIdentity id = {0};
    struct stat st;
    if (strcmp(path, "-") == 0) {
        if (fstat(STDIN_FILENO, &st) != 0) { return; }
        id = (PathIdentity){1, st.st_dev, st.st_ino, ""};
    } else {
        char why[PATH_MAX + 256];
        if (path_identity(path, &id, why, sizeof(why)) != 0) { return; }
    }
    for (int i = 0; i < o->n; i++) {
        if (path_identity_same(&o->out[i].id, &id) && !o->out[i].device) {
            fatal("%s '%s' is %s '%s' (the same file): writing it would destroy what the run reads", o->out[i].flag,
                  o->out[i].path, what, strcmp(path, "-") == 0 ? "standard input" : path);
        }
    }
}

// The name to report a write error of output i under.
static const char *tool_output_name(const ToolOutputs *o, int i) {
    return o->out[i].device ? o->out[i].path : o->out[i].tmp_path;
}

// Opens output i for writing: a temporary beside it, or the character device itself.
static FILE *tool_output_open(ToolOutputs *o, int i) {
    ToolOutput *t = &o->out[i];
    if (t->device) { return t->fp = open_output_file(t->path, 0); }
    static int handlers_installed = 0;
    if (!handlers_installed) {
        // a file past `ulimit -f` is then a write error (EFBIG), reported and cleaned up,
        // instead of a SIGXFSZ that ends the process with its temporaries on disk
        signal(SIGXFSZ, SIG_IGN);
        install_signal_handler(SIGINT, tool_outputs_on_signal, SA_RESETHAND);
        install_signal_handler(SIGTERM, tool_outputs_on_signal, SA_RESETHAND);
        install_signal_handler(SIGHUP, tool_outputs_on_signal, SA_RESETHAND);
        fatal_cleanup_hook = tool_outputs_remove_temporaries;
        handlers_installed = 1;
    }
    // the signals wait while the temporary is made and its name recorded: one that came
    // in between would leave it, unnamed for the handler
    sigset_t signals, before;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &signals, &before);
    char tmp[sizeof(t->tmp_path)];
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", t->path);
    int fd = mkstemp(tmp);
    int saved = errno;
    if (fd >= 0) { memcpy(t->tmp_path, tmp, sizeof(tmp)); }
    sigprocmask(SIG_SETMASK, &before, NULL);
    if (fd < 0) { fatal("cannot create a temporary file beside %s '%s': %s", t->flag, t->path, strerror(saved)); }
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0644 & ~mask) != 0) { fatal("cannot set the mode of '%s': %s", t->tmp_path, strerror(errno)); }
    t->fp = fdopen(fd, "wb");
    if (t->fp == NULL) { fatal("cannot open '%s' for writing: %s", t->tmp_path, strerror(errno)); }
    return t->fp;
}

// Every output opened is flushed, synced and closed; only then are the temporaries
// renamed into place. Ends the run (temporaries removed) on any failure.
static void tool_outputs_commit(ToolOutputs *o) {
    for (int i = 0; i < o->n; i++) {
        ToolOutput *t = &o->out[i];
        if (t->fp == NULL) { continue; }
        fflushCheck(t->fp, tool_output_name(o, i));
        if (!t->device && fsync(fileno(t->fp)) != 0) {
            fatal("cannot flush '%s' to disk: %s", t->tmp_path, strerror(errno));
        }
        FILE *fp = t->fp;
        t->fp = NULL;
        fcloseCheck(fp, tool_output_name(o, i));
    }
    for (int i = 0; i < o->n; i++) {
        ToolOutput *t = &o->out[i];
        if (t->tmp_path[0] == '\0') { continue; }
        if (rename(t->tmp_path, t->path) != 0) {
            fatal("cannot rename '%s' to '%s': %s", t->tmp_path, t->path, strerror(errno));
        }
        t->tmp_path[0] = '\0';
        fsync_parent_dir(t->path);
    }
    tool_outputs_active = NULL;
}

#endif // LLMC_TOOL_OUTPUTS_H
