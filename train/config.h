/*
The command line of both trainers: TrainConfig (one field per flag), the flag
table, usage, parsing, and the checks of every value that needs no file (then,
once the model is known, the checks of the run's sizes against it). Both
trainers take the same flags with the same meaning: llm.c's plus the
context-parallel ones.

One file over 500 lines because the flag table, its usage text, its parsing and
its checks are one list read together: a flag added touches all four, here.
*/
#ifndef TRAIN_CONFIG_H
#define TRAIN_CONFIG_H

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../cp/attention_kind.h"
#include "../cp/layout.h"
#include "../cp/sharder.h"
#include "../llmc/gpt2_init.h"
#include "checkpoint_files.h"
#include "../llmc/schedulers.h"
#include "../llmc/utils.h"

typedef struct {
    const char *train_pattern;  // -i
    const char *val_pattern;    // -j
    const char *init;           // -e
    const char *output_dir;     // -o
    const char *tokenizer_path; // -tk (llm.c reads gpt2_tokenizer.bin; its -k is the schedule)
    int B;                      // -b
    int T;                      // -t
    int total_batch_size;       // -d, tokens per optimizer step (-1: dp * B * T)
    int max_seq_len;            // -mt
    int steps;                  // -x
    const char *lr_schedule;    // -k
    float learning_rate;        // -l
    int warmup;                 // -u
    float final_lr_fraction;    // -q
    float weight_decay;         // -c
    float skip_loss_z;          // -sl
    float skip_grad_z;          // -sg
    int val_every;              // -v
    int val_batches;            // -m
    int checkpoint_every;       // -n (0: never)
    int checkpoints_keep;       // -nk
    int major_checkpoint_every; // -nm
    int resume;                 // -y
    int resume_other_data;      // -yd
    int sample_every;           // -s
    int gen_tokens;             // -g
    int hellaswag;              // -h
    const char *hellaswag_path; // -hf
    int overfit_single_batch;   // -a
    int shuffle;                // -sh
    int tf32;                   // -f
    int master_weights;         // -w
    int gelu_fusion;            // -ge
    int zero_stage;             // -z
    int recompute;              // -r
    int log_gpu_every;          // -lg
    int num_processes;          // -pn (0: mpirun's world)
    int process_rank;           // -pr (-1: mpirun's rank)
    int gpus_per_node;          // -pg (0: as many as found)
    const char *init_method;    // -pi, -pm
    const char *server_ip;      // -ps
    const char *fs_path;        // -pf, -pp
    int cp_size;                // -cp
    const char *layout;         // -cl
    int chunk;                  // -cc (-cl solver; 0: not given)
    int document_masking;       // -dm
    int restart_positions;      // -rp
    int loss_masks;             // -lm
    const char *attention;      // -ca
    int ulysses_degree;         // -cu (0: not given)
    int stages;                 // -co (-ca groupcast; 0: not given)
    const char *token_loss_path; // -tl
    const char *transport;      // -ct
} TrainConfig;

typedef enum { FLAG_INT, FLAG_FLOAT, FLAG_STRING } FlagType;

typedef struct {
    const char *name;
    FlagType type;
    void *value;
    const char *help;
} Flag;

#define MAX_FLAGS 64 // at least the flags of train_flags

