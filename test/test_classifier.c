/*
Unit test of the chunked classifier (llmc/classifier.h) against a plain,
unchunked reference written here in double precision: all N logits at once,
softmax, cross-entropy, and the gradients
    dlogits = (softmax - onehot(target)) * dloss
    dwte   += dlogits^T @ lnf        dlnf = dlogits @ wte

N = 37 tokens (three of them IGNORE_INDEX), C = 24, V = 67 (not a multiple of the
softmax's 16 lanes, so the tail loop runs), Vp = 72. The chunked classifier runs
with chunks of 5 rows (not dividing 37: a short last chunk), 1 row, and all 37,
each checked for
  - losses (and 0 for the ignored targets)
  - dlnf, and dwte accumulated onto random values already there (the padded rows
    V..Vp must keep those values exactly: their logits get gradient 0)
  - the forward pass without gradient gives the same losses bit for bit and
    leaves dwte alone
Then classifier_logits of one row against the reference logits, vec_expf
against libm's exp, and classifier_chunk_rows against what it promises: the
chunk's logits fit CLASSIFIER_CHUNK_BYTES, its rows are a whole number of
CLASSIFIER_CHUNK_ALIGN where that many fit, one block more would not fit, and
never more rows than tokens; at GPT-2's vocabulary (Vp 50304) 32 MiB hold
33554432 / (50304 * 4) = 166.8 rows, so 160 = 5 * 32.

Tolerances: fp32 against double, sums of 24 (matmuls) and 67 (softmax) terms of
size ~1: rounding ~1e-6 relative; atol 1e-5 + rtol 1e-4 leaves a margin of ten.
vec_expf: within 4 ulp (relative 4.8e-7) of exp in double over [-87, 88]; NaN,
+-inf and overflow give what expf gives.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/classifier.h"
#include "llmc/rand.h"
#include "test/lib/test_utils.h"

#define N 37
#define C 24
#define V 67
#define VP 72
#define ATOL 1e-5
#define RTOL 1e-4

typedef struct {
    double logits[N * VP];
    double losses[N];
    double dlnf[N * C];
    double dwte[VP * C]; // the classifier's part only
} Reference;

static void reference(Reference *r, const float *lnf, const float *wte, const int *targets, double dloss) {
    memset(r, 0, sizeof(*r));
    for (int t = 0; t < N; t++) {
        for (int v = 0; v < VP; v++) {
            double z = 0.0;
            for (int i = 0; i < C; i++) { z += (double)lnf[t * C + i] * wte[v * C + i]; }
            r->logits[t * VP + v] = z;
        }
    }
    for (int t = 0; t < N; t++) {
        if (targets[t] == IGNORE_INDEX) { continue; }
        const double *z = r->logits + t * VP;
        double m = z[0];
        for (int v = 1; v < V; v++) { m = z[v] > m ? z[v] : m; }
        double sum = 0.0;
        for (int v = 0; v < V; v++) { sum += exp(z[v] - m); }
        r->losses[t] = log(sum) + m - z[targets[t]];
        for (int v = 0; v < V; v++) {
            double g = (exp(z[v] - m) / sum - (v == targets[t])) * dloss;
            for (int i = 0; i < C; i++) {
                r->dlnf[t * C + i] += g * wte[v * C + i];
                r->dwte[v * C + i] += g * lnf[t * C + i];
            }
        }
    }
}

static void check_close(const char *what, int chunk, const float *got, const double *expected, size_t n) {
    CloseCheck cc;
    close_begin(&cc, ATOL, RTOL, "%s, chunks of %d rows", what, chunk);
    for (size_t i = 0; i < n; i++) { close_add(&cc, i, got[i], expected[i]); }
    close_end(&cc);
}

// classifier_chunk_rows over vocabularies from 512 to one whose single row
// passes the budget, and token counts below and above the chunk
static void check_chunk_rows(void) {
    CHECK(classifier_chunk_rows(50304, 1024) == 160, "GPT-2's vocabulary: %d rows a chunk, expected 160",
          classifier_chunk_rows(50304, 1024));
    const int vocabs[] = {512, 50257, 50304, 65536, 200000, 1 << 20, 3 << 20, 1 << 23, (1 << 23) + 16};
    const size_t tokens[] = {1, 7, 100, 1024, 1 << 20};
    for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        size_t row_bytes = (size_t)vocabs[i] * sizeof(float), fit = CLASSIFIER_CHUNK_BYTES / row_bytes;
        for (size_t j = 0; j < sizeof(tokens) / sizeof(tokens[0]); j++) {
            size_t n = tokens[j], rows = (size_t)classifier_chunk_rows(vocabs[i], n);
            CHECK(rows >= 1 && rows <= n, "Vp %d, N %zu: %zu rows, outside [1, N]", vocabs[i], n, rows);
            CHECK(rows == 1 || rows * row_bytes <= CLASSIFIER_CHUNK_BYTES, "Vp %d, N %zu: %zu rows take %zu bytes",
                  vocabs[i], n, rows, rows * row_bytes);
            if (rows == n) { continue; } // every token in one chunk, within the budget
            if (fit >= CLASSIFIER_CHUNK_ALIGN) {
                CHECK(rows % CLASSIFIER_CHUNK_ALIGN == 0, "Vp %d, N %zu: %zu rows, not a multiple of %d", vocabs[i], n,
                      rows, CLASSIFIER_CHUNK_ALIGN);
                CHECK((rows + CLASSIFIER_CHUNK_ALIGN) * row_bytes > CLASSIFIER_CHUNK_BYTES,
                      "Vp %d, N %zu: %zu rows, where %zu would fit", vocabs[i], n, rows, rows + CLASSIFIER_CHUNK_ALIGN);
            } else {
                CHECK(rows == (fit > 0 ? fit : 1), "Vp %d, N %zu: %zu rows, where %zu fit", vocabs[i], n, rows, fit);
            }
        }
    }
    printf("classifier_chunk_rows: within the budget, whole blocks of %d rows, 160 at GPT-2's vocabulary\n",
           CLASSIFIER_CHUNK_ALIGN);
}

int main(void) {
    Rng rng;
    rng_seed(&rng, 2024);
    float *lnf = (float *)mallocCheck(N * C * sizeof(float));
    float *wte = (float *)mallocCheck(VP * C * sizeof(float));
    fill_uniform(&rng, lnf, N * C, -1.5f, 1.5f);
    fill_uniform(&rng, wte, VP * C, -1.0f, 1.0f);
    int targets[N];
    for (int t = 0; t < N; t++) { targets[t] = rand_below(&rng, V); }
    targets[0] = targets[17] = targets[N - 1] = IGNORE_INDEX;
    float dloss = 1.0f / (N - 3);
    static Reference ref;
    reference(&ref, lnf, wte, targets, dloss);

    float *dwte_start = (float *)mallocCheck(VP * C * sizeof(float));
    fill_uniform(&rng, dwte_start, VP * C, -0.5f, 0.5f);
    double expected_dwte[VP * C];
    for (int i = 0; i < VP * C; i++) { expected_dwte[i] = dwte_start[i] + ref.dwte[i]; }

    const int chunks[] = {5, 1, N};
    for (int k = 0; k < 3; k++) {
        int rows = chunks[k];
        float *logits = (float *)mallocCheck((size_t)rows * VP * sizeof(float));
        float losses[N], losses_eval[N], dlnf[N * C], dwte[VP * C];
        memcpy(dwte, dwte_start, sizeof(dwte));
        classifier_forward(losses, dlnf, dwte, logits, lnf, wte, targets, dloss, N, rows, C, V, VP);
        check_close("losses", rows, losses, ref.losses, N);
        for (int t = 0; t < N; t++) {
            if (targets[t] == IGNORE_INDEX) { CHECK(losses[t] == 0.0f, "ignored token %d: loss %g", t, losses[t]); }
        }
        check_close("dlnf", rows, dlnf, ref.dlnf, N * C);
        check_close("dwte (accumulated)", rows, dwte, expected_dwte, VP * C);
        for (int i = V * C; i < VP * C; i++) {
            CHECK(dwte[i] == dwte_start[i], "padded dwte entry %d changed from %g to %g", i, dwte_start[i], dwte[i]);
        }
        // without gradient: the same losses, dwte untouched
        memcpy(dwte, dwte_start, sizeof(dwte));
        classifier_forward(losses_eval, NULL, dwte, logits, lnf, wte, targets, dloss, N, rows, C, V, VP);
        CHECK(memcmp(losses_eval, losses, sizeof(losses)) == 0, "chunks of %d: the losses without gradient differ", rows);
        CHECK(memcmp(dwte, dwte_start, sizeof(dwte)) == 0, "chunks of %d: the pass without gradient wrote dwte", rows);
        printf("chunks of %2d rows: losses, dlnf, dwte match the unchunked reference\n", rows);
        free(logits);
    }

    float row_logits[VP];
    classifier_logits(row_logits, lnf + 11 * C, wte, C, VP);
    check_close("the logits of token 11", 1, row_logits, ref.logits + 11 * VP, VP);

    double worst = 0.0;
    for (int i = 0; i <= 175000; i++) {
        float x = -87.0f + i * 0.001f;
        double rel = fabs(vec_expf(x) - exp((double)x)) / exp((double)x);
        worst = rel > worst ? rel : worst;
    }
    CHECK(worst <= 4.8e-7, "vec_expf: relative error %.3g against exp over [-87, 88]", worst);
    CHECK(vec_expf(-87.5f) == 0.0f && vec_expf(-1e30f) == 0.0f && vec_expf(0.0f) == 1.0f,
          "vec_expf: %g at -87.5, %g at -1e30 (expected 0), %g at 0 (expected 1)", vec_expf(-87.5f),
          vec_expf(-1e30f), vec_expf(0.0f));
    CHECK(isnan(vec_expf(NAN)) && isinf(vec_expf(INFINITY)) && vec_expf(-INFINITY) == 0.0f && isinf(vec_expf(89.0f)),
          "vec_expf: %g at NaN (expected NaN), %g at +inf, %g at -inf, %g at 89", vec_expf(NAN), vec_expf(INFINITY),
          vec_expf(-INFINITY), vec_expf(89.0f));
    printf("vec_expf: worst relative error %.3g over [-87, 88]\n", worst);

    check_chunk_rows();

    free(lnf); free(wte); free(dwte_start);
    printf("test_classifier: OK\n");
    return 0;
}
