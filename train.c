// train.c: the story of a training run, top to bottom.
//
//   ./train CONFIG.yml [key=value ...]   train (see ./train --help-config for the keys)
//   ./train prepare IN.txt OUT.bin       write a byte-level text as an llm.c token file
//   ./train sweep CONFIG.yml [key=value]  every optimization toggled: losses and memory (sweep/)
//   ./train --help-config                list every config key with its default
//   ./train CONFIG.yml dry_run=true      the memory plan of one step, nothing computed
//   ./train plot TRACE.csv OUT_DIR       draw a memory_trace as one SVG per device
//   ./train figure KIND OUT.svg ...      the figures of docs/ (sweep/figure.c)
//   ./train export-hf CKPT OUT_DIR       a checkpoint as a Hugging Face model (model/hf.h)
//
// 1. read the config (preset file, then overrides) and check it;
// 2. make the device (one thread here; the mesh comes in sharding/) and its allocator;
// 3. load the data, build the model (or resume from a checkpoint);
// 4. loop: fetch the step's batch, forward + backward, clip + AdamW, log;
// 5. evaluate, save, and print a sample of what the model learned.
#include "common.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/model.h"
#include "model/step.h"
#include "model/matmul.h"
#include "model/checkpoint.h"
#include "model/dump.h"
#include "model/hf.h"
#include "model/sample.h"
#include "data/tokens.h"
#include "data/loader.h"
#include "sharding/memory.h"
#include "sharding/mesh.h"
#include "sharding/collectives.h"
#include "sharding/print.h"
#include "sharding/offload.h"
#include "pipeline/pipeline.h"
#include "sweep/sweep.h"
#include "model/attn_flash.h"
#include "sharding/plan.h"
#include "data/paths.h"
#include <time.h>
#include <errno.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// This device's part of the step's batch. The global batch is A microbatches of
// Bg = B * nbatch sequences; sequence i of microbatch mb is training window
// g = step * A*Bg + mb*Bg + i, a pure function of its place (data/loader.h), and this
// device takes i in [brank*B, (brank+1)*B) of every microbatch. A pipeline cuts each
// microbatch again into P pipeline microbatches of Bg/P sequences, and the device takes
// its piece of each: i in [p*Bg/P + brank*B/P, ...) for p = 0..P-1 (pipeline/pipeline.h).
// Under context parallelism it takes part crank of each sequence: its Sl = S/nctx tokens
// from position crank*Sl on.
static void take_part(const Model *m, const int *seq_ids, const int *seq_tg, int *ids, int *targets) {
    int S = m->cfg.max_target_length, Sl = S / m->shard.nctx, p0 = m->shard.crank * Sl;
    memcpy(ids, seq_ids + p0, sizeof(int) * Sl);
    memcpy(targets, seq_tg + p0, sizeof(int) * Sl);
}

static void fetch_batch(const Model *m, const DataLoader *dl, int step, int A, int B, int *ids, int *targets) {
    int S = m->cfg.max_target_length, Sl = S / m->shard.nctx, Bg = B * m->shard.nbatch;
    int P = pipeline_microbatches(&m->cfg), Bp = B / P;
    int *seq = (int *)mem_alloc(MEM_TEMP, sizeof(int) * 2 * S, "one sequence");   // ids, then targets
    for (int mb = 0; mb < A; mb++)
        for (int i = 0; i < B; i++) {
            int64_t g = (int64_t)step * A * Bg + (int64_t)mb * Bg + (int64_t)(i / Bp) * (Bg / P) +
                        (int64_t)m->shard.brank * Bp + i % Bp;
            size_t at = ((size_t)mb * B + i) * Sl;
            loader_train_sequence(dl, g, seq, seq + S);
            take_part(m, seq, seq + S, ids + at, targets + at);
        }
    mem_free(seq);
}

