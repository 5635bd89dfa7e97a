// report/bars.h: horizontal bar charts of bytes, one row per configuration (a mesh, a
// device count): the series of a row side by side (each tag's own peak) or stacked (the
// tags that make up one total), a byte axis below, the row's names on the left.
#ifndef MESHMOE_BARS_H
#define MESHMOE_BARS_H
#include "report/svg.h"

#define BARS_MAX 8

typedef struct {
    char label[64];            // the row's name, left of its bars
    double value[BARS_MAX];    // bytes, one per series
    int missing;               // no bars: `note` says why
    char note[160];            // text right of the bars ("" for none)
} BarRow;

typedef struct {
    const char *title;         // above the panel
    const char *axis;          // under the axis ("bytes per device")
    int nseries;
    const char *series[BARS_MAX], *colors[BARS_MAX];
    int slots;                 // the height of a row in bars (0: nseries), to align with another chart
    int stacked;               // 1: one bar per row, the series stacked; 0: one bar per series
    int label_values;          // 1: each bar (or stack) ends with its value
    int nrows;
    BarRow *rows;
} BarChart;

// The height bars_draw takes for c (title, rows and axis).
double bars_height(const BarChart *c);
// Draws c with its top-left corner at (x, y): `label_w` for the row names (0: none, rows
// aligned with another panel's), `w` for the bars and their notes.
void bars_draw(Svg *s, const BarChart *c, double x, double y, double label_w, double w);

#endif
