/*
GPT-2's byte-level BPE encoder: text (UTF-8) to token ids, with the tables of
llm.c's tokenizer file (llmc/tokenizer.h) and the pre-tokenizer regex run by PCRE2.

1. Pre-tokenize: GPT-2's regex cuts the text into pieces (contractions, letters,
   digits, other symbols, each with an optional leading space; runs of white
   space), in PCRE2's UTF mode with Unicode properties:
       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   \s is spelled out as tiktoken's (llm.c's data scripts encode with tiktoken; its
   regex engine's \s is Unicode's White_Space): U+0009..U+000D, U+0020, U+0085,
   U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. The npm
   gpt-3-encoder (JavaScript's \s) differs at two characters: U+0085 is no white
   space there, U+FEFF is; neither occurs in dev/data's Austen text, whose tokens
   are therefore the same under both rules.
2. Merge: each piece starts as its bytes, one token each; the adjacent pair whose
   concatenation is the token of the lowest id merges (the leftmost of equals),
   until no adjacent pair makes a token. This is tiktoken's rule: GPT-2's tokens
   256..50255 are its merges in rank order, so a merge's rank is the id of the
   token it makes, and the tokenizer file's token bytes are all the tables needed.
   The EOT token (50256, "<|endoftext|>") is no merge: text never encodes to it.
   The pairs wait in a binary heap ordered by (rank, start), so each merge costs
   O(log n) and a piece of n bytes O(n log n), in 14 bytes of working space per
   byte: a run of a million letters or spaces is one piece, and must not take
   the n^2 of a scan for the lowest pair per merge.

Pieces repeat (words), so each piece's tokens are kept in a cache.
*/
#ifndef LLMC_BPE_H
#define LLMC_BPE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer.h"
#include "utf8.h"
#include "utils.h"

#define BPE_WHITE_SPACE "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define BPE_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" BPE_WHITE_SPACE "\\p{L}\\p{N}]+" \
                    "|[" BPE_WHITE_SPACE "]+(?![^" BPE_WHITE_SPACE "])|[" BPE_WHITE_SPACE "]+"

// a byte string -> token id table (open addressing; a slot holds id + 1, 0 is empty)
typedef struct {
    const Tokenizer *tok;
    uint32_t *slots;
    size_t mask;
} BpeRanks;

// a piece -> its tokens (open addressing, the key bytes and tokens in one arena)
typedef struct {
    uint64_t hash;
    size_t key;        // offset of the piece's bytes in the arena
    uint32_t key_len;
    uint32_t n_tokens; // followed in the arena by the tokens (uint16_t)
    size_t tokens;     // offset of the tokens in the arena
} BpeCacheSlot;

typedef struct {
    Tokenizer tok;
    BpeRanks ranks;
    pcre2_code *regex;
    pcre2_match_data *match;
    // working space of one piece's merge, indexed by byte offset in the piece: a part
    // (a token so far) is named by the offset of its first byte
    size_t cap;
    uint8_t *len;   // (cap) at a part's first byte: its length (a token's: 1..255)
    uint8_t *back;  // (cap) at a part's last byte: its length, the step to the part's start
    uint64_t *heap; // (cap) the queued pairs as rank << 32 | start (the rank: the id of the part at
                    // start and the next joined), a binary min-heap: lowest rank, then leftmost
    uint32_t *slot; // (cap) at a part's first byte: its pair's index in heap, or BPE_NOT_QUEUED
    size_t heap_n;
    // the cache
    BpeCacheSlot *cache;
    size_t cache_mask, cache_used;
    unsigned char *arena;
    size_t arena_used, arena_cap;
} BpeEncoder;

#define BPE_NO_RANK UINT32_MAX

static uint64_t bpe_hash(const unsigned char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 1099511628211ull; }
    return h;
}

