/*
The position table (wpe, maxT x C) held and trained in row slices over the CP group.

The weights, the gradient and the two AdamW moments of a row live on one rank of
the group only: its owner. Without this, each rank would hold 16 C bytes for
every position of the sequence, which at long T outgrows what context
parallelism divides. (cp/position_table.cuh is the GPU twin.)

    owners     rank r of P owns the rows [r S, r S + S), S = maxT / P, and the last
               rank also the maxT - P S left over; every rank keeps room for the
               largest slice, so that their buffers have one size
    weights    a token at any position may land on any rank: before each forward
               pass, position_table_fetch_rows brings the rows of this rank's tokens
               whose positions others own (the reverse of the gradients' journey
               below, by the same plan), and the encoder reads them beside its own
               (llmc/encoder.h); a sample gathers the rows of its positions
               (position_table_first_rows), and a checkpoint's model file streams
               every owner's rows in turn (train/checkpoint_write.h), so the file is
               llm.c's
    gradient   the model's encoder backward adds the tokens whose positions this
               rank owns (llmc/encoder.h); position_table_send_gradients sends every
               other token's row of the residual's gradient to its position's
               owner, one peer a round, and the owner adds them in the senders'
               token order. Which rows go where is planned on the host when the
               batch is sharded (position_table_plan), before its forward pass,
               so the backward holds no host exchange. A position whose tokens all sit on one rank (always
               under contiguous, round_robin and striped, which lay out every row
               alike) is summed exactly as the single-rank run sums it: 0 + its
               tokens in order. Under packed, solver and restarted positions
               (-rp 1) a position's tokens may sit on several ranks, and the sum's
               order is the rounds' (within the tolerance of DESIGN section 5).
    replicas   the owners of one slice in every data-parallel replica sum their
               gradients (the other parameters are summed over the whole world)
    norm       the replicated parameters' squares plus the slices' squares summed
               over the group (position_table_norm_squared)
    update     each owner runs AdamW on its rows, which no other rank holds: nothing
               to gather

At -z 1 (train/zero.h) the world shards the AdamW state already, by ranges of the
flat vector: there the table is not split (every rank owns every row and the
group is one rank), and everything above reduces to llm.c's path. The same holds
at cp 1.

The state files keep llm.c's whole flat order: a split table's moments (and
master weights, where a state file holds them) are streamed to each file slice by
slice, and read back keeping one's own rows (train/checkpoint_write.h,
train/resume.h), so a checkpoint resumes in any shape.
*/
#ifndef CP_POSITION_TABLE_H
#define CP_POSITION_TABLE_H

#include <stddef.h>
#include <string.h>
#include "comm.h"
#include "../llmc/adamw.h"
#include "../llmc/encoder.h"
#include "../llmc/utils.h"

// The rows [*begin, *end) of a table of max_T rows that part `part` of `parts` owns.
static void position_slice(int max_T, int parts, int part, int *begin, int *end) {
    size_t b, e;
    comm_slice((size_t)max_T, part, parts, &b, &e);
    *begin = (int)b;
    *end = (int)e;
}

// The rows of the largest slice: the last part's.
static int position_slice_room(int max_T, int parts) {
    int begin, end;
    position_slice(max_T, parts, parts - 1, &begin, &end);
    return end - begin;
}

typedef struct {
    Comm *group;      // the ranks that split the rows, in the gradients' memory (a group of one: not split)
    Comm *group_host; // the same ranks on host memory: the positions travel there (NULL: not split)
    Comm *replicas;   // the ranks that own the same rows: the other parameters' replicas too when not split
    int max_T, C;
    int begin, end;   // this rank's rows
    int room;         // rows of the largest slice
    // the batch's routing (position_table_plan), host
    int tokens;          // most tokens a pass of this rank has held (B x T_local): the routing's room
    int pass_tokens;     // the planned pass's tokens (B x T_local, the same on every rank of the group)
    int *send_tokens;    // (tokens) this rank's tokens that travel, by owner, each owner's in token order ...
    int *send_positions; // (tokens) ... and their positions
    int *recv_positions; // (recv_room) the positions of the rows that come, by sender, in its token order
    int recv_room;
    int *send_count, *send_start, *recv_count, *recv_start; // (group size) each, by peer
    int *round_send, *round_recv, *zeros; // (group size) each: an exchange round's counts by peer, its offsets
    size_t *bytes;       // (4 group size) an all-to-all-v's counts and offsets
} PositionTable;

