/*
cp_layout: which global tokens each context-parallel rank owns, and how much causal
attention work each rank does, for one (T, cp, layout). Optionally draws it as a PNG.

    make cp_layout
    ./cp_layout -t 16 -cp 4 -cl round_robin
    ./cp_layout -t 16 -cp 4 -cl round_robin -steps 1
    ./cp_layout -t 1024 -cp 4 -cl contiguous -png docs/contiguous.png
    ./cp_layout -t 1024 -cp 4 -cl packed -i dev/data/austen/austen_train.bin -b 8 -dm 1
    ./cp_layout -t 1024 -cp 4 -cl striped
    ./cp_layout -t 1024 -cp 4 -cl solver -cc 64 -i dev/data/austen/austen_train.bin -b 8 -dm 1

Every number comes from the same cp/ code the trainers run: each rank's tokens from
a CpSharder (cp_sharder_init + cp_shard_batch, as the trainer shards each step), the
work from block_visibility_table and pair_visible (cp/block_mask.h), over the same
ring schedule as cp/ring_attention.h: at step s rank r attends its queries to the
K/V block that started on rank (r - s) mod cp. Queries never move, so a pair (q, k)
is computed by the rank that owns q. All-gather attention (cp/allgather_attention.h)
meets the same blocks with the same tile skipping: the same work.

The batch: without -i, one row of T tokens of one document (the layout alone). With
-i FILE, real data: B rows (-b) read from the start of an llm.c token file, in
windows of T tokens like the trainer's loader (llmc/dataloader.h); with -dm 1 an
EOT token (50256) opens a new document and attention is masked to documents, which
the packed layout (-cl packed) needs. The work is summed over the rows.

Work of one rank, summed over the ring and the rows, in query-key pairs:
    computed  pairs inside (query half, key half) tiles that are not BLOCK_SKIP:
              what a tiled kernel computes (BLOCK_MASKED tiles count in full)
    visible   pairs that pass pair_visible: what the mask keeps. Pad queries see
              the pad keys before them (pads are a document of their own), so this
              counts their wasted rows
    useful    visible pairs of a real query: the work of cp 1; summed over the
              ranks it is T*(T+1)/2 per row for every cp and layout without
              documents, the sum of n*(n+1)/2 over the row's documents with them.
              It is the masked area of cp/attention_area.h, the cost the solver
              layout balances: each rank's is also summed from that model and the
              two must agree (else the tool stops). The solver balances the
              computed pairs in tiles of 64 (the same model's tile area): with
              -cl solver -tile 64 each rank's computed column must equal it too

Output: one line per rank and footer lines, with fixed columns so that
awk '$1 == "rank" {print $5}' picks the computed column of every rank:
    $1 rank|max|mean|imbalance|total|cp1  $2 rank id  $3 real  $4 pad
    $5 computed  $6 visible  $7 useful  $8.. owned global indices as ranges
real and pad count the rank's tokens over all rows, the ranges are row 0's. The
imbalance of a column is max/mean over the ranks (1.000 = perfectly balanced); cp1
is the same count for one rank holding the whole row (layout identity).

Then the balance of every ring step, since a step of the ring waits for the slowest
rank (the next block comes from a neighbour that must have finished its own):
    $1 step  $2 s  $3 - $4 -  $5 $6 $7 the imbalance of computed, visible, useful
                                       over the ranks at step s alone
    $1 ring  $2 - $3 - $4 -   $5 $6 $7 the sum over the steps of each step's max,
                                       over the sum of each step's mean: how much
                                       longer a ring in lock step takes than work
                                       spread evenly (1.000: balanced at every step)
A step where no rank has any work of a column counts as balanced there (1.000).

With -steps 1 the ring's case analysis follows, one line per (step, rank), steps
in order: which K/V block the rank meets and what block_visibility_table (the
trainer's own call, cp/attention_block.h) makes of each (query half, key half)
pair, qAkB for query half A against key half B. Row 0 of the batch only (with
documents each row has its own), and always the ring's halves, whatever -tile:
    halves step 1 rank 2 <- K/V of rank 1: q0k0 FULL   q0k1 SKIP   q1k0 FULL   q1k1 SKIP
    $3 the step  $5 the rank  $10 the rank the block started on, with a colon
    $12 $14 $16 $18 the visibilities of q0k0 q0k1 q1k0 q1k1
Under round_robin these are the zigzag's three cases of cp/ring_attention.h.

With -dm 1 a line says how far each layout spreads the documents, what an exchange
that sends K/V only to the ranks whose queries see it pays for:
    # spread PAIRS (rank, document) pairs over DOCS documents: RANKS ranks per document
(a rank that holds a real token of a document makes a pair; summed over the rows).

With -m MODEL (dN, the trainers' -e presets: d12 is GPT-2 124M) it also prints what
each attention algorithm sends per rank and layer at this padded length, B rows and
the model's C and NH (cp/attention_cost.h; -cu U: the Ulysses degree of hybrid,
default 2 where it divides cp), as lines starting with "# comm":
    # comm ALGORITHM forward BYTES MESSAGES backward BYTES MESSAGES step BYTES MESSAGES
an algorithm that does not fit (heads not divisible) says why instead. Group-cast's
depend on the batch and differ per rank: each rank's plan (cp/groupcast_plan.h) is
built from the ranks' shards, as the trainer's bind does, and counted by
groupcast_cost (exactly the K|V its peers' queries see); its line gives the mean
bytes over the ranks (rounded down) and the largest rank's messages, then the
largest rank's bytes:
    # comm groupcast forward BYTES MESSAGES backward BYTES MESSAGES step BYTES MESSAGES largest BYTES BYTES

The counts touch every pair: O(B T^2) time, so T is capped at MAX_T and B * T at
MAX_BT.
*/
#define _DEFAULT_SOURCE // mkdtemp; M_PI of llmc/rand.h (through llmc/gpt2_init.h)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../cp/layout.h"
#include "../cp/sharder.h"
#include "../cp/block_mask.h"
#include "../cp/attention_cost.h"
#include "../cp/layout_balance.h"
#include "../llmc/gpt2_init.h"
#include "../llmc/dataloader.h"
#include "../llmc/tool_outputs.h"

