/*
libFuzzer target: the tokenizer parser (llmc/tokenizer.h, tokenizer_read), the
code behind -tk FILE. The model's vocabulary is taken from the input when it is
small, so that short inputs reach the token table; otherwise GPT-2's 50257.
*/
#include "fuzz_input.h"
#include "llmc/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int vocab = 50257;
    if (size >= 12) {
        int declared;
        memcpy(&declared, data + 8, sizeof(int));
        if (declared > 0 && declared <= 4096) { vocab = declared; }
    }
    FuzzInput in = fuzz_input_open(data, size);
    Tokenizer t;
    char why[256];
    if (tokenizer_read(&t, in.fp, (long)size, vocab, why, sizeof(why)) == 0) {
        for (int i = 0; i < t.vocab_size; i++) { FUZZ_ASSERT(tokenizer_decode(&t, i) != NULL); }
        FUZZ_ASSERT(tokenizer_decode(&t, t.vocab_size) == NULL);
        tokenizer_free(&t);
    } else {
        FUZZ_ASSERT(why[0] != '\0');
    }
    fuzz_input_close(&in);
    return 0;
}
