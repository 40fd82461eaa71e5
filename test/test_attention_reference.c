/*
Unit test of the reference attention (test/lib/reference_attention.h) that
test_attention_algorithms.c checks the ring against.

  forward   against a second, naive evaluation of the definition written here
            (exp of raw scores without the max shift, which is safe for the small
            scores used), with and without a document mask; and o_i = v_i,
            lse_i = s_ii at the first token of every document, where the query
            sees only itself
  backward  against central finite differences of L = sum(O * W), W random, for
            every element of q, k and v, in double precision

Finite-difference tolerance: inputs are O(1) and h = 1e-5, so the truncation
error h^2/6 |L'''| is ~1e-10 and the rounding error ~ eps |L| / h ~ 1e-16 * 30 /
1e-5 ~ 3e-10. A tolerance of 1e-7 + 1e-6 |g| leaves a wide margin for both while
any wrong term of the gradient (a missing scale, a wrong sign, a masked pair that
leaks) shows up at ~1e-2 or more.
*/
#include <stdio.h>
#include <stdlib.h>
#include "test/lib/reference_attention.h"
#include "test/lib/test_utils.h"

#define B 2
#define T 7
#define NH 2
#define HS 4
#define C (NH * HS)
#define NQKV (B * T * 3 * C)
#define NOUT (B * T * C)

static double loss_of(const double *qkv, const double *w, const int *doc) {
    double out[NOUT], lse[B * NH * T];
    ref_attention_forward(out, lse, qkv, doc, B, T, C, NH);
    double L = 0.0;
    for (int i = 0; i < NOUT; i++) { L += out[i] * w[i]; }
    return L;
}

static void check_forward(const double *qkv, const int *doc, const char *name) {
    double out[NOUT], lse[B * NH * T];
    ref_attention_forward(out, lse, qkv, doc, B, T, C, NH);
    CloseCheck co, cl;
    close_begin(&co, 1e-12, 1e-12, "%s: forward O against the naive sum", name);
    close_begin(&cl, 1e-12, 1e-12, "%s: forward LSE against the naive sum", name);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                // the naive definition: weights exp(s_ij) over visible j, normalised at the end
                double z = 0.0, o[HS] = {0};
                int first_of_document = 1;
                for (int j = 0; j <= i; j++) {
                    if (doc && doc[b * T + j] != doc[b * T + i]) { continue; }
                    if (j < i) { first_of_document = 0; }
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) {
                        s += qkv[(b * T + i) * 3 * C + h * HS + d] * qkv[(b * T + j) * 3 * C + C + h * HS + d];
                    }
                    double e = exp(s / sqrt((double)HS));
                    z += e;
                    for (int d = 0; d < HS; d++) { o[d] += e * qkv[(b * T + j) * 3 * C + 2 * C + h * HS + d]; }
                }
                size_t row = ((size_t)b * NH + h) * T + i;
                close_add(&cl, row, lse[row], log(z));
                for (int d = 0; d < HS; d++) {
                    size_t oi = ((size_t)b * T + i) * C + h * HS + d;
                    close_add(&co, oi, out[oi], o[d] / z);
                    if (first_of_document) {
                        double v = qkv[(b * T + i) * 3 * C + 2 * C + h * HS + d];
                        CHECK(out[oi] == v, "%s: (b %d, h %d, t %d) opens a document, o %.17g != v %.17g",
                              name, b, h, i, out[oi], v);
                    }
                }
            }
        }
    }
    close_end(&co);
    close_end(&cl);
}

static void check_backward(double *qkv, const double *w, const int *doc, const char *name) {
    double dqkv[NQKV];
    ref_attention_backward(dqkv, w, qkv, doc, B, T, C, NH);
    const double h = 1e-5;
    const char *part[3] = {"q", "k", "v"};
    CloseCheck cc[3];
    for (int k = 0; k < 3; k++) { close_begin(&cc[k], 1e-7, 1e-6, "%s: d%s against finite differences", name, part[k]); }
    double largest = 0.0;
    for (int i = 0; i < NQKV; i++) {
        double saved = qkv[i];
        qkv[i] = saved + h;
        double up = loss_of(qkv, w, doc);
        qkv[i] = saved - h;
        double down = loss_of(qkv, w, doc);
        qkv[i] = saved;
        double fd = (up - down) / (2 * h);
        close_add(&cc[(i % (3 * C)) / C], (size_t)i, dqkv[i], fd);
        if (fabs(fd) > largest) { largest = fabs(fd); }
    }
    for (int k = 0; k < 3; k++) { close_end(&cc[k]); }
    // the gradients are large enough for the tolerance to mean something
    CHECK(largest > 0.1, "%s: largest gradient %g, too small to test", name, largest);
    printf("%s: %d gradient elements match finite differences (largest %.3f)\n", name, NQKV, largest);
}

int main(void) {
    Rng rng;
    rng_seed(&rng, 1234);
    float qkv_f[NQKV], w_f[NOUT];
    fill_uniform(&rng, qkv_f, NQKV, -1.0f, 1.0f);
    fill_uniform(&rng, w_f, NOUT, -1.0f, 1.0f);
    double qkv[NQKV], w[NOUT];
    for (int i = 0; i < NQKV; i++) { qkv[i] = qkv_f[i]; }
    for (int i = 0; i < NOUT; i++) { w[i] = w_f[i]; }
    // row 0: documents [0 1 2] [3 4] [5 6]; row 1: [0] [1 .. 6]
    const int doc[B * T] = {0, 0, 0, 1, 1, 2, 2, /**/ 0, 1, 1, 1, 1, 1, 1};

    check_forward(qkv, NULL, "causal");
    check_forward(qkv, doc, "causal + documents");
    check_backward(qkv, w, NULL, "causal");
    check_backward(qkv, w, doc, "causal + documents");
    printf("test_attention_reference: OK\n");
    return 0;
}
