/*
Every GPU layer (the llmc .cuh files) against its CPU twin (the llmc .h files), the independent
reference, on the same random inputs; then the whole GPU model (llmc/gpt2.cuh,
identity ring, -r 2, classifier chunks of 7 rows) against the CPU model
(llmc/gpt2.h, -r 0, one chunk) through forward, backward and two AdamW updates. TF32 is off (cuda_init(device, 0)).

First, the shared-memory loads that feed the tensor cores, exactly, against the PTX
ISA written out by hand: each variant of ldmatrix (llmc/mma.cuh) against the ISA's
figure of its fragment (which lane, which half of which register, receives each
element); the three ldmatrix loads of mma.cuh's header feeding mma m16n8k16 bf16
against a plain product, and the bf16 tile products built from them
(llmc/mma_tiles.cuh: padded tiles, both B layouts, A read transposed, a product's
accumulators as the next one's A) likewise; cp.async (llmc/async_copy.cuh) against a table of the bytes
each copy leaves (zero-filled past src_bytes), and three groups in flight landing at
wait_group 2, 1, 0. On a GPU these check the hardware; under the emulation, the
emulator's instructions.

Built in both precisions (llmc/precision.cuh): -DENABLE_FP32 compares fp32 with
fp32 as the tolerances below say; -DENABLE_BF16 gives both sides the same
bf16-rounded inputs (round_to_storage: every value the GPU reads from floatX
memory, the CPU reads rounded the same way), and where a kernel stores an
intermediate in floatX that a later step reads (the classifier's logits and their
gradient) the CPU reference rounds it there too. What remains is the rounding of
the GPU's own floatX outputs.

Outputs are poisoned with NaN before each kernel, so an element a kernel forgets
to write fails. Accumulating kernels (backward passes) start from the same random
values on both sides, so a kernel that overwrites instead of adding fails too.

Tolerances (relative 2-norm of the difference over the tensor, see
test/lib/gpu_test_utils.cuh):
  1e-6  elementwise kernels and sums taken in the CPU's own order (encoder,
        embedding gradients, GELU, residual, AdamW): only libm vs CUDA math ulps
  1e-5  reductions over <= 4C = 384 channels or <= 703 tokens in another
        order (layernorm, matmul, the classifier's sums over V = 250, its
        chunks of 7 rows against one chunk of all 74 on the CPU): fp32
        rounding grows like sqrt(n) * 6e-8 ~ 2e-6, five times that as margin
  1e-4  the whole model's gradients: two layers of such differences compound
        through backward, where layernorm's backward subtracts nearly equal terms;
        and its parameters after two AdamW steps, which divide each gradient by
        its own running magnitude, so that the relative error of a tiny gradient
        reaches the update in full
  1e-12 the double-precision gradient norm
In the bf16 build a check of a floatX output adds u = 2^-8 (x_tol): bf16 keeps 8
significant bits, so rounding to nearest moves a value by at most u of itself,
and the 2-norm of the errors of a rounded tensor is at most u of its own 2-norm;
the reference is the unrounded fp32 value, so the bound is the fp32 tolerance +
u. A floatX intermediate both sides round can come out one bf16 ulp (2u) apart
where the two fp32 values straddle a rounding boundary, which at fp32
differences of ~1e-6 happens to about 1e-6 / 2^-7 ~ 1e-4 of the values; a few
such values move a tensor's 2-norm by far less than u, so those checks take the
same bound. Checks of fp32 outputs computed from the same rounded inputs (mean,
rstd, the weight and bias gradients, the losses of given logits) keep the fp32
tolerance. The whole model's tolerances in the bf16 build (MODEL_BF16_*, where
the CPU model cannot round as the GPU does) are derived above test_model.
With no GPU the binary exits 77 (skipped).
*/
#include "cp/comm_mpi.h"
#include "cp/comm_mpi_staged.cuh"
#include "cp/loss.cuh"
#include "cp/ring_attention.cuh"
#include "cp/ring_attention.h"
#include "cp/sharder.h"
#include "llmc/async_copy.cuh"
#include "llmc/cuda_reduce.cuh"
#include "llmc/gpt2.cuh"
#include "llmc/gpt2_init.h"
#include "llmc/mma.cuh"
#include "llmc/mma_tiles.cuh"
#include "test/lib/gpu_test_utils.cuh"
#include "test/lib/test_comm.h"

#define B 2
#define T 37   // odd: no kernel may assume a multiple of the warp
#define C 96
#define NH 3   // HS = 32
#define V 250
#define VP 256
#define MAXT 64
#define L 2
#define BT (B * T)

static Rng rng;

static float *random_floats(size_t n, float lo, float hi) {
    float *x = (float *)mallocCheck(n * sizeof(float));
    fill_uniform(&rng, x, n, lo, hi);
    return x;
}

static int *random_ints(size_t n, int below) {
    int *x = (int *)mallocCheck(n * sizeof(int));
    for (size_t i = 0; i < n; i++) { x[i] = rand_below(&rng, below); }
    return x;
}

// u = 2^-8, the unit roundoff of a value stored as bf16 (8 significant bits, round
// to nearest); 0 in the fp32 build, where storing rounds nothing
#define STORAGE_ROUNDOFF (sizeof(floatX) == sizeof(float) ? 0.0 : 1.0 / 256)

// the tolerance of a floatX output (see the top of the file)
static double x_tol(double fp32_tol) { return fp32_tol + STORAGE_ROUNDOFF; }

// x rounded in place to the values floatX holds (nothing changes in the fp32 build); returns x
static float *round_to_storage(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) { x[i] = to_float(to_floatX(x[i])); }
    return x;
}

// random values that floatX holds exactly, so that both sides read the same numbers
static float *random_stored(size_t n, float lo, float hi) { return round_to_storage(random_floats(n, lo, hi), n); }

// a device floatX copy of host values (round_to_storage'd: the copy holds them exactly)
static floatX *device_copy_x(const float *host, size_t n) {
    floatX *staged = (floatX *)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) { staged[i] = to_floatX(host[i]); }
    floatX *d = (floatX *)cudaMallocCheck(n * sizeof(floatX));
    cuda_upload(d, staged, n * sizeof(floatX));
    cuda_sync();
    free(staged);
    return d;
}

static floatX *device_alloc_x(size_t n) { return (floatX *)cudaMallocCheck(n * sizeof(floatX)); }

// a floatX device array, widened, against a host reference
static double check_rel_device_x(const char *what, const floatX *got_device, const float *expected, size_t n,
                                 double tol) {
    floatX *got_x = (floatX *)mallocCheck(n * sizeof(floatX));
    cuda_download(got_x, got_device, n * sizeof(floatX));
    float *got = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { got[i] = to_float(got_x[i]); }
    double rel = check_rel(what, got, expected, n, tol);
    free(got);
    free(got_x);
    return rel;
}

// ---- the warp-level loads that feed the tensor cores (llmc/mma.cuh, llmc/async_copy.cuh)

// ldmatrix's fragment of one 8 x 8 matrix, written out from the PTX ISA's figure of
// it ("Warp-level matrix load instruction: ldmatrix"): each row read by a group of
// four consecutive lanes, each lane two consecutive elements in one register. Cell
// (row, column) names the lane that receives the element and the half of the
// register it lands in, a the low 16 bits, b the high; register i holds matrix i.
static const char *LDMATRIX_FRAGMENT[8] = {
    " 0a  0b  1a  1b  2a  2b  3a  3b", " 4a  4b  5a  5b  6a  6b  7a  7b",
    " 8a  8b  9a  9b 10a 10b 11a 11b", "12a 12b 13a 13b 14a 14b 15a 15b",
    "16a 16b 17a 17b 18a 18b 19a 19b", "20a 20b 21a 21b 22a 22b 23a 23b",
    "24a 24b 25a 25b 26a 26b 27a 27b", "28a 28b 29a 29b 30a 30b 31a 31b",
};
// .trans: the matrix is read in column-major order, so the same figure holds for
// the transpose: each column of the stored matrix goes to four consecutive lanes
static const char *LDMATRIX_FRAGMENT_TRANS[8] = {
    " 0a  4a  8a 12a 16a 20a 24a 28a", " 0b  4b  8b 12b 16b 20b 24b 28b",
    " 1a  5a  9a 13a 17a 21a 25a 29a", " 1b  5b  9b 13b 17b 21b 25b 29b",
    " 2a  6a 10a 14a 18a 22a 26a 30a", " 2b  6b 10b 14b 18b 22b 26b 30b",
    " 3a  7a 11a 15a 19a 23a 27a 31a", " 3b  7b 11b 15b 19b 23b 27b 31b",
};

// the shared row that holds row r of matrix m in the ldmatrix probe: the rows of
// the four matrices scattered over 32 rows (13 is prime to 32), so that every
// address is a lane's own, not a base and a stride
static int ldmatrix_slot(int m, int r) { return (m * 8 + r) * 13 % 32; }
// each element's own code: matrix, row, column
static uint16_t ldmatrix_code(int m, int r, int c) { return (uint16_t)(0x1000 + m * 0x100 + r * 0x10 + c); }

