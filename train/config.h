/*
The command line of both trainers: TrainConfig (one field per flag), the flag
table, usage, parsing, and the checks of every value that needs no file (then,
once the model is known, the checks of the run's sizes against it). Both
trainers take the same flags with the same meaning: llm.c's plus the
context-parallel ones.
*/
#ifndef TRAIN_CONFIG_H
#define TRAIN_CONFIG_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../cp/attention_kind.h"
#include "../cp/layout.h"
#include "../llmc/gpt2.h"
#include "../llmc/utils.h"

typedef struct {
    const char *train_pattern;  // -i
    const char *val_pattern;    // -j
    const char *init;           // -e
    const char *output_dir;     // -o
    const char *tokenizer_path; // -k
    int B;                      // -b
    int T;                      // -t
    int max_seq_len;            // -mt
    int steps;                  // -x
    float learning_rate;        // -l
    int warmup;                 // -u
    float final_lr_fraction;    // -q
    float weight_decay;         // -c
    int val_every;              // -v
    int val_batches;            // -m
    int checkpoint_every;       // -n
    int resume;                 // -y
    int sample_every;           // -s
    int gen_tokens;             // -g
    int tf32;                   // -f
    int recompute;              // -r
    int cp_size;                // -cp
    const char *layout;         // -cl
    int document_masking;       // -dm
    const char *attention;      // -ca
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

#define MAX_FLAGS 32 // at least the flags of train_flags

// The flags of a trainer, each pointing at its field of cfg. `transports` lists
// the -ct values of the trainer, NULL where it has no choice of transport.
static int train_flags(TrainConfig *cfg, Flag *flags, const char *transports) {
    Flag all[] = {
        {"-i", FLAG_STRING, &cfg->train_pattern, "train token files (glob)"},
        {"-j", FLAG_STRING, &cfg->val_pattern, "validation token files (glob)"},
        {"-e", FLAG_STRING, &cfg->init, "init: llm.c checkpoint file, or dN = random init of depth N"},
        {"-o", FLAG_STRING, &cfg->output_dir, "output dir for main.log and checkpoints (none: nothing written)"},
        {"-k", FLAG_STRING, &cfg->tokenizer_path, "tokenizer file used to print samples"},
        {"-b", FLAG_INT, &cfg->B, "batch size (sequences) per data-parallel replica"},
        {"-t", FLAG_INT, &cfg->T, "sequence length"},
        {"-mt", FLAG_INT, &cfg->max_seq_len, "position-table rows (maxT) of a random init -e dN (0: -t, at least 1024)"},
        {"-x", FLAG_INT, &cfg->steps, "training steps (-1: one pass over the train files)"},
        {"-l", FLAG_FLOAT, &cfg->learning_rate, "peak learning rate"},
        {"-u", FLAG_INT, &cfg->warmup, "learning-rate warmup steps"},
        {"-q", FLAG_FLOAT, &cfg->final_lr_fraction, "final learning rate as a fraction of the peak (cosine decay)"},
        {"-c", FLAG_FLOAT, &cfg->weight_decay, "weight decay (2-D tensors)"},
        {"-v", FLAG_INT, &cfg->val_every, "validation loss every N steps (0: never)"},
        {"-m", FLAG_INT, &cfg->val_batches, "validation batches"},
        {"-n", FLAG_INT, &cfg->checkpoint_every, "checkpoint every N steps (0: only at the end)"},
        {"-y", FLAG_INT, &cfg->resume, "resume from the latest checkpoint in -o (0/1)"},
        {"-s", FLAG_INT, &cfg->sample_every, "sample every N steps (0: never)"},
        {"-g", FLAG_INT, &cfg->gen_tokens, "tokens to generate per sample"},
        {"-f", FLAG_INT, &cfg->tf32, "TF32 matmuls on the GPU (0/1)"},
        {"-r", FLAG_INT, &cfg->recompute, "recompute in the backward pass: 0 nothing, 1 GELU, 2 GELU + layernorms"},
        {"-cp", FLAG_INT, &cfg->cp_size, "context-parallel size (dp = world / cp)"},
        {"-cl", FLAG_STRING, &cfg->layout, "CP layout: identity | contiguous | round_robin | packed (needs -dm 1)"},
        {"-dm", FLAG_INT, &cfg->document_masking, "document masking: tokens attend within their document, EOT opens one (0/1)"},
        {"-ca", FLAG_STRING, &cfg->attention, "CP attention algorithm: ring | allgather"},
        {"-tl", FLAG_STRING, &cfg->token_loss_path, "write per-token losses (float32 [steps][dp*B][T], global order)"},
        {"-ct", FLAG_STRING, &cfg->transport, transports},
    };
    int n = (int)(sizeof(all) / sizeof(all[0]));
    if (transports == NULL) { n--; } // -ct is last
    for (int i = 0; i < n; i++) { flags[i] = all[i]; }
    return n;
}

static void train_config_defaults(TrainConfig *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->train_pattern = "dev/data/austen/austen_train.bin";
    cfg->val_pattern = "dev/data/austen/austen_val.bin";
    cfg->init = "d6";
    cfg->output_dir = NULL;
    cfg->tokenizer_path = "dev/data/gpt2_tokenizer.bin";
    cfg->B = 4;
    cfg->T = 1024;
    cfg->max_seq_len = 0;
    cfg->steps = -1;
    cfg->learning_rate = 3e-4f;
    cfg->warmup = 0;
    cfg->final_lr_fraction = 1.0f;
    cfg->weight_decay = 0.0f;
    cfg->val_every = 20;
    cfg->val_batches = 20;
    cfg->checkpoint_every = 0;
    cfg->resume = 0;
    cfg->sample_every = 20;
    cfg->gen_tokens = 64;
    cfg->tf32 = 1;
    cfg->recompute = 1;
    cfg->cp_size = 1;
    cfg->layout = NULL; // identity at cp 1, round_robin above
    cfg->document_masking = 0;
    cfg->attention = "ring";
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
        fprintf(out, "  %-4s %-70s [%s]\n", flags[i].name, flags[i].help, value);
    }
    fprintf(out, "  -h   this help\n");
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

static int parse_float_value(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) { return 0; }
    *out = v;
    return 1;
}

