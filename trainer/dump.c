// trainer/dump.c: write everything the JAX reference needs to recompute, and everything it
// must agree with. The dump's buffers are host-side copies for the file (plain malloc),
// not device memory.
#include "trainer/dump.h"
#include "base/paths.h"
#include "trainer/step.h"
#include "data/safetensors.h"
#include "base/memory.h"
#include "core/common.h"

typedef struct {
    const Config *c;
    int B, S, P;
    int t;              // the step being captured
    float *logits;      // (A*B, S, V), step 0
    int *idx;           // (n_moe, P, A*B, S, K)
    float *w;           // (n_moe, P, A*B, S, K)
    float *scores;      // (n_moe, P, A*B, S, E)
} Capture;

// Called between forward and backward of each microbatch of every step.
static void capture(Model *m, int mb, void *ctx) {
    Capture *cp = ctx;
    const Config *c = cp->c;
    size_t T = (size_t)cp->B * cp->S, nseq_all = (size_t)c->gradient_accumulation_steps * cp->B;
    int V = c->vocab_size, K = c->num_experts_per_tok, E = c->num_experts;
    if (cp->t >= cp->P) return;   // (without snapshots, step 0's routing alone)
    if (cp->t == 0) {
        float *z = model_logits_rows(m, 0, T);   // (T,V), widened where they are 16-bit
        mem_download(cp->logits + mb * T * V, z, sizeof(float) * T * V);
        mem_free(z);
    }
    for (int l = c->first_num_dense_layers, j = 0; l < c->base_num_decoder_layers; l++, j++) {
        const MoeSaved *s = &m->acts[l].moe;
        // first token of this microbatch of step t in layer j
        size_t row = (((size_t)j * cp->P + cp->t) * nseq_all) * cp->S + mb * T;
        mem_download(cp->idx + row * K, s->top_idx, sizeof(int) * T * K);
        mem_download(cp->w + row * K, s->top_w, sizeof(float) * T * K);
        mem_download(cp->scores + row * E, s->scores, sizeof(float) * T * E);
    }
}

// The capture's host buffers for P steps of nseq sequences (its routing; the logits are step 0's).
static Capture capture_new(const Config *c, int B, int S, int P, int nseq) {
    int V = c->vocab_size, K = c->num_experts_per_tok, E = c->num_experts;
    size_t rtok = (size_t)model_num_moe_layers(c) * P * nseq * S;
    Capture cp = {c, B, S, P, 0, malloc(sizeof(float) * (size_t)nseq * S * V),
                  malloc(sizeof(int) * MM_MAX(rtok * K, 1)), malloc(sizeof(float) * MM_MAX(rtok * K, 1)),
                  malloc(sizeof(float) * MM_MAX(rtok * E, 1))};
    if (!cp.logits || !cp.idx || !cp.w || !cp.scores) die("out of host memory for the parity dump's capture");
    return cp;
}

// A host copy of n floats of device data.
static float *copy_floats(const float *src, size_t n) {
    float *d = malloc(sizeof(float) * MM_MAX(n, 1));
    if (!d) die("out of host memory for the parity dump");
    mem_download(d, src, sizeof(float) * n);
    return d;
}

// Adds every parameter (from base) under prefix; the names are kept alive in `names`.
static void add_params(StWriter *w, const Model *m, const float *base, const char *prefix, char (*names)[160]) {
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *s = &m->specs[i];
        int64_t shape[4];
        for (int d = 0; d < s->ndim; d++) shape[d] = s->shape[d];
        snprintf(names[i], 160, "%s%s", prefix, s->name);
        st_writer_add(w, names[i], ST_F32, s->ndim, shape, base + s->offset);
    }
}

// Adds every parameter of P stacked snapshots as one [P, ...] tensor each. `stack` holds
// tensor i's P snapshots contiguously from P * offset_i (see snapshot_params).
static void add_stacked_params(StWriter *w, const Model *m, const float *stack, int P, const char *prefix,
                               char (*names)[160]) {
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *s = &m->specs[i];
        int64_t shape[5] = {P};
        for (int d = 0; d < s->ndim; d++) shape[d + 1] = s->shape[d];
        snprintf(names[i], 160, "%s%s", prefix, s->name);
        st_writer_add(w, names[i], ST_F32, s->ndim + 1, shape, stack + (size_t)P * s->offset);
    }
}

