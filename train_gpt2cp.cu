/*
train_gpt2cp: context-parallel GPT-2 training on NVIDIA GPUs (CUDA, cuBLAS, NCCL).

    mpirun -np 4 ./train_gpt2cp -cp 2 -cl round_robin ...      one rank per GPU, NCCL
    mpirun -np 4 ./train_gpt2cp -cp 4 -ct mpi ...              ranks may share a GPU

The CPU twin (train_gpt2cp_cpu.c) with the model on the GPU: the same mesh of
dp = N / cp replicas, the same sharder, data, schedule, logs and outputs
(train_common.h), the same ring attention algorithm (cp/ring_attention.cuh mirrors
cp/ring_attention.h). Per step:

    1. every rank of a replica reads the replica's window of B x (T+1) tokens
    2. the sharder keeps this rank's share of each row (host), which goes to the GPU
    3. forward and backward run on the local tokens on the GPU; attention gets the
       other tokens around the ring, its K/V blocks moved by the transport
    4. the loss is the mean over the valid targets of the whole global batch;
       gradients are summed over all ranks (the transport's all_reduce_sum on
       device memory), so every rank takes the same step

Transports (-ct): nccl (default; one rank per GPU, local rank -> device as llm.c)
or mpi (device buffers staged through pinned host memory, any number of ranks per
GPU). Both implement the Comm verbs of cp/comm.h on device memory. The per-token
losses of -tl are gathered on the host over MPI, with the CPU twin's code.

fp32 activations, parameters and gradients; -f 1 (default) lets cuBLAS use TF32
tensor cores, -f 0 is full fp32 (the runs validated against the CPU twin).
*/
#include "train_common.h"
#include "cp/comm_mpi.h"
#include "cp/comm_mpi_staged.cuh"
#ifndef NO_NCCL
#include "cp/comm_nccl.cuh"
#endif
#include "cp/loss.cuh"
#include "cp/attention.cuh"
#include "llmc/gpt2.cuh"

#define TRANSPORTS "transport: nccl | mpi"

typedef struct {
    Mesh mesh;
    Comm *world;   // every rank, device memory: parameters, gradients and the loss
    Comm *cp;      // this replica's CP group, device memory: the ring
    Comm *self;    // this rank alone, device memory: sampling runs unsharded
    Comm *cp_host; // the CP group on host memory: the -tl gather (cp_gather_tokens)
    Comm *dp_host; // the DP group on host memory: the replicas' -tl rows
} Ranks;

// The device of this rank: local rank modulo the node's GPUs. NCCL needs a GPU of
// its own per rank; -ct mpi may share.
static int select_device(int use_nccl) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local_rank, local_size;
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    int devices = cuda_device_count();
    if (devices == 0) {
        fatal_everywhere("no CUDA device found: train_gpt2cp needs an NVIDIA GPU and its driver "
                         "(train_gpt2cp_cpu trains on the CPU)");
    }
    if (use_nccl && local_size > devices) {
        fatal_everywhere("-ct nccl: %d ranks on this node but %d GPU(s); NCCL needs one GPU per rank: "
                         "run with -ct mpi to let ranks share a GPU, or with at most %d ranks per node",
                         local_size, devices, devices);
    }
    return local_rank % devices;
}

static Comm *device_comm_create(int use_nccl, MPI_Comm mc) {
#ifdef NO_NCCL
    (void)use_nccl; // main refuses -ct nccl in a build without NCCL
    return comm_mpi_staged_create(mc, cuda_ctx.stream);
#else
    return use_nccl ? comm_nccl_create(mc, cuda_ctx.stream) : comm_mpi_staged_create(mc, cuda_ctx.stream);
#endif
}

static Ranks ranks_init(int cp_size, int use_nccl) {
    Ranks r;
    MPI_Comm world, cp, dp, self, cp_host;
    r.mesh = mesh_split_mpi(cp_size, &world, &cp, &dp, &self);
    MPI_Comm_dup(cp, &cp_host);
    r.world = device_comm_create(use_nccl, world);
    r.cp = device_comm_create(use_nccl, cp);
    r.self = device_comm_create(use_nccl, self);
    r.cp_host = comm_mpi_create(cp_host);
    r.dp_host = comm_mpi_create(dp);
    return r;
}

