/*
The tensor-core instructions (llmc/mma.cuh), as warp collectives: every lane hands
in its fragment registers, the warp's A, B and C are assembled from the fragment
layout the PTX ISA documents for the shape, and each lane takes its own elements of
D. So a kernel that loads a fragment from the wrong row or column computes wrong
numbers here too. mma.sync.aligned takes the whole warp at one instruction
(synccheck holds every lane to it, emu_threads.cpp); it exchanges registers and
orders no memory.

g = lane / 4, t = lane % 4:

m16n8k8, TF32 inputs ("Matrix Fragments for mma.m16n8k8", .tf32):
  A (16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
  B (8 x 8):  b0 (t, g), b1 (t + 4, g)                    [row = k, col = n]
  C, D (16 x 8): c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
The tensor core reads only the TF32 bits of its inputs; products of TF32 values are
exact in fp32 and are summed in k order.

m16n8k16, bf16 inputs ("Matrix Fragments for mma.m16n8k16 with floating point
type"); each register holds two bf16, the lower index in the low 16 bits:
  A (16 x 16): a0 (g, 2t | 2t + 1), a1 (g + 8, 2t | 2t + 1),
               a2 (g, 2t + 8 | 2t + 9), a3 (g + 8, 2t + 8 | 2t + 9)
  B (16 x 8):  b0 (2t | 2t + 1, g), b1 (2t + 8 | 2t + 9, g)   [row = k, col = n]
  C, D: as m16n8k8
A bf16 holds 8 significant bits, so the product of two is exact in fp32; the
products are summed in fp32 in k order.

ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16 ("Warp-level matrix load
instruction: ldmatrix"): 1, 2 or 4 matrices of 8 x 8 16-bit elements, each row 16
contiguous bytes of shared memory at an address one lane gives: lanes 0-7 the rows
of matrix 0, 8-15 of matrix 1, 16-23 of matrix 2, 24-31 of matrix 3 (x1 reads lanes
0-7's addresses only, x2 0-15's). Register i of lane (g, t) receives matrix i's
elements (g, 2t) and (g, 2t + 1), the first in the low 16 bits; with .trans
(g = column) elements (2t, g) and (2t + 1, g). Each lane whose address is read reads
its row itself, as it arrives (shared memory only, 16-byte aligned: memcheck; its
bytes initialised: initcheck; racecheck as any load of that lane), so another
lane's write to the row, of this warp or another, must be ordered before it by a
__syncwarp or __syncthreads: the instruction waits for the lanes but, as mma,
orders no memory.
*/
#include "emu_internal.h"

using namespace emu;

struct MmaFragments { unsigned a[4], b[2]; float c[4]; };

// C from the lanes' fragments; then D = A B + C, summing the K products in k order,
// handed to each lane as its four elements: lane (g, t) gets rows g, g + 8 and
// columns 2t, 2t + 1
static void gather_c(const MmaFragments *all, float C[16][8]) {
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l % 4;
        C[g][2 * t] = all[l].c[0];
        C[g][2 * t + 1] = all[l].c[1];
        C[g + 8][2 * t] = all[l].c[2];
        C[g + 8][2 * t + 1] = all[l].c[3];
    }
}
template <int K> static void lane_results(const float A[16][K], const float B[K][8], const float C[16][8], float *d) {
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l % 4;
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            float sum = C[row][col];
            for (int k = 0; k < K; k++) { sum += A[row][k] * B[k][col]; }
            d[4 * l + i] = sum;
        }
    }
}

// The warp's D from its lanes' fragments (payloads): A (16, K) and B (K, 8) assembled
// by load(lane's fragments, g, t, A, B) as the shape lays them out, C by gather_c;
// then each lane's four elements of D = A B + C (lane_results)
template <int K, typename Load>
static void mma_compute(const unsigned char *payloads, unsigned char *results, Load load) {
    const MmaFragments *all = (const MmaFragments *)payloads;
    float A[16][K], B[K][8], C[16][8];
    for (int l = 0; l < 32; l++) { load(all[l], l >> 2, l % 4, A, B); }
    gather_c(all, C);
    lane_results<K>(A, B, C, (float *)results);
}

static float tf32_bits(unsigned u) { return __uint_as_float(u & 0xffffe000u); }

