/*
The sharder: splits a batch along time for one CP rank, and brings token tensors
back to global order. The C translation of NeMo AutoModel's ContextParallelSharder.

A sharder is built per batch (each micro-batch of a step). Its shard_batch
applies the layout (cp/layout.h) to the batch and records what it learned in a
ShardLayout; the token verbs then take and give tensors in the caller's
coordinates:

    cp_shard_batch    inputs, targets (B, T) and an optional loss mask (B, T)
                      ->  local inputs, targets (B, Tl)
                      and the layout: global index, position id, document of each
                      local token
    cp_shard_tokens   any (B, T) or (B, P) token tensor -> (B, Tl), exactly like
                      the inputs were sharded
    cp_gather_tokens  (B, Tl) from every rank -> (B, P) in global order, or (B, T)
                      with trim

Length rules of the token verbs: a tensor of the original length T is padded with an
explicit fill, one of the padded length P is sharded as is, any other length is an
error; before the first cp_shard_batch there is no layout and every token verb
fails. Errors are returned (CP_OK / CP_ERROR) with the reason in sharder->error, so
that a caller can report them its own way.

Pad rules: pad slots take input token 0 and the ignore target IGNORE_INDEX, so
they add nothing to the loss or the gradients, get a position id inside
[0, max_positions) so the position embedding lookup stays in range, and get
document -1 of their own, so no real query ever sees a pad key and pad queries
see only pad keys (attention spends almost nothing on rows whose loss is
ignored). Under identity, contiguous, round_robin, striped and solver the pad slots
sit after every real token of the row (global index >= T); under packed each document
is followed by its own pad slots, and the document ids keep them apart.

The loss mask (the contract's loss_mask) is sharded with the targets: a target
whose mask is 0 becomes IGNORE_INDEX, as a pad slot's, so it counts neither in the
loss sum nor in its denominator and sends back no gradient.

Documents (CpDocuments): a token (EOT) opens a document. With mask_attention a
token attends only to its own document (the layout's document ids; the contract's
THD / cu_seqlens case). With restart_positions a real token's position id is its
offset from the first token of its document, as packed (THD) sequences count them
(the contract's caller-given position_ids);
otherwise it keeps its place in the caller's row, so the model sees exactly what
the single-rank run sees. Either way the position comes from the token's original
index (found from its global index) and its document's start: no layout is named.
*/
#ifndef CP_SHARDER_H
#define CP_SHARDER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm.h"
#include "layout.h"
#include "../llmc/classifier.h"
#include "../llmc/utils.h"


enum { CP_OK = 0, CP_ERROR = 1 };

// What a shard_batch learned about the layout it applied.
typedef struct {
    int B;
    int original_seq_len; // T: the caller's row length
    int padded_seq_len;   // P: the row length after padding
    int local_len;        // Tl = P / cp: tokens per row on this rank
    int *global_index;    // (B, Tl) index of each local token in its padded row
    int *original_index;  // (B, Tl) index in the caller's row of length T, -1 for a pad slot
    int *position;        // (B, Tl) position id for the position embedding, in [0, max_positions)
    int *document;        // (B, Tl) document id of a real token (0 when attention is not masked to
                          // documents), -1 for pad
} ShardLayout;

// What the documents of a row change: which token opens one, whether attention
// stays within a document, whether positions count from each document's start.
typedef struct {
    int token;             // the token that opens a document (EOT), or -1: every row is one document
    int mask_attention;    // 1: a token attends only to the tokens of its own document
    int restart_positions; // 1: a token's position id is its offset in its document
} CpDocuments;

// every row one document, nothing masked: plain causal attention
static CpDocuments cp_no_documents(void) {
    CpDocuments d = {-1, 0, 0};
    return d;
}

// documents opened by `token`, attention masked to them (-dm 1), positions as in the row
static CpDocuments cp_masked_documents(int token) {
    CpDocuments d = {token, 1, 0};
    return d;
}

// The sharded batch this rank trains on.
typedef struct {
    int *inputs;  // (B, Tl)
    int *targets; // (B, Tl)
} LocalBatch;

