/*
The emulator's checks, each against a kernel or a host program made to break the
rule it holds (run.sh runs every case in a process of its own and expects the
report named beside it), and correct programs close to them that must pass:

    checks_test CASE      runs one case; "list" prints them, one a line, tab-separated:
                          name, expected report, and a file the report must name
                          (where one is given)

A case that must pass prints "ok CASE" and exits 0; one that must be caught ends in
the emulator's report (exit 66), or, for a launch the chip refuses, in the error
the runtime returns, said here as "launch refused: ...".
*/
#include <initializer_list>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "cp/comm_mpi.h"
#include "llmc/async_copy.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/mma.cuh"

// ---- kernels

// a tile written by every thread, then read by others: the barrier between is needed
__global__ static void tile_reverse_kernel(float *out, const float *in, int with_barrier) {
    __shared__ float tile[128];
    tile[threadIdx.x] = in[threadIdx.x];
    if (with_barrier) { __syncthreads(); }
    out[blockIdx.x * 128 + threadIdx.x] = tile[127 - threadIdx.x];
}

// two tiles one after another in the same shared memory: the barrier before the
// reload keeps the first tile until every warp has read it
__global__ static void tile_reload_kernel(float *out, const float *in, int with_barrier) {
    __shared__ float tile[128];
    float sum = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        if (with_barrier) { __syncthreads(); }
        tile[threadIdx.x] = in[pass * 128 + threadIdx.x];
        __syncthreads();
        sum += tile[127 - threadIdx.x];
    }
    out[threadIdx.x] = sum;
}

// lane 0 of each warp writes, the others read: ordered by __syncwarp or not
__global__ static void warp_publish_kernel(float *out, int with_syncwarp) {
    __shared__ float slot[4];
    int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) { slot[warp] = (float)warp; }
    if (with_syncwarp) { __syncwarp(); }
    out[threadIdx.x] = slot[warp];
}

// every block writes out[0]
__global__ static void all_blocks_write_kernel(float *out) {
    if (threadIdx.x == 0) { out[0] = (float)blockIdx.x; }
}

// adjacent threads update adjacent bf16 in place: no two share a byte
__global__ static void bf16_in_place_kernel(__nv_bfloat16 *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * 2.0f); }
}

// reads a shared word no thread wrote
__global__ static void uninitialised_shared_kernel(float *out) {
    __shared__ float never[32];
    out[threadIdx.x] = never[threadIdx.x];
}

__global__ static void copy_kernel(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = in[i]; }
}

// the two halves of a block at two different barriers
__global__ static void divergent_barrier_kernel(float *out) {
    if (threadIdx.x < 32) {
        __syncthreads();
        out[threadIdx.x] = 1.0f;
    } else {
        out[threadIdx.x] = 2.0f;
        __syncthreads();
    }
}

// warp 0 and half of warp 1 at a barrier, the other half in a shuffle that needs them
__global__ static void stuck_kernel(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 48) {
        __syncthreads();
    } else {
        v = __shfl_xor_sync(FULL_MASK, v, 1);
    }
    out[threadIdx.x] = v;
}

// shuffles: mask without the caller; a lane of the mask gone; two call sites
__global__ static void shuffle_kernel(float *out, int mode) {
    float v = (float)threadIdx.x;
    if (mode == 0) { v = __shfl_xor_sync(0x0000ffffu, v, 1); }         // lanes 16..31 are not in it
    if (mode == 1) {
        if (threadIdx.x % 32 == 31) { return; }                         // lane 31 exits
        v = __shfl_xor_sync(FULL_MASK, v, 1);
    }
    if (mode == 2) {
        if (threadIdx.x % 2 == 0) { v = __shfl_xor_sync(FULL_MASK, v, 1); }
        else { v = __shfl_xor_sync(FULL_MASK, v, 1) + 1.0f; }
    }
    if (mode == 3) { v = __shfl_xor_sync(FULL_MASK, v, 16); }           // correct: every lane, one site
    out[threadIdx.x] = v;
}

// mma with a lane gone
__global__ static void partial_mma_kernel(float *out) {
    if (threadIdx.x == 5) { return; }
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    mma_m16n8k8_tf32(d, a, b, c);
    out[threadIdx.x] = d[0];
}

