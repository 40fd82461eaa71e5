/*
ZeRO stage 1 (-z 1, as llm.c's): the AdamW state is sharded over every rank of
the world (dp x cp). Rank r of W holds the moments of one contiguous range of the
flat parameter vector (llm.c's order) and updates only those parameters:

    shard size S = N / W (rounded down); rank r holds [r S, (r + 1) S), and the
    last rank also the N - W S that are left (fewer than W), so the shards are
    equal but for the last one, and nothing is padded (comm_slice, cp/comm.h).

Per step, as at -z 0: the gradients are all-reduced over the world and their
global norm (for the clip) taken from the full all-reduced gradient, so it is
the norm of -z 0 to the bit. Then each rank runs AdamW on its shard alone and the
parameters are all-gathered: S per rank in place, and the last rank's leftover
broadcast. AdamW is elementwise, so every parameter gets the value -z 0 gives it,
bit for bit; only the moments (and their state files) shrink by W.

The gradient all-reduce stays an all-reduce (not a reduce-scatter) so that the
norm is summed over the whole gradient in the order -z 0 sums it.

The verbs are cp/comm.h's, so the same code serves host memory (the CPU twin)
and device memory (the GPU trainer's world Comm).
*/
#ifndef TRAIN_ZERO_H
#define TRAIN_ZERO_H

#include <stddef.h>
#include "../cp/comm.h"

// The range [*begin, *end) of the flat vector of n trained parameters whose
// AdamW state world rank `rank` of `world` holds at ZeRO stage `stage`: all of it
// at 0, its slice (comm_slice) at 1.
static void zero_shard(int stage, size_t n, int rank, int world, size_t *begin, size_t *end) {
    if (stage == 0) {
        *begin = 0;
        *end = n;
        return;
    }
    comm_slice(n, rank, world, begin, end);
}

// The most parameters whose moments any rank holds: the last rank's shard.
static size_t zero_largest_shard(int stage, size_t n, int world) {
    size_t begin, end;
    zero_shard(stage, n, world - 1, world, &begin, &end);
    return end - begin;
}

// After the update of every rank's shard (stage 1): every rank's params (n floats,
// in the memory of `world`) become the updated ones, each shard from its rank. At
// stage 0 every rank updated every parameter, and there is nothing to do.
static void zero_gather_parameters(int stage, Comm *world, float *params, size_t n) {
    if (stage == 0) { return; }
    comm_gather_slices(world, params, n, sizeof(float));
}

// Makes every rank's parameters (n floats, in the memory of `world`) the same at
// the start of a run: rank 0's broadcast, or, when each rank resumed only its own
// shard exactly (from_shards: -z 1 with the master weights from the state files,
// train/resume.h), the shards gathered.
static void zero_sync_parameters(int from_shards, Comm *world, float *params, size_t n) {
    if (from_shards) { zero_gather_parameters(1, world, params, n); }
    else { world->broadcast(world, params, n * sizeof(float), 0); }
}

#endif // TRAIN_ZERO_H
