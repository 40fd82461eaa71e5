/*
MPI test of the context-parallel attention algorithms on the GPU, ring attention
(cp/ring_attention.cuh), all-gather attention (cp/allgather_attention.cuh), and
Ulysses (U = np) and the Ulysses x ring hybrid (U 2 x R 2 at np 4, else U 1) of
cp/ulysses_attention.cuh, against their CPU twins (cp/ring_attention.h,
cp/allgather_attention.h, cp/ulysses_attention.h, all checked against a
double-precision reference by test_attention_algorithms.c), of the device
transport's verbs, and of the other exchange a training step makes over the CP
group: the position table's rows (cp/position_table.cuh against its CPU twin,
which test_position_table.c checks against the job's sums).

On every rank of the CP group the same local Q, K, V and dO go through each
algorithm on the CPU over MPI on host memory (cp/comm_mpi.h), then on the GPU over
the staged MPI transport on device memory (cp/comm_mpi_staged.cuh, so that several
ranks can share one GPU) in the build's precisions of the block kernels (FP32
build: exact fp32 and TF32; BF16 build: bf16), all through the AttentionVerbs the
trainers call. In the BF16 build Q, K, V and dO are rounded to bf16 first, and the
CPU (plain fp32) computes from the same rounded values, so that what is measured
is the error of the bf16 kernels, not that of the inputs' rounding. Each rank compares its own outputs O, LSE and
dQ | dK | dV: with the K/V blocks travelling the ring or all-gathered, and dK/dV
sent home, every rank's outputs depend on every other rank's data. Cases: layouts
identity (np 1), contiguous and round_robin; T = 7, 37, 150, 300 (most pad); with
and without document masking (an EOT token opens a document); head sizes 32, 64
and 128 (tiles of 64, 64 and 32 rows, and the BF16 build's forward query tiles
of 128, which its dQ kernel shares, so the local lengths cross tiles and end in
partial ones); packed
(documents split head-tail) at T = 100 and 300; and striped
(token i on rank i mod np: strided index sets) at T = 37 and 150. Ulysses and the
hybrid run where the heads split (NH 12, HS 32 cases: every np of the suite). Each
GPU backward is run twice and must give the same bits (no atomics).

The step's tile visibility table of striped is also checked against its shape: the
indices of a tile interleave with every other rank's, so a query tile lies after
every key tile before it (FULL: no mask evaluated), before every key tile after
it (SKIP), and meets its own place's key tile (MASKED) at every ring step. Only
the diagonal is masked: the per-step visibility handles strided index sets
without computing pairs it need not.

Tolerances, relative 2-norm error:
  exact fp32 (-f 0)  1e-5. Inputs are U(-1, 1), so scores are O(1) and every output
      is a sum of at most T = 300 terms: fp32 rounding in another order (the online
      softmax's rescaling, dQ summed per block) gives ~ sqrt(T) * 6e-8 ~ 1e-6; seen
      at most 3e-7.
  TF32 (-f 1)  1e-2. The tensor cores read 10 mantissa bits: each operand is rounded
      by up to u = 2^-11 = 4.9e-4 (RMS u / sqrt(3)), so a product of two carries
      about 4e-4 RMS relative error; O and LSE are one product deep (Q K^T, then
      P V with P rounded), the gradients two (dP = dO V^T, then dS K or dS^T Q), and
      dS = P (dP - D) subtracts two O(1) numbers whose difference can be far
      smaller, which scales their relative error up. Seen under the emulator (which
      rounds as cvt.rna.tf32 does): at most 2.6e-4 for O and 5.2e-4 for dQ and dK
      on one rank, 2.9e-3 for dK of a rank holding 2 keys (contiguous T 7, np 4:
      few terms, no averaging). 1e-2 is 20 u, while a wrong fragment row or column
      gives errors of order 1.
  bf16 (BF16 build), per tensor. With the inputs the same on both sides, the bf16
      kernels round in three places only: P and dS as the A operand of their
      products, and the outputs O, dQ, dK, dV as they are stored; bf16 keeps 8
      significant bits, u = 2^-9 = 2.0e-3 per rounding (RMS about u / sqrt(3) =
      1.1e-3). Q K^T, dO V^T (products of bf16 exact in fp32, fp32 sums), the
      softmax and lse stay fp32: LSE is held to the exact mode's 1e-5 (seen at most
      5.6e-8). O = P V and dV = P^T dO carry P's rounding (each weight off by its
      own relative error, so the sum is off by about u / sqrt(3) relative whatever
      the number of terms) and the output's: about 1.6e-3; BF16_TOL = 1e-2 = 5 u
      (seen at most 2.4e-3 for O, 2.6e-3 for dV). dQ = dS K and dK = dS^T Q carry
      dS's and the output's rounding, and D = rowsum(dO O) from the stored bf16 O
      enters dS = P (dP - D): where dP - D is far smaller than D (a query that sees
      2 keys: dP_1 - D = p_2 (dP_1 - dP_2)), D's error u |D| / sqrt(3) is large
      against it, and few terms average nothing: about 2.5e-3 on long rows, seen
      at most 8.9e-3 (dQ) and 1.25e-2 (dK) on the rank holding 2 keys (contiguous
      T 7, np 4), as TF32's worst case was there (6 of its u, 6 of bf16's u are
      1.2e-2). BF16_GRAD_TOL = 2e-2 = 10 u. A wrong fragment row or column, or a
      product in the wrong precision, gives errors of order 1.

Also the transport: all_reduce_sum (float, double), all_gather, reduce_scatter_sum
(float, double), all_to_all, broadcast and all_to_all_v (parts of other sizes,
zero among them, at shuffled offsets with gaps that must stay untouched, two in
flight at once) on device memory against the values they must produce; and where every rank of the node has a GPU of its own, the same
over NCCL (cp/comm_nccl.cuh), with the ring and all-gather attention over it.
With no GPU the binary exits 77 (skipped) on every rank.
*/
#include "cp/attention.cuh"
#include "cp/attention.h"
#include "cp/comm_mpi.h"
#include "cp/comm_mpi_staged.cuh"
#ifndef NO_NCCL
#include "cp/comm_nccl.cuh"
#endif
#include "cp/mesh.h"
#include "cp/position_table.cuh"
#include "cp/sharder.h"
#include "test/lib/gpu_test_utils.cuh"
#include "test/lib/test_comm.h"