#define MAX_T 65536
#define MAX_BT (1 << 20)
// GPT-2's <|endoftext|> (GPT2_EOT of llmc/gpt2.h): it opens each document of the data
#define EOT_TOKEN 50256
// the tool counts pairs and never embeds a token: any 16-bit token is valid
#define ANY_TOKEN 65536
// up to this many tokens per side the picture shows every pair; beyond, cells of
// ceil(P / MAX_CELLS) x ceil(P / MAX_CELLS) pairs
#define MAX_CELLS 64

// ----------------------------------------------------------------------------
// work counting

typedef struct {
    long long computed; // pairs in tiles that are not BLOCK_SKIP
    long long visible;  // pairs that pass pair_visible
    long long useful;   // visible pairs with a real query
} Work;

#define NUM_WORK_COLUMNS 3

static long long work_column(const Work *w, int c) {
    return c == 0 ? w->computed : c == 1 ? w->visible : w->useful;
}

// The attention matrix in cells of bin x bin pairs, for the picture.
typedef struct {
    int bin;             // tokens per cell side
    int cells;           // cells per side: ceil(P / bin)
    int cp;
    long long *visible;  // (cells, cells, cp) visible pairs per cell and computing rank
    long long *computed; // (cells, cells) computed pairs per cell
} PairGrid;

// The batch the layout is computed for.
typedef struct {
    int B, T;
    int *inputs;        // (B, T)
    int *targets;       // (B, T)
    int document_token; // the token that opens a document (attention masked to documents), or -1: one
                        // document per row
} Batch;

// One row of T tokens 0 and no document token: the layout alone.
static Batch dummy_batch(int T) {
    Batch batch = {1, T, (int *)callocCheck((size_t)T, sizeof(int)), (int *)callocCheck((size_t)T, sizeof(int)), -1};
    return batch;
}

// B rows of T tokens from the start of an llm.c token file, read by the trainer's
// loader (one data-parallel replica, its first step).
static Batch file_batch(const char *path, int B, int T, int document_token) {
    DataLoader dl;
    dataloader_init(&dl, path, "-i", B, T, 0, 1, ANY_TOKEN, 0, 0);
    dataloader_next_batch(&dl);
    Batch batch = {B, T, (int *)mallocCheck((size_t)B * T * sizeof(int)), (int *)mallocCheck((size_t)B * T * sizeof(int)),
                   document_token};
    memcpy(batch.inputs, dl.inputs, (size_t)B * T * sizeof(int));
    memcpy(batch.targets, dl.targets, (size_t)B * T * sizeof(int));
    dataloader_free(&dl);
    return batch;
}

static void batch_free(Batch *batch) {
    free(batch->inputs);
    free(batch->targets);
}

// Shards the batch for every rank, as the trainer does each step. sh: (cp,)
// sharders, freed by the caller. Returns CP_ERROR with the reason in sh[0].error
// when (T, cp, layout) is not a valid configuration.
// chunk: the solver's chunk size (0: its default).
static int shard_all_ranks(CpSharder *sh, CpLayoutKind kind, int cp, int chunk, const Batch *batch) {
    // max_positions = T keeps every position id in range
    CpDocuments documents = batch->document_token >= 0 ? cp_masked_documents(batch->document_token) : cp_no_documents();
    return cp_shard_every_rank(sh, cp, kind, batch->T, documents, chunk, 0, batch->inputs, batch->targets, batch->B,
                               batch->T);
}

static const char *visibility_name(BlockVisibility v) {
    return v == BLOCK_SKIP ? "SKIP" : v == BLOCK_FULL ? "FULL" : "MASKED";
}

// The tiles a block of Tl tokens is cut into: the ring's RING_SUBBLOCKS sub-blocks
// (tile 0, what cp/block_mask.h and the plain loops take), or tiles of `tile` rows,
// as the tiled attention cuts it (the GPU kernels and the CPU's BLAS build: 64).
static int block_tiles(int Tl, int tile) {
    return tile ? (Tl + tile - 1) / tile : RING_SUBBLOCKS;
}

static SubBlock block_tile(const int *index, const int *document, int Tl, int tile, int t) {
    if (tile == 0) { return sub_block_of(index, document, Tl, t); }
    return sub_block_range(index, document, t * tile, (t + 1) * tile < Tl ? (t + 1) * tile : Tl);
}

