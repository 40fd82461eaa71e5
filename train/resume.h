/*
Resume (train/checkpoint_files.h has the files, train/checkpoint_write.h writes
them): which checkpoint -y 1 resumes from, and restoring the training state from it.
*/
#ifndef TRAIN_RESUME_H
#define TRAIN_RESUME_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../cp/comm_mpi.h"
#include "../cp/layout.h"
#include "../cp/mesh.h"
#include "checkpoint_files.h"
#include "../llmc/gpt2.h"
#include "../llmc/utils.h"
#include "agree.h"
#include "config.h"
#include "job_comm.h"
#include "run.h"

// The newest checkpoint in dir whose files are all there (rank 0 only): a DONE
// marker whose files went missing (deleted, or lost with a disk) is passed over
// with a note, for the newest complete one before it. -1 when there is none.
static int newest_usable_checkpoint(const char *dir) {
    int *steps;
    int n = done_marker_steps(dir, &steps), found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        char why[4500];
        if (checkpoint_files_present(dir, steps[i], why, sizeof(why)) == 0) { found = steps[i]; continue; }
        printf("note: checkpoint %d has its DONE marker, but %s: falling back to the one before it\n", steps[i], why);
    }
    free(steps);
    return found;
}

// Rank 0, -y 1 with no checkpoint to resume: whether a file the fresh start would
// write over holds something (the log or the per-token losses of the run that
// could not be resumed); writes the reason into why.
static int earlier_outputs_present(const TrainConfig *cfg, char *why, size_t why_size) {
    char log[PATH_MAX + 16];
    snprintf(log, sizeof(log), "%s/main.log", cfg->output_dir);
    const char *paths[2] = {log, cfg->token_loss_path};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (paths[i] == NULL || stat(paths[i], &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) { continue; }
        problem(why, why_size, "-y 1: no complete checkpoint in %s to resume, and starting from scratch would write "
                "over '%s' (%lld bytes of the run that wrote it): move it away, or run without -y 1 to start afresh "
                "over it", cfg->output_dir, paths[i], (long long)st.st_size);
        return 1;
    }
    return 0;
}

// The checkpoint to resume from with -y 1: the newest complete one in -o, or -1
// for a fresh start. Rank 0 looks, and every rank takes its answer. A fresh run
// (no -y 1) into a directory that holds an earlier run's checkpoints is refused:
// writing over some of them would leave a mix that a later -y 1 resumes. So is -y
// 1 with no checkpoint to resume where main.log or -tl holds an earlier run's
// lines: -y 1 asks to continue, and a fresh start would truncate them.
static int find_resume_step(const TrainConfig *cfg) {
    int step = -1;
    char why[9000];
    const char *problem_found = NULL;
    if (fatal_rank == 0 && cfg->output_dir) {
        step = cfg->resume ? newest_usable_checkpoint(cfg->output_dir) : latest_complete_checkpoint(cfg->output_dir);
        if (cfg->resume && step < 0 && earlier_outputs_present(cfg, why, sizeof(why))) { problem_found = why; }
    }
    fail_if_any_rank(problem_found);
    job_comm()->broadcast(job_comm(), &step, sizeof(step), 0);
    if (!cfg->resume) {
        if (step >= 0) {
            fatal_everywhere("-o %s holds the checkpoints of an earlier run (the newest complete one: step %d): -y 1 "
                             "resumes it; to start afresh, remove them (%s/model_*, state_*, DONE_*) or choose "
                             "another -o", cfg->output_dir, step, cfg->output_dir);
        }
        return -1;
    }
    if (step < 0 && fatal_rank == 0) {
        printf("-y 1: no complete checkpoint in %s: starting from scratch\n", cfg->output_dir);
    }
    return step;
}

