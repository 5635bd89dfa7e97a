// trainer/checkpoint.c: checkpoints of global tensors, written and read from any mesh (see
// checkpoint.h). A device holds, of each tensor of the file, the elements of its flat
// shard (FSDP cuts each unit into equal shards, padded; ZeRO-1 cuts the moments' shard
// again into data pieces), of its tensor/expert piece, on its pipeline stage. Mapping a
// held element to the global tensor goes through its local coordinates
// (model_global_index); a run of elements consecutive in both is copied at once.
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_meta.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "optim/offload.h"     // ema_restart
#include "data/safetensors.h"
#include "base/collectives.h"
#include "base/net.h"
#include "kernels/bf16.h"
#include "core/common.h"
#include <errno.h>
#include <math.h>
#include <limits.h>

// What a tensor of the file holds.
typedef enum { E_PARAMS, E_MU, E_NU, E_V, E_V_ROW, E_V_COL, E_BIAS } EntryKind;

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[4];   // global
    EntryKind kind;
    int spec;           // the layout's tensor it belongs to
    int layer;          // E_BIAS: the MoE layer
    size_t off, n;      // floats: where it starts in the host image of the file, and how many
} Entry;

static const char *const PREFIX[] = {"params/", "opt_state/mu/", "opt_state/nu/", "opt_state/v/",
                                     "opt_state/v_row/", "opt_state/v_col/", "state/"};

// Entry k of the file: tensor `name` under the kind's prefix, of the given global shape
// without dimension `drop` (-1: none). out NULL: only counted.
static int add_entry(Entry *out, int k, EntryKind kind, int spec, const char *name, int ndim, const int *shape,
                     int drop) {
    if (!out) return k + 1;
    Entry *e = &out[k];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->spec = spec;
    snprintf(e->name, sizeof e->name, "%s%s", PREFIX[kind], name);
    e->n = 1;
    for (int d = 0; d < ndim; d++)
        if (d != drop) { e->shape[e->ndim++] = shape[d]; e->n *= (size_t)shape[d]; }
    e->off = k ? out[k - 1].off + out[k - 1].n : 0;
    return k + 1;
}

// Whether muon orthogonalizes tensor s (optim/muon.h), so that it keeps no nu.
static int muon_is_matrix(const ParamSpec *s) {
    int nbatch, nred;
    return muon_matrix_dims(s->name, s->ndim, &nbatch, &nred);
}

// The file's tensors for config c and its layout, in file order (out NULL: only counted).
// Names come from the layout (model/params.c); the routing bias of a MoE layer from
// model/params.c:model_bias_name, under "state/".
static int file_entries(const Config *c, const ParamSpec *specs, int n, Entry *out) {
    int k = 0, adamw = c->opt_type == OPT_ADAMW || c->opt_type == OPT_ADAM_PAX;
    int adafactor = c->opt_type == OPT_ADAFACTOR, muon = c->opt_type == OPT_MUON;
    for (int kind = E_PARAMS; kind <= E_NU; kind++)
        for (int i = 0; i < n && (kind == E_PARAMS || adamw || muon); i++)
            if (kind != E_NU || !muon || !muon_is_matrix(&specs[i]))   // muon: nu only for its AdamW tensors
                k = add_entry(out, k, (EntryKind)kind, i, specs[i].name, specs[i].ndim, specs[i].gshape, -1);
    for (int i = 0; adafactor && i < n; i++) {
        const ParamSpec *s = &specs[i];
        int drow, dcol;
        if (!adafactor_factored_dims(s->gshape, s->ndim, &drow, &dcol)) {
            k = add_entry(out, k, E_V, i, s->name, s->ndim, s->gshape, -1);
            continue;
        }
        k = add_entry(out, k, E_V_ROW, i, s->name, s->ndim, s->gshape, dcol);   // a mean over the columns: one per row
        k = add_entry(out, k, E_V_COL, i, s->name, s->ndim, s->gshape, drow);
    }
    for (int l = c->first_num_dense_layers; c->routed_bias && l < c->base_num_decoder_layers; l++) {
        char name[160];
        model_bias_name(c, l, "", name, sizeof name);
        k = add_entry(out, k, E_BIAS, -1, name, 1, &c->num_experts, -1);
        if (out) out[k - 1].layer = l;
    }
    return k;
}