// One ldmatrix<M, TRANS> by a warp. rows: (32, 8) 16-bit codes, shared row s gets
// rows[s]; lane l gives the address of shared row slot[l] (the PTX ISA's table:
// threads 8i .. 8i + 7 give addr 8i .. 8i + 7, the rows of matrix i; lanes past 8M
// give row 32, which nothing writes and the instruction does not read).
// out: (32 lanes, 4) registers
template <int M, bool TRANS>
__global__ static void ldmatrix_probe_kernel(uint32_t *out, const uint16_t *rows, const int *slot) {
    __shared__ float4 tile[33]; // 16-byte rows, aligned
    int lane = threadIdx.x;
    uint16_t *mine = (uint16_t *)&tile[lane];
    for (int c = 0; c < 8; c++) { mine[c] = rows[lane * 8 + c]; }
    __syncwarp();
    uint32_t r[M];
    ldmatrix<M, TRANS>(r, &tile[slot[lane]]);
    for (int i = 0; i < M; i++) { out[lane * 4 + i] = r[i]; }
}
typedef void (*LdmatrixProbe)(uint32_t *out, const uint16_t *rows, const int *slot);

// Each variant of ldmatrix against the figure: every element of every matrix it
// loads in the lane and half the figure names.
static void test_ldmatrix(void) {
    const struct { const char *name; int matrices, trans; LdmatrixProbe probe; } variants[] = {
        {"x1", 1, 0, ldmatrix_probe_kernel<1, false>}, {"x1.trans", 1, 1, ldmatrix_probe_kernel<1, true>},
        {"x2", 2, 0, ldmatrix_probe_kernel<2, false>}, {"x2.trans", 2, 1, ldmatrix_probe_kernel<2, true>},
        {"x4", 4, 0, ldmatrix_probe_kernel<4, false>}, {"x4.trans", 4, 1, ldmatrix_probe_kernel<4, true>},
    };
    uint16_t rows[32 * 8];
    for (int m = 0; m < 4; m++) {
        for (int r = 0; r < 8; r++) {
            for (int c = 0; c < 8; c++) { rows[ldmatrix_slot(m, r) * 8 + c] = ldmatrix_code(m, r, c); }
        }
    }
    uint16_t *d_rows = (uint16_t *)cudaMallocCheck(sizeof(rows));
    cuda_upload(d_rows, rows, sizeof(rows));
    uint32_t *d_out = (uint32_t *)cudaMallocCheck(32 * 4 * sizeof(uint32_t));
    int *d_slot = (int *)cudaMallocCheck(32 * sizeof(int));
    for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
        int M = variants[v].matrices, slot[32];
        for (int l = 0; l < 32; l++) { slot[l] = l < 8 * M ? ldmatrix_slot(l / 8, l % 8) : 32; }
        cuda_upload(d_slot, slot, sizeof(slot));
        poison_device(d_out, 32 * 4 * sizeof(uint32_t));
        LdmatrixProbe probe = variants[v].probe;
        probe<<<1, WARP_SIZE, 0, cuda_ctx.stream>>>(d_out, d_rows, d_slot);
        cudaCheckLaunch();
        uint32_t out[32 * 4];
        cuda_download(out, d_out, sizeof(out));
        const char **figure = variants[v].trans ? LDMATRIX_FRAGMENT_TRANS : LDMATRIX_FRAGMENT;
        int wrong = 0, seen[32][2] = {{0}};
        for (int r = 0; r < 8; r++) {
            const char *cell = figure[r];
            for (int c = 0; c < 8; c++) {
                int lane, used;
                char half;
                if (sscanf(cell, "%d%c%n", &lane, &half, &used) != 2 || lane < 0 || lane > 31 ||
                    (half != 'a' && half != 'b')) {
                    fatal("ldmatrix figure: row %d, column %d unreadable", r, c);
                }
                cell += used;
                seen[lane][half - 'a']++;
                for (int i = 0; i < M; i++) {
                    uint16_t got = (uint16_t)(out[lane * 4 + i] >> (half == 'a' ? 0 : 16));
                    if (got != ldmatrix_code(i, r, c) && wrong++ == 0) {
                        printf("     ldmatrix %s: lane %d register %d %s half holds 0x%04x, not element (%d, %d) "
                               "of matrix %d (0x%04x)\n", variants[v].name, lane, i, half == 'a' ? "low" : "high",
                               got, r, c, i, ldmatrix_code(i, r, c));
                    }
                }
            }
        }
        for (int l = 0; l < 32; l++) {
            if (seen[l][0] != 1 || seen[l][1] != 1) { fatal("ldmatrix figure: lane %d is not named once per half", l); }
        }
        printf("%-4s ldmatrix %-8s against the PTX ISA's fragment figure: %d of %d elements wrong\n",
               wrong ? "FAIL" : "ok", variants[v].name, wrong, 64 * M);
        if (wrong) { rel_failures++; }
    }
    cudaCheck(cudaFree(d_rows)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_slot));
}

// D (16, 16) = A (16, 16) B (16, 16) by two m16n8k16 bf16 products (n-blocks 0-7,
// 8-15), their fragments loaded with ldmatrix as llmc/mma.cuh's header says: A
// row-major by one x4; B stored as [n][k] by one x4, or as [k][n] by one x4.trans.
// a, b: (16, 16) bf16 bits, b as [k][n] if b_kn else [n][k]; d: (16, 16) row-major
__global__ static void ldmatrix_mma_kernel(float *d, const uint16_t *a, const uint16_t *b, int b_kn) {
    __shared__ float4 as[32]; // row r's columns 8h .. 8h + 7 at [2r + h]
    __shared__ float4 bs[32];
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint16_t *a_row = (uint16_t *)&as[lane], *b_row = (uint16_t *)&bs[lane];
    for (int c = 0; c < 8; c++) { a_row[c] = a[lane * 8 + c]; b_row[c] = b[lane * 8 + c]; }
    __syncwarp();
    uint32_t af[4], bf[4];
    ldmatrix<4, false>(af, &as[2 * (lane % 16) + lane / 16]);
    if (b_kn) { ldmatrix<4, true>(bf, &bs[2 * (8 * (lane / 8 % 2) + lane % 8) + lane / 16]); }
    else { ldmatrix<4, false>(bf, &bs[2 * (8 * (lane / 16) + lane % 8) + lane / 8 % 2]); }
    for (int n = 0; n < 2; n++) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, df[4];
        mma_m16n8k16_bf16(df, af, bf + 2 * n, c);
        int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        for (int i = 0; i < 4; i++) { d[rows[i] * 16 + 8 * n + cols[i]] = df[i]; }
    }
}

// the ldmatrix loads of mma.cuh's header feeding mma, B in both layouts, against a
// plain product, bit for bit: on multiples of 1/8 in [-2, 2] (exact in bf16, every
// product and sum exact in fp32)
static void test_ldmatrix_mma(void) {
    Rng own; // not the layers' generator: their inputs stay as they were
    rng_seed(&own, 4244);
    float a[16 * 16], b[16 * 16], ref[16 * 16]; // b as [k][n]
    uint16_t a_bits[16 * 16], b_bits[2][16 * 16]; // [n][k], [k][n]
    for (int i = 0; i < 16 * 16; i++) {
        a[i] = (float)(rand_below(&own, 33) - 16) / 8.0f;
        b[i] = (float)(rand_below(&own, 33) - 16) / 8.0f;
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            uint32_t u;
            memcpy(&u, &a[i * 16 + j], 4);
            a_bits[i * 16 + j] = (uint16_t)(u >> 16);
            memcpy(&u, &b[i * 16 + j], 4); // b (k = i, n = j)
            b_bits[1][i * 16 + j] = (uint16_t)(u >> 16);
            b_bits[0][j * 16 + i] = (uint16_t)(u >> 16);
            double sum = 0.0;
            for (int k = 0; k < 16; k++) { sum += (double)a[i * 16 + k] * b[k * 16 + j]; }
            ref[i * 16 + j] = (float)sum;
        }
    }
    uint16_t *d_a = (uint16_t *)cudaMallocCheck(sizeof(a_bits)), *d_b = (uint16_t *)cudaMallocCheck(sizeof(a_bits));
    float *d_d = (float *)cudaMallocCheck(sizeof(ref));
    cuda_upload(d_a, a_bits, sizeof(a_bits));
    for (int kn = 0; kn < 2; kn++) {
        cuda_upload(d_b, b_bits[kn], sizeof(a_bits));
        poison_device(d_d, sizeof(ref));
        ldmatrix_mma_kernel<<<1, WARP_SIZE, 0, cuda_ctx.stream>>>(d_d, d_a, d_b, kn);
        cudaCheckLaunch();
        check_rel_device(kn ? "ldmatrix x4, x4.trans [k][n] B: mma bf16" : "ldmatrix x4, x4 [n][k] B: mma bf16", d_d,
                         ref, 16 * 16, 0.0);
    }
    cudaCheck(cudaFree(d_a)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_d));
}

