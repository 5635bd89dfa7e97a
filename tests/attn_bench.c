// tests/attn_bench.c (build/attn_bench): the attention core's forward + backward at the
// -small presets' shapes (batch 8, 256 positions, 8 query heads; mixtral-small GQA with 4 kv
// heads of 64, deepseek-small MLA with q/k heads of 96 and v heads of 64), by the tiles
// (attention_cpu) and by the per-row loops (attention_cpu_plain) in turn, on the same
// inputs. Each figure is the median of the rounds, by the clock and per CPU-second (the
// process's CPU time, all threads); the ratio of the two tables is measured round by round
// in one run, which is what a shared machine can compare. GFLOP/s counts 2 flops per
// multiply-add of the visible (query, key) pairs, as model/attn_core.c counts them:
// (Dqk + Dv) per pair forward, (3 Dqk + 2 Dv) backward.
//   build/attn_bench [rounds] [threads]     (5 rounds, 2 threads by default)
#include "core/common.h"
#include "kernels/attention.h"
#include <omp.h>
#include <time.h>

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static float *filled(size_t n, uint32_t seed) {
    float *x = malloc(sizeof(float) * n);
    if (!x) die("attn_bench: out of memory");
    attention_cpu.uniform_fill(x, n, seed);
    return x;
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *x, int n) { qsort(x, n, sizeof *x, cmp); return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]); }

typedef struct { int B, S, N, Nkv, Dqk, Dv; const char *name; } Shape;

// One forward and one backward (a single query chunk) with table K: seconds by the clock
// and of CPU time.
static void pass(const AttentionKernels *K, const Shape *s, float **t, double *wall, double *cpu) {
    int B = s->B, S = s->S, N = s->N, Nkv = s->Nkv, Dqk = s->Dqk, Dv = s->Dv;
    size_t nk = (size_t)B * S * Nkv;
    AttnRounding f32 = {0, 0, 0};
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    K->dot_forward(t[4], t[5], t[6], t[0], t[1], t[2], NULL, B, S, 0, N, Nkv, Dqk, Dv, f32);
    memset(t[8], 0, sizeof(float) * nk * Dqk);
    memset(t[9], 0, sizeof(float) * nk * Dv);
    K->dot_backward_rows(t[7], t[8], t[9], t[3], t[0], t[1], t[2], t[4], t[5], NULL, B, S, 0, 0, S, N, Nkv, Dqk, Dv,
                         f32);
    *wall = now(CLOCK_MONOTONIC) - t0;
    *cpu = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5, threads = argc > 2 ? atoi(argv[2]) : 2;
    if (rounds < 1 || rounds > 1000 || threads < 1) die("attn_bench: usage: build/attn_bench [rounds] [threads]");
    omp_set_num_threads(threads);
    Shape shapes[] = {{8, 256, 8, 4, 64, 64, "mixtral-small (GQA 8/4 heads, 64/64)"},
                      {8, 256, 8, 8, 96, 64, "deepseek-small (MLA 8 heads, 96/64)"}};
    const AttentionKernels *tables[2] = {&attention_cpu_plain, &attention_cpu};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const Shape *s = &shapes[si];
        size_t nq = (size_t)s->B * s->S * s->N, nk = (size_t)s->B * s->S * s->Nkv;
        float *t[10] = {filled(nq * s->Dqk, 1), filled(nk * s->Dqk, 2), filled(nk * s->Dv, 3), filled(nq * s->Dv, 4),
                        filled(nq * s->Dv, 5), filled(nq * 2, 6), filled((size_t)s->B * s->N * s->S, 7),
                        filled(nq * s->Dqk, 8), filled(nk * s->Dqk, 9), filled(nk * s->Dv, 10)};
        double pairs = (double)s->B * s->N * s->S * (s->S + 1) / 2;
        double gflop = 2.0 * pairs * ((s->Dqk + s->Dv) + (3.0 * s->Dqk + 2.0 * s->Dv)) / 1e9;
        double wall[2][1000], cpu[2][1000], ratio[1000];
        for (int r = -1; r < rounds; r++)   // round -1 warms up
            for (int k = 0; k < 2; k++) {
                double w, c;
                pass(tables[k], s, t, &w, &c);
                if (r >= 0) { wall[k][r] = w; cpu[k][r] = c; }
            }
        for (int r = 0; r < rounds; r++) ratio[r] = wall[0][r] / wall[1][r];
        double rt = median(ratio, rounds);
        printf("attention fwd+bwd %s, %d threads, %.2f GFLOP, median of %d rounds:\n", s->name, threads, gflop, rounds);
        for (int k = 0; k < 2; k++) {
            double w = median(wall[k], rounds), c = median(cpu[k], rounds);
            printf("  %-9s %7.1f ms  GFLOP/s %6.1f  per-CPU-second %6.1f\n", k ? "tiles" : "per-row", 1e3 * w,
                   gflop / w, gflop / c);
        }
        printf("  tiles / per-row speed-up (median of the rounds' ratios): %.2fx\n", rt);
        for (int i = 0; i < 10; i++) free(t[i]);
    }
    return 0;
}
