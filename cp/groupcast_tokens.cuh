/*
Group-cast's token moves on the GPU (cp/groupcast_attention.cuh): the tokens of a
plan's list (cp/groupcast_plan.h: flat indices b * T + t, on the device) between
the rows of a K/V or dK | dV block and a packed buffer that the all-to-all-v
moves, one row of 2C per token:

    packed row n   [ k or dK of token index[n] (C) | v or dV of it (C) ]

    tokens_pack             packed <- the listed tokens' rows (the sender: its own
                            K and V where qkv holds them, or a peer block's fp32
                            dK | dV)
    tokens_unpack<., false> the listed tokens' rows <- packed (a peer's K/V block)
    tokens_unpack<., true>  the listed tokens' rows += packed (fp32 dK | dV partials
                            at the owner)

A list names each token once, so no two threads of one launch touch the same
element; the owner adds its peers' partials one launch per peer, in a fixed
order, so that the sums come out the same bits every run (no atomics).
*/
#ifndef CP_GROUPCAST_TOKENS_CUH
#define CP_GROUPCAST_TOKENS_CUH

#include "../llmc/cuda_common.cuh"

// packed: (n, 2C)   k, v: rows of `stride` (token i's at i * stride)   index: (n) device
template <typename T>
__global__ static void tokens_pack_kernel(T *packed, const T *k, const T *v, int stride, const int *index, int n,
                                          int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * 2 * C) { return; }
    int token = (int)(i / (2 * C)), c = (int)(i % (2 * C));
    const T *row = c < C ? k : v;
    packed[i] = row[(size_t)index[token] * stride + c % C];
}

// ADD: the rows += packed (fp32 partials), else the rows = packed
template <typename T, bool ADD>
__global__ static void tokens_unpack_kernel(T *k, T *v, int stride, const T *packed, const int *index, int n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * 2 * C) { return; }
    int token = (int)(i / (2 * C)), c = (int)(i % (2 * C));
    T *at = (c < C ? k : v) + (size_t)index[token] * stride + c % C;
    if constexpr (ADD) {
        *at += packed[i];
    } else {
        *at = packed[i];
    }
}

template <typename T>
static void tokens_pack(T *packed, const T *k, const T *v, int stride, const int *index, int n, int C) {
    if (n == 0) { return; }
    size_t elements = (size_t)n * 2 * C;
    tokens_pack_kernel<T><<<grid_for(elements, 256), 256, 0, cuda_ctx.stream>>>(packed, k, v, stride, index, n, C);
    cudaCheckLaunch();
}

template <typename T, bool ADD>
static void tokens_unpack(T *k, T *v, int stride, const T *packed, const int *index, int n, int C) {
    if (n == 0) { return; }
    size_t elements = (size_t)n * 2 * C;
    tokens_unpack_kernel<T, ADD><<<grid_for(elements, 256), 256, 0, cuda_ctx.stream>>>(k, v, stride, packed, index,
                                                                                         n, C);
    cudaCheckLaunch();
}

#endif // CP_GROUPCAST_TOKENS_CUH
