// sweep/figure.c: `./train figure KIND OUT.svg ...`, the figures of the course (docs/,
// drawn by `make docs` from real runs):
//
//   timelines OUT.svg TITLE LABEL TRACE [LABEL TRACE ...]
//       memory timelines of one step side by side on one byte scale (report/plot.c)
//   peaks OUT.svg TITLE LABEL TRACE [LABEL TRACE ...]
//       each trace's highest device at its peak, stacked by tag, one bar per trace
//   schedule OUT.svg CONFIG.yml [key=value ...]
//       the pipeline schedule that configuration runs (report/schedule_plot.c)
//   meshes OUT.svg TITLE SWEEP.md
//       the mesh-shape table of a `./train sweep` output as bars: per-device peak
//       bytes by tag, and bytes sent per step
#include "trainer/step.h"
#include "sweep/sweep.h"
#include "report/bars.h"
#include "report/plot.h"
#include "report/trace.h"
#include "report/schedule_plot.h"
#include "pipeline/pipeline.h"
#include "base/config.h"
#include "base/runfiles.h"
#include "core/common.h"
#include <errno.h>

#define MAX_PANELS 32

// The LABEL TRACE pairs after the title: their count (dies when odd or too many).
static int pairs(int argc, const char *kind) {
    int n = argc - 5;
    if (n < 2 || n % 2 || n / 2 > MAX_PANELS)
        die("usage: ./train figure %s OUT.svg TITLE LABEL TRACE.csv [LABEL TRACE.csv ...] (1 to %d pairs)", kind,
            MAX_PANELS);
    return n / 2;
}

static void fig_timelines(int argc, char **argv) {
    int n = pairs(argc, "timelines");
    char *labels[MAX_PANELS], *traces[MAX_PANELS];
    for (int k = 0; k < n; k++) labels[k] = argv[5 + 2 * k], traces[k] = argv[6 + 2 * k];
    plot_timelines(argv[3], argv[4], "live bytes by tag over one training step, the highest device of each run; "
                   "every panel on the same byte scale", n, labels, traces);
}

static void fig_peaks(int argc, char **argv) {
    int n = pairs(argc, "peaks");
    BarRow rows[MAX_PANELS];
    memset(rows, 0, sizeof rows);
    double first = 0;
    for (int k = 0; k < n; k++) {
        Trace t;
        trace_read(&t, argv[6 + 2 * k]);
        const TraceDevice *d = trace_highest(&t);
        const TraceEvent *p = &d->e[trace_peak(d)];
        snprintf(rows[k].label, sizeof rows[k].label, "%s", argv[5 + 2 * k]);
        for (int tg = 0; tg < MEM_NTAGS; tg++) rows[k].value[tg] = (double)p->live[tg];
        if (!k) first = (double)p->total;
        else snprintf(rows[k].note, sizeof rows[k].note, "(x%.2f)", p->total / first);
        trace_free(&t);
    }
    BarChart c = {.title = "bytes live on the highest device at its peak, by tag", .axis = "bytes per device",
                  .nseries = MEM_NTAGS, .stacked = 1, .label_values = 1, .nrows = n, .rows = rows};
    for (int tg = 0; tg < MEM_NTAGS; tg++) c.series[tg] = MEM_TAG_NAMES[tg], c.colors[tg] = SVG_TAG_COLORS[tg];
    double W = MM_MAX(1000, 10.5 * strlen(argv[4]) + 40), LW = 150, H = 110 + bars_height(&c);
    Svg s;
    svg_open(&s, argv[3], (int)W, (int)H);
    svg_text(&s, 20, 26, "start", "font-size=\"18\" font-weight=\"bold\"", "%s", argv[4]);
    for (int tg = 0; tg < MEM_NTAGS; tg++) svg_legend(&s, 20 + tg * 130, 62, 0, 1, &c.colors[tg], &c.series[tg]);
    bars_draw(&s, &c, 10, 90, LW, W - LW - 20);
    svg_close(&s);
}

static void fig_schedule(int argc, char **argv) {
    if (argc < 5) die("usage: ./train figure schedule OUT.svg CONFIG.yml [key=value ...]");
    Config c;
    config_defaults(&c);
    config_load_file(&c, argv[4]);
    char title[512];
    size_t len = (size_t)snprintf(title, sizeof title, "./train %s", argv[4]);
    for (int i = 5; i < argc; i++) {
        config_set_arg(&c, argv[i]);
        if (len < sizeof title) len += (size_t)snprintf(title + len, sizeof title - len, " %s", argv[i]);
    }
    step_check_config(&c);
    if (c.ici_pipeline_parallelism < 2) die("figure schedule: ici_pipeline_parallelism must be at least 2");
    PipeShape p = pipeline_shape(&c, c.ici_pipeline_parallelism);
    Schedule sc;
    schedule_build(&sc, p.schedule, p.nstages, p.M, p.R, 0);
    schedule_plot(&sc, title, argv[3]);
    schedule_free(&sc);
}

// ---- the mesh-shape table of a sweep ----

// Splits a markdown table line into its cells (trimmed); returns their count.
static int cells(char *line, char **cell, int cap) {
    int n = 0;
    char *p = strchr(line, '|');
    while (p && n < cap) {
        char *q = strchr(p + 1, '|');
        if (!q) break;
        *q = '\0';
        char *a = p + 1;
        while (*a == ' ') a++;
        for (char *e = q - 1; e >= a && *e == ' '; e--) *e = '\0';
        cell[n++] = a;
        p = q;
    }
    return n;
}

