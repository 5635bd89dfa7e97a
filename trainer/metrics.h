// trainer/metrics.h: what each device reports after a training step, and the metrics file
// (metrics_file=PATH): one JSON object per step, the loss to round-trip precision with its
// bits, and every device's peak and live bytes by tag, collective bytes (and of those, the
// bytes that crossed between processes) and host memory.
#ifndef MESHMOE_METRICS_H
#define MESHMOE_METRICS_H
#include <stdio.h>
#include "trainer/step.h"
#include "base/memory.h"
#include "base/mesh.h"
#include "base/collectives.h"

// One device's figures after a step (gathered to every device by metrics_gather).
typedef struct {
    size_t peak_total, peak[MEM_NTAGS], live[MEM_NTAGS], fwd_peak[MEM_NTAGS];
    size_t sent[COLL_NKINDS], recv[COLL_NKINDS];
    size_t net_sent[COLL_NKINDS], net_recv[COLL_NKINDS];   // of those, between processes
    size_t host_peak_total, host_peak[MEM_NTAGS], to_host, to_device;   // host memory (offload)
    int stop;   // the signal that asked this run to stop after this step (base/paths.h), or 0
} DevStats;

// A step's timing: milliseconds, tokens per second, model GFLOP/s of the whole mesh.
typedef struct { double ms, tok_s, gflops; } StepTime;

// The calling device's figures after the step r.
void metrics_device(const Device *dev, const StepResult *r, DevStats *s);
// Every device's figures, on every device (a collective: all devices call it). all: (ndev).
void metrics_gather(const Mesh *mesh, const Device *dev, const StepResult *r, DevStats *all);
// The highest peak over the ndev devices of all.
size_t metrics_peak(const DevStats *all, int ndev);
// The metrics file of a run whose first step is first_step: written anew (beside the path,
// renamed over it once its first line is written: a run that fails before leaves an earlier
// file as it was), or appended to when the run resumes. Dies naming the path when it cannot
// be opened. metrics_close ends it (a run of no steps: an empty file).
FILE *metrics_open(const char *path, int first_step);
void metrics_close(FILE *f);
// One JSON line for step. A write that fails (a full disk, `ulimit -f`) stops the run
// naming the path and the reason, and the unfinished line is cut off: the file keeps
// whole lines.
void metrics_write(FILE *f, const char *path, int step, const StepResult *r, StepTime t, const DevStats *all,
                   int ndev);
#endif
