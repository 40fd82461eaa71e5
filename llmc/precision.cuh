/*
The GPU trainer's storage precision, chosen at build time as llm.c users know it:

    make train_gpt2cp PRECISION=BF16    (the default) activations, matmul inputs,
                                        attention tiles and the K/V blocks of the
                                        ring in bf16
    make train_gpt2cp PRECISION=FP32    fp32 everywhere: the build validated
                                        against the CPU twin (DESIGN section 5)

floatX is the type of what the precision governs. Whatever the build, these stay
fp32: the master weights and AdamW moments, the gradients of the parameters,
layernorm statistics, the softmax and log-sum-exp, the losses, the gradient norm,
and every accumulation (matmuls and tensor-core products add in fp32; bf16 is a
storage format here, never an arithmetic one).

Conversions go through to_float / to_floatX only: float -> bf16 rounds to nearest,
ties to even (cvt.rn.bf16.f32); the CUDA emulation (dev/cuda/emu/cuda_bf16.h)
rounds bit for bit the same way, so the emulated BF16 build stores the bits a GPU
stores.
*/
#ifndef LLMC_PRECISION_CUH
#define LLMC_PRECISION_CUH

#include <cuda_bf16.h>
#include <cublas_v2.h>

#if defined(ENABLE_FP32) == defined(ENABLE_BF16)
#error "build with exactly one of -DENABLE_FP32 and -DENABLE_BF16 (make PRECISION=FP32|BF16)"
#endif

#ifdef ENABLE_FP32
typedef float floatX;
#define FLOATX_CUDA_TYPE CUDA_R_32F
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define FLOATX_CUDA_TYPE CUDA_R_16BF
#define PRECISION_NAME "bf16"
#endif

__host__ __device__ static __forceinline__ float to_float(float x) { return x; }
__host__ __device__ static __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__host__ __device__ static __forceinline__ floatX to_floatX(float x) {
#ifdef ENABLE_FP32
    return x;
#else
    return __float2bfloat16_rn(x);
#endif
}

#endif // LLMC_PRECISION_CUH
