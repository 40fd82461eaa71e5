/*
What the two trainers (train_gpt2cp_cpu.c and train_gpt2cp.cu) share: the command
line, its checks, the start-up table and the progress line, and the host side of
a run: the model's initialisation on the host, the mesh's MPI communicators, the
data, logs and schedule (TrainRun), the per-token loss gather, checkpoints and
sampling. Both take the same flags with the same meaning, llm.c's flags plus the
context-parallel ones; the trainers differ only in where the model runs.
*/
#ifndef TRAIN_COMMON_H
#define TRAIN_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cp/comm_mpi.h"
#include "cp/layout.h"
#include "cp/loss.h"
#include "cp/mesh.h"
#include "cp/sharder.h"
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
        {"-cl", FLAG_STRING, &cfg->layout, "CP layout: identity | contiguous | round_robin"},
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
    cfg->token_loss_path = NULL;
    cfg->transport = "nccl";
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
        switch (flags[i].type) {
        case FLAG_INT: snprintf(value, sizeof(value), "%d", *(int *)flags[i].value); break;
        case FLAG_FLOAT: snprintf(value, sizeof(value), "%g", *(float *)flags[i].value); break;
        case FLAG_STRING: {
            const char *s = *(const char **)flags[i].value;
            snprintf(value, sizeof(value), "%s", s ? s : "none");
            break;
        }
        }
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
        fatal_everywhere("-cl '%s': unknown layout (identity | contiguous | round_robin)", cfg->layout);
    }
    if (kind == CP_LAYOUT_IDENTITY && cfg->cp_size != 1) {
        fatal_everywhere("-cl identity needs -cp 1, got -cp %d", cfg->cp_size);
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

typedef struct {
    const char *trainer;   // "cpu" or "cuda"
    const char *transport; // "mpi", "nccl", ...
    int world_size, dp_size;
    int padded_T, local_T;
    size_t num_parameters;
    int steps;
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
    printf("| %-21s | %-50s |\n", "layout", cfg->layout);
    printf("| %-21s | %-50s |\n", "transport", f->transport);
    printf("| %-21s | %-50d |\n", "padded T", f->padded_T);
    printf("| %-21s | %-50d |\n", "tokens per rank (row)", f->local_T);
    printf("| %-21s | %-50d |\n", "steps", f->steps);
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

// -e into host memory: an llm.c checkpoint, or dN for a random init of depth N.
// Every rank builds the same weights (the trainers broadcast rank 0's all the same).
static void init_model_host(GPT2 *model, const char *init) {
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

// Loads the loader's next batch and shards it for this rank into sh, the step's
// sharder (built here, freed by the caller); ends the job if the layout cannot.
static void next_sharded_batch(CpSharder *sh, DataLoader *dl, CpLayoutKind layout, const Mesh *m, int max_seq_len) {
    dataloader_next_batch(dl);
    cp_sharder_init(sh, layout, m->cp_rank, m->cp_size, max_seq_len, -1);
    if (cp_shard_batch(sh, dl->inputs, dl->targets, dl->B, dl->T) != CP_OK) {
        fatal_everywhere("%s", sh->error);
    }
}

// What a run needs besides the model: sizes, data, tokenizer, logs, the -tl file,
// the schedule, the sampling RNG and the step timer.
typedef struct {
    CpLayoutKind layout;
    int padded_T, local_T;  // the row after padding, and this rank's share of it
    int steps, val_batches;
    DataLoader train_loader, val_loader;
    Tokenizer tokenizer;
    Logger logger;
    FILE *token_loss_fp;    // -tl, open on the master only
    float *loss_rows;       // (B, T) this replica's gathered per-token losses
    float *loss_all_rows;   // (dp * B, T) every replica's
    CosineSchedule schedule;
    Rng sample_rng;
    double tokens_per_step;
    double total_step_seconds;
} TrainRun;

// Checks the run against the model, opens the data and the outputs.
static void train_run_init(TrainRun *run, const TrainConfig *cfg, CpLayoutKind layout, const Mesh *mesh,
                           GPT2Config c) {
    memset(run, 0, sizeof(*run));
    int master = mesh->world_rank == 0;
    run->layout = layout;
    validate_against_model(cfg, c);
    CpSharder probe; // checks (T, cp, layout) before anything is allocated for it
    cp_sharder_init(&probe, layout, mesh->cp_rank, mesh->cp_size, c.max_seq_len, -1);
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
    logger_init(&run->logger, cfg->output_dir, master, 0);
    if (cfg->token_loss_path && master) { run->token_loss_fp = fopenCheck(cfg->token_loss_path, "wb"); }
    if (cfg->token_loss_path) {
        run->loss_rows = (float *)mallocCheck((size_t)cfg->B * cfg->T * sizeof(float));
        run->loss_all_rows = (float *)mallocCheck((size_t)mesh->dp_size * cfg->B * cfg->T * sizeof(float));
    }
    CosineSchedule schedule = {cfg->learning_rate, cfg->warmup, run->steps, cfg->final_lr_fraction};
    run->schedule = schedule;
    rng_seed(&run->sample_rng, SAMPLE_SEED);
    run->tokens_per_step = (double)mesh->dp_size * cfg->B * cfg->T;
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
                          num_parameters, run->steps, run->val_batches};
    print_startup_table(cfg, c, &facts);
    if (run->tokenizer.token_table == NULL) { printf("no tokenizer at %s: samples print token ids\n", cfg->tokenizer_path); }
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

// what happens before the training step `step` (the last "step" only evaluates)
static int run_validates(const TrainConfig *cfg, int step, int last_step) {
    return cfg->val_every > 0 && (step % cfg->val_every == 0 || last_step);
}

static int run_samples(const TrainConfig *cfg, int step, int last_step) {
    return cfg->sample_every > 0 && ((step > 0 && step % cfg->sample_every == 0) || last_step);
}

static int run_checkpoints(const TrainConfig *cfg, int step, int last_step) {
    return cfg->output_dir != NULL &&
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

// model: the host model holding the parameters to write
static void save_checkpoint(const TrainConfig *cfg, const GPT2 *model, int step) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", cfg->output_dir, step);
    gpt2_save_checkpoint(model, path);
    printf("wrote %s\n", path);
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
    cp_sharder_init(&sh, CP_LAYOUT_IDENTITY, 0, 1, c.max_seq_len, -1);
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