// llmc/mma_tiles.cuh's bf16 tile products on padded tiles: A (16, 32) B (32, 16)
// with A's fragments read row-major (fragment_a_bf16) and B stored [n][k] (B_NK), and
// again with A read from its transpose (fragment_a_bf16_trans) and B stored [k][n]
// (B_KN); then that product's accumulators, rounded to bf16, as the A of a product
// with B's first 16 rows (fragment_a_from_accumulators).
// a: (16, 32) bf16 bits   b: (32, 16) as [k][n]   out: (3, 16, 16) row-major
#define TILE_LD_A 40 // row strides of the padded tiles (elements, rows 16-byte aligned)
#define TILE_LD_T 24
__global__ static void mma_tiles_bf16_kernel(float *out, const uint16_t *a, const uint16_t *b) {
    __shared__ float4 a_store[16 * TILE_LD_A / 8];  // A (16, 32) [m][k]
    __shared__ float4 at_store[32 * TILE_LD_T / 8]; // A^T (32, 16) [k][m]
    __shared__ float4 bnk_store[16 * TILE_LD_A / 8]; // B (32, 16) as [n][k]
    __shared__ float4 bkn_store[32 * TILE_LD_T / 8]; // B as [k][n]
    uint16_t *as = (uint16_t *)a_store, *ats = (uint16_t *)at_store, *bnk = (uint16_t *)bnk_store,
             *bkn = (uint16_t *)bkn_store;
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    for (int i = lane; i < 16 * 32; i += WARP_SIZE) {
        int m = i / 32, k = i % 32;
        as[m * TILE_LD_A + k] = a[i];
        ats[k * TILE_LD_T + m] = a[i];
        int kb = i / 16, n = i % 16; // b's element (kb, n)
        bkn[kb * TILE_LD_T + n] = b[i];
        bnk[n * TILE_LD_A + kb] = b[i];
    }
    __syncwarp();
    const __nv_bfloat16 *a16 = (const __nv_bfloat16 *)as, *at16 = (const __nv_bfloat16 *)ats;
    const __nv_bfloat16 *bnk16 = (const __nv_bfloat16 *)bnk, *bkn16 = (const __nv_bfloat16 *)bkn;
    float c[3][2][4] = {};
    for (int k0 = 0; k0 < 32; k0 += 16) {
        uint32_t af[4];
        fragment_a_bf16(af, a16, TILE_LD_A, 0, k0);
        warp_mma_bf16<2, B_NK>(c[0], af, bnk16, TILE_LD_A, k0);
        fragment_a_bf16_trans(af, at16, TILE_LD_T, 0, k0);
        warp_mma_bf16<2, B_KN>(c[1], af, bkn16, TILE_LD_T, k0);
    }
    uint32_t pf[4];
    fragment_a_from_accumulators(pf, c[1][0], c[1][1]);
    warp_mma_bf16<2, B_KN>(c[2], pf, bkn16, TILE_LD_T, 0);
    for (int p = 0; p < 3; p++) {
        for (int n = 0; n < 2; n++) {
            for (int i = 0; i < 4; i++) { out[p * 256 + (g + 8 * (i / 2)) * 16 + 8 * n + 2 * t + i % 2] = c[p][n][i]; }
        }
    }
}

// The bf16 tile products of llmc/mma_tiles.cuh against plain products, bit for bit:
// on multiples of 1/8 in [-2, 2] every product and sum is exact in fp32, and the
// chained product's reference rounds the first product to bf16 as the kernel does
static void test_mma_tiles_bf16(void) {
    Rng own; // not the layers' generator: their inputs stay as they were
    rng_seed(&own, 4245);
    float a[16 * 32], b[32 * 16], ref[3 * 256];
    uint16_t a_bits[16 * 32], b_bits[32 * 16];
    for (int i = 0; i < 16 * 32; i++) {
        a[i] = (float)(rand_below(&own, 33) - 16) / 8.0f;
        b[i] = (float)(rand_below(&own, 33) - 16) / 8.0f;
        uint32_t u;
        memcpy(&u, &a[i], 4);
        a_bits[i] = (uint16_t)(u >> 16);
        memcpy(&u, &b[i], 4);
        b_bits[i] = (uint16_t)(u >> 16);
    }
    for (int m = 0; m < 16; m++) {
        for (int n = 0; n < 16; n++) {
            double sum = 0.0;
            for (int k = 0; k < 32; k++) { sum += (double)a[m * 32 + k] * b[k * 16 + n]; }
            ref[m * 16 + n] = ref[256 + m * 16 + n] = (float)sum;
        }
    }
    for (int m = 0; m < 16; m++) {
        for (int n = 0; n < 16; n++) {
            double sum = 0.0;
            for (int k = 0; k < 16; k++) {
                sum += (double)__bfloat162float(__float2bfloat16_rn(ref[256 + m * 16 + k])) * b[k * 16 + n];
            }
            ref[512 + m * 16 + n] = (float)sum;
        }
    }
    uint16_t *d_a = (uint16_t *)cudaMallocCheck(sizeof(a_bits)), *d_b = (uint16_t *)cudaMallocCheck(sizeof(b_bits));
    float *d_out = (float *)cudaMallocCheck(sizeof(ref));
    cuda_upload(d_a, a_bits, sizeof(a_bits));
    cuda_upload(d_b, b_bits, sizeof(b_bits));
    poison_device(d_out, sizeof(ref));
    mma_tiles_bf16_kernel<<<1, WARP_SIZE, 0, cuda_ctx.stream>>>(d_out, d_a, d_b);
    cudaCheckLaunch();
    const char *names[3] = {"mma_tiles bf16: fragment_a_bf16, B_NK", "mma_tiles bf16: fragment_a_bf16_trans, B_KN",
                            "mma_tiles bf16: A from accumulators"};
    for (int p = 0; p < 3; p++) { check_rel_device(names[p], d_out + p * 256, ref + p * 256, 256, 0.0); }
    cudaCheck(cudaFree(d_a)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_out));
}

