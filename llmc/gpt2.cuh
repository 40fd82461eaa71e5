/*
GPT-2 on the GPU: llmc/gpt2.h with every layer a CUDA kernel or a cuBLAS call.
The same parameters (one buffer, llm.c's order), the same activation buffers
(fill_in_activation_sizes of gpt2.h, here in device memory), the same order of
operations and the same backward scratch reuse (dresidual, dbtc, dbt4c), so that
the two can be read side by side.

Precision (llmc/precision.cuh, make PRECISION=FP32|BF16), as llm.c's mixed
precision: the fp32 master weights (params_memory) are what AdamW updates and
checkpoints hold; forward and backward read their copy in floatX (params_x: the
weights rounded, which the update rewrites; in the fp32 build the master weights
themselves). Gradients, AdamW moments and the gradient norm are fp32. The
activations and the backward scratch are floatX, except the fp32 statistics
(activation_is_statistic of gpt2.h: layernorm means and rstds, the attention's
log-sum-exp, the losses); every kernel reads floatX as fp32, computes in fp32 and
rounds what it stores.

The host side is gpt2.h's: a model is created or loaded into a host GPT2
(gpt2_init_random / gpt2_load_checkpoint; on resume also given the checkpoint's
AdamW moments), which keeps the configuration and a host copy of the parameters
and moments for checkpoints, and is then copied to the device.

Token ids, position ids and targets come from the sharder on the host; the
forward pass copies them to the device through pinned staging (cuda_upload: the
host never waits for the device to take them). The classifier works through chunks of
tokens (llmc/classifier.cuh) and, in a training step, runs its backward with the
forward pass (gpt2_cuda_forward_train), as the CPU model does. The backward pass reads the host ids once
more to bucket the embedding gradients (llmc/encoder.cuh).
*/
#ifndef LLMC_GPT2_CUH
#define LLMC_GPT2_CUH

#include "adamw.cuh"
#include "attention_verbs.cuh"
#include "classifier.cuh"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "checkpoint.h"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "residual.cuh"

// the parameters, activations and block views of gpt2.h in the build's precision
typedef PARAMETER_TENSORS(floatX) ParameterTensorsX;
typedef ACTIVATION_TENSORS(floatX) ActivationTensorsCuda;
typedef LAYER_ACTIVATIONS(floatX) LayerActivationsCuda;
DEFINE_LAYER_ACTIVATIONS(layer_activations_cuda, LayerActivationsCuda, ActivationTensorsCuda)

// bytes a parameter of the floatX copy of the weights (0 in the fp32 build: none)
#define GPT2_CUDA_WEIGHT_COPY_BYTES (sizeof(floatX) == sizeof(float) ? 0 : sizeof(floatX))

typedef struct {
    GPT2 host;                // configuration, sizes, host parameters and moments (checkpoints)
    GPT2Config config;
    size_t num_held;          // the floats of params_memory: all parameters, or the trained vector's
                              // where the model holds some rows of the position table (host.wpe_rows_only)
    float *params_memory;     // the fp32 master weights (device)
    floatX *params_x;         // the weights in floatX (device): params_memory itself in the fp32 build
    ParameterTensorsX params; // views into params_x: what forward and backward read
    ParameterTensors grads;   // views into grads_memory (device)
    float *grads_memory;
    float *m_memory;          // AdamW first moment (device)
    float *v_memory;          // AdamW second moment (device)
    int gelu_fusion;          // -ge >= 1: the fc layer's GELU in its matmul's epilogue (llmc/matmul.cuh)
    EncoderRowsVerbCuda other_rows; // with host.wpe_rows_only: fetches the position rows held elsewhere
} GPT2Cuda;