// The id of the token whose bytes are s[0..n), or BPE_NO_RANK.
static uint32_t bpe_rank(const BpeRanks *r, const unsigned char *s, size_t n) {
    for (size_t i = bpe_hash(s, n) & r->mask;; i = (i + 1) & r->mask) {
        uint32_t slot = r->slots[i];
        if (slot == 0) { return BPE_NO_RANK; }
        uint32_t id = slot - 1;
        if (r->tok->lengths[id] == n && memcmp(r->tok->token_table[id], s, n) == 0) { return id; }
    }
}

// Loads the tokenizer file and compiles the regex; 0, or -1 with the reason in why.
static int bpe_init(BpeEncoder *e, const char *tokenizer_path, char *why, size_t why_size) {
    memset(e, 0, sizeof(*e));
    FILE *fp = open_input_file(tokenizer_path, why, why_size);
    if (fp == NULL) { return -1; }
    // the file's own vocabulary size is the one expected: read it from the header
    // (a file too short for it is refused by tokenizer_read)
    long size = file_size_of(fp, tokenizer_path);
    int header[3] = {0, 0, 0};
    if (size >= (long)sizeof(header) && fread(header, sizeof(int), 3, fp) != 3) {
        fclose(fp);
        return problem(why, why_size, "cannot read its header");
    }
    if (header[2] > 65536) {
        fclose(fp);
        return problem(why, why_size, "%d tokens do not fit llm.c's uint16 token files", header[2]);
    }
    rewind(fp);
    int status = tokenizer_read(&e->tok, fp, size, header[2], why, why_size);
    fclose(fp);
    if (status != 0) { return -1; }
    int V = e->tok.vocab_size;
    // every byte must be a token of its own, and not the EOT (no merge): a piece starts as its bytes
    int seen[256] = {0};
    for (int i = 0; i < V; i++) {
        if (e->tok.lengths[i] == 1 && i != e->tok.eot_token) { seen[(unsigned char)e->tok.token_table[i][0]] = 1; }
    }
    for (int b = 0; b < 256; b++) {
        if (!seen[b]) { return problem(why, why_size, "no token holds the single byte 0x%02X: no byte-level BPE", b); }
    }
    size_t slots = 1;
    while (slots < 4 * (size_t)V) { slots *= 2; }
    e->ranks = (BpeRanks){&e->tok, (uint32_t *)callocCheck(slots, sizeof(uint32_t)), slots - 1};
    for (int id = 0; id < V; id++) {
        if (id == e->tok.eot_token) { continue; }
        const unsigned char *s = (const unsigned char *)e->tok.token_table[id];
        size_t n = e->tok.lengths[id];
        if (bpe_rank(&e->ranks, s, n) != BPE_NO_RANK) {
            return problem(why, why_size, "token %d repeats the bytes of token %u", id, bpe_rank(&e->ranks, s, n));
        }
        size_t i = bpe_hash(s, n) & e->ranks.mask;
        while (e->ranks.slots[i] != 0) { i = (i + 1) & e->ranks.mask; }
        e->ranks.slots[i] = (uint32_t)id + 1;
    }
    int error;
    PCRE2_SIZE error_offset;
    e->regex = pcre2_compile((PCRE2_SPTR)BPE_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &error,
                             &error_offset, NULL);
    if (e->regex == NULL) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof(message));
        return problem(why, why_size, "PCRE2 cannot compile the pre-tokenizer at %zu: %s", (size_t)error_offset,
                       (char *)message);
    }
    pcre2_jit_compile(e->regex, PCRE2_JIT_COMPLETE); // where there is no JIT, the interpreter runs it
    e->match = pcre2_match_data_create_from_pattern(e->regex, NULL);
    e->cache_mask = (1u << 16) - 1;
    e->cache = (BpeCacheSlot *)callocCheck(e->cache_mask + 1, sizeof(BpeCacheSlot));
    return 0;
}

static void bpe_free(BpeEncoder *e) {
    tokenizer_free(&e->tok);
    free(e->ranks.slots);
    pcre2_match_data_free(e->match);
    pcre2_code_free(e->regex);
    free_all(e->len, e->back, e->heap, e->slot, e->cache, e->arena);
    memset(e, 0, sizeof(*e));
}

// ----------------------------------------------------------------------------
// the merge queue: the parts whose pair with the next part makes a token

