/*
Small helpers used everywhere: fatal errors that end the whole job, and checked
versions of the libc calls that touch files and memory.

Why a hook: in a multi-rank run an error on one rank must end every rank, or the
others wait forever in their next collective. The trainers install a hook that
calls MPI_Abort; without it (unit tests, tools) a fatal error is a plain exit(1).
An error every rank finds alike (a bad flag, a short file: fatal_everywhere) needs
no abort: once every rank has reached it, each ends cleanly with status 1 (the
hooks fatal_all_reached and fatal_agreed_exit_hook), and the launcher prints no
abort banner over the one line.
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// fatal errors

// called after the message is printed; must not return
static void (*fatal_exit_hook)(void) = NULL;
// called first, to undo what this process holds (the run's lock of its -o)
static void (*fatal_cleanup_hook)(void) = NULL;
// this rank's index in the job (0 without MPI): errors found by one rank name it
static int fatal_rank = 0;
// set by the transport once every rank takes part in collectives: waits, for a
// bounded time, until every rank has reached fatal_everywhere; 1 if all did
static int (*fatal_all_reached)(void) = NULL;
// ends this process cleanly (exit status 1) once every rank reached fatal_everywhere;
// must not return
static void (*fatal_agreed_exit_hook)(void) = NULL;

// exit_hook: how the job ends (fatal_exit_hook, fatal_agreed_exit_hook; NULL: exit(1))
static void fatal_exit_through(void (*exit_hook)(void)) {
    if (fatal_cleanup_hook) {
        void (*cleanup)(void) = fatal_cleanup_hook;
        fatal_cleanup_hook = NULL; // a failure inside it must not come back here
        cleanup();
    }
    fflush(stdout);
    fflush(stderr);
    if (exit_hook) { exit_hook(); }
    exit(1);
}

static void fatal_exit(void) {
    fatal_exit_through(fatal_exit_hook);
}

// Prints "error: [rank N: ]message" with one write, so that the launcher's own
// lines (Open MPI's MPI_ABORT banner) cannot land in the middle of it.
static void fatal_print(int name_rank, const char *fmt, va_list args) {
    char line[2048];
    int n = name_rank ? snprintf(line, sizeof(line), "error: rank %d: ", fatal_rank)
                      : snprintf(line, sizeof(line), "error: ");
    vsnprintf(line + n, sizeof(line) - n - 1, fmt, args);
    size_t len = strlen(line);
    line[len++] = '\n';
    fflush(stdout);
    fflush(stderr);
    if (write(STDERR_FILENO, line, len) < 0) { /* nowhere left to report it */ }
}

// An error this rank found on its own (a bad token in its window, a failed write):
// it prints one line, naming the rank when the job runs under MPI, and ends the job.
__attribute__((format(printf, 1, 2), noreturn))
static void fatal(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fatal_print(fatal_all_reached != NULL, fmt, args);
    va_end(args);
    fatal_exit();
    abort(); // unreachable: fatal_exit never returns
}

// An error every rank finds identically (a bad flag, a bad file header): rank 0
// prints the one line; once every rank has reached it, each ends cleanly with
// status 1, so the message appears once, is never cut off by an abort, and is the
// only line. Should some rank not reach it after all (its file differs), the job is
// aborted: rank 0 after its line, another rank after a line of its own, naming it.
__attribute__((format(printf, 1, 2), noreturn))
static void fatal_everywhere(const char *fmt, ...) {
    va_list args;
    if (fatal_rank == 0 || fatal_all_reached == NULL) {
        va_start(args, fmt);
        fatal_print(0, fmt, args);
        va_end(args);
    }
    if (fatal_all_reached == NULL) { fatal_exit(); }
    if (fatal_all_reached()) { fatal_exit_through(fatal_agreed_exit_hook); }
    if (fatal_rank != 0) {
        va_start(args, fmt);
        fatal_print(1, fmt, args);
        va_end(args);
    }
    fatal_exit();
    abort();
}

// ----------------------------------------------------------------------------
// long work: a loop that can keep one rank busy for long (sampling, validating
// data, writing a checkpoint) calls note_progress now and then, so that ranks
// waiting for this one see it working (the transport's watchdog, cp/comm_watchdog.h,
// installs the hook; without it this does nothing)

