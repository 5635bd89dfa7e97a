// report/plot.c: memory timelines (see plot.h). A timeline is a stacked area chart: x is
// the event index over the step (one event per allocation, free or phase change), y the
// live bytes of each tag after the event; the backward pass is shaded, the peak circled.
#include "report/plan.h"
#include "report/plot.h"
#include "report/svg.h"
#include "report/trace.h"
#include "core/common.h"
#include "base/paths.h"
#include "base/runfiles.h"
#include <sys/stat.h>
#include <errno.h>

typedef struct { double x, y, w, h; } Box;

// Where the backward pass and the update (gradient norm, optimizer) begin: the first phase
// events of those names, or n.
static void passes(const TraceDevice *d, size_t *bwd, size_t *upd) {
    *bwd = *upd = d->n;
    for (size_t i = 0; i < d->n; i++) {
        const TraceEvent *e = &d->e[i];
        if (e->ev) continue;
        if (*bwd == d->n && !strncmp(e->name, "backward", 8)) *bwd = i;
        if (*upd == d->n && (!strcmp(e->name, "gradient norm") || !strcmp(e->name, "optimizer"))) *upd = i;
    }
}

// The phase an event falls in (the last phase event at or before it).
static const char *phase_of(const TraceDevice *d, size_t i) {
    const char *p = "";
    for (size_t k = 0; k <= i; k++) if (d->e[k].ev == 0) p = d->e[k].name;
    return p;
}

// One device's timeline in box b on the byte scale [0, ymax] (ticks every ystep). detail:
// the phases marked and named, the peak labelled with its buffer and phase.
static void timeline_draw(Svg *s, const TraceDevice *d, Box b, double ymax, double ystep, int detail) {
    size_t n = d->n, peak = trace_peak(d), bwd, upd;
    double dx = b.w / (double)(n > 1 ? n - 1 : 1);
    #define X(i) (b.x + (double)(i) * dx)
    #define Y(v) (b.y + b.h - (double)(v) / ymax * b.h)
    passes(d, &bwd, &upd);
    if (bwd < n) svg_rect(s, X(bwd), b.y, X(upd < n ? upd : n - 1) - X(bwd), b.h, "#ececec", "");
    svg_text(s, b.x + 4, b.y + 15, "start", "fill=\"#333\" font-weight=\"bold\"", "forward");
    if (bwd < n) svg_text(s, X(bwd) + 4, b.y + 15, "start", "fill=\"#333\" font-weight=\"bold\"", "backward");
    if (upd < n && detail) svg_text(s, X(upd) - 4, b.y + 32, "end", "fill=\"#333\" font-weight=\"bold\"", "update");
    // Horizontal grid lines and the byte ticks.
    char a[32];
    for (double v = 0; v <= ymax * 1.0001; v += ystep) {
        svg_line(s, b.x, Y(v), b.x + b.w, Y(v), "#ddd", "");
        svg_bytes_label(v, ymax, a, sizeof a);
        svg_text(s, b.x - 6, Y(v) + 4, "end", "", "%s", a);
    }
    // Stacked areas, one polygon per tag: the live bytes hold between events (steps).
    for (int t = 0; t < MEM_NTAGS; t++) {
        fprintf(s->f, "<polygon fill=\"%s\" fill-opacity=\"0.9\" stroke=\"none\" points=\"", SVG_TAG_COLORS[t]);
        for (size_t i = 0; i < n; i++) {   // the top edge, left to right
            size_t top = 0;
            for (int u = 0; u <= t; u++) top += d->e[i].live[u];
            fprintf(s->f, "%.1f,%.1f %.1f,%.1f ", X(i), Y(top), X(i + 1 < n ? i + 1 : i), Y(top));
        }
        for (size_t i = n; i-- > 0;) {     // the bottom edge, right to left
            size_t bot = 0;
            for (int u = 0; u < t; u++) bot += d->e[i].live[u];
            fprintf(s->f, "%.1f,%.1f %.1f,%.1f ", X(i + 1 < n ? i + 1 : i), Y(bot), X(i), Y(bot));
        }
        fprintf(s->f, "\"/>\n");
    }
    if (detail) {   // phase markers: a dashed line for each, named when 12 px from the last name
        double last = -1e9;
        for (size_t i = 0; i < n; i++) {
            if (d->e[i].ev) continue;
            svg_line(s, X(i), b.y + 40, X(i), b.y + b.h, "#999", "stroke-dasharray=\"2,3\"");
            if (X(i) - last < 12) continue;
            svg_vtext(s, X(i) + 11, b.y + 44, "font-size=\"10\" fill=\"#444\"", "%s", d->e[i].name);
            last = X(i);
        }
    }
    // Axes: bytes up, events along.
    svg_line(s, b.x, b.y + b.h, b.x + b.w, b.y + b.h, "black", "");
    svg_line(s, b.x, b.y, b.x, b.y + b.h, "black", "");
    svg_text(s, b.x, b.y + b.h + 16, "middle", "", "0");
    svg_text(s, b.x + b.w, b.y + b.h + 16, "end", "", "%zu", n ? n - 1 : 0);
    svg_text(s, b.x + b.w / 2, b.y + b.h + 16, "middle", "fill=\"#555\"", "event (allocation, free or phase)");
    // The peak: a circle and its label.
    double px = X(peak), py = Y(d->e[peak].total);
    int left = px > b.x + b.w * 0.55;
    fprintf(s->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"none\" stroke=\"black\" stroke-width=\"2\"/>\n", px, py);
    if (detail)
        svg_text(s, px + (left ? -10 : 10), py - 8, left ? "end" : "start", "font-weight=\"bold\"",
                 "peak %s (%zu B) at event %zu: %s, %s", mem_fmt(d->e[peak].total, a, sizeof a), d->e[peak].total,
                 peak, d->e[peak].name, phase_of(d, peak));
    else
        svg_text(s, px + (left ? -10 : 10), py - 8, left ? "end" : "start", "font-weight=\"bold\"", "peak %s",
                 mem_fmt(d->e[peak].total, a, sizeof a));
    #undef X
    #undef Y
}