// ldmatrix x4 (x1 in LDM_X1_UNUSED_LANES) by each warp of two, of 16-byte rows the
// block wrote into a tile of 64, one row per thread. The first four modes write
// every row twice, a __syncthreads between, so that a read the second write is not
// ordered with finds written bytes either way and only racecheck can catch it.
enum {
    LDM_OTHER_WARP_BARRIER, // each thread writes its row; __syncthreads; each warp reads the other's (correct)
    LDM_OTHER_WARP,         // the same without the barrier
    LDM_SAME_WARP_SYNCWARP, // lane l writes row l ^ 1 of its warp's; __syncwarp; each lane gives its own (correct)
    LDM_SAME_WARP,          // the same without the __syncwarp
    LDM_HALF_WRITTEN,       // lanes 16..31 write nothing, their rows are read
    LDM_MISALIGNED,         // lane 3's row address 8 bytes into its row
    LDM_GLOBAL,             // lane 0's row address in device memory
    LDM_MISSING_LANE,       // lane 7 exits first
    LDM_X1_UNUSED_LANES,    // x1: lanes 8..31 write nothing and give misaligned addresses, which x1 does not read (correct)
};
template <int MATRICES> __global__ static void ldmatrix_kernel(float *out, const float *in, int mode) {
    __shared__ float4 tile[64];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    bool same_warp = mode == LDM_SAME_WARP || mode == LDM_SAME_WARP_SYNCWARP;
    int written = same_warp ? warp * 32 + (lane ^ 1) : threadIdx.x;
    bool writes = !((mode == LDM_HALF_WRITTEN && lane >= 16) || (mode == LDM_X1_UNUSED_LANES && lane >= 8));
    float *mine = (float *)&tile[written];
    for (int c = 0; c < 4 && writes; c++) { mine[c] = (float)(4 * written + c); }
    if (mode <= LDM_SAME_WARP) {
        __syncthreads();
        for (int c = 0; c < 4; c++) { mine[c] += 1.0f; }
    }
    if (mode == LDM_OTHER_WARP_BARRIER) { __syncthreads(); }
    if (mode == LDM_SAME_WARP_SYNCWARP) { __syncwarp(); }
    if (mode == LDM_MISSING_LANE && lane == 7) { return; }
    bool other_warp = mode == LDM_OTHER_WARP || mode == LDM_OTHER_WARP_BARRIER;
    const char *row = (const char *)&tile[other_warp ? (1 - warp) * 32 + lane : threadIdx.x];
    if ((mode == LDM_MISALIGNED && lane == 3) || (mode == LDM_X1_UNUSED_LANES && lane >= 8)) { row += 8; }
    if (mode == LDM_GLOBAL && lane == 0) { row = (const char *)in; }
    uint32_t r[4] = {0, 0, 0, 0};
    ldmatrix<MATRICES, false>(r, row);
    out[threadIdx.x] = (float)((r[0] ^ r[1] ^ r[2] ^ r[3]) & 0xffffu);
}

