/*
MPI test of the host transport's verbs (cp/comm_mpi.h): reduce_scatter_sum and
all_to_all (the verbs all-gather attention sends its dK and dV home with and
Ulysses attention trades heads for tokens with), and all_reduce_sum, all_gather
(apart and in place), broadcast and a ring step.

Every verb runs twice: as it comes, and on a transport whose per-call limit is
lowered to 24 bytes (GPT2CP_TEST_MPI_MAX_BYTES), so that every transfer but the
smallest goes in pieces, as one of more than 1 GiB does at the real limit: each
piece a slice of every rank's part (a strided MPI datatype) or a run of the
buffer. The results must be the same, to the byte.

Every rank fills its send buffer of size * count elements with small integers
that encode (sending rank, part, element), so every sum is exact in float and
double. Rank i must receive, for element j of its part,
    sum over ranks r of value(r, i, j) = (1 + 2 + ... + size) * pattern(i, j)
computed here in closed form, not by the transport. Also: the send buffer is left
as it was, and not one element past the receive buffer's count is written.
Types float, double and int32; counts 1 (one element each), 7 (odd) and 100003
(larger than any eager message; 1003 under the lowered limit).

all_reduce_sum: rank r holds value(r, 0, j) at j: the sum is ranks_sum *
pattern(0, j). all_gather: rank r's bytes code(r, 0, k): part r of every rank's
result. broadcast: the root's code(root, 0, k). Ring: rank r sends code(r, 1, k)
and must receive rank r-1's. Each with a canary past the end.

all_to_all_v: the bytes from rank r to rank i are a count(r, i, round) known to
every rank (a hash; about a third of them 0, the own rank's always 0), byte k of
them code(r, i, k); the parts lie in the send and receive buffers in a shuffled
order with gaps between them, so that an offset mistaken for another lands
visibly wrong and a byte written outside a part overwrites a gap. Two exchanges
are in flight at once (waited in reverse order). A zero count must post no
message: the exchange holds exactly one request per piece of a nonzero count, and
after all ranks passed a barrier no message is left unmatched (MPI_Iprobe).

    test_comm_mpi stop VERB    (test/e2e_watchdog.sh) rank 1 stops itself (SIGSTOP) before
                           VERB, which every other rank then enters: the watchdog
                           must end the job naming rank 1 within GPT2CP_TIMEOUT
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "test/lib/test_comm.h"
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

static void check_all_reduce(Comm *comm, CommType type, size_t count) {
    int n = comm->size, me = comm->rank;
    size_t elem = comm_type_size(type);
    void *buf = mallocCheck((count + 1) * elem);
    for (size_t j = 0; j < count; j++) { set(buf, type, j, value(me, 0, j)); }
    set(buf, type, count, CANARY);
    comm->all_reduce_sum(comm, buf, count, type);
    for (size_t j = 0; j < count; j++) {
        double expected = (double)(n * (n + 1) / 2) * pattern(0, j);
        CHECK(get(buf, type, j) == expected, "all_reduce_sum count %zu: element %zu is %g, expected %g", count, j,
              get(buf, type, j), expected);
    }
    CHECK(get(buf, type, count) == CANARY, "all_reduce_sum count %zu wrote past the buffer", count);
    free(buf);
}

// in_place: this rank's part is already in the receive buffer
static void check_all_gather(Comm *comm, size_t bytes, int in_place) {
    int n = comm->size, me = comm->rank;
    unsigned char *send = (unsigned char *)mallocCheck(bytes + 1);
    unsigned char *recv = (unsigned char *)mallocCheck(n * bytes + 1);
    memset(recv, 0xA5, n * bytes + 1);
    unsigned char *mine = in_place ? recv + (size_t)me * bytes : send;
    for (size_t k = 0; k < bytes; k++) { mine[k] = code(me, 0, k); }
    comm->all_gather(comm, mine, recv, bytes);
    for (int r = 0; r < n; r++) {
        for (size_t k = 0; k < bytes; k++) {
            CHECK(recv[r * bytes + k] == code(r, 0, k), "all_gather %zu bytes%s: part %d byte %zu is %d, expected %d",
                  bytes, in_place ? " in place" : "", r, k, recv[r * bytes + k], code(r, 0, k));
        }
    }
    CHECK(recv[n * bytes] == 0xA5, "all_gather %zu bytes wrote past the receive buffer", bytes);
    free(send);
    free(recv);
}

static void check_broadcast(Comm *comm, size_t bytes) {
    int root = comm->size - 1;
    unsigned char *buf = (unsigned char *)mallocCheck(bytes + 1);
    for (size_t k = 0; k <= bytes; k++) { buf[k] = comm->rank == root && k < bytes ? code(root, 0, k) : 0xA5; }
    comm->broadcast(comm, buf, bytes, root);
    for (size_t k = 0; k < bytes; k++) {
        CHECK(buf[k] == code(root, 0, k), "broadcast %zu bytes: byte %zu is %d, expected %d", bytes, k, buf[k],
              code(root, 0, k));
    }
    CHECK(buf[bytes] == 0xA5, "broadcast %zu bytes wrote past the buffer", bytes);
    free(buf);
}

static void check_ring(Comm *comm, size_t bytes) {
    int n = comm->size, me = comm->rank, prev = (me - 1 + n) % n;
    unsigned char *send = (unsigned char *)mallocCheck(bytes + 1);
    unsigned char *recv = (unsigned char *)mallocCheck(bytes + 1);
    for (size_t k = 0; k < bytes; k++) { send[k] = code(me, 1, k); }
    memset(recv, 0xA5, bytes + 1);
    comm->ring_wait(comm, comm->ring_start(comm, send, recv, bytes));
    for (size_t k = 0; k < bytes; k++) {
        CHECK(recv[k] == code(prev, 1, k), "ring step of %zu bytes: byte %zu is %d, expected %d (rank %d's)", bytes, k,
              recv[k], code(prev, 1, k), prev);
    }
    CHECK(recv[bytes] == 0xA5, "ring step of %zu bytes wrote past the receive buffer", bytes);
    free(send);
    free(recv);
}

// the bytes rank `from` sends rank `to` in all_to_all_v round `round`: from 0 to
// largest, a third of them 0; 0 to itself
static size_t count_v(int from, int to, int round, size_t largest) {
    if (from == to) { return 0; }
    unsigned h = (unsigned)(from * 7919 + to * 104729 + round * 1299709);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return h % 3 == 0 ? 0 : (size_t)(h >> 4) % (largest + 1);
}

// offsets of n parts of the given sizes laid out in the order (k * 3 + shift) mod n
// (3 coprime to n but for n 3: then reversed), a gap of 5 bytes before each; returns
// the buffer's size (with a gap at the end)
static size_t layout_v(int n, const size_t *bytes, int shift, size_t *offset) {
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int part = n % 3 == 0 ? (n - 1 - (k + shift) % n) : (k * 3 + shift) % n;
        at += 5;
        offset[part] = at;
        at += bytes[part];
    }
    return at + 5;
}

typedef struct {
    size_t send_bytes[8], send_offset[8], recv_bytes[8], recv_offset[8], send_size, recv_size;
    unsigned char *send, *recv;
    void *exchange;
} ExchangeV;

static void start_v(Comm *comm, ExchangeV *x, int round, size_t largest) {
    int n = comm->size, me = comm->rank;
    for (int p = 0; p < n; p++) {
        x->send_bytes[p] = count_v(me, p, round, largest);
        x->recv_bytes[p] = count_v(p, me, round, largest);
    }
    x->send_size = layout_v(n, x->send_bytes, round, x->send_offset);
    x->recv_size = layout_v(n, x->recv_bytes, round + 1, x->recv_offset);
    x->send = (unsigned char *)mallocCheck(x->send_size);
    x->recv = (unsigned char *)mallocCheck(x->recv_size);
    memset(x->send, 0x5A, x->send_size);
    memset(x->recv, 0xA5, x->recv_size);
    for (int p = 0; p < n; p++) {
        for (size_t k = 0; k < x->send_bytes[p]; k++) { x->send[x->send_offset[p] + k] = code(me, p, k); }
    }
    x->exchange = comm->all_to_all_v_start(comm, x->send, x->send_bytes, x->send_offset, x->recv, x->recv_bytes,
                                           x->recv_offset);
    // one request per piece of a nonzero count, none for a zero count
    int pieces = 0;
    size_t piece = comm_mpi_impl(comm)->max_bytes;
    for (int p = 0; p < n; p++) {
        pieces += (int)((x->send_bytes[p] + piece - 1) / piece + (x->recv_bytes[p] + piece - 1) / piece);
    }
    CHECK(((CommMPIExchange *)x->exchange)->count == pieces, "all_to_all_v round %d: %d requests posted, expected %d "
          "(one per piece of a nonzero count)", round, ((CommMPIExchange *)x->exchange)->count, pieces);
}

static void finish_v(Comm *comm, ExchangeV *x, int round) {
    int n = comm->size, me = comm->rank;
    comm->all_to_all_v_wait(comm, x->exchange);
    char *in_part = (char *)callocCheck(x->recv_size, 1);
    for (int p = 0; p < n; p++) {
        for (size_t k = 0; k < x->recv_bytes[p]; k++) {
            unsigned char got = x->recv[x->recv_offset[p] + k];
            CHECK(got == code(p, me, k), "all_to_all_v round %d: byte %zu from rank %d is %d, expected %d", round, k,
                  p, got, code(p, me, k));
            in_part[x->recv_offset[p] + k] = 1;
        }
    }
    for (size_t k = 0; k < x->recv_size; k++) {
        CHECK(in_part[k] || x->recv[k] == 0xA5, "all_to_all_v round %d wrote byte %zu of the receive buffer, outside "
              "every part", round, k);
    }
    free(in_part);
    for (int p = 0; p < n; p++) {
        for (size_t k = 0; k < x->send_bytes[p]; k++) {
            CHECK(x->send[x->send_offset[p] + k] == code(me, p, k), "all_to_all_v round %d changed the send buffer",
                  round);
        }
    }
    free(x->send);
    free(x->recv);
}

static void check_all_to_all_v(Comm *comm, size_t largest) {
    CHECK(comm->size <= 8, "all_to_all_v's check runs on at most 8 ranks, not %d", comm->size);
    ExchangeV a, b;
    start_v(comm, &a, 0, largest);
    start_v(comm, &b, 1, largest);
    finish_v(comm, &b, 1);
    finish_v(comm, &a, 0);
    comm->barrier(comm);
    int pending = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_mpi_handle(comm), &pending, MPI_STATUS_IGNORE);
    CHECK(!pending, "all_to_all_v: a message is left unmatched after the exchanges (a zero count posted one?)");
}

// every verb on comm; largest: the largest count (elements of reduce_scatter_sum and
// all_reduce_sum; about a quarter of the bytes of the byte verbs' largest size)
static void check_verbs(Comm *comm, size_t largest) {
    CommType types[] = {COMM_FLOAT, COMM_DOUBLE, COMM_INT32};
    size_t counts[] = {1, 7, largest};
    for (int t = 0; t < 3; t++) {
        for (int c = 0; c < 3; c++) {
            check_reduce_scatter(comm, types[t], counts[c]);
            check_all_reduce(comm, types[t], counts[c]);
        }
    }
    size_t sizes[] = {1, 7, 4 * largest};
    for (int i = 0; i < 3; i++) {
        check_all_to_all(comm, sizes[i]);
        check_all_gather(comm, sizes[i], 0);
        check_all_gather(comm, sizes[i], 1);
        check_broadcast(comm, sizes[i]);
        check_ring(comm, sizes[i]);
        check_all_to_all_v(comm, sizes[i]);
    }
}

// Rank 1 stops before `verb`; the others enter it. Returns only if the verb
// returned on a rank that should have waited for rank 1 for ever.
static int stop_before(Comm *comm, const char *verb) {
    float buf[8] = {0}, all[64] = {0};
    if (comm->rank == 1) { raise(SIGSTOP); }
    if (strcmp(verb, "all_to_all") == 0) { comm->all_to_all(comm, buf, all, sizeof(float)); }
    else if (strcmp(verb, "all_gather") == 0) { comm->all_gather(comm, buf, all, sizeof(float)); }
    else if (strcmp(verb, "reduce_scatter_sum") == 0) { comm->reduce_scatter_sum(comm, all, buf, 1, COMM_FLOAT); }
    else if (strcmp(verb, "all_reduce_sum") == 0) { comm->all_reduce_sum(comm, buf, 1, COMM_FLOAT); }
    else if (strcmp(verb, "broadcast") == 0) { comm->broadcast(comm, buf, sizeof(float), 1); }
    else if (strcmp(verb, "barrier") == 0) { comm->barrier(comm); }
    else if (strcmp(verb, "all_to_all_v") == 0) { // ranks 0 and 1 exchange 4 bytes each way
        size_t bytes[64] = {0}, offsets[64] = {0};
        if (comm->rank <= 1) { bytes[1 - comm->rank] = sizeof(float); }
        comm->all_to_all_v_wait(comm, comm->all_to_all_v_start(comm, buf, bytes, offsets, all, bytes, offsets));
    }
    else if (strcmp(verb, "ring") == 0) { comm->ring_wait(comm, comm->ring_start(comm, buf, all, sizeof(float))); }
    else { fprintf(stderr, "test_comm_mpi stop: unknown verb '%s'\n", verb); return 2; }
    if (comm->rank == 1) { return 1; } // continued as the job ends: its peers had moved on
    fprintf(stderr, "FAIL: rank %d: %s returned although rank 1 is stopped\n", comm->rank, verb);
    return 1;
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    if (argc == 3 && strcmp(argv[1], "stop") == 0) {
        return stop_before(comm_mpi_create(comm_duplicate(MPI_COMM_WORLD)), argv[2]);
    }
    Comm *comm = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    check_verbs(comm, 100003);
    comm->destroy(comm);
    // the per-call limit lowered: transfers in pieces of at most 24 bytes
    setenv("GPT2CP_TEST_MPI_MAX_BYTES", "24", 1);
    comm = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    check_verbs(comm, 1003);
    if (comm->rank == 0) {
        printf("test_comm_mpi np %d: OK, reduce_scatter_sum and all_reduce_sum of 3 types x 3 counts, all_to_all, "
               "all_gather (apart and in place), broadcast, ring and all_to_all_v of 3 sizes; whole and in pieces of 24 bytes\n",
               comm->size);
    }
    comm->destroy(comm);
    mpi_runtime_finalize();
    return 0;
}
