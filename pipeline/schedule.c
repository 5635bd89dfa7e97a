// pipeline/schedule.c: build and print the tick tables (see schedule.h).
#include "pipeline/schedule.h"
#include "pipeline/pipeline.h"
#include "core/common.h"

static void set(Schedule *sc, int t, int s, int op, int job) {
    PipeTask *k = &sc->task[(size_t)t * sc->nstages + s];
    k->op = op;
    k->mb = job % sc->M;
    k->rep = job / sc->M;
}

// MaxText's loop, then its transpose.
static void build_gpipe(Schedule *sc, int forward_only) {
    int P = sc->nstages, J = sc->M * sc->R, T = J + P - 1;
    sc->nfwd = T;
    sc->nticks = forward_only ? T : 2 * T;
    sc->task = calloc((size_t)sc->nticks * P, sizeof(PipeTask));
    for (int t = 0; t < T; t++)
        for (int s = 0; s < P; s++) {
            int i = t - s;   // iteration t: stage s works on job t - s (job = repeat * M + microbatch)
            if (i >= 0 && i < J) set(sc, t, s, PP_F, i);
            if (!forward_only && i >= 0 && i < J) set(sc, 2 * T - 1 - t, s, PP_B, i);
        }
}

// The order in which a stage takes its jobs: microbatch order for one repeat; with R > 1
// groups of P microbatches through every chunk (forward: repeat 0 first; backward: the
// last repeat first).
static void job_orders(int P, int M, int R, int *ford, int *bord) {
    int k = 0;
    for (int g = 0; g < M / P; g++)
        for (int r = 0; r < R; r++)
            for (int i = 0; i < P; i++) {
                ford[k] = r * M + g * P + i;
                bord[k] = (R - 1 - r) * M + g * P + i;
                k++;
            }
}

// 1F1B by simulation: at every tick each stage runs its next backward if its input has
// arrived, else its next forward if that has arrived and the stage is below its in-flight
// limit, else idles. Inputs arrive one tick after the producing task.
static void build_1f1b(Schedule *sc) {
    int P = sc->nstages, M = sc->M, R = sc->R, J = M * R;
    int *ford = malloc(sizeof(int) * J), *bord = malloc(sizeof(int) * J);
    job_orders(P, M, R, ford, bord);
    int *fdone = malloc(sizeof(int) * (size_t)P * J), *bdone = malloc(sizeof(int) * (size_t)P * J);
    for (int i = 0; i < P * J; i++) fdone[i] = bdone[i] = -1;   // the tick a task ran, -1: not yet
    int *nf = calloc((size_t)P, sizeof(int)), *nb = calloc((size_t)P, sizeof(int)), *pick = malloc(sizeof(int) * P);
    int cap = 4 * (J + P) + 8;
    sc->task = calloc((size_t)cap * P, sizeof(PipeTask));
    int t = 0, left = 2 * P * J;
    #define DONE_BEFORE(arr, s, j) ((arr)[(s) * J + (j)] >= 0 && (arr)[(s) * J + (j)] < t)
    for (; left > 0; t++) {
        if (t >= cap) die("internal: the 1f1b schedule does not finish (P=%d M=%d R=%d)", P, M, R);
        for (int s = 0; s < P; s++) {
            pick[s] = PP_IDLE;
            int limit = R == 1 ? P - s : 2 * (P - s - 1) + (R - 1) * P + 1;
            if (nb[s] < J) {
                int j = bord[nb[s]], rep = j / M;
                int from_head = s == P - 1 && rep == R - 1;   // the loss gradient, made with the last forward
                int ready = DONE_BEFORE(fdone, s, j) &&
                            (from_head || (s < P - 1 ? DONE_BEFORE(bdone, s + 1, j) : DONE_BEFORE(bdone, 0, j + M)));
                if (ready) { pick[s] = PP_B; continue; }
            }
            if (nf[s] < J && nf[s] - nb[s] < limit) {
                int j = ford[nf[s]], rep = j / M;
                int ready = (s == 0 && rep == 0) || (s > 0 ? DONE_BEFORE(fdone, s - 1, j) : DONE_BEFORE(fdone, P - 1, j - M));
                if (ready) pick[s] = PP_F;
            }
        }
        for (int s = 0; s < P; s++) {
            if (pick[s] == PP_F) { int j = ford[nf[s]++]; fdone[s * J + j] = t; set(sc, t, s, PP_F, j); left--; }
            if (pick[s] == PP_B) { int j = bord[nb[s]++]; bdone[s * J + j] = t; set(sc, t, s, PP_B, j); left--; }
        }
    }
    #undef DONE_BEFORE
    sc->nticks = t;
    sc->nfwd = 0;
    free(ford); free(bord); free(fdone); free(bdone); free(nf); free(nb); free(pick);
}