// The flags of a trainer, each pointing at its field of cfg. `transports` lists
// the -ct values of the trainer, NULL where it has no choice of transport.
static int train_flags(TrainConfig *cfg, Flag *flags, const char *transports) {
    Flag all[] = {
        {"-i", FLAG_STRING, &cfg->train_pattern, "train token files (glob)"},
        {"-j", FLAG_STRING, &cfg->val_pattern, "validation token files (glob)"},
        {"-e", FLAG_STRING, &cfg->init, "init: llm.c checkpoint file, or llm.c's random init of dN | gpt2:dN | gpt3:cN"},
        {"-o", FLAG_STRING, &cfg->output_dir, "output dir for main.log and checkpoints (none: nothing written)"},
        {"-tk", FLAG_STRING, &cfg->tokenizer_path, "tokenizer file used to print samples"},
        {"-b", FLAG_INT, &cfg->B, "batch size (sequences) per data-parallel replica"},
        {"-t", FLAG_INT, &cfg->T, "sequence length"},
        {"-d", FLAG_INT, &cfg->total_batch_size, "total batch in tokens per step: gradient accumulation (-1: dp*B*T)"},
        {"-mt", FLAG_INT, &cfg->max_seq_len, "position-table rows (maxT) of a random init -e dN (0: -t, at least 1024)"},
        {"-x", FLAG_INT, &cfg->steps, "training steps (-1: one pass over the train files)"},
        {"-k", FLAG_STRING, &cfg->lr_schedule, "learning-rate schedule: cosine | linear | constant | wsd"},
        {"-l", FLAG_FLOAT, &cfg->learning_rate, "peak learning rate"},
        {"-u", FLAG_INT, &cfg->warmup, "learning-rate warmup steps"},
        {"-q", FLAG_FLOAT, &cfg->final_lr_fraction, "final learning rate as a fraction of the peak"},
        {"-c", FLAG_FLOAT, &cfg->weight_decay, "weight decay (2-D tensors)"},
        {"-sl", FLAG_FLOAT, &cfg->skip_loss_z, "skip the update when the loss z-score exceeds this (0: off)"},
        {"-sg", FLAG_FLOAT, &cfg->skip_grad_z, "skip the update when the grad-norm z-score exceeds this (0: off)"},
        {"-v", FLAG_INT, &cfg->val_every, "validation loss every N steps (0: never)"},
        {"-m", FLAG_INT, &cfg->val_batches, "validation batches (-1: the whole validation data)"},
        {"-n", FLAG_INT, &cfg->checkpoint_every, "checkpoint every N steps and at the end (0: never)"},
        {"-nk", FLAG_INT, &cfg->checkpoints_keep, "keep the last N checkpoints, deleting older ones (0: keep all)"},
        {"-nm", FLAG_INT, &cfg->major_checkpoint_every, "checkpoints of steps that are multiples of M are never deleted"},
        {"-y", FLAG_INT, &cfg->resume, "resume from the latest checkpoint in -o (0/1)"},
        {"-yd", FLAG_INT, &cfg->resume_other_data, "-y 1 with other -i data than the checkpoint's: read it from its start (0/1)"},
        {"-s", FLAG_INT, &cfg->sample_every, "sample every N steps (0: never)"},
        {"-g", FLAG_INT, &cfg->gen_tokens, "tokens to generate per sample"},
        {"-h", FLAG_INT, &cfg->hellaswag, "HellaSwag eval with validation (0/1; -h alone or --help: this help)"},
        {"-hf", FLAG_STRING, &cfg->hellaswag_path, "the eval file of -h 1 (llm.c's format)"},
        {"-a", FLAG_INT, &cfg->overfit_single_batch, "overfit one batch, the first of -j (0/1)"},
        {"-sh", FLAG_INT, &cfg->shuffle, "train data shuffled as llm.c shuffles it (0: in order; -a 1: in order)"},
        {"-f", FLAG_INT, &cfg->tf32, "TF32 matmuls on the GPU (0/1)"},
        {"-w", FLAG_INT, &cfg->master_weights, "fp32 master weights (0/1; they are always kept here)"},
        {"-ge", FLAG_INT, &cfg->gelu_fusion, "GELU fusion: >= 1 the fc matmul's epilogue applies GELU (GPU), 0 a kernel of its own; same math (-1: 1)"},
        {"-z", FLAG_INT, &cfg->zero_stage, "ZeRO stage: 0 | 1 (AdamW state sharded over all ranks; results as 0)"},
        {"-r", FLAG_INT, &cfg->recompute, "recompute in the backward pass: 0 nothing, 1 GELU, 2 GELU + layernorms"},
        {"-lg", FLAG_INT, &cfg->log_gpu_every, "llm.c's GPU info every N steps (-1: off); not read here, noted"},
        {"-pn", FLAG_INT, &cfg->num_processes, "number of processes: must be mpirun's (0: mpirun's)"},
        {"-pr", FLAG_INT, &cfg->process_rank, "this process's rank: must be mpirun's (-1: mpirun's)"},
        {"-pg", FLAG_INT, &cfg->gpus_per_node, "GPUs per node: at least the ranks of a node (0: not given)"},
        {"-pi", FLAG_STRING, &cfg->init_method, "start-up: mpi (tcp and fs are llm.c's own; use mpirun)"},
        {"-pm", FLAG_STRING, &cfg->init_method, "the same as -pi (the name llm.c's usage prints)"},
        {"-ps", FLAG_STRING, &cfg->server_ip, "llm.c's -pi tcp server address (unused under mpi, as in llm.c)"},
        {"-pf", FLAG_STRING, &cfg->fs_path, "llm.c's -pi fs directory (unused under mpi, as in llm.c)"},
        {"-pp", FLAG_STRING, &cfg->fs_path, "the same as -pf (the name llm.c's usage prints)"},
        {"-cp", FLAG_INT, &cfg->cp_size, "context-parallel size (dp = world / cp)"},
        {"-cl", FLAG_STRING, &cfg->layout, "CP layout: identity | contiguous | round_robin | striped | packed (needs -dm 1) | solver"},
        {"-cc", FLAG_INT, &cfg->chunk, "-cl solver: chunk size in tokens, a multiple of the 64-row tiles (default 64)"},
        {"-dm", FLAG_INT, &cfg->document_masking, "document masking: tokens attend within their document, EOT opens one (0/1)"},
        {"-rp", FLAG_INT, &cfg->restart_positions, "position ids restart at 0 at each document, EOT opens one (0/1)"},
        {"-lm", FLAG_INT, &cfg->loss_masks, "loss masks: NAME.mask beside each token file NAME.bin of -i, -j (0/1)"},
        {"-ca", FLAG_STRING, &cfg->attention, "CP attention algorithm: ring | allgather | ulysses | hybrid (needs -cu) | groupcast"},
        {"-cu", FLAG_INT, &cfg->ulysses_degree, "-ca hybrid: Ulysses degree U, cp = U x R (all-to-all in U, ring over R)"},
        {"-co", FLAG_INT, &cfg->stages, "-ca groupcast: stages S of its K/V exchange, 1..cp-1, each overlapping the last one's attention (default 1)"},
        {"-tl", FLAG_STRING, &cfg->token_loss_path, "write per-token losses (float32 [steps][micro-batches*dp*B][T], global order)"},
        {"-ct", FLAG_STRING, &cfg->transport, transports},
    };
    int n = (int)(sizeof(all) / sizeof(all[0]));
    if (transports == NULL) { n--; } // -ct is last
    for (int i = 0; i < n; i++) { flags[i] = all[i]; }
    return n;
}