// cp.async against the PTX ISA's description, written out by hand: a 16-byte
// destination that held ee, a source holding 01 02 03 ...; a copy of `bytes` writes
// its first src_bytes from the source and zeros in the rest of its bytes
static const struct { int cg, bytes, src_bytes; const char *expected; } CP_ASYNC_TABLE[] = {
    {0, 4, 4, "01 02 03 04 ee ee ee ee ee ee ee ee ee ee ee ee"},
    {0, 4, 3, "01 02 03 00 ee ee ee ee ee ee ee ee ee ee ee ee"},
    {0, 8, 8, "01 02 03 04 05 06 07 08 ee ee ee ee ee ee ee ee"},
    {0, 8, 0, "00 00 00 00 00 00 00 00 ee ee ee ee ee ee ee ee"},
    {0, 16, 16, "01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10"},
    {0, 16, 9, "01 02 03 04 05 06 07 08 09 00 00 00 00 00 00 00"},
    {1, 16, 16, "01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10"},
    {1, 16, 7, "01 02 03 04 05 06 07 00 00 00 00 00 00 00 00 00"},
    {1, 16, 0, "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
};

// one thread: 16 bytes of shared memory set to ee, one cp.async from src into them,
// committed and waited for; out: the 16 bytes
__global__ static void cp_async_probe_kernel(unsigned char *out, const unsigned char *src, int cg, int bytes,
                                             int src_bytes) {
    __shared__ float4 tile[1];
    unsigned char *dst = (unsigned char *)tile;
    for (int i = 0; i < 16; i++) { dst[i] = 0xee; }
    if (cg) { cp_async_cg16(dst, src, src_bytes); }
    else if (bytes == 4) { cp_async_ca<4>(dst, src, src_bytes); }
    else if (bytes == 8) { cp_async_ca<8>(dst, src, src_bytes); }
    else { cp_async_ca<16>(dst, src, src_bytes); }
    cp_async_commit();
    cp_async_wait<0>();
    for (int i = 0; i < 16; i++) { out[i] = dst[i]; }
}

// Three groups of cp.async in flight by 64 threads, each copying its row of three
// (64, 4) float tiles into three shared tiles, a group per tile; after wait_group 2,
// 1 and 0 (each followed by a __syncthreads) thread t reads row t + 1 of the tile
// whose group that wait lands. src, out: (3, 64, 4)
__global__ static void cp_async_groups_kernel(float *out, const float *src) {
    __shared__ float4 tiles[3][64];
    int t = threadIdx.x, next = (t + 1) % 64;
    for (int k = 0; k < 3; k++) {
        cp_async_cg16(&tiles[k][t], src + (k * 64 + t) * 4, 16);
        cp_async_commit();
    }
    cp_async_wait<2>();
    __syncthreads();
    for (int c = 0; c < 4; c++) { out[(0 * 64 + t) * 4 + c] = ((float *)&tiles[0][next])[c]; }
    cp_async_wait<1>();
    __syncthreads();
    for (int c = 0; c < 4; c++) { out[(1 * 64 + t) * 4 + c] = ((float *)&tiles[1][next])[c]; }
    cp_async_wait<0>();
    __syncthreads();
    for (int c = 0; c < 4; c++) { out[(2 * 64 + t) * 4 + c] = ((float *)&tiles[2][next])[c]; }
}

static void test_cp_async(void) {
    unsigned char src[16], out[16];
    for (int i = 0; i < 16; i++) { src[i] = (unsigned char)(i + 1); }
    // 256 bytes: the copies of src_bytes 0 are given the address past its end (nothing is read)
    unsigned char *d_src = (unsigned char *)cudaMallocCheck(256), *d_out = (unsigned char *)cudaMallocCheck(16);
    cuda_upload(d_src, src, sizeof(src));
    for (size_t k = 0; k < sizeof(CP_ASYNC_TABLE) / sizeof(CP_ASYNC_TABLE[0]); k++) {
        int cg = CP_ASYNC_TABLE[k].cg, bytes = CP_ASYNC_TABLE[k].bytes, src_bytes = CP_ASYNC_TABLE[k].src_bytes;
        cp_async_probe_kernel<<<1, 1, 0, cuda_ctx.stream>>>(d_out, src_bytes ? d_src : d_src + 256, cg, bytes,
                                                            src_bytes);
        cudaCheckLaunch();
        cuda_download(out, d_out, sizeof(out));
        char got[16 * 3];
        for (int i = 0; i < 16; i++) { snprintf(got + 3 * i, 4, "%02x%s", out[i], i < 15 ? " " : ""); }
        int ok = strcmp(got, CP_ASYNC_TABLE[k].expected) == 0;
        printf("%-4s cp.async.%s %d bytes, src_bytes %2d: %s\n", ok ? "ok" : "FAIL", cg ? "cg" : "ca", bytes,
               src_bytes, got);
        if (!ok) {
            printf("     expected %s\n", CP_ASYNC_TABLE[k].expected);
            rel_failures++;
        }
    }
    cudaCheck(cudaFree(d_src)); cudaCheck(cudaFree(d_out));
    // the groups: every row read is the next thread's row of its tile (values all distinct)
    float *tiles = (float *)mallocCheck(3 * 64 * 4 * sizeof(float));
    float *expected = (float *)mallocCheck(3 * 64 * 4 * sizeof(float));
    for (int i = 0; i < 3 * 64 * 4; i++) { tiles[i] = 0.5f + (float)i; }
    for (int k = 0; k < 3; k++) {
        for (int t = 0; t < 64; t++) {
            for (int c = 0; c < 4; c++) { expected[(k * 64 + t) * 4 + c] = tiles[(k * 64 + (t + 1) % 64) * 4 + c]; }
        }
    }
    float *d_tiles = device_copy(tiles, 3 * 64 * 4), *d_groups = (float *)cudaMallocCheck(3 * 64 * 4 * sizeof(float));
    poison_device(d_groups, 3 * 64 * 4 * sizeof(float));
    cp_async_groups_kernel<<<1, 64, 0, cuda_ctx.stream>>>(d_groups, d_tiles);
    cudaCheckLaunch();
    check_rel_device("cp.async: three groups, wait_group 2, 1, 0", d_groups, expected, 3 * 64 * 4, 0.0);
    cudaCheck(cudaFree(d_tiles)); cudaCheck(cudaFree(d_groups));
    free(tiles); free(expected);
}

static void test_encoder(void) {
    float *wte = random_stored((size_t)VP * C, -1, 1), *wpe = random_stored((size_t)MAXT * C, -1, 1);
    int *inp = random_ints(BT, 20); // few distinct ids: many tokens share an embedding row
    int *pos = random_ints(BT, MAXT);
    float *out = (float *)mallocCheck((size_t)BT * C * sizeof(float));
    encoder_forward(out, inp, pos, wte, wpe, 0, MAXT, NULL, B, T, C);
    floatX *d_wte = device_copy_x(wte, (size_t)VP * C), *d_wpe = device_copy_x(wpe, (size_t)MAXT * C);
    int *d_inp = device_copy_int(inp, BT), *d_pos = device_copy_int(pos, BT);
    floatX *d_out = device_alloc_x((size_t)BT * C);
    poison_device(d_out, (size_t)BT * C * sizeof(floatX));
    encoder_forward_cuda(d_out, d_inp, d_pos, d_wte, d_wpe, 0, MAXT, NULL, B, T, C);
    check_rel_device_x("encoder forward", d_out, out, (size_t)BT * C, x_tol(1e-6));
    // a rank that holds the rows [MAXT / 3, 2 MAXT / 3) of the weights, and every
    // other token's row in other_rows (as fetched from its owner): the same output
    {
        int held_begin = MAXT / 3, held_end = 2 * MAXT / 3;
        float *other = (float *)mallocCheck((size_t)BT * C * sizeof(float));
        for (int t = 0; t < BT; t++) { memcpy(other + (size_t)t * C, wpe + (size_t)pos[t] * C, C * sizeof(float)); }
        floatX *d_held = device_copy_x(wpe + (size_t)held_begin * C, (size_t)(held_end - held_begin) * C);
        floatX *d_other = device_copy_x(other, (size_t)BT * C);
        poison_device(d_out, (size_t)BT * C * sizeof(floatX));
        encoder_forward_cuda(d_out, d_inp, d_pos, d_wte, d_held, held_begin, held_end, d_other, B, T, C);
        check_rel_device_x("encoder forward, held rows and fetched ones", d_out, out, (size_t)BT * C, x_tol(1e-6));
        cudaCheck(cudaFree(d_held)); cudaCheck(cudaFree(d_other));
        free(other);
    }

    // backward accumulates (fp32) into tables that already hold values
    float *dout = random_stored((size_t)BT * C, -1, 1);
    float *dwte = random_floats((size_t)VP * C, -1, 1), *dwpe = random_floats((size_t)MAXT * C, -1, 1);
    floatX *d_dout = device_copy_x(dout, (size_t)BT * C);
    float *d_dwte = device_copy(dwte, (size_t)VP * C), *d_dwpe = device_copy(dwpe, (size_t)MAXT * C);
    // a rank of a split position table (cp/position_table.h) trains rows [first, end) only
    int first = MAXT / 3, end = 2 * MAXT / 3;
    size_t slice = (size_t)(end - first) * C;
    float *rows = (float *)mallocCheck(slice * sizeof(float));
    memcpy(rows, dwpe + (size_t)first * C, slice * sizeof(float));
    float *d_rows = device_copy(rows, slice);
    encoder_backward(dwte, dwpe, 0, MAXT, dout, inp, pos, B, T, C);
    TokenBuckets wte_b, wpe_b;
    token_buckets_init(&wte_b, BT, VP);
    token_buckets_init(&wpe_b, BT, MAXT);
    encoder_backward_cuda(d_dwte, d_dwpe, 0, MAXT, d_dout, inp, pos, B, T, C, &wte_b, &wpe_b);
    check_rel_device("encoder backward dwte", d_dwte, dwte, (size_t)VP * C, 1e-6);
    check_rel_device("encoder backward dwpe", d_dwpe, dwpe, (size_t)MAXT * C, 1e-6);
    // the rows of the slice get what the whole table's rows got; no other row is touched
    encoder_backward(dwte, rows, first, end, dout, inp, pos, B, T, C);
    encoder_backward_cuda(d_dwte, d_rows, first, end, d_dout, inp, pos, B, T, C, &wte_b, &wpe_b);
    for (size_t i = 0; i < slice; i++) {
        CHECK(rows[i] == dwpe[(size_t)first * C + i], "encoder backward of rows [%d, %d): %.9g at %zu, the whole "
              "table's row has %.9g", first, end, rows[i], i, dwpe[(size_t)first * C + i]);
    }
    check_rel_device("encoder backward rows [first, end)", d_rows, rows, slice, 1e-6);
    check_rel_device("encoder backward dwte, twice", d_dwte, dwte, (size_t)VP * C, 1e-6);
    token_buckets_free(&wte_b);
    token_buckets_free(&wpe_b);
    void *dev[] = {d_wte, d_wpe, d_inp, d_pos, d_out, d_dout, d_dwte, d_dwpe, d_rows};
    for (int i = 0; i < 9; i++) { cudaCheck(cudaFree(dev[i])); }
    free(wte); free(wpe); free(inp); free(pos); free(out); free(dout); free(dwte); free(dwpe); free(rows);
}

// "layernorm (b, t, c) <tensor>", the name of one of test_layernorm's checks, in what
static const char *layernorm_what(char *what, size_t size, int b, int t, int c, const char *tensor) {
    snprintf(what, size, "layernorm (%d, %d, %d) %s", b, t, c, tensor);
    return what;
}

// layernorm over (b, t, c): one block per row, block-wide sums, chunked column sums
static void test_layernorm(int b, int t, int c) {
    char what[96];
    size_t bt = (size_t)b * t, n = bt * c;
    float *inp = random_stored(n, -2, 3), *w = random_stored(c, 0.5f, 1.5f), *bias = random_stored(c, -1, 1);
    float *out = (float *)mallocCheck(n * sizeof(float));
    float *mean = (float *)mallocCheck(bt * sizeof(float)), *rstd = (float *)mallocCheck(bt * sizeof(float));
    layernorm_forward(out, mean, rstd, inp, w, bias, b, t, c);
    floatX *d_inp = device_copy_x(inp, n), *d_w = device_copy_x(w, c), *d_b = device_copy_x(bias, c);
    floatX *d_out = device_alloc_x(n);
    float *d_mean = (float *)cudaMallocCheck(bt * sizeof(float)), *d_rstd = (float *)cudaMallocCheck(bt * sizeof(float));
    poison_device(d_out, n * sizeof(floatX));
    poison_device(d_mean, bt * sizeof(float));
    poison_device(d_rstd, bt * sizeof(float));
    layernorm_forward_cuda(d_out, d_mean, d_rstd, d_inp, d_w, d_b, b, t, c);
    check_rel_device_x(layernorm_what(what, sizeof(what), b, t, c, "forward out"), d_out, out, n, x_tol(1e-5));
    check_rel_device(layernorm_what(what, sizeof(what), b, t, c, "forward mean"), d_mean, mean, bt, 1e-5);
    check_rel_device(layernorm_what(what, sizeof(what), b, t, c, "forward rstd"), d_rstd, rstd, bt, 1e-5);

    float *dout = random_stored(n, -1, 1), *dinp = random_stored(n, -1, 1);
    float *dw = random_floats(c, -1, 1), *db = random_floats(c, -1, 1);
    floatX *d_dout = device_copy_x(dout, n), *d_dinp = device_copy_x(dinp, n);
    float *d_dw = device_copy(dw, c), *d_db = device_copy(db, c);
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, b, t, c);
    layernorm_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, b, t, c);
    check_rel_device_x(layernorm_what(what, sizeof(what), b, t, c, "backward dinp"), d_dinp, dinp, n, x_tol(1e-5));
    check_rel_device(layernorm_what(what, sizeof(what), b, t, c, "backward dweight"), d_dw, dw, c, 1e-5);
    check_rel_device(layernorm_what(what, sizeof(what), b, t, c, "backward dbias"), d_db, db, c, 1e-5);
    void *dev[] = {d_inp, d_w, d_b, d_out, d_mean, d_rstd, d_dout, d_dinp, d_dw, d_db};
    for (int i = 0; i < 10; i++) { cudaCheck(cudaFree(dev[i])); }
    free(inp); free(w); free(bias); free(out); free(mean); free(rstd); free(dout); free(dinp); free(dw); free(db);
}

