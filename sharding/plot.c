// sharding/plot.c: `./train plot TRACE OUT_DIR` (placeholder, filled below)
#include "sharding/plan.h"
#include "common.h"
int plot_trace(const char *trace, const char *out_dir) { (void)trace; (void)out_dir; die("plot: not yet"); }
