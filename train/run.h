/*
The host side of a run, shared by both trainers: the model's initialisation on
the host, the mesh's MPI communicators, the data, logs and schedule (TrainRun),
what happens around each step (validation, samples, checkpoints, the progress
line, the per-token loss gather), and what ends a run early (a non-finite loss).
*/
#ifndef TRAIN_RUN_H
#define TRAIN_RUN_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../cp/comm_mpi.h"
#include "../cp/layout.h"
#include "../cp/loss.h"
#include "../cp/mesh.h"
#include "../cp/sharder.h"
#include "../llmc/checkpoint.h"
#include "../llmc/dataloader.h"
#include "../llmc/gpt2.h"
#include "../llmc/logger.h"
#include "../llmc/rand.h"
#include "../llmc/schedulers.h"
#include "../llmc/tokenizer.h"
#include "../llmc/utils.h"
#include "config.h"
#include "memory.h"
#include "progress.h"

#define RANDOM_INIT_SEED 42
#define SAMPLE_SEED 1337

// The configuration of the run's model, before anything is allocated: the header
// of the checkpoint resumed from or of -e FILE, or for -e dN the preset of depth N
// with a position table that covers -t (random_init_max_seq_len). source: where
// the model comes from, for messages.
static GPT2Config run_model_config(const TrainConfig *cfg, int resume_step, char *source, size_t source_size) {
    int depth = random_init_depth(cfg->init);
    if (resume_step < 0 && depth > 0) {
        GPT2Config c = gpt2_config_for_depth(depth, random_init_max_seq_len(cfg));
        char why[256];
        if (gpt2_config_check(c, why, sizeof(why)) != 0) { fatal_everywhere("-e %s: %s", cfg->init, why); }
        snprintf(source, source_size, "the random init -e %s", cfg->init);
        return c;
    }
    char path[4096];
    if (resume_step >= 0) { model_path(path, sizeof(path), cfg->output_dir, resume_step); }
    else { snprintf(path, sizeof(path), "%s", cfg->init); }
    snprintf(source, source_size, "the checkpoint '%s'", path);
    return gpt2_checkpoint_config(path);
}

// The model of configuration c (run_model_config) into host memory: the weights of
// the checkpoint resumed from, else -e (an llm.c checkpoint, or dN for a random
// init of depth N). Every rank builds the same weights (the trainers broadcast
// rank 0's all the same).
static void init_model_host(GPT2 *model, const TrainConfig *cfg, int resume_step, GPT2Config c) {
    if (resume_step >= 0) {
        char path[4096];
        model_path(path, sizeof(path), cfg->output_dir, resume_step);
        gpt2_load_checkpoint(model, path);
    } else if (random_init_depth(cfg->init) > 0) {
        gpt2_init_random(model, c, RANDOM_INIT_SEED);
    } else {
        gpt2_load_checkpoint(model, cfg->init);
    }
}

// Checks the run against the model and (T, cp, layout) before anything is
// allocated for them. source: where the model comes from (run_model_config).
static void check_run_against_model(const TrainConfig *cfg, CpLayoutKind layout, const Mesh *mesh, GPT2Config c,
                                    const char *source) {
    validate_against_model(cfg, c, source);
    CpSharder probe;
    cp_sharder_init(&probe, layout, mesh->cp_rank, mesh->cp_size, c.max_seq_len, document_token(cfg));
    if (cp_check_config(&probe, cfg->T) != CP_OK) { fatal_everywhere("%s", probe.error); }
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

// Opens the data and the outputs of a run checked by check_run_against_model
// (appending to them when resuming from checkpoint `resume_step`, -1 for none).
static void train_run_init(TrainRun *run, const TrainConfig *cfg, CpLayoutKind layout, const Mesh *mesh,
                           GPT2Config c, int resume_step) {
    memset(run, 0, sizeof(*run));
    int master = mesh->world_rank == 0;
    run->layout = layout;
    run->resumed = resume_step >= 0;
    run->start_step = run->resumed ? resume_step : 0;
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
                                    const TrainerMemory *tm, size_t num_parameters, const MemoryEstimate *memory) {
    if (mesh->world_rank != 0) { return; }
    StartupFacts facts = {tm->name, tm->transport, mesh->world_size, mesh->dp_size, run->padded_T, run->local_T,
                          num_parameters, run->steps, run->start_step, run->val_batches, memory};
    print_startup_table(cfg, c, &facts);
    if (run->tokenizer.token_table == NULL) { printf("no tokenizer at %s: samples print token ids\n", cfg->tokenizer_path); }
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

#endif // TRAIN_RUN_H