// Walks the ring schedule over every row and counts every rank's work, in all and
// at each step, with blocks cut into tiles as block_tiles says; fills grid when
// given. work: (cp,)   step_work: (cp steps, cp ranks)
static void ring_work(const CpSharder *sh, int cp, int tile, Work *work, Work *step_work, PairGrid *grid) {
    int B = sh[0].layout.B;
    int Tl = sh[0].layout.local_len;
    int nt = block_tiles(Tl, tile);
    SubBlock *qs = (SubBlock *)mallocCheck((size_t)nt * sizeof(SubBlock));
    SubBlock *ks = (SubBlock *)mallocCheck((size_t)nt * sizeof(SubBlock));
    memset(step_work, 0, (size_t)cp * cp * sizeof(Work));
    for (int r = 0; r < cp; r++) {
        Work w = {0, 0, 0};
        for (int b = 0; b < B; b++) {
            size_t row = (size_t)b * Tl;
            const int *q_index = sh[r].layout.global_index + row, *q_doc = sh[r].layout.document + row;
            const int *q_original = sh[r].layout.original_index + row;
            for (int s = 0; s < cp; s++) {
                // the K/V block this rank holds at step s
                const ShardLayout *k = &sh[(r - s + cp) % cp].layout;
                const int *k_index = k->global_index + row, *k_doc = k->document + row;
                for (int t = 0; t < nt; t++) {
                    qs[t] = block_tile(q_index, q_doc, Tl, tile, t);
                    ks[t] = block_tile(k_index, k_doc, Tl, tile, t);
                }
                for (int a = 0; a < nt; a++) {
                    for (int c = 0; c < nt; c++) {
                        BlockVisibility vis = block_visibility(&qs[a], &ks[c]);
                        int computed = vis != BLOCK_SKIP;
                        for (int i = qs[a].start; i < qs[a].end; i++) {
                            int qi = q_index[i];
                            for (int j = ks[c].start; j < ks[c].end; j++) {
                                int kj = k_index[j];
                                int visible = pair_visible(qi, q_doc[i], kj, k_doc[j]);
                                // a tile decision that disagrees with its own pairs would
                                // make these numbers (and the trainers) silently wrong
                                if ((visible && !computed) || (!visible && vis == BLOCK_FULL)) {
                                    fatal("cp/block_mask.h: rank %d row %d step %d tile (%d, %d) is BLOCK_%s but pair "
                                          "(q %d, k %d) is %s", r, b, s, a, c, visibility_name(vis), qi, kj,
                                          visible ? "visible" : "masked");
                                }
                                Work *ws = &step_work[(size_t)s * cp + r];
                                ws->computed += computed;
                                ws->visible += visible;
                                ws->useful += visible && q_original[i] >= 0;
                                if (grid) {
                                    size_t cell = (size_t)(qi / grid->bin) * grid->cells + kj / grid->bin;
                                    grid->computed[cell] += computed;
                                    grid->visible[cell * cp + r] += visible;
                                }
                            }
                        }
                    }
                }
            }
        }
        for (int s = 0; s < cp; s++) {
            const Work *ws = &step_work[(size_t)s * cp + r];
            w.computed += ws->computed;
            w.visible += ws->visible;
            w.useful += ws->useful;
        }
        work[r] = w;
    }
    free(qs);
    free(ks);
}

// Each rank's masked area by the cost model (cp/attention_area.h) must be the useful
// pairs ring_work counted one by one, and with the solver in its own tiles (tile:
// as ring_work's) its tile area the computed pairs: the solver balances what this
// tool reports. Prints the documents' spread over the ranks when attention is
// masked to them.
static void check_area_and_spread(const CpSharder *sh, int cp, int tile, const Work *work, const Batch *batch) {
    int B = batch->B, T = batch->T, Tl = sh[0].layout.local_len, masked = batch->document_token >= 0;
    int *docs = (int *)mallocCheck((size_t)T * sizeof(int));
    int *starts = (int *)mallocCheck((size_t)T * sizeof(int));
    unsigned char *holds = (unsigned char *)mallocCheck((size_t)T * cp);
    long long *area = (long long *)callocCheck((size_t)cp, sizeof(long long));
    long long *tiles = (long long *)callocCheck((size_t)cp, sizeof(long long));
    int solver_tiles = sh[0].kind == CP_LAYOUT_SOLVER && tile == CP_SOLVER_TILE;
    long long pairs = 0, documents = 0;
    for (int b = 0; b < B; b++) {
        cp_row_documents(batch->inputs + (size_t)b * T, T, batch->document_token, docs);
        cp_row_document_starts(docs, T, starts);
        memset(holds, 0, (size_t)T * cp);
        for (int r = 0; r < cp; r++) {
            for (int i = 0; i < Tl; i++) {
                int o = sh[r].layout.original_index[(size_t)b * Tl + i];
                if (o < 0) { continue; }
                area[r] += query_area(o, masked ? starts[o] : 0);
                holds[(size_t)docs[o] * cp + r] = 1;
            }
            for (int i = 0; solver_tiles && i < Tl; i += tile) {
                int g = sh[r].layout.global_index[(size_t)b * Tl + i]; // the solver keeps tokens in place
                tiles[r] += span_tile_area(masked ? starts : NULL, T, g, g + tile, tile);
            }
        }
        documents += docs[T - 1] + 1;
        for (size_t k = 0; k < (size_t)T * cp; k++) { pairs += holds[k]; }
    }
    for (int r = 0; r < cp; r++) {
        if (area[r] != work[r].useful) {
            fatal("cp/attention_area.h: rank %d's masked area is %lld, but it has %lld useful pairs", r, area[r],
                  work[r].useful);
        }
        if (solver_tiles && tiles[r] != work[r].computed) {
            fatal("cp/attention_area.h: rank %d's tile area is %lld, but it computes %lld pairs in tiles of %d", r,
                  tiles[r], work[r].computed, tile);
        }
    }
    if (masked) {
        printf("# spread %lld (rank, document) pairs over %lld documents: %.3f ranks per document\n", pairs,
               documents, (double)pairs / documents);
    }
    free(docs);
    free(starts);
    free(holds);
    free(area);
    free(tiles);
}

// ----------------------------------------------------------------------------
// the table

// Runs of consecutive global indices, in local order: "0-1 14-15".
// indices: (n,)
static void format_ranges(const int *indices, int n, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < size; ) {
        int j = i;
        while (j + 1 < n && indices[j + 1] == indices[j] + 1) { j++; }
        int written = j > i ? snprintf(out + used, size - used, "%s%d-%d", i ? " " : "", indices[i], indices[j])
                            : snprintf(out + used, size - used, "%s%d", i ? " " : "", indices[i]);
        used += (size_t)written;
        i = j + 1;
    }
}

typedef struct {
    long long max[NUM_WORK_COLUMNS];
    long long total[NUM_WORK_COLUMNS];
    double mean[NUM_WORK_COLUMNS];
    double imbalance[NUM_WORK_COLUMNS]; // max / mean
} WorkStats;

static WorkStats work_stats(const Work *work, int cp) {
    WorkStats st;
    for (int c = 0; c < NUM_WORK_COLUMNS; c++) {
        st.max[c] = st.total[c] = 0;
        for (int r = 0; r < cp; r++) {
            long long v = work_column(&work[r], c);
            if (v > st.max[c]) { st.max[c] = v; }
            st.total[c] += v;
        }
        st.mean[c] = (double)st.total[c] / cp;
        // summed over the ring the total is > 0 (every row has a real token, which sees
        // itself); a single step may have no work at all, which is balanced
        st.imbalance[c] = st.total[c] > 0 ? st.max[c] / st.mean[c] : 1.0;
    }
    return st;
}

