// model/model.c: parameter layout and initialisation, and the decoder stack's forward
// and backward passes for one microbatch.
//
//   x = Embed(ids)
//   for each layer:  h = x + Attention(RMSNorm_pre(x));  x = h + FFN(RMSNorm_post(h))
//   logits = RMSNorm_final(x) @ W_out;   loss = CE(logits, targets) (+ z-loss, + aux)
#include "model/model.h"
#include "model/embedding.h"
#include "model/rmsnorm.h"
#include "model/matmul.h"
#include "model/precision.h"
#include "model/loss.h"
#include "model/remat.h"
#include "model/vocab_tiling.h"
#include "base/memory.h"
#include "base/partition.h"
#include "base/tensor.h"
#include "model/tensor_parallel.h"
#include "base/context.h"
#include "model/constraint.h"
#include "kernels/kernels.h"
#include "core/common.h"
#include <stdarg.h>

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
// the key also seeds the tensor's init (model_init), so it never changes. Mixtral's paths
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
// A kernel whose input width is fan_in: truncated normal with std 1/sqrt(fan_in).
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

// Local elements [i0, i1) of tensor s into x[0 .. i1-i0) (kernels/init.h).
static void init_tensor(float *x, const ParamSpec *s, int seed, size_t i0, size_t i1) {
    kern()->init->param_init(x, i0, i1 - i0, hash_name(s->key), seed, s->init_std, s->init_const, s->truncated,
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
                init_tensor(dst, s, c->seed, a - s->offset, b - s->offset);
                continue;
            }
            // shard_variables_at_init (docs/optimizations.md#shard_variables_at_init), read here only: a sharding
            // constraint on every variable as it is created. The variable is created whole
            // (this device's tensor/expert piece of it) and the constraint copies the part
            // this device keeps into place: one whole variable (MEM_TEMP) at a time on top of
            // the state, so the init-time peak grows by the largest one. Same values.
            float *whole = mem_floats(MEM_TEMP, s->size, "variable at creation, before its sharding constraint");
            init_tensor(whole, s, c->seed, 0, s->size);
            mem_copy(dst, whole + (a - s->offset), sizeof(float) * (b - a));
            mem_free(whole);
        }
    }
    m->gathered = calloc((size_t)sh->nunits * 2, sizeof(float *));
    m->bf16_copy = calloc((size_t)sh->nunits, sizeof(float *));
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
    mem_free(m->v_mem);
    mem_free(m->router_bias);
    mem_free(m->ema);
    free(m->params.layers);
    free(m->grads.layers);
    free(m->acts);
    free(m->specs);
    if (m->hooks && m->hooks->detach) m->hooks->detach(m);
    free(m->gathered);
    free(m->bf16_copy);
    shard_free(&m->shard);
    memset(m, 0, sizeof(*m));
}

float model_lb_coef(const Config *c, int global_seqs) {
    if (c->load_balance_loss_weight <= 0.0f) return 0.0f;
    // L_lb = w * E^2 * mean_{b,e}(f*Pbar), then the mean over MoE layers.
    float E = (float)c->num_experts;
    return c->load_balance_loss_weight * E * E / ((float)global_seqs * E * (float)model_num_moe_layers(c));
}

// ---------------------------------------------------------------------------------------
// Forward and backward of one microbatch.

// Before / after unit u's weights are used (sharding/fsdp.h: all-gathered under FSDP). In
// bf16 mode the layers use a copy of the unit's master weights rounded to bf16 (cast point
// 1 of model/precision.h), made here and dropped after: the master copy, its gradient and
// the optimizer state stay float32. The gate kernel stays unrounded with float32_gate_logits.
void model_unit_acquire(Model *m, int u) {
    if (m->hooks && m->hooks->gather) m->hooks->gather(m, u);
    const Config *c = &m->cfg;
    if (!cfg_bf16(c)) return;
    const StateShard *sh = &m->shard;
    const float *w = sh->F > 1 ? m->gathered[2 * u] : m->params_mem + sh->local_off[u];
    size_t n = sh->unit_size[u];
    float *copy = mem_floats(MEM_PARAMS, n, "bf16-rounded weights of one unit (float32 storage)");
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *s = &m->specs[i];
        if (model_unit_of(c, s->name) != u) continue;
        size_t at = s->offset - sh->unit_off[u];
        mem_copy(copy + at, w + at, sizeof(float) * s->size);
        round_bf16(copy + at, s->size, !(c->float32_gate_logits && strstr(s->name, "MoeBlock_0/gate/kernel")));
    }
    model_bind_unit(m, &m->params, u, copy);
    m->bf16_copy[u] = copy;
}