// the mesh and batch shape a state file records, as text for notes
// (chunk: the solver's chunk size, 0 for the other layouts)
static void describe_shape(char *buf, size_t size, int world, int cp, int layout, int chunk, int B, int T) {
    char chunks[32] = "";
    if (chunk) { snprintf(chunks, sizeof(chunks), " (chunks of %d)", chunk); }
    snprintf(buf, size, "%d rank(s) at cp %d, layout %s%s, B %d, T %d", world, cp,
             layout >= 0 && layout < CP_NUM_LAYOUTS ? cp_layout_names[layout] : "?", chunks, B, T);
}

// the -i data a state records, or a run reads, as text for messages
static void describe_data(char *buf, size_t size, uint64_t files, uint64_t tokens, uint64_t fingerprint) {
    snprintf(buf, size, "%llu file(s), %llu tokens, fingerprint %016llx", (unsigned long long)files,
             (unsigned long long)tokens, (unsigned long long)fingerprint);
}

// Checks rank 0's state header (the checkpoint as written) against this run:
// every field that is used must make sense for it. The model and -e: the weights
// come from the checkpoint, so a run with another -e (another model or shape)
// is refused; so is one with other -dm, -rp or -lm. The data: the position is a token offset into the data the
// checkpoint was written with; other data is refused unless -yd 1 (then the new
// data is read from its start). Returns 0, or -1 with the reason in why; sets
// *other_data when the data differ and -yd 1 allows it.
static int check_state_fits_run(const TrainState *s, const TrainRun *run, const TrainConfig *cfg, int world_size,
                                int step, int *other_data, char *why, size_t why_size) {
    *other_data = 0;
    if (s->step != step) { return problem(why, why_size, "holds step %d, its name says %d", s->step, step); }
    // -z: the optimizer state is all of it in every file (0) or one shard per rank
    // (1); a checkpoint resumes with its own stage and, sharded, its own world size
    if (s->zero_stage != (uint64_t)cfg->zero_stage) {
        return problem(why, why_size, "was written at -z %llu, this run has -z %d: resume with -z %llu (the optimizer "
                       "state is %s in that checkpoint)", (unsigned long long)s->zero_stage, cfg->zero_stage,
                       (unsigned long long)s->zero_stage, s->zero_stage ? "sharded over its ranks" : "whole on every rank");
    }
    if (s->zero_stage == 1 && s->world_size != world_size) {
        return problem(why, why_size, "holds a -z 1 optimizer state sharded over %d ranks, this run has %d: resume "
                       "it with mpirun -np %d", s->world_size, world_size, s->world_size);
    }
    if (s->layout >= CP_NUM_LAYOUTS) { return problem(why, why_size, "layout %d is not one of this trainer's", s->layout); }
    CpLayoutKind kind = (CpLayoutKind)s->layout;
    if (kind == CP_LAYOUT_SOLVER ? s->layout_chunk < CP_SOLVER_TILE || s->layout_chunk > (uint64_t)s->T ||
                                       s->layout_chunk % CP_SOLVER_TILE != 0
                                 : s->layout_chunk != 0) {
        return problem(why, why_size, "chunk size %llu is impossible for layout %s at T %d",
                       (unsigned long long)s->layout_chunk, cp_layout_names[kind], s->T);
    }
    uint64_t least = kind == CP_LAYOUT_SOLVER ? (uint64_t)cp_solver_padded_len(s->T, s->cp_size, (int)s->layout_chunk)
                                              : (uint64_t)cp_padded_len(kind, s->T, s->cp_size);
    if (s->padded_len < least || s->padded_len % (uint64_t)cp_pad_multiple(kind, s->cp_size) != 0 ||
        (kind != CP_LAYOUT_PACKED && s->padded_len != least)) {
        return problem(why, why_size, "padded row length %llu is impossible for T %d at cp %d, layout %s",
                       (unsigned long long)s->padded_len, s->T, s->cp_size, cp_layout_names[kind]);
    }
    if (s->data_shuffled > 1) { return problem(why, why_size, "shuffle flag %llu is neither 0 nor 1", (unsigned long long)s->data_shuffled); }
    if (s->data_shuffled && (s->data_shard != 0 || s->data_position != 0)) {
        // a shuffled run records its place as a batch count, shard and position 0
        return problem(why, why_size, "data shard %llu, position %llu in the state of a shuffled run (0, 0 expected)",
                       (unsigned long long)s->data_shard, (unsigned long long)s->data_position);
    }
    // a shuffled resume replays the draws of every batch read: a count no run of
    // `step` steps could have read would replay for ever. No step of the run read
    // more than micro_batches (each job that trained it raised it to its -d's)
    if (s->data_batches > (uint64_t)s->step * s->micro_batches) {
        return problem(why, why_size, "%llu batches read in %d steps of at most %llu batches is impossible",
                       (unsigned long long)s->data_batches, s->step, (unsigned long long)s->micro_batches);
    }
    if (strcmp(s->init, cfg->init) != 0) {
        return problem(why, why_size, "was written by a run with -e %s, this run has -e %s: resume with the same "
                       "-e (the weights come from the checkpoint)", s->init, cfg->init);
    }
    // what a token sees (-dm), where it is (-rp) and which targets count (-lm): a
    // run that changed them would continue another training than the checkpoint's
    struct { const char *flag; uint64_t was; int now; const char *what; } same[] = {
        {"-dm", s->document_masking, cfg->document_masking, "which tokens a token attends to"},
        {"-rp", s->restart_positions, cfg->restart_positions, "the position of every token"},
        {"-lm", s->loss_masks, cfg->loss_masks, "which targets count in the loss"}};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        if (same[i].was != (uint64_t)same[i].now) {
            return problem(why, why_size, "was written by a run with %s %llu, this run has %s %d: resume with %s "
                           "%llu (it changes %s)", same[i].flag, (unsigned long long)same[i].was, same[i].flag,
                           same[i].now, same[i].flag, (unsigned long long)same[i].was, same[i].what);
        }
    }
    const DataLoader *dl = &run->train_loader;
    if (s->data_fingerprint != dl->fingerprint || s->data_tokens != dl->total_tokens ||
        s->data_files != dl->files.gl_pathc) {
        char was[128], now[128];
        describe_data(was, sizeof(was), s->data_files, s->data_tokens, s->data_fingerprint);
        describe_data(now, sizeof(now), dl->files.gl_pathc, dl->total_tokens, dl->fingerprint);
        if (!cfg->resume_other_data) {
            return problem(why, why_size, "was written with other -i data (%s) than this run's (%s): resume with the "
                           "same data, or add -yd 1 to train on this data from its start", was, now);
        }
        *other_data = 1;
    }
    return 0;
}

