/*
What the CPU twin's process holds besides the run's own buffers, for the start-up
memory estimate (train/memory.h: TrainerMemory.runtime_bytes): what it holds now
(the program, MPI, the libraries: process_resident_bytes), and OpenBLAS's work
buffer as the run will fill it.
*/
#ifndef TRAIN_CPU_RUNTIME_MEMORY_H
#define TRAIN_CPU_RUNTIME_MEMORY_H

#include <stddef.h>
#include "../llmc/gpt2.h"
#include "../llmc/matmul.h"
#include "../llmc/utils.h"
#include "memory.h"

// OpenBLAS may pack the whole of a product's operand into a buffer of its own:
// for the classifier's weight gradient (dwte (Vp, C) += dlogits^T lnf over a chunk
// of K tokens) that is K x Vp floats, as much as the chunk's logits (with OpenBLAS
// 0.3.21 on Haswell: 32 MiB at Vp 50304 from C 352 on, next to nothing below: the
// library's choice; dev/bench/README.md). Whether it does is measured: products of
// that shape with Vp cut to BLAS_PROBE_ROWS / 4 (which also starts the library),
// then to BLAS_PROBE_ROWS: where the second grew the process by most of the K x 3/4
// BLAS_PROBE_ROWS floats packing takes (the library's own start-up is a few MiB),
// the library packs, and the rest of the operand's rows are counted. (The other
// products' operands are smaller: their rows are at most 4 C, far fewer than Vp.)
// Every rank runs the probe at its start, so it is kept small: at 8192 rows the
// second product grew the process by 3.75-3.82 MiB where the library packs and by
// 0.00-0.06 MiB where it does not (K 160, C 64 to 768, one and two threads), the
// same verdicts as 32768 rows gave, in 0.03 s instead of 0.10 at C 64.
#define BLAS_PROBE_ROWS 8192

// n floats with every page written before the probe measures: with ones, since a
// memset of zeros after calloc is dropped by the compiler as redundant (calloc's
// pages then stayed untouched, and the products' first reads of them looked like
// packing: 11 MiB counted at C 64 where the library packs nothing)
static float *probe_buffer(size_t n) {
    float *a = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { a[i] = 1.0f; }
    return a;
}

static size_t cpu_runtime_bytes(GPT2Config c, int chunk_rows) {
    size_t packed = 0;
#ifndef NO_BLAS
    size_t K = (size_t)chunk_rows, C = (size_t)c.channels, Vp = (size_t)c.padded_vocab_size;
    size_t rows = Vp < BLAS_PROBE_ROWS ? Vp : BLAS_PROBE_ROWS, first = rows / 4;
    float *dout = probe_buffer(K * rows), *inp = probe_buffer(K * C), *dweight = probe_buffer(rows * C);
    size_t resident[2], n[2] = {first, rows};
    for (int i = 0; i < 2; i++) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n[i], (int)C, (int)K, 1.0f, dout, (int)n[i], inp,
                    (int)C, 1.0f, dweight, (int)C);
        resident[i] = process_resident_bytes();
    }
    free(dout);
    free(inp);
    free(dweight);
    size_t signal = K * (rows - first) * sizeof(float);
    if (resident[1] > resident[0] && resident[1] - resident[0] >= signal / 4 * 3 && Vp > rows) {
        packed = K * (Vp - rows) * sizeof(float); // the probe's own rows are resident already
    }
#else
    (void)c;
    (void)chunk_rows;
#endif
    return process_resident_bytes() + packed;
}

#endif // TRAIN_CPU_RUNTIME_MEMORY_H