void model_unit_release(Model *m, int u) {
    if (m->bf16_copy[u]) {
        mem_free(m->bf16_copy[u]);
        m->bf16_copy[u] = NULL;
        // Without FSDP the pointers go back to the master weights (FSDP rebinds at each gather).
        if (m->shard.F == 1) model_bind_unit(m, &m->params, u, m->params_mem + m->shard.local_off[u]);
    }
    if (m->hooks && m->hooks->release) m->hooks->release(m, u);
}

void model_grad_begin(Model *m, int u) {
    if (m->hooks && m->hooks->grad_begin) m->hooks->grad_begin(m, u);
}

void model_grad_end(Model *m, int u) {
    if (m->hooks && m->hooks->grad_end) m->hooks->grad_end(m, u);
}

static void unit_prefetch(Model *m, int u) {
    if (m->hooks && m->hooks->prefetch) m->hooks->prefetch(m, u);
}

static void units_drain(Model *m) {
    if (m->hooks && m->hooks->drain) m->hooks->drain(m);
}

static float *bias_of(const Model *m, int l) {
    return m->router_bias ? m->router_bias + (size_t)l * m->cfg.num_experts : NULL;
}

// The pieces of the stack, each a pure computation on weights that are already in place
// (the caller acquires and releases the units and brackets a backward piece with the
// gradient reduction), so that model_forward/model_backward below and the pipeline
// (pipeline/) share them.

// use_iota_embed + iota_embed_max_bytes (docs/optimizations.md#use_iota_embed), read here only. MaxText's
// iota embedding looks the tokens up as onehot(ids) @ table instead of a gather: on an
// accelerator a matmul can beat a gather, at the cost of a (T,V) one-hot tensor (this
// device's slice of the vocabulary), which the guard caps: above iota_embed_max_bytes the
// gather is used. Forward and backward give the gather's bits (model/embedding.c).
static int iota_embed(const Model *m, int T) {
    int64_t onehot = (int64_t)T * m->dims.vocab_size * (int64_t)sizeof(float);
    return m->cfg.use_iota_embed && onehot <= m->cfg.iota_embed_max_bytes;
}

void model_embed_forward(Model *m, float *x, const int *ids, int T) {
    int D = m->cfg.base_emb_dim, V = m->dims.vocab_size, v0 = m->dims.vocab_first;
    if (iota_embed(m, T)) embedding_forward_onehot(x, ids, m->params.embedding, T, D, V, v0);   // (T,D)
    else embedding_forward(x, ids, m->params.embedding, T, D, V, v0);
    tp_all_reduce(x, (size_t)T * D);   // vocabulary-parallel: each row comes from one device
}

void model_embed_backward(Model *m, const float *dx, const int *ids, int B, int S) {
    int D = m->cfg.base_emb_dim, V = m->dims.vocab_size, v0 = m->dims.vocab_first;
    if (iota_embed(m, B * S))
        embedding_backward_onehot(m->grads.embedding, dx, ids, B * S, D, V, v0, leaves_of(&m->cfg, B, S));
    else embedding_backward(m->grads.embedding, dx, ids, B * S, D, V, v0, leaves_of(&m->cfg, B, S));
}

