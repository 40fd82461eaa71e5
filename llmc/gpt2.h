/*
GPT-2, exactly as llm.c defines it: tied token embedding and lm head, learned
position embedding, pre-layernorm blocks (eps 1e-5), tanh-GELU MLP, vocabulary
padded to Vp for fast matmuls. CPU, fp32, OpenMP.

The model knows nothing about ranks. A forward pass gets the tokens it holds,
the position id of each token and the attention verbs; whoever splits the
sequence (cp/) chooses what those are. Every activation is sized by the tokens
this rank holds, T here, so activation memory scales with the local share.

The backward pass needs a gradient only for the residual stream and a few
scratch buffers that every layer reuses, like llm.c's GPU trainer. The classifier
(llmc/classifier.h) works through chunks of tokens and holds the logits of one
chunk only; in a training step its backward runs with the forward pass
(gpt2_forward_train), and gpt2_backward goes on from the gradient it left. With
-r (Activations.recompute) the backward pass recomputes GELU, or GELU and the
layernorms, instead of keeping them per layer.

The gradient and the AdamW state are laid out as the trained vector: llm.c's flat
vector, but for the rows of the position table that the model does not train
(gpt2_position_rows); with gpt2_position_weights the weights too, and a forward
pass gets the other rows it needs through a verb (EncoderRowsVerb, llmc/encoder.h).
About 650 lines in one file: the buffers, that layout and
the passes that read them by it belong together.
*/
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "adamw.h"
#include "attention_verbs.h"
#include "classifier.h"
#include "encoder.h"
#include "gelu.h"
#include "layernorm.h"
#include "matmul.h"
#include "residual.h"
#include "utils.h"

#define GPT2_EOT 50256