static void (*progress_hook)(void) = NULL;

static void note_progress(void) {
    if (progress_hook) { progress_hook(); }
}

// ----------------------------------------------------------------------------
// fatal signals: one line naming the rank and the signal, then the default action

static const struct {
    int sig;
    const char *name;
} fatal_signals[] = {
    {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}, {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"},
};
#define NUM_FATAL_SIGNALS ((int)(sizeof(fatal_signals) / sizeof(fatal_signals[0])))

// appends the decimal digits of v to line at *len (async-signal-safe, unlike printf)
static void append_decimal(char *line, size_t *len, int v) {
    char digits[12];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v > 0);
    while (n > 0) { line[(*len)++] = digits[--n]; }
}

static void append_text(char *line, size_t *len, const char *s) {
    while (*s) { line[(*len)++] = *s++; }
}

// Only async-signal-safe calls: write(2), getppid, raise. A SIGTERM or SIGINT sent
// by our parent, the launcher, is the launcher ending the whole job after another
// rank failed or was stopped, which it reports itself: a line from every rank would
// only bury that report. SA_RESETHAND has restored the default action, so the
// raise ends the process as the signal would have.
static void fatal_signal_handler(int sig, siginfo_t *info, void *context) {
    (void)context;
    int from_launcher = (sig == SIGTERM || sig == SIGINT) && info != NULL && info->si_code == SI_USER &&
                        info->si_pid == getppid();
    if (!from_launcher) {
        char line[96];
        size_t len = 0;
        append_text(line, &len, "rank ");
        append_decimal(line, &len, fatal_rank);
        append_text(line, &len, ": killed by signal ");
        append_decimal(line, &len, sig);
        append_text(line, &len, " (");
        for (int i = 0; i < NUM_FATAL_SIGNALS; i++) {
            if (fatal_signals[i].sig == sig) { append_text(line, &len, fatal_signals[i].name); }
        }
        append_text(line, &len, ")\n");
        if (write(STDERR_FILENO, line, len) < 0) { /* nothing else is safe here */ }
    }
    raise(sig);
}

// sig's handler: handler, with these sa_flags (SA_RESTART, SA_RESETHAND) and no
// other signal blocked while it runs
static void install_signal_handler(int sig, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, NULL);
}

static void fatal_install_signal_handlers(void) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = fatal_signal_handler;
    action.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < NUM_FATAL_SIGNALS; i++) { sigaction(fatal_signals[i].sig, &action, NULL); }
}

// ----------------------------------------------------------------------------
// checked libc calls: on failure they name the file and the system's reason
// (strerror), never a place in the source: these lines are meant for users

// The kind of a file that is not a regular one, for messages.
static const char *file_type_name(mode_t mode) {
    if (S_ISDIR(mode)) { return "a directory"; }
    if (S_ISFIFO(mode)) { return "a FIFO"; }
    if (S_ISSOCK(mode)) { return "a socket"; }
    if (S_ISCHR(mode)) { return "a character device"; }
    if (S_ISBLK(mode)) { return "a block device"; }
    if (S_ISLNK(mode)) { return "a symbolic link"; }
    return "not a regular file";
}

// Opens a file the run writes. Its type is checked before the open, and the open
// does not block either (O_NONBLOCK), because opening a FIFO for writing waits
// forever for a reader: an output must be a regular file or a character device
// (/dev/null). append: add to the end, else truncate. Ends the job on failure.
static FILE *open_output_file(const char *path, int append) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
        fatal("cannot write '%s': it is %s, not a regular file", path, file_type_name(st.st_mode));
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) { fatal("cannot open '%s' for writing: %s", path, strerror(errno)); }
    if (fstat(fd, &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))) {
        fatal("cannot write '%s': it is %s, not a regular file", path, file_type_name(st.st_mode));
    }
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        fatal("cannot open '%s' for writing: %s", path, strerror(errno));
    }
    FILE *fp = fdopen(fd, append ? "ab" : "wb");
    if (fp == NULL) { fatal("cannot open '%s' for writing: %s", path, strerror(errno)); }
    return fp;
}

