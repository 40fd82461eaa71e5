/*
Text to an llm.c token file: GPT-2's BPE (llmc/bpe.h) over each FILE, one
document each, written as llm.c's token file (llmc/dataloader.h) with the EOT
token before every document, as llm.c's data has it.

    ./encode -o train.bin [-v val.bin [-vn N | -vn P%]] [-tk TOKENIZER] FILE...

FILE - reads standard input. -v splits off the last N tokens (or P percent of
them; 10% by default) into a validation file. The text must be UTF-8; a byte
that is not is reported with its offset and nothing is written. No output may be
an input, the tokenizer or the other output, by any path, and both are written
beside their place and renamed into it only once both are whole
(llmc/tool_outputs.h): a failed run leaves the old files as they were.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "llmc/bpe.h"
#include "llmc/tool_outputs.h"
#include "llmc/utf8.h"
#include "llmc/utils.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define DEFAULT_TOKENIZER "dev/data/gpt2_tokenizer.bin"
// the trainers' default batch (train/config.h: -b 4 -t 1024): one step at one
// data-parallel replica reads B x T + 1 tokens of each split
#define TRAINER_DEFAULT_B 4
#define TRAINER_DEFAULT_T 1024

// The usage: asked for (-h) on standard output with exit 0, after a bad command line
// on standard error with exit 1.
static void usage(FILE *out, int status) {
    fprintf(out,
            "usage: ./encode -o OUT.bin [-v VAL.bin [-vn N | -vn P%%]] [-tk TOKENIZER] FILE...\n"
            "  GPT-2 BPE: each FILE (- is standard input) is one document, written with the EOT token\n"
            "  before it into one llm.c token file (magic %d, version %d, uint16 tokens)\n"
            "  -o OUT.bin     the token file (the training split with -v)\n"
            "  -v VAL.bin     split off the last tokens into a validation file\n"
            "  -vn N | P%%     how many: N tokens, or P percent of all (default 10%%)\n"
            "  -tk FILE       llm.c's tokenizer file (default %s)\n"
            "  -h             this help\n"
            "  No output may be an input, the tokenizer or the other output; both are written\n"
            "  whole before either replaces its file.\n",
            TOKENS_MAGIC, TOKENS_VERSION, DEFAULT_TOKENIZER);
    exit(status);
}

typedef struct {
    uint16_t *data;
    size_t n, cap;
} Tokens;

static void tokens_append(void *ctx, const uint16_t *tokens, size_t count) {
    Tokens *t = (Tokens *)ctx;
    if (t->n + count > t->cap) {
        t->cap = 2 * (t->n + count) + 4096;
        uint16_t *grown = (uint16_t *)realloc(t->data, t->cap * sizeof(uint16_t));
        if (grown == NULL) { fatal("out of memory: cannot hold %zu tokens", t->cap); }
        t->data = grown;
    }
    memcpy(t->data + t->n, tokens, count * sizeof(uint16_t));
    t->n += count;
}

// The whole of a file (or standard input, "-"), in *size bytes.
static unsigned char *read_all(const char *path, size_t *size) {
    int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY);
    const char *name = fd == STDIN_FILENO ? "standard input" : path;
    if (fd < 0) { fatal("cannot open '%s': %s", path, strerror(errno)); }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) { fatal("cannot read '%s': it is a directory", path); }
    size_t cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 16, n = 0;
    unsigned char *buf = (unsigned char *)mallocCheck(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char *grown = (unsigned char *)realloc(buf, cap);
            if (grown == NULL) { fatal("out of memory reading '%s' (%zu bytes)", name, cap); }
            buf = grown;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) { continue; }
        if (got < 0) { fatal("cannot read '%s': %s", name, strerror(errno)); }
        if (got == 0) { break; }
        n += (size_t)got;
    }
    if (fd != STDIN_FILENO) { close(fd); }
    *size = n;
    return buf;
}

// Writes tokens[0..n) as llm.c's token file into output i (committed with the others).
static void write_tokens(ToolOutputs *outs, int i, const uint16_t *tokens, size_t n) {
    if (n > INT32_MAX) {
        fatal("'%s' would hold %zu tokens, more than llm.c's header counts (%d)", outs->out[i].path, n, INT32_MAX);
    }
    int header[256] = {0};
    header[0] = TOKENS_MAGIC;
    header[1] = TOKENS_VERSION;
    header[2] = (int)n;
    FILE *fp = tool_output_open(outs, i);
    fwriteCheck(header, sizeof(int), 256, fp, tool_output_name(outs, i));
    fwriteCheck(tokens, sizeof(uint16_t), n, fp, tool_output_name(outs, i));
}

// -vn: N tokens, or P% of total; ends the run for anything else.
static size_t validation_tokens(const char *spec, size_t total) {
    char *end;
    errno = 0;
    double v = strtod(spec, &end);
    int percent = *end == '%';
    if (end == spec || errno != 0 || *(end + percent) != '\0' || v <= 0 || (!percent && v != (double)(size_t)v) ||
        (percent && v >= 100)) {
        fatal("-vn '%s': give a number of tokens (e.g. 100000) or a percentage below 100 (e.g. 10%%)", spec);
    }
    size_t n = percent ? (size_t)(v / 100.0 * (double)total + 0.5) : (size_t)v;
    if (n == 0 || n >= total) {
        fatal("-vn %s: the validation split would be %zu of the %zu tokens; it must leave tokens on both sides",
              spec, n, total);
    }
    return n;
}

// A note when the shortest split written (shortest, of n tokens) is too short for
// one step of the trainers' defaults, with a -b -t that fits every split at one
// replica: -t 1024 and as many rows as fit, or one row of the longest power of
// two; or more text when not even that fits.
static void note_if_short_for_defaults(const char *shortest, size_t n) {
    size_t step = (size_t)TRAINER_DEFAULT_B * TRAINER_DEFAULT_T + 1;
    if (n >= step) { return; }
    fprintf(stderr, "note: %s holds %zu tokens, fewer than one step of the trainers' default -b %d -t %d takes "
            "(%zu: a step needs dp x B x T + 1 tokens of each split): ", shortest, n, TRAINER_DEFAULT_B,
            TRAINER_DEFAULT_T, step);
    if (n < 2) {
        fprintf(stderr, "encode more text\n");
    } else if (n - 1 >= TRAINER_DEFAULT_T) {
        fprintf(stderr, "train with -b %zu -t %d at one data-parallel replica, or encode more text\n",
                (n - 1) / TRAINER_DEFAULT_T, TRAINER_DEFAULT_T);
    } else {
        size_t t = 1;
        while (2 * t <= n - 1) { t *= 2; }
        fprintf(stderr, "train with -b 1 -t %zu at one data-parallel replica, or encode more text\n", t);
    }
}

int main(int argc, char **argv) {
    const char *out_path = NULL, *val_path = NULL, *val_spec = "10%", *tokenizer_path = DEFAULT_TOKENIZER;
    int tokenizer_given = 0, vn_given = 0, first_file = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout, 0); }
        if (a[0] != '-' || strcmp(a, "-") == 0) { first_file = i; break; }
        if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value\n", a); usage(stderr, 1); }
        if (strcmp(a, "-o") == 0) { out_path = argv[++i]; }
        else if (strcmp(a, "-v") == 0) { val_path = argv[++i]; }
        else if (strcmp(a, "-vn") == 0) { val_spec = argv[++i]; vn_given = 1; }
        else if (strcmp(a, "-tk") == 0) { tokenizer_path = argv[++i]; tokenizer_given = 1; }
        else { fprintf(stderr, "error: unknown flag %s\n", a); usage(stderr, 1); }
    }
    if (out_path == NULL) { fprintf(stderr, "error: no -o OUT.bin\n"); usage(stderr, 1); }
    if (first_file >= argc) { fprintf(stderr, "error: no input FILE (- reads standard input)\n"); usage(stderr, 1); }
    if (vn_given && val_path == NULL) { fatal("-vn sizes the validation split: give its file with -v VAL.bin"); }
    // what is written, checked against what is read before anything is: the files
    // are written only once every one is whole (llmc/tool_outputs.h)
    ToolOutputs outs = {0};
    tool_outputs_add(&outs, "-o", out_path);
    if (val_path) { tool_outputs_add(&outs, "-v", val_path); }
    tool_outputs_check_input(&outs, "the tokenizer", tokenizer_path);
    for (int i = first_file; i < argc; i++) { tool_outputs_check_input(&outs, "the input", argv[i]); }

    BpeEncoder enc;
    char why[512];
    if (bpe_init(&enc, tokenizer_path, why, sizeof(why)) != 0) {
        if (!tokenizer_given && access(tokenizer_path, F_OK) != 0) {
            fatal("tokenizer '%s' not found: run from the repository root, or pass -tk", tokenizer_path);
        }
        fatal("tokenizer '%s': %s", tokenizer_path, why);
    }
    uint16_t eot = (uint16_t)enc.tok.eot_token;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Tokens tokens = {0};
    size_t bytes = 0;
    for (int i = first_file; i < argc; i++) {
        size_t n;
        unsigned char *text = read_all(argv[i], &n);
        size_t bad = utf8_invalid_offset(text, n);
        if (bad < n) {
            const char *name = strcmp(argv[i], "-") == 0 ? "standard input" : argv[i];
            if (utf8_char_length(text + bad, n - bad) == UTF8_INCOMPLETE) {
                fatal("'%s' is not UTF-8: it ends inside a character (byte %zu, 0x%02X, starts one that is cut off)",
                      name, bad, text[bad]);
            }
            fatal("'%s' is not UTF-8: byte %zu (0x%02X) is no part of a valid character", name, bad, text[bad]);
        }
        tokens_append(&tokens, &eot, 1);
        bpe_encode(&enc, text, n, tokens_append, &tokens);
        bytes += n;
        free(text);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

    size_t n_val = val_path ? validation_tokens(val_spec, tokens.n) : 0;
    write_tokens(&outs, 0, tokens.data, tokens.n - n_val);
    if (val_path) { write_tokens(&outs, 1, tokens.data + tokens.n - n_val, n_val); }
    tool_outputs_commit(&outs);
    fprintf(stderr, "%d document(s), %zu bytes: %zu tokens (EOT included) in %.2f s, %.2f MB/s\n", argc - first_file,
            bytes, tokens.n, seconds, seconds > 0 ? (double)bytes / 1e6 / seconds : 0.0);
    fprintf(stderr, "wrote %s: %zu tokens\n", out_path, tokens.n - n_val);
    if (val_path) { fprintf(stderr, "wrote %s: %zu tokens (validation)\n", val_path, n_val); }
    int val_shorter = val_path && n_val < tokens.n - n_val;
    note_if_short_for_defaults(val_shorter ? val_path : out_path, val_shorter ? n_val : tokens.n - n_val);
    free(tokens.data);
    bpe_free(&enc);
    return 0;
}
