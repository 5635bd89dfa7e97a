// sharding/plot.c: `./train plot TRACE OUT_DIR`: a memory_trace (sharding/plan.h) drawn as
// one SVG per device: the live bytes of each tag stacked over the step (x: the event index,
// one event per allocation, free or phase change), the forward and backward passes shaded
// and the phases marked, the peak marked and labelled. Plain SVG 1.1, opens in a browser.
#include "sharding/plan.h"
#include "common.h"
#include "data/paths.h"
#include <sys/stat.h>
#include <errno.h>

typedef struct {
    int ev;                    // 1 alloc, -1 free, 0 phase
    size_t live[MEM_NTAGS], total;
    char name[96];
} Row;

typedef struct { Row *r; size_t n, cap; } Rows;

static const char *const COLORS[MEM_NTAGS] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1"};

// One CSV line: device,index,event,tag,bytes,<tags...>,total,"name". Returns the device or -1.
static int parse_line(const char *line, Row *row) {
    // The 6 + MEM_NTAGS fields before the name, comma-separated (the tag is empty for phases).
    char field[6 + MEM_NTAGS][32];
    const char *p = line;
    for (int k = 0; k < 6 + MEM_NTAGS; k++) {
        const char *comma = strchr(p, ',');
        if (!comma || comma - p >= 32) return -1;
        memcpy(field[k], p, (size_t)(comma - p));
        field[k][comma - p] = '\0';
        p = comma + 1;
    }
    if (*p != '"') return -1;
    size_t k = 0;
    for (p++; *p && *p != '"' && k + 1 < sizeof row->name; p++) row->name[k++] = *p;
    row->name[k] = '\0';
    for (int t = 0; t < MEM_NTAGS; t++) row->live[t] = strtoull(field[5 + t], NULL, 10);
    row->total = strtoull(field[5 + MEM_NTAGS], NULL, 10);
    row->ev = !strcmp(field[2], "alloc") ? 1 : !strcmp(field[2], "free") ? -1 : 0;
    return atoi(field[0]);
}

// Text for an SVG element (escapes & < > ").
static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

#define W 1280
#define H 680
#define L 100       // left margin (the y labels)
#define R 190       // right margin (the legend)
#define TOP 70
#define BOT 60