static void ranks_free(Ranks *r) {
    Comm *comms[] = {r->world, r->cp, r->self, r->cp_host, r->dp_host};
    for (int i = 0; i < 5; i++) { comms[i]->destroy(comms[i]); }
}

// The host model (from -e or the checkpoint resumed from, as the CPU twin) to the
// device; rank 0's weights are broadcast over the device transport, so that ranks
// can never start apart.
static void load_model(GPT2Cuda *model, GPT2 *host, Comm *world) {
    gpt2_cuda_init(model, host);
    world->broadcast(world, model->params_memory, model->num_parameters * sizeof(float), 0);
    cuda_sync();
}

typedef struct {
    const TrainConfig *cfg;
    TrainRun *run;
    Ranks *ranks;
    GPT2Cuda *model;
    ActivationsCuda *acts;
    CpAttentionCuda *attention;
    AttentionVerbs attn; // bound to the last forward's layout, for its backward
    double *loss_stats;  // device double[2]
} Trainer;

// The forward pass of the loader's next batch on this rank's shard; returns the
// loss statistics of the global batch. The sharder is the step's: built here,
// freed by the caller after the backward pass.
static LossStats forward_step(Trainer *tr, DataLoader *dl, CpSharder *sh) {
    next_sharded_batch(sh, dl, tr->run, tr->cfg, &tr->ranks->mesh, tr->model->config.max_seq_len);
    if (tr->acts->T != tr->run->local_T) { // a packed batch longer than any before
        activations_cuda_free(tr->acts);
        activations_cuda_init(tr->acts, tr->model->config, tr->cfg->B, tr->run->local_T);
    }
    tr->attn = cp_attention_cuda_bind(tr->attention, &sh->layout); // the step's coordinates, once
    gpt2_cuda_forward(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets, &tr->attn);
    size_t n = (size_t)sh->layout.B * sh->layout.local_len;
    local_loss_stats_cuda(tr->loss_stats, tr->acts->t.losses, tr->acts->targets, n);
    return global_loss_stats_cuda(tr->ranks->world, tr->loss_stats);
}

static LossStats forward_step_verb(void *trainer, DataLoader *dl, CpSharder *sh) {
    return forward_step((Trainer *)trainer, dl, sh);
}

// Sampling runs unsharded on this rank alone: the identity layout over a one-rank
// group, with activations of one row of gen_tokens tokens; one row of logits
// comes back to the host per token.
typedef struct {
    GPT2Cuda *model;
    ActivationsCuda acts;
    RingAttentionCuda ring;
    float *logits; // (Vp) host
} Sampler;

static const float *sampler_next_logits(void *ctx, const CpSharder *sh, int t) {
    Sampler *s = (Sampler *)ctx;
    ring_attention_cuda_set_layout(&s->ring, &sh->layout);
    AttentionVerbs attn = ring_attention_cuda_verbs(&s->ring);
    gpt2_cuda_forward(s->model, &s->acts, sh->local.inputs, sh->layout.position, NULL, &attn);
    size_t Vp = s->model->config.padded_vocab_size;
    cuda_download(s->logits, s->acts.t.logits + (size_t)(t - 1) * Vp, Vp * sizeof(float));
    return s->logits;
}

static void sample(const TrainConfig *cfg, GPT2Cuda *model, Comm *self, TrainRun *run) {
    GPT2Config c = model->config;
    Sampler s;
    s.model = model;
    s.logits = (float *)mallocCheck((size_t)c.padded_vocab_size * sizeof(float));
    activations_cuda_init(&s.acts, c, 1, cfg->gen_tokens);
    ring_attention_cuda_init(&s.ring, self, 1, cfg->gen_tokens, c.channels, c.num_heads);
    generate_sample(cfg, c, &run->tokenizer, &run->sample_rng, sampler_next_logits, &s);
    ring_attention_cuda_free(&s.ring);
    activations_cuda_free(&s.acts);
    free(s.logits);
}

