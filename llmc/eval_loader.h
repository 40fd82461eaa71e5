/*
The multiple-choice eval loader of -h 1 (HellaSwag), reading llm.c's eval file
format (dev/data/data_common.py write_evalfile there):

    header: 256 int32, [0] = 20240522 magic, [1] = 1 version, [2] = examples,
            [3] = the longest example in bytes
    then per example a stream of uint16:
        65535 (start), its size in bytes (these 3 fields included), its index,
        the label (the right completion), the number of completions (4),
        the context length and its tokens, then per completion its length and tokens

An example fills 4 rows of a batch: each row is the context followed by one
completion. Only the targets that predict completion tokens are scored (the
others are the ignore target), and a row's score is the mean loss over them;
the example is right when its lowest-scoring row is the label's. A batch holds
B / 4 examples. As in llm.c, data-parallel replica k of dp takes the k-th slice of
ceil(N / dp) examples, and every replica runs the same number of batches (a
replica out of examples runs empty rows), so that the collectives line up.

The whole file is read and checked at start-up: a bad file ends the run with one
line naming the file and the problem.
*/
#ifndef LLMC_EVAL_LOADER_H
#define LLMC_EVAL_LOADER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "classifier.h"
#include "utils.h"

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_COMPLETIONS 4

typedef struct {
    int B, T;
    int num_examples;      // in the file, over all replicas
    int start, end;        // this replica's examples [start, end)
    int num_batches;       // the same on every replica
    int next;              // the next example of this replica to load
    uint16_t *stream;      // the examples, as in the file
    size_t *offsets;       // (num_examples) where each one starts in stream
    int *inputs;           // (B, T)
    int *targets;          // (B, T) the completion tokens where scored, else IGNORE_INDEX
    int *labels;           // (B / 4) the right completion of each example of the batch, -1 for none
} EvalLoader;

// Checks example `index` at stream[at ..] (n uint16 left) against the rules and
// the run's T and vocabulary; returns its length in uint16 or -1 with why.
static long eval_example_check(const uint16_t *e, size_t n, int index, int T, int vocab_size, char *why,
                               size_t why_size) {
    if (n < 6) { return problem(why, why_size, "example %d is cut short", index); }
    if (e[0] != 65535) { return problem(why, why_size, "example %d does not start with the delimiter 65535", index); }
    size_t len = e[1] / 2;
    if (e[1] % 2 != 0 || len < 6 || len > n) {
        return problem(why, why_size, "example %d: its size of %u bytes does not fit the file", index, e[1]);
    }
    if (e[2] != index % 65536) { return problem(why, why_size, "example %d is numbered %u", index, e[2]); }
    if (e[3] >= EVAL_COMPLETIONS) { return problem(why, why_size, "example %d: label %u is not below 4", index, e[3]); }
    if (e[4] != EVAL_COMPLETIONS) {
        return problem(why, why_size, "example %d has %u completions (llm.c's format has 4)", index, e[4]);
    }
    // context, then the completions: each a length and that many tokens
    size_t at = 5, context = e[at];
    if (context < 1 || context >= (size_t)T) {
        return problem(why, why_size, "example %d: a context of %zu tokens does not leave room in T %d", index,
                       context, T);
    }
    for (int part = 0; part <= EVAL_COMPLETIONS; part++) {
        if (at >= len) { return problem(why, why_size, "example %d ends inside completion %d", index, part - 1); }
        size_t count = e[at];
        if (part > 0 && (count < 1 || context + count > (size_t)T)) {
            return problem(why, why_size, "example %d: context %zu + completion %d of %zu tokens exceed T %d", index,
                           context, part - 1, count, T);
        }
        if (at + 1 + count > len) { return problem(why, why_size, "example %d ends inside its tokens", index); }
        for (size_t i = at + 1; i < at + 1 + count; i++) {
            if (e[i] >= vocab_size) {
                return problem(why, why_size, "example %d: token %u is not below the vocabulary size %d", index, e[i],
                               vocab_size);
            }
        }
        at += 1 + count;
    }
    if (at != len) { return problem(why, why_size, "example %d: its size says %zu uint16, its fields %zu", index, len, at); }
    return (long)len;
}