// Mean eval loss over eval_steps batches of Bg held-out windows (B on this device).
static float evaluate(Model *m, const DataLoader *dl, int B, int *ids, int *targets) {
    const Config *c = &m->cfg;
    int S = c->max_target_length, Sl = S / m->shard.nctx, Bg = B * m->shard.nbatch;
    int64_t nwin = loader_num_eval_windows(dl);
    int *seq = (int *)mem_alloc(MEM_TEMP, sizeof(int) * 2 * S, "one sequence");   // ids, then targets
    double sum = 0;
    for (int k = 0; k < c->eval_steps; k++) {
        for (int i = 0; i < B; i++) {
            loader_eval_sequence(dl, ((int64_t)k * Bg + (int64_t)m->shard.brank * B + i) % nwin, seq, seq + S);
            take_part(m, seq, seq + S, ids + (size_t)i * Sl, targets + (size_t)i * Sl);
        }
        sum += eval_loss(m, ids, targets, B, Sl);
    }
    mem_free(seq);
    return (float)(sum / c->eval_steps);
}

// What each device reports after a step (gathered to every device by mesh_stats).
typedef struct {
    size_t peak_total, peak[MEM_NTAGS], live[MEM_NTAGS], fwd_peak[MEM_NTAGS];
    size_t sent[COLL_NKINDS], recv[COLL_NKINDS];
    size_t host_peak_total, host_peak[MEM_NTAGS], to_host, to_device;   // host memory (offload)
    int stop;   // the signal that asked this run to stop after this step (data/paths.h), or 0
} DevStats;

// One JSON line per step. A write that fails (a full disk, `ulimit -f`) stops the run naming
// the path and the reason, and the unfinished line is cut off: the file keeps whole lines.
static void write_metrics(FILE *f, const char *path, int step, const StepResult *r, double ms, double tok_s, double gflops,
                          const DevStats *ds, int ndev) {
    union { float f; uint32_t u; } bits = {r->loss};
    long at = ftell(f);
    size_t peak = 0;
    for (int d = 0; d < ndev; d++) peak = MM_MAX(peak, ds[d].peak_total);
    fprintf(f, "{\"step\": %d, \"loss\": %.9g, \"loss_bits\": \"0x%08x\", \"ce_loss\": %.9g, \"aux_loss\": %.9g, "
            "\"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.3f, "
            "\"peak_bytes\": %zu, \"peak_bytes_by_tag\": {",
            step, r->loss, bits.u, r->ce_loss, r->aux_loss, r->lr, r->grad_norm, ms, tok_s, gflops, peak);
    for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, "%s\"%s\": %zu", t ? ", " : "", MEM_TAG_NAMES[t], ds[0].peak[t]);
    fprintf(f, "}, \"forward_peak_bytes_by_tag\": {");   // device 0's forward passes (not under a pipeline)
    for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, "%s\"%s\": %zu", t ? ", " : "", MEM_TAG_NAMES[t], ds[0].fwd_peak[t]);
    fprintf(f, "}, \"devices\": [");
    for (int d = 0; d < ndev; d++) {
        fprintf(f, "%s{\"device\": %d, \"peak_bytes\": %zu, \"peak_bytes_by_tag\": {", d ? ", " : "", d, ds[d].peak_total);
        for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, "%s\"%s\": %zu", t ? ", " : "", MEM_TAG_NAMES[t], ds[d].peak[t]);
        fprintf(f, "}, \"live_bytes_by_tag\": {");
        for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, "%s\"%s\": %zu", t ? ", " : "", MEM_TAG_NAMES[t], ds[d].live[t]);
        fprintf(f, "}, \"comm_bytes_sent\": {");
        for (int k = 0; k < COLL_NKINDS; k++) fprintf(f, "%s\"%s\": %zu", k ? ", " : "", COLL_NAMES[k], ds[d].sent[k]);
        fprintf(f, "}, \"comm_bytes_received\": {");
        for (int k = 0; k < COLL_NKINDS; k++) fprintf(f, "%s\"%s\": %zu", k ? ", " : "", COLL_NAMES[k], ds[d].recv[k]);
        fprintf(f, "}, \"host_peak_bytes\": %zu, \"host_peak_bytes_by_tag\": {", ds[d].host_peak_total);
        for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, "%s\"%s\": %zu", t ? ", " : "", MEM_TAG_NAMES[t], ds[d].host_peak[t]);
        fprintf(f, "}, \"host_transfer_bytes\": {\"to_host\": %zu, \"to_device\": %zu}}", ds[d].to_host, ds[d].to_device);
    }
    fprintf(f, "]}\n");
    if (fflush(f) != 0 || ferror(f)) {
        int err = errno;
        if (at >= 0 && ftruncate(fileno(f), at) != 0) err = errno;
        die("cannot write metrics_file '%s': %s (stopped at step %d; the lines of earlier steps are kept)", path,
            strerror(err), step);
    }
}