typedef struct {
    int max_seq_len;       // maxT, e.g. 1024
    int vocab_size;        // V, e.g. 50257
    int padded_vocab_size; // Vp, e.g. 50304
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// ----------------------------------------------------------------------------
// parameters

#define NUM_PARAMETER_TENSORS 16
// The parameter tensors in llm.c's order, as views into one buffer of elements of
// type X: float for the weights, gradients and AdamW moments (here and on the GPU);
// the GPU model's copy of the weights in its storage type (llmc/gpt2.cuh) takes
// the same views of floatX.
#define PARAMETER_TENSORS(X) \
    struct {                 \
        X *wte;      /* (Vp, C) */ \
        X *wpe;      /* (maxT, C) */ \
        X *ln1w;     /* (L, C) */ \
        X *ln1b;     /* (L, C) */ \
        X *qkvw;     /* (L, 3C, C) */ \
        X *qkvb;     /* (L, 3C) */ \
        X *attprojw; /* (L, C, C) */ \
        X *attprojb; /* (L, C) */ \
        X *ln2w;     /* (L, C) */ \
        X *ln2b;     /* (L, C) */ \
        X *fcw;      /* (L, 4C, C) */ \
        X *fcb;      /* (L, 4C) */ \
        X *fcprojw;  /* (L, C, 4C) */ \
        X *fcprojb;  /* (L, C) */ \
        X *lnfw;     /* (C) */ \
        X *lnfb;     /* (C) */ \
    }
typedef PARAMETER_TENSORS(float) ParameterTensors;
// the views are set as an array of pointers (point_views): the struct must be one
typedef char parameter_tensors_are_pointers[sizeof(ParameterTensors) == NUM_PARAMETER_TENSORS * sizeof(void *) ? 1 : -1];

// Points the n pointers of `views` (a struct of n pointers, as PARAMETER_TENSORS
// and ACTIVATION_TENSORS are) at consecutive spans of memory of bytes[i] bytes each.
static void point_views(void *views, void *memory, const size_t *bytes, int n) {
    char *p = (char *)memory;
    for (int i = 0; i < n; i++) {
        memcpy((char *)views + i * sizeof(void *), &p, sizeof(p)); // a pointer of any element type
        p += bytes[i];
    }
}

// weight decay applies to the 2-D tensors: the embeddings and the matmul weights
static int parameter_is_2d(int i) {
    return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
}

static void fill_in_parameter_sizes(size_t *sizes, GPT2Config c) {
    size_t C = c.channels, L = c.num_layers;
    sizes[0] = (size_t)c.padded_vocab_size * C;
    sizes[1] = (size_t)c.max_seq_len * C;
    sizes[2] = L * C;
    sizes[3] = L * C;
    sizes[4] = L * 3 * C * C;
    sizes[5] = L * 3 * C;
    sizes[6] = L * C * C;
    sizes[7] = L * C;
    sizes[8] = L * C;
    sizes[9] = L * C;
    sizes[10] = L * 4 * C * C;
    sizes[11] = L * 4 * C;
    sizes[12] = L * C * 4 * C;
    sizes[13] = L * C;
    sizes[14] = C;
    sizes[15] = C;
}

// Points the tensors of `params` (a PARAMETER_TENSORS of any element type) into one
// buffer of all parameters, elem_bytes a parameter.
static void point_parameters_of(void *params, void *memory, const size_t *sizes, size_t elem_bytes) {
    size_t bytes[NUM_PARAMETER_TENSORS];
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { bytes[i] = sizes[i] * elem_bytes; }
    point_views(params, memory, bytes, NUM_PARAMETER_TENSORS);
}

static void point_parameters(ParameterTensors *params, float *memory, const size_t *sizes) {
    point_parameters_of(params, memory, sizes, sizeof(float));
}

// ----------------------------------------------------------------------------
// activations, for B rows of T local tokens

// What the backward pass recomputes instead of keeping it per layer (llm.c's -r):
// 0 keeps everything; 1 recomputes GELU, so every layer shares one fch_gelu buffer;
// 2 also recomputes the two layernorms of each block, so every layer shares one
// ln1 and one ln2 buffer (their means and rstds stay per layer: they are small,
// and recomputing the layernorm writes the same values again). The recomputation
// is the forward computation itself, so the results are bit for bit those of 0.
#define RECOMPUTE_MAX 2

// The activation buffers, as views into one block of memory: X is an activation
// value's type (float here; floatX in the GPU model, llmc/gpt2.cuh); the statistics
// are fp32 in every build (layernorm means and rstds, the attention's log-sum-exp,
// the losses: activation_is_statistic).
#define ACTIVATION_TENSORS(X) \
    struct {                     \
        X *encoded;   /* (B, T, C) */ \
        X *ln1;       /* (L, B, T, C), or (B, T, C) shared by the layers at recompute 2 */ \
        float *ln1_mean;  /* (L, B, T) */ \
        float *ln1_rstd;  /* (L, B, T) */ \
        X *qkv;       /* (L, B, T, 3C) */ \
        X *atty;      /* (L, B, T, C) */ \
        float *att_lse;   /* (L, B, NH, T) log-sum-exp of each query's attention row */ \
        X *attproj;   /* (L, B, T, C) */ \
        X *residual2; /* (L, B, T, C) */ \
        X *ln2;       /* (L, B, T, C), or (B, T, C) shared at recompute 2 */ \
        float *ln2_mean;  /* (L, B, T) */ \
        float *ln2_rstd;  /* (L, B, T) */ \
        X *fch;       /* (L, B, T, 4C) */ \
        X *fch_gelu;  /* (L, B, T, 4C), or (B, T, 4C) shared at recompute 1 and 2 */ \
        X *fcproj;    /* (L, B, T, C) */ \
        X *residual3; /* (L, B, T, C) */ \
        X *lnf;       /* (B, T, C) */ \
        float *lnf_mean;  /* (B, T) */ \
        float *lnf_rstd;  /* (B, T) */ \
        X *logits;    /* (chunk_rows, Vp) one chunk of the classifier (llmc/classifier.h) */ \
        float *losses;    /* (B, T) per-token loss, 0 for ignored targets */ \
        /* backward scratch, reused by every layer */ \
        X *dresidual; /* (B, T, C) gradient of the residual stream */ \
        X *dbtc;      /* (B, T, C); after a training forward pass the gradient of lnf */ \
        X *dbt4c;     /* (B, T, 4C), also holds dqkv (B, T, 3C) */ \
    }
typedef ACTIVATION_TENSORS(float) ActivationTensors;

typedef struct {
    int B, T;
    int recompute;  // 0, 1 or 2, see RECOMPUTE_MAX
    int chunk_rows; // tokens per classifier chunk
    size_t num_bytes;
    void *memory;
    ActivationTensors t;
} Activations;

// The sizes of the activation buffers, in values, in the order of
// ActivationTensors. The one table of activation memory: the trainers' allocations
// (here and in the GPU model, llmc/gpt2.cuh, which lays out the same buffers in
// device memory, fill_in_activation_bytes) and any estimate of it come from here.
// Returns the total in values.
#define NUM_ACTIVATION_BUFFERS 24
typedef char activation_tensors_are_pointers[sizeof(ActivationTensors) == NUM_ACTIVATION_BUFFERS * sizeof(void *) ? 1 : -1];
#define ACTIVATION_BUFFER(field) ((int)(offsetof(ActivationTensors, field) / sizeof(void *)))

static size_t fill_in_activation_sizes(size_t *sizes, GPT2Config c, int B, int T, int recompute) {
    size_t L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    size_t BT = (size_t)B * T;
    size_t Lln = recompute >= 2 ? 1 : L, Lgelu = recompute >= 1 ? 1 : L;
    size_t chunk = (size_t)classifier_chunk_rows(c.padded_vocab_size, BT);
    size_t s[NUM_ACTIVATION_BUFFERS] = {
        BT * C, Lln * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C, L * B * NH * T, L * BT * C,
        L * BT * C, Lln * BT * C, L * BT, L * BT, L * BT * 4 * C, Lgelu * BT * 4 * C, L * BT * C, L * BT * C,
        BT * C, BT, BT, chunk * Vp, BT, BT * C, BT * C, BT * 4 * C};
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_BUFFERS; i++) {
        sizes[i] = s[i];
        total += s[i];
    }
    return total;
}

