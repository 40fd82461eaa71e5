/*
The state file (train/checkpoint_files.h, version 5): its header, the moments of a range
of the flat parameter vector (all of it at -z 0, a rank's shard at -z 1) and the
optional section of the fp32 master weights of that range.

    1. sizes: a file is exactly 1024 + 32 * 8 + 2 * 132 * 8 + 4096 bytes of header
       plus 4 bytes per parameter of the range for m, for v and, with the section,
       for the master weights (the formula written out here, not the reader's)
    2. round trip: the header's zero stage, range and section flag, run id, batch
       bound, -tl bytes and tail checksum, -dm, -rp and -lm, the outlier detectors of -sl and -sg
       (every value of both windows, the count and index of a full one), an -e of
       4095 bytes, and every value of m, v and the master weights come back as
       written; a reader that does not want the master weights (NULL) still reads
       the moments
    3. what a resume must refuse, each with its reason: a range other than the
       reader's, a flipped bit in the master weights (their checksum), a master
       weight that is not finite, a file cut short, a range past the parameters,
       a detector whose index lies outside its window (sealed again: only the
       field's check can find it), no batch bound, a -lm of 2, a version 4 file
       (written before -dm, -rp, -lm were recorded)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "train/checkpoint_files.h"
#include "test/lib/test_utils.h"

#define NUM_PARAMETERS 1000
#define HEADER_BYTES (1024 + 32 * 8 + 2 * (4 + 128) * 8 + 4096)

static char dir[] = "/tmp/test_state_file_XXXXXX";

static TrainState header(uint64_t stage, uint64_t begin, uint64_t end) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.step = 3;
    s.rank = 1;
    s.world_size = 4;
    s.cp_size = 2;
    s.dp_size = 2;
    s.B = 2;
    s.T = 16;
    s.padded_len = 16;
    s.num_parameters = NUM_PARAMETERS;
    s.zero_stage = stage;
    s.shard_begin = begin;
    s.shard_end = end;
    s.run_id = 0x0123456789abcdefULL;
    s.micro_batches = 70000; // more than 2^16 batches a step (-d)
    s.data_batches = 3 * 70000;
    s.token_loss_bytes = 5000000000ULL; // past 2^32
    s.token_loss_tail = 0xfedcba9876543210ULL;
    s.document_masking = 1;
    s.restart_positions = 0;
    s.loss_masks = 1;
    s.layout_chunk = 192; // the solver's -cc
    // the detectors: the loss's window full (count 128, index 37), the norm's filling
    for (int i = 0; i < 200; i++) { outlier_detector_update(&s.loss_outliers, 3.0 + 0.01 * i); }
    for (int i = 0; i < 50; i++) { outlier_detector_update(&s.grad_norm_outliers, 1.0 / (1 + i)); }
    memset(s.init, 'x', sizeof(s.init) - 1); // an -e of the longest length kept whole
    s.init[sizeof(s.init) - 1] = '\0';
    return s;
}

static long size_of(const char *path) {
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);
    return size;
}

// state_read of path into buffers of [begin, end); returns its status, the reason in why
static int read_into(const char *path, TrainState *s, float *m, float *v, float *master, uint64_t begin, uint64_t end,
                     char *why) {
    StateBuffers buf = {.m = m, .v = v, .master = master, .begin = begin, .end = end}; // no table window: all held
    return state_read(path, s, &buf, NUM_PARAMETERS, why, 512);
}

static void expect_refused(const char *what, int status, const char *why, const char *reason) {
    CHECK(status != 0, "%s: read without an error", what);
    CHECK(strstr(why, reason) != NULL, "%s: the reason is '%s', expected it to say '%s'", what, why, reason);
    printf("ok   %s refused: %s\n", what, why);
}

// flips one bit of the file at byte `offset`
static void flip_bit(const char *path, long offset) {
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL, "cannot open %s", path);
    fseek(fp, offset, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, offset, SEEK_SET);
    fputc(c ^ 0x10, fp);
    fclose(fp);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "cannot make a scratch directory");
    CHECK(STATE_HEADER_BYTES == HEADER_BYTES, "the header is %zu bytes, expected %d", (size_t)STATE_HEADER_BYTES,
          HEADER_BYTES);
    Rng rng;
    rng_seed(&rng, 5);
    const uint64_t begin = 250, end = 500, count = end - begin; // rank 1 of 4 at -z 1
    float m[NUM_PARAMETERS], v[NUM_PARAMETERS], master[NUM_PARAMETERS];
    fill_uniform(&rng, m, count, -1.0f, 1.0f);
    fill_uniform(&rng, v, count, 0.0f, 1.0f);
    fill_uniform(&rng, master, count, -2.0f, 2.0f);
    char plain[4096], with_master[4096], why[512];
    snprintf(plain, sizeof(plain), "%s/plain.bin", dir);
    snprintf(with_master, sizeof(with_master), "%s/master.bin", dir);
    TrainState s = header(1, begin, end), got;
    state_write(plain, &s, m, v, NULL);
    state_write(with_master, &s, m, v, master);

    // 1. sizes
    CHECK(size_of(plain) == HEADER_BYTES + 2 * 4 * (long)count, "plain: %ld bytes", size_of(plain));
    CHECK(size_of(with_master) == HEADER_BYTES + 3 * 4 * (long)count, "with master weights: %ld bytes",
          size_of(with_master));
    printf("ok   sizes: %ld bytes (moments of %llu parameters), %ld with the master weights\n", size_of(plain),
           (unsigned long long)count, size_of(with_master));

    // 2. round trip
    float m2[NUM_PARAMETERS], v2[NUM_PARAMETERS], master2[NUM_PARAMETERS];
    for (int pass = 0; pass < 2; pass++) {
        const char *path = pass ? with_master : plain;
        for (uint64_t i = 0; i < count; i++) { m2[i] = v2[i] = master2[i] = -7.0f; }
        CHECK(read_into(path, &got, m2, v2, master2, begin, end, why) == 0, "%s: %s", path, why);
        CHECK(got.zero_stage == 1 && got.shard_begin == begin && got.shard_end == end,
              "%s: -z %llu, range [%llu, %llu)", path, (unsigned long long)got.zero_stage,
              (unsigned long long)got.shard_begin, (unsigned long long)got.shard_end);
        CHECK(got.has_master_weights == (uint64_t)pass, "%s: master-weights flag %llu", path,
              (unsigned long long)got.has_master_weights);
        CHECK(memcmp(m, m2, count * sizeof(float)) == 0 && memcmp(v, v2, count * sizeof(float)) == 0,
              "%s: the moments differ from those written", path);
        for (uint64_t i = 0; i < count; i++) {
            CHECK(master2[i] == (pass ? master[i] : -7.0f), "%s: master weight %llu is %g", path,
                  (unsigned long long)i, master2[i]);
        }
    }
    CHECK(read_into(with_master, &got, m2, v2, NULL, begin, end, why) == 0, "master weights unwanted: %s", why);
    CHECK(got.run_id == s.run_id && got.micro_batches == s.micro_batches && got.data_batches == s.data_batches &&
          got.token_loss_bytes == s.token_loss_bytes && got.token_loss_tail == s.token_loss_tail &&
          got.layout_chunk == s.layout_chunk,
          "run id %llx, batches %llu of at most %llu a step, -tl %llu bytes %llx, chunk %llu",
          (unsigned long long)got.run_id, (unsigned long long)got.data_batches, (unsigned long long)got.micro_batches,
          (unsigned long long)got.token_loss_bytes, (unsigned long long)got.token_loss_tail,
          (unsigned long long)got.layout_chunk);
    CHECK(got.document_masking == 1 && got.restart_positions == 0 && got.loss_masks == 1,
          "-dm %llu -rp %llu -lm %llu, written 1 0 1", (unsigned long long)got.document_masking,
          (unsigned long long)got.restart_positions, (unsigned long long)got.loss_masks);
    const OutlierDetector *want[2] = {&s.loss_outliers, &s.grad_norm_outliers}, *have[2] = {&got.loss_outliers,
                                                                                            &got.grad_norm_outliers};
    CHECK(want[0]->count == 128 && want[0]->index == 72 && want[1]->count == 50, "the detectors written: %d %d %d",
          want[0]->count, want[0]->index, want[1]->count);
    for (int d = 0; d < 2; d++) {
        CHECK(have[d]->count == want[d]->count && have[d]->index == want[d]->index && have[d]->sum == want[d]->sum &&
              have[d]->sum_sq == want[d]->sum_sq && memcmp(have[d]->window, want[d]->window, sizeof(want[d]->window)) == 0,
              "detector %d: count %d index %d sum %g", d, have[d]->count, have[d]->index, have[d]->sum);
        // the next z-score of a detector read back is the one the writer's gives
        OutlierDetector a = *want[d], b = *have[d];
        double za = outlier_detector_update(&a, 10.0), zb = outlier_detector_update(&b, 10.0);
        CHECK((isnan(za) && isnan(zb)) || za == zb, "detector %d: next z-score %g, the writer's %g", d, zb, za);
    }
    CHECK(strlen(got.init) == sizeof(got.init) - 1 && strcmp(got.init, s.init) == 0, "-e of %zu bytes came back as %zu",
          strlen(s.init), strlen(got.init));
    printf("ok   round trip: header (run id, batch bound, -tl bytes and tail, -dm -rp -lm, both outlier windows, an -e of %zu "
           "bytes), moments, master weights (and the moments alone)\n", strlen(s.init));

    // 3. refused
    expect_refused("another rank's range", read_into(with_master, &got, m2, v2, master2, 0, count, why), why,
                   "holds the optimizer state of the parameters [250, 500) (-z 1), this rank holds [0, 250)");
    char damaged[4096];
    snprintf(damaged, sizeof(damaged), "%s/damaged.bin", dir);
    state_write(damaged, &s, m, v, master);
    flip_bit(damaged, HEADER_BYTES + 2 * 4 * (long)count + 4 * 17);
    expect_refused("a flipped master weight", read_into(damaged, &got, m2, v2, master2, begin, end, why), why,
                   "its master weights do not match their checksum");
    master[9] = INFINITY;
    state_write(damaged, &s, m, v, master);
    expect_refused("an infinite master weight", read_into(damaged, &got, m2, v2, master2, begin, end, why), why,
                   "master weight 259 is not a finite number");
    CHECK(truncate(with_master, HEADER_BYTES + 2 * 4 * (long)count) == 0, "cannot truncate");
    char expected[128];
    snprintf(expected, sizeof(expected), "expected %ld for 250 parameters and their master weights",
             HEADER_BYTES + 3 * 4 * (long)count);
    expect_refused("a file without its flagged section", read_into(with_master, &got, m2, v2, master2, begin, end, why),
                   why, expected);
    TrainState past = header(1, 900, NUM_PARAMETERS + 1);
    state_write(damaged, &past, m, v, NULL);
    expect_refused("a range past the parameters", read_into(damaged, &got, m2, v2, master2, 900, 1001, why), why,
                   "corrupt header");
    TrainState odd = header(1, begin, end);
    odd.loss_outliers.index = 128; // outside the window: a resume would read past it
    state_write(damaged, &odd, m, v, NULL);
    expect_refused("a detector index outside its window", read_into(damaged, &got, m2, v2, NULL, begin, end, why), why,
                   "an outlier detector (-sl, -sg) that cannot be");
    odd = header(1, begin, end);
    odd.micro_batches = 0;
    state_write(damaged, &odd, m, v, NULL);
    expect_refused("no batch bound", read_into(damaged, &got, m2, v2, NULL, begin, end, why), why, "corrupt header");
    odd = header(1, begin, end);
    odd.loss_masks = 2;
    state_write(damaged, &odd, m, v, NULL);
    expect_refused("-lm 2", read_into(damaged, &got, m2, v2, NULL, begin, end, why), why, "corrupt header");
    // version 4: the int at byte 4 (what the header checksum does not need: the version is read first)
    state_write(damaged, &s, m, v, NULL);
    FILE *fp = fopen(damaged, "r+b");
    int four = 4;
    CHECK(fp != NULL && fseek(fp, 4, SEEK_SET) == 0 && fwrite(&four, sizeof(int), 1, fp) == 1 && fclose(fp) == 0,
          "cannot write the version of %s", damaged);
    expect_refused("a version 4 file", read_into(damaged, &got, m2, v2, NULL, begin, end, why), why,
                   "version 4, written before state files recorded -dm, -rp and -lm");
    unlink(plain);
    unlink(with_master);
    unlink(damaged);
    rmdir(dir);
    printf("test_state_file: OK\n");
    return 0;
}