// moe_reshard_io (docs/optimizations.md#moe_reshard_io), read here only. MaxText's DeepSeek MoE layer
// can reshard the block's input and output (sharding constraints between the attention
// part and the MoE block) where the layout was already right; XLA materialised each as a
// copy. On: the block reads a copy of its input and writes into a fresh output buffer that
// is then copied into the residual stream, two activation-sized (T,D) temporaries held
// across the block (MEM_TEMP), and the backward pass copies the two gradients likewise.
// Copies change no value: the same bits. Off (the default, as in MaxText's layer): none.
static int moe_reshards(const Config *c, int l) {
    return c->moe_reshard_io && cfg_is_deepseek(c) && cfg_layer_is_moe(c, l);
}
static float *reshard_copy(const float *x, size_t n, const char *name) {
    float *y = mem_floats(MEM_TEMP, n, name);
    mem_copy(y, x, sizeof(float) * n);
    return y;
}

// h (T,D) = x + (attention core and out projection) of the q, k, v in a.
static void attn_core_residual(Model *m, int l, LayerActs *a, float *h, const float *x, int B, int S) {
    const Config *c = &m->cfg;
    size_t n = (size_t)B * S * c->base_emb_dim;
    LayerParams *p = &m->params.layers[l];
    if (cfg_is_mla(c)) mla_core_forward(c, &m->dims, &p->mla, &a->mla, h, B, S);
    else attention_core_forward(c, &m->dims, &p->attn, &a->attn, h, B, S);
    kern()->sum->residual_add(h, x, n);
    round_bf16(h, n, cfg_bf16(c));   // residual (cast point 10)
}

float *model_attn_block_forward(Model *m, int l, LayerActs *a, const float *x, int B, int S) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    LayerParams *p = &m->params.layers[l];
    // h = x + Attention(RMSNorm_pre(x))
    a->n1 = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "attention norm out");
    a->rstd1 = mem_floats(MEM_ACTIVATIONS, (size_t)T, "attention norm rstd");
    // Sharding constraints (model/constraint.h): on the layer's input as the pre-norm
    // reads it, and on the norm's output as attention reads it; each a copy or nothing.
    const float *xc = constraint_apply(c, x, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: decoder layer input");
    a->scale1 = rmsnorm_forward_cfg(c, a->n1, a->rstd1, xc, p->pre_norm, T, D);
    constraint_end(xc, x);
    float *h = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "h (after attention)");
    const float *n1c = constraint_apply(c, a->n1, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: attention input");
    // Attention in its two parts: the q/k/v projections, then the core and out projection
    // (the part remat_policy=save_qkv_proj recomputes, model_attn_core_forward).
    if (cfg_is_mla(c)) mla_proj_forward(c, &m->dims, &p->mla, &a->mla, n1c, B, S);
    else attention_proj_forward(c, &m->dims, &p->attn, &a->attn, n1c, B, S);
    attn_core_residual(m, l, a, h, x, B, S);
    constraint_end(n1c, a->n1);
    return h;
}

float *model_attn_core_forward(Model *m, int l, LayerActs *a, const float *x, int B, int S) {
    float *h = mem_floats(MEM_ACTIVATIONS, (size_t)B * S * m->cfg.base_emb_dim, "h (after attention)");
    attn_core_residual(m, l, a, h, x, B, S);
    return h;
}

