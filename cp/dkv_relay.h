/*
The ring's dK | dV relay, written once for the CPU (cp/ring_attention.h) and the
GPU (cp/ring_attention.cuh). In the backward pass a K/V block visits every rank of
the ring, and each rank it visits adds its queries' share to the block's dK | dV.
The sum travels with the block: at each step a rank takes the accumulator that
came from the block's previous holder, adds this step's share, and passes it on to
the next holder; after the last step it arrives home, at the block's owner, whole.

Two accumulator buffers alternate, one being sent while the other receives, so
the relay of step s overlaps the block computation of step s + 1. The sum is the
memory's own (`add`: a loop on the host, a kernel on the device); the Comm's ring
verbs move the buffers.
*/
#ifndef CP_DKV_RELAY_H
#define CP_DKV_RELAY_H

#include <stddef.h>
#include "comm.h"

// acc = step (first: the block's first holder, nothing came with it) or acc += step,
// over `bytes` of fp32 dK | dV
typedef void (*DkvAdd)(void *acc, const void *step, size_t bytes, int first);

typedef struct {
    Comm *comm;     // the ring
    void *acc[2];   // the accumulators, 2 x (B, T, C) fp32 each, in the Comm's memory
    size_t bytes;   // of one accumulator
    DkvAdd add;
    int current;    // the accumulator of the block this rank holds now
    void *exchange; // the accumulator in flight to the next holder, or NULL
} DkvRelay;

static DkvRelay dkv_relay_start(Comm *comm, void *acc0, void *acc1, size_t bytes, DkvAdd add) {
    DkvRelay r = {comm, {acc0, acc1}, bytes, add, 0, NULL};
    return r;
}

// After a step's block computation left its share in `step`: the accumulator that
// came with the block (none at the first step) plus the share, passed on.
static void dkv_relay_step(DkvRelay *r, const void *step) {
    if (r->exchange) { r->comm->ring_wait(r->comm, r->exchange); }
    r->add(r->acc[r->current], step, r->bytes, r->exchange == NULL);
    r->exchange = r->comm->ring_start(r->comm, r->acc[r->current], r->acc[1 - r->current], r->bytes);
    r->current = 1 - r->current;
}

// After the last step: the complete dK | dV of this rank's own block, home.
static void *dkv_relay_finish(DkvRelay *r) {
    r->comm->ring_wait(r->comm, r->exchange);
    return r->acc[r->current];
}

#endif // CP_DKV_RELAY_H