// the embedded data and the tokenizer, as paths from the repository root
#define DEFAULT_TRAIN_DATA "dev/data/austen/austen_train.bin"
#define DEFAULT_VAL_DATA "dev/data/austen/austen_val.bin"
#define DEFAULT_TOKENIZER "dev/data/gpt2_tokenizer.bin"

static void train_config_defaults(TrainConfig *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->train_pattern = DEFAULT_TRAIN_DATA;
    cfg->val_pattern = DEFAULT_VAL_DATA;
    cfg->init = "d6";
    cfg->output_dir = NULL;
    cfg->tokenizer_path = DEFAULT_TOKENIZER;
    cfg->B = 4;
    cfg->T = 1024;
    cfg->total_batch_size = -1;
    cfg->max_seq_len = 0;
    cfg->steps = -1;
    cfg->lr_schedule = "cosine";
    cfg->learning_rate = 3e-4f;
    cfg->warmup = 0;
    cfg->final_lr_fraction = 1.0f;
    cfg->weight_decay = 0.0f;
    cfg->skip_loss_z = 0.0f;
    cfg->skip_grad_z = 0.0f;
    cfg->val_every = 20;
    cfg->val_batches = 20;
    cfg->checkpoint_every = 0;
    cfg->checkpoints_keep = 0;
    cfg->major_checkpoint_every = 0;
    cfg->resume = 0;
    cfg->sample_every = 20;
    cfg->gen_tokens = 64;
    cfg->hellaswag = 0;
    cfg->hellaswag_path = "dev/data/hellaswag/hellaswag_val.bin"; // where llm.c's dev/data/hellaswag.py writes it
    cfg->overfit_single_batch = 0;
    cfg->shuffle = 1;
    cfg->tf32 = 1;
    cfg->master_weights = 1;
    cfg->gelu_fusion = 1;
    cfg->zero_stage = 0;
    cfg->recompute = 1;
    cfg->log_gpu_every = -1;
    cfg->num_processes = 0;
    cfg->process_rank = -1;
    cfg->gpus_per_node = 0;
    cfg->init_method = "mpi";
    cfg->server_ip = "";
    cfg->fs_path = "";
    cfg->cp_size = 1;
    cfg->layout = NULL; // identity at cp 1, round_robin above
    cfg->chunk = 0; // CP_SOLVER_DEFAULT_CHUNK with -cl solver
    cfg->document_masking = 0;
    cfg->restart_positions = 0;
    cfg->loss_masks = 0;
    cfg->attention = "ring";
    cfg->stages = 0; // 1 with -ca groupcast
    cfg->token_loss_path = NULL;
    cfg->transport = "nccl";
}

