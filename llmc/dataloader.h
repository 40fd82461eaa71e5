/*
The data loader: llm.c token files, in order or shuffled as llm.c shuffles them.

A token file ("shard"): 256 int32 header, [0] = 20240520, [1] = 1, [2] = ntok,
then ntok uint16 tokens; its size is exactly 1024 + 2 * ntok bytes. A glob pattern
names the shards, in sorted order.

A shard is cut into spans of dp*B*T tokens (with one token to spare for the last
target); every batch is one span, and data-parallel replica k of dp reads the
window of B*T+1 tokens that starts k*B*T tokens into it. Every CP rank of a
replica reads the same window; the sharder then keeps each rank's part. Inputs are
tokens [0, B*T) of the window and targets tokens [1, B*T+1): the targets are
shifted here, before sharding, so no rank needs its neighbour's first token.

In order, the spans follow each other through the shards, wrapping around after
the last one. Shuffled (llm.c's DataLoader with should_shuffle, the default for
training): each epoch visits the shards in a random order and each shard's spans
in a random order, both drawn from llm.c's Mersenne Twister seeded 42 + the
replica's rank, in llm.c's sequence of draws: so the order is llm.c's for the same
files, B, T and number of replicas, the same on every CP rank of a replica and
different across replicas (as llm.c's processes, replicas may meet on a span).

With loss masks (-lm 1) every shard NAME.bin has its mask NAME.mask beside it
(llmc/loss_mask.h), read in the same windows: loss_mask holds, for every target of
the batch, whether it counts.

Every shard is validated once at the start (header, size, every token below the
vocabulary; its mask's header, length and bytes) and folded into a fingerprint
that ranks compare. A shard that is changed on disk during the run (rewritten,
truncated, replaced) would feed tokens nobody validated: its identity (inode, size,
modification time) is recorded then, and compared whenever the shard is opened
again and before every window is read; every window's tokens are checked against
the vocabulary too. Masks alike.
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "checksum.h"
#include "loss_mask.h"
#include "rand.h"
#include "utils.h"

#define SHUFFLE_SEED 42 // llm.c's, plus the replica's rank
#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENS_HEADER_BYTES (256 * sizeof(int))

// what identifies a file's contents as validated: another inode, size or
// modification time means the file was changed since
typedef struct {
    dev_t device;
    ino_t inode;
    off_t size;
    struct timespec modified;
} FileIdentity;

static FileIdentity file_identity(const struct stat *st) {
    FileIdentity id = {st->st_dev, st->st_ino, st->st_size, st->st_mtim};
    return id;
}

static int file_identity_same(FileIdentity a, FileIdentity b) {
    return a.device == b.device && a.inode == b.inode && a.size == b.size &&
           a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec;
}

typedef struct {
    int B, T;
    int dp_rank, dp_size;
    int vocab_size;
    glob_t files;
    size_t shard_index;    // the shard being read
    size_t position;       // in order: start of the next span, in tokens of the shard
    size_t shard_tokens;   // tokens in the current shard
    size_t total_tokens;   // tokens in all shards
    size_t epoch_steps;    // steps in one pass over all shards
    uint64_t fingerprint;  // of every shard's bytes, in order
    FileIdentity *identity; // (number of shards) each shard as validated
    FILE *fp;
    uint16_t *window;      // (B*T + 1)
    int *inputs;           // (B, T)
    int *targets;          // (B, T)
    int loss_masks;        // 1: every shard has a loss mask file
    FileIdentity *mask_identity; // (number of shards) each shard's mask as validated
    FILE *mask_fp;         // the current shard's mask
    unsigned char *loss_mask;   // (B, T) 1 where the target counts; NULL without loss masks
    int shuffle;           // llm.c's shuffled order
    Mt19937 shuffle_rng;   // seeded SHUFFLE_SEED + dp_rank
    int *shard_order;      // (shards) shuffled: the shard read k-th in this epoch
    int *span_order;       // (spans of the current shard) shuffled: the span read k-th
    size_t shard_k, span_k; // shuffled: the entry of shard_order being read, the next of span_order
    size_t shard_spans;    // spans in the current shard
    uint64_t batches_read; // since the run's start: a shuffled resume replays this many
} DataLoader;


// Checks a token file of `size` bytes from fp: header, exact size, every token
// below vocab_size. On success sets ntok and folds the file into *fingerprint.
static int tokens_file_read(FILE *fp, long size, int vocab_size, size_t *ntok, uint64_t *fingerprint,
                            char *why, size_t why_size) {
    int header[256];
    if (size < (long)TOKENS_HEADER_BYTES) {
        return problem(why, why_size, "%ld bytes, shorter than its %zu-byte header", size, TOKENS_HEADER_BYTES);
    }
    if (file_header_read(fp, header, TOKENS_MAGIC, TOKENS_VERSION, "", why, why_size) != 0) { return -1; }
    if (header[2] < 0) { return problem(why, why_size, "negative token count %d", header[2]); }
    size_t count = (size_t)header[2];
    long expected = (long)TOKENS_HEADER_BYTES + 2 * (long)count;
    if (size != expected) {
        return problem(why, why_size, "%ld bytes, but its header promises %zu tokens (%ld bytes)", size, count, expected);
    }
    uint64_t hash = fnv1a(*fingerprint, header, sizeof(header));
    uint16_t chunk[4096];
    for (size_t done = 0; done < count;) {
        size_t n = count - done < 4096 ? count - done : 4096;
        if (fread(chunk, sizeof(uint16_t), n, fp) != n) { return problem(why, why_size, "cannot read its tokens"); }
        for (size_t i = 0; i < n; i++) {
            if (chunk[i] >= vocab_size) {
                return problem(why, why_size, "token %u at index %zu is not below the vocabulary size %d",
                               chunk[i], done + i, vocab_size);
            }
        }
        hash = fnv1a(hash, chunk, n * sizeof(uint16_t));
        done += n;
        note_progress();
    }
    *ntok = count;
    *fingerprint = hash;
    return 0;
}

// Validates a shard and returns its number of tokens and, in *identity, the file
// as validated. Every rank opens the same shards, so a bad file is an error every
// rank sees.
static size_t tokens_file_validate(const char *path, int vocab_size, uint64_t *fingerprint, FileIdentity *identity) {
    char why[256];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal_everywhere("token file '%s': %s", path, why); }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) { fatal_everywhere("token file '%s': %s", path, strerror(errno)); }
    *identity = file_identity(&st);
    size_t ntok = 0;
    int status = tokens_file_read(fp, file_size_of(fp, path), vocab_size, &ntok, fingerprint, why, sizeof(why));
    fclose(fp);
    if (status != 0) { fatal_everywhere("token file '%s': %s", path, why); }
    return ntok;
}

// Validates the mask of the token file at tokens_path (ntok tokens), folding it into
// *fingerprint and adding the targets it keeps to *kept, and returns the file as validated.
static FileIdentity loss_mask_validate(const char *tokens_path, size_t ntok, uint64_t *fingerprint, uint64_t *kept) {
    char path[4096], why[256];
    if (loss_mask_path(path, sizeof(path), tokens_path) != 0) {
        fatal_everywhere("-lm 1: token file '%s': its mask file's name is too long", tokens_path);
    }
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal_everywhere("loss mask file '%s' (of token file '%s'): %s", path, tokens_path, why); }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) { fatal_everywhere("loss mask file '%s': %s", path, strerror(errno)); }
    uint64_t ones = 0;
    int status = loss_mask_file_read(fp, file_size_of(fp, path), ntok, fingerprint, &ones, why, sizeof(why));
    fclose(fp);
    if (status != 0) { fatal_everywhere("loss mask file '%s' (of token file '%s'): %s", path, tokens_path, why); }
    *kept += ones;
    return file_identity(&st);
}

// Masks that keep no target at all would train on nothing, each step printing no
// loss (a typo in the answer marker of dev/loss_mask.c does it): the run refuses,
// naming the mask files (the first few of many).
static void loss_masks_check_kept(const glob_t *files, const char *what, const char *pattern, uint64_t kept) {
    if (kept > 0) { return; }
    char names[1024], path[4096];
    size_t len = 0, shown = files->gl_pathc < 3 ? files->gl_pathc : 3;
    names[0] = '\0';
    for (size_t i = 0; i < shown; i++) {
        loss_mask_path(path, sizeof(path), files->gl_pathv[i]); // its length was checked when validated
        len += snprintf(names + len, sizeof(names) - len, "%s'%.200s'", i == 0 ? "" : ", ", path);
    }
    if (files->gl_pathc > shown) {
        snprintf(names + len, sizeof(names) - len, " and %zu more", files->gl_pathc - shown);
    }
    fatal_everywhere("-lm 1: the loss masks of %s '%s' keep no target (every byte after each file's first is 0), "
                     "so nothing would be learned or measured: %s", what, pattern, names);
}

// Ends the job if the open shard (or its mask) is no longer the file that was validated.
static void dataloader_check_unchanged(const DataLoader *dl) {
    struct stat st;
    const char *path = dl->files.gl_pathv[dl->shard_index];
    if (fstat(fileno(dl->fp), &st) != 0 || !file_identity_same(file_identity(&st), dl->identity[dl->shard_index])) {
        fatal("token file '%s' changed on disk during the run (its size, modification time or inode differ "
              "from when it was validated): restart the run on data that stays put", path);
    }
    if (dl->loss_masks &&
        (fstat(fileno(dl->mask_fp), &st) != 0 ||
         !file_identity_same(file_identity(&st), dl->mask_identity[dl->shard_index]))) {
        fatal("the loss mask of token file '%s' changed on disk during the run (its size, modification time or "
              "inode differ from when it was validated): restart the run on data that stays put", path);
    }
}

static void dataloader_open_shard(DataLoader *dl, size_t index) {
    if (dl->fp) { fclose(dl->fp); }
    if (dl->mask_fp) { fclose(dl->mask_fp); }
    dl->mask_fp = NULL;
    const char *path = dl->files.gl_pathv[index];
    char why[256];
    dl->fp = open_input_file(path, why, sizeof(why));
    if (dl->fp == NULL) { fatal("token file '%s': %s (it was there when the run started)", path, why); }
    if (dl->loss_masks) {
        char mask_path[4096];
        loss_mask_path(mask_path, sizeof(mask_path), path); // its length was checked at the start
        dl->mask_fp = open_input_file(mask_path, why, sizeof(why));
        if (dl->mask_fp == NULL) {
            fatal("loss mask file '%s': %s (it was there when the run started)", mask_path, why);
        }
    }
    dl->shard_index = index;
    dataloader_check_unchanged(dl);
    // the size and header were validated, and the file is unchanged since
    dl->shard_tokens = (size_t)(dl->identity[index].size - (off_t)TOKENS_HEADER_BYTES) / sizeof(uint16_t);
    dl->position = 0;
}

// Shuffled: the spans of shard shard_order[shard_k] in a random order (llm.c's
// prepare_intra_shard_indices_).
static void dataloader_start_shard_(DataLoader *dl) {
    dataloader_open_shard(dl, (size_t)dl->shard_order[dl->shard_k]);
    dl->shard_spans = (dl->shard_tokens - 1) / ((size_t)dl->dp_size * dl->B * dl->T);
    free(dl->span_order);
    dl->span_order = (int *)mallocCheck(dl->shard_spans * sizeof(int));
    for (size_t i = 0; i < dl->shard_spans; i++) { dl->span_order[i] = (int)i; }
    mt_shuffle(&dl->shuffle_rng, dl->span_order, (int)dl->shard_spans);
    dl->span_k = 0;
}

// Shuffled: a new epoch reorders the shards (llm.c's dataloader_reset: the order of
// the last epoch shuffled again) and starts on the first.
static void dataloader_new_epoch_(DataLoader *dl) {
    mt_shuffle(&dl->shuffle_rng, dl->shard_order, (int)dl->files.gl_pathc);
    dl->shard_k = 0;
    dataloader_start_shard_(dl);
}

// Shuffled: the token offset in the current shard of the next span, past the end
// of a shard onto the next one (and past the last onto a new epoch).
static size_t dataloader_next_span_(DataLoader *dl) {
    if (dl->span_k >= dl->shard_spans) {
        if (dl->shard_k + 1 == dl->files.gl_pathc) {
            dataloader_new_epoch_(dl);
        } else {
            dl->shard_k++;
            dataloader_start_shard_(dl);
        }
    }
    return (size_t)dl->span_order[dl->span_k++] * dl->dp_size * dl->B * dl->T;
}

// What to do about a file of ntok tokens, too few for one step of dp x B x T + 1:
// the longest -t that fits at this -b and at -b 1 (T = (ntok - 1) / (dp x B)),
// or more text.
static void tokens_fit_advice(size_t ntok, int dp_size, int B, char *out, size_t out_size) {
    size_t t_at_b = ntok > 0 ? (ntok - 1) / ((size_t)dp_size * B) : 0;
    size_t t_at_1 = ntok > 0 ? (ntok - 1) / (size_t)dp_size : 0;
    if (t_at_1 == 0) {
        snprintf(out, out_size, "too few for any batch at dp %d: give it more text", dp_size);
    } else if (B > 1 && t_at_b > 0) {
        snprintf(out, out_size, "-b %d -t %zu or -b 1 -t %zu fit it (the longest -t at each), or give it more text", B,
                 t_at_b, t_at_1);
    } else {
        snprintf(out, out_size, "-b 1 -t %zu fits it (the longest -t), or give it more text", t_at_1);
    }
}

// pattern: a glob; what: the flag that named it, for messages; shuffle: llm.c's
// shuffled order (else in order); loss_masks: read each shard's mask file too
static void dataloader_init(DataLoader *dl, const char *pattern, const char *what, int B, int T,
                            int dp_rank, int dp_size, int vocab_size, int shuffle, int loss_masks) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T;
    dl->dp_rank = dp_rank; dl->dp_size = dp_size;
    dl->vocab_size = vocab_size;
    if (glob(pattern, 0, NULL, &dl->files) != 0 || dl->files.gl_pathc == 0) {
        fatal_everywhere("%s '%s': no file matches", what, pattern);
    }
    size_t span = (size_t)dp_size * B * T + 1;
    dl->fingerprint = FNV_OFFSET;
    dl->identity = (FileIdentity *)mallocCheck(dl->files.gl_pathc * sizeof(FileIdentity));
    dl->loss_masks = loss_masks;
    if (loss_masks) { dl->mask_identity = (FileIdentity *)mallocCheck(dl->files.gl_pathc * sizeof(FileIdentity)); }
    uint64_t kept = 0; // the targets the masks keep
    for (size_t i = 0; i < dl->files.gl_pathc; i++) {
        const char *path = dl->files.gl_pathv[i];
        size_t ntok = tokens_file_validate(path, vocab_size, &dl->fingerprint, &dl->identity[i]);
        if (loss_masks) { dl->mask_identity[i] = loss_mask_validate(path, ntok, &dl->fingerprint, &kept); }
        if (ntok < span) {
            char fits[160];
            tokens_fit_advice(ntok, dp_size, B, fits, sizeof(fits));
            fatal_everywhere("token file '%s': %zu tokens, fewer than one step needs (dp %d x B %d x T %d + 1 = %zu): %s",
                             path, ntok, dp_size, B, T, span, fits);
        }
        dl->total_tokens += ntok;
        // a shard serves whole spans, with one token to spare for the last target
        dl->epoch_steps += (ntok - 1) / (span - 1);
    }
    if (loss_masks) { loss_masks_check_kept(&dl->files, what, pattern, kept); }
    dl->window = (uint16_t *)mallocCheck(((size_t)B * T + 1) * sizeof(uint16_t));
    dl->inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    dl->targets = (int *)mallocCheck((size_t)B * T * sizeof(int));
    if (loss_masks) { dl->loss_mask = (unsigned char *)mallocCheck((size_t)B * T); }
    dl->shuffle = shuffle;
    if (!shuffle) {
        dataloader_open_shard(dl, 0);
        return;
    }
    mt_seed(&dl->shuffle_rng, SHUFFLE_SEED + (uint32_t)dp_rank);
    dl->shard_order = (int *)mallocCheck(dl->files.gl_pathc * sizeof(int));
    for (size_t i = 0; i < dl->files.gl_pathc; i++) { dl->shard_order[i] = (int)i; }
    dataloader_new_epoch_(dl);
}

// Back to the first span of the first shard: validation and -a 1, which read in
// order (as in llm.c, a shuffled loader only moves on)
static void dataloader_reset(DataLoader *dl) {
    dataloader_open_shard(dl, 0);
}

// Shuffled resume: the order as it was after `batches` batches since the start
// (the draws replayed, nothing read).
static void dataloader_skip(DataLoader *dl, uint64_t batches) {
    for (uint64_t i = 0; i < batches; i++) { dataloader_next_span_(dl); }
    dl->batches_read = batches;
}

// Continues where a checkpoint left off: the next step's span starts `position`
// tokens into shard `shard`. A token offset, so it holds for any B, T and dp.
// Returns 0, or -1 with the reason in why.
static int dataloader_resume(DataLoader *dl, uint64_t shard, uint64_t position, char *why, size_t why_size) {
    if (shard >= dl->files.gl_pathc) {
        return problem(why, why_size, "data shard %llu, but the pattern matches %zu file(s)",
                       (unsigned long long)shard, dl->files.gl_pathc);
    }
    dataloader_open_shard(dl, (size_t)shard);
    if (position > dl->shard_tokens) {
        return problem(why, why_size, "data position %llu is past the %zu tokens of '%s'",
                       (unsigned long long)position, dl->shard_tokens, dl->files.gl_pathv[shard]);
    }
    dl->position = (size_t)position;
    return 0;
}

// Loads the next batch's window into inputs and targets.
static void dataloader_next_batch(DataLoader *dl) {
    size_t BT = (size_t)dl->B * dl->T;
    size_t span = (size_t)dl->dp_size * BT;
    size_t span_start;
    if (dl->shuffle) {
        span_start = dataloader_next_span_(dl);
    } else {
        if (dl->position + span + 1 > dl->shard_tokens) {
            dataloader_open_shard(dl, (dl->shard_index + 1) % dl->files.gl_pathc);
        }
        span_start = dl->position;
        dl->position += span;
    }
    dl->batches_read++;
    const char *path = dl->files.gl_pathv[dl->shard_index];
    size_t start = span_start + (size_t)dl->dp_rank * BT;
    dataloader_check_unchanged(dl);
    if (fseek(dl->fp, (long)(TOKENS_HEADER_BYTES + start * sizeof(uint16_t)), SEEK_SET) != 0 ||
        fread(dl->window, sizeof(uint16_t), BT + 1, dl->fp) != BT + 1) {
        fatal("token file '%s': cannot read tokens %zu..%zu: %s", path, start, start + BT,
              ferror(dl->fp) ? strerror(errno) : "the file is shorter than when it was validated");
    }
    for (size_t i = 0; i <= BT; i++) {
        if (dl->window[i] >= dl->vocab_size) {
            fatal("token file '%s': token %u at index %zu is not below the vocabulary size %d (the file changed "
                  "during the run?)", path, dl->window[i], start + i, dl->vocab_size);
        }
    }
    for (size_t i = 0; i < BT; i++) {
        dl->inputs[i] = dl->window[i];
        dl->targets[i] = dl->window[i + 1];
    }
    if (!dl->loss_masks) { return; }
    // the targets are tokens [start + 1, start + B*T + 1), and so are their mask bytes
    if (fseek(dl->mask_fp, (long)(LOSS_MASK_HEADER_BYTES + start + 1), SEEK_SET) != 0 ||
        fread(dl->loss_mask, 1, BT, dl->mask_fp) != BT) {
        fatal("the loss mask of token file '%s': cannot read bytes %zu..%zu: %s", path, start + 1, start + BT,
              ferror(dl->mask_fp) ? strerror(errno) : "the file is shorter than when it was validated");
    }
    for (size_t i = 0; i < BT; i++) {
        if (dl->loss_mask[i] > 1) {
            fatal("the loss mask of token file '%s': byte %u at token %zu is neither 0 nor 1 (the file changed "
                  "during the run?)", path, (unsigned)dl->loss_mask[i], start + i + 1);
        }
    }
}

static void dataloader_free(DataLoader *dl) {
    if (dl->fp) { fclose(dl->fp); }
    if (dl->mask_fp) { fclose(dl->mask_fp); }
    globfree(&dl->files);
    free_all(dl->mask_identity, dl->loss_mask, dl->identity, dl->window, dl->inputs, dl->targets, dl->shard_order,
             dl->span_order);
    memset(dl, 0, sizeof(*dl));
}

#endif // LLMC_DATALOADER_H
