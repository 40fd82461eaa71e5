/*
exp(x) in fp32 that the compiler can vectorise.

libm's expf is a function call the compiler cannot turn into vector code without
-ffast-math (glibc only declares its vector variants under __FAST_MATH__), so a
loop over 50304 logits pays one scalar call per element. vec_expf is plain
arithmetic, inlined and vectorised with the loop around it:

    x = n ln2 + r,  n = round(x / ln2),  |r| <= ln2 / 2
    exp(x) = 2^n exp(r)

exp(r) is its Taylor series to r^7 (the first term left out, r^8 / 8!, is below
6e-9 for |r| <= 0.347, a tenth of fp32's rounding), evaluated by Horner; ln2 is
split into a part exact in fp32 and the rest, so that r carries no rounding of
n ln2; 2^n is built in the exponent bits. The result is within about 2 ulp of
expf. Inputs below -87 (where exp is subnormal, below 1.7e-38) give 0, inputs
above 88.3 (the last with n <= 127; exp overflows fp32 at 88.72) +inf, which
GELU's exp(-2u) reaches for x below about -10; a NaN gives NaN.
*/
#ifndef LLMC_VEC_EXP_H
#define LLMC_VEC_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float vec_expf(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f;     // 355/512: n * ln2_hi is exact for |n| < 2^14
    const float ln2_lo = -2.12194440e-4f;  // ln2 - ln2_hi
    const float round_shift = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
    // clamped so that n fits the exponent; written so that a NaN clamps too (to -87:
    // every comparison with it is false), and only the last line lets it through
    float xc = x > -87.0f ? (x < 88.3f ? x : 88.3f) : -87.0f;
    float n = (xc * log2e + round_shift) - round_shift;
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; // 2^n, n in [-126, 127]
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    float e = x < -87.0f ? 0.0f : p * scale;
    e = x > 88.3f ? INFINITY : e;
    return x == x ? e : x; // NaN in, NaN out
}

#endif // LLMC_VEC_EXP_H