#define B 2
#define MAX_SEQ_LEN 512
#define DOC_TOKEN 3
#define FP32_TOL 1e-5
#define TF32_TOL 1e-2
#define BF16_TOL 1e-2      // O, dV
#define BF16_GRAD_TOL 2e-2 // dQ, dK

// D = A B + C through llmc/mma.cuh's wrapper, each lane loading its fragments as
// the PTX ISA lays them out for m16n8k8 TF32. a: (16, 8), b: (8, 8) as (k, n), c, d:
// (16, 8), row-major; one warp.
__global__ static void mma_probe_kernel(float *d, const float *a, const float *b, const float *c) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t af[4] = {tf32_from_float(a[g * 8 + t]), tf32_from_float(a[(g + 8) * 8 + t]),
                      tf32_from_float(a[g * 8 + t + 4]), tf32_from_float(a[(g + 8) * 8 + t + 4])};
    uint32_t bf[2] = {tf32_from_float(b[t * 8 + g]), tf32_from_float(b[(t + 4) * 8 + g])};
    int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    float cf[4], df[4];
    for (int i = 0; i < 4; i++) { cf[i] = c[rows[i] * 8 + cols[i]]; }
    mma_m16n8k8_tf32(df, af, bf, cf);
    for (int i = 0; i < 4; i++) { d[rows[i] * 8 + cols[i]] = df[i]; }
}

// The same through the bf16 m16n8k16 wrapper: a: (16, 16), b: (16, 8) as (k, n)
__global__ static void mma_bf16_probe_kernel(float *d, const float *a, const float *b, const float *c) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t af[4], bf[2];
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
        af[i] = bf16x2_from_floats(a[row * 16 + col], a[row * 16 + col + 1]);
    }
    for (int i = 0; i < 2; i++) {
        int k = 2 * t + 8 * i;
        bf[i] = bf16x2_from_floats(b[k * 8 + g], b[(k + 1) * 8 + g]);
    }
    int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    float cf[4], df[4];
    for (int i = 0; i < 4; i++) { cf[i] = c[rows[i] * 8 + cols[i]]; }
    mma_m16n8k16_bf16(df, af, bf, cf);
    for (int i = 0; i < 4; i++) { d[rows[i] * 8 + cols[i]] = df[i]; }
}

// x rounded to bf16 as cvt.rn.bf16.f32 does (8 significant bits, ties to even)
static float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// x rounded to TF32 as cvt.rna.tf32.f32 does (10 mantissa bits, ties away from zero)
static float tf32_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

typedef void (*MmaProbe)(float *d, const float *a, const float *b, const float *c);

// A tensor-core instruction (probe: D (16, 8) = A (16, K) B (K, 8) + C) against a
// plain product: on values its inputs hold exactly (multiples of 1/8 in [-2, 2],
// exact in TF32 and bf16, every sum exact in fp32) bit for bit, which checks the
// fragment layout (and the halves of bf16 pairs); on U(-1, 1) values within 1e-6
// of the product of their roundings (`round`), which checks the rounding
// (truncation instead would be ~1e-4 off in TF32, ~1e-3 in bf16).
static void test_mma(const char *name, MmaProbe probe, int K, float (*round)(float), uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    size_t na = 16 * (size_t)K, nb = (size_t)K * 8, nc = 16 * 8;
    float *a = (float *)mallocCheck(na * sizeof(float)), *b = (float *)mallocCheck(nb * sizeof(float));
    float *c = (float *)mallocCheck(nc * sizeof(float)), *ref = (float *)mallocCheck(nc * sizeof(float));
    float *d_a = (float *)cudaMallocCheck(na * sizeof(float)), *d_b = (float *)cudaMallocCheck(nb * sizeof(float));
    float *d_c = (float *)cudaMallocCheck(nc * sizeof(float)), *d_d = (float *)cudaMallocCheck(nc * sizeof(float));
    for (int exact = 1; exact >= 0; exact--) {
        float *xs[3] = {a, b, c};
        size_t ns[3] = {na, nb, nc};
        for (int m = 0; m < 3; m++) {
            for (size_t i = 0; i < ns[m]; i++) {
                xs[m][i] = exact ? (float)(rand_below(&rng, 33) - 16) / 8.0f : 2.0f * rng_uniform(&rng) - 1.0f;
            }
        }
        for (int r = 0; r < 16; r++) {
            for (int n = 0; n < 8; n++) {
                double sum = c[r * 8 + n];
                for (int k = 0; k < K; k++) { sum += (double)round(a[r * K + k]) * round(b[k * 8 + n]); }
                ref[r * 8 + n] = (float)sum;
            }
        }
        cuda_upload(d_a, a, na * sizeof(float));
        cuda_upload(d_b, b, nb * sizeof(float));
        cuda_upload(d_c, c, nc * sizeof(float));
        poison_device(d_d, nc * sizeof(float));
        probe<<<1, WARP_SIZE, 0, cuda_ctx.stream>>>(d_d, d_a, d_b, d_c);
        cudaCheckLaunch();
        char what[80];
        snprintf(what, sizeof(what), "mma %s: %s values", name, exact ? "exact" : "rounded");
        check_rel_device(what, d_d, ref, nc, exact ? 0.0 : 1e-6);
    }
    cudaCheck(cudaFree(d_a)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_c)); cudaCheck(cudaFree(d_d));
    free(a); free(b); free(c); free(ref);
}

// The tensors checked, and the GPU's tolerance for each per precision (relative
// 2-norm error, the header says why)
enum { T_O, T_LSE, T_DQ, T_DK, T_DV };
static const char *tensor_names[] = {"O", "LSE", "dQ", "dK", "dV"};
static double tolerance(MmaPrecision precision, int tensor) {
    if (precision == MMA_TF32) { return TF32_TOL; }
    if (precision == MMA_FP32 || tensor == T_LSE) { return FP32_TOL; }
    return tensor == T_DQ || tensor == T_DK ? BF16_GRAD_TOL : BF16_TOL;
}
static const char *precision_name(MmaPrecision precision) {
    return precision == MMA_TF32 ? "tf32" : precision == MMA_BF16 ? "bf16" : "fp32";
}

