/*
The encoder: token embedding plus position embedding.

Under context parallelism a rank's tokens are not positions 0..T-1: each carries
the position id the sharder gave it (its place in the full sequence), and that is
what indexes wpe. With cp = 1 the ids are simply 0..T-1.
*/
#ifndef LLMC_ENCODER_H
#define LLMC_ENCODER_H

#include <stddef.h>

// The position rows a model does not hold (a position table whose weights are
// split over ranks, cp/position_table.h), fetched from whoever holds them before
// the encoder reads them. wpe_rows: the rows the model holds; rows: (B T, C), the
// verb writes the wpe row of every token whose position the model does not hold
// (the others' rows it leaves alone); scratch: (2 B T, C) floats dead during the
// encoder.
typedef struct {
    void *ctx;
    void (*fetch)(void *ctx, const float *wpe_rows, float *rows, float *scratch);
} EncoderRowsVerb;

// out: (B, T, C)   inp, pos: (B, T)   wte: (Vp, C)   wpe: (wpe_end - wpe_begin, C), row wpe_begin first
// other_rows: (B, T, C), the wpe row of each token whose position lies outside
// [wpe_begin, wpe_end) (EncoderRowsVerb), read in its place; NULL where every
// position lies inside.
static void encoder_forward(float *out, const int *inp, const int *pos, const float *wte, const float *wpe,
                            int wpe_begin, int wpe_end, const float *other_rows, int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float *out_bt = out + (size_t)bt * C;
        const float *wte_ix = wte + (size_t)inp[bt] * C;
        int held = pos[bt] >= wpe_begin && pos[bt] < wpe_end;
        const float *wpe_p = held ? wpe + (size_t)(pos[bt] - wpe_begin) * C : other_rows + (size_t)bt * C;
        for (int i = 0; i < C; i++) { out_bt[i] = wte_ix[i] + wpe_p[i]; }
    }
}

// The first of n positions outside [begin, end), or -1 where all lie inside.
static int position_outside(const int *pos, int n, int begin, int end) {
    for (int i = 0; i < n; i++) {
        if (pos[i] < begin || pos[i] >= end) { return i; }
    }
    return -1;
}

// Accumulates into dwte and into the rows [wpe_begin, wpe_end) of the position
// table that dwpe holds (row wpe_begin first): the gradient of a position
// outside them is another rank's to add (cp/position_table.h sends it there).
// Serial on purpose: two tokens may share a row.
static void encoder_backward(float *dwte, float *dwpe, int wpe_begin, int wpe_end, const float *dout, const int *inp,
                             const int *pos, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        const float *dout_bt = dout + (size_t)bt * C;
        float *dwte_ix = dwte + (size_t)inp[bt] * C;
        for (int i = 0; i < C; i++) { dwte_ix[i] += dout_bt[i]; }
        if (pos[bt] < wpe_begin || pos[bt] >= wpe_end) { continue; }
        float *dwpe_p = dwpe + (size_t)(pos[bt] - wpe_begin) * C;
        for (int i = 0; i < C; i++) { dwpe_p[i] += dout_bt[i]; }
    }
}

#endif // LLMC_ENCODER_H