// Whether buffer i (in the order of ActivationTensors) holds fp32 statistics in
// every build, whatever the activations' type.
static int activation_is_statistic(int i) {
    return i == ACTIVATION_BUFFER(ln1_mean) || i == ACTIVATION_BUFFER(ln1_rstd) || i == ACTIVATION_BUFFER(att_lse) ||
           i == ACTIVATION_BUFFER(ln2_mean) || i == ACTIVATION_BUFFER(ln2_rstd) || i == ACTIVATION_BUFFER(lnf_mean) ||
           i == ACTIVATION_BUFFER(lnf_rstd) || i == ACTIVATION_BUFFER(losses);
}

// every buffer starts at a multiple of this many bytes (wide vector loads, and the
// alignment cuBLAS prefers), whatever the sizes of the buffers before it
#define ACTIVATION_ALIGN 256

// The bytes of each buffer of the activations of B rows of T tokens, x_bytes an
// activation value (a statistic takes 4), each rounded up to ACTIVATION_ALIGN.
// Returns the total: what the trainers allocate, and what their estimates count.
static size_t fill_in_activation_bytes(size_t *bytes, GPT2Config c, int B, int T, int recompute, size_t x_bytes) {
    size_t sizes[NUM_ACTIVATION_BUFFERS];
    fill_in_activation_sizes(sizes, c, B, T, recompute);
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_BUFFERS; i++) {
        size_t b = sizes[i] * (activation_is_statistic(i) ? sizeof(float) : x_bytes);
        bytes[i] = (b + ACTIVATION_ALIGN - 1) / ACTIVATION_ALIGN * ACTIVATION_ALIGN;
        total += bytes[i];
    }
    return total;
}

static void activations_init(Activations *acts, GPT2Config c, int B, int T, int recompute) {
    size_t bytes[NUM_ACTIVATION_BUFFERS];
    acts->B = B;
    acts->T = T;
    acts->recompute = recompute;
    acts->chunk_rows = classifier_chunk_rows(c.padded_vocab_size, (size_t)B * T);
    acts->num_bytes = fill_in_activation_bytes(bytes, c, B, T, recompute, sizeof(float));
    acts->memory = calloc_huge_pages(acts->num_bytes, 1);
    point_views(&acts->t, acts->memory, bytes, NUM_ACTIVATION_BUFFERS);
}

static void activations_free(Activations *acts) {
    free(acts->memory);
    memset(acts, 0, sizeof(*acts));
}

// The activations of block l, as views into the buffers: the block's own slices,
// or the shared slice of a buffer the backward pass recomputes. Shared by the
// CPU and GPU models' forward and backward passes; X as in ACTIVATION_TENSORS.
#define LAYER_ACTIVATIONS(X) \
    struct {                 \
        X *residual; /* (B, T, C) the block's input: encoded, or the previous block's residual3 */ \
        X *ln1;                                 \
        float *ln1_mean, *ln1_rstd;             \
        X *qkv, *atty;                          \
        float *att_lse;                         \
        X *attproj, *residual2, *ln2;           \
        float *ln2_mean, *ln2_rstd;             \
        X *fch, *fch_gelu, *fcproj, *residual3; \
    }