static Entry *entries_of(const Config *c, const ParamSpec *specs, int n, int *count) {
    *count = file_entries(c, specs, n, NULL);
    Entry *e = calloc((size_t)*count, sizeof(Entry));
    if (!e) die("out of host memory");
    file_entries(c, specs, n, e);
    return e;
}

// ---------------------------------------------------------------------------------------
// Which elements a device holds.

// The part of tensor i this device holds in a flat buffer laid out like its shard cut into
// Z pieces, piece zr (Z = 1: the whole shard, as params; ZeRO-1's moments: the data rank's
// piece): local elements [*a, *b) of the tensor, the first at buffer offset *at.
static int held(const Model *m, int i, int Z, int zr, size_t *a, size_t *b, size_t *at) {
    const StateShard *sh = &m->shard;
    const ParamSpec *s = &m->specs[i];
    int u = model_unit_of(&m->cfg, s->name);
    size_t piece = shard_len(sh, u) / (size_t)Z, p0 = shard_first(sh, u) + (size_t)zr * piece;
    size_t lo = MM_MAX(p0, s->offset), hi = MM_MIN(p0 + piece, s->offset + s->size);
    if (lo >= hi) return 0;
    *a = lo - s->offset;
    *b = hi - s->offset;
    *at = sh->local_off[u] / (size_t)Z + (lo - p0);
    return 1;
}

// Calls fn on every run of local elements [a, b) of tensor s whose global indices are
// consecutive: fn(ctx, global index, local element, count).
typedef void (*RunFn)(void *ctx, size_t g, size_t li, size_t n);
static void each_run(const ParamSpec *s, size_t a, size_t b, RunFn fn, void *ctx) {
    int cut = 0;
    for (int d = 0; d < s->ndim; d++) cut |= s->shape[d] != s->gshape[d];
    if (!cut) { fn(ctx, a, a, b - a); return; }   // the whole tensor here: local = global
    for (size_t li = a; li < b;) {
        size_t g = model_global_index(s, li), n = 1;
        while (li + n < b && model_global_index(s, li + n) == g + n) n++;
        fn(ctx, g, li, n);
        li += n;
    }
}

// The buffer an entry's elements live in on this device (buf16 in place of buf: AdamW's
// first moment as bf16 bits, mu_dtype=bfloat16, which the file holds as float32, exactly),
// its ZeRO-1 pieces, and the mesh axes its pieces are split over (for choosing the one
// device that writes each element).
typedef struct {
    float *buf;
    uint16_t *buf16;
    int Z, zr;
    unsigned split;
} Place;

static Place place_of(const Model *m, const Entry *e) {
    const ParamSpec *s = &m->specs[e->spec];
    Place p = {m->params_mem, NULL, 1, 0, 0};
    int drow = -1, dcol = -1;
    if (e->kind == E_V_ROW || e->kind == E_V_COL) adafactor_factored_dims(s->gshape, s->ndim, &drow, &dcol);
    for (int d = 0; d < s->ndim; d++)   // a factored mean is whole along its rows and columns
        if (d != drow && d != dcol) p.split |= s->part.axes[d];
    if (e->kind == E_MU || e->kind == E_NU) {
        p.buf = e->kind == E_MU ? m->m_mem : m->v_mem;
        if (e->kind == E_MU) p.buf16 = m->m16_mem;
        p.Z = m->shard.Z;
        p.zr = m->shard.zrank;
        if (p.Z > 1) p.split |= AXIS_BIT(AX_DATA);
    }
    if (e->kind == E_V || e->kind == E_V_ROW || e->kind == E_V_COL) {
        p.buf = m->v_mem;
        if (m->shard.Z > 1) p.split |= AXIS_BIT(AX_DATA);   // ZeRO-1: each replica holds its piece's state
    }
    return p;
}

