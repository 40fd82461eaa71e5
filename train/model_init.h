/*
The run's model on the host, shared by both trainers: its configuration (from -e
or the checkpoint a resume starts from), the run's checks against it (T, cp and
the layout), and its weights.
*/
#ifndef TRAIN_MODEL_INIT_H
#define TRAIN_MODEL_INIT_H

#include <stdio.h>
#include "../cp/layout.h"
#include "../cp/mesh.h"
#include "../cp/sharder.h"
#include "checkpoint_files.h"
#include "../llmc/gpt2.h"
#include "../llmc/utils.h"
#include "config.h"

#define RANDOM_INIT_SEED 42 // llm.c's

// The configuration of the run's model, before anything is allocated: the header
// of the checkpoint resumed from or of -e FILE, or for one of llm.c's descriptors
// (dN, gpt2:dN, gpt3:cN) its model with a position table that covers -t
// (random_init_max_seq_len). source: where the model comes from, for messages.
static GPT2Config run_model_config(const TrainConfig *cfg, int resume_step, char *source, size_t source_size) {
    GPT2Config c;
    char why[256];
    int descriptor = resume_step < 0 ? gpt2_config_from_descriptor(cfg->init, &c, why, sizeof(why)) : 0;
    if (descriptor < 0) { fatal_everywhere("-e %s: %s", cfg->init, why); }
    if (descriptor > 0) {
        c.max_seq_len = random_init_max_seq_len(cfg, c.max_seq_len);
        if (gpt2_config_check(c, why, sizeof(why)) != 0) { fatal_everywhere("-e %s: %s", cfg->init, why); }
        snprintf(source, source_size, "the random init -e %s", cfg->init);
        return c;
    }
    char path[4096];
    if (resume_step >= 0) { model_path(path, sizeof(path), cfg->output_dir, resume_step); }
    else { snprintf(path, sizeof(path), "%s", cfg->init); }
    snprintf(source, source_size, "the checkpoint '%s'", path);
    return gpt2_checkpoint_config(path);
}

// The model of configuration c (run_model_config) into host memory: the weights of
// the checkpoint resumed from, else -e (an llm.c checkpoint, or llm.c's random init
// of a descriptor's model). Every rank reads the same checkpoint (each checks the
// file it was given); the random init is drawn on world rank 0 only, since the
// trainers broadcast rank 0's weights to every rank before the first step (at d12,
// 124M normals: about 2 s of every other rank's start-up), and the other ranks'
// weights stay zero until then.
static void init_model_host(GPT2 *model, const TrainConfig *cfg, int resume_step, GPT2Config c, int world_rank) {
    if (resume_step >= 0) {
        char path[4096];
        model_path(path, sizeof(path), cfg->output_dir, resume_step);
        gpt2_load_checkpoint(model, path);
    } else if (!init_is_checkpoint_file(cfg->init)) {
        if (world_rank == 0) { gpt2_init_random(model, c, RANDOM_INIT_SEED); }
        else { gpt2_allocate(model, c); }
    } else {
        gpt2_load_checkpoint(model, cfg->init);
    }
}

// Checks the run against the model and (T, cp, layout) before anything is
// allocated for them. source: where the model comes from (run_model_config).
static void check_run_against_model(const TrainConfig *cfg, CpLayoutKind layout, const Mesh *mesh, GPT2Config c,
                                    const char *source) {
    validate_against_model(cfg, c, source);
    CpSharder probe;
    cp_sharder_init(&probe, layout, mesh->cp_rank, mesh->cp_size, c.max_seq_len, run_documents(cfg));
    probe.chunk = cfg->chunk;
    if (cp_check_config(&probe, cfg->T) != CP_OK) { fatal_everywhere("%s", probe.error); }
}

#endif // TRAIN_MODEL_INIT_H
