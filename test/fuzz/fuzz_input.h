/*
What the fuzz targets share: the fuzzer's bytes as a FILE (the parsers read
files), and an assertion that crashes, so libFuzzer reports it with the input.
*/
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(cond) do { if (!(cond)) { fprintf(stderr, "fuzz assertion failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); abort(); } } while (0)

typedef struct {
    FILE *fp;
    uint8_t *copy; // fmemopen needs a writable buffer of at least one byte
} FuzzInput;

static FuzzInput fuzz_input_open(const uint8_t *data, size_t size) {
    FuzzInput in;
    in.copy = (uint8_t *)malloc(size > 0 ? size : 1);
    FUZZ_ASSERT(in.copy != NULL);
    if (size > 0) { memcpy(in.copy, data, size); }
    // an empty input is a one-byte stream that the parsers are told has size 0
    in.fp = fmemopen(in.copy, size > 0 ? size : 1, "rb");
    FUZZ_ASSERT(in.fp != NULL);
    return in;
}

static void fuzz_input_close(FuzzInput *in) {
    fclose(in->fp);
    free(in->copy);
}

#endif // FUZZ_INPUT_H