void schedule_build(Schedule *sc, int kind, int P, int M, int R, int forward_only) {
    memset(sc, 0, sizeof *sc);
    sc->kind = kind;
    sc->nstages = P;
    sc->M = M;
    sc->R = R;
    if (kind == PP_1F1B && !forward_only) build_1f1b(sc);
    else build_gpipe(sc, forward_only);
}

void schedule_free(Schedule *sc) {
    free(sc->task);
    memset(sc, 0, sizeof *sc);
}

long schedule_idle(const Schedule *sc) {
    long idle = 0;
    for (long i = 0; i < (long)sc->nticks * sc->nstages; i++) idle += sc->task[i].op == PP_IDLE;
    return idle;
}

void schedule_print(const Schedule *sc, FILE *f) {
    const char *digits = "0123456789abcdefghijklmnopqrstuvwxyz";
    for (int s = 0; s < sc->nstages; s++) {
        fprintf(f, "  stage %d |", s);
        for (int t = 0; t < sc->nticks; t++) {
            const PipeTask *k = schedule_at(sc, t, s);
            if (sc->nfwd && t == sc->nfwd) fprintf(f, " |");   // gpipe: the head runs between the two loops
            if (k->op == PP_IDLE) { fprintf(f, sc->R > 1 ? "   ." : "  ."); continue; }
            char mb = sc->M <= 36 ? digits[k->mb] : '*';
            if (sc->R > 1) fprintf(f, " %c%c%d", k->op == PP_F ? 'F' : 'B', mb, k->rep);
            else fprintf(f, " %c%c", k->op == PP_F ? 'F' : 'B', mb);
        }
        fprintf(f, "\n");
    }
    long idle = schedule_idle(sc), all = (long)sc->nticks * sc->nstages;
    int num = sc->nstages - 1, den = sc->R * sc->M + sc->nstages - 1;
    fprintf(f, "  bubble: %ld of %ld stage-ticks idle = %.4f; (P-1)/(R*M+P-1) = %d/%d = %.4f\n", idle, all,
            (double)idle / all, num, den, (double)num / den);
}

void pipeline_print_schedule(const Config *c, int stages) {
    PipeShape p = pipeline_shape(c, stages);
    Schedule sc;
    schedule_build(&sc, p.schedule, p.nstages, p.M, p.R, 0);
    // What a job keeps for its backward (pipeline/stage.c): under remat_policy=full the
    // iteration input (and each layer's input), under any other policy what it keeps.
    char saved[96];
    if (c->remat_policy == REMAT_FULL)
        snprintf(saved, sizeof saved, "iteration_input%s", p.save_dli ? " + decoder_layer_input" : "");
    else
        snprintf(saved, sizeof saved, "what remat_policy=%s keeps of each layer", remat_policy_name(c->remat_policy));
    printf("pipeline: %s, %d stages x %d layer%s per stage x %d repeat%s, %d microbatches, shift by %s, "
           "saved: %s: %d ticks (F forward, B backward, . idle; then the microbatch%s)\n",
           p.schedule == PP_1F1B ? "1f1b" : "gpipe", p.nstages, p.lps, p.lps > 1 ? "s" : "", p.R, p.R > 1 ? "s" : "",
           p.M, p.shift == PP_SLICE ? "slice" : "ppermute", saved, sc.nticks, p.R > 1 ? " and the repeat" : "");
    schedule_print(&sc, stdout);
    schedule_free(&sc);
}
