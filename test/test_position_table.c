/*
MPI test of the position table trained in row slices (cp/position_table.h), on
host memory over MPI, the group being this job's world:

    1. the owners: every position of tables of many sizes, at every group size
       1..9, has the owner whose slice (position_slice) holds it, and the slices
       tile the table; and comm_slice_holder, the rule beneath, for every unit of
       1..12 units over 1..9 ranks (fewer units than ranks too) against comm_slice
    2. the gradients' journey: every rank holds tokens at random positions (many
       repeated, on one rank and across ranks); the encoder adds its own rows
       (encoder_backward, llmc/encoder.h) and, as position_table_plan routed them,
       position_table_send_gradients the others' rows. Each owner's rows must be the sums of all ranks' tokens at
       those positions (a double-precision sum over the whole job's tokens, which
       every rank builds from the same seed); and where every token of a position
       sits on one rank, as in every layout but restarted positions, the sum must
       be that rank's own loop to the bit (0 + its tokens in order)
    3. position_table_sum_gradients: a trained vector with the table's rows
       between two other parts, summed over the world (the rows over a group of one
       replica), and its squared norm against the same sums in double
    4. the weights' rows, where each rank holds its own only: the encoder's output
       of every rank's tokens at random positions (position_table_fetch_rows, then
       encoder_forward over the held rows and the fetched ones) must be the whole
       table's encoder output to the bit; and position_table_first_rows, for a
       sample, must give every rank the table's first n rows
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "cp/position_table.h"
#include "llmc/encoder.h"
#include "test/lib/test_comm.h"
#include "test/lib/test_utils.h"

static void check_owners(void) {
    const int sizes[] = {1, 2, 5, 7, 9, 64, 100, 101, 1024};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (int P = 1; P <= 9 && P <= sizes[k]; P++) {
            int next = 0, room = 0;
            for (int r = 0; r < P; r++) {
                int b, e;
                position_slice(sizes[k], P, r, &b, &e);
                CHECK(b == next && e > b, "maxT %d, part %d of %d: rows [%d, %d) do not follow %d", sizes[k], r, P, b, e,
                      next);
                if (e - b > room) { room = e - b; }
                next = e;
            }
            CHECK(next == sizes[k], "maxT %d, %d parts: the slices end at %d", sizes[k], P, next);
            CHECK(position_slice_room(sizes[k], P) == room, "maxT %d, %d parts: room %d, the largest slice %d", sizes[k],
                  P, position_slice_room(sizes[k], P), room);
            Comm group = {.rank = 0, .size = P};
            PositionTable pt = {.group = &group, .max_T = sizes[k]};
            for (int p = 0; p < sizes[k]; p++) {
                int owner = position_owner(&pt, p), b, e;
                position_slice(sizes[k], P, owner, &b, &e);
                CHECK(p >= b && p < e, "maxT %d, %d parts: position %d given to part %d, which holds [%d, %d)", sizes[k],
                      P, p, owner, b, e);
            }
        }
    }
}

// comm_slice_holder, the rule position_owner stands on, at every count of units
// against every count of ranks, fewer units than ranks included (then every slice
// but the last is empty): the holder's comm_slice must hold the unit.
static void check_slice_holders(void) {
    for (size_t n = 1; n <= 12; n++) {
        for (int size = 1; size <= 9; size++) {
            for (size_t u = 0; u < n; u++) {
                int holder = comm_slice_holder(n, size, u);
                size_t b, e;
                comm_slice(n, holder, size, &b, &e);
                CHECK(holder >= 0 && holder < size && u >= b && u < e,
                      "%zu units over %d ranks: unit %zu given to rank %d, which holds [%zu, %zu)", n, size, u, holder,
                      b, e);
            }
        }
    }
}

// The job's tokens, the same on every rank: rank r's tokens are [r N, r N + N).
// one_rank: every position's tokens all on one rank (rank r uses only positions
// that are r modulo the ranks); otherwise any rank any position.
typedef struct {
    int N, C, max_T, W;
    int *pos;    // (W N)
    float *dout; // (W N, C)
} JobTokens;

static JobTokens job_tokens(int W, int N, int C, int max_T, int one_rank, unsigned long long seed) {
    JobTokens j = {N, C, max_T, W, (int *)mallocCheck((size_t)W * N * sizeof(int)),
                   (float *)mallocCheck((size_t)W * N * C * sizeof(float))};
    Rng rng;
    rng_seed(&rng, seed);
    for (int r = 0; r < W; r++) {
        for (int t = 0; t < N; t++) {
            int p = rand_below(&rng, max_T);
            if (one_rank) { p = p - p % W + r < max_T ? p - p % W + r : r; }
            j.pos[r * N + t] = p;
        }
    }
    fill_uniform(&rng, j.dout, (size_t)W * N * C, -1.0f, 1.0f);
    return j;
}

static void check_send_gradients(Comm *world, int max_T, int one_rank) {
    int W = world->size, N = 37, C = 5;
    JobTokens j = job_tokens(W, N, C, max_T, one_rank, 1234 + (unsigned long long)max_T);
    PositionTable pt;
    position_table_init(&pt, world, world, world, max_T, C, N);
    float *dwpe = (float *)callocCheck((size_t)pt.room * C, sizeof(float));
    float *dwte = (float *)callocCheck((size_t)C, sizeof(float)); // every token is token 0
    int *inp = (int *)callocCheck((size_t)N, sizeof(int));
    const int *pos = j.pos + (size_t)world->rank * N;
    const float *dout = j.dout + (size_t)world->rank * N * C;
    float *send = (float *)mallocCheck((size_t)N * C * sizeof(float)), *recv = (float *)mallocCheck((size_t)N * C * sizeof(float));
    position_table_plan(&pt, pos, N);
    encoder_backward(dwte, dwpe, pt.begin, pt.end, dout, inp, pos, 1, N, C);
    position_table_send_gradients(&pt, dwpe, dout, send, recv);
    for (int p = pt.begin; p < pt.end; p++) {
        for (int c = 0; c < C; c++) {
            double want = 0.0;
            float own_loop = 0.0f; // the one rank's loop, in its token order
            for (int t = 0; t < W * N; t++) {
                if (j.pos[t] != p) { continue; }
                want += j.dout[(size_t)t * C + c];
                own_loop += j.dout[(size_t)t * C + c];
            }
            float got = dwpe[(size_t)(p - pt.begin) * C + c];
            CHECK(fabs(got - want) <= 1e-5 * (1.0 + fabs(want)), "rank %d, maxT %d: row %d channel %d is %.9g, the "
                  "job's tokens sum to %.9g", world->rank, max_T, p, c, got, want);
            if (one_rank) {
                CHECK(got == own_loop, "rank %d, maxT %d: row %d channel %d is %.9g, not the single rank's %.9g bit "
                      "for bit", world->rank, max_T, p, c, got, own_loop);
            }
        }
    }
    for (size_t i = (size_t)(pt.end - pt.begin) * C; i < (size_t)pt.room * C; i++) {
        CHECK(dwpe[i] == 0.0f, "rank %d: the room after the rows was written (%zu)", world->rank, i);
    }
    position_table_free(&pt);
    free(dwpe); free(dwte); free(inp); free(send); free(recv); free(j.pos); free(j.dout);
}

static void check_sum_gradients(Comm *world, Comm *self) {
    int W = world->size, max_T = 23, C = 3;
    PositionTable pt;
    position_table_init(&pt, world, world, self, max_T, C, 1);
    size_t at = 11, rows = (size_t)pt.room * C, n = at + rows + 17;
    float *grads = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { grads[i] = 0.25f * (float)((i * 7 + (size_t)world->rank * 3) % 11) - 1.0f; }
    for (size_t i = (size_t)(pt.end - pt.begin) * C; i < rows; i++) { grads[at + i] = 0.0f; }
    double want = 0.0;
    for (size_t i = 0; i < n; i++) {
        int in_rows = i >= at && i < at + rows;
        double sum = 0.0;
        for (int r = 0; r < W; r++) { sum += 0.25 * (double)((i * 7 + (size_t)r * 3) % 11) - 1.0; }
        if (!in_rows) { want += sum * sum; }
    }
    // the rows: each owner's own, not summed over the group (a replica of one)
    for (int r = 0; r < W; r++) {
        int b, e;
        position_slice(max_T, W, r, &b, &e);
        for (size_t i = 0; i < (size_t)(e - b) * C; i++) {
            double g = 0.25 * (double)(((at + i) * 7 + (size_t)r * 3) % 11) - 1.0;
            want += g * g;
        }
    }
    float own_row0 = grads[at];
    double got = position_table_sum_gradients(&pt, world, grads, n, at);
    CHECK(fabs(got - want) <= 1e-9 * want, "rank %d: squared norm %.17g, expected %.17g", world->rank, got, want);
    CHECK(grads[at] == own_row0, "rank %d: the table's rows were summed over the group", world->rank);
    for (size_t i = 0; i < at; i++) {
        double sum = 0.0;
        for (int r = 0; r < W; r++) { sum += 0.25 * (double)((i * 7 + (size_t)r * 3) % 11) - 1.0; }
        CHECK(fabs(grads[i] - sum) <= 1e-6, "rank %d: gradient %zu is %.9g, the world's sum %.9g", world->rank, i,
              grads[i], sum);
    }
    position_table_free(&pt);
    free(grads);
}

// a row of the whole table, the same on every rank
static float table_value(int p, int c) { return 0.001f * (float)((p * 37 + c * 11) % 101) - 0.05f; }

static void check_weight_rows(Comm *world, int max_T) {
    int W = world->size, N = 29, C = 6, V = 13;
    JobTokens j = job_tokens(W, N, C, max_T, 0, 99 + (unsigned long long)max_T);
    PositionTable pt;
    position_table_init(&pt, world, world, world, max_T, C, N);
    float *whole = (float *)mallocCheck((size_t)max_T * C * sizeof(float));
    float *held = (float *)callocCheck((size_t)pt.room * C, sizeof(float));
    for (int p = 0; p < max_T; p++) {
        for (int c = 0; c < C; c++) { whole[(size_t)p * C + c] = table_value(p, c); }
    }
    memcpy(held, whole + (size_t)pt.begin * C, (size_t)(pt.end - pt.begin) * C * sizeof(float));
    Rng rng;
    rng_seed(&rng, 5 + (unsigned long long)world->rank);
    float *wte = (float *)mallocCheck((size_t)V * C * sizeof(float));
    fill_uniform(&rng, wte, (size_t)V * C, -1.0f, 1.0f);
    int *inp = (int *)mallocCheck((size_t)N * sizeof(int));
    for (int t = 0; t < N; t++) { inp[t] = rand_below(&rng, V); }
    const int *pos = j.pos + (size_t)world->rank * N;
    float *want = (float *)mallocCheck((size_t)N * C * sizeof(float)), *got = (float *)mallocCheck((size_t)N * C * sizeof(float));
    float *scratch = (float *)mallocCheck(2 * (size_t)N * C * sizeof(float));
    float *fetched = (float *)mallocCheck((size_t)N * C * sizeof(float));
    for (size_t i = 0; i < (size_t)N * C; i++) { fetched[i] = NAN; } // a row not fetched would show
    encoder_forward(want, inp, pos, wte, whole, 0, max_T, NULL, 1, N, C);
    position_table_plan(&pt, pos, N);
    position_table_fetch_rows(&pt, held, fetched, scratch);
    encoder_forward(got, inp, pos, wte, held, pt.begin, pt.end, fetched, 1, N, C);
    for (size_t i = 0; i < (size_t)N * C; i++) {
        CHECK(got[i] == want[i], "rank %d, maxT %d: token %zu channel %zu (position %d) is %.9g, the whole table's "
              "encoder gives %.9g", world->rank, max_T, i / C, i % C, pos[i / C], got[i], want[i]);
    }
    const int firsts[] = {1, max_T / 2 + 1, max_T};
    for (int k = 0; k < 3; k++) {
        int n = firsts[k];
        float *rows = (float *)mallocCheck((size_t)n * C * sizeof(float));
        for (size_t i = 0; i < (size_t)n * C; i++) { rows[i] = NAN; }
        position_table_first_rows(&pt, held, rows, n);
        CHECK(memcmp(rows, whole, (size_t)n * C * sizeof(float)) == 0, "rank %d, maxT %d: the first %d rows "
              "gathered differ from the table's", world->rank, max_T, n);
        free(rows);
    }
    position_table_free(&pt);
    free(whole); free(held); free(wte); free(inp); free(want); free(got); free(scratch); free(fetched); free(j.pos);
    free(j.dout);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    Comm *world = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    Comm *self = comm_mpi_create(comm_duplicate(MPI_COMM_SELF));
    check_owners();
    check_slice_holders();
    const int tables[] = {7, 64, 101};
    for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++) {
        if (tables[k] < world->size) { continue; }
        check_send_gradients(world, tables[k], 0);
        check_send_gradients(world, tables[k], 1);
        check_weight_rows(world, tables[k]);
    }
    check_sum_gradients(world, self);
    if (world->rank == 0) {
        printf("test_position_table np %d: OK, owners, the gradients' journey (any positions, and one rank's to the "
               "bit), the sums and norm, the weights' rows to the encoder and to a sample\n", world->size);
    }
    world->destroy(world);
    self->destroy(self);
    MPI_Finalize();
    return 0;
}
