// report/plan.h: the memory planner (dry_run=true) and the memory timeline
// (memory_trace=PATH).
//
// Both watch one training step through the allocator's hook (base/memory.h): every
// allocation, free and phase change ("forward layer 3") of a device. The planner keeps the
// largest live buffers at the moment of the peak and prints the plan; the trace keeps every
// event with the live bytes by tag after it, written as CSV (one file for all devices) that
// `./train plot TRACE OUT_DIR` turns into one SVG per device (report/plot.c).
#ifndef MESHMOE_PLAN_H
#define MESHMOE_PLAN_H
#include <stdio.h>
#include "base/mesh.h"

// Start watching the calling device's step (after mem_reset_peak); `trace`: keep the events.
void plan_watch_begin(Device *d, int trace);
// Stop watching (the state stays for plan_print / plan_trace_write).
void plan_watch_end(Device *d);
// Print the plan of every device of the mesh (after the devices have finished), and
// whether it fits hbm_capacity. Returns 1 if every device fits.
int plan_print(const Mesh *mesh, size_t capacity);
// Write the events of every watched device to path (CSV, header line first).
void plan_trace_write(const Mesh *mesh, const char *path);
// Free what the watch kept.
void plan_free(const Mesh *mesh);
// `./train plot TRACE OUT_DIR`: one SVG per device of the trace (report/plot.c).
int plot_trace(const char *trace, const char *out_dir);

#endif
