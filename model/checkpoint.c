// model/checkpoint.c: checkpoint save and load.
#include "model/checkpoint.h"
#include "data/safetensors.h"
#include "common.h"
#include <errno.h>
#include <limits.h>

// Names of the gate bias of layer l ("decoder/layers_<l>/MoeBlock_0/gate/bias").
static void bias_name(char *buf, size_t cap, const char *prefix, int l) {
    snprintf(buf, cap, "%sdecoder/layers_%d/MoeBlock_0/gate/bias", prefix, l);
}

void checkpoint_save(const Model *m, const char *path) {
    const Config *c = &m->cfg;
    StWriter *w = st_writer_new();
    static char json[16384];
    config_to_json(c, json, sizeof json);
    st_writer_meta(w, "config", json);
    char step[32];
    snprintf(step, sizeof step, "%d", m->step);
    st_writer_meta(w, "step", step);
    st_writer_meta(w, "format", "meshmoe checkpoint 1");
    // Names must outlive the writer until st_write_file: keep them in one block.
    int nnames = 3 * m->ntensors + c->base_num_decoder_layers;
    char (*names)[160] = calloc((size_t)nnames, sizeof *names);
    int k = 0;
    const char *prefix[3] = {"params/", "opt_state/mu/", "opt_state/nu/"};
    const float *base[3] = {m->params_mem, m->m_mem, m->v_mem};
    for (int which = 0; which < 3; which++)
        for (int i = 0; i < m->ntensors; i++) {
            const ParamSpec *s = &m->specs[i];
            int64_t shape[4];
            for (int d = 0; d < s->ndim; d++) shape[d] = s->shape[d];
            snprintf(names[k], sizeof names[k], "%s%s", prefix[which], s->name);
            st_writer_add(w, names[k++], ST_F32, s->ndim, shape, base[which] + s->offset);
        }
    if (m->router_bias)
        for (int l = c->first_num_dense_layers; l < c->base_num_decoder_layers; l++) {
            int64_t shape[1] = {c->num_experts};
            bias_name(names[k], sizeof names[k], "state/", l);
            st_writer_add(w, names[k++], ST_F32, 1, shape, m->router_bias + (size_t)l * c->num_experts);
        }
    st_write_file(w, path);
    st_writer_free(w);
    free(names);
}

// Copies tensor `name` of f into dst after checking its dtype and shape.
static void restore(const StFile *f, const char *path, const char *name, float *dst, int ndim, const int *shape) {
    const StTensor *t = st_get(f, name);
    if (!t) die("checkpoint '%s' has no tensor '%s': it was written for another config "
                "(compare its config metadata with this run's)", path, name);
    int same = t->dtype == ST_F32 && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char want[64] = "", got[64] = "";
        for (int d = 0; d < ndim; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", d ? "," : "", shape[d]);
        for (int d = 0; d < t->ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->shape[d]);
        die("checkpoint '%s' was written for another config: tensor '%s' has shape [%s], this "
            "config needs [%s]", path, name, got, want);
    }
    memcpy(dst, t->data, t->nbytes);
}

void checkpoint_load(Model *m, const char *path) {
    char err[512];
    StFile *f = st_open_try(path, err, sizeof err);
    if (!f) die("cannot load checkpoint: %s", err);
    const char *step = st_meta(f, "step");
    if (!step || !st_meta(f, "config"))
        die("'%s' is a safetensors file but not a meshmoe checkpoint (no step/config metadata)", path);
    const char *prefix[3] = {"params/", "opt_state/mu/", "opt_state/nu/"};
    float *base[3] = {m->params_mem, m->m_mem, m->v_mem};
    char name[160];
    for (int which = 0; which < 3; which++)
        for (int i = 0; i < m->ntensors; i++) {
            const ParamSpec *s = &m->specs[i];
            snprintf(name, sizeof name, "%s%s", prefix[which], s->name);
            restore(f, path, name, base[which] + s->offset, s->ndim, s->shape);
        }
    // Every tensor of the file must be one this model has: an extra one means another config.
    int expected = 3 * m->ntensors + (m->router_bias ? model_num_moe_layers(&m->cfg) : 0);
    if (st_count(f) != expected)
        die("checkpoint '%s' was written for another config: it holds %d tensors, this config has %d",
            path, st_count(f), expected);
    if (m->router_bias)
        for (int l = m->cfg.first_num_dense_layers; l < m->cfg.base_num_decoder_layers; l++) {
            bias_name(name, sizeof name, "state/", l);
            restore(f, path, name, m->router_bias + (size_t)l * m->cfg.num_experts, 1, &m->cfg.num_experts);
        }
    // The step is trusted with nothing: a whole number, from 0 to this run's steps.
    char *end;
    errno = 0;
    long at = strtol(step, &end, 10);
    if (!*step || *end || errno || at < 0 || at > INT_MAX) {
        char shown[48];
        snprintf(shown, sizeof shown, "%s", step);
        st_close(f);
        die("checkpoint '%s': its step metadata '%s' is not a step number (a whole number >= 0)", path, shown);
    }
    if (at > m->cfg.steps) {
        st_close(f);
        die("checkpoint '%s' is at step %ld, past this run's steps=%d: nothing is left to train (raise steps)", path,
            at, m->cfg.steps);
    }
    m->step = (int)at;
    st_close(f);
}