// Where element j of a factored mean in the file (optax's layout: the tensor's dims without
// `drop`, in order) lies in the device's block (leading index major, dim `keep` last and
// whole; the leading dims only the device's piece of them, optim/adafactor.h), or SIZE_MAX
// where j's leading indices are another piece's.
static size_t factored_pos(const ParamSpec *s, int drop, int keep, size_t j) {
    size_t coord[4] = {0};
    for (int d = s->ndim - 1; d >= 0; d--) {
        if (d == drop) continue;
        coord[d] = j % (size_t)s->gshape[d];
        j /= (size_t)s->gshape[d];
    }
    size_t lead = 0;
    for (int d = 0; d < s->ndim; d++) {
        if (d == drop || d == keep) continue;
        size_t lo = (size_t)s->lindex[d] * (size_t)s->shape[d];
        if (coord[d] < lo || coord[d] >= lo + (size_t)s->shape[d]) return SIZE_MAX;
        lead = lead * (size_t)s->shape[d] + (coord[d] - lo);
    }
    return lead * (size_t)s->gshape[keep] + coord[keep];
}

// A factored entry's block on this device (NULL if it holds none of the tensor), its floats
// (*n) and its drop/keep dims; *first: whether the device holds the first element of its piece.
static float *factored_block(const Model *m, const Entry *e, size_t *n, int *drop, int *keep, int *first) {
    AdafactorSlot sl;
    if (!adafactor_slot(m, e->spec, &sl)) return NULL;
    *first = sl.k0 == 0;
    *drop = e->kind == E_V_ROW ? sl.dcol : sl.drow;
    *keep = e->kind == E_V_ROW ? sl.drow : sl.dcol;
    *n = sl.lead * (e->kind == E_V_ROW ? sl.R : sl.C);
    return m->v_mem + sl.off + (e->kind == E_V_COL ? sl.lead * sl.R : 0);
}

// ---------------------------------------------------------------------------------------
// Saving.

typedef struct { float *dst; const float *src; const uint16_t *src16; size_t a; } PutCtx;
static void put_run(void *ctx, size_t g, size_t li, size_t n) {
    PutCtx *p = (PutCtx *)ctx;
    if (!p->src16) { mem_download(p->dst + g, p->src + (li - p->a), sizeof(float) * n); return; }
    uint16_t *bits = mem_host_copy(p->src16 + (li - p->a), sizeof(uint16_t) * n);
    for (size_t j = 0; j < n; j++) p->dst[g + j] = bf16_float(bits[j]);
    free(bits);
}

