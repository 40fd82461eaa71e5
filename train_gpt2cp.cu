/*
train_gpt2cp: context-parallel GPT-2 training on NVIDIA GPUs (CUDA, cuBLAS, NCCL).

    mpirun -np 4 ./train_gpt2cp -cp 2 -cl round_robin ...      one rank per GPU, NCCL
    mpirun -np 4 ./train_gpt2cp -cp 4 -ct mpi ...              ranks may share a GPU

The CPU twin (train_gpt2cp_cpu.c) with the model on the GPU: the same mesh of
dp = N / cp replicas, the same sharder, data, schedule, logs and outputs
(train_common.h), the same attention algorithms of -ca (ring, all-gather, Ulysses,
their hybrid and group-cast: cp/attention.cuh mirrors cp/attention.h). Per step:

    1. every rank of a replica reads the replica's window of B x (T+1) tokens
    2. the sharder keeps this rank's share of each row (host), which goes to the GPU
    3. forward and backward run on the local tokens on the GPU; attention is the
       only layer that needs other tokens, and gets them by the algorithm of -ca,
       its messages moved by the transport
    4. the loss is the mean over the valid targets of the whole global batch;
       gradients are summed over all ranks (the transport's all_reduce_sum on
       device memory), so every rank takes the same step (at -z 1 each rank
       updates its shard on the device, then the world all-gathers the
       parameters: train/zero.h)
    5. the host waits for the device once a step, for the loss and the gradient
       norm, before the update: the loss weights and sums stay on the device
       (cp/loss.cuh), uploads go through pinned staging, the matmuls' cuBLASLt
       plans are made once (docs/DESIGN.md section 9)

Transports (-ct): nccl (default; one rank per GPU, local rank -> device as llm.c)
or mpi (device buffers staged through pinned host memory, any number of ranks per
GPU). Both implement the Comm verbs of cp/comm.h on device memory. The per-token
losses of -tl are gathered on the host over MPI, with the CPU twin's code.

The precision is the build's (make PRECISION=FP32|BF16, llmc/precision.cuh): bf16
activations and a bf16 copy of the fp32 master weights, or fp32 throughout; the
gradients, AdamW moments, losses and the gradient norm are fp32 in both. In the
fp32 build -f 1 (default) lets cuBLAS use TF32 tensor cores, -f 0 is full fp32
(the runs validated against the CPU twin).
*/
#include "train_common.h"
#include "cp/comm_mpi.h"
#include "cp/comm_mpi_staged.cuh"
#ifndef NO_NCCL
#include "cp/comm_nccl.cuh"
#endif
#include "cp/loss.cuh"
#include "cp/position_table.cuh"
#include "cp/attention.cuh"
#include "llmc/gpt2.cuh"
#include "train/memory_cuda.cuh"
#include "train/test_hooks.h"

#define TRANSPORTS "transport: nccl | mpi"
typedef struct {
    Mesh mesh;
    Comm *world;   // every rank, device memory: parameters, gradients and the loss
    Comm *cp;      // this replica's CP group, device memory: the ring
    Comm *self;    // this rank alone, device memory: sampling runs unsharded
    Comm *dp;      // the DP group, device memory: the position table's rows (cp/position_table.cuh)
    Comm *cp_host; // the CP group on host memory: the -tl gather (cp_gather_tokens), group-cast's plan, the
                   // position table's routing
    Comm *dp_host; // the DP group on host memory: the replicas' -tl rows
    Comm *ulysses; // this rank's Ulysses group (cp/mesh.h), device memory, and on host memory
    Comm *ulysses_host;
    Comm *ring;    // the ring across the Ulysses groups, device memory
} Ranks;

// ranks of this node on this rank's GPU (select_device), this one included
static int device_sharers = 1;