// A rank's own state file must be one of the same checkpoint as rank 0's: every
// global field equal to the writer's. Not global: the rank and, at -z 1, the range
// of the parameters (each rank's own, checked against the rank's when the moments
// are read, as the moments' checksums are, which are compared across ranks once
// read); the sampling RNG and the -tl file (rank 0's alone: only rank 0 samples
// and writes -tl); the padded row length (each replica's: its rows are its own;
// check_replicas_agree compares it within the replica).
static int check_state_matches_writer(const TrainState *s, const TrainState *writer, int rank, char *why,
                                      size_t why_size) {
    if (s->rank != rank || s->world_size != writer->world_size) {
        return problem(why, why_size, "written by rank %d of %d, expected rank %d of %d", s->rank, s->world_size, rank,
                       writer->world_size);
    }
    if (s->run_id != writer->run_id) {
        return problem(why, why_size, "written by run %016llx, rank 0's by run %016llx: files of two runs in one "
                       "checkpoint (restore its own files, or remove the checkpoint to resume an earlier one)",
                       (unsigned long long)s->run_id, (unsigned long long)writer->run_id);
    }
    TrainState *both[2] = {(TrainState *)mallocCheck(sizeof(TrainState)), (TrainState *)mallocCheck(sizeof(TrainState))};
    unsigned char *header[2] = {(unsigned char *)mallocCheck(STATE_HEADER_BYTES),
                                (unsigned char *)mallocCheck(STATE_HEADER_BYTES)};
    *both[0] = *s;
    *both[1] = *writer;
    for (int i = 0; i < 2; i++) {
        TrainState *t = both[i];
        t->rank = 0;
        t->shard_begin = t->shard_end = 0;
        t->moments_checksum = t->master_checksum = 0;
        t->rng_state = 0;
        t->token_loss_bytes = t->token_loss_tail = 0;
        t->padded_len = 0;
        state_encode_header(t, header[i]);
    }
    int same = memcmp(header[0], header[1], STATE_HEADER_BYTES) == 0;
    for (int i = 0; i < 2; i++) {
        free(both[i]);
        free(header[i]);
    }
    if (!same) {
        return problem(why, why_size, "its header differs from rank 0's (step %d, cp %d, layout %d, B %d, T %d, data "
                       "shard %llu position %llu, batches %llu): not the same checkpoint", s->step, s->cp_size,
                       s->layout, s->B, s->T, (unsigned long long)s->data_shard, (unsigned long long)s->data_position,
                       (unsigned long long)s->data_batches);
    }
    return 0;
}

