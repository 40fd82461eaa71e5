/*
What a run does between its training steps, shared by both trainers, and when:
the validation loss, llm.c's HellaSwag accuracy, and the predicates that say at
which steps these, samples and checkpoints run. The forward pass is the
trainer's own (ForwardStep), so the same loops serve the CPU and the GPU.
*/
#ifndef TRAIN_BETWEEN_STEPS_H
#define TRAIN_BETWEEN_STEPS_H

#include <stdio.h>
#include <stdlib.h>
#include "../cp/comm.h"
#include "../cp/loss.h"
#include "../cp/sharder.h"
#include "../llmc/dataloader.h"
#include "../llmc/eval_loader.h"
#include "../llmc/utils.h"
#include "config.h"
#include "run.h"

// The forward pass of a batch (B rows of T inputs and targets, and the targets' loss
// mask or NULL) on this rank's shard (the trainer's own); returns the loss
// statistics of the global batch. The sharder is built by it and freed by the caller.
typedef LossStats (*ForwardStep)(void *trainer, const int *inputs, const int *targets,
                                 const unsigned char *loss_mask, CpSharder *sh);
// The per-token losses of the last forward pass, (B, local T) on the host.
typedef const float *(*ShardLosses)(void *trainer);

// The validation before step `step`: the mean loss over the first val_batches
// batches of the validation data, printed (master) and logged. When the loss
// masks keep none of their targets there is no loss: the line says so, the log
// holds NaN, and the run counts it for its end's summary.
static void validate(ForwardStep forward_step, void *trainer, TrainRun *run, int master, int step) {
    DataLoader *val_loader = &run->val_loader;
    dataloader_reset(val_loader);
    LossStats total = {0.0, 0.0};
    for (int i = 0; i < run->val_batches; i++) {
        CpSharder sh;
        dataloader_next_batch(val_loader);
        LossStats s = forward_step(trainer, val_loader->inputs, val_loader->targets, val_loader->loss_mask, &sh);
        cp_sharder_free(&sh);
        total.loss_sum += s.loss_sum;
        total.valid_count += s.valid_count;
    }
    if (total.valid_count == 0) {
        run->no_target_vals++;
        if (master) { printf("val loss none (no target: the loss masks keep none)\n"); }
        logger_log_val(&run->logger, step, NAN);
        return;
    }
    float val_loss = mean_loss(total);
    if (master) { printf("val loss %.6f\n", val_loss); }
    logger_log_val(&run->logger, step, val_loss);
}

// -h 1: llm.c's HellaSwag accuracy over the eval file. Every replica runs its share
// of the examples; each batch's per-token losses are gathered over the CP group to
// (B, T) rows, scored on every CP rank alike, and the right answers summed over
// the replicas. cp, dp: host-memory transports of the CP and DP groups.
static float hellaswag_accuracy(ForwardStep forward_step, ShardLosses shard_losses, void *trainer, TrainRun *run,
                                Comm *cp, Comm *dp) {
    EvalLoader *el = &run->eval_loader;
    float *rows = (float *)mallocCheck((size_t)el->B * el->T * sizeof(float));
    evalloader_reset(el);
    double correct = 0.0;
    for (int i = 0; i < el->num_batches; i++) {
        evalloader_next_batch(el);
        CpSharder sh;
        forward_step(trainer, el->inputs, el->targets, NULL, &sh);
        if (cp_gather_tokens(&sh, cp, shard_losses(trainer), (size_t)sh.layout.B * sh.layout.local_len, sizeof(float), 1, rows) != CP_OK) {
            fatal("%s", sh.error);
        }
        cp_sharder_free(&sh);
        correct += evalloader_correct(el, rows);
    }
    free(rows);
    dp->all_reduce_sum(dp, &correct, 1, COMM_DOUBLE);
    if (fatal_rank == 0) {
        printf("HellaSwag: %d/%d = %f\n", (int)correct, el->num_examples, correct / el->num_examples);
    }
    return (float)(correct / el->num_examples);
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

// llm.c's rule: HellaSwag at the validation steps after the first, and at the end
static int run_evaluates(const TrainRun *run, const TrainConfig *cfg, int step, int last_step) {
    return run_before_step(run, step) && run->run_hellaswag &&
           ((cfg->val_every > 0 && step > 0 && step % cfg->val_every == 0) || last_step);
}

static int run_samples(const TrainRun *run, const TrainConfig *cfg, int step, int last_step) {
    return run_before_step(run, step) && cfg->sample_every > 0 &&
           ((step > 0 && step % cfg->sample_every == 0) || last_step);
}

// llm.c's rule: -n N > 0 writes every N steps and at the end, -n 0 never
static int run_checkpoints(const TrainRun *run, const TrainConfig *cfg, int step, int last_step) {
    return run_before_step(run, step) && cfg->output_dir != NULL && cfg->checkpoint_every > 0 &&
           (last_step || (step > 0 && step % cfg->checkpoint_every == 0));
}

#endif // TRAIN_BETWEEN_STEPS_H