// one linear layer of (b, t, c) -> oc, with or without bias: the plain product
// and the fused GELU forward (pre_gelu and gelu(pre_gelu) against the CPU's
// matmul then gelu), and the backward with the bias gradient from cuBLASLt's
// epilogue and, under the emulation, from the column sums that stand in when
// cuBLASLt has no algorithm for it. In the bf16 build the GELU may come from the
// fp32 product (the epilogue) or from the product rounded first (without it, OC
// not a multiple of 8): gelu' (at most 1.13) carries that rounding too, so its
// bound is the fp32 tolerance + 2u
// The matmul with its GELU (pre-activation into d_pre, both outputs poisoned first)
// against the CPU's product `out` and its GELU `act`
static void check_matmul_gelu(const char *which, floatX *d_act, floatX *d_pre, const floatX *d_inp, const floatX *d_w,
                              const floatX *d_bias, const float *out, const float *act, int b, int t, int c, int oc) {
    char what[96];
    size_t n = (size_t)b * t * oc;
    poison_device(d_pre, n * sizeof(floatX));
    poison_device(d_act, n * sizeof(floatX));
    matmul_forward_cuda(d_act, d_pre, d_inp, d_w, d_bias, b, t, c, oc);
    snprintf(what, sizeof(what), "matmul (%d, %d, %d) -> %d %s, GELU's input", b, t, c, oc, which);
    check_rel_device_x(what, d_pre, out, n, x_tol(1e-5));
    snprintf(what, sizeof(what), "matmul (%d, %d, %d) -> %d %s, GELU", b, t, c, oc, which);
    check_rel_device_x(what, d_act, act, n, x_tol(1e-5) + STORAGE_ROUNDOFF);
}

static void test_matmul(int b, int t, int c, int oc, int with_bias) {
    char what[96];
    size_t bt = (size_t)b * t;
    float *inp = random_stored(bt * c, -1, 1), *w = random_stored((size_t)oc * c, -1, 1);
    float *bias = with_bias ? random_stored(oc, -1, 1) : NULL;
    float *out = (float *)mallocCheck(bt * oc * sizeof(float)), *act = (float *)mallocCheck(bt * oc * sizeof(float));
    matmul_forward(out, inp, w, bias, b, t, c, oc);
    gelu_forward(act, out, bt * oc);
    floatX *d_inp = device_copy_x(inp, bt * c), *d_w = device_copy_x(w, (size_t)oc * c);
    floatX *d_bias = with_bias ? device_copy_x(bias, oc) : NULL;
    floatX *d_out = device_alloc_x(bt * oc), *d_act = device_alloc_x(bt * oc);
    poison_device(d_out, bt * oc * sizeof(floatX));
    matmul_forward_cuda(d_out, NULL, d_inp, d_w, d_bias, b, t, c, oc);
    snprintf(what, sizeof(what), "matmul (%d, %d, %d) -> %d forward%s", b, t, c, oc, with_bias ? " +bias" : "");
    check_rel_device_x(what, d_out, out, bt * oc, x_tol(1e-5));
    check_matmul_gelu("forward", d_act, d_out, d_inp, d_w, d_bias, out, act, b, t, c, oc);
    if (with_bias) {
        // the plan of these calls serves another bias and pre-activation of the same
        // shapes (as the next layer's): llmc/matmul.cuh sets the epilogue's pointers
        // at each call, and makes no plan anew
        float *bias2 = random_stored(oc, -1, 1);
        floatX *d_bias2 = device_copy_x(bias2, oc), *d_out2 = device_alloc_x(bt * oc);
        matmul_forward(out, inp, w, bias2, b, t, c, oc);
        gelu_forward(act, out, bt * oc);
        int plans = cuda_ctx.num_plans;
        check_matmul_gelu("forward, another bias", d_act, d_out2, d_inp, d_w, d_bias2, out, act, b, t, c, oc);
        CHECK(cuda_ctx.num_plans == plans, "another bias of the same shapes made %d new matmul plans",
              cuda_ctx.num_plans - plans);
        cudaCheck(cudaFree(d_bias2)); cudaCheck(cudaFree(d_out2));
        free(bias2);
    }

    float *dout = random_stored(bt * oc, -1, 1);
    float *dinp = (float *)callocCheck(bt * c, sizeof(float)), *dw = random_floats((size_t)oc * c, -1, 1);
    float *db = with_bias ? random_floats(oc, -1, 1) : NULL;
    // the gradients accumulate: each GPU path starts from the values the CPU started from
    float *d_dw_init = device_copy(dw, (size_t)oc * c), *d_db_init = with_bias ? device_copy(db, oc) : NULL;
    floatX *d_dout = device_copy_x(dout, bt * oc), *d_dinp = device_alloc_x(bt * c);
    float *d_dw = (float *)cudaMallocCheck((size_t)oc * c * sizeof(float));
    float *d_db = with_bias ? (float *)cudaMallocCheck(oc * sizeof(float)) : NULL;
    matmul_backward(dinp, dw, db, dout, inp, w, b, t, c, oc); // dinp overwritten, as the GPU does
#ifdef CUDA_EMU
    int paths = 2;
#else
    int paths = 1;
#endif
    for (int path = 0; path < paths; path++) {
        const char *how = path == 0 ? "" : ", bias gradient by column sums";
#ifdef CUDA_EMU
        emu_cublaslt_refuse_bgradb = path;
        cuda_matmul_plans_free(); // cuBLASLt answers otherwise now: ask it again
#endif
        cudaCheck(cudaMemcpyAsync(d_dw, d_dw_init, (size_t)oc * c * sizeof(float), cudaMemcpyDeviceToDevice, cuda_ctx.stream));
        if (with_bias) {
            cudaCheck(cudaMemcpyAsync(d_db, d_db_init, oc * sizeof(float), cudaMemcpyDeviceToDevice, cuda_ctx.stream));
        }
        poison_device(d_dinp, bt * c * sizeof(floatX));
        matmul_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, b, t, c, oc);
        snprintf(what, sizeof(what), "matmul (%d, %d, %d) -> %d backward dinp%s", b, t, c, oc, how);
        check_rel_device_x(what, d_dinp, dinp, bt * c, x_tol(1e-5));
        snprintf(what, sizeof(what), "matmul (%d, %d, %d) -> %d backward dweight%s", b, t, c, oc, how);
        check_rel_device(what, d_dw, dw, (size_t)oc * c, 1e-5);
        if (with_bias) {
            snprintf(what, sizeof(what), "matmul (%d, %d, %d) -> %d backward dbias%s", b, t, c, oc, how);
            check_rel_device(what, d_db, db, oc, 1e-5);
        }
    }
#ifdef CUDA_EMU
    emu_cublaslt_refuse_bgradb = 0;
    cuda_matmul_plans_free();
#endif
    void *dev[] = {d_inp, d_w, d_bias, d_out, d_act, d_dout, d_dinp, d_dw, d_db, d_dw_init, d_db_init};
    for (int i = 0; i < 11; i++) { cudaCheck(cudaFree(dev[i])); } // cudaFree(NULL) is a no-op
    free(inp); free(w); free(bias); free(out); free(act); free(dout); free(dinp); free(dw); free(db);
}