// a flag's value as text; float_digits: significant digits of a float
static void format_flag_value(const Flag *flag, int float_digits, char *buf, size_t size) {
    switch (flag->type) {
    case FLAG_INT: snprintf(buf, size, "%d", *(int *)flag->value); break;
    case FLAG_FLOAT: snprintf(buf, size, "%.*g", float_digits, *(float *)flag->value); break;
    case FLAG_STRING: {
        const char *s = *(const char **)flag->value;
        snprintf(buf, size, "%s", s ? s : "none");
        break;
    }
    }
}

static void print_usage(FILE *out, const char *program, const char *transports) {
    // the defaults are what the flags point at before parsing
    TrainConfig defaults;
    train_config_defaults(&defaults);
    Flag flags[MAX_FLAGS];
    int nflags = train_flags(&defaults, flags, transports);
    fprintf(out, "usage: %s [flags]\n", program);
    for (int i = 0; i < nflags; i++) {
        char value[64];
        format_flag_value(&flags[i], 6, value, sizeof(value));
        fprintf(out, "  %-4s %-82s [%s]\n", flags[i].name, flags[i].help, value);
    }
    fprintf(out, "-cl defaults to identity at -cp 1 and round_robin above. Run with mpirun -np N for N ranks.\n");
}

static int parse_int_value(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < -2147483647L || v > 2147483647L) { return 0; }
    *out = (int)v;
    return 1;
}

// A number of float's range. One too small for a float (1e-50) is a number all
// the same: strtof's underflow (ERANGE with a result of 0 or a denormal) keeps
// that result; one too large (1e50) is not accepted.
static int parse_float_value(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    int underflow = errno == ERANGE && fabsf(v) <= FLT_MIN;
    if ((errno != 0 && !underflow) || end == s || *end != '\0' || !isfinite(v)) { return 0; }
    *out = v;
    return 1;
}

// Is the help asked for? --help, or -h without a number after it: `-h 1` is
// llm.c's HellaSwag switch, `-h` alone (last, or before another flag) the help.
static int help_asked(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        int number;
        if (strcmp(argv[i], "--help") == 0) { return 1; }
        if (strcmp(argv[i], "-h") == 0 && (i + 1 >= argc || !parse_int_value(argv[i + 1], &number))) { return 1; }
    }
    return 0;
}

// Parses the command line into cfg (which holds the defaults). Returns 1 when the
// help was asked for; ends the job with the usage and one error line on a bad flag.
static int parse_train_args(int argc, char **argv, TrainConfig *cfg, const char *transports) {
    Flag flags[MAX_FLAGS];
    int nflags = train_flags(cfg, flags, transports);
    if (help_asked(argc, argv)) { return 1; }
    for (int i = 1; i < argc; i += 2) {
        const Flag *flag = NULL;
        for (int f = 0; f < nflags; f++) {
            if (strcmp(argv[i], flags[f].name) == 0) { flag = &flags[f]; }
        }
        if (flag == NULL) {
            if (fatal_rank == 0) { print_usage(stderr, argv[0], transports); }
            fatal_everywhere("unknown flag '%s'", argv[i]);
        }
        if (i + 1 >= argc) {
            if (fatal_rank == 0) { print_usage(stderr, argv[0], transports); }
            fatal_everywhere("flag %s needs a value", argv[i]);
        }
        const char *value = argv[i + 1];
        int ok = 1;
        switch (flag->type) {
        case FLAG_INT: ok = parse_int_value(value, (int *)flag->value); break;
        case FLAG_FLOAT: ok = parse_float_value(value, (float *)flag->value); break;
        case FLAG_STRING: *(const char **)flag->value = value; break;
        }
        if (!ok) {
            fatal_everywhere("flag %s expects %s, got '%s'", flag->name,
                             flag->type == FLAG_INT ? "an integer (within 32 bits)" : "a number within float's range",
                             value);
        }
    }
    return 0;
}