typedef struct {
    int B, T;
    int recompute;            // -r, as gpt2.h's Activations
    int chunk_rows;           // tokens per classifier chunk
    size_t num_bytes;
    void *memory;             // device
    ActivationTensorsCuda t;  // views into memory, as gpt2.h's Activations
    int *inputs;              // (B, T) device copy of this pass's token ids
    int *positions;           // (B, T) device copy of the position ids
    int *targets;             // (B, T) device copy of the targets
    TokenBuckets wte_buckets; // the embedding gradients' token order (encoder.cuh)
    TokenBuckets wpe_buckets;
} ActivationsCuda;

// the bytes of each AdamW moment: the host model's optimizer range (all the
// parameters, or the ZeRO-1 shard of gpt2_optimizer_range)
static size_t gpt2_cuda_moment_bytes(const GPT2Cuda *model) {
    return (model->host.opt_end - model->host.opt_begin) * sizeof(float);
}

// The floatX copy of the weights from the master weights, after these changed
// other than by the update (loaded, broadcast, all-gathered at -z 1); nothing to do
// in the fp32 build.
static void gpt2_cuda_round_weights(GPT2Cuda *model) {
    if (GPT2_CUDA_WEIGHT_COPY_BYTES > 0) {
        round_to_floatX_cuda(model->params_x, model->params_memory, model->num_held);
    }
}

// Takes over `host` (its parameters and AdamW moments are copied to the device;
// host keeps them).
static void gpt2_cuda_init(GPT2Cuda *model, GPT2 *host) {
    memset(model, 0, sizeof(*model));
    model->host = *host;
    memset(host, 0, sizeof(*host));
    model->config = model->host.config;
    model->num_held = gpt2_num_held(&model->host);
    size_t bytes = model->num_held * sizeof(float), grad_bytes = model->host.num_trained * sizeof(float);
    size_t moment_bytes = gpt2_cuda_moment_bytes(model);
    model->params_memory = (float *)cudaMallocCheck(bytes);
    model->grads_memory = (float *)cudaMallocCheck(grad_bytes);
    model->m_memory = (float *)cudaMallocCheck(moment_bytes);
    model->v_memory = (float *)cudaMallocCheck(moment_bytes);
    model->params_x = GPT2_CUDA_WEIGHT_COPY_BYTES > 0
                          ? (floatX *)cudaMallocCheck(model->num_held * GPT2_CUDA_WEIGHT_COPY_BYTES)
                          : (floatX *)model->params_memory;
    model->gelu_fusion = 1;
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, grad_bytes, cuda_ctx.stream));
    cuda_upload_pageable(model->params_memory, model->host.params_memory, bytes);
    cuda_upload_pageable(model->m_memory, model->host.m_memory, moment_bytes);
    cuda_upload_pageable(model->v_memory, model->host.v_memory, moment_bytes);
    gpt2_cuda_round_weights(model);
    point_parameters_of(&model->params, model->params_x,
                        model->host.wpe_rows_only ? model->host.grad_sizes : model->host.param_sizes, sizeof(floatX));
    point_parameters(&model->grads, model->grads_memory, model->host.grad_sizes);
    // the largest deterministic reduction's scratch: dbias of fcb (4C) and layernorm's two sums
    size_t C = model->config.channels;
    cuda_scratch(2 * COLUMN_SUM_CHUNKS * 4 * C * sizeof(float));
    cuda_sync();
}