// the build's storage precision on the device, from and to host fp32 (values floatX holds)
static floatX *device_copy_floatx(const float *host, size_t n) {
    floatX *x = (floatX *)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) { x[i] = to_floatX(host[i]); }
    floatX *d = (floatX *)cudaMallocCheck(n * sizeof(floatX));
    cuda_upload(d, x, n * sizeof(floatX));
    free(x);
    return d;
}
static float *host_copy_floatx(const floatX *device, size_t n) {
    floatX *x = (floatX *)mallocCheck(n * sizeof(floatX));
    cuda_download(x, device, n * sizeof(floatX));
    float *h = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { h[i] = to_float(x[i]); }
    free(x);
    return h;
}

// One algorithm's forward and backward on the GPU against the CPU's results, from
// the same local data (already in values floatX holds), in the precision the GPU
// queries are set to.
// qkv: (BT, 3C)   dout: (BT, C)   out: (BT, C)   lse: (BT, NH)   dqkv: (BT, 3C), host; BT = B * local tokens
static void check_gpu(const char *what_base, MmaPrecision precision, AttentionVerbsCuda gpu, const float *qkv,
                      const float *dout, const float *out, const float *lse, const float *dqkv, int BT, int C,
                      int NH) {
    size_t nqkv = (size_t)BT * 3 * C, nout = (size_t)BT * C, nlse = (size_t)BT * NH;
    floatX *d_qkv = device_copy_floatx(qkv, nqkv), *d_dout = device_copy_floatx(dout, nout);
    floatX *d_out = (floatX *)cudaMallocCheck(nout * sizeof(floatX));
    float *d_lse = (float *)cudaMallocCheck(nlse * sizeof(float));
    floatX *d_dqkv = (floatX *)cudaMallocCheck(nqkv * sizeof(floatX));
    poison_device(d_out, nout * sizeof(floatX)); // 0xffff is a bf16 NaN too
    poison_device(d_lse, nlse * sizeof(float));
    poison_device(d_dqkv, nqkv * sizeof(floatX));
    gpu.forward(gpu.ctx, d_out, d_lse, d_qkv);
    gpu.backward(gpu.ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse);
    char what[256]; // what_base (check_algorithm's, under 200), the precision and the tensor
    snprintf(what, sizeof(what), "%s %s: O", what_base, precision_name(precision));
    float *got_out = host_copy_floatx(d_out, nout);
    check_rel(what, got_out, out, nout, tolerance(precision, T_O));
    free(got_out);
    snprintf(what, sizeof(what), "%s %s: LSE", what_base, precision_name(precision));
    check_rel_device(what, d_lse, lse, nlse, tolerance(precision, T_LSE));
    // dqkv holds dQ | dK | dV in each token's 3C: split them to name the one that differs
    float *got = host_copy_floatx(d_dqkv, nqkv);
    float *part = (float *)mallocCheck(nout * sizeof(float)), *part_ref = (float *)mallocCheck(nout * sizeof(float));
    for (int which = 0; which < 3; which++) {
        for (size_t bt = 0; bt < (size_t)BT; bt++) {
            for (int c = 0; c < C; c++) {
                part[bt * C + c] = got[bt * 3 * C + which * C + c];
                part_ref[bt * C + c] = dqkv[bt * 3 * C + which * C + c];
            }
        }
        snprintf(what, sizeof(what), "%s %s: %s", what_base, precision_name(precision), tensor_names[T_DQ + which]);
        check_rel(what, part, part_ref, nout, tolerance(precision, T_DQ + which));
    }
    // determinism: the backward pass again, the same bits
    poison_device(d_dqkv, nqkv * sizeof(floatX));
    gpu.backward(gpu.ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse);
    float *again = host_copy_floatx(d_dqkv, nqkv);
    CHECK(memcmp(got, again, nqkv * sizeof(float)) == 0, "%s %s: two GPU backward passes differ", what_base,
          precision_name(precision));
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dqkv));
    free(got); free(again); free(part); free(part_ref);
}

// What the GPU algorithm holds (`held` device bytes, in the build's precision) against
// what the memory estimate counts for it (`counted`, its _cuda_bytes function); the
// CPU algorithm's forward and backward, then the GPU's in the build's precisions.
static void check_algorithm(const char *label, const char *algorithm, AttentionVerbs cpu, AttentionVerbsCuda gpu,
                            AttentionQueriesCuda *gpu_queries, size_t held, size_t counted, const float *qkv,
                            const float *dout, int BT, int C, int NH) {
    CHECK(held == counted, "%s %s: allocated %zu device bytes, its memory estimate counts %zu", algorithm, label, held,
          counted);
    size_t nqkv = (size_t)BT * 3 * C, nout = (size_t)BT * C, nlse = (size_t)BT * NH;
    float *out = (float *)mallocCheck(nout * sizeof(float));
    float *lse = (float *)mallocCheck(nlse * sizeof(float));
    float *dqkv = (float *)mallocCheck(nqkv * sizeof(float));
    cpu.forward(cpu.ctx, out, lse, qkv);
    cpu.backward(cpu.ctx, dqkv, dout, qkv, out, lse);
    char what[200];
    snprintf(what, sizeof(what), "%s %s", algorithm, label);
#ifdef ENABLE_BF16
    MmaPrecision precisions[] = {MMA_BF16};
#else
    MmaPrecision precisions[] = {MMA_FP32, MMA_TF32};
#endif
    for (size_t p = 0; p < sizeof(precisions) / sizeof(precisions[0]); p++) {
        gpu_queries->precision = precisions[p];
        check_gpu(what, precisions[p], gpu, qkv, dout, out, lse, dqkv, BT, C, NH);
    }
    free(out); free(lse); free(dqkv);
}

// The Ulysses groups and rings of ULYSSES (U = np, [0]) and HYBRID ([1]), on host
// and on device memory.
typedef struct {
    int U[2];
    Comm *host_group[2], *host_ring[2], *dev_group[2], *dev_ring[2];
} UlyssesGroups;

static UlyssesGroups ulysses_groups;

static Comm *split(int staged, int color, int key) {
    MPI_Comm mc;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &mc);
    return staged ? comm_mpi_staged_create(mc, cuda_ctx.stream) : comm_mpi_create(mc);
}

