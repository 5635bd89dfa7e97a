// tests/test_pipeline.c: the pieces of the pipeline that need no mesh: the gradient tree
// over leaves that arrive in any order must give the bits of the in-order TreeSum, and the
// schedules' tick tables must run every task once, after what it depends on, with the
// bubble and the live activations the schedule promises.
#include "core/common.h"
#include "base/treesum.h"
#include "pipeline/gradtree.h"
#include "pipeline/schedule.h"
#include "pipeline/pipeline.h"
#include "base/memory.h"
#include "tests/test.h"

// ---- gradtree: any order of the leaves, the bits of TreeSum in order ----
static void test_gradtree(void) {
    enum { LEN = 7, MAXN = 13 };
    float leaf[MAXN][LEN];
    uint64_t seed = 11;
    for (int i = 0; i < MAXN; i++)   // values of very different sizes, so the order of the sums shows
        for (int k = 0; k < LEN; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            leaf[i][k] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5) * powf(10.0f, (float)(i % 4));
        }
    for (int n = 1; n <= MAXN; n++) {
        float want[LEN] = {0};
        TreeSum ts;
        treesum_begin(&ts, LEN, MEM_TEMP, "test");
        for (int i = 0; i < n; i++) { memcpy(treesum_leaf(&ts), leaf[i], sizeof leaf[i]); treesum_push(&ts); }
        treesum_end(&ts, want);
        for (int order = 0; order < 3; order++) {   // in order, reversed, scrambled
            float got[LEN] = {0};
            GradTree gt;
            gradtree_begin(&gt, n, LEN, got);
            for (int k = 0; k < n; k++) {
                int i = order == 0 ? k : order == 1 ? n - 1 - k : (k * 5 + 3) % n;
                if (order == 2 && n % 5 == 0) i = (k * 3 + 1) % n;   // 5 must be prime to n
                float *b = gradtree_buffer(&gt, "test leaf");
                memcpy(b, leaf[i], sizeof leaf[i]);
                gradtree_push(&gt, i, b);
            }
            gradtree_end(&gt);
            CHECK(memcmp(got, want, sizeof got) == 0, "gradtree: %d leaves in order %d differ from TreeSum", n, order);
        }
    }
}

// ---- schedules ----
// Checks one table: every F and B once per (stage, job), in dependency order; returns the
// most jobs a stage holds between their F and B (live saved activations).
static int check_table(const Schedule *sc, const char *what) {
    int P = sc->nstages, M = sc->M, R = sc->R, J = M * R, ok = 1, most = 0;
    int *ft = malloc(sizeof(int) * P * J), *bt = malloc(sizeof(int) * P * J);
    for (int i = 0; i < P * J; i++) ft[i] = bt[i] = -1;
    for (int t = 0; t < sc->nticks; t++)
        for (int s = 0; s < P; s++) {
            const PipeTask *k = schedule_at(sc, t, s);
            int j = k->rep * M + k->mb;
            if (k->op == PP_F) { ok &= ft[s * J + j] < 0; ft[s * J + j] = t; }
            if (k->op == PP_B) { ok &= bt[s * J + j] < 0; bt[s * J + j] = t; }
        }
    for (int s = 0; s < P; s++)
        for (int j = 0; j < J; j++) {
            int f = ft[s * J + j], b = bt[s * J + j], rep = j / M;
            ok &= f >= 0 && b > f;
            if (s > 0) ok &= ft[(s - 1) * J + j] < f;               // the previous stage's output
            else if (rep > 0) ok &= ft[(P - 1) * J + j - M] < f;    // the last stage's, a repeat before
            if (s < P - 1) ok &= bt[(s + 1) * J + j] < b;           // the next stage's gradient
            else if (rep < R - 1) ok &= bt[j + M] < b;              // stage 0's, a repeat after
        }
    for (int s = 0; s < P; s++)
        for (int t = 0; t < sc->nticks; t++) {
            int live = 0;
            for (int j = 0; j < J; j++) live += ft[s * J + j] <= t && bt[s * J + j] > t;
            most = MM_MAX(most, live);
        }
    CHECK(ok, "%s: a task is missing, repeated, or runs before its input", what);
    free(ft);
    free(bt);
    return most;
}

