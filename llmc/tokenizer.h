/*
The GPT-2 tokenizer's table: each token's bytes. Samples decode with it; the
encoder (llmc/bpe.h) builds its merges from it.

File format (llm.c): 256 int32 header, [0] = 20240328, [1] = 2, [2] = V,
[3] = EOT token id, which must be V - 1 (GPT-2's 50256: the EOT follows every
merge); then for each token id 0..V-1 a length byte (1..255) and that many bytes.
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "utf8.h"
#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2

typedef struct {
    int vocab_size;
    int eot_token;
    char **token_table;     // (vocab_size) NUL-terminated byte strings
    unsigned char *lengths; // (vocab_size) their lengths in bytes (a token may be the byte 0)
} Tokenizer;

static void tokenizer_free(Tokenizer *t) {
    if (t->token_table) {
        for (int i = 0; i < t->vocab_size; i++) { free(t->token_table[i]); }
        free(t->token_table);
    }
    free(t->lengths);
    memset(t, 0, sizeof(*t));
}

// Reads a tokenizer of `size` bytes from fp, for a model of model_vocab_size tokens.
static int tokenizer_read(Tokenizer *t, FILE *fp, long size, int model_vocab_size, char *why, size_t why_size) {
    memset(t, 0, sizeof(*t));
    int header[256];
    if (size < (long)sizeof(header)) { return problem(why, why_size, "%ld bytes, shorter than its header", size); }
    if (file_header_read(fp, header, TOKENIZER_MAGIC, TOKENIZER_VERSION, "", why, why_size) != 0) { return -1; }
    int V = header[2];
    if (V != model_vocab_size) {
        return problem(why, why_size, "vocabulary of %d tokens, the model has %d", V, model_vocab_size);
    }
    // every entry takes a length byte and at least one byte: a count the file cannot
    // hold is refused before anything is allocated for it
    long most = (size - (long)sizeof(header)) / 2;
    if (V < 1 || V > most) {
        return problem(why, why_size, "its header counts %d tokens, but its %ld bytes hold at most %ld", V, size, most);
    }
    // GPT-2's EOT (50256) is its last token, after every merge: one elsewhere is a corrupt field
    if (header[3] != V - 1) {
        return problem(why, why_size, "EOT token %d is not the vocabulary's last token %d", header[3], V - 1);
    }
    t->vocab_size = V;
    t->eot_token = header[3];
    t->token_table = (char **)callocCheck((size_t)V, sizeof(char *));
    t->lengths = (unsigned char *)callocCheck((size_t)V, 1);
    for (int i = 0; i < V; i++) {
        unsigned char length;
        if (fread(&length, 1, 1, fp) != 1 || length == 0) {
            tokenizer_free(t);
            return problem(why, why_size, "entry of token %d is truncated or empty", i);
        }
        t->token_table[i] = (char *)mallocCheck(length + 1);
        if (fread(t->token_table[i], 1, length, fp) != length) {
            tokenizer_free(t);
            return problem(why, why_size, "entry of token %d is truncated", i);
        }
        t->token_table[i][length] = '\0';
        t->lengths[i] = length;
    }
    long end = ftell(fp);
    if (end != size) {
        tokenizer_free(t);
        return problem(why, why_size, "%ld bytes of trailing data", size - end);
    }
    return 0;
}

// Loads the tokenizer. A missing file is not an error (samples then print token
// ids, as llm.c does): returns 0. A file that is there but wrong ends the job.
static int tokenizer_init(Tokenizer *t, const char *path, int model_vocab_size) {
    memset(t, 0, sizeof(*t));
    if (access(path, F_OK) != 0) { return 0; }
    char why[256];
    FILE *fp = open_input_file(path, why, sizeof(why));
    if (fp == NULL) { fatal_everywhere("tokenizer '%s': %s", path, why); }
    int status = tokenizer_read(t, fp, file_size_of(fp, path), model_vocab_size, why, sizeof(why));
    fclose(fp);
    if (status != 0) { fatal_everywhere("tokenizer '%s': %s", path, why); }
    return 1;
}

static const char *tokenizer_decode(const Tokenizer *t, int token) {
    if (t->token_table == NULL || token < 0 || token >= t->vocab_size) { return NULL; }
    return t->token_table[token];
}

// Prints a token's bytes through the printer p: whole UTF-8 characters (a token
// may hold a part of one), anything else escaped (llmc/utf8.h).
static void tokenizer_print(const Tokenizer *t, Utf8Printer *p, int token) {
    const char *piece = tokenizer_decode(t, token);
    if (piece == NULL) {
        utf8_printer_finish(p, stdout);
        printf("<%d>", token);
        return;
    }
    utf8_printer_put(p, stdout, (const unsigned char *)piece, t->lengths[token]);
}

#endif // LLMC_TOKENIZER_H
