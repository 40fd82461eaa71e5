/*
The host side of a run, shared by both trainers: the data, logs, schedule and
outputs of a run (TrainRun), each batch's sharding, and the chores of each
training step: the update's checks (a non-finite loss ends the run, -sl and -sg
skip it), the progress line and log. The -tl file is train/token_losses.h's.
*/
#ifndef TRAIN_RUN_H
#define TRAIN_RUN_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../cp/comm.h"
#include "../cp/layout.h"
#include "../cp/loss.h"
#include "../cp/mesh.h"
#include "../cp/sharder.h"
#include "../llmc/dataloader.h"
#include "../llmc/eval_loader.h"
#include "../llmc/gpt2.h"
#include "../llmc/logger.h"
#include "../llmc/outlier_detector.h"
#include "../llmc/rand.h"
#include "../llmc/schedulers.h"
#include "../llmc/tokenizer.h"
#include "../llmc/utils.h"
#include "checkpoint_files.h"
#include "config.h"
#include "outputs.h"
#include "memory.h"
#include "progress.h"
#include "token_losses.h"

#define SAMPLE_SEED 1337

// What a run needs besides the model: sizes, data, tokenizer, logs, the -tl file,
// the schedule, the sampling RNG and the step timer.
typedef struct {
    CpLayoutKind layout;
    int padded_T, local_T;  // the row after padding, and this rank's share of it: what the
                            // buffers fit (packed: the longest batch so far)
    int steps, val_batches;
    int grad_accum_steps;   // micro-batches per optimizer step (-d)
    uint64_t run_id;        // this job's: in every file of the checkpoints it writes
    uint64_t micro_batches; // the most batches a step of the run read, over every job that trained it
    DataLoader train_loader, val_loader;
    EvalLoader eval_loader; // -h 1
    int run_hellaswag;      // -h 1 and its file is there
    Tokenizer tokenizer;
    Logger logger;
    TokenLosses token_losses; // -tl
    LrSchedule schedule;
    Rng sample_rng;
    OutlierDetector loss_outliers, grad_norm_outliers; // -sl, -sg
    int start_step;         // 0, or the step of the checkpoint resumed from
    int resumed;
    int params_from_shards; // resumed at -z 1 with master weights: each rank holds its own shard
                            // of the weights exactly (zero_sync_parameters gathers them)
    double tokens_per_step;
    double total_step_seconds;
    int no_target_steps;    // training steps whose loss masks kept no target (-lm 1)
    int no_target_vals;     // validations whose loss masks kept no target
} TrainRun;

// A run id for this job: 64 random bits, drawn by rank 0 and taken by every rank.
static uint64_t new_run_id(void) {
    uint64_t id = 0;
    if (fatal_rank == 0) {
        FILE *fp = fopen("/dev/urandom", "rb");
        if (fp == NULL || fread(&id, sizeof(id), 1, fp) != 1) {
            // no /dev/urandom: the clock and the pid, mixed
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            id = ((uint64_t)now.tv_sec * 1000000007ULL + (uint64_t)now.tv_nsec) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid();
        }
        if (fp) { fclose(fp); }
    }
    job_comm()->broadcast(job_comm(), &id, sizeof(id), 0);
    return id;
}

// The run's outputs, opened once it is known what they continue: main.log
// (master) and the -tl file. A fresh run (resumed NULL) starts both. A run resumed
// from state *resumed (checked whole) cuts main.log back to the lines logged up to
// its checkpoint and continues the -tl file as token_losses_resume_plan says; the
// rows of earlier steps are never cut, whatever shape the new run has. Collective.
static void open_run_outputs(TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, const TrainState *resumed) {
    int master = mesh->world_rank == 0;
    off_t keep = 0;
    char why[9000];
    const char *problem_found = NULL;
    if (master && resumed && cfg->token_loss_path &&
        token_losses_resume_plan(cfg->token_loss_path, resumed, &keep, why, sizeof(why)) != 0) {
        problem_found = why;
    }
    fail_if_any_rank(problem_found);
    logger_init(&run->logger, cfg->output_dir, master, resumed ? resumed->step : -1);
    if (master) { token_losses_open(&run->token_losses, resumed != NULL, keep); }
}