// cp.async by each of 64 threads of its 16 bytes of `in` (row t of (64, 4) floats)
// into row t of a shared tile, then a read of the next thread's row
enum {
    CPA_WAIT_BARRIER,         // issue, commit, wait, __syncthreads, read (correct)
    CPA_READ_BEFORE_WAIT,     // the issuer reads its own destination before its wait
    CPA_WRITE_IN_FLIGHT,      // the issuer writes its own destination before its wait
    CPA_BARRIER_BEFORE_WAIT,  // issue, commit, __syncthreads, wait, read: the barrier comes before the other's wait
    CPA_WAIT_NO_BARRIER,      // issue, commit, wait, read: no barrier after the other's wait
    CPA_WAIT_NO_COMMIT,       // issue, wait, __syncthreads, read: a wait covers committed groups only
    CPA_OLDER_GROUP,          // two groups (the second into a second tile), wait_group 1, read the first (correct)
    CPA_NEWER_GROUP,          // the same, read the second
    CPA_EXIT_IN_FLIGHT,       // issue, commit, exit without a wait
    CPA_MISALIGNED,           // the destination 8 bytes into its row
    CPA_SRC_BYTES_OVER,       // src_bytes 20 of a 16-byte copy
    CPA_TO_GLOBAL,            // the destination in device memory
    CPA_FROM_SHARED,          // the source in shared memory
    CPA_ZERO_FILL_PAST_END,   // src_bytes 0 with the source past the end of `in`: nothing read (correct)
    CPA_SOURCE_CHANGED,       // the issuer writes its source between issue and wait
    CPA_SOURCE_AFTER_BARRIER, // issue, __syncthreads, the next thread writes the same value to this source, wait
};
__global__ static void cp_async_kernel(float *out, float *in, int n, int mode) {
    __shared__ float4 tile[2][64];
    int t = threadIdx.x, next = (t + 1) % 64;
    float *src = in + 4 * t, *mine = (float *)&tile[0][t];
    void *dst = mine;
    int src_bytes = 16;
    if (mode == CPA_MISALIGNED) { dst = mine + 2; }
    if (mode == CPA_SRC_BYTES_OVER) { src_bytes = 20; }
    if (mode == CPA_TO_GLOBAL) { dst = out + 4 * t; }
    if (mode == CPA_FROM_SHARED) { src = (float *)&tile[1][t]; }
    if (mode == CPA_ZERO_FILL_PAST_END) { src = in + n + 4 * t; src_bytes = 0; }
    cp_async_cg16(dst, src, src_bytes);
    if (mode == CPA_OLDER_GROUP || mode == CPA_NEWER_GROUP) {
        cp_async_commit();
        cp_async_ca<16>(&tile[1][t], src, 16);
    }
    if (mode == CPA_READ_BEFORE_WAIT) { out[t] = mine[0]; }
    if (mode == CPA_WRITE_IN_FLIGHT) { mine[1] = 0.0f; }
    if (mode == CPA_SOURCE_CHANGED) { src[2] += 1.0f; }
    if (mode != CPA_WAIT_NO_COMMIT) { cp_async_commit(); }
    if (mode == CPA_EXIT_IN_FLIGHT) { return; }
    if (mode == CPA_BARRIER_BEFORE_WAIT || mode == CPA_SOURCE_AFTER_BARRIER) { __syncthreads(); }
    if (mode == CPA_SOURCE_AFTER_BARRIER) { in[4 * next] = 1.0f; }
    cp_async_wait<1>(); // lands the older of two groups, none of one
    if (mode != CPA_OLDER_GROUP && mode != CPA_NEWER_GROUP) { cp_async_wait<0>(); }
    if (mode != CPA_BARRIER_BEFORE_WAIT && mode != CPA_WAIT_NO_BARRIER) { __syncthreads(); }
    out[t] = ((float *)&tile[mode == CPA_NEWER_GROUP ? 1 : 0][next])[0];
    cp_async_wait<0>();
}

__global__ static void dynamic_shared_kernel(float *out, int n) {
    extern __shared__ float shared[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) { shared[i] = 1.0f; }
    __syncthreads();
    out[threadIdx.x] = shared[threadIdx.x];
}

__global__ static void __launch_bounds__(64) bounded_kernel(float *out) { out[threadIdx.x] = 1.0f; }

__global__ static void fill_value_kernel(float *out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = v; }
}

// ---- the cases

static float *device_floats(int n, float v) {
    float *d = (float *)cudaMallocCheck(n * sizeof(float));
    fill_value_kernel<<<grid_for(n, 256), 256, 0, cuda_ctx.stream>>>(d, v, n);
    cudaCheckLaunch();
    return d;
}

// a launch the chip refuses: the runtime's error, said
static void expect_refused(const char *what) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) { fatal("%s: launched", what); }
    printf("launch refused: %s: %s\n", what, cudaGetErrorString(err));
    MPI_Finalize();
    exit(0);
}

