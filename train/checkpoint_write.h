/*
Writing a checkpoint (train/checkpoint_files.h has the files, train/resume.h reads
them back): the model file, every rank's state file and the DONE marker, in an
order that leaves a complete earlier checkpoint in charge if a crash comes at any
moment, and the deletion of the checkpoints -nk no longer keeps.
*/
#ifndef TRAIN_CHECKPOINT_WRITE_H
#define TRAIN_CHECKPOINT_WRITE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "../cp/comm.h"
#include "../cp/mesh.h"
#include "../cp/position_table.h"
#include "../llmc/gpt2.h"
#include "checkpoint_files.h"
#include "config.h"
#include "job_comm.h"
#include "run.h"

// After checkpoint `step`: with -nk K, the checkpoint K * N steps older goes (llm.c's
// rule), unless -nm M makes it a major one (its step a multiple of M). Its DONE
// marker goes first, so that a crash in the middle never leaves a marker over
// missing files; then every rank removes its state file and rank 0 the model.
// In 64 bits: -nk times -n can pass 2^31, and an int would wrap onto the step
// just written.
static void delete_old_checkpoint(const TrainConfig *cfg, const Mesh *mesh, int step) {
    int64_t older = (int64_t)step - (int64_t)cfg->checkpoints_keep * cfg->checkpoint_every;
    if (cfg->checkpoints_keep == 0 || older <= 0) { return; }
    int old = (int)older;
    if (cfg->major_checkpoint_every > 0 && old % cfg->major_checkpoint_every == 0) { return; }
    char path[4096];
    if (mesh->world_rank == 0) { remove_done_marker(cfg->output_dir, old); }
    job_comm()->barrier(job_comm());
    state_path(path, sizeof(path), cfg->output_dir, old, mesh->world_rank);
    remove_file_if_there(path);
    if (mesh->world_rank == 0) {
        model_path(path, sizeof(path), cfg->output_dir, old);
        remove_file_if_there(path);
    }
}

// Where the floats of a trained vector go: a state file, or the model file.
typedef void (*FloatSink)(void *file, const float *x, size_t n);

static void state_file_sink(void *file, const float *x, size_t n) { state_write_floats((StateWriter *)file, x, n); }
static void model_file_sink(void *file, const float *x, size_t n) { model_file_write((ModelFileWriter *)file, x, n); }

// Writes x, a vector of model laid out as its trained vector (llmc/gpt2.h) where
// the model trains some rows of the position table only, to sink (NULL: this rank
// writes nothing, it lends its rows) in llm.c's order: the table's rows come from
// their owners (table_owners, cp/position_table.h) one slice at a time, through
// the table's gradient (dead between steps), so the file holds the whole table, as
// at cp 1. Every rank of table_owners takes part.
static void write_trained_vector(GPT2 *model, const float *x, Comm *table_owners, FloatSink sink, void *file) {
    size_t wte = model->grad_sizes[0], room = model->grad_sizes[1], C = model->config.channels;
    if (sink) { sink(file, x, wte); }
    for (int owner = 0; owner < table_owners->size; owner++) {
        int begin, end;
        position_slice(model->config.max_seq_len, table_owners->size, owner, &begin, &end);
        size_t n = (size_t)(end - begin) * C;
        if (owner == table_owners->rank) { memcpy(model->grads.wpe, x + wte, n * sizeof(float)); }
        table_owners->broadcast(table_owners, model->grads.wpe, n * sizeof(float), owner);
        if (sink) { sink(file, model->grads.wpe, n); }
    }
    if (sink) { sink(file, x + wte + room, model->num_trained - wte - room); }
}

// Writes a moment x of model (its optimizer range) into a state file in llm.c's
// order, every rank its own file (write_trained_vector where the model trains
// some rows of the table only).
static void write_moment(StateWriter *w, GPT2 *model, const float *x, Comm *table_owners) {
    if (gpt2_trains_whole_table(model)) {
        state_write_floats(w, x, model->opt_end - model->opt_begin);
        return;
    }
    write_trained_vector(model, x, table_owners, state_file_sink, w);
}

// Writes the model file of checkpoint `tag` (rank 0 writes it, `writes`). Where
// the model holds some rows of the position table only (gpt2_position_weights),
// every rank of table_owners lends its rows.
static void write_model_file(GPT2 *model, const char *path, int version, const CheckpointTag *tag,
                             Comm *table_owners, int writes) {
    if (!model->wpe_rows_only) {
        if (writes) { gpt2_save_checkpoint(model, path, version, tag); }
        return;
    }
    ModelFileWriter mw;
    if (writes) { model_file_open(&mw, path, model->config, version); }
    write_trained_vector(model, model->params_memory, table_owners, writes ? model_file_sink : NULL, &mw);
    if (writes) { model_file_close(&mw, tag); }
}