#define ROW_LABEL "%-9s %4s %7s %7s"

// data: NULL for the layout alone, else what -i read (a comment line); tile: as ring_work's
static void print_table(const CpSharder *sh, int cp, int tile, const Work *work, const WorkStats *st, const Work *cp1,
                        const char *data) {
    const ShardLayout *lay0 = &sh[0].layout;
    int B = lay0->B, T = lay0->original_seq_len, P = lay0->padded_seq_len, Tl = lay0->local_len;
    char tiles[64];
    if (tile) { snprintf(tiles, sizeof(tiles), "tiles of %d rows", tile); }
    else { snprintf(tiles, sizeof(tiles), "%d sub-blocks per block", RING_SUBBLOCKS); }
    char chunks[32] = "";
    if (sh[0].kind == CP_LAYOUT_SOLVER) { snprintf(chunks, sizeof(chunks), " (chunks of %d)", cp_solver_chunk(&sh[0])); }
    printf("# cp_layout T %d cp %d layout %s%s: padded to P %d, %d tokens per rank, %s\n",
           T, cp, cp_layout_names[sh[0].kind], chunks, P, Tl, tiles);
    if (data) { printf("# data: %s\n", data); }
    printf("# computed: pairs in tiles not skipped; visible: pairs the mask keeps (pad queries too); "
           "useful: visible pairs of real queries\n");
    printf("#" ROW_LABEL " %14s %14s %14s  %s\n", "", "rank", "real", "pad", "computed", "visible", "useful",
           data ? "tokens of row 0 (global indices)" : "tokens (global indices; >= T are pad)");
    char *ranges = (char *)mallocCheck((size_t)Tl * 24 + 1);
    for (int r = 0; r < cp; r++) {
        const ShardLayout *lay = &sh[r].layout;
        int real = 0;
        for (size_t i = 0; i < (size_t)B * Tl; i++) { real += lay->original_index[i] >= 0; }
        format_ranges(lay->global_index, Tl, ranges, (size_t)Tl * 24 + 1);
        printf("%-9s %4d %7d %7d %14lld %14lld %14lld  %s\n", "rank", r, real, B * Tl - real,
               work[r].computed, work[r].visible, work[r].useful, ranges);
    }
    free(ranges);
    printf(ROW_LABEL " %14lld %14lld %14lld\n", "max", "-", "-", "-", st->max[0], st->max[1], st->max[2]);
    printf(ROW_LABEL " %14.1f %14.1f %14.1f\n", "mean", "-", "-", "-", st->mean[0], st->mean[1], st->mean[2]);
    printf(ROW_LABEL " %14.3f %14.3f %14.3f\n", "imbalance", "-", "-", "-",
           st->imbalance[0], st->imbalance[1], st->imbalance[2]);
    printf(ROW_LABEL " %14lld %14lld %14lld\n", "total", "-", "-", "-", st->total[0], st->total[1], st->total[2]);
    // one rank, the whole row, the same tile skipping; useful = T*(T+1)/2 per row of one document
    printf(ROW_LABEL " %14lld %14lld %14lld\n", "cp1", "-", "-", "-", cp1->computed, cp1->visible, cp1->useful);
}

// The balance of each ring step, and of the ring in lock step (the header says what
// the lines hold). step_work: (cp steps, cp ranks)
static void print_steps(const Work *step_work, int cp) {
    printf("# the ring step by step: imbalance (max/mean over the ranks) at each step; ring: the sum of the "
           "steps' max over the sum of their mean\n");
    double max_sum[NUM_WORK_COLUMNS] = {0}, mean_sum[NUM_WORK_COLUMNS] = {0};
    for (int s = 0; s < cp; s++) {
        WorkStats st = work_stats(step_work + (size_t)s * cp, cp);
        char step[16];
        snprintf(step, sizeof(step), "%d", s);
        printf(ROW_LABEL " %14.3f %14.3f %14.3f\n", "step", step, "-", "-", st.imbalance[0], st.imbalance[1],
               st.imbalance[2]);
        for (int c = 0; c < NUM_WORK_COLUMNS; c++) {
            max_sum[c] += (double)st.max[c];
            mean_sum[c] += st.mean[c];
        }
    }
    printf(ROW_LABEL " %14.3f %14.3f %14.3f\n", "ring", "-", "-", "-", max_sum[0] / mean_sum[0],
           max_sum[1] / mean_sum[1], max_sum[2] / mean_sum[2]);
}

// -steps 1: the ring step by step as the trainer computes it. At step s rank r holds
// the K/V block of rank (r - s) mod cp, and block_visibility_table decides each
// (query half, key half) pair, the call cp/attention_block.h makes for every row.
// Row 0 only: with documents each row has its own table.
static void print_step_halves(const CpSharder *sh, int cp) {
    int Tl = sh[0].layout.local_len;
    printf("# the ring's halves, row 0: at step s rank r meets the K/V block of rank (r - s) mod cp; qAkB: query "
           "half A against key half B, SKIP (not computed), FULL (no mask) or MASKED (mask per pair)\n");
    for (int s = 0; s < cp; s++) {
        for (int r = 0; r < cp; r++) {
            int src = (r - s + cp) % cp;
            const ShardLayout *q = &sh[r].layout, *k = &sh[src].layout;
            BlockVisibility vis[RING_SUBBLOCKS][RING_SUBBLOCKS];
            SubBlock qs[RING_SUBBLOCKS], ks[RING_SUBBLOCKS];
            block_visibility_table(q->global_index, q->document, k->global_index, k->document, Tl, vis, qs, ks);
            printf("halves step %d rank %d <- K/V of rank %d:", s, r, src);
            for (int a = 0; a < RING_SUBBLOCKS; a++) {
                for (int c = 0; c < RING_SUBBLOCKS; c++) {
                    int last = a == RING_SUBBLOCKS - 1 && c == RING_SUBBLOCKS - 1;
                    printf(" q%dk%d %-*s", a, c, last ? 0 : 6, visibility_name(vis[a][c]));
                }
            }
            printf("\n");
        }
    }
}