// gpt2_position_weights on the device, once every rank's weights are the same
// (load_model): the master weights and their floatX copy keep the trained rows of
// the position table only, laid out as the trained vector, and other_rows fetches
// the others in every forward pass. The host model takes the same layout (its
// copy is rewritten before every checkpoint: gpt2_cuda_to_host).
static void gpt2_cuda_position_weights(GPT2Cuda *model, EncoderRowsVerbCuda other_rows) {
    GPT2 *h = &model->host;
    if (h->wpe_rows_only) { return; }
    size_t C = model->config.channels, wte = h->param_sizes[0], table = h->param_sizes[1], room = h->grad_sizes[1];
    size_t rows = (h->wpe_end - h->wpe_begin) * C, after = h->num_parameters - wte - table;
    float *held = (float *)cudaMallocCheck(h->num_trained * sizeof(float)), *whole = model->params_memory;
    cudaStream_t st = cuda_ctx.stream;
    cudaCheck(cudaMemcpyAsync(held, whole, wte * sizeof(float), cudaMemcpyDeviceToDevice, st));
    cudaCheck(cudaMemcpyAsync(held + wte, whole + wte + h->wpe_begin * C, rows * sizeof(float),
                              cudaMemcpyDeviceToDevice, st));
    cudaCheck(cudaMemsetAsync(held + wte + rows, 0, (room - rows) * sizeof(float), st)); // the room after the rows
    cudaCheck(cudaMemcpyAsync(held + wte + room, whole + wte + table, after * sizeof(float), cudaMemcpyDeviceToDevice,
                              st));
    cuda_sync();
    cudaCheck(cudaFree(whole));
    model->params_memory = held;
    if (GPT2_CUDA_WEIGHT_COPY_BYTES > 0) {
        cudaCheck(cudaFree(model->params_x));
        model->params_x = (floatX *)cudaMallocCheck(h->num_trained * GPT2_CUDA_WEIGHT_COPY_BYTES);
    } else {
        model->params_x = (floatX *)held;
    }
    model->num_held = h->num_trained;
    gpt2_cuda_round_weights(model);
    gpt2_position_weights(h, (EncoderRowsVerb){NULL, NULL});
    point_parameters_of(&model->params, model->params_x, h->grad_sizes, sizeof(floatX));
    model->other_rows = other_rows;
}

static void gpt2_cuda_free(GPT2Cuda *model) {
    cuda_sync();
    cudaCheck(cudaFree(model->params_memory));
    cudaCheck(cudaFree(model->grads_memory));
    cudaCheck(cudaFree(model->m_memory));
    cudaCheck(cudaFree(model->v_memory));
    if (GPT2_CUDA_WEIGHT_COPY_BYTES > 0) { cudaCheck(cudaFree(model->params_x)); }
    gpt2_free(&model->host);
    memset(model, 0, sizeof(*model));
}

// the device parameters and AdamW moments into the host copy (for checkpoints)
static void gpt2_cuda_to_host(GPT2Cuda *model) {
    size_t bytes = model->num_held * sizeof(float);
    cuda_download(model->host.params_memory, model->params_memory, bytes);
    cuda_download(model->host.m_memory, model->m_memory, gpt2_cuda_moment_bytes(model));
    cuda_download(model->host.v_memory, model->v_memory, gpt2_cuda_moment_bytes(model));
}

// Device bytes of a pass's buffers besides the activations (what
// activations_cuda_init allocates beyond fill_in_activation_bytes): the token,
// position and target ids, the two embeddings' token buckets (d_order, d_starts,
// d_rows each), and the reductions' scratch that gpt2_cuda_init reserves.
static size_t activations_cuda_extra_bytes(GPT2Config c, int B, int T) {
    size_t BT = (size_t)B * T;
    return 3 * BT * sizeof(int) + 2 * (3 * BT + 1) * sizeof(int) +
           2 * COLUMN_SUM_CHUNKS * 4 * (size_t)c.channels * sizeof(float);
}

static void activations_cuda_init(ActivationsCuda *acts, GPT2Config c, int B, int T, int recompute) {
    memset(acts, 0, sizeof(*acts));
    size_t bytes[NUM_ACTIVATION_BUFFERS];
    acts->B = B;
    acts->T = T;
    acts->recompute = recompute;
    acts->chunk_rows = classifier_chunk_rows(c.padded_vocab_size, (size_t)B * T);
    // the bytes train/memory.h's estimate counts (activation_bytes, at sizeof(floatX))
    acts->num_bytes = fill_in_activation_bytes(bytes, c, B, T, recompute, sizeof(floatX));
    acts->memory = cudaMallocCheck(acts->num_bytes);
    cudaCheck(cudaMemsetAsync(acts->memory, 0, acts->num_bytes, cuda_ctx.stream));
    point_views(&acts->t, acts->memory, bytes, NUM_ACTIVATION_BUFFERS);
    size_t ids = (size_t)B * T * sizeof(int);
    acts->inputs = (int *)cudaMallocCheck(ids);
    acts->positions = (int *)cudaMallocCheck(ids);
    acts->targets = (int *)cudaMallocCheck(ids);
    token_buckets_init(&acts->wte_buckets, B * T, c.padded_vocab_size);
    token_buckets_init(&acts->wpe_buckets, B * T, c.max_seq_len);
}