// This device's elements of entry e into dst (the entry's place in the image), if it holds
// their first copy.
static void put_entry(const Model *m, const Entry *e, float *dst) {
    const Mesh *mesh = mesh_current();
    int dev = mesh ? mesh_device_id() : 0;
    if (e->kind == E_BIAS) {
        if (dev == 0) mem_download(dst, m->router_bias + (size_t)e->layer * m->cfg.num_experts, sizeof(float) * e->n);
        return;
    }
    const ParamSpec *s = &m->specs[e->spec];
    Place p = place_of(m, e);
    if (!shard_first_copy(mesh, dev, p.split)) return;
    if (e->kind == E_V_ROW || e->kind == E_V_COL) {   // on every device holding part of the piece
        int drop, keep, first;
        size_t n;
        const float *block = factored_block(m, e, &n, &drop, &keep, &first);
        if (!block || !first) return;
        float *mine = mem_host_copy(block, sizeof(float) * n);   // the piece's means, reordered
        for (size_t j = 0; j < e->n; j++) {
            size_t at = factored_pos(s, drop, keep, j);
            if (at != SIZE_MAX) dst[j] = mine[at];
        }
        free(mine);
        return;
    }
    size_t a, b, at;
    if (e->kind == E_V) {   // one mean per element held, in the order of the parameters' elements
        AdafactorSlot sl;
        if (!adafactor_slot(m, e->spec, &sl)) return;
        PutCtx ctx = {dst, p.buf + sl.off, NULL, sl.k0};
        each_run(s, sl.k0, sl.k1, put_run, &ctx);
        return;
    }
    if (e->kind == E_NU && m->cfg.opt_type == OPT_MUON) {   // muon's AdamW nu: one per element held, packed
        if (!muon_nu_slot(m, e->spec, &at, &a, &b)) return;
        PutCtx ctx = {dst, p.buf + at, NULL, a};
        each_run(s, a, b, put_run, &ctx);
        return;
    }
    if (!held(m, e->spec, p.Z, p.zr, &a, &b, &at)) return;
    PutCtx ctx = {dst, p.buf16 ? NULL : p.buf + at, p.buf16 ? p.buf16 + at : NULL, a};
    each_run(s, a, b, put_run, &ctx);
}

// The host image of the file's tensors: made by the first device of each process, filled by
// every device between two barriers of the whole mesh, written by device 0. (The device
// threads share the process's host memory; the barriers order the writes before the file
// is written.) Over several processes each process's image holds its devices' elements
// over zeros, and process 0 gets their bitwise OR (base/net.h): every element is written by
// exactly one device, so the joined image is the one-process image, bit for bit.
static float *image;

// The run's data (checkpoint_set_dataset), for the "dataset" metadata.
static int dataset_known;
static size_t dataset_ntok;
static uint64_t dataset_hash;
void checkpoint_set_dataset(size_t ntok, uint64_t hash) { dataset_known = 1, dataset_ntok = ntok, dataset_hash = hash; }

// The loaded checkpoint's step, config and "dataset" metadata (checkpoint_check): a save at
// that step holds the very state the file held, the weights of that run, its schedule and
// its data, and writes them so; this run's config and data (an eval of other text, a
// schedule its no-step check let pass) would pass for the run that made them.
static int loaded_step = -1;
static char *loaded_config, *loaded_dataset;

static void remember_loaded(const StFile *f, int step) {
    free(loaded_config);
    free(loaded_dataset);
    loaded_step = step;
    loaded_config = strdup(st_meta(f, "config"));
    loaded_dataset = st_meta(f, "dataset") ? strdup(st_meta(f, "dataset")) : NULL;
    if (!loaded_config || (st_meta(f, "dataset") && !loaded_dataset)) die("out of host memory");
}

int checkpoint_saves_loaded(int step) { return loaded_config && step == loaded_step; }