static void m16n8k8_tf32(const unsigned char *payloads, unsigned char *results) {
    mma_compute<8>(payloads, results, [](const MmaFragments &f, int g, int t, float A[16][8], float B[8][8]) {
        A[g][t] = tf32_bits(f.a[0]);
        A[g + 8][t] = tf32_bits(f.a[1]);
        A[g][t + 4] = tf32_bits(f.a[2]);
        A[g + 8][t + 4] = tf32_bits(f.a[3]);
        B[t][g] = tf32_bits(f.b[0]);
        B[t + 4][g] = tf32_bits(f.b[1]);
    });
}

static float bf16_low(unsigned r) { return __uint_as_float(r << 16); }
static float bf16_high(unsigned r) { return __uint_as_float(r & 0xffff0000u); }

static void m16n8k16_bf16(const unsigned char *payloads, unsigned char *results) {
    mma_compute<16>(payloads, results, [](const MmaFragments &f, int g, int t, float A[16][16], float B[16][8]) {
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
            A[row][col] = bf16_low(f.a[i]);
            A[row][col + 1] = bf16_high(f.a[i]);
        }
        for (int i = 0; i < 2; i++) {
            B[2 * t + 8 * i][g] = bf16_low(f.b[i]);
            B[2 * t + 8 * i + 1][g] = bf16_high(f.b[i]);
        }
    });
}

// every lane hands in its fragments, the whole warp (mma.sync.aligned), and gets its four elements of D
static void mma(const char *what, WarpCompute compute, float d[4], const unsigned a[4], const unsigned b[2],
                const float c[4], const void *site) {
    MmaFragments mine;
    for (int i = 0; i < 4; i++) { mine.a[i] = a[i]; mine.c[i] = c[i]; }
    mine.b[0] = b[0];
    mine.b[1] = b[1];
    warp_compute(what, 0xffffffffu, &mine, sizeof(mine), d, 4 * sizeof(float), compute, site);
}

void emu_mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    mma("mma.sync.m16n8k8.tf32", m16n8k8_tf32, d, a, b, c, __builtin_return_address(0));
}

void emu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    mma("mma.sync.m16n8k16.bf16", m16n8k16_bf16, d, a, b, c, __builtin_return_address(0));
}

// ---- ldmatrix

// the lanes' rows (16 bytes each, in lane order) -> each lane's registers (MATRICES x 4 bytes)
template <int MATRICES, bool TRANS> static void ldmatrix_compute(const unsigned char *payloads, unsigned char *results) {
    const uint16_t(*rows)[8] = (const uint16_t(*)[8])payloads; // [8 matrix + row][column]
    unsigned *regs = (unsigned *)results;
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l % 4;
        for (int i = 0; i < MATRICES; i++) {
            const uint16_t(*m)[8] = rows + 8 * i;
            unsigned lo = TRANS ? m[2 * t][g] : m[g][2 * t], hi = TRANS ? m[2 * t + 1][g] : m[g][2 * t + 1];
            regs[l * MATRICES + i] = lo | hi << 16;
        }
    }
}

void emu_ldmatrix(unsigned *r, int matrices, bool trans, const void *row) {
    static const WarpCompute computes[2][3] = {
        {ldmatrix_compute<1, false>, ldmatrix_compute<2, false>, ldmatrix_compute<4, false>},
        {ldmatrix_compute<1, true>, ldmatrix_compute<2, true>, ldmatrix_compute<4, true>}};
    static const char *names[2][3] = {
        {"ldmatrix.x1", "ldmatrix.x2", "ldmatrix.x4"}, {"ldmatrix.x1.trans", "ldmatrix.x2.trans", "ldmatrix.x4.trans"}};
    const void *site = __builtin_return_address(0);
    int which = matrices == 1 ? 0 : matrices == 2 ? 1 : 2;
    unsigned char mine[16] = {0};
    if (emu_lane() < 8 * matrices) {
        if (!is_shared(row, 16) || (uintptr_t)row % 16) {
            report("memcheck", format("%s, %s at %s: its row address %p is %s (ldmatrix reads 16-byte aligned rows "
                                      "of shared memory)", running_thread().c_str(), names[trans][which],
                                      source_of(site).c_str(), row,
                                      is_shared(row, 16) ? "not 16-byte aligned" : "not in shared memory"));
        }
        kernel_access(row, 16, false, site);
        raw_copy(mine, row, 16);
    }
    warp_compute(names[trans][which], 0xffffffffu, mine, sizeof(mine), r, 4 * (size_t)matrices,
                 computes[trans][which], site);
}
