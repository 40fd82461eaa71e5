/*
A small deterministic random number generator (splitmix64) with normal samples by
Box-Muller. Every rank seeded alike draws alike, so random initialisation and
sampling are reproducible and identical across ranks.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stdint.h>
#include <stddef.h>

typedef struct {
    uint64_t state;
} Rng;

static void rng_seed(Rng *rng, uint64_t seed) { rng->state = seed; }

static uint64_t rng_next_u64(Rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// uniform in [0, 1), 24 random bits
static float rng_uniform(Rng *rng) {
    return (float)(rng_next_u64(rng) >> 40) / 16777216.0f;
}

// out[i] ~ N(mean, std^2)
static void rng_normal(Rng *rng, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i += 2) {
        // 1 - u keeps the log argument in (0, 1]
        double u1 = 1.0 - (double)(rng_next_u64(rng) >> 11) / 9007199254740992.0;
        double u2 = (double)(rng_next_u64(rng) >> 11) / 9007199254740992.0;
        double radius = sqrt(-2.0 * log(u1));
        out[i] = mean + std * (float)(radius * cos(2.0 * M_PI * u2));
        if (i + 1 < n) { out[i + 1] = mean + std * (float)(radius * sin(2.0 * M_PI * u2)); }
    }
}

#endif // LLMC_RAND_H
