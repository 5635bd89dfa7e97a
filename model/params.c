// model/params.c: the parameter layout, MaxText's names and the initialisation. Every
// trained tensor in one fixed order (walk_layout, the only place that knows it), with its
// global shape, logical axes and init; a Params struct bound to a flat buffer of that
// layout; the weights drawn from global coordinates, so any mesh starts from the same
// values; where the gradients go. model/model.c runs the stack over these tensors.
#include "model/model.h"           // Model, ParamSpec, Params; this file's functions
#include "base/memory.h"           // mem_floats: params and grads, tagged
#include "base/partition.h"        // partition_spec: logical axes -> mesh axes, each device's piece
#include "base/tensor.h"           // tp_check, tp_size, tp_rank: the tensor axis cuts heads and widths
#include "kernels/kernels.h"       // kern()->init->param_init: one element from (seed, name, index)
#include "core/common.h"           // die, MM_MAX/MM_MIN
#include <stdarg.h>                // take's name format

// ---------------------------------------------------------------------------------------
// Layout: every trained tensor, in one fixed order. This walk is the only place that
// knows the order; it both records the specs and binds a Params struct to a flat buffer.

typedef struct {
    ParamSpec *specs;   // where to record (may be NULL)
    int n;              // tensors so far
    size_t off;         // floats so far (of this device's local layout)
    float *base;        // flat buffer to bind pointers into (may be NULL)
    size_t lo;          // base holds the floats from offset lo of the layout on
    const Mesh *mesh;   // the mesh whose tensor/expert axes cut the shapes (NULL: none)
    int dev;            // this device
    const Config *cfg;  // the model (its family names the layers)
} Walk;

// MaxText's unscanned parameter paths. The layout below names every tensor by a key of one
// form for both families, "decoder/layers_<l>/<rest>" with l counted over the whole stack;
// the key also seeds the tensor's init (init_tensor), so it never changes. Mixtral's paths
// are the keys. DeepSeek's decoder names its dense and MoE layers apart, each counted from
// 0, and puts the MoE block inside DeepSeekMoeBlock_0:
//   decoder/dense_layers_<l>/...                                    l < first_num_dense_layers
//   decoder/moe_layers_<l - first>/DeepSeekMoeBlock_0/{MoeBlock_0,shared_experts}/...
static void layer_path(const Config *c, int l, char *buf, size_t cap) {
    if (!cfg_is_deepseek(c)) snprintf(buf, cap, "decoder/layers_%d", l);
    else if (l < c->first_num_dense_layers) snprintf(buf, cap, "decoder/dense_layers_%d", l);
    else snprintf(buf, cap, "decoder/moe_layers_%d", l - c->first_num_dense_layers);
}

void model_maxtext_name(const Config *c, const char *key, char *name, size_t cap) {
    int l, n = 0;
    if (sscanf(key, "decoder/layers_%d/%n", &l, &n) != 1 || n == 0) {   // embedding, final norm, head
        snprintf(name, cap, "%s", key);
        return;
    }
    const char *rest = key + n;
    char path[64];
    layer_path(c, l, path, sizeof path);
    int in_moe = !strncmp(rest, "MoeBlock_0/", 11) || !strncmp(rest, "shared_experts/", 15);
    snprintf(name, cap, "%s/%s%s", path, cfg_is_deepseek(c) && in_moe ? "DeepSeekMoeBlock_0/" : "", rest);
}

void model_bias_name(const Config *c, int l, const char *prefix, char *buf, size_t cap) {
    char key[96], name[128];
    snprintf(key, sizeof key, "decoder/layers_%d/MoeBlock_0/gate/bias", l);
    model_maxtext_name(c, key, name, sizeof name);
    snprintf(buf, cap, "%s%s", prefix, name);
}