typedef LAYER_ACTIVATIONS(float) LayerActivations;

// Defines `static Layer name(const Tensors *a, int recompute, GPT2Config c, int B,
// int T, size_t l)`, the views of block l, for a pair of LAYER_ACTIVATIONS and
// ACTIVATION_TENSORS types of the same element type.
#define DEFINE_LAYER_ACTIVATIONS(name, Layer, Tensors)                                                 \
    static Layer name(const Tensors *a, int recompute, GPT2Config c, int B, int T, size_t l) {         \
        size_t C = c.channels, NH = c.num_heads, BT = (size_t)B * T;                                   \
        size_t lln = recompute >= 2 ? 0 : l, lgelu = recompute >= 1 ? 0 : l;                          \
        Layer v;                                                                                       \
        v.residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;                            \
        v.ln1 = a->ln1 + lln * BT * C;                                                                 \
        v.ln1_mean = a->ln1_mean + l * BT;                                                             \
        v.ln1_rstd = a->ln1_rstd + l * BT;                                                             \
        v.qkv = a->qkv + l * BT * 3 * C;                                                               \
        v.atty = a->atty + l * BT * C;                                                                 \
        v.att_lse = a->att_lse + l * B * NH * T;                                                       \
        v.attproj = a->attproj + l * BT * C;                                                           \
        v.residual2 = a->residual2 + l * BT * C;                                                       \
        v.ln2 = a->ln2 + lln * BT * C;                                                                 \
        v.ln2_mean = a->ln2_mean + l * BT;                                                             \
        v.ln2_rstd = a->ln2_rstd + l * BT;                                                             \
        v.fch = a->fch + l * BT * 4 * C;                                                               \
        v.fch_gelu = a->fch_gelu + lgelu * BT * 4 * C;                                                 \
        v.fcproj = a->fcproj + l * BT * C;                                                             \
        v.residual3 = a->residual3 + l * BT * C;                                                       \
        return v;                                                                                      \
    }
DEFINE_LAYER_ACTIVATIONS(layer_activations, LayerActivations, ActivationTensors)

// ----------------------------------------------------------------------------
// the model

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params;
    float *params_memory;
    // The rows [wpe_begin, wpe_end) of the position table (wpe) whose gradient and
    // AdamW state this model holds: all of them, unless the caller splits the
    // table's training over ranks (cp/position_table.h), because each position's
    // gradient comes only from the tokens at that position. The trained vector is
    // llm.c's flat vector with wpe cut down to those rows: grad_sizes are
    // param_sizes but for wpe, and grads, m and v are laid out by them.
    size_t wpe_begin, wpe_end;
    // 1: the weights hold those rows only too (gpt2_position_weights): params is
    // laid out as the trained vector, and other_rows fetches every other row a
    // forward pass needs
    int wpe_rows_only;
    EncoderRowsVerb other_rows;
    size_t grad_sizes[NUM_PARAMETER_TENSORS];
    size_t num_trained;
    ParameterTensors grads; // grads.wpe: row wpe_begin first
    float *grads_memory;    // (num_trained)
    // the AdamW state of the trained vector's [opt_begin, opt_end): all of it, or
    // under ZeRO-1 (-z 1, train/zero.h) one rank's shard, which is all this model
    // updates
    size_t opt_begin, opt_end;
    float *m_memory; // AdamW first moment, (opt_end - opt_begin)
    float *v_memory; // AdamW second moment, (opt_end - opt_begin)
} GPT2;

// the number of parameters of a model of configuration c (fill_in_parameter_sizes)
static size_t gpt2_num_parameters(GPT2Config c) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_in_parameter_sizes(sizes, c);
    size_t n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// The trained vector's length when the position table's gradient and moments hold
// `room` of its rows (gpt2_position_rows): every other parameter's, plus room C.
static size_t gpt2_num_trained(GPT2Config c, size_t room) {
    return gpt2_num_parameters(c) - (size_t)c.max_seq_len * c.channels + room * c.channels;
}

// The gradient and the AdamW state of the trained vector (zeroed), whole: the
// optimizer range is all of it. The rest of the old ones is freed before it was
// ever written, so it never becomes resident.
static void gpt2_allocate_trained(GPT2 *model) {
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    size_t n = model->num_trained;
    model->grads_memory = (float *)calloc_huge_pages(n, sizeof(float));
    model->opt_begin = 0;
    model->opt_end = n;
    model->m_memory = (float *)calloc_huge_pages(n, sizeof(float));
    model->v_memory = (float *)calloc_huge_pages(n, sizeof(float));
    point_parameters(&model->grads, model->grads_memory, model->grad_sizes);
}