// -h 1: the eval file, as llm.c: one that is not there is noted and the eval
// skipped; one that is there must be good.
static void hellaswag_init(TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, int vocab_size) {
    if (access(cfg->hellaswag_path, F_OK) != 0) {
        if (mesh->world_rank == 0) {
            printf("note: -h 1: no HellaSwag eval file at %s (-hf FILE names another; llm.c's "
                   "dev/data/hellaswag.py writes it): skipping the eval\n", cfg->hellaswag_path);
        }
        return;
    }
    char why[512];
    if (evalloader_init(&run->eval_loader, cfg->hellaswag_path, cfg->B, cfg->T, mesh->dp_rank, mesh->dp_size,
                        vocab_size, why, sizeof(why)) != 0) {
        fatal_everywhere("-h 1: eval file '%s': %s", cfg->hellaswag_path, why);
    }
    run->run_hellaswag = 1;
}

// -x -1: one epoch, as llm.c counts it: the train data's tokens over the tokens of
// a step (-d), rounded down. Data shorter than one step is an error: llm.c would
// train no step and say nothing.
static int epoch_steps(const TrainConfig *cfg, const DataLoader *train, int64_t step_tokens) {
    uint64_t steps = (uint64_t)train->total_tokens / (uint64_t)step_tokens;
    if (steps == 0) {
        fatal_everywhere("-x -1 trains one epoch, but the %s data holds %zu tokens, fewer than the %lld of one step "
                         "(-d): lower -d, or give -x", cfg->overfit_single_batch ? "-j (-a 1)" : "-i",
                         train->total_tokens, (long long)step_tokens);
    }
    if (steps > INT32_MAX) {
        fatal_everywhere("-x -1: one epoch of the train data is %llu steps, more than the 2^31 - 1 a run counts: "
                         "give -x", (unsigned long long)steps);
    }
    return (int)steps;
}

// The padded row length a run starts with: the layout's for T (packed: its least,
// grown by the data; solver: whole chunks of -cc on every rank).
static int run_padded_len(const TrainConfig *cfg, CpLayoutKind layout) {
    if (layout == CP_LAYOUT_SOLVER) { return cp_solver_padded_len(cfg->T, cfg->cp_size, cfg->chunk); }
    return cp_padded_len(layout, cfg->T, cfg->cp_size);
}

// The training data's loader of data-parallel replica dp_rank. -a 1 overfits the
// first batch of the validation data, read in order, as llm.c does; the training
// data is shuffled as llm.c shuffles it unless -sh 0, the validation data is read
// in order.
static void open_train_loader(DataLoader *dl, const TrainConfig *cfg, int dp_rank, int dp_size, int vocab_size) {
    const char *pattern = cfg->overfit_single_batch ? cfg->val_pattern : cfg->train_pattern;
    dataloader_init(dl, pattern, cfg->overfit_single_batch ? "-j (-a 1)" : "-i", cfg->B, cfg->T, dp_rank, dp_size,
                    vocab_size, cfg->shuffle && !cfg->overfit_single_batch, cfg->loss_masks);
}

