/*
Unit test of the model's backward pass (llmc/gpt2.h with ring attention over one
rank): the parameter gradients of the mean loss, from gpt2_forward_train +
gpt2_backward, against finite differences of the mean loss itself (gpt2_forward).
The model runs with -r 2 (GELU and layernorms recomputed in the backward pass) and
the classifier in chunks of 5 of the 14 tokens.

A tiny GPT-2 (V 37, Vp 40, maxT 16, L 2, NH 2, C 8), B = 2, T = 7, random inputs
and targets, and a loss mask (the trainer's -lm 1, applied by the sharder as it
shards the targets) that leaves out 5 of the 14 targets: one inside row 0, and the
last two of both rows. Attention is a RingAttention over an MPI_COMM_SELF Comm with
the identity layout, as the trainer runs at cp 1. The loss is the sum of the
unmasked token losses / their count; backward gets dloss = 1/count.
Checked: 10 random entries of every parameter tensor, all of lnfw and lnfb, and
entries whose gradient must be 0: a padded vocabulary row, a position row >= T,
and the position rows T-2 and T-1, which reach only masked predictions (causal
attention: no later token reads them): a masked token's gradient is 0, in the
finite differences (its loss does not move the mean) as in the backward pass.
Then the masked targets are replaced by other tokens: the loss and every gradient
must stay the same, bit for bit.

The model computes in fp32, so the finite difference is of an fp32 loss. It uses
the fourth-order central stencil
    g ~ (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / (12 h),  h = 1e-2,
whose truncation error h^4/30 |L^(5)| ~ 3e-10 |L^(5)| is negligible, so the error
is the rounding noise d of the loss amplified by 18/12 / h = 150. The per-token
losses (~4) carry a few 1e-7 of fp32 rounding, averaged in double over 12
targets: d ~ 1e-7, error ~ 1.5e-5 (1e-5 is what one sees). Tolerance:
1e-4 + 1e-3 |g|. Each tensor must also have a sampled gradient above 1e-3 (ten
times the absolute tolerance), so that a wrong gradient cannot hide under the
tolerance. With llm.c's init (std 0.02) the gradients of the inner layers are
~1e-4 and would fail that, so the parameters from gpt2_init_random are widened
(weights x 10) and the biases and layernorm parameters moved off 0 and 1, which
also makes the point generic.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "cp/ring_attention.h"
#include "cp/sharder.h"
#include "llmc/gpt2_init.h"
#include "test/lib/test_comm.h"
#include "test/lib/test_utils.h"

#define B 2
#define T 7
#define SAMPLES 10
#define FD_H 1e-2
#define ATOL 1e-4
#define RTOL 1e-3

static const char *tensor_names[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

typedef struct {
    GPT2 model;
    Activations acts;
    CpSharder sharder;
    RingAttention ring;
    AttentionVerbs attn;
    int valid; // targets that count: not masked
} Setup;

// the mean loss at the current parameters
static double mean_loss(Setup *s) {
    const ShardLayout *lay = &s->sharder.layout;
    gpt2_forward(&s->model, &s->acts, s->sharder.local.inputs, lay->position, s->sharder.local.targets, &s->attn);
    double sum = 0.0;
    for (int i = 0; i < B * T; i++) { sum += s->acts.t.losses[i]; }
    return sum / s->valid;
}

static double finite_difference(Setup *s, float *param) {
    float saved = *param;
    double l[4];
    const double offsets[4] = {1, -1, 2, -2};
    for (int k = 0; k < 4; k++) {
        *param = (float)(saved + offsets[k] * FD_H);
        l[k] = mean_loss(s);
    }
    *param = saved;
    // x + k h rounded to float moves the step by at most ulp(x) / h ~ 1e-5 of itself
    return (8.0 * (l[0] - l[1]) - (l[2] - l[3])) / (12.0 * FD_H);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv); // a singleton: no mpirun needed
    Comm *comm = comm_mpi_create(comm_duplicate(MPI_COMM_SELF));

    Setup s;
    GPT2Config config = {.max_seq_len = 16, .vocab_size = 37, .padded_vocab_size = 40,
                         .num_layers = 2, .num_heads = 2, .channels = 8};
    gpt2_init_random(&s.model, config, 1337);
    Rng rng;
    rng_seed(&rng, 7);
    // widen the weights and move the rest off their special values (see the header)
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        float *p = s.model.params_memory;
        for (int k = 0; k < i; k++) { p += s.model.param_sizes[k]; }
        for (size_t j = 0; j < s.model.param_sizes[i]; j++) {
            if (parameter_is_2d(i)) { p[j] *= 10.0f; }
            else { p[j] += 0.2f * (rng_uniform(&rng) - 0.5f); }
        }
    }
    // the padded vocabulary rows must stay 0, as gpt2_init_random leaves them
    for (size_t j = (size_t)config.vocab_size * config.channels; j < s.model.param_sizes[0]; j++) {
        CHECK(s.model.params.wte[j] == 0.0f, "wte padded entry %zu is %g, expected 0", j, s.model.params.wte[j]);
    }

    int inputs[B * T], targets[B * T];
    unsigned char loss_mask[B * T];
    for (int i = 0; i < B * T; i++) {
        inputs[i] = rand_below(&rng, config.vocab_size);
        targets[i] = rand_below(&rng, config.vocab_size);
        int t = i % T;
        loss_mask[i] = !(i == 3 || t >= T - 2); // row 0's target 3, and the last two targets of each row
    }
    s.valid = B * T - 5;

    cp_sharder_init(&s.sharder, CP_LAYOUT_IDENTITY, 0, 1, config.max_seq_len, cp_no_documents());
    CHECK(cp_shard_batch(&s.sharder, inputs, targets, loss_mask, B, T) == CP_OK, "shard_batch: %s", s.sharder.error);
    ring_attention_init(&s.ring, comm, B, T, config.channels, config.num_heads);
    ring_attention_bind(&s.ring, &s.sharder.layout);
    s.attn = ring_attention_verbs(&s.ring);
    // the most recomputation (-r 2), and classifier chunks of 5 rows, which do not
    // divide the 14 tokens: a chunk boundary inside each row and a short last chunk
    activations_init(&s.acts, config, B, T, RECOMPUTE_MAX);
    s.acts.chunk_rows = 5;

    // the analytic gradient of the mean loss: the classifier's backward runs in the
    // training forward pass, the rest in gpt2_backward
    double loss = mean_loss(&s);
    gpt2_zero_grad(&s.model);
    gpt2_forward_train(&s.model, &s.acts, s.sharder.local.inputs, s.sharder.layout.position, s.sharder.local.targets,
                       1.0f / s.valid, &s.attn);
    gpt2_backward(&s.model, &s.acts, s.sharder.local.inputs, s.sharder.layout.position, &s.attn);
    printf("mean loss %.6f over %d valid targets\n", loss, s.valid);

    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = s.model.param_sizes[i];
        float *param = s.model.params_memory + offset;
        const float *grad = s.model.grads_memory + offset;
        // which entries: all of the final layernorm, else SAMPLES random ones, plus
        // for the embeddings an entry whose gradient must be 0
        size_t picks[64];
        int num_picks = 0;
        if (i == 14 || i == 15) {
            for (size_t j = 0; j < n; j++) { picks[num_picks++] = j; }
        } else {
            for (int k = 0; k < SAMPLES; k++) { picks[num_picks++] = (size_t)rand_below(&rng, (int)n); }
        }
        if (i == 0) { picks[num_picks++] = (size_t)config.vocab_size * config.channels + 3; } // padded vocab row
        if (i == 1) {
            picks[num_picks++] = (size_t)(T - 2) * config.channels + 1; // positions T-2, T-1: only masked
            picks[num_picks++] = (size_t)(T - 1) * config.channels + 6; // predictions read them
            picks[num_picks++] = (size_t)T * config.channels + 5;       // position T: no token there
        }
        CloseCheck cc;
        close_begin(&cc, ATOL, RTOL, "d loss / d %s (index within the tensor)", tensor_names[i]);
        double largest = 0.0, worst = 0.0;
        for (int k = 0; k < num_picks; k++) {
            size_t j = picks[k];
            double fd = finite_difference(&s, param + j);
            close_add(&cc, j, grad[j], fd);
            // wpe rows T-2 and T-1 reach masked predictions only: the mean loss does not move at all
            int masked_only = i == 1 && k >= num_picks - 3 && k < num_picks - 1;
            CHECK(!masked_only || fd == 0.0, "wpe row %zu (masked tokens only): finite difference %g, expected 0",
                  j / config.channels, fd);
            if (fabs(grad[j]) > largest) { largest = fabs(grad[j]); }
            if (fabs(grad[j] - fd) > worst) { worst = fabs(grad[j] - fd); }
        }
        close_end(&cc);
        CHECK(largest > 10 * ATOL, "%s: the largest sampled gradient is %g, too small for the tolerance to test it",
              tensor_names[i], largest);
        if (i == 0) {
            size_t j = picks[num_picks - 1];
            CHECK(grad[j] == 0.0f, "wte padded row entry %zu: gradient %g, expected 0", j, grad[j]);
        }
        for (int k = 3; i == 1 && k >= 1; k--) {
            size_t j = picks[num_picks - k];
            CHECK(grad[j] == 0.0f, "wpe row %zu entry %zu: gradient %g, expected 0", j / config.channels, j, grad[j]);
        }
        printf("%-9s %2d entries match finite differences: largest |g| %.4f, worst |g - fd| %.2g\n",
               tensor_names[i], num_picks, largest, worst);
        offset += n;
    }

    // what a masked target is does not matter: other tokens there, the same loss and
    // gradients, bit for bit
    float *grads = (float *)mallocCheck(s.model.num_parameters * sizeof(float));
    memcpy(grads, s.model.grads_memory, s.model.num_parameters * sizeof(float));
    for (int i = 0; i < B * T; i++) {
        if (!loss_mask[i]) { targets[i] = (targets[i] + 1 + i) % config.vocab_size; }
    }
    CHECK(cp_shard_batch(&s.sharder, inputs, targets, loss_mask, B, T) == CP_OK, "shard_batch: %s", s.sharder.error);
    double loss_other = mean_loss(&s);
    gpt2_zero_grad(&s.model);
    gpt2_forward_train(&s.model, &s.acts, s.sharder.local.inputs, s.sharder.layout.position, s.sharder.local.targets,
                       1.0f / s.valid, &s.attn);
    gpt2_backward(&s.model, &s.acts, s.sharder.local.inputs, s.sharder.layout.position, &s.attn);
    CHECK(loss_other == loss, "other masked targets: loss %.9g, with the first ones %.9g", loss_other, loss);
    CHECK(memcmp(grads, s.model.grads_memory, s.model.num_parameters * sizeof(float)) == 0,
          "other masked targets changed the gradients");
    printf("other tokens at the %d masked targets: the same loss and gradients, bit for bit\n", B * T - s.valid);
    free(grads);

    activations_free(&s.acts);
    ring_attention_free(&s.ring);
    cp_sharder_free(&s.sharder);
    gpt2_free(&s.model);
    comm->destroy(comm);
    MPI_Finalize();
    printf("test_gpt2_gradients: OK\n");
    return 0;
}
