/*
The loss of a sharded batch on the GPU (cp/loss.h): each rank sums the losses of
its valid targets and counts them, on the device, in double; the sums go through
the transport's all_reduce_sum (device memory) over the whole world, and only the
two numbers come back to the host, as the LossStats of cp/loss.h.
*/
#ifndef CP_LOSS_CUH
#define CP_LOSS_CUH

#include "comm.h"
#include "loss.h"
#include "../llmc/cuda_common.cuh"

#define LOSS_THREADS 512

// stats[0] = sum of the losses of valid targets, stats[1] = their number; one block
// losses, targets: (n)
__global__ static void local_loss_stats_kernel(double *stats, const float *losses, const int *targets, size_t n) {
    __shared__ double shared[WARP_SIZE];
    double sum = 0.0, count = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        if (targets[i] == IGNORE_INDEX) { continue; }
        sum += losses[i];
        count += 1.0;
    }
    sum = block_reduce_sum_double(sum, shared);
    count = block_reduce_sum_double(count, shared);
    if (threadIdx.x == 0) {
        stats[0] = sum;
        stats[1] = count;
    }
}

// stats: device double[2], left holding the local sums
static void local_loss_stats_cuda(double *stats, const float *losses, const int *targets, size_t n) {
    local_loss_stats_kernel<<<1, LOSS_THREADS, 0, cuda_ctx.stream>>>(stats, losses, targets, n);
    cudaCheckLaunch();
}

// Sums the local stats over `comm` (device memory) and brings them to the host.
static LossStats global_loss_stats_cuda(Comm *comm, double *stats) {
    comm->all_reduce_sum(comm, stats, 2, COMM_DOUBLE);
    double host[2];
    cuda_download(host, stats, sizeof(host));
    LossStats s = {host[0], host[1]};
    return s;
}

// The valid targets of the global batch: counted on the host from this rank's
// (n) HOST targets, summed over `comm` (device memory) through stats, a device double[2].
static double global_valid_count_cuda(Comm *comm, double *stats, const int *targets, size_t n) {
    double count = local_valid_count(targets, n);
    cuda_upload(stats, &count, sizeof(count));
    comm->all_reduce_sum(comm, stats, 1, COMM_DOUBLE);
    cuda_download(&count, stats, sizeof(count));
    return count;
}

#endif // CP_LOSS_CUH