void checkpoint_save(const Model *m, const char *path) {
    const Mesh *mesh = mesh_current();
    int dev = mesh ? mesh_device_id() : 0;
    int first_here = !mesh || dev == mesh_device_of(mesh, mesh->process, 0);
    Group *all = mesh && mesh->ndev > 1 ? mesh_group(mesh, dev, MESH_ALL_AXES) : NULL;
    int ne;
    Entry *e = entries_of(&m->cfg, m->specs, m->ntensors, &ne);
    size_t total = ne ? e[ne - 1].off + e[ne - 1].n : 0;
    if (first_here && !(image = calloc(total ? total : 1, sizeof(float))))
        die("save_checkpoint %s: out of host memory for %zu bytes", path, total * sizeof(float));
    if (all) coll_barrier(all);
    for (int k = 0; k < ne; k++) put_entry(m, &e[k], image + e[k].off);
    if (all) coll_barrier(all);
    if (first_here && mesh && mesh->nprocess > 1) {
        net_current()->join(image, total);
        if (dev != 0) { free(image); image = NULL; }
    }
    if (dev == 0) {
        StWriter *w = st_writer_new();
        char *json = malloc(65536), step[32];
        if (!json) die("out of host memory");
        checkpoint_config_json(&m->cfg, json, 65536);
        int as_loaded = checkpoint_saves_loaded(m->step);
        st_writer_meta(w, "config", as_loaded ? loaded_config : json);
        snprintf(step, sizeof step, "%d", m->step);
        st_writer_meta(w, "step", step);
        st_writer_meta(w, "format", CHECKPOINT_FORMAT);
        if (as_loaded) {
            if (loaded_dataset) st_writer_meta(w, "dataset", loaded_dataset);
        } else if (dataset_known) {
            char data[64];
            snprintf(data, sizeof data, "%zu %016llx", dataset_ntok, (unsigned long long)dataset_hash);
            st_writer_meta(w, "dataset", data);
        }
        for (int k = 0; k < ne; k++) st_writer_add(w, e[k].name, ST_F32, e[k].ndim, e[k].shape, image + e[k].off);
        st_write_file(w, path);
        st_writer_free(w);
        free(json);
        free(image);
        image = NULL;
    }
    free(e);
}

// ---------------------------------------------------------------------------------------
// Checking (before the devices start) and loading (on every device).

void checkpoint_check_meta(const StFile *f, const char *who, const char *path) {
    const char *format = st_meta(f, "format");
    if (!st_meta(f, "step") || !st_meta(f, "config") || !format)
        die("%s %s: a safetensors file but not a meshmoe checkpoint (no format/step/config metadata)", who, path);
    if (strcmp(format, CHECKPOINT_FORMAT))
        die("%s %s: metadata 'format' is '%.64s', not '%s' (written by another version of meshmoe?)", who, path,
            format, CHECKPOINT_FORMAT);
}

static StFile *open_checkpoint(const char *who, const char *path) {
    char err[512];
    StFile *f = st_open_header_try(path, err, sizeof err);
    if (!f) die("%s: %s", who, err);
    checkpoint_check_meta(f, who, path);
    return f;
}

// Tensor e of this run in f, as float32 with its global shape; else dies naming it.
static void check_entry(const StFile *f, const Entry *e, const char *who, const char *path) {
    const StTensor *t = st_get(f, e->name);
    if (!t) die("%s %s: no tensor '%s'", who, path, e->name);
    int same = t->dtype == ST_F32 && t->ndim == e->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == e->shape[d];
    if (same) return;
    char want[64] = "", got[64] = "";
    for (int d = 0; d < e->ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)e->shape[d]);
    for (int d = 0; d < t->ndim; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->shape[d]);
    die("%s %s: tensor '%s' is %s [%s], this run needs F32 [%s]", who, path, e->name, st_dtype_name(t->dtype), got,
        want);
}

// The file's tensors for config c (its layout made here, without a mesh).
static Entry *run_entries(const Config *c, int *count) {
    int n = model_layout(c, NULL, NULL);
    ParamSpec *specs = calloc((size_t)n, sizeof(ParamSpec));
    if (!specs) die("out of host memory");
    model_layout(c, specs, NULL);
    Entry *e = entries_of(c, specs, n, count);
    free(specs);
    return e;
}

