/*
train_gpt2cp_cpu: context-parallel GPT-2 training on the CPU (the CPU twin).

    mpirun -np 4 ./train_gpt2cp_cpu -cp 2 -cl round_robin ...

The world of N ranks is a mesh of dp = N / cp data-parallel replicas, each a CP
group of cp ranks that share every sequence of the replica's batch. Per step:

    1. every rank of a replica reads the replica's window of B x (T+1) tokens
    2. the sharder keeps this rank's share of each row (B x T/cp, after padding)
       and the global coordinates of those tokens
    3. forward and backward run on the local tokens; attention is the only layer
       that needs other tokens, and gets them by the algorithm of -ca (cp/attention.h)
    4. the loss is the mean over the valid targets of the whole global batch;
       gradients are summed over all ranks, so every rank takes the same step
       (at -z 1 each rank updates its shard of the parameters, then they are
       all-gathered: train/zero.h); at -z 0 the position table's rows are
       held and trained by their owners in the CP group (cp/position_table.h)

Same flags as the GPU trainer; see -h.
*/
#include <malloc.h>
#include "train_common.h"
#include "cp/comm_mpi.h"
#include "cp/loss.h"
#include "cp/position_table.h"
#include "cp/attention.h"
#include "train/cpu_runtime_memory.h"
#include "train/test_hooks.h"

typedef struct {
    Mesh mesh;
    Comm *world;   // every rank: gradients and the loss
    Comm *cp;      // this replica's CP group: the ring and the token gather
    Comm *dp;      // the ranks of the same CP rank in every replica: gathering replicas' rows
    Comm *self;    // this rank alone: sampling runs unsharded
    Comm *ulysses; // this rank's Ulysses group and the ring across the groups (cp/mesh.h)
    Comm *ring;
} Ranks;

static Ranks ranks_init(int cp_size, int ulysses_size) {
    Ranks r;
    MeshComms mc;
    r.mesh = mesh_split_mpi(cp_size, ulysses_size, job_comm(), &mc);
    r.world = comm_mpi_create(mc.world);
    r.cp = comm_mpi_create(mc.cp);
    r.dp = comm_mpi_create(mc.dp);
    r.self = comm_mpi_create(mc.self);
    r.ulysses = comm_mpi_create(mc.ulysses);
    r.ring = comm_mpi_create(mc.ring);
    return r;
}

static void ranks_free(Ranks *r) {
    Comm *comms[] = {r->world, r->cp, r->dp, r->self, r->ulysses, r->ring};
    for (size_t i = 0; i < sizeof(comms) / sizeof(comms[0]); i++) { comms[i]->destroy(comms[i]); }
}

typedef struct {
    const TrainConfig *cfg;
    TrainRun *run;
    Ranks *ranks;
    GPT2 *model;
    Activations *acts;
    CpAttention *attention;
    AttentionVerbs attn; // bound to the last forward's layout, for its backward
    PositionTable *table; // the position table's rows and their owners (cp/position_table.h)
    StepLoss step_loss;  // the training step's loss (cp/loss.h)
} Trainer;

// The forward pass of a batch (B rows of T inputs and targets, and the targets'
// loss mask or NULL) on this rank's shard; returns the loss statistics of the
// global batch. With micro_steps > 0, the pass of one of the micro_steps
// micro-batches of a training step: the classifier's backward runs with the
// forward (gpt2_forward_train), weighted by 1 / the step's weight basis (its valid
// targets counted first; pads and masked targets are never counted:
// step_loss_weight of cp/loss.h), accumulating into gradients the caller zeroed
// before the step's first micro-batch. The sharder is the step's: built here,
// freed by the caller after the backward pass.
static LossStats forward_step(Trainer *tr, const int *inputs, const int *targets, const unsigned char *loss_mask,
                              CpSharder *sh, int micro_steps) {
    shard_rows(sh, inputs, targets, loss_mask, tr->run, tr->cfg, &tr->ranks->mesh, tr->model->config.max_seq_len);
    // the pass's position-table routing, before any exchange of its forward
    position_table_plan(tr->table, sh->layout.position, sh->layout.B * sh->layout.local_len);
    if (tr->acts->T != tr->run->local_T) { // a packed batch longer than any before
        activations_free(tr->acts);
        activations_init(tr->acts, tr->model->config, tr->cfg->B, tr->run->local_T, tr->cfg->recompute);
    }
    tr->attn = cp_attention_bind(tr->attention, &sh->layout); // the batch's coordinates, once
    size_t n = (size_t)sh->layout.B * sh->layout.local_len;
    if (micro_steps > 0) {
        double valid = global_valid_count(tr->ranks->world, sh->local.targets, n);
        gpt2_forward_train(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets,
                           step_loss_weight(&tr->step_loss, valid, micro_steps), &tr->attn);
    } else {
        gpt2_forward(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets, &tr->attn);
    }
    return global_loss_stats(tr->ranks->world, local_loss_stats(tr->acts->t.losses, sh->local.targets, n));
}

