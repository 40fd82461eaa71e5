/*
attention_memory: the memory one rank needs for context-parallel attention, ring
(cp/ring_attention.h) against all-gather (cp/allgather_attention.h), next to the
activations of a GPT-2 124M layer, at B = 1, C = 768, NH = 12 and a long sequence.

    make bench_attention_memory
    mpirun -np 4 ./bench_attention_memory                  the allocation sizes, cp 4
    mpirun -np 4 ./bench_attention_memory -a allgather     also the peak RSS of one
                                                           forward + backward of it

Every size is what the code allocates, reported by the code, not a formula:
  - each algorithm's init adds up every buffer it allocates (.bytes): one instance
    serves every layer of the model, so this is its memory per rank, once;
  - the activations come from activations_init (llmc/gpt2.h, the trainer's), for
    the rank's T/cp local tokens: one layer is the difference between a model of
    2 layers and one of 1, the whole model its 12 layers plus the embeddings and
    the logits.
With -a, the rank also shards a row of T tokens (round_robin, identity at cp 1),
touches its inputs, and runs the algorithm's forward and backward once on random
data: the peak resident set (getrusage) then grows by what the algorithm touches,
MPI's message buffers included. One algorithm per process, since the peak only
ever rises.

Output: one line per quantity, "name  bytes  MiB", the max over the ranks.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "../../cp/allgather_attention.h"
#include "../../cp/comm_mpi.h"
#include "../../cp/ring_attention.h"
#include "../../cp/sharder.h"
#include "../../llmc/gpt2.h"
#include "../../llmc/rand.h"

#define MIB (1024.0 * 1024.0)

// the max over the ranks of a size, printed by rank 0
static void report(Comm *comm, const char *name, size_t bytes) {
    unsigned long long mine = bytes, max = 0;
    MPI_Allreduce(&mine, &max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (comm->rank == 0) { printf("%-50s %14llu %10.2f\n", name, max, max / MIB); }
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
    size_t n = acts.num_floats;
    activations_free(&acts);
    return n;
}

// One forward and backward of the algorithm on random data; reports the peak RSS
// before (inputs touched) and after.
static void measure_rss(Comm *comm, const char *algorithm, int B, int T, int C, int NH) {
    int cp = comm->size;
    CpSharder sh;
    cp_sharder_init(&sh, cp == 1 ? CP_LAYOUT_IDENTITY : CP_LAYOUT_ROUND_ROBIN, comm->rank, cp, T, -1);
    int *tokens = (int *)callocCheck((size_t)B * T, sizeof(int));
    if (cp_shard_batch(&sh, tokens, tokens, B, T) != CP_OK) { fatal("%s", sh.error); }
    int Tl = sh.layout.local_len;
    size_t nqkv = (size_t)B * Tl * 3 * C, nout = (size_t)B * Tl * C, nlse = (size_t)B * NH * Tl;
    float *qkv = (float *)mallocCheck(nqkv * sizeof(float));
    float *dout = (float *)mallocCheck(nout * sizeof(float));
    float *out = (float *)mallocCheck(nout * sizeof(float));
    float *lse = (float *)mallocCheck(nlse * sizeof(float));
    float *dqkv = (float *)mallocCheck(nqkv * sizeof(float));
    Rng rng;
    rng_seed(&rng, 1 + comm->rank);
    for (size_t i = 0; i < nqkv; i++) { qkv[i] = 2.0f * rng_uniform(&rng) - 1.0f; }
    for (size_t i = 0; i < nout; i++) { dout[i] = 2.0f * rng_uniform(&rng) - 1.0f; }
    // touched, so that they are resident before the measurement starts
    memset(out, 0, nout * sizeof(float));
    memset(lse, 0, nlse * sizeof(float));
    memset(dqkv, 0, nqkv * sizeof(float));
    size_t before = peak_rss_bytes();

    RingAttention ring;
    AllgatherAttention ag;
    AttentionVerbs attn;
    if (strcmp(algorithm, "ring") == 0) {
        ring_attention_init(&ring, comm, B, Tl, C, NH);
        ring.layout = &sh.layout;
        attn = ring_attention_verbs(&ring);
    } else {
        allgather_attention_init(&ag, comm, B, Tl, C, NH);
        ag.layout = &sh.layout;
        attn = allgather_attention_verbs(&ag);
    }
    double start = MPI_Wtime();
    attn.forward(attn.ctx, out, lse, qkv);
    size_t after_forward = peak_rss_bytes();
    attn.backward(attn.ctx, dqkv, dout, qkv, out, lse);
    double seconds = MPI_Wtime() - start;
    size_t after = peak_rss_bytes();
    char name[96];
    snprintf(name, sizeof(name), "%s: peak RSS, inputs touched", algorithm);
    report(comm, name, before);
    snprintf(name, sizeof(name), "%s: peak RSS growth in forward", algorithm);
    report(comm, name, after_forward - before);
    snprintf(name, sizeof(name), "%s: peak RSS growth in forward + backward", algorithm);
    report(comm, name, after - before);
    if (comm->rank == 0) { printf("# %s forward + backward: %.1f s on rank 0\n", algorithm, seconds); }
    if (strcmp(algorithm, "ring") == 0) { ring_attention_free(&ring); } else { allgather_attention_free(&ag); }
    cp_sharder_free(&sh);
    free(tokens); free(qkv); free(dout); free(out); free(lse); free(dqkv);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    int T = 4096;
    const char *algorithm = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0) { T = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-a") == 0) { algorithm = argv[i + 1]; }
        else { fatal("usage: bench_attention_memory [-t T] [-a ring|allgather]"); }
    }
    if (argc % 2 == 0) { fatal("usage: bench_attention_memory [-t T] [-a ring|allgather]"); }
    if (algorithm && strcmp(algorithm, "ring") != 0 && strcmp(algorithm, "allgather") != 0) {
        fatal("-a '%s': ring or allgather", algorithm);
    }
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    Comm *comm = comm_mpi_create(dup);
    int cp = comm->size, B = 1;
    GPT2Config c = gpt2_config_for_depth(12, 1024); // GPT-2 124M: C 768, NH 12, L 12
    int P = cp_padded_len(cp == 1 ? CP_LAYOUT_IDENTITY : CP_LAYOUT_ROUND_ROBIN, T, cp);
    int Tl = P / cp;
    if (comm->rank == 0) {
        printf("# B %d, T %d, cp %d: %d local tokens per rank; C %d, NH %d (GPT-2 124M)\n", B, T, cp, Tl, c.channels,
               c.num_heads);
        printf("%-50s %14s %10s\n", "# per rank", "bytes", "MiB");
    }
    RingAttention ring;
    ring_attention_init(&ring, comm, B, Tl, c.channels, c.num_heads);
    report(comm, "ring attention (init, all layers share it)", ring.bytes);
    ring_attention_free(&ring);
    AllgatherAttention ag;
    allgather_attention_init(&ag, comm, B, Tl, c.channels, c.num_heads);
    report(comm, "allgather attention (init, all layers share)", ag.bytes);
    allgather_attention_free(&ag);
    size_t one = activation_floats(c, 1, B, Tl), two = activation_floats(c, 2, B, Tl);
    report(comm, "activations of one layer", (two - one) * sizeof(float));
    report(comm, "activations of the model (12 layers, logits)", activation_floats(c, c.num_layers, B, Tl) * sizeof(float));
    if (algorithm) { measure_rss(comm, algorithm, B, T, c.channels, c.num_heads); }
    comm->destroy(comm);
    MPI_Finalize();
    return 0;
}
