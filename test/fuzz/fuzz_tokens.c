/*
libFuzzer target: the token file parser (llmc/dataloader.h, tokens_file_read),
the exact code the trainers run on every -i/-j file. Any input must be either
accepted or rejected with a reason, never crash, read out of bounds or overflow.
*/
#include "fuzz_input.h"
#include "llmc/dataloader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzInput in = fuzz_input_open(data, size);
    size_t ntok = 0;
    uint64_t fingerprint = FNV_OFFSET;
    char why[256];
    if (tokens_file_read(in.fp, (long)size, 50257, &ntok, &fingerprint, why, sizeof(why)) == 0) {
        // accepted: then the file is exactly as big as its header says
        FUZZ_ASSERT(size == 1024 + 2 * ntok);
    } else {
        FUZZ_ASSERT(why[0] != '\0');
    }
    fuzz_input_close(&in);
    return 0;
}