// ---- one SVG per device ----

static void plot_device(const TraceDevice *d, const char *trace, const char *path) {
    const int W = 1280, H = 680, R = 200;
    Svg s;
    svg_open(&s, path, W, H);
    svg_text(&s, 100, 24, "start", "font-size=\"17\" font-weight=\"bold\"", "meshmoe memory timeline, device %d",
             d->device);
    svg_text(&s, 100, 44, "start", "fill=\"#555\"", "%s: live bytes by tag over one training step (%zu events)",
             trace, d->n);
    // Headroom: the phase names take the top quarter, the peak stays below them.
    double step, ymax = svg_bytes_axis(d->e[trace_peak(d)].total * 1.45 + 1, 6, &step);
    Box b = {100, 70, W - 100 - R, H - 70 - 60};
    timeline_draw(&s, d, b, ymax, step, 1);
    // Legend, top tag first (as stacked), with each tag's bytes at the peak.
    const TraceEvent *p = &d->e[trace_peak(d)];
    char labels[MEM_NTAGS][64], a[32];
    const char *lab[MEM_NTAGS], *col[MEM_NTAGS];
    for (int t = MEM_NTAGS - 1, j = 0; t >= 0; t--, j++) {
        snprintf(labels[j], sizeof labels[j], "%s %s", MEM_TAG_NAMES[t], mem_fmt(p->live[t], a, sizeof a));
        lab[j] = labels[j];
        col[j] = SVG_TAG_COLORS[t];
    }
    svg_legend(&s, W - R + 16, 110, 24, MEM_NTAGS, col, lab);
    svg_text(&s, W - R + 16, 110 + MEM_NTAGS * 24, "start", "fill=\"#555\"", "(bytes at the peak)");
    svg_close(&s);
}

