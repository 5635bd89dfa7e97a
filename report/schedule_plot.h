// report/schedule_plot.h: a pipeline schedule (pipeline/schedule.h) drawn as a chart:
// one row per stage, one column per tick, each cell the forward or backward of one
// microbatch (and repeat), the idle cells (the bubble) hatched and counted.
#ifndef MESHMOE_SCHEDULE_PLOT_H
#define MESHMOE_SCHEDULE_PLOT_H
#include "pipeline/schedule.h"

// title: what was run (the command), under the schedule's own heading.
void schedule_plot(const Schedule *sc, const char *title, const char *path);

#endif
