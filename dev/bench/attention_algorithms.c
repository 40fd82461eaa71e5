/*
attention_algorithms: what one rank spends on context-parallel attention, per
algorithm: ring (cp/ring_attention.h), all-gather (cp/allgather_attention.h),
Ulysses and the Ulysses x ring hybrid (cp/ulysses_attention.h), at B = 1 and the
sizes of GPT-2 124M (C 768, NH 12) over a long sequence.

    make bench_attention
    mpirun -np 4 ./bench_attention                      every algorithm's allocation, cp 4
    mpirun -np 4 ./bench_attention -a ulysses -t 8192   one algorithm at work
    mpirun -np 4 ./bench_attention -a hybrid -u 2       hybrid U 2 x R 2 (-u: U, default 2)
    mpirun -np 4 ./bench_attention -a ring -cl striped  the layout (-cl: round_robin, the default,
                                                        contiguous or striped; identity at cp 1)

Every figure is measured, not a formula:
  - allocation: each algorithm's init adds up every buffer it allocates (.bytes);
    one instance serves every layer of the model, so this is its memory per rank;
    next to it the activations activations_init (llmc/gpt2.h) allocates for the
    rank's T/cp tokens: one layer (a 2-layer model minus a 1-layer one) and the
    whole model;
  - with -a the rank shards a row of T tokens (-cl, round_robin by default, identity
    at cp 1) and
    runs the algorithm's forward and backward on random data, through Comms that
    count what the rank sends: the bytes that leave it (a collective counted as the
    bandwidth-optimal schedule sends: an all-gather or reduce-scatter (n-1) parts,
    an all-to-all its n-1 parts for the others) and the messages (one per ring
    step, n-1 per collective over n ranks, each a dependent step of that schedule).
    The per-step binding (Ulysses: its group's coordinates) is counted apart;
  - the peak resident set (getrusage) grows by what the algorithm touches, MPI's
    own buffers included: one algorithm per process, since the peak only rises;
  - time: the forward and the backward of one layer, the slowest rank, the best of
    -r repetitions (default 1).

Output: "name  value" lines; sizes as "bytes MiB", the max over the ranks.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "../../cp/allgather_attention.h"
#include "../../cp/comm_mpi.h"
#include "../../cp/mesh.h"
#include "../../cp/ring_attention.h"
#include "../../cp/sharder.h"
#include "../../cp/ulysses_attention.h"
#include "../../llmc/gpt2_init.h"
#include "../../llmc/rand.h"

#define MIB (1024.0 * 1024.0)
#define USAGE "usage: bench_attention [-t T] [-a ring|allgather|ulysses|hybrid] [-u U] [-r repetitions] " \
              "[-cl round_robin|contiguous|striped]"

// the max over the ranks of a size, printed by rank 0
static void report(int rank, const char *name, size_t bytes) {
    unsigned long long mine = bytes, max = 0;
    MPI_Allreduce(&mine, &max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) { printf("%-52s %14llu %10.2f\n", name, max, max / MIB); }
}

static size_t peak_rss_bytes(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (size_t)usage.ru_maxrss * 1024; // Linux reports KiB
}

// floats activations_init allocates for a model of `layers` layers on B x T tokens
static size_t activation_floats(GPT2Config c, int layers, int B, int T) {
    c.num_layers = layers;
    Activations acts;
    activations_init(&acts, c, B, T, 0); // -r 0; calloc: pages untouched, nothing resident
    size_t n = acts.num_bytes / sizeof(float);
    activations_free(&acts);
    return n;
}

// ----------------------------------------------------------------------------
// the MPI transport (cp/comm_mpi.h), counting what this rank sends: its Comm with the
// verbs that send replaced by ones that count, then run its own

typedef struct {
    Comm comm;     // the MPI transport's Comm, first: a Comm * of the Counter is the Counter
    size_t bytes;  // bytes that left this rank
    long messages; // point-to-point messages of the schedule
} Counter;

static Counter *counter_of(Comm *comm) { return (Counter *)comm; }

static void count(Comm *comm, size_t bytes, long messages) {
    if (comm->size == 1) { return; } // nothing leaves the rank
    counter_of(comm)->bytes += bytes;
    counter_of(comm)->messages += messages;
}

static void *counting_ring_start(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes) {
    count(comm, bytes, 1);
    return comm_mpi_ring_start(comm, send_buf, recv_buf, bytes);
}

static void counting_all_reduce_sum(Comm *comm, void *buf, size_t count_, CommType type) {
    int n = comm->size;
    count(comm, 2 * (n - 1) * (count_ * comm_type_size(type) / n), 2 * (n - 1));
    comm_mpi_all_reduce_sum(comm, buf, count_, type);
}

static void counting_all_gather(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    count(comm, (comm->size - 1) * bytes_per_rank, comm->size - 1);
    comm_mpi_all_gather(comm, send_buf, recv_buf, bytes_per_rank);
}

static void counting_reduce_scatter_sum(Comm *comm, const void *send_buf, void *recv_buf, size_t count_,
                                        CommType type) {
    count(comm, (comm->size - 1) * count_ * comm_type_size(type), comm->size - 1);
    comm_mpi_reduce_scatter_sum(comm, send_buf, recv_buf, count_, type);
}

static void counting_all_to_all(Comm *comm, const void *send_buf, void *recv_buf, size_t bytes_per_rank) {
    count(comm, (comm->size - 1) * bytes_per_rank, comm->size - 1);
    comm_mpi_all_to_all(comm, send_buf, recv_buf, bytes_per_rank);
}

static void counting_broadcast(Comm *comm, void *buf, size_t bytes, int root) {
    count(comm, comm->rank == root ? bytes : 0, comm->rank == root ? comm->size - 1 : 0);
    comm_mpi_broadcast(comm, buf, bytes, root);
}

// The MPI transport over mc, counted. The algorithms here post no all-to-all-v
// (group-cast, the one that does, is not among them): those verbs, the waits, the
// barrier and destroy (which frees the Counter, the Comm it begins) are the
// transport's own.
static Comm *counting_comm(MPI_Comm mc) {
    Comm *mpi = comm_mpi_create(mc);
    Counter *c = (Counter *)callocCheck(1, sizeof(Counter));
    c->comm = *mpi;
    free(mpi); // its verbs and state live on in c->comm
    c->comm.ring_start = counting_ring_start;
    c->comm.all_reduce_sum = counting_all_reduce_sum;
    c->comm.all_gather = counting_all_gather;
    c->comm.reduce_scatter_sum = counting_reduce_scatter_sum;
    c->comm.all_to_all = counting_all_to_all;
    c->comm.broadcast = counting_broadcast;
    return &c->comm;
}

// ----------------------------------------------------------------------------

enum { RING, ALLGATHER, ULYSSES, HYBRID, NUM_ALGORITHMS };
static const char *algorithm_names[NUM_ALGORITHMS] = {"ring", "allgather", "ulysses", "hybrid"};

// One algorithm over counted Comms: the CP group (ring, allgather) or the Ulysses
// groups of U ranks and the rings across them (cp/mesh.h).
typedef struct {
    int algorithm;
    Comm *comms[2]; // the counted groups: [0] the CP group or the Ulysses group, [1] the ring across (or NULL)
    RingAttention ring;
    AllgatherAttention allgather;
    UlyssesAttention ulysses;
    size_t bytes; // what init allocated
} Algorithm;

static Comm *split_comm(MPI_Comm parent, int color, int key) {
    MPI_Comm mc;
    MPI_Comm_split(parent, color, key, &mc);
    return counting_comm(mc);
}

static void algorithm_init(Algorithm *a, int algorithm, int U, int B, int Tl, int C, int NH) {
    memset(a, 0, sizeof(*a));
    a->algorithm = algorithm;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (algorithm == RING || algorithm == ALLGATHER) {
        a->comms[0] = split_comm(MPI_COMM_WORLD, 0, rank);
        if (algorithm == RING) {
            ring_attention_init(&a->ring, a->comms[0], B, Tl, C, NH);
            a->bytes = a->ring.bytes;
        } else {
            allgather_attention_init(&a->allgather, a->comms[0], B, Tl, C, NH);
            a->bytes = a->allgather.bytes;
        }
        return;
    }
    Mesh m = mesh_init(rank, size, size, algorithm == ULYSSES ? size : U);
    a->comms[0] = split_comm(MPI_COMM_WORLD, m.ring_rank, m.ulysses_rank);
    a->comms[1] = split_comm(MPI_COMM_WORLD, m.ulysses_rank, m.ring_rank);
    ulysses_attention_init(&a->ulysses, a->comms[0], a->comms[1], B, Tl, C, NH);
    a->bytes = a->ulysses.bytes;
}

static void algorithm_free(Algorithm *a) {
    if (a->algorithm == RING) { ring_attention_free(&a->ring); }
    else if (a->algorithm == ALLGATHER) { allgather_attention_free(&a->allgather); }
    else { ulysses_attention_free(&a->ulysses); }
    for (int i = 0; i < 2; i++) {
        if (a->comms[i]) { a->comms[i]->destroy(a->comms[i]); }
    }
}

static AttentionVerbs algorithm_bind(Algorithm *a, const ShardLayout *layout) {
    if (a->algorithm == RING) {
        ring_attention_bind(&a->ring, layout);
        return ring_attention_verbs(&a->ring);
    }
    if (a->algorithm == ALLGATHER) {
        allgather_attention_bind(&a->allgather, layout);
        return allgather_attention_verbs(&a->allgather);
    }
    ulysses_attention_bind(&a->ulysses, layout);
    return ulysses_attention_verbs(&a->ulysses);
}

// bytes and messages counted so far, over the algorithm's groups; and set them to 0
static void take_counts(Algorithm *a, size_t *bytes, long *messages) {
    *bytes = 0;
    *messages = 0;
    for (int i = 0; i < 2; i++) {
        if (a->comms[i] == NULL) { continue; }
        Counter *c = counter_of(a->comms[i]);
        *bytes += c->bytes;
        *messages += c->messages;
        c->bytes = 0;
        c->messages = 0;
    }
}

static void report_counts(int rank, const char *what, Algorithm *a) {
    size_t bytes;
    long messages;
    take_counts(a, &bytes, &messages);
    char name[96];
    snprintf(name, sizeof(name), "%s: bytes sent", what);
    report(rank, name, bytes);
    long most = 0;
    MPI_Allreduce(&messages, &most, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    snprintf(name, sizeof(name), "%s: messages", what);
    if (rank == 0) { printf("%-52s %14ld\n", name, most); }
}

static double slowest_rank(double seconds) {
    double most = 0.0;
    MPI_Allreduce(&seconds, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return most;
}

// One algorithm at work on the layout's shard: counts, peak RSS and time of its
// forward and backward.
static void measure(int algorithm, CpLayoutKind layout, int U, int reps, int B, int T, int C, int NH) {
    int rank, cp;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &cp);
    CpSharder sh;
    cp_sharder_init(&sh, layout, rank, cp, T, cp_no_documents());
    int *tokens = (int *)callocCheck((size_t)B * T, sizeof(int));
    if (cp_shard_batch(&sh, tokens, tokens, NULL, B, T) != CP_OK) { fatal("%s", sh.error); }
    int Tl = sh.layout.local_len;
    size_t nqkv = (size_t)B * Tl * 3 * C, nout = (size_t)B * Tl * C, nlse = (size_t)B * NH * Tl;
    float *qkv = (float *)mallocCheck(nqkv * sizeof(float));
    float *dout = (float *)mallocCheck(nout * sizeof(float));
    float *out = (float *)mallocCheck(nout * sizeof(float));
    float *lse = (float *)mallocCheck(nlse * sizeof(float));
    float *dqkv = (float *)mallocCheck(nqkv * sizeof(float));
    Rng rng;
    rng_seed(&rng, 1 + rank);
    for (size_t i = 0; i < nqkv; i++) { qkv[i] = 2.0f * rng_uniform(&rng) - 1.0f; }
    for (size_t i = 0; i < nout; i++) { dout[i] = 2.0f * rng_uniform(&rng) - 1.0f; }
    // touched, so that they are resident before the measurement starts
    memset(out, 0, nout * sizeof(float));
    memset(lse, 0, nlse * sizeof(float));
    memset(dqkv, 0, nqkv * sizeof(float));
    size_t before = peak_rss_bytes();

    const char *name = algorithm_names[algorithm];
    Algorithm a;
    algorithm_init(&a, algorithm, U, B, Tl, C, NH);
    AttentionVerbs attn = algorithm_bind(&a, &sh.layout);
    report_counts(rank, "per step (binding)", &a);
    double forward_s = 1e30, backward_s = 1e30;
    size_t after_forward = 0;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        attn.forward(attn.ctx, out, lse, qkv);
        double mid = MPI_Wtime();
        if (r == 0) {
            after_forward = peak_rss_bytes();
            report_counts(rank, "forward per layer", &a);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double backward_start = MPI_Wtime();
        attn.backward(attn.ctx, dqkv, dout, qkv, out, lse);
        double end = MPI_Wtime();
        if (r == 0) { report_counts(rank, "backward per layer", &a); }
        double f = slowest_rank(mid - start), b = slowest_rank(end - backward_start);
        if (f < forward_s) { forward_s = f; }
        if (b < backward_s) { backward_s = b; }
        size_t later_bytes;
        long later_messages;
        take_counts(&a, &later_bytes, &later_messages); // later repetitions send the same again
    }
    size_t after = peak_rss_bytes();
    report(rank, "peak RSS, inputs touched", before);
    report(rank, "peak RSS growth in forward", after_forward - before);
    report(rank, "peak RSS growth in forward + backward", after - before);
    if (rank == 0) {
        printf("%-52s %14.3f\n", "forward per layer: seconds (slowest rank)", forward_s);
        printf("%-52s %14.3f\n", "backward per layer: seconds (slowest rank)", backward_s);
        printf("# %s, layout %s: best of %d\n", name, cp_layout_names[layout], reps);
    }
    algorithm_free(&a);
    cp_sharder_free(&sh);
    free(tokens); free(qkv); free(dout); free(out); free(lse); free(dqkv);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    int T = 4096, U = 2, reps = 1, algorithm = -1, layout = CP_LAYOUT_ROUND_ROBIN;
    if (argc % 2 == 0) { fatal(USAGE); }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0) { T = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-u") == 0) { U = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-r") == 0) { reps = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-a") == 0) {
            for (int k = 0; k < NUM_ALGORITHMS; k++) {
                if (strcmp(argv[i + 1], algorithm_names[k]) == 0) { algorithm = k; }
            }
            if (algorithm < 0) { fatal("-a '%s': ring, allgather, ulysses or hybrid", argv[i + 1]); }
        } else if (strcmp(argv[i], "-cl") == 0) {
            layout = cp_layout_from_name(argv[i + 1]);
            if (layout < 0 || cp_layout_depends_on_data((CpLayoutKind)layout) || layout == CP_LAYOUT_IDENTITY) {
                fatal("-cl '%s': round_robin, contiguous or striped", argv[i + 1]);
            }
        } else { fatal(USAGE); }
    }
    int rank, cp;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &cp);
    if (T < 1 || reps < 1) { fatal("-t %d, -r %d: both must be at least 1", T, reps); }
    if (U < 1 || cp % U != 0) { fatal("-u %d does not divide the %d ranks", U, cp); }
    int B = 1;
    GPT2Config c = {0};
    char why[256];
    gpt2_config_from_descriptor("d12", &c, why, sizeof(why)); // GPT-2 124M: C 768, NH 12, L 12
    if (cp == 1) { layout = CP_LAYOUT_IDENTITY; }
    int P = cp_padded_len((CpLayoutKind)layout, T, cp);
    int Tl = P / cp;
    if (rank == 0) {
        printf("# B %d, T %d, cp %d, layout %s: %d local tokens per rank; C %d, NH %d (GPT-2 124M); hybrid U %d x R %d\n",
               B, T, cp, cp_layout_names[layout], Tl, c.channels, c.num_heads, U, cp / U);
        printf("%-52s %14s %10s\n", "# per rank", "bytes", "MiB");
    }
    for (int k = 0; k < NUM_ALGORITHMS; k++) {
        if (algorithm >= 0 && k != algorithm) { continue; }
        Algorithm a;
        algorithm_init(&a, k, U, B, Tl, c.channels, c.num_heads);
        char name[96];
        snprintf(name, sizeof(name), "%s attention (init, all layers share it)", algorithm_names[k]);
        report(rank, name, a.bytes);
        algorithm_free(&a);
    }
    size_t one = activation_floats(c, 1, B, Tl), two = activation_floats(c, 2, B, Tl);
    report(rank, "activations of one layer", (two - one) * sizeof(float));
    report(rank, "activations of the model (12 layers, logits)", activation_floats(c, c.num_layers, B, Tl) * sizeof(float));
    if (algorithm >= 0) { measure(algorithm, (CpLayoutKind)layout, U, reps, B, T, c.channels, c.num_heads); }
    MPI_Finalize();
    return 0;
}