typedef struct {
    CpLayoutKind kind;
    int cp_rank, cp_size;
    int max_positions;   // the model's max_seq_len
    CpDocuments documents;
    int min_padded_len;  // packed, solver: pad every batch to at least this (0: as the data needs)
    int chunk;           // solver: the chunk size, a multiple of CP_SOLVER_TILE (0: CP_SOLVER_DEFAULT_CHUNK)
    int has_layout;      // set by the first cp_shard_batch
    ShardLayout layout;
    LocalBatch local;
    char error[256];
} CpSharder;

static void cp_sharder_init(CpSharder *sh, CpLayoutKind kind, int cp_rank, int cp_size,
                            int max_positions, CpDocuments documents) {
    memset(sh, 0, sizeof(*sh));
    sh->kind = kind;
    sh->cp_rank = cp_rank;
    sh->cp_size = cp_size;
    sh->max_positions = max_positions;
    sh->documents = documents;
}

static void cp_sharder_free(CpSharder *sh) {
    free(sh->layout.global_index);
    free(sh->layout.original_index);
    free(sh->layout.position);
    free(sh->layout.document);
    free(sh->local.inputs);
    free(sh->local.targets);
    memset(&sh->layout, 0, sizeof(sh->layout));
    memset(&sh->local, 0, sizeof(sh->local));
    sh->has_layout = 0;
}

__attribute__((format(printf, 2, 3)))
static int cp_fail(CpSharder *sh, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(sh->error, sizeof(sh->error), fmt, args);
    va_end(args);
    return CP_ERROR;
}

// the solver's chunk size: the caller's, or the default
static int cp_solver_chunk(const CpSharder *sh) { return sh->chunk ? sh->chunk : CP_SOLVER_DEFAULT_CHUNK; }

// Whether (kind, cp, T) is a valid configuration: every rank must own a real token.
static int cp_check_config(CpSharder *sh, int T) {
    if (sh->cp_size < 1) { return cp_fail(sh, "cp size %d must be at least 1", sh->cp_size); }
    if (sh->kind == CP_LAYOUT_IDENTITY && sh->cp_size != 1) {
        return cp_fail(sh, "layout identity needs cp 1, got cp %d", sh->cp_size);
    }
    if (T < 1) { return cp_fail(sh, "sequence length %d must be at least 1", T); }
    if (T > sh->max_positions) {
        return cp_fail(sh, "sequence length %d exceeds the %d positions of the model", T, sh->max_positions);
    }
    if (sh->kind == CP_LAYOUT_SOLVER) {
        // a rank may hold only pad chunks, which is harmless (as packed's pad)
        if (cp_solver_chunk(sh) < CP_SOLVER_TILE || cp_solver_chunk(sh) % CP_SOLVER_TILE != 0) {
            return cp_fail(sh, "layout solver: chunk size %d is not a positive multiple of the %d-row tiles",
                           cp_solver_chunk(sh), CP_SOLVER_TILE);
        }
        return CP_OK;
    }
    if (cp_layout_depends_on_data(sh->kind)) {
        // data-dependent: a rank may hold only pad in some batch, which is harmless
        if (sh->documents.token < 0 || !sh->documents.mask_attention) {
            return cp_fail(sh, "layout packed needs documents: document masking is off");
        }
        return CP_OK;
    }
    int P = cp_padded_len(sh->kind, T, sh->cp_size);
    int Tl = P / sh->cp_size;
    int *indices = (int *)mallocCheck((size_t)Tl * sizeof(int));
    int empty_rank = -1;
    for (int r = 0; r < sh->cp_size && empty_rank < 0; r++) {
        if (cp_local_indices(sh->kind, P, sh->cp_size, r, indices) != 0) {
            free(indices);
            return cp_fail(sh, "layout %s cannot split %d tokens over cp %d", cp_layout_names[sh->kind], P,
                           sh->cp_size);
        }
        int real = 0;
        for (int i = 0; i < Tl; i++) { real |= indices[i] < T; }
        if (!real) { empty_rank = r; }
    }
    free(indices);
    if (empty_rank >= 0) {
        return cp_fail(sh, "sequence length %d with layout %s at cp %d leaves rank %d without a real token",
                       T, cp_layout_names[sh->kind], sh->cp_size, empty_rank);
    }
    return CP_OK;
}