// Room for passes of `tokens` tokens: the routing's arrays grow with the
// activations (a packed batch longer than any before); a table not split has none.
static void position_table_reserve(PositionTable *pt, int tokens) {
    if (tokens <= pt->tokens) { return; }
    pt->tokens = tokens;
    if (pt->group->size == 1) { return; }
    int **arrays[2] = {&pt->send_tokens, &pt->send_positions};
    for (int i = 0; i < 2; i++) {
        free(*arrays[i]);
        *arrays[i] = (int *)mallocCheck((size_t)tokens * sizeof(int));
    }
}

// group, group_host: the CP group when the rows are split (replicas: the DP group);
// this rank alone and NULL when not (replicas: the world).
static void position_table_init(PositionTable *pt, Comm *group, Comm *group_host, Comm *replicas, int max_T, int C,
                                int tokens) {
    *pt = (PositionTable){.group = group, .group_host = group_host, .replicas = replicas, .max_T = max_T, .C = C,
                          .room = position_slice_room(max_T, group->size)};
    position_slice(max_T, group->size, group->rank, &pt->begin, &pt->end);
    position_table_reserve(pt, tokens);
    if (group->size > 1) {
        size_t P = (size_t)group->size;
        pt->send_count = (int *)callocCheck(7 * P, sizeof(int));
        pt->send_start = pt->send_count + P;
        pt->recv_count = pt->send_count + 2 * P;
        pt->recv_start = pt->send_count + 3 * P;
        pt->round_send = pt->send_count + 4 * P;
        pt->round_recv = pt->send_count + 5 * P;
        pt->zeros = pt->send_count + 6 * P;
        pt->bytes = (size_t *)mallocCheck(4 * P * sizeof(size_t));
    }
}

// The bytes a split table of `tokens` tokens a pass holds besides the model's:
// the routing's host arrays (the positions that come: as many as this rank's
// tokens in every layout whose rows are laid out alike; more where a rank owns
// positions many ranks' tokens share, -rp 1), and on the GPU (cp/position_table.cuh)
// the arriving rows' token buckets (device order, starts and rows), the routed
// tokens, the positions whose weights' rows travel and the norms' three doubles.
static size_t position_table_host_bytes(int tokens) { return 3 * (size_t)tokens * sizeof(int); }
static size_t position_table_device_bytes(int tokens) {
    return (5 * (size_t)tokens + 1) * sizeof(int) + 3 * sizeof(double);
}

static void position_table_free(PositionTable *pt) {
    free_all(pt->send_tokens, pt->send_positions, pt->recv_positions, pt->send_count, pt->bytes);
    memset(pt, 0, sizeof(*pt));
}

// The owner of position p.
static int position_owner(const PositionTable *pt, int p) {
    return comm_slice_holder((size_t)pt->max_T, pt->group->size, (size_t)p);
}

// Posts an all-to-all-v over comm of the parts [send_at[j], + send_n[j]) of send to
// each rank j and [recv_at[i], + recv_n[i]) of recv from each rank i, in units of
// `unit` bytes; returns the handle.
static void *position_table_post(PositionTable *pt, Comm *comm, const void *send, const int *send_at, const int *send_n,
                                 void *recv, const int *recv_at, const int *recv_n, size_t unit) {
    int P = comm->size;
    size_t *send_bytes = pt->bytes, *send_offset = pt->bytes + P, *recv_bytes = pt->bytes + 2 * P,
           *recv_offset = pt->bytes + 3 * P;
    for (int j = 0; j < P; j++) {
        send_bytes[j] = (size_t)send_n[j] * unit;
        send_offset[j] = (size_t)send_at[j] * unit;
        recv_bytes[j] = (size_t)recv_n[j] * unit;
        recv_offset[j] = (size_t)recv_at[j] * unit;
    }
    return comm->all_to_all_v_start(comm, send, send_bytes, send_offset, recv, recv_bytes, recv_offset);
}