static size_t spec_numel(const ParamSpec *s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    return n;
}

// Copies the current weights into snapshot t of `stack` (layout of add_stacked_params).
static void snapshot_params(const Model *m, float *stack, int P, int t) {
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *s = &m->specs[i];
        size_t n = spec_numel(s);
        mem_download(stack + (size_t)P * s->offset + (size_t)t * n, m->params_mem + s->offset, sizeof(float) * n);
    }
}

// The routing bias of every MoE layer: (E) each, or (P, E) each when P > 0 (then `bias`
// is (L, P, E)).
static void add_biases(StWriter *w, const Model *m, const float *bias, int P, const char *prefix,
                       char (*names)[160]) {
    const Config *c = &m->cfg;
    if (!bias) return;
    int E = c->num_experts;
    for (int l = c->first_num_dense_layers; l < c->base_num_decoder_layers; l++) {
        int64_t shape[2] = {P, E};
        model_bias_name(c, l, prefix, names[l], 160);
        if (P > 0) st_writer_add(w, names[l], ST_F32, 2, shape, bias + (size_t)l * P * E);
        else st_writer_add(w, names[l], ST_F32, 1, shape + 1, bias + (size_t)l * E);
    }
}

// The batches of the P steps, every sequence as the training loader gives it: ids and
// targets (P, nseq, S) each, malloc'd.
static void read_batches(const DataLoader *dl, int P, int nseq, int S, int **ids_out, int **tg_out) {
    size_t nb = (size_t)P * nseq * S;
    int *ids = malloc(sizeof(int) * nb), *tg = malloc(sizeof(int) * nb);
    if (!ids || !tg) die("out of host memory for the parity dump's batches");
    for (int t = 0; t < P; t++)
        for (int i = 0; i < nseq; i++)
            loader_train_sequence(dl, (int64_t)t * nseq + i, ids + ((size_t)t * nseq + i) * S,
                                  tg + ((size_t)t * nseq + i) * S);
    *ids_out = ids;
    *tg_out = tg;
}

// Step 0's loss, its terms and gradient norm (scal: loss, ce, aux, norm), and every step's
// loss and norm (P each). The data must stay valid until the file is written.
static void add_losses(StWriter *w, const float *scal, const float *step_losses, const float *step_gnorms, int P) {
    st_writer_add(w, "c/loss", ST_F32, 0, NULL, &scal[0]);
    st_writer_add(w, "c/ce_loss", ST_F32, 0, NULL, &scal[1]);
    st_writer_add(w, "c/aux_loss", ST_F32, 0, NULL, &scal[2]);
    st_writer_add(w, "c/grad_norm", ST_F32, 0, NULL, &scal[3]);
    int64_t pshape[1] = {P};
    st_writer_add(w, "c/step_losses", ST_F32, 1, pshape, step_losses);
    st_writer_add(w, "c/steps/loss", ST_F32, 1, pshape, step_losses);
    st_writer_add(w, "c/steps/grad_norm", ST_F32, 1, pshape, step_gnorms);
}

// The router's captured choices in every MoE layer: step 0's (c/router/) and, with snapshots,
// every step's (c/steps/router/). (st_writer_add copies the names.)
static void add_router(StWriter *w, const Capture *cp, int nseq, int snapshots) {
    const Config *c = cp->c;
    int P = cp->P, S = cp->S, K = c->num_experts_per_tok, E = c->num_experts;
    int64_t rshape[4] = {P, nseq, S, K}, sshape[4] = {P, nseq, S, E};
    char name[160];
    for (int l = c->first_num_dense_layers, j = 0; l < c->base_num_decoder_layers; l++, j++) {
        size_t row = (size_t)j * P * nseq * S;   // step 0 of layer j
        snprintf(name, sizeof name, "c/router/layers_%d/indices", l);
        st_writer_add(w, name, ST_I32, 3, rshape + 1, cp->idx + row * K);
        snprintf(name, sizeof name, "c/router/layers_%d/weights", l);
        st_writer_add(w, name, ST_F32, 3, rshape + 1, cp->w + row * K);
        snprintf(name, sizeof name, "c/router/layers_%d/scores", l);
        st_writer_add(w, name, ST_F32, 3, sshape + 1, cp->scores + row * E);
        if (!snapshots) continue;
        snprintf(name, sizeof name, "c/steps/router/layers_%d/indices", l);
        st_writer_add(w, name, ST_I32, 4, rshape, cp->idx + row * K);
        snprintf(name, sizeof name, "c/steps/router/layers_%d/scores", l);
        st_writer_add(w, name, ST_F32, 4, sshape, cp->scores + row * E);
    }
}