static void gpt2_allocate(GPT2 *model, GPT2Config config) {
    model->config = config;
    fill_in_parameter_sizes(model->param_sizes, config);
    model->num_parameters = gpt2_num_parameters(config);
    model->params_memory = (float *)calloc_huge_pages(model->num_parameters, sizeof(float));
    point_parameters(&model->params, model->params_memory, model->param_sizes);
    model->wpe_begin = 0;
    model->wpe_end = (size_t)config.max_seq_len;
    model->wpe_rows_only = 0;
    model->other_rows = (EncoderRowsVerb){NULL, NULL};
    memcpy(model->grad_sizes, model->param_sizes, sizeof(model->grad_sizes));
    model->num_trained = model->num_parameters;
    model->grads_memory = model->m_memory = model->v_memory = NULL;
    gpt2_allocate_trained(model);
}

// Trains only the rows [begin, end) of the position table (in room for `room`
// rows, so that every rank of a split holds buffers of one size): its gradient
// and moments shrink to those rows. Before any gradient or moment is written.
static void gpt2_position_rows(GPT2 *model, size_t begin, size_t end, size_t room) {
    size_t maxT = (size_t)model->config.max_seq_len, C = model->config.channels;
    if (model->wpe_rows_only) { fatal("the position rows of a model that holds some rows only are fixed"); }
    if (begin > end || end > maxT || end - begin > room || room > maxT) {
        fatal("the position rows [%zu, %zu) in room for %zu lie outside the table's %zu rows", begin, end, room, maxT);
    }
    model->wpe_begin = begin;
    model->wpe_end = end;
    model->grad_sizes[1] = room * C;
    model->num_trained = gpt2_num_trained(model->config, room);
    gpt2_allocate_trained(model);
}

// Keeps the weights of the trained rows only (those of gpt2_position_rows): the
// parameters take the trained vector's layout, and other_rows fetches the rows
// of other positions in every forward pass. After every rank's weights are the same
// (the trainers' start-up), since the rest of the table is dropped here.
static void gpt2_position_weights(GPT2 *model, EncoderRowsVerb other_rows) {
    if (model->wpe_rows_only) { return; }
    size_t C = model->config.channels, wte = model->param_sizes[0], table = model->param_sizes[1];
    size_t rows = (model->wpe_end - model->wpe_begin) * C, after = model->num_parameters - wte - table;
    float *held = (float *)calloc_huge_pages(model->num_trained, sizeof(float));
    memcpy(held, model->params_memory, wte * sizeof(float));
    memcpy(held + wte, model->params_memory + wte + model->wpe_begin * C, rows * sizeof(float));
    memcpy(held + wte + model->grad_sizes[1], model->params_memory + wte + table, after * sizeof(float));
    free(model->params_memory);
    model->params_memory = held;
    point_parameters(&model->params, held, model->grad_sizes);
    model->wpe_rows_only = 1;
    model->other_rows = other_rows;
}

// The model with the position table's rows [0, n) taken from rows ((n, C), not
// owned): for forward passes whose positions lie below n (a sample), where the
// model holds some rows only. Shares everything else with model.
static GPT2 gpt2_with_first_rows(const GPT2 *model, float *rows, size_t n) {
    GPT2 view = *model;
    view.params.wpe = rows;
    view.wpe_begin = 0;
    view.wpe_end = n;
    view.wpe_rows_only = 1;
    view.other_rows = (EncoderRowsVerb){NULL, NULL};
    return view;
}

// The rows [*begin, *end) of the position table the model's weights hold; where
// nothing fetches the others (fetches 0), every one of the n positions must lie
// inside them.
static void gpt2_held_rows(const GPT2 *model, const int *positions, int n, int fetches, int *begin, int *end) {
    *begin = model->wpe_rows_only ? (int)model->wpe_begin : 0;
    *end = model->wpe_rows_only ? (int)model->wpe_end : model->config.max_seq_len;
    int outside = fetches ? -1 : position_outside(positions, n, *begin, *end);
    if (outside >= 0) {
        fatal("position %d lies outside the rows [%d, %d) of the position table the model holds, and nothing fetches "
              "the others", positions[outside], *begin, *end);
    }
}