static int cmd_prepare(int argc, char **argv) {
    if (argc != 4) die("usage: ./train prepare IN.txt OUT.bin");
    check_input_file("prepare input", argv[2]);
    check_output_path("prepare output", argv[3]);
    size_t n;
    uint16_t *tok = text_read_bytes(argv[2], &n);
    tokfile_write(argv[3], tok, n);
    printf("wrote %zu tokens (byte-level, vocab 256) to %s\n", n, argv[3]);
    free(tok);
    return 0;
}

// A dry run's step: device 0's result and each planned device's figures after the step,
// for main to write once every device has its plan (sharding/mesh.h, mesh_run_classes).
typedef struct { int step; StepResult r; double ms, tok_s, gflops; DevStats *stats; } DryStep;

typedef struct { const Config *c; Mesh *mesh; const DataLoader *dl; size_t ntok; DryStep dry; } Run;

static void device_stats(const Device *dev, const StepResult *r, DevStats *s) {
    memset(s, 0, sizeof *s);
    s->peak_total = dev->peak_total;
    memcpy(s->peak, dev->peak, sizeof s->peak);
    memcpy(s->live, dev->live, sizeof s->live);
    memcpy(s->fwd_peak, r->fwd_peak, sizeof s->fwd_peak);
    for (int k = 0; k < COLL_NKINDS; k++) { s->sent[k] = dev->comm_sent[k]; s->recv[k] = dev->comm_recv[k]; }
    s->host_peak_total = dev->host_peak_total;
    memcpy(s->host_peak, dev->host_peak, sizeof s->host_peak);
    s->to_host = dev->to_host_bytes;
    s->to_device = dev->to_device_bytes;
    s->stop = signals_stop_requested();
}

// Every device's figures, on every device (a collective: all devices call it).
static void mesh_stats(const Mesh *mesh, const Device *dev, const StepResult *r, DevStats *all) {
    Group *g = mesh_group(mesh, mesh_device_id(), (1u << MESH_NAXES) - 1);
    DevStats mine;
    device_stats(dev, r, &mine);
    coll_all_gather(g, &mine, all, sizeof mine);
}

// The dry run's metrics line: every device has the figures of its class's representative.
static void write_dry_metrics(const Config *c, const Mesh *mesh, const DryStep *dry) {
    FILE *f = fopen(c->metrics_file, dry->step ? "a" : "w");
    if (!f) die("cannot open metrics_file '%s': %s", c->metrics_file, strerror(errno));
    DevStats *stats = calloc((size_t)mesh->ndev, sizeof(DevStats));
    for (int d = 0; d < mesh->ndev; d++) stats[d] = dry->stats[mesh->rep[d]];
    write_metrics(f, c->metrics_file, dry->step, &dry->r, dry->ms, dry->tok_s, dry->gflops, stats, mesh->ndev);
    free(stats);
    fclose(f);
}