float *model_ffn_block_forward(Model *m, int l, LayerActs *a, const float *h, int B, int S, float lb_coef,
                               FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, bf16 = cfg_bf16(c);
    LayerParams *p = &m->params.layers[l];
    // x' = h + FFN(RMSNorm_post(h))
    a->n2 = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "ffn norm out");
    a->rstd2 = mem_floats(MEM_ACTIVATIONS, (size_t)T, "ffn norm rstd");
    // Sharding constraints: on the residual after attention as the post-norm reads it, and
    // on the norm's output as the MLP/MoE block reads it.
    const float *hc = constraint_apply(c, h, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: attention output (residual)");
    a->scale2 = rmsnorm_forward_cfg(c, a->n2, a->rstd2, hc, p->post_norm, T, D);
    constraint_end(hc, h);
    float *xn = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "x (layer input)");
    const float *n2c = constraint_apply(c, a->n2, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: mlp input");
    if (cfg_layer_is_moe(c, l)) {
        long *counts = st->expert_counts ? st->expert_counts + (size_t)l * c->num_experts : NULL;
        double *lb = st->aux_seq + (size_t)(l - c->first_num_dense_layers) * st->aux_stride;
        if (moe_reshards(c, l)) {
            size_t n = (size_t)T * D;
            float *in = reshard_copy(n2c, n, "moe block input, resharded (a copy)");
            float *out = mem_floats(MEM_TEMP, n, "moe block output, before its reshard");
            moe_forward(c, &m->dims, &p->moe, bias_of(m, l), &a->moe, out, in, B, S, lb_coef, lb, counts);
            mem_copy(xn, out, sizeof(float) * n);
            mem_free(in);
            mem_free(out);
        } else {
            moe_forward(c, &m->dims, &p->moe, bias_of(m, l), &a->moe, xn, n2c, B, S, lb_coef, lb, counts);
        }
    } else {
        mlp_forward(c, &p->mlp, &a->mlp, xn, n2c, T, D, m->dims.mlp_dim);
    }
    constraint_end(n2c, a->n2);
    kern()->sum->residual_add(xn, h, (size_t)T * D);
    round_bf16(xn, (size_t)T * D, bf16);     // residual (cast point 10)
    return xn;
}

float *model_layer_forward(Model *m, int l, LayerActs *a, float *x, int B, int S, float lb_coef, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    a->x = x;
    a->h = model_attn_block_forward(m, l, a, x, B, S);
    float *xn = model_ffn_block_forward(m, l, a, a->h, B, S, lb_coef, st);
    // What this layer's backward reads, kept as 16-bit numbers in bf16 mode.
    act_pack(c, &a->x, (size_t)T * D);
    act_pack(c, &a->n1, (size_t)T * D);
    act_pack(c, &a->h, (size_t)T * D);
    act_pack(c, &a->n2, (size_t)T * D);
    return xn;
}

