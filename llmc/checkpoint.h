/*
llm.c's model files, read and written for a GPT-2 (llmc/gpt2.h).

Model file (llm.c's): 256 int32 header ([0] 20240326, [1] version, [2] maxT, [3] V,
[4] L, [5] NH, [6] C, [7] Vp), then every parameter in llm.c's order, as float32
(version 3) or bfloat16 (version 5: 2 bytes each, little endian, the upper half of
the fp32 pattern, rounded to nearest even: llmc/bf16.h). Both load, widened exactly
to fp32; a writer chooses the version (the GPU trainer's BF16 build writes 5, as
llm.c's bf16 build does; every other build 3). The model file carries the checksum
of its parameters as the file stores them (fp32 or bf16 bytes) in llm.c's unused
header slots [8..10] (checkpoint_put_checksum), so llm.c still reads it; a file
without it (written by llm.c) loads unchecked. A checkpoint's model file also
carries its run id and step in slots [11..14] (checkpoint_put_tag).

A run's checkpoints (train/checkpoint_files.h) are a model file of this format
beside each rank's state file.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "bf16.h"
#include "checksum.h"
#include "gpt2.h"
#include "gpt2_init.h"
#include "utils.h"

// ----------------------------------------------------------------------------
// the model file's parameters and their checksum

#define CHECKPOINT_MAGIC 20240326
#define CHECKPOINT_VERSION_FP32 3
#define CHECKPOINT_VERSION_BF16 5
#define MODEL_CHECKSUM_SLOT 8
#define MODEL_CHECKSUM_MARK 0x43534b31 // "1KSC": the slots hold a checksum
#define MODEL_BF16_CHUNK 16384 // parameters converted at a time: a small buffer whatever the model

// the bytes a model file of `version` (3 or 5) stores per parameter
static size_t model_bytes_per_parameter(int version) {
    return version == CHECKPOINT_VERSION_BF16 ? sizeof(uint16_t) : sizeof(float);
}

// params[0, n) rounded to bf16 (n <= MODEL_BF16_CHUNK) into bits
static void model_round_to_bf16(const float *params, size_t n, uint16_t *bits) {
    for (size_t i = 0; i < n; i++) { bits[i] = bf16_from_float(params[i]); }
}

// The checksum of n parameters as a model file of `version` stores them (the
// fp32 bytes, or those of their bf16 rounding), going on from sum (FNV_OFFSET
// for the first): what its header records, over every parameter in order.
static uint64_t model_params_checksum(uint64_t sum, const float *params, size_t n, int version) {
    if (version != CHECKPOINT_VERSION_BF16) { return fnv1a(sum, params, n * sizeof(float)); }
    uint16_t bits[MODEL_BF16_CHUNK];
    for (size_t i = 0; i < n; i += MODEL_BF16_CHUNK) {
        size_t m = n - i < MODEL_BF16_CHUNK ? n - i : MODEL_BF16_CHUNK;
        model_round_to_bf16(params + i, m, bits);
        sum = fnv1a(sum, bits, m * sizeof(uint16_t));
    }
    return sum;
}

// Writes n parameters to fp as a model file of `version` stores them.
static void model_params_write(FILE *fp, const char *path, const float *params, size_t n, int version) {
    if (version != CHECKPOINT_VERSION_BF16) {
        fwriteCheck(params, sizeof(float), n, fp, path);
        return;
    }
    uint16_t bits[MODEL_BF16_CHUNK];
    for (size_t i = 0; i < n; i += MODEL_BF16_CHUNK) {
        size_t m = n - i < MODEL_BF16_CHUNK ? n - i : MODEL_BF16_CHUNK;
        model_round_to_bf16(params + i, m, bits);
        fwriteCheck(bits, sizeof(uint16_t), m, fp, path);
    }
}

// Reads n parameters stored as `version` from fp into params (bf16 widened to
// fp32, exactly), and the checksum of the bytes read into *sum; 0, or -1 when
// the file ends first.
static int model_params_read(FILE *fp, float *params, size_t n, int version, uint64_t *sum) {
    if (version != CHECKPOINT_VERSION_BF16) {
        if (fread_progress(params, sizeof(float), n, fp) != n) { return -1; }
        *sum = fnv1a(FNV_OFFSET, params, n * sizeof(float));
        return 0;
    }
    uint16_t bits[MODEL_BF16_CHUNK];
    *sum = FNV_OFFSET;
    for (size_t i = 0; i < n; i += MODEL_BF16_CHUNK) {
        size_t m = n - i < MODEL_BF16_CHUNK ? n - i : MODEL_BF16_CHUNK;
        if (fread(bits, sizeof(uint16_t), m, fp) != m) { return -1; }
        note_progress();
        *sum = fnv1a(*sum, bits, m * sizeof(uint16_t));
        for (size_t j = 0; j < m; j++) { params[i + j] = bf16_to_float(bits[j]); }
    }
    return 0;
}

// records sum (model_params_checksum) in the header
static void checkpoint_put_checksum(int header[256], uint64_t sum) {
    header[MODEL_CHECKSUM_SLOT] = MODEL_CHECKSUM_MARK;
    header[MODEL_CHECKSUM_SLOT + 1] = (int)(uint32_t)sum;
    header[MODEL_CHECKSUM_SLOT + 2] = (int)(uint32_t)(sum >> 32);
}

// 0 when sum, the checksum of the parameters as read (model_params_read), is the
// header's, or the header has none (a file written by llm.c); -1 with the reason
// in why otherwise.
static int checkpoint_verify_checksum(const int header[256], uint64_t sum, char *why, size_t why_size) {
    if (header[MODEL_CHECKSUM_SLOT] != MODEL_CHECKSUM_MARK) { return 0; }
    uint64_t recorded = (uint64_t)(uint32_t)header[MODEL_CHECKSUM_SLOT + 1] |
                        (uint64_t)(uint32_t)header[MODEL_CHECKSUM_SLOT + 2] << 32;
    if (sum != recorded) {
        return problem(why, why_size, "its parameters do not match the checksum in its header (%016llx, the "
                       "parameters give %016llx): the file was damaged after it was written",
                       (unsigned long long)recorded, (unsigned long long)sum);
    }
    return 0;
}

// What ties the files of a checkpoint together: the run id of the job that wrote
// it and its step
typedef struct {
    uint64_t run_id;
    int step;
} CheckpointTag;

// A checkpoint's run id and step, in the model file's header slots [11..14]
#define MODEL_TAG_SLOT 11
#define MODEL_TAG_MARK 0x47415431 // "1TAG": the slots hold a run id and a step

static void checkpoint_put_tag(int header[256], CheckpointTag tag) {
    header[MODEL_TAG_SLOT] = MODEL_TAG_MARK;
    header[MODEL_TAG_SLOT + 1] = (int)(uint32_t)tag.run_id;
    header[MODEL_TAG_SLOT + 2] = (int)(uint32_t)(tag.run_id >> 32);
    header[MODEL_TAG_SLOT + 3] = tag.step;
}

// The run id and step of model file `path` (its header alone); 0, or -1 with the
// reason in why (also for a file without them: one not written as a checkpoint).
static int checkpoint_read_tag(const char *path, CheckpointTag *tag, char *why, size_t why_size) {
    FILE *fp = open_input_file(path, why, why_size);
    if (fp == NULL) { return -1; }
    int header[256];
    size_t got = fread(header, sizeof(int), 256, fp);
    fclose(fp);
    if (got != 256) { return problem(why, why_size, "cannot read its header"); }
    if (header[MODEL_TAG_SLOT] != MODEL_TAG_MARK) {
        return problem(why, why_size, "records no run id and step: not the model file of a checkpoint of this trainer");
    }
    tag->run_id = (uint64_t)(uint32_t)header[MODEL_TAG_SLOT + 1] | (uint64_t)(uint32_t)header[MODEL_TAG_SLOT + 2] << 32;
    tag->step = header[MODEL_TAG_SLOT + 3];
    return 0;
}
// ----------------------------------------------------------------------------
// a GPT-2's model file

// Reads and checks the header of an llm.c model file of `size` bytes from fp into
// c: 256 int32 ([0] magic, [1] version 3 (fp32) or 5 (bf16), [2] maxT, [3] V, [4]
// L, [5] NH, [6] C, [7] Vp), and that the file holds exactly the parameters it
// describes, at the version's bytes per parameter.
static int gpt2_read_checkpoint_header(GPT2Config *c, int header[256], FILE *fp, long size, char *why,
                                       size_t why_size) {
    if (size < (long)(256 * sizeof(int))) { return problem(why, why_size, "%ld bytes, shorter than its header", size); }
    if (fread(header, sizeof(int), 256, fp) != 256) { return problem(why, why_size, "cannot read its header"); }
    if (header[0] != CHECKPOINT_MAGIC) {
        return problem(why, why_size, "bad magic %d (expected %d)", header[0], CHECKPOINT_MAGIC);
    }
    int version = header[1];
    if (version != CHECKPOINT_VERSION_FP32 && version != CHECKPOINT_VERSION_BF16) {
        return problem(why, why_size, "version %d, only %d (fp32) and %d (bf16) are supported", version,
                       CHECKPOINT_VERSION_FP32, CHECKPOINT_VERSION_BF16);
    }
    c->max_seq_len = header[2];
    c->vocab_size = header[3];
    c->num_layers = header[4];
    c->num_heads = header[5];
    c->channels = header[6];
    c->padded_vocab_size = header[7];
    if (gpt2_config_check(*c, why, why_size) != 0) { return -1; }
    size_t n = gpt2_num_parameters(*c);
    long expected = (long)(256 * sizeof(int)) + (long)(n * model_bytes_per_parameter(version));
    if (size != expected) {
        return problem(why, why_size, "%ld bytes, but its header describes %zu parameters (%ld bytes as version %d, "
                       "%s)", size, n, expected, version, version == CHECKPOINT_VERSION_BF16 ? "bf16" : "fp32");
    }
    return 0;
}

// Reads an llm.c model file of `size` bytes from fp: the header
// (gpt2_read_checkpoint_header), then the parameters in order (bf16 ones widened
// to fp32), every one a finite number, against the header's checksum if it has
// one. Allocates the model on success.
static int gpt2_read_checkpoint(GPT2 *model, FILE *fp, long size, char *why, size_t why_size) {
    GPT2Config c;
    int header[256];
    if (gpt2_read_checkpoint_header(&c, header, fp, size, why, why_size) != 0) { return -1; }
    gpt2_allocate(model, c);
    size_t n = model->num_parameters;
    uint64_t sum;
    if (model_params_read(fp, model->params_memory, n, header[1], &sum) != 0) {
        gpt2_free(model);
        return problem(why, why_size, "cannot read its %zu parameters", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(model->params_memory[i])) {
            gpt2_free(model);
            return problem(why, why_size, "parameter %zu is not a finite number", i);
        }
    }
    if (checkpoint_verify_checksum(header, sum, why, why_size) != 0) {
        gpt2_free(model);
        return -1;
    }
    return 0;
}

// The configuration of a checkpoint file, from its header alone (nothing is
// allocated); a bad file ends the job with one line naming it.
static GPT2Config gpt2_checkpoint_config(const char *path) {
    char why[512];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal_everywhere("checkpoint '%s': %s", path, why); }
    GPT2Config c;
    int header[256];
    int status = gpt2_read_checkpoint_header(&c, header, fp, file_size_of(fp, path), why, sizeof(why));
    fclose(fp);
    if (status != 0) { fatal_everywhere("checkpoint '%s': %s", path, why); }
    return c;
}

// Loads a checkpoint file; a bad one ends the job with one line naming it.
static void gpt2_load_checkpoint(GPT2 *model, const char *path) {
    char why[512];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal_everywhere("checkpoint '%s': %s", path, why); }
    int status = gpt2_read_checkpoint(model, fp, file_size_of(fp, path), why, sizeof(why));
    fclose(fp);
    if (status != 0) { fatal_everywhere("checkpoint '%s': %s", path, why); }
}

static void gpt2_write_checkpoint_header(GPT2Config c, int version, uint64_t sum, const CheckpointTag *tag,
                                         int header[256]) {
    memset(header, 0, 256 * sizeof(int));
    header[0] = CHECKPOINT_MAGIC;
    header[1] = version;
    header[2] = c.max_seq_len;
    header[3] = c.vocab_size;
    header[4] = c.num_layers;
    header[5] = c.num_heads;
    header[6] = c.channels;
    header[7] = c.padded_vocab_size;
    checkpoint_put_checksum(header, sum);
    if (tag) { checkpoint_put_tag(header, *tag); }
}

// An llm.c model file of `version`, written in parts, the parameters in llm.c's
// order (they may come from several ranks: train/checkpoint_write.h), and its
// header last, once the checksum of every part is known: CHECKPOINT_VERSION_FP32
// (the fp32 parameters as they are) or CHECKPOINT_VERSION_BF16 (each rounded to
// bf16, to nearest even: llmc/bf16.h). Written atomically (llmc/utils.h): a crash
// mid-write leaves no half checkpoint.
typedef struct {
    AtomicFile af;
    GPT2Config config;
    int version;
    uint64_t sum;   // the checksum of the parameters written
    size_t written; // parameters written
} ModelFileWriter;

static void model_file_open(ModelFileWriter *w, const char *path, GPT2Config c, int version) {
    if (version != CHECKPOINT_VERSION_FP32 && version != CHECKPOINT_VERSION_BF16) {
        fatal("model file version %d: only %d and %d can be written", version, CHECKPOINT_VERSION_FP32,
              CHECKPOINT_VERSION_BF16);
    }
    w->config = c;
    w->version = version;
    w->sum = FNV_OFFSET;
    w->written = 0;
    atomic_open(&w->af, path);
    int header[256] = {0}; // its place: model_file_close writes it
    fwriteCheck(header, sizeof(int), 256, w->af.fp, w->af.tmp_path);
}

// The next n parameters in llm.c's order.
static void model_file_write(ModelFileWriter *w, const float *params, size_t n) {
    w->sum = model_params_checksum(w->sum, params, n, w->version);
    model_params_write(w->af.fp, w->af.tmp_path, params, n, w->version);
    w->written += n;
}

// The header (tag: the checkpoint the file belongs to, its run id and step; NULL
// for a model file of its own), once every parameter is written, and the commit.
static void model_file_close(ModelFileWriter *w, const CheckpointTag *tag) {
    size_t n = gpt2_num_parameters(w->config);
    if (w->written != n) {
        fatal("model file '%s': %zu parameters written, its model has %zu", w->af.path, w->written, n);
    }
    int header[256];
    gpt2_write_checkpoint_header(w->config, w->version, w->sum, tag, header);
    if (fseek(w->af.fp, 0, SEEK_SET) != 0) {
        fatal("cannot write the header of '%s': %s", w->af.tmp_path, strerror(errno));
    }
    fwriteCheck(header, sizeof(int), 256, w->af.fp, w->af.tmp_path);
    atomic_commit(&w->af);
}

// Writes a model that holds all its parameters as an llm.c model file of
// `version` (ModelFileWriter) in one part.
static void gpt2_save_checkpoint(const GPT2 *model, const char *path, int version, const CheckpointTag *tag) {
    if (model->wpe_rows_only) { fatal("model file '%s': the model holds some rows of its position table only", path); }
    ModelFileWriter w;
    model_file_open(&w, path, model->config, version);
    model_file_write(&w, model->params_memory, model->num_parameters);
    model_file_close(&w, tag);
}

#endif // LLMC_CHECKPOINT_H
