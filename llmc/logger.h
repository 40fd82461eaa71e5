/*
The run log, as llm.c writes it: <output dir>/main.log with one line per event,
    s:STEP trl:LOSS lr:LR norm:NORM   training loss, learning rate and gradient norm of step STEP (from 0)
    s:STEP tel:LOSS                   validation loss before step STEP
    s:STEP eval:ACC                   HellaSwag accuracy (-h 1) before step STEP
every value with 6 decimals (llm.c writes 4 for losses and 2 for norms; 6 tells
runs apart that agree to 1e-4), so llm.c's dev/vislog notebook reads it as is.
A loss is nan where there is none: a step or validation whose loss masks keep no
target (-lm 1).

Every write is flushed and checked: a full disk or a vanished directory ends the
run naming main.log and the reason, instead of a run that exits 0 with an empty
log. A run that resumes from checkpoint N first cuts the log back to what it held
when that checkpoint was written (the training steps before N and the
validations and evaluations up to N: the checkpoint is written after step N's validation), so the
steps a crashed run logged past its checkpoint do not appear twice.
*/
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <stdio.h>
#include <string.h>
#include "utils.h"

typedef struct {
    FILE *fp; // NULL: logging off
    char path[4096];
} Logger;

// Whether a line of the log belongs to the run as it stood at checkpoint `step`.
// Lines that are not the log's own (a user's note) are kept.
static int log_line_before_checkpoint(const char *line, int step) {
    int s;
    char kind[8];
    if (sscanf(line, "s:%d %7[a-z]:", &s, kind) != 2) { return 1; }
    if (strcmp(kind, "trl") == 0) { return s < step; }
    if (strcmp(kind, "tel") == 0 || strcmp(kind, "eval") == 0) { return s <= step; }
    return 1;
}

// Rewrites the log at path (atomically) without the lines logged after checkpoint
// `step`; returns how many lines went.
static int log_cut_back(const char *path, int step) {
    char why[512];
    FILE *in = open_input_file(path, why, sizeof(why));
    if (in == NULL) { return 0; } // no log yet: nothing to cut
    AtomicFile af;
    atomic_open(&af, path);
    char line[1024];
    int dropped = 0;
    while (fgets(line, sizeof(line), in) != NULL) {
        if (log_line_before_checkpoint(line, step)) { fwriteCheck(line, 1, strlen(line), af.fp, af.tmp_path); }
        else { dropped++; }
    }
    if (ferror(in)) { fatal("cannot read '%s': %s", path, strerror(errno)); }
    fclose(in);
    atomic_commit(&af);
    return dropped;
}

// resume_step: the checkpoint a resumed run starts from, -1 for a fresh run
static void logger_init(Logger *logger, const char *output_dir, int active, int resume_step) {
    logger->fp = NULL;
    if (output_dir == NULL || !active) { return; }
    snprintf(logger->path, sizeof(logger->path), "%s/main.log", output_dir);
    if (resume_step >= 0) {
        int dropped = log_cut_back(logger->path, resume_step);
        if (dropped > 0) {
            printf("note: %s: %d line(s) logged after checkpoint %d (by a run that went on past it) are cut\n",
                   logger->path, dropped, resume_step);
        }
    }
    logger->fp = open_output_file(logger->path, resume_step >= 0);
}

__attribute__((format(printf, 2, 3)))
static void logger_line(Logger *logger, const char *fmt, ...) {
    if (!logger->fp) { return; }
    va_list args;
    va_start(args, fmt);
    int n = vfprintf(logger->fp, fmt, args);
    va_end(args);
    if (n < 0) { fatal("cannot write '%s': %s", logger->path, strerror(errno)); }
    fflushCheck(logger->fp, logger->path);
}

static void logger_log_train(Logger *logger, int step, float loss, float lr, float grad_norm) {
    logger_line(logger, "s:%d trl:%.6f lr:%.6f norm:%.6f\n", step, loss, lr, grad_norm);
}

static void logger_log_val(Logger *logger, int step, float loss) {
    logger_line(logger, "s:%d tel:%.6f\n", step, loss);
}

static void logger_log_eval(Logger *logger, int step, float accuracy) {
    logger_line(logger, "s:%d eval:%.6f\n", step, accuracy);
}

static void logger_free(Logger *logger) {
    if (logger->fp) { fcloseCheck(logger->fp, logger->path); }
    logger->fp = NULL;
}

#endif // LLMC_LOGGER_H