// Document id of every token of one row: an EOT token opens a new document (llm.c
// puts EOT before each document), so it belongs to the document it precedes.
static void cp_row_documents(const int *inputs, int T, int document_token, int *docs) {
    int doc = 0;
    for (int t = 0; t < T; t++) {
        if (document_token >= 0 && inputs[t] == document_token && t > 0) { doc++; }
        docs[t] = doc;
    }
}

// Applies the layout to the batch: records the ShardLayout and fills sh->local.
// inputs, targets: (B, T)   loss_mask: (B, T) 1 where the target counts, 0 where it
// is masked; NULL: every target counts
static int cp_shard_batch(CpSharder *sh, const int *inputs, const int *targets, const unsigned char *loss_mask,
                          int B, int T) {
    cp_sharder_free(sh); // a rejected batch leaves no layout behind either
    if (B < 1) { return cp_fail(sh, "shard_batch: batch size %d must be at least 1", B); }
    if (cp_check_config(sh, T) != CP_OK) { return CP_ERROR; }
    int cp = sh->cp_size;
    int *docs = (int *)mallocCheck((size_t)B * T * sizeof(int));   // (B, T)
    int *starts = (int *)mallocCheck((size_t)B * T * sizeof(int)); // (B, T)
    for (int b = 0; b < B; b++) {
        cp_row_documents(inputs + (size_t)b * T, T, sh->documents.token, docs + (size_t)b * T);
        cp_row_document_starts(docs + (size_t)b * T, T, starts + (size_t)b * T);
    }
    int P = cp_padded_len(sh->kind, T, cp);
    if (sh->kind == CP_LAYOUT_SOLVER) {
        // whole chunks on every rank, and at least the caller's minimum (as packed's)
        P = cp_solver_padded_len(T > sh->min_padded_len ? T : sh->min_padded_len, cp, cp_solver_chunk(sh));
    } else if (cp_layout_depends_on_data(sh->kind)) {
        // every row is padded to the longest row's packed length, and the batch to
        // the caller's minimum: a trainer keeps its buffers' size that way, instead
        // of resizing them for every batch of a slightly different length
        P = round_up(sh->min_padded_len, 2 * cp);
        for (int b = 0; b < B; b++) {
            int row_len = cp_packed_row_len(docs + (size_t)b * T, T, cp);
            if (row_len > P) { P = row_len; }
        }
    }
    int Tl = P / cp;
    ShardLayout *lay = &sh->layout;
    lay->B = B;
    lay->original_seq_len = T;
    lay->padded_seq_len = P;
    lay->local_len = Tl;
    size_t n = (size_t)B * Tl;
    lay->global_index = (int *)mallocCheck(n * sizeof(int));
    lay->original_index = (int *)mallocCheck(n * sizeof(int));
    lay->position = (int *)mallocCheck(n * sizeof(int));
    lay->document = (int *)mallocCheck(n * sizeof(int));
    sh->local.inputs = (int *)mallocCheck(n * sizeof(int));
    sh->local.targets = (int *)mallocCheck(n * sizeof(int));
    int *slot_original = (int *)mallocCheck((size_t)P * sizeof(int));
    for (int b = 0; b < B; b++) {
        const int *row_docs = docs + (size_t)b * T;
        int *indices = lay->global_index + (size_t)b * Tl;
        const int *masked_docs = sh->documents.mask_attention ? row_docs : NULL;
        if (cp_row_layout(sh->kind, masked_docs, T, P, cp, cp_solver_chunk(sh), sh->cp_rank, indices, slot_original) != 0) {
            free(slot_original);
            free(docs);
            free(starts);
            cp_sharder_free(sh);
            return cp_fail(sh, "shard_batch: layout %s cannot split %d tokens over cp %d (rank %d)",
                           cp_layout_names[sh->kind], P, cp, sh->cp_rank);
        }
        for (int i = 0; i < Tl; i++) {
            size_t li = (size_t)b * Tl + i;
            int g = indices[i];
            int o = slot_original[g]; // -1: a pad slot
            size_t bo = (size_t)b * T + (o >= 0 ? o : 0); // the token's place in the caller's batch
            lay->original_index[li] = o;
            // a real token's place in the row, or in its document; a pad's inside the table
            int place = o >= 0 && sh->documents.restart_positions ? o - starts[bo] : o;
            lay->position[li] = o >= 0 ? place : (g < sh->max_positions ? g : sh->max_positions - 1);
            lay->document[li] = o < 0 ? -1 : sh->documents.mask_attention ? row_docs[o] : 0;
            sh->local.inputs[li] = o >= 0 ? inputs[bo] : 0;
            int counts = o >= 0 && (loss_mask == NULL || loss_mask[bo] != 0);
            sh->local.targets[li] = counts ? targets[bo] : IGNORE_INDEX;
        }
    }
    free(slot_original);
    free(docs);
    free(starts);
    sh->has_layout = 1;
    return CP_OK;
}

