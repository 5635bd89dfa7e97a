// sweep/sweep.c: `./train sweep CONFIG [key=value ...]`.
//
// For every row of the optimization catalog (trainer/rows.c) it runs the baseline (every
// key as the preset and the command line leave it) and the toggled configuration, each
// for sweep_steps steps as a child process of this binary, on the mesh the row names,
// and prints one markdown table line: the value tried, the numerics class, the result
// (bit-identical, or the largest relative loss difference), the highest per-device peak
// baseline -> toggled, host memory, the step-time ratio, the tags whose peak moved, and why.
// The row with key "mesh" is the mesh-shape sweep (sweep/meshes.c), printed as a second table.
//
// Every run of a sweep takes the same global batch (per_device_batch_size of the preset,
// as on one device): a run on n devices with A accumulation steps gets
// per_device_batch_size / (n * A) sequences per device, so a mesh row compares like with
// like. The exit status is non-zero when a "bit" row is not bit-identical or a run failed.
#include "trainer/step.h"
#include "trainer/files.h"
#include "sweep/sweep.h"
#include "sweep/sweep_int.h"
#include "core/common.h"
#include "base/config.h"
#include "base/paths.h"
#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <unistd.h>

// The mesh axes' short names in the tables.
static const char *const MESH_NAMES[] = {"data", "fsdp", "tensor", "expert", "context", "stage"};

static int *mesh_field(Config *c, int a) {
    int *f[] = {&c->ici_data_parallelism, &c->ici_fsdp_parallelism, &c->ici_tensor_parallelism,
                &c->ici_expert_parallelism, &c->ici_context_parallelism, &c->ici_pipeline_parallelism};
    return f[a];
}

void sweep_describe_mesh(const Config *c, char *buf, size_t cap) {
    Config t = *c;
    size_t len = 0;
    buf[0] = '\0';
    for (int a = 0; a < 6; a++)
        if (*mesh_field(&t, a) > 1)
            len += (size_t)snprintf(buf + len, cap - MM_MIN(len, cap), "%s%s=%d", len ? "," : "", MESH_NAMES[a],
                                    *mesh_field(&t, a));
    if (!len) snprintf(buf, cap, "1 device");
}

// Applies "k=v k=v" to c (every key known: checked by the caller).
static void apply_args(Config *c, const char *args) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", args);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) die("internal: sweep argument '%s' is not key=value", tok);
        *eq = '\0';
        config_set(c, tok, eq + 1, "sweep row");
    }
}

// Whether every key set by args exists in this build (the first missing one in *missing).
int sweep_args_known(const char *args, char *missing, size_t cap) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", args);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (eq) *eq = '\0';
        if (!config_has_key(tok)) { snprintf(missing, cap, "%s", tok); return 0; }
    }
    return 1;
}

// ---- the temporary directory, and a stop by a signal ----

// The runs' files go in a fresh directory under TMPDIR (/tmp when it is not set).
static void make_dir(Sweep *sw) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = "/tmp";
    if (path_join(sw->dir, sizeof sw->dir, tmp, "meshmoe-sweep.XXXXXX") >= (int)sizeof sw->dir)
        die("sweep: TMPDIR '%.64s...' is too long for the runs' files", tmp);
    if (!mkdtemp(sw->dir)) die("sweep: cannot make a temporary directory in '%s': %s", tmp, strerror(errno));
}

// Every file in the sweep's directory (the runs' logs and metrics, and a metrics file that a
// stopped run left under its temporary name), then the directory. Also die()'s clean-up hook.
static void remove_dir(void *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[PATH_MAX];
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && path_join(path, sizeof path, dir, e->d_name) <
            (int)sizeof path)
            unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

// After SIGINT, SIGTERM or SIGHUP (the run in flight stopped and waited for by sweep_run):
// the directory removed, one line said, and the exit status of a signal (128 + it).
static void stop_if_signalled(Sweep *sw) {
    int sig = sweep_stop_signal();
    if (!sig) return;
    remove_dir(sw->dir);
    fflush(stdout);
    fprintf(stderr, "meshmoe: sweep: interrupted by %s after %d of %d runs: the run in flight was stopped and "
            "the temporary directory %s removed\n", signal_name(sig), sw->nruns, sw->progress.runs_total, sw->dir);
    exit(128 + sig);
}