// Whether -e names a checkpoint file (not one of llm.c's model descriptors).
static int init_is_checkpoint_file(const char *init) {
    GPT2Config c;
    char why[256];
    return gpt2_config_from_descriptor(init, &c, why, sizeof(why)) == 0;
}

// Checks every value that needs no file to be checked; resolves the layout.
static CpLayoutKind validate_train_config(TrainConfig *cfg) {
    if (cfg->B < 1) { fatal_everywhere("-b %d: the batch size must be at least 1", cfg->B); }
    if (cfg->T < 1) { fatal_everywhere("-t %d: the sequence length must be at least 1", cfg->T); }
    if ((long long)cfg->B * cfg->T > INT32_MAX) {
        fatal_everywhere("-b %d x -t %d = %lld tokens per step and replica, more than the 2^31 - 1 this trainer "
                         "counts in int", cfg->B, cfg->T, (long long)cfg->B * cfg->T);
    }
    if (strlen(cfg->init) >= STATE_TEXT_BYTES) {
        fatal_everywhere("-e: %zu bytes, longer than the %d a checkpoint records (a path holds at most %d)",
                         strlen(cfg->init), STATE_TEXT_BYTES - 1, PATH_MAX - 1);
    }
    if (cfg->max_seq_len < 0) { fatal_everywhere("-mt %d: the position table cannot have negative rows", cfg->max_seq_len); }
    if (cfg->max_seq_len > 0 && cfg->max_seq_len < cfg->T) {
        fatal_everywhere("-mt %d is shorter than -t %d: the position table needs a row for every position of a "
                         "sequence (-mt 0 sizes it to -t)", cfg->max_seq_len, cfg->T);
    }
    if (cfg->max_seq_len > 0 && init_is_checkpoint_file(cfg->init)) {
        fatal_everywhere("-mt %d sets the position table of a random init (-e dN); the checkpoint -e '%s' brings "
                         "its own", cfg->max_seq_len, cfg->init);
    }
    if (cfg->steps < -1) { fatal_everywhere("-x %d: steps must be -1 (one epoch) or more", cfg->steps); }
    if (cfg->learning_rate < 0.0f) { fatal_everywhere("-l %g: the learning rate must not be negative", cfg->learning_rate); }
    if (lr_schedule_from_name(cfg->lr_schedule) < 0) {
        fatal_everywhere("-k '%s': unknown learning-rate schedule (cosine | linear | constant | wsd)", cfg->lr_schedule);
    }
    if (cfg->warmup < 0) { fatal_everywhere("-u %d: warmup steps must not be negative", cfg->warmup); }
    if (cfg->final_lr_fraction < 0.0f || cfg->final_lr_fraction > 1.0f) {
        fatal_everywhere("-q %g: the final learning-rate fraction must lie in [0, 1]", cfg->final_lr_fraction);
    }
    if (cfg->weight_decay < 0.0f) { fatal_everywhere("-c %g: weight decay must not be negative", cfg->weight_decay); }
    if (cfg->val_every < 0) { fatal_everywhere("-v %d must not be negative", cfg->val_every); }
    if (cfg->val_batches < 1 && cfg->val_batches != -1) {
        fatal_everywhere("-m %d: validation needs at least one batch (-1: all of them)", cfg->val_batches);
    }
    if (cfg->checkpoint_every < 0) { fatal_everywhere("-n %d must not be negative", cfg->checkpoint_every); }
    if (cfg->checkpoints_keep < 0) { fatal_everywhere("-nk %d must not be negative", cfg->checkpoints_keep); }
    if (cfg->major_checkpoint_every < 0) {
        fatal_everywhere("-nm %d must not be negative", cfg->major_checkpoint_every);
    }
    if (cfg->total_batch_size == 0 || cfg->total_batch_size < -1) {
        fatal_everywhere("-d %d: the total batch is a number of tokens (or -1: dp x B x T)", cfg->total_batch_size);
    }
    if (!(cfg->skip_loss_z >= 0.0f) || !(cfg->skip_grad_z >= 0.0f)) {
        fatal_everywhere("-sl %g / -sg %g: a z-score threshold is positive (0: off)", cfg->skip_loss_z, cfg->skip_grad_z);
    }
    if (cfg->hellaswag != 0 && cfg->hellaswag != 1) { fatal_everywhere("-h %d: HellaSwag is 0 or 1", cfg->hellaswag); }
    if (cfg->overfit_single_batch != 0 && cfg->overfit_single_batch != 1) {
        fatal_everywhere("-a %d: overfitting one batch is 0 or 1", cfg->overfit_single_batch);
    }
    if (cfg->shuffle != 0 && cfg->shuffle != 1) { fatal_everywhere("-sh %d: shuffling is 0 or 1", cfg->shuffle); }
    if (cfg->master_weights != 0 && cfg->master_weights != 1) {
        fatal_everywhere("-w %d: master weights are 0 or 1", cfg->master_weights);
    }
    if (cfg->gelu_fusion < -1 || cfg->gelu_fusion > 2) { fatal_everywhere("-ge %d: llm.c's GELU fusion is -1, 0, 1 or 2", cfg->gelu_fusion); }
    if (cfg->zero_stage < 0 || cfg->zero_stage > 3) { fatal_everywhere("-z %d: llm.c's ZeRO stages are 0 to 3", cfg->zero_stage); }
    if (cfg->zero_stage > 1) {
        fatal_everywhere("-z %d: ZeRO stage %d (sharded gradients%s) is not implemented here: -z 1 "
                         "shards the AdamW state over all ranks, -z 0 keeps it whole", cfg->zero_stage,
                         cfg->zero_stage, cfg->zero_stage == 3 ? " and parameters" : "");
    }
    if (strcmp(cfg->init_method, "mpi") != 0) {
        fatal_everywhere("-pi %s: this trainer's ranks start under mpirun (-pi mpi); llm.c's tcp and fs start-up, "
                         "one process per node told its -pr and -pn, is not here: run mpirun -np N instead",
                         cfg->init_method);
    }
    // the defaults name the data from the repository root: from elsewhere they name nothing
    int reads_val = cfg->val_every > 0 || cfg->overfit_single_batch;
    const char *missing = !cfg->overfit_single_batch && strcmp(cfg->train_pattern, DEFAULT_TRAIN_DATA) == 0 &&
                                  access(DEFAULT_TRAIN_DATA, F_OK) != 0 ? DEFAULT_TRAIN_DATA
                          : reads_val && strcmp(cfg->val_pattern, DEFAULT_VAL_DATA) == 0 &&
                                  access(DEFAULT_VAL_DATA, F_OK) != 0 ? DEFAULT_VAL_DATA : NULL;
    if (missing) {
        fatal_everywhere("the default data '%s' is not there from this directory: run from the repository root, "
                         "or pass -i/-j/-tk", missing);
    }
    if (cfg->resume != 0 && cfg->resume != 1) { fatal_everywhere("-y %d: resume is 0 or 1", cfg->resume); }
    if (cfg->resume && cfg->output_dir == NULL) { fatal_everywhere("-y 1 needs -o, the directory to resume from"); }
    if (cfg->resume_other_data != 0 && cfg->resume_other_data != 1) {
        fatal_everywhere("-yd %d: resuming on other data is 0 or 1", cfg->resume_other_data);
    }
    if (cfg->resume_other_data && !cfg->resume) { fatal_everywhere("-yd 1 changes the data of a resumed run: it needs -y 1"); }
    if (cfg->sample_every < 0) { fatal_everywhere("-s %d must not be negative", cfg->sample_every); }
    if (cfg->gen_tokens < 1) { fatal_everywhere("-g %d: generate at least one token", cfg->gen_tokens); }
    if (cfg->tf32 != 0 && cfg->tf32 != 1) { fatal_everywhere("-f %d: TF32 is 0 or 1", cfg->tf32); }
    if (cfg->recompute < 0 || cfg->recompute > RECOMPUTE_MAX) {
        fatal_everywhere("-r %d: recompute is 0 (keep every activation), 1 (recompute GELU) or 2 (GELU and "
                         "the layernorms)", cfg->recompute);
    }
    if (cfg->cp_size < 1) { fatal_everywhere("-cp %d: the context-parallel size must be at least 1", cfg->cp_size); }
    if (cfg->layout == NULL) { cfg->layout = cfg->cp_size == 1 ? "identity" : "round_robin"; }
    int kind = cp_layout_from_name(cfg->layout);
    if (kind < 0) {
        fatal_everywhere("-cl '%s': unknown layout (identity | contiguous | round_robin | striped | packed | solver)",
                         cfg->layout);
    }
    if (kind != CP_LAYOUT_SOLVER && cfg->chunk != 0) {
        fatal_everywhere("-cc %d: the chunk size applies to -cl solver only (-cl %s)", cfg->chunk, cfg->layout);
    }
    if (kind == CP_LAYOUT_SOLVER && cfg->chunk == 0) { cfg->chunk = CP_SOLVER_DEFAULT_CHUNK; }
    if (kind == CP_LAYOUT_SOLVER && (cfg->chunk < CP_SOLVER_TILE || cfg->chunk % CP_SOLVER_TILE != 0)) {
        fatal_everywhere("-cc %d: the solver's chunk size must be a positive multiple of the %d-row tiles",
                         cfg->chunk, CP_SOLVER_TILE);
    }
    if (kind == CP_LAYOUT_SOLVER && cfg->chunk > cfg->T) {
        fatal_everywhere("-cl solver -cc %d: the chunk is longer than the row (-t %d): give -t %d or more",
                         cfg->chunk, cfg->T, cfg->chunk);
    }
    if (kind == CP_LAYOUT_IDENTITY && cfg->cp_size != 1) {
        fatal_everywhere("-cl identity needs -cp 1, got -cp %d", cfg->cp_size);
    }
    if (cfg->document_masking != 0 && cfg->document_masking != 1) {
        fatal_everywhere("-dm %d: document masking is 0 or 1", cfg->document_masking);
    }
    if (kind == CP_LAYOUT_PACKED && !cfg->document_masking) {
        fatal_everywhere("-cl packed splits documents: it needs -dm 1");
    }
    if (cfg->restart_positions != 0 && cfg->restart_positions != 1) {
        fatal_everywhere("-rp %d: restarting positions at each document is 0 or 1", cfg->restart_positions);
    }
    if (cfg->loss_masks != 0 && cfg->loss_masks != 1) {
        fatal_everywhere("-lm %d: loss masks are 0 or 1", cfg->loss_masks);
    }
    int attention = cp_attention_from_name(cfg->attention);
    if (attention < 0) {
        fatal_everywhere("-ca '%s': unknown attention algorithm (ring | allgather | ulysses | hybrid | groupcast)",
                         cfg->attention);
    }
    if (attention == CP_ATTENTION_HYBRID) {
        if (cfg->ulysses_degree < 1 || cfg->cp_size % cfg->ulysses_degree != 0) {
            fatal_everywhere("-ca hybrid needs -cu U, a Ulysses degree that divides -cp %d (cp = U x R), got -cu %d",
                             cfg->cp_size, cfg->ulysses_degree);
        }
    } else if (cfg->ulysses_degree != 0) {
        fatal_everywhere("-cu %d: the Ulysses degree applies to -ca hybrid only (-ca %s)", cfg->ulysses_degree,
                         cfg->attention);
    }
    if (attention != CP_ATTENTION_GROUPCAST && cfg->stages != 0) {
        fatal_everywhere("-co %d: the stages apply to -ca groupcast only (-ca %s)", cfg->stages, cfg->attention);
    }
    if (attention == CP_ATTENTION_GROUPCAST && cfg->stages == 0) { cfg->stages = 1; }
    int max_stages = cfg->cp_size > 1 ? cfg->cp_size - 1 : 1;
    if (attention == CP_ATTENTION_GROUPCAST && (cfg->stages < 1 || cfg->stages > max_stages)) {
        fatal_everywhere("-co %d: -ca groupcast takes 1 to %d stages at -cp %d (at most one per other rank of the "
                         "CP group)", cfg->stages, max_stages, cfg->cp_size);
    }
    return (CpLayoutKind)kind;
}

