/*
The run log, as llm.c writes it: <output dir>/main.log with one line per event,
    s:STEP trl:LOSS lr:LR norm:NORM   training loss, learning rate and gradient norm of step STEP (from 0)
    s:STEP tel:LOSS                   validation loss before step STEP
    s:STEP eval:ACC                   HellaSwag accuracy (-h 1) before step STEP
every value with 6 decimals (llm.c writes 4 for losses and 2 for norms; 6 tells
runs apart that agree to 1e-4), so llm.c's dev/vislog notebook reads it as is.
*/
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <stdio.h>
#include "utils.h"

typedef struct {
    FILE *fp; // NULL: logging off
} Logger;

static void logger_init(Logger *logger, const char *output_dir, int active, int resuming) {
    logger->fp = NULL;
    if (output_dir == NULL || !active) { return; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", output_dir);
    logger->fp = fopenCheck(path, resuming ? "a" : "w");
}

static void logger_log_train(Logger *logger, int step, float loss, float lr, float grad_norm) {
    if (!logger->fp) { return; }
    fprintf(logger->fp, "s:%d trl:%.6f lr:%.6f norm:%.6f\n", step, loss, lr, grad_norm);
    fflush(logger->fp);
}

static void logger_log_val(Logger *logger, int step, float loss) {
    if (!logger->fp) { return; }
    fprintf(logger->fp, "s:%d tel:%.6f\n", step, loss);
    fflush(logger->fp);
}

static void logger_log_eval(Logger *logger, int step, float accuracy) {
    if (!logger->fp) { return; }
    fprintf(logger->fp, "s:%d eval:%.6f\n", step, accuracy);
    fflush(logger->fp);
}

static void logger_free(Logger *logger) {
    if (logger->fp) { fclose(logger->fp); }
    logger->fp = NULL;
}

#endif // LLMC_LOGGER_H
