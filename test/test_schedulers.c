/*
The learning-rate schedules of -k against llm.c's formulas (llmc/schedulers.h
there), written out here again in double precision, for several warmups, run
lengths and final fractions, at every step of the run.
*/
#include <math.h>
#include <stdio.h>
#include "llmc/schedulers.h"
#include "test/lib/test_utils.h"

// llm.c's formulas, step from 0, in double
static double expected_lr(LrScheduleKind kind, double peak, int warmup, int steps, double frac, int step) {
    double min_lr = peak * frac;
    if (kind == LR_CONSTANT) { return peak; }
    if (step < warmup) { return peak * (step + 1) / warmup; }
    if (kind == LR_COSINE) {
        double r = (double)(step - warmup) / (steps - warmup);
        return min_lr + 0.5 * (1.0 + cos(M_PI * r)) * (peak - min_lr);
    }
    if (kind == LR_LINEAR) {
        double r = (double)(step - warmup) / (steps - warmup);
        return peak - r * (peak - min_lr);
    }
    // wsd: stable until 80% of the run (llm.c truncates 0.8 * steps to an int), then 1 - sqrt decay
    int decay_point = (int)(0.8 * steps);
    if (step < decay_point) { return peak; }
    double r = (double)(step - decay_point) / (steps - decay_point);
    return min_lr + (1.0 - sqrt(r)) * (peak - min_lr);
}

int main(void) {
    const int warmups[] = {0, 1, 7, 40};
    const int runs[] = {10, 50, 101};
    const float fracs[] = {1.0f, 0.1f, 0.0f};
    const float peak = 6e-4f;
    size_t checked = 0;
    for (int k = 0; k < LR_NUM_SCHEDULES; k++) {
        CHECK(lr_schedule_from_name(lr_schedule_names[k]) == k, "-k %s is not schedule %d", lr_schedule_names[k], k);
        double worst = 0.0;
        for (size_t w = 0; w < sizeof(warmups) / sizeof(warmups[0]); w++) {
            for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
                if (warmups[w] >= runs[r]) { continue; }
                for (size_t f = 0; f < sizeof(fracs) / sizeof(fracs[0]); f++) {
                    LrSchedule s = {(LrScheduleKind)k, peak, warmups[w], runs[r], fracs[f]};
                    for (int step = 0; step < runs[r]; step++) {
                        double want = expected_lr((LrScheduleKind)k, peak, warmups[w], runs[r], fracs[f], step);
                        double got = learning_rate_at(&s, step);
                        double err = fabs(got - want);
                        CHECK(err <= 1e-6 * peak, "-k %s -u %d, %d steps, -q %g, step %d: lr %.9g, formula %.9g",
                              lr_schedule_names[k], warmups[w], runs[r], fracs[f], step, got, want);
                        if (err > worst) { worst = err; }
                        checked++;
                    }
                }
            }
        }
        printf("ok   -k %-8s matches llm.c's formula (worst |error| %.2e of a peak of %g)\n", lr_schedule_names[k],
               worst, peak);
    }
    // the shapes at a glance: the last step of a decaying schedule ends near the floor
    LrSchedule cosine = {LR_COSINE, 1.0f, 0, 100, 0.1f};
    CHECK(fabsf(learning_rate_at(&cosine, 0) - 1.0f) < 1e-6f, "cosine does not start at the peak");
    CHECK(learning_rate_at(&cosine, 99) < 0.101f, "cosine does not end at the floor");
    CHECK(lr_schedule_from_name("cosin") == -1 && lr_schedule_from_name("") == -1, "a bad -k name is accepted");
    printf("PASS test_schedulers (%zu learning rates)\n", checked);
    return 0;
}
