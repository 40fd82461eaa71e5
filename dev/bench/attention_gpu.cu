/*
Benchmark of the GPU block attention (cp/attention_block.cuh) on one GPU, no MPI:
one rank's queries against its own block (causal, the identity layout), forward
and backward through the ring's verbs at cp 1, as the trainer calls them (in the
BF16 build that includes writing the fp32 output and dQ to bf16 once), timed with
CUDA events.

    make bench_attention_gpu [PRECISION=BF16]
    ./bench_attention_gpu -t 4096 -b 1 -nh 12 -hs 64 -f 1

The precision is the build's: PRECISION=BF16, bf16 activations and bf16 tensor
cores (-f has no effect); PRECISION=FP32, -f 1 TF32 tensor cores, -f 0 exact fp32.
Prints one line, naming the precision (bf16, tf32 or fp32): the median of -r timed repetitions (after 2 warm-up runs) of the
forward and of the backward, and their rates counted as FlashAttention does for a
causal mask: forward 4 B NH T^2 HS / 2 flops, backward 2.5 times the forward.

    ./bench_attention_gpu -k

prints instead, without a GPU, each block attention kernel of the build (every
head size and precision), one a line, tab-separated: its name as c++filt writes it
(without "void" and the arguments), its threads per block and the bytes of dynamic
shared memory its launch asks for, as attend_block_forward_cuda and
attend_block_backward_cuda launch it (dev/bench/kernel_figures.sh reads them).
*/
#include <cuda_runtime.h>
#include "cp/ring_attention.cuh"

// The one-rank group the attention's step preparation gathers over: a device copy.
static void self_all_gather(Comm *comm, const void *send, void *recv, size_t bytes) {
    (void)comm;
    cudaCheck(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, cuda_ctx.stream));
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median_ms(float *ms, int n) {
    qsort(ms, n, sizeof(float), compare_floats);
    return ms[n / 2];
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [-t T] [-b B] [-nh heads] [-hs 32|64|128] [-f 0|1] [-r repeats] | -k\n", argv0);
    exit(1);
}