static void activations_cuda_free(ActivationsCuda *acts) {
    cuda_sync();
    cudaCheck(cudaFree(acts->memory));
    cudaCheck(cudaFree(acts->inputs));
    cudaCheck(cudaFree(acts->positions));
    cudaCheck(cudaFree(acts->targets));
    token_buckets_free(&acts->wte_buckets);
    token_buckets_free(&acts->wpe_buckets);
    memset(acts, 0, sizeof(*acts));
}

// ----------------------------------------------------------------------------
// forward, backward, update

// gpt2_forward_pass of gpt2.h on the device: the activations through the final
// layernorm; with targets the per-token losses, and with grad the classifier's
// backward (dlnf into acts->t.dbtc, model->grads.wte accumulated).
// inputs, positions, targets: (B, T) HOST arrays; targets may be NULL (inference)
// dloss: with grad, a device float (the weight of one token's loss; NULL without grad)
static void gpt2_cuda_forward_pass(GPT2Cuda *model, ActivationsCuda *acts, const int *inputs, const int *positions,
                                   const int *targets, const float *dloss, int grad, const AttentionVerbsCuda *attn) {
    GPT2Config c = model->config;
    int B = acts->B, T = acts->T;
    size_t L = c.num_layers, C = c.channels;
    size_t BT = (size_t)B * T;
    ParameterTensorsX p = model->params;
    ActivationTensorsCuda a = acts->t;
    cuda_upload(acts->inputs, inputs, BT * sizeof(int));
    cuda_upload(acts->positions, positions, BT * sizeof(int));
    if (targets != NULL) { cuda_upload(acts->targets, targets, BT * sizeof(int)); }
    // the position rows held elsewhere, fetched into the backward's scratch (dead in the forward pass), as
    // gpt2_forward_pass fetches them on the CPU
    int held_begin, held_end;
    gpt2_held_rows(&model->host, positions, (int)BT, model->other_rows.fetch != NULL, &held_begin, &held_end);
    floatX *other_rows = NULL;
    if (model->other_rows.fetch) {
        other_rows = a.dbt4c;
        model->other_rows.fetch(model->other_rows.ctx, p.wpe, other_rows, a.dbt4c + BT * C);
    }
    encoder_forward_cuda(a.encoded, acts->inputs, acts->positions, p.wte, p.wpe, held_begin, held_end, other_rows, B,
                         T, (int)C);
    for (size_t l = 0; l < L; l++) {
        LayerActivationsCuda v = layer_activations_cuda(&a, acts->recompute, c, B, T, l);
        layernorm_forward_cuda(v.ln1, v.ln1_mean, v.ln1_rstd, v.residual, p.ln1w + l * C, p.ln1b + l * C, B, T, C);
        matmul_forward_cuda(v.qkv, NULL, v.ln1, p.qkvw + l * 3 * C * C, p.qkvb + l * 3 * C, B, T, C, 3 * C);
        attn->forward(attn->ctx, v.atty, v.att_lse, v.qkv);
        matmul_forward_cuda(v.attproj, NULL, v.atty, p.attprojw + l * C * C, p.attprojb + l * C, B, T, C, C);
        residual_forward_cuda(v.residual2, v.residual, v.attproj, BT * C);
        layernorm_forward_cuda(v.ln2, v.ln2_mean, v.ln2_rstd, v.residual2, p.ln2w + l * C, p.ln2b + l * C,
                               B, T, C);
        // fch = fc(ln2), fch_gelu = gelu(fch): in the matmul's epilogue, or a kernel of its own (-ge 0)
        if (model->gelu_fusion) {
            matmul_forward_cuda(v.fch_gelu, v.fch, v.ln2, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C, B, T, C, 4 * C);
        } else {
            matmul_forward_cuda(v.fch, NULL, v.ln2, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C, B, T, C, 4 * C);
            gelu_forward_cuda(v.fch_gelu, v.fch, BT * 4 * C);
        }
        matmul_forward_cuda(v.fcproj, NULL, v.fch_gelu, p.fcprojw + l * C * 4 * C, p.fcprojb + l * C, B, T, 4 * C,
                            C);
        residual_forward_cuda(v.residual3, v.residual2, v.fcproj, BT * C);
    }
    floatX *last = a.residual3 + (L - 1) * BT * C;
    layernorm_forward_cuda(a.lnf, a.lnf_mean, a.lnf_rstd, last, p.lnfw, p.lnfb, B, T, C);
    if (targets != NULL) {
        classifier_forward_cuda(a.losses, grad ? a.dbtc : NULL, model->grads.wte, a.logits, a.lnf, p.wte,
                                acts->targets, dloss, (int)BT, acts->chunk_rows, (int)C, c.vocab_size,
                                c.padded_vocab_size);
    }
}