// The device of this rank: local rank modulo the node's GPUs. NCCL needs a GPU of
// its own per rank; -ct mpi may share.
static int select_device(int use_nccl) {
    int local_rank = mpi_node_rank, local_size = mpi_node_size;
    char why[256];
    int devices = cuda_device_count(why, sizeof(why));
    if (devices == 0) {
        fatal_everywhere("%s: train_gpt2cp needs an NVIDIA GPU and a driver that matches its CUDA runtime "
                         "(train_gpt2cp_cpu trains on the CPU)", why);
    }
    if (use_nccl && local_size > devices) {
        fatal_everywhere("-ct nccl: %d ranks on this node but %d GPU(s); NCCL needs one GPU per rank: "
                         "run with -ct mpi to let ranks share a GPU, or with at most %d ranks per node",
                         local_size, devices, devices);
    }
    int device = local_rank % devices;
    device_sharers = (local_size - 1 - device) / devices + 1; // local ranks d, d + devices, ...
    return device;
}

// Device memory free to this rank (cudaMemGetInfo), shared by the ranks on its GPU.
static int device_memory_available(size_t *bytes, int *sharers, char *source, size_t source_size) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) { return -1; }
    *bytes = free_bytes;
    *sharers = device_sharers;
    snprintf(source, source_size, "the GPU (cudaMemGetInfo)");
    return 0;
}

static Comm *device_comm_create(int use_nccl, MPI_Comm mc) {
#ifdef NO_NCCL
    (void)use_nccl; // main refuses -ct nccl in a build without NCCL
    return comm_mpi_staged_create(mc, cuda_ctx.stream);
#else
    return use_nccl ? comm_nccl_create(mc, cuda_ctx.stream) : comm_mpi_staged_create(mc, cuda_ctx.stream);
#endif
}

// with_ulysses: also the Ulysses groups and rings (-ca ulysses | hybrid; NULL otherwise,
// so that the other algorithms build no NCCL communicators they never use)
static Ranks ranks_init(int cp_size, int ulysses_size, int with_ulysses, int use_nccl) {
    Ranks r;
    MeshComms mc;
    MPI_Comm cp_host, dp_device;
    r.mesh = mesh_split_mpi(cp_size, ulysses_size, job_comm(), &mc);
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(mc.cp, &cp_host));
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(mc.dp, &dp_device));
    r.world = device_comm_create(use_nccl, mc.world);
    r.cp = device_comm_create(use_nccl, mc.cp);
    r.dp = device_comm_create(use_nccl, dp_device);
    r.self = device_comm_create(use_nccl, mc.self);
    r.cp_host = comm_mpi_create(cp_host);
    r.dp_host = comm_mpi_create(mc.dp);
    r.ulysses = r.ulysses_host = r.ring = NULL;
    if (with_ulysses) {
        MPI_Comm ulysses_host;
        COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(mc.ulysses, &ulysses_host));
        r.ulysses = device_comm_create(use_nccl, mc.ulysses);
        r.ulysses_host = comm_mpi_create(ulysses_host);
        r.ring = device_comm_create(use_nccl, mc.ring);
    } else {
        MPI_Comm_free(&mc.ulysses);
        MPI_Comm_free(&mc.ring);
    }
    return r;
}

static void ranks_free(Ranks *r) {
    Comm *comms[] = {r->world, r->cp, r->dp, r->self, r->cp_host, r->dp_host, r->ulysses, r->ulysses_host, r->ring};
    for (size_t i = 0; i < sizeof(comms) / sizeof(comms[0]); i++) {
        if (comms[i] != NULL) { comms[i]->destroy(comms[i]); }
    }
}

// The host model (from -e or the checkpoint resumed from, as the CPU twin) to the
// device; rank 0's weights are broadcast over the device transport, so that ranks
// can never start apart (or a -z 1 resume's exact shards gathered: from_shards), and
// rounded into the model's floatX copy.
static void load_model(GPT2Cuda *model, GPT2 *host, Comm *world, int from_shards, int gelu_fusion) {
    gpt2_cuda_init(model, host);
    zero_sync_parameters(from_shards, world, model->params_memory, model->num_held);
    gpt2_cuda_round_weights(model);
    model->gelu_fusion = gelu_fusion;
    cuda_sync();
}