#define BPE_NOT_QUEUED UINT32_MAX

static uint32_t bpe_pair_start(uint64_t key) { return (uint32_t)key; }

static void bpe_heap_place(BpeEncoder *e, size_t at, uint64_t key) {
    e->heap[at] = key;
    e->slot[bpe_pair_start(key)] = (uint32_t)at;
}

static void bpe_heap_up(BpeEncoder *e, size_t at) {
    uint64_t key = e->heap[at];
    for (; at > 0 && key < e->heap[(at - 1) / 2]; at = (at - 1) / 2) { bpe_heap_place(e, at, e->heap[(at - 1) / 2]); }
    bpe_heap_place(e, at, key);
}

static void bpe_heap_down(BpeEncoder *e, size_t at) {
    uint64_t key = e->heap[at];
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= e->heap_n) { break; }
        if (child + 1 < e->heap_n && e->heap[child + 1] < e->heap[child]) { child++; }
        if (key <= e->heap[child]) { break; }
        bpe_heap_place(e, at, e->heap[child]);
        at = child;
    }
    bpe_heap_place(e, at, key);
}

static void bpe_dequeue(BpeEncoder *e, uint32_t part) {
    size_t at = e->slot[part];
    if (at == BPE_NOT_QUEUED) { return; }
    e->slot[part] = BPE_NOT_QUEUED;
    uint64_t moved = e->heap[--e->heap_n];
    if (at == e->heap_n) { return; }
    bpe_heap_place(e, at, moved);
    bpe_heap_up(e, at);
    bpe_heap_down(e, e->slot[bpe_pair_start(moved)]);
}

// The part at `part` of the piece (n bytes) changed, or its next part did: its pair
// is queued with its new rank, or leaves the queue when it makes no token.
static void bpe_requeue(BpeEncoder *e, const unsigned char *piece, size_t n, uint32_t part) {
    size_t next = (size_t)part + e->len[part];
    size_t joined = next < n ? (size_t)e->len[part] + e->len[next] : 0;
    uint32_t r = joined > 0 && joined <= 255 ? bpe_rank(&e->ranks, piece + part, joined) : BPE_NO_RANK;
    if (r == BPE_NO_RANK) {
        bpe_dequeue(e, part);
        return;
    }
    if (e->slot[part] == BPE_NOT_QUEUED) { e->slot[part] = (uint32_t)e->heap_n++; }
    e->heap[e->slot[part]] = (uint64_t)r << 32 | part;
    bpe_heap_up(e, e->slot[part]);
    bpe_heap_down(e, e->slot[part]);
}

// Merges one piece of n bytes into tokens: returns their number, the ids in out (n of room).
static size_t bpe_merge_piece(BpeEncoder *e, const unsigned char *piece, size_t n, uint16_t *out) {
    if (n >= BPE_NOT_QUEUED) { fatal("a piece of %zu bytes (one run of letters, digits or spaces): the most is 4 GiB", n); }
    if (n > e->cap) {
        e->cap = n > 2 * e->cap ? n : 2 * e->cap;
        free(e->len);
        free(e->back);
        free(e->heap);
        free(e->slot);
        e->len = (uint8_t *)mallocCheck(e->cap);
        e->back = (uint8_t *)mallocCheck(e->cap);
        e->heap = (uint64_t *)mallocCheck(e->cap * sizeof(uint64_t));
        e->slot = (uint32_t *)mallocCheck(e->cap * sizeof(uint32_t));
    }
    // every byte a part; the pairs that make a token queued, then ordered in O(n)
    e->heap_n = 0;
    for (size_t i = 0; i < n; i++) {
        e->len[i] = e->back[i] = 1;
        uint32_t r = i + 1 < n ? bpe_rank(&e->ranks, piece + i, 2) : BPE_NO_RANK;
        e->slot[i] = BPE_NOT_QUEUED;
        if (r != BPE_NO_RANK) { bpe_heap_place(e, e->heap_n++, (uint64_t)r << 32 | i); }
    }
    for (size_t at = e->heap_n / 2; at-- > 0;) { bpe_heap_down(e, at); }
    // the first pair in (rank, start) order joins its two parts into one
    while (e->heap_n > 0) {
        uint32_t part = bpe_pair_start(e->heap[0]);
        uint32_t next = part + e->len[part];
        bpe_dequeue(e, next); // inside part now
        uint8_t joined = (uint8_t)(e->len[part] + e->len[next]); // a token: at most 255 bytes
        e->len[part] = joined;
        e->back[part + joined - 1] = joined;
        bpe_requeue(e, piece, n, part);
        if (part > 0) { bpe_requeue(e, piece, n, part - e->back[part - 1]); }
    }
    size_t count = 0;
    for (size_t i = 0; i < n; i += e->len[i]) { out[count++] = (uint16_t)bpe_rank(&e->ranks, piece + i, e->len[i]); }
    return count;
}