// What -i read, for the table: "FILE: B rows of T tokens from its start, D documents
// (EOT 50256 opens one, attention masked to them)". Documents by the sharder's rule.
static void describe_data(char *out, size_t size, const char *path, const Batch *batch) {
    int documents = batch->B;
    if (batch->document_token >= 0) {
        int *docs = (int *)mallocCheck((size_t)batch->T * sizeof(int));
        documents = 0;
        for (int b = 0; b < batch->B; b++) {
            cp_row_documents(batch->inputs + (size_t)b * batch->T, batch->T, batch->document_token, docs);
            documents += docs[batch->T - 1] + 1; // ids count up from 0 within a row
        }
        free(docs);
    }
    snprintf(out, size, "%s: %d rows of %d tokens from its start, %d documents%s", path, batch->B, batch->T,
             documents, batch->document_token >= 0 ? " (an EOT 50256 opens one; attention masked to them)"
                                                    : " (one per row: -dm 0)");
}

// ----------------------------------------------------------------------------
// the picture (gnuplot)

// tableau-10 without its grey, which marks the masked pairs; rank 9 and up reuse colours
static const unsigned rank_colors[] = {0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                       0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f};
#define NUM_RANK_COLORS (int)(sizeof(rank_colors) / sizeof(rank_colors[0]))
#define MASKED_COLOR 0xdddddd  // computed, masked out
#define SKIPPED_COLOR 0xffffff // skipped tile or above the diagonal
static const unsigned work_colors[NUM_WORK_COLUMNS] = {0xaaaaaa, 0x4e79a7, 0x59a14f};

static int gnuplot_found(void) {
    return system("command -v gnuplot > /dev/null 2>&1") == 0;
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t size) {
    snprintf(path, size, "%s/%s", dir, name);
    return open_output_file(path, 0);
}

// A cell's colour: the rank with the most visible pairs in it, else masked grey when
// something was computed there, else white.
static unsigned cell_color(const PairGrid *g, size_t cell) {
    int best = -1;
    long long best_count = 0;
    for (int r = 0; r < g->cp; r++) {
        if (g->visible[cell * g->cp + r] > best_count) { best_count = g->visible[cell * g->cp + r]; best = r; }
    }
    if (best >= 0) { return rank_colors[best % NUM_RANK_COLORS]; }
    return g->computed[cell] ? MASKED_COLOR : SKIPPED_COLOR;
}

// The picture gnuplot drew (`drawn`, in the temporary directory) for `png`, in
// memory (*size bytes); NULL when it is no PNG (gnuplot's message is above).
static unsigned char *load_picture(const char *drawn, long *size) {
    static const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    char why[512];
    FILE *in = open_input_file(drawn, why, sizeof(why));
    if (in == NULL) { return NULL; }
    *size = file_size_of(in, drawn);
    unsigned char *bytes = (unsigned char *)mallocCheck((size_t)*size);
    size_t got = fread(bytes, 1, (size_t)*size, in);
    fclose(in);
    if (*size < (long)sizeof(magic) || got != (size_t)*size || memcmp(bytes, magic, sizeof(magic)) != 0) {
        free(bytes);
        return NULL;
    }
    return bytes;
}

// Writes the picture into output 0 (-png), every write checked: gnuplot itself exits
// 0 when its output cannot be written, a full device. A file is written whole beside
// -png and renamed into place (llmc/tool_outputs.h), so that a failed write leaves
// the earlier picture as it was.
static void write_picture(ToolOutputs *outs, const unsigned char *bytes, long size) {
    FILE *fp = tool_output_open(outs, 0);
    fwriteCheck(bytes, 1, (size_t)size, fp, tool_output_name(outs, 0));
    tool_outputs_commit(outs);
}

