/*
What a run prints about itself: the start-up table (and a warning when a rank's
OpenMP threads outnumber its cores), llm.c's progress line with the time left,
and the peak memory per rank at the end.
*/
#ifndef TRAIN_PROGRESS_H
#define TRAIN_PROGRESS_H

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "../cp/attention_cost.h"
#include "../cp/comm_mpi.h"
#include "../cp/layout_balance.h"
#include "../cp/mesh.h"
#include "../llmc/gpt2.h"
#include "config.h"
#include "job_comm.h"
#include "memory.h"

typedef struct {
    const char *trainer;   // "cpu" or "cuda"
    const char *transport; // "mpi", "nccl", ...
    const Mesh *mesh;      // the ranks (the Ulysses groups and rings of -ca ulysses | hybrid)
    int world_size, dp_size;
    int padded_T, local_T;
    size_t num_parameters;
    int steps;
    int start_step;        // 0, or the step of the checkpoint resumed from
    int val_batches;
    const MemoryEstimate *memory; // the estimated peak per rank
    int attention_known;          // the two below were computed (the first batch could be sharded)
    CpLayoutBalance balance;      // the layout's on the data's first batch
    AttentionCost sent;           // the attention's messages per rank and layer on that batch
    int sent_is_mean;             // sent is the mean over the ranks (group-cast's depends on the rank)
} StartupFacts;

// "{0,1} {2,3}": the CP ranks of each of `groups` groups of `size`, member(m, g, i)
// the i-th of group g; cut with "..." where it would not fit the table
static void format_rank_groups(char *buf, size_t cap, const Mesh *m, int groups, int size,
                               int (*member)(const Mesh *, int, int)) {
    size_t len = 0;
    buf[0] = '\0';
    for (int g = 0; g < groups; g++) {
        char group[256];
        size_t n = 0;
        for (int i = 0; i < size && n + 16 < sizeof(group); i++) {
            n += snprintf(group + n, sizeof(group) - n, "%s%d", i == 0 ? "{" : ",", member(m, g, i));
        }
        snprintf(group + n, sizeof(group) - n, "}");
        if (len + strlen(group) + 5 > cap) {
            snprintf(buf + len, cap - len, " ...");
            return;
        }
        len += snprintf(buf + len, cap - len, "%s%s", g == 0 ? "" : " ", group);
    }
}

static void print_startup_table(const TrainConfig *cfg, GPT2Config c, const StartupFacts *f) {
    printf("+-----------------------+----------------------------------------------------+\n");
    printf("| %-21s | %-50s |\n", "trainer", f->trainer);
    printf("| %-21s | %-50s |\n", "train data", cfg->train_pattern);
    printf("| %-21s | %-50s |\n", "val data", cfg->val_pattern);
    printf("| %-21s | %-50s |\n", "init", cfg->init);
    printf("| %-21s | %-50s |\n", "output dir", cfg->output_dir ? cfg->output_dir : "(none)");
    char model[128];
    snprintf(model, sizeof(model), "L %d, NH %d, C %d, maxT %d, V %d (Vp %d)", c.num_layers, c.num_heads,
             c.channels, c.max_seq_len, c.vocab_size, c.padded_vocab_size);
    printf("| %-21s | %-50s |\n", "model", model);
    printf("| %-21s | %-50zu |\n", "parameters", f->num_parameters);
    printf("| %-21s | %-50d |\n", "batch B (per replica)", cfg->B);
    printf("| %-21s | %-50d |\n", "sequence length T", cfg->T);
    printf("| %-21s | %-50d |\n", "world", f->world_size);
    printf("| %-21s | %-50d |\n", "cp", cfg->cp_size);
    printf("| %-21s | %-50d |\n", "dp", f->dp_size);
    char layout[128], chunks[32] = "";
    if (cfg->chunk) { snprintf(chunks, sizeof(chunks), " (chunks of %d)", cfg->chunk); }
    snprintf(layout, sizeof(layout), "%s%s%s, attention %s", cfg->layout, chunks,
             cfg->document_masking ? " (document masking)" : "", cfg->attention);
    printf("| %-21s | %-50s |\n", "layout", layout);
    printf("| %-21s | %-50s |\n", "positions", cfg->restart_positions ? "from each document's start (-rp 1)" : "in the row");
    printf("| %-21s | %-50s |\n", "loss", cfg->loss_masks ? "targets the loss masks keep (-lm 1)" : "every target");
    char zero[64];
    snprintf(zero, sizeof(zero), cfg->zero_stage ? "1 (AdamW state sharded over %d ranks)" : "0 (AdamW state whole)",
             f->world_size);
    printf("| %-21s | %-50s |\n", "ZeRO stage (-z)", zero);
    int kind = cp_attention_from_name(cfg->attention);
    if (kind == CP_ATTENTION_ULYSSES || kind == CP_ATTENTION_HYBRID) {
        const Mesh *m = f->mesh;
        char groups[51];
        format_rank_groups(groups, sizeof(groups), m, m->ring_size, m->ulysses_size, mesh_ulysses_member);
        char row[32];
        snprintf(row, sizeof(row), "ulysses groups, U %d", m->ulysses_size);
        printf("| %-21s | %-50s |\n", row, groups);
        format_rank_groups(groups, sizeof(groups), m, m->ulysses_size, m->ring_size, mesh_ring_member);
        snprintf(row, sizeof(row), "rings, R %d", m->ring_size);
        printf("| %-21s | %-50s |\n", row, groups);
    }
    if (f->attention_known) {
        char balance[64], sent[64];
        snprintf(balance, sizeof(balance), "max/mean: area %.3f, tiles of %d %.3f", f->balance.area, CP_SOLVER_TILE,
                 f->balance.tiles);
        printf("| %-21s | %-50s |\n", "balance, first batch", balance);
        snprintf(sent, sizeof(sent), "fwd %zu B, bwd %zu B per rank%s", f->sent.forward_bytes,
                 f->sent.backward_bytes, f->sent_is_mean ? " (mean)" : "");
        printf("| %-21s | %-50s |\n", "attention sent/layer", sent);
    }
    printf("| %-21s | %-50s |\n", "transport", f->transport);
    char padded[128];
    if (strcmp(cfg->layout, "packed") == 0) {
        snprintf(padded, sizeof(padded), "%d to %d (the documents decide)", f->padded_T,
                 f->memory->local_T * cfg->cp_size);
    }
    else { snprintf(padded, sizeof(padded), "%d", f->padded_T); }
    printf("| %-21s | %-50s |\n", "padded T", padded);
    printf("| %-21s | %-50d |\n", "tokens per rank (row)", f->local_T);
    printf("| %-21s | %-50d |\n", "steps", f->steps);
    char start[128];
    if (f->start_step > 0) { snprintf(start, sizeof(start), "%d (resumed from a checkpoint)", f->start_step); }
    else { snprintf(start, sizeof(start), "%d", f->start_step); }
    printf("| %-21s | %-50s |\n", "first step", start);
    printf("| %-21s | %-50g |\n", "learning rate", cfg->learning_rate);
    printf("| %-21s | %-50d |\n", "val batches", f->val_batches);
    const MemoryEstimate *m = f->memory;
    struct { const char *name; size_t bytes; } rows[] = {
        {"est. peak per rank", m->total}, {"  params, grads, m, v", m->parameters + m->gradients + m->adamw},
        {"  activations", m->activations}, {"  classifier", m->classifier}, {"  attention", m->attention},
        {"  data, sampling", m->data}, {"  transport scratch", m->scratch}, {"  runtime (MPI, libs)", m->runtime},
        {"  margin", m->margin}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char value[64];
        format_bytes(value, sizeof(value), rows[i].bytes);
        printf("| %-21s | %-50s |\n", rows[i].name, value);
    }
    printf("+-----------------------+----------------------------------------------------+\n");
}

