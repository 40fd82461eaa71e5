/*
llm.c's learning-rate schedules (-k), with llm.c's formulas. Every one but
constant warms up linearly over the first `warmup` steps (step s gets
peak * (s + 1) / warmup), then:
    cosine    min + (peak - min) * (1 + cos(pi * r)) / 2,  r = (s - warmup) / (steps - warmup)
    linear    peak - (peak - min) * r
    constant  peak (no warmup either)
    wsd       warmup, stable at peak until 80% of the steps, then
              min + (peak - min) * (1 - sqrt(r)), r = (s - d) / (steps - d), d = (int)(0.8 * steps)
where min = peak * final_fraction (-q) and steps is the run's number of steps.
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>

typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD, LR_NUM_SCHEDULES } LrScheduleKind;

static const char *const lr_schedule_names[LR_NUM_SCHEDULES] = {"cosine", "linear", "constant", "wsd"};

// the kind of a -k name, or -1
static int lr_schedule_from_name(const char *name) {
    for (int i = 0; i < LR_NUM_SCHEDULES; i++) {
        if (strcmp(name, lr_schedule_names[i]) == 0) { return i; }
    }
    return -1;
}

typedef struct {
    LrScheduleKind kind;  // -k
    float peak;           // -l
    int warmup;           // -u
    int total_steps;      // the run's number of steps
    float final_fraction; // -q
} LrSchedule;

// the fraction of the way from `start` to the last step that `step` is; 1 past it
static float decay_ratio(int step, int start, int total_steps) {
    if (step >= total_steps) { return 1.0f; }
    return (float)(step - start) / (float)(total_steps - start);
}

// step counts from 0
static float learning_rate_at(const LrSchedule *s, int step) {
    float peak = s->peak, min_lr = s->peak * s->final_fraction;
    if (s->kind == LR_CONSTANT) { return peak; }
    if (step < s->warmup) { return peak * (float)(step + 1) / s->warmup; }
    switch (s->kind) {
    case LR_COSINE: {
        float coeff = 0.5f * (1.0f + cosf((float)M_PI * decay_ratio(step, s->warmup, s->total_steps)));
        return min_lr + coeff * (peak - min_lr);
    }
    case LR_LINEAR: return peak - decay_ratio(step, s->warmup, s->total_steps) * (peak - min_lr);
    case LR_WSD: {
        int decay_point = (int)(0.8f * s->total_steps);
        if (step < decay_point) { return peak; }
        return min_lr + (1.0f - sqrtf(decay_ratio(step, decay_point, s->total_steps))) * (peak - min_lr);
    }
    default: return peak;
    }
}

#endif // LLMC_SCHEDULERS_H
