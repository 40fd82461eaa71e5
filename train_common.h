/*
What the two trainers (train_gpt2cp_cpu.c and train_gpt2cp.cu) share: the command
line, its checks, the start-up table and the progress line, and the host side of
a run: the model's initialisation on the host, the mesh's MPI communicators, the
data, logs and schedule (TrainRun), the per-token loss gather, sampling,
checkpoints and resume, the checks that every rank runs the same job,
and what ends a run early (a non-finite loss). Both take the same flags with the
same meaning, llm.c's flags plus the context-parallel ones; the trainers differ
only in where the model runs.
*/
#ifndef TRAIN_COMMON_H
#define TRAIN_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cp/attention_kind.h"
#include "cp/comm_mpi.h"
#include "cp/layout.h"
#include "cp/loss.h"
#include "cp/mesh.h"
#include "cp/sharder.h"
#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"
#include "llmc/gpt2.h"
#include "llmc/logger.h"
#include "llmc/rand.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/tokenizer.h"
#include "llmc/utils.h"

typedef struct {
    const char *train_pattern;  // -i
    const char *val_pattern;    // -j
    const char *init;           // -e
    const char *output_dir;     // -o
    const char *tokenizer_path; // -k
    int B;                      // -b
    int T;                      // -t
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

#define MAX_FLAGS 32

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

// Checks every value that needs no file to be checked; resolves the layout.
static CpLayoutKind validate_train_config(TrainConfig *cfg) {
    if (cfg->B < 1) { fatal_everywhere("-b %d: the batch size must be at least 1", cfg->B); }
    if (cfg->T < 1) { fatal_everywhere("-t %d: the sequence length must be at least 1", cfg->T); }
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

// Parses "dN" (random init of depth N). Returns N, or 0 when init names a file.
static int random_init_depth(const char *init) {
    if (init[0] != 'd' || init[1] == '\0') { return 0; }
    int depth;
    if (!parse_int_value(init + 1, &depth)) { return 0; }
    if (depth < 1) { fatal_everywhere("-e %s: the depth must be at least 1", init); }
    return depth;
}

// Checks the run's sizes against the model.
static void validate_against_model(const TrainConfig *cfg, GPT2Config c) {
    if (cfg->T > c.max_seq_len) {
        fatal_everywhere("-t %d exceeds the model's max_seq_len %d", cfg->T, c.max_seq_len);
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

static void make_output_dir(const char *dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) { fatal("cannot create directory '%s'", path); }
            *p = saved;
            if (saved == '\0') { break; }
        }
    }
}

// ----------------------------------------------------------------------------
// the job: start-up, and the checks that every rank runs the same one

// MPI, and a line naming the rank on every fatal signal (llmc/utils.h)
static void train_runtime_init(int *argc, char ***argv) {
    mpi_runtime_init(argc, argv);
    fatal_install_signal_handlers();
}

// Collective over the world: does any rank have a problem (why != NULL)? If one
// has, the job ends on every rank with the reason of the lowest such rank, printed
// once by rank 0 (so that no other rank's abort cuts it off) and naming that rank.
// Problems a rank finds in its own files come here instead of fatal(), so that the
// others do not wait for it in their next collective.
static void fail_if_any_rank(const char *why) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int first = why != NULL ? rank : size;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size) { return; }
    char reason[1024];
    if (rank == first) { snprintf(reason, sizeof(reason), "%s", why); }
    MPI_Bcast(reason, (int)sizeof(reason), MPI_CHAR, first, MPI_COMM_WORLD);
    fatal_everywhere("rank %d: %s", first, reason);
}

// What one rank sees of the job as named values (its flags; its model and data),
// fixed-size so that rank 0 can broadcast its own for every rank to compare.
#define VIEW_FIELDS 40
typedef struct {
    int count;
    struct {
        char name[32];
        char value[224];
    } fields[VIEW_FIELDS];
} JobView;

