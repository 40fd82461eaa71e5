/*
train_gpt2cp_cpu: context-parallel GPT-2 training on the CPU (the CPU twin).

    mpirun -np 4 ./train_gpt2cp_cpu -cp 2 -cl round_robin ...

The world of N ranks is a mesh of dp = N / cp data-parallel replicas, each a CP
group of cp ranks that share every sequence of the replica's batch. Per step:

    1. every rank of a replica reads the replica's window of B x (T+1) tokens
    2. the sharder keeps this rank's share of each row (B x T/cp, after padding)
       and the global coordinates of those tokens
    3. forward and backward run on the local tokens; attention is the only layer
       that needs other tokens, and gets them around the ring (cp/ring_attention.h)
    4. the loss is the mean over the valid targets of the whole global batch;
       gradients are summed over all ranks, so every rank takes the same step

Same flags as the GPU trainer; see -h.
*/
#include "train_common.h"
#include "cp/comm_mpi.h"
#include "cp/loss.h"
#include "cp/attention.h"

typedef struct {
    Mesh mesh;
    Comm *world; // every rank: gradients and the loss
    Comm *cp;    // this replica's CP group: the ring and the token gather
    Comm *dp;    // the ranks of the same CP rank in every replica: gathering replicas' rows
    Comm *self;  // this rank alone: sampling runs unsharded
} Ranks;

static Ranks ranks_init(int cp_size) {
    Ranks r;
    MPI_Comm world, cp, dp, self;
    r.mesh = mesh_split_mpi(cp_size, &world, &cp, &dp, &self);
    r.world = comm_mpi_create(world);
    r.cp = comm_mpi_create(cp);
    r.dp = comm_mpi_create(dp);
    r.self = comm_mpi_create(self);
    return r;
}

static void ranks_free(Ranks *r) {
    r->world->destroy(r->world);
    r->cp->destroy(r->cp);
    r->dp->destroy(r->dp);
    r->self->destroy(r->self);
}

typedef struct {
    const TrainConfig *cfg;
    TrainRun *run;
    Ranks *ranks;
    GPT2 *model;
    Activations *acts;
    CpAttention *attention;
} Trainer;

// The forward pass of the loader's next batch on this rank's shard; returns the
// loss statistics of the global batch. With train, the pass of a training step:
// the gradients are zeroed and the classifier's backward runs with the forward
// (gpt2_forward_train), weighted by the global batch's loss weight, counted
// first. The sharder is the step's: built here, freed by the caller after the
// backward pass.
static LossStats forward_step(Trainer *tr, DataLoader *dl, CpSharder *sh, int train) {
    next_sharded_batch(sh, dl, tr->run, tr->cfg, &tr->ranks->mesh, tr->model->config.max_seq_len);
    if (tr->acts->T != tr->run->local_T) { // a packed batch longer than any before
        activations_free(tr->acts);
        activations_init(tr->acts, tr->model->config, tr->cfg->B, tr->run->local_T, tr->cfg->recompute);
    }
    AttentionVerbs attn = cp_attention_bind(tr->attention, &sh->layout);
    size_t n = (size_t)sh->layout.B * sh->layout.local_len;
    if (train) {
        double valid = local_valid_count(sh->local.targets, n);
        tr->ranks->world->all_reduce_sum(tr->ranks->world, &valid, 1, COMM_DOUBLE);
        gpt2_zero_grad(tr->model);
        gpt2_forward_train(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets,
                           loss_weight(valid), &attn);
    } else {
        gpt2_forward(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets, &attn);
    }
    return global_loss_stats(tr->ranks->world, local_loss_stats(tr->acts->t.losses, sh->local.targets, n));
}

static LossStats forward_step_verb(void *trainer, DataLoader *dl, CpSharder *sh) {
    return forward_step((Trainer *)trainer, dl, sh, 0);
}

// Sampling runs unsharded on this rank alone: the identity layout over a one-rank
// group, with activations of one row of gen_tokens tokens.
typedef struct {
    GPT2 *model;
    Activations acts;
    RingAttention ring;
} Sampler;

static const float *sampler_next_logits(void *ctx, const CpSharder *sh, int t) {
    Sampler *s = (Sampler *)ctx;
    s->ring.layout = &sh->layout;
    AttentionVerbs attn = ring_attention_verbs(&s->ring);
    gpt2_forward(s->model, &s->acts, sh->local.inputs, sh->layout.position, NULL, &attn);
    return gpt2_logits(s->model, &s->acts, (size_t)(t - 1));
}