void checkpoint_check(const Config *c, const char *path) {
    StFile *f = open_checkpoint("load_checkpoint", path);
    int step = checkpoint_parse_step(st_meta(f, "step"), path);
    Config ck;
    config_defaults(&ck);
    char where[CFG_STR + 64];
    snprintf(where, sizeof where, "load_checkpoint %s: metadata 'config'", path);
    config_from_json(&ck, st_meta(f, "config"), where);
    // (first: a steps that is too small also changes the schedule's length, the next check's)
    if (step > c->steps)
        die("load_checkpoint %s: step %d is past this run's steps (%d): steps is the whole run's length, the "
            "checkpoint's steps included, not the steps to add", path, step, c->steps);
    checkpoint_check_config(&ck, c, path, step);
    remember_loaded(f, step);
    // (with the "dataset" metadata, the tokens are compared once loaded: checkpoint_check_dataset;
    // a run that takes no step, to evaluate and sample, may read any data)
    if (!st_meta(f, "dataset") && step < c->steps && strcmp(ck.dataset_path, c->dataset_path))
        die("load_checkpoint %s: dataset_path is %s in the checkpoint, %s in this run (a key that changes the math must "
            "keep the checkpoint's value; the mesh and the switches that keep the bits may differ)", path,
            ck.dataset_path, c->dataset_path);
    // The global layout (no mesh here): every tensor of this model, with its global shape.
    int ne;
    Entry *e = run_entries(c, &ne);
    for (int k = 0; k < ne; k++) check_entry(f, &e[k], "load_checkpoint", path);
    for (int i = 0; st_count(f) != ne && i < st_count(f); i++) {   // one the run has no use for
        const char *name = st_tensor(f, i)->name;
        int known = 0;
        for (int k = 0; k < ne && !known; k++) known = !strcmp(e[k].name, name);
        if (!known) die("load_checkpoint %s: tensor '%s' is not one of this run's (opt_type=%s)", path, name, opt_type_name(c->opt_type));
    }
    free(e);
    st_close(f);
}

// The "dataset" metadata: "COUNT HEX", as checkpoint_save writes it.
static void parse_dataset(const char *value, const char *path, unsigned long long *ntok, unsigned long long *hash) {
    int used = 0;
    if (sscanf(value, "%llu %llx%n", ntok, hash, &used) != 2 || value[used] != '\0' || value[0] == '-')
        die("load_checkpoint %s: metadata 'dataset' is '%.64s', not a token count and a hexadecimal hash", path, value);
}

void checkpoint_check_dataset(const Config *c, const char *path, size_t ntok, uint64_t hash) {
    StFile *f = open_checkpoint("load_checkpoint", path);
    const char *value = st_meta(f, "dataset");
    unsigned long long n, h;
    if (value) parse_dataset(value, path, &n, &h);
    if (value && (n != ntok || h != hash)) {
        Config ck;
        config_defaults(&ck);
        config_from_json(&ck, st_meta(f, "config"), path);
        // A run that takes no step (steps at the checkpoint's) evaluates and samples the
        // weights: on any data, said.
        if (checkpoint_parse_step(st_meta(f, "step"), path) >= c->steps) {
            if (!net_current() || net_current()->process == 0)   // (said once over processes)
                printf("load_checkpoint %s: no step to take: the eval and the sample read dataset_path '%s' (%zu "
                       "tokens), not the %llu tokens it was trained on (dataset_path '%s' then)\n", path,
                       c->dataset_path, ntok, n, ck.dataset_path);
        } else
            die("load_checkpoint %s: trained on %llu tokens (hash %016llx, dataset_path '%s' then), but dataset_path "
                "'%s' holds %zu tokens (hash %016llx): a resume reads the same tokens, to take the batches the whole "
                "run would have (a run with steps at the checkpoint's step takes none, and may evaluate other data)",
                path, n, h, ck.dataset_path, c->dataset_path, ntok, (unsigned long long)hash);
    }
    st_close(f);
}

// What load_parameters_path reads of a checkpoint: the weights and the routing biases.
static int is_weight(const Entry *e) { return e->kind == E_PARAMS || e->kind == E_BIAS; }
static int named_as(const char *name, EntryKind kind) { return !strncmp(name, PREFIX[kind], strlen(PREFIX[kind])); }

