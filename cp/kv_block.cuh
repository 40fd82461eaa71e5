/*
A K/V block on the GPU: the keys and values of one rank's T local tokens as the
block kernels (cp/attention_block.cuh) read them (KVBlockCuda), and where a
block's dK | dV go (DkvRowsCuda). The GPU twin of cp/kv_block.h's KVBlock,
but for the coordinates: they do not travel with the block, since every rank's
are gathered once per batch (cp/block_mask.cuh); the block names whose
tokens it holds.

K and V are token-major in the storage precision (floatX): this rank's own block
is read where the qkv projection left it (row stride 3C); a travelling block is
one buffer, k then v, (B, T, C) each (row stride C), that the ring passes on or
the all-gather fills. A block's dK | dV are written in fp32 where they are summed
over the ranks afterwards, or in floatX straight into dqkv where the block is the
only one (cp 1).
*/
#ifndef CP_KV_BLOCK_CUH
#define CP_KV_BLOCK_CUH

#include "../llmc/cuda_common.cuh"

// A K/V block as the kernels read it: rows (B, T, stride), head h at columns h HS.
typedef struct {
    const floatX *k, *v;
    int stride;
    int rank; // whose tokens: the coordinates and visibility to use
} KVBlockCuda;

// bytes of a travelling K/V block, k then v, (B, T, C) each, in the storage precision
static size_t kv_block_cuda_bytes(int B, int T, int C) { return 2 * (size_t)B * T * C * sizeof(floatX); }
// bytes of a block's dK | dV, (B, T, C) each: fp32 in every build, so that the sum
// over the ranks (around the ring, or reduce-scattered) loses nothing
static size_t dkv_block_cuda_bytes(int B, int T, int C) { return 2 * (size_t)B * T * C * sizeof(float); }

static KVBlockCuda kv_block_cuda_view(const floatX *buf, int B, int T, int C, int rank) {
    KVBlockCuda blk = {buf, buf + (size_t)B * T * C, C, rank};
    return blk;
}

// this rank's own block, read where the qkv projection left it
static KVBlockCuda kv_block_cuda_own(const floatX *qkv, int C, int rank) {
    KVBlockCuda blk = {qkv + C, qkv + 2 * C, 3 * C, rank};
    return blk;
}

// this rank's K/V block into a travelling buffer: k, v (B, T, C) <- qkv (B, T, 3C)
static void kv_block_cuda_fill(floatX *buf, const floatX *qkv, int B, int T, int C) {
    size_t rows = (size_t)B * T, width = (size_t)C * sizeof(floatX), pitch = 3 * width;
    cudaCheck(cudaMemcpy2DAsync(buf, width, qkv + C, pitch, width, rows, cudaMemcpyDeviceToDevice, cuda_ctx.stream));
    cudaCheck(cudaMemcpy2DAsync(buf + rows * C, width, qkv + 2 * C, pitch, width, rows, cudaMemcpyDeviceToDevice,
                                cuda_ctx.stream));
}

// The block's dK and dV rows (row stride `stride`), written in fp32 (f: summed over
// the ranks afterwards) or in the storage precision (x: the only block, cp 1).
typedef struct {
    float *dk_f, *dv_f;
    floatX *dk_x, *dv_x;
    int stride;
} DkvRowsCuda;

// fp32 dK | dV rows of a block, (B, T, C) each, from dkv
static DkvRowsCuda dkv_rows_fp32(float *dkv, int B, int T, int C) {
    DkvRowsCuda r = {dkv, dkv + (size_t)B * T * C, NULL, NULL, C};
    return r;
}

// the only block's dK | dV straight into dqkv's columns (cp 1)
static DkvRowsCuda dkv_rows_dqkv(floatX *dqkv, int C) {
    DkvRowsCuda r = {NULL, NULL, dqkv + C, dqkv + 2 * C, 3 * C};
    return r;
}

#endif // CP_KV_BLOCK_CUH