// Reads and checks the whole eval file; returns 0, or -1 with the reason in why.
static int evalloader_init(EvalLoader *el, const char *path, int B, int T, int dp_rank, int dp_size,
                           int vocab_size, char *why, size_t why_size) {
    memset(el, 0, sizeof(*el));
    if (B < EVAL_COMPLETIONS) {
        return problem(why, why_size, "-b %d: a batch must hold the 4 completions of an example (-b 4 or more)", B);
    }
    FILE *fp = open_input_file(path, why, why_size);
    if (fp == NULL) { return -1; }
    long size = file_size_of(fp, path);
    int header[256];
    if (size < (long)sizeof(header) || fread(header, sizeof(int), 256, fp) != 256) {
        fclose(fp);
        return problem(why, why_size, "%ld bytes, shorter than its header", size);
    }
    if (header[0] != EVAL_MAGIC || header[1] != EVAL_VERSION) {
        fclose(fp);
        return problem(why, why_size, "magic %d version %d, expected llm.c's eval file (%d, %d)", header[0], header[1],
                       EVAL_MAGIC, EVAL_VERSION);
    }
    if (header[2] < dp_size) {
        fclose(fp);
        return problem(why, why_size, "%d examples, fewer than the %d data-parallel replicas", header[2], dp_size);
    }
    size_t n = (size_t)(size - (long)sizeof(header)) / 2;
    el->stream = (uint16_t *)mallocCheck(n * sizeof(uint16_t) + 1);
    if ((size - (long)sizeof(header)) % 2 != 0 || fread(el->stream, sizeof(uint16_t), n, fp) != n) {
        fclose(fp);
        return problem(why, why_size, "cannot read its examples (an odd size?)");
    }
    fclose(fp);
    el->num_examples = header[2];
    el->offsets = (size_t *)mallocCheck((size_t)el->num_examples * sizeof(size_t));
    size_t at = 0;
    for (int i = 0; i < el->num_examples; i++) {
        long len = eval_example_check(el->stream + at, n - at, i, T, vocab_size, why, why_size);
        if (len < 0) { return -1; }
        el->offsets[i] = at;
        at += (size_t)len;
    }
    if (at != n) { return problem(why, why_size, "%zu uint16 after its %d examples", n - at, el->num_examples); }
    el->B = B;
    el->T = T;
    int per_replica = (el->num_examples + dp_size - 1) / dp_size;
    int per_batch = B / EVAL_COMPLETIONS;
    el->num_batches = (per_replica + per_batch - 1) / per_batch;
    el->start = per_replica * dp_rank < el->num_examples ? per_replica * dp_rank : el->num_examples;
    el->end = el->start + per_replica < el->num_examples ? el->start + per_replica : el->num_examples;
    el->next = el->start;
    el->inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    el->targets = (int *)mallocCheck((size_t)B * T * sizeof(int));
    el->labels = (int *)mallocCheck((size_t)per_batch * sizeof(int));
    return 0;
}

static void evalloader_reset(EvalLoader *el) { el->next = el->start; }

// The next batch: B / 4 examples of this replica (fewer at its end), 4 rows each;
// rows without an example hold token 0 and no scored target.
static void evalloader_next_batch(EvalLoader *el) {
    int B = el->B, T = el->T;
    for (size_t i = 0; i < (size_t)B * T; i++) {
        el->inputs[i] = 0;
        el->targets[i] = IGNORE_INDEX;
    }
    for (int k = 0; k < B / EVAL_COMPLETIONS; k++) {
        el->labels[k] = -1;
        if (el->next >= el->end) { continue; }
        const uint16_t *e = el->stream + el->offsets[el->next++];
        el->labels[k] = e[3];
        int context = e[5];
        const uint16_t *completion = e + 6 + context;
        for (int c = 0; c < EVAL_COMPLETIONS; c++) {
            int *in = el->inputs + (size_t)(k * EVAL_COMPLETIONS + c) * T;
            int *tg = el->targets + (size_t)(k * EVAL_COMPLETIONS + c) * T;
            int len = completion[0];
            for (int t = 0; t < context; t++) { in[t] = e[6 + t]; }
            // the last context token predicts the first completion token, and so on
            for (int t = 0; t < len; t++) {
                in[context + t] = completion[1 + t];
                tg[context + t - 1] = completion[1 + t];
            }
            completion += 1 + len;
        }
    }
}

// The examples of the batch that are right, from the per-token losses (B, T) of
// the batch's forward pass (0 where the target is ignored).
static int evalloader_correct(const EvalLoader *el, const float *losses) {
    int correct = 0, T = el->T;
    for (int k = 0; k < el->B / EVAL_COMPLETIONS; k++) {
        if (el->labels[k] < 0) { continue; }
        int best = 0;
        float best_loss = 0.0f;
        for (int c = 0; c < EVAL_COMPLETIONS; c++) {
            size_t row = (size_t)(k * EVAL_COMPLETIONS + c) * T;
            float sum = 0.0f;
            int count = 0;
            for (int t = 0; t < T; t++) {
                if (el->targets[row + t] != IGNORE_INDEX) {
                    sum += losses[row + t];
                    count++;
                }
            }
            float mean = sum / count;
            if (c == 0 || mean < best_loss) {
                best = c;
                best_loss = mean;
            }
        }
        correct += best == el->labels[k];
    }
    return correct;
}

static void evalloader_free(EvalLoader *el) {
    free_all(el->stream, el->offsets, el->inputs, el->targets, el->labels);
    memset(el, 0, sizeof(*el));
}

#endif // LLMC_EVAL_LOADER_H