static LossStats forward_step_verb(void *trainer, const int *inputs, const int *targets,
                                   const unsigned char *loss_mask, CpSharder *sh) {
    return forward_step((Trainer *)trainer, inputs, targets, loss_mask, sh, 0);
}

static const float *shard_losses(void *trainer) { return ((Trainer *)trainer)->acts->t.losses; }

// Sampling runs unsharded on this rank alone: the identity layout over a one-rank
// group, with activations of one row of gen_tokens tokens.
typedef struct {
    GPT2 *model;
    Activations acts;
    RingAttention ring;
} Sampler;

static const float *sampler_next_logits(void *ctx, const CpSharder *sh, int t) {
    Sampler *s = (Sampler *)ctx;
    ring_attention_bind(&s->ring, &sh->layout);
    AttentionVerbs attn = ring_attention_verbs(&s->ring);
    gpt2_forward(s->model, &s->acts, sh->local.inputs, sh->layout.position, NULL, &attn);
    return gpt2_logits(s->model, &s->acts, (size_t)(t - 1));
}

// Rank 0 samples; where the position table is split (its weights too), the rows
// of the sample's positions come first from their owners, every rank of the CP
// group taking part.
static void sample(const TrainConfig *cfg, GPT2 *model, const PositionTable *table, Comm *self, TrainRun *run,
                   int master) {
    GPT2Config c = model->config;
    float *rows = NULL;
    GPT2 with_rows = *model;
    if (model->wpe_rows_only) {
        rows = (float *)mallocCheck((size_t)cfg->gen_tokens * c.channels * sizeof(float));
        position_table_first_rows(table, model->params.wpe, rows, cfg->gen_tokens);
        with_rows = gpt2_with_first_rows(model, rows, (size_t)cfg->gen_tokens);
    }
    if (master) {
        Sampler s;
        s.model = &with_rows;
        activations_init(&s.acts, c, 1, cfg->gen_tokens, cfg->recompute);
        ring_attention_init(&s.ring, self, 1, cfg->gen_tokens, c.channels, c.num_heads);
        generate_sample(cfg, c, &run->tokenizer, &run->sample_rng, sampler_next_logits, &s);
        ring_attention_free(&s.ring);
        activations_free(&s.acts);
    }
    free(rows);
}

// The model files the twin writes: fp32 (version 3), as llm.c's fp32 trainer;
// bf16 ones (version 5) only where a test asks (train/test_hooks.h).
static int model_file_version(void) {
    return test_hook_bf16_model_file() ? CHECKPOINT_VERSION_BF16 : CHECKPOINT_VERSION_FP32;
}

// glibc's mmap threshold in this trainer (main says why). The gradient all-reduce's
// pieces stay below it, so that MPI's scratch for a piece is heap memory reused at
// every call, not a fresh mapping faulted in at every step (cp/comm_mpi.h).
#define CPU_MMAP_THRESHOLD_BYTES (1 << 20)
_Static_assert(COMM_MPI_REDUCE_PIECE_BYTES < CPU_MMAP_THRESHOLD_BYTES,
               "the all-reduce's pieces must stay below the mmap threshold");

