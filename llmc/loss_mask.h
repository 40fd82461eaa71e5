/*
Loss mask files: which tokens of a token file are learned as targets.

Beside a token file NAME.bin (llmc/dataloader.h; a name without .bin: NAME) lies
its mask NAME.mask, in llm.c's header convention: 256 int32, [0] = 20240613 (the
magic), [1] = 1 (the version), [2] = ntok, which must be the token count of its
token file; then ntok bytes, one per token: 1 where predicting that token counts in
the loss, 0 where it does not. The file is exactly 1024 + ntok bytes, and every
byte is 0 or 1.

Byte i belongs to token i as a target: the loss of the prediction made at token
i - 1. For "train only on the answer" data the answer's tokens (and the EOT that
ends it, so that the model learns to stop) are 1 and the prompt's 0
(dev/loss_mask.c makes such a file). The contract's loss_mask is the same thing,
one flag per target; the sharder turns a 0 into the ignored target
(cp/sharder.h), so a masked token counts neither in the loss nor in its mean.
*/
#ifndef LLMC_LOSS_MASK_H
#define LLMC_LOSS_MASK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "checksum.h"
#include "utils.h"

#define LOSS_MASK_MAGIC 20240613
#define LOSS_MASK_VERSION 1
#define LOSS_MASK_HEADER_BYTES (256 * sizeof(int))

// The mask file of the token file at tokens_path: NAME.bin -> NAME.mask, any
// other name gets .mask appended. Returns 0, or -1 when out is too small.
static int loss_mask_path(char *out, size_t size, const char *tokens_path) {
    size_t n = strlen(tokens_path);
    if (n >= 4 && strcmp(tokens_path + n - 4, ".bin") == 0) { n -= 4; }
    int written = snprintf(out, size, "%.*s.mask", (int)n, tokens_path);
    return written >= 0 && (size_t)written < size ? 0 : -1;
}

// Checks a mask file of `size` bytes from fp against its token file of ntok tokens:
// magic, version, token count, exact size, every byte 0 or 1. On success folds the
// file into *fingerprint and sets *kept to the targets it keeps: its 1 bytes but
// the first (token 0 is no prediction's target). Returns 0, or -1 with the reason in why.
static int loss_mask_file_read(FILE *fp, long size, size_t ntok, uint64_t *fingerprint, uint64_t *kept, char *why,
                               size_t why_size) {
    int header[256];
    if (size < (long)LOSS_MASK_HEADER_BYTES) {
        return problem(why, why_size, "%ld bytes, shorter than its %zu-byte header", size, LOSS_MASK_HEADER_BYTES);
    }
    if (file_header_read(fp, header, LOSS_MASK_MAGIC, LOSS_MASK_VERSION, ", a loss mask file", why, why_size) != 0) {
        return -1;
    }
    if (header[2] < 0 || (size_t)header[2] != ntok) {
        return problem(why, why_size, "its header counts %d tokens, but its token file has %zu", header[2], ntok);
    }
    long expected = (long)LOSS_MASK_HEADER_BYTES + (long)ntok;
    if (size != expected) {
        return problem(why, why_size, "%ld bytes, but a mask of %zu tokens is %ld bytes", size, ntok, expected);
    }
    uint64_t hash = fnv1a(*fingerprint, header, sizeof(header));
    unsigned char chunk[4096];
    uint64_t ones = 0;
    for (size_t done = 0; done < ntok;) {
        size_t n = ntok - done < sizeof(chunk) ? ntok - done : sizeof(chunk);
        if (fread(chunk, 1, n, fp) != n) { return problem(why, why_size, "cannot read its mask bytes"); }
        for (size_t i = 0; i < n; i++) {
            if (chunk[i] > 1) {
                return problem(why, why_size, "byte %u at token %zu is neither 0 (masked) nor 1 (learned)", (unsigned)chunk[i],
                               done + i);
            }
            ones += chunk[i] && done + i > 0;
        }
        hash = fnv1a(hash, chunk, n);
        done += n;
    }
    *fingerprint = hash;
    *kept = ones;
    return 0;
}

#endif // LLMC_LOSS_MASK_H
