/*
Checkpoints a run can trust after a crash.

For step N (the optimizer steps done) the output directory holds
    model_N.bin       the weights, an llm.c fp32 checkpoint (written by rank 0)
    state_N_R.bin     rank R's training state: step, mesh, data position,
                      sampling RNG, AdamW first and second moments
    DONE_N            written by rank 0 only after every rank's files are complete
(N printed as %08d, R as %05d.)

Every file is written to a temporary name, flushed to disk and renamed into place
(atomic_open / atomic_commit, llmc/utils.h), so a reader sees either the whole
file or none of it. Resume trusts only the newest step with a DONE_ marker: a
crash in the middle of writing step N leaves step N without its marker and the
previous checkpoint in charge; leftover .tmp files are never read.

State file: 256 int32 header
    [0] 20241207 magic  [1] 1 version  [2] step  [3] rank  [4] world size
    [5] cp  [6] dp  [7] layout (CpLayoutKind)  [8] B  [9] T
then 8 uint64: number of parameters, data shard, data position (tokens into the
shard), sampling RNG state, padded row length the batches are padded to at least
(the packed layout's, which grows with the data), train batches read since the
start, 1 if the train data was shuffled (else 0), 0; then m and v, fp32, one value
per parameter each. (llm.c's own state files, magic 20240327, have another layout.)
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "utils.h"

#define STATE_MAGIC 20241207
#define STATE_VERSION 1
#define STATE_HEADER_BYTES (256 * sizeof(int) + 8 * sizeof(uint64_t))

typedef struct {
    int step;             // optimizer steps completed
    int rank, world_size; // of the run that wrote it
    int cp_size, dp_size, layout;
    int B, T;
    uint64_t num_parameters;
    uint64_t data_shard;    // train loader: shard index ...
    uint64_t data_position; // ... and token position of the next step's span
    uint64_t rng_state;     // sampling RNG
    uint64_t padded_len;    // batches are padded to at least this (packed: the longest so far)
    uint64_t data_batches;  // train batches read since the start (a shuffled order replays them)
    uint64_t data_shuffled; // 1: the train data was read shuffled (-sh 1)
} TrainState;

// ----------------------------------------------------------------------------
// paths

static void model_path(char *buf, size_t size, const char *dir, int step) {
    snprintf(buf, size, "%s/model_%08d.bin", dir, step);
}

static void state_path(char *buf, size_t size, const char *dir, int step, int rank) {
    snprintf(buf, size, "%s/state_%08d_%05d.bin", dir, step, rank);
}

static void done_path(char *buf, size_t size, const char *dir, int step) {
    snprintf(buf, size, "%s/DONE_%08d", dir, step);
}

// the step of a name that is exactly DONE_ and 8 digits, or -1
static int done_marker_step(const char *name) {
    if (strncmp(name, "DONE_", 5) != 0 || strlen(name) != 13) { return -1; }
    int step = 0;
    for (int i = 5; i < 13; i++) {
        if (!isdigit((unsigned char)name[i])) { return -1; }
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

// the newest step with a DONE_ marker in dir, or -1 (also when dir does not exist)
static int latest_complete_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) { return -1; }
    int latest = -1;
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        int step = done_marker_step(entry->d_name);
        if (step > latest) { latest = step; }
    }
    closedir(d);
    return latest;
}

static void write_done_marker(const char *dir, int step) {
    char path[4096];
    done_path(path, sizeof(path), dir, step);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_commit(&af);
}

// Removes the DONE_ marker of `step`, if there is one, for good (before that step
// is written again).
static void remove_done_marker(const char *dir, int step) {
    char path[4096];
    done_path(path, sizeof(path), dir, step);
    if (unlink(path) == 0) { fsync_parent_dir(path); }
    else if (errno != ENOENT) { fatal("cannot remove '%s': %s", path, strerror(errno)); }
}

// Removes a file of an old checkpoint (-nk); one already gone is fine.
static void remove_file_if_there(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) { fatal("cannot remove '%s': %s", path, strerror(errno)); }
}

// ----------------------------------------------------------------------------
// the state file

// the int32 header fields [2, 10) of a state, in file order
#define STATE_INT_FIELDS 8
static void state_int_fields(TrainState *s, int *fields[STATE_INT_FIELDS]) {
    int *order[STATE_INT_FIELDS] = {&s->step, &s->rank, &s->world_size, &s->cp_size, &s->dp_size, &s->layout,
                                    &s->B, &s->T};
    memcpy(fields, order, sizeof(order));
}

// m, v: s->num_parameters floats each
static void state_write(const char *path, const TrainState *s, const float *m, const float *v) {
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    TrainState copy = *s;
    int *ints[STATE_INT_FIELDS];
    state_int_fields(&copy, ints);
    for (int i = 0; i < STATE_INT_FIELDS; i++) { header[2 + i] = *ints[i]; }
    uint64_t fields[8] = {s->num_parameters, s->data_shard, s->data_position, s->rng_state, s->padded_len,
                          s->data_batches, s->data_shuffled, 0};
    AtomicFile af;
    atomic_open(&af, path);
    fwriteCheck(header, sizeof(int), 256, af.fp, path);
    fwriteCheck(fields, sizeof(uint64_t), 8, af.fp, path);
    fwriteCheck(m, sizeof(float), s->num_parameters, af.fp, path);
    fwriteCheck(v, sizeof(float), s->num_parameters, af.fp, path);
    atomic_commit(&af);
}

// Reads the header of a state file of `size` bytes from fp into s and checks it,
// and that the file holds the moments of a model of num_parameters parameters.
static int state_read_header(FILE *fp, long size, TrainState *s, uint64_t num_parameters, char *why,
                             size_t why_size) {
    if (size < (long)STATE_HEADER_BYTES) {
        return problem(why, why_size, "%ld bytes, shorter than its header", size);
    }
    int header[256];
    uint64_t fields[8];
    if (fread(header, sizeof(int), 256, fp) != 256 || fread(fields, sizeof(uint64_t), 8, fp) != 8) {
        return problem(why, why_size, "cannot read its header");
    }
    if (header[0] != STATE_MAGIC) {
        return problem(why, why_size, "bad magic %d (expected %d)", header[0], STATE_MAGIC);
    }
    if (header[1] != STATE_VERSION) {
        return problem(why, why_size, "version %d, only %d is supported", header[1], STATE_VERSION);
    }
    int *ints[STATE_INT_FIELDS];
    state_int_fields(s, ints);
    for (int i = 0; i < STATE_INT_FIELDS; i++) { *ints[i] = header[2 + i]; }
    s->num_parameters = fields[0];
    s->data_shard = fields[1];
    s->data_position = fields[2];
    s->rng_state = fields[3];
    s->padded_len = fields[4];
    s->data_batches = fields[5];
    s->data_shuffled = fields[6];
    if (s->step < 0 || s->rank < 0 || s->world_size < 1 || s->rank >= s->world_size || s->cp_size < 1 ||
        s->dp_size < 1 || (long)s->cp_size * s->dp_size != s->world_size || s->layout < 0 ||
        s->B < 1 || s->T < 1) {
        return problem(why, why_size, "corrupt header (step %d, rank %d, world %d, cp %d, dp %d, layout %d, B %d, T %d)",
                       s->step, s->rank, s->world_size, s->cp_size, s->dp_size, s->layout, s->B, s->T);
    }
    if (s->num_parameters != num_parameters) {
        return problem(why, why_size, "optimizer state of %llu parameters, the model has %llu",
                       (unsigned long long)s->num_parameters, (unsigned long long)num_parameters);
    }
    long expected = (long)STATE_HEADER_BYTES + 2 * (long)(num_parameters * sizeof(float));
    if (size != expected) {
        return problem(why, why_size, "%ld bytes, expected %ld for %llu parameters", size, expected,
                       (unsigned long long)num_parameters);
    }
    return 0;
}

// Reads a state file: the header into s and, unless m is NULL (the header alone),
// the moments into m and v (num_parameters each). Returns 0, or -1 with the reason
// in why (the caller names the file).
static int state_read(const char *path, TrainState *s, float *m, float *v, uint64_t num_parameters, char *why,
                      size_t why_size) {
    FILE *fp = open_input_file(path, why, why_size);
    if (fp == NULL) { return -1; }
    int status = state_read_header(fp, file_size_of(fp, path), s, num_parameters, why, why_size);
    if (m == NULL) {
        fclose(fp);
        return status;
    }
    if (status == 0 && (fread(m, sizeof(float), num_parameters, fp) != num_parameters ||
                        fread(v, sizeof(float), num_parameters, fp) != num_parameters)) {
        status = problem(why, why_size, "cannot read its optimizer moments");
    }
    fclose(fp);
    for (uint64_t i = 0; status == 0 && i < num_parameters; i++) {
        if (!isfinite(m[i]) || !isfinite(v[i]) || v[i] < 0.0f) {
            status = problem(why, why_size, "optimizer moment %llu is not a valid number", (unsigned long long)i);
        }
    }
    return status;
}

#endif // LLMC_CHECKPOINT_H
