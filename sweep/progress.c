// sweep/progress.c: progress lines on stderr (see progress.h).
#include "sweep/progress.h"
#include <stdio.h>
#include <time.h>

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_duration(double seconds, char *buf, int cap) {
    long s = (long)(seconds + 0.5);
    if (s < 60) snprintf(buf, (size_t)cap, "%lds", s);
    else if (s < 3600) snprintf(buf, (size_t)cap, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, (size_t)cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
}

void progress_start(Progress *p, int nitems, int runs_total) {
    p->t0 = p->item_t0 = progress_now();
    p->k = 0;
    p->n = nitems;
    p->runs_total = runs_total;
}

void progress_item_begin(Progress *p, const char *what) {
    p->k++;
    p->item_t0 = progress_now();
    fprintf(stderr, "[%d/%d] %s ...\n", p->k, p->n, what);
}

void progress_item_end(Progress *p, const char *what, int runs_done) {
    double now = progress_now(), elapsed = now - p->t0;
    char e[32], left[128];
    progress_duration(elapsed, e, sizeof e);
    if (runs_done >= p->runs_total) snprintf(left, sizeof left, "nothing left");
    else if (runs_done == 0) snprintf(left, sizeof left, "%d runs left", p->runs_total);
    else {
        char l[32];
        progress_duration(elapsed / runs_done * (p->runs_total - runs_done), l, sizeof l);
        snprintf(left, sizeof left, "about %s left (%d of %d runs done)", l, runs_done, p->runs_total);
    }
    fprintf(stderr, "[%d/%d] %s done in %.1f s, elapsed %s, %s\n", p->k, p->n, what, now - p->item_t0, e, left);
}