static void test_schedules(void) {
    int shapes[][3] = {{2, 2, 1}, {2, 4, 2}, {4, 4, 1}, {4, 8, 1}, {4, 8, 2}, {3, 6, 1}, {2, 2, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int P = shapes[i][0], M = shapes[i][1], R = shapes[i][2];
        char what[64];
        Schedule g, f;
        schedule_build(&g, PP_GPIPE, P, M, R, 0);
        schedule_build(&f, PP_1F1B, P, M, R, 0);
        snprintf(what, sizeof what, "gpipe P=%d M=%d R=%d", P, M, R);
        int live_g = check_table(&g, what);
        snprintf(what, sizeof what, "1f1b P=%d M=%d R=%d", P, M, R);
        int live_f = check_table(&f, what);
        // MaxText's loop: 2(MR+P-1) ticks, 2(P-1) idle per stage, all M*R jobs live at once.
        CHECK(g.nticks == 2 * (M * R + P - 1) && schedule_idle(&g) == 2L * P * (P - 1) && live_g == M * R,
              "gpipe P=%d M=%d R=%d: %d ticks, %ld idle, %d live", P, M, R, g.nticks, schedule_idle(&g), live_g);
        if (R == 1)   // 1F1B: the same ticks and bubble, at most P jobs live (stage 0)
            CHECK(f.nticks == g.nticks && schedule_idle(&f) == schedule_idle(&g) && live_f == MM_MIN(P, M),
                  "1f1b P=%d M=%d: %d ticks, %ld idle, %d live", P, M, f.nticks, schedule_idle(&f), live_f);
        else
            CHECK(M == P ? live_f <= live_g : live_f < live_g, "1f1b P=%d M=%d R=%d: %d live, gpipe %d", P, M, R,
                  live_f, live_g);
        schedule_free(&g);
        schedule_free(&f);
    }
    // Evaluation runs the forward loop alone.
    Schedule e;
    schedule_build(&e, PP_1F1B, 4, 8, 1, 1);
    CHECK(e.nticks == 11 && e.nfwd == 11, "forward-only table: %d ticks", e.nticks);
    schedule_free(&e);
}

// ---- placement: which stage holds which unit ----
static void test_placement(void) {
    Config c;
    config_defaults(&c);
    c.base_num_decoder_layers = 5;
    c.first_num_dense_layers = 1;   // DeepSeek-like: 1 dense + 4 pipelined layers
    c.num_pipeline_microbatches = 4;
    PipeShape p = pipeline_shape(&c, 2);   // MaxText's default: 1 layer per stage, so 2 repeats
    CHECK(p.lps == 1 && p.R == 2 && p.M == 4 && p.first == 1, "shape: lps %d R %d M %d first %d", p.lps, p.R, p.M, p.first);
    // Units: 0 embedding, 1 dense layer, 2..5 layers 1..4, 6 the head.
    int want[] = {0, 0, 0, 1, 0, 1, 1};
    for (int u = 0; u <= 6; u++)
        CHECK(pipeline_stage_of_unit(&c, 2, u) == want[u], "unit %d on stage %d, want %d", u,
              pipeline_stage_of_unit(&c, 2, u), want[u]);
    CHECK(pipeline_layer(&p, 1, 1, 0) == 4, "stage 1 repeat 1 runs layer %d, want 4", pipeline_layer(&p, 1, 1, 0));
    c.num_pipeline_repeats = 1;
    p = pipeline_shape(&c, 2);
    CHECK(p.lps == 2 && p.R == 1, "R=1 gives %d layers per stage", p.lps);
}

int main(void) {
    Device dev;
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    test_gradtree();
    test_schedules();
    test_placement();
    CHECK(dev.live_total == 0, "leaked %zu bytes of device memory", dev.live_total);
    TEST_SUMMARY();
}
