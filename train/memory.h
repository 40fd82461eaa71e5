/*
The memory a rank needs, estimated before anything is allocated, and the check
that the run fits: a run that cannot fit says so at start-up, on every rank,
instead of dying in malloc or cudaMalloc halfway through.

The estimate adds up the same sizes the code allocates with:
    parameters, gradients, AdamW m and v   gpt2_num_parameters (fill_in_parameter_sizes), fp32;
                                           m and v at -z 1: the largest shard (train/zero.h);
                                           and the GPU's copy of the weights in its storage
                                           precision where that is not fp32 (llmc/gpt2.cuh)
    activations, classifier                fill_in_activation_bytes for B x T_local and -r,
                                           in the trainer's storage precision
    attention                              the trainer's cp_attention_bytes (cp/attention.h,
                                           cp/attention.cuh), which its init checks
    data                                   the token window, the shard, the -tl rows, sampling
The classifier's buffer (the logits, ActivationTensors.logits) is shown apart from
the other activations because at GPT-2's vocabulary it can dwarf the layers of a
small model.

Not counted: the runtime's own (MPI, OpenMP, OpenBLAS buffers, the CUDA context and
cuBLAS workspace: tens to hundreds of MiB) and transient transport scratch, so the
estimate is a floor that the measured peak exceeds by a constant, not by a factor
(dev/bench/README.md compares the two).
*/
#ifndef TRAIN_MEMORY_H
#define TRAIN_MEMORY_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../cp/attention_kind.h"
#include "../cp/comm_mpi.h"
#include "../llmc/gpt2.h"
#include "agree.h"
#include "config.h"
#include "zero.h"

// the bytes the trainer's attention holds per rank (cp_attention_bytes and its GPU twin)
typedef size_t (*AttentionBytes)(CpAttentionKind kind, int cp, int U, int B, int T, int C, int NH);

// Where a trainer keeps the model, and how much of that memory is free.
typedef struct {
    const char *name;              // the trainer, for the start-up table
    const char *transport;
    AttentionBytes attention_bytes;
    size_t (*device_token_bytes)(GPT2Config c, int B, int T); // per-pass buffers besides the activations, or NULL
    size_t value_bytes;            // bytes of an activation value: 4 (fp32), 2 (bf16)
    size_t weight_copy_bytes;      // bytes a parameter of the weights' copy in the storage precision, 0: none
    int host;                      // 1: the model runs in host memory (the data buffers share it)
    // memory free to this rank and the ranks that draw on the same memory (*sharers,
    // this one included); `source` says where the number comes from. Returns 0, or
    // -1 when it cannot tell (the run then starts unchecked).
    int (*available)(size_t *bytes, int *sharers, char *source, size_t source_size);
} TrainerMemory;

typedef struct {
    size_t parameters;  // fp32 weights, and their copy in the storage precision where there is one
    size_t gradients;
    size_t adamw;       // first and second moments
    size_t activations; // B x T_local tokens, every layer, without the classifier's part
    size_t classifier;  // the lm head's buffers that grow with the vocabulary
    size_t attention;   // one instance serves every layer
    size_t data;        // token window, shard, per-token losses, sampling
    size_t total;
} MemoryEstimate;

// the bytes of the activations at value_bytes a value, and of the classifier's
// buffer among them (ActivationTensors.logits)
static size_t activation_bytes(GPT2Config c, int B, int T, int recompute, size_t value_bytes, size_t *classifier) {
    size_t bytes[NUM_ACTIVATION_BUFFERS];
    size_t total = fill_in_activation_bytes(bytes, c, B, T, recompute, value_bytes);
    if (classifier) { *classifier = bytes[ACTIVATION_BUFFER(logits)]; }
    return total;
}