void checkpoint_check_params(const Config *c, const char *path) {
    const char *who = "load_parameters_path";
    StFile *f = open_checkpoint(who, path);
    int ne;
    Entry *e = run_entries(c, &ne);
    for (int k = 0; k < ne; k++)
        if (is_weight(&e[k])) check_entry(f, &e[k], who, path);
    for (int i = 0; i < st_count(f); i++) {   // a weight this model has no use for: the file holds another model
        const char *name = st_tensor(f, i)->name;
        if (!named_as(name, E_PARAMS) && !named_as(name, E_BIAS)) continue;   // (the optimizer's state, which is left)
        int known = 0;
        for (int k = 0; k < ne && !known; k++) known = is_weight(&e[k]) && !strcmp(e[k].name, name);
        if (!known)
            die("%s %s: tensor '%s' is not one of this model's (%s)", who, path, name,
                named_as(name, E_BIAS) ? "a model's with routed_bias; this run has routed_bias=false"
                                       : "a checkpoint of another model");
    }
    free(e);
    st_close(f);
}

void checkpoint_check_finite(const float *x, size_t n, const char *what, const char *name, size_t g0) {
    for (size_t j = 0; j < n; j++)
        if (!isfinite(x[j]))
            die("%s: tensor '%s' holds %g at element %zu: a checkpoint holds finite values only, so the file was "
                "damaged after it was saved", what, name, (double)x[j], g0 + j);
}

// nbytes of float32 tensor t from byte_off on into device memory dst: read into a host buffer
// and copied to the device, in pieces of at most 4 MiB (no host copy of a whole shard).
#define READ_PIECE ((size_t)4 << 20)
static void read_to_device(const StFile *f, const StTensor *t, size_t byte_off, void *dst, size_t nbytes,
                           const char *what) {
    float *host = malloc(MM_MIN(nbytes, READ_PIECE) + 1);
    if (!host) die("load_checkpoint: out of host memory for a read buffer");
    for (size_t done = 0; done < nbytes;) {
        size_t n = MM_MIN(nbytes - done, READ_PIECE);
        st_read_at(f, t, byte_off + done, host, n);
        checkpoint_check_finite(host, n / sizeof(float), what, t->name, (byte_off + done) / sizeof(float));
        mem_upload((char *)dst + done, host, n);
        done += n;
    }
    free(host);
}

// n floats of tensor t from element g on, rounded to bf16 bits (nearest even) into device
// memory dst, in pieces as read_to_device's.
static void read_to_device16(const StFile *f, const StTensor *t, size_t g, uint16_t *dst, size_t n, const char *what) {
    size_t piece = READ_PIECE / sizeof(float);
    float *host = malloc(sizeof(float) * MM_MIN(n, piece) + 1);
    uint16_t *bits = malloc(sizeof(uint16_t) * MM_MIN(n, piece) + 1);
    if (!host || !bits) die("load_checkpoint: out of host memory for a read buffer");
    for (size_t done = 0; done < n;) {
        size_t k = MM_MIN(n - done, piece);
        st_read_at(f, t, sizeof(float) * (g + done), host, sizeof(float) * k);
        checkpoint_check_finite(host, k, what, t->name, g + done);
        for (size_t j = 0; j < k; j++) bits[j] = bf16_bits(host[j]);
        mem_upload(dst + done, bits, sizeof(uint16_t) * k);
        done += k;
    }
    free(host);
    free(bits);
}

typedef struct { const StFile *f; const StTensor *t; float *dst; uint16_t *dst16; size_t a; const char *what; } GetCtx;
static void get_run(void *ctx, size_t g, size_t li, size_t n) {
    GetCtx *p = (GetCtx *)ctx;
    if (p->dst16) read_to_device16(p->f, p->t, g, p->dst16 + (li - p->a), n, p->what);
    else read_to_device(p->f, p->t, sizeof(float) * g, p->dst + (li - p->a), sizeof(float) * n, p->what);
}