// U, the size of the Ulysses groups of the CP group (cp/mesh.h): all of it for
// ulysses, -cu for hybrid, single ranks (no all-to-all) for ring and allgather.
static int cp_ulysses_degree(const TrainConfig *cfg) {
    switch (cp_attention_from_name(cfg->attention)) {
    case CP_ATTENTION_ULYSSES: return cfg->cp_size;
    case CP_ATTENTION_HYBRID: return cfg->ulysses_degree;
    default: return 1;
    }
}

// What llm.c's flags that cannot act here do instead, said once at start-up.
static void print_flag_notes(const TrainConfig *cfg) {
    if (cfg->master_weights == 0) {
        printf("note: -w 0: the fp32 master weights are always kept here (the update and the checkpoints read them); "
               "same as -w 1\n");
    }
    if (cfg->gelu_fusion > 1) {
        printf("note: -ge %d: llm.c also fuses GELU's gradient into the backward matmul; here it stays a kernel of "
               "its own, with the same result (the forward fusion of -ge 1 applies)\n", cfg->gelu_fusion);
    }
    if (cfg->log_gpu_every > 0) {
        printf("note: -lg %d: this trainer does not read NVML; watch the GPUs with nvidia-smi\n", cfg->log_gpu_every);
    }
}

// The position-table rows of a random init: -mt, else -t, never fewer than the
// model's own (GPT-2's 1024, GPT-3's 2048), so that short runs keep its shape.
static int random_init_max_seq_len(const TrainConfig *cfg, int model_rows) {
    if (cfg->max_seq_len > 0) { return cfg->max_seq_len; }
    return cfg->T > model_rows ? cfg->T : model_rows;
}

