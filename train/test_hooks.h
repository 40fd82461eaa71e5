/*
The trainers' test hooks, in one place: environment variables that only the tests
set, each changing one thing a test cannot reach otherwise. A user never needs them.

    GPT2CP_TEST_BF16_MODEL_FILE=1   the CPU twin writes bf16 model files (version 5),
                                    as the GPU trainer's BF16 build does: the weights
                                    rounded to bf16, so not exact, and the exact fp32
                                    master weights in the state files (train/
                                    checkpoint_files.h), which the resume then takes.
                                    No trainer of the CPU build needs that section, so
                                    this is how test/e2e_zero.sh checks it end to end.
    GPT2CP_TEST_HOST_WAITS=1        the GPU trainer prints, per rank and step, how often
                                    the step waited for the device
                                    (dev/cuda/emu/trainer.sh holds them to one)
*/
#ifndef TRAIN_TEST_HOOKS_H
#define TRAIN_TEST_HOOKS_H

#include <stdlib.h>

static int test_hook_bf16_model_file(void) { return getenv("GPT2CP_TEST_BF16_MODEL_FILE") != NULL; }

static int test_hook_host_waits(void) { return getenv("GPT2CP_TEST_HOST_WAITS") != NULL; }

#endif // TRAIN_TEST_HOOKS_H