// The ldmatrix and cp.async cases: the kernel's mode, the report expected (as
// for `cases` below), and a file the report must name where there is one: an access
// to a cp.async's destination in flight is reported with the access's line and the
// line of the cp.async (in its wrapper, inlined into the kernel)
struct InstructionCase { const char *name; int mode; const char *expected, *names; };
static const InstructionCase ldmatrix_cases[] = {
    {"ldmatrix_other_warp_with_barrier", LDM_OTHER_WARP_BARRIER, "-", NULL},
    {"ldmatrix_other_warp_without_barrier", LDM_OTHER_WARP, "racecheck", NULL},
    {"ldmatrix_same_warp_with_syncwarp", LDM_SAME_WARP_SYNCWARP, "-", NULL},
    {"ldmatrix_same_warp_without_syncwarp", LDM_SAME_WARP, "racecheck", NULL},
    {"ldmatrix_uninitialised_rows", LDM_HALF_WRITTEN, "initcheck", NULL},
    {"ldmatrix_misaligned_row", LDM_MISALIGNED, "memcheck", NULL},
    {"ldmatrix_global_row", LDM_GLOBAL, "memcheck", NULL},
    {"ldmatrix_without_a_lane", LDM_MISSING_LANE, "synccheck", NULL},
    {"ldmatrix_x1_unused_lanes", LDM_X1_UNUSED_LANES, "-", NULL},
}, cp_async_cases[] = {
    {"cp_async_wait_then_barrier", CPA_WAIT_BARRIER, "-", NULL},
    {"cp_async_read_before_wait", CPA_READ_BEFORE_WAIT, "racecheck", "async_copy.cuh"},
    {"cp_async_write_before_wait", CPA_WRITE_IN_FLIGHT, "racecheck", "async_copy.cuh"},
    {"cp_async_barrier_before_wait", CPA_BARRIER_BEFORE_WAIT, "racecheck", "async_copy.cuh"},
    {"cp_async_wait_without_barrier", CPA_WAIT_NO_BARRIER, "racecheck|initcheck", NULL},
    {"cp_async_wait_without_commit", CPA_WAIT_NO_COMMIT, "racecheck", "async_copy.cuh"},
    {"cp_async_wait_1_older_group", CPA_OLDER_GROUP, "-", NULL},
    {"cp_async_wait_1_newer_group", CPA_NEWER_GROUP, "racecheck", "async_copy.cuh"},
    {"cp_async_exit_in_flight", CPA_EXIT_IN_FLIGHT, "synccheck", "async_copy.cuh"},
    {"cp_async_misaligned", CPA_MISALIGNED, "memcheck", NULL},
    {"cp_async_src_bytes_over", CPA_SRC_BYTES_OVER, "memcheck", NULL},
    {"cp_async_to_global", CPA_TO_GLOBAL, "memcheck", NULL},
    {"cp_async_from_shared", CPA_FROM_SHARED, "memcheck", NULL},
    {"cp_async_zero_fill_past_end", CPA_ZERO_FILL_PAST_END, "-", NULL},
    {"cp_async_source_changed", CPA_SOURCE_CHANGED, "racecheck", "async_copy.cuh"},
    {"cp_async_source_written_after_barrier", CPA_SOURCE_AFTER_BARRIER, "racecheck", "async_copy.cuh"},
    {"cp_async_uninitialised_source", CPA_WAIT_BARRIER, "initcheck", NULL}, // from a fresh allocation
};
static const size_t LDMATRIX_CASES = sizeof(ldmatrix_cases) / sizeof(ldmatrix_cases[0]);
static const size_t CP_ASYNC_CASES = sizeof(cp_async_cases) / sizeof(cp_async_cases[0]);

// out, in: 1024 floats
static void run_instruction_case(const char *name, float *out, float *in) {
    cudaStream_t s = cuda_ctx.stream;
    for (size_t i = 0; i < LDMATRIX_CASES; i++) {
        if (strcmp(name, ldmatrix_cases[i].name) == 0) {
            if (ldmatrix_cases[i].mode == LDM_X1_UNUSED_LANES) {
                ldmatrix_kernel<1><<<1, 64, 0, s>>>(out, in, ldmatrix_cases[i].mode);
            } else {
                ldmatrix_kernel<4><<<1, 64, 0, s>>>(out, in, ldmatrix_cases[i].mode);
            }
            return;
        }
    }
    for (size_t i = 0; i < CP_ASYNC_CASES; i++) {
        if (strcmp(name, cp_async_cases[i].name) == 0) {
            float *src = strcmp(name, "cp_async_uninitialised_source") == 0 ? (float *)cudaMallocCheck(1024 * 4) : in;
            cp_async_kernel<<<1, 64, 0, s>>>(out, src, 1024, cp_async_cases[i].mode);
            return;
        }
    }
    fatal("unknown case '%s' (list: see checks_test list)", name);
}

// The index of name among the cases of one kernel (its mode argument), -1 if none.
static int variant(const char *name, std::initializer_list<const char *> names) {
    int i = 0;
    for (const char *n : names) {
        if (strcmp(name, n) == 0) { return i; }
        i++;
    }
    return -1;
}

