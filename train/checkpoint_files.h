/*
Checkpoints a run can trust after a crash.

For step N (the optimizer steps done) the output directory holds
    model_N.bin       the weights, an llm.c model file (written by rank 0: llmc/checkpoint.h)
    state_N_R.bin     rank R's training state: step, mesh, data position,
                      sampling RNG, the outlier detectors, AdamW first and second
                      moments (of all the parameters, or at -z 1 of the rank's
                      shard), and optionally the rank's part of the fp32 master
                      weights
    DONE_N            written by rank 0 only after every rank's files are complete
(N printed as %08d, at least 8 digits, R as %05d.)

A checkpoint is one unit: every file of it records the run id of the job that
wrote it (64 random bits drawn at the job's start) and its step: the model file
in header slots llm.c leaves unused, each state file in its header, the DONE
marker as its text. A resume refuses a checkpoint whose files do not all carry the
same run id and step, so a file of another run (or another step) copied into the
directory never mixes in.

Every file is written to a temporary name, flushed to disk and renamed into place
(atomic_open / atomic_commit, llmc/utils.h), so a reader sees either the whole
file or none of it. Resume trusts only the newest step with a DONE_ marker: a
crash in the middle of writing step N leaves step N without its marker and the
previous checkpoint in charge; leftover .tmp files are never read.

State file (version 5): 256 int32 header
    [0] 20241207 magic  [1] 5 version  [2] step  [3] rank  [4] world size
    [5] cp  [6] dp  [7] layout (CpLayoutKind)  [8] B  [9] T
then 32 uint64: [0] number of parameters, [1] data shard, [2] data position
(tokens into the shard), [3] sampling RNG state, [4] padded row length the batches
are padded to at least (the packed layout's, which grows with the data), [5] the
train data's fingerprint, [6] its tokens, [7] its files, [8] the checksum of m and
v, [9] train batches read since the start of the data (a shuffled order replays
them), [10] 1 if the train data was shuffled (else 0), [11] the ZeRO stage (-z),
[12, 13] the range [begin, end) of the flat parameter vector whose optimizer state
the file holds (all of it at -z 0, the rank's shard at -z 1: train/zero.h), [14] 1
if the master-weights section follows the moments (else 0), [15] its checksum
(else 0), [16] the run id, [17] the most batches any step of the run read (so [9]
is at most step x [17]), [18] the bytes of the -tl file at the checkpoint and [19]
the checksum of its last TOKEN_LOSS_TAIL_BYTES before that (rank 0's; 0 without
-tl), [20] -dm, [21] -rp, [22] -lm (each 0 or 1: what a token sees, where it
is, and which targets count; a resume must run with the same), [23] the chunk size
of the solver layout (0 for the other layouts), [24..30] 0, [31] the checksum of the
whole header with itself 0; then the
two outlier detectors of -sl and -sg (llmc/outlier_detector.h), loss then gradient
norm, each uint64 count, uint64 index, double sum, double sum of squares, double
window[128]; then the -e text (STATE_TEXT_BYTES, NUL-padded); then m and
v, fp32, one value per parameter of the range each; then, if [14] says so, the
fp32 master weights of the range: written when the model file does not hold the
weights exactly (a bf16 model file), so that a resume takes them from here.
Checksums: FNV-1a (llmc/checksum.h), so that one flipped bit anywhere is found at
resume. (llm.c's own state files, magic 20240327, have another layout.)

One file of about 600 lines because the state file's format above and its
reader and writer below (with the streaming of a split position table's moments:
StateWriter, StateBuffers) are checked against each other line by line.
*/
#ifndef TRAIN_CHECKPOINT_FILES_H
#define TRAIN_CHECKPOINT_FILES_H

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../llmc/checkpoint.h"
#include "../llmc/checksum.h"
#include "../llmc/outlier_detector.h"
#include "../llmc/utils.h"

#define STATE_MAGIC 20241207
#define STATE_VERSION 5 // 5: -dm, -rp, -lm recorded; a version 4 file is refused (it does not say them)
#define STATE_FIELDS 32
#define STATE_TEXT_BYTES 4096 // a path of up to PATH_MAX - 1 bytes: longer ones are refused before a run starts
#define STATE_DETECTOR_BYTES ((4 + OUTLIER_WINDOW) * sizeof(uint64_t))
#define STATE_HEADER_BYTES \
    (256 * sizeof(int) + STATE_FIELDS * sizeof(uint64_t) + 2 * STATE_DETECTOR_BYTES + STATE_TEXT_BYTES)
