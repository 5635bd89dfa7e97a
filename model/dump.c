// model/dump.c: write everything the JAX reference needs to recompute, and everything it
// must agree with. The dump's buffers are host-side copies for the file (plain malloc),
// not device memory.
#include "model/dump.h"
#include "model/step.h"
#include "data/safetensors.h"
#include "sharding/memory.h"
#include "common.h"
#include <sys/stat.h>
#include <errno.h>

typedef struct {
    const Config *c;
    int B, S;
    float *logits;      // (A*B, S, V)
    int *idx;           // (n_moe, A*B, S, K)
    float *w;           // (n_moe, A*B, S, K)
    float *scores;      // (n_moe, A*B, S, E)
} Capture;

// Called between forward and backward of each microbatch of step 0.
static void capture(Model *m, int mb, void *ctx) {
    Capture *cp = ctx;
    const Config *c = cp->c;
    size_t T = (size_t)cp->B * cp->S, nseq_all = (size_t)c->gradient_accumulation_steps * cp->B;
    int V = c->vocab_size, K = c->num_experts_per_tok, E = c->num_experts;
    memcpy(cp->logits + mb * T * V, m->logits, sizeof(float) * T * V);
    for (int l = c->first_num_dense_layers, j = 0; l < c->base_num_decoder_layers; l++, j++) {
        const MoeSaved *s = &m->acts[l].moe;
        size_t row = (size_t)j * nseq_all * cp->S + mb * T;   // first token of this microbatch in layer j
        memcpy(cp->idx + row * K, s->top_idx, sizeof(int) * T * K);
        memcpy(cp->w + row * K, s->top_w, sizeof(float) * T * K);
        memcpy(cp->scores + row * E, s->scores, sizeof(float) * T * E);
    }
}

