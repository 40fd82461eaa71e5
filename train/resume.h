/*
Checkpoints and resume (llmc/checkpoint.h has the files): which checkpoint -y 1
resumes from, restoring the training state from it, and writing one so that a
crash at any moment leaves a complete earlier one in charge.
*/
#ifndef TRAIN_RESUME_H
#define TRAIN_RESUME_H

#include <stdio.h>
#include <string.h>
#include "../cp/comm_mpi.h"
#include "../cp/layout.h"
#include "../cp/mesh.h"
#include "../llmc/checkpoint.h"
#include "../llmc/gpt2.h"
#include "../llmc/utils.h"
#include "agree.h"
#include "config.h"
#include "run.h"

// The checkpoint to resume from with -y 1: the newest complete one in -o (the
// newest step with a DONE marker), or -1 for a fresh start. Rank 0 looks, and every
// rank takes its answer.
static int find_resume_step(const TrainConfig *cfg) {
    int step = fatal_rank == 0 && cfg->output_dir ? latest_complete_checkpoint(cfg->output_dir) : -1;
    if (!cfg->resume) {
        if (step >= 0) {
            printf("note: %s holds checkpoints of an earlier run (the newest complete one: step %d); this run starts "
                   "from scratch and writes over them (-y 1 resumes instead)\n", cfg->output_dir, step);
        }
        return -1;
    }
    MPI_Bcast(&step, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (step < 0 && fatal_rank == 0) {
        printf("-y 1: no complete checkpoint in %s: starting from scratch\n", cfg->output_dir);
    }
    return step;
}

// the mesh and batch shape a state file records, as text for notes
static void describe_shape(char *buf, size_t size, int world, int cp, int layout, int B, int T) {
    snprintf(buf, size, "%d rank(s) at cp %d, layout %s, B %d, T %d", world, cp,
             layout >= 0 && layout < CP_NUM_LAYOUTS ? cp_layout_names[layout] : "?", B, T);
}

// Restores the training state of checkpoint `step` (its weights came with the
// model file): the AdamW moments into model, the train loader's position and the
// sampling RNG into run. Every rank reads its own state file, unless the checkpoint
// was written in another shape (world size, cp, layout, B or T): then every rank
// reads rank 0's. That holds because the moments are the same on every rank
// (gradients are summed over all ranks) and the data position is a token offset.
// A bad file ends the job on every rank with one line (fail_if_any_rank).
static void train_run_resume(TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, GPT2 *model, int step) {
    char path[4096], why[768], problem_line[sizeof(path) + sizeof(why) + 32];
    const char *problem_found = NULL;
    TrainState s;
    memset(&s, 0, sizeof(s));
    state_path(path, sizeof(path), cfg->output_dir, step, 0);
    int status = state_read(path, &s, NULL, NULL, model->num_parameters, why, sizeof(why));
    int same_shape = status == 0 && s.world_size == mesh->world_size && s.cp_size == mesh->cp_size &&
                     s.layout == (int)run->layout && s.B == cfg->B && s.T == cfg->T;
    TrainState writer = s; // rank 0's header: the shape the checkpoint was written in
    if (status == 0) {
        if (same_shape) { state_path(path, sizeof(path), cfg->output_dir, step, mesh->world_rank); }
        status = state_read(path, &s, model->m_memory, model->v_memory, model->num_parameters, why, sizeof(why));
    }
    if (status == 0 && s.step != step) {
        status = problem(why, sizeof(why), "holds step %d, its name says %d", s.step, step);
    }
    if (status == 0 && same_shape && (s.rank != mesh->world_rank || s.world_size != writer.world_size)) {
        status = problem(why, sizeof(why), "written by rank %d of %d, expected rank %d of %d", s.rank, s.world_size,
                         mesh->world_rank, writer.world_size);
    }
    if (status == 0 && run->train_loader.shuffle) {
        dataloader_skip(&run->train_loader, s.data_batches); // the shuffled order, as it was
    } else if (status == 0) {
        status = dataloader_resume(&run->train_loader, s.data_shard, s.data_position, why, sizeof(why));
    }
    if (status != 0) {
        snprintf(problem_line, sizeof(problem_line), "state file '%s': %s", path, why);
        problem_found = problem_line;
    }
    fail_if_any_rank(problem_found);
    run->sample_rng.state = s.rng_state;
    if (same_shape && s.padded_len > (uint64_t)run->padded_T && s.padded_len <= (uint64_t)INT32_MAX) {
        // the packed layout's buffers as the run left them: batches pad as they did
        run->padded_T = (int)s.padded_len;
        run->local_T = run->padded_T / mesh->cp_size;
    }
    if (mesh->world_rank != 0) { return; }
    printf("resuming from step %d: %s/model_%08d.bin and %s\n", step, cfg->output_dir, step,
           same_shape ? "every rank's own state file" : "rank 0's state file on every rank");
    if (!same_shape) {
        char was[256], now[256];
        describe_shape(was, sizeof(was), writer.world_size, writer.cp_size, writer.layout, writer.B, writer.T);
        describe_shape(now, sizeof(now), mesh->world_size, mesh->cp_size, (int)run->layout, cfg->B, cfg->T);
        printf("note: the checkpoint was written by %s, this run has %s: the weights, the optimizer state "
               "(rank 0's, the same on every rank) and the data position carry over; the losses will follow "
               "the original run closely, not bit for bit\n", was, now);
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
}

// After checkpoint `step`: with -nk K, the checkpoint K * N steps older goes (llm.c's
// rule), unless -nm M makes it a major one (its step a multiple of M). Its DONE
// marker goes first, so that a crash in the middle never leaves a marker over
// missing files; then every rank removes its state file and rank 0 the model.
static void delete_old_checkpoint(const TrainConfig *cfg, const Mesh *mesh, int step) {
    int old = step - cfg->checkpoints_keep * cfg->checkpoint_every;
    if (cfg->checkpoints_keep == 0 || old <= 0) { return; }
    if (cfg->major_checkpoint_every > 0 && old % cfg->major_checkpoint_every == 0) { return; }
    char path[4096];
    if (mesh->world_rank == 0) { remove_done_marker(cfg->output_dir, old); }
    MPI_Barrier(MPI_COMM_WORLD);
    state_path(path, sizeof(path), cfg->output_dir, old, mesh->world_rank);
    remove_file_if_there(path);
    if (mesh->world_rank == 0) {
        model_path(path, sizeof(path), cfg->output_dir, old);
        remove_file_if_there(path);
    }
}

// Writes checkpoint `step`: the weights (rank 0) and every rank's state, then,
// once every rank has finished its files (a barrier), the DONE marker that makes
// resume trust the checkpoint. A crash before the marker leaves the previous one
// in charge. An earlier run's marker of the same step goes first (and a barrier
// waits for that), so that a crash can never leave a marker over a mix of the two
// runs' files. model: the host model holding the parameters and AdamW moments.
static void save_checkpoint(const TrainRun *run, const TrainConfig *cfg, const Mesh *mesh, const GPT2 *model,
                            int step) {
    char path[4096];
    int master = mesh->world_rank == 0;
    if (master) { remove_done_marker(cfg->output_dir, step); }
    MPI_Barrier(MPI_COMM_WORLD);
    if (master) {
        model_path(path, sizeof(path), cfg->output_dir, step);
        gpt2_save_checkpoint(model, path);
    }
    const DataLoader *dl = &run->train_loader;
    TrainState s = {step, mesh->world_rank, mesh->world_size, mesh->cp_size, mesh->dp_size, (int)run->layout,
                    cfg->B, cfg->T, model->num_parameters, dl->shuffle ? 0 : dl->shard_index,
                    dl->shuffle ? 0 : dl->position, run->sample_rng.state, (uint64_t)run->padded_T,
                    dl->batches_read, (uint64_t)dl->shuffle};
    state_path(path, sizeof(path), cfg->output_dir, step, mesh->world_rank);
    state_write(path, &s, model->m_memory, model->v_memory);
    MPI_Barrier(MPI_COMM_WORLD);
    if (master) {
        write_done_marker(cfg->output_dir, step);
        printf("wrote checkpoint %s/model_%08d.bin (+ state of %d rank(s), DONE_%08d)\n", cfg->output_dir, step,
               mesh->world_size, step);
    }
    delete_old_checkpoint(cfg, mesh, step);
}

#endif // TRAIN_RESUME_H