static size_t bpe_arena_add(BpeEncoder *e, const void *data, size_t n) {
    if (e->arena_used + n > e->arena_cap) {
        e->arena_cap = 2 * (e->arena_used + n) + 4096;
        unsigned char *grown = (unsigned char *)realloc(e->arena, e->arena_cap);
        if (grown == NULL) { fatal("out of memory: cannot allocate %zu bytes", e->arena_cap); }
        e->arena = grown;
    }
    size_t at = e->arena_used;
    memcpy(e->arena + at, data, n);
    e->arena_used += (n + 7) & ~(size_t)7;
    return at;
}

// The tokens of one piece (from the cache, or merged and cached): their number,
// the ids in out (n of room).
static size_t bpe_encode_piece(BpeEncoder *e, const unsigned char *piece, size_t n, uint16_t *out) {
    uint64_t h = bpe_hash(piece, n);
    size_t i = h & e->cache_mask;
    for (; e->cache[i].key_len != 0; i = (i + 1) & e->cache_mask) {
        BpeCacheSlot *s = &e->cache[i];
        if (s->hash == h && s->key_len == n && memcmp(e->arena + s->key, piece, n) == 0) {
            memcpy(out, e->arena + s->tokens, s->n_tokens * sizeof(uint16_t));
            return s->n_tokens;
        }
    }
    size_t count = bpe_merge_piece(e, piece, n, out);
    // the cache holds up to half its slots, and only short pieces (words, not runs)
    if (n <= 64 && 2 * (e->cache_used + 1) <= e->cache_mask + 1) {
        BpeCacheSlot s = {h, 0, (uint32_t)n, (uint32_t)count, 0};
        s.key = bpe_arena_add(e, piece, n);
        s.tokens = bpe_arena_add(e, out, count * sizeof(uint16_t));
        e->cache[i] = s;
        e->cache_used++;
    }
    return count;
}

// Encodes text[0..n), which must be valid UTF-8 (utf8_invalid_offset), appending
// each token through emit(ctx, tokens, count).
static void bpe_encode(BpeEncoder *e, const unsigned char *text, size_t n,
                       void (*emit)(void *ctx, const uint16_t *tokens, size_t count), void *ctx) {
    size_t at = 0;
    uint16_t small[256];
    while (at < n) {
        int rc = pcre2_match(e->regex, text, n, at, PCRE2_NO_UTF_CHECK, e->match, NULL);
        if (rc < 0) { fatal("the pre-tokenizer found no piece at byte %zu (PCRE2 error %d)", at, rc); }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->match);
        // every character is white space, a letter, a digit or another symbol: the
        // pieces follow one another without a gap, and none is empty
        if (ov[0] != at || ov[1] <= at) { fatal("the pre-tokenizer skipped bytes %zu..%zu", at, (size_t)ov[0]); }
        size_t len = ov[1] - ov[0];
        uint16_t *out = len <= 256 ? small : (uint16_t *)mallocCheck(len * sizeof(uint16_t));
        size_t count = bpe_encode_piece(e, text + at, len, out);
        emit(ctx, out, count);
        if (out != small) { free(out); }
        at = ov[1];
    }
}

#endif // LLMC_BPE_H