typedef struct {
    const TrainConfig *cfg;
    TrainRun *run;
    Ranks *ranks;
    GPT2Cuda *model;
    ActivationsCuda *acts;
    CpAttentionCuda *attention;
    AttentionVerbsCuda attn; // bound to the last forward's layout, for its backward
    PositionTableCuda *table; // the position table's rows and their owners (cp/position_table.cuh)
    StepLossCuda step_loss;  // the training step's loss on the device (cp/loss.cuh)
    float *losses_host;      // (B, local T) the last forward pass's per-token losses, for -tl and -h 1
} Trainer;

// The forward pass of a batch (B rows of T inputs and targets, and the targets'
// loss mask or NULL) on this rank's shard; returns the loss statistics of the
// global batch, on the device. With micro_steps > 0, the pass of one of the
// micro_steps micro-batches of a training step, as the CPU twin's: the
// classifier's backward runs with the forward (gpt2_cuda_forward_train), weighted
// by 1 / the step's weight basis (worked out on the device: nothing here waits for
// it), accumulating into gradients the caller zeroed. The sharder is the step's:
// built here, freed by the caller after the backward pass.
static LossStats *forward_step(Trainer *tr, const int *inputs, const int *targets, const unsigned char *loss_mask,
                               CpSharder *sh, int micro_steps) {
    shard_rows(sh, inputs, targets, loss_mask, tr->run, tr->cfg, &tr->ranks->mesh, tr->model->config.max_seq_len);
    // the pass's position-table routing, before any exchange of its forward
    position_table_plan(&tr->table->host, sh->layout.position, sh->layout.B * sh->layout.local_len);
    if (tr->acts->T != tr->run->local_T) { // a packed batch longer than any before
        activations_cuda_free(tr->acts);
        activations_cuda_init(tr->acts, tr->model->config, tr->cfg->B, tr->run->local_T, tr->cfg->recompute);
    }
    tr->attn = cp_attention_cuda_bind(tr->attention, &sh->layout); // the batch's coordinates, once
    size_t n = (size_t)sh->layout.B * sh->layout.local_len;
    if (micro_steps > 0) {
        const double *valid = global_valid_count_cuda(tr->ranks->world, &tr->step_loss, sh->local.targets, n);
        gpt2_cuda_forward_train(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets,
                                step_loss_weight_cuda(&tr->step_loss, valid, micro_steps), &tr->attn);
    } else {
        gpt2_cuda_forward(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets, &tr->attn);
    }
    return global_loss_stats_cuda(tr->ranks->world, &tr->step_loss, tr->acts->t.losses, tr->acts->targets, n);
}

static LossStats forward_step_verb(void *trainer, const int *inputs, const int *targets,
                                   const unsigned char *loss_mask, CpSharder *sh) {
    return loss_stats_download(forward_step((Trainer *)trainer, inputs, targets, loss_mask, sh, 0));
}

// the last forward pass's per-token losses to the host: (B, local T)
static const float *shard_losses(void *trainer) {
    Trainer *tr = (Trainer *)trainer;
    size_t n = (size_t)tr->cfg->B * tr->run->local_T;
    tr->losses_host = (float *)realloc(tr->losses_host, n * sizeof(float));
    if (tr->losses_host == NULL) { fatal("out of host memory for the per-token losses"); }
    cuda_download(tr->losses_host, tr->acts->t.losses, n * sizeof(float));
    return tr->losses_host;
}

// Sampling runs unsharded on this rank alone: the identity layout over a one-rank
// group, with activations of one row of gen_tokens tokens; one row of logits
// comes back to the host per token.
typedef struct {
    GPT2Cuda *model;
    ActivationsCuda acts;
    RingAttentionCuda ring;
    floatX *logits_x; // (Vp) host, as the device holds them
    float *logits;    // (Vp) host
} Sampler;