// What every device runs: the same program on its own share (SPMD). Device 0 talks.
static void device_main(int dev_id, void *arg) {
    Run *run = (Run *)arg;
    Config c = *run->c;
    const Mesh *mesh = run->mesh;
    const DataLoader *dl = run->dl;
    Device *dev = mem_device();
    int talk = dev_id == 0;
    Model m;
    mem_mark_reset(dev);
    step_init(&m, &c);
    size_t init_peak = dev->mark_total, init_temp = dev->mark[MEM_TEMP];
    // The global batch is per_device_batch_size * num_devices sequences (as in MaxText),
    // split over the devices that share the batch.
    int A = c.gradient_accumulation_steps, S = c.max_target_length;
    int Bg = c.per_device_batch_size * mesh->ndev;
    if (Bg % m.shard.nbatch) die("internal: global batch %d does not split over %d devices", Bg, m.shard.nbatch);
    int B = Bg / m.shard.nbatch;
    int Sl = S / m.shard.nctx;   // tokens of each sequence on this device (context parallelism)
    char b1[32], b2[64];
    if (talk) {
        size_t P = sharding_global_params(&m);
        printf("meshmoe: %s model, %d layers, %zu parameters (%s), %d experts top-%d, %s path\n",
               c.decoder_block, c.base_num_decoder_layers, P, mem_fmt(P * 4, b1, sizeof b1),
               c.num_experts, c.num_experts_per_tok, c.sparse_matmul ? "sparse (grouped)" : "dense");
        printf("BLAS: %s\n", blas_description());
        int most = mesh_threads_of(mesh, 0), least = mesh_threads_of(mesh, mesh->ndev - 1);   // (the first get more)
        char nt[32];
        if (most > least) snprintf(nt, sizeof nt, "%d or %d", most, least);
        else snprintf(nt, sizeof nt, "%d", most);
        printf("mesh: %s (%d device%s, one thread each, with %s OpenMP thread%s)\n", mesh_describe(mesh, b2, sizeof b2),
               mesh->ndev, mesh->ndev > 1 ? "s" : "", nt, most > 1 ? "s" : "");
        printf("data: %s, %zu tokens (%zu train / %zu eval), batch %d x %d x %d tokens\n", c.dataset_path,
               run->ntok, dl->train_end - dl->train_begin, dl->eval_end - dl->eval_begin, A, Bg, S);
        sharding_print_state(&m);
        printf("init peak %zu bytes (temp %zu)\n", init_peak, init_temp);
        if (c.print_sharding) sharding_print(&m, Bg, S);
        if (mesh->size[AX_STAGE] > 1) pipeline_print_schedule(&c, mesh->size[AX_STAGE]);
    }
    if (c.load_hf[0] && (shard_is_split(&m.shard) || mesh->size[AX_TENSOR] > 1 || mesh->size[AX_EXPERT] > 1 ||
                         mesh->size[AX_STAGE] > 1))
        die("load_hf reads whole tensors on one device or a data-parallel mesh: load it there, save_checkpoint, "
            "then load_checkpoint on any mesh");
    if (c.load_checkpoint[0] && !c.dry_run) {   // every device reads its own slices
        checkpoint_load(&m, c.load_checkpoint);
        if (talk) printf("resumed from %s at step %d\n", c.load_checkpoint, m.step);
    }
    if (c.load_hf[0]) {
        int exact = hf_load(&m, c.load_hf);
        if (talk) printf("loaded the Hugging Face model %s%s\n", c.load_hf,
                         exact ? " (the query kernels exactly, from meshmoe_query_kernels.safetensors)" : "");
    }
    if (c.dump_parity[0]) {
        if (mesh->ndev > 1)
            die("dump_parity runs on one device (it is the parity test's tool, not a checkpoint): drop the ici_* keys");
        parity_dump(&m, dl, c.dump_parity);
        model_free(&m);
        return;
    }

    // eval_per_device_batch_size (docs/optimizations.md#eval_per_device_batch_size), read here only: the eval batch
    // is set apart from the training batch, so a small eval batch bounds the eval peak (its
    // forward activations) whatever the training batch; training is unchanged.
    int Be = B;
    if (c.eval_per_device_batch_size > 0) {
        int Beg = c.eval_per_device_batch_size * mesh->ndev;
        if (mesh->size[AX_STAGE] > 1) die("eval_per_device_batch_size is not supported with a pipeline (stage > 1)");
        if (Beg % m.shard.nbatch)
            die("eval_per_device_batch_size %d x %d devices = %d eval sequences do not split over the %d devices "
                "that share the batch", c.eval_per_device_batch_size, mesh->ndev, Beg, m.shard.nbatch);
        Be = Beg / m.shard.nbatch;
    }
    int *ids = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)A * B * Sl, "batch ids");
    int *targets = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)A * B * Sl, "batch targets");
    int *eval_ids = ids, *eval_targets = targets;   // the training batch's buffers, unless set apart
    if (c.eval_per_device_batch_size > 0) {
        eval_ids = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)Be * Sl, "eval batch ids");
        eval_targets = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)Be * Sl, "eval batch targets");
    }
    FILE *metrics = NULL;
    if (talk && c.metrics_file[0] && !c.dry_run && !(metrics = fopen(c.metrics_file, m.step ? "a" : "w")))
        die("cannot open metrics_file '%s': %s", c.metrics_file, strerror(errno));

    // 4. The training loop. A dry run (the planner, sharding/plan.h) runs one step that
    // makes every allocation of a real step and computes nothing: no data, no evaluation.
    DevStats *stats = calloc((size_t)mesh->ndev, sizeof(DevStats));
    float first_eval = c.dry_run ? 0.0f : evaluate(&m, dl, Be, eval_ids, eval_targets);
    if (talk && !c.dry_run) printf("step %5d | eval loss %.4f\n", m.step, first_eval);
    int stop = c.run_steps > 0 ? MM_MIN(c.steps, m.step + c.run_steps) : c.steps;
    if (c.dry_run) stop = m.step + 1;
    int first = m.step;
    // SIGINT/SIGTERM during the loop: the step finishes, and every device sees the signal in the
    // same gathered stats, so all stop after the same step (data/paths.h).
    int stop_sig = 0;
    if (talk) signals_allow_stop(1);
    while (m.step < stop && !stop_sig) {
        int step = m.step;
        if (!c.dry_run) fetch_batch(&m, dl, step, A, B, ids, targets);
        mem_reset_peak(dev);
        // The planner and the memory trace watch the first step of the run.
        if (step == first && (c.dry_run || c.memory_trace[0])) plan_watch_begin(dev, c.memory_trace[0] != 0);
        double flops0 = dev->flops, t0 = now_ms();
        StepResult r;
        size_t ncount = (size_t)c.base_num_decoder_layers * c.num_experts;
        long *counts = (long *)mem_alloc(MEM_TEMP, sizeof(long) * ncount, "expert counts");
        compute_gradients(&m, ids, targets, A, B, Sl, &r, counts, NULL, NULL);
        if (!c.dry_run && (!isfinite(r.loss) || !isfinite(r.grad_norm)))
            die("non-finite %s at step %d (loss %g, grad norm %g): stopped before the update, so "
                "the last checkpoint written (if any) is the last good state; lower learning_rate "
                "or check the data", isfinite(r.loss) ? "gradient" : "loss", step, r.loss, r.grad_norm);
        apply_update(&m, &r, counts, (long)A * Bg * S);
        mem_free(counts);
        plan_watch_end(dev);
        double ms = now_ms() - t0, gflops = (dev->flops - flops0) * mesh->ndev / (ms * 1e6);
        double tok_s = (double)A * Bg * S / (ms / 1e3);
        if (c.dry_run) {   // the plan and its metrics are written by main once every device has its plan
            device_stats(dev, &r, &run->dry.stats[dev_id]);
            if (talk) { run->dry.step = step; run->dry.r = r; run->dry.ms = ms; run->dry.tok_s = tok_s; run->dry.gflops = gflops; }
            break;
        }
        mesh_stats(mesh, dev, &r, stats);
        size_t peak = 0;
        for (int d = 0; d < mesh->ndev; d++) peak = MM_MAX(peak, stats[d].peak_total);
        for (int d = 0; d < mesh->ndev; d++) stop_sig = MM_MAX(stop_sig, stats[d].stop);
        if (talk && (step % c.log_period == 0 || step == c.steps - 1))
            printf("step %5d | loss %.4f | aux %.4f | lr %.2e | grad norm %.3f | %7.1f ms | %8.0f tok/s | "
                   "%6.1f GFLOP/s | peak %s\n", step, r.loss, r.aux_loss, r.lr, r.grad_norm, ms, tok_s, gflops,
                   mem_fmt(peak, b1, sizeof b1));
        if (metrics) write_metrics(metrics, c.metrics_file, step, &r, ms, tok_s, gflops, stats, mesh->ndev);
        if (c.eval_interval > 0 && m.step % c.eval_interval == 0 && m.step < c.steps) {
            float e = evaluate(&m, dl, Be, eval_ids, eval_targets);
            if (talk) printf("step %5d | eval loss %.4f\n", m.step, e);
        }
        if (c.save_checkpoint[0] && c.checkpoint_period > 0 && m.step % c.checkpoint_period == 0)
            checkpoint_save(&m, c.save_checkpoint);   // every device (a collective)
    }

    // 5. Final eval, checkpoint, sample. A run stopped by a signal saves its checkpoint and ends.
    if (talk) signals_allow_stop(0);
    if (stop_sig && !c.dry_run) {
        if (c.save_checkpoint[0]) checkpoint_save(&m, c.save_checkpoint);   // every device (a collective)
        if (talk) {
            fflush(stdout);
            fprintf(stderr, "meshmoe: stopped by %s after step %d of %d; %s%s\n", signal_name(stop_sig), m.step,
                    c.steps, c.save_checkpoint[0] ? "checkpoint saved to " : "no checkpoint saved (save_checkpoint is not set)",
                    c.save_checkpoint);
        }
    }
    if (c.dry_run || stop_sig) {
        if (metrics) fclose(metrics);
        free(stats);
        if (eval_ids != ids) { mem_free(eval_ids); mem_free(eval_targets); }
        mem_free(ids);
        mem_free(targets);
        model_free(&m);
        return;
    }
    mem_mark_reset(dev);   // the eval's own peak, next to the last step's
    float last_eval = evaluate(&m, dl, Be, eval_ids, eval_targets);
    if (talk) printf("step %5d | eval loss %.4f (first %.4f)\n", m.step, last_eval, first_eval);
    if (talk) printf("eval peak %zu bytes (temp %zu, activations %zu) with %d eval sequences per device; "
                     "last training step peak %zu bytes\n", dev->mark_total, dev->mark[MEM_TEMP],
                     dev->mark[MEM_ACTIVATIONS], Be, dev->peak_total);
    if (c.save_checkpoint[0]) {
        checkpoint_save(&m, c.save_checkpoint);
        if (talk) printf("saved checkpoint %s (step %d)\n", c.save_checkpoint, m.step);
    }
    if (c.sample_length > 0 && mesh->size[AX_STAGE] > 1) {
        if (talk) printf("sample: skipped (sampling runs the whole stack on every device; a pipeline stage holds "
                         "only its layers)\n");
    } else if (c.sample_length > 0 && m.shard.nctx > 1) {
        if (talk) printf("sample: skipped under context parallelism (ici_context_parallelism=%d): sampling runs "
                         "one growing sequence; use sample_length=0 to silence this\n", m.shard.nctx);
    } else if (c.sample_length > 0) {
        state_params_in(&m);   // weights kept in host memory come to the device to sample
        sample_print(&m, dl, c.sample_length, c.sample_temperature);
        state_params_out(&m);
    }
    if (metrics) fclose(metrics);
    free(stats);
    mem_free(ids);
    mem_free(targets);
    if (eval_ids != ids) { mem_free(eval_ids); mem_free(eval_targets); }
    model_free(&m);
}