// Each block reduction of llmc/cuda_reduce.cuh twice in a row on one scratch, as the
// layers call them (layernorm's mean, then its variance): every thread gets each
// result, and the second call's writes wait for the first call's reads (the
// barrier each begins with). Row r's results, from the block's last thread (thread
// 0 would not show a result that reached only it):
// out: (rows, 5) max x, max -x, sum x, sum x^2 (double), sum of thread indices (double)
// x: (rows, cols)
__global__ static void block_reductions_kernel(float *out, const float *x, int cols) {
    __shared__ float scratch[WARP_SIZE];
    __shared__ double scratch_double[WARP_SIZE];
    const float *row = x + (size_t)blockIdx.x * cols;
    float hi = -INFINITY, neg_lo = -INFINITY, sum = 0.0f;
    double squares = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        hi = fmaxf(hi, row[i]);
        neg_lo = fmaxf(neg_lo, -row[i]);
        sum += row[i];
        squares += (double)row[i] * row[i];
    }
    hi = block_reduce_max(hi, scratch);
    neg_lo = block_reduce_max(neg_lo, scratch);
    sum = block_reduce_sum(sum, scratch);
    float sum_again = block_reduce_sum(1.0f, scratch);
    squares = block_reduce_sum_double(squares, scratch_double);
    double threads = block_reduce_sum_double((double)threadIdx.x, scratch_double);
    if (threadIdx.x == blockDim.x - 1) {
        float *o = out + (size_t)blockIdx.x * 5;
        o[0] = hi;
        o[1] = neg_lo;
        o[2] = sum + sum_again - (float)blockDim.x; // sum_again counts the threads
        o[3] = (float)squares;
        o[4] = (float)threads;
    }
}

static void test_block_reductions(void) {
    int rows = 3, cols = 1000, threads = 256;
    float *x = random_floats((size_t)rows * cols, -2, 2);
    float *expected = (float *)mallocCheck((size_t)rows * 5 * sizeof(float));
    for (int r = 0; r < rows; r++) {
        float hi = -INFINITY, lo = INFINITY;
        double sum = 0.0, squares = 0.0;
        for (int i = 0; i < cols; i++) {
            float v = x[(size_t)r * cols + i];
            hi = fmaxf(hi, v);
            lo = fminf(lo, v);
            sum += v;
            squares += (double)v * v;
        }
        float *e = expected + (size_t)r * 5;
        e[0] = hi; e[1] = -lo; e[2] = (float)sum; e[3] = (float)squares;
        e[4] = (float)(threads * (threads - 1) / 2);
    }
    float *d_x = device_copy(x, (size_t)rows * cols);
    float *d_out = (float *)cudaMallocCheck((size_t)rows * 5 * sizeof(float));
    poison_device(d_out, (size_t)rows * 5 * sizeof(float));
    block_reductions_kernel<<<rows, threads, 0, cuda_ctx.stream>>>(d_out, d_x, cols);
    cudaCheckLaunch();
    // the float sum in another order: fp32 rounding of 1000 terms of O(1)
    check_rel_device("block reductions, each twice on one scratch", d_out, expected, (size_t)rows * 5, 1e-6);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_out));
    free(x); free(expected);
}

// The loss statistics of a shard (cp/loss.cuh): the sum of the losses of the valid
// targets and their number, in double, against the host's sum (another order: a
// relative 1e-12) and count (exact); every third target is padding
static void test_loss_stats(void) {
    size_t n = 3001;
    float *losses = random_floats(n, 0, 11);
    int *targets = (int *)mallocCheck(n * sizeof(int));
    double sum = 0.0, count = 0.0;
    for (size_t i = 0; i < n; i++) {
        targets[i] = i % 3 == 1 ? IGNORE_INDEX : (int)(i % 50257);
        if (targets[i] != IGNORE_INDEX) { sum += losses[i]; count += 1.0; }
    }
    float *d_losses = device_copy(losses, n);
    int *d_targets = device_copy_int(targets, n);
    LossStats *d_stats = (LossStats *)cudaMallocCheck(sizeof(LossStats));
    local_loss_stats_cuda(d_stats, d_losses, d_targets, n);
    LossStats stats = loss_stats_download(d_stats);
    CHECK(fabs(stats.loss_sum - sum) <= 1e-12 * sum && stats.valid_count == count,
          "loss stats: sum %.17g count %.0f, expected %.17g and %.0f", stats.loss_sum, stats.valid_count, sum, count);
    printf("ok   rank 0  loss stats of %zu targets (%.0f valid): sum within %.1e, count exact\n", n, count,
           fabs(stats.loss_sum - sum) / sum);
    cudaCheck(cudaFree(d_losses)); cudaCheck(cudaFree(d_targets)); cudaCheck(cudaFree(d_stats));
    free(losses); free(targets);
}

// this rank alone over MPI: the host transport and the staged device transport
static void self_comms(Comm **host, Comm **device) {
    *host = comm_mpi_create(comm_duplicate(MPI_COMM_SELF));
    *device = comm_mpi_staged_create(comm_duplicate(MPI_COMM_SELF), cuda_ctx.stream);
}

// A training step's loss on the device (cp/loss.cuh) against cp/loss.h on the host,
// over MPI_COMM_SELF: three micro-batches holding 0, 20 and 50 valid targets of
// 100 (the first empty: the weight basis comes from the second, times 3). The
// loss weights and the counts must come out bit for bit (they are counts); the
// sums in another order, the step's loss within 1e-12 relative, the gradient
// norm and the update's scale as floats within 1e-6.
static void test_step_loss(void) {
    const int micro_steps = 3, valid[3] = {0, 20, 50};
    size_t n = 100, grads_n = 5003;
    Comm *host_comm, *dev_comm;
    self_comms(&host_comm, &dev_comm);
    StepLoss host;
    StepLossCuda dev;
    step_loss_cuda_init(&dev);
    step_loss_start(&host);
    step_loss_start_cuda(&dev);
    float *d_losses = (float *)cudaMallocCheck(n * sizeof(float));
    int *d_targets = (int *)cudaMallocCheck(n * sizeof(int));
    for (int micro = 0; micro < micro_steps; micro++) {
        float *losses = random_floats(n, 0, 11);
        int *targets = random_ints(n, V);
        for (size_t i = (size_t)valid[micro]; i < n; i++) { targets[i] = IGNORE_INDEX; }
        float weight = step_loss_weight(&host, global_valid_count(host_comm, targets, n), micro_steps);
        const float *d_weight = step_loss_weight_cuda(&dev, global_valid_count_cuda(dev_comm, &dev, targets, n),
                                                      micro_steps);
        float got_weight;
        cuda_download(&got_weight, d_weight, sizeof(float));
        CHECK(got_weight == weight, "micro-batch %d: loss weight %.9g on the device, %.9g on the host", micro,
              got_weight, weight);
        step_loss_add(&host, global_loss_stats(host_comm, local_loss_stats(losses, targets, n)));
        cuda_upload(d_losses, losses, n * sizeof(float));
        cuda_upload(d_targets, targets, n * sizeof(int));
        step_loss_add_cuda(&dev, global_loss_stats_cuda(dev_comm, &dev, d_losses, d_targets, n));
        free(losses); free(targets);
    }
    float *grads = random_floats(grads_n, -1, 1);
    float *d_grads = device_copy(grads, grads_n);
    global_norm_squared_cuda(&dev.device->norm_squared, d_grads, grads_n);
    StepEnd want = step_end_of(&host, global_norm_squared(grads, grads_n)), got = step_end_cuda(&dev);
    CHECK(dev.host->step.weight_basis == host.weight_basis && dev.host->step.stats.valid_count == host.stats.valid_count,
          "step loss: basis %.17g and count %.17g on the device, %.17g and %.17g on the host",
          dev.host->step.weight_basis, dev.host->step.stats.valid_count, host.weight_basis, host.stats.valid_count);
    CHECK(fabs(dev.host->step.stats.loss_sum - host.stats.loss_sum) <= 1e-12 * host.stats.loss_sum,
          "step loss sum %.17g on the device, %.17g on the host", dev.host->step.stats.loss_sum, host.stats.loss_sum);
    check_rel("step end: loss", &got.loss, &want.loss, 1, 1e-6);
    check_rel("step end: gradient norm", &got.grad_norm, &want.grad_norm, 1, 1e-6);
    check_rel("step end: update scale (clipped)", &got.update_scale, &want.update_scale, 1, 1e-6);
    CHECK(want.update_scale < 60.0f / 70.0f, "the test's gradients were meant to be clipped");
    printf("ok   rank 0  step loss over %d micro-batches: weights, basis %.0f and count %.0f bit for bit\n",
           micro_steps, host.weight_basis, host.stats.valid_count);
    cudaCheck(cudaFree(d_losses)); cudaCheck(cudaFree(d_targets)); cudaCheck(cudaFree(d_grads));
    free(grads);
    step_loss_cuda_free(&dev);
    dev_comm->destroy(dev_comm);
    host_comm->destroy(host_comm);
}

