// report/schedule_plot.c: a schedule's tick table as an SVG chart (see schedule_plot.h).
#include "report/schedule_plot.h"
#include "pipeline/pipeline.h"
#include "report/svg.h"
#include "core/common.h"

// Forward cells blue, backward cells orange; with repeats, a darker shade per repeat.
static const char *cell_color(const PipeTask *k) {
    static const char *const F[3] = {"#a6c8ec", "#5b93cf", "#2f5f98"}, *const B[3] = {"#f9c98f", "#ee9a45", "#b96417"};
    int r = k->rep < 3 ? k->rep : 2;
    return k->op == PP_F ? F[r] : B[r];
}

void schedule_plot(const Schedule *sc, const char *title, const char *path) {
    const double L = 90, TOP = 96, CH = 34;
    double cw = sc->R > 1 ? 30 : 28;   // room for "12" or "12'" in a cell
    int gap = sc->nfwd ? 1 : 0;         // gpipe: one column between the loops, where the head runs
    double gw = cw * (sc->nticks + gap), W = MM_MAX(L + gw + 30, 7.0 * strlen(title) + 40), H = TOP + sc->nstages * CH + 130;
    Svg s;
    svg_open(&s, path, (int)W, (int)H);
    fprintf(s.f, "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
                 "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/>"
                 "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" stroke-width=\"2\"/></pattern></defs>\n");
    long idle = schedule_idle(sc), all = (long)sc->nticks * sc->nstages;
    int num = sc->nstages - 1, den = sc->R * sc->M + sc->nstages - 1;
    svg_text(&s, 20, 26, "start", "font-size=\"17\" font-weight=\"bold\"",
             "%s schedule%s: %d stages, %d microbatches, %d repeat%s: %d ticks", sc->kind == PP_1F1B ? "1f1b" : "gpipe",
             sc->R > 1 ? " (circular)" : "", sc->nstages, sc->M, sc->R, sc->R > 1 ? "s" : "", sc->nticks);
    svg_text(&s, 20, 48, "start", "fill=\"#555\" font-size=\"12\"", "%s", title);
    svg_text(&s, 20, 70, "start", "font-weight=\"bold\" fill=\"#a03030\"",
             "bubble: %ld of %ld stage-ticks idle = %.1f%%  (P-1)/(R*M+P-1) = %d/%d = %.1f%%", idle, all,
             100.0 * idle / all, num, den, 100.0 * num / den);
    for (int st = 0; st < sc->nstages; st++) {
        double y = TOP + st * CH;
        svg_text(&s, L - 10, y + CH / 2 + 5, "end", "", "stage %d", st);
        for (int t = 0; t < sc->nticks; t++) {
            const PipeTask *k = schedule_at(sc, t, st);
            double x = L + cw * (t + (gap && t >= sc->nfwd));
            if (k->op == PP_IDLE) {
                svg_rect(&s, x, y, cw, CH, "url(#idle)", "stroke=\"white\" stroke-width=\"1.5\"");
                continue;
            }
            svg_rect(&s, x, y, cw, CH, cell_color(k), "stroke=\"white\" stroke-width=\"1.5\"");
            svg_text(&s, x + cw / 2, y + CH / 2 - 1, "middle", "font-size=\"12\" font-weight=\"bold\"", "%c",
                     k->op == PP_F ? 'F' : 'B');
            if (sc->R > 1)
                svg_text(&s, x + cw / 2, y + CH / 2 + 12, "middle", "font-size=\"11\"", "%d.%d", k->mb, k->rep);
            else
                svg_text(&s, x + cw / 2, y + CH / 2 + 12, "middle", "font-size=\"11\"", "%d", k->mb);
        }
    }
    double yb = TOP + sc->nstages * CH;
    if (gap) {   // gpipe: the head and loss run between the forward loop and its transpose
        double x = L + cw * sc->nfwd;
        svg_rect(&s, x, TOP, cw, sc->nstages * CH, "#fff", "stroke=\"#888\" stroke-dasharray=\"3,3\"");
        svg_vtext(&s, x + cw / 2 + 5, TOP + 4, "font-size=\"11\" fill=\"#555\"", "head, loss");
    }
    // The tick axis: a number every 5 ticks.
    for (int t = 0; t < sc->nticks; t += 5) {
        double x = L + cw * (t + (gap && t >= sc->nfwd)) + cw / 2;
        svg_line(&s, x, yb, x, yb + 5, "black", "");
        svg_text(&s, x, yb + 18, "middle", "", "%d", t);
    }
    svg_text(&s, L + gw / 2, yb + 36, "middle", "fill=\"#555\"", "tick (every stage runs at most one task per tick)");
    // Legend.
    double ly = yb + 62;
    const PipeTask f0 = {PP_F, 0, 0}, b0 = {PP_B, 0, 0};   // the first repeat's shades
    const char *col[3] = {cell_color(&f0), cell_color(&b0), "url(#idle)"};
    const char *lab[3] = {sc->R > 1 ? "F m.r: forward of microbatch m, repeat r (darker: later repeat)"
                                    : "F m: forward of microbatch m",
                          sc->R > 1 ? "B m.r: backward of microbatch m, repeat r" : "B m: backward of microbatch m",
                          "idle: the bubble"};
    for (int k = 0; k < 3; k++) {
        svg_rect(&s, L, ly + 20 * k - 11, 14, 14, col[k], "stroke=\"#333\" stroke-width=\"0.5\"");
        svg_text(&s, L + 20, ly + 20 * k, "start", "", "%s", lab[k]);
    }
    svg_close(&s);
}
