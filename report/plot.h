// report/plot.h: memory timelines drawn from memory_trace CSVs (report/trace.h): the
// live bytes of each tag stacked over one step. `./train plot TRACE DIR` draws one SVG per
// device (plot_trace, declared in report/plan.h); plot_timelines puts the highest
// device of several traces side by side on one byte scale, to compare configurations.
#ifndef MESHMOE_PLOT_H
#define MESHMOE_PLOT_H

// n panels, panel k from traces[k] captioned labels[k]; title and note head the figure.
void plot_timelines(const char *out, const char *title, const char *note, int n, char *const *labels,
                    char *const *traces);

#endif