// Collective: the padded row length of every rank's own state file (each
// replica's: its CP ranks pad the same rows) agrees within each replica; a
// replica's may differ from another's.
static void check_replicas_agree(uint64_t padded_len, const Mesh *mesh) {
    uint64_t *all = (uint64_t *)mallocCheck((size_t)mesh->world_size * sizeof(uint64_t));
    job_comm()->all_gather(job_comm(), &padded_len, all, sizeof(uint64_t));
    int first = mesh->dp_rank * mesh->cp_size; // the replica's CP rank 0: ranks [k cp, (k + 1) cp) are replica k
    char why[256];
    const char *problem_found = NULL;
    if (all[first] != padded_len) {
        snprintf(why, sizeof(why), "its state file's padded row length %llu differs from rank %d's %llu in the same "
                 "replica: not the same checkpoint", (unsigned long long)padded_len, first,
                 (unsigned long long)all[first]);
        problem_found = why;
    }
    free(all);
    fail_if_any_rank(problem_found);
}

// The files of checkpoint `step` besides the state files carry the run id and step
// of rank 0's state (writer): the model file (every rank loaded it) and the DONE
// marker. 0, or -1 with the reason in why.
static int check_checkpoint_tags(const char *dir, int step, const TrainState *writer, char *why, size_t why_size) {
    char path[4096], reason[512];
    CheckpointTag tag;
    const char *kind[2] = {"model file", "DONE marker"};
    for (int i = 0; i < 2; i++) {
        if (i == 0) { model_path(path, sizeof(path), dir, step); }
        else { done_path(path, sizeof(path), dir, step); }
        int status = i == 0 ? checkpoint_read_tag(path, &tag, reason, sizeof(reason))
                            : read_done_marker(dir, step, &tag, reason, sizeof(reason));
        if (status != 0) { return problem(why, why_size, "%s '%s': %s", kind[i], path, reason); }
        if (tag.run_id != writer->run_id || tag.step != step) {
            return problem(why, why_size, "%s '%s' was written by run %016llx at step %d, the state files by run "
                           "%016llx at step %d: files of two runs in one checkpoint (restore its own files, or remove "
                           "the checkpoint to resume an earlier one)", kind[i], path, (unsigned long long)tag.run_id,
                           tag.step, (unsigned long long)writer->run_id, step);
        }
    }
    return 0;
}

// Every rank proves it resumed the same optimizer state: at -z 0 the moments are
// the same on every rank (gradients are summed over all ranks), so their checksums
// are. (At -z 1 each rank holds its own shard, checked against its file.)
// Where the rows of a split position table (cp/position_table.h) stand in its
// moments, each rank's own, the table's other rows are checked by their owners.
static void check_moments_agree(const GPT2 *model) {
    size_t wte = model->grad_sizes[0], after = wte + model->grad_sizes[1], n = model->opt_end - model->opt_begin;
    int whole = gpt2_trains_whole_table(model);
    uint64_t sum = moments_checksum(model->m_memory, model->v_memory, whole ? n : wte);
    if (!whole) { sum ^= moments_checksum(model->m_memory + after, model->v_memory + after, n - after); }
    JobView view;
    memset(&view, 0, sizeof(view));
    view_add(&view, "the optimizer state", "checksum %016llx", (unsigned long long)sum);
    check_ranks_agree(&view, "every rank must resume the same optimizer state");
}

