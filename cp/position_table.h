/*
The position table (wpe, maxT x C) trained in row slices over the CP group.

Every rank keeps the whole table's weights (a token at any position may land on
any rank, and the model file is llm.c's), but the gradient and the two AdamW
moments of a row live on one rank of the group only: its owner. Without this,
each rank would hold 16 C bytes for every position of the sequence, which at
long T outgrows what context parallelism divides.

    owners     rank r of P owns the rows [r S, r S + S), S = maxT / P, and the last
               rank also the maxT - P S left over; every rank keeps room for the
               largest slice, so that their buffers have one size
    gradient   the model's encoder backward adds the tokens whose positions this
               rank owns (llmc/encoder.h); position_table_send_gradients sends every
               other token's row of the residual's gradient to its position's
               owner, one peer a round, and the owner adds them in the senders'
               token order. A position whose tokens all sit on one rank (always
               under contiguous, round_robin and striped, which lay out every row
               alike) is summed exactly as the single-rank run sums it: 0 + its
               tokens in order. Under packed, solver and restarted positions
               (-rp 1) a position's tokens may sit on several ranks, and the sum's
               order is the rounds' (within the tolerance of DESIGN section 5).
    replicas   the owners of one slice in every data-parallel replica sum their
               gradients (the other parameters are summed over the whole world)
    norm       the replicated parameters' squares plus the slices' squares summed
               over the group (position_table_norm_squared)
    update     each owner runs AdamW on its rows; position_table_gather_rows then
               gives every rank the whole table again

At -z 1 (train/zero.h) the world shards the AdamW state already, by ranges of the
flat vector: there the table is not split (every rank owns every row and the
group is one rank), and everything above reduces to llm.c's path. The same holds
at cp 1.

The state files keep llm.c's whole flat order: a split table's moments are
streamed to each file slice by slice, and read back keeping one's own rows
(train/checkpoint_write.h, train/resume.h), so a checkpoint resumes in any
shape.
*/
#ifndef CP_POSITION_TABLE_H
#define CP_POSITION_TABLE_H

#include <stddef.h>
#include <string.h>
#include "comm.h"
#include "../llmc/adamw.h"
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
    int tokens;       // most tokens a pass of this rank has held (B x T_local): the routing's room
    // a round's routing (position_table_route), host: (tokens) each
    int *send_tokens;    // which of this rank's tokens travel ...
    int *send_positions; // ... and their positions
    int *recv_positions; // the positions of the rows that come
} PositionTable;