// Opens the data of a run checked by check_run_against_model, and its outputs
// when it starts afresh (resume_step -1; a resumed run opens them once its
// checkpoint has been checked: train_run_resume).
static void train_run_init(TrainRun *run, const TrainConfig *cfg, CpLayoutKind layout, const Mesh *mesh,
                           GPT2Config c, int resume_step) {
    memset(run, 0, sizeof(*run));
    run->layout = layout;
    run->run_id = new_run_id();
    run->resumed = resume_step >= 0;
    run->start_step = run->resumed ? resume_step : 0;
    run->padded_T = run_padded_len(cfg, layout);
    run->local_T = run->padded_T / cfg->cp_size;
    open_train_loader(&run->train_loader, cfg, mesh->dp_rank, mesh->dp_size, c.vocab_size);
    if (cfg->val_every > 0) {
        dataloader_init(&run->val_loader, cfg->val_pattern, "-j", cfg->B, cfg->T, mesh->dp_rank, mesh->dp_size,
                        c.vocab_size, 0, cfg->loss_masks);
        // -m -1: the whole validation data, as llm.c counts it (its tokens over a batch's)
        size_t all = run->val_loader.total_tokens / ((size_t)mesh->dp_size * cfg->B * cfg->T);
        run->val_batches = cfg->val_batches == -1 ? (int)(all < INT32_MAX ? all : INT32_MAX) : cfg->val_batches;
    }
    // -d: a step of total_batch_size tokens is grad_accum_steps micro-batches of dp x B x T
    int64_t micro_tokens = (int64_t)mesh->dp_size * cfg->B * cfg->T;
    int64_t step_tokens = cfg->total_batch_size == -1 ? micro_tokens : cfg->total_batch_size;
    if (step_tokens % micro_tokens != 0) {
        fatal_everywhere("-d %lld is not a multiple of the %lld tokens of a micro-batch (dp %d x B %d x T %d)",
                         (long long)step_tokens, (long long)micro_tokens, mesh->dp_size, cfg->B, cfg->T);
    }
    run->grad_accum_steps = (int)(step_tokens / micro_tokens);
    run->micro_batches = (uint64_t)run->grad_accum_steps;
    run->tokens_per_step = (double)step_tokens;
    run->steps = cfg->steps >= 0 ? cfg->steps : epoch_steps(cfg, &run->train_loader, step_tokens);
    // the tokenizer only prints samples: a run that prints none does not read it
    if (cfg->sample_every > 0) { tokenizer_init(&run->tokenizer, cfg->tokenizer_path, c.vocab_size); }
    check_outputs_are_not_inputs(cfg);
    token_losses_init(&run->token_losses, cfg->token_loss_path, cfg->B, cfg->T, mesh->dp_size);
    if (!run->resumed) { open_run_outputs(run, cfg, mesh, NULL); }
    LrSchedule schedule = {(LrScheduleKind)lr_schedule_from_name(cfg->lr_schedule), cfg->learning_rate, cfg->warmup,
                           run->steps, cfg->final_lr_fraction};
    run->schedule = schedule;
    rng_seed(&run->sample_rng, SAMPLE_SEED);
    outlier_detector_init(&run->loss_outliers);
    outlier_detector_init(&run->grad_norm_outliers);
    if (cfg->hellaswag) { hellaswag_init(run, cfg, mesh, c.vocab_size); }
}

// Shards a batch of B rows of T tokens (inputs, targets and the targets' loss mask,
// NULL for none) for this rank into sh, the step's sharder (built here, freed by
// the caller); ends the job if the layout cannot.
// The packed layout's length depends on the data: a batch is padded to at least
// the longest one so far (the solver's is the same for every batch), so the buffers sized by run->local_T grow now and then
// but never shrink and regrow.
static void shard_rows(CpSharder *sh, const int *inputs, const int *targets, const unsigned char *loss_mask,
                       TrainRun *run, const TrainConfig *cfg, const Mesh *m, int max_seq_len) {
    cp_sharder_init(sh, run->layout, m->cp_rank, m->cp_size, max_seq_len, run_documents(cfg));
    sh->min_padded_len = run->padded_T;
    sh->chunk = cfg->chunk;
    if (cp_shard_batch(sh, inputs, targets, loss_mask, cfg->B, cfg->T) != CP_OK) {
        fatal_everywhere("%s", sh->error);
    }
    if (sh->layout.padded_seq_len > run->padded_T) {
        run->padded_T = sh->layout.padded_seq_len;
        run->local_T = sh->layout.local_len;
    }
}

static void train_run_free(TrainRun *run, const TrainConfig *cfg) {
    token_losses_free(&run->token_losses);
    release_output_dir();
    logger_free(&run->logger);
    tokenizer_free(&run->tokenizer);
    if (run->run_hellaswag) { evalloader_free(&run->eval_loader); }
    dataloader_free(&run->train_loader);
    if (cfg->val_every > 0) { dataloader_free(&run->val_loader); }
}

// The layout's balance over the CP ranks and the attention's bytes per rank and
// layer (cp/layout_balance.h, cp/attention_cost.h; group-cast's: the mean over the
// ranks of their plans) on the first batch replica 0 reads (a loader of its own:
// the run's reads on from where it stands), as every CP rank would shard it: with
// -dm 1 the data decides, and packed's length too.
static void first_batch_attention(const TrainRun *run, const TrainConfig *cfg, GPT2Config c, const Mesh *mesh,
                                  StartupFacts *facts) {
    DataLoader dl;
    open_train_loader(&dl, cfg, 0, mesh->dp_size, c.vocab_size);
    dataloader_next_batch(&dl);
    int cp = cfg->cp_size;
    CpSharder *sh = (CpSharder *)mallocCheck((size_t)cp * sizeof(CpSharder));
    facts->attention_known = cp_shard_every_rank(sh, cp, run->layout, c.max_seq_len, run_documents(cfg), cfg->chunk,
                                                 run->padded_T, dl.inputs, dl.targets, cfg->B, cfg->T) == CP_OK;
    // a batch the layout cannot shard gives no rows: the first step stops on it on every rank, saying why
    if (facts->attention_known) {
        facts->balance = cp_layout_balance(sh, cp, dl.inputs, cfg->B, cfg->T);
        CpAttentionKind kind = (CpAttentionKind)cp_attention_from_name(cfg->attention);
        facts->sent_is_mean = kind == CP_ATTENTION_GROUPCAST;
        AttentionCost most;
        facts->sent = kind == CP_ATTENTION_GROUPCAST
                          ? cp_groupcast_batch_cost(sh, cp, c.channels, &most)
                          : attention_cost(kind, cp, mesh->ulysses_size, cfg->B, sh[0].layout.local_len,
                                           c.channels, c.num_heads);
    }
    for (int r = 0; r < cp; r++) { cp_sharder_free(&sh[r]); }
    free(sh);
    dataloader_free(&dl);
}

