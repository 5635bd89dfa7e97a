// report/svg.h: the few SVG pieces every figure of meshmoe draws with (text, boxes,
// lines, a byte axis, a legend). Plain SVG 1.1 that a browser opens; nothing but stdio.
// The figures themselves: report/plot.c (memory timelines), report/bars.c (bar
// charts), report/schedule_plot.c (pipeline schedules), sweep/figure.c (`./train figure`).
#ifndef MESHMOE_SVG_H
#define MESHMOE_SVG_H
#include "base/memory.h"
#include <stdio.h>

typedef struct {
    FILE *f;
    char path[1024];
} Svg;

// One colour per memory tag (MEM_PARAMS .. MEM_COMM), the same in every figure.
extern const char *const SVG_TAG_COLORS[MEM_NTAGS];

// Opens `path` for a w x h picture with a white background; dies naming the path.
void svg_open(Svg *s, const char *path, int w, int h);
// Ends the picture and closes the file; dies if it could not be written.
void svg_close(Svg *s);

// Text at (x, y), printf-style, escaped for XML. anchor: "start", "middle" or "end";
// attrs: more attributes ("" for none), e.g. "font-weight=\"bold\"".
void svg_text(Svg *s, double x, double y, const char *anchor, const char *attrs, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
// The same, turned to read upwards, its end at (x, y).
void svg_vtext(Svg *s, double x, double y, const char *attrs, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void svg_rect(Svg *s, double x, double y, double w, double h, const char *fill, const char *attrs);
void svg_line(Svg *s, double x1, double y1, double x2, double y2, const char *stroke, const char *attrs);

// A tick step of 1, 2 or 5 times a power of ten such that [0, max] takes at most `nticks`
// steps (max > 0).
double svg_tick_step(double max, int nticks);
// Bytes as a label in the unit of an axis that goes up to axis_max: "12 MiB", "1.5 GiB".
void svg_bytes_label(double bytes, double axis_max, char *buf, size_t cap);
// The byte scale of an axis: the largest value rounded up to a whole number of ticks in
// MiB (or KiB below 1 MiB, GiB above 1 GiB); *step receives the tick step in bytes.
double svg_bytes_axis(double max, int nticks, double *step);

// A column of coloured squares with their labels, the first at (x, y); rows `dy` apart.
void svg_legend(Svg *s, double x, double y, double dy, int n, const char *const *colors, const char *const *labels);

#endif
