/*
What one Ulysses all-to-all moves, element by element: the same functions serve
the CPU loops (cp/ulysses_attention.h) and the CUDA kernels
(cp/ulysses_attention.cuh).

An exchange moves up to ULYSSES_MAX_TENSORS tensors between two views:
    local   this rank's T tokens with all of a tensor's channels
    group   the group's row of U*T tokens with this rank's chunk of the channels
A tensor's channels are `fields` runs of `width` (q | k | v: 3 of C), each cut
into U chunks of width/U (chunk u: heads [u*NH/U, (u+1)*NH/U)). Token-major tensors
are (B, T, fields * width) locally and (B, U*T, fields * width/U) in the group;
head-major ones (the log-sum-exp, fields 1, width NH) are (B, width, T) and
(B, width/U, U*T).

The all-to-all buffer holds U parts; in part r every token (b, t) of this rank
has `per_token` floats side by side, tensor after tensor, field after field. A
tensor's own elements are fp32 (4 bytes) or, on the GPU of the BF16 build, bf16
(2 bytes, `bytes`): the movers widen them to fp32 in the buffer (exactly) and
round nothing on the way back.
Local -> group: part r is chunk r of this rank's tokens (sent to group rank r);
the part received from rank r holds rank r's tokens, which sit at slot[r][b][t]
of the group's row (cp/ulysses_layout.h). Group -> local is the mirror.
*/
#ifndef CP_ULYSSES_EXCHANGE_H
#define CP_ULYSSES_EXCHANGE_H

#include <stddef.h>
#include "../llmc/host_device.h"

#define ULYSSES_MAX_TENSORS 4

typedef struct {
    int n;                                 // tensors
    void *local[ULYSSES_MAX_TENSORS];
    void *group[ULYSSES_MAX_TENSORS];
    int bytes[ULYSSES_MAX_TENSORS];        // of one element: 4 (fp32) or 2 (bf16)
    int fields[ULYSSES_MAX_TENSORS], width[ULYSSES_MAX_TENSORS];
    int head_major[ULYSSES_MAX_TENSORS];
    int U, B, T;                           // group ranks, rows, local tokens per row
    int per_token;                         // floats of one token in one part
} UlyssesExchange;

// which side of the exchange an element is read from or written to
enum { ULYSSES_LOCAL = 0, ULYSSES_GROUP = 1 };

static UlyssesExchange ulysses_exchange(int U, int B, int T) {
    UlyssesExchange x;
    x.n = 0;
    x.U = U; x.B = B; x.T = T;
    x.per_token = 0;
    return x;
}

// a tensor of `bytes`-sized elements
static void ulysses_exchange_add_sized(UlyssesExchange *x, void *local, void *group, int bytes, int fields, int width,
                                       int head_major) {
    int k = x->n++;
    x->local[k] = local;
    x->group[k] = group;
    x->bytes[k] = bytes;
    x->fields[k] = fields;
    x->width[k] = width;
    x->head_major[k] = head_major;
    x->per_token += fields * width / x->U;
}

// an fp32 tensor
static void ulysses_exchange_add(UlyssesExchange *x, float *local, float *group, int fields, int width,
                                 int head_major) {
    ulysses_exchange_add_sized(x, local, group, (int)sizeof(float), fields, width, head_major);
}

// floats of the largest exchange (the backward's q|k|v, O, dO, LSE), all U parts
static size_t ulysses_buffer_floats(int B, int T, int C, int NH) { return (size_t)B * T * (5 * (size_t)C + NH); }

static size_t ulysses_exchange_part(const UlyssesExchange *x) { return (size_t)x->B * x->T * x->per_token; }

// Element idx of the all-to-all buffer (U parts) and its place on `side`: the
// tensor (*tensor) and the element's index in it.
// slot: (U, B, T) the group-row position of each rank's tokens
HOST_DEVICE static size_t ulysses_element_at(const UlyssesExchange *x, const int *slot, size_t idx, int side,
                                             int *tensor) {
    size_t part = (size_t)x->B * x->T * x->per_token;
    int r = (int)(idx / part);
    size_t rem = idx % part;
    int bt = (int)(rem / x->per_token);
    int e = (int)(rem % x->per_token);
    int k = 0;
    while (e >= x->fields[k] * x->width[k] / x->U) { e -= x->fields[k] * x->width[k] / x->U; k++; }
    *tensor = k;
    int chunk = x->width[k] / x->U;
    int b = bt / x->T, t = bt % x->T;
    if (side == ULYSSES_LOCAL) {
        // part r is chunk r of this rank's token (b, t)
        int f = e / chunk, c = r * chunk + e % chunk;
        if (x->head_major[k]) { return ((size_t)b * x->width[k] + c) * x->T + t; }
        return ((size_t)bt * x->fields[k] + f) * x->width[k] + c;
    }
    // part r holds group rank r's token (b, t), this rank's chunk
    int UT = x->U * x->T, len = x->fields[k] * chunk;
    int p = slot[(size_t)r * x->B * x->T + bt];
    if (x->head_major[k]) { return ((size_t)b * len + e) * UT + p; }
    return ((size_t)b * UT + p) * len + e;
}

// the same element of an exchange of fp32 tensors only (the CPU's)
static float *ulysses_element(const UlyssesExchange *x, const int *slot, size_t idx, int side) {
    int k;
    size_t at = ulysses_element_at(x, slot, idx, side, &k);
    return (float *)(side == ULYSSES_LOCAL ? x->local[k] : x->group[k]) + at;
}

#endif // CP_ULYSSES_EXCHANGE_H
