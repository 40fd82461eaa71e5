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
#include "cp/mesh.h"
#include "cp/ring_attention.h"
#include "cp/sharder.h"
#include "llmc/dataloader.h"
#include "llmc/logger.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/tokenizer.h"

#define RANDOM_INIT_SEED 42
#define SAMPLE_SEED 1337

typedef struct {
    Mesh mesh;
    Comm *world; // every rank: gradients and the loss
    Comm *cp;    // this replica's CP group: the ring and the token gather
    Comm *dp;    // the ranks of the same CP rank in every replica: gathering replicas' rows
    Comm *self;  // this rank alone: sampling runs unsharded
} Ranks;

static Ranks ranks_init(int cp_size) {
    Ranks r;
    int world_rank, world_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    r.mesh = mesh_init(world_rank, world_size, cp_size);
    MPI_Comm world, cp, dp, self;
    MPI_Comm_dup(MPI_COMM_WORLD, &world);
    MPI_Comm_split(MPI_COMM_WORLD, r.mesh.dp_rank, r.mesh.cp_rank, &cp);
    MPI_Comm_split(MPI_COMM_WORLD, r.mesh.cp_rank, r.mesh.dp_rank, &dp);
    MPI_Comm_dup(MPI_COMM_SELF, &self);
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

// -e: an llm.c checkpoint, or dN for a random init of depth N. Every rank
// builds the same weights; rank 0's are broadcast all the same, so that ranks
// can never start apart.
static void load_model(GPT2 *model, const char *init, Comm *world) {
    int depth = random_init_depth(init);
    if (depth > 0) {
        GPT2Config c = gpt2_config_for_depth(depth);
        gpt2_validate_config(c, "-e");
        gpt2_init_random(model, c, RANDOM_INIT_SEED);
    } else {
        gpt2_load_checkpoint(model, init);
    }
    world->broadcast(world, model->params_memory, model->num_parameters * sizeof(float), 0);
}

// Shards the loader's current batch into sh; ends the job if the layout cannot.
static void shard_current_batch(CpSharder *sh, const DataLoader *dl) {
    if (cp_shard_batch(sh, dl->inputs, dl->targets, dl->B, dl->T) != CP_OK) {
        fatal_everywhere("%s", sh->error);
    }
}

typedef struct {
    const TrainConfig *cfg;
    CpLayoutKind layout;
    Ranks *ranks;
    GPT2 *model;
    Activations *acts;
    RingAttention *ring;
} Trainer;

// The forward pass of the loader's next batch on this rank's shard; returns the
// loss statistics of the global batch. The sharder is the step's: built here,
// freed by the caller after the backward pass.
static LossStats forward_step(Trainer *tr, DataLoader *dl, CpSharder *sh) {
    const Mesh *m = &tr->ranks->mesh;
    dataloader_next_batch(dl);
    cp_sharder_init(sh, tr->layout, m->cp_rank, m->cp_size, tr->model->config.max_seq_len, -1);
    shard_current_batch(sh, dl);
    tr->ring->layout = &sh->layout;
    AttentionVerbs attn = ring_attention_verbs(tr->ring);
    gpt2_forward(tr->model, tr->acts, sh->local.inputs, sh->layout.position, sh->local.targets, &attn);
    size_t n = (size_t)sh->layout.B * sh->layout.local_len;
    return global_loss_stats(tr->ranks->world, local_loss_stats(tr->acts->t.losses, sh->local.targets, n));
}

static float validation_loss(Trainer *tr, DataLoader *val_loader, int batches) {
    dataloader_reset(val_loader);
    LossStats total = {0.0, 0.0};
    for (int i = 0; i < batches; i++) {
        CpSharder sh;
        LossStats s = forward_step(tr, val_loader, &sh);
        cp_sharder_free(&sh);
        total.loss_sum += s.loss_sum;
        total.valid_count += s.valid_count;
    }
    return mean_loss(total);
}

// Generates gen_tokens tokens after an EOT, unsharded on this rank alone (the
// identity layout over a one-rank group), and prints them.
static void generate_sample(const TrainConfig *cfg, GPT2 *model, Comm *self, const Tokenizer *tokenizer,
                            Rng *rng) {
    GPT2Config c = model->config;
    int T = cfg->gen_tokens;
    Activations acts;
    activations_init(&acts, c, 1, T);
    RingAttention ring;
    ring_attention_init(&ring, self, 1, T, c.channels, c.num_heads);
    AttentionVerbs attn = ring_attention_verbs(&ring);
    int *tokens = (int *)mallocCheck((size_t)T * sizeof(int));
    int *no_targets = (int *)mallocCheck((size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) { tokens[t] = GPT2_EOT; no_targets[t] = IGNORE_INDEX; }
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_IDENTITY, 0, 1, c.max_seq_len, -1);
    printf("generating:\n---\n");
    for (int t = 1; t < T; t++) {
        // the whole window every time, as llm.c does: causal attention makes the
        // filler after position t-1 irrelevant to its logits
        if (cp_shard_batch(&sh, tokens, no_targets, 1, T) != CP_OK) { fatal("%s", sh.error); }
        ring.layout = &sh.layout;
        gpt2_forward(model, &acts, sh.local.inputs, sh.layout.position, NULL, &attn);
        const float *logits = acts.t.logits + (size_t)(t - 1) * c.padded_vocab_size;
        tokens[t] = sample_softmax(logits, c.vocab_size, rng_uniform(rng));
        tokenizer_print(tokenizer, tokens[t]);
        fflush(stdout);
    }
    printf("\n---\n");
    cp_sharder_free(&sh);
    free(tokens);
    free(no_targets);
    ring_attention_free(&ring);
    activations_free(&acts);
}

// Gathers the step's per-token losses to global order: the CP group's shards into
// (B, T) rows, then the replicas' rows into (dp * B, T); rank 0 appends them.
static void write_token_losses(Trainer *tr, CpSharder *sh, FILE *fp, float *rows, float *all_rows) {
    Ranks *r = tr->ranks;
    int B = sh->layout.B, T = sh->layout.original_seq_len;
    if (cp_gather_tokens(sh, r->cp, tr->acts->t.losses, sizeof(float), 1, rows) != CP_OK) {
        fatal("%s", sh->error);
    }
    r->dp->all_gather(r->dp, rows, all_rows, (size_t)B * T * sizeof(float));
    if (fp != NULL) {
        fwriteCheck(all_rows, sizeof(float), (size_t)r->mesh.dp_size * B * T, fp, tr->cfg->token_loss_path);
        fflush(fp);
    }
}

static void save_checkpoint(const TrainConfig *cfg, const GPT2 *model, int step) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", cfg->output_dir, step);
    gpt2_save_checkpoint(model, path);
    printf("wrote %s\n", path);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    if (parse_train_args(argc, argv, &cfg, NULL)) {
        if (fatal_rank == 0) { print_usage(stdout, argv[0], NULL); }
        MPI_Finalize();
        return 1;
    }
    CpLayoutKind layout = validate_train_config(&cfg);
    if (cfg.resume) { fatal_everywhere("-y 1: resuming is not supported yet"); }
    Ranks ranks = ranks_init(cfg.cp_size);
    const Mesh *mesh = &ranks.mesh;
    int master = mesh->world_rank == 0;

    GPT2 model;
    load_model(&model, cfg.init, ranks.world);
    GPT2Config c = model.config;
    validate_against_model(&cfg, c);
    CpSharder probe; // checks (T, cp, layout) before anything is allocated for it
    cp_sharder_init(&probe, layout, mesh->cp_rank, mesh->cp_size, c.max_seq_len, -1);
    if (cp_check_config(&probe, cfg.T) != CP_OK) { fatal_everywhere("%s", probe.error); }
    int padded_T = cp_padded_len(layout, cfg.T, cfg.cp_size);
    int local_T = padded_T / cfg.cp_size;

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, cfg.train_pattern, "-i", cfg.B, cfg.T, mesh->dp_rank, mesh->dp_size, c.vocab_size);
    int val_batches = 0;
    if (cfg.val_every > 0) {
        dataloader_init(&val_loader, cfg.val_pattern, "-j", cfg.B, cfg.T, mesh->dp_rank, mesh->dp_size, c.vocab_size);
        val_batches = cfg.val_batches < (int)val_loader.epoch_steps ? cfg.val_batches : (int)val_loader.epoch_steps;
    }
    int steps = cfg.steps >= 0 ? cfg.steps : (int)train_loader.epoch_steps;
    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, cfg.tokenizer_path, c.vocab_size);
    if (cfg.output_dir) { make_output_dir(cfg.output_dir); }
    Logger logger;
    logger_init(&logger, cfg.output_dir, master, 0);
    FILE *token_loss_fp = NULL;
    if (cfg.token_loss_path && master) { token_loss_fp = fopenCheck(cfg.token_loss_path, "wb"); }

    if (master) {
        StartupFacts facts = {"cpu (fp32, OpenMP)", "mpi", mesh->world_size, mesh->dp_size, padded_T, local_T,
                              model.num_parameters, steps, val_batches};
        print_startup_table(&cfg, c, &facts);
        if (tokenizer.token_table == NULL) { printf("no tokenizer at %s: samples print token ids\n", cfg.tokenizer_path); }
    }

    Activations acts;
    activations_init(&acts, c, cfg.B, local_T);
    RingAttention ring;
    ring_attention_init(&ring, ranks.cp, cfg.B, local_T, c.channels, c.num_heads);
    Trainer tr = {&cfg, layout, &ranks, &model, &acts, &ring};
    CosineSchedule schedule = {cfg.learning_rate, cfg.warmup, steps, cfg.final_lr_fraction};
    float *loss_rows = NULL, *loss_all_rows = NULL;
    if (cfg.token_loss_path) {
        loss_rows = (float *)mallocCheck((size_t)cfg.B * cfg.T * sizeof(float));
        loss_all_rows = (float *)mallocCheck((size_t)mesh->dp_size * cfg.B * cfg.T * sizeof(float));
    }
    Rng sample_rng;
    rng_seed(&sample_rng, SAMPLE_SEED);
    double tokens_per_step = (double)mesh->dp_size * cfg.B * cfg.T;
    double total_step_seconds = 0.0;

    for (int step = 0; step <= steps; step++) {
        int last_step = step == steps;
        if (cfg.val_every > 0 && (step % cfg.val_every == 0 || last_step)) {
            float val_loss = validation_loss(&tr, &val_loader, val_batches);
            if (master) { printf("val loss %.6f\n", val_loss); }
            logger_log_val(&logger, step, val_loss);
        }
        if (master && cfg.sample_every > 0 && ((step > 0 && step % cfg.sample_every == 0) || last_step)) {
            generate_sample(&cfg, &model, ranks.self, &tokenizer, &sample_rng);
        }
        if (cfg.output_dir && master && (last_step || (cfg.checkpoint_every > 0 && step > 0 && step % cfg.checkpoint_every == 0))) {
            save_checkpoint(&cfg, &model, step);
        }
        if (last_step) { break; }

        double start = wall_seconds();
        CpSharder sh;
        LossStats stats = forward_step(&tr, &train_loader, &sh);
        float loss = mean_loss(stats);
        gpt2_zero_grad(&model);
        AttentionVerbs attn = ring_attention_verbs(&ring);
        // dloss over the valid targets of the global batch: summing every rank's
        // gradient below then gives the gradient of the mean loss
        float dloss = stats.valid_count > 0 ? (float)(1.0 / stats.valid_count) : 0.0f;
        gpt2_backward(&model, &acts, sh.local.inputs, sh.layout.position, sh.local.targets, dloss, &attn);
        ranks.world->all_reduce_sum(ranks.world, model.grads_memory, model.num_parameters, COMM_FLOAT);
        float grad_norm = (float)sqrt(global_norm_squared(model.grads_memory, model.num_parameters));
        float lr = learning_rate_at(&schedule, step);
        gpt2_update(&model, lr, cfg.weight_decay, grad_clip_scale(grad_norm), step + 1);
        if (cfg.token_loss_path) { write_token_losses(&tr, &sh, token_loss_fp, loss_rows, loss_all_rows); }
        cp_sharder_free(&sh);
        double seconds = wall_seconds() - start;
        total_step_seconds += seconds;
        if (master) {
            print_progress(step, steps, loss, grad_norm, lr, seconds, tokens_per_step, total_step_seconds / (step + 1));
        }
        logger_log_train(&logger, step, loss);
    }

    if (token_loss_fp) { fcloseCheck(token_loss_fp, cfg.token_loss_path); }
    free(loss_rows);
    free(loss_all_rows);
    logger_free(&logger);
    ring_attention_free(&ring);
    activations_free(&acts);
    tokenizer_free(&tokenizer);
    dataloader_free(&train_loader);
    if (cfg.val_every > 0) { dataloader_free(&val_loader); }
    gpt2_free(&model);
    ranks_free(&ranks);
    MPI_Finalize();
    return 0;
}
