/*
Checksums of bytes: FNV-1a, 64 bit. Cheap, and enough to tell that two copies of
some bytes differ (a flipped bit in a file, another rank's optimizer state, a
token file that is not the one the run started with); not a defence against
anyone who wants to forge a match.
*/
#ifndef LLMC_CHECKSUM_H
#define LLMC_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

// folds n bytes into hash (start from FNV_OFFSET)
static uint64_t fnv1a(uint64_t hash, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) { hash = (hash ^ p[i]) * FNV_PRIME; }
    return hash;
}

#endif // LLMC_CHECKSUM_H
