/*
bf16 on the host: the upper 16 bits of an fp32 pattern (sign, 8 exponent bits, 7
mantissa bits), the storage type of llm.c's version 5 model files.

float -> bf16 rounds to nearest, ties to even, and turns every NaN into the
canonical 0x7fff: the bits the GPU's cvt.rn.bf16.f32 gives (and the CUDA
emulation's dev/cuda/emu/cuda_bf16.h), so that a model file written from the host
holds what a device would store. Subnormals round like any other value; a finite
value past the largest bf16 (by half its last step or more) becomes infinity, as
on the GPU. bf16 -> float is exact: the 16 bits become the upper half.
*/
#ifndef LLMC_BF16_H
#define LLMC_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_float(float x) {
    if (isnan(x)) { return 0x7fff; }
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    // Adding 0x7fff plus the lowest kept bit carries into the kept half exactly
    // when the dropped half is more than 0x8000, or is 0x8000 and the kept half is
    // odd: round to nearest, ties to even. A carry out of the mantissa steps the
    // exponent, and out of the largest exponent lands on infinity (0x7f80), as
    // rounding should. No input but a NaN could carry out of 32 bits (the largest
    // other pattern, -inf 0xff800000, gains at most 0x8000).
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

#endif // LLMC_BF16_H