static void ulysses_groups_init(int rank, int np) {
    UlyssesGroups *g = &ulysses_groups;
    g->U[0] = np;
    g->U[1] = np == 4 ? 2 : 1;
    for (int i = 0; i < 2; i++) {
        Mesh m = mesh_init(rank, np, np, g->U[i]);
        g->host_group[i] = split(0, m.ring_rank, m.ulysses_rank);
        g->host_ring[i] = split(0, m.ulysses_rank, m.ring_rank);
        g->dev_group[i] = split(1, m.ring_rank, m.ulysses_rank);
        g->dev_ring[i] = split(1, m.ulysses_rank, m.ring_rank);
    }
}

static void ulysses_groups_free(void) {
    UlyssesGroups *g = &ulysses_groups;
    for (int i = 0; i < 2; i++) {
        Comm *comms[4] = {g->host_group[i], g->host_ring[i], g->dev_group[i], g->dev_ring[i]};
        for (int k = 0; k < 4; k++) { comms[k]->destroy(comms[k]); }
    }
}

// The GPU algorithm's queries (check_algorithm sets their precision) and the device
// bytes it holds
static AttentionQueriesCuda *gpu_queries(CpAttentionCuda *a, size_t *held) {
    switch (a->kind) {
    case CP_ATTENTION_RING: *held = a->ring.bytes; return &a->ring.queries;
    case CP_ATTENTION_ALLGATHER: *held = a->allgather.bytes; return &a->allgather.queries;
    case CP_ATTENTION_GROUPCAST: *held = a->groupcast.bytes; return &a->groupcast.queries;
    case CP_ATTENTION_ULYSSES:
    case CP_ATTENTION_HYBRID: break;
    }
    *held = a->ulysses.bytes;
    return &a->ulysses.ring.queries;
}

// One algorithm (cp/attention.h's kind; stages: group-cast's) on the CPU and the GPU,
// bound to the layout; the groups it talks over are those of the trainer's mesh
// (cp/mesh.h), on host memory for the CPU, on device memory for the GPU.
static void check_kind(const char *label, CpAttentionKind kind, CpAttentionComms host, CpAttentionCommsCuda dev,
                       int stages, const ShardLayout *layout, const float *qkv, const float *dout, int C, int NH) {
    int Tl = layout->local_len, U = dev.ulysses ? dev.ulysses->size : 1;
    CpAttention cpu;
    cp_attention_init(&cpu, kind, host, stages, B, Tl, C, NH);
    AttentionVerbs cpu_verbs = cp_attention_bind(&cpu, layout);
    CpAttentionCuda gpu;
    cp_attention_cuda_init(&gpu, kind, dev, stages, B, Tl, C, NH);
    AttentionVerbsCuda gpu_verbs = cp_attention_cuda_bind(&gpu, layout);
    size_t held;
    AttentionQueriesCuda *queries = gpu_queries(&gpu, &held);
    check_algorithm(label, cp_attention_names[kind], cpu_verbs, gpu_verbs, queries, held,
                    cp_attention_cuda_bytes(kind, dev.cp->size, U, B, Tl, C, NH), qkv, dout, B * Tl, C, NH);
    cp_attention_cuda_free(&gpu);
    cp_attention_free(&cpu);
}

// ulysses 0: ring and all-gather; 1: Ulysses and the hybrid (the emulation is slow:
// each case runs the algorithms it is for)
static void run_case(Comm *host_comm, Comm *dev_comm, CpLayoutKind kind, int T, int with_documents, int NH,
                     int HS, int ulysses) {
    int C = NH * HS;
    char label[160];
    snprintf(label, sizeof(label), "%s T %d HS %d%s", cp_layout_names[kind], T, HS, with_documents ? " docs" : "");
    // the same tokens on every rank (documents come from them), local data per rank
    Rng rng;
    rng_seed(&rng, 77 + T);
    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
    int *targets = (int *)callocCheck((size_t)B * T, sizeof(int));
    for (int i = 0; i < B * T; i++) { inputs[i] = DOC_TOKEN + 1 + rand_below(&rng, 40); }
    if (with_documents) {
        for (int i = 5; i < B * T; i += 11) { inputs[i] = DOC_TOKEN; }
    }
    CpSharder sh;
    cp_sharder_init(&sh, kind, host_comm->rank, host_comm->size, MAX_SEQ_LEN,
                    with_documents ? cp_masked_documents(DOC_TOKEN) : cp_no_documents());
    if (cp_check_config(&sh, T) != CP_OK) { // a rank would own no real token: not a valid run
        free(inputs);
        free(targets);
        return;
    }
    CHECK(cp_shard_batch(&sh, inputs, targets, NULL, B, T) == CP_OK, "%s: shard_batch: %s", label, sh.error);
    int Tl = sh.layout.local_len;
    size_t nqkv = (size_t)B * Tl * 3 * C, nout = (size_t)B * Tl * C;
    rng_seed(&rng, 1000 + 31 * host_comm->rank + T + HS);
    float *qkv = (float *)mallocCheck(nqkv * sizeof(float));
    float *dout = (float *)mallocCheck(nout * sizeof(float));
    fill_uniform(&rng, qkv, nqkv, -1.0f, 1.0f);
    fill_uniform(&rng, dout, nout, -1.0f, 1.0f);
    // the values the GPU holds (bf16 in the BF16 build), for the CPU too
    for (size_t i = 0; i < nqkv; i++) { qkv[i] = to_float(to_floatX(qkv[i])); }
    for (size_t i = 0; i < nout; i++) { dout[i] = to_float(to_floatX(dout[i])); }

    CpAttentionComms host = {host_comm, NULL, NULL};
    CpAttentionCommsCuda dev = {dev_comm, host_comm, NULL, NULL, NULL};
    if (ulysses) { // Ulysses (U = np, [0]) and the hybrid ([1]), where the heads split
        UlyssesGroups *g = &ulysses_groups;
        for (int i = 0; i < 2; i++) {
            if (NH % g->U[i] != 0) { continue; }
            host.ulysses = g->host_group[i];
            host.ring = g->host_ring[i];
            dev.ulysses = g->dev_group[i];
            dev.ulysses_host = g->host_group[i];
            dev.ring = g->dev_ring[i];
            check_kind(label, i == 0 ? CP_ATTENTION_ULYSSES : CP_ATTENTION_HYBRID, host, dev, 1, &sh.layout, qkv,
                       dout, C, NH);
        }
    } else {
        check_kind(label, CP_ATTENTION_RING, host, dev, 1, &sh.layout, qkv, dout, C, NH);
        check_kind(label, CP_ATTENTION_ALLGATHER, host, dev, 1, &sh.layout, qkv, dout, C, NH);
        // group-cast in as many stages as there are peers (the most exchanges in flight)
        check_kind(label, CP_ATTENTION_GROUPCAST, host, dev, groupcast_max_stages(dev_comm->size), &sh.layout, qkv,
                   dout, C, NH);
    }

    cp_sharder_free(&sh);
    free(inputs); free(targets); free(qkv); free(dout);
}

