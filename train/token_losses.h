/*
-tl: the per-token losses of every training step, written by the master in global
order: each batch's shards gathered over the CP group to (B, T) rows, then the
replicas' rows to (dp * B, T), appended as float32 (NaN where the loss mask leaves
a target out). A resumed run continues the file of the run it resumes, cut back to
the bytes written up to its checkpoint (the state file records them and the
checksum of their tail: train/checkpoint_files.h).
*/
#ifndef TRAIN_TOKEN_LOSSES_H
#define TRAIN_TOKEN_LOSSES_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../cp/comm.h"
#include "../cp/sharder.h"
#include "../llmc/utils.h"
#include "checkpoint_files.h"

typedef struct {
    const char *path; // -tl, or NULL: no file
    FILE *fp;         // open on the master only
    float *rows;      // (B, T) this replica's gathered per-token losses
    float *all_rows;  // (dp * B, T) every replica's
} TokenLosses;

// Every rank: the gather's rows for batches of B rows of T tokens over dp replicas
// (nothing without -tl); the file is opened later (token_losses_open).
static void token_losses_init(TokenLosses *tl, const char *path, int B, int T, int dp) {
    memset(tl, 0, sizeof(*tl));
    tl->path = path;
    if (path == NULL) { return; }
    tl->rows = (float *)mallocCheck((size_t)B * T * sizeof(float));
    tl->all_rows = (float *)mallocCheck((size_t)dp * B * T * sizeof(float));
}

// Rank 0: how the -tl file `path` continues a run resumed from state s, whose run
// had written s->token_loss_bytes to its -tl file. The same file (its bytes before
// that point have the checksum the state recorded: token_loss_tail) keeps them, cut
// back to them (a run that went on past the checkpoint wrote more) whatever shape
// the new run's rows have; the new rows follow. A new or empty file starts at the
// resumed step. Any other file holds bytes that are not the checkpoint's run's,
// which cutting would lose: -1 with the reason. *keep: the bytes kept.
static int token_losses_resume_plan(const char *path, const TrainState *s, off_t *keep, char *why, size_t why_size) {
    struct stat st;
    *keep = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        if (s->token_loss_bytes > 0) {
            printf("note: -tl %s is a new file: the per-token losses of the steps before %d are in the -tl file of "
                   "the run that wrote the checkpoint; this one's start at step %d\n", path, s->step, s->step);
        }
        return 0;
    }
    uint64_t sum;
    if (s->token_loss_bytes == 0 || (uint64_t)st.st_size < s->token_loss_bytes ||
        token_loss_tail(path, s->token_loss_bytes, &sum) != 0 || sum != s->token_loss_tail) {
        return problem(why, why_size, "-tl '%s' holds %lld bytes that are not the per-token losses the checkpoint's "
                       "run wrote (%llu bytes%s): resuming would cut them; give -tl that run's file, or a new one", path,
                       (long long)st.st_size, (unsigned long long)s->token_loss_bytes,
                       s->token_loss_bytes == 0 ? ": it had no -tl" : "");
    }
    *keep = (off_t)s->token_loss_bytes;
    return 0;
}

// The master: opens the -tl file, a fresh one (resumed 0) or the one a resumed
// run continues, cut back to its first `keep` bytes (token_losses_resume_plan).
static void token_losses_open(TokenLosses *tl, int resumed, off_t keep) {
    if (tl->path == NULL) { return; }
    tl->fp = open_output_file(tl->path, resumed);
    struct stat st;
    if (resumed && fstat(fileno(tl->fp), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > keep &&
        ftruncate(fileno(tl->fp), keep) != 0) {
        fatal("cannot cut '%s' back to the %lld bytes written before the checkpoint: %s", tl->path, (long long)keep,
              strerror(errno));
    }
}

// Gathers the step's per-token losses to global order: the CP group's shards into
// (B, T) rows, then the replicas' rows into (dp * B, T); the master appends them.
// A target the loss mask leaves out has no loss: it is written as NaN.
// losses: (B, Tl) host; loss_mask: (B, T) the batch's, or NULL; cp, dp: host-memory
// transports of the CP and DP groups.
static void write_token_losses(TokenLosses *tl, CpSharder *sh, Comm *cp, Comm *dp, const float *losses,
                               const unsigned char *loss_mask) {
    int B = sh->layout.B, T = sh->layout.original_seq_len;
    if (cp_gather_tokens(sh, cp, losses, (size_t)B * sh->layout.local_len, sizeof(float), 1, tl->rows) != CP_OK) {
        fatal("%s", sh->error);
    }
    for (size_t i = 0; loss_mask != NULL && i < (size_t)B * T; i++) {
        if (!loss_mask[i]) { tl->rows[i] = NAN; }
    }
    dp->all_gather(dp, tl->rows, tl->all_rows, (size_t)B * T * sizeof(float));
    if (tl->fp != NULL) {
        fwriteCheck(tl->all_rows, sizeof(float), (size_t)dp->size * B * T, tl->fp, tl->path);
        fflushCheck(tl->fp, tl->path);
    }
}

static void token_losses_free(TokenLosses *tl) {
    if (tl->fp) { fcloseCheck(tl->fp, tl->path); }
    free(tl->rows);
    free(tl->all_rows);
}

#endif // TRAIN_TOKEN_LOSSES_H
