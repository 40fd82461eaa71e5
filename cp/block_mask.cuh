/*
Which query-key pairs of this step can see each other, decided per pair of tiles
on the GPU: the GPU twin of cp/block_mask.h. Its rule (block_visibility over the
ranges of two tiles' global indices and documents, from sub_block_range;
pair_visible for one pair) is applied to every pair of tiles of R rows that the
block attention kernels (cp/attention_block.cuh) meet:

    BLOCK_SKIP    no pair of the two tiles is visible: nothing is computed
    BLOCK_FULL    every pair is: no mask is evaluated
    BLOCK_MASKED  some pairs are: pair_visible per element (tile_pair_sees), and
                  the bounds of a partial tile at the end of a row (a pair with a
                  partial tile is at most MASKED, so that the FULL path, which
                  checks no bounds, meets only whole tiles)

The table is built once per batch for every rank's block (AttentionLayoutCuda,
attention_layout_cuda_prepare, a collective over the group): this rank's
coordinates are uploaded from the sharder's layout and all-gathered from every
rank, the tiles' ranges computed (tile_spans_kernel), then the visibility of each
of this rank's query tiles against each rank's key tiles (tile_visibility_kernel).
The layers' passes only read it. Inside a kernel, coords_load brings a tile's
coordinates into shared memory and tile_pair_sees decides one pair from them; the
flash kernels (cp/attention_block_flash.cuh) keep their rows' coordinates in
registers (lane_rows_load) and mask a warp's scores at once (scores_mask).
Nothing here depends on the layout that produced the shard: only global indices.
*/
#ifndef CP_BLOCK_MASK_CUH
#define CP_BLOCK_MASK_CUH

#include "block_mask.h"
#include "comm.h"
#include "sharder.h"
#include "../llmc/cuda_common.cuh"

// Every rank's token coordinates and, for this rank's query tiles against each
// rank's key tiles, their visibility (device).
typedef struct {
    int cp, rank, B, T, tile, tiles; // tiles = ceil(T / tile)
    int *own_coords;     // (2, B, T) this rank's global indices, then documents
    int *coords;         // (cp, 2, B, T) every rank's, gathered
    SubBlock *spans;     // (cp, B, tiles) index and document ranges of each tile
    unsigned char *vis;  // (cp, B, tiles, tiles) BlockVisibility of [rank][b][query tile][key tile]
} AttentionLayoutCuda;

// bytes attention_layout_cuda_init allocates at cp ranks for tiles of `tile` rows (the
// run's memory estimate adds them up before anything is allocated; cp/attention.cuh
// checks that init matches)
static size_t attention_layout_cuda_bytes(int cp, int B, int T, int tile) {
    size_t tiles = (size_t)(T + tile - 1) / tile;
    return (size_t)(cp + 1) * 2 * B * T * sizeof(int) + (size_t)cp * B * tiles * (sizeof(SubBlock) + tiles);
}

static void attention_layout_cuda_init(AttentionLayoutCuda *al, int cp, int rank, int B, int T, int tile,
                                       size_t *bytes) {
    memset(al, 0, sizeof(*al));
    al->cp = cp; al->rank = rank; al->B = B; al->T = T;
    al->tile = tile;
    al->tiles = (T + al->tile - 1) / al->tile;
    size_t coords = 2 * (size_t)B * T * sizeof(int), tiles = (size_t)cp * B * al->tiles;
    al->own_coords = (int *)cuda_malloc_counted(bytes, coords);
    al->coords = (int *)cuda_malloc_counted(bytes, cp * coords);
    al->spans = (SubBlock *)cuda_malloc_counted(bytes, tiles * sizeof(SubBlock));
    al->vis = (unsigned char *)cuda_malloc_counted(bytes, tiles * al->tiles);
}

static void attention_layout_cuda_free(AttentionLayoutCuda *al) {
    void *buffers[] = {al->own_coords, al->coords, al->spans, al->vis};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) { cudaCheck(cudaFree(buffers[i])); }
    memset(al, 0, sizeof(*al));
}

// rank r's global indices (B, T), its documents (B, T), its tile visibility (B, tiles, tiles)
static const int *layout_index(const AttentionLayoutCuda *al, int r) {
    return al->coords + (size_t)r * 2 * al->B * al->T;
}
static const int *layout_document(const AttentionLayoutCuda *al, int r) {
    return layout_index(al, r) + (size_t)al->B * al->T;
}
static const unsigned char *layout_visibility(const AttentionLayoutCuda *al, int r) {
    return al->vis + (size_t)r * al->B * al->tiles * al->tiles;
}

// spans[r][b][tile]: the ranges of tokens [tile R, min(T, (tile + 1) R)) of rank r's row b
// spans: (cp, B, tiles)   coords: (cp, 2, B, T)
__global__ static void tile_spans_kernel(SubBlock *spans, const int *coords, int cp, int B, int T, int tile,
                                         int tiles) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)cp * B * tiles) { return; }
    int tl = (int)(idx % tiles);
    int b = (int)((idx / tiles) % B);
    int r = (int)(idx / ((size_t)tiles * B));
    const int *index = coords + ((size_t)r * 2 * B + b) * T;
    const int *document = index + (size_t)B * T;
    int end = (tl + 1) * tile < T ? (tl + 1) * tile : T;
    spans[idx] = sub_block_range(index, document, tl * tile, end);
}