// Striped at T = 300 (no padding at np 1 to 4), one document, head size 64 (tiles
// of 64 rows): the visibility of this rank's query tile qt against every rank's key
// tile kt, as the trainer's step prepares it, must be FULL below the diagonal
// (MASKED for a partial query tile, whose bounds are checked), MASKED on it, SKIP
// above it. The header derives the shape.
static void check_striped_tiles(Comm *host_comm, Comm *dev_comm) {
    int T = 300, NH = 1, HS = 64;
    CpSharder sh;
    cp_sharder_init(&sh, CP_LAYOUT_STRIPED, host_comm->rank, host_comm->size, MAX_SEQ_LEN, cp_no_documents());
    int *tokens = (int *)callocCheck((size_t)B * T, sizeof(int));
    CHECK(cp_shard_batch(&sh, tokens, tokens, NULL, B, T) == CP_OK, "striped T %d: %s", T, sh.error);
    int Tl = sh.layout.local_len, cp = host_comm->size;
    RingAttentionCuda ring;
    ring_attention_cuda_init(&ring, dev_comm, B, Tl, NH * HS, NH);
    ring_attention_cuda_bind(&ring, &sh.layout);
    const AttentionLayoutCuda *al = &ring.queries.layout;
    size_t n = (size_t)cp * B * al->tiles * al->tiles;
    unsigned char *vis = (unsigned char *)mallocCheck(n);
    cuda_download(vis, al->vis, n);
    int masked = 0;
    for (size_t i = 0; i < n; i++) {
        int kt = (int)(i % al->tiles), qt = (int)(i / al->tiles % al->tiles);
        int src = (int)(i / ((size_t)al->tiles * al->tiles * B));
        int partial_q = (qt + 1) * al->tile > Tl;
        BlockVisibility expected = qt < kt ? BLOCK_SKIP : qt == kt || partial_q ? BLOCK_MASKED : BLOCK_FULL;
        CHECK(vis[i] == expected, "striped T %d rank %d: query tile %d against rank %d's key tile %d is %d, "
              "expected %d (0 skip, 1 full, 2 masked)", T, host_comm->rank, qt, src, kt, vis[i], expected);
        masked += vis[i] == BLOCK_MASKED;
    }
    if (host_comm->rank == 0) {
        printf("striped T %d: %d tiles a block, %d masked tile pairs of %zu over %d steps x %d rows\n", T, al->tiles,
               masked, n, cp, B);
    }
    free(vis);
    free(tokens);
    ring_attention_cuda_free(&ring);
    cp_sharder_free(&sh);
}

// all_to_all_v: the floats rank `from` sends rank `to` in exchange `round`: 0 to
// `largest`, a third of the pairs 0 (one of the two at 2 ranks, in round 1), none to
// itself; element i is from * 10000 + to * 1000 + i
static size_t a2av_count(int from, int to, int round, size_t largest) {
    if (from == to || (from + 2 * to + round) % 3 == 0) { return 0; }
    return (size_t)((from + 1) * 7919 + (to + 1) * 104729 + round * 31) % (largest + 1);
}

#define A2AV_MAX_RANKS 8
typedef struct {
    size_t send_bytes[A2AV_MAX_RANKS], send_offset[A2AV_MAX_RANKS];
    size_t recv_bytes[A2AV_MAX_RANKS], recv_offset[A2AV_MAX_RANKS];
    size_t recv_floats;
    float *d_send, *d_recv;
    void *exchange;
} A2avCase;

// parts in the order (k + shift) mod n backwards, 3 floats of gap before each and at
// the end (so that an offset taken for another lands wrong, and a float written
// outside its part overwrites a gap); returns the buffer's floats
static size_t a2av_layout(int n, const size_t *floats, int shift, size_t *offset_bytes) {
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int part = n - 1 - (k + shift) % n;
        at += 3;
        offset_bytes[part] = at * sizeof(float);
        at += floats[part];
    }
    return at + 3;
}

static void a2av_start(Comm *comm, A2avCase *x, int round, size_t largest) {
    int n = comm->size, me = comm->rank;
    size_t send_floats[A2AV_MAX_RANKS], recv_floats[A2AV_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        send_floats[p] = a2av_count(me, p, round, largest);
        recv_floats[p] = a2av_count(p, me, round, largest);
        x->send_bytes[p] = send_floats[p] * sizeof(float);
        x->recv_bytes[p] = recv_floats[p] * sizeof(float);
    }
    size_t sn = a2av_layout(n, send_floats, round, x->send_offset);
    x->recv_floats = a2av_layout(n, recv_floats, round + 1, x->recv_offset);
    float *send = (float *)mallocCheck(sn * sizeof(float));
    for (size_t i = 0; i < sn; i++) { send[i] = -1.0f; }
    for (int p = 0; p < n; p++) {
        float *part = send + x->send_offset[p] / sizeof(float);
        for (size_t i = 0; i < send_floats[p]; i++) { part[i] = (float)(me * 10000 + p * 1000 + (int)i); }
    }
    x->d_send = device_copy(send, sn);
    x->d_recv = (float *)cudaMallocCheck(x->recv_floats * sizeof(float));
    poison_device(x->d_recv, x->recv_floats * sizeof(float));
    x->exchange = comm->all_to_all_v_start(comm, x->d_send, x->send_bytes, x->send_offset, x->d_recv, x->recv_bytes,
                                           x->recv_offset);
    free(send);
}