__attribute__((format(printf, 3, 4)))
static void view_add(JobView *view, const char *name, const char *fmt, ...) {
    if (view->count == VIEW_FIELDS) { fatal("a JobView holds at most %d fields", VIEW_FIELDS); }
    snprintf(view->fields[view->count].name, sizeof(view->fields[0].name), "%s", name);
    va_list args;
    va_start(args, fmt);
    vsnprintf(view->fields[view->count].value, sizeof(view->fields[0].value), fmt, args);
    va_end(args);
    view->count++;
}

// Collective: every rank compares its view with rank 0's; the job ends, naming
// the first field that differs and both values, if any rank's does. `rule` says
// what must agree.
static void check_ranks_agree(const JobView *mine, const char *rule) {
    JobView *root = (JobView *)mallocCheck(sizeof(JobView));
    *root = *mine;
    MPI_Bcast(root, (int)sizeof(JobView), MPI_BYTE, 0, MPI_COMM_WORLD);
    char why[1024];
    const char *problem_found = NULL;
    int n = mine->count > root->count ? mine->count : root->count;
    for (int i = 0; i < n && problem_found == NULL; i++) {
        const char *name = i < mine->count ? mine->fields[i].name : "(nothing)";
        const char *root_name = i < root->count ? root->fields[i].name : "(nothing)";
        if (strcmp(name, root_name) != 0) {
            snprintf(why, sizeof(why), "runs another trainer than rank 0 (field %s, rank 0: %s)", name, root_name);
            problem_found = why;
        } else if (strcmp(mine->fields[i].value, root->fields[i].value) != 0) {
            snprintf(why, sizeof(why), "%s is %s, but %s on rank 0 (%s)", name, mine->fields[i].value,
                     root->fields[i].value, rule);
            problem_found = why;
        }
    }
    free(root);
    fail_if_any_rank(problem_found);
}

// Every rank was started with the same flags (an MPMD launch, or a wrapper script,
// can give ranks different ones). Runs before anything collective depends on them.
static void check_flags_agree(TrainConfig *cfg, const char *transports) {
    JobView view;
    memset(&view, 0, sizeof(view));
    Flag flags[MAX_FLAGS];
    int nflags = train_flags(cfg, flags, transports);
    for (int i = 0; i < nflags; i++) {
        char value[sizeof(view.fields[0].value)];
        format_flag_value(&flags[i], 9, value, sizeof(value)); // 9 digits tell any two floats apart
        view_add(&view, flags[i].name, "%s", value);
    }
    check_ranks_agree(&view, "every rank must be started with the same flags");
}

typedef struct {
    const char *trainer;   // "cpu" or "cuda"
    const char *transport; // "mpi", "nccl", ...
    int world_size, dp_size;
    int padded_T, local_T;
    size_t num_parameters;
    int steps;
    int start_step;        // 0, or the step of the checkpoint resumed from
    int val_batches;
} StartupFacts;

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
    char layout[128];
    snprintf(layout, sizeof(layout), "%s%s, attention %s", cfg->layout,
             cfg->document_masking ? " (document masking)" : "", cfg->attention);
    printf("| %-21s | %-50s |\n", "layout", layout);
    printf("| %-21s | %-50s |\n", "transport", f->transport);
    char padded[128];
    if (strcmp(cfg->layout, "packed") == 0) { snprintf(padded, sizeof(padded), "%d at least (depends on the documents)", f->padded_T); }
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
    printf("+-----------------------+----------------------------------------------------+\n");
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

// llm.c's progress line, plus the time left at the mean speed so far
static void print_progress(int step, int steps, float loss, float grad_norm, float lr, double step_seconds,
                           double tokens_per_step, double mean_step_seconds) {
    char eta[32];
    format_duration(eta, sizeof(eta), mean_step_seconds * (steps - step - 1));
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | eta %s\n",
           step + 1, steps, loss, grad_norm, lr, step_seconds * 1000.0, tokens_per_step / step_seconds, eta);
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// the host side of a run, shared by both trainers

