/*
The loss of a sharded batch on the GPU (cp/loss.h), kept on the device so that a
training step waits for the device once, at its end.

Each rank sums the losses of its valid targets and counts them, on the device, in
double; the sums go through the transport's all_reduce_sum (device memory) over
the whole world. A training step's micro-batches add theirs into the step's
StepLoss, which lives on the device with everything the step works out on the
way: each micro-batch's valid targets (counted on the host from the sharder's
targets, summed over the world on the device) and the loss weight made of them,
which the classifier reads from device memory; and at the end the gradients' sum
of squares. The functions of cp/loss.h do the arithmetic, in one-thread kernels,
so that every number is the CPU twin's. step_end_cuda copies the whole record to
pinned host memory and waits for it: the step's one wait for the device.

Validation and evaluation batches bring their statistics to the host at once
(loss_stats_download): their callers need them before the next batch.
*/
#ifndef CP_LOSS_CUH
#define CP_LOSS_CUH

#include "comm.h"
#include "loss.h"
#include "../llmc/adamw.cuh"
#include "../llmc/cuda_common.cuh"
#include "../llmc/cuda_reduce.cuh"

#define LOSS_THREADS 512

// A training step's loss on the device, and the host's copy of it
typedef struct {
    StepLoss step;        // the step's statistics and weight basis
    double norm_squared;  // the sum of squares of the step's summed gradients
    LossStats batch;      // the last batch's statistics, summed over the world
    double valid_count;   // the micro-batch's valid targets, summed over the world
    float weight;         // the micro-batch's loss weight, which the classifier reads
} StepLossRecord;

typedef struct {
    StepLossRecord *device;
    StepLossRecord *host; // pinned: what step_end_cuda reads
} StepLossCuda;

static void step_loss_cuda_init(StepLossCuda *s) {
    s->device = (StepLossRecord *)cudaMallocCheck(sizeof(StepLossRecord));
    s->host = (StepLossRecord *)cudaMallocHostCheck(sizeof(StepLossRecord));
}

static void step_loss_cuda_free(StepLossCuda *s) {
    cuda_sync(); // the last copy into host
    cudaCheck(cudaFree(s->device));
    cudaCheck(cudaFreeHost(s->host));
}

// stats = the sum of the losses of valid targets and their number; one block
// losses, targets: (n)
__global__ static void local_loss_stats_kernel(LossStats *stats, const float *losses, const int *targets, size_t n) {
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
        stats->loss_sum = sum;
        stats->valid_count = count;
    }
}

// stats: device, left holding the local sums
static void local_loss_stats_cuda(LossStats *stats, const float *losses, const int *targets, size_t n) {
    local_loss_stats_kernel<<<1, LOSS_THREADS, 0, cuda_ctx.stream>>>(stats, losses, targets, n);
    cudaCheckLaunch();
}

// The batch's statistics over `comm` (the world): this rank's (n) losses and
// targets (device), summed on the device into s->device->batch, which is returned
static LossStats *global_loss_stats_cuda(Comm *comm, StepLossCuda *s, const float *losses, const int *targets,
                                         size_t n) {
    LossStats *batch = &s->device->batch;
    local_loss_stats_cuda(batch, losses, targets, n);
    comm->all_reduce_sum(comm, batch, 2, COMM_DOUBLE);
    return batch;
}

// device statistics to the host (a validation or evaluation batch's: waits)
static LossStats loss_stats_download(const LossStats *stats) {
    LossStats host;
    cuda_download(&host, stats, sizeof(host));
    return host;
}

// The micro-batch's valid targets over `comm` (the world): counted on the host
// from this rank's (n) HOST targets, summed on the device into
// s->device->valid_count, which is returned
static double *global_valid_count_cuda(Comm *comm, StepLossCuda *s, const int *targets, size_t n) {
    double count = local_valid_count(targets, n);
    double *global = &s->device->valid_count;
    cuda_upload(global, &count, sizeof(count));
    comm->all_reduce_sum(comm, global, 1, COMM_DOUBLE);
    return global;
}

__global__ static void step_loss_start_kernel(StepLossRecord *r) {
    step_loss_start(&r->step);
}

// the step's loss on the device back to none, before its first micro-batch
static void step_loss_start_cuda(StepLossCuda *s) {
    step_loss_start_kernel<<<1, 1, 0, cuda_ctx.stream>>>(s->device);
    cudaCheckLaunch();
}

__global__ static void step_loss_weight_kernel(StepLossRecord *r, const double *global_valid_count, int micro_steps) {
    r->weight = step_loss_weight(&r->step, *global_valid_count, micro_steps);
}

// The loss weight of the step's next micro-batch (step_loss_weight of cp/loss.h,
// on the device); returns the device float the classifier reads.
// global_valid_count: device, the micro-batch's valid targets of the world
static const float *step_loss_weight_cuda(StepLossCuda *s, const double *global_valid_count, int micro_steps) {
    step_loss_weight_kernel<<<1, 1, 0, cuda_ctx.stream>>>(s->device, global_valid_count, micro_steps);
    cudaCheckLaunch();
    return &s->device->weight;
}

__global__ static void step_loss_add_kernel(StepLossRecord *r, const LossStats *batch) {
    step_loss_add(&r->step, *batch);
}

// a micro-batch's statistics (device, summed over the world) into the step's
static void step_loss_add_cuda(StepLossCuda *s, const LossStats *batch) {
    step_loss_add_kernel<<<1, 1, 0, cuda_ctx.stream>>>(s->device, batch);
    cudaCheckLaunch();
}

// The end of the step (step_end_of of cp/loss.h) from the device: the step's
// record to the host, its norm_squared filled by the caller (the gradients summed
// over the world: cp/position_table.cuh), and the step's one wait for the device.
static StepEnd step_end_cuda(StepLossCuda *s) {
    cudaCheck(cudaMemcpyAsync(s->host, s->device, sizeof(*s->host), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_sync();
    return step_end_of(&s->host->step, s->host->norm_squared);
}

#endif // CP_LOSS_CUH