static const float *sampler_next_logits(void *ctx, const CpSharder *sh, int t) {
    Sampler *s = (Sampler *)ctx;
    ring_attention_cuda_bind(&s->ring, &sh->layout);
    AttentionVerbsCuda attn = ring_attention_cuda_verbs(&s->ring);
    gpt2_cuda_forward(s->model, &s->acts, sh->local.inputs, sh->layout.position, NULL, &attn);
    size_t Vp = s->model->config.padded_vocab_size;
    cuda_download(s->logits_x, gpt2_cuda_logits(s->model, &s->acts, (size_t)(t - 1)), Vp * sizeof(floatX));
    for (size_t i = 0; i < Vp; i++) { s->logits[i] = to_float(s->logits_x[i]); }
    return s->logits;
}

// Rank 0 samples; where the position table is split, the rows of the sample's
// positions come first from their owners (on the host: the master weights'
// rows, rounded to floatX on the device as the owners' copies are), every rank
// of the CP group taking part.
static void sample(const TrainConfig *cfg, GPT2Cuda *model, const PositionTableCuda *table, Comm *self, TrainRun *run,
                   int master) {
    GPT2Config c = model->config;
    GPT2Cuda with_rows = *model;
    float *d_rows = NULL;
    floatX *d_rows_x = NULL;
    if (model->host.wpe_rows_only) {
        size_t C = c.channels, g = (size_t)cfg->gen_tokens;
        size_t held = (model->host.wpe_end - model->host.wpe_begin) * C;
        float *own = (float *)mallocCheck((held > 0 ? held : 1) * sizeof(float));
        float *rows = (float *)mallocCheck(g * C * sizeof(float));
        cuda_download(own, model->params_memory + model->host.grad_sizes[0], held * sizeof(float));
        position_table_first_rows(&table->host, own, rows, (int)g);
        if (master) {
            d_rows = (float *)cudaMallocCheck(g * C * sizeof(float));
            cuda_upload_pageable(d_rows, rows, g * C * sizeof(float));
            d_rows_x = (floatX *)d_rows;
            if (GPT2_CUDA_WEIGHT_COPY_BYTES > 0) {
                d_rows_x = (floatX *)cudaMallocCheck(g * C * sizeof(floatX));
                round_to_floatX_cuda(d_rows_x, d_rows, g * C);
            }
            with_rows.host = gpt2_with_first_rows(&model->host, NULL, g);
            with_rows.params.wpe = d_rows_x;
            with_rows.other_rows = (EncoderRowsVerbCuda){NULL, NULL};
        }
        free(own);
        free(rows);
    }
    if (master) {
        Sampler s;
        s.model = &with_rows;
        s.logits = (float *)mallocCheck((size_t)c.padded_vocab_size * sizeof(float));
        s.logits_x = (floatX *)mallocCheck((size_t)c.padded_vocab_size * sizeof(floatX));
        activations_cuda_init(&s.acts, c, 1, cfg->gen_tokens, cfg->recompute);
        ring_attention_cuda_init(&s.ring, self, 1, cfg->gen_tokens, c.channels, c.num_heads);
        generate_sample(cfg, c, &run->tokenizer, &run->sample_rng, sampler_next_logits, &s);
        ring_attention_cuda_free(&s.ring);
        activations_cuda_free(&s.acts);
        free(s.logits);
        free(s.logits_x);
    }
    if (d_rows) {
        cuda_sync();
        if (d_rows_x != (floatX *)d_rows) { cudaCheck(cudaFree(d_rows_x)); }
        cudaCheck(cudaFree(d_rows));
    }
}

// The model files this build writes: llm.c's bf16 ones (version 5) from a BF16
// build, as llm.c's bf16 trainer writes them, fp32 ones (version 3) from FP32.
// Either loads in both trainers (llmc/checkpoint.h).
static int model_file_version(void) {
#ifdef ENABLE_BF16
    return CHECKPOINT_VERSION_BF16;
#else
    return CHECKPOINT_VERSION_FP32;
#endif
}