#define RANDOM_INIT_SEED 42
#define SAMPLE_SEED 1337

// The checkpoint to resume from with -y 1: the newest complete one in -o (the
// newest step with a DONE marker), or -1 for a fresh start. Rank 0 looks, and every
// rank takes its answer.
static int find_resume_step(const TrainConfig *cfg) {
    int step = fatal_rank == 0 && cfg->output_dir ? latest_complete_checkpoint(cfg->output_dir) : -1;
    if (!cfg->resume) {
        if (step >= 0) {
            printf("note: %s holds checkpoints of an earlier run (the newest complete one: step %d); this run starts "
                   "from scratch and writes over them (-y 1 resumes instead)\n", cfg->output_dir, step);
        }
        return -1;
    }
    MPI_Bcast(&step, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (step < 0 && fatal_rank == 0) {
        printf("-y 1: no complete checkpoint in %s: starting from scratch\n", cfg->output_dir);
    }
    return step;
}

// The model into host memory: the weights of the checkpoint resumed from, else -e
// (an llm.c checkpoint, or dN for a random init of depth N). Every rank builds the
// same weights (the trainers broadcast rank 0's all the same).
static void init_model_host(GPT2 *model, const TrainConfig *cfg, int resume_step) {
    if (resume_step >= 0) {
        char path[4096];
        model_path(path, sizeof(path), cfg->output_dir, resume_step);
        gpt2_load_checkpoint(model, path);
        return;
    }
    const char *init = cfg->init;
    int depth = random_init_depth(init);
    if (depth > 0) {
        GPT2Config c = gpt2_config_for_depth(depth);
        char why[256];
        if (gpt2_config_check(c, why, sizeof(why)) != 0) { fatal_everywhere("-e %s: %s", init, why); }
        gpt2_init_random(model, c, RANDOM_INIT_SEED);
    } else {
        gpt2_load_checkpoint(model, init);
    }
}

// The mesh's MPI communicators: world, this replica's CP group, the DP group of
// this CP rank, and this rank alone. The caller owns (wraps) all four.
static Mesh mesh_split_mpi(int cp_size, MPI_Comm *world, MPI_Comm *cp, MPI_Comm *dp, MPI_Comm *self) {
    int world_rank, world_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    Mesh m = mesh_init(world_rank, world_size, cp_size);
    MPI_Comm_dup(MPI_COMM_WORLD, world);
    MPI_Comm_split(MPI_COMM_WORLD, m.dp_rank, m.cp_rank, cp);
    MPI_Comm_split(MPI_COMM_WORLD, m.cp_rank, m.dp_rank, dp);
    MPI_Comm_dup(MPI_COMM_SELF, self);
    return m;
}

// What a run needs besides the model: sizes, data, tokenizer, logs, the -tl file,
// the schedule, the sampling RNG and the step timer.
typedef struct {
    CpLayoutKind layout;
    int padded_T, local_T;  // the row after padding, and this rank's share of it: what the
                            // buffers fit (packed: the longest batch so far)
    int steps, val_batches;
    DataLoader train_loader, val_loader;
    Tokenizer tokenizer;
    Logger logger;
    FILE *token_loss_fp;    // -tl, open on the master only
    float *loss_rows;       // (B, T) this replica's gathered per-token losses
    float *loss_all_rows;   // (dp * B, T) every replica's
    CosineSchedule schedule;
    Rng sample_rng;
    int start_step;         // 0, or the step of the checkpoint resumed from
    int resumed;
    double tokens_per_step;
    double total_step_seconds;
} TrainRun;

// Opens the -tl file: anew, or when resuming from step `resume_step` for appending
// after that step's losses (a run that crashed past its checkpoint left more).
static FILE *open_token_losses(const char *path, int resume_step, size_t bytes_per_step) {
    if (resume_step < 0) { return fopenCheck(path, "wb"); }
    FILE *fp = fopenCheck(path, "ab");
    long keep = (long)((size_t)resume_step * bytes_per_step);
    if (fseek(fp, 0, SEEK_END) != 0) { fatal("cannot seek in '%s'", path); }
    if (ftell(fp) > keep && ftruncate(fileno(fp), keep) != 0) {
        fatal("cannot cut '%s' back to the %d steps before the checkpoint: %s", path, resume_step, strerror(errno));
    }
    return fp;
}

// Checks the run against the model, opens the data and the outputs (appending to
// them when resuming from checkpoint `resume_step`, -1 for none).
static void train_run_init(TrainRun *run, const TrainConfig *cfg, CpLayoutKind layout, const Mesh *mesh,
                           GPT2Config c, int resume_step) {
    memset(run, 0, sizeof(*run));
    int master = mesh->world_rank == 0;
    run->layout = layout;
    run->resumed = resume_step >= 0;
    run->start_step = run->resumed ? resume_step : 0;
    validate_against_model(cfg, c);
    CpSharder probe; // checks (T, cp, layout) before anything is allocated for it
    cp_sharder_init(&probe, layout, mesh->cp_rank, mesh->cp_size, c.max_seq_len, document_token(cfg));
    if (cp_check_config(&probe, cfg->T) != CP_OK) { fatal_everywhere("%s", probe.error); }
    run->padded_T = cp_padded_len(layout, cfg->T, cfg->cp_size);
    run->local_T = run->padded_T / cfg->cp_size;
    dataloader_init(&run->train_loader, cfg->train_pattern, "-i", cfg->B, cfg->T, mesh->dp_rank, mesh->dp_size,
                    c.vocab_size);
    if (cfg->val_every > 0) {
        dataloader_init(&run->val_loader, cfg->val_pattern, "-j", cfg->B, cfg->T, mesh->dp_rank, mesh->dp_size,
                        c.vocab_size);
        int epoch = (int)run->val_loader.epoch_steps;
        run->val_batches = cfg->val_batches < epoch ? cfg->val_batches : epoch;
    }
    run->steps = cfg->steps >= 0 ? cfg->steps : (int)run->train_loader.epoch_steps;
    tokenizer_init(&run->tokenizer, cfg->tokenizer_path, c.vocab_size);
    if (cfg->output_dir) { make_output_dir(cfg->output_dir); }
    logger_init(&run->logger, cfg->output_dir, master, run->resumed);
    if (cfg->token_loss_path && master) {
        size_t bytes_per_step = (size_t)mesh->dp_size * cfg->B * cfg->T * sizeof(float);
        run->token_loss_fp = open_token_losses(cfg->token_loss_path, resume_step, bytes_per_step);
    }
    if (cfg->token_loss_path) {
        run->loss_rows = (float *)mallocCheck((size_t)cfg->B * cfg->T * sizeof(float));
        run->loss_all_rows = (float *)mallocCheck((size_t)mesh->dp_size * cfg->B * cfg->T * sizeof(float));
    }
    CosineSchedule schedule = {cfg->learning_rate, cfg->warmup, run->steps, cfg->final_lr_fraction};
    run->schedule = schedule;
    rng_seed(&run->sample_rng, SAMPLE_SEED);
    run->tokens_per_step = (double)mesh->dp_size * cfg->B * cfg->T;
}

// Loads the loader's next batch and shards it for this rank into sh, the step's
// sharder (built here, freed by the caller); ends the job if the layout cannot.
// The packed layout's length depends on the data: a batch is padded to at least
// the longest one so far, so the buffers sized by run->local_T grow now and then
// but never shrink and regrow.
static void next_sharded_batch(CpSharder *sh, DataLoader *dl, TrainRun *run, const TrainConfig *cfg, const Mesh *m,
                               int max_seq_len) {
    dataloader_next_batch(dl);
    cp_sharder_init(sh, run->layout, m->cp_rank, m->cp_size, max_seq_len, document_token(cfg));
    sh->min_padded_len = run->padded_T;
    if (cp_shard_batch(sh, dl->inputs, dl->targets, dl->B, dl->T) != CP_OK) {
        fatal_everywhere("%s", sh->error);
    }
    if (sh->layout.padded_seq_len > run->padded_T) {
        run->padded_T = sh->layout.padded_seq_len;
        run->local_T = sh->layout.local_len;
    }
}

static void train_run_free(TrainRun *run, const TrainConfig *cfg) {
    if (run->token_loss_fp) { fcloseCheck(run->token_loss_fp, cfg->token_loss_path); }
    free(run->loss_rows);
    free(run->loss_all_rows);
    logger_free(&run->logger);
    tokenizer_free(&run->tokenizer);
    dataloader_free(&run->train_loader);
    if (cfg->val_every > 0) { dataloader_free(&run->val_loader); }
}

// The start-up table (master only), and a note when samples will print token ids.
static void train_run_print_startup(const TrainRun *run, const TrainConfig *cfg, GPT2Config c, const Mesh *mesh,
                                    const char *trainer, const char *transport, size_t num_parameters) {
    if (mesh->world_rank != 0) { return; }
    StartupFacts facts = {trainer, transport, mesh->world_size, mesh->dp_size, run->padded_T, run->local_T,
                          num_parameters, run->steps, run->start_step, run->val_batches};
    print_startup_table(cfg, c, &facts);
    if (run->tokenizer.token_table == NULL) { printf("no tokenizer at %s: samples print token ids\n", cfg->tokenizer_path); }
}

// Every rank holds the same model and reads the same data files (same flags can
// still name different files on different nodes). Before the first collective on
// the model: a rank with another model would broadcast or reduce the wrong sizes.
static void check_model_and_data_agree(const TrainRun *run, const TrainConfig *cfg, GPT2Config c) {
    JobView view;
    memset(&view, 0, sizeof(view));
    view_add(&view, "the model", "L %d, NH %d, C %d, maxT %d, V %d, Vp %d", c.num_layers, c.num_heads, c.channels,
             c.max_seq_len, c.vocab_size, c.padded_vocab_size);
    const DataLoader *loaders[2] = {&run->train_loader, &run->val_loader};
    const char *names[2] = {"the -i data", "the -j data"};
    for (int i = 0; i < (cfg->val_every > 0 ? 2 : 1); i++) {
        view_add(&view, names[i], "%zu file(s) of %zu tokens with fingerprint %016llx", loaders[i]->files.gl_pathc,
                 loaders[i]->total_tokens, (unsigned long long)loaders[i]->fingerprint);
    }
    check_ranks_agree(&view, "every rank must see the same model and data files");
}

// ----------------------------------------------------------------------------
// checkpoints and resume (llmc/checkpoint.h has the files)

// the mesh and batch shape a state file records, as text for notes
static void describe_shape(char *buf, size_t size, int world, int cp, int layout, int B, int T) {
    snprintf(buf, size, "%d rank(s) at cp %d, layout %s, B %d, T %d", world, cp,
             layout >= 0 && layout < CP_NUM_LAYOUTS ? cp_layout_names[layout] : "?", B, T);
}

// Restores the training state of checkpoint `step` (its weights came with the
// model file): the AdamW moments into model, the train loader's position and the
// sampling RNG into run. Every rank reads its own state file, unless the checkpoint
// was written in another shape (world size, cp, layout, B or T): then every rank
// reads rank 0's. That holds because the moments are the same on every rank
// (gradients are summed over all ranks) and the data position is a token offset.
// A bad file ends the job on every rank with one line (fail_if_any_rank).
static void train_run_resume(TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, GPT2 *model, int step) {
    char path[4096], why[768], problem_line[sizeof(path) + sizeof(why) + 32];
    const char *problem_found = NULL;
    TrainState s;
    memset(&s, 0, sizeof(s));
    state_path(path, sizeof(path), cfg->output_dir, step, 0);
    int status = state_read(path, &s, NULL, NULL, model->num_parameters, why, sizeof(why));
    int same_shape = status == 0 && s.world_size == mesh->world_size && s.cp_size == mesh->cp_size &&
                     s.layout == (int)run->layout && s.B == cfg->B && s.T == cfg->T;
    TrainState writer = s; // rank 0's header: the shape the checkpoint was written in
    if (status == 0) {
        if (same_shape) { state_path(path, sizeof(path), cfg->output_dir, step, mesh->world_rank); }
        status = state_read(path, &s, model->m_memory, model->v_memory, model->num_parameters, why, sizeof(why));
    }
    if (status == 0 && s.step != step) {
        status = problem(why, sizeof(why), "holds step %d, its name says %d", s.step, step);
    }
    if (status == 0 && same_shape && (s.rank != mesh->world_rank || s.world_size != writer.world_size)) {
        status = problem(why, sizeof(why), "written by rank %d of %d, expected rank %d of %d", s.rank, s.world_size,
                         mesh->world_rank, writer.world_size);
    }
    if (status == 0) {
        status = dataloader_resume(&run->train_loader, s.data_shard, s.data_position, why, sizeof(why));
    }
    if (status != 0) {
        snprintf(problem_line, sizeof(problem_line), "state file '%s': %s", path, why);
        problem_found = problem_line;
    }
    fail_if_any_rank(problem_found);
    run->sample_rng.state = s.rng_state;
    if (same_shape && s.padded_len > (uint64_t)run->padded_T && s.padded_len <= (uint64_t)INT32_MAX) {
        // the packed layout's buffers as the run left them: batches pad as they did
        run->padded_T = (int)s.padded_len;
        run->local_T = run->padded_T / mesh->cp_size;
    }
    if (mesh->world_rank != 0) { return; }
    printf("resuming from step %d: %s/model_%08d.bin and %s\n", step, cfg->output_dir, step,
           same_shape ? "every rank's own state file" : "rank 0's state file on every rank");
    if (!same_shape) {
        char was[256], now[256];
        describe_shape(was, sizeof(was), writer.world_size, writer.cp_size, writer.layout, writer.B, writer.T);
        describe_shape(now, sizeof(now), mesh->world_size, mesh->cp_size, (int)run->layout, cfg->B, cfg->T);
        printf("note: the checkpoint was written by %s, this run has %s: the weights, the optimizer state "
               "(rank 0's, the same on every rank) and the data position carry over; the losses will follow "
               "the original run closely, not bit for bit\n", was, now);
    }
    if (run->start_step >= run->steps) {
        printf("note: the checkpoint is at step %d and the run has %d steps: nothing left to train\n",
               run->start_step, run->steps);
    }
}

// The start of a run on the host, shared by both trainers: the model (from -e,
// or the checkpoint -y 1 resumes from) into host memory, the run's data and
// outputs, the check that every rank holds the same model and data, the start-up
// table, and the training state when resuming. The caller then makes rank 0's
// weights every rank's (a broadcast) and moves the model where it runs.
static void train_run_start(TrainRun *run, GPT2 *model, const TrainConfig *cfg, CpLayoutKind layout,
                            const Mesh *mesh, const char *trainer, const char *transport) {
    int resume_step = find_resume_step(cfg);
    init_model_host(model, cfg, resume_step);
    train_run_init(run, cfg, layout, mesh, model->config, resume_step);
    check_model_and_data_agree(run, cfg, model->config);
    train_run_print_startup(run, cfg, model->config, mesh, trainer, transport, model->num_parameters);
    if (run->resumed) { train_run_resume(run, cfg, mesh, model, resume_step); }
}

// Writes checkpoint `step`: the weights (rank 0) and every rank's state, then,
// once every rank has finished its files (a barrier), the DONE marker that makes
// resume trust the checkpoint. A crash before the marker leaves the previous one
// in charge. An earlier run's marker of the same step goes first (and a barrier
// waits for that), so that a crash can never leave a marker over a mix of the two
// runs' files. model: the host model holding the parameters and AdamW moments.
static void save_checkpoint(const TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, const GPT2 *model,
                            int step) {
    char path[4096];
    int master = mesh->world_rank == 0;
    if (master) { remove_done_marker(cfg->output_dir, step); }
    MPI_Barrier(MPI_COMM_WORLD);
    if (master) {
        model_path(path, sizeof(path), cfg->output_dir, step);
        gpt2_save_checkpoint(model, path);
    }
    TrainState s = {step, mesh->world_rank, mesh->world_size, mesh->cp_size, mesh->dp_size, (int)run->layout,
                    cfg->B, cfg->T, model->num_parameters, run->train_loader.shard_index,
                    run->train_loader.position, run->sample_rng.state, (uint64_t)run->padded_T};
    state_path(path, sizeof(path), cfg->output_dir, step, mesh->world_rank);
    state_write(path, &s, model->m_memory, model->v_memory);
    MPI_Barrier(MPI_COMM_WORLD);
    if (master) {
        write_done_marker(cfg->output_dir, step);
        printf("wrote checkpoint %s/model_%08d.bin (+ state of %d rank(s), DONE_%08d)\n", cfg->output_dir, step,
               mesh->world_size, step);
    }
}

// A loss or gradient norm that is not finite ends the run before the update could
// carry it into the weights, and so before any checkpoint could keep it. Every
// rank holds the same global loss and norm, so every rank stops here alike.
static void check_step_finite(const TrainConfig *cfg, int step, float loss, float grad_norm) {
    if (isfinite(loss) && isfinite(grad_norm)) { return; }
    int good = cfg->output_dir != NULL ? latest_complete_checkpoint(cfg->output_dir) : -1;
    char last[4200];
    if (good >= 0) {
        snprintf(last, sizeof(last), "the last good checkpoint is step %d (%s/model_%08d.bin; -y 1 resumes from it)",
                 good, cfg->output_dir, good);
    } else {
        snprintf(last, sizeof(last), "there is no checkpoint to resume from");
    }
    fatal_everywhere("step %d (counting from 0, as main.log): the loss is %g and the gradient norm %g: "
                     "training stopped before the update; %s", step, loss, grad_norm, last);
}

// The peak resident memory of the ranks (getrusage), the largest over the world,
// printed by rank 0: per-rank memory is what context parallelism divides.
static void print_peak_memory(const Mesh *mesh) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    struct {
        long kib;
        int rank;
    } mine = {usage.ru_maxrss, mesh->world_rank}, most;
    MPI_Reduce(&mine, &most, 1, MPI_LONG_INT, MPI_MAXLOC, 0, MPI_COMM_WORLD);
    if (mesh->world_rank == 0) {
        printf("peak resident memory per rank: %.1f MiB (the most of %d rank(s), on rank %d; cp %d)\n",
               most.kib / 1024.0, mesh->world_size, most.rank, mesh->cp_size);
    }
}