// Where a state file's moments go in model (StateBuffers): all of the file's range,
// or with some rows of the position table (cp/position_table.h) those rows of the
// table, the others passing through the table's gradient (not yet written).
static StateBuffers model_state_buffers(GPT2 *model) {
    StateBuffers buf;
    memset(&buf, 0, sizeof(buf));
    size_t begin, end;
    gpt2_optimizer_range_flat(model, &begin, &end);
    buf.m = model->m_memory;
    buf.v = model->v_memory;
    buf.master = model->params_memory + begin;
    buf.begin = begin;
    buf.end = end;
    if (gpt2_trains_whole_table(model)) { return buf; }
    size_t C = model->config.channels;
    buf.table_at = model->param_sizes[0];
    buf.table_floats = model->param_sizes[1];
    buf.keep_at = model->wpe_begin * C;
    buf.keep_floats = (model->wpe_end - model->wpe_begin) * C;
    buf.room_floats = model->grad_sizes[1];
    buf.scratch = model->grads.wpe;
    buf.scratch_floats = model->grad_sizes[1];
    return buf;
}

// Restores the training state of checkpoint `step` (its weights came with the
// model file): the AdamW moments into model, the train loader's position and the
// sampling RNG into run. Every rank reads its own state file, unless the checkpoint
// was written at -z 0 in another shape (world size, cp, layout and chunk, B or T): then every
// rank reads rank 0's. That holds because the moments are the same on every rank
// (gradients are summed over all ranks) and the data position is a token offset.
// A -z 1 checkpoint holds one shard per rank: each rank reads its own (the world
// size is the checkpoint's, checked). Where the state files hold master weights
// (the model file's weights are not exact: see save_checkpoint), each rank's range
// of them replaces the model file's in model's parameters, and
// run->params_from_shards says whether every rank now holds only its own shard
// exactly (-z 1: zero_sync_parameters gathers them). Every field is checked
// against the run before it is used, and at -z 0 every rank's moments against
// every other's. A bad file ends the job on every rank with one line
// (fail_if_any_rank).
static void train_run_resume(TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, GPT2 *model, int step) {
    char path[4096], why[9000], problem_line[sizeof(path) + sizeof(why) + 32];
    const char *problem_found = NULL;
    TrainState s;
    memset(&s, 0, sizeof(s));
    state_path(path, sizeof(path), cfg->output_dir, step, 0);
    int other_data = 0;
    int status = state_read(path, &s, NULL, model->num_parameters, why, sizeof(why));
    if (status == 0) {
        status = check_state_fits_run(&s, run, cfg, mesh->world_size, step, &other_data, why, sizeof(why));
    }
    int same_shape = status == 0 && s.world_size == mesh->world_size && s.cp_size == mesh->cp_size &&
                     s.layout == (int)run->layout && s.layout_chunk == (uint64_t)cfg->chunk && s.B == cfg->B &&
                     s.T == cfg->T;
    int own_file = same_shape || (status == 0 && s.zero_stage == 1);
    TrainState writer = s; // rank 0's header: the shape the checkpoint was written in
    if (status == 0) {
        if (own_file) { state_path(path, sizeof(path), cfg->output_dir, step, mesh->world_rank); }
        StateBuffers buf = model_state_buffers(model);
        status = state_read(path, &s, &buf, model->num_parameters, why, sizeof(why));
    }
    if (status == 0 && own_file) { status = check_state_matches_writer(&s, &writer, mesh->world_rank, why, sizeof(why)); }
    if (status == 0 && other_data) {
        status = dataloader_resume(&run->train_loader, 0, 0, why, sizeof(why)); // the other data from its start
    } else if (status == 0 && run->train_loader.shuffle) {
        dataloader_skip(&run->train_loader, s.data_batches); // the shuffled order, as it was
    } else if (status == 0) {
        status = dataloader_resume(&run->train_loader, s.data_shard, s.data_position, why, sizeof(why));
        run->train_loader.batches_read = s.data_batches;
    }
    if (status != 0) {
        snprintf(problem_line, sizeof(problem_line), "state file '%s': %s", path, why);
        problem_found = problem_line;
    } else if (check_checkpoint_tags(cfg->output_dir, step, &writer, why, sizeof(why)) != 0) {
        problem_found = why;
    }
    fail_if_any_rank(problem_found);
    if (same_shape) { check_replicas_agree(s.padded_len, mesh); }
    if (cfg->zero_stage == 0) { check_moments_agree(model); }
    run->params_from_shards = cfg->zero_stage == 1 && writer.has_master_weights;
    run->sample_rng.state = s.rng_state;
    run->loss_outliers = s.loss_outliers; // the -sl, -sg windows: the same on every rank
    run->grad_norm_outliers = s.grad_norm_outliers;
    if (s.micro_batches > run->micro_batches) { run->micro_batches = s.micro_batches; }
    if (same_shape && s.padded_len > (uint64_t)run->padded_T) {
        // the packed layout's buffers as the run left them: batches pad as they did
        // (checked above: a multiple of 2 cp, at most T * 2 cp)
        run->padded_T = (int)s.padded_len;
        run->local_T = run->padded_T / mesh->cp_size;
    }
    // the checkpoint is good: now main.log and -tl may be cut back to it
    open_run_outputs(run, cfg, mesh, &writer);
    if (mesh->world_rank != 0) { return; }
    printf("resuming from step %d: %s/model_%08d.bin and %s%s\n", step, cfg->output_dir, step,
           own_file ? "every rank's own state file" : "rank 0's state file on every rank",
           writer.has_master_weights ? " (with the fp32 master weights, which replace the model file's)" : "");
    if (other_data) {
        char was[128], now[128];
        describe_data(was, sizeof(was), writer.data_files, writer.data_tokens, writer.data_fingerprint);
        describe_data(now, sizeof(now), run->train_loader.files.gl_pathc, run->train_loader.total_tokens,
                      run->train_loader.fingerprint);
        printf("note: -yd 1: the checkpoint was written with other -i data (%s); this run trains on its own (%s) "
               "from its start\n", was, now);
    }
    if (!same_shape) {
        char was[256], now[256];
        describe_shape(was, sizeof(was), writer.world_size, writer.cp_size, writer.layout, (int)writer.layout_chunk, writer.B,
                       writer.T);
        describe_shape(now, sizeof(now), mesh->world_size, mesh->cp_size, (int)run->layout, cfg->chunk, cfg->B, cfg->T);
        printf("note: the checkpoint was written by %s, this run has %s: the weights, the optimizer state "
               "(%s) and the data position carry over; the losses will follow the original run closely, not bit "
               "for bit\n", was, now, own_file ? "each rank's own -z 1 shard" : "rank 0's, the same on every rank");
    }
    if (writer.data_shuffled != (uint64_t)run->train_loader.shuffle) {
        printf("note: the checkpoint's run read its data %s, this one reads it %s: %s\n",
               writer.data_shuffled ? "shuffled" : "in order", run->train_loader.shuffle ? "shuffled (-sh 1)" : "in order (-sh 0)",
               run->train_loader.shuffle ? "the shuffled order starts where its batch count says"
                                         : "the data starts again at its beginning");
    }
    if (run->start_step >= run->steps) {
        printf("note: the checkpoint is at step %d and the run has %d steps: nothing left to train\n",
               run->start_step, run->steps);
    }
    if (cfg->max_seq_len > 0 && cfg->max_seq_len != model->config.max_seq_len) {
        printf("note: -mt %d sets the position table of a fresh start; the checkpoint brings its own of %d rows, "
               "which this run keeps\n", cfg->max_seq_len, model->config.max_seq_len);
    }
}

#endif // TRAIN_RESUME_H