// Shards a token tensor like the batch was sharded.
// x: (B, len) of elem_size-byte elements, len = T (padded with *fill) or P
// out: (B, Tl)
static int cp_shard_tokens(CpSharder *sh, const void *x, size_t elem_size, int B, int len,
                           const void *fill, void *out) {
    if (!sh->has_layout) { return cp_fail(sh, "shard_tokens before shard_batch: no layout yet"); }
    const ShardLayout *lay = &sh->layout;
    if (B != lay->B) { return cp_fail(sh, "shard_tokens: batch size %d, the layout has %d", B, lay->B); }
    int T = lay->original_seq_len, P = lay->padded_seq_len;
    int padded_input = (len == P); // already in padded coordinates
    if (!padded_input && len != T) {
        return cp_fail(sh, "shard_tokens: length %d is neither the original length %d nor the padded length %d",
                       len, T, P);
    }
    if (!padded_input && fill == NULL) {
        return cp_fail(sh, "shard_tokens: a tensor of the original length %d needs a fill for its %d pad slots",
                       T, P - T);
    }
    const char *src = (const char *)x;
    char *dst = (char *)out;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < lay->local_len; i++) {
            size_t li = (size_t)b * lay->local_len + i;
            int g = lay->global_index[li];
            int o = lay->original_index[li];
            const void *elem;
            if (padded_input) { elem = src + ((size_t)b * P + g) * elem_size; }
            else if (o >= 0) { elem = src + ((size_t)b * T + o) * elem_size; }
            else { elem = fill; }
            memcpy(dst + li * elem_size, elem, elem_size);
        }
    }
    return CP_OK;
}

// Gathers the local (B, Tl) shards of the CP group back to global order:
// out is (B, P) by global index, or with trim (B, T) in the caller's coordinates.
// local_count: the elements in local, which must be the layout's B * Tl (a buffer
// of another length is an error, not a read past its end).
static int cp_gather_tokens(CpSharder *sh, Comm *comm, const void *local, size_t local_count, size_t elem_size,
                            int trim, void *out) {
    if (!sh->has_layout) { return cp_fail(sh, "gather_tokens before shard_batch: no layout yet"); }
    if (comm->size != sh->cp_size) {
        return cp_fail(sh, "gather_tokens: the group has %d ranks, the layout %d", comm->size, sh->cp_size);
    }
    const ShardLayout *lay = &sh->layout;
    int B = lay->B, Tl = lay->local_len;
    if (local_count != (size_t)B * Tl) {
        return cp_fail(sh, "gather_tokens: the local buffer holds %zu elements, the layout's shard (B %d, Tl %d) %zu",
                       local_count, B, Tl, (size_t)B * Tl);
    }
    int row_len = trim ? lay->original_seq_len : lay->padded_seq_len;
    size_t n = (size_t)B * Tl;
    // where each local token goes: its original index when trimming, else its global one
    const int *targets_of_local = trim ? lay->original_index : lay->global_index;
    int *all_index = (int *)mallocCheck(n * comm->size * sizeof(int));
    char *all_data = (char *)mallocCheck(n * comm->size * elem_size);
    comm->all_gather(comm, targets_of_local, all_index, n * sizeof(int));
    comm->all_gather(comm, local, all_data, n * elem_size);
    char *dst = (char *)out;
    for (int r = 0; r < comm->size; r++) {
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < Tl; i++) {
                size_t gi = (size_t)r * n + (size_t)b * Tl + i;
                int where = all_index[gi];
                if (where < 0) { continue; } // a pad slot, trimmed away
                memcpy(dst + ((size_t)b * row_len + where) * elem_size, all_data + gi * elem_size, elem_size);
            }
        }
    }
    free(all_index);
    free(all_data);
    return CP_OK;
}

#endif // CP_SHARDER_H
