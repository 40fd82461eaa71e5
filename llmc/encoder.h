/*
The encoder: token embedding plus position embedding.

Under context parallelism a rank's tokens are not positions 0..T-1: each carries
the position id the sharder gave it (its place in the full sequence), and that is
what indexes wpe. With cp = 1 the ids are simply 0..T-1.
*/
#ifndef LLMC_ENCODER_H
#define LLMC_ENCODER_H

#include <stddef.h>

// out: (B, T, C)   inp, pos: (B, T)   wte: (Vp, C)   wpe: (maxT, C)
static void encoder_forward(float *out, const int *inp, const int *pos, const float *wte, const float *wpe,
                            int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float *out_bt = out + (size_t)bt * C;
        const float *wte_ix = wte + (size_t)inp[bt] * C;
        const float *wpe_p = wpe + (size_t)pos[bt] * C;
        for (int i = 0; i < C; i++) { out_bt[i] = wte_ix[i] + wpe_p[i]; }
    }
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
