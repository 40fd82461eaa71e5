/*
What the two trainers (train_gpt2cp_cpu.c and train_gpt2cp.cu) share, one job a
file under train/:

    train/config.h    the command line and its checks
    train/agree.h          the checks that every rank runs the same job
    train/model_init.h     the run's model on the host: its configuration, checks, weights
    train/memory.h         the estimated peak memory per rank, and the check that it fits
    train/cpu_runtime_memory.h the CPU twin's process besides its buffers (OpenBLAS's probe)
    train/progress.h       the start-up table, the progress line, peak memory
    train/outputs.h        what a run writes: its -o directory (owned, locked), no output an input
    train/run.h            the run's data, logs and schedule, each batch's sharding, each step's chores
    train/token_losses.h   the -tl file: each step's per-token losses in global order
    train/between_steps.h  validation, HellaSwag, and at which steps they, samples and checkpoints run
    train/resume.h         checkpoints and resume
    train/checkpoint_files.h   a checkpoint's files: paths, state files, DONE markers
    train/sample.h         sampling
    train/zero.h           ZeRO-1 (-z 1): each rank's shard of the optimizer state, the parameter gather
    train/test_hooks.h     the environment variables only tests set

and, here, the start of a run that ties them together; cp/mesh_mpi.h gives both
the mesh's MPI communicators. The trainers differ only in where the model runs.
*/
#ifndef TRAIN_COMMON_H
#define TRAIN_COMMON_H

#include "cp/mesh_mpi.h"
#include "train/agree.h"
#include "train/between_steps.h"
#include "train/config.h"
#include "train/memory.h"
#include "train/model_init.h"
#include "train/outputs.h"
#include "train/progress.h"
#include "train/checkpoint_write.h"
#include "train/resume.h"
#include "train/run.h"
#include "train/sample.h"
#include "train/zero.h"

// The start of a run on the host, shared by both trainers: the model's
// configuration (from -e, or the checkpoint -y 1 resumes from) and the run's
// checks against it, the estimate of each rank's memory and the check that it
// fits (before anything big is allocated), the model in host memory, the run's
// data and outputs, the check that every rank holds the same model and data, the
// start-up table, and the training state when resuming. The caller then makes
// the ranks' weights the same (zero_sync_parameters) and moves the model where it
// runs.
static void train_run_start(TrainRun *run, GPT2 *model, const TrainConfig *cfg, CpLayoutKind layout,
                            const Mesh *mesh, const TrainerMemory *tm) {
    claim_output_dir(cfg);
    int resume_step = find_resume_step(cfg);
    char source[4200];
    GPT2Config c = run_model_config(cfg, resume_step, source, sizeof(source));
    check_run_against_model(cfg, layout, mesh, c, source);
    // packed: the longest row of the data (packed_longest_row); the others pad T alone
    int padded = layout == CP_LAYOUT_PACKED ? packed_longest_row(cfg) : run_padded_len(cfg, layout);
    int local_T = padded / cfg->cp_size;
    MemoryEstimate memory = estimate_rank_memory(tm, cfg, c, local_T, mesh->dp_size,
                                                 (CpAttentionKind)cp_attention_from_name(cfg->attention));
    check_memory_fits(tm, &memory, cfg);
    init_model_host(model, cfg, resume_step, c, mesh->world_rank);
    if (position_table_split(tm, cfg)) { // this rank's rows of the position table (cp/position_table.h)
        int begin, end;
        position_slice(c.max_seq_len, mesh->cp_size, mesh->cp_rank, &begin, &end);
        gpt2_position_rows(model, (size_t)begin, (size_t)end, (size_t)position_slice_room(c.max_seq_len, mesh->cp_size));
    }
    size_t opt_begin, opt_end; // -z 1: this rank's shard of the AdamW state
    zero_shard(cfg->zero_stage, model->num_trained, mesh->world_rank, mesh->world_size, &opt_begin, &opt_end);
    gpt2_optimizer_range(model, opt_begin, opt_end);
    train_run_init(run, cfg, layout, mesh, model->config, resume_step);
    check_model_and_data_agree(model->config, &run->train_loader, cfg->val_every > 0 ? &run->val_loader : NULL);
    train_run_print_startup(run, cfg, model->config, mesh, tm, model->num_parameters, &memory);
    if (run->resumed) { train_run_resume(run, cfg, mesh, model, resume_step); }
}

#endif // TRAIN_COMMON_H