const RunResult *sweep_config(Sweep *sw, const char *args) {
    stop_if_signalled(sw);
    for (int i = 0; i < sw->nruns; i++)
        if (!strcmp(sw->runs[i].args, args)) return &sw->runs[i].r;
    if (sw->nruns == SW_MAXRUNS) die("sweep: more than %d runs; use sweep_only to run fewer rows", SW_MAXRUNS);
    SweepRun *run = &sw->runs[sw->nruns];
    snprintf(run->args, sizeof run->args, "%s", args);
    Config c = sw->cfg;
    apply_args(&c, args);
    int ndev = 1;
    for (int a = 0; a < 6; a++) ndev *= MM_MAX(1, *mesh_field(&c, a));
    // The same global batch in every run: G sequences per optimizer step, rounded up
    // where the mesh does not divide it (a pipeline of 3 stages), and said so in the table.
    int per = ndev * c.gradient_accumulation_steps;
    int pdb = MM_MAX(1, (sw->global_batch + per - 1) / per);
    run->r.ndev = ndev;
    run->r.batch = pdb * per;

    char metrics[sizeof sw->dir + 32], log[sizeof sw->dir + 32], steps[32], mfile[sizeof metrics + 16], pdbs[48];
    snprintf(metrics, sizeof metrics, "%s/run%d.jsonl", sw->dir, sw->nruns);
    snprintf(log, sizeof log, "%s/run%d.log", sw->dir, sw->nruns);
    snprintf(steps, sizeof steps, "steps=%d", sw->cfg.sweep_steps);
    snprintf(mfile, sizeof mfile, "metrics_file=%s", metrics);
    snprintf(pdbs, sizeof pdbs, "per_device_batch_size=%d", pdb);
    char *argv[SW_MAXARGS + 2];
    char argbuf[1024];
    int n = 0;
    argv[n++] = sw->exe;
    argv[n++] = sw->config_path;
    for (int i = 0; i < sw->nuser; i++) argv[n++] = sw->user[i];
    char *fixed[] = {steps, "sample_length=0", "eval_steps=1", "eval_interval=0", "log_period=1000",
                     "save_checkpoint=", "load_checkpoint=", mfile};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
    snprintf(argbuf, sizeof argbuf, "%s", args);
    for (char *tok = strtok(argbuf, " "); tok && n < SW_MAXARGS; tok = strtok(NULL, " ")) argv[n++] = tok;
    argv[n++] = pdbs;
    argv[n] = NULL;

    char mesh[64];
    sweep_describe_mesh(&c, mesh, sizeof mesh);
    fprintf(stderr, "sweep: run %d of %d: %s%s[%s, %d sequences]\n", sw->nruns + 1, sw->progress.runs_total, args,
            args[0] ? " " : "", mesh, run->r.batch);
    sweep_run(sw->exe, n, argv, log, metrics, &run->r);
    stop_if_signalled(sw);
    unlink(metrics);
    unlink(log);
    sw->nruns++;
    return &run->r;
}

// ---- comparing two runs ----

int sweep_bit_identical(const RunResult *a, const RunResult *b) {
    if (a->nsteps != b->nsteps || !a->nsteps) return 0;
    return !memcmp(a->loss, b->loss, sizeof(float) * (size_t)a->nsteps) &&
           !memcmp(a->grad_norm, b->grad_norm, sizeof(float) * (size_t)a->nsteps);
}

static double max_rel_diff(const RunResult *a, const RunResult *b, const float *(*field)(const RunResult *)) {
    double m = 0;
    const float *x = field(a), *y = field(b);
    for (int s = 0; s < MM_MIN(a->nsteps, b->nsteps); s++)
        m = MM_MAX(m, fabs((double)x[s] - y[s]) / MM_MAX(fabs((double)y[s]), 1e-30));
    return m;
}

static const float *losses(const RunResult *r) { return r->loss; }
static const float *grad_norms(const RunResult *r) { return r->grad_norm; }