static void test_elementwise(void) {
    size_t n = (size_t)BT * 4 * C;
    float *x = random_stored(n, -4, 4), *y = random_stored(n, -1, 1);
    float *out = (float *)mallocCheck(n * sizeof(float));
    floatX *d_x = device_copy_x(x, n), *d_y = device_copy_x(y, n);
    floatX *d_out = device_alloc_x(n);
    gelu_forward(out, x, n);
    poison_device(d_out, n * sizeof(floatX));
    gelu_forward_cuda(d_out, d_x, n);
    check_rel_device_x("gelu forward", d_out, out, n, x_tol(1e-6));
    gelu_backward(out, x, y, n);
    poison_device(d_out, n * sizeof(floatX));
    gelu_backward_cuda(d_out, d_x, d_y, n);
    check_rel_device_x("gelu backward", d_out, out, n, x_tol(1e-6));
    // in place, as the model calls it: dinp == dout
    cudaCheck(cudaMemcpyAsync(d_out, d_y, n * sizeof(floatX), cudaMemcpyDeviceToDevice, cuda_ctx.stream));
    gelu_backward_cuda(d_out, d_x, d_out, n);
    check_rel_device_x("gelu backward in place", d_out, out, n, x_tol(1e-6));
    residual_forward(out, x, y, n);
    poison_device(d_out, n * sizeof(floatX));
    residual_forward_cuda(d_out, d_x, d_y, n);
    check_rel_device_x("residual forward", d_out, out, n, x_tol(1e-6));
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_y)); cudaCheck(cudaFree(d_out));
    free(x); free(y); free(out);
}

// The CPU classifier in one chunk (classifier_forward of llmc/classifier.h, step by
// step), with the logits and their gradient rounded where the GPU stores them in
// floatX. logits: (BT, VP) scratch
static void classifier_reference(float *losses, float *dlnf, float *dwte, float *logits, const float *lnf,
                                 const float *wte, const int *targets, float dloss) {
    size_t n = (size_t)BT * VP;
    matmul_forward(logits, lnf, wte, NULL, 1, BT, C, VP);
    softmax_crossentropy_rows(round_to_storage(logits, n), losses, targets, BT, V, VP, dloss, 1);
    matmul_backward(dlnf, dwte, NULL, round_to_storage(logits, n), lnf, wte, 1, BT, C, VP);
}

// The softmax and cross-entropy of rows, with and without gradient; then the whole
// chunked classifier on the GPU (chunks of 7 rows, not dividing the 74 tokens, and
// one chunk of all) against the CPU's in one chunk, the unchunked computation.
static void test_classifier(void) {
    size_t n = (size_t)BT * VP;
    float *logits = random_stored(n, -5, 5);
    int *targets = random_ints(BT, V);
    for (int i = 0; i < BT; i += 5) { targets[i] = IGNORE_INDEX; } // pad slots
    int *d_targets = device_copy_int(targets, BT);
    float dloss = 1.0f / 60.0f;
    float *d_dloss = device_copy(&dloss, 1);
    float *losses = (float *)mallocCheck(BT * sizeof(float));
    float *d_losses = (float *)cudaMallocCheck(BT * sizeof(float));
    for (int grad = 0; grad <= 1; grad++) {
        float *rows = (float *)mallocCheck(n * sizeof(float));
        memcpy(rows, logits, n * sizeof(float));
        floatX *d_rows = device_copy_x(logits, n);
        poison_device(d_losses, BT * sizeof(float));
        softmax_crossentropy_rows(rows, losses, targets, BT, V, VP, dloss, grad);
        softmax_crossentropy_rows_cuda(d_rows, d_losses, d_targets, BT, V, VP, d_dloss, grad);
        check_rel_device(grad ? "classifier rows losses (grad)" : "classifier rows losses", d_losses, losses, BT, 1e-5);
        if (grad) { check_rel_device_x("classifier rows dlogits", d_rows, rows, n, x_tol(1e-5)); }
        cudaCheck(cudaFree(d_rows));
        free(rows);
    }

    float *lnf = random_stored((size_t)BT * C, -1, 1), *wte = random_stored((size_t)VP * C, -1, 1);
    float *dwte = random_floats((size_t)VP * C, -1, 1), *dlnf = (float *)mallocCheck((size_t)BT * C * sizeof(float));
    floatX *d_lnf = device_copy_x(lnf, (size_t)BT * C), *d_wte = device_copy_x(wte, (size_t)VP * C);
    floatX *d_dlnf = device_alloc_x((size_t)BT * C);
    floatX *d_logits = device_alloc_x(n);
    float *d_dwte[2] = {device_copy(dwte, (size_t)VP * C), device_copy(dwte, (size_t)VP * C)};
    float *chunk_logits = (float *)mallocCheck(n * sizeof(float));
    classifier_reference(losses, dlnf, dwte, chunk_logits, lnf, wte, targets, dloss);
    const int chunks[2] = {7, BT};
    for (int k = 0; k < 2; k++) {
        char what[96];
        poison_device(d_losses, BT * sizeof(float));
        poison_device(d_dlnf, (size_t)BT * C * sizeof(floatX));
        classifier_forward_cuda(d_losses, d_dlnf, d_dwte[k], d_logits, d_lnf, d_wte, d_targets, d_dloss, BT, chunks[k],
                                C, V, VP);
        // the losses read the rounded logits: a flip of one is one bf16 ulp, see the top
        snprintf(what, sizeof(what), "classifier losses, chunks of %d rows", chunks[k]);
        check_rel_device(what, d_losses, losses, BT, x_tol(1e-5));
        snprintf(what, sizeof(what), "classifier dlnf, chunks of %d rows", chunks[k]);
        check_rel_device_x(what, d_dlnf, dlnf, (size_t)BT * C, x_tol(1e-5));
        snprintf(what, sizeof(what), "classifier dwte, chunks of %d rows", chunks[k]);
        check_rel_device(what, d_dwte[k], dwte, (size_t)VP * C, x_tol(1e-5));
    }
    // one token's logits (the sampler's)
    matmul_forward(chunk_logits, lnf, wte, NULL, B, T, C, VP);
    poison_device(d_logits, VP * sizeof(floatX));
    classifier_logits_cuda(d_logits, d_lnf + 40 * C, d_wte, C, VP);
    check_rel_device_x("classifier logits of token 40", d_logits, chunk_logits + 40 * VP, VP, x_tol(1e-5));
    void *dev[] = {d_targets, d_losses, d_lnf, d_wte, d_dlnf, d_logits, d_dwte[0], d_dwte[1], d_dloss};
    for (int i = 0; i < 9; i++) { cudaCheck(cudaFree(dev[i])); }
    free(logits); free(targets); free(losses); free(lnf); free(wte); free(dwte); free(dlnf); free(chunk_logits);
}

// AdamW on fp32 master weights, which it also writes rounded into their floatX copy
static void test_adamw(void) {
    size_t n = 100003; // not a multiple of any block
    float *p = random_floats(n, -1, 1), *g = random_floats(n, -1, 1);
    float *m = (float *)callocCheck(n, sizeof(float)), *v = (float *)callocCheck(n, sizeof(float));
    float *d_p = device_copy(p, n), *d_g = device_copy(g, n), *d_m = device_copy(m, n), *d_v = device_copy(v, n);
    floatX *d_px = device_alloc_x(n);
    double norm = global_norm_squared(g, n), d_norm;
    double *d_total = (double *)cudaMallocCheck(sizeof(double));
    global_norm_squared_cuda(d_total, d_g, n);
    cuda_download(&d_norm, d_total, sizeof(double));
    cudaCheck(cudaFree(d_total));
    float rel[1] = {(float)d_norm}, ref[1] = {(float)norm};
    check_rel("global norm squared (as float)", rel, ref, 1, 1e-6);
    CHECK(fabs(d_norm - norm) <= 1e-12 * norm, "global norm squared: GPU %.17g, CPU %.17g", d_norm, norm);
    for (int t = 1; t <= 2; t++) {
        adamw_update(p, g, m, v, n, 1e-3f, 0.1f, 0.5f, t);
        poison_device(d_px, n * sizeof(floatX));
        adamw_update_cuda(d_p, d_px, d_g, d_m, d_v, n, 1e-3f, 0.1f, 0.5f, t);
    }
    check_rel_device("adamw params", d_p, p, n, 1e-6);
    check_rel_device_x("adamw params' floatX copy", d_px, p, n, x_tol(1e-6));
    check_rel_device("adamw m", d_m, m, n, 1e-6);
    check_rel_device("adamw v", d_v, v, n, 1e-6);
    cudaCheck(cudaFree(d_p)); cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_v));
    cudaCheck(cudaFree(d_px));
    free(p); free(g); free(m); free(v);
}