// The batch's routing, on the host, before its forward pass (so that no rank's
// backward waits on another's host; pos: (tokens) this rank's positions): which
// tokens travel to which owner, in token order, and the positions of the rows
// that will come from each rank. Two exchanges over the host group: the counts,
// then the positions.
static void position_table_plan(PositionTable *pt, const int *pos, int tokens) {
    Comm *g = pt->group_host;
    if (pt->group->size == 1) { return; }
    position_table_reserve(pt, tokens);
    pt->pass_tokens = tokens;
    int P = g->size;
    memset(pt->send_count, 0, (size_t)P * sizeof(int));
    for (int t = 0; t < tokens; t++) {
        int owner = position_owner(pt, pos[t]);
        if (owner != g->rank) { pt->send_count[owner]++; }
    }
    int *cursor = pt->recv_start; // the fill's cursor, before the receives' starts are known
    for (int j = 0, at = 0; j < P; at += pt->send_count[j], j++) { pt->send_start[j] = cursor[j] = at; }
    for (int t = 0; t < tokens; t++) { // increasing t within an owner: token order
        int owner = position_owner(pt, pos[t]);
        if (owner == g->rank) { continue; }
        pt->send_tokens[cursor[owner]] = t;
        pt->send_positions[cursor[owner]++] = pos[t];
    }
    g->all_to_all(g, pt->send_count, pt->recv_count, sizeof(int));
    int total = 0;
    for (int i = 0; i < P; i++) {
        pt->recv_start[i] = total;
        total += pt->recv_count[i];
    }
    if (total > pt->recv_room) {
        free(pt->recv_positions);
        pt->recv_room = total;
        pt->recv_positions = (int *)mallocCheck((size_t)total * sizeof(int));
    }
    g->all_to_all_v_wait(g, position_table_post(pt, g, pt->send_positions, pt->send_start, pt->send_count,
                                                pt->recv_positions, pt->recv_start, pt->recv_count, sizeof(int)));
    for (int n = 0; n < total; n++) {
        int p = pt->recv_positions[n];
        if (p < pt->begin || p >= pt->end) {
            fatal("rank %d of the position table received position %d, it owns [%d, %d)", g->rank, p, pt->begin, pt->end);
        }
    }
}

// Round k (1 .. P - 1) of an exchange between the tokens and the owners of their
// positions: this rank meets `owner`, the rank k after it, which owns the
// positions of some of this rank's tokens (send_count[owner] of them), and
// `user`, the rank k before it, some of whose tokens sit at positions this rank
// owns (recv_count[user]). Towards the owners (a gradient's rows) this rank sends
// its tokens' rows to owner and receives user's rows at its positions; towards
// the tokens (the weights' rows) it sends the rows of user's positions and
// receives its tokens' rows from owner. A round's lists: the rows this rank packs
// and where the rows it receives go, each by index less a first row (0 for a
// token, begin for an owned position).
typedef struct {
    int sends, receives;          // rows that go, rows that come
    const int *send_at, *recv_at; // (sends), (receives): tokens or positions
    int send_first, recv_first;
} PositionRound;

// Sets the round's counts by peer (round_send, round_recv: every other peer's
// part empty, so each part starts at its buffer's start) and returns its lists.
static PositionRound position_table_round(PositionTable *pt, int k, int towards_owners) {
    int P = pt->group->size, owner = (pt->group->rank + k) % P, user = (pt->group->rank - k + P) % P;
    const int *tokens = pt->send_tokens + pt->send_start[owner], *positions = pt->recv_positions + pt->recv_start[user];
    PositionRound r;
    memset(pt->round_send, 0, (size_t)P * sizeof(int));
    memset(pt->round_recv, 0, (size_t)P * sizeof(int));
    if (towards_owners) {
        r = (PositionRound){.sends = pt->send_count[owner], .receives = pt->recv_count[user], .send_at = tokens,
                            .recv_at = positions, .send_first = 0, .recv_first = pt->begin};
        pt->round_send[owner] = r.sends;
        pt->round_recv[user] = r.receives;
    } else {
        r = (PositionRound){.sends = pt->recv_count[user], .receives = pt->send_count[owner], .send_at = positions,
                            .recv_at = tokens, .send_first = pt->begin, .recv_first = 0};
        pt->round_send[user] = r.sends;
        pt->round_recv[owner] = r.receives;
    }
    return r;
}

// Sends the round's packed rows (send_rows: (sends, C)) and waits for its
// receive (recv_rows: (receives, C)); unit: a row's bytes.
static void position_table_send_round(PositionTable *pt, const void *send_rows, void *recv_rows, size_t unit) {
    Comm *g = pt->group;
    g->all_to_all_v_wait(g, position_table_post(pt, g, send_rows, pt->zeros, pt->round_send, recv_rows, pt->zeros,
                                                pt->round_recv, unit));
}

// rows: (n, C), row j a copy of src's row at[j] - first
static void position_rows_pack(float *rows, const float *src, const int *at, int first, int n, int C) {
    for (int j = 0; j < n; j++) {
        memcpy(rows + (size_t)j * C, src + (size_t)(at[j] - first) * C, (size_t)C * sizeof(float));
    }
}

// dst's row at[j] - first gets row j of rows ((n, C)), for j in order: added
// (add: a gradient's rows) or copied
static void position_rows_unpack(float *dst, const float *rows, const int *at, int first, int n, int C, int add) {
    for (int j = 0; j < n; j++) {
        float *d = dst + (size_t)(at[j] - first) * C;
        const float *row = rows + (size_t)j * C;
        if (add) {
            for (int i = 0; i < C; i++) { d[i] += row[i]; }
        } else {
            memcpy(d, row, (size_t)C * sizeof(float));
        }
    }
}

