/*
loss_mask: writes the loss mask of an llm.c token file for "train only on the
answer" data (the trainers' -lm 1 reads it; format in llmc/loss_mask.h).

    make loss_mask
    ./loss_mask -i data/qa_train.bin -a "Answer:"                writes data/qa_train.mask
    ./loss_mask -i qa.bin -a "Answer:" -tk dev/data/gpt2_tokenizer.bin -o qa.mask

The data: documents, each opened by the tokenizer's EOT token (as llm.c's data
puts it before each), each a prompt, the marker text, then the answer, e.g.
"<|endoftext|>Question: Who wrote Emma? Answer: Jane Austen." The tokens are
decoded with the tokenizer (-tk) and the marker (-a) is found in the decoded
bytes of each document, so it may span several tokens. Then, per document:

    tokens up to and including the one that completes the marker   0 (the prompt)
    tokens after it                                                 1 (the answer)
    a document without the marker                                   0 throughout

and the EOT that opens the next document, which as a target is what ends this
one, counts when this document has an answer (so the model learns to stop after
it). Tokens before the file's first EOT form a document too. A mask byte belongs
to its token as a target (the prediction made at the token before it), so a
prompt is read as context but never learned.

It prints how many documents it found, how many had an answer, and how many
tokens are learned. Every file and flag is checked; a bad one ends with one line.
The mask is written to a temporary file beside -o and renamed into place once
whole, and -o is never the token file or the tokenizer, by any path
(llmc/tool_outputs.h): a failed run leaves the previous mask as it was.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../llmc/dataloader.h"
#include "../llmc/loss_mask.h"
#include "../llmc/tokenizer.h"
#include "../llmc/tool_outputs.h"
#include "../llmc/utils.h"

#define USAGE "usage: loss_mask -i TOKENS.bin -a MARKER [-tk TOKENIZER] [-o MASK] [-h] (default -tk " \
              "dev/data/gpt2_tokenizer.bin, -o TOKENS.mask)"

// The tokenizer at path, whatever its vocabulary.
static void load_tokenizer(Tokenizer *t, const char *path) {
    char why[256];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal("tokenizer '%s': %s", path, why); }
    int header[3];
    if (fread(header, sizeof(int), 3, fp) != 3) { fatal("tokenizer '%s': cannot read its header", path); }
    if (header[2] < 1 || header[2] > 65536) {
        fatal("tokenizer '%s': a vocabulary of %d tokens (token files hold 16-bit ids)", path, header[2]);
    }
    rewind(fp);
    if (tokenizer_read(t, fp, file_size_of(fp, path), header[2], why, sizeof(why)) != 0) {
        fatal("tokenizer '%s': %s", path, why);
    }
    fclose(fp);
}

// The tokens of an llm.c token file, validated against the tokenizer's vocabulary.
// Returns them (ntok of them) in a new array.
static uint16_t *load_tokens(const char *path, int vocab_size, size_t *ntok) {
    char why[256];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal("token file '%s': %s", path, why); }
    uint64_t fingerprint = FNV_OFFSET;
    if (tokens_file_read(fp, file_size_of(fp, path), vocab_size, ntok, &fingerprint, why, sizeof(why)) != 0) {
        fatal("token file '%s': %s (with the tokenizer's vocabulary of %d)", path, why, vocab_size);
    }
    uint16_t *tokens = (uint16_t *)mallocCheck((*ntok > 0 ? *ntok : 1) * sizeof(uint16_t));
    if (fseek(fp, (long)TOKENS_HEADER_BYTES, SEEK_SET) != 0 || fread(tokens, sizeof(uint16_t), *ntok, fp) != *ntok) {
        fatal("token file '%s': cannot read its tokens", path);
    }
    fclose(fp);
    return tokens;
}

int main(int argc, char **argv) {
    const char *input = NULL, *marker = NULL, *tokenizer_path = "dev/data/gpt2_tokenizer.bin", *output = NULL;
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("%s\n"
               "  -i TOKENS.bin  the llm.c token file: documents, each opened by the tokenizer's EOT token\n"
               "  -a MARKER      the text that ends each prompt: the tokens after it are learned\n"
               "  -tk TOKENIZER  llm.c's tokenizer file, to find MARKER in the decoded tokens\n"
               "  -o MASK        the mask file (llmc/loss_mask.h) the trainers' -lm 1 read beside TOKENS.bin\n"
               "  -h             this help\n"
               "  The mask is never the -i or -tk file, by any path, and is written whole before it replaces one.\n",
               USAGE);
        return 0;
    }
    if (argc % 2 == 0) { fatal(USAGE); }
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "-i") == 0) { input = argv[i + 1]; }
        else if (strcmp(argv[i], "-a") == 0) { marker = argv[i + 1]; }
        else if (strcmp(argv[i], "-tk") == 0) { tokenizer_path = argv[i + 1]; }
        else if (strcmp(argv[i], "-o") == 0) { output = argv[i + 1]; }
        else { fatal("unknown flag '%s'; " USAGE, argv[i]); }
    }
    if (input == NULL || marker == NULL) { fatal("-i and -a are required; " USAGE); }
    size_t marker_len = strlen(marker);
    if (marker_len == 0) { fatal("-a '': the marker text must not be empty"); }
    char mask_path[4096];
    if (output == NULL) {
        if (loss_mask_path(mask_path, sizeof(mask_path), input) != 0) { fatal("-i '%s': the name is too long", input); }
        output = mask_path;
    }

    // the mask is written only once whole, and never over what the run reads (llmc/tool_outputs.h)
    ToolOutputs outs = {0};
    tool_outputs_add(&outs, output == mask_path ? "the default -o" : "-o", output);
    tool_outputs_check_input(&outs, "the -i token file", input);
    tool_outputs_check_input(&outs, "the -tk tokenizer", tokenizer_path);

    Tokenizer tok;
    load_tokenizer(&tok, tokenizer_path);
    size_t ntok = 0;
    uint16_t *tokens = load_tokens(input, tok.vocab_size, &ntok);
    unsigned char *mask = (unsigned char *)callocCheck(ntok > 0 ? ntok : 1, 1);

    // the last marker_len bytes of the document so far, as a ring, and how many there are
    char *tail = (char *)mallocCheck(marker_len);
    size_t tail_count = 0, documents = 0, answered = 0, learned = 0;
    int in_answer = 0; // the current document's marker has been seen
    for (size_t i = 0; i < ntok; i++) {
        if (tokens[i] == tok.eot_token) {
            // it opens a document; as a target it ends the previous one, and is
            // learned when that one had its answer
            mask[i] = (unsigned char)in_answer;
            learned += mask[i];
            documents++;
            in_answer = 0;
            tail_count = 0;
            continue;
        }
        if (i == 0) { documents++; } // the text before the file's first EOT
        if (in_answer) {
            mask[i] = 1;
            learned++;
            continue;
        }
        for (const char *p = tokenizer_decode(&tok, tokens[i]); *p && !in_answer; p++) {
            tail[tail_count % marker_len] = *p;
            tail_count++;
            if (tail_count < marker_len) { continue; }
            int match = 1;
            for (size_t k = 0; k < marker_len && match; k++) {
                match = tail[(tail_count - marker_len + k) % marker_len] == marker[k];
            }
            if (match) {
                in_answer = 1; // this token completes the marker: the answer starts after it
                answered++;
            }
        }
    }

    FILE *fp = tool_output_open(&outs, 0);
    int header[256] = {0};
    header[0] = LOSS_MASK_MAGIC;
    header[1] = LOSS_MASK_VERSION;
    header[2] = (int)ntok;
    fwriteCheck(header, sizeof(int), 256, fp, tool_output_name(&outs, 0));
    fwriteCheck(mask, 1, ntok, fp, tool_output_name(&outs, 0));
    tool_outputs_commit(&outs);
    printf("%s: %zu tokens, %zu documents, %zu with the marker '%s'; %zu tokens learned (mask 1), %zu masked\n",
           output, ntok, documents, answered, marker, learned, ntok - learned);
    free(tail);
    free(mask);
    free(tokens);
    tokenizer_free(&tok);
    return 0;
}