static void plot_device(const Rows *rows, int dev, const char *trace, const char *path) {
    FILE *f = atomic_file_open(path);   // a partial SVG is never left (data/paths.h)
    size_t n = rows->n, peak_i = 0;
    for (size_t i = 0; i < n; i++) if (rows->r[i].total > rows->r[peak_i].total) peak_i = i;
    double ymax = rows->r[peak_i].total * 1.12 + 1, pw = W - L - R, ph = H - TOP - BOT;
    double dx = pw / (double)(n > 1 ? n - 1 : 1);
    #define X(i) (L + (double)(i) * dx)
    #define Y(b) (TOP + ph - (double)(b) / ymax * ph)
    char a[32];
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"17\" font-weight=\"bold\">meshmoe memory timeline, device %d</text>\n", L, dev);
    fprintf(f, "<text x=\"%d\" y=\"44\" fill=\"#555\">", L);
    xml_text(f, trace);
    fprintf(f, ": live bytes by tag over one training step (%zu events: allocations, frees, phases)</text>\n", n);

    // The passes: forward from the start, backward from the first "backward" phase, then the
    // update (gradient norm, optimizer). Shaded behind the areas.
    size_t bwd = n, upd = n;
    for (size_t i = 0; i < n; i++) {
        if (rows->r[i].ev) continue;
        if (bwd == n && !strncmp(rows->r[i].name, "backward", 8)) bwd = i;
        if (upd == n && (!strcmp(rows->r[i].name, "gradient norm") || !strcmp(rows->r[i].name, "optimizer"))) upd = i;
    }
    if (bwd < n) {
        size_t end = upd < n ? upd : n - 1;
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"#eeeeee\"/>\n", X(bwd), TOP,
                X(end) - X(bwd), ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"#333\" font-weight=\"bold\">backward</text>\n", X(bwd) + 4, TOP + 16);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#333\" font-weight=\"bold\">forward</text>\n", L + 4, TOP + 16);
    if (upd < n)   // (a short stretch at the right end: the label goes left of its start)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"#333\" font-weight=\"bold\" text-anchor=\"end\">update</text>\n",
                X(upd) - 4, TOP + 34);

    // Stacked areas, one polygon per tag: the live bytes hold between events (steps).
    for (int t = 0; t < MEM_NTAGS; t++) {
        fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" points=\"", COLORS[t]);
        for (size_t i = 0; i < n; i++) {   // the top edge, left to right
            size_t top = 0;
            for (int u = 0; u <= t; u++) top += rows->r[i].live[u];
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", X(i), Y(top), X(i + 1 < n ? i + 1 : i), Y(top));
        }
        for (size_t i = n; i-- > 0;) {     // the bottom edge, right to left
            size_t bot = 0;
            for (int u = 0; u < t; u++) bot += rows->r[i].live[u];
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", X(i + 1 < n ? i + 1 : i), Y(bot), X(i), Y(bot));
        }
        fprintf(f, "\"/>\n");
    }

    // Phase markers: a tick on the x axis for each, labelled when there is room.
    int nphase = 0;
    for (size_t i = 0; i < n; i++) nphase += rows->r[i].ev == 0;
    int every = nphase > 40 ? (nphase + 39) / 40 : 1, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows->r[i].ev) continue;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-dasharray=\"2,3\"/>\n",
                X(i), TOP + 22, X(i), TOP + ph);
        if (k++ % every) continue;
        fprintf(f, "<text transform=\"translate(%.1f,%d) rotate(-90)\" font-size=\"9\" fill=\"#444\" text-anchor=\"end\">",
                X(i) + 3, TOP + 26);
        xml_text(f, rows->r[i].name);
        fprintf(f, "</text>\n");
    }

    // Axes and y ticks.
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, TOP + ph, L + pw, TOP + ph);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n", L, TOP, L, TOP + ph);
    for (int j = 0; j <= 5; j++) {
        double b = ymax * j / 5;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                L - 5, Y(b), L, Y(b), L - 8, Y(b) + 4, mem_fmt((size_t)b, a, sizeof a));
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">event index (0 = start of the step)</text>\n",
            L + pw / 2, H - 20);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\">%zu</text>\n", L + pw, TOP + (int)ph + 16, n ? n - 1 : 0);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">0</text>\n", L, TOP + (int)ph + 16);

    // The peak: a marker and its label (what was allocated, in which phase).
    const char *phase = "";
    for (size_t i = 0; i <= peak_i; i++) if (rows->r[i].ev == 0) phase = rows->r[i].name;
    double px = X(peak_i), py = Y(rows->r[peak_i].total);
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"none\" stroke=\"black\" stroke-width=\"2\"/>\n", px, py);
    int left = px > L + pw * 0.6;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\" text-anchor=\"%s\">peak %s (%zu B) at event %zu: ",
            px + (left ? -10 : 10), py - 8, left ? "end" : "start", mem_fmt(rows->r[peak_i].total, a, sizeof a),
            rows->r[peak_i].total, peak_i);
    xml_text(f, rows->r[peak_i].name);
    fprintf(f, ", ");
    xml_text(f, phase);
    fprintf(f, "</text>\n");

    // Legend, top tag first (as stacked), with each tag's bytes at the peak.
    for (int t = MEM_NTAGS - 1, j = 0; t >= 0; t--, j++) {
        int y = TOP + 40 + j * 24;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\"/>", W - R + 16, y - 11, COLORS[t]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s %s</text>\n", W - R + 36, y, MEM_TAG_NAMES[t],
                mem_fmt(rows->r[peak_i].live[t], a, sizeof a));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#555\">(bytes at the peak)</text>\n", W - R + 16, TOP + 40 + MEM_NTAGS * 24);
    fprintf(f, "</svg>\n");
    #undef X
    #undef Y
    atomic_file_commit(f);
}

int plot_trace(const char *trace, const char *out_dir) {
    check_input_file("plot trace", trace);
    check_output_dir("plot output directory", out_dir);
    FILE *f = fopen(trace, "r");
    if (!f) die("plot: cannot open trace '%s': %s", trace, strerror(errno));
    if (mkdir(out_dir, 0777) && errno != EEXIST) die("plot: cannot create '%s': %s", out_dir, strerror(errno));
    char line[1024];
    if (!fgets(line, sizeof line, f) || strncmp(line, "device,index,event", 18))
        die("plot: '%s' is not a memory_trace file (no 'device,index,event,...' header)", trace);
    Rows rows = {0};
    int dev = -1, ndone = 0;
    long lineno = 1;
    for (;;) {
        Row row;
        int d = -2;
        if (fgets(line, sizeof line, f)) {
            lineno++;
            d = parse_line(line, &row);
            if (d < 0) die("plot: %s line %ld is not a trace row: %.80s", trace, lineno, line);
        }
        if (d != dev && rows.n) {   // the previous device is complete
            char path[1024];
            snprintf(path, sizeof path, "%s/memory_device_%d.svg", out_dir, dev);
            plot_device(&rows, dev, trace, path);
            printf("wrote %s (%zu events)\n", path, rows.n);
            ndone++;
            rows.n = 0;
        }
        if (d == -2) break;
        dev = d;
        if (rows.n == rows.cap) {
            rows.cap = rows.cap ? 2 * rows.cap : 4096;
            rows.r = realloc(rows.r, rows.cap * sizeof(Row));
            if (!rows.r) die("plot: out of memory");
        }
        rows.r[rows.n++] = row;
    }
    fclose(f);
    free(rows.r);
    if (!ndone) die("plot: '%s' holds no events", trace);
    return 0;
}
