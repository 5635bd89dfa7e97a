// report/svg.c: the SVG pieces of svg.h.
#include "report/svg.h"
#include "core/common.h"
#include "base/paths.h"
#include <errno.h>
#include <stdarg.h>

const char *const SVG_TAG_COLORS[MEM_NTAGS] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1",
                                             "#9c755f"};

void svg_open(Svg *s, const char *path, int w, int h) {
    snprintf(s->path, sizeof s->path, "%s", path);
    s->f = atomic_file_open(path);   // a partial SVG is never left (base/paths.h)
    fprintf(s->f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"sans-serif\" font-size=\"13\">\n", w, h, w, h);
    fprintf(s->f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
}

void svg_close(Svg *s) {
    fprintf(s->f, "</svg>\n");
    atomic_file_commit(s->f);
    s->f = NULL;
}

static void escaped(FILE *f, const char *t) {
    for (; *t; t++) {
        if (*t == '&') fputs("&amp;", f);
        else if (*t == '<') fputs("&lt;", f);
        else if (*t == '>') fputs("&gt;", f);
        else if (*t == '"') fputs("&quot;", f);
        else fputc(*t, f);
    }
}

void svg_text(Svg *s, double x, double y, const char *anchor, const char *attrs, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(s->f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" %s>", x, y, anchor, attrs);
    escaped(s->f, buf);
    fprintf(s->f, "</text>\n");
}

void svg_vtext(Svg *s, double x, double y, const char *attrs, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(s->f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"end\" %s>", x, y, attrs);
    escaped(s->f, buf);
    fprintf(s->f, "</text>\n");
}

void svg_rect(Svg *s, double x, double y, double w, double h, const char *fill, const char *attrs) {
    fprintf(s->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" %s/>\n", x, y, w, h, fill,
            attrs);
}

void svg_line(Svg *s, double x1, double y1, double x2, double y2, const char *stroke, const char *attrs) {
    fprintf(s->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" %s/>\n", x1, y1, x2, y2,
            stroke, attrs);
}

double svg_tick_step(double max, int nticks) {
    double raw = max / nticks, p = pow(10, floor(log10(raw)));
    const double mult[3] = {1, 2, 5};
    for (int k = 0; k < 3; k++)
        if (mult[k] * p >= raw) return mult[k] * p;
    return 10 * p;
}

// The unit of a byte axis: the largest of KiB, MiB, GiB not above the largest value.
static double byte_unit(double max, const char **name) {
    if (max >= 1073741824.0) { *name = "GiB"; return 1073741824.0; }
    if (max >= 1048576.0) { *name = "MiB"; return 1048576.0; }
    *name = "KiB";
    return 1024.0;
}

double svg_bytes_axis(double max, int nticks, double *step) {
    const char *name;
    double unit = byte_unit(max, &name);
    *step = svg_tick_step(max / unit, nticks) * unit;
    return ceil(max / *step - 1e-9) * *step;
}

void svg_bytes_label(double bytes, double axis_max, char *buf, size_t cap) {
    const char *name;
    double v = bytes / byte_unit(axis_max, &name);
    if (fabs(v - round(v)) < 1e-6) snprintf(buf, cap, "%.0f %s", v, name);
    else snprintf(buf, cap, "%.1f %s", v, name);
}

void svg_legend(Svg *s, double x, double y, double dy, int n, const char *const *colors, const char *const *labels) {
    for (int i = 0; i < n; i++) {
        svg_rect(s, x, y + i * dy - 11, 14, 14, colors[i], "stroke=\"#333\" stroke-width=\"0.5\"");
        svg_text(s, x + 20, y + i * dy, "start", "", "%s", labels[i]);
    }
}