int main(int argc, char **argv) {
    train_runtime_init(&argc, &argv);
    // Every block of a MiB and more from its own mmap: then calloc's pages stay
    // untouched until written, as the memory estimate counts them. glibc's default
    // threshold rises past a large block once one is freed (the start-up probe's, a
    // step's), and a later calloc (the sampler's activations, 14 MiB at -g 64) then
    // reuses heap memory and clears all of it: 16 MiB above the estimate at d2, T 4096.
    mallopt(M_MMAP_THRESHOLD, CPU_MMAP_THRESHOLD_BYTES);
    // OpenBLAS's threaded sgemm mallocs and frees a 512 KiB job table at every call.
    // With glibc's default trim threshold (128 KiB) each free gave it back to the
    // kernel (brk, a TLB flush) and each malloc faulted it in again: 12% of a step
    // of a small model. Up to 4 MiB of freed heap top now stays for the next call.
    mallopt(M_TRIM_THRESHOLD, 4 << 20);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    int help = parse_train_args(argc, argv, &cfg, NULL);
    if (help_asked_anywhere(help)) {
        if (fatal_rank == 0) { print_usage(stdout, argv[0], NULL); }
        job_comm_finalize();
        return help ? 0 : 1; // a rank not asked for the help was asked to train, and did not
    }
    CpLayoutKind layout = validate_train_config(&cfg);
    check_flags_agree(&cfg, NULL);
    int kind = cp_attention_from_name(cfg.attention);
    Ranks ranks = ranks_init(cfg.cp_size, cp_ulysses_degree(&cfg));
    const Mesh *mesh = &ranks.mesh;
    int master = mesh->world_rank == 0;

    GPT2 model;
    TrainRun run;
    TrainerMemory memory = {.name = "cpu (fp32, OpenMP)",
                            .transport = "mpi",
                            .attention_bytes = cp_attention_bytes,
                            .device_token_bytes = NULL,
                            .value_bytes = sizeof(float),
                            .weight_copy_bytes = 0,
                            .host = 1,
                            .splits_position_table = 1,
                            .available = host_memory_available,
                            .runtime_bytes = cpu_runtime_bytes};
    train_run_start(&run, &model, &cfg, layout, mesh, &memory);
    GPT2Config c = model.config;
    // every rank built the same weights; rank 0's are broadcast all the same, so
    // that ranks can never start apart (or a -z 1 resume's exact shards gathered)
    zero_sync_parameters(run.params_from_shards, ranks.world, model.params_memory, model.num_parameters);

    Activations acts;
    activations_init(&acts, c, cfg.B, run.local_T, cfg.recompute);
    check_memory_counted(&memory, c, acts.B, acts.T, acts.recompute, acts.num_bytes, 0);
    CpAttention attention;
    CpAttentionComms comms = {ranks.cp, ranks.ulysses, ranks.ring};
    cp_attention_init(&attention, (CpAttentionKind)kind, comms, cfg.stages, cfg.B, run.local_T, c.channels,
                      c.num_heads);
    PositionTable table;
    int split = position_table_split(&memory, &cfg);
    position_table_init(&table, split ? ranks.cp : ranks.self, split ? ranks.cp : NULL,
                        split ? ranks.dp : ranks.world, c.max_seq_len, c.channels, acts.B * acts.T);
    // the table's weights too: each rank keeps its rows, and a forward pass gets
    // its tokens' other rows from their owners
    if (split) { gpt2_position_weights(&model, position_table_rows_verb(&table)); }
    Trainer tr = {.cfg = &cfg, .run = &run, .ranks = &ranks, .model = &model, .acts = &acts, .attention = &attention,
                  .table = &table};

    for (int step = run.start_step; step <= run.steps; step++) {
        int last_step = step == run.steps;
        if (run_validates(&run, &cfg, step, last_step)) {
            validate(forward_step_verb, &tr, &run, master, step);
        }
        if (run_evaluates(&run, &cfg, step, last_step)) {
            float accuracy = hellaswag_accuracy(forward_step_verb, shard_losses, &tr, &run, ranks.cp, ranks.dp);
            logger_log_eval(&run.logger, step, accuracy);
        }
        if (run_samples(&run, &cfg, step, last_step)) { sample(&cfg, &model, &table, ranks.self, &run, master); }
        if (run_checkpoints(&run, &cfg, step, last_step)) {
            save_checkpoint(&run, &cfg, mesh, &model, table.group_host, step, model_file_version());
        }
        if (last_step) { break; }

        double start = wall_seconds();
        if (cfg.overfit_single_batch) { dataloader_reset(&run.train_loader); }
        // -d: the gradients of grad_accum_steps micro-batches add up to the gradient
        // of the step's mean loss
        gpt2_zero_grad(&model);
        step_loss_start(&tr.step_loss);
        for (int micro = 0; micro < run.grad_accum_steps; micro++) {
            CpSharder sh;
            dataloader_next_batch(&run.train_loader);
            step_loss_add(&tr.step_loss, forward_step(&tr, run.train_loader.inputs, run.train_loader.targets,
                                                      run.train_loader.loss_mask, &sh, run.grad_accum_steps));
            gpt2_backward(&model, &acts, sh.local.inputs, sh.layout.position, &tr.attn);
            // the rows of positions other ranks own, to them; the backward's
            // gradient scratch is dead now and carries them
            position_table_send_gradients(&table, model.grads.wpe, acts.t.dresidual, acts.t.dbt4c, acts.t.dbtc);
            if (cfg.token_loss_path) {
                write_token_losses(&run.token_losses, &sh, ranks.cp, ranks.dp, shard_losses(&tr), run.train_loader.loss_mask);
            }
            cp_sharder_free(&sh);
        }
        double norm_squared = position_table_sum_gradients(&table, ranks.world, model.grads_memory, model.num_trained,
                                                           model.grad_sizes[0]);
        // the step's loss and gradient norm, before the update
        StepEnd end = step_end_of(&tr.step_loss, norm_squared);
        check_step_finite(&cfg, step, end.loss, end.grad_norm);
        float lr = learning_rate_at(&run.schedule, step);
        if (!skip_update(&run, &cfg, master, &end)) {
            gpt2_update(&model, lr, cfg.weight_decay, end.update_scale, step + 1);
            zero_gather_parameters(cfg.zero_stage, ranks.world, model.params_memory, model.num_parameters);
        }
        train_run_end_step(&run, master, step, &end, lr, wall_seconds() - start);
    }

    print_no_target_summary(&run, master);
    print_peak_memory(mesh);
    train_run_free(&run, &cfg);
    position_table_free(&table);
    cp_attention_free(&attention);
    activations_free(&acts);
    gpt2_free(&model);
    ranks_free(&ranks);
    job_comm_finalize();
    return 0;
}
