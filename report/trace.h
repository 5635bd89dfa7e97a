// report/trace.h: reading a memory_trace CSV (written by report/plan.c:plan_trace_write)
// back, for the figures: every device's events over one step, each with the live bytes of
// every tag after it.
#ifndef MESHMOE_TRACE_H
#define MESHMOE_TRACE_H
#include "base/memory.h"
#include <stddef.h>

typedef struct {
    int ev;                      // 1 alloc, -1 free, 0 phase
    size_t live[MEM_NTAGS], total;
    char name[96];               // the buffer, or the phase ("forward layer 3")
} TraceEvent;

typedef struct {
    int device;
    TraceEvent *e;
    size_t n, cap;
} TraceDevice;

typedef struct {
    TraceDevice *dev;            // in the order of the file (device 0 first)
    int ndev;
} Trace;

// Reads the whole file; dies with one message naming the path (and line) when it is not
// a memory trace or holds no events.
void trace_read(Trace *t, const char *path);
void trace_free(Trace *t);
// The event at which the device's live bytes were highest (the first such).
size_t trace_peak(const TraceDevice *d);
// The device whose peak is highest (the first such).
const TraceDevice *trace_highest(const Trace *t);

#endif
