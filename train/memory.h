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

#include <glob.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../cp/attention_kind.h"
#include "../cp/comm_mpi.h"
#include "../cp/position_table.h"
#include "../cp/sharder.h"
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
    int splits_position_table;     // 1: holds and trains the position table in row slices over cp (cp/position_table.h)
    // memory free to this rank and the ranks that draw on the same memory (*sharers,
    // this one included); `source` says where the number comes from. Returns 0, or
    // -1 when it cannot tell (the run then starts unchecked).
    int (*available)(size_t *bytes, int *sharers, char *source, size_t source_size);
    // what the process holds besides the run's own buffers (the program, MPI, the
    // libraries' work buffers as the run will fill them, for model c with chunks of
    // chunk_rows tokens in its classifier), where the model lives in its memory;
    // NULL elsewhere
    size_t (*runtime_bytes)(GPT2Config c, int chunk_rows);
} TrainerMemory;

// Whether a run trains the position table in row slices over its CP group: where
// the trainer can, at cp > 1 and -z 0 (-z 1 shards every moment over the world
// already, by ranges of the flat vector that a split table would not fill).
static int position_table_split(const TrainerMemory *tm, const TrainConfig *cfg) {
    return tm->splits_position_table && cfg->cp_size > 1 && cfg->zero_stage == 0;
}

typedef struct {
    size_t parameters;  // fp32 weights, and their copy in the storage precision where there is one
    size_t gradients;
    size_t adamw;       // first and second moments
    size_t activations; // B x T_local tokens, every layer, without the classifier's part
    size_t classifier;  // the lm head's buffers that grow with the vocabulary
    size_t attention;   // one instance serves every layer
    size_t data;        // token window, shard, per-token losses, sampling
    size_t runtime;     // the process besides the run: the program, MPI, the libraries' work buffers
    size_t scratch;     // what the transport holds for a collective (the gradient all-reduce's)
    size_t margin;      // MEMORY_MARGIN_PERCENT of the rest: buffers no size of the code tells
    size_t total;
    int local_T;        // the tokens of a row per rank it holds for (packed: of the data's longest row)
} MemoryEstimate;

// What the estimate adds for the buffers it cannot see (the allocator's, MPI's for a
// ring step's message), and where the runtime is measured at start-up
// (runtime_bytes) for the library pages first touched after that measure: the CPU
// twin's peaks lie 0-1.1% above the bytes counted (dev/bench/README.md; the most,
// the one-rank sampling run), so the estimate stays above them with room
#define MEMORY_MARGIN_PERCENT 2
#define RUNTIME_GROWTH_PERCENT 1

// the bytes of the activations at value_bytes a value, and of the classifier's
// buffer among them (ActivationTensors.logits)
static size_t activation_bytes(GPT2Config c, int B, int T, int recompute, size_t value_bytes, size_t *classifier) {
    size_t bytes[NUM_ACTIVATION_BUFFERS];
    size_t total = fill_in_activation_bytes(bytes, c, B, T, recompute, value_bytes);
    if (classifier) { *classifier = bytes[ACTIVATION_BUFFER(logits)]; }
    return total;
}

// After the allocations: the activations of B rows of T tokens took `allocated`
// bytes and the weights' copy `weight_copy_bytes` a parameter, what the start-up
// estimate counted (the same table, fill_in_activation_bytes), so that the check
// that the run fits checked what was allocated. Both trainers call it after
// their activations are allocated.
static void check_memory_counted(const TrainerMemory *tm, GPT2Config c, int B, int T, int recompute, size_t allocated,
                                 size_t weight_copy_bytes) {
    size_t counted = activation_bytes(c, B, T, recompute, tm->value_bytes, NULL);
    if (allocated != counted || tm->weight_copy_bytes != weight_copy_bytes) {
        fatal("the activations took %zu bytes, the memory estimate counts %zu (and %zu bytes a weight of the "
              "weights' copy for %zu): the estimate and the allocation have drifted apart",
              allocated, counted, tm->weight_copy_bytes, weight_copy_bytes);
    }
}

