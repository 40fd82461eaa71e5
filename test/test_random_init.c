/*
llm.c's random init, the parts this binary can check by itself:
  1. the Mersenne Twister and normal_ against PyTorch's own outputs (the
     torch.manual_seed(137) sequence that llm.c's llmc/rand.h documents, which
     PyTorch printed, not this code): 32-bit draws exactly, an 8-value normal_
     (the double path) and a 16-value one (the float Box-Muller path) to the 6
     decimals llm.c matches PyTorch to;
  2. the model descriptors against llm.c's preset table (gpt2_set_hyperparameters,
     gpt3_set_hyperparameters), and what is no descriptor.

    test_random_init                      the checks above
    test_random_init normals SEED N STD   prints mt_normal's N values as hex floats,
                                          for test/lib/random_init_reference.py to check
                                          against its own generator

The whole weights of -e d2 are checked by test/lib/random_init_reference.py against
an independent Python generator (test/e2e_llmc_compat.sh).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "llmc/gpt2_init.h"
#include "llmc/rand.h"
#include "test/lib/test_utils.h"

// torch.zeros(n).normal_() from mt against PyTorch's printed values, each within tol,
// and then the next 32-bit draw against PyTorch's: normal_ took the draws it should
// (n at most 16: the sequences checked are 8 and 16 long)
static void check_normal(Mt19937 *mt, const double *pytorch, int n, float tol, uint32_t pytorch_next) {
    float got[16];
    mt_normal(mt, got, n, 0.0f, 1.0f);
    for (int i = 0; i < n; i++) {
        CHECK(fabsf(got[i] - (float)pytorch[i]) <= tol, "normal_(%d)[%d]: got %.9g, PyTorch %.9g", n, i, got[i],
              (float)pytorch[i]);
    }
    uint32_t next = mt_u32(mt);
    CHECK(next == pytorch_next, "the draw after normal_(%d) is not PyTorch's %u", n, pytorch_next);
}

static void check_pytorch_sequence(void) {
    Mt19937 mt;
    mt_seed(&mt, 137);
    const uint32_t first[5] = {4053805790u, 2173880614u, 380293709u, 1237255315u, 2986595568u};
    for (int i = 0; i < 5; i++) {
        uint32_t got = mt_u32(&mt);
        CHECK(got == first[i], "draw %d of seed 137: got %u, PyTorch %u", i, got, first[i]);
    }
    // torch.zeros(8).normal_() as PyTorch printed them. llm.c's normal_ follows
    // PyTorch's recipe in float arithmetic where PyTorch uses double (n < 16) and
    // adds 1e-12 inside the log, so llm.c claims (and gets) PyTorch's values to the
    // 6 decimals it prints; the bits of llm.c's own arithmetic are checked by
    // test/lib/random_init_reference.py
    const float tol = 1e-6f;
    const double normal8[8] = {0.7947664260864258, 1.4369317293167114, -0.2292192131280899, 0.47556325793266296,
                               -0.6334410905838013, -0.5791953802108765, -0.0925704762339592, -0.8659197092056274};
    check_normal(&mt, normal8, 8, tol, 2186503452u);
    const double normal16[16] = {-1.2813878059387207, -2.646395683288574, -0.06569503247737885, 0.2180829495191574,
                                 -0.46536165475845337, -0.33108410239219666, 2.5485482215881348, 0.10425379872322083,
                                 0.8460659980773926, 0.9462448358535767, -0.2913765013217926, 0.34313806891441345,
                                 -1.1186704635620117, -0.18305328488349915, -2.3153159618377686, 0.3961987793445587};
    check_normal(&mt, normal16, 16, tol, 2756748748u);
    printf("ok   Mersenne Twister: PyTorch's seed-137 draws exactly; normal_(8), normal_(16) within %g of "
           "PyTorch's\n", tol);
}

// descriptor -> L, C, NH, maxT as llm.c's tables give them
typedef struct {
    const char *descriptor;
    int L, C, NH, maxT;
} Preset;

static void check_descriptors(void) {
    const Preset presets[] = {
        {"d6", 6, 384, 6, 1024}, {"d12", 12, 768, 12, 1024}, {"d24", 24, 1024, 16, 1024},
        {"d36", 36, 1280, 20, 1024}, {"d48", 48, 1600, 25, 1024}, {"d60", 60, 1920, 30, 1024},
        {"d72", 72, 2880, 30, 1024}, {"d84", 84, 3456, 36, 1024}, {"gpt2:d12", 12, 768, 12, 1024},
        {"gpt2:d84", 84, 3456, 36, 1024}, {"gpt3:c384", 6, 384, 6, 2048}, {"gpt3:c768", 12, 768, 12, 2048},
        {"gpt3:c1024", 24, 1024, 16, 2048}, {"gpt3:c1536", 24, 1536, 16, 2048}, {"gpt3:c2048", 24, 2048, 16, 2048},
        {"gpt3:c2560", 32, 2560, 32, 2048}, {"gpt3:c4096", 32, 4096, 32, 2048},
        {"gpt3:c12288", 96, 12288, 96, 2048},
        // not presets: the small shapes of the tests, 64 channels and one head per layer
        {"d1", 1, 64, 1, 1024}, {"d2", 2, 128, 2, 1024}, {"gpt2:d4", 4, 256, 4, 1024},
    };
    char why[256];
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        const Preset *p = &presets[i];
        GPT2Config c;
        int status = gpt2_config_from_descriptor(p->descriptor, &c, why, sizeof(why));
        CHECK(status == 1, "%s is not taken as a descriptor (%d: %s)", p->descriptor, status, status < 0 ? why : "");
        CHECK(c.num_layers == p->L && c.channels == p->C && c.num_heads == p->NH && c.max_seq_len == p->maxT &&
              c.vocab_size == 50257 && c.padded_vocab_size == 50304,
              "%s: L %d C %d NH %d maxT %d V %d Vp %d, llm.c: L %d C %d NH %d maxT %d V 50257 Vp 50304",
              p->descriptor, c.num_layers, c.channels, c.num_heads, c.max_seq_len, c.vocab_size,
              c.padded_vocab_size, p->L, p->C, p->NH, p->maxT);
    }
    const char *files[] = {"gpt2_124M.bin", "dev/d12", "data.bin", "d", "d12.bin"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        GPT2Config c;
        CHECK(gpt2_config_from_descriptor(files[i], &c, why, sizeof(why)) == 0, "%s is taken as a descriptor", files[i]);
    }
    // gpt3:c5140 is in llm.c's table with a head size (128) that does not divide it
    const char *bad[] = {"gpt3:c5140", "gpt3:c100", "gpt2:dx", "gpt3:c", "d0", "gpt2:d-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        GPT2Config c;
        CHECK(gpt2_config_from_descriptor(bad[i], &c, why, sizeof(why)) == -1, "%s is not refused", bad[i]);
    }
    printf("ok   descriptors: llm.c's %zu presets and small shapes; files and bad descriptors told apart\n",
           sizeof(presets) / sizeof(presets[0]));
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "normals") == 0) {
        size_t n = (size_t)atol(argv[3]);
        float *x = (float *)mallocCheck(n * sizeof(float));
        Mt19937 mt;
        mt_seed(&mt, (uint32_t)atol(argv[2]));
        mt_normal(&mt, x, n, 0.0f, (float)atof(argv[4]));
        for (size_t i = 0; i < n; i++) { printf("%a\n", x[i]); }
        free(x);
        return 0;
    }
    check_pytorch_sequence();
    check_descriptors();
    printf("PASS test_random_init\n");
    return 0;
}