// The floats of params_memory: all parameters, or with gpt2_position_weights the
// trained vector's.
static size_t gpt2_num_held(const GPT2 *model) {
    return model->wpe_rows_only ? model->num_trained : model->num_parameters;
}

// Keeps the AdamW state of the trained vector's [begin, end) only (zeroed).
static void gpt2_optimizer_range(GPT2 *model, size_t begin, size_t end) {
    if (begin > end || end > model->num_trained) {
        fatal("the optimizer range [%zu, %zu) lies outside the model's %zu trained parameters", begin, end,
              model->num_trained);
    }
    free(model->m_memory);
    free(model->v_memory);
    model->opt_begin = begin;
    model->opt_end = end;
    model->m_memory = (float *)calloc_huge_pages(end - begin > 0 ? end - begin : 1, sizeof(float));
    model->v_memory = (float *)calloc_huge_pages(end - begin > 0 ? end - begin : 1, sizeof(float));
}

// The part of tensor i (llm.c's order) of a flat vector laid out by `sizes` inside
// its range [begin, end), as [*lo, *hi) of that vector; returns 0 when it has none.
static int range_part_of_tensor(const size_t *sizes, size_t begin, size_t end, int i, size_t *lo, size_t *hi) {
    size_t start = 0;
    for (int j = 0; j < i; j++) { start += sizes[j]; }
    *lo = start > begin ? start : begin;
    *hi = start + sizes[i] < end ? start + sizes[i] : end;
    return *lo < *hi;
}

// Where element `at` of the trained vector's tensor i lies in the parameters:
// wte's in the same place, wpe's trained rows from row wpe_begin, and the tensors
// after it moved by what the trained vector leaves out of wpe.
static size_t trained_to_parameter(const GPT2 *model, int i, size_t at) {
    if (i == 0 || model->wpe_rows_only) { return at; }
    if (i == 1) { return at + model->wpe_begin * model->config.channels; }
    return at + model->param_sizes[1] - model->grad_sizes[1];
}

// Whether the model trains every row of the position table.
static int gpt2_trains_whole_table(const GPT2 *model) { return model->grad_sizes[1] == model->param_sizes[1]; }

// The parameters [*begin, *end) of llm.c's flat vector whose AdamW state the
// model holds: its optimizer range, which with some rows of the table only is all
// of the trained vector (gpt2_position_rows leaves no shard): [0, all parameters).
static void gpt2_optimizer_range_flat(const GPT2 *model, size_t *begin, size_t *end) {
    int whole_range = model->opt_begin == 0 && model->opt_end == model->num_trained;
    if (!gpt2_trains_whole_table(model) && !whole_range) {
        fatal("the optimizer range [%zu, %zu) of a model that trains some rows of the position table", model->opt_begin,
              model->opt_end);
    }
    *begin = model->opt_begin;
    *end = gpt2_trains_whole_table(model) ? model->opt_end : model->num_parameters;
}

static void gpt2_free(GPT2 *model) {
    free(model->params_memory);
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    memset(model, 0, sizeof(*model));
}

// ----------------------------------------------------------------------------
// forward, backward, update