// The result cell; *bad set when the row must fail the sweep.
void sweep_result_cell(const RunResult *base, const RunResult *tog, SweepClass cls, char *buf, size_t cap,
                       int *bad) {
    *bad = 0;
    const RunResult *stopped = base->status != RUN_OK ? base : tog->status != RUN_OK ? tog : NULL;
    if (stopped) {
        *bad = stopped->status == RUN_FAILED;
        snprintf(buf, cap, "%s%s: %s", stopped == base ? "baseline " : "",
                 stopped->status == RUN_REFUSED ? "refused by this build" : "FAILED", stopped->message);
        return;
    }
    if (sweep_bit_identical(base, tog)) { snprintf(buf, cap, "bit-identical"); return; }
    double dl = max_rel_diff(tog, base, losses), dg = max_rel_diff(tog, base, grad_norms);
    if (dl == 0 && base->nsteps == tog->nsteps)
        snprintf(buf, cap, "losses bit-identical, grad norms differ (max rel %.2e)", dg);
    else
        snprintf(buf, cap, "max rel loss diff %.2e", dl);
    *bad = cls == SW_BIT;
    if (*bad) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, " **NOT bit-identical**");
    }
}

void sweep_bytes_change(size_t a, size_t b, char *buf, size_t cap) {
    if (a == b) snprintf(buf, cap, "%zu -> %zu (same)", a, b);
    else if (!a) snprintf(buf, cap, "0 -> %zu", b);
    else snprintf(buf, cap, "%zu -> %zu (%+.1f%%)", a, b, 100.0 * ((double)b - (double)a) / (double)a);
}