// Long reads and writes (a checkpoint of a large model) go in pieces of at most
// IO_PIECE_BYTES, each followed by note_progress.
#define IO_PIECE_BYTES ((size_t)64 << 20)

static size_t io_piece_items(size_t size) { return IO_PIECE_BYTES / size > 0 ? IO_PIECE_BYTES / size : 1; }

static void fwriteCheck(const void *ptr, size_t size, size_t nmemb, FILE *stream, const char *what) {
    size_t per = io_piece_items(size);
    for (size_t done = 0; done < nmemb; done += per) {
        size_t n = nmemb - done < per ? nmemb - done : per;
        if (fwrite((const char *)ptr + done * size, size, n, stream) != n) {
            fatal("cannot write '%s': %s", what, strerror(errno));
        }
        note_progress();
    }
}

// fread of nmemb items in pieces; returns how many were read (nmemb unless the
// file ends or fails first)
static size_t fread_progress(void *ptr, size_t size, size_t nmemb, FILE *stream) {
    size_t per = io_piece_items(size), done = 0;
    while (done < nmemb) {
        size_t n = nmemb - done < per ? nmemb - done : per;
        size_t got = fread((char *)ptr + done * size, size, n, stream);
        done += got;
        note_progress();
        if (got != n) { break; }
    }
    return done;
}

// A buffered stream's errors may show only when it is flushed: every flush is checked.
static void fflushCheck(FILE *stream, const char *what) {
    if (fflush(stream) != 0) { fatal("cannot write '%s': %s", what, strerror(errno)); }
}

static void fcloseCheck(FILE *fp, const char *what) {
    if (fclose(fp) != 0) { fatal("cannot write '%s' (at its close): %s", what, strerror(errno)); }
}

static void *mallocCheck(size_t size) {
    void *ptr = malloc(size == 0 ? 1 : size);
    if (ptr == NULL) { fatal("out of memory: cannot allocate %zu bytes", size); }
    return ptr;
}

static void *callocCheck(size_t nmemb, size_t size) {
    void *ptr = calloc(nmemb == 0 ? 1 : nmemb, size == 0 ? 1 : size);
    if (ptr == NULL) { fatal("out of memory: cannot allocate %zu x %zu bytes", nmemb, size); }
    return ptr;
}

// callocCheck for the model's large buffers (weights, gradients, moments,
// activations), whose whole 2 MiB extents are asked to be backed by huge pages
// (madvise, the kernel's "transparent huge pages" where they are on request only,
// as on most distributions). Such a buffer is written page by page at its first
// step, and on a virtual machine a page fault is dear: a d1 run's start-up took
// 28,000 faults and 0.8 s, with these buffers on huge pages 12,700 and 0.6 s
// (dev/bench/README.md). glibc gives a block
// this large its own mapping, untouched until written, so only what is written
// becomes resident (in 2 MiB pieces). Freed with free(). The advice is a hint:
// where the kernel ignores it, or has no such pages, nothing changes.
#define HUGE_PAGE_BYTES ((size_t)2 << 20)
static void *calloc_huge_pages(size_t nmemb, size_t size) {
    void *ptr = callocCheck(nmemb, size);
#ifdef MADV_HUGEPAGE
    uintptr_t begin = ((uintptr_t)ptr + HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1);
    uintptr_t end = ((uintptr_t)ptr + nmemb * size) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1);
    if (end > begin) { (void)madvise((void *)begin, end - begin, MADV_HUGEPAGE); }
#endif
    return ptr;
}

// A struct's heap buffers freed in one line: free_all(x->a, x->b, x->c).
#define free_all(...)                                                                   \
    do {                                                                                \
        void *free_all_list[] = {__VA_ARGS__};                                          \
        for (size_t i = 0; i < sizeof(free_all_list) / sizeof(free_all_list[0]); i++) { \
            free(free_all_list[i]);                                                     \
        }                                                                               \
    } while (0)

// ----------------------------------------------------------------------------
// writing a file atomically: to `path`.tmp, flushed to disk, renamed into place,
// so that a reader (or a resume after a crash) sees the whole file or none of it

typedef struct {
    FILE *fp;
    char path[4096];
    char tmp_path[4100];
} AtomicFile;

