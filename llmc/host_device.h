/*
HOST_DEVICE marks a function compiled for the CPU and, under nvcc, for the GPU as
well, so that a step the CPU twin's loops and a CUDA kernel both take is written
once: AdamW's update of one parameter (llmc/adamw.h), the mask rule
(cp/block_mask.h), the loss's arithmetic (cp/loss.h), among others. A C compiler
sees the function alone.
*/
#ifndef LLMC_HOST_DEVICE_H
#define LLMC_HOST_DEVICE_H

#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

#endif // LLMC_HOST_DEVICE_H
