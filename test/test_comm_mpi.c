/*
MPI test of the host transport's reduce_scatter_sum and all_to_all (cp/comm_mpi.h),
the verbs all-gather attention sends its dK and dV home with and Ulysses attention
trades heads for tokens with.

Every rank fills its send buffer of size * count elements with small integers
that encode (sending rank, part, element), so every sum is exact in float and
double. Rank i must receive, for element j of its part,
    sum over ranks r of value(r, i, j) = (1 + 2 + ... + size) * pattern(i, j)
computed here in closed form, not by the transport. Also: the send buffer is left
as it was, and not one element past the receive buffer's count is written.
Types float, double and int32; counts 1 (one element each), 7 (odd) and 100003
(larger than any eager message).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "test/lib/test_utils.h"

#define CANARY -12345

// what rank r sends for element j of the part that goes to rank i
static int pattern(int i, size_t j) { return 1 + 3 * i + (int)(j % 97); }
static int value(int r, int i, size_t j) { return (r + 1) * pattern(i, j); }

// element k of a buffer of `type` as a double, and setting it
static double get(const void *buf, CommType type, size_t k) {
    switch (type) {
    case COMM_FLOAT: return ((const float *)buf)[k];
    case COMM_DOUBLE: return ((const double *)buf)[k];
    case COMM_INT32: return ((const int *)buf)[k];
    }
    return 0.0;
}

static void set(void *buf, CommType type, size_t k, int v) {
    switch (type) {
    case COMM_FLOAT: ((float *)buf)[k] = (float)v; break;
    case COMM_DOUBLE: ((double *)buf)[k] = (double)v; break;
    case COMM_INT32: ((int *)buf)[k] = v; break;
    }
}

static void check_reduce_scatter(Comm *comm, CommType type, size_t count) {
    static const char *type_names[] = {"float", "double", "int32"};
    int n = comm->size, me = comm->rank;
    size_t elem = comm_type_size(type);
    void *send = mallocCheck(n * count * elem);
    void *recv = mallocCheck((count + 1) * elem); // one canary element past the end
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < count; j++) { set(send, type, i * count + j, value(me, i, j)); }
    }
    for (size_t j = 0; j <= count; j++) { set(recv, type, j, CANARY); }
    comm->reduce_scatter_sum(comm, send, recv, count, type);
    int ranks_sum = n * (n + 1) / 2;
    for (size_t j = 0; j < count; j++) {
        double expected = (double)ranks_sum * pattern(me, j);
        CHECK(get(recv, type, j) == expected, "reduce_scatter_sum %s count %zu: element %zu is %g, expected %g",
              type_names[type], count, j, get(recv, type, j), expected);
    }
    CHECK(get(recv, type, count) == CANARY, "reduce_scatter_sum %s count %zu wrote past the receive buffer",
          type_names[type], count);
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < count; j++) {
            CHECK(get(send, type, i * count + j) == value(me, i, j), "reduce_scatter_sum %s count %zu changed the "
                  "send buffer at part %d element %zu", type_names[type], count, i, j);
        }
    }
    free(send);
    free(recv);
}

// all_to_all: rank r's part j holds bytes code(r, j, k); rank i must receive, as part
// r, rank r's part for i: byte k of it is code(r, i, k). Also: the send buffer is
// left as it was, and nothing past the receive buffer is written.
static unsigned char code(int from, int to, size_t k) { return (unsigned char)(31 * from + 7 * to + k % 251); }

static void check_all_to_all(Comm *comm, size_t bytes) {
    int n = comm->size, me = comm->rank;
    unsigned char *send = (unsigned char *)mallocCheck(n * bytes);
    unsigned char *recv = (unsigned char *)mallocCheck(n * bytes + 1); // one canary byte past the end
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < bytes; k++) { send[j * bytes + k] = code(me, j, k); }
    }
    memset(recv, 0xA5, n * bytes + 1);
    comm->all_to_all(comm, send, recv, bytes);
    for (int r = 0; r < n; r++) {
        for (size_t k = 0; k < bytes; k++) {
            CHECK(recv[r * bytes + k] == code(r, me, k), "all_to_all %zu bytes: part %d byte %zu is %d, expected %d",
                  bytes, r, k, recv[r * bytes + k], code(r, me, k));
        }
    }
    CHECK(recv[n * bytes] == 0xA5, "all_to_all %zu bytes wrote past the receive buffer", bytes);
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < bytes; k++) {
            CHECK(send[j * bytes + k] == code(me, j, k), "all_to_all %zu bytes changed the send buffer", bytes);
        }
    }
    free(send);
    free(recv);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    Comm *comm = comm_mpi_create(dup);
    CommType types[] = {COMM_FLOAT, COMM_DOUBLE, COMM_INT32};
    size_t counts[] = {1, 7, 100003};
    for (int t = 0; t < 3; t++) {
        for (int c = 0; c < 3; c++) { check_reduce_scatter(comm, types[t], counts[c]); }
    }
    size_t sizes[] = {1, 7, 400012};
    for (int i = 0; i < 3; i++) { check_all_to_all(comm, sizes[i]); }
    if (comm->rank == 0) {
        printf("test_comm_mpi np %d: OK, reduce_scatter_sum of 3 types x 3 counts, all_to_all of 3 sizes\n", comm->size);
    }
    comm->destroy(comm);
    MPI_Finalize();
    return 0;
}