// the parts where they belong, every gap still poisoned (NaN bits)
static void a2av_finish(Comm *comm, A2avCase *x, int round) {
    int n = comm->size, me = comm->rank;
    comm->all_to_all_v_wait(comm, x->exchange);
    float *got = host_copy(x->d_recv, x->recv_floats);
    unsigned char *in_part = (unsigned char *)callocCheck(x->recv_floats, 1);
    int wrong = 0;
    for (int p = 0; p < n; p++) {
        size_t at = x->recv_offset[p] / sizeof(float);
        for (size_t i = 0; i < x->recv_bytes[p] / sizeof(float); i++) {
            wrong += got[at + i] != (float)(p * 10000 + me * 1000 + (int)i);
            in_part[at + i] = 1;
        }
    }
    int outside = 0;
    for (size_t i = 0; i < x->recv_floats; i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], sizeof(bits));
        outside += !in_part[i] && bits != 0xffffffffu;
    }
    CHECK(wrong == 0 && outside == 0, "transport all_to_all_v exchange %d: %d float(s) of the parts wrong, %d written "
          "outside every part", round, wrong, outside);
    printf("ok   rank %d  transport all_to_all_v exchange %d: every part in place, no gap written (%zu floats)\n",
           fatal_rank, round, x->recv_floats);
    free(got);
    free(in_part);
    cudaCheck(cudaFree(x->d_send)); cudaCheck(cudaFree(x->d_recv));
}

// The collectives of the device transport against what they must produce.
static void test_transport(Comm *comm) {
    int r = comm->rank, n = comm->size;
    size_t count = 1000;
    float *x = (float *)mallocCheck(count * sizeof(float));
    float *expected = (float *)mallocCheck(count * n * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        x[i] = (float)(r + 1) * (float)i;
        expected[i] = (float)(n * (n + 1) / 2) * (float)i; // exact: small integers
    }
    float *d_x = device_copy(x, count);
    comm->all_reduce_sum(comm, d_x, count, COMM_FLOAT);
    check_rel_device("transport all_reduce_sum float", d_x, expected, count, 0.0);

    double dv[2] = {0.5 * (r + 1), 1.0}, *d_dv = (double *)cudaMallocCheck(sizeof(dv));
    cuda_upload(d_dv, dv, sizeof(dv));
    comm->all_reduce_sum(comm, d_dv, 2, COMM_DOUBLE);
    cuda_download(dv, d_dv, sizeof(dv));
    CHECK(dv[0] == 0.25 * n * (n + 1) && dv[1] == n, "all_reduce_sum double: got %g %g", dv[0], dv[1]);

    float *d_all = (float *)cudaMallocCheck(count * n * sizeof(float));
    for (size_t i = 0; i < count; i++) { x[i] = (float)(r * 10000 + (int)i); }
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < count; i++) { expected[k * count + i] = (float)(k * 10000 + (int)i); }
    }
    cuda_upload(d_x, x, count * sizeof(float));
    poison_device(d_all, count * n * sizeof(float));
    comm->all_gather(comm, d_x, d_all, count * sizeof(float));
    check_rel_device("transport all_gather", d_all, expected, count * n, 0.0);

    // reduce_scatter_sum: rank r sends (r + 1) * (k * 10000 + i) as element i of part
    // k, so rank k receives (1 + ... + n) * (k * 10000 + i), exact in float
    float *parts = (float *)mallocCheck(count * n * sizeof(float));
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < count; i++) { parts[k * count + i] = (float)(r + 1) * (float)(k * 10000 + (int)i); }
    }
    for (size_t i = 0; i < count; i++) { expected[i] = (float)(n * (n + 1) / 2) * (float)(r * 10000 + (int)i); }
    cuda_upload(d_all, parts, count * n * sizeof(float));
    poison_device(d_x, count * sizeof(float));
    comm->reduce_scatter_sum(comm, d_all, d_x, count, COMM_FLOAT);
    check_rel_device("transport reduce_scatter_sum float", d_x, expected, count, 0.0);
    // in double: rank r sends (0.5 (r + 1) (k + 1), 1) as part k, so rank k receives
    // (0.25 n (n + 1) (k + 1), n)
    double *dparts = (double *)mallocCheck(2 * n * sizeof(double));
    double *d_dparts = (double *)cudaMallocCheck(2 * n * sizeof(double));
    for (int k = 0; k < n; k++) { dparts[2 * k] = 0.5 * (r + 1) * (k + 1); dparts[2 * k + 1] = 1.0; }
    cuda_upload(d_dparts, dparts, 2 * n * sizeof(double));
    comm->reduce_scatter_sum(comm, d_dparts, d_dv, 2, COMM_DOUBLE);
    cuda_download(dv, d_dv, sizeof(dv));
    CHECK(dv[0] == 0.25 * n * (n + 1) * (r + 1) && dv[1] == n, "reduce_scatter_sum double: got %g %g", dv[0], dv[1]);
    free(parts); free(dparts);
    cudaCheck(cudaFree(d_dparts));

    int root = n - 1;
    for (size_t i = 0; i < count; i++) {
        x[i] = r == root ? (float)i : -1.0f;
        expected[i] = (float)i;
    }
    cuda_upload(d_x, x, count * sizeof(float));
    comm->broadcast(comm, d_x, count * sizeof(float), root);
    check_rel_device("transport broadcast", d_x, expected, count, 0.0);

    // all_to_all: rank r's part k holds r * 10000 + k * 1000 + i (i < 1000), so part k
    // received by rank r comes from rank k: k * 10000 + r * 1000 + i
    size_t part = 1000;
    float *sent = (float *)mallocCheck(part * n * sizeof(float));
    float *wanted = (float *)mallocCheck(part * n * sizeof(float));
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < part; i++) {
            sent[k * part + i] = (float)(r * 10000 + k * 1000 + (int)i);
            wanted[k * part + i] = (float)(k * 10000 + r * 1000 + (int)i);
        }
    }
    float *d_sent = device_copy(sent, part * n), *d_got = (float *)cudaMallocCheck(part * n * sizeof(float));
    poison_device(d_got, part * n * sizeof(float));
    comm->all_to_all(comm, d_sent, d_got, part * sizeof(float));
    check_rel_device("transport all_to_all", d_got, wanted, part * n, 0.0);
    cudaCheck(cudaFree(d_sent)); cudaCheck(cudaFree(d_got));
    free(sent); free(wanted);

    // all_to_all_v: parts of other sizes between each pair (zero among them), two
    // exchanges in flight at once, the second larger, waited in reverse order
    CHECK(n <= A2AV_MAX_RANKS, "the all_to_all_v check runs on at most %d ranks", A2AV_MAX_RANKS);
    A2avCase first, second;
    a2av_start(comm, &first, 0, 300);
    a2av_start(comm, &second, 1, 3000);
    a2av_finish(comm, &second, 1);
    a2av_finish(comm, &first, 0);

    // two ring exchanges back to back, the second larger: rank r sends r * 10000 + i
    // and receives rank r-1's. Both use the first free slot, whose staging buffers
    // (the staged transport's) grow for the second while the first's copy back to the
    // device may still be queued on the transport's stream. The sends are on the
    // device before the first starts, so that no synchronous copy drains that stream
    size_t ring_counts[2] = {100, 3000};
    float *d_ring_send[2], *d_ring_recv[2];
    for (int e = 0; e < 2; e++) {
        float *block = (float *)mallocCheck(ring_counts[e] * sizeof(float));
        for (size_t i = 0; i < ring_counts[e]; i++) { block[i] = (float)(r * 10000 + (int)i); }
        d_ring_send[e] = device_copy(block, ring_counts[e]);
        d_ring_recv[e] = (float *)cudaMallocCheck(ring_counts[e] * sizeof(float));
        poison_device(d_ring_recv[e], ring_counts[e] * sizeof(float));
        free(block);
    }
    for (int e = 0; e < 2; e++) {
        comm->ring_wait(comm, comm->ring_start(comm, d_ring_send[e], d_ring_recv[e], ring_counts[e] * sizeof(float)));
    }
    int previous = (r - 1 + n) % n;
    for (int e = 0; e < 2; e++) {
        float *want = (float *)mallocCheck(ring_counts[e] * sizeof(float));
        for (size_t i = 0; i < ring_counts[e]; i++) { want[i] = (float)(previous * 10000 + (int)i); }
        check_rel_device(e == 0 ? "transport ring exchange" : "transport ring exchange, grown", d_ring_recv[e], want,
                         ring_counts[e], 0.0);
        free(want);
        cudaCheck(cudaFree(d_ring_send[e])); cudaCheck(cudaFree(d_ring_recv[e]));
    }
    comm->barrier(comm);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_dv)); cudaCheck(cudaFree(d_all));
    free(x); free(expected);
}