int main(int argc, char **argv) {
    train_runtime_init(&argc, &argv);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    if (parse_train_args(argc, argv, &cfg, TRANSPORTS)) {
        if (fatal_rank == 0) { print_usage(stdout, argv[0], TRANSPORTS); }
        MPI_Finalize();
        return 1;
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
    Ranks ranks = ranks_init(cfg.cp_size, use_nccl);
    const Mesh *mesh = &ranks.mesh;
    int master = mesh->world_rank == 0;

    // the model and the run on the host first, as the CPU twin; then to the device
    char trainer_name[64];
    snprintf(trainer_name, sizeof(trainer_name), "cuda (fp32, cuBLAS, TF32 %s)", cfg.tf32 ? "on" : "off");
    GPT2 host;
    TrainRun run;
    train_run_start(&run, &host, &cfg, layout, mesh, trainer_name, cfg.transport);
    GPT2Cuda model;
    load_model(&model, &host, ranks.world);
    GPT2Config c = model.config;

    ActivationsCuda acts;
    activations_cuda_init(&acts, c, cfg.B, run.local_T);
    CpAttentionCuda attention;
    cp_attention_cuda_init(&attention, (CpAttentionKind)cp_attention_from_name(cfg.attention), ranks.cp, cfg.B,
                           run.local_T, c.channels, c.num_heads);
    double *loss_stats = (double *)cudaMallocCheck(2 * sizeof(double));
    Trainer tr = {&cfg, &run, &ranks, &model, &acts, &attention, {NULL, NULL, NULL}, loss_stats};

    for (int step = run.start_step; step <= run.steps; step++) {
        int last_step = step == run.steps;
        if (run_validates(&run, &cfg, step, last_step)) {
            float val_loss = validation_loss(forward_step_verb, &tr, &run.val_loader, run.val_batches);
            if (master) { printf("val loss %.6f\n", val_loss); }
            logger_log_val(&run.logger, step, val_loss);
        }
        if (master && run_samples(&run, &cfg, step, last_step)) { sample(&cfg, &model, ranks.self, &run); }
        if (run_checkpoints(&run, &cfg, step, last_step)) {
            gpt2_cuda_to_host(&model);
            save_checkpoint(&run, &cfg, mesh, &model.host, step);
        }
        if (last_step) { break; }

        double start = wall_seconds();
        CpSharder sh;
        LossStats stats = forward_step(&tr, &run.train_loader, &sh);
        float loss = mean_loss(stats);
        gpt2_cuda_zero_grad(&model);
        // dloss over the valid targets of the global batch: summing every rank's
        // gradient below then gives the gradient of the mean loss
        float dloss = stats.valid_count > 0 ? (float)(1.0 / stats.valid_count) : 0.0f;
        gpt2_cuda_backward(&model, &acts, sh.local.inputs, sh.layout.position, dloss, &tr.attn);
        ranks.world->all_reduce_sum(ranks.world, model.grads_memory, model.num_parameters, COMM_FLOAT);
        float grad_norm = (float)sqrt(global_norm_squared_cuda(model.grads_memory, model.num_parameters));
        check_step_finite(&cfg, step, loss, grad_norm);
        float lr = learning_rate_at(&run.schedule, step);
        gpt2_cuda_update(&model, lr, cfg.weight_decay, grad_clip_scale(grad_norm), step + 1);
        if (cfg.token_loss_path) {
            size_t n = (size_t)sh.layout.B * sh.layout.local_len;
            float *losses_host = (float *)mallocCheck(n * sizeof(float)); // (B, local_T)
            cuda_download(losses_host, acts.t.losses, n * sizeof(float));
            write_token_losses(&run, &cfg, &sh, ranks.cp_host, ranks.dp_host, losses_host);
            free(losses_host);
        }
        cp_sharder_free(&sh);
        cuda_sync(); // the step's time includes its update
        train_run_end_step(&run, master, step, loss, grad_norm, lr, wall_seconds() - start);
    }

    print_peak_memory(mesh);
    cudaCheck(cudaFree(loss_stats));
    train_run_free(&run, &cfg);
    cp_attention_cuda_free(&attention);
    activations_cuda_free(&acts);
    gpt2_cuda_free(&model);
    ranks_free(&ranks);
    cuda_free_context();
    MPI_Finalize();
    return 0;
}