// "tag a -> b; ..." for every tag whose per-device peak moved, the bytes sent per step, and
// the init and eval peaks where the runs print them.
static void moved_cell(const RunResult *a, const RunResult *b, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < b->ntags; i++) {
        size_t x = run_tag_peak(a, b->tag[i]), y = b->tag_peak[i];
        if (x != y && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %zu -> %zu", len ? "; " : "", b->tag[i], x, y);
    }
    size_t ca = run_comm_per_step(a), cb = run_comm_per_step(b);
    if (ca != cb && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "%ssent/step %zu -> %zu", len ? "; " : "", ca, cb);
    const char *what[2] = {"init peak", "eval peak"};
    size_t was[2] = {a->init_peak, a->eval_peak}, now[2] = {b->init_peak, b->eval_peak};
    for (int k = 0; k < 2; k++)
        if (was[k] != now[k] && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %zu -> %zu", len ? "; " : "", what[k], was[k], now[k]);
    if (!len) snprintf(buf, cap, "-");
}

// Host memory (offload rows): the highest device's host peak, and the bytes copied
// between host and device per step; "-" when neither run used host memory.
static void host_cell(const RunResult *a, const RunResult *b, char *buf, size_t cap) {
    if (!a->host_peak && !b->host_peak && !a->host_copied && !b->host_copied) { snprintf(buf, cap, "-"); return; }
    char peak[96];
    sweep_bytes_change(a->host_peak, b->host_peak, peak, sizeof peak);
    snprintf(buf, cap, "%s; copied/step %zu -> %zu", peak, a->host_copied, b->host_copied);
}

// ---- one row ----

static void print_row_line(const char *num, const char *key, const char *value, const char *mesh,
                           const char *cls, const char *result, const char *mem, const char *host,
                           const char *time, const char *moved, const char *why) {
    printf("| %s | `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", num, key, value, mesh, cls, result, mem,
           host, time, moved, why);
    fflush(stdout);
}

static void print_unimplemented(Sweep *sw, const SweepRow *row, const char *missing) {
    char note[256];
    sw->unimplemented++;
    snprintf(note, sizeof note, "not implemented in this build (no key `%s`)", missing);
    print_row_line(row->num, row->key, row->values, "-", sweep_class_name(row->cls), note, "-", "-", "-", "-",
                   row->why);
}

// Replaces "@stages" in the row's mesh by the pipeline's stage count.
static int row_args(const Sweep *sw, const SweepRow *row, char *buf, size_t cap) {
    const char *at = strstr(row->mesh, "@stages");
    if (!at) { snprintf(buf, cap, "%s", row->mesh); return 1; }
    if (sw->stages < 2) return 0;
    snprintf(buf, cap, "%.*s%d%s", (int)(at - row->mesh), row->mesh, sw->stages, at + 7);
    return 1;
}

// The toggled configuration of value v: the row's mesh arguments, then key=v.
static void toggle_args(const char *mesh_args, const SweepRow *row, const char *v, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s=%s", mesh_args, mesh_args[0] ? " " : "", row->key, v);
}

static void run_row(Sweep *sw, const SweepRow *row) {
    char args[700], missing[64], mesh_args[400];
    if (!config_has_key(row->key)) { print_unimplemented(sw, row, row->key); return; }
    if (!sweep_args_known(row->mesh, missing, sizeof missing)) { print_unimplemented(sw, row, missing); return; }
    if (!row_args(sw, row, mesh_args, sizeof mesh_args)) {
        print_row_line(row->num, row->key, row->values, "-", sweep_class_name(row->cls),
                       "not possible on this model: fewer than 2 pipelined layers", "-", "-", "-", "-", row->why);
        return;
    }
    Config base_cfg = sw->cfg;
    apply_args(&base_cfg, mesh_args);
    char base_value[64];
    config_format_value(&base_cfg, row->key, base_value, sizeof base_value);
    char values[256];
    snprintf(values, sizeof values, "%s", row->values);
    int tried = 0;
    for (char *save = NULL, *v = strtok_r(values, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
        if (config_value_is(&base_cfg, row->key, v)) continue;
        tried++;
        const RunResult *base = sweep_config(sw, mesh_args);   // runs[] never moves: pointers stay valid
        toggle_args(mesh_args, row, v, args, sizeof args);
        const RunResult *tog = sweep_config(sw, args);
        Config tog_cfg = base_cfg;
        apply_args(&tog_cfg, args);

        char value[160], mesh[160], bm[64], tm[64], result[512], mem[96], host[200], time[32], moved[512];
        snprintf(value, sizeof value, "%s (baseline %s)", v, base_value);
        sweep_describe_mesh(&base_cfg, bm, sizeof bm);
        sweep_describe_mesh(&tog_cfg, tm, sizeof tm);
        if (strcmp(bm, tm)) snprintf(mesh, sizeof mesh, "%s -> %s", bm, tm);
        else snprintf(mesh, sizeof mesh, "%s", bm);
        int bad;
        sweep_result_cell(base, tog, row->cls, result, sizeof result, &bad);
        sw->failures += bad;
        sw->refused += base->status == RUN_REFUSED || tog->status == RUN_REFUSED;
        char why[700];
        snprintf(why, sizeof why, "%s", row->why);
        if (base->status != RUN_OK || tog->status != RUN_OK) {
            snprintf(mem, sizeof mem, "-");
            snprintf(host, sizeof host, "-");
            snprintf(time, sizeof time, "-");
            snprintf(moved, sizeof moved, "-");
        } else {
            sweep_bytes_change(base->peak, tog->peak, mem, sizeof mem);
            host_cell(base, tog, host, sizeof host);
            snprintf(time, sizeof time, "x%.2f", run_min_ms(tog) / MM_MAX(run_min_ms(base), 1e-9));
            moved_cell(base, tog, moved, sizeof moved);
            if (base->peak == tog->peak)
                snprintf(why, sizeof why, "%s. Peak unchanged: %s", row->why,
                         row->why_same[0] ? row->why_same : "NOT EXPLAINED (expected to move)");
            if (base->batch != sw->global_batch || tog->batch != sw->global_batch) {
                size_t l = strlen(why);
                snprintf(why + l, sizeof why - l, " (global batch %d sequences: %d does not split over this mesh)",
                         tog->batch, sw->global_batch);
            }
        }
        print_row_line(row->num, row->key, value, mesh, sweep_class_name(row->cls), result, mem, host, time, moved,
                       why);
        sw->rows_run++;
    }
    if (!tried)
        print_row_line(row->num, row->key, row->values, "-", sweep_class_name(row->cls),
                       "nothing to try: the baseline already has every listed value", "-", "-", "-", "-", row->why);
}

// ---- the command ----

// Whether the row is selected by sweep_only (its key, its catalog number, or "mesh" for the mesh-shape sweep).
static int selected(const char *only, const SweepRow *row) {
    if (!only[0]) return 1;
    char buf[CFG_STR];
    snprintf(buf, sizeof buf, "%.*s", CFG_STR - 1, only);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!strcmp(t, row->key) || !strcmp(t, row->num)) return 1;
    return 0;
}

static void check_only(const char *only, const SweepRow *rows, int nrows) {
    char buf[CFG_STR];
    snprintf(buf, sizeof buf, "%.*s", CFG_STR - 1, only);
    if (only[0] && strspn(only, ", ") == strlen(only))
        die("sweep_only: '%s' names no row: give the keys, catalog row numbers (1-34) or 'mesh', comma-separated, "
            "or leave it empty for every row", only);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < nrows; i++) found |= !strcmp(t, rows[i].key) || !strcmp(t, rows[i].num);
        if (!found)
            die("sweep_only: '%s' is no row of the sweep: give the keys (e.g. ici_fsdp_parallelism,"
                "pipeline_shift_impl), catalog row numbers (1-34) or 'mesh'; trainer/rows.c lists the rows", t);
    }
}

