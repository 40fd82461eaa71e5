/*
The loss of a sharded batch.

Each rank holds the per-token losses of its own tokens. The mean loss of the step
is the sum over every valid target of the global batch (all dp replicas) divided
by the number of valid targets. The shards of one replica are disjoint and pad
slots carry the ignore target, so summing every rank's local sum and local count
counts each real token exactly once. A target its loss mask leaves out carries the
ignore target too (cp/sharder.h): it counts in neither.
*/
#ifndef CP_LOSS_H
#define CP_LOSS_H

#include "comm.h"
#include "../llmc/adamw.h"
#include "../llmc/classifier.h"
#include "../llmc/host_device.h"

typedef struct {
    double loss_sum;     // sum of the losses of the valid targets
    double valid_count;  // number of valid targets
} LossStats;

// losses, targets: (n) local tokens
static LossStats local_loss_stats(const float *losses, const int *targets, size_t n) {
    LossStats s = {0.0, 0.0};
    for (size_t i = 0; i < n; i++) {
        if (targets[i] == IGNORE_INDEX) { continue; }
        s.loss_sum += losses[i];
        s.valid_count += 1.0;
    }
    return s;
}

// Sums the stats over `comm` (the whole world for a training step).
static LossStats global_loss_stats(Comm *comm, LossStats local) {
    double buf[2] = {local.loss_sum, local.valid_count};
    comm->all_reduce_sum(comm, buf, 2, COMM_DOUBLE);
    LossStats s = {buf[0], buf[1]};
    return s;
}

// The valid targets among n local tokens.
static double local_valid_count(const int *targets, size_t n) {
    double count = 0.0;
    for (size_t i = 0; i < n; i++) { count += targets[i] != IGNORE_INDEX; }
    return count;
}

// The valid targets of the batch over `comm` (the world for a training step):
// every rank's among its n local tokens, summed.
static double global_valid_count(Comm *comm, const int *targets, size_t n) {
    double count = local_valid_count(targets, n);
    comm->all_reduce_sum(comm, &count, 1, COMM_DOUBLE);
    return count;
}

// The weight of one token's loss in the mean loss: 1 / (valid targets of the global
// batch), 0 when there are none. A training step needs it before its forward pass,
// in which the classifier's backward runs (llmc/classifier.h).
HOST_DEVICE static float loss_weight(double global_valid_count) {
    return global_valid_count > 0 ? (float)(1.0 / global_valid_count) : 0.0f;
}

// Gradient accumulation (-d) over micro-batches that hold different numbers of
// valid targets (loss masks). The classifier's backward runs inside each
// micro-batch's forward pass, before the step's total is known, so every
// micro-batch is weighted 1 / basis: basis = the valid targets of the step's first
// micro-batch that has any, times the number of micro-batches. That is the exact
// weight, 1 / total, whenever every micro-batch has as many (always without loss
// masks). Otherwise the accumulated gradient is basis / total times the gradient
// of the step's mean loss: step_gradient_scale, which the trainers apply to the
// gradient norm and the update's scale rather than in another pass over the
// gradients. basis: 0 before the step's first micro-batch.
HOST_DEVICE static double loss_weight_basis(double basis, double global_valid_count, int micro_steps) {
    return basis > 0 ? basis : global_valid_count * micro_steps;
}

static double step_gradient_scale(double basis, double step_valid_count) {
    return basis > 0 && step_valid_count > 0 ? basis / step_valid_count : 1.0;
}

static float mean_loss(LossStats s) {
    return s.valid_count > 0 ? (float)(s.loss_sum / s.valid_count) : 0.0f;
}

// What a training step gathers over its micro-batches: their loss statistics
// (each summed over the world) and the weight basis. The GPU trainer keeps it on
// the device (cp/loss.cuh), through these same functions.
typedef struct {
    LossStats stats;
    double weight_basis; // 0 before the step's first micro-batch with valid targets
} StepLoss;

HOST_DEVICE static void step_loss_start(StepLoss *s) {
    s->stats.loss_sum = 0.0;
    s->stats.valid_count = 0.0;
    s->weight_basis = 0.0;
}

// The loss weight of the step's next micro-batch, which holds global_valid_count
// valid targets (of the world), and takes part in the basis.
HOST_DEVICE static float step_loss_weight(StepLoss *s, double global_valid_count, int micro_steps) {
    s->weight_basis = loss_weight_basis(s->weight_basis, global_valid_count, micro_steps);
    return loss_weight(s->weight_basis);
}

// a micro-batch's statistics (summed over the world) into the step's, in micro-batch order
HOST_DEVICE static void step_loss_add(StepLoss *s, LossStats batch) {
    s->stats.loss_sum += batch.loss_sum;
    s->stats.valid_count += batch.valid_count;
}

// The end of a training step: the mean loss, the gradient norm of the step's mean
// loss, and the scale the update applies to the summed gradients (the remaining
// basis / total of step_gradient_scale, and the clip to GRAD_CLIP).
typedef struct {
    float loss;
    float grad_norm;
    float update_scale;
    double targets;     // the step's valid targets over the world: 0 when the loss masks keep none
} StepEnd;

// grad_norm_squared: the sum of squares of the summed gradients (the world's)
static StepEnd step_end_of(const StepLoss *s, double grad_norm_squared) {
    // the gradients hold the step's mean loss's gradient times 1 / grad_scale
    double grad_scale = step_gradient_scale(s->weight_basis, s->stats.valid_count);
    StepEnd end;
    end.loss = mean_loss(s->stats);
    end.grad_norm = (float)(grad_scale * sqrt(grad_norm_squared));
    end.update_scale = (float)grad_scale * grad_clip_scale(end.grad_norm);
    end.targets = s->stats.valid_count;
    return end;
}

#endif // CP_LOSS_H
