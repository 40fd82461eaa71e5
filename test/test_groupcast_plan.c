/*
Unit test of the group-cast plan (cp/groupcast_plan.h) and its byte count
(groupcast_cost, cp/attention_cost.h), one process, no MPI: every rank's plan is
built here from the same coordinates, as each rank builds its own after bind's
all-gather.

Against a brute-force check written here: token k of rank s is needed by rank
r != s iff some query q of r in the same row has k_index <= q_index and
k_doc == q_doc, k a real token (document >= 0), checked over every (q, k) pair of
the row, O(P^2). For every rank of every case:
  - its send list for peer j is exactly the tokens of this rank j needs, flat
    indices b * T + t ascending: no more, no fewer; a peer that needs nothing has
    count 0; its own count is 0; offsets are the prefix sums;
  - its receive list from peer i is rank i's send list for it, and exactly the
    tokens of i it needs (brute force again);
  - the bytes: forward 2 C floats per token sent, backward that plus 2 C floats per
    token received, a message per nonzero count, computed here from the brute-force
    counts; the bind's all-gather (cp - 1) * 2 B T ints;
  - cp 1 sends nothing.
Coordinates come from the sharder (the layouts contiguous, round_robin, striped,
packed, solver, identity at cp 1, rows with random documents of random lengths,
masked and not) and from random partitions (a random permutation of the padded row
over the ranks, random documents with pads of document -1 anywhere), cp 1 to 5.
Also: on one causal document under contiguous, rank r receives every token of the
ranks before it and none after (the hand-made case of docs), and the stages of
groupcast_stage_first split the distances 1..cp-1 into S nonempty consecutive runs.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cp/attention_cost.h"
#include "cp/groupcast_plan.h"
#include "cp/sharder.h"
#include "test/lib/test_utils.h"

#define DOC_TOKEN 3
#define MAX_SEQ_LEN 1024
#define C 24

static int cases, zero_counts;

// brute force: whether token t of rank s (row b) is needed by rank r, over every query of r
static int needed_brute(const int *coords, int B, int T, int s, int b, int t, int r) {
    size_t bt = (size_t)B * T;
    const int *si = coords + (size_t)s * 2 * bt + (size_t)b * T, *sd = si + bt;
    const int *ri = coords + (size_t)r * 2 * bt + (size_t)b * T, *rd = ri + bt;
    if (sd[t] < 0) { return 0; }
    for (int q = 0; q < T; q++) {
        if (si[t] <= ri[q] && sd[t] == rd[q]) { return 1; }
    }
    return 0;
}

// every rank's plan from coords (cp, 2, B, T), checked against the brute force
static void check_plans(const int *coords, int cp, int B, int T, const char *what) {
    size_t bt = (size_t)B * T;
    GroupcastPlan *plans = (GroupcastPlan *)mallocCheck((size_t)cp * sizeof(GroupcastPlan));
    for (int r = 0; r < cp; r++) {
        groupcast_plan_init(&plans[r], cp, r, B, T);
        memcpy(plans[r].coords, coords, 2 * (size_t)cp * bt * sizeof(int));
        groupcast_plan_build(&plans[r]);
    }
    int *expected = (int *)mallocCheck(bt * sizeof(int));
    for (int me = 0; me < cp; me++) {
        const GroupcastPlan *p = &plans[me];
        size_t sent = 0, received = 0;
        long send_messages = 0, recv_messages = 0;
        CHECK(p->send_offset[0] == 0 && p->recv_offset[0] == 0, "%s: rank %d's offsets start at %d, %d", what, me,
              p->send_offset[0], p->recv_offset[0]);
        for (int peer = 0; peer < cp; peer++) {
            // what peer needs of me, and what I need of peer
            for (int dir = 0; dir < 2; dir++) {
                int s = dir == 0 ? me : peer, r = dir == 0 ? peer : me, n = 0;
                for (int b = 0; b < B && s != r; b++) {
                    for (int t = 0; t < T; t++) {
                        if (needed_brute(coords, B, T, s, b, t, r)) { expected[n++] = b * T + t; }
                    }
                }
                const int *count = dir == 0 ? p->send_count : p->recv_count;
                const int *offset = dir == 0 ? p->send_offset : p->recv_offset;
                const int *list = dir == 0 ? p->send_index : p->recv_index;
                const char *verb = dir == 0 ? "sends" : "receives from";
                CHECK(count[peer] == n, "%s: rank %d %s rank %d %d tokens, the brute force needs %d", what, me, verb,
                      peer, count[peer], n);
                CHECK(offset[peer + 1] == offset[peer] + count[peer], "%s: rank %d's offsets are not the prefix sums",
                      what, me);
                for (int i = 0; i < n && count[peer] == n; i++) {
                    CHECK(list[offset[peer] + i] == expected[i], "%s: rank %d %s rank %d: token %d of the list is "
                          "%d, expected %d", what, me, verb, peer, i, list[offset[peer] + i], expected[i]);
                }
                zero_counts += peer != me && n == 0;
                if (dir == 0) { sent += n; send_messages += n > 0; }
                else { received += n; recv_messages += n > 0; }
            }
            // my receive list from peer is peer's send list for me
            const GroupcastPlan *q = &plans[peer];
            CHECK(p->recv_count[peer] == q->send_count[me], "%s: rank %d expects %d tokens of rank %d, which sends %d",
                  what, me, p->recv_count[peer], peer, q->send_count[me]);
            for (int i = 0; i < p->recv_count[peer] && p->recv_count[peer] == q->send_count[me]; i++) {
                CHECK(p->recv_index[p->recv_offset[peer] + i] == q->send_index[q->send_offset[me] + i],
                      "%s: rank %d's receive list from rank %d differs from that rank's send list at %d", what, me,
                      peer, i);
            }
        }
        size_t token = 2 * C * sizeof(float);
        AttentionCost a = groupcast_cost(p, C);
        CHECK(a.forward_bytes == sent * token && a.forward_messages == send_messages,
              "%s: rank %d forward %zu bytes %ld messages, expected %zu %ld", what, me, a.forward_bytes,
              a.forward_messages, sent * token, send_messages);
        CHECK(a.backward_bytes == (sent + received) * token && a.backward_messages == send_messages + recv_messages,
              "%s: rank %d backward %zu bytes %ld messages, expected %zu %ld", what, me, a.backward_bytes,
              a.backward_messages, (sent + received) * token, send_messages + recv_messages);
        size_t step = cp == 1 ? 0 : (size_t)(cp - 1) * 2 * bt * sizeof(int);
        CHECK(a.step_bytes == step && a.step_messages == cp - 1, "%s: rank %d step %zu bytes %ld messages, expected "
              "%zu %d", what, me, a.step_bytes, a.step_messages, step, cp - 1);
        if (cp == 1) { CHECK(sent == 0 && received == 0, "%s: cp 1 sends %zu tokens", what, sent); }
    }
    for (int r = 0; r < cp; r++) { groupcast_plan_free(&plans[r]); }
    free(plans);
    free(expected);
    cases++;
}

// the coordinates of every rank's shard of a batch under a layout; returns 0 if the
// sharder refuses the configuration (a rank without a real token)
static int sharded_coords(CpLayoutKind kind, int cp, const int *inputs, int B, int T, int masked, int **coords,
                          int *Tl) {
    int *targets = (int *)callocCheck((size_t)B * T, sizeof(int));
    int ok = 1;
    *coords = NULL;
    for (int r = 0; r < cp && ok; r++) {
        CpSharder sh;
        cp_sharder_init(&sh, kind, r, cp, MAX_SEQ_LEN, masked ? cp_masked_documents(DOC_TOKEN) : cp_no_documents());
        if (cp_shard_batch(&sh, inputs, targets, NULL, B, T) != CP_OK) {
            ok = 0;
        } else {
            *Tl = sh.layout.local_len;
            size_t bt = (size_t)B * *Tl;
            if (*coords == NULL) { *coords = (int *)mallocCheck(2 * (size_t)cp * bt * sizeof(int)); }
            memcpy(*coords + (size_t)r * 2 * bt, sh.layout.global_index, bt * sizeof(int));
            memcpy(*coords + (size_t)r * 2 * bt + bt, sh.layout.document, bt * sizeof(int));
        }
        cp_sharder_free(&sh);
    }
    free(targets);
    if (!ok) { free(*coords); *coords = NULL; }
    return ok;
}

// random tokens, with documents of random lengths opened by DOC_TOKEN
static void random_inputs(Rng *rng, int *inputs, int B, int T, int max_doc) {
    for (int i = 0; i < B * T; i++) { inputs[i] = DOC_TOKEN + 1 + rand_below(rng, 40); }
    for (int b = 0; b < B; b++) {
        for (int t = rand_below(rng, max_doc) + 1; t < T; t += 1 + rand_below(rng, max_doc)) {
            inputs[b * T + t] = DOC_TOKEN;
        }
    }
}

// a random partition: the padded row P = cp * Tl over the ranks in a random order,
// documents random runs of the row with pads (-1) among them
static int *random_coords(Rng *rng, int cp, int B, int Tl) {
    int P = cp * Tl;
    size_t bt = (size_t)B * Tl;
    int *coords = (int *)mallocCheck(2 * (size_t)cp * bt * sizeof(int));
    int *perm = (int *)mallocCheck((size_t)P * sizeof(int));
    int *doc = (int *)mallocCheck((size_t)P * sizeof(int));
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < P; g++) { perm[g] = g; }
        for (int g = P - 1; g > 0; g--) {
            int j = rand_below(rng, g + 1), x = perm[g];
            perm[g] = perm[j];
            perm[j] = x;
        }
        int d = 0;
        for (int g = 0; g < P; g++) {
            if (rand_below(rng, 8) == 0) { d++; }
            doc[g] = rand_below(rng, 6) == 0 ? -1 : d;
        }
        for (int r = 0; r < cp; r++) {
            for (int t = 0; t < Tl; t++) {
                int g = perm[r * Tl + t];
                coords[(size_t)r * 2 * bt + (size_t)b * Tl + t] = g;
                coords[(size_t)r * 2 * bt + bt + (size_t)b * Tl + t] = doc[g];
            }
        }
    }
    free(perm);
    free(doc);
    return coords;
}

// one causal document under contiguous: rank r receives all of ranks < r, nothing of ranks > r
static void check_contiguous_causal(int cp, int T) {
    int *inputs = (int *)mallocCheck((size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) { inputs[t] = DOC_TOKEN + 1; }
    int *coords, Tl;
    CHECK(sharded_coords(CP_LAYOUT_CONTIGUOUS, cp, inputs, 1, T, 0, &coords, &Tl), "contiguous T %d cp %d refused",
          T, cp);
    for (int r = 0; r < cp; r++) {
        GroupcastPlan p;
        groupcast_plan_init(&p, cp, r, 1, Tl);
        memcpy(p.coords, coords, 2 * (size_t)cp * Tl * sizeof(int));
        groupcast_plan_build(&p);
        for (int s = 0; s < cp; s++) {
            // the real tokens of rank s: those of [s Tl, (s+1) Tl) below T
            int real = s * Tl >= T ? 0 : (s + 1) * Tl <= T ? Tl : T - s * Tl;
            int expected = s < r ? real : 0;
            CHECK(p.recv_count[s] == expected, "contiguous T %d cp %d: rank %d receives %d tokens of rank %d, "
                  "expected %d", T, cp, r, p.recv_count[s], s, expected);
        }
        groupcast_plan_free(&p);
    }
    free(coords);
    free(inputs);
}

static void check_stages(void) {
    for (int cp = 2; cp <= 9; cp++) {
        for (int S = 1; S <= cp - 1; S++) {
            CHECK(groupcast_stage_first(cp, S, 0) == 1 && groupcast_stage_first(cp, S, S) == cp,
                  "cp %d S %d: the stages span [%d, %d), not [1, %d)", cp, S, groupcast_stage_first(cp, S, 0),
                  groupcast_stage_first(cp, S, S), cp);
            for (int i = 0; i < S; i++) {
                CHECK(groupcast_stage_first(cp, S, i + 1) > groupcast_stage_first(cp, S, i),
                      "cp %d S %d: stage %d is empty", cp, S, i);
            }
        }
    }
}

int main(void) {
    Rng rng;
    rng_seed(&rng, 27);
    int B = 2;
    int Ts[] = {7, 37, 100};
    for (int cp = 1; cp <= 5; cp++) {
        for (int kind = 0; kind < CP_NUM_LAYOUTS; kind++) {
            for (int i = 0; i < 3; i++) {
                for (int masked = 0; masked < 2; masked++) {
                    int T = Ts[i];
                    if (kind == CP_LAYOUT_PACKED && !masked) { continue; } // packed needs documents
                    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int));
                    random_inputs(&rng, inputs, B, T, 1 + T / 4);
                    int *coords, Tl;
                    if (sharded_coords((CpLayoutKind)kind, cp, inputs, B, T, masked, &coords, &Tl)) {
                        char what[96];
                        snprintf(what, sizeof(what), "%s cp %d T %d%s", cp_layout_names[kind], cp, T,
                                 masked ? " documents" : "");
                        check_plans(coords, cp, B, Tl, what);
                        free(coords);
                    }
                    free(inputs);
                }
            }
        }
        for (int trial = 0; trial < 4; trial++) {
            int Tl = 1 + rand_below(&rng, 20);
            int *coords = random_coords(&rng, cp, B, Tl);
            char what[64];
            snprintf(what, sizeof(what), "random partition cp %d Tl %d", cp, Tl);
            check_plans(coords, cp, B, Tl, what);
            free(coords);
        }
        if (cp >= 2) { check_contiguous_causal(cp, 64); }
    }
    check_contiguous_causal(4, 100); // a padded tail: rank 3 holds 22 real tokens and 3 pads
    check_stages();
    // every layout at every cp but identity (cp 1 only), random partitions, and a few
    // configurations the sharder refuses (a rank without a real token)
    CHECK(cases >= 5 * 4 * 5 && zero_counts > 0, "only %d cases ran, %d zero counts met", cases, zero_counts);
    printf("test_groupcast_plan: OK, %d cases of cp 1..5 (every layout, random partitions), %d peers that needed "
           "nothing got count 0\n", cases, zero_counts);
    return 0;
}
