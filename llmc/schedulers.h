/*
llm.c's learning-rate schedule: linear warmup over the first `warmup` steps, then
cosine decay from the peak to peak * final_fraction at the last step.
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>

typedef struct {
    float peak;           // -l
    int warmup;           // -u
    int total_steps;      // the run's number of steps
    float final_fraction; // -q
} CosineSchedule;

// step counts from 0
static float learning_rate_at(const CosineSchedule *s, int step) {
    float min_lr = s->peak * s->final_fraction;
    if (step < s->warmup) {
        return s->peak * (step + 1) / s->warmup;
    }
    if (step >= s->total_steps) {
        return min_lr;
    }
    float decay_ratio = (float)(step - s->warmup) / (float)(s->total_steps - s->warmup);
    float coeff = 0.5f * (1.0f + cosf((float)M_PI * decay_ratio));
    return min_lr + coeff * (s->peak - min_lr);
}

#endif // LLMC_SCHEDULERS_H
