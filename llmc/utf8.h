/*
UTF-8: how long the character at a position is, and whether it is one at all.
The encoder (llmc/bpe.h) rejects text that is no UTF-8, naming the byte; samples
(train/sample.h) print whole characters, holding a token's lone lead byte until
the next token completes it, and show bytes that are no UTF-8 escaped, so that a
log stays text.

Valid sequences (RFC 3629): U+0000..U+10FFFF in their shortest form, no UTF-16
surrogates (U+D800..U+DFFF).
*/
#ifndef LLMC_UTF8_H
#define LLMC_UTF8_H

#include <stddef.h>
#include <stdio.h>

#define UTF8_INCOMPLETE 0
#define UTF8_INVALID (-1)

// The length (1..4) of the UTF-8 character that starts at s, of which n >= 1 bytes
// are there; UTF8_INCOMPLETE when the n bytes are a valid start of a character
// that needs more; UTF8_INVALID when s[0] starts no character or a byte after it
// cannot follow (the bytes up to it are then no character).
static int utf8_char_length(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) { return 1; }
    int len;
    unsigned char lo = 0x80, hi = 0xBF; // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) { len = 2; }
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) { lo = 0xA0; }      // not overlong
        else if (c == 0xED) { hi = 0x9F; } // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) { lo = 0x90; }      // not overlong
        else if (c == 0xF4) { hi = 0x8F; } // at most U+10FFFF
    } else {
        return UTF8_INVALID; // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) { return UTF8_INCOMPLETE; }
        unsigned char min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
        if (s[i] < min || s[i] > max) { return UTF8_INVALID; }
    }
    return len;
}

// The offset of the first byte of s[0..n) that is no part of a valid UTF-8
// character (an incomplete one at the end included), or n when all of it is UTF-8.
static size_t utf8_invalid_offset(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len = utf8_char_length(s + i, n - i);
        if (len <= 0) { return i; }
        i += (size_t)len;
    }
    return n;
}

// Prints text that arrives in pieces (tokens) as whole characters: a character
// split over pieces is held until it completes. Printable ASCII, tab, newline and
// carriage return and every valid multi-byte character print as they are; other
// control bytes and bytes that are no UTF-8 print escaped, as \xHH.
typedef struct {
    unsigned char held[4]; // the start of a character still incomplete
    int n_held;
} Utf8Printer;

static void utf8_put_byte(FILE *out, unsigned char c) {
    if ((c >= 0x20 && c < 0x7F) || c == '\t' || c == '\n' || c == '\r') { fputc(c, out); }
    else { fprintf(out, "\\x%02X", c); }
}

// Prints held bytes and then bytes[0..n) as far as they make whole characters.
static void utf8_printer_put(Utf8Printer *p, FILE *out, const unsigned char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        p->held[p->n_held++] = bytes[i];
        // drain what the held bytes decide: whole characters and invalid bytes
        while (p->n_held > 0) {
            int len = utf8_char_length(p->held, (size_t)p->n_held);
            if (len == UTF8_INCOMPLETE) { break; }
            int used = len == UTF8_INVALID ? 1 : len;
            if (len == 1 || len == UTF8_INVALID) { utf8_put_byte(out, p->held[0]); }
            else { fwrite(p->held, 1, (size_t)len, out); }
            for (int k = used; k < p->n_held; k++) { p->held[k - used] = p->held[k]; }
            p->n_held -= used;
        }
    }
}

// The end of the text: bytes still held never became a character; shown escaped.
static void utf8_printer_finish(Utf8Printer *p, FILE *out) {
    for (int i = 0; i < p->n_held; i++) { fprintf(out, "\\x%02X", p->held[i]); }
    p->n_held = 0;
}

#endif // LLMC_UTF8_H