void model_layer_backward(Model *m, int l, LayerActs *a, float *dx, float *dh, float *dn, int B, int S, float lb_coef) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    Leaves leaf = leaves_of(c, B, S);   // this device's tokens in the canonical tree (base/context.h)
    LayerParams *p = &m->params.layers[l], *gl = &m->grads.layers[l];
    // Everything each half of the backward reads, on the device and as floats: what the
    // remat policy offloaded is copied back, what it dropped is recomputed (model/remat.h).
    remat_restore_ffn(m, l, a, B, S, lb_coef);
    // x' = h + FFN(n2), n2 = RMSNorm_post(h):  dh = dx' + dFFN/dh
    prec_round(c, dx, (size_t)T * D);
    mem_copy(dh, dx, sizeof(float) * T * D);
    mem_zero(dn, sizeof(float) * T * D);
    if (cfg_layer_is_moe(c, l)) {
        if (moe_reshards(c, l)) {   // the reshards' transposes: copies of both gradients
            size_t n = (size_t)T * D;
            float *dout = reshard_copy(dx, n, "moe block d output, resharded (a copy)");
            float *din = mem_floats(MEM_TEMP, n, "moe block d input, before its reshard");
            moe_backward(c, &m->dims, &p->moe, &gl->moe, &a->moe, din, dout, a->n2, B, S, lb_coef);
            mem_copy(dn, din, sizeof(float) * n);   // dn was zero, as din
            mem_free(dout);
            mem_free(din);
        } else {
            moe_backward(c, &m->dims, &p->moe, &gl->moe, &a->moe, dn, dx, a->n2, B, S, lb_coef);
        }
        moe_saved_free(&a->moe);
    } else {
        mlp_backward(c, &p->mlp, &gl->mlp, &a->mlp, dn, dx, a->n2, T, D, m->dims.mlp_dim, leaf);
    }
    prec_round(c, dn, (size_t)T * D);
    // The forward's constraints transpose to constraints on the gradients at the same points
    // (model/constraint.h), each a copy or nothing: here d(mlp input), as the post-norm's
    // backward reads it.
    const float *dnc = constraint_apply(c, dn, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: d mlp input");
    rmsnorm_backward_cfg(c, dh, gl->post_norm, dnc, a->h, p->post_norm, a->scale2, a->rstd2, T, D, leaf);
    constraint_end(dnc, dn);
    prec_round(c, dh, (size_t)T * D);
    // h = x + Attention(n1), n1 = RMSNorm_pre(x):  dx = dh + dAttention/dx
    remat_restore_attn(m, l, a, B, S);
    const float *dhc = constraint_apply(c, dh, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: d attention output");
    mem_copy(dx, dhc, sizeof(float) * T * D);
    mem_zero(dn, sizeof(float) * T * D);
    if (cfg_is_mla(c)) mla_backward(c, &m->dims, &p->mla, &gl->mla, &a->mla, dn, dhc, a->n1, B, S);
    else attention_backward(c, &m->dims, &p->attn, &gl->attn, &a->attn, dn, dhc, a->n1, B, S);
    constraint_end(dhc, dh);
    prec_round(c, dn, (size_t)T * D);
    dnc = constraint_apply(c, dn, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: d attention input");
    rmsnorm_backward_cfg(c, dx, gl->pre_norm, dnc, a->x, p->pre_norm, a->scale1, a->rstd1, T, D, leaf);
    constraint_end(dnc, dn);
}

void model_layer_free(Model *m, int l, LayerActs *a) {
    if (cfg_is_mla(&m->cfg)) mla_saved_free(&a->mla);
    else attention_saved_free(&a->attn);
    if (cfg_layer_is_moe(&m->cfg, l)) moe_saved_free(&a->moe);
    else mlp_saved_free(&a->mlp);
    mem_free(a->x); mem_free(a->n1); mem_free(a->rstd1);
    mem_free(a->h); mem_free(a->n2); mem_free(a->rstd2);
    mem_free(a->scale1); mem_free(a->scale2);
    a->x = a->n1 = a->rstd1 = a->h = a->n2 = a->rstd2 = a->scale1 = a->scale2 = NULL;
}

void model_head_forward(Model *m, float *x, int T) {
    const Config *c = &m->cfg;
    int D = c->base_emb_dim, V = m->dims.vocab_size;
    // logits = RMSNorm_final(x) @ W_out
    m->xL = x;
    m->nf = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "final norm out");
    m->rstdf = mem_floats(MEM_ACTIVATIONS, (size_t)T, "final norm rstd");
    // Sharding constraint on the decoder's output as the final norm reads it.
    const float *xc = constraint_apply(c, x, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: decoder output");
    m->scalef = rmsnorm_forward_cfg(c, m->nf, m->rstdf, xc, m->params.final_norm, T, D);
    constraint_end(xc, x);
    if (vocab_tiled(c)) return;   // num_vocab_tiling: the logits come tile by tile with the loss (model/vocab_tiling.h)
    m->logits = mem_floats(MEM_ACTIVATIONS, (size_t)T * V, "logits");
    matmul_forward(m->logits, m->nf, m->params.logits, T, D, V, 0);
    round_bf16(m->logits, (size_t)T * V, cfg_bf16(c));   // cast point 16; the loss reads them as float32
}

void model_loss_forward(Model *m, const int *targets, int B, int S, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S;
    m->targets = targets;
    if (vocab_tiled(c)) vocab_tiled_loss_forward(m, targets, B, S, st);   // needs nf as floats
    // What the head's backward reads, kept as 16-bit numbers in bf16 mode.
    act_pack(c, &m->xL, (size_t)T * c->base_emb_dim);
    act_pack(c, &m->nf, (size_t)T * c->base_emb_dim);
    if (vocab_tiled(c)) return;
    m->lse = mem_floats(MEM_ACTIVATIONS, (size_t)T, "logsumexp");
    // Sharding constraint on the logits as the loss reads them ((T, V/tensor) on a device).
    int V = m->dims.vocab_size;
    const float *z = constraint_apply(c, m->logits, (size_t)T * V, &SPEC_LOGITS, "constraint copy: logits");
    st->ntok += loss_forward(m->lse, st->loss_leaf, z, targets, T, V, m->dims.vocab_first, tp_local_chunks(c),
                             c->z_loss_multiplier, leaves_of(c, B, S));
    constraint_end(z, m->logits);
}

void model_head_unpack(Model *m, int T) {
    act_unpack(&m->cfg, &m->xL, (size_t)T * m->cfg.base_emb_dim);
    act_unpack(&m->cfg, &m->nf, (size_t)T * m->cfg.base_emb_dim);
}

float *model_head_backward(Model *m, int B, int S, float scale, float **dnf_out) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, V = m->dims.vocab_size, v0 = m->dims.vocab_first;
    Leaves leaf = leaves_of(c, B, S);   // this device's tokens in the canonical tree (base/context.h)
    float *dnf;
    if (vocab_tiled(c)) {
        dnf = vocab_tiled_head_backward(m, B, S, scale);   // the same, tile by tile (model/vocab_tiling.h)
    } else {
        loss_backward(m->logits, m->lse, m->targets, T, V, v0, c->z_loss_multiplier, scale);  // logits := dlogits
        // bf16: where the forward rounded a value, its gradient is rounded too (as autodiff
        // transposes a cast); here and at each such point in the layers' backward.
        prec_round(c, m->logits, (size_t)T * V);
        dnf = mem_floats(MEM_TEMP, (size_t)T * D, "d final norm out");
        // The logits' constraint transposed: one on d logits (model/constraint.h).
        const float *dlc = constraint_apply(c, m->logits, (size_t)T * V, &SPEC_LOGITS, "constraint copy: d logits");
        matmul_backward(NULL, m->grads.logits, dlc, m->nf, m->params.logits, T, D, V, leaf);
        tp_colpar_dinp(c, dnf, dlc, m->params.logits, T, D, V);   // a sum over the vocabulary
        constraint_end(dlc, m->logits);
    }
    prec_round(c, dnf, (size_t)T * D);
    float *dx = mem_floats(MEM_TEMP, (size_t)T * D, "d x");
    rmsnorm_backward_cfg(c, dx, m->grads.final_norm, dnf, m->xL, m->params.final_norm, m->scalef, m->rstdf, T, D, leaf);
    *dnf_out = dnf;
    return dx;
}

void model_head_free(Model *m) {
    mem_free(m->xL); mem_free(m->nf); mem_free(m->rstdf); mem_free(m->logits); mem_free(m->lse); mem_free(m->scalef);
    m->xL = m->nf = m->rstdf = m->logits = m->lse = m->scalef = NULL;
}

// scan_layers (docs/optimizations.md#scan_layers), read here only. MaxText scans its decoder layers by
// default (true): one compiled layer body run L times, whose temporaries every layer reuses,
// as the loops below do when each layer frees its own before the next begins. Unrolled
// (false), each layer is separate code and XLA gives each its own temporaries: a set per
// layer. Within one layer buffers are reused as in the scanned body; across layers they are
// not. So each layer's forward (with what remat keeps or drops) and each layer's backward
// (with its recomputation) measures its set, the high-water of its temporaries above what
// was live when it began, and leaves a buffer of that size allocated until the step's
// backward pass ends: the temp peak grows by about one forward set and one backward set per
// layer. Same arithmetic, same bits.
static size_t layer_temps_begin(const Model *m) {
    if (m->cfg.scan_layers) return 0;
    mem_temp_hw_reset();
    return mem_temp_live();
}

static void layer_temps_end(const Model *m, size_t base, const char *name) {
    if (m->cfg.scan_layers) return;
    size_t set = mem_temp_hw() - base;
    if (set) mem_hold(mem_alloc(MEM_TEMP, set, name));   // freed by mem_release_held
}

void model_forward(Model *m, const int *ids, const int *targets, int B, int S, float lb_coef, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, L = c->base_num_decoder_layers;
    m->B = B; m->S = S; m->ids = ids; m->targets = targets;

    // Units (sharding/fsdp.h): 0 the embedding, 1+l layer l, L+1 the head. Under FSDP each
    // is all-gathered just before use and freed right after.
    mem_phase("forward embedding");   // phases name the moments of the memory timeline (report/plan.h)
    float *x = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "x (layer input)");
    // overlap_collectives (sharding/overlap.h): while a unit computes, the next one is
    // gathered on a helper thread.
    model_unit_acquire(m, 0);
    unit_prefetch(m, 1);
    model_embed_forward(m, x, ids, T);
    model_unit_release(m, 0);
    for (int l = 0; l < L; l++) {
        mem_phase("forward layer %d", l);
        size_t base = layer_temps_begin(m);
        model_unit_acquire(m, 1 + l);
        unit_prefetch(m, 2 + l);   // the next layer's unit, or the head's
        x = model_layer_forward(m, l, &m->acts[l], x, B, S, lb_coef, st);
        model_unit_release(m, 1 + l);
        remat_after_forward(m, l, &m->acts[l]);   // what the backward will recompute or fetch (model/remat.h)
        layer_temps_end(m, base, "a layer's forward temporaries (scan_layers=false)");
    }
    mem_phase("forward head and loss");
    model_unit_acquire(m, L + 1);
    model_head_forward(m, x, T);
    model_unit_release(m, L + 1);
    units_drain(m);   // (nothing is left in flight: each prefetch was taken)
    model_loss_forward(m, targets, B, S, st);
}

