/*
The encoder's merge (llmc/bpe.h: a heap of pairs ordered by rank and start) against
the rule written plainly here: scan every adjacent pair for the lowest rank, take the
leftmost of equals, join it, repeat until no pair makes a token. The ranks come from
a sorted table and bsearch, not from the encoder's hash table.

  1. hand cases: "aaa" with only "aa" is [aa, a] (leftmost first), a lower rank on
     the right wins over the left, a merge that makes a new lower pair;
  2. random tokenizers over the letters a, b, c (each token two earlier ones
     joined, ids shuffled so that a token can rank below its parts) and random
     strings up to 3000 bytes over those letters;
  3. GPT-2's tokenizer (dev/data) on random pieces of letters, digits, spaces and
     a few symbols up to 20000 bytes.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/bpe.h"
#include "test/lib/test_utils.h"

// ----------------------------------------------------------------------------
// the plain rule

typedef struct {
    const Tokenizer *tok;
    int *order; // token ids sorted by their bytes (the EOT left out)
    int n;
} SortedVocab;

static const Tokenizer *sort_tok;

static int compare_bytes(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    return c != 0 ? c : (na > nb) - (na < nb);
}

static int compare_ids(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return compare_bytes((const unsigned char *)sort_tok->token_table[x], sort_tok->lengths[x],
                         (const unsigned char *)sort_tok->token_table[y], sort_tok->lengths[y]);
}

static SortedVocab sorted_vocab(const Tokenizer *tok) {
    SortedVocab v = {tok, (int *)malloc((size_t)tok->vocab_size * sizeof(int)), 0};
    for (int i = 0; i < tok->vocab_size; i++) {
        if (i != tok->eot_token) { v.order[v.n++] = i; }
    }
    sort_tok = tok;
    qsort(v.order, (size_t)v.n, sizeof(int), compare_ids);
    return v;
}

// the id of the token s[0..n), or -1
static long lookup(const SortedVocab *v, const unsigned char *s, size_t n) {
    int lo = 0, hi = v->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2, id = v->order[mid];
        int c = compare_bytes((const unsigned char *)v->tok->token_table[id], v->tok->lengths[id], s, n);
        if (c == 0) { return id; }
        if (c < 0) { lo = mid + 1; } else { hi = mid; }
    }
    return -1;
}

// the rule: parts as start offsets, the lowest pair (leftmost of equals) joined until none is a token
static size_t reference_merge(const SortedVocab *v, const unsigned char *piece, size_t n, uint16_t *out) {
    size_t *start = (size_t *)malloc((n + 1) * sizeof(size_t));
    long *pair = (long *)malloc((n + 1) * sizeof(long));
    size_t parts = n;
    for (size_t i = 0; i <= n; i++) { start[i] = i; }
    for (size_t i = 0; i + 1 < parts; i++) { pair[i] = lookup(v, piece + start[i], start[i + 2] - start[i]); }
    for (;;) {
        size_t best = parts;
        for (size_t i = 0; i + 1 < parts; i++) {
            if (pair[i] >= 0 && (best == parts || pair[i] < pair[best])) { best = i; }
        }
        if (best == parts) { break; }
        for (size_t i = best + 1; i < parts; i++) { start[i] = start[i + 1]; }
        for (size_t i = best + 1; i + 1 < parts - 1; i++) { pair[i] = pair[i + 1]; }
        parts--;
        if (best + 1 < parts) { pair[best] = lookup(v, piece + start[best], start[best + 2] - start[best]); }
        if (best > 0) { pair[best - 1] = lookup(v, piece + start[best - 1], start[best + 1] - start[best - 1]); }
    }
    for (size_t i = 0; i < parts; i++) { out[i] = (uint16_t)lookup(v, piece + start[i], start[i + 1] - start[i]); }
    free(start);
    free(pair);
    return parts;
}

// ----------------------------------------------------------------------------
// tokenizers

// An encoder over 256 single bytes, the given merges, then the EOT, in that id order,
// from a tokenizer file written here.
static void encoder_with_merges(BpeEncoder *e, const char **merges, int n_merges) {
    int V = 256 + n_merges + 1;
    char path[] = "/tmp/test_bpe_merge.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "a temporary tokenizer file");
    FILE *fp = fdopen(fd, "wb");
    int header[256] = {TOKENIZER_MAGIC, TOKENIZER_VERSION, V, V - 1};
    fwrite(header, sizeof(int), 256, fp);
    for (int b = 0; b < 256; b++) {
        unsigned char entry[2] = {1, (unsigned char)b};
        fwrite(entry, 1, 2, fp);
    }
    for (int i = 0; i <= n_merges; i++) {
        const char *token = i < n_merges ? merges[i] : "<|e|>";
        unsigned char len = (unsigned char)strlen(token);
        fwrite(&len, 1, 1, fp);
        fwrite(token, 1, len, fp);
    }
    fclose(fp);
    char why[512];
    int status = bpe_init(e, path, why, sizeof(why));
    unlink(path);
    CHECK(status == 0, "bpe_init on a hand-made tokenizer: %s", status == 0 ? "" : why);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng(void) { // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

// merges and the encoder's tokens agree with the plain rule on text[0..n)
static int same_tokens(BpeEncoder *e, const SortedVocab *v, const unsigned char *text, size_t n, const char *what) {
    uint16_t *got = (uint16_t *)malloc(n * sizeof(uint16_t)), *want = (uint16_t *)malloc(n * sizeof(uint16_t));
    size_t n_got = bpe_merge_piece(e, text, n, got), n_want = reference_merge(v, text, n, want);
    int same = n_got == n_want && memcmp(got, want, n_got * sizeof(uint16_t)) == 0;
    if (!same) {
        size_t at = 0;
        while (at < n_got && at < n_want && got[at] == want[at]) { at++; }
        fprintf(stderr, "%s (%zu bytes): %zu tokens, the rule %zu; first difference at token %zu\n", what, n, n_got,
                n_want, at);
    }
    free(got);
    free(want);
    return same;
}

// the hand cases: tokens of s under the merges, as their byte strings joined by '|'
static void expect_merge(const char **merges, int n_merges, const char *s, const char *want) {
    BpeEncoder e;
    encoder_with_merges(&e, merges, n_merges);
    size_t n = strlen(s);
    uint16_t out[64];
    size_t count = bpe_merge_piece(&e, (const unsigned char *)s, n, out);
    char got[256] = "";
    for (size_t i = 0; i < count; i++) {
        if (i) { strcat(got, "|"); }
        strncat(got, e.tok.token_table[out[i]], e.tok.lengths[out[i]]);
    }
    CHECK(strcmp(got, want) == 0, "'%s': %s, expected %s", s, got, want);
    bpe_free(&e);
}

int main(void) {
    // ---- 1. by hand
    const char *aa[] = {"aa"};
    expect_merge(aa, 1, "aaa", "aa|a");
    expect_merge(aa, 1, "aaaaa", "aa|aa|a");
    const char *right_lower[] = {"bc", "ab"}; // "bc" ranks first
    expect_merge(right_lower, 2, "abc", "a|bc");
    const char *left_lower[] = {"ab", "bc"};
    expect_merge(left_lower, 2, "abc", "ab|c");
    // "ab" then "abc" from it; "ca" ranks after "ab": in "cabc" the "ab" goes first and leaves c|abc
    const char *chain[] = {"ab", "abc", "ca"};
    expect_merge(chain, 3, "cabc", "c|abc");
    printf("hand cases: leftmost of equals, lowest rank first, merges that make new pairs\n");

    // ---- 2. random tokenizers over a, b, c
    int pieces = 0;
    for (int t = 0; t < 20; t++) {
        // tokens built from earlier ones (each joins two), then the merges' ids shuffled
        int n_merges = 10 + (int)(rng() % 60);
        char **merges = (char **)malloc((size_t)n_merges * sizeof(char *));
        char pool[128][64];
        int n_pool = 3;
        strcpy(pool[0], "a");
        strcpy(pool[1], "b");
        strcpy(pool[2], "c");
        int m = 0;
        while (m < n_merges) {
            const char *x = pool[rng() % (uint32_t)n_pool], *y = pool[rng() % (uint32_t)n_pool];
            char joined[128];
            snprintf(joined, sizeof(joined), "%s%s", x, y);
            int seen = strlen(joined) >= 60;
            for (int i = 0; i < n_pool && !seen; i++) { seen = strcmp(pool[i], joined) == 0; }
            if (seen) { continue; }
            strcpy(pool[n_pool++], joined);
            merges[m++] = strdup(joined);
        }
        for (int i = m - 1; i > 0; i--) {
            int j = (int)(rng() % (uint32_t)(i + 1));
            char *swap = merges[i];
            merges[i] = merges[j];
            merges[j] = swap;
        }
        BpeEncoder e;
        encoder_with_merges(&e, (const char **)merges, n_merges);
        SortedVocab v = sorted_vocab(&e.tok);
        for (int k = 0; k < 30; k++) {
            size_t n = 1 + rng() % 3000;
            unsigned char *text = (unsigned char *)malloc(n);
            int letters = 1 + (int)(rng() % 3); // a; a, b; a, b, c
            for (size_t i = 0; i < n; i++) { text[i] = (unsigned char)('a' + rng() % (uint32_t)letters); }
            char what[64];
            snprintf(what, sizeof(what), "tokenizer %d piece %d", t, k);
            CHECK(same_tokens(&e, &v, text, n, what), "%s differs from the plain rule", what);
            free(text);
            pieces++;
        }
        free(v.order);
        bpe_free(&e);
        for (int i = 0; i < m; i++) { free(merges[i]); }
        free(merges);
    }
    printf("random tokenizers over a, b, c: %d random pieces up to 3000 bytes, the same tokens as the plain rule\n",
           pieces);

    // ---- 3. GPT-2's tokenizer
    const char *root = getenv("REPO_ROOT");
    char path[4096];
    snprintf(path, sizeof(path), "%s/dev/data/gpt2_tokenizer.bin", root ? root : ".");
    BpeEncoder e;
    char why[512];
    CHECK(bpe_init(&e, path, why, sizeof(why)) == 0, "GPT-2's tokenizer '%s': %s", path, why);
    SortedVocab v = sorted_vocab(&e.tok);
    const char *alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "etaoinshr", "0123456789", "ACGT", " ", "-=*", "ab "};
    int n_alphabets = (int)(sizeof(alphabets) / sizeof(alphabets[0]));
    pieces = 0;
    for (int k = 0; k < 70; k++) {
        const char *alphabet = alphabets[k % n_alphabets];
        size_t letters = strlen(alphabet), n = 1 + rng() % 20000;
        unsigned char *text = (unsigned char *)malloc(n);
        for (size_t i = 0; i < n; i++) { text[i] = (unsigned char)alphabet[rng() % (uint32_t)letters]; }
        char what[96];
        snprintf(what, sizeof(what), "GPT-2, piece %d over '%s'", k, alphabet);
        CHECK(same_tokens(&e, &v, text, n, what), "%s differs from the plain rule", what);
        free(text);
        pieces++;
    }
    printf("GPT-2's tokenizer: %d random pieces up to 20000 bytes, the same tokens as the plain rule\n", pieces);
    free(v.order);
    bpe_free(&e);
    printf("PASS test_bpe_merge\n");
    return 0;
}