// The forward pass of the loader's next batch on this rank's shard (the trainer's
// own); returns the loss statistics of the global batch. The sharder is built by
// it and freed by the caller.
typedef LossStats (*ForwardStep)(void *trainer, DataLoader *dl, CpSharder *sh);

// The mean loss over the first `batches` batches of the validation data.
static float validation_loss(ForwardStep forward_step, void *trainer, DataLoader *val_loader, int batches) {
    dataloader_reset(val_loader);
    LossStats total = {0.0, 0.0};
    for (int i = 0; i < batches; i++) {
        CpSharder sh;
        LossStats s = forward_step(trainer, val_loader, &sh);
        cp_sharder_free(&sh);
        total.loss_sum += s.loss_sum;
        total.valid_count += s.valid_count;
    }
    return mean_loss(total);
}

// What happens before the training step `step` (the last "step" only evaluates).
// None of it at the step a run resumed from: the run that wrote the checkpoint
// did it all just before, and its sampling RNG state includes the sample.
static int run_before_step(const TrainRun *run, int step) {
    return !(run->resumed && step == run->start_step);
}

static int run_validates(const TrainRun *run, const TrainConfig *cfg, int step, int last_step) {
    return run_before_step(run, step) && cfg->val_every > 0 && (step % cfg->val_every == 0 || last_step);
}

