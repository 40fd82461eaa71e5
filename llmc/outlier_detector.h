/*
llm.c's outlier detector (-sl, -sg): the z-score of each new value against a
window of the last 128 values, the new one included. Until the window is full
there is no z-score (NaN), so no update can be skipped in the first 128 steps.
Sums in double, updated as values enter and leave the window, as llm.c does, so
that a run here and an llm.c run skip the same steps.
*/
#ifndef LLMC_OUTLIER_DETECTOR_H
#define LLMC_OUTLIER_DETECTOR_H

#include <math.h>
#include <string.h>

#define OUTLIER_WINDOW 128

typedef struct {
    double window[OUTLIER_WINDOW];
    int count; // values seen, up to OUTLIER_WINDOW
    int index; // the oldest value, once the window is full
    double sum, sum_sq;
} OutlierDetector;

static void outlier_detector_init(OutlierDetector *d) { memset(d, 0, sizeof(*d)); }

// Adds x; returns its z-score in the window, NaN while the window fills.
static double outlier_detector_update(OutlierDetector *d, double x) {
    if (d->count < OUTLIER_WINDOW) {
        d->window[d->count++] = x;
        d->sum += x;
        d->sum_sq += x * x;
        return NAN;
    }
    double old = d->window[d->index];
    d->sum -= old;
    d->sum_sq -= old * old;
    d->sum += x;
    d->sum_sq += x * x;
    d->window[d->index] = x;
    d->index = (d->index + 1) % OUTLIER_WINDOW;
    double mean = d->sum / OUTLIER_WINDOW;
    double std = sqrt(d->sum_sq / OUTLIER_WINDOW - mean * mean);
    return std == 0.0 ? 0.0 : (x - mean) / std;
}

#endif // LLMC_OUTLIER_DETECTOR_H
