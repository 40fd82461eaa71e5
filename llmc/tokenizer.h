/*
The GPT-2 tokenizer, decode only (enough to print samples).

File format (llm.c): 256 int32 header, [0] = 20240328, [1] = 2, [2] = V,
[3] = EOT token id; then for each token id 0..V-1 a length byte (1..255) and that
many bytes.
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2

typedef struct {
    int vocab_size;
    int eot_token;
    char **token_table; // (vocab_size) NUL-terminated byte strings
} Tokenizer;

// Loads the tokenizer. A missing file is not an error (samples then print token
// ids, as llm.c does): returns 0. A file that is there but wrong ends the job.
static int tokenizer_init(Tokenizer *t, const char *path, int model_vocab_size) {
    memset(t, 0, sizeof(*t));
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        return 0;
    }
    long size = file_size_of(fp, path);
    int header[256];
    if (size < (long)sizeof(header)) { fatal_everywhere("tokenizer '%s': %ld bytes, shorter than its header", path, size); }
    freadCheck(header, sizeof(int), 256, fp, path);
    if (header[0] != TOKENIZER_MAGIC) { fatal_everywhere("tokenizer '%s': bad magic %d (expected %d)", path, header[0], TOKENIZER_MAGIC); }
    if (header[1] != TOKENIZER_VERSION) { fatal_everywhere("tokenizer '%s': version %d, only %d is supported", path, header[1], TOKENIZER_VERSION); }
    int V = header[2];
    if (V != model_vocab_size) {
        fatal_everywhere("tokenizer '%s': vocabulary of %d tokens, the model has %d", path, V, model_vocab_size);
    }
    if (header[3] < 0 || header[3] >= V) { fatal_everywhere("tokenizer '%s': EOT token %d out of range [0, %d)", path, header[3], V); }
    t->vocab_size = V;
    t->eot_token = header[3];
    t->token_table = (char **)callocCheck((size_t)V, sizeof(char *));
    for (int i = 0; i < V; i++) {
        unsigned char length;
        if (fread(&length, 1, 1, fp) != 1 || length == 0) {
            fatal_everywhere("tokenizer '%s': entry of token %d is truncated or empty", path, i);
        }
        t->token_table[i] = (char *)mallocCheck(length + 1);
        if (fread(t->token_table[i], 1, length, fp) != length) {
            fatal_everywhere("tokenizer '%s': entry of token %d is truncated", path, i);
        }
        t->token_table[i][length] = '\0';
    }
    if (ftell(fp) != size) { fatal_everywhere("tokenizer '%s': %ld bytes of trailing data", path, size - ftell(fp)); }
    fclose(fp);
    return 1;
}

static const char *tokenizer_decode(const Tokenizer *t, int token) {
    if (t->token_table == NULL || token < 0 || token >= t->vocab_size) { return NULL; }
    return t->token_table[token];
}

// Prints a token's bytes, leaving out control bytes other than whitespace (a
// token may be a lone byte of a multi-byte character, which is printed raw).
static void tokenizer_print(const Tokenizer *t, int token) {
    const char *piece = tokenizer_decode(t, token);
    if (piece == NULL) {
        printf("<%d>", token);
        return;
    }
    for (const unsigned char *p = (const unsigned char *)piece; *p; p++) {
        if (*p >= 0x80 || isprint(*p) || isspace(*p)) { putchar(*p); }
    }
}

static void tokenizer_free(Tokenizer *t) {
    if (t->token_table) {
        for (int i = 0; i < t->vocab_size; i++) { free(t->token_table[i]); }
        free(t->token_table);
    }
    memset(t, 0, sizeof(*t));
}

#endif // LLMC_TOKENIZER_H