// Writes the data and the script into a fresh temporary directory, runs gnuplot, and
// removes the temporary files. Left: the P x P attention matrix, each visible pair in
// the colour of the rank that computes it, with the tile boundaries; right: the work
// per rank.
static void draw_png(ToolOutputs *outs, const CpSharder *sh, int cp, int tile, const Work *work, const WorkStats *st,
                     const PairGrid *g) {
    const ShardLayout *lay0 = &sh[0].layout;
    int T = lay0->original_seq_len, P = lay0->padded_seq_len, Tl = lay0->local_len;
    char dir[] = "/tmp/cp_layout.XXXXXX";
    if (mkdtemp(dir) == NULL) { fatal("cannot create a temporary directory for gnuplot"); }
    char matrix_path[64], work_path[64], script_path[64], drawn_path[64];
    snprintf(drawn_path, sizeof(drawn_path), "%s/layout.png", dir);

    // matrix.dat: one line "x y colour" per cell at its centre, every cell a box (unlike
    // gnuplot's images, boxes also draw a matrix of a single cell)
    FILE *f = open_in(dir, "matrix.dat", matrix_path, sizeof(matrix_path));
    for (int y = 0; y < g->cells; y++) {
        for (int x = 0; x < g->cells; x++) {
            fprintf(f, "%g %g %u\n", (x + 0.5) * g->bin, (y + 0.5) * g->bin, cell_color(g, (size_t)y * g->cells + x));
        }
    }
    fcloseCheck(f, matrix_path);

    // work.dat: "rank computed visible useful"
    f = open_in(dir, "work.dat", work_path, sizeof(work_path));
    for (int r = 0; r < cp; r++) {
        fprintf(f, "r%d %lld %lld %lld\n", r, work[r].computed, work[r].visible, work[r].useful);
    }
    fcloseCheck(f, work_path);

    int extent = g->cells * g->bin;
    f = open_in(dir, "layout.gp", script_path, sizeof(script_path));
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo size 1600,760 font ',11' noenhanced\n"
               "} else {\n"
               "  set terminal png size 1600,760 noenhanced\n"
               "}\n"
               "set output '%s'\n", drawn_path);
    int B = lay0->B;
    char rows[32] = "";
    if (B > 1) { snprintf(rows, sizeof(rows), ", %d rows summed", B); }
    fprintf(f, "set multiplot layout 1,2 title \"T %d%s, cp %d, layout %s (padded to %d): imbalance max/mean "
               "computed %.3f, visible %.3f, useful %.3f\" font ',14'\n",
            T, rows, cp, cp_layout_names[sh[0].kind], P, st->imbalance[0], st->imbalance[1], st->imbalance[2]);
    // left: the matrix, query rows downward, key columns rightward
    if (g->bin == 1) {
        fprintf(f, "set title 'query-key pairs: colour = rank that computes the pair'\n");
    } else {
        fprintf(f, "set title 'query-key pairs in cells of %dx%d: colour = rank with the most visible pairs'\n",
                g->bin, g->bin);
    }
    fprintf(f, "set size ratio -1\nset xrange [0:%d]\nset yrange [%d:0]\n", extent, extent);
    fprintf(f, "set xlabel 'key (global index)'\nset ylabel 'query (global index)'\n"
               "set xtics out nomirror\nset ytics out nomirror\n"
               "set key outside right top box opaque samplen 1.5\n");
    // tile boundaries: where the (rank, sub-block) that owns a global index changes
    int *tile_of = (int *)mallocCheck((size_t)P * sizeof(int));
    for (int r = 0; r < cp; r++) {
        for (int s = 0; s < block_tiles(Tl, tile); s++) {
            SubBlock sb = block_tile(sh[r].layout.global_index, sh[r].layout.document, Tl, tile, s);
            for (int i = sb.start; i < sb.end; i++) { tile_of[sh[r].layout.global_index[i]] = r * block_tiles(Tl, tile) + s; }
        }
    }
    // strided layouts (striped) change tiles at every index: past MAX_CELLS edges they
    // would paint the picture grey, and are left out
    int edges = 0;
    for (int i = 1; i < P; i++) { edges += tile_of[i] != tile_of[i - 1]; }
    int draw_edges = edges <= MAX_CELLS;
    for (int i = 1; i < P && draw_edges; i++) {
        if (tile_of[i] == tile_of[i - 1]) { continue; }
        fprintf(f, "set arrow from %d,0 to %d,%d nohead front lw 0.6 lc rgb '#808080'\n", i, i, extent);
        fprintf(f, "set arrow from 0,%d to %d,%d nohead front lw 0.6 lc rgb '#808080'\n", i, extent, i);
    }
    free(tile_of);
    // where the pad slots start (packed puts them between the documents instead)
    int pad_from_T = P > T && sh[0].kind != CP_LAYOUT_PACKED;
    if (pad_from_T) {
        fprintf(f, "set arrow from %d,0 to %d,%d nohead front lw 2 dt 2 lc rgb 'black'\n", T, T, extent);
        fprintf(f, "set arrow from 0,%d to %d,%d nohead front lw 2 dt 2 lc rgb 'black'\n", T, extent, T);
    }
    fprintf(f, "plot '%s' using 1:2:(%g):(%g):3 with boxxyerror fs solid 1.0 noborder lc rgb variable notitle",
            matrix_path, g->bin / 2.0, g->bin / 2.0);
    for (int r = 0; r < cp; r++) {
        fprintf(f, ", \\\n  NaN with boxes fs solid 1.0 lc rgb '#%06x' title 'rank %d'", rank_colors[r % NUM_RANK_COLORS], r);
    }
    fprintf(f, ", \\\n  NaN with boxes fs solid 1.0 lc rgb '#%06x' title 'computed, masked'", MASKED_COLOR);
    fprintf(f, ", \\\n  NaN with boxes fs empty lc rgb '#808080' title 'not computed'");
    fprintf(f, ", \\\n  NaN with lines lc rgb '#808080' title '%s'",
            draw_edges ? "tile edges" : "tile edges: too many to draw");
    if (pad_from_T) { fprintf(f, ", \\\n  NaN with lines lw 2 dt 2 lc rgb 'black' title 'pad from %d'", T); }
    fprintf(f, "\n");

    // right: the work per rank, three bars per rank at offsets -1/4, 0, +1/4 (clustered
    // histogram of 3 columns with gap 1), each labelled with its count
    fprintf(f, "unset arrow\nset size noratio\nset autoscale\nunset xlabel\n"
               "set title 'work per rank (query-key pairs, summed over the ring)'\n"
               "set ylabel 'pairs'\nset key outside center bottom horizontal box\n"
               "set style data histogram\nset style histogram clustered gap 1\n"
               "set style fill solid 0.9 border -1\nset grid ytics\n");
    fprintf(f, "set xrange [-0.6:%g]\nset yrange [0:%lld]\n", cp - 0.4, st->max[0] + st->max[0] / 5 + 1);
    fprintf(f, "set arrow from graph 0, first %.1f to graph 1, first %.1f nohead dt 2 lw 1.5 lc rgb '#333333' front\n",
            st->mean[0], st->mean[0]);
    fprintf(f, "plot '%s' using 2:xtic(1) title 'computed (tiles not skipped)' lc rgb '#%06x'", work_path, work_colors[0]);
    fprintf(f, ", \\\n  '' using 3 title 'visible (pass the mask)' lc rgb '#%06x'", work_colors[1]);
    fprintf(f, ", \\\n  '' using 4 title 'useful (real queries)' lc rgb '#%06x'", work_colors[2]);
    for (int c = 0; c < NUM_WORK_COLUMNS; c++) {
        fprintf(f, ", \\\n  '' using ($0%+g):%d:%d with labels rotate by 90 left offset 0,0.4 font ',9' notitle",
                (c - 1) * 0.25, c + 2, c + 2);
    }
    fprintf(f, ", \\\n  NaN with lines dt 2 lw 1.5 lc rgb '#333333' title 'mean computed'\n");
    fprintf(f, "unset multiplot\n");
    fcloseCheck(f, script_path);

    char command[128];
    snprintf(command, sizeof(command), "gnuplot '%s'", script_path);
    int status = system(command);
    long size = 0;
    unsigned char *picture = status == 0 ? load_picture(drawn_path, &size) : NULL;
    remove(matrix_path);
    remove(work_path);
    remove(script_path);
    remove(drawn_path);
    rmdir(dir);
    if (picture == NULL) { fatal("gnuplot drew no picture for '%s' (its message is above)", outs->out[0].path); }
    write_picture(outs, picture, size);
    free(picture);
}

