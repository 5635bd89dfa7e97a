// sweep/meshes.c: the mesh-shape sweep (docs/optimizations.md#mesh-shape-sweep).
//
// Every way of writing sweep_num_devices (N) as data x fsdp x tensor x expert, each run
// for sweep_steps steps with the same global batch as one device, and compared with one
// device: losses (bit for bit: sums over tokens, tensor slices and devices are added in
// one canonical order on this trainer, tensor parallelism included), the per-device peak
// by tag, the bytes the devices sent per step and the step time. A shape the model does
// not divide (more tensor devices than heads, more expert devices than experts) is
// refused by the trainer's own checks, and the table says so with its message.
#include "sweep/sweep_int.h"
#include "core/common.h"
#include <stdio.h>

static const char *const AXES[4] = {"ici_data_parallelism", "ici_fsdp_parallelism", "ici_tensor_parallelism",
                                    "ici_expert_parallelism"};

// One line of the mesh table.
static void mesh_line(FILE *t, const char *mesh, const RunResult *base, const RunResult *r, int *same, int *bad) {
    char result[512];
    sweep_result_cell(base, r, SW_BIT, result, sizeof result, bad);
    *same = r->status == RUN_OK && base->status == RUN_OK && sweep_bit_identical(base, r);
    if (r->status != RUN_OK) {
        fprintf(t, "| %s | %d | %s: %s | - | - | - | - | - | - | - | - |\n", mesh, r->ndev,
                r->status == RUN_REFUSED ? "not possible on this model" : "FAILED", r->message);
        return;
    }
    char peak[96];
    if (r->peak_min_dev != r->peak) snprintf(peak, sizeof peak, "%zu (lowest device %zu)", r->peak, r->peak_min_dev);
    else snprintf(peak, sizeof peak, "%zu", r->peak);
    fprintf(t, "| %s | %d | %s | %s | %zu | %zu | %zu | %zu | %zu | %zu | %.1f (x%.2f) |\n", mesh, r->ndev, result,
            peak, run_tag_peak(r, "params"), run_tag_peak(r, "grads"), run_tag_peak(r, "optimizer"),
            run_tag_peak(r, "activations"), run_tag_peak(r, "temp"), run_comm_per_step(r), run_min_ms(r),
            run_min_ms(r) / MM_MAX(run_min_ms(base), 1e-9));
}

int sweep_mesh_shapes(const Sweep *sw, char args[SW_MAXSHAPES][256]) {
    int N = sw->cfg.sweep_num_devices, n = 0, f[4];
    for (f[0] = 1; f[0] <= N; f[0]++)
        for (f[1] = 1; f[1] <= N; f[1]++)
            for (f[2] = 1; f[2] <= N; f[2]++)
                for (f[3] = 1; f[3] <= N; f[3]++) {
                    if (f[0] * f[1] * f[2] * f[3] != N || N == 1) continue;
                    if (n == SW_MAXSHAPES)
                        die("sweep: %d devices have more than %d meshes; choose a smaller sweep_num_devices", N,
                            SW_MAXSHAPES);
                    size_t len = 0;
                    args[n][0] = '\0';
                    for (int a = 0; a < 4; a++)
                        if (f[a] > 1) len += (size_t)snprintf(args[n] + len, 256 - len, "%s%s=%d", len ? " " : "",
                                                              AXES[a], f[a]);
                    n++;
                }
    return n;
}

// Sets the four axes of c from a shape's arguments (the axes it leaves out are 1).
static void apply_shape(Config *c, const char *args) {
    int *field[4] = {&c->ici_data_parallelism, &c->ici_fsdp_parallelism, &c->ici_tensor_parallelism,
                     &c->ici_expert_parallelism};
    for (int a = 0; a < 4; a++) {
        const char *at = strstr(args, AXES[a]);
        *field[a] = at ? atoi(at + strlen(AXES[a]) + 1) : 1;
    }
}

void sweep_meshes(Sweep *sw, const SweepRow *row) {
    int N = sw->cfg.sweep_num_devices;
    char *text = NULL;
    size_t textlen = 0;
    FILE *t = open_memstream(&text, &textlen);
    if (!t) die("sweep: out of memory for the mesh table");
    fprintf(t, "### Mesh shapes: every factorisation of %d devices over data x fsdp x tensor x expert\n\n", N);
    fprintf(t, "Same global batch (%d sequences) on every mesh; bytes are per device (the highest device), "
            "\"sent\" is the bytes all devices sent per step (after the first); step time is the lowest.\n\n",
            sw->global_batch);
    fprintf(t, "| mesh | devices | result vs 1 device | peak bytes | params | grads | optimizer | activations | "
            "temp | sent per step | step ms (vs 1 device) |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    const RunResult *b = sweep_config(sw, "");
    int same_dummy, bad;
    mesh_line(t, "1 device (baseline)", b, b, &same_dummy, &bad);
    int meshes = 0, identical = 0, refused = 0, failed = 0;
    size_t lo = 0, hi = 0;
    char args[SW_MAXSHAPES][256];
    int nshapes = sweep_mesh_shapes(sw, args);
    for (int k = 0; k < nshapes; k++) {
        Config c = sw->cfg;
        apply_shape(&c, args[k]);
        char mesh[64];
        sweep_describe_mesh(&c, mesh, sizeof mesh);
        const RunResult *r = sweep_config(sw, args[k]);
        int same;
        mesh_line(t, mesh, b, r, &same, &bad);
        meshes++;
        identical += same;
        refused += r->status == RUN_REFUSED;
        failed += bad;
        if (r->status == RUN_OK) {
            lo = lo ? MM_MIN(lo, r->peak) : r->peak;
            hi = MM_MAX(hi, r->peak);
        }
    }
    fclose(t);
    sw->mesh_table = text;
    sw->failures += failed;
    sw->rows_run++;
    char value[64], result[256], mem[96];
    snprintf(value, sizeof value, "every factorisation of %d", N);
    snprintf(result, sizeof result, "%d of %d meshes bit-identical to 1 device%s (%d not possible on this model); "
             "table below", identical, meshes - refused, failed ? " **NOT all**" : "", refused);
    if (hi) snprintf(mem, sizeof mem, "%zu -> %zu .. %zu", b->peak, lo, hi);
    else snprintf(mem, sizeof mem, "-");
    printf("| %s | `%s` | %s | %d devices | %s | %s | %s | - | - | see the table | %s |\n", row->num, row->key, value,
           N, sweep_class_name(row->cls), result, mem, row->why);
    fflush(stdout);
}