// vis[r][b][qt][kt]: this rank's query tile qt against rank r's key tile kt. A pair
// with a partial tile (the end of a row) is at most MASKED, where bounds are checked.
// vis: (cp, B, tiles, tiles)   spans: (cp, B, tiles)
__global__ static void tile_visibility_kernel(unsigned char *vis, const SubBlock *spans, int self, int cp, int B,
                                              int tile, int tiles) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)cp * B * tiles * tiles) { return; }
    int kt = (int)(idx % tiles);
    int qt = (int)((idx / tiles) % tiles);
    int b = (int)((idx / ((size_t)tiles * tiles)) % B);
    int r = (int)(idx / ((size_t)tiles * tiles * B));
    const SubBlock *q = &spans[((size_t)self * B + b) * tiles + qt];
    const SubBlock *k = &spans[((size_t)r * B + b) * tiles + kt];
    BlockVisibility v = block_visibility(q, k);
    if (v == BLOCK_FULL && (q->end - q->start < tile || k->end - k->start < tile)) { v = BLOCK_MASKED; }
    vis[idx] = (unsigned char)v;
}

// the layout (host) fits the buffers, or the run ends saying so
static void attention_layout_cuda_check(const AttentionLayoutCuda *al, const ShardLayout *lay) {
    if (lay == NULL || lay->B != al->B || lay->local_len != al->T) {
        fatal("attention: the layout does not match the buffers (B %d, T %d)", al->B, al->T);
    }
}

// The tiles' ranges and visibility from every rank's coordinates in al->coords.
static void attention_layout_cuda_tile(AttentionLayoutCuda *al) {
    int B = al->B, T = al->T;
    size_t spans = (size_t)al->cp * B * al->tiles;
    tile_spans_kernel<<<grid_for(spans, 128), 128, 0, cuda_ctx.stream>>>(al->spans, al->coords, al->cp, B, T,
                                                                         al->tile, al->tiles);
    cudaCheckLaunch();
    size_t pairs = spans * al->tiles;
    tile_visibility_kernel<<<grid_for(pairs, 256), 256, 0, cuda_ctx.stream>>>(al->vis, al->spans, al->rank, al->cp,
                                                                              B, al->tile, al->tiles);
    cudaCheckLaunch();
}

// The batch's coordinates from the sharder's layout (host): uploaded, gathered from
// every rank of the group (a collective: every rank calls it), tiled.
static void attention_layout_cuda_prepare(AttentionLayoutCuda *al, Comm *comm, const ShardLayout *lay) {
    attention_layout_cuda_check(al, lay);
    size_t n = (size_t)al->B * al->T;
    cuda_upload(al->own_coords, lay->global_index, n * sizeof(int));
    cuda_upload(al->own_coords + n, lay->document, n * sizeof(int));
    comm->all_gather(comm, al->own_coords, al->coords, 2 * n * sizeof(int));
    attention_layout_cuda_tile(al);
}

// shared index[R], document[R] <- the coordinates of tokens [row0, row0 + R) (0 past T)
template <int R, int THREADS>
__device__ static __forceinline__ void coords_load(int *dst, const int *index, const int *document, int row0, int T) {
    for (int r = threadIdx.x; r < R; r += THREADS) {
        int in = row0 + r < T;
        dst[r] = in ? index[row0 + r] : 0;
        dst[R + r] = in ? document[row0 + r] : 0;
    }
}

// whether query row qr of the tile at q0 sees key kc of the tile at k0; q_coords:
// the query tile's indices then documents (QR each), k_coords the key tile's (KR each)
template <int QR, int KR>
__device__ static __forceinline__ int tile_pair_sees(const int *q_coords, const int *k_coords, int q0, int qr, int k0,
                                                     int kc, int T) {
    return q0 + qr < T && k0 + kc < T &&
           pair_visible(q_coords[qr], q_coords[QR + qr], k_coords[kc], k_coords[KR + kc]);
}

// The coordinates of the two rows a lane holds of its warp's 16 in the mma's
// accumulator layout (g and g + 8, llmc/mma.cuh), kept in registers across a loop:
// from a tile's coordinates in shared memory (indices then documents, N each),
// row0 the warp's first row in the tile, pos0 the tile's first position in the
// sequence of T.
typedef struct { int index[2], document[2], in[2]; } LaneRows;

template <int N>
__device__ static __forceinline__ LaneRows lane_rows_load(const int *coords, int row0, int pos0, int T) {
    int g = threadIdx.x % WARP_SIZE >> 2;
    LaneRows r;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        int row = row0 + g + 8 * i;
        r.index[i] = coords[row];
        r.document[i] = coords[N + row];
        r.in[i] = pos0 + row < T;
    }
    return r;
}

// s[n][i] (row g + 8 (i / 2), column 8 n + 2 t + i % 2 of the lane's accumulators)
// <- -inf where the row and the column cannot see each other: the rows' coordinates
// in rows, the columns' in shared memory (cols: indices then documents, N each; the
// tile's column 0 at position col0 of T). ROWS_ARE_QUERIES: the rows are queries
// (Q K^T) or keys (K Q^T). A column pair is read with one 8-byte load per coordinate.
template <int NT, int N, bool ROWS_ARE_QUERIES>
__device__ static __forceinline__ void scores_mask(float s[NT][4], const LaneRows &rows, const int *cols, int col0,
                                                   int T) {
    int t = threadIdx.x % 4;
    #pragma unroll
    for (int n = 0; n < NT; n++) {
        int c = 8 * n + 2 * t;
        int2 index = *(const int2 *)&cols[c], document = *(const int2 *)&cols[N + c];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = i >> 1, ci = (i & 1) ? index.y : index.x, cd = (i & 1) ? document.y : document.x;
            int sees = ROWS_ARE_QUERIES ? pair_visible(rows.index[r], rows.document[r], ci, cd)
                                        : pair_visible(ci, cd, rows.index[r], rows.document[r]);
            if (!(rows.in[r] && col0 + c + (i & 1) < T && sees)) { s[n][i] = -INFINITY; }
        }
    }
}

#endif // CP_BLOCK_MASK_CUH
