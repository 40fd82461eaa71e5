/*
Helpers shared by the C tests of test/.

    CHECK(cond, fmt, ...)   on failure prints file:line, the rank and the message,
                            then ends the process (or, once mpi_runtime_init has
                            installed its hook, the whole MPI job, so that no rank
                            is left waiting in a collective)
    check_int_array         first differing index, got vs expected
    CloseCheck              |got - expected| <= atol + rtol * |expected| over many
                            elements; reports how many failed and the worst one
    fill_uniform            deterministic random data (same seed, same data on
                            every rank)
*/
#ifndef TEST_UTILS_H
#define TEST_UTILS_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/rand.h"
#include "llmc/utils.h"

// ----------------------------------------------------------------------------
// failing

__attribute__((format(printf, 3, 4), noreturn))
static void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "FAIL %s:%d (rank %d): ", file, line, fatal_rank);
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    fatal_exit(); // exit(1), or MPI_Abort under mpi_runtime_init
    abort();
}

#define CHECK(cond, ...) do { if (!(cond)) { test_fail(__FILE__, __LINE__, __VA_ARGS__); } } while (0)

// got and expected: (n,) ints; `what` names the array in the message
#define check_int_array(what, got, expected, n) check_int_array_at(what, got, expected, n, __FILE__, __LINE__)
static void check_int_array_at(const char *what, const int *got, const int *expected, size_t n,
                               const char *file, int line) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] != expected[i]) {
            test_fail(file, line, "%s: index %zu: got %d, expected %d", what, i, got[i], expected[i]);
        }
    }
}

// ----------------------------------------------------------------------------
// comparing real numbers

typedef struct {
    char what[200];
    double atol, rtol;
    size_t checked, bad;
    size_t worst_index;  // the element that exceeded its tolerance the most
    double worst_got, worst_expected, worst_excess;
} CloseCheck;

static void close_begin(CloseCheck *cc, double atol, double rtol, const char *fmt, ...) {
    memset(cc, 0, sizeof(*cc));
    va_list args;
    va_start(args, fmt);
    vsnprintf(cc->what, sizeof(cc->what), fmt, args);
    va_end(args);
    cc->atol = atol;
    cc->rtol = rtol;
}

// element `index` (any numbering that helps the reader find it)
static void close_add(CloseCheck *cc, size_t index, double got, double expected) {
    double tol = cc->atol + cc->rtol * fabs(expected);
    double diff = fabs(got - expected);
    cc->checked++;
    if (diff <= tol) { return; } // a NaN fails here too
    double excess = isfinite(diff) ? diff - tol : INFINITY;
    if (cc->bad == 0 || excess > cc->worst_excess) {
        cc->worst_index = index;
        cc->worst_got = got;
        cc->worst_expected = expected;
        cc->worst_excess = excess;
    }
    cc->bad++;
}

#define close_end(cc) close_end_at(cc, __FILE__, __LINE__)
static void close_end_at(const CloseCheck *cc, const char *file, int line) {
    if (cc->bad > 0) {
        test_fail(file, line, "%s: %zu of %zu elements outside |diff| <= %g + %g*|expected|; worst at index %zu: "
                  "got %.9g, expected %.9g (diff %.3g)", cc->what, cc->bad, cc->checked, cc->atol, cc->rtol,
                  cc->worst_index, cc->worst_got, cc->worst_expected, fabs(cc->worst_got - cc->worst_expected));
    }
}

// ----------------------------------------------------------------------------
// random data

// x[i] ~ U[lo, hi)
static void fill_uniform(Rng *rng, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) { x[i] = lo + (hi - lo) * rng_uniform(rng); }
}

// uniform in [0, n)
static int rand_below(Rng *rng, int n) {
    return (int)(rng_next_u64(rng) % (uint64_t)n);
}

#endif // TEST_UTILS_H