static void run_case(const char *name) {
    cudaStream_t s = cuda_ctx.stream;
    float *out = device_floats(1024, 0.0f), *in = device_floats(1024, 1.0f);
    int v; // the case's variant of its kernel
    if ((v = variant(name, {"tile_without_barrier", "tile_with_barrier"})) >= 0) {
        tile_reverse_kernel<<<2, 128, 0, s>>>(out, in, v);
    } else if ((v = variant(name, {"reload_without_barrier", "reload_with_barrier"})) >= 0) {
        tile_reload_kernel<<<1, 128, 0, s>>>(out, in, v);
    } else if ((v = variant(name, {"publish_without_syncwarp", "publish_with_syncwarp"})) >= 0) {
        warp_publish_kernel<<<1, 128, 0, s>>>(out, v);
    } else if (strcmp(name, "blocks_write_one_word") == 0) {
        all_blocks_write_kernel<<<4, 32, 0, s>>>(out);
    } else if (strcmp(name, "bf16_neighbours") == 0) {
        __nv_bfloat16 *x = (__nv_bfloat16 *)cudaMallocCheck(256 * sizeof(__nv_bfloat16));
        cudaCheck(cudaMemsetAsync(x, 0, 256 * sizeof(__nv_bfloat16), s));
        bf16_in_place_kernel<<<2, 128, 0, s>>>(x, 256);
    } else if (strcmp(name, "uninitialised_shared") == 0) {
        uninitialised_shared_kernel<<<1, 32, 0, s>>>(out);
    } else if (strcmp(name, "uninitialised_device") == 0) {
        float *fresh = (float *)cudaMallocCheck(64 * sizeof(float));
        copy_kernel<<<1, 64, 0, s>>>(out, fresh, 64);
    } else if (strcmp(name, "past_the_end") == 0) {
        copy_kernel<<<5, 256, 0, s>>>(out, in, 1025);
    } else if (strcmp(name, "host_reads_device") == 0) {
        cuda_sync();
        printf("%f\n", in[3]);
    } else if (strcmp(name, "divergent_barrier") == 0) {
        divergent_barrier_kernel<<<1, 64, 0, s>>>(out);
    } else if (strcmp(name, "barrier_and_shuffle_stuck") == 0) {
        stuck_kernel<<<1, 64, 0, s>>>(out);
    } else if ((v = variant(name, {"shuffle_mask_without_caller", "shuffle_exited_lane", "shuffle_two_sites",
                                   "shuffle_whole_warp"})) >= 0) {
        shuffle_kernel<<<1, 32, 0, s>>>(out, v);
    } else if (strcmp(name, "mma_without_a_lane") == 0) {
        partial_mma_kernel<<<1, 32, 0, s>>>(out);
    } else if (strcmp(name, "shared_64k_without_attribute") == 0) {
        dynamic_shared_kernel<<<1, 128, 64 << 10, s>>>(out, 16 << 10);
        expect_refused("64 KiB of dynamic shared memory, no cudaFuncSetAttribute");
    } else if (strcmp(name, "shared_64k_with_attribute") == 0) {
        cudaCheck(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
        dynamic_shared_kernel<<<1, 128, 64 << 10, s>>>(out, 16 << 10);
    } else if (strcmp(name, "shared_over_227k") == 0) {
        if (cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10) ==
            cudaSuccess) { fatal("cudaFuncSetAttribute allowed 228 KiB"); }
        dynamic_shared_kernel<<<1, 128, 228 << 10, s>>>(out, 16 << 10);
        expect_refused("228 KiB of dynamic shared memory");
    } else if (strcmp(name, "grid_y_too_large") == 0) {
        copy_kernel<<<dim3(1, 65536), 32, 0, s>>>(out, in, 1);
        expect_refused("a grid of 65536 blocks in y");
    } else if (strcmp(name, "block_too_large") == 0) {
        copy_kernel<<<1, 1025, 0, s>>>(out, in, 1);
        expect_refused("a block of 1025 threads");
    } else if (strcmp(name, "past_launch_bounds") == 0) {
        bounded_kernel<<<1, 128, 0, s>>>(out);
    } else if (strcmp(name, "streams_without_event") == 0 || strcmp(name, "streams_with_event") == 0) {
        cudaStream_t other;
        cudaEvent_t written;
        cudaCheck(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
        copy_kernel<<<4, 256, 0, s>>>(out, in, 1024);
        if (strcmp(name, "streams_with_event") == 0) {
            cudaCheck(cudaEventRecord(written, s));
            cudaCheck(cudaStreamWaitEvent(other, written, 0));
        }
        copy_kernel<<<4, 256, 0, other>>>(in, out, 1024);
        cudaCheck(cudaStreamSynchronize(other));
    } else if (strcmp(name, "pinned_read_before_sync") == 0 || strcmp(name, "pinned_read_after_sync") == 0) {
        float *host;
        cudaCheck(cudaMallocHost((void **)&host, 1024 * sizeof(float)));
        cudaCheck(cudaMemcpyAsync(host, in, 1024 * sizeof(float), cudaMemcpyDeviceToHost, s));
        if (strcmp(name, "pinned_read_after_sync") == 0) { cudaCheck(cudaStreamSynchronize(s)); }
        printf("%f\n", host[17]);
    } else if (strcmp(name, "pinned_freed_in_use") == 0 || strcmp(name, "pinned_freed_after_sync") == 0) {
        // cudaFreeHost does not wait for the device: the copy into it must be done first
        float *host;
        cudaCheck(cudaMallocHost((void **)&host, 1024 * sizeof(float)));
        cudaCheck(cudaMemcpyAsync(host, in, 1024 * sizeof(float), cudaMemcpyDeviceToHost, s));
        if (strcmp(name, "pinned_freed_after_sync") == 0) { cudaCheck(cudaStreamSynchronize(s)); }
        cudaCheck(cudaFreeHost(host));
    } else if (strncmp(name, "ldmatrix_", 9) == 0 || strncmp(name, "cp_async_", 9) == 0) {
        run_instruction_case(name, out, in);
    } else {
        fatal("unknown case '%s' (list: see checks_test list)", name);
    }
    cuda_sync();
    printf("ok %s\n", name);
}

// every case and the report it must end in ("-" passes, "launch refused" is the
// runtime's error; a read that no barrier orders after its write may be seen before
// the write, as uninitialised, or after it, as a race: either catches it)
static const char *cases[][2] = {
    {"tile_with_barrier", "-"},            {"tile_without_barrier", "racecheck|initcheck"},
    {"reload_with_barrier", "-"},          {"reload_without_barrier", "racecheck"},
    {"publish_with_syncwarp", "-"},        {"publish_without_syncwarp", "racecheck|initcheck"},
    {"blocks_write_one_word", "racecheck"}, {"bf16_neighbours", "-"},
    {"uninitialised_shared", "initcheck"}, {"uninitialised_device", "initcheck"},
    {"past_the_end", "memcheck"},          {"host_reads_device", "memcheck"},
    {"divergent_barrier", "synccheck"},    {"barrier_and_shuffle_stuck", "synccheck"},
    {"shuffle_mask_without_caller", "synccheck"}, {"shuffle_exited_lane", "synccheck"},
    {"shuffle_two_sites", "synccheck"},    {"shuffle_whole_warp", "-"},
    {"mma_without_a_lane", "synccheck"},   {"shared_64k_without_attribute", "launch refused"},
    {"shared_64k_with_attribute", "-"},    {"shared_over_227k", "launch refused"},
    {"grid_y_too_large", "launch refused"}, {"block_too_large", "launch refused"},
    {"past_launch_bounds", "launch"},      {"streams_without_event", "racecheck"},
    {"streams_with_event", "-"},           {"pinned_read_before_sync", "racecheck"},
    {"pinned_read_after_sync", "-"},       {"pinned_freed_in_use", "racecheck|memcheck"},
    {"pinned_freed_after_sync", "-"},
};

int main(int argc, char **argv) {
    mpi_runtime_init(&argc, &argv);
    if (argc != 2) { fatal("usage: checks_test CASE | list"); }
    if (strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) { printf("%s\t%s\n", cases[i][0], cases[i][1]); }
        const InstructionCase *sets[2] = {ldmatrix_cases, cp_async_cases};
        size_t sizes[2] = {LDMATRIX_CASES, CP_ASYNC_CASES};
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < sizes[k]; i++) {
                const InstructionCase &c = sets[k][i];
                printf("%s\t%s\t%s\n", c.name, c.expected, c.names ? c.names : "");
            }
        }
    } else {
        cuda_init(0, 0);
        run_case(argv[1]);
    }
    MPI_Finalize();
    return 0;
}