static int run_samples(const TrainRun *run, const TrainConfig *cfg, int step, int last_step) {
    return run_before_step(run, step) && cfg->sample_every > 0 &&
           ((step > 0 && step % cfg->sample_every == 0) || last_step);
}

static int run_checkpoints(const TrainRun *run, const TrainConfig *cfg, int step, int last_step) {
    return run_before_step(run, step) && cfg->output_dir != NULL &&
           (last_step || (cfg->checkpoint_every > 0 && step > 0 && step % cfg->checkpoint_every == 0));
}

// After a training step: the progress line (master) and the log.
static void train_run_end_step(TrainRun *run, int master, int step, float loss, float grad_norm, float lr,
                               double seconds) {
    run->total_step_seconds += seconds;
    if (master) {
        print_progress(step, run->steps, loss, grad_norm, lr, seconds, run->tokens_per_step,
                       run->total_step_seconds / (step + 1));
    }
    logger_log_train(&run->logger, step, loss);
}

// Gathers the step's per-token losses to global order: the CP group's shards into
// (B, T) rows, then the replicas' rows into (dp * B, T); the master appends them.
// losses: (B, Tl) host; cp, dp: host-memory transports of the CP and DP groups.
static void write_token_losses(TrainRun *run, const TrainConfig *cfg, CpSharder *sh, Comm *cp, Comm *dp,
                               const float *losses) {
    int B = sh->layout.B, T = sh->layout.original_seq_len;
    if (cp_gather_tokens(sh, cp, losses, sizeof(float), 1, run->loss_rows) != CP_OK) {
        fatal("%s", sh->error);
    }
    dp->all_gather(dp, run->loss_rows, run->loss_all_rows, (size_t)B * T * sizeof(float));
    if (run->token_loss_fp != NULL) {
        fwriteCheck(run->loss_all_rows, sizeof(float), (size_t)dp->size * B * T, run->token_loss_fp,
                    cfg->token_loss_path);
        fflush(run->token_loss_fp);
    }
}