// gpt2_forward on the device: with targets the per-token losses (acts->t.losses),
// without only what gpt2_cuda_logits needs. inputs, positions, targets: HOST.
static void gpt2_cuda_forward(GPT2Cuda *model, ActivationsCuda *acts, const int *inputs, const int *positions,
                              const int *targets, const AttentionVerbsCuda *attn) {
    gpt2_cuda_forward_pass(model, acts, inputs, positions, targets, NULL, 0, attn);
}

// gpt2_forward_train on the device: the losses and the classifier's backward,
// which accumulates into the gradients (zero them first); gpt2_cuda_backward follows.
// dloss: a device float, read when the classifier runs (cp/loss.cuh computes it
// on the device in a training step).
static void gpt2_cuda_forward_train(GPT2Cuda *model, ActivationsCuda *acts, const int *inputs, const int *positions,
                                    const int *targets, const float *dloss, const AttentionVerbsCuda *attn) {
    gpt2_cuda_forward_pass(model, acts, inputs, positions, targets, dloss, 1, attn);
}

// The logits of token `row` (b * T + t) after a forward pass: (Vp) floatX device,
// in acts->t.logits.
static const floatX *gpt2_cuda_logits(GPT2Cuda *model, ActivationsCuda *acts, size_t row) {
    GPT2Config c = model->config;
    classifier_logits_cuda(acts->t.logits, acts->t.lnf + row * c.channels, model->params.wte, c.channels,
                           c.padded_vocab_size);
    return acts->t.logits;
}

static void gpt2_cuda_zero_grad(GPT2Cuda *model) {
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, model->host.num_trained * sizeof(float), cuda_ctx.stream));
}

