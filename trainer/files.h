// trainer/files.h: the files of a training run (`./train CONFIG`, and each run of `./train
// sweep`), checked against each other by file identity before any work (base/runfiles.h).
#ifndef MESHMOE_FILES_H
#define MESHMOE_FILES_H
#include "base/config.h"

// Reads: config_file, dataset_path, load_checkpoint, load_hf's files. Writes:
// save_checkpoint, metrics_file, memory_trace, dump_parity's dump.safetensors. Dies on an
// output that is the same file as another path of the run, or lies inside dump_parity;
// save_checkpoint may be load_checkpoint (resume and save in place: the save is atomic).
void train_files_check(const Config *c, const char *config_file);
#endif