// Computes the activations of B rows of T local tokens through the final
// layernorm (acts->t.lnf); with targets also the per-token losses (acts->t.losses),
// and with grad the classifier's backward (llmc/classifier.h), which writes the
// gradient of lnf into acts->t.dbtc and accumulates into model->grads.wte.
static void gpt2_forward_pass(GPT2 *model, Activations *acts, const int *inputs, const int *positions,
                              const int *targets, float dloss, int grad, const AttentionVerbs *attn) {
    GPT2Config c = model->config;
    int B = acts->B, T = acts->T;
    size_t L = c.num_layers, C = c.channels;
    size_t BT = (size_t)B * T;
    ParameterTensors p = model->params;
    ActivationTensors a = acts->t;
    int held_begin, held_end;
    gpt2_held_rows(model, positions, (int)BT, model->other_rows.fetch != NULL, &held_begin, &held_end);
    float *other_rows = NULL; // (B, T, C) in the backward's scratch, dead in the forward pass
    if (model->other_rows.fetch) { // every pass, whatever its tokens: the ranks that hold the rows take part in it
        other_rows = a.dbt4c;
        model->other_rows.fetch(model->other_rows.ctx, p.wpe, other_rows, a.dbt4c + BT * C);
    }
    encoder_forward(a.encoded, inputs, positions, p.wte, p.wpe, held_begin, held_end, other_rows, B, T, (int)C);
    for (size_t l = 0; l < L; l++) {
        LayerActivations v = layer_activations(&a, acts->recompute, c, B, T, l);
        layernorm_forward(v.ln1, v.ln1_mean, v.ln1_rstd, v.residual, p.ln1w + l * C, p.ln1b + l * C, B, T, C);
        matmul_forward(v.qkv, v.ln1, p.qkvw + l * 3 * C * C, p.qkvb + l * 3 * C, B, T, C, 3 * C);
        attn->forward(attn->ctx, v.atty, v.att_lse, v.qkv);
        matmul_forward(v.attproj, v.atty, p.attprojw + l * C * C, p.attprojb + l * C, B, T, C, C);
        residual_forward(v.residual2, v.residual, v.attproj, BT * C);
        layernorm_forward(v.ln2, v.ln2_mean, v.ln2_rstd, v.residual2, p.ln2w + l * C, p.ln2b + l * C, B, T, C);
        matmul_forward(v.fch, v.ln2, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C, B, T, C, 4 * C);
        gelu_forward(v.fch_gelu, v.fch, BT * 4 * C);
        matmul_forward(v.fcproj, v.fch_gelu, p.fcprojw + l * C * 4 * C, p.fcprojb + l * C, B, T, 4 * C, C);
        residual_forward(v.residual3, v.residual2, v.fcproj, BT * C);
    }
    float *last = a.residual3 + (L - 1) * BT * C;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, last, p.lnfw, p.lnfb, B, T, C);
    if (targets != NULL) {
        classifier_forward(a.losses, grad ? a.dbtc : NULL, model->grads.wte, a.logits, a.lnf, p.wte, targets, dloss,
                           (int)BT, acts->chunk_rows, (int)C, c.vocab_size, c.padded_vocab_size);
    }
}

// The forward pass of B rows of T local tokens: with targets (B, T) the per-token
// losses (acts->t.losses), without (NULL, inference) only what gpt2_logits needs.
// inputs, positions: (B, T)
static void gpt2_forward(GPT2 *model, Activations *acts, const int *inputs, const int *positions,
                         const int *targets, const AttentionVerbs *attn) {
    gpt2_forward_pass(model, acts, inputs, positions, targets, 0.0f, 0, attn);
}

// The forward pass of a training step: gpt2_forward's losses, and the classifier's
// part of the backward pass, which runs chunk by chunk with the forward (see
// llmc/classifier.h): it accumulates into the gradients, so zero them first.
// dloss = 1 / (valid targets in the global batch), so that summing the gradients
// of all ranks gives the gradient of the mean loss. gpt2_backward follows.
static void gpt2_forward_train(GPT2 *model, Activations *acts, const int *inputs, const int *positions,
                               const int *targets, float dloss, const AttentionVerbs *attn) {
    gpt2_forward_pass(model, acts, inputs, positions, targets, dloss, 1, attn);
}

// The logits of token `row` (b * T + t) after a forward pass: (Vp), in acts->t.logits.
static const float *gpt2_logits(GPT2 *model, Activations *acts, size_t row) {
    GPT2Config c = model->config;
    classifier_logits(acts->t.logits, acts->t.lnf + row * c.channels, model->params.wte, c.channels,
                      c.padded_vocab_size);
    return acts->t.logits;
}

// the gradient zeroed in pieces over the threads: one core alone zeroes GPT-2 124M's
// 500 MB at about half the rate two do
#define ZERO_GRAD_PIECE ((size_t)1 << 20) // floats
static void gpt2_zero_grad(GPT2 *model) {
    size_t n = model->num_trained;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += ZERO_GRAD_PIECE) {
        memset(model->grads_memory + i, 0, (n - i < ZERO_GRAD_PIECE ? n - i : ZERO_GRAD_PIECE) * sizeof(float));
    }
}

