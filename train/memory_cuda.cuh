/*
The GPU trainer's side of the memory estimate (train/memory.h): what its buffers
take, for train_gpt2cp and for the tools that ask its estimate without a GPU
(dev/bench/long_context_fit.cu).
*/
#ifndef TRAIN_MEMORY_CUDA_CUH
#define TRAIN_MEMORY_CUDA_CUH

#include "memory.h"
#include "../cp/attention.cuh"
#include "../llmc/gpt2.cuh"

// name: the trainer as the start-up table shows it; available: the GPU's free
// memory, or a function that cannot tell (-1) where no GPU is asked
static TrainerMemory trainer_memory_cuda(const char *name, const char *transport,
                                         int (*available)(size_t *, int *, char *, size_t)) {
    return (TrainerMemory){.name = name,
                           .transport = transport,
                           .attention_bytes = cp_attention_cuda_bytes,
                           .device_token_bytes = activations_cuda_extra_bytes,
                           .value_bytes = sizeof(floatX),
                           .weight_copy_bytes = GPT2_CUDA_WEIGHT_COPY_BYTES,
                           .host = 0,
                           .splits_position_table = 1,
                           .available = available,
                           .runtime_bytes = NULL};
}

#endif // TRAIN_MEMORY_CUDA_CUH