// -k: the launch shape of every block attention kernel of the build
static void print_kernel_shapes(void) {
    for (int tf32 = 0; tf32 < 2; tf32++) {
        MmaPrecision precision = attention_precision(tf32);
        if (tf32 && precision == attention_precision(0)) { continue; } // the BF16 build has one
        for (int HS = 32; HS <= 128; HS *= 2) {
            attention_dispatch(precision, HS, [&](auto kernel) {
                constexpr MmaPrecision P = decltype(kernel)::P;
                constexpr int HS_ = decltype(kernel)::HS;
                if constexpr (P == MMA_BF16) {
                    using Ft = FlashTile<HS_>;
                    printf("attend_forward_flash_kernel<%d>\t%d\t%zu\n", HS_, Ft::FWD_THREADS,
                           flash_forward_shared_bytes<HS_>());
                    printf("attend_backward_dq_flash_kernel<%d>\t%d\t%zu\n", HS_, Ft::DQ_THREADS,
                           flash_backward_dq_shared_bytes<HS_>());
                    printf("attend_backward_dkv_flash_kernel<%d>\t%d\t%zu\n", HS_, Ft::DKV_THREADS,
                           flash_backward_dkv_shared_bytes<HS_>());
                } else {
                    const char *names[3] = {"attend_forward_kernel", "attend_backward_dq_kernel",
                                            "attend_backward_dkv_kernel"};
                    size_t floats[3] = {forward_shared_floats<P, HS_>(), backward_shared_floats<P, HS_>(),
                                        backward_shared_floats<P, HS_>()};
                    for (int k = 0; k < 3; k++) {
                        printf("%s<(MmaPrecision)%d, %d>\t%d\t%zu\n", names[k], (int)P, HS_,
                               AttnTile<P, HS_>::THREADS, floats[k] * sizeof(float));
                    }
                }
            });
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "-k") == 0) {
        print_kernel_shapes();
        return 0;
    }
    int T = 1024, B = 1, NH = 12, HS = 64, tf32 = 1, repeats = 20;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) { usage(argv[0]); }
        int v = atoi(argv[i + 1]);
        if (strcmp(argv[i], "-t") == 0) { T = v; }
        else if (strcmp(argv[i], "-b") == 0) { B = v; }
        else if (strcmp(argv[i], "-nh") == 0) { NH = v; }
        else if (strcmp(argv[i], "-hs") == 0) { HS = v; }
        else if (strcmp(argv[i], "-f") == 0) { tf32 = v; }
        else if (strcmp(argv[i], "-r") == 0) { repeats = v; }
        else { usage(argv[0]); }
    }
    if (T < 1 || B < 1 || NH < 1 || repeats < 1 || !attention_head_size_supported(HS)) { usage(argv[0]); }
    char why[256];
    if (cuda_device_count(why, sizeof(why)) == 0) { fatal("%s: this benchmark needs a GPU", why); }
    cuda_init(0, tf32);
    int C = NH * HS;
    size_t BT = (size_t)B * T;

    Comm self;
    memset(&self, 0, sizeof(self));
    self.size = 1;
    self.all_gather = self_all_gather;
    // the identity layout: token t at global index t, one document
    ShardLayout lay;
    memset(&lay, 0, sizeof(lay));
    lay.B = B; lay.original_seq_len = lay.padded_seq_len = lay.local_len = T;
    lay.global_index = (int *)mallocCheck(BT * sizeof(int));
    lay.document = (int *)callocCheck(BT, sizeof(int));
    for (size_t i = 0; i < BT; i++) { lay.global_index[i] = (int)(i % T); }

    RingAttentionCuda ring;
    ring_attention_cuda_init(&ring, &self, B, T, C, NH);
    ring_attention_cuda_bind(&ring, &lay);
    // random activations (never zeros: they would hide wrong indexing and time differently)
    floatX *host = (floatX *)mallocCheck(BT * 3 * C * sizeof(floatX));
    unsigned long long state = 88172645463325252ull;
    for (size_t i = 0; i < BT * 3 * C; i++) {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        host[i] = to_floatX((float)((state >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0));
    }
    floatX *qkv = (floatX *)cudaMallocCheck(BT * 3 * C * sizeof(floatX));
    floatX *dqkv = (floatX *)cudaMallocCheck(BT * 3 * C * sizeof(floatX));
    floatX *out = (floatX *)cudaMallocCheck(BT * C * sizeof(floatX));
    floatX *dout = (floatX *)cudaMallocCheck(BT * C * sizeof(floatX));
    float *lse = (float *)cudaMallocCheck(BT * NH * sizeof(float));
    cuda_upload_pageable(qkv, host, BT * 3 * C * sizeof(floatX)); // large and once: not staged
    cuda_upload_pageable(dout, host, BT * C * sizeof(floatX));

    cudaEvent_t start, mid, end;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&mid));
    cudaCheck(cudaEventCreate(&end));
    float *fwd_ms = (float *)mallocCheck(repeats * sizeof(float)), *bwd_ms = (float *)mallocCheck(repeats * sizeof(float));
    for (int it = -2; it < repeats; it++) {
        cudaCheck(cudaEventRecord(start, cuda_ctx.stream));
        ring_attention_cuda_forward(&ring, out, lse, qkv);
        cudaCheck(cudaEventRecord(mid, cuda_ctx.stream));
        ring_attention_cuda_backward(&ring, dqkv, dout, qkv, out, lse);
        cudaCheck(cudaEventRecord(end, cuda_ctx.stream));
        cudaCheck(cudaEventSynchronize(end));
        if (it >= 0) {
            cudaCheck(cudaEventElapsedTime(&fwd_ms[it], start, mid));
            cudaCheck(cudaEventElapsedTime(&bwd_ms[it], mid, end));
        }
    }
    float f = median_ms(fwd_ms, repeats), b = median_ms(bwd_ms, repeats);
    double flops = 4.0 * B * NH * (double)T * T * HS / 2.0;
    MmaPrecision precision = ring.queries.precision;
    const char *name = precision == MMA_BF16 ? "bf16" : precision == MMA_TF32 ? "tf32" : "fp32";
    printf("block attention %s B %d T %d NH %d HS %d: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n",
           name, B, T, NH, HS, f, flops / (f * 1e9), b, 2.5 * flops / (b * 1e9));
    cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(dqkv)); cudaCheck(cudaFree(out));
    cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(lse));
    ring_attention_cuda_free(&ring);
    free(host); free(fwd_ms); free(bwd_ms); free(lay.global_index); free(lay.document);
    cuda_free_context();
    return 0;
}