// gpt2_backward on the device: the rest of the gradient, from the gradient of lnf
// that gpt2_cuda_forward_train left; needs that pass just before. inputs,
// positions: (B, T) HOST.
static void gpt2_cuda_backward(GPT2Cuda *model, ActivationsCuda *acts, const int *inputs, const int *positions,
                               const AttentionVerbsCuda *attn) {
    GPT2Config c = model->config;
    int B = acts->B, T = acts->T;
    size_t L = c.num_layers, C = c.channels;
    size_t BT = (size_t)B * T;
    ParameterTensorsX p = model->params;
    ParameterTensors g = model->grads;
    ActivationTensorsCuda a = acts->t;
    // the final layernorm
    cudaCheck(cudaMemsetAsync(a.dresidual, 0, BT * C * sizeof(floatX), cuda_ctx.stream));
    floatX *last = a.residual3 + (L - 1) * BT * C;
    layernorm_backward_cuda(a.dresidual, g.lnfw, g.lnfb, a.dbtc, last, p.lnfw, a.lnf_mean, a.lnf_rstd, B, T, C);
    // the blocks, last to first; dresidual is the gradient of each block's output,
    // and both branches of a residual add receive it unchanged
    for (int l = (int)L - 1; l >= 0; l--) {
        LayerActivationsCuda v = layer_activations_cuda(&a, acts->recompute, c, B, T, (size_t)l);
        floatX *dfch = a.dbt4c;  // (B, T, 4C)
        floatX *dqkv = a.dbt4c;  // (B, T, 3C), once the MLP is done with the buffer
        // what -r left out of the forward pass, recomputed as the forward computed it
        if (acts->recompute >= 2) {
            layernorm_forward_cuda(v.ln1, v.ln1_mean, v.ln1_rstd, v.residual, p.ln1w + l * C, p.ln1b + l * C,
                                   B, T, C);
            layernorm_forward_cuda(v.ln2, v.ln2_mean, v.ln2_rstd, v.residual2, p.ln2w + l * C, p.ln2b + l * C,
                                   B, T, C);
        }
        if (acts->recompute >= 1) { gelu_forward_cuda(v.fch_gelu, v.fch, BT * 4 * C); }
        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))); each matmul's
        // backward overwrites its input gradient
        matmul_backward_cuda(dfch, g.fcprojw + l * C * 4 * C, g.fcprojb + l * C, a.dresidual, v.fch_gelu,
                             p.fcprojw + l * C * 4 * C, B, T, 4 * C, C);
        gelu_backward_cuda(dfch, v.fch, dfch, BT * 4 * C);
        matmul_backward_cuda(a.dbtc, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, dfch, v.ln2, p.fcw + l * 4 * C * C,
                             B, T, C, 4 * C);
        layernorm_backward_cuda(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, a.dbtc, v.residual2, p.ln2w + l * C,
                                v.ln2_mean, v.ln2_rstd, B, T, C);
        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward_cuda(a.dbtc, g.attprojw + l * C * C, g.attprojb + l * C, a.dresidual, v.atty,
                             p.attprojw + l * C * C, B, T, C, C);
        attn->backward(attn->ctx, dqkv, a.dbtc, v.qkv, v.atty, v.att_lse);
        matmul_backward_cuda(a.dbtc, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, dqkv, v.ln1, p.qkvw + l * 3 * C * C,
                             B, T, C, 3 * C);
        layernorm_backward_cuda(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, a.dbtc, v.residual, p.ln1w + l * C,
                                v.ln1_mean, v.ln1_rstd, B, T, C);
    }
    encoder_backward_cuda(g.wte, g.wpe, (int)model->host.wpe_begin, (int)model->host.wpe_end, a.dresidual, inputs,
                          positions, B, T, C, &acts->wte_buckets, &acts->wpe_buckets);
}

// AdamW over the host model's optimizer range of the trained vector (all of it, or
// a ZeRO-1 shard: the trainer then all-gathers the parameters, train/zero.h, and
// rounds them into the floatX copy, gpt2_cuda_round_weights), weight decay on the
// 2-D tensors' ones, as gpt2_update (gpt2_update_part says what it updates); the
// update writes the master weights and their floatX copy.
// t counts from 1.
static void gpt2_cuda_update(GPT2Cuda *model, float lr, float weight_decay, float grad_scale, int t) {
    size_t lo, hi, at, b = model->host.opt_begin;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!gpt2_update_part(&model->host, i, &lo, &hi, &at)) { continue; }
        float wd = parameter_is_2d(i) ? weight_decay : 0.0f;
        adamw_update_cuda(model->params_memory + at, model->params_x + at, model->grads_memory + lo,
                          model->m_memory + (lo - b), model->v_memory + (lo - b), hi - lo, lr, wd, grad_scale, t);
    }
}

#endif // LLMC_GPT2_CUH
