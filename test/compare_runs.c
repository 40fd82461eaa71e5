/*
compare_runs: checks that training runs at cp > 1 reproduce the cp 1 run (docs/DESIGN.md §5).

    compare_runs [--masked] STEPS PER_STEP REF_LOG REF_TL [NAME LOG TL]...

STEPS: the steps every run must have; PER_STEP: the per-token losses of one step
(dp * B * T). REF_LOG / LOG: a trainer's main.log (`s:STEP trl:LOSS` lines); REF_TL /
TL: its -tl file (float32 [steps][dp*B][T], global order).

For every run against the reference it asserts
  - the same steps 0..STEPS-1 in main.log, and STEPS * PER_STEP floats in the -tl file
  - |step loss - ref| <= 1e-5 at the first step and <= 1e-4 at every step
  - |token loss - ref| <= 1e-5 over the first step and <= 1e-4 over all steps
and that the reference itself is alive: its loss moves by more than 0.1 between
the first and the last step, and its per-token losses are not all equal (so that
a frozen or constant model cannot pass). A NaN anywhere is a failure.

--masked: runs with loss masks (-lm 1), whose -tl files hold NaN at the targets
their masks leave out. There a NaN of the reference is a masked target: the run
must have a NaN at exactly the same places, the differences are taken over the
other tokens, and the reference must mask some targets and learn others.

Prints a table of the largest differences; exits 1 if anything failed, after
naming every failure.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_STEP_TOL 1e-5
#define ALL_STEPS_TOL 1e-4
#define MIN_LOSS_CHANGE 0.1
#define MIN_TOKEN_SPREAD 0.1

static int failures = 0;

static void fail(const char *name, const char *what, double got, double limit) {
    printf("FAIL %s: %s = %.3g, limit %.3g\n", name, what, got, limit);
    failures++;
}

// Reads the training losses of main.log into losses[0..steps); returns the number
// of trl lines, or -1 when the file cannot be read or its steps are not 0, 1, 2, ...
static int read_log(const char *path, double *losses, int steps) {
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        printf("FAIL cannot open '%s'\n", path);
        return -1;
    }
    char line[256];
    int n = 0;
    while (fgets(line, sizeof(line), fp)) {
        int step;
        double loss;
        if (sscanf(line, "s:%d trl:%lf", &step, &loss) != 2) { continue; } // val lines etc.
        if (step != n) {
            printf("FAIL '%s': step %d where step %d was expected\n", path, step, n);
            fclose(fp);
            return -1;
        }
        if (n < steps) { losses[n] = loss; }
        n++;
    }
    fclose(fp);
    return n;
}

// Reads a -tl file of exactly count floats; returns 0 on success.
static int read_token_losses(const char *path, float *out, size_t count) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        printf("FAIL cannot open '%s'\n", path);
        return -1;
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    if (size != (long)(count * sizeof(float))) {
        printf("FAIL '%s': %ld bytes, expected %zu (%zu floats)\n", path, size, count * sizeof(float), count);
        fclose(fp);
        return -1;
    }
    size_t got = fread(out, sizeof(float), count, fp);
    fclose(fp);
    if (got != count) {
        printf("FAIL '%s': read %zu of %zu floats\n", path, got, count);
        return -1;
    }
    return 0;
}

// with --masked: NaN marks a masked target in the -tl files
static int masked_runs = 0;

// the largest |a - b| over n values; NaN when any difference is NaN, but for
// tokens both leave masked (--masked: NaN in both)
static double max_abs_diff_f(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (masked_runs && isnan(a[i]) && isnan(b[i])) { continue; }
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) { m = d; } // takes a NaN and keeps it
        if (isnan(m)) { return m; }
    }
    return m;
}

static double max_abs_diff_d(const double *a, const double *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) { m = d; }
        if (isnan(m)) { return m; }
    }
    return m;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--masked") == 0) {
        masked_runs = 1;
        argv++;
        argc--;
    }
    if (argc < 5 || (argc - 5) % 3 != 0) {
        fprintf(stderr, "usage: %s [--masked] STEPS PER_STEP REF_LOG REF_TL [NAME LOG TL]...\n", argv[0]);
        return 2;
    }
    int steps = atoi(argv[1]);
    long per_step = atol(argv[2]);
    if (steps < 2 || per_step < 2) {
        fprintf(stderr, "compare_runs: need at least 2 steps and 2 tokens per step\n");
        return 2;
    }
    size_t count = (size_t)steps * (size_t)per_step;
    double *ref_loss = (double *)malloc((size_t)steps * sizeof(double));
    double *run_loss = (double *)malloc((size_t)steps * sizeof(double));
    float *ref_tok = (float *)malloc(count * sizeof(float));
    float *run_tok = (float *)malloc(count * sizeof(float));
    if (!ref_loss || !run_loss || !ref_tok || !run_tok) {
        fprintf(stderr, "compare_runs: out of memory\n");
        return 2;
    }

    // the reference must be complete and alive
    int n = read_log(argv[3], ref_loss, steps);
    if (n != steps) {
        printf("FAIL reference '%s': %d training steps, expected %d\n", argv[3], n, steps);
        return 1;
    }
    if (read_token_losses(argv[4], ref_tok, count) != 0) { return 1; }
    double change = fabs(ref_loss[steps - 1] - ref_loss[0]);
    printf("reference: step loss %.6f -> %.6f (change %.6f)\n", ref_loss[0], ref_loss[steps - 1], change);
    if (!(change > MIN_LOSS_CHANGE)) { fail("reference", "|last - first step loss|", change, MIN_LOSS_CHANGE); }
    float lo = INFINITY, hi = -INFINITY;
    size_t masked = 0;
    for (size_t i = 0; i < count; i++) {
        if (masked_runs && isnan(ref_tok[i])) {
            masked++;
            continue;
        }
        if (!isfinite(ref_tok[i])) {
            printf("FAIL reference: token loss %zu is %g\n", i, ref_tok[i]);
            failures++;
            break;
        }
        if (ref_tok[i] < lo) { lo = ref_tok[i]; }
        if (ref_tok[i] > hi) { hi = ref_tok[i]; }
    }
    printf("reference: token losses in [%.4f, %.4f]", lo, hi);
    if (masked_runs) { printf(", %zu of %zu targets masked", masked, count); }
    printf("\n");
    if (masked_runs && (masked == 0 || masked == count)) {
        printf("FAIL reference: --masked, but %zu of its %zu targets are masked\n", masked, count);
        failures++;
    }
    if (!((double)hi - lo > MIN_TOKEN_SPREAD)) { fail("reference", "token loss spread", (double)hi - lo, MIN_TOKEN_SPREAD); }
    // the mean of the first step's token losses is the first step loss: ties the
    // -tl file to main.log (every target of this data is valid, or --masked, every
    // one its mask keeps)
    double mean = 0.0;
    long learned = 0;
    for (long i = 0; i < per_step; i++) {
        if (masked_runs && isnan(ref_tok[i])) { continue; }
        mean += ref_tok[i];
        learned++;
    }
    mean /= learned;
    double mean_diff = fabs(mean - ref_loss[0]);
    printf("reference: mean token loss of step 0 %.6f, step loss %.6f\n", mean, ref_loss[0]);
    if (!(mean_diff <= FIRST_STEP_TOL)) { fail("reference", "|mean token loss - step loss| at step 0", mean_diff, FIRST_STEP_TOL); }

    printf("\n%-28s %18s %18s %18s %18s\n", "config", "max|dloss| step0", "max|dloss| all", "max|dtok| step0",
           "max|dtok| all");
    for (int a = 5; a < argc; a += 3) {
        const char *name = argv[a];
        int m = read_log(argv[a + 1], run_loss, steps);
        if (m != steps) {
            printf("FAIL %s: '%s' has %d training steps, expected %d\n", name, argv[a + 1], m, steps);
            failures++;
            continue;
        }
        if (read_token_losses(argv[a + 2], run_tok, count) != 0) {
            printf("FAIL %s: token losses unreadable\n", name);
            failures++;
            continue;
        }
        double loss0 = fabs(run_loss[0] - ref_loss[0]);
        double loss_all = max_abs_diff_d(run_loss, ref_loss, (size_t)steps);
        double tok0 = max_abs_diff_f(run_tok, ref_tok, (size_t)per_step);
        double tok_all = max_abs_diff_f(run_tok, ref_tok, count);
        printf("%-28s %18.3e %18.3e %18.3e %18.3e\n", name, loss0, loss_all, tok0, tok_all);
        if (!(loss0 <= FIRST_STEP_TOL)) { fail(name, "|step loss - ref| at step 0", loss0, FIRST_STEP_TOL); }
        if (!(loss_all <= ALL_STEPS_TOL)) { fail(name, "max |step loss - ref| over all steps", loss_all, ALL_STEPS_TOL); }
        if (!(tok0 <= FIRST_STEP_TOL)) { fail(name, "max |token loss - ref| at step 0", tok0, FIRST_STEP_TOL); }
        if (!(tok_all <= ALL_STEPS_TOL)) { fail(name, "max |token loss - ref| over all steps", tok_all, ALL_STEPS_TOL); }
    }
    free(ref_loss);
    free(run_loss);
    free(ref_tok);
    free(run_tok);
    if (failures > 0) {
        printf("\n%d check(s) failed\n", failures);
        return 1;
    }
    printf("\nall runs match the reference\n");
    return 0;
}