// Collective. One line from rank 0 when some rank runs more OpenMP threads than the
// cores it may run on: mpirun binds each rank to one core by default, and then
// OMP_NUM_THREADS=2 time-slices two threads on that core. omp_get_num_procs counts
// the CPUs of the process's affinity mask (libgomp, LLVM's libomp). Without OpenMP
// (the GPU trainer) there is nothing to check.
static void warn_if_threads_outnumber_cores(const Mesh *mesh) {
#ifdef _OPENMP
    int mine[2] = {omp_get_max_threads(), omp_get_num_procs()}; // threads, cores
    int *all = (int *)mallocCheck(2 * (size_t)mesh->world_size * sizeof(int));
    job_comm()->all_gather(job_comm(), mine, all, sizeof(mine));
    if (mesh->world_rank != 0) {
        free(all);
        return;
    }
    int over = 0, first = -1;
    for (int r = 0; r < mesh->world_size; r++) {
        if (all[2 * r] > all[2 * r + 1]) { over++; if (first < 0) { first = r; } }
    }
    if (over > 0) {
        printf("warning: %d of %d rank(s) run more OpenMP threads than the cores they are bound to (rank %d: %d threads "
               "on %d core(s)), which is slow: run mpirun with --bind-to none, or set OMP_NUM_THREADS to the cores per rank\n",
               over, mesh->world_size, first, all[2 * first], all[2 * first + 1]);
    }
    free(all);
#else
    (void)mesh;
#endif
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void format_duration(char *buf, size_t size, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) { snprintf(buf, size, "%ldh%02ldm", s / 3600, (s % 3600) / 60); }
    else if (s >= 60) { snprintf(buf, size, "%ldm%02lds", s / 60, s % 60); }
    else { snprintf(buf, size, "%lds", s); }
}

// llm.c's progress line, plus the time left at the mean speed so far. A step
// whose loss masks keep none of its targets (has_target 0) has no loss: its line
// says so where the loss would be, rather than a 0 that reads as one.
static void print_progress(int step, int steps, float loss, int has_target, float grad_norm, float lr,
                           double step_seconds, double tokens_per_step, double mean_step_seconds) {
    char eta[32], loss_text[64];
    format_duration(eta, sizeof(eta), mean_step_seconds * (steps - step - 1));
    if (has_target) { snprintf(loss_text, sizeof(loss_text), "%.6f", loss); }
    else { snprintf(loss_text, sizeof(loss_text), "none (no target: the loss masks keep none)"); }
    printf("step %4d/%d | loss %s | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | eta %s\n",
           step + 1, steps, loss_text, grad_norm, lr, step_seconds * 1000.0, tokens_per_step / step_seconds, eta);
    fflush(stdout);
}

// The peak resident memory of the ranks (getrusage), the largest over the world,
// printed by rank 0: per-rank memory is what context parallelism divides.
static void print_peak_memory(const Mesh *mesh) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    long mine = usage.ru_maxrss; // KiB
    long *kib = (long *)mallocCheck((size_t)mesh->world_size * sizeof(long));
    job_comm()->all_gather(job_comm(), &mine, kib, sizeof(long));
    int most = 0;
    for (int r = 1; r < mesh->world_size; r++) {
        if (kib[r] > kib[most]) { most = r; }
    }
    if (mesh->world_rank == 0) {
        printf("peak resident memory per rank: %.1f MiB (the most of %d rank(s), on rank %d; cp %d)\n",
               kib[most] / 1024.0, mesh->world_size, most, mesh->cp_size);
    }
    free(kib);
}

#endif // TRAIN_PROGRESS_H