static void sample(const TrainConfig *cfg, GPT2 *model, Comm *self, TrainRun *run) {
    GPT2Config c = model->config;
    Sampler s;
    s.model = model;
    activations_init(&s.acts, c, 1, cfg->gen_tokens, cfg->recompute);
    ring_attention_init(&s.ring, self, 1, cfg->gen_tokens, c.channels, c.num_heads);
    generate_sample(cfg, c, &run->tokenizer, &run->sample_rng, sampler_next_logits, &s);
    ring_attention_free(&s.ring);
    activations_free(&s.acts);
}

int main(int argc, char **argv) {
    train_runtime_init(&argc, &argv);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    if (parse_train_args(argc, argv, &cfg, NULL)) {
        if (fatal_rank == 0) { print_usage(stdout, argv[0], NULL); }
        MPI_Finalize();
        return 1;
    }
    CpLayoutKind layout = validate_train_config(&cfg);
    check_flags_agree(&cfg, NULL);
    Ranks ranks = ranks_init(cfg.cp_size);
    const Mesh *mesh = &ranks.mesh;
    int master = mesh->world_rank == 0;

    GPT2 model;
    TrainRun run;
    TrainerMemory memory = {"cpu (fp32, OpenMP)", "mpi", cp_attention_bytes, NULL, 1, host_memory_available};
    train_run_start(&run, &model, &cfg, layout, mesh, &memory);
    GPT2Config c = model.config;
    // every rank built the same weights; rank 0's are broadcast all the same, so
    // that ranks can never start apart
    ranks.world->broadcast(ranks.world, model.params_memory, model.num_parameters * sizeof(float), 0);

    Activations acts;
    activations_init(&acts, c, cfg.B, run.local_T, cfg.recompute);
    CpAttention attention;
    cp_attention_init(&attention, (CpAttentionKind)cp_attention_from_name(cfg.attention), ranks.cp, cfg.B,
                      run.local_T, c.channels, c.num_heads);
    Trainer tr = {&cfg, &run, &ranks, &model, &acts, &attention};

    for (int step = run.start_step; step <= run.steps; step++) {
        int last_step = step == run.steps;
        if (run_validates(&run, &cfg, step, last_step)) {
            float val_loss = validation_loss(forward_step_verb, &tr, &run.val_loader, run.val_batches);
            if (master) { printf("val loss %.6f\n", val_loss); }
            logger_log_val(&run.logger, step, val_loss);
        }
        if (master && run_samples(&run, &cfg, step, last_step)) { sample(&cfg, &model, ranks.self, &run); }
        if (run_checkpoints(&run, &cfg, step, last_step)) { save_checkpoint(&run, &cfg, mesh, &model, step); }
        if (last_step) { break; }

        double start = wall_seconds();
        CpSharder sh;
        LossStats stats = forward_step(&tr, &run.train_loader, &sh, 1);
        float loss = mean_loss(stats);
        AttentionVerbs attn = cp_attention_bind(&attention, &sh.layout);
        gpt2_backward(&model, &acts, sh.local.inputs, sh.layout.position, &attn);
        ranks.world->all_reduce_sum(ranks.world, model.grads_memory, model.num_parameters, COMM_FLOAT);
        float grad_norm = (float)sqrt(global_norm_squared(model.grads_memory, model.num_parameters));
        check_step_finite(&cfg, step, loss, grad_norm);
        float lr = learning_rate_at(&run.schedule, step);
        gpt2_update(&model, lr, cfg.weight_decay, grad_clip_scale(grad_norm), step + 1);
        if (cfg.token_loss_path) { write_token_losses(&run, &cfg, &sh, ranks.cp, ranks.dp, acts.t.losses); }
        cp_sharder_free(&sh);
        train_run_end_step(&run, master, step, loss, grad_norm, lr, wall_seconds() - start);
    }

    print_peak_memory(mesh);
    train_run_free(&run, &cfg);
    cp_attention_free(&attention);
    activations_free(&acts);
    gpt2_free(&model);
    ranks_free(&ranks);
    MPI_Finalize();
    return 0;
}
