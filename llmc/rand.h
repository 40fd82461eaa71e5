/*
Random numbers. Two generators, each seeded alike on every rank so that every
rank draws alike:
  - splitmix64 (Rng): small and fast, for sampling and the tests' inputs;
  - llm.c's Mersenne Twister (Mt19937), for what must match llm.c draw for draw:
    the random init of -e dN and the shuffled order of the training data.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stdint.h>
#include <stddef.h>

#ifndef M_PI // strict C modes leave it out
#define M_PI 3.14159265358979323846
#endif

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

// ----------------------------------------------------------------------------
// llm.c's Mersenne Twister (llmc/rand.h there, numerically PyTorch's): the random
// init of -e dN and the shuffling of the training data draw from it, so that the
// same seed gives llm.c's weights and llm.c's batch order.

#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t state[MT_N];
    int left;      // outputs left before the state is regenerated
    int next;      // index of the next output in state
} Mt19937;

// Matsumoto and Nishimura's init_genrand
static void mt_seed(Mt19937 *mt, uint32_t seed) {
    mt->state[0] = seed;
    for (uint32_t j = 1; j < MT_N; j++) {
        mt->state[j] = 1812433253u * (mt->state[j - 1] ^ (mt->state[j - 1] >> 30)) + j;
    }
    mt->left = 1;
    mt->next = 0;
}

// the next 624 words of the recurrence
static void mt_regenerate(Mt19937 *mt) {
    uint32_t *s = mt->state;
    for (int j = 0; j < MT_N; j++) {
        uint32_t y = (s[j] & 0x80000000u) | (s[(j + 1) % MT_N] & 0x7fffffffu);
        s[j] = s[(j + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    mt->left = MT_N;
    mt->next = 0;
}

static uint32_t mt_u32(Mt19937 *mt) {
    if (--mt->left <= 0) { mt_regenerate(mt); }
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

// uniform in [0, 1): 24 bits as a float, or 53 bits as a double
static float mt_float(Mt19937 *mt) { return (float)(mt_u32(mt) & 0xffffffu) * (1.0f / 16777216.0f); }

static double mt_double(Mt19937 *mt) {
    uint64_t hi = mt_u32(mt);
    uint64_t x = (hi << 32) | mt_u32(mt);
    return (double)(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Box-Muller in float over 16 uniforms in place: pairs (t, t + 8) become normals
static void mt_box_muller_16(float *x, float mean, float std) {
    for (int t = 0; t < 8; t++) {
        float radius = sqrtf(-2.0f * logf(1.0f - x[t] + 1e-12f));
        float theta = (float)(2.0 * M_PI * x[t + 8]);
        x[t] = radius * cosf(theta) * std + mean;
        x[t + 8] = radius * sinf(theta) * std + mean;
    }
}

// out[i] ~ N(mean, std^2), drawn as PyTorch's normal_: n >= 16 draws n float
// uniforms and transforms them 16 at a time; a tail of n % 16 is covered by
// drawing 16 fresh uniforms for the last 16 slots. n < 16 draws double pairs.
static void mt_normal(Mt19937 *mt, float *out, size_t n, float mean, float std) {
    if (n >= 16) {
        for (size_t i = 0; i < n; i++) { out[i] = mt_float(mt); }
        for (size_t i = 0; i + 16 <= n; i += 16) { mt_box_muller_16(out + i, mean, std); }
        if (n % 16 != 0) {
            float *last = out + n - 16;
            for (int i = 0; i < 16; i++) { last[i] = mt_float(mt); }
            mt_box_muller_16(last, mean, std);
        }
        return;
    }
    for (size_t i = 0; i < n; i += 2) {
        float u1 = (float)mt_double(mt);
        float u2 = (float)mt_double(mt);
        float radius = sqrtf(-2.0f * logf(1.0f - u2 + 1e-12f));
        float theta = (float)(2.0 * M_PI * u1);
        out[i] = radius * cosf(theta) * std + mean;
        if (i + 1 < n) { out[i + 1] = (float)((double)(radius * sinf(theta)) * std + mean); }
    }
}

// Fisher-Yates from the back, as llm.c's random_permutation: perm becomes a
// random order of perm's values
static void mt_shuffle(Mt19937 *mt, int *perm, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mt_u32(mt) % (uint32_t)(i + 1));
        int tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

#endif // LLMC_RAND_H
