/*
MPI test of ZeRO-1 (train/zero.h) and of the sharded AdamW update it drives.

    1. the shards of stage 1 tile [0, n) in rank order, contiguous, all of one size
       but the last, which is at least as large and by fewer than W parameters;
       stage 0 gives every rank [0, n); zero_largest_shard is the largest of them
       (every n of a list, every world size 1..9, in process)
    2. zero_gather_parameters over this job's world (host memory, MPI, the
       all-gather in place): each rank fills its own shard with value(i) and
       the rest with NaN; afterwards every rank holds value(i) everywhere,
       including n smaller than the world (no full shard, only the leftover)
    3. gpt2_update on each of W shards of a tiny model (gpt2_optimizer_range)
       gives, put together, the weights and moments of one update over the whole
       model to the bit, two steps, with weight decay (the 2-D tensors only, so the
       shards' cuts through tensors must keep each tensor's own decay)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "llmc/gpt2_init.h"
#include "train/zero.h"
#include "test/lib/test_comm.h"
#include "test/lib/test_utils.h"

static const size_t SIZES[] = {1, 2, 3, 5, 7, 8, 64, 1003, 100003};
#define NUM_SIZES (sizeof(SIZES) / sizeof(SIZES[0]))

static void check_shards(void) {
    for (size_t k = 0; k < NUM_SIZES; k++) {
        size_t n = SIZES[k];
        for (int W = 1; W <= 9; W++) {
            size_t next = 0, first_size = 0, largest = 0;
            for (int r = 0; r < W; r++) {
                size_t b, e, b0, e0;
                zero_shard(1, n, r, W, &b, &e);
                zero_shard(0, n, r, W, &b0, &e0);
                CHECK(b0 == 0 && e0 == n, "stage 0, n %zu, rank %d of %d: [%zu, %zu), expected all", n, r, W, b0, e0);
                CHECK(b == next && e >= b, "n %zu, rank %d of %d: [%zu, %zu) does not start at %zu", n, r, W, b, e, next);
                if (r == 0) { first_size = e - b; }
                if (r < W - 1) {
                    CHECK(e - b == first_size, "n %zu, rank %d of %d: %zu parameters, rank 0 has %zu", n, r, W, e - b,
                          first_size);
                } else {
                    CHECK(e == n, "n %zu, the last of %d ranks ends at %zu", n, W, e);
                    CHECK(e - b >= first_size && e - b - first_size < (size_t)W,
                          "n %zu, the last of %d ranks holds %zu, the others %zu", n, W, e - b, first_size);
                }
                if (e - b > largest) { largest = e - b; }
                next = e;
            }
            CHECK(zero_largest_shard(1, n, W) == largest, "n %zu, %d ranks: largest shard %zu, expected %zu", n, W,
                  zero_largest_shard(1, n, W), largest);
            CHECK(zero_largest_shard(0, n, W) == n, "stage 0: the largest shard is all %zu", n);
        }
    }
}

static float value(size_t i) { return 0.5f * (float)(i % 1000) - 3.0f + (float)(i / 1000); }

static void check_gather(Comm *world) {
    for (size_t k = 0; k < NUM_SIZES; k++) {
        size_t n = SIZES[k], b, e;
        zero_shard(1, n, world->rank, world->size, &b, &e);
        float *params = (float *)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) { params[i] = i >= b && i < e ? value(i) : NAN; }
        zero_gather_parameters(1, world, params, n);
        for (size_t i = 0; i < n; i++) {
            CHECK(params[i] == value(i), "gather of %zu parameters over %d ranks: parameter %zu is %g, expected %g", n,
                  world->size, i, params[i], value(i));
        }
        free(params);
    }
}

// a tiny model with random weights and gradients
static void tiny_model(GPT2 *model, Rng *rng) {
    GPT2Config c = {16, 40, 48, 2, 2, 8}; // maxT, V, Vp, L, NH, C
    gpt2_init_random(model, c, 7);
    fill_uniform(rng, model->grads_memory, model->num_parameters, -1.0f, 1.0f);
}

static void check_sharded_update(void) {
    Rng rng;
    rng_seed(&rng, 11);
    GPT2 whole;
    tiny_model(&whole, &rng);
    size_t n = whole.num_parameters;
    for (int W = 1; W <= 5; W++) {
        GPT2 reference = whole; // the same weights and gradients, moments of its own
        reference.params_memory = (float *)mallocCheck(n * sizeof(float));
        memcpy(reference.params_memory, whole.params_memory, n * sizeof(float));
        reference.m_memory = (float *)callocCheck(n, sizeof(float));
        reference.v_memory = (float *)callocCheck(n, sizeof(float));
        float *assembled = (float *)mallocCheck(n * sizeof(float));
        float *m = (float *)mallocCheck(n * sizeof(float)), *v = (float *)mallocCheck(n * sizeof(float));
        GPT2 shards[5];
        for (int r = 0; r < W; r++) {
            size_t b, e;
            shards[r] = whole;
            shards[r].params_memory = (float *)mallocCheck(n * sizeof(float));
            memcpy(shards[r].params_memory, whole.params_memory, n * sizeof(float));
            shards[r].m_memory = shards[r].v_memory = NULL;
            zero_shard(1, n, r, W, &b, &e);
            gpt2_optimizer_range(&shards[r], b, e);
        }
        for (int t = 1; t <= 2; t++) {
            gpt2_update(&reference, 1e-2f, 0.1f, 0.5f, t);
            for (int r = 0; r < W; r++) {
                gpt2_update(&shards[r], 1e-2f, 0.1f, 0.5f, t);
                size_t b = shards[r].opt_begin, count = shards[r].opt_end - b;
                memcpy(assembled + b, shards[r].params_memory + b, count * sizeof(float));
                memcpy(m + b, shards[r].m_memory, count * sizeof(float));
                memcpy(v + b, shards[r].v_memory, count * sizeof(float));
            }
            for (int r = 0; r < W; r++) { memcpy(shards[r].params_memory, assembled, n * sizeof(float)); } // the gather
            CHECK(memcmp(assembled, reference.params_memory, n * sizeof(float)) == 0,
                  "%d shards, step %d: the weights differ from the update of the whole model", W, t);
            CHECK(memcmp(m, reference.m_memory, n * sizeof(float)) == 0 &&
                  memcmp(v, reference.v_memory, n * sizeof(float)) == 0,
                  "%d shards, step %d: the moments differ from the update of the whole model", W, t);
        }
        CHECK(memcmp(assembled, whole.params_memory, n * sizeof(float)) != 0, "the update changed nothing");
        for (int r = 0; r < W; r++) {
            free(shards[r].params_memory);
            free(shards[r].m_memory);
            free(shards[r].v_memory);
        }
        free(reference.params_memory);
        free(reference.m_memory);
        free(reference.v_memory);
        free(assembled);
        free(m);
        free(v);
    }
    gpt2_free(&whole);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    Comm *world = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    check_shards();
    check_gather(world);
    check_sharded_update();
    if (world->rank == 0) {
        printf("test_zero np %d: OK, shards of %zu sizes x 9 world sizes, the in-place gather, the sharded update "
               "bit for bit\n", world->size, NUM_SIZES);
    }
    world->destroy(world);
    MPI_Finalize();
    return 0;
}