// The start-up table (master only), a warning when threads outnumber cores
// (collective), and a note when samples will print token ids.
static void train_run_print_startup(const TrainRun *run, const TrainConfig *cfg, GPT2Config c, const Mesh *mesh,
                                    const TrainerMemory *tm, size_t num_parameters, const MemoryEstimate *memory) {
    warn_if_threads_outnumber_cores(mesh);
    if (mesh->world_rank != 0) { return; }
    StartupFacts facts = {tm->name, tm->transport, mesh, mesh->world_size, mesh->dp_size, run->padded_T, run->local_T,
                          num_parameters, run->steps, run->start_step, run->val_batches, memory, 0, {0, 0},
                          {0, 0, 0, 0, 0, 0}, 0};
    first_batch_attention(run, cfg, c, mesh, &facts);
    print_startup_table(cfg, c, &facts);
    print_flag_notes(cfg);
    if (cfg->sample_every > 0 && run->tokenizer.token_table == NULL) {
        printf("no tokenizer at %s: samples print token ids%s\n", cfg->tokenizer_path,
               strcmp(cfg->tokenizer_path, DEFAULT_TOKENIZER) == 0
                   ? " (the default is a path from the repository root: run from there, or pass -tk)" : "");
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

// llm.c's -sl / -sg: both detectors see every step's loss and gradient norm (the
// same on every rank), and the update is skipped when a z-score is above its
// threshold. Returns 1 to skip. A step with no target (its loss masks keep none)
// has neither a loss nor a gradient to judge: the detectors never see its zeros,
// which would pull their means down and make the next real step look an outlier.
static int skip_update(TrainRun *run, const TrainConfig *cfg, int master, const StepEnd *end) {
    if (end->targets == 0) { return 0; }
    double zloss = outlier_detector_update(&run->loss_outliers, end->loss);
    double zgrad = outlier_detector_update(&run->grad_norm_outliers, end->grad_norm);
    if (isfinite(zloss) && cfg->skip_loss_z != 0.0f && zloss > cfg->skip_loss_z) {
        if (master) { printf("skipping update due to loss z-score of %f\n", zloss); }
        return 1;
    }
    if (isfinite(zgrad) && cfg->skip_grad_z != 0.0f && zgrad > cfg->skip_grad_z) {
        if (master) { printf("skipping update due to grad z-score of %f\n", zgrad); }
        return 1;
    }
    return 0;
}

// After a training step: the progress line (master) and the log. A step with no
// target (its loss masks keep none) has no loss: the log's is NaN, and the step
// counts for the end's summary.
static void train_run_end_step(TrainRun *run, int master, int step, const StepEnd *end, float lr, double seconds) {
    run->total_step_seconds += seconds;
    int has_target = end->targets > 0;
    if (master) {
        print_progress(step, run->steps, end->loss, has_target, end->grad_norm, lr, seconds, run->tokens_per_step,
                       run->total_step_seconds / (step + 1));
    }
    if (!has_target) { run->no_target_steps++; }
    logger_log_train(&run->logger, step, has_target ? end->loss : NAN, lr, end->grad_norm);
}

// At the end of a run (master): how many of its training steps and validations
// had no target at all, since their lines and log entries hold no loss.
static void print_no_target_summary(const TrainRun *run, int master) {
    if (!master || (run->no_target_steps == 0 && run->no_target_vals == 0)) { return; }
    printf("no target: the loss masks kept none of the targets of %d of the %d training step(s) run and of %d "
           "validation(s): these have no loss (\"none\" above, NaN in main.log)\n", run->no_target_steps,
           run->steps - run->start_step, run->no_target_vals);
}

#endif // TRAIN_RUN_H