#define TOKEN_LOSS_TAIL_BYTES 65536 // what identifies a -tl file as the checkpoint's

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
    uint64_t data_fingerprint, data_tokens, data_files; // the train data (-i) it was written with
    uint64_t moments_checksum; // of m and v
    uint64_t data_batches;  // train batches read since the start (a shuffled order replays them)
    uint64_t data_shuffled; // 1: the train data was read shuffled (-sh 1)
    uint64_t zero_stage;    // -z
    uint64_t shard_begin, shard_end; // the parameters [begin, end) whose optimizer state the file holds
    uint64_t has_master_weights;     // 1: the fp32 master weights of the range follow the moments
    uint64_t master_checksum;        // of those master weights (0 without them)
    uint64_t run_id;                 // of the job that wrote the checkpoint: in every file of it
    uint64_t micro_batches;          // the most batches any step of the run read (-d)
    uint64_t token_loss_bytes;       // the -tl file's bytes at the checkpoint (rank 0's; 0 without -tl) ...
    uint64_t token_loss_tail;        // ... and the checksum of its last TOKEN_LOSS_TAIL_BYTES (token_loss_tail)
    uint64_t document_masking;       // -dm
    uint64_t restart_positions;      // -rp
    uint64_t loss_masks;             // -lm
    uint64_t layout_chunk;           // -cc of the solver layout (0: another layout)
    OutlierDetector loss_outliers, grad_norm_outliers; // -sl, -sg
    char init[STATE_TEXT_BYTES];     // the run's -e
} TrainState;

// The checksum of the TOKEN_LOSS_TAIL_BYTES of file `path` before byte `bytes` (all
// of them when fewer): what a state records of the -tl file, so that a resume
// knows the file as the one its checkpoint's run wrote, wherever it now is, without
// reading all of it. 0, or -1 when the file cannot be read that far.
static int token_loss_tail(const char *path, uint64_t bytes, uint64_t *sum) {
    char why[256];
    unsigned char tail[TOKEN_LOSS_TAIL_BYTES];
    uint64_t from = bytes > TOKEN_LOSS_TAIL_BYTES ? bytes - TOKEN_LOSS_TAIL_BYTES : 0;
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { return -1; }
    int ok = fseeko(fp, (off_t)from, SEEK_SET) == 0 && fread(tail, 1, bytes - from, fp) == bytes - from;
    fclose(fp);
    *sum = fnv1a(FNV_OFFSET, tail, bytes - from);
    return ok ? 0 : -1;
}

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

// the step of a name that is exactly DONE_ and at least 8 digits (%08d of a step
// up to 2^31 - 1), or -1
static int done_marker_step(const char *name) {
    size_t len = strlen(name);
    if (strncmp(name, "DONE_", 5) != 0 || len < 13) { return -1; }
    long long step = 0;
    for (size_t i = 5; i < len; i++) {
        if (!isdigit((unsigned char)name[i])) { return -1; }
        step = step * 10 + (name[i] - '0');
        if (step > 2147483647LL) { return -1; }
    }
    if (len > 13 && name[5] == '0') { return -1; } // %08d pads to 8 digits, never more
    return (int)step;
}

static int compare_steps_newest_first(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

// The steps with a DONE_ marker in dir, newest first, into *steps (malloc'd, the
// caller frees); returns how many (0 also when dir does not exist).
static int done_marker_steps(const char *dir, int **steps) {
    *steps = NULL;
    DIR *d = opendir(dir);
    if (d == NULL) { return 0; }
    int n = 0, capacity = 0;
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        int step = done_marker_step(entry->d_name);
        if (step < 0) { continue; }
        if (n == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            int *grown = (int *)realloc(*steps, (size_t)capacity * sizeof(int));
            if (grown == NULL) { fatal("out of memory listing the checkpoints of '%s'", dir); }
            *steps = grown;
        }
        (*steps)[n++] = step;
    }
    closedir(d);
    if (n > 0) { qsort(*steps, (size_t)n, sizeof(int), compare_steps_newest_first); }
    return n;
}

