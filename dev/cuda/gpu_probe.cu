/*
The GPU check's first step (scripts/gpu_toolchain.sh): whether CUDA runs here at all.
A context (cudaFree(0)), one allocation, one tiny kernel and its result read back, so
that a driver older than the runtime, a device the runtime refuses or a broken
context shows as one line before any test, not as a list of failures later:

    ./gpu_probe         prints "gpu_probe: ok: ..." and exits 0, or "error: ..." and 1

`make gpu_probe`; gpu_prep builds it (sm_90), the CUDA emulation too (dev/cuda/emu/run.sh
gpu_call). compute-sanitizer runs it first, to learn whether it supports the device.
*/
#include <cuda_runtime.h>
#include <stdio.h>

#define PROBE_THREADS 64

// out[i] = 3 i + 1: a value the host computes too, so a kernel that did not run or
// ran wrong is told from one that did
__global__ void probe_kernel(int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 3 * i + 1;
}

// ends the probe with one line naming the call that failed and the runtime's reason
static int probe_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess) { return 0; }
    printf("error: %s failed: %s (%s)\n", what, cudaGetErrorString(err), cudaGetErrorName(err));
    return 1;
}

int main(void) {
    int count = 0;
    if (probe_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount")) { return 1; }
    if (count == 0) {
        printf("error: the CUDA runtime sees no device\n");
        return 1;
    }
    int sms = 0;
    cudaStream_t stream;
    int *device_out = NULL;
    int out[2 * PROBE_THREADS];
    if (probe_check(cudaSetDevice(0), "cudaSetDevice(0)") || probe_check(cudaFree(0), "cudaFree(0) (the context)") ||
        probe_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute") ||
        probe_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags") ||
        probe_check(cudaMalloc(&device_out, sizeof(out)), "cudaMalloc")) {
        return 1;
    }
    probe_kernel<<<2, PROBE_THREADS, 0, stream>>>(device_out);
    if (probe_check(cudaGetLastError(), "the probe kernel's launch") ||
        probe_check(cudaMemcpyAsync(out, device_out, sizeof(out), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync") ||
        probe_check(cudaStreamSynchronize(stream), "the probe kernel")) {
        return 1;
    }
    for (int i = 0; i < 2 * PROBE_THREADS; i++) {
        if (out[i] != 3 * i + 1) {
            printf("error: the probe kernel wrote %d at %d, not %d\n", out[i], i, 3 * i + 1);
            return 1;
        }
    }
    if (probe_check(cudaFree(device_out), "cudaFree") || probe_check(cudaStreamDestroy(stream), "cudaStreamDestroy")) {
        return 1;
    }
    printf("gpu_probe: ok: %d device(s), the first with %d SMs ran a kernel\n", count, sms);
    return 0;
}