int main(int argc, char **argv) {
    blas_prefer_fast_kernels(argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: ./train CONFIG.yml [key=value ...]\n       ./train prepare IN.txt OUT.bin\n"
               "       ./train sweep CONFIG.yml [key=value ...]\n       ./train plot TRACE.csv OUT_DIR\n"
               "       ./train figure timelines|peaks|schedule|meshes OUT.svg ...\n"
               "       ./train export-hf CKPT.safetensors OUT_DIR\n"
               "       ./train --help-config\n");
        return argc < 2;
    }
    if (!strcmp(argv[1], "--help-config")) { config_print_help(); return 0; }
    signals_install();
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc, argv);
    if (!strcmp(argv[1], "export-hf")) {
        if (argc != 4) die("usage: ./train export-hf CKPT.safetensors OUT_DIR");
        return hf_export(argv[2], argv[3]);
    }
    if (!strcmp(argv[1], "sweep")) return cmd_sweep(argc, argv);
    if (!strcmp(argv[1], "figure")) return cmd_figure(argc, argv);
    if (!strcmp(argv[1], "plot")) {
        if (argc != 4) die("usage: ./train plot TRACE.csv OUT_DIR");
        return plot_trace(argv[2], argv[3]);
    }

    // 1. Config.
    Config c;
    config_defaults(&c);
    config_load_file(&c, argv[1]);
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) die("argument '%s' is not key=value", argv[i]);
        *eq = '\0';
        config_set(&c, argv[i], eq + 1, "command line");
    }
    config_validate(&c);
    config_check_paths(&c);   // every file named is readable or writable, before any work
    // attn_block_autotune (docs/optimizations.md#attn_block_autotune): the block sizes, chosen before the mesh
    // starts so that every device uses the same ones.
    if (c.attn_block_autotune && !strcmp(c.attention, "flash") && !c.dry_run) attn_block_autotune(&c);
    // 2. The mesh: one thread per device, each with its own allocator (sharding/mesh.h).
    Mesh mesh;
    mesh_init(&mesh, &c);
    if (c.load_hf[0] && c.load_checkpoint[0]) die("load_hf and load_checkpoint both given: a run starts from one of them");
    if (c.load_checkpoint[0]) checkpoint_check(&c, c.load_checkpoint);   // its metadata and tensors, before training
    // OpenBLAS runs single-threaded: our GEMMs are small row blocks, which the caller runs
    // in parallel with OpenMP. Letting OpenBLAS start its own threads as well made every
    // step ~2.5x slower on 2 cores (measured: 525 -> 240 ms/step on mixtral-tiny).
    blas_set_threads(1);
    matmul_set_impl(c.matmul_impl);

    // 3. Data: read once, shared read-only by the devices.
    size_t ntok;
    uint16_t *tokens = data_load(c.dataset_path, &ntok);
    data_check_vocab(tokens, ntok, c.vocab_size, c.dataset_path);
    DataLoader dl;
    loader_init(&dl, tokens, ntok, c.max_target_length, c.eval_fraction);

    Run run = {&c, &mesh, &dl, ntok, {0}};
    mem_set_dry(c.dry_run);
    kern_use_default(c.dry_run ? &backend_dry : &backend_cpu);   // the kernels every device runs (kernels/kernels.h)
    // The planner reports a device that does not fit instead of stopping at its first
    // allocation that does not: its devices have no capacity limit.
    for (int d = 0; c.dry_run && d < mesh.ndev; d++) mesh.devices[d].capacity = 0;
    if (c.dry_run)
        printf("dry run: one training step's allocations, nothing computed (the MoE routing is replaced by a "
               "balanced one; every routing-dependent buffer is allocated for its bound, so the plan equals a "
               "real step's measured peaks)\n");
    if (c.dry_run) run.dry.stats = calloc((size_t)mesh.ndev, sizeof(DevStats));
    if (c.dry_run) mesh_run_classes(&mesh, device_main, &run, c.dry_run_all_devices);
    else mesh_run(&mesh, device_main, &run);

    if (c.memory_trace[0]) {
        plan_trace_write(&mesh, c.memory_trace);
        printf("memory trace of the first step written to %s (./train plot %s DIR draws it)\n", c.memory_trace,
               c.memory_trace);
    }
    if (c.dry_run && c.metrics_file[0]) write_dry_metrics(&c, &mesh, &run.dry);
    if (c.dry_run) plan_print(&mesh, (size_t)c.hbm_capacity);
    else
        for (int d = 0; d < mesh.ndev; d++) mem_print_report(&mesh.devices[d]);
    plan_free(&mesh);
    free(run.dry.stats);
    mesh_free(&mesh);
    free(tokens);
    int sig = signals_stop_requested();
    return sig ? 128 + sig : 0;
}