static float *copy_floats(const float *src, size_t n) {
    float *d = malloc(sizeof(float) * MM_MAX(n, 1));
    if (!d) die("out of host memory for the parity dump");
    memcpy(d, src, sizeof(float) * n);
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

static void add_biases(StWriter *w, const Model *m, const float *bias, const char *prefix, char (*names)[160]) {
    const Config *c = &m->cfg;
    if (!bias) return;
    for (int l = c->first_num_dense_layers; l < c->base_num_decoder_layers; l++) {
        int64_t shape[1] = {c->num_experts};
        model_bias_name(c, l, prefix, names[l], 160);
        st_writer_add(w, names[l], ST_F32, 1, shape, bias + (size_t)l * c->num_experts);
    }
}

void parity_dump(Model *m, const DataLoader *dl, const char *dir) {
    const Config *c = &m->cfg;
    int A = c->gradient_accumulation_steps, B = c->per_device_batch_size, S = c->max_target_length;
    int P = c->parity_steps, V = c->vocab_size, K = c->num_experts_per_tok, E = c->num_experts;
    int L = c->base_num_decoder_layers, nmoe = model_num_moe_layers(c), nseq = A * B;
    if (c->num_vocab_tiling > 1)   // the dump compares the whole (B,S,V) logits, which tiling never holds
        die("the parity dump writes the logits, which num_vocab_tiling=%d never holds whole: run the dump with "
            "num_vocab_tiling=1 (tiling gives the same losses and gradients bit for bit)", c->num_vocab_tiling);
    if (mkdir(dir, 0777) && errno != EEXIST) die("cannot create dump directory '%s': %s", dir, strerror(errno));
    size_t nb = (size_t)P * nseq * S, bias_n = (size_t)L * E;

    // Inputs: the weights as they are now, and the batches of the P steps.
    float *init = copy_floats(m->params_mem, m->nparams);
    float *init_bias = m->router_bias ? copy_floats(m->router_bias, bias_n) : NULL;
    int *ids = malloc(sizeof(int) * nb), *tg = malloc(sizeof(int) * nb);
    for (int t = 0; t < P; t++)
        for (int i = 0; i < nseq; i++)
            loader_train_sequence(dl, (int64_t)t * nseq + i, ids + ((size_t)t * nseq + i) * S,
                                  tg + ((size_t)t * nseq + i) * S);

    // Step 0 with the capture hook, then the remaining steps.
    Capture cp = {c, B, S, malloc(sizeof(float) * (size_t)nseq * S * V),
                  malloc(sizeof(int) * MM_MAX((size_t)nmoe * nseq * S * K, 1)),
                  malloc(sizeof(float) * MM_MAX((size_t)nmoe * nseq * S * K, 1)),
                  malloc(sizeof(float) * MM_MAX((size_t)nmoe * nseq * S * E, 1))};
    float *grad0 = NULL, *step_losses = malloc(sizeof(float) * P);
    StepResult r0 = {0};
    long *counts = calloc(bias_n, sizeof(long));
    for (int t = 0; t < P; t++) {
        StepResult r;
        memset(counts, 0, sizeof(long) * bias_n);
        size_t off = (size_t)t * nseq * S;
        compute_gradients(m, ids + off, tg + off, A, B, S, &r, counts, t == 0 ? capture : NULL, &cp);
        if (!isfinite(r.loss)) die("parity dump: non-finite loss at step %d", t);
        if (t == 0) { grad0 = copy_floats(m->grads_mem, m->nparams); r0 = r; }
        step_losses[t] = r.loss;
        apply_update(m, &r, counts, (long)nseq * S);
        printf("parity step %d: loss %.9g grad norm %.6g lr %.6g\n", t, r.loss, r.grad_norm, r.lr);
    }

    // Write it all.
    StWriter *w = st_writer_new();
    static char json[16384];
    config_to_json(c, json, sizeof json);
    st_writer_meta(w, "config", json);
    char (*names)[160] = calloc((size_t)(3 * m->ntensors + 3 * L + 8), 160);
    add_params(w, m, init, "param/", names);
    add_params(w, m, grad0, "c/grad/", names + m->ntensors);
    add_params(w, m, m->params_mem, "c/final/", names + 2 * m->ntensors);
    add_biases(w, m, init_bias, "state/", names + 3 * m->ntensors);
    add_biases(w, m, m->router_bias, "c/final_state/", names + 3 * m->ntensors + L);
    int64_t bshape[3] = {P, nseq, S}, lshape[3] = {nseq, S, V}, rshape[3] = {nseq, S, K}, sshape[3] = {nseq, S, E};
    st_writer_add(w, "batch/inputs", ST_I32, 3, bshape, ids);
    st_writer_add(w, "batch/targets", ST_I32, 3, bshape, tg);
    st_writer_add(w, "c/logits", ST_F32, 3, lshape, cp.logits);
    float scal[4] = {r0.loss, r0.ce_loss, r0.aux_loss, r0.grad_norm};
    st_writer_add(w, "c/loss", ST_F32, 0, NULL, &scal[0]);
    st_writer_add(w, "c/ce_loss", ST_F32, 0, NULL, &scal[1]);
    st_writer_add(w, "c/aux_loss", ST_F32, 0, NULL, &scal[2]);
    st_writer_add(w, "c/grad_norm", ST_F32, 0, NULL, &scal[3]);
    int64_t pshape[1] = {P};
    st_writer_add(w, "c/step_losses", ST_F32, 1, pshape, step_losses);
    char (*rnames)[160] = calloc((size_t)3 * L + 1, 160);
    for (int l = c->first_num_dense_layers, j = 0; l < L; l++, j++) {
        size_t row = (size_t)j * nseq * S;
        snprintf(rnames[3 * l], 160, "c/router/layers_%d/indices", l);
        snprintf(rnames[3 * l + 1], 160, "c/router/layers_%d/weights", l);
        snprintf(rnames[3 * l + 2], 160, "c/router/layers_%d/scores", l);
        st_writer_add(w, rnames[3 * l], ST_I32, 3, rshape, cp.idx + row * K);
        st_writer_add(w, rnames[3 * l + 1], ST_F32, 3, rshape, cp.w + row * K);
        st_writer_add(w, rnames[3 * l + 2], ST_F32, 3, sshape, cp.scores + row * E);
    }
    char path[CFG_STR + 32];
    snprintf(path, sizeof path, "%s/dump.safetensors", dir);
    st_write_file(w, path);
    st_writer_free(w);
    printf("wrote %s (%d steps, loss %.9g -> %.9g)\n", path, P, step_losses[0], step_losses[P - 1]);
    free(names); free(rnames); free(init); free(init_bias); free(ids); free(tg); free(grad0);
    free(step_losses); free(counts); free(cp.logits); free(cp.idx); free(cp.w); free(cp.scores);
}
