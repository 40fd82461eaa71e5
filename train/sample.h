/*
Sampling text from the model during training, unsharded on one rank, as llm.c
prints it.
*/
#ifndef TRAIN_SAMPLE_H
#define TRAIN_SAMPLE_H

#include <stdio.h>
#include <stdlib.h>
#include "../cp/layout.h"
#include "../cp/sharder.h"
#include "../llmc/gpt2.h"
#include "../llmc/rand.h"
#include "../llmc/sampler.h"
#include "../llmc/tokenizer.h"
#include "../llmc/utils.h"
#include "config.h"

// The logits (host, at least V floats) of position t - 1 after a forward pass over
// the row sharded in sh (identity layout, this rank alone).
typedef const float *(*NextTokenLogits)(void *ctx, const CpSharder *sh, int t);

// Generates gen_tokens tokens after an EOT (sample_start_token: the model's
// vocabulary may be too small for GPT-2's), unsharded on this rank alone, and
// prints them. The whole window is run every time, as llm.c does: causal attention
// makes the filler after position t-1 irrelevant to its logits.
static void generate_sample(const TrainConfig *cfg, GPT2Config c, const Tokenizer *tokenizer, Rng *rng,
                            NextTokenLogits next_logits, void *ctx) {
    int T = cfg->gen_tokens;
    int *tokens = (int *)mallocCheck((size_t)T * sizeof(int));
    int *no_targets = (int *)mallocCheck((size_t)T * sizeof(int));
    int eot = tokenizer->token_table ? tokenizer->eot_token : -1;
    int start = sample_start_token(c.vocab_size, eot, GPT2_EOT);
    for (int t = 0; t < T; t++) { tokens[t] = start; no_targets[t] = IGNORE_INDEX; }
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_IDENTITY, 0, 1, c.max_seq_len, run_documents(cfg));
    if (start == eot && start != GPT2_EOT) {
        printf("note: samples start from the tokenizer's EOT, token %d\n", start);
    } else if (start != GPT2_EOT) {
        printf("note: samples start from token %d: the model's vocabulary of %d tokens holds no EOT token "
               "(GPT-2's is %d)\n", start, c.vocab_size, GPT2_EOT);
    }
    printf("generating:\n---\n");
    Utf8Printer printer = {0};
    for (int t = 1; t < T; t++) {
        if (cp_shard_batch(&sh, tokens, no_targets, NULL, 1, T) != CP_OK) { fatal("%s", sh.error); }
        const float *logits = next_logits(ctx, &sh, t);
        tokens[t] = sample_softmax(logits, c.vocab_size, rng_uniform(rng));
        tokenizer_print(tokenizer, &printer, tokens[t]);
        fflush(stdout);
        note_progress(); // this rank samples alone: the others wait for it
    }
    utf8_printer_finish(&printer, stdout);
    printf("\n---\n");
    cp_sharder_free(&sh);
    free(tokens);
    free(no_targets);
}

#endif // TRAIN_SAMPLE_H