// The trace is not one of the files the plot writes (base/runfiles.h).
static void plot_files_check(const Trace *t, const char *trace, const char *out_dir) {
    char (*names)[64] = calloc((size_t)t->ndev + 1, sizeof *names);
    const char **list = calloc((size_t)t->ndev + 1, sizeof *list);
    if (!names || !list) die("plot: out of memory");
    for (int i = 0; i < t->ndev; i++) {
        snprintf(names[i], sizeof names[i], "memory_device_%d.svg", t->dev[i].device);
        list[i] = names[i];
    }
    RunFiles files;
    runfiles_init(&files);
    runfiles_input(&files, "plot trace", trace);
    runfiles_output_dir(&files, "plot output directory", out_dir, list, t->ndev);
    runfiles_check(&files);
    runfiles_free(&files);
    free(names);
    free(list);
}

int plot_trace(const char *trace, const char *out_dir) {
    check_input_file("plot trace", trace);
    Trace t;
    trace_read(&t, trace);
    plot_files_check(&t, trace, out_dir);
    if (mkdir(out_dir, 0777) && errno != EEXIST) die("plot: cannot create '%s': %s", out_dir, strerror(errno));
    check_output_dir("plot output directory", out_dir);
    for (int i = 0; i < t.ndev; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/memory_device_%d.svg", out_dir, t.dev[i].device);
        plot_device(&t.dev[i], trace, path);
        printf("wrote %s (%zu events)\n", path, t.dev[i].n);
    }
    trace_free(&t);
    return 0;
}

// ---- several traces on one scale ----

void plot_timelines(const char *out, const char *title, const char *note, int n, char *const *labels,
                    char *const *traces) {
    Trace *t = calloc((size_t)n, sizeof *t);
    const TraceDevice **d = calloc((size_t)n, sizeof *d);
    if (!t || !d) die("figure: out of memory");
    double top = 0;
    for (int k = 0; k < n; k++) {
        trace_read(&t[k], traces[k]);
        d[k] = trace_highest(&t[k]);
        top = MM_MAX(top, (double)d[k]->e[trace_peak(d[k])].total);
    }
    double step, ymax = svg_bytes_axis(top * 1.25 + 1, 5, &step);   // headroom for the labels
    // Panels in two columns (one when there is only one), each 600 x 280 with its margins.
    const int PW = 600, PH = 280, HEAD = 110;
    int cols = n > 1 ? 2 : 1, rows = (n + cols - 1) / cols;
    Svg s;
    svg_open(&s, out, cols * PW + 20, HEAD + rows * PH + 10);
    svg_text(&s, 20, 26, "start", "font-size=\"18\" font-weight=\"bold\"", "%s", title);
    svg_text(&s, 20, 48, "start", "fill=\"#555\"", "%s", note);
    // The legend in one row, the bottom tag of the stack first.
    for (int tg = 0; tg < MEM_NTAGS; tg++) {
        const char *col[1] = {SVG_TAG_COLORS[tg]}, *lab[1] = {MEM_TAG_NAMES[tg]};
        svg_legend(&s, 20 + tg * 130, 80, 0, 1, col, lab);
    }
    svg_rect(&s, 20 + MEM_NTAGS * 130, 69, 30, 14, "#ececec", "stroke=\"#999\" stroke-width=\"0.5\"");
    svg_text(&s, 56 + MEM_NTAGS * 130, 80, "start", "", "backward pass");
    for (int k = 0; k < n; k++) {
        double x0 = (k % cols) * PW, y0 = HEAD + (k / cols) * PH;
        svg_text(&s, x0 + 90, y0 + 12, "start", "font-weight=\"bold\"", "%s", labels[k]);
        Box b = {x0 + 90, y0 + 22, PW - 110, PH - 70};
        timeline_draw(&s, d[k], b, ymax, step, 0);
    }
    svg_close(&s);
    for (int k = 0; k < n; k++) trace_free(&t[k]);
    free(t);
    free(d);
}
