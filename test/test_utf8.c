/*
llmc/utf8.h against the definition of UTF-8 (RFC 3629): a byte sequence is one
character exactly when it is the shortest encoding of a Unicode scalar value
(U+0000..U+10FFFF without the surrogates). The reference encodes every scalar
value by the textbook bit layout and marks its bytes; every 1-, 2- and 3-byte
sequence is then judged by both, and the 4-byte ones for every lead byte with
continuation bytes at and around the range limits. Then the sample printer: whole
characters across token boundaries, bytes that are no UTF-8 and control bytes
escaped, an incomplete character at the end shown escaped.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utf8.h"

static int failures = 0;
#define CHECK(cond, ...)                                                                                             \
    do {                                                                                                             \
        if (!(cond)) {                                                                                               \
            printf("FAIL: " __VA_ARGS__);                                                                            \
            printf("\n");                                                                                            \
            failures++;                                                                                              \
        }                                                                                                            \
    } while (0)

// the textbook encoding of a scalar value: its length, the bytes in out
static int encode_scalar(unsigned cp, unsigned char out[4]) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 0x3F); return 2; }
    if (cp < 0x10000) {
        out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 0x3F); out[2] = 0x80 | (cp & 0x3F);
        return 3;
    }
    out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 0x3F);
    out[2] = 0x80 | ((cp >> 6) & 0x3F); out[3] = 0x80 | (cp & 0x3F);
    return 4;
}

// valid2[b0 b1], valid3[b0 b1 b2]: the sequences that encode a scalar value
static unsigned char valid1[256], valid2[1 << 16], *valid3;
// a prefix of a valid sequence (what UTF8_INCOMPLETE must answer for)
static unsigned char prefix1[256], prefix2[1 << 16], prefix3[1 << 24];

// the reference's verdict on s[0..n): the length of the valid character it is,
// UTF8_INCOMPLETE for a proper prefix of one, else UTF8_INVALID (judged on the
// shortest prefix that decides it, as utf8_char_length does)
static int reference_length(const unsigned char *s, int n) {
    if (valid1[s[0]]) { return 1; }
    if (!prefix1[s[0]]) { return UTF8_INVALID; }
    if (n < 2) { return UTF8_INCOMPLETE; }
    unsigned k2 = (unsigned)s[0] << 8 | s[1];
    if (valid2[k2]) { return 2; }
    if (!prefix2[k2]) { return UTF8_INVALID; }
    if (n < 3) { return UTF8_INCOMPLETE; }
    unsigned k3 = k2 << 8 | s[2];
    if (valid3[k3]) { return 3; }
    if (!prefix3[k3]) { return UTF8_INVALID; }
    if (n < 4) { return UTF8_INCOMPLETE; }
    return -2; // 4-byte sequences: the caller judges them (valid4)
}

static void check_printer(const char *name, const char *const *pieces, const char *expected) {
    char out[512] = {0};
    FILE *fp = fmemopen(out, sizeof(out) - 1, "w");
    Utf8Printer p = {0};
    for (int i = 0; pieces[i]; i++) {
        utf8_printer_put(&p, fp, (const unsigned char *)pieces[i], strlen(pieces[i]));
        fflush(fp);
        // what is printed after each piece is whole characters only
        CHECK(utf8_invalid_offset((const unsigned char *)out, strlen(out)) == strlen(out),
              "%s: after piece %d the output '%s' is no whole UTF-8", name, i, out);
    }
    utf8_printer_finish(&p, fp);
    fclose(fp);
    CHECK(strcmp(out, expected) == 0, "%s: printed '%s', expected '%s'", name, out, expected);
}

int main(void) {
    valid3 = calloc(1 << 24, 1);
    static unsigned char valid4[5][64][64][64]; // lead F0..F4, continuation bytes 80..BF
    for (unsigned cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) { continue; }
        unsigned char b[4];
        int n = encode_scalar(cp, b);
        if (n == 1) { valid1[b[0]] = 1; }
        if (n == 2) { valid2[b[0] << 8 | b[1]] = 1; }
        if (n == 3) { valid3[b[0] << 16 | b[1] << 8 | b[2]] = 1; }
        if (n == 4) { valid4[b[0] - 0xF0][b[1] - 0x80][b[2] - 0x80][b[3] - 0x80] = 1; }
        if (n >= 2) { prefix1[b[0]] = 1; }
        if (n >= 3) { prefix2[b[0] << 8 | b[1]] = 1; }
        if (n >= 4) { prefix3[b[0] << 16 | b[1] << 8 | b[2]] = 1; }
    }
    long checked = 0;
    // every sequence of 1..3 bytes, given whole and cut short
    for (unsigned k = 0; k < (1u << 24); k++) {
        unsigned char s[3] = {(unsigned char)(k >> 16), (unsigned char)(k >> 8), (unsigned char)k};
        for (int n = 1; n <= 3; n++) {
            if (n < 3 && (k & ((1u << (8 * (3 - n))) - 1)) != 0) { continue; } // each shorter sequence once
            int want = reference_length(s, n);
            if (want == -2) { continue; }
            int got = utf8_char_length(s, (size_t)n);
            CHECK(got == want, "bytes %02X %02X %02X (%d given): length %d, expected %d", s[0], s[1], s[2], n, got, want);
            checked++;
        }
    }
    // 4-byte sequences: every lead byte, continuation bytes around every limit
    const unsigned char probes[] = {0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xF4, 0xFF};
    size_t np = sizeof(probes);
    for (unsigned lead = 0xF0; lead <= 0xFF; lead++) {
        for (size_t i = 0; i < np; i++) {
            for (size_t j = 0; j < np; j++) {
                for (size_t l = 0; l < np; l++) {
                    unsigned char s[4] = {(unsigned char)lead, probes[i], probes[j], probes[l]};
                    int want = reference_length(s, 4);
                    if (want == -2) {
                        int cont = s[3] >= 0x80 && s[3] <= 0xBF;
                        want = cont && valid4[s[0] - 0xF0][s[1] - 0x80][s[2] - 0x80][s[3] - 0x80] ? 4 : UTF8_INVALID;
                    }
                    int got = utf8_char_length(s, 4);
                    CHECK(got == want, "bytes %02X %02X %02X %02X: length %d, expected %d", s[0], s[1], s[2], s[3],
                          got, want);
                    checked++;
                }
            }
        }
    }
    printf("utf8_char_length: %ld sequences against the encoding of every scalar value\n", checked);

    // the offset of the first bad byte
    struct { const char *text; size_t offset; } offsets[] = {
        {"plain ascii", 11},             {"caf\xC3\xA9", 5},           {"ab\xFF" "cd", 2},
        {"ab\xC3", 2},                   {"\xC0\xAF", 0},              {"x\xED\xA0\x80", 1},
        {"ok\xF4\x90\x80\x80", 2},       {"\xE2\x82\xAC\x80", 3},      {"\xF0\x9F\x98\x80!", 5},
    };
    for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
        const unsigned char *t = (const unsigned char *)offsets[i].text;
        size_t got = utf8_invalid_offset(t, strlen(offsets[i].text));
        CHECK(got == offsets[i].offset, "utf8_invalid_offset case %zu: %zu, expected %zu", i, got, offsets[i].offset);
    }

    // the printer: e with an acute accent split over two tokens, a 4-byte emoji over
    // three; a lone continuation byte, a lead byte cut off by ASCII, control bytes
    check_printer("split characters", (const char *[]){"caf\xC3", "\xA9 ", "\xF0\x9F", "\x98", "\x80!", NULL},
                  "caf\xC3\xA9 \xF0\x9F\x98\x80!");
    check_printer("invalid bytes", (const char *[]){"a\x80", "b\xE2\x82", "c", "\xFF", NULL}, "a\\x80b\\xE2\\x82c\\xFF");
    check_printer("control bytes", (const char *[]){"tab\there\nnew\x01\x1b[0m\x7f", NULL},
                  "tab\there\nnew\\x01\\x1B[0m\\x7F");
    check_printer("cut off at the end", (const char *[]){"end \xE2\x82", NULL}, "end \\xE2\\x82");
    free(valid3);
    if (failures) {
        printf("FAIL test_utf8: %d check(s) failed\n", failures);
        return 1;
    }
    printf("PASS test_utf8\n");
    return 0;
}