// Accumulates the rest of the gradient of (sum of this rank's token losses) * dloss
// into the parameter gradients, from the gradient of lnf that gpt2_forward_train
// left (acts->t.dbtc); needs that pass just before. inputs, positions: (B, T)
static void gpt2_backward(GPT2 *model, Activations *acts, const int *inputs, const int *positions,
                          const AttentionVerbs *attn) {
    GPT2Config c = model->config;
    int B = acts->B, T = acts->T;
    size_t L = c.num_layers, C = c.channels;
    size_t BT = (size_t)B * T;
    ParameterTensors p = model->params;
    ParameterTensors g = model->grads;
    ActivationTensors a = acts->t;
    // the final layernorm
    memset(a.dresidual, 0, BT * C * sizeof(float));
    float *last = a.residual3 + (L - 1) * BT * C;
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, a.dbtc, last, p.lnfw, a.lnf_mean, a.lnf_rstd, B, T, C);
    // the blocks, last to first; dresidual is the gradient of each block's output,
    // and both branches of a residual add receive it unchanged
    for (int l = (int)L - 1; l >= 0; l--) {
        LayerActivations v = layer_activations(&a, acts->recompute, c, B, T, (size_t)l);
        float *dfch = a.dbt4c;  // (B, T, 4C)
        float *dqkv = a.dbt4c;  // (B, T, 3C), once the MLP is done with the buffer
        // what -r left out of the forward pass, recomputed as the forward computed it
        if (acts->recompute >= 2) {
            layernorm_forward(v.ln1, v.ln1_mean, v.ln1_rstd, v.residual, p.ln1w + l * C, p.ln1b + l * C, B, T, C);
            layernorm_forward(v.ln2, v.ln2_mean, v.ln2_rstd, v.residual2, p.ln2w + l * C, p.ln2b + l * C, B, T, C);
        }
        if (acts->recompute >= 1) { gelu_forward(v.fch_gelu, v.fch, BT * 4 * C); }
        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward(dfch, g.fcprojw + l * C * 4 * C, g.fcprojb + l * C, a.dresidual, v.fch_gelu,
                        p.fcprojw + l * C * 4 * C, B, T, 4 * C, C);
        gelu_backward(dfch, v.fch, dfch, BT * 4 * C);
        matmul_backward(a.dbtc, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, dfch, v.ln2, p.fcw + l * 4 * C * C,
                        B, T, C, 4 * C);
        layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, a.dbtc, v.residual2, p.ln2w + l * C,
                           v.ln2_mean, v.ln2_rstd, B, T, C);
        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward(a.dbtc, g.attprojw + l * C * C, g.attprojb + l * C, a.dresidual, v.atty,
                        p.attprojw + l * C * C, B, T, C, C);
        attn->backward(attn->ctx, dqkv, a.dbtc, v.qkv, v.atty, v.att_lse);
        matmul_backward(a.dbtc, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, dqkv, v.ln1, p.qkvw + l * 3 * C * C,
                        B, T, C, 3 * C);
        layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, a.dbtc, v.residual, p.ln1w + l * C,
                           v.ln1_mean, v.ln1_rstd, B, T, C);
    }
    encoder_backward(g.wte, g.wpe, (int)model->wpe_begin, (int)model->wpe_end, a.dresidual, inputs, positions, B, T, C);
}

// The part of tensor i that AdamW updates: the trained vector's [*lo, *hi) inside
// the optimizer range (of wpe only the trained rows, not the room after them),
// whose parameters start at *param. Returns 0 when the range has none of it.
static int gpt2_update_part(const GPT2 *model, int i, size_t *lo, size_t *hi, size_t *param) {
    if (!range_part_of_tensor(model->grad_sizes, model->opt_begin, model->opt_end, i, lo, hi)) { return 0; }
    size_t rows_end = model->grad_sizes[0] + (model->wpe_end - model->wpe_begin) * model->config.channels;
    if (i == 1 && *hi > rows_end) { *hi = rows_end > *lo ? rows_end : *lo; }
    *param = trained_to_parameter(model, i, *lo);
    return *lo < *hi;
}

// AdamW over the trained vector's optimizer range (all of it, or a ZeRO-1
// shard), weight decay on the 2-D tensors' ones. t counts from 1.
static void gpt2_update(GPT2 *model, float lr, float weight_decay, float grad_scale, int t) {
    size_t lo, hi, at, b = model->opt_begin;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!gpt2_update_part(model, i, &lo, &hi, &at)) { continue; }
        float wd = parameter_is_2d(i) ? weight_decay : 0.0f;
        adamw_update(model->params_memory + at, model->grads_memory + lo, model->m_memory + (lo - b),
                     model->v_memory + (lo - b), hi - lo, lr, wd, grad_scale, t);
    }
}

#endif // LLMC_GPT2_H