// One tensor: its global shape, the logical name of each dimension (base/partition.h),
// its init, its name. Records the spec with this device's local shape (the global one cut
// along the tensor and expert axes) and returns where the tensor lives in `base`.
static float *take(Walk *w, float std, float cst, int ndim, const int *shape, const char *const *logical,
                   const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static float *take(Walk *w, float std, float cst, int ndim, const int *shape, const char *const *logical,
                   const char *fmt, ...) {
    char key[112], name[112];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    model_maxtext_name(w->cfg, key, name, sizeof name);
    PartSpec part = partition_spec(w->mesh, ndim, logical);
    int local[PART_MAX_DIMS];
    size_t size = 1;
    for (int i = 0; i < ndim; i++) {
        int pieces = w->mesh ? partition_local_pieces(w->mesh, &part, i) : 1;
        if (shape[i] % pieces)
            die("%s: its dimension %d ('%s', size %d) is split over %d devices, which does not divide it; "
                "choose a mesh whose tensor/expert sizes divide it", name, i, logical[i], shape[i], pieces);
        local[i] = shape[i] / pieces;
        size *= (size_t)local[i];
    }
    if (w->specs) {
        ParamSpec *s = &w->specs[w->n];
        memset(s, 0, sizeof(*s));
        snprintf(s->name, sizeof s->name, "%s", name);
        snprintf(s->key, sizeof s->key, "%s", key);
        s->ndim = ndim;
        s->part = part;
        for (int i = 0; i < ndim; i++) {
            s->gshape[i] = shape[i];
            s->shape[i] = local[i];
            s->lindex[i] = w->mesh ? partition_local_index(w->mesh, w->dev, &part, i) : 0;
            s->logical[i] = logical[i];
        }
        s->offset = w->off;
        s->size = size;
        s->init_std = std;
        s->init_const = cst;
        s->truncated = 1;
    }
    float *ptr = w->base && w->off >= w->lo ? w->base + (w->off - w->lo) : NULL;
    w->n++;
    w->off += size;
    return ptr;
}

#define SHAPE(...) (int[]){__VA_ARGS__}
#define AXES(...) (const char *const[]){__VA_ARGS__}
// A kernel whose input width is fan_in: truncated normal with std 1/sqrt(fan_in) (init_tensor).
#define KERNEL(w, fan_in, axes, name_fmt, ndim, ...) \
    take(w, 1.0f / sqrtf((float)(fan_in)), 0.0f, ndim, SHAPE(__VA_ARGS__), axes, name_fmt, l)
#define SCALE(w, n, name_fmt) take(w, 0.0f, 1.0f, 1, SHAPE(n), AXES("norm"), name_fmt, l)

static void swiglu_layout(Walk *w, MlpParams *p, int l, int D, int F, const char *prefix) {
    char f0[96], f1[96], f2[96];
    snprintf(f0, sizeof f0, "decoder/layers_%%d/%s/wi_0/kernel", prefix);
    snprintf(f1, sizeof f1, "decoder/layers_%%d/%s/wi_1/kernel", prefix);
    snprintf(f2, sizeof f2, "decoder/layers_%%d/%s/wo/kernel", prefix);
    #pragma GCC diagnostic push
    #pragma GCC diagnostic ignored "-Wformat-nonliteral"
    p->wi_0 = KERNEL(w, D, AXES("embed", "mlp"), f0, 2, D, F);
    p->wi_1 = KERNEL(w, D, AXES("embed", "mlp"), f1, 2, D, F);
    p->wo = KERNEL(w, F, AXES("mlp", "embed"), f2, 2, F, D);
    #pragma GCC diagnostic pop
}

// The whole layout, with MaxText's names and logical axes. Sharded dimensions:
// heads and MLP widths (dense, shared and expert) and the vocabulary over `tensor`
// (Megatron: column-parallel in, row-parallel out), experts over `expert`.
static void walk_layout(const Config *c, Walk *w, Params *p) {
    int D = c->base_emb_dim, V = c->vocab_size, N = c->base_num_query_heads;
    int L = c->base_num_decoder_layers, E = c->num_experts, H = cfg_expert_dim(c);
    int l = 0;   // used by the name formats below
    p->embedding = take(w, 1.0f, 0.0f, 2, SHAPE(V, D), AXES("vocab", "embed"), "token_embedder/embedding");
    w->specs ? (void)(w->specs[w->n - 1].truncated = 0) : (void)0;   // plain normal(0,1)
    for (l = 0; l < L; l++) {
        LayerParams *lp = &p->layers[l];
        memset(lp, 0, sizeof(*lp));
        lp->pre_norm = SCALE(w, D, "decoder/layers_%d/pre_self_attention_layer_norm/scale");
        if (!cfg_is_mla(c)) {
            int Nkv = c->base_num_kv_heads, Dh = c->head_dim;
            // MaxText folds attention's 1/sqrt(Dh) into the query kernel's init.
            lp->attn.wq = take(w, 1.0f / sqrtf((float)D) / sqrtf((float)Dh), 0.0f, 3, SHAPE(D, N, Dh),
                               AXES("embed", "q_heads", "kv"), "decoder/layers_%d/self_attention/query/kernel", l);
            lp->attn.wk = KERNEL(w, D, AXES("embed", "kv_heads", "kv_head_dim"),
                                 "decoder/layers_%d/self_attention/key/kernel", 3, D, Nkv, Dh);
            lp->attn.wv = KERNEL(w, D, AXES("embed", "kv_heads", "kv_head_dim"),
                                 "decoder/layers_%d/self_attention/value/kernel", 3, D, Nkv, Dh);
            lp->attn.wo = KERNEL(w, N * Dh, AXES("heads", "kv", "embed"),
                                 "decoder/layers_%d/self_attention/out/kernel", 3, N, Dh, D);
        } else {
            int Qk = c->qk_nope_head_dim + c->qk_rope_head_dim, R = c->kv_lora_rank, Q = c->q_lora_rank;
            MLAParams *a = &lp->mla;
            if (Q > 0) {
                a->wq_a = KERNEL(w, D, AXES("embed", "q_lora"), "decoder/layers_%d/self_attention/wq_a/kernel", 2, D, Q);
                a->q_norm = SCALE(w, Q, "decoder/layers_%d/self_attention/q_norm/scale");
                a->wq_b = KERNEL(w, Q, AXES("q_lora", "q_heads", "kv"), "decoder/layers_%d/self_attention/wq_b/kernel",
                                 3, Q, N, Qk);
            } else {
                a->wq = KERNEL(w, D, AXES("embed", "q_heads", "kv"), "decoder/layers_%d/self_attention/query/kernel",
                               3, D, N, Qk);
            }
            a->wkv_a = KERNEL(w, D, AXES("embed", "kv_lora"), "decoder/layers_%d/self_attention/wkv_a/kernel",
                              2, D, R + c->qk_rope_head_dim);
            a->kv_norm = SCALE(w, R, "decoder/layers_%d/self_attention/kv_norm/scale");
            a->wkv_b = KERNEL(w, R, AXES("kv_lora", "kv_heads", "kv_head_dim"),
                              "decoder/layers_%d/self_attention/wkv_b/kernel", 3, R, N, c->qk_nope_head_dim + c->v_head_dim);
            a->wo = KERNEL(w, N * c->v_head_dim, AXES("heads", "kv", "embed"), "decoder/layers_%d/self_attention/out/kernel",
                           3, N, c->v_head_dim, D);
        }
        lp->post_norm = SCALE(w, D, "decoder/layers_%d/post_self_attention_layer_norm/scale");
        if (!cfg_layer_is_moe(c, l)) {
            swiglu_layout(w, &lp->mlp, l, D, c->base_mlp_dim, "mlp");
        } else {
            MoeParams *mp = &lp->moe;
            mp->gate = KERNEL(w, D, AXES("embed", "kv"), "decoder/layers_%d/MoeBlock_0/gate/kernel", 2, D, E);
            mp->wi_0 = KERNEL(w, D, AXES("exp", "embed_no_exp", "mlp"), "decoder/layers_%d/MoeBlock_0/wi_0", 3, E, D, H);
            mp->wi_1 = KERNEL(w, D, AXES("exp", "embed_no_exp", "mlp"), "decoder/layers_%d/MoeBlock_0/wi_1", 3, E, D, H);
            mp->wo = KERNEL(w, H, AXES("exp", "mlp", "embed_no_exp"), "decoder/layers_%d/MoeBlock_0/wo", 3, E, H, D);
            if (c->shared_experts > 0)
                swiglu_layout(w, &mp->shared, l, D, c->shared_experts * H, "shared_experts");
        }
    }
    p->final_norm = take(w, 0.0f, 1.0f, 1, SHAPE(D), AXES("norm"), "decoder/decoder_norm/scale");
    p->logits = take(w, 1.0f / sqrtf((float)D), 0.0f, 2, SHAPE(D, V), AXES("embed", "vocab"), "decoder/logits_dense/kernel");
}

int model_layout(const Config *c, ParamSpec *specs, size_t *nparams) {
    Walk w = {specs, 0, 0, NULL, 0, mesh_current(), mesh_device_id(), c};
    Params p;
    LayerParams *layers = calloc((size_t)c->base_num_decoder_layers, sizeof(LayerParams));
    p.layers = layers;
    walk_layout(c, &w, &p);
    free(layers);
    if (nparams) *nparams = w.off;
    return w.n;
}

void model_check_mesh(const Config *c, const Mesh *mesh) {
    const Mesh *was = mesh_current();
    int was_dev = mesh_device_id();
    mesh_set_current(mesh, 0);   // device 0's cuts: every device's pieces have the same sizes
    tp_check(c, tp_size());
    model_layout(c, NULL, NULL);   // dies naming the tensor a mesh axis does not divide
    mesh_set_current(was, was_dev);
}

void model_bind(const Model *m, Params *p, float *base) {
    Walk w = {NULL, 0, 0, base, 0, mesh_current(), mesh_device_id(), &m->cfg};
    walk_layout(&m->cfg, &w, p);
}

int model_unit_of(const Config *c, const char *name) {
    int l;
    if (!strncmp(name, "token_embedder/", 15)) return 0;
    if (sscanf(name, "decoder/layers_%d/", &l) == 1) return 1 + l;
    if (sscanf(name, "decoder/dense_layers_%d/", &l) == 1) return 1 + l;
    if (sscanf(name, "decoder/moe_layers_%d/", &l) == 1) return 1 + c->first_num_dense_layers + l;
    return c->base_num_decoder_layers + 1;   // decoder_norm and logits_dense: the head
}

void model_bind_unit(const Model *m, Params *p, int u, float *buf) {
    const Config *c = &m->cfg;
    int L = c->base_num_decoder_layers;
    Params tmp;
    LayerParams *layers = calloc((size_t)L, sizeof(LayerParams));
    tmp.layers = layers;
    Walk w = {NULL, 0, 0, buf, m->shard.unit_off[u], mesh_current(), mesh_device_id(), c};
    walk_layout(c, &w, &tmp);
    if (u == 0) p->embedding = tmp.embedding;
    else if (u <= L) p->layers[u - 1] = tmp.layers[u - 1];
    else { p->final_norm = tmp.final_norm; p->logits = tmp.logits; }
    free(layers);
}

int model_num_moe_layers(const Config *c) {
    return c->base_num_decoder_layers - c->first_num_dense_layers;
}

// ---------------------------------------------------------------------------------------
// Initialisation from global coordinates: element i of tensor `name` is a function of
// (seed, name, i) only, so every device of any mesh draws the same value for it.

static uint64_t hash_name(const char *s) {   // FNV-1a
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

size_t model_global_index(const ParamSpec *s, size_t i) {
    return global_index(s->shape, s->lindex, s->gshape, s->ndim, i);
}

// A standard normal cut at +-2 (and drawn again beyond) has this standard deviation; the
// draws are divided by it so that a truncated tensor's spread is its init_std, as JAX's
// variance_scaling(1.0, "fan_in", "truncated_normal") makes MaxText's kernels.
#define TRUNCATED_NORMAL_STD 0.87962566103423978

// Local elements [i0, i1) of tensor s into x[0 .. i1-i0) (kernels/init.h).
static void init_tensor(float *x, const ParamSpec *s, int seed, size_t i0, size_t i1) {
    float std = s->truncated ? (float)(s->init_std / TRUNCATED_NORMAL_STD) : s->init_std;
    kern()->init->param_init(x, i0, i1 - i0, hash_name(s->key), seed, std, s->init_const, s->truncated,
                             s->shape, s->lindex, s->gshape, s->ndim);
}

void model_init_layout(Model *m, const Config *c) {
    memset(m, 0, sizeof(*m));
    m->cfg = *c;
    tp_check(c, tp_size());
    m->ntensors = model_layout(c, NULL, NULL);
    m->specs = calloc((size_t)m->ntensors, sizeof(ParamSpec));
    model_layout(c, m->specs, &m->nparams);   // dies naming the tensor a mesh axis does not divide
    // Tensor parallelism: this device's heads and widths, and its slice of the vocabulary.
    m->dims = local_dims(c, tp_size(), tp_rank());
    // This device's share of the state (sharding/fsdp.h): everything on one device.
    int *unit = malloc(sizeof(int) * (size_t)m->ntensors);
    size_t *off = malloc(sizeof(size_t) * (size_t)m->ntensors), *size = malloc(sizeof(size_t) * (size_t)m->ntensors);
    for (int i = 0; i < m->ntensors; i++) {
        unit[i] = model_unit_of(c, m->specs[i].name);
        off[i] = m->specs[i].offset;
        size[i] = m->specs[i].size;
    }
    shard_init(&m->shard, c, unit, off, size, m->ntensors);
    const StateShard *sh = &m->shard;
    m->params_mem = mem_floats(MEM_PARAMS, sh->local_n, "params");
    m->grads_mem = mem_floats(MEM_GRADS, sh->local_n, "grads");
    free(unit); free(off); free(size);
}

void model_init_weights(Model *m) {
    const Config *c = &m->cfg;
    const StateShard *sh = &m->shard;
    int L = c->base_num_decoder_layers;
    m->params.layers = calloc((size_t)L, sizeof(LayerParams));
    m->grads.layers = calloc((size_t)L, sizeof(LayerParams));
    m->acts = calloc((size_t)L, sizeof(LayerActs));
    // Each weight element is drawn from its global coordinates, so a shard holds exactly
    // the values the same elements have on one device.
    for (int u = 0; u < sh->nunits; u++) {
        size_t g0 = shard_first(sh, u), g1 = g0 + shard_len(sh, u);
        for (int i = 0; i < m->ntensors; i++) {
            const ParamSpec *s = &m->specs[i];
            size_t a = MM_MAX(g0, s->offset), b = MM_MIN(g1, s->offset + s->size);
            if (model_unit_of(c, s->name) != u || a >= b) continue;
            float *dst = m->params_mem + sh->local_off[u] + (a - g0);
            if (!c->shard_variables_at_init) {
                init_tensor(dst, s, c->init_weights_seed, a - s->offset, b - s->offset);
                continue;
            }
            // shard_variables_at_init (docs/optimizations.md#shard_variables_at_init), read here only: a sharding
            // constraint on every variable as it is created. The variable is created whole
            // (this device's tensor/expert piece of it) and the constraint copies the part
            // this device keeps into place: one whole variable (MEM_TEMP) at a time on top of
            // the state, so the init-time peak grows by the largest one. Same values.
            float *whole = mem_floats(MEM_TEMP, s->size, "variable at creation, before its sharding constraint");
            init_tensor(whole, s, c->init_weights_seed, 0, s->size);
            mem_copy(dst, whole + (a - s->offset), sizeof(float) * (b - a));
            mem_free(whole);
        }
    }
    m->gathered = calloc((size_t)sh->nunits * 2, sizeof(float *));
    m->bf16_copy = calloc((size_t)sh->nunits, sizeof(float *));
    m->copy16 = calloc((size_t)sh->nunits, sizeof(uint16_t *));
    m->copy16_step = -1;
    if (sh->F == 1)   // whole units on this device: bind once (FSDP binds at each gather)
        for (int u = 0; u < sh->nunits; u++)
            if (sh->here[u]) model_bind_unit(m, &m->params, u, m->params_mem + sh->local_off[u]);
    model_set_grad_target(m, m->grads_mem);
    if (c->routed_bias)   // starts at zero; changed only by the aux-loss-free update
        m->router_bias = mem_floats(MEM_PARAMS, (size_t)L * c->num_experts, "router bias");
}

static void set_grad_target(Model *m, float *buf, int partial) {
    const StateShard *s = &m->shard;
    m->grad_dst = buf;
    m->grad_partial = partial;
    if (s->F == 1)   // whole units here: the backward pass writes straight into buf
        for (int u = 0; u < s->nunits; u++)
            if (s->here[u]) model_bind_unit(m, &m->grads, u, buf + s->local_off[u]);
}
void model_set_grad_target(Model *m, float *buf) { set_grad_target(m, buf, 0); }
void model_set_grad_partial(Model *m, float *buf) { set_grad_target(m, buf, 1); }

void model_free(Model *m) {
    mem_free(m->params_mem);
    mem_free(m->grads_mem);
    mem_free(m->m_mem);
    mem_free(m->m16_mem);
    mem_free(m->v_mem);
    mem_free(m->router_bias);
    mem_free(m->ema);
    mem_free(m->copy16_kept);
    free(m->params.layers);
    free(m->grads.layers);
    free(m->acts);
    free(m->specs);
    if (m->hooks && m->hooks->detach) m->hooks->detach(m);
    free(m->gathered);
    free(m->bf16_copy);
    free(m->copy16);
    shard_free(&m->shard);
    memset(m, 0, sizeof(*m));
}