// The estimated peak of one rank of a run of B rows of T tokens, local_T of them
// per rank (the padded row / cp), dp replicas (a world of dp x cp ranks).
static MemoryEstimate estimate_rank_memory(const TrainerMemory *tm, const TrainConfig *cfg, GPT2Config c,
                                           int local_T, int dp, CpAttentionKind attention) {
    MemoryEstimate e;
    memset(&e, 0, sizeof(e));
    int B = cfg->B;
    size_t param_bytes = gpt2_num_parameters(c) * sizeof(float);
    e.parameters = param_bytes + gpt2_num_parameters(c) * tm->weight_copy_bytes;
    e.gradients = param_bytes;
    e.adamw = 2 * zero_largest_shard(cfg->zero_stage, gpt2_num_parameters(c), dp * cfg->cp_size) * sizeof(float);
    e.activations = activation_bytes(c, B, local_T, cfg->recompute, tm->value_bytes, &e.classifier) - e.classifier;
    e.attention = tm->attention_bytes(attention, cfg->cp_size, cp_ulysses_degree(cfg), B, local_T, c.channels,
                                      c.num_heads);
    if (tm->device_token_bytes) { e.data += tm->device_token_bytes(c, B, local_T); }
    if (tm->host) {
        size_t BT = (size_t)B * cfg->T, local = (size_t)B * local_T;
        e.data += BT * (sizeof(uint16_t) + 2 * sizeof(int)); // the loader's window, inputs, targets
        e.data += 6 * local * sizeof(int) + 2 * BT * sizeof(int); // the shard, and the sharder's row scratch
        if (cfg->token_loss_path) {
            // the gathered rows of this replica and of all, and the gather's buffers
            e.data += (1 + (size_t)dp) * BT * sizeof(float) + local * cfg->cp_size * (sizeof(int) + sizeof(float));
        }
    }
    if (cfg->sample_every > 0) { // rank 0 samples one unsharded row of -g tokens
        e.data += activation_bytes(c, 1, cfg->gen_tokens, cfg->recompute, tm->value_bytes, NULL) +
                  tm->attention_bytes(CP_ATTENTION_RING, 1, 1, 1, cfg->gen_tokens, c.channels, c.num_heads);
    }
    e.total = e.parameters + e.gradients + e.adamw + e.activations + e.classifier + e.attention + e.data;
    return e;
}

static double mib(size_t bytes) { return bytes / (1024.0 * 1024.0); }

// "1234.5 MiB" or "12.3 GiB"
static void format_bytes(char *buf, size_t size, size_t bytes) {
    if (bytes >= ((size_t)10 << 30)) { snprintf(buf, size, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }
    else { snprintf(buf, size, "%.1f MiB", mib(bytes)); }
}

// Host memory free to this rank: MemAvailable of /proc/meminfo (what the kernel
// can hand out without swapping), else sysconf's free pages; shared by the ranks
// of this node.
static int host_memory_available(size_t *bytes, int *sharers, char *source, size_t source_size) {
    *sharers = mpi_node_size;
    FILE *fp = fopen("/proc/meminfo", "r");
    if (fp != NULL) {
        char line[256];
        unsigned long long kib = 0;
        int found = 0;
        while (!found && fgets(line, sizeof(line), fp)) { found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1; }
        fclose(fp);
        if (found) {
            *bytes = (size_t)kib * 1024;
            snprintf(source, source_size, "host memory (MemAvailable)");
            return 0;
        }
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) { return -1; }
    *bytes = (size_t)pages * (size_t)page;
    snprintf(source, source_size, "host memory (free pages)");
    return 0;
}

// Collective: ends the job on every rank, before anything big is allocated, when
// the ranks that share some memory need more of it than is free.
static void check_memory_fits(const TrainerMemory *tm, const MemoryEstimate *e, const TrainConfig *cfg) {
    size_t available = 0;
    int sharers = 1;
    char source[128];
    char why[1024];
    const char *problem_found = NULL;
    if (tm->available(&available, &sharers, source, sizeof(source)) == 0 &&
        (double)e->total * sharers > (double)available) {
        char need[32], act[32], cls[32], att[32], par[32], have[32];
        format_bytes(need, sizeof(need), e->total);
        format_bytes(act, sizeof(act), e->activations);
        format_bytes(cls, sizeof(cls), e->classifier);
        format_bytes(att, sizeof(att), e->attention);
        format_bytes(par, sizeof(par), e->parameters + e->gradients + e->adamw);
        format_bytes(have, sizeof(have), available);
        snprintf(why, sizeof(why), "the run will not fit: -b %d -t %d at -cp %d needs an estimated %s per rank "
                 "(activations %s, classifier %s, attention %s, parameters with gradients and AdamW %s) x %d "
                 "rank(s) sharing %s, which has %s free: lower -b or -t, or spread a larger -cp over more nodes or GPUs",
                 cfg->B, cfg->T, cfg->cp_size, need, act, cls, att, par, sharers, source, have);
        problem_found = why;
    }
    fail_if_any_rank(problem_found);
}

#endif // TRAIN_MEMORY_H