void parity_dump_check(const Config *c, int ndev) {
    if (ndev > 1)
        die("dump_parity runs on one device (it is the parity test's tool, not a checkpoint): drop the ici_* keys");
    if (c->num_vocab_tiling > 1)   // the dump compares the whole (B,S,V) logits, which tiling never holds
        die("the parity dump writes the logits, which num_vocab_tiling=%d never holds whole: run the dump with "
            "num_vocab_tiling=1 (tiling gives the same losses and gradients bit for bit)", c->num_vocab_tiling);
    if (c->dry_run)
        die("dump_parity writes the values of parity_steps=%d steps, and a dry run computes none: drop dry_run=true",
            c->parity_steps);
    // The dump takes its own steps and writes its own file: what a training run's keys would
    // have written or printed never is, so a key that asks for it is refused, not dropped.
    const char *keys[] = {"save_checkpoint", "metrics_file", "memory_trace"};
    const char *paths[] = {c->save_checkpoint, c->metrics_file, c->memory_trace};
    for (int i = 0; i < 3; i++)
        if (paths[i][0])
            die("%s=%s is never written with dump_parity, which runs parity_steps=%d steps of its own and writes "
                "dump.safetensors alone: drop %s (or run without dump_parity)", keys[i], paths[i], c->parity_steps, keys[i]);
    if (c->profile)
        die("profile=true prints nothing with dump_parity, which runs parity_steps=%d steps of its own: drop profile "
            "(or run without dump_parity)", c->parity_steps);
    size_t nparams;
    model_layout(c, NULL, &nparams);   // (no mesh yet: the global count, one device's)
    int nproc;
    size_t snapshots = c->parity_snapshots ? (size_t)c->parity_steps * nparams * sizeof(float) : 0;
    if (snapshots > mem_host_share(&nproc)) {
        char a[32], host[160];
        die("out of host memory for the parity dump: parity_steps=%d snapshots of %zu weights take %s, more than %s: "
            "lower parity_steps, or drop the snapshots with parity_snapshots=false", c->parity_steps, nparams,
            mem_fmt(snapshots, a, sizeof a),
            mem_host_share_text(host, sizeof host));
    }
}