// This device's elements of entry e from the file (what: the key and the file, for messages).
static void get_entry(Model *m, const StFile *f, const Entry *e, const char *what) {
    const StTensor *t = st_get(f, e->name);
    if (e->kind == E_BIAS) {
        read_to_device(f, t, 0, m->router_bias + (size_t)e->layer * m->cfg.num_experts, sizeof(float) * e->n, what);
        return;
    }
    const ParamSpec *s = &m->specs[e->spec];
    Place p = place_of(m, e);
    if (e->kind == E_V_ROW || e->kind == E_V_COL) {
        int drop, keep, first;
        size_t n;
        float *block = factored_block(m, e, &n, &drop, &keep, &first);
        if (!block) return;
        float *whole = malloc(sizeof(float) * e->n);
        if (!whole) die("out of host memory");
        float *placed = malloc(sizeof(float) * n);
        if (!placed) die("out of host memory");
        st_read_at(f, t, 0, whole, sizeof(float) * e->n);
        checkpoint_check_finite(whole, e->n, what, t->name, 0);
        for (size_t j = 0; j < e->n; j++) {
            size_t at = factored_pos(s, drop, keep, j);
            if (at != SIZE_MAX) placed[at] = whole[j];
        }
        mem_upload(block, placed, sizeof(float) * n);   // the piece's means, reordered
        free(whole);
        free(placed);
        return;
    }
    if (e->kind == E_V) {
        AdafactorSlot sl;
        if (!adafactor_slot(m, e->spec, &sl)) return;
        GetCtx ctx = {f, t, p.buf + sl.off, NULL, sl.k0, what};
        each_run(s, sl.k0, sl.k1, get_run, &ctx);
        return;
    }
    size_t a, b, at;
    if (e->kind == E_NU && m->cfg.opt_type == OPT_MUON) {   // muon's AdamW nu, packed (put_entry)
        if (!muon_nu_slot(m, e->spec, &at, &a, &b)) return;
        GetCtx ctx = {f, t, p.buf + at, NULL, a, what};
        each_run(s, a, b, get_run, &ctx);
        return;
    }
    if (!held(m, e->spec, p.Z, p.zr, &a, &b, &at)) return;
    GetCtx ctx = {f, t, p.buf16 ? NULL : p.buf + at, p.buf16 ? p.buf16 + at : NULL, a, what};
    each_run(s, a, b, get_run, &ctx);
}

typedef struct { const float *whole; float *dst; size_t a; } WholeCtx;
static void whole_run(void *ctx, size_t g, size_t li, size_t n) {
    WholeCtx *p = (WholeCtx *)ctx;
    mem_upload(p->dst + (li - p->a), p->whole + g, sizeof(float) * n);
}

void checkpoint_load_param(Model *m, int i, const float *whole) {
    size_t a, b, at;
    if (!held(m, i, 1, 0, &a, &b, &at)) return;
    WholeCtx ctx = {whole, m->params_mem + at, a};
    each_run(&m->specs[i], a, b, whole_run, &ctx);
}

void checkpoint_load_params(Model *m, const char *path) {
    StFile *f = open_checkpoint("load_parameters_path", path);
    int ne;
    Entry *e = entries_of(&m->cfg, m->specs, m->ntensors, &ne);
    char what[CFG_STR + 32];
    snprintf(what, sizeof what, "load_parameters_path %s", path);
    for (int k = 0; k < ne; k++)
        if (is_weight(&e[k])) get_entry(m, f, &e[k], what);
    ema_restart(m);   // (the EMA starts from them)
    free(e);
    st_close(f);
}

void checkpoint_load(Model *m, const char *path) {
    StFile *f = open_checkpoint("load_checkpoint", path);
    int ne;
    Entry *e = entries_of(&m->cfg, m->specs, m->ntensors, &ne);
    char what[CFG_STR + 32];
    snprintf(what, sizeof what, "load_checkpoint %s", path);
    for (int k = 0; k < ne; k++) get_entry(m, f, &e[k], what);
    m->step = checkpoint_parse_step(st_meta(f, "step"), path);
    ema_restart(m);   // (the EMA restarts from the loaded weights)
    free(e);
    st_close(f);
}
