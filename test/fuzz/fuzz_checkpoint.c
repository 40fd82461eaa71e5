/*
libFuzzer target: the checkpoint parser (llmc/checkpoint.h, gpt2_read_checkpoint), the
code behind -e FILE. An accepted file is version 3 (fp32) or 5 (bf16), has a
valid configuration, the exact size its header describes at its version's bytes
per parameter, and only finite parameters.
*/
#include <math.h>
#include "fuzz_input.h"
#include "llmc/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzInput in = fuzz_input_open(data, size);
    GPT2 model;
    char why[512];
    if (gpt2_read_checkpoint(&model, in.fp, (long)size, why, sizeof(why)) == 0) {
        int32_t version;
        memcpy(&version, data + 4, sizeof(version));
        FUZZ_ASSERT(version == 3 || version == 5);
        FUZZ_ASSERT(size == 1024 + model.num_parameters * (version == 5 ? 2 : 4));
        FUZZ_ASSERT(model.config.channels % model.config.num_heads == 0);
        for (size_t i = 0; i < model.num_parameters; i++) { FUZZ_ASSERT(isfinite(model.params_memory[i])); }
        gpt2_free(&model);
    } else {
        FUZZ_ASSERT(why[0] != '\0');
    }
    fuzz_input_close(&in);
    return 0;
}
