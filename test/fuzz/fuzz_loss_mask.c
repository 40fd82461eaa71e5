/*
libFuzzer target: the loss mask file parser (llmc/loss_mask.h, loss_mask_file_read),
the exact code the trainers run on every mask beside a -i/-j token file. Any input
must be either accepted or rejected with a reason, never crash, read out of bounds
or overflow; it is read as the mask of a token file of 8 tokens, and of one of as
many tokens as the input has bytes past the header (so that the count matches and
the bytes themselves are parsed).
*/
#include "fuzz_input.h"
#include "llmc/loss_mask.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t counts[2] = {8, size > 1024 ? size - 1024 : 0};
    for (int k = 0; k < 2; k++) {
        FuzzInput in = fuzz_input_open(data, size);
        uint64_t fingerprint = FNV_OFFSET, kept = 0;
        char why[256];
        if (loss_mask_file_read(in.fp, (long)size, counts[k], &fingerprint, &kept, why, sizeof(why)) == 0) {
            // accepted: then the file is exactly as big as its token count says, every
            // byte 0 or 1, and it keeps its 1 bytes but the first (no target's)
            FUZZ_ASSERT(size == 1024 + counts[k]);
            uint64_t ones = 0;
            for (size_t i = 1024; i < size; i++) {
                FUZZ_ASSERT(data[i] <= 1);
                ones += i > 1024 && data[i];
            }
            FUZZ_ASSERT(kept == ones);
        } else {
            FUZZ_ASSERT(why[0] != '\0');
        }
        fuzz_input_close(&in);
    }
    return 0;
}