// The logits (host, at least V floats) of position t - 1 after a forward pass over
// the row sharded in sh (identity layout, this rank alone).
typedef const float *(*NextTokenLogits)(void *ctx, const CpSharder *sh, int t);

// Generates gen_tokens tokens after an EOT, unsharded on this rank alone, and
// prints them. The whole window is run every time, as llm.c does: causal attention
// makes the filler after position t-1 irrelevant to its logits.
static void generate_sample(const TrainConfig *cfg, GPT2Config c, const Tokenizer *tokenizer, Rng *rng,
                            NextTokenLogits next_logits, void *ctx) {
    int T = cfg->gen_tokens;
    int *tokens = (int *)mallocCheck((size_t)T * sizeof(int));
    int *no_targets = (int *)mallocCheck((size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) { tokens[t] = GPT2_EOT; no_targets[t] = IGNORE_INDEX; }
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_IDENTITY, 0, 1, c.max_seq_len, document_token(cfg));
    printf("generating:\n---\n");
    for (int t = 1; t < T; t++) {
        if (cp_shard_batch(&sh, tokens, no_targets, 1, T) != CP_OK) { fatal("%s", sh.error); }
        const float *logits = next_logits(ctx, &sh, t);
        tokens[t] = sample_softmax(logits, c.vocab_size, rng_uniform(rng));
        tokenizer_print(tokenizer, tokens[t]);
        fflush(stdout);
    }
    printf("\n---\n");
    cp_sharder_free(&sh);
    free(tokens);
    free(no_targets);
}

#endif // TRAIN_COMMON_H