// The position table split over this job's ranks (cp/position_table.cuh): every
// rank's tokens at random positions (many shared, on one rank and across ranks)
// send the rows of a random floatX gradient to their owners, which add them into
// rows that already hold values; then the trained vector's sums and norm, and the
// weights' rows fetched for the tokens from their owners. The CPU twin
// (cp/position_table.h) on the same values must give the same rows bit for bit
// (both add each row's tokens in arrival order, in fp32; the fetched rows are
// copies), the same sums and the same norm to 1e-12.
static void check_position_table(Comm *host_comm, Comm *dev_comm) {
    int max_T = 37, C = 24, tokens = 29;
    Comm *self = comm_mpi_create(comm_duplicate(MPI_COMM_SELF));
    Comm *dev_self = comm_mpi_staged_create(comm_duplicate(MPI_COMM_SELF), cuda_ctx.stream);
    PositionTable cpu;
    PositionTableCuda gpu;
    position_table_init(&cpu, host_comm, host_comm, self, max_T, C, tokens);
    position_table_cuda_init(&gpu, dev_comm, host_comm, dev_self, max_T, C, tokens);
    Rng rng;
    rng_seed(&rng, 4321 + 17 * host_comm->rank);
    int *pos = (int *)mallocCheck((size_t)tokens * sizeof(int));
    for (int t = 0; t < tokens; t++) { pos[t] = (int)(rng_next_u64(&rng) % (uint64_t)max_T); }
    size_t rows = (size_t)cpu.room * C;
    float *dout = (float *)mallocCheck((size_t)tokens * C * sizeof(float));
    float *dwpe = (float *)mallocCheck(rows * sizeof(float));
    fill_uniform(&rng, dout, (size_t)tokens * C, -1.0f, 1.0f);
    fill_uniform(&rng, dwpe, rows, -1.0f, 1.0f);
    for (size_t i = 0; i < (size_t)tokens * C; i++) { dout[i] = to_float(to_floatX(dout[i])); }
    floatX *d_dout = device_copy_floatx(dout, (size_t)tokens * C);
    float *d_dwpe = device_copy(dwpe, rows);
    floatX *d_send = (floatX *)cudaMallocCheck((size_t)tokens * C * sizeof(floatX));
    floatX *d_recv = (floatX *)cudaMallocCheck((size_t)tokens * C * sizeof(floatX));
    float *send = (float *)mallocCheck((size_t)tokens * C * sizeof(float));
    float *recv = (float *)mallocCheck((size_t)tokens * C * sizeof(float));
    position_table_plan(&cpu, pos, tokens);
    position_table_plan(&gpu.host, pos, tokens);
    position_table_send_gradients(&cpu, dwpe, dout, send, recv);
    position_table_send_gradients_cuda(&gpu, d_dwpe, d_dout, d_send, d_recv);
    float *got = host_copy(d_dwpe, rows);
    int same = memcmp(got, dwpe, rows * sizeof(float)) == 0;
    printf("%-4s rank %d  position table: owned rows [%d, %d) after the exchange, bit for bit\n", same ? "ok" : "FAIL",
           fatal_rank, cpu.begin, cpu.end);
    if (!same) { rel_failures++; }
    // the trained vector: 11 parameters, the rows, 13 more
    size_t at = 11, n = at + rows + 13;
    float *grads = (float *)mallocCheck(n * sizeof(float));
    fill_uniform(&rng, grads, n, -1.0f, 1.0f);
    float *d_grads = device_copy(grads, n);
    double *d_norm = (double *)cudaMallocCheck(sizeof(double)), norm;
    double want = position_table_sum_gradients(&cpu, host_comm, grads, n, at);
    position_table_sum_gradients_cuda(&gpu, dev_comm, d_grads, n, at, d_norm);
    cuda_download(&norm, d_norm, sizeof(double));
    check_rel_device("position table: the trained vector's sums", d_grads, grads, n, 1e-7);
    int norm_ok = fabs(norm - want) <= 1e-12 * want;
    printf("%-4s rank %d  position table: squared norm %.17g, the CPU's %.17g\n", norm_ok ? "ok" : "FAIL", fatal_rank,
           norm, want);
    if (!norm_ok) { rel_failures++; }
    // the weights' rows: each rank holds its own (floatX values), and fetches the
    // rows of its tokens' other positions; rows it holds stay as they were (NaN)
    float *wpe = (float *)mallocCheck(rows * sizeof(float));
    fill_uniform(&rng, wpe, rows, -1.0f, 1.0f);
    for (size_t i = 0; i < rows; i++) { wpe[i] = to_float(to_floatX(wpe[i])); }
    float *fetched = (float *)mallocCheck((size_t)tokens * C * sizeof(float));
    for (size_t i = 0; i < (size_t)tokens * C; i++) { fetched[i] = NAN; }
    float *scratch = (float *)mallocCheck(2 * (size_t)tokens * C * sizeof(float));
    position_table_fetch_rows(&cpu, wpe, fetched, scratch);
    floatX *d_wpe = device_copy_floatx(wpe, rows), *d_fetched = device_copy_floatx(fetched, (size_t)tokens * C);
    floatX *d_scratch = (floatX *)cudaMallocCheck(2 * (size_t)tokens * C * sizeof(floatX));
    position_table_fetch_rows_cuda(&gpu, d_wpe, d_fetched, d_scratch);
    float *got_rows = host_copy_floatx(d_fetched, (size_t)tokens * C);
    int fetched_same = 1; // a row left alone stays NaN on both
    for (size_t i = 0; i < (size_t)tokens * C; i++) {
        if (!(got_rows[i] == fetched[i] || (isnan(got_rows[i]) && isnan(fetched[i])))) { fetched_same = 0; }
    }
    int outside = 0;
    for (int t = 0; t < tokens; t++) { outside += pos[t] < cpu.begin || pos[t] >= cpu.end; }
    printf("%-4s rank %d  position table: the weights' rows of %d tokens fetched from their owners, bit for bit\n",
           fetched_same ? "ok" : "FAIL", fatal_rank, outside);
    if (!fetched_same) { rel_failures++; }
    void *dev[] = {d_dout, d_dwpe, d_send, d_recv, d_grads, d_norm, d_wpe, d_fetched, d_scratch};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) { cudaCheck(cudaFree(dev[i])); }
    free(pos); free(dout); free(dwpe); free(send); free(recv); free(got); free(grads); free(wpe); free(fetched);
    free(scratch); free(got_rows);
    position_table_cuda_free(&gpu);
    position_table_free(&cpu);
    dev_self->destroy(dev_self);
    self->destroy(self);
}

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    gpu_test_require_device(1);
    int devices = cuda_device_count(NULL, 0);
    cuda_init(fatal_rank % devices, 0);
    Comm *host_comm = comm_mpi_create(comm_duplicate(MPI_COMM_WORLD));
    Comm *dev_comm = comm_mpi_staged_create(comm_duplicate(MPI_COMM_WORLD), cuda_ctx.stream);
    test_transport(dev_comm);
    check_position_table(host_comm, dev_comm);
    if (host_comm->rank == 0) {
        test_mma("m16n8k8 tf32", mma_probe_kernel, 8, tf32_round, 4242);
        test_mma("m16n8k16 bf16", mma_bf16_probe_kernel, 16, bf16_round, 4243);
    }
    int np = host_comm->size;
    ulysses_groups_init(host_comm->rank, np);
    CpLayoutKind kinds[2] = {CP_LAYOUT_CONTIGUOUS, CP_LAYOUT_ROUND_ROBIN};
    int nkinds = np == 1 ? 1 : 2;
    if (np == 1) { kinds[0] = CP_LAYOUT_IDENTITY; }
    int lengths[3] = {7, 37, 150};
    for (int k = 0; k < nkinds; k++) {
        for (int l = 0; l < 3; l++) {
            for (int docs = 0; docs < 2; docs++) {
                run_case(host_comm, dev_comm, kinds[k], lengths[l], docs, 2, 32, 0);
            }
            run_case(host_comm, dev_comm, kinds[k], lengths[l], 1, 1, 128, 0);
        }
        run_case(host_comm, dev_comm, kinds[k], 300, 0, 1, 64, 0);
    }
    // packed: documents split head-tail one by one, pad slots between them
    run_case(host_comm, dev_comm, CP_LAYOUT_PACKED, 100, 1, 2, 32, 0);
    run_case(host_comm, dev_comm, CP_LAYOUT_PACKED, 300, 1, 1, 64, 0);
    // striped: strided index sets, every tile interleaved with every rank's
    check_striped_tiles(host_comm, dev_comm);
    run_case(host_comm, dev_comm, CP_LAYOUT_STRIPED, 37, 0, 2, 32, 0);
    run_case(host_comm, dev_comm, CP_LAYOUT_STRIPED, 150, 1, 1, 64, 0);
    // 12 heads: Ulysses at every np, the hybrid 2 x 2 at np 4
    for (int k = 0; k < nkinds; k++) {
        for (int docs = 0; docs < 2; docs++) { run_case(host_comm, dev_comm, kinds[k], 37, docs, 12, 32, 1); }
    }
    run_case(host_comm, dev_comm, CP_LAYOUT_PACKED, 37, 1, 12, 32, 1);
    run_case(host_comm, dev_comm, CP_LAYOUT_STRIPED, 37, 1, 12, 32, 1);
    ulysses_groups_free();
#ifndef NO_NCCL
    // NCCL where every rank of this node has a GPU of its own (NCCL refuses two ranks
    // on one): the transport's verbs, and the ring and all-gather over it
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int node_ranks;
    MPI_Comm_size(node, &node_ranks);
    MPI_Comm_free(&node);
    if (node_ranks <= devices) {
        Comm *nccl = comm_nccl_create(comm_duplicate(MPI_COMM_WORLD), cuda_ctx.stream);
        test_transport(nccl);
        run_case(host_comm, nccl, kinds[nkinds - 1], 150, 1, 2, 32, 0);
        nccl->destroy(nccl);
    } else if (fatal_rank == 0) {
        printf("note: %d ranks on this node, %d GPU(s): NCCL is not tested (it needs a GPU per rank)\n", node_ranks,
               devices);
    }
#endif
    dev_comm->destroy(dev_comm);
    host_comm->destroy(host_comm);
    cuda_free_context();
    int failures = rel_failures, total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (fatal_rank == 0) { printf("%s: %d check(s) failed over %d rank(s)\n", total ? "FAIL" : "PASS", total, np); }
    MPI_Finalize();
    return total ? 1 : 0;
}