// Parses the command line into cfg (which holds the defaults). Returns 1 when -h
// was asked for; ends the job with the usage and one error line on a bad flag.
static int parse_train_args(int argc, char **argv, TrainConfig *cfg, const char *transports) {
    Flag flags[MAX_FLAGS];
    int nflags = train_flags(cfg, flags, transports);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { return 1; }
    }
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
                             flag->type == FLAG_INT ? "an integer" : "a number", value);
        }
    }
    return 0;
}

// Parses "dN" (random init of depth N). Returns N, or 0 when init names a file.
static int random_init_depth(const char *init) {
    if (init[0] != 'd' || init[1] == '\0') { return 0; }
    int depth;
    if (!parse_int_value(init + 1, &depth)) { return 0; }
    if (depth < 1) { fatal_everywhere("-e %s: the depth must be at least 1", init); }
    return depth;
}

// Checks every value that needs no file to be checked; resolves the layout.
static CpLayoutKind validate_train_config(TrainConfig *cfg) {
    if (cfg->B < 1) { fatal_everywhere("-b %d: the batch size must be at least 1", cfg->B); }
    if (cfg->T < 1) { fatal_everywhere("-t %d: the sequence length must be at least 1", cfg->T); }
    if ((long long)cfg->B * cfg->T > INT32_MAX) {
        fatal_everywhere("-b %d x -t %d = %lld tokens per step and replica, more than the 2^31 - 1 this trainer "
                         "counts in int", cfg->B, cfg->T, (long long)cfg->B * cfg->T);
    }
    if (cfg->max_seq_len < 0) { fatal_everywhere("-mt %d: the position table cannot have negative rows", cfg->max_seq_len); }
    if (cfg->max_seq_len > 0 && cfg->max_seq_len < cfg->T) {
        fatal_everywhere("-mt %d is shorter than -t %d: the position table needs a row for every position of a "
                         "sequence (-mt 0 sizes it to -t)", cfg->max_seq_len, cfg->T);
    }
    if (cfg->max_seq_len > 0 && random_init_depth(cfg->init) == 0) {
        fatal_everywhere("-mt %d sets the position table of a random init (-e dN); the checkpoint -e '%s' brings "
                         "its own", cfg->max_seq_len, cfg->init);
    }
    if (cfg->steps < -1) { fatal_everywhere("-x %d: steps must be -1 (one epoch) or more", cfg->steps); }
    if (cfg->learning_rate < 0.0f) { fatal_everywhere("-l %g: the learning rate must not be negative", cfg->learning_rate); }
    if (cfg->warmup < 0) { fatal_everywhere("-u %d: warmup steps must not be negative", cfg->warmup); }
    if (cfg->final_lr_fraction < 0.0f || cfg->final_lr_fraction > 1.0f) {
        fatal_everywhere("-q %g: the final learning-rate fraction must lie in [0, 1]", cfg->final_lr_fraction);
    }
    if (cfg->weight_decay < 0.0f) { fatal_everywhere("-c %g: weight decay must not be negative", cfg->weight_decay); }
    if (cfg->val_every < 0) { fatal_everywhere("-v %d must not be negative", cfg->val_every); }
    if (cfg->val_batches < 1) { fatal_everywhere("-m %d: validation needs at least one batch", cfg->val_batches); }
    if (cfg->checkpoint_every < 0) { fatal_everywhere("-n %d must not be negative", cfg->checkpoint_every); }
    if (cfg->resume != 0 && cfg->resume != 1) { fatal_everywhere("-y %d: resume is 0 or 1", cfg->resume); }
    if (cfg->resume && cfg->output_dir == NULL) { fatal_everywhere("-y 1 needs -o, the directory to resume from"); }
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
        fatal_everywhere("-cl '%s': unknown layout (identity | contiguous | round_robin | packed)", cfg->layout);
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
    if (cp_attention_from_name(cfg->attention) < 0) {
        fatal_everywhere("-ca '%s': unknown attention algorithm (ring | allgather)", cfg->attention);
    }
    return (CpLayoutKind)kind;
}

// The position-table rows of a random init: -mt, else -t, never fewer than
// GPT-2's 1024 (so that short runs keep GPT-2's shape).
#define GPT2_MAX_SEQ_LEN 1024
static int random_init_max_seq_len(const TrainConfig *cfg) {
    if (cfg->max_seq_len > 0) { return cfg->max_seq_len; }
    return cfg->T > GPT2_MAX_SEQ_LEN ? cfg->T : GPT2_MAX_SEQ_LEN;
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
    if (cfg->document_masking && GPT2_EOT >= c.vocab_size) {
        fatal_everywhere("-dm 1: documents open with the EOT token %d, outside the model's vocabulary of %d",
                         GPT2_EOT, c.vocab_size);
    }
}

// The token that opens a document, or -1 when documents are not masked.
static int document_token(const TrainConfig *cfg) {
    return cfg->document_masking ? GPT2_EOT : -1;
}

#endif // TRAIN_CONFIG_H