// ----------------------------------------------------------------------------
// CLI

// The "# comm" lines: each algorithm's messages at the layout's padded length.
static void print_comm(const CpSharder *sh, int cp, int U, int depth) {
    GPT2Config c = {0};
    char descriptor[32], why[256];
    snprintf(descriptor, sizeof(descriptor), "d%d", depth);
    if (gpt2_config_from_descriptor(descriptor, &c, why, sizeof(why)) != 1) { fatal("-m d%d: %s", depth, why); }
    int B = sh->layout.B, Tl = sh->layout.local_len;
    printf("# comm model d%d: C %d, NH %d; B %d, %d tokens per rank; hybrid U %d x R %d; per rank and layer, "
           "bytes and messages sent (groupcast: the mean bytes, the largest rank's messages)\n", depth, c.channels, c.num_heads, B, Tl, U, cp / U);
    for (int k = 0; k < CP_NUM_ATTENTIONS; k++) {
        int degree = k == CP_ATTENTION_ULYSSES ? cp : k == CP_ATTENTION_HYBRID ? U : 1;
        if (c.num_heads % degree != 0) {
            printf("# comm %-9s does not fit: %d heads are not divisible by U %d\n", cp_attention_names[k],
                   c.num_heads, degree);
            continue;
        }
        AttentionCost most;
        AttentionCost a = k == CP_ATTENTION_GROUPCAST ? cp_groupcast_batch_cost(sh, cp, c.channels, &most)
                                                      : attention_cost((CpAttentionKind)k, cp, U, B, Tl, c.channels,
                                                                       c.num_heads);
        printf("# comm %-9s forward %12zu %3ld backward %12zu %3ld step %9zu %3ld", cp_attention_names[k],
               a.forward_bytes, a.forward_messages, a.backward_bytes, a.backward_messages, a.step_bytes,
               a.step_messages);
        if (k == CP_ATTENTION_GROUPCAST) { printf(" largest %zu %zu", most.forward_bytes, most.backward_bytes); }
        printf("\n");
    }
}

static void print_usage(FILE *out) {
    fprintf(out, "usage: cp_layout -t T -cp N -cl contiguous|round_robin|striped|packed|solver|identity [-cc N]"
                    " [-i FILE [-b B] [-dm 0|1]] [-tile R] [-steps 0|1] [-m dN [-cu U]] [-png FILE] [-h]\n"
                    "  -t    sequence length T (1..%d)\n"
                    "  -cp   context-parallel size (ranks in the ring, >= 1)\n"
                    "  -cl   layout (cp/layout.h); identity needs -cp 1, packed needs -dm 1\n"
                    "  -cc   with -cl solver, its chunk size: a multiple of the %d-row tiles (default %d)\n"
                    "  -i    an llm.c token file: lay out its first B rows of T tokens (default: one row of\n"
                    "        one document)\n"
                    "  -b    rows read with -i (default 1; B * T <= %d)\n"
                    "  -dm   with -i, 1: an EOT token (%d) opens a document, attention is masked to documents\n"
                    "  -tile count computed pairs in tiles of R rows, as the tiled attention cuts a block (the GPU\n"
                    "        kernels and the CPU's BLAS build: 64; default: the ring's %d sub-blocks per block)\n"
                    "  -steps 1: also print, for each ring step and rank, the K/V block it meets and each\n"
                    "        (query half, key half) pair's SKIP, FULL or MASKED (row 0; halves whatever -tile)\n"
                    "  -m    a model preset dN (d12: GPT-2 124M): also print each attention algorithm's\n"
                    "        bytes and messages per rank and layer\n"
                    "  -cu   with -m, the Ulysses degree of hybrid (default 2, or 1 where 2 does not divide cp)\n"
                    "  -png  also draw the attention matrix (summed over the rows) and the work per rank\n"
                    "        (needs gnuplot); never the -i file, written whole before it replaces one\n"
                    "  -h    this help\n", MAX_T, CP_SOLVER_TILE, CP_SOLVER_DEFAULT_CHUNK, MAX_BT, EOT_TOKEN,
                    RING_SUBBLOCKS);
}

// A bad command line: the usage and one error line on standard error, exit 1.
__attribute__((format(printf, 1, 2), noreturn))
static void usage_error(const char *fmt, ...) {
    print_usage(stderr);
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(1);
}

