// report/bars.c: horizontal bar charts of bytes (see bars.h).
#include "report/bars.h"
#include "core/common.h"

#define TITLE_H 28.0
#define AXIS_H 44.0
#define BAR_H 9.0        // one bar of a group
#define STACK_H 22.0     // a stacked bar
#define GAP 12.0         // between rows

static double row_h(const BarChart *c) {
    return (c->stacked ? STACK_H : (c->slots ? c->slots : c->nseries) * BAR_H) + GAP;
}

double bars_height(const BarChart *c) { return TITLE_H + c->nrows * row_h(c) + AXIS_H; }

// The largest bar: a row's sum when stacked, else its largest series.
static double largest(const BarChart *c) {
    double m = 0;
    for (int r = 0; r < c->nrows; r++) {
        double sum = 0;
        for (int k = 0; k < c->nseries && !c->rows[r].missing; k++) {
            sum += c->rows[r].value[k];
            m = MM_MAX(m, c->rows[r].value[k]);
        }
        if (c->stacked) m = MM_MAX(m, sum);
    }
    return m > 0 ? m : 1;
}

void bars_draw(Svg *s, const BarChart *c, double x, double y, double label_w, double w) {
    // The bars take 70% of the width, so that a value or a note fits right of the longest.
    double step, xmax = svg_bytes_axis(largest(c), 5, &step), bw = w * 0.70, x0 = x + label_w;
    double y0 = y + TITLE_H, rh = row_h(c), yend = y0 + c->nrows * rh;
    char a[48];
    #define XB(v) (x0 + (v) / xmax * bw)
    svg_text(s, x0, y + 16, "start", "font-weight=\"bold\"", "%s", c->title);
    for (double v = 0; v <= xmax * 1.0001; v += step) {   // grid and ticks
        svg_line(s, XB(v), y0 - 4, XB(v), yend, "#ddd", "");
        svg_bytes_label(v, xmax, a, sizeof a);
        svg_text(s, XB(v), yend + 16, "middle", "", "%s", a);
    }
    svg_line(s, x0, yend, x0 + bw, yend, "black", "");
    svg_line(s, x0, y0 - 4, x0, yend, "black", "");
    svg_text(s, x0 + bw / 2, yend + 34, "middle", "fill=\"#555\"", "%s", c->axis);
    for (int r = 0; r < c->nrows; r++) {
        const BarRow *row = &c->rows[r];
        double ry = y0 + r * rh + GAP / 2, end = x0;
        // Side by side: each series a bar of its share of the row, at most STACK_H thick, centred.
        double bh = MM_MIN(STACK_H, (rh - GAP) / MM_MAX(c->nseries, 1)), by = ry + (rh - GAP - bh * c->nseries) / 2;
        if (label_w > 0)
            svg_text(s, x0 - 8, ry + (rh - GAP) / 2 + 4, "end", "", "%s", row->label);
        if (r) svg_line(s, x - (label_w > 0 ? 0 : 8), ry - GAP / 2, x0 + w, ry - GAP / 2, "#eee", "");
        double ly = ry + (rh - GAP) / 2 + 4;   // the value's line: the middle, or the longest bar's
        if (!row->missing) {
            double sum = 0;
            for (int k = 0; k < c->nseries; k++) {
                double v = row->value[k];
                if (c->stacked) {
                    svg_rect(s, XB(sum), ry, XB(sum + v) - XB(sum), STACK_H, c->colors[k], "");
                    sum += v;
                    end = XB(sum);
                } else {
                    svg_rect(s, x0, by + k * bh, XB(v) - x0, bh - 1, c->colors[k], "");
                    if (v > sum || !k) sum = v, end = XB(v), ly = by + k * bh + bh / 2 + 4;
                }
            }
            if (c->label_values) {
                mem_fmt((size_t)sum, a, sizeof a);
                svg_text(s, end + 6, ly, "start", "", "%s%s%s", a, row->note[0] ? "  " : "",
                         row->note);
                continue;
            }
        }
        if (row->note[0]) svg_text(s, end + 6, ry + (rh - GAP) / 2 + 4, "start", "fill=\"#555\"", "%s", row->note);
    }
    #undef XB
}