// Room for passes of `tokens` tokens: the routing's arrays grow with the
// activations (a packed batch longer than any before); a table not split has none.
static void position_table_reserve(PositionTable *pt, int tokens) {
    if (tokens <= pt->tokens) { return; }
    pt->tokens = tokens;
    if (pt->group->size == 1) { return; }
    int **arrays[3] = {&pt->send_tokens, &pt->send_positions, &pt->recv_positions};
    for (int i = 0; i < 3; i++) {
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
}

// The bytes a split table of `tokens` tokens a pass holds besides the model's:
// the routing's host arrays, and on the GPU (cp/position_table.cuh) the arriving
// rows' token buckets (device order, starts and rows), the routed tokens and the
// norms' three doubles.
static size_t position_table_host_bytes(int tokens) { return 3 * (size_t)tokens * sizeof(int); }
static size_t position_table_device_bytes(int tokens) {
    return (4 * (size_t)tokens + 1) * sizeof(int) + 3 * sizeof(double);
}

static void position_table_free(PositionTable *pt) {
    free(pt->send_tokens);
    free(pt->send_positions);
    free(pt->recv_positions);
    memset(pt, 0, sizeof(*pt));
}

// The owner of position p.
static int position_owner(const PositionTable *pt, int p) {
    int S = pt->max_T / pt->group->size, owner = p / S; // comm_slice's slices
    return owner < pt->group->size ? owner : pt->group->size - 1;
}

// One peer each way: `bytes_to` bytes of send to the rank k after this one, and
// `bytes_from` of recv from the rank k before it, over comm; returns the handle.
static void *position_table_post(Comm *comm, int k, const void *send, size_t bytes_to, void *recv, size_t bytes_from,
                                 size_t *counts) {
    int P = comm->size, to = (comm->rank + k) % P, from = (comm->rank - k + P) % P;
    size_t *send_bytes = counts, *send_offset = counts + P, *recv_bytes = counts + 2 * P, *recv_offset = counts + 3 * P;
    memset(counts, 0, 4 * (size_t)P * sizeof(size_t));
    send_bytes[to] = bytes_to;
    recv_bytes[from] = bytes_from;
    return comm->all_to_all_v_start(comm, send, send_bytes, send_offset, recv, recv_bytes, recv_offset);
}

// Round k of the exchange, on the host: which of this rank's tokens (pos: their
// positions) go to the rank k after it, in token order (send_tokens, and their
// send_positions), and the positions of the rows that come from the rank k before
// it (recv_positions). *n_send, *n_recv: how many. counts: (4 group size) scratch.
static void position_table_route(PositionTable *pt, const int *pos, int tokens, int k, int *n_send, int *n_recv,
                                 size_t *counts) {
    Comm *g = pt->group_host;
    int to = (g->rank + k) % g->size, n = 0;
    for (int t = 0; t < tokens; t++) {
        if (position_owner(pt, pos[t]) != to) { continue; }
        pt->send_tokens[n] = t;
        pt->send_positions[n] = pos[t];
        n++;
    }
    *n_send = n;
    *n_recv = 0;
    g->all_to_all_v_wait(g, position_table_post(g, k, n_send, sizeof(int), n_recv, sizeof(int), counts));
    g->all_to_all_v_wait(g, position_table_post(g, k, pt->send_positions, (size_t)*n_send * sizeof(int),
                                                pt->recv_positions, (size_t)*n_recv * sizeof(int), counts));
    for (int t = 0; t < *n_recv; t++) {
        int p = pt->recv_positions[t];
        if (p < pt->begin || p >= pt->end) {
            fatal("rank %d of the position table received position %d, it owns [%d, %d)", g->rank, p, pt->begin, pt->end);
        }
    }
}

// After the backward pass of `tokens` tokens (dout: (tokens, C), the gradient of
// the encoder's output; pos: (tokens)): the rows of the tokens whose positions
// other ranks own go to them and are added into their dwpe ((room, C), row begin
// first); the own rows the encoder added already. In round k a rank sends to the
// rank k after it and receives from the rank k before it, so no receive holds more
// than one rank's tokens. send_rows and recv_rows: (tokens, C) each, any memory
// dead at this point (the trainer lends the backward's gradient scratch).
static void position_table_send_gradients(PositionTable *pt, float *dwpe, const float *dout, const int *pos,
                                          int tokens, float *send_rows, float *recv_rows) {
    Comm *g = pt->group;
    int C = pt->C;
    position_table_reserve(pt, tokens);
    size_t *counts = (size_t *)mallocCheck(4 * (size_t)g->size * sizeof(size_t));
    for (int k = 1; k < g->size; k++) {
        int n_send, n_recv;
        position_table_route(pt, pos, tokens, k, &n_send, &n_recv, counts);
        for (int n = 0; n < n_send; n++) {
            memcpy(send_rows + (size_t)n * C, dout + (size_t)pt->send_tokens[n] * C, (size_t)C * sizeof(float));
        }
        size_t row = (size_t)C * sizeof(float);
        g->all_to_all_v_wait(g, position_table_post(g, k, send_rows, n_send * row, recv_rows, n_recv * row, counts));
        for (int n = 0; n < n_recv; n++) {
            float *dst = dwpe + (size_t)(pt->recv_positions[n] - pt->begin) * C;
            const float *add = recv_rows + (size_t)n * C;
            for (int i = 0; i < C; i++) { dst[i] += add[i]; }
        }
    }
    free(counts);
}

// The squared norm of the whole gradient: `replicated` (the same on every rank of
// the group) plus the group's slices (dwpe: (end - begin) rows, each on its owner).
static double position_table_norm_squared(const PositionTable *pt, double replicated, const float *dwpe) {
    double slice = global_norm_squared(dwpe, (size_t)(pt->end - pt->begin) * pt->C);
    pt->group->all_reduce_sum(pt->group, &slice, 1, COMM_DOUBLE);
    return replicated + slice;
}

// After the owners' update: every rank's wpe ((max_T, C), in the group's memory)
// becomes the owners' rows.
static void position_table_gather_rows(const PositionTable *pt, float *wpe) {
    comm_gather_slices(pt->group, wpe, (size_t)pt->max_T, (size_t)pt->C * sizeof(float));
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