static int parse_int(const char *flag, const char *value) {
    char *end;
    long v = strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || v < INT_MIN || v > INT_MAX) {
        usage_error("%s needs an integer, got '%s'", flag, value);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    int T = 0, cp = 0, kind = -1, have_T = 0, have_cp = 0, B = 1, documents = 0, have_B = 0, have_dm = 0;
    int depth = 0, U = 0, tile = 0, chunk = 0, show_steps = 0;
    const char *png = NULL, *input = NULL;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
            print_usage(stdout);
            return 0;
        }
        int known = strcmp(flag, "-t") == 0 || strcmp(flag, "-cp") == 0 || strcmp(flag, "-cl") == 0
                    || strcmp(flag, "-png") == 0 || strcmp(flag, "-i") == 0 || strcmp(flag, "-b") == 0
                    || strcmp(flag, "-dm") == 0 || strcmp(flag, "-m") == 0 || strcmp(flag, "-cu") == 0
                    || strcmp(flag, "-tile") == 0 || strcmp(flag, "-cc") == 0 || strcmp(flag, "-steps") == 0;
        if (!known) { usage_error("unknown flag '%s'", flag); }
        if (i + 1 >= argc) { usage_error("%s needs a value", flag); }
        const char *value = argv[++i];
        if (strcmp(flag, "-t") == 0) { T = parse_int(flag, value); have_T = 1; }
        else if (strcmp(flag, "-cp") == 0) { cp = parse_int(flag, value); have_cp = 1; }
        else if (strcmp(flag, "-cl") == 0) {
            kind = cp_layout_from_name(value);
            if (kind < 0) { usage_error("unknown layout '%s'", value); }
        }
        else if (strcmp(flag, "-i") == 0) { input = value; }
        else if (strcmp(flag, "-b") == 0) { B = parse_int(flag, value); have_B = 1; }
        else if (strcmp(flag, "-dm") == 0) { documents = parse_int(flag, value); have_dm = 1; }
        else if (strcmp(flag, "-m") == 0) {
            if (value[0] != 'd' || (depth = parse_int(flag, value + 1)) < 1) {
                usage_error("-m '%s': a model preset dN with N >= 1 (d12: GPT-2 124M)", value);
            }
        }
        else if (strcmp(flag, "-cu") == 0) { U = parse_int(flag, value); }
        else if (strcmp(flag, "-cc") == 0) {
            if ((chunk = parse_int(flag, value)) < 1) { usage_error("-cc %d: a chunk has at least 1 token", chunk); }
        }
        else if (strcmp(flag, "-steps") == 0) {
            if ((show_steps = parse_int(flag, value)) != 0 && show_steps != 1) {
                usage_error("-steps %d: must be 0 or 1", show_steps);
            }
        }
        else if (strcmp(flag, "-tile") == 0) {
            if ((tile = parse_int(flag, value)) < 1) { usage_error("-tile %d: a tile has at least 1 row", tile); }
        }
        else { png = value; }
    }
    if (!have_T) { usage_error("-t is required"); }
    if (!have_cp) { usage_error("-cp is required"); }
    if (kind < 0) { usage_error("-cl is required"); }
    if (T < 1 || T > MAX_T) { usage_error("-t %d: must be in 1..%d (the counts visit every pair)", T, MAX_T); }
    if (cp < 1) { usage_error("-cp %d: must be at least 1", cp); }
    if (!input && (have_B || have_dm)) { usage_error("-b and -dm read data: they need -i"); }
    if (B < 1 || (long)B * T > MAX_BT) { usage_error("-b %d: B * T must be in 1..%d", B, MAX_BT); }
    if (documents != 0 && documents != 1) { usage_error("-dm %d: must be 0 or 1", documents); }
    if (chunk != 0 && kind != CP_LAYOUT_SOLVER) { usage_error("-cc %d: the chunk size is for -cl solver", chunk); }
    if (U != 0 && depth == 0) { usage_error("-cu %d: the Ulysses degree is for the -m report", U); }
    if (U == 0) { U = cp % 2 == 0 ? 2 : 1; }
    if (U < 1 || (cp > 0 && cp % U != 0)) { usage_error("-cu %d must divide -cp %d (cp = U x R)", U, cp); }
    // -png is checked before the work, and never written over -i (llmc/tool_outputs.h)
    ToolOutputs outs = {0};
    if (png) { tool_outputs_add(&outs, "-png", png); }
    glob_t shards; // -i is a pattern, as the trainer's: every file it names is an input
    if (png && input && glob(input, 0, NULL, &shards) == 0) {
        for (size_t i = 0; i < shards.gl_pathc; i++) {
            tool_outputs_check_input(&outs, "the -i token file", shards.gl_pathv[i]);
        }
        globfree(&shards);
    }
    if (png && !gnuplot_found()) { fatal("-png needs gnuplot, which is not on the PATH (Debian: apt-get install gnuplot-nox)"); }

    Batch batch = input ? file_batch(input, B, T, documents ? EOT_TOKEN : -1) : dummy_batch(T);
    char data[512];
    if (input) { describe_data(data, sizeof(data), input, &batch); }
    // the sharder's own checks decide which layouts are valid (identity at cp 1 only,
    // no rank without a real token, packed with documents), with the trainer's message
    CpSharder *sh = (CpSharder *)callocCheck((size_t)cp, sizeof(CpSharder));
    if (shard_all_ranks(sh, (CpLayoutKind)kind, cp, chunk, &batch) != CP_OK) { usage_error("%s", sh[0].error); }

    PairGrid grid = {0};
    if (png) {
        int P = sh[0].layout.padded_seq_len;
        grid.bin = (P + MAX_CELLS - 1) / MAX_CELLS;
        grid.cells = (P + grid.bin - 1) / grid.bin;
        grid.cp = cp;
        grid.visible = (long long *)callocCheck((size_t)grid.cells * grid.cells * cp, sizeof(long long));
        grid.computed = (long long *)callocCheck((size_t)grid.cells * grid.cells, sizeof(long long));
    }
    Work *work = (Work *)mallocCheck((size_t)cp * sizeof(Work));
    Work *step_work = (Work *)mallocCheck((size_t)cp * cp * sizeof(Work));
    ring_work(sh, cp, tile, work, step_work, png ? &grid : NULL);
    WorkStats st = work_stats(work, cp);

    // the reference: one rank, the whole rows, the same documents
    CpSharder whole;
    Work cp1, cp1_step;
    if (shard_all_ranks(&whole, CP_LAYOUT_IDENTITY, 1, 0, &batch) != CP_OK) { fatal("%s", whole.error); }
    ring_work(&whole, 1, tile, &cp1, &cp1_step, NULL);
    cp_sharder_free(&whole);

    print_table(sh, cp, tile, work, &st, &cp1, input ? data : NULL);
    print_steps(step_work, cp);
    if (show_steps) { print_step_halves(sh, cp); }
    check_area_and_spread(sh, cp, tile, work, &batch);
    if (depth > 0) { print_comm(sh, cp, U, depth); }
    fflush(stdout);
    if (png) {
        draw_png(&outs, sh, cp, tile, work, &st, &grid);
        free(grid.visible);
        free(grid.computed);
    }
    for (int r = 0; r < cp; r++) { cp_sharder_free(&sh[r]); }
    free(sh);
    free(work);
    free(step_work);
    batch_free(&batch);
    return 0;
}
