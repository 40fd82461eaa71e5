/*
The trainers' model file writer (gpt2_save_checkpoint, llmc/checkpoint.h) on weights of
any bits, for test/e2e_model_bf16.sh:

    model_file_writer WEIGHTS maxT V Vp L NH C VERSION OUT

WEIGHTS: raw fp32, exactly the model's parameters in llm.c's order. They go into
the model as they are (NaN and infinities too: a trainer's weights never hold
them, since a non-finite loss stops the run, but the bf16 rounding must still
give the GPU's bits for them), and the model is written as version VERSION (3 or
5) to OUT, as a trainer's checkpoint writes it.
*/
#include "llmc/checkpoint.h"

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: %s WEIGHTS maxT V Vp L NH C VERSION OUT\n", argv[0]);
        return 2;
    }
    GPT2Config c;
    c.max_seq_len = atoi(argv[2]);
    c.vocab_size = atoi(argv[3]);
    c.padded_vocab_size = atoi(argv[4]);
    c.num_layers = atoi(argv[5]);
    c.num_heads = atoi(argv[6]);
    c.channels = atoi(argv[7]);
    int version = atoi(argv[8]);
    char why[512];
    if (gpt2_config_check(c, why, sizeof(why)) != 0) { fatal("the model: %s", why); }
    GPT2 model;
    gpt2_allocate(&model, c);
    FILE *fp = open_input_file(argv[1], why, sizeof(why));
    if (fp == NULL) { fatal("'%s': %s", argv[1], why); }
    long expected = (long)(model.num_parameters * sizeof(float));
    long size = file_size_of(fp, argv[1]);
    if (size != expected) { fatal("'%s': %ld bytes, the model's %zu parameters are %ld", argv[1], size,
                                  model.num_parameters, expected); }
    if (fread(model.params_memory, sizeof(float), model.num_parameters, fp) != model.num_parameters) {
        fatal("'%s': cannot read its weights", argv[1]);
    }
    fclose(fp);
    gpt2_save_checkpoint(&model, argv[9], version, NULL);
    gpt2_free(&model);
    return 0;
}
