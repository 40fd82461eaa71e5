/*
long_context_fit: the longest sequence that fits one GPU, from the GPU trainer's
own memory estimate (train/memory.h with train_gpt2cp.cu's sizes: the CUDA
attention's buffers, the device ids and buckets), for a random init whose
position table covers T (-e dN, -mt 0), B 1, round_robin, no -tl, no sampling.

    make bench_long_fit
    ./bench_long_fit [-e d12] [-b 1] [-g 80,141] [-r 1] [-ca ring]

-g: GPU memory in GB (10^9 bytes), a list; -r: GiB set aside for what the estimate
leaves out (the CUDA context, cuBLAS's workspace, NCCL's buffers). For each cp of
1, 2, 4, 8 it bisects T (the estimate grows with T) and prints the longest T whose
estimated peak per rank fits, with the estimate's parts there. Host code only: it
runs without a GPU.
*/
#include "train_common.h"
#include "train/memory_cuda.cuh"

// the estimated peak per rank at (T, cp); 0 where the trainer refuses the model
// (a position table past its bound of 2^20 rows)
static size_t estimate_at(const TrainerMemory *tm, TrainConfig cfg, GPT2Config c, int T, int cp, MemoryEstimate *e) {
    cfg.T = T;
    cfg.cp_size = cp;
    c.max_seq_len = random_init_max_seq_len(&cfg, c.max_seq_len);
    char why[256];
    if (gpt2_config_check(c, why, sizeof(why)) != 0) { return 0; }
    int local_T = cp_padded_len(CP_LAYOUT_ROUND_ROBIN, T, cp) / cp;
    *e = estimate_rank_memory(tm, &cfg, c, local_T, 1, CP_ATTENTION_RING);
    return e->total;
}

// T fits: the trainer takes it and its estimate is within budget
static int fits(const TrainerMemory *tm, TrainConfig cfg, GPT2Config c, int T, int cp, double budget) {
    MemoryEstimate e;
    size_t total = estimate_at(tm, cfg, c, T, cp, &e);
    return total > 0 && (double)total <= budget;
}

static int no_memory_query(size_t *bytes, int *sharers, char *source, size_t source_size) {
    (void)bytes; (void)sharers; (void)source; (void)source_size;
    return -1;
}

int main(int argc, char **argv) {
    const char *init = "d12";
    const char *gpus = "80,141";
    int B = 1;
    double reserve_gib = 1.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-e") == 0) { init = argv[i + 1]; }
        else if (strcmp(argv[i], "-b") == 0) { B = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-g") == 0) { gpus = argv[i + 1]; }
        else if (strcmp(argv[i], "-r") == 0) { reserve_gib = atof(argv[i + 1]); }
        else { fprintf(stderr, "usage: %s [-e dN] [-b B] [-g GB,GB] [-r GiB]\n", argv[0]); return 1; }
    }
    GPT2Config c0;
    char why[256];
    if (gpt2_config_from_descriptor(init, &c0, why, sizeof(why)) != 1 || B < 1) {
        fprintf(stderr, "-e needs a model descriptor (dN, gpt2:dN, gpt3:cN) and -b at least 1\n");
        return 1;
    }
    TrainConfig cfg;
    train_config_defaults(&cfg);
    cfg.B = B;
    cfg.sample_every = 0;
    cfg.val_every = 0;
    TrainerMemory tm = trainer_memory_cuda("cuda", "nccl", no_memory_query);
    printf("model -e %s (L %d, C %d, NH %d, Vp %d), B %d, -r %d, round_robin, ring attention, fp32; %.1f GiB "
           "reserved\n", init, c0.num_layers, c0.channels, c0.num_heads, c0.padded_vocab_size, B, cfg.recompute,
           reserve_gib);
    printf("| GPU | cp | longest T | est. peak per rank | params+grads+AdamW | activations | classifier | attention |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    char list[256];
    snprintf(list, sizeof(list), "%s", gpus);
    for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        double gb = atof(tok);
        double budget = gb * 1e9 - reserve_gib * 1024.0 * 1024.0 * 1024.0;
        int cps[] = {1, 2, 4, 8};
        for (int k = 0; k < 4; k++) {
            int cp = cps[k];
            int lo = cp - 1, hi = INT32_MAX / B; // lo fits (or is below cp), hi does not
            if (!fits(&tm, cfg, c0, cp, cp, budget)) { hi = cp; }
            while (hi - lo > 1) {
                int mid = lo + (hi - lo) / 2;
                if (fits(&tm, cfg, c0, mid, cp, budget)) { lo = mid; }
                else { hi = mid; }
            }
            if (lo < cp) {
                printf("| %.0f GB | %d | does not fit | | | | | |\n", gb, cp);
                continue;
            }
            MemoryEstimate e;
            estimate_at(&tm, cfg, c0, lo, cp, &e);
            const char *bound = lo == (1 << 20) ? " (the trainer's bound)" : "";
            printf("| %.0f GB | %d | %d%s | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GiB |\n", gb, cp, lo, bound,
                   e.total / 1073741824.0, (e.parameters + e.gradients + e.adamw) / 1073741824.0,
                   e.activations / 1073741824.0, e.classifier / 1073741824.0, e.attention / 1073741824.0);
        }
    }
    return 0;
}
