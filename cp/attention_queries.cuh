/*
What stays on this rank while the K/V blocks come by, on the GPU: the GPU twin of
cp/attention_queries.h's AttentionQueries. Every GPU algorithm holds one
(AttentionQueriesCuda), and the block kernels (cp/attention_block.cuh) read it for
every visiting block. The queries themselves stay where the qkv projection left
them; held here are D = rowsum(dO * O), in the BF16 build the fp32 sums over the
blocks, and the batch's coordinates and tile visibility (cp/block_mask.cuh).
Here too the choices of a run it is made for: the products' precision
(llmc/mma_tiles.cuh), the head sizes the kernels are built for and their tile
rows, and whether the sums over blocks go straight into the outputs.
*/
#ifndef CP_ATTENTION_QUERIES_CUH
#define CP_ATTENTION_QUERIES_CUH

#include "comm.h"
#include "block_mask.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/mma_tiles.cuh"

// the products' precision of a run: bf16 tensor cores in the BF16 build; TF32 (-f 1)
// or exact fp32 (-f 0) in the FP32 build
static MmaPrecision attention_precision(int tf32) {
#ifdef ENABLE_BF16
    (void)tf32;
    return MMA_BF16;
#else
    return tf32 ? MMA_TF32 : MMA_FP32;
#endif
}

// whether the sums over blocks (output, dQ) go straight into out and dqkv (the FP32
// build), or into an fp32 buffer written to them once (the BF16 build)
static constexpr bool attention_sums_in_place = sizeof(floatX) == sizeof(float);

// The head sizes the kernels are built for, and their tile rows.
static int attention_head_size_supported(int HS) { return HS == 32 || HS == 64 || HS == 128; }
static constexpr int attention_tile_rows(int HS) { return HS <= 64 ? 64 : 32; }

// What stays on this rank while the K/V blocks come by (device).
typedef struct {
    int B, T, C, NH;           // T = local tokens per row
    MmaPrecision precision;    // bf16 (BF16 build); TF32 (-f 1) or exact fp32 (-f 0) (FP32 build)
    float *drow;               // (B, NH, T) D = rowsum(dO * O)
    float *acc;                // (B, T, C) BF16 build: the fp32 running output (forward), dQ summed
                               // over the blocks (backward); NULL in the FP32 build (out, dqkv)
    AttentionLayoutCuda layout;
} AttentionQueriesCuda;

// bytes attention_queries_cuda_init allocates for a group of cp ranks
static size_t attention_queries_cuda_bytes(int cp, int B, int T, int C, int NH) {
    size_t acc = attention_sums_in_place ? 0 : (size_t)B * T * C * sizeof(float);
    size_t layout = attention_layout_cuda_bytes(cp, B, T, attention_tile_rows(C / NH));
    return (size_t)B * NH * T * sizeof(float) + acc + layout;
}

static void attention_queries_cuda_init(AttentionQueriesCuda *aq, Comm *comm, int B, int T, int C, int NH,
                                        size_t *bytes) {
    if (C % NH != 0) { fatal("channels %d are not divisible by heads %d", C, NH); }
    if (!attention_head_size_supported(C / NH)) {
        fatal("head size %d (channels %d / heads %d): the GPU attention is built for head sizes 32, 64 and 128",
              C / NH, C, NH);
    }
    memset(aq, 0, sizeof(*aq));
    aq->B = B; aq->T = T; aq->C = C; aq->NH = NH;
    aq->precision = attention_precision(cuda_ctx.tf32);
    aq->drow = (float *)cuda_malloc_counted(bytes, (size_t)B * NH * T * sizeof(float));
    if (!attention_sums_in_place) { aq->acc = (float *)cuda_malloc_counted(bytes, (size_t)B * T * C * sizeof(float)); }
    attention_layout_cuda_init(&aq->layout, comm->size, comm->rank, B, T, attention_tile_rows(C / NH), bytes);
}

static void attention_queries_cuda_free(AttentionQueriesCuda *aq) {
    cudaCheck(cudaFree(aq->drow));
    if (aq->acc) { cudaCheck(cudaFree(aq->acc)); }
    attention_layout_cuda_free(&aq->layout);
    memset(aq, 0, sizeof(*aq));
}

#endif // CP_ATTENTION_QUERIES_CUH