static void fig_meshes(int argc, char **argv) {
    if (argc != 6) die("usage: ./train figure meshes OUT.svg TITLE SWEEP.md (the output of ./train sweep)");
    FILE *f = fopen_regular(argv[5], "figure meshes");
    char line[4096], head[512] = "", *cell[16];
    BarRow rows[MAX_PANELS];
    int n = 0, in = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "## ", 3)) snprintf(head, sizeof head, "%.500s", line + 3);
        if (!strncmp(line, "### Mesh shapes", 15)) in = 1;
        if (!in || strncmp(line, "| ", 2) || !strncmp(line, "| mesh |", 8)) continue;
        if (cells(line, cell, 16) != 11 || n == MAX_PANELS) continue;
        BarRow *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->label, sizeof r->label, "%s", cell[0]);
        r->missing = !strcmp(cell[3], "-");
        if (r->missing) {   // "not possible on this model: <the trainer's message>": the first words
            snprintf(r->note, sizeof r->note, "%.*s", (int)strcspn(cell[2], ":"), cell[2]);
            continue;
        }
        r->value[0] = strtod(cell[3], NULL);
        for (int k = 0; k < 5; k++) r->value[1 + k] = strtod(cell[4 + k], NULL);
        r->value[6] = strtod(cell[9], NULL);
    }
    fclose(f);
    if (!n) die("figure meshes: '%s' has no mesh-shape table (run the sweep with sweep_only=mesh)", argv[5]);
    for (char *b = head; *b; b++) if (*b == '`') memmove(b, b + 1, strlen(b)), b--;
    // Left: the peak and each tag's own peak; right: the bytes sent, the same rows.
    BarChart peak = {.title = "per-device peak, and each tag's own peak", .axis = "bytes (the highest device)",
                     .nseries = 6, .nrows = n, .rows = rows, .label_values = 1,
                     .series = {"peak (all tags)", "params", "grads", "optimizer", "activations", "temp"},
                     .colors = {"#444444", SVG_TAG_COLORS[0], SVG_TAG_COLORS[1], SVG_TAG_COLORS[2],
                                SVG_TAG_COLORS[3], SVG_TAG_COLORS[4]}};
    BarRow sent[MAX_PANELS];
    for (int k = 0; k < n; k++) {
        sent[k] = rows[k];
        sent[k].value[0] = rows[k].value[6];
        if (!rows[k].missing) sent[k].note[0] = '\0';
    }
    BarChart comm = {.title = "bytes sent per step, all devices", .axis = "bytes per step", .nseries = 1,
                     .nrows = n, .rows = sent, .series = {"sent"}, .colors = {SVG_TAG_COLORS[MEM_COMM]},
                     .label_values = 1, .slots = 6};
    double LW = 180, PW = 560, W = LW + 2 * PW + 20, H = 120 + bars_height(&peak);
    Svg s;
    svg_open(&s, argv[3], (int)W, (int)H);
    svg_text(&s, 20, 26, "start", "font-size=\"18\" font-weight=\"bold\"", "%s", argv[4]);
    svg_text(&s, 20, 48, "start", "fill=\"#555\"", "%s", head);
    for (int k = 0; k < 6; k++) svg_legend(&s, 20 + k * 150, 80, 0, 1, &peak.colors[k], &peak.series[k]);
    bars_draw(&s, &peak, 0, 100, LW, PW);
    bars_draw(&s, &comm, LW + PW, 100, 0, PW);
    svg_close(&s);
}

// OUT.svg is none of the files the figure reads (base/runfiles.h), checked before any is read.
static void figure_files_check(int argc, char **argv) {
    const char *kind = argv[2];
    RunFiles files;
    runfiles_init(&files);
    if (!strcmp(kind, "timelines") || !strcmp(kind, "peaks"))
        for (int i = 6; i < argc; i += 2) runfiles_input(&files, "figure TRACE.csv", argv[i]);
    if (!strcmp(kind, "schedule") && argc > 4) runfiles_input(&files, "figure CONFIG.yml", argv[4]);
    if (!strcmp(kind, "meshes") && argc > 5) runfiles_input(&files, "figure SWEEP.md", argv[5]);
    runfiles_output(&files, "figure OUT.svg", argv[3]);
    runfiles_check(&files);
    runfiles_free(&files);
}

int cmd_figure(int argc, char **argv) {
    if (argc < 4) die("usage: ./train figure timelines|peaks|schedule|meshes OUT.svg ... (sweep/figure.c)");
    const char *kind = argv[2];
    figure_files_check(argc, argv);
    if (!strcmp(kind, "timelines")) fig_timelines(argc, argv);
    else if (!strcmp(kind, "peaks")) fig_peaks(argc, argv);
    else if (!strcmp(kind, "schedule")) fig_schedule(argc, argv);
    else if (!strcmp(kind, "meshes")) fig_meshes(argc, argv);
    else die("figure: '%s' is no figure: timelines, peaks, schedule or meshes", kind);
    printf("wrote %s\n", argv[3]);
    return 0;
}