void parity_dump(Model *m, const DataLoader *dl, const char *dir) {
    const Config *c = &m->cfg;
    int A = c->gradient_accumulation_steps, B = c->per_device_batch_size, S = c->max_target_length;
    int P = c->parity_steps, V = c->vocab_size, E = c->num_experts;
    int L = c->base_num_decoder_layers, nseq = A * B;
    size_t bias_n = (size_t)L * E;

    // Inputs: the weights as they are now, and the batches of the P steps.
    float *init = copy_floats(m->params_mem, m->nparams);
    float *init_bias = m->router_bias ? copy_floats(m->router_bias, bias_n) : NULL;
    int *ids, *tg;
    read_batches(dl, P, nseq, S, &ids, &tg);

    // The P steps, each with the capture hook. Before each step its weights and routing
    // bias are kept (parity_snapshots), so that the reference can recompute every step from
    // the same starting point as C (teacher forcing) as well as run its own trajectory.
    int snap = c->parity_snapshots;
    Capture cp = capture_new(c, B, S, snap ? P : 1, nseq);
    float *steps_params = snap ? malloc(sizeof(float) * (size_t)P * m->nparams) : NULL;
    float *steps_bias = snap && m->router_bias ? malloc(sizeof(float) * (size_t)P * bias_n) : NULL;
    float *grad0 = NULL, *step_losses = malloc(sizeof(float) * P), *step_gnorms = malloc(sizeof(float) * P);
    if ((snap && !steps_params) || (snap && m->router_bias && !steps_bias) || !step_losses || !step_gnorms)
        die("out of host memory for the parity dump (parity_steps=%d snapshots of %zu weights)", P, m->nparams);
    StepResult r0 = {0};
    long *counts = (long *)mem_alloc(MEM_TEMP, sizeof(long) * bias_n, "expert counts");   // and the step's batch, on the device
    int *ids_dev = (int *)mem_alloc(MEM_TEMP, sizeof(int) * (size_t)nseq * S, "parity batch ids");
    int *tg_dev = (int *)mem_alloc(MEM_TEMP, sizeof(int) * (size_t)nseq * S, "parity batch targets");
    for (int t = 0; t < P; t++) {
        StepResult r;
        if (snap) snapshot_params(m, steps_params, P, t);
        for (int l = 0; steps_bias && l < L; l++)
            mem_download(steps_bias + ((size_t)l * P + t) * E, m->router_bias + (size_t)l * E, sizeof(float) * E);
        size_t off = (size_t)t * nseq * S;
        mem_upload(ids_dev, ids + off, sizeof(int) * (size_t)nseq * S);
        mem_upload(tg_dev, tg + off, sizeof(int) * (size_t)nseq * S);
        cp.t = t;
        compute_gradients(m, ids_dev, tg_dev, A, B, S, &r, counts, capture, &cp);   // zeroes counts first
        if (!isfinite(r.loss)) die("parity dump: non-finite loss at step %d", t);
        if (t == 0) { grad0 = copy_floats(m->grads_mem, m->nparams); r0 = r; }
        step_losses[t] = r.loss;
        step_gnorms[t] = r.grad_norm;
        apply_update(m, &r, counts, (long)nseq * S);
        printf("parity step %d: loss %.9g grad norm %.6g lr %.6g\n", t, r.loss, r.grad_norm, r.lr);
    }

    // Write it all.
    StWriter *w = st_writer_new();
    static char json[16384];
    config_to_json(c, json, sizeof json);
    st_writer_meta(w, "config", json);
    char (*names)[160] = calloc((size_t)(4 * m->ntensors + 4 * L + 8), 160);
    add_params(w, m, init, "param/", names);
    add_params(w, m, grad0, "c/grad/", names + m->ntensors);
    float *final = copy_floats(m->params_mem, m->nparams);
    float *final_bias = m->router_bias ? copy_floats(m->router_bias, bias_n) : NULL;
    add_params(w, m, final, "c/final/", names + 2 * m->ntensors);
    if (snap) add_stacked_params(w, m, steps_params, P, "steps/param/", names + 3 * m->ntensors);
    add_biases(w, m, init_bias, 0, "state/", names + 4 * m->ntensors);
    add_biases(w, m, final_bias, 0, "c/final_state/", names + 4 * m->ntensors + L);
    add_biases(w, m, steps_bias, P, "steps/state/", names + 4 * m->ntensors + 2 * L);
    int64_t bshape[3] = {P, nseq, S}, lshape[3] = {nseq, S, V};
    st_writer_add(w, "batch/inputs", ST_I32, 3, bshape, ids);
    st_writer_add(w, "batch/targets", ST_I32, 3, bshape, tg);
    st_writer_add(w, "c/logits", ST_F32, 3, lshape, cp.logits);
    float scal[4] = {r0.loss, r0.ce_loss, r0.aux_loss, r0.grad_norm};
    add_losses(w, scal, step_losses, step_gnorms, P);
    add_router(w, &cp, nseq, snap);
    char path[CFG_STR + 32];
    path_join(path, sizeof path, dir, "dump.safetensors");
    output_dir_make("dump_parity", dir);   // made now, and removed again if the write fails
    st_write_file(w, path);
    st_writer_free(w);
    printf("wrote %s (%d steps, loss %.9g -> %.9g)\n", path, P, step_losses[0], step_losses[P - 1]);
    free(names); free(init); free(init_bias); free(ids); free(tg); free(grad0);
    free(step_losses); free(step_gnorms); free(steps_params); free(steps_bias); free(final); free(final_bias);
    mem_free(counts); mem_free(ids_dev); mem_free(tg_dev);
    free(cp.logits); free(cp.idx); free(cp.w); free(cp.scores);
}
