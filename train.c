// train.c: the story of a training run, top to bottom.
//
//   ./train CONFIG.yml [key=value ...]   train (see ./train --help-config for the keys)
//   ./train prepare IN.txt OUT.bin       write a byte-level text as an llm.c token file
//   ./train --help-config                list every config key with its default
//
// 1. read the config (preset file, then overrides) and check it;
// 2. make the device (one thread here; the mesh comes in sharding/) and its allocator;
// 3. load the data, build the model (or resume from a checkpoint);
// 4. loop: fetch the step's batch, forward + backward, clip + AdamW, log;
// 5. evaluate, save, and print a sample of what the model learned.
#include "common.h"
#include "model/config.h"
#include "model/model.h"
#include "model/step.h"
#include "model/matmul.h"
#include "model/checkpoint.h"
#include "model/dump.h"
#include "model/sample.h"
#include "data/tokens.h"
#include "data/loader.h"
#include "sharding/memory.h"
#include <time.h>
#include <errno.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Fill the step's global batch: sequence i of step `step` is training window
// g = step * (A*B) + i, a pure function of (step, i) (data/loader.h).
static void fetch_batch(const DataLoader *dl, int step, int nseq, int S, int *ids, int *targets) {
    for (int i = 0; i < nseq; i++)
        loader_train_sequence(dl, (int64_t)step * nseq + i, ids + (size_t)i * S, targets + (size_t)i * S);
}

// Mean eval loss over eval_steps batches of B held-out windows.
static float evaluate(Model *m, const DataLoader *dl, int *ids, int *targets) {
    const Config *c = &m->cfg;
    int B = c->per_device_batch_size, S = c->max_target_length;
    int64_t nwin = loader_num_eval_windows(dl);
    double sum = 0;
    for (int k = 0; k < c->eval_steps; k++) {
        for (int i = 0; i < B; i++)
            loader_eval_sequence(dl, ((int64_t)k * B + i) % nwin, ids + (size_t)i * S, targets + (size_t)i * S);
        sum += eval_loss(m, ids, targets, B, S);
    }
    return (float)(sum / c->eval_steps);
}

static void write_metrics(FILE *f, int step, const StepResult *r, double ms, double tok_s, double gflops,
                          const Device *d) {
    fprintf(f, "{\"step\": %d, \"loss\": %.9g, \"ce_loss\": %.9g, \"aux_loss\": %.9g, \"lr\": %.9g, "
            "\"grad_norm\": %.9g, \"ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.3f, "
            "\"peak_bytes\": %zu, \"peak_bytes_by_tag\": {",
            step, r->loss, r->ce_loss, r->aux_loss, r->lr, r->grad_norm, ms, tok_s, gflops, d->peak_total);
    for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, "%s\"%s\": %zu", t ? ", " : "", MEM_TAG_NAMES[t], d->peak[t]);
    fprintf(f, "}}\n");
    fflush(f);
}

static int cmd_prepare(int argc, char **argv) {
    if (argc != 4) die("usage: ./train prepare IN.txt OUT.bin");
    size_t n;
    uint16_t *tok = text_read_bytes(argv[2], &n);
    tokfile_write(argv[3], tok, n);
    printf("wrote %zu tokens (byte-level, vocab 256) to %s\n", n, argv[3]);
    free(tok);
    return 0;
}

int main(int argc, char **argv) {
    blas_prefer_fast_kernels(argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: ./train CONFIG.yml [key=value ...]\n       ./train prepare IN.txt OUT.bin\n"
               "       ./train --help-config\n");
        return argc < 2;
    }
    if (!strcmp(argv[1], "--help-config")) { config_print_help(); return 0; }
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc, argv);

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
#ifdef _OPENMP
    if (c.num_threads > 0) omp_set_num_threads(c.num_threads);
