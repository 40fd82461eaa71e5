/*
exp(x) in fp32 written as plain arithmetic, so that a loop calling it vectorises.

glibc's expf is a function call the compiler cannot vectorise (its vector twin is
only declared under -ffast-math), and the attention softmax and GELU call exp once
per element of long arrays. This one is inlined and branch-free:

    n = round(x / ln 2),  r = x - n ln 2   (ln 2 split in two, so r is exact)
    exp(x) = 2^n * exp(r),  |r| <= ln 2 / 2,  exp(r) by its Taylor series to r^7

The series' truncation is r^8 / 8! < 6e-9 relative, below fp32's 6e-8, so the
result is within a few ulp of expf (Horner's rounding). 2^n is built in the
exponent bits. Out of range: x < -87 gives 0 (expf gives values below 1.7e-38
there), x > 88 gives +inf (expf overflows at 88.72); -inf gives 0, NaN stays NaN.
*/
#ifndef LLMC_SIMD_EXP_H
#define LLMC_SIMD_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float simd_expf(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f;         // 355 / 512: n * ln2_hi is exact for |n| <= 128
    const float ln2_lo = -2.12194440054690583e-4f; // ln 2 - ln2_hi
    const float round_magic = 12582912.0f;     // 1.5 * 2^23: adding it rounds to an integer
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x); // NaN passes through
    float t = xc * log2e + round_magic;
    float n = t - round_magic;                 // round(xc / ln 2), in [-126, 127]
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t t_bits;
    memcpy(&t_bits, &t, sizeof(t_bits));
    // t's bits are the magic's plus n: n + 127 is the biased exponent of 2^n
    uint32_t scale_bits = (t_bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &scale_bits, sizeof(scale));
    float e = p * scale;
    e = x < -87.0f ? 0.0f : e;
    e = x > 88.0f ? INFINITY : e;
    return e;
}

#endif // LLMC_SIMD_EXP_H
