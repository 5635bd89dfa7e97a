// trainer/same_start.h: over several processes, the files each host starts from against
// process 0's copies (trainer/same_start.c).
#ifndef MESHMOE_SAME_START_H
#define MESHMOE_SAME_START_H
#include "base/config.h"

// load_checkpoint, load_parameters_path, or every file load_hf reads from its directory
// (hf_read_names): each one's size and hash here against process 0's, since copies at another
// step would part the replicas, or leave one process waiting for steps the others do not
// take. Every process takes part in every share (base/net.h) before any may stop: load_hf's
// count of files first, then as many files as process 0 has. Dies naming the key, the path
// and the file that differs, with both sizes and hashes, or where the lists of files part.
// Runs over several processes only (net_current() is set).
void same_start_check(const Config *c);
#endif