// Checks the run's sizes against the model; source names where the model comes
// from (the checkpoint file, or the random init).
static void validate_against_model(const TrainConfig *cfg, GPT2Config c, const char *source) {
    if (cfg->T > c.max_seq_len) {
        fatal_everywhere("-t %d needs a position table of %d rows, but %s has %d (maxT): train at -t %d or less, "
                         "or from a random init whose table covers -t (-e dN, with -mt %d or more to continue "
                         "at a longer T later)", cfg->T, cfg->T, source, c.max_seq_len, c.max_seq_len, cfg->T);
    }
    if (cfg->sample_every > 0 && cfg->gen_tokens > c.max_seq_len) {
        fatal_everywhere("-g %d exceeds the model's max_seq_len %d", cfg->gen_tokens, c.max_seq_len);
    }
    int U = cp_ulysses_degree(cfg);
    if (c.num_heads % U != 0) {
        // each rank of a Ulysses group attends NH / U whole heads
        if (cp_attention_from_name(cfg->attention) == CP_ATTENTION_ULYSSES) {
            fatal_everywhere("-ca ulysses: the model's %d heads are not divisible by -cp %d (each rank takes NH / cp "
                             "heads; -ca hybrid -cu U with U dividing both mixes in the ring)", c.num_heads, U);
        }
        fatal_everywhere("-ca hybrid: the model's %d heads are not divisible by -cu %d (each rank takes NH / U heads)",
                         c.num_heads, U);
    }
    if ((cfg->document_masking || cfg->restart_positions) && GPT2_EOT >= c.vocab_size) {
        fatal_everywhere("-%s 1: documents open with the EOT token %d, outside the model's vocabulary of %d",
                         cfg->document_masking ? "dm" : "rp", GPT2_EOT, c.vocab_size);
    }
}

// What documents change (cp/sharder.h): an EOT opens one when -dm 1 masks attention
// to them or -rp 1 restarts positions at them.
static CpDocuments run_documents(const TrainConfig *cfg) {
    CpDocuments d = {cfg->document_masking || cfg->restart_positions ? GPT2_EOT : -1, cfg->document_masking,
                     cfg->restart_positions};
    return d;
}

#endif // TRAIN_CONFIG_H
