#pragma once
// bf16 for the CUDA emulation: the storage type and the conversions gpt2cp uses,
// bit for bit what the GPU does. float -> bf16 is cvt.rn.bf16.f32: round to
// nearest on the upper 16 bits of the fp32 pattern, ties to even; a NaN becomes
// the canonical 0x7fff; subnormals round like any other value (no flush).
// bf16 -> float is exact (the 16 bits become the upper half).
#include "cuda_emu.h"

struct __nv_bfloat16 { unsigned short __x; };

static inline unsigned short emu_bf16_bits_rn(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return 0x7fffu; }
    unsigned rest = u & 0xffffu, up = u >> 16;
    if (rest > 0x8000u || (rest == 0x8000u && (up & 1u))) { up++; }
    return (unsigned short)up;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { __nv_bfloat16 b; b.__x = emu_bf16_bits_rn(f); return b; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((unsigned)b.__x << 16); }
