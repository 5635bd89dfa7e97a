// trainer/files.c: the files of a training run against each other (see files.h).
#include "trainer/files.h"
#include "trainer/hf.h"
#include "base/runfiles.h"

void train_files_check(const Config *c, const char *config_file) {
    static const char *const dump[] = {"dump.safetensors"};   // trainer/dump.c
    RunFiles r;
    runfiles_init(&r);
    runfiles_input(&r, "config file", config_file);
    if (strcmp(c->dataset_path, "synthetic")) runfiles_input(&r, "dataset_path", c->dataset_path);
    runfiles_input(&r, "load_checkpoint", c->load_checkpoint);
    runfiles_input(&r, "load_parameters_path", c->load_parameters_path);
    hf_files(&r, "load_hf", c->load_hf, 0);
    runfiles_output(&r, "save_checkpoint", c->save_checkpoint);
    runfiles_output(&r, "metrics_file", c->metrics_file);
    runfiles_output(&r, "memory_trace", c->memory_trace);
    runfiles_output_dir(&r, "dump_parity", c->dump_parity, dump, 1);
    runfiles_allow_same(&r, "save_checkpoint", "load_checkpoint");
    runfiles_check(&r);
    runfiles_free(&r);
}