// Writes checkpoint `step`: the weights (rank 0) and every rank's state, then,
// once every rank has finished its files (a barrier), the DONE marker that makes
// resume trust the checkpoint. A crash before the marker leaves the previous one
// in charge. An earlier run's marker of the same step goes first (and a barrier
// waits for that), so that a crash can never leave a marker over a mix of the two
// runs' files. model: the host model holding the fp32 parameters and AdamW moments
// (of its optimizer range: all, or the rank's -z 1 shard). model_version: the model
// file's, CHECKPOINT_VERSION_FP32 or _BF16 (the trainer's choice: llmc/checkpoint.h).
// A bf16 model file rounds the weights, so then every rank also writes the fp32
// master weights of its optimizer range into its state file, for the resume to take.
// table_owners: the ranks that split the position table's rows (the CP group), or
// NULL where the model trains the whole table.
static void save_checkpoint(const TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, GPT2 *model,
                            Comm *table_owners, int step, int model_version) {
    char path[4096];
    int master = mesh->world_rank == 0;
    if (master) { remove_done_marker(cfg->output_dir, step); }
    job_comm()->barrier(job_comm());
    CheckpointTag tag = {run->run_id, step};
    model_path(path, sizeof(path), cfg->output_dir, step);
    write_model_file(model, path, model_version, &tag, table_owners, master);
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.step = step;
    s.rank = mesh->world_rank;
    s.world_size = mesh->world_size;
    s.cp_size = mesh->cp_size;
    s.dp_size = mesh->dp_size;
    s.layout = (int)run->layout;
    s.B = cfg->B;
    s.T = cfg->T;
    s.num_parameters = model->num_parameters;
    const DataLoader *dl = &run->train_loader;
    s.data_shard = dl->shuffle ? 0 : dl->shard_index; // shuffled: the batch count says where
    s.data_position = dl->shuffle ? 0 : dl->position;
    s.rng_state = run->sample_rng.state;
    s.padded_len = (uint64_t)run->padded_T;
    s.layout_chunk = (uint64_t)cfg->chunk;
    s.data_fingerprint = run->train_loader.fingerprint;
    s.data_tokens = run->train_loader.total_tokens;
    s.data_files = run->train_loader.files.gl_pathc;
    s.data_batches = dl->batches_read;
    s.data_shuffled = (uint64_t)dl->shuffle;
    s.zero_stage = (uint64_t)cfg->zero_stage;
    s.document_masking = (uint64_t)cfg->document_masking;
    s.restart_positions = (uint64_t)cfg->restart_positions;
    s.loss_masks = (uint64_t)cfg->loss_masks;
    size_t begin, end;
    gpt2_optimizer_range_flat(model, &begin, &end);
    s.shard_begin = begin;
    s.shard_end = end;
    s.run_id = run->run_id;
    s.micro_batches = run->micro_batches;
    s.loss_outliers = run->loss_outliers;
    s.grad_norm_outliers = run->grad_norm_outliers;
    snprintf(s.init, sizeof(s.init), "%s", cfg->init); // fits: validate_train_config
    if (run->token_losses.fp != NULL) { // rank 0: the -tl file as it stands (every row flushed)
        off_t bytes = ftello(run->token_losses.fp);
        s.token_loss_bytes = bytes > 0 ? (uint64_t)bytes : 0;
        if (s.token_loss_bytes > 0 && token_loss_tail(cfg->token_loss_path, s.token_loss_bytes, &s.token_loss_tail) != 0) {
            fatal("cannot read back '%s' (-tl) for the checkpoint: %s", cfg->token_loss_path, strerror(errno));
        }
    }
    state_path(path, sizeof(path), cfg->output_dir, step, mesh->world_rank);
    StateWriter w;
    state_write_open(&w, path, &s, model_version == CHECKPOINT_VERSION_BF16);
    write_moment(&w, model, model->m_memory, table_owners);
    write_moment(&w, model, model->v_memory, table_owners);
    if (w.s.has_master_weights && model->wpe_rows_only) {
        write_trained_vector(model, model->params_memory, table_owners, state_file_sink, &w);
    } else if (w.s.has_master_weights) {
        state_write_floats(&w, model->params_memory + begin, end - begin);
    }
    state_write_close(&w);
    job_comm()->barrier(job_comm());
    if (master) {
        write_done_marker(cfg->output_dir, tag);
        printf("wrote checkpoint %s/model_%08d.bin (%s, version %d; + state of %d rank(s), DONE_%08d)\n",
               cfg->output_dir, step, model_version == CHECKPOINT_VERSION_BF16 ? "bf16" : "fp32", model_version,
               mesh->world_size, step);
    }
    delete_old_checkpoint(cfg, mesh, step);
}

#endif // TRAIN_CHECKPOINT_WRITE_H