// the newest step with a DONE_ marker in dir, or -1 (also when dir does not exist)
static int latest_complete_checkpoint(const char *dir) {
    int *steps;
    int n = done_marker_steps(dir, &steps);
    int latest = n > 0 ? steps[0] : -1;
    free(steps);
    return latest;
}

// The DONE marker of checkpoint `step` holds "run RUN_ID step STEP\n" (run id in hex).
static void write_done_marker(const char *dir, CheckpointTag tag) {
    char path[4096], text[64];
    done_path(path, sizeof(path), dir, tag.step);
    int n = snprintf(text, sizeof(text), "run %016llx step %d\n", (unsigned long long)tag.run_id, tag.step);
    AtomicFile af;
    atomic_open(&af, path);
    fwriteCheck(text, 1, (size_t)n, af.fp, af.tmp_path);
    atomic_commit(&af);
}

// The run id and step the DONE marker of `step` records; 0, or -1 with the reason in why.
static int read_done_marker(const char *dir, int step, CheckpointTag *tag, char *why, size_t why_size) {
    char path[4096], text[64] = "";
    done_path(path, sizeof(path), dir, step);
    FILE *fp = open_input_file(path, why, why_size);
    if (fp == NULL) { return -1; }
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    unsigned long long id;
    if (sscanf(text, "run %16llx step %d", &id, &tag->step) != 2) {
        return problem(why, why_size, "records no run id and step: not a marker of this trainer");
    }
    tag->run_id = id;
    return 0;
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

// the uint64 fields [0, 24) of a state, in file order
#define STATE_U64_FIELDS 24
static void state_u64_fields(TrainState *s, uint64_t *fields[STATE_U64_FIELDS]) {
    uint64_t *order[STATE_U64_FIELDS] = {&s->num_parameters, &s->data_shard, &s->data_position, &s->rng_state,
                                         &s->padded_len, &s->data_fingerprint, &s->data_tokens, &s->data_files,
                                         &s->moments_checksum, &s->data_batches, &s->data_shuffled, &s->zero_stage,
                                         &s->shard_begin, &s->shard_end, &s->has_master_weights,
                                         &s->master_checksum, &s->run_id, &s->micro_batches, &s->token_loss_bytes,
                                         &s->token_loss_tail, &s->document_masking, &s->restart_positions,
                                         &s->loss_masks, &s->layout_chunk};
    memcpy(fields, order, sizeof(order));
}

// An outlier detector as the state file stores it (STATE_DETECTOR_BYTES): count,
// index, sum, sum of squares, window
static void state_encode_detector(const OutlierDetector *d, unsigned char *bytes) {
    uint64_t count = (uint64_t)d->count, index = (uint64_t)d->index;
    memcpy(bytes, &count, 8);
    memcpy(bytes + 8, &index, 8);
    memcpy(bytes + 16, &d->sum, 8);
    memcpy(bytes + 24, &d->sum_sq, 8);
    memcpy(bytes + 32, d->window, OUTLIER_WINDOW * sizeof(double));
}

// 0, or -1 when the stored detector cannot be one (a count or index outside the
// window, a value that is not finite)
static int state_decode_detector(const unsigned char *bytes, OutlierDetector *d) {
    uint64_t count, index;
    memcpy(&count, bytes, 8);
    memcpy(&index, bytes + 8, 8);
    memcpy(&d->sum, bytes + 16, 8);
    memcpy(&d->sum_sq, bytes + 24, 8);
    memcpy(d->window, bytes + 32, OUTLIER_WINDOW * sizeof(double));
    if (count > OUTLIER_WINDOW || index >= OUTLIER_WINDOW || (count < OUTLIER_WINDOW && index != 0) ||
        !isfinite(d->sum) || !isfinite(d->sum_sq)) {
        return -1;
    }
    for (int i = 0; i < OUTLIER_WINDOW; i++) {
        if (!isfinite(d->window[i])) { return -1; }
    }
    d->count = (int)count;
    d->index = (int)index;
    return 0;
}

// the checksum of the optimizer moments, as the state file records it
static uint64_t moments_checksum(const float *m, const float *v, uint64_t count) {
    uint64_t sum = fnv1a(FNV_OFFSET, m, count * sizeof(float));
    return fnv1a(sum, v, count * sizeof(float));
}

// the parameters whose optimizer state (and master weights) a state file holds
static uint64_t state_shard_count(const TrainState *s) { return s->shard_end - s->shard_begin; }

// the bytes of a state file with header s
static long state_file_bytes(const TrainState *s) {
    return (long)STATE_HEADER_BYTES + (2 + (s->has_master_weights ? 1 : 0)) * (long)(state_shard_count(s) * sizeof(float));
}

// The header bytes of s (STATE_HEADER_BYTES), checksum included.
static void state_encode_header(const TrainState *s, unsigned char *bytes) {
    int header[256];
    uint64_t fields[STATE_FIELDS];
    memset(header, 0, sizeof(header));
    memset(fields, 0, sizeof(fields));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    TrainState copy = *s;
    int *ints[STATE_INT_FIELDS];
    state_int_fields(&copy, ints);
    for (int i = 0; i < STATE_INT_FIELDS; i++) { header[2 + i] = *ints[i]; }
    uint64_t *u64s[STATE_U64_FIELDS];
    state_u64_fields(&copy, u64s);
    for (int i = 0; i < STATE_U64_FIELDS; i++) { fields[i] = *u64s[i]; }
    memset(bytes, 0, STATE_HEADER_BYTES);
    unsigned char *at = bytes;
    memcpy(at, header, sizeof(header));
    at += sizeof(header) + sizeof(fields);
    state_encode_detector(&s->loss_outliers, at);
    state_encode_detector(&s->grad_norm_outliers, at + STATE_DETECTOR_BYTES);
    at += 2 * STATE_DETECTOR_BYTES;
    snprintf((char *)at, STATE_TEXT_BYTES, "%s", s->init);
    memcpy(bytes + sizeof(header), fields, sizeof(fields));
    fields[STATE_FIELDS - 1] = fnv1a(FNV_OFFSET, bytes, STATE_HEADER_BYTES);
    memcpy(bytes + sizeof(header), fields, sizeof(fields));
}

// A state file being written: its header first (rewritten at the end with the
// checksums), then the floats in order: the first moments, the second moments, and
// the master weights where there are any, each the parameters [shard_begin,
// shard_end) in llm.c's order, in as many pieces as the writer likes.
typedef struct {
    AtomicFile af;
    TrainState s;
    uint64_t moments_sum, master_sum; // the checksums of what was written so far
    uint64_t floats;                  // floats written so far
} StateWriter;

// master: whether the master weights will follow the moments
static void state_write_open(StateWriter *w, const char *path, const TrainState *s, int master) {
    w->s = *s;
    w->s.has_master_weights = master != 0;
    w->moments_sum = FNV_OFFSET;
    w->master_sum = FNV_OFFSET;
    w->floats = 0;
    unsigned char header[STATE_HEADER_BYTES];
    memset(header, 0, sizeof(header));
    atomic_open(&w->af, path);
    fwriteCheck(header, 1, sizeof(header), w->af.fp, w->af.tmp_path);
}

// The next n floats of the file.
static void state_write_floats(StateWriter *w, const float *x, size_t n) {
    int master = w->floats >= 2 * state_shard_count(&w->s);
    uint64_t *sum = master ? &w->master_sum : &w->moments_sum;
    *sum = fnv1a(*sum, x, n * sizeof(float));
    w->floats += n;
    fwriteCheck(x, sizeof(float), n, w->af.fp, w->af.tmp_path);
}

// The header with the checksums, and the file in place. Every float must have come.
static void state_write_close(StateWriter *w) {
    uint64_t count = state_shard_count(&w->s);
    if (w->floats != (2 + (uint64_t)w->s.has_master_weights) * count) {
        fatal("state file '%s': %llu floats written of %llu", w->af.tmp_path, (unsigned long long)w->floats,
              (unsigned long long)((2 + w->s.has_master_weights) * count));
    }
    w->s.moments_checksum = w->moments_sum;
    w->s.master_checksum = w->s.has_master_weights ? w->master_sum : 0;
    unsigned char header[STATE_HEADER_BYTES];
    state_encode_header(&w->s, header);
    if (fseeko(w->af.fp, 0, SEEK_SET) != 0) { fatal("cannot rewrite the header of '%s': %s", w->af.tmp_path, strerror(errno)); }
    fwriteCheck(header, 1, sizeof(header), w->af.fp, w->af.tmp_path);
    atomic_commit(&w->af);
}

// m, v: the moments of the parameters [s->shard_begin, s->shard_end), one float
// per parameter each; master: NULL, or the fp32 master weights of that range (the
// section is then written and flagged). The checksums are computed here.
static void state_write(const char *path, const TrainState *s, const float *m, const float *v, const float *master) {
    StateWriter w;
    uint64_t count = state_shard_count(s);
    state_write_open(&w, path, s, master != NULL);
    state_write_floats(&w, m, count);
    state_write_floats(&w, v, count);
    if (master != NULL) { state_write_floats(&w, master, count); }
    state_write_close(&w);
}

// Reads the header of a state file of `size` bytes from fp into s and checks it,
// and that the file holds the moments of a model of num_parameters parameters
// (0: of any model, and the size is not checked).
static int state_read_header(FILE *fp, long size, TrainState *s, uint64_t num_parameters, char *why,
                             size_t why_size) {
    if (size < (long)STATE_HEADER_BYTES) {
        return problem(why, why_size, "%ld bytes, shorter than its header", size);
    }
    unsigned char bytes[STATE_HEADER_BYTES];
    int header[256];
    uint64_t fields[STATE_FIELDS];
    if (fread(bytes, 1, sizeof(bytes), fp) != sizeof(bytes)) { return problem(why, why_size, "cannot read its header"); }
    memcpy(header, bytes, sizeof(header));
    memcpy(fields, bytes + sizeof(header), sizeof(fields));
    if (header[0] != STATE_MAGIC) {
        return problem(why, why_size, "bad magic %d (expected %d)", header[0], STATE_MAGIC);
    }
    if (header[1] == 4) {
        // version 4 is version 5 without -dm, -rp, -lm: a resume cannot tell whether it continues the same training
        return problem(why, why_size, "version 4, written before state files recorded -dm, -rp and -lm, which a resume "
                       "must compare: resume it with the trainer that wrote it, or start afresh");
    }
    if (header[1] != STATE_VERSION) {
        return problem(why, why_size, "version %d, only %d is supported", header[1], STATE_VERSION);
    }
    uint64_t recorded = fields[STATE_FIELDS - 1];
    memset(bytes + sizeof(header) + (STATE_FIELDS - 1) * sizeof(uint64_t), 0, sizeof(uint64_t));
    if (fnv1a(FNV_OFFSET, bytes, sizeof(bytes)) != recorded) {
        return problem(why, why_size, "its header does not match its checksum: the file was damaged after it was "
                       "written");
    }
    int *ints[STATE_INT_FIELDS];
    state_int_fields(s, ints);
    for (int i = 0; i < STATE_INT_FIELDS; i++) { *ints[i] = header[2 + i]; }
    uint64_t *u64s[STATE_U64_FIELDS];
    state_u64_fields(s, u64s);
    for (int i = 0; i < STATE_U64_FIELDS; i++) { *u64s[i] = fields[i]; }
    const unsigned char *at = bytes + sizeof(header) + sizeof(fields);
    if (state_decode_detector(at, &s->loss_outliers) != 0 ||
        state_decode_detector(at + STATE_DETECTOR_BYTES, &s->grad_norm_outliers) != 0) {
        return problem(why, why_size, "corrupt header: an outlier detector (-sl, -sg) that cannot be");
    }
    at += 2 * STATE_DETECTOR_BYTES;
    memcpy(s->init, at, STATE_TEXT_BYTES);
    s->init[STATE_TEXT_BYTES - 1] = '\0';
    if (s->step < 0 || s->rank < 0 || s->world_size < 1 || s->rank >= s->world_size || s->cp_size < 1 ||
        s->dp_size < 1 || (long)s->cp_size * s->dp_size != s->world_size || s->layout < 0 ||
        s->B < 1 || s->T < 1 || s->padded_len < 1 || s->padded_len > (uint64_t)s->T * 2 * s->cp_size ||
        s->zero_stage > 1 || s->shard_begin > s->shard_end || s->shard_end > s->num_parameters ||
        s->has_master_weights > 1 || (s->zero_stage == 0 && (s->shard_begin != 0 || s->shard_end != s->num_parameters)) ||
        s->micro_batches < 1 || s->micro_batches > 2147483647ULL || s->document_masking > 1 ||
        s->restart_positions > 1 || s->loss_masks > 1) {
        return problem(why, why_size, "corrupt header (step %d, rank %d, world %d, cp %d, dp %d, layout %d, B %d, T %d, "
                       "padded length %llu, -z %llu, parameters [%llu, %llu) of %llu, master weights %llu, batches "
                       "per step %llu, -dm %llu, -rp %llu, -lm %llu)", s->step, s->rank, s->world_size, s->cp_size,
                       s->dp_size, s->layout, s->B, s->T, (unsigned long long)s->padded_len,
                       (unsigned long long)s->zero_stage, (unsigned long long)s->shard_begin,
                       (unsigned long long)s->shard_end, (unsigned long long)s->num_parameters,
                       (unsigned long long)s->has_master_weights, (unsigned long long)s->micro_batches,
                       (unsigned long long)s->document_masking, (unsigned long long)s->restart_positions,
                       (unsigned long long)s->loss_masks);
    }
    if (num_parameters == 0) { return 0; }
    if (s->num_parameters != num_parameters) {
        return problem(why, why_size, "optimizer state of %llu parameters, the model has %llu",
                       (unsigned long long)s->num_parameters, (unsigned long long)num_parameters);
    }
    long expected = state_file_bytes(s);
    if (size != expected) {
        return problem(why, why_size, "%ld bytes, expected %ld for %llu parameters%s", size, expected,
                       (unsigned long long)state_shard_count(s), s->has_master_weights ? " and their master weights" : "");
    }
    return 0;
}

// Where a state file's payload goes: the moments (and master weights) of the
// parameters [begin, end), the range the reader holds. A reader that holds only
// some rows of the position table (cp/position_table.h) names the table's floats
// [table_at, table_at + table_floats) of the range, and the part of them it keeps,
// [keep_at, keep_at + keep_floats) of the table, which its m and v hold in room for
// room_floats (the rest of the room stays 0): the table's other rows pass through
// scratch (scratch_floats) to be checksummed and dropped. table_floats 0: all held.
typedef struct {
    float *m, *v;   // the held floats each
    float *master;  // (end - begin): filled when the file has master weights; NULL: not wanted
    uint64_t begin, end;
    uint64_t table_at, table_floats, keep_at, keep_floats, room_floats;
    float *scratch;
    size_t scratch_floats;
} StateBuffers;

// Reads n floats of a moment into x (the held ones) from fp, the table's other
// rows through the scratch; chains their checksum onto *sum. 0, or -1.
static int state_read_moment(FILE *fp, const StateBuffers *buf, float *x, uint64_t *sum) {
    uint64_t n = buf->end - buf->begin, table_end = buf->table_at + buf->table_floats;
    uint64_t pieces[3][2] = {{0, buf->table_at}, {buf->table_at, table_end}, {table_end, n}}; // [from, to)
    for (int p = 0; p < 3; p++) {
        for (uint64_t at = pieces[p][0]; at < pieces[p][1];) {
            // the table: its kept floats straight into x, the others a scratch at a time
            uint64_t in_table = at - buf->table_at, to = pieces[p][1];
            float *dst = x + at;
            if (p == 1 && in_table < buf->keep_at) {
                to = at + (buf->keep_at - in_table < buf->scratch_floats ? buf->keep_at - in_table : buf->scratch_floats);
                dst = buf->scratch;
            } else if (p == 1 && in_table < buf->keep_at + buf->keep_floats) {
                to = buf->table_at + buf->keep_at + buf->keep_floats;
                dst = x + buf->table_at + (in_table - buf->keep_at);
            } else if (p == 1) {
                to = at + (pieces[p][1] - at < buf->scratch_floats ? pieces[p][1] - at : buf->scratch_floats);
                dst = buf->scratch;
            } else if (p == 2) {
                dst = x + buf->table_at + buf->room_floats + (at - table_end);
            }
            size_t count = (size_t)(to - at);
            if (fread_progress(dst, sizeof(float), count, fp) != count) { return -1; }
            *sum = fnv1a(*sum, dst, count * sizeof(float));
            at = to;
        }
    }
    return 0;
}

// Reads a state file: the header into s and, unless buf is NULL (the header alone),
// the payload into buf, whose range must be the file's; each part is checked
// against its checksum. Returns 0, or -1 with the reason in why (the caller names
// the file).
static int state_read(const char *path, TrainState *s, const StateBuffers *buf, uint64_t num_parameters, char *why,
                      size_t why_size) {
    FILE *fp = open_input_file(path, why, why_size);
    if (fp == NULL) { return -1; }
    int status = state_read_header(fp, file_size_of(fp, path), s, num_parameters, why, why_size);
    if (buf == NULL) {
        fclose(fp);
        return status;
    }
    if (status == 0 && (s->shard_begin != buf->begin || s->shard_end != buf->end)) {
        status = problem(why, why_size, "holds the optimizer state of the parameters [%llu, %llu) (-z %llu), this rank "
                         "holds [%llu, %llu)", (unsigned long long)s->shard_begin, (unsigned long long)s->shard_end,
                         (unsigned long long)s->zero_stage, (unsigned long long)buf->begin,
                         (unsigned long long)buf->end);
    }
    uint64_t n = buf->end - buf->begin, sum = FNV_OFFSET;
    if (status == 0 && (state_read_moment(fp, buf, buf->m, &sum) != 0 || state_read_moment(fp, buf, buf->v, &sum) != 0)) {
        status = problem(why, why_size, "cannot read its optimizer moments");
    }
    int master = status == 0 && s->has_master_weights && buf->master != NULL;
    if (master && fread_progress(buf->master, sizeof(float), n, fp) != n) {
        status = problem(why, why_size, "cannot read its master weights");
    }
    fclose(fp);
    if (status == 0 && sum != s->moments_checksum) {
        status = problem(why, why_size, "its optimizer moments do not match their checksum: the file was damaged "
                         "after it was written");
    }
    if (status == 0 && master && fnv1a(FNV_OFFSET, buf->master, n * sizeof(float)) != s->master_checksum) {
        status = problem(why, why_size, "its master weights do not match their checksum: the file was damaged "
                         "after it was written");
    }
    uint64_t held = n - buf->table_floats + buf->room_floats;
    for (uint64_t i = 0; status == 0 && i < held; i++) {
        if (!isfinite(buf->m[i]) || !isfinite(buf->v[i]) || buf->v[i] < 0.0f) {
            status = problem(why, why_size, "optimizer moment %llu of this rank's is not a valid number",
                             (unsigned long long)i);
        }
    }
    for (uint64_t i = 0; status == 0 && master && i < n; i++) {
        if (!isfinite(buf->master[i])) {
            status = problem(why, why_size, "master weight %llu is not a finite number",
                             (unsigned long long)(buf->begin + i));
        }
    }
    return status;
}

// Whether the files of checkpoint `step` in dir are all there (the model file,
// and the state file of every rank that wrote it: rank 0's says how many);
// returns 0, or -1 naming the first one missing in why. What the files hold is
// checked when they are read (a damaged file, or one of another type, ends the resume:
// it is not passed over).
static int checkpoint_files_present(const char *dir, int step, char *why, size_t why_size) {
    char path[4096], reason[512];
    struct stat st;
    model_path(path, sizeof(path), dir, step);
    if (stat(path, &st) != 0) { return problem(why, why_size, "'%s' is missing", path); }
    state_path(path, sizeof(path), dir, step, 0);
    if (stat(path, &st) != 0) { return problem(why, why_size, "'%s' is missing", path); }
    TrainState s;
    // a header that does not read is damage, not absence: its reader reports it
    if (state_read(path, &s, NULL, 0, reason, sizeof(reason)) != 0) { return 0; }
    for (int r = 1; r < s.world_size; r++) {
        state_path(path, sizeof(path), dir, step, r);
        if (stat(path, &st) != 0) { return problem(why, why_size, "'%s' is missing", path); }
    }
    return 0;
}


#endif // TRAIN_CHECKPOINT_FILES_H
