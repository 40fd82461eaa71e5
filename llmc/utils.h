/*
Small helpers used everywhere: fatal errors that end the whole job, and checked
versions of the libc calls that touch files and memory.

Why a hook: in a multi-rank run an error on one rank must end every rank, or the
others wait forever in their next collective. The trainers install a hook that
calls MPI_Abort; without it (unit tests, tools) a fatal error is a plain exit(1).
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// ----------------------------------------------------------------------------
// fatal errors

// called after the message is printed; must not return
static void (*fatal_exit_hook)(void) = NULL;
// the rank that prints errors every rank detects identically (see fatal_everywhere)
static int fatal_rank = 0;
// set by the transport once every rank takes part in collectives
static void (*fatal_wait_for_printer)(void) = NULL;

static void fatal_exit(void) {
    fflush(stdout);
    fflush(stderr);
    if (fatal_exit_hook) { fatal_exit_hook(); }
    exit(1);
}

// An error this rank found on its own (a bad token in its window, a failed write):
// it prints one line and ends the job.
__attribute__((format(printf, 1, 2), noreturn))
static void fatal(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    fatal_exit();
    abort(); // unreachable: fatal_exit never returns
}

// An error every rank finds identically (a bad flag, a bad file header): rank 0
// prints the one line and ends the job, the other ranks wait to be ended by it,
// so the message appears once and is never cut off by another rank's abort.
__attribute__((format(printf, 1, 2), noreturn))
static void fatal_everywhere(const char *fmt, ...) {
    if (fatal_rank != 0 && fatal_wait_for_printer) {
        fatal_wait_for_printer();
    }
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    fatal_exit();
    abort();
}

// ----------------------------------------------------------------------------
// checked libc calls: on failure they name the file and the line of the caller

static FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *fp = fopen(path, mode);
    if (fp == NULL) {
        fatal("cannot open '%s' (mode %s) at %s:%d", path, mode, file, line);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

static void fread_check(void *ptr, size_t size, size_t nmemb, FILE *stream, const char *what,
                        const char *file, int line) {
    size_t got = fread(ptr, size, nmemb, stream);
    if (got != nmemb) {
        fatal("'%s' is truncated: wanted %zu items of %zu bytes, got %zu (%s:%d)",
              what, nmemb, size, got, file, line);
    }
}
#define freadCheck(ptr, size, nmemb, stream, what) fread_check(ptr, size, nmemb, stream, what, __FILE__, __LINE__)

static void fwrite_check(const void *ptr, size_t size, size_t nmemb, FILE *stream, const char *what,
                         const char *file, int line) {
    if (fwrite(ptr, size, nmemb, stream) != nmemb) {
        fatal("cannot write '%s' (%s:%d)", what, file, line);
    }
}
#define fwriteCheck(ptr, size, nmemb, stream, what) fwrite_check(ptr, size, nmemb, stream, what, __FILE__, __LINE__)

static void fclose_check(FILE *fp, const char *what, const char *file, int line) {
    if (fclose(fp) != 0) {
        fatal("cannot close '%s' (%s:%d)", what, file, line);
    }
}
#define fcloseCheck(fp, what) fclose_check(fp, what, __FILE__, __LINE__)

static void *malloc_check(size_t size, const char *file, int line) {
    void *ptr = malloc(size == 0 ? 1 : size);
    if (ptr == NULL) {
        fatal("out of memory: cannot allocate %zu bytes (%s:%d)", size, file, line);
    }
    return ptr;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

static void *calloc_check(size_t nmemb, size_t size, const char *file, int line) {
    void *ptr = calloc(nmemb == 0 ? 1 : nmemb, size == 0 ? 1 : size);
    if (ptr == NULL) {
        fatal("out of memory: cannot allocate %zu x %zu bytes (%s:%d)", nmemb, size, file, line);
    }
    return ptr;
}
#define callocCheck(nmemb, size) calloc_check(nmemb, size, __FILE__, __LINE__)

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

// Opens an input file that must be a regular file; NULL (and errno's reason in
// why) when it is missing, unreadable or a directory.
static FILE *open_input_file(const char *path, char *why, size_t why_size) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        problem(why, why_size, "cannot open it: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        problem(why, why_size, "not a regular file");
        return NULL;
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