#endif
    // OpenBLAS runs single-threaded: our GEMMs are small row blocks, which the caller runs
    // in parallel with OpenMP. Letting OpenBLAS start its own threads as well made every
    // step ~2.5x slower on 2 cores (measured: 525 -> 240 ms/step on mixtral-tiny).
    blas_set_threads(1);

    // 2. The device and its allocator.
    Device dev;
    device_init(&dev, 0, 0);
    mem_set_device(&dev);

    // 3. Data and model.
    int A = c.gradient_accumulation_steps, B = c.per_device_batch_size, S = c.max_target_length;
    size_t ntok;
    uint16_t *tokens = data_load(c.dataset_path, &ntok);
    data_check_vocab(tokens, ntok, c.vocab_size, c.dataset_path);
    DataLoader dl;
    loader_init(&dl, tokens, ntok, S, c.eval_fraction);
    Model m;
    model_init(&m, &c);
    char b1[32];
    printf("meshmoe: %s model, %d layers, %zu parameters (%s), %d experts top-%d, %s path\n",
           c.decoder_block, c.base_num_decoder_layers, m.nparams, mem_fmt(m.nparams * 4, b1, sizeof b1),
           c.num_experts, c.num_experts_per_tok, c.sparse_matmul ? "sparse (grouped)" : "dense");
    printf("BLAS: %s\n", blas_description());
    printf("data: %s, %zu tokens (%zu train / %zu eval), batch %d x %d x %d tokens\n", c.dataset_path, ntok,
           dl.train_end - dl.train_begin, dl.eval_end - dl.eval_begin, A, B, S);
    if (c.load_checkpoint[0]) {
        checkpoint_load(&m, c.load_checkpoint);
        printf("resumed from %s at step %d\n", c.load_checkpoint, m.step);
    }
    if (c.dump_parity[0]) { parity_dump(&m, &dl, c.dump_parity); return 0; }

    int *ids = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)A * B * S, "batch ids");
    int *targets = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)A * B * S, "batch targets");
    FILE *metrics = NULL;
    if (c.metrics_file[0] && !(metrics = fopen(c.metrics_file, m.step ? "a" : "w")))
        die("cannot open metrics_file '%s': %s", c.metrics_file, strerror(errno));

    // 4. The training loop.
    float first_eval = evaluate(&m, &dl, ids, targets);
    printf("step %5d | eval loss %.4f\n", m.step, first_eval);
    int stop = c.run_steps > 0 ? MM_MIN(c.steps, m.step + c.run_steps) : c.steps;
    while (m.step < stop) {
        int step = m.step;
        fetch_batch(&dl, step, A * B, S, ids, targets);
        mem_reset_peak(&dev);
        double flops0 = dev.flops, t0 = now_ms();
        StepResult r;
        size_t ncount = (size_t)c.base_num_decoder_layers * c.num_experts;
        long *counts = (long *)mem_alloc(MEM_TEMP, sizeof(long) * ncount, "expert counts");
        compute_gradients(&m, ids, targets, A, B, S, &r, counts, NULL, NULL);
        if (!isfinite(r.loss) || !isfinite(r.grad_norm))
            die("non-finite %s at step %d (loss %g, grad norm %g): stopped before the update, so "
                "the last checkpoint written (if any) is the last good state; lower learning_rate "
                "or check the data", isfinite(r.loss) ? "gradient" : "loss", step, r.loss, r.grad_norm);
        apply_update(&m, &r, counts, (long)A * B * S);
        mem_free(counts);
        double ms = now_ms() - t0, gflops = (dev.flops - flops0) / (ms * 1e6);
        double tok_s = (double)A * B * S / (ms / 1e3);
        if (step % c.log_period == 0 || step == c.steps - 1)
            printf("step %5d | loss %.4f | aux %.4f | lr %.2e | grad norm %.3f | %7.1f ms | %8.0f tok/s | "
                   "%6.1f GFLOP/s | peak %s\n", step, r.loss, r.aux_loss, r.lr, r.grad_norm, ms, tok_s, gflops,
                   mem_fmt(dev.peak_total, b1, sizeof b1));
        if (metrics) write_metrics(metrics, step, &r, ms, tok_s, gflops, &dev);
        if (c.eval_interval > 0 && m.step % c.eval_interval == 0 && m.step < c.steps)
            printf("step %5d | eval loss %.4f\n", m.step, evaluate(&m, &dl, ids, targets));
        if (c.save_checkpoint[0] && c.checkpoint_period > 0 && m.step % c.checkpoint_period == 0)
            checkpoint_save(&m, c.save_checkpoint);
    }

    // 5. Final eval, checkpoint, sample, memory.
    float last_eval = evaluate(&m, &dl, ids, targets);
    printf("step %5d | eval loss %.4f (first %.4f)\n", m.step, last_eval, first_eval);
    if (c.save_checkpoint[0]) {
        checkpoint_save(&m, c.save_checkpoint);
        printf("saved checkpoint %s (step %d)\n", c.save_checkpoint, m.step);
    }
    if (c.sample_length > 0) sample_print(&m, &dl, c.sample_length, c.sample_temperature);
    mem_print_report(&dev);
    if (metrics) fclose(metrics);
    mem_free(ids);
    mem_free(targets);
    model_free(&m);
    free(tokens);
    return 0;
}
