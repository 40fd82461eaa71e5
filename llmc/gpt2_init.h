/*
A new GPT-2 as llm.c makes one: the model descriptors of -e (llm.c's presets),
the checks every configuration passes (from flags or from a model file), and
llm.c's random init, draw for draw.
*/
#ifndef LLMC_GPT2_INIT_H
#define LLMC_GPT2_INIT_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt2.h"
#include "rand.h"
#include "utils.h"

// llm.c's model descriptors (-e): "dN" and "gpt2:dN" a GPT-2 of depth N, "gpt3:cN"
// a GPT-3 of N channels, with llm.c's presets; a GPT-2 depth that is no preset
// gets 64 channels and one head per layer (the small models of the tests).
// Returns 1 with the shapes in *c, 0 when `init` is no descriptor (a checkpoint
// file), -1 with the reason in why for a descriptor of no model.
static int gpt2_config_from_descriptor(const char *init, GPT2Config *c, char *why, size_t why_size) {
    int is_gpt3 = strncmp(init, "gpt3:c", 6) == 0;
    const char *number = is_gpt3 || strncmp(init, "gpt2:d", 6) == 0 ? init + 6 : init[0] == 'd' ? init + 1 : NULL;
    if (number == NULL) { return 0; }
    char *end;
    long n = strtol(number, &end, 10);
    if (end == number || *end != '\0') {
        if (number == init + 1) { return 0; } // "d..." that is no number: a file name
        return problem(why, why_size, "'%s' is no model descriptor (gpt2:dN takes a depth, gpt3:cN channels)", init);
    }
    if (n < 1 || n > 1000000) { return problem(why, why_size, "the %s must lie in [1, 1000000]", is_gpt3 ? "channels" : "depth"); }
    c->vocab_size = 50257;
    c->padded_vocab_size = 50304;
    if (is_gpt3) {
        //                         C     L  head size
        static const int gpt3[][3] = {{384, 6, 64}, {768, 12, 64}, {1024, 24, 64}, {1536, 24, 96}, {2048, 24, 128},
                                      {2560, 32, 80}, {4096, 32, 128}, {5140, 40, 128}, {12288, 96, 128}};
        for (size_t i = 0; i < sizeof(gpt3) / sizeof(gpt3[0]); i++) {
            if (gpt3[i][0] == n && n % gpt3[i][2] != 0) {
                return problem(why, why_size, "llm.c's table gives %ld channels a head size of %d, which does not "
                               "divide them (llm.c stops there too, at an assert)", n, gpt3[i][2]);
            }
            if (gpt3[i][0] == n) {
                c->channels = gpt3[i][0];
                c->num_layers = gpt3[i][1];
                c->num_heads = gpt3[i][0] / gpt3[i][2];
                c->max_seq_len = 2048;
                return 1;
            }
        }
        return problem(why, why_size, "llm.c has no GPT-3 of %ld channels (384, 768, 1024, 1536, 2048, 2560, 4096, "
                       "5140, 12288)", n);
    }
    //                       L     C    NH
    static const int gpt2[][3] = {{6, 384, 6}, {12, 768, 12}, {24, 1024, 16}, {36, 1280, 20}, {48, 1600, 25},
                                  {60, 1920, 30}, {72, 2880, 30}, {84, 3456, 36}};
    c->num_layers = (int)n;
    c->channels = 64 * (int)n;
    c->num_heads = (int)n;
    for (size_t i = 0; i < sizeof(gpt2) / sizeof(gpt2[0]); i++) {
        if (gpt2[i][0] == n) {
            c->channels = gpt2[i][1];
            c->num_heads = gpt2[i][2];
        }
    }
    c->max_seq_len = 1024;
    return 1;
}

// llm.c's random init (gpt_build_from_descriptor), draw for draw: one Mersenne
// Twister seeded with `seed` (llm.c: 42) fills, in PyTorch's order, wte (its V real
// rows), wpe, then layer by layer that layer's qkvw, attprojw, fcw and fcprojw, all
// N(0, 0.02) except the two projections into the residual stream, N(0, 0.02 /
// sqrt(2L)). Biases and the padded vocabulary rows are 0, layernorm weights 1.
// Same seed, same weights (the trainers draw them on rank 0 and broadcast them).
static void gpt2_init_random(GPT2 *model, GPT2Config config, uint32_t seed) {
    gpt2_allocate(model, config);
    Mt19937 mt;
    mt_seed(&mt, seed);
    ParameterTensors *p = &model->params;
    size_t C = config.channels, L = config.num_layers;
    float residual_std = 0.02f * (1.0f / sqrtf(2.0f * L));
    mt_normal(&mt, p->wte, (size_t)config.vocab_size * C, 0.0f, 0.02f);
    mt_normal(&mt, p->wpe, model->param_sizes[1], 0.0f, 0.02f);
    for (size_t l = 0; l < L; l++) {
        mt_normal(&mt, p->qkvw + l * 3 * C * C, 3 * C * C, 0.0f, 0.02f);
        mt_normal(&mt, p->attprojw + l * C * C, C * C, 0.0f, residual_std);
        mt_normal(&mt, p->fcw + l * 4 * C * C, 4 * C * C, 0.0f, 0.02f);
        mt_normal(&mt, p->fcprojw + l * 4 * C * C, 4 * C * C, 0.0f, residual_std);
    }
    for (size_t i = 0; i < L * C; i++) { p->ln1w[i] = 1.0f; p->ln2w[i] = 1.0f; }
    for (size_t i = 0; i < C; i++) { p->lnfw[i] = 1.0f; }
}

// Checks a model configuration read from a file or built from flags. The bounds
// keep every size computation far from overflow; GPT-2 XL is well inside them.
static int gpt2_config_check(GPT2Config c, char *why, size_t why_size) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.channels <= 0) {
        return problem(why, why_size, "every size must be positive (maxT %d, V %d, L %d, NH %d, C %d)",
                       c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels);
    }
    if (c.max_seq_len > (1 << 20) || c.padded_vocab_size > (1 << 20) || c.num_layers > 4096 || c.channels > (1 << 16)) {
        return problem(why, why_size, "sizes beyond this trainer's bounds (maxT %d <= 2^20, Vp %d <= 2^20, "
                       "L %d <= 4096, C %d <= 2^16)", c.max_seq_len, c.padded_vocab_size, c.num_layers, c.channels);
    }
    if (c.padded_vocab_size < c.vocab_size) {
        return problem(why, why_size, "padded vocabulary %d is smaller than the vocabulary %d",
                       c.padded_vocab_size, c.vocab_size);
    }
    if (c.channels % c.num_heads != 0) {
        return problem(why, why_size, "channels %d are not divisible by heads %d", c.channels, c.num_heads);
    }
    if (c.vocab_size > 65536) {
        return problem(why, why_size, "vocabulary %d does not fit the uint16 token files", c.vocab_size);
    }
    return 0;
}

#endif // LLMC_GPT2_INIT_H