// The whole model's tolerances in the bf16 build. Against the fp32 CPU model the
// GPU rounds every activation it stores, and each rounding's error (<= u = 2^-8
// relative, about u / 2 in the 2-norm of a tensor) travels on through the later
// layers. Errors of independent roundings in sequence add like a random walk, so a
// value that k roundings lie before differs by about sqrt(k) u / 2; the bounds take
// sqrt(k) u (a factor 2 of margin). Counted at L 2: the
// forward pass rounds encoded, then per block ln1, qkv, atty, attproj, residual2,
// ln2, fch, fch_gelu, fcproj, residual3 (10), then lnf and the logits: 23; the
// classifier's dlogits and dlnf make 25 before the gradient of lnf; the backward
// pass rounds dresidual at lnf, then per block dfch twice (fcproj, GELU), dbtc
// (fc), dresidual (ln2), dbtc (attproj), dqkv, dbtc (qkv), dresidual (ln1): 8, so
// the earliest weight gradients (wte, wpe) lie 42 roundings from the inputs.
//   the gradient of lnf  sqrt(25) u = 2.0e-2   (measured in the emulation 2.1e-3)
//   every weight gradient sqrt(42) u = 2.5e-2   (measured 2.7e-3 .. 7.4e-3)
//   the weights after 2 AdamW steps: the gradients' bound, 2.5e-2 (measured 3.5e-3):
//       each step moves a weight by lr m/sqrt(v) (v the same gradients squared),
//       whose relative error is the gradients', and the moved part is a fraction
//       of the weights
//   the losses, log(sum exp z) - z[target]: an error e relative in the logits z
//       moves a loss by <= 2 e max|z|; the random model's logits are small (std
//       0.02 sqrt(C) = 0.2, about 0.8 at most over the 18500) against losses of
//       log V = 5.5, so sqrt(23) u x 2 x 0.8 / 5.5 = 5e-3 (measured 1.6e-4)
//   the attention's log-sum-exp, of the same form over scores q.k / sqrt(HS) of
//       std 0.2 x 0.2 = 0.04 against an lse of log(keys) ~ 2.5: 5e-3 (measured 2.6e-5)
#define MODEL_BF16_LOSSES 5e-3
#define MODEL_BF16_FORWARD 2.0e-2
#define MODEL_BF16_LSE 5e-3
#define MODEL_BF16_GRADIENTS 2.5e-2
#define MODEL_BF16_PARAMETERS 2.5e-2

// fp32 in the fp32 build, bf16 in the bf16 build
static double model_tol(double fp32, double bf16) { return sizeof(floatX) == sizeof(float) ? fp32 : bf16; }

// The whole model at cp 1: the CPU model with the CPU ring over MPI_COMM_SELF, the
// GPU model with the GPU ring over the staged transport on MPI_COMM_SELF. Both
// start from the same weights, rounded to floatX (so that the GPU's master weights
// and their floatX copy hold the same numbers as the CPU's).
static void test_model(void) {
    GPT2Config c = {MAXT, V, VP, L, NH, C};
    GPT2 cpu_model, gpu_host;
    gpt2_init_random(&cpu_model, c, 7);
    gpt2_init_random(&gpu_host, c, 7);
    round_to_storage(cpu_model.params_memory, cpu_model.num_parameters);
    round_to_storage(gpu_host.params_memory, gpu_host.num_parameters);
    GPT2Cuda gpu_model;
    gpt2_cuda_init(&gpu_model, &gpu_host);
    // a batch whose targets include pads
    int *inputs = random_ints(BT, V), *targets = random_ints(BT, V);
    targets[3] = targets[T + 10] = IGNORE_INDEX;
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_IDENTITY, 0, 1, MAXT, cp_no_documents());
    CHECK(cp_shard_batch(&sh, inputs, targets, NULL, B, T) == CP_OK, "%s", sh.error);
    Comm *host_comm, *dev_comm;
    self_comms(&host_comm, &dev_comm);

    Activations acts;
    activations_init(&acts, c, B, T, 0);
    RingAttention ring;
    ring_attention_init(&ring, host_comm, B, T, C, NH);
    ring_attention_bind(&ring, &sh.layout);
    AttentionVerbs attn = ring_attention_verbs(&ring);
    // the GPU model recomputes the most (-r 2) and runs its classifier in chunks of
    // 7 rows; the CPU keeps everything, in one chunk
    ActivationsCuda gacts;
    activations_cuda_init(&gacts, c, B, T, RECOMPUTE_MAX);
    gacts.chunk_rows = 7;
    poison_device(gacts.memory, gacts.num_bytes);
    RingAttentionCuda gring;
    ring_attention_cuda_init(&gring, dev_comm, B, T, C, NH);
    ring_attention_cuda_bind(&gring, &sh.layout);
    AttentionVerbsCuda gattn = ring_attention_cuda_verbs(&gring);

    float dloss = 1.0f / (BT - 2);
    float *d_dloss = device_copy(&dloss, 1);
    gpt2_zero_grad(&cpu_model);
    gpt2_cuda_zero_grad(&gpu_model);
    gpt2_forward_train(&cpu_model, &acts, sh.local.inputs, sh.layout.position, sh.local.targets, dloss, &attn);
    gpt2_cuda_forward_train(&gpu_model, &gacts, sh.local.inputs, sh.layout.position, sh.local.targets, d_dloss, &gattn);
    check_rel_device("model losses", gacts.t.losses, acts.t.losses, BT, model_tol(1e-5, MODEL_BF16_LOSSES));
    check_rel_device_x("model gradient of lnf", gacts.t.dbtc, acts.t.dbtc, (size_t)BT * C,
                       model_tol(1e-5, MODEL_BF16_FORWARD));
    check_rel_device("model attention lse", gacts.t.att_lse, acts.t.att_lse, (size_t)L * B * NH * T,
                     model_tol(1e-5, MODEL_BF16_LSE));
    gpt2_backward(&cpu_model, &acts, sh.local.inputs, sh.layout.position, &attn);
    gpt2_cuda_backward(&gpu_model, &gacts, sh.local.inputs, sh.layout.position, &gattn);
    float *grads = host_copy(gpu_model.grads_memory, gpu_model.host.num_trained);
    const char *names[NUM_PARAMETER_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
                                                "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb",
                                                "lnfw", "lnfb"};
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        char what[64];
        snprintf(what, sizeof(what), "model gradient %s", names[i]);
        check_rel(what, grads + offset, cpu_model.grads_memory + offset, cpu_model.param_sizes[i],
                  model_tol(1e-4, MODEL_BF16_GRADIENTS));
        offset += cpu_model.param_sizes[i];
    }
    // determinism: the same backward again gives the same bits, through the matmul
    // plans the first pass made (llmc/matmul.cuh), none made anew
    int plans = cuda_ctx.num_plans;
    gpt2_cuda_zero_grad(&gpu_model);
    gpt2_cuda_forward_train(&gpu_model, &gacts, sh.local.inputs, sh.layout.position, sh.local.targets, d_dloss, &gattn);
    gpt2_cuda_backward(&gpu_model, &gacts, sh.local.inputs, sh.layout.position, &gattn);
    float *again = host_copy(gpu_model.grads_memory, gpu_model.host.num_trained);
    CHECK(memcmp(grads, again, gpu_model.host.num_trained * sizeof(float)) == 0,
          "the GPU backward pass is not deterministic: two runs differ");
    CHECK(cuda_ctx.num_plans == plans, "the second pass made %d new matmul plans", cuda_ctx.num_plans - plans);
    printf("ok   rank 0  model backward is bitwise deterministic, through the %d matmul plans made so far\n",
           plans);
    // two updates (the second with clipping)
    for (int t = 1; t <= 2; t++) {
        gpt2_update(&cpu_model, 1e-3f, 0.1f, t == 1 ? 1.0f : 0.25f, t);
        gpt2_cuda_update(&gpu_model, 1e-3f, 0.1f, t == 1 ? 1.0f : 0.25f, t);
    }
    check_rel_device("model parameters after 2 AdamW steps", gpu_model.params_memory, cpu_model.params_memory,
                     cpu_model.num_parameters, model_tol(1e-4, MODEL_BF16_PARAMETERS));
    float *rounded = round_to_storage(host_copy(gpu_model.params_memory, gpu_model.num_held),
                                      gpu_model.num_held);
    check_rel_device_x("model weights' floatX copy = the master weights rounded", gpu_model.params_x, rounded,
                       gpu_model.num_held, 0.0);
    free(rounded);

    free(grads); free(again); free(inputs); free(targets);
    cudaCheck(cudaFree(d_dloss));
    cp_sharder_free(&sh);
    ring_attention_cuda_free(&gring);
    activations_cuda_free(&gacts);
    ring_attention_free(&ring);
    activations_free(&acts);
    dev_comm->destroy(dev_comm);
    host_comm->destroy(host_comm);
    gpt2_cuda_free(&gpu_model);
    gpt2_free(&cpu_model);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    gpu_test_require_device(1);
    cuda_init(0, 0); // TF32 off: fp32 against fp32
    rng_seed(&rng, 1234);
    test_ldmatrix();
    test_ldmatrix_mma();
    test_mma_tiles_bf16();
    test_cp_async();
    test_encoder();
    test_block_reductions();
    test_loss_stats();
    test_step_loss();
    test_layernorm(B, T, C);
    // C not a multiple of a warp, more than one block's 256 threads (some take two
    // channels); and 703 rows: 11 chunks of the column sums, of rows not a multiple
    // of the 8 row lanes
    test_layernorm(1, 703, 300);
    test_matmul(B, T, C, 3 * C, 1);
    test_matmul(B, T, C, 4 * C, 1);
    test_matmul(B, T, C, VP, 0);
    // the bias gradient over 703 rows, 100 columns: a partial block of 32 columns
    test_matmul(1, 703, 40, 100, 1);
    test_elementwise();
    test_classifier();
    test_adamw();
    test_model();
    cuda_free_context();
    printf("%s: %d check(s) failed\n", rel_failures ? "FAIL" : "PASS", rel_failures);
    MPI_Finalize();
    return rel_failures ? 1 : 0;
}