// The estimated peak of one rank of a run of B rows of T tokens, local_T of them
// per rank (the padded row / cp), dp replicas (a world of dp x cp ranks).
static MemoryEstimate estimate_rank_memory(const TrainerMemory *tm, const TrainConfig *cfg, GPT2Config c,
                                           int local_T, int dp, CpAttentionKind attention) {
    MemoryEstimate e;
    memset(&e, 0, sizeof(e));
    e.local_T = local_T;
    int B = cfg->B;
    // the trained vector (llmc/gpt2.h): a split table's weights, gradient and
    // moments hold the largest slice's rows
    size_t table = (size_t)c.max_seq_len * c.channels;
    int split = position_table_split(tm, cfg);
    int rows = split ? position_slice_room(c.max_seq_len, cfg->cp_size) : c.max_seq_len;
    size_t trained = gpt2_num_trained(c, (size_t)rows);
    e.parameters = trained * (sizeof(float) + tm->weight_copy_bytes);
    e.gradients = trained * sizeof(float);
    e.adamw = 2 * zero_largest_shard(cfg->zero_stage, trained, dp * cfg->cp_size) * sizeof(float);
    e.activations = activation_bytes(c, B, local_T, cfg->recompute, tm->value_bytes, &e.classifier) - e.classifier;
    e.attention = tm->attention_bytes(attention, cfg->cp_size, cp_ulysses_degree(cfg), B, local_T, c.channels,
                                      c.num_heads);
    if (tm->device_token_bytes) { e.data += tm->device_token_bytes(c, B, local_T); }
    if (tm->host) {
        size_t BT = (size_t)B * cfg->T, local = (size_t)B * local_T;
        // the loader's window, inputs, targets and loss mask
        e.data += BT * (sizeof(uint16_t) + 2 * sizeof(int) + (cfg->loss_masks ? 1 : 0));
        // the shard, and the sharder's row scratch (documents, their starts, slots)
        e.data += 6 * local * sizeof(int) + 3 * BT * sizeof(int);
        if (cfg->token_loss_path) {
            // the gathered rows of this replica and of all, and the gather's buffers
            e.data += (1 + (size_t)dp) * BT * sizeof(float) + local * cfg->cp_size * (sizeof(int) + sizeof(float));
        }
    }
    if (cfg->sample_every > 0) { // rank 0 samples one unsharded row of -g tokens
        size_t logits;
        e.data += activation_bytes(c, 1, cfg->gen_tokens, cfg->recompute, tm->value_bytes, &logits) +
                  tm->attention_bytes(CP_ATTENTION_RING, 1, 1, 1, cfg->gen_tokens, c.channels, c.num_heads);
        // in host memory only the pages written count: a sample writes one token's logits
        if (tm->host) { e.data -= logits - (size_t)c.padded_vocab_size * tm->value_bytes; }
        // a split table's rows of the sample's positions, gathered on every rank
        // (on the GPU also on the device, fp32 and the floatX copy)
        if (split) {
            size_t rows = (size_t)cfg->gen_tokens * c.channels;
            e.data += tm->host ? rows * sizeof(float) : rows * (sizeof(float) + tm->weight_copy_bytes);
        }
    }
    // the largest of the gradient's all-reduces (cp/position_table.h): the token
    // embedding, the table's trained rows, or the parameters after the table
    size_t wte = (size_t)c.padded_vocab_size * c.channels, after = gpt2_num_parameters(c) - wte - table;
    size_t largest = wte > after ? wte : after;
    if (trained - wte - after > largest) { largest = trained - wte - after; }
    if (tm->host && dp * cfg->cp_size > 1) { e.scratch = comm_mpi_all_reduce_scratch(largest * sizeof(float)); }
    // a split table's exchange (cp/position_table.h)
    if (split) {
        e.data += tm->host ? position_table_host_bytes(B * local_T) : position_table_device_bytes(B * local_T);
    }
    if (tm->runtime_bytes) {
        e.runtime = tm->runtime_bytes(c, classifier_chunk_rows(c.padded_vocab_size, (size_t)B * local_T));
    }
    size_t counted = e.parameters + e.gradients + e.adamw + e.activations + e.classifier + e.attention + e.data +
                     e.scratch + e.runtime;
    e.margin = counted / 100 * (MEMORY_MARGIN_PERCENT + (tm->runtime_bytes ? RUNTIME_GROWTH_PERCENT : 0));
    e.total = counted + e.margin;
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

// The longest padded row of the packed layout over a file of tokens: rows are the
// T-token windows at multiples of T (a batch's rows start there, in order or
// shuffled: dataloader.h), each padded as the sharder pads it (cp_packed_row_len).
// A file that cannot be read is passed over (its reader reports it). row: (T).
static int packed_longest_row_in_file(const char *path, int T, int cp, int eot, int *row, int *docs) {
    char why[256];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { return 0; }
    int header[256], longest = 0;
    uint16_t *tokens = (uint16_t *)mallocCheck((size_t)T * sizeof(uint16_t));
    if (fread(header, sizeof(int), 256, fp) == 256) {
        while (fread(tokens, sizeof(uint16_t), (size_t)T, fp) == (size_t)T) {
            for (int t = 0; t < T; t++) { row[t] = tokens[t]; }
            cp_row_documents(row, T, eot, docs);
            int len = cp_packed_row_len(docs, T, cp);
            if (len > longest) { longest = len; }
            note_progress();
        }
    }
    free(tokens);
    fclose(fp);
    return longest;
}

// The same over the rows of an eval file (-h 1, llm.c's format: eval_loader.h): a
// context and one of its completions, then token 0.
static int packed_longest_row_in_eval(const char *path, int T, int cp, int eot, int *row, int *docs) {
    char why[256];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { return 0; }
    long size = file_size_of(fp, path);
    size_t n = size > 1024 ? (size_t)(size - 1024) / 2 : 0;
    uint16_t *s = (uint16_t *)mallocCheck(n * sizeof(uint16_t) + 1);
    int longest = 0;
    if (fseek(fp, 1024, SEEK_SET) == 0 && fread(s, sizeof(uint16_t), n, fp) == n) {
        // an example: 65535, bytes, index, label, completions, context length, context,
        // then per completion its length and tokens (read as far as it is there)
        for (size_t at = 0; at + 6 <= n && s[at] == 65535 && s[at + 1] >= 12 && at + s[at + 1] / 2 <= n;) {
            size_t end = at + s[at + 1] / 2, c = at + 6 + s[at + 5];
            for (int k = 0; k < s[at + 4] && c < end && c + 1 + s[c] <= end; k++, c += 1 + s[c]) {
                int context = s[at + 5], length = s[c];
                if (context + length > T) { break; }
                for (int t = 0; t < T; t++) { row[t] = 0; }
                for (int t = 0; t < context; t++) { row[t] = s[at + 6 + t]; }
                for (int t = 0; t < length; t++) { row[context + t] = s[c + 1 + t]; }
                cp_row_documents(row, T, eot, docs);
                int len = cp_packed_row_len(docs, T, cp);
                if (len > longest) { longest = len; }
            }
            at = end;
        }
    }
    free(s);
    fclose(fp);
    return longest;
}

// -cl packed: the longest padded row the run can meet, so that the estimate holds
// for the most a rank can hold (1/cp of it). Each document (an EOT opens one under
// -dm 1 or -rp 1) is padded to a multiple of 2 cp, so a row can grow to about twice T with
// documents of 2 cp tokens or more and to 2 cp x T with shorter ones: the data
// decides, and this reads it (every file of -i and -j, and the eval file of -h 1).
// At least the row as the other layouts pad it.
static int packed_longest_row(const TrainConfig *cfg) {
    int T = cfg->T, cp = cfg->cp_size, eot = run_documents(cfg).token;
    int longest = cp_padded_len(CP_LAYOUT_PACKED, T, cp);
    int *row = (int *)mallocCheck((size_t)T * sizeof(int)), *docs = (int *)mallocCheck((size_t)T * sizeof(int));
    const char *patterns[2] = {cfg->train_pattern, cfg->val_pattern};
    for (int p = 0; p < 2; p++) {
        glob_t files;
        if (glob(patterns[p], 0, NULL, &files) != 0) { continue; }
        for (size_t i = 0; i < files.gl_pathc; i++) {
            int len = packed_longest_row_in_file(files.gl_pathv[i], T, cp, eot, row, docs);
            if (len > longest) { longest = len; }
        }
        globfree(&files);
    }
    if (cfg->hellaswag) {
        int len = packed_longest_row_in_eval(cfg->hellaswag_path, T, cp, eot, row, docs);
        if (len > longest) { longest = len; }
    }
    free(row);
    free(docs);
    return longest;
}

// The resident memory of this process now (/proc/self/statm), 0 when it cannot tell.
static size_t process_resident_bytes(void) {
    FILE *fp = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    int ok = fp != NULL && fscanf(fp, "%llu %llu", &size, &resident) == 2;
    if (fp) { fclose(fp); }
    long page = sysconf(_SC_PAGESIZE);
    return ok && page > 0 ? (size_t)resident * (size_t)page : 0;
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