void model_backward(Model *m, float scale, float lb_coef) {
    const Config *c = &m->cfg;
    int B = m->B, S = m->S, T = B * S, D = c->base_emb_dim;
    int L = c->base_num_decoder_layers;

    // Loss and output head.
    mem_phase("backward head and loss");
    model_head_unpack(m, T);
    model_unit_acquire(m, L + 1);
    unit_prefetch(m, L);   // the backward walks the units down: the last layer's next
    model_grad_begin(m, L + 1);
    float *dnf;
    float *dx = model_head_backward(m, B, S, scale, &dnf);
    model_grad_end(m, L + 1);
    model_unit_release(m, L + 1);
    float *dh = mem_floats(MEM_TEMP, (size_t)T * D, "d h");
    float *dn = dnf;   // reused: gradient of a norm's output
    for (int l = L - 1; l >= 0; l--) {
        mem_phase("backward layer %d", l);
        size_t base = layer_temps_begin(m);
        remat_block_inputs(m, l, B, S, lb_coef);   // remat_nested_block: the block's layer inputs
        model_unit_acquire(m, 1 + l);
        if (l > 0) unit_prefetch(m, l);   // layer l-1's unit (the embedding's backward needs no weights)
        model_grad_begin(m, 1 + l);
        model_layer_backward(m, l, &m->acts[l], dx, dh, dn, B, S, lb_coef);
        model_grad_end(m, 1 + l);
        model_unit_release(m, 1 + l);
        model_layer_free(m, l, &m->acts[l]);   // done with: the layers below need only their own
        layer_temps_end(m, base, "a layer's backward temporaries (scan_layers=false)");
    }
    mem_phase("backward embedding");
    units_drain(m);
    model_grad_begin(m, 0);
    model_embed_backward(m, dx, m->ids, B, S);
    model_grad_end(m, 0);
    mem_free(dnf); mem_free(dx); mem_free(dh);
    model_head_free(m);
    mem_release_held();   // scan_layers=false: every layer's temporaries, kept until now
}

void model_discard(Model *m) {
    for (int l = 0; l < m->cfg.base_num_decoder_layers; l++) model_layer_free(m, l, &m->acts[l]);
    model_head_free(m);
    mem_release_held();
}
