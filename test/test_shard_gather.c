/*
MPI test of shard -> gather: cp_shard_batch / cp_shard_tokens on every rank, then
cp_gather_tokens over a Comm of all ranks must give back, on every rank,
    trim = 1   exactly the caller's (B, T) tensor
    trim = 0   the (B, P) padded tensor: the values at g < T, the fill at g >= T
for every layout valid at the world size and many T (odd ones, ones that need
padding, T = max_seq_len). The independent computation is the batch itself: each
element encodes its (row, position), so any misplaced element shows where it
came from. Elements of 4 bytes (int, float), 8 bytes (double) and a 3-float
vector (the shape of a token's activation) are gathered, with B = 3.
Configs that leave a rank without a real token are skipped (test_layout checks
that cp_check_config rejects exactly those).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "cp/sharder.h"
#include "test/lib/test_comm.h"
#include "test/lib/test_utils.h"

#define B 3
#define MAX_SEQ_LEN 150
#define VEC 3 // floats per element of the vector tensor

typedef struct { float v[VEC]; } Vec3;

// the value every tensor below holds at (row b, position t), exact in float
static int code_of(int b, int t) { return 1 + 1000 * b + t; }

// Gathers `local` with trim 1 and 0 and compares with `expected_of(b, g)` for the
// real tokens and `fill` for the pad slots. Elements are compared as bytes.
static void check_gathered(CpSharder *sh, Comm *comm, const void *local, size_t elem, const void *original,
                           int original_len, const void *fill, const char *what) {
    const ShardLayout *lay = &sh->layout;
    int T = lay->original_seq_len, P = lay->padded_seq_len;
    char *out = (char *)mallocCheck((size_t)B * P * elem);
    for (int trim = 1; trim >= 0; trim--) {
        int row_len = trim ? T : P;
        memset(out, 0xAB, (size_t)B * P * elem); // a byte pattern no expected value has
        int rc = cp_gather_tokens(sh, comm, local, (size_t)B * lay->local_len, elem, trim, out);
        CHECK(rc == CP_OK, "%s: gather (trim %d) failed: %s", what, trim, sh->error);
        for (int b = 0; b < B; b++) {
            for (int g = 0; g < row_len; g++) {
                const char *got = out + ((size_t)b * row_len + g) * elem;
                // where the expected element sits in the tensor the caller sharded
                const char *expected = g < T || original_len == P
                    ? (const char *)original + ((size_t)b * original_len + g) * elem
                    : (const char *)fill;
                CHECK(memcmp(got, expected, elem) == 0, "%s (%s T %d P %d, trim %d): row %d position %d differs "
                      "(first 4 bytes as int: got %d, expected %d)", what, cp_layout_names[sh->kind], T, P, trim,
                      b, g, *(const int *)got, *(const int *)expected);
            }
        }
    }
    free(out);
}

static void check_roundtrip(CpSharder *sh, Comm *comm, int T) {
    int P = cp_padded_len(sh->kind, T, sh->cp_size);
    int Tl = P / sh->cp_size;
    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    int *targets = (int *)mallocCheck((size_t)B * T * sizeof(int));
    float *xf = (float *)mallocCheck((size_t)B * T * sizeof(float));
    Vec3 *xv = (Vec3 *)mallocCheck((size_t)B * T * sizeof(Vec3));
    double *xd = (double *)mallocCheck((size_t)B * P * sizeof(double)); // given in padded coordinates
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < P; t++) {
            int code = code_of(b, t);
            xd[b * P + t] = code + 0.5;
            if (t >= T) { continue; }
            inputs[b * T + t] = code;
            targets[b * T + t] = -code;
            xf[b * T + t] = code + 0.25f;
            for (int k = 0; k < VEC; k++) { xv[b * T + t].v[k] = (float)(code * 10 + k); }
        }
    }
    CHECK(cp_shard_batch(sh, inputs, targets, NULL, B, T) == CP_OK, "shard_batch T %d: %s", T, sh->error);
    CHECK(sh->layout.local_len == Tl, "T %d: local length %d, expected %d", T, sh->layout.local_len, Tl);

    // the sharded batch: pads hold input 0 and the ignore target
    int zero = 0, ignore = IGNORE_INDEX;
    check_gathered(sh, comm, sh->local.inputs, sizeof(int), inputs, T, &zero, "inputs");
    check_gathered(sh, comm, sh->local.targets, sizeof(int), targets, T, &ignore, "targets");

    // token tensors of length T with a fill
    float fill_f = -1.5f;
    float *lf = (float *)mallocCheck((size_t)B * Tl * sizeof(float));
    CHECK(cp_shard_tokens(sh, xf, sizeof(float), B, T, &fill_f, lf) == CP_OK, "shard float: %s", sh->error);
    check_gathered(sh, comm, lf, sizeof(float), xf, T, &fill_f, "float");
    Vec3 fill_v = {{-1.0f, -2.0f, -3.0f}};
    Vec3 *lv = (Vec3 *)mallocCheck((size_t)B * Tl * sizeof(Vec3));
    CHECK(cp_shard_tokens(sh, xv, sizeof(Vec3), B, T, &fill_v, lv) == CP_OK, "shard vec3: %s", sh->error);
    check_gathered(sh, comm, lv, sizeof(Vec3), xv, T, &fill_v, "vec3");

    // a token tensor of length P, sharded as is: its pad slots come back unchanged
    double *ld = (double *)mallocCheck((size_t)B * Tl * sizeof(double));
    CHECK(cp_shard_tokens(sh, xd, sizeof(double), B, P, NULL, ld) == CP_OK, "shard double: %s", sh->error);
    check_gathered(sh, comm, ld, sizeof(double), xd, P, NULL, "double");

    free(inputs); free(targets); free(xf); free(xv); free(xd); free(lf); free(lv); free(ld);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    Comm *comm = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    int np = comm->size;

    int Ts[40], num_T = 0;
    for (int T = 7; T <= 137; T += 5) { Ts[num_T++] = T; }
    Ts[num_T++] = 16; // a multiple of 2*np for np in 1, 2, 4, 8: no padding
    Ts[num_T++] = MAX_SEQ_LEN;

    int tested = 0, skipped = 0;
    // the layouts that are a function of (T, cp); packed is gathered in test_packed_layout
    for (int kind = 0; kind < CP_NUM_LAYOUTS; kind++) {
        if ((kind == CP_LAYOUT_IDENTITY && np != 1) || cp_layout_depends_on_data((CpLayoutKind)kind)) { continue; }
        for (int i = 0; i < num_T; i++) {
            CpSharder sh;
            cp_sharder_init(&sh, (CpLayoutKind)kind, comm->rank, np, MAX_SEQ_LEN, cp_no_documents());
            // the same decision on every rank: the check looks at all ranks' shares
            if (cp_check_config(&sh, Ts[i]) != CP_OK) { skipped++; continue; }
            check_roundtrip(&sh, comm, Ts[i]);
            cp_sharder_free(&sh);
            tested++;
        }
    }
    // most configs are valid (only np = 8 with small T leaves ranks empty)
    CHECK(tested >= num_T, "only %d configs tested (%d skipped)", tested, skipped);

    // a layout for another group size is refused, before any message is sent
    if (np > 1) {
        CpSharder sh;
        cp_sharder_init(&sh, CP_LAYOUT_IDENTITY, 0, 1, MAX_SEQ_LEN, cp_no_documents());
        int in[4] = {1, 2, 3, 4}, out[4];
        CHECK(cp_shard_batch(&sh, in, in, NULL, 1, 4) == CP_OK, "identity shard: %s", sh.error);
        CHECK(cp_gather_tokens(&sh, comm, sh.local.inputs, 4, sizeof(int), 1, out) == CP_ERROR,
              "gather of a cp 1 layout over %d ranks succeeded", np);
        cp_sharder_free(&sh);
    }

    // a local buffer of another length than the layout's shard is refused on every
    // rank, before any message is sent (a shorter one would be read past its end)
    {
        CpSharder sh;
        cp_sharder_init(&sh, np == 1 ? CP_LAYOUT_IDENTITY : CP_LAYOUT_ROUND_ROBIN, comm->rank, np, MAX_SEQ_LEN,
                        cp_no_documents());
        int T = 4 * np, in[4 * 8], out[4 * 8];
        for (int t = 0; t < T; t++) { in[t] = t; }
        CHECK(cp_shard_batch(&sh, in, in, NULL, 1, T) == CP_OK, "shard T %d: %s", T, sh.error);
        size_t n = (size_t)sh.layout.local_len;
        for (int d = -1; d <= 1; d += 2) {
            CHECK(cp_gather_tokens(&sh, comm, sh.local.inputs, n + d, sizeof(int), 1, out) == CP_ERROR,
                  "gather of a local buffer of %zu elements (the shard has %zu) succeeded", n + d, n);
            CHECK(strstr(sh.error, "local buffer") != NULL, "the error does not name the local buffer: %s", sh.error);
        }
        CHECK(cp_gather_tokens(&sh, comm, sh.local.inputs, n, sizeof(int), 1, out) == CP_OK, "gather: %s", sh.error);
        for (int t = 0; t < T; t++) { CHECK(out[t] == t, "gathered position %d holds %d", t, out[t]); }
        cp_sharder_free(&sh);
    }

    if (comm->rank == 0) { printf("test_shard_gather np %d: OK (%d configs, %d skipped)\n", np, tested, skipped); }
    comm->destroy(comm);
    MPI_Finalize();
    return 0;
}
