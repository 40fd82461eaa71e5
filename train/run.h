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
#include "outputs.h"
#include "progress.h"

#define RANDOM_INIT_SEED 42
#define SAMPLE_SEED 1337

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
    if (resume_step < 0) { return open_output_file(path, 0); }
    FILE *fp = open_output_file(path, 1);
    long keep = (long)((size_t)resume_step * bytes_per_step);
    if (fseek(fp, 0, SEEK_END) != 0) { fatal("cannot seek in '%s': %s", path, strerror(errno)); }
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
    // the tokenizer only prints samples: a run that prints none does not read it
    if (cfg->sample_every > 0) { tokenizer_init(&run->tokenizer, cfg->tokenizer_path, c.vocab_size); }
    check_outputs_are_not_inputs(cfg, &run->train_loader, cfg->val_every > 0 ? &run->val_loader : NULL,
                                 !run->resumed && random_init_depth(cfg->init) == 0 ? cfg->init : NULL,
                                 cfg->sample_every > 0 ? cfg->tokenizer_path : NULL);
    logger_init(&run->logger, cfg->output_dir, master, resume_step);
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
    release_output_dir();
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
    if (cfg->sample_every > 0 && run->tokenizer.token_table == NULL) {
        printf("no tokenizer at %s: samples print token ids\n", cfg->tokenizer_path);
    }
    if (cfg->warmup > run->steps) {
        printf("note: the warmup of %d steps (-u) is longer than the run's %d steps: the learning rate stops at "
               "%g, short of its peak %g (-l)\n", cfg->warmup, run->steps,
               run->steps > 0 ? learning_rate_at(&run->schedule, run->steps - 1) : 0.0f, cfg->learning_rate);
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
    if (cp_gather_tokens(sh, cp, losses, (size_t)B * sh->layout.local_len, sizeof(float), 1, run->loss_rows) !=
        CP_OK) {
        fatal("%s", sh->error);
    }
    dp->all_gather(dp, run->loss_rows, run->loss_all_rows, (size_t)B * T * sizeof(float));
    if (run->token_loss_fp != NULL) {
        fwriteCheck(run->loss_all_rows, sizeof(float), (size_t)dp->size * B * T, run->token_loss_fp,
                    cfg->token_loss_path);
        fflushCheck(run->token_loss_fp, cfg->token_loss_path);
    }
}

#endif // TRAIN_RUN_H