int main(int argc, char **argv) {
    train_runtime_init(&argc, &argv);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    int help = parse_train_args(argc, argv, &cfg, TRANSPORTS);
    if (help_asked_anywhere(help)) {
        if (fatal_rank == 0) { print_usage(stdout, argv[0], TRANSPORTS); }
        job_comm_finalize();
        return help ? 0 : 1; // a rank not asked for the help was asked to train, and did not
    }
    CpLayoutKind layout = validate_train_config(&cfg);
    if (strcmp(cfg.transport, "nccl") != 0 && strcmp(cfg.transport, "mpi") != 0) {
        fatal_everywhere("-ct '%s': unknown transport (nccl | mpi)", cfg.transport);
    }
    int use_nccl = strcmp(cfg.transport, "nccl") == 0;
#ifdef NO_NCCL
    if (use_nccl) {
        fatal_everywhere("-ct nccl: this train_gpt2cp was built without NCCL (make NO_NCCL=1); use -ct mpi");
    }
#endif
    check_flags_agree(&cfg, TRANSPORTS);
    cuda_init(select_device(use_nccl), cfg.tf32);
    int kind = cp_attention_from_name(cfg.attention);
    Ranks ranks = ranks_init(cfg.cp_size, cp_ulysses_degree(&cfg),
                             kind == CP_ATTENTION_ULYSSES || kind == CP_ATTENTION_HYBRID, use_nccl);
    const Mesh *mesh = &ranks.mesh;
    int master = mesh->world_rank == 0;

    // the model and the run on the host first, as the CPU twin; then to the device
    char trainer_name[64];
    // TF32 applies to the fp32 build's matmuls only: the bf16 build multiplies bf16
    snprintf(trainer_name, sizeof(trainer_name), "cuda (%s, cuBLAS%s)", PRECISION_NAME,
             sizeof(floatX) != sizeof(float) ? "" : cfg.tf32 ? ", TF32 on" : ", TF32 off");
    GPT2 host;
    TrainRun run;
    TrainerMemory memory = trainer_memory_cuda(trainer_name, cfg.transport, device_memory_available);
    train_run_start(&run, &host, &cfg, layout, mesh, &memory);
    GPT2Cuda model;
    load_model(&model, &host, ranks.world, run.params_from_shards, cfg.gelu_fusion != 0);
    GPT2Config c = model.config;

    ActivationsCuda acts;
    activations_cuda_init(&acts, c, cfg.B, run.local_T, cfg.recompute);
    check_memory_counted(&memory, c, acts.B, acts.T, acts.recompute, acts.num_bytes, GPT2_CUDA_WEIGHT_COPY_BYTES);
    CpAttentionCuda attention;
    CpAttentionCommsCuda comms = {ranks.cp, ranks.cp_host, ranks.ulysses, ranks.ulysses_host, ranks.ring};
    cp_attention_cuda_init(&attention, (CpAttentionKind)kind, comms, cfg.stages, cfg.B,
                           run.local_T, c.channels, c.num_heads);
    PositionTableCuda table;
    int split = position_table_split(&memory, &cfg);
    position_table_cuda_init(&table, split ? ranks.cp : ranks.self, split ? ranks.cp_host : NULL,
                             split ? ranks.dp : ranks.world, c.max_seq_len, c.channels, acts.B * acts.T);
    // the table's weights too: each rank keeps its rows, and a forward pass gets
    // its tokens' other rows from their owners
    if (split) { gpt2_cuda_position_weights(&model, position_table_rows_verb_cuda(&table)); }
    Trainer tr = {.cfg = &cfg, .run = &run, .ranks = &ranks, .model = &model, .acts = &acts, .attention = &attention,
                  .table = &table};
    step_loss_cuda_init(&tr.step_loss);
    int print_host_waits = test_hook_host_waits();

    for (int step = run.start_step; step <= run.steps; step++) {
        int last_step = step == run.steps;
        if (run_validates(&run, &cfg, step, last_step)) {
            validate(forward_step_verb, &tr, &run, master, step);
        }
        if (run_evaluates(&run, &cfg, step, last_step)) {
            float accuracy = hellaswag_accuracy(forward_step_verb, shard_losses, &tr, &run, ranks.cp_host,
                                                ranks.dp_host);
            logger_log_eval(&run.logger, step, accuracy);
        }
        if (run_samples(&run, &cfg, step, last_step)) { sample(&cfg, &model, &table, ranks.self, &run, master); }
        if (run_checkpoints(&run, &cfg, step, last_step)) {
            gpt2_cuda_to_host(&model);
            save_checkpoint(&run, &cfg, mesh, &model.host, table.host.group_host, step, model_file_version());
        }
        if (last_step) { break; }

        double start = wall_seconds();
        long waits_before = cuda_ctx.host_waits;
        if (cfg.overfit_single_batch) { dataloader_reset(&run.train_loader); }
        // -d: the gradients of grad_accum_steps micro-batches add up, as the CPU twin
        gpt2_cuda_zero_grad(&model);
        step_loss_start_cuda(&tr.step_loss);
        for (int micro = 0; micro < run.grad_accum_steps; micro++) {
            CpSharder sh;
            dataloader_next_batch(&run.train_loader);
            step_loss_add_cuda(&tr.step_loss, forward_step(&tr, run.train_loader.inputs, run.train_loader.targets,
                                                           run.train_loader.loss_mask, &sh, run.grad_accum_steps));
            gpt2_cuda_backward(&model, &acts, sh.local.inputs, sh.layout.position, &tr.attn);
            // the rows of positions other ranks own, to them, in the dead gradient scratch
            position_table_send_gradients_cuda(&table, model.grads.wpe, acts.t.dresidual, acts.t.dbt4c, acts.t.dbtc);
            if (cfg.token_loss_path) {
                write_token_losses(&run.token_losses, &sh, ranks.cp_host, ranks.dp_host, shard_losses(&tr),
                                   run.train_loader.loss_mask);
            }
            cp_sharder_free(&sh);
        }
        position_table_sum_gradients_cuda(&table, ranks.world, model.grads_memory, model.host.num_trained,
                                          model.host.grad_sizes[0], &tr.step_loss.device->norm_squared);
        // the step's one wait for the device: its loss and gradient norm, before the
        // update, which the host queues and leaves running into the next step
        StepEnd end = step_end_cuda(&tr.step_loss);
        check_step_finite(&cfg, step, end.loss, end.grad_norm);
        float lr = learning_rate_at(&run.schedule, step);
        if (!skip_update(&run, &cfg, master, &end)) {
            gpt2_cuda_update(&model, lr, cfg.weight_decay, end.update_scale, step + 1);
            zero_gather_parameters(cfg.zero_stage, ranks.world, model.params_memory, model.num_held);
            // the other ranks' shards came in fp32: their floatX copy too
            if (cfg.zero_stage >= 1) { gpt2_cuda_round_weights(&model); }
        }
        if (print_host_waits) {
            printf("rank %d step %d: %ld host wait(s)\n", mesh->world_rank, step, cuda_ctx.host_waits - waits_before);
        }
        train_run_end_step(&run, master, step, &end, lr, wall_seconds() - start);
    }

    print_no_target_summary(&run, master);
    print_peak_memory(mesh);
    free(tr.losses_host);
    step_loss_cuda_free(&tr.step_loss);
    position_table_cuda_free(&table);
    train_run_free(&run, &cfg);
    cp_attention_cuda_free(&attention);
    activations_cuda_free(&acts);
    gpt2_cuda_free(&model);
    ranks_free(&ranks);
    cuda_free_context();
    job_comm_finalize();
    return 0;
}