// One exchange of the planned batch, round by round: each round's rows of src
// packed, sent, and unpacked into dst, added towards the owners and copied
// towards the tokens. send_rows, recv_rows: (pass tokens, C) each, dead scratch.
static void position_table_exchange(PositionTable *pt, int towards_owners, const float *src, float *dst,
                                    float *send_rows, float *recv_rows) {
    int C = pt->C;
    for (int k = 1; k < pt->group->size; k++) {
        PositionRound r = position_table_round(pt, k, towards_owners);
        position_rows_pack(send_rows, src, r.send_at, r.send_first, r.sends, C);
        position_table_send_round(pt, send_rows, recv_rows, (size_t)C * sizeof(float));
        position_rows_unpack(dst, recv_rows, r.recv_at, r.recv_first, r.receives, C, towards_owners);
    }
}

// Before the planned batch's encoder, where the weights are split too
// (llmc/gpt2.h's gpt2_position_weights): the wpe rows of this rank's tokens whose
// positions other ranks own come from them, round by round, into rows ((tokens,
// C), each such token's row; the others' are left alone). wpe: this rank's rows
// ((room, C), row begin first); scratch: (2 tokens, C) floats dead at this point
// (the model lends its backward's scratch).
static void position_table_fetch_rows(PositionTable *pt, const float *wpe, float *rows, float *scratch) {
    position_table_exchange(pt, 0, wpe, rows, scratch, scratch + (size_t)pt->pass_tokens * pt->C);
}

static void position_table_fetch_rows_verb(void *table, const float *wpe_rows, float *rows, float *scratch) {
    position_table_fetch_rows((PositionTable *)table, wpe_rows, rows, scratch);
}

// The verb a model whose weights hold this rank's rows only fetches the others with.
static EncoderRowsVerb position_table_rows_verb(PositionTable *pt) {
    return (EncoderRowsVerb){pt, position_table_fetch_rows_verb};
}

// The table's rows [0, n) into rows ((n, C), host) on every rank of the group,
// each slice from its owner (wpe: this rank's rows, row begin first, host): what
// an unsharded forward pass over positions below n reads (a sample) where the
// weights are split. A collective of the group, over its host twin.
static void position_table_first_rows(const PositionTable *pt, const float *wpe, float *rows, int n) {
    Comm *g = pt->group_host;
    size_t C = (size_t)pt->C;
    for (int owner = 0; owner < g->size; owner++) {
        int begin, end;
        position_slice(pt->max_T, g->size, owner, &begin, &end);
        if (end > n) { end = n; }
        if (begin >= end) { continue; }
        size_t bytes = (size_t)(end - begin) * C * sizeof(float);
        if (owner == g->rank) { memcpy(rows + (size_t)begin * C, wpe, bytes); }
        g->broadcast(g, rows + (size_t)begin * C, bytes, owner);
    }
}

// After the backward pass of the planned batch (dout: (tokens, C), the gradient of
// the encoder's output): the rows of the tokens whose positions other ranks own go
// to them, round by round, and are added into their dwpe ((room, C), row begin
// first) in the senders' token order; the own rows the encoder added already.
// send_rows and recv_rows: (tokens, C) each, any memory dead at this point (the
// trainer lends the backward's gradient scratch).
static void position_table_send_gradients(PositionTable *pt, float *dwpe, const float *dout, float *send_rows,
                                          float *recv_rows) {
    position_table_exchange(pt, 1, dout, dwpe, send_rows, recv_rows);
}

// The squared norm of the whole gradient: `replicated` (the same on every rank of
// the group) plus the group's slices (dwpe: (end - begin) rows, each on its owner).
static double position_table_norm_squared(const PositionTable *pt, double replicated, const float *dwpe) {
    double slice = global_norm_squared(dwpe, (size_t)(pt->end - pt->begin) * pt->C);
    pt->group->all_reduce_sum(pt->group, &slice, 1, COMM_DOUBLE);
    return replicated + slice;
}

// The step's gradient summed over the ranks, and its squared norm: grads is the
// trained vector (n, llmc/gpt2.h), the owned rows at [at, at + room C). Every other
// parameter is summed over the world, the rows over their replicas.
static double position_table_sum_gradients(const PositionTable *pt, Comm *world, float *grads, size_t n, size_t at) {
    size_t rows = (size_t)pt->room * pt->C, after = at + rows;
    world->all_reduce_sum(world, grads, at, COMM_FLOAT);
    world->all_reduce_sum(world, grads + after, n - after, COMM_FLOAT);
    pt->replicas->all_reduce_sum(pt->replicas, grads + at, rows, COMM_FLOAT);
    double replicated = global_norm_squared(grads, at) + global_norm_squared(grads + after, n - after);
    return position_table_norm_squared(pt, replicated, grads + at);
}

#endif // CP_POSITION_TABLE_H