static void atomic_open(AtomicFile *af, const char *path) {
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp", path);
    af->fp = open_output_file(af->tmp_path, 0);
}

// The directory part of path ("." for a bare name, "/" for one in the root), in dir.
static void path_directory(const char *path, char *dir, size_t size) {
    snprintf(dir, size, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) { slash[1] = '\0'; } else if (slash) { *slash = '\0'; } else { snprintf(dir, size, "."); }
}

// Syncs the directory that holds `path`, so that a rename or a removal in it
// survives a crash of the machine.
static void fsync_parent_dir(const char *path) {
    char dir[4096];
    path_directory(path, dir, sizeof(dir));
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) { fatal("cannot sync directory '%s' to disk: %s", dir, strerror(errno)); }
    close(fd);
}

// Flushes and syncs the file, renames it into place and syncs its directory.
static void atomic_commit(AtomicFile *af) {
    fflushCheck(af->fp, af->tmp_path);
    if (fsync(fileno(af->fp)) != 0 && errno != EINVAL) { // EINVAL: a device that keeps nothing
        fatal("cannot flush '%s' to disk: %s", af->tmp_path, strerror(errno));
    }
    fcloseCheck(af->fp, af->tmp_path);
    if (rename(af->tmp_path, af->path) != 0) {
        fatal("cannot rename '%s' to '%s': %s", af->tmp_path, af->path, strerror(errno));
    }
    fsync_parent_dir(af->path);
}

// ----------------------------------------------------------------------------
// reporting a problem to the caller instead of ending the job: the file parsers
// are written this way so that a fuzzer can drive them

// writes the reason into why and returns -1, for `return problem(...)`
__attribute__((format(printf, 3, 4)))
static int problem(char *why, size_t why_size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, why_size, fmt, args);
    va_end(args);
    return -1;
}

// Reads the 256 int32 that llm.c's token, tokenizer and loss mask files open with,
// and checks their magic ([0]) and version ([1]). magic_note ends the bad-magic
// message's parenthesis: "" where the magic alone says enough, ", a loss mask file"
// where the file's name may not say what it should be. The size check before it
// stays the caller's: each file words it its own way. Returns 0, or -1 with the
// reason in why.
static int file_header_read(FILE *fp, int header[256], int magic, int version, const char *magic_note, char *why,
                            size_t why_size) {
    if (fread(header, sizeof(int), 256, fp) != 256) { return problem(why, why_size, "cannot read its header"); }
    if (header[0] != magic) {
        return problem(why, why_size, "bad magic %d (expected %d%s)", header[0], magic, magic_note);
    }
    if (header[1] != version) {
        return problem(why, why_size, "version %d, only %d is supported", header[1], version);
    }
    return 0;
}

// Opens an input file that must be a regular file; NULL (and the reason in why)
// when it is missing, unreadable or of another type. The type is checked before
// the open, which does not block either (O_NONBLOCK): opening a FIFO for reading
// waits forever for a writer.
static FILE *open_input_file(const char *path, char *why, size_t why_size) {
    struct stat st;
    if (stat(path, &st) != 0) {
        problem(why, why_size, "cannot open it: %s", strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        problem(why, why_size, "not a regular file: it is %s", file_type_name(st.st_mode));
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        problem(why, why_size, "cannot open it: %s", strerror(errno));
        return NULL;
    }
    // the path may name another file now than at the stat
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        close(fd);
        problem(why, why_size, "not a regular file");
        return NULL;
    }
    FILE *fp = fdopen(fd, "rb");
    if (fp == NULL) {
        close(fd);
        problem(why, why_size, "cannot open it: %s", strerror(errno));
    }
    return fp;
}

// size of an open file in bytes, leaving the position at the start
static long file_size_of(FILE *fp, const char *path) {
    if (fseek(fp, 0, SEEK_END) != 0) { fatal("cannot seek in '%s'", path); }
    long size = ftell(fp);
    if (size < 0) { fatal("cannot tell the size of '%s'", path); }
    if (fseek(fp, 0, SEEK_SET) != 0) { fatal("cannot seek in '%s'", path); }
    return size;
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }
static int round_up(int a, int multiple) { return ceil_div(a, multiple) * multiple; }

#endif // LLMC_UTILS_H