// ---- the runs ahead, for the progress lines ----

typedef struct {
    char (*args)[700];
    int n;
} Planned;

static void plan_add(Planned *p, const char *args) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->args[i], args)) return;
    if (p->n < SW_MAXRUNS) snprintf(p->args[p->n++], sizeof p->args[0], "%s", args);
}

// The child runs the selected rows will ask sweep_config for, each configuration once (as
// run_row and sweep_meshes will): the baseline and the toggle of every value tried.
static int planned_runs(const Sweep *sw, const SweepRow *rows, int nrows) {
    Planned p = {calloc(SW_MAXRUNS, sizeof *p.args), 0};
    if (!p.args) die("sweep: out of memory");
    for (int i = 0; i < nrows; i++) {
        const SweepRow *row = &rows[i];
        char missing[64], mesh_args[400], values[256], args[700];
        if (!selected(sw->cfg.sweep_only, row)) continue;
        if (!strcmp(row->key, "mesh")) {
            char shapes[SW_MAXSHAPES][256];
            int n = sweep_mesh_shapes(sw, shapes);
            plan_add(&p, "");
            for (int k = 0; k < n; k++) plan_add(&p, shapes[k]);
            continue;
        }
        if (!config_has_key(row->key) || !sweep_args_known(row->mesh, missing, sizeof missing) ||
            !row_args(sw, row, mesh_args, sizeof mesh_args))
            continue;
        Config base = sw->cfg;
        apply_args(&base, mesh_args);
        snprintf(values, sizeof values, "%s", row->values);
        for (char *save = NULL, *v = strtok_r(values, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
            if (config_value_is(&base, row->key, v)) continue;
            plan_add(&p, mesh_args);
            toggle_args(mesh_args, row, v, args, sizeof args);
            plan_add(&p, args);
        }
    }
    free(p.args);
    return p.n;
}

// The stage count of the pipeline rows: the smallest count >= 2 that divides the
// pipelined layers (all of Mixtral's, DeepSeek's MoE layers); 0 when there is none.
static int pipeline_stages(const Config *c) {
    int p = c->base_num_decoder_layers - c->first_num_dense_layers;
    for (int s = 2; s <= p; s++)
        if (p % s == 0) return s;
    return 0;
}

// The keys of a run's own files, which no run of the sweep can honour: the runs would write
// one file in turn, each replacing the last, or stop before training, or start elsewhere than
// their baselines. Refused, naming the first one set, before any run starts.
static void refuse_run_files(const Config *c) {
    const struct { const char *key, *value, *why; } keys[] = {
        {"save_checkpoint", c->save_checkpoint, "the sweep's runs save nothing"},
        {"load_checkpoint", c->load_checkpoint,
         "every run of the sweep starts from fresh weights at step 0, as its baseline does"},
        {"metrics_file", c->metrics_file,
         "the sweep keeps each run's metrics in its own temporary directory and prints the table on stdout"},
        {"memory_trace", c->memory_trace,
         "every run of the sweep would write this file in turn, each replacing the last"},
        {"dump_parity", c->dump_parity,
         "a run with it writes the dump and exits without training, so every run would write the same dump "
         "and the sweep would compare nothing"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].value[0]) die("sweep: %s=%s: %s; drop the key", keys[i].key, keys[i].value, keys[i].why);
    if (c->dry_run)
        die("sweep: dry_run=true: a dry run computes nothing, so every row would compare zeros; the planner of "
            "each row is ./train CONFIG dry_run=true with that row's key");
    if (c->prompt[0]) die("sweep: prompt=%s: the sweep's runs sample nothing (sample_length=0); drop the key", c->prompt);
}

// The files every run of the sweep reads (trainer/files.h), checked once here: the runs
// write only their metrics and logs, in the sweep's own directory.
static void sweep_files_check(const Config *cfg, const char *config_path) {
    refuse_run_files(cfg);
    config_check_paths(cfg);
    train_files_check(cfg, config_path);
}

int cmd_sweep(int argc, char **argv) {
    if (argc < 3) die("usage: ./train sweep CONFIG.yml [key=value ...] (sweep_steps, sweep_only, sweep_num_devices)");
    static Sweep sweep;
    Sweep *sw = &sweep;
    static char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) die("sweep: cannot find this program (/proc/self/exe): %s", strerror(errno));
    exe[len] = '\0';
    sw->exe = exe;
    sw->config_path = argv[2];
    config_defaults(&sw->cfg);
    config_load_file(&sw->cfg, argv[2]);
    sw->user = calloc((size_t)argc, sizeof(char *));
    for (int i = 3; i < argc; i++) {
        char key[128];
        const char *eq = strchr(argv[i], '=');
        if (!eq) die("argument '%s' is not key=value", argv[i]);
        snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
        config_set(&sw->cfg, key, eq + 1, "command line");
        if (!strncmp(key, "ici_", 4) || !strcmp(key, "num_devices"))
            die("sweep: '%s' sets the mesh, which every row chooses itself; drop it (sweep_num_devices sets "
                "the devices of the mesh-shape sweep)", key);
        if (strncmp(key, "sweep_", 6)) sw->user[sw->nuser++] = argv[i];
    }
    if (sw->nuser > SW_MAXARGS - 24) die("sweep: too many key=value arguments (%d)", sw->nuser);
    step_check_config(&sw->cfg);
    sweep_files_check(&sw->cfg, sw->config_path);
    if (sw->cfg.sweep_steps < 1 || sw->cfg.sweep_steps > SW_MAXSTEPS)
        die("sweep_steps must be between 1 and %d, got %d", SW_MAXSTEPS, sw->cfg.sweep_steps);
    if (sw->cfg.sweep_num_devices < 1 || sw->cfg.sweep_num_devices > 64)
        die("sweep_num_devices must be between 1 and 64, got %d", sw->cfg.sweep_num_devices);
    int nrows;
    const SweepRow *rows = sweep_rows(&nrows);
    check_only(sw->cfg.sweep_only, rows, nrows);
    sw->global_batch = sw->cfg.per_device_batch_size * sw->cfg.gradient_accumulation_steps;
    sw->cfg.per_device_batch_size = 0;   // set per run
    sw->stages = pipeline_stages(&sw->cfg);
    sweep_signals_install();   // before the directory exists: a signal from here on is seen by the next run
    make_dir(sw);
    die_set_cleanup(remove_dir, sw->dir);

    printf("## `./train sweep %s`: %d steps per run, %d sequences of %d tokens per step\n\n", sw->config_path,
           sw->cfg.sweep_steps, sw->global_batch, sw->cfg.max_target_length);
    printf("Peak = the highest per-device peak of the steps (bytes, all tags); step time = the lowest step "
           "time of the toggled run over the baseline's (a machine shared with other work makes it noisy: rerun a row "
           "before trusting a ratio far from 1).\n\n");
    printf("| # | key | value tried | mesh | class | result | peak device bytes: baseline -> toggled | host bytes "
           "| step time | what moved (per-device peak by tag) | why |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    int nselected = 0;
    for (int i = 0; i < nrows; i++) nselected += selected(sw->cfg.sweep_only, &rows[i]);
    progress_start(&sw->progress, nselected, planned_runs(sw, rows, nrows));
    for (int i = 0; i < nrows; i++) {
        if (!selected(sw->cfg.sweep_only, &rows[i])) continue;
        char what[160];
        snprintf(what, sizeof what, "row %s %s", rows[i].num, rows[i].key);
        progress_item_begin(&sw->progress, what);
        if (!strcmp(rows[i].key, "mesh")) sweep_meshes(sw, &rows[i]);
        else run_row(sw, &rows[i]);
        progress_item_end(&sw->progress, what, sw->nruns);
    }
    stop_if_signalled(sw);
    if (sw->mesh_table) { printf("\n%s", sw->mesh_table); free(sw->mesh_table); }
    printf("\nsweep: %d comparisons run, %d rows not implemented in this build, %d refused by this build, "
           "%d failed (a bit row not bit-identical, or a run that failed)\n", sw->rows_run, sw->unimplemented,
           sw->refused, sw->failures);
    die_set_cleanup(NULL, NULL);
    remove_dir(sw->dir);
    free(sw->user);
    return sw->failures ? 1 : 0;
}
