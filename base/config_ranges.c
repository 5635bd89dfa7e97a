// base/config_ranges.c: the values every numeric key may take (the ranges written in
// base/config_keys.def), and the sizes a run may reach. A value outside its range would end in a NaN, a crash or a run that cannot
// finish; each is refused before anything starts, with a message that names the key, the
// range and the value (`adam_eps must be > 0, got 0`). `./train --help-config` prints
// each key's range.
#include "base/config.h"
#include "base/memory.h"   // mem_host_share: this process's share of the host's memory
#include "base/net.h"      // the run's processes: this one holds a slice of the devices
#include "core/common.h"
#include <float.h>
#include <limits.h>
#include <stddef.h>

typedef enum { R_INT, R_FLOAT, R_BOOL, R_STR, R_BYTES } RangeType;

typedef struct {
    const char *name;
    RangeType type;
    size_t offset;
    int has;                // 0: the key declares no range (booleans, strings)
    double lo;              // the bounds; -INFINITY / INFINITY for none
    int lo_open;            // 1: the bound itself is excluded
    double hi;
    int hi_open;
    int also;               // an int sentinel also allowed (-1 = "derive it"), or 0 for none
    const char *note;       // why the range is what it is, when it is not plain
} Range;

// The range forms of base/config_keys.def (its first comment says what each means).
#define RANGE(lo, lo_open, hi, hi_open, also, note) 1, lo, lo_open, hi, hi_open, also, note
#define IN(lo, hi) RANGE(lo, 0, hi, 0, 0, NULL)
#define ATLEAST(lo) RANGE(lo, 0, INFINITY, 0, 0, NULL)
#define ABOVE(lo) RANGE(lo, 1, INFINITY, 0, 0, NULL)
#define IN_OR(lo, hi, also, note) RANGE(lo, 0, hi, 0, also, note)
#define POSITIVE(note) RANGE(0, 1, INFINITY, 0, 0, note)
#define UNIT(note) RANGE(0, 0, 1, 1, 0, note)
#define NONE 0, 0, 0, 0, 0, 0, NULL
#define DIM (1 << 20)        // any model dimension: 1M
#define DEVICES 256          // base/mesh.c runs at most 256 device threads

static const Range RANGES[] = {
#define KEY(type, name, dflt, range, help) {#name, R_##type, offsetof(Config, name), range},
#include "base/config_keys.def"
};
#define NRANGES ((int)(sizeof RANGES / sizeof RANGES[0]))

static const Range *find_range(const char *key) {
    for (int i = 0; i < NRANGES; i++)
        if (RANGES[i].has && !strcmp(RANGES[i].name, key)) return &RANGES[i];
    return NULL;
}

static void bound_text(char *buf, size_t cap, double v) {
    if (v == (double)INT_MAX) snprintf(buf, cap, "2147483647");
    else if (v == (double)INT_MIN) snprintf(buf, cap, "-2147483648");
    else snprintf(buf, cap, "%.10g", v);
}

static void range_text(const Range *r, char *buf, size_t cap) {
    char lo[32], hi[32];
    bound_text(lo, sizeof lo, r->lo);
    bound_text(hi, sizeof hi, r->hi);
    size_t n;
    if (isinf(r->lo) && isinf(r->hi)) n = (size_t)snprintf(buf, cap, "any number");
    else if (isinf(r->hi)) n = (size_t)snprintf(buf, cap, "%s %s", r->lo_open ? ">" : ">=", lo);
    else n = (size_t)snprintf(buf, cap, "in %c%s, %s%c", r->lo_open ? '(' : '[', lo, hi, r->hi_open ? ')' : ']');
    if (r->also && n < cap) n += (size_t)snprintf(buf + n, cap - n, ", or %d", r->also);
    if (r->note && n < cap) snprintf(buf + n, cap - n, " (%s)", r->note);
}

int config_range_text(const char *key, char *buf, int cap) {
    const Range *r = find_range(key);
    if (!r) return 0;
    range_text(r, buf, (size_t)cap);
    return 1;
}

// Whether v is inside r (or is r's sentinel).
static int in_range(const Range *r, double v, int is_int) {
    if (r->also && is_int && v == r->also) return 1;
    if (r->lo_open ? !(v > r->lo) : !(v >= r->lo)) return 0;
    if (r->hi_open ? !(v < r->hi) : !(v <= r->hi)) return 0;
    return 1;
}

void config_check_ranges(const Config *c) {
    char text[160];
    for (int i = 0; i < NRANGES; i++) {
        const Range *r = &RANGES[i];
        if (!r->has) continue;
        const void *field = (const char *)c + r->offset;
        double v = r->type == R_INT ? *(const int *)field : r->type == R_FLOAT ? *(const float *)field
                                                                             : (double)*(const int64_t *)field;
        if (in_range(r, v, r->type != R_FLOAT)) continue;
        range_text(r, text, sizeof text);
        if (r->type == R_FLOAT) die("%s must be %s, got %g", r->name, text, v);
        die("%s must be %s, got %lld", r->name, text, (long long)v);
    }
}

// ---------------------------------------------------------------------------------------
// Sizes. The kernels index a device's tensors with int, so every tensor a step holds must
// have fewer than 2^31 elements; and a run (not a dry run: the planner holds no real memory
// for large buffers) whose largest tensor alone, on every device, exceeds this host's memory
// cannot finish. Both are computed in 64 bits from the config, before the mesh starts.

// A mesh axis's size as far as the config says (-1, "the rest", counts as every device).
static int64_t axis_size(const Config *c, int v) {
    if (v > 0) return v;
    return c->num_devices > 0 ? c->num_devices : 1;
}

void config_check_sizes(const Config *c) {
    int64_t tp = axis_size(c, c->ici_tensor_parallelism), stage = axis_size(c, c->ici_pipeline_parallelism);
    int64_t ndev = c->num_devices > 0 ? c->num_devices : 1;
    if (c->num_devices <= 0) {
        const int ax[6] = {c->ici_data_parallelism, c->ici_fsdp_parallelism, c->ici_tensor_parallelism,
                           c->ici_expert_parallelism, c->ici_context_parallelism, c->ici_pipeline_parallelism};
        for (int a = 0; a < 6; a++) ndev *= ax[a] > 0 ? ax[a] : 1;
    }
    // Tokens of one microbatch on one device: the global batch (per_device_batch_size per
    // device) is split over data, fsdp and expert only, so tensor and stage devices each hold
    // more sequences; context cuts sequences and multiplies them by the same factor.
    // The eval batch (eval_per_device_batch_size, at the start and end of every run) splits the
    // same way through the same forward: the larger of the two batches sizes the tensors.
    int batch = c->per_device_batch_size;
    const char *batch_key = "per_device_batch_size";
    if (c->eval_per_device_batch_size > batch) {
        batch = c->eval_per_device_batch_size;
        batch_key = "eval_per_device_batch_size";
    }
    int64_t T = (int64_t)batch * c->max_target_length * tp * stage;
    // A pipeline runs the step in microbatches of T / M tokens; only its state of every
    // microbatch's [tokens, emb] activations spans all T.
    int64_t M = c->num_pipeline_microbatches > 0 ? c->num_pipeline_microbatches : stage;
    int64_t Tm = stage > 1 ? T / M : T;
    int64_t heads = cfg_is_mla(c) ? (int64_t)c->base_num_query_heads * (c->qk_nope_head_dim + c->qk_rope_head_dim)
                                  : (int64_t)c->base_num_query_heads * c->head_dim;
    struct { const char *what; int64_t n; } t[] = {
        {"the [tokens, vocab] logits", Tm / c->num_vocab_tiling * ((c->vocab_size + tp - 1) / tp)},
        {"a [tokens, emb] activation", T * c->base_emb_dim},
        {"a [tokens, heads x head width] attention activation", Tm * heads},
        {"the [tokens, mlp] dense activation", Tm * ((MM_MAX(c->base_mlp_dim, 1) + tp - 1) / tp)},
        {"the [tokens x experts_per_tok, expert width] routed rows",
         Tm * c->num_experts_per_tok * ((cfg_expert_dim(c) + tp - 1) / tp)},
        {"the [tokens, experts] router scores", Tm * c->num_experts},
        {"the materialised [batch, 1, seq, seq] causal mask", c->implicit_causal_mask ? 0 : Tm * c->max_target_length},
    };
    int64_t largest = 0;
    const char *largest_what = t[0].what;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].n > INT_MAX)
            die("%s would have %lld elements on one device (%lld tokens per device per microbatch = "
                "%s %d x max_target_length %d x tensor %lld x stage %lld): more than the 2147483647 that "
                "this trainer's int indices reach; lower %s or max_target_length",
                t[i].what, (long long)t[i].n, (long long)T, batch_key, batch, c->max_target_length, (long long)tp,
                (long long)stage, batch_key);
        if (t[i].n > largest) { largest = t[i].n; largest_what = t[i].what; }
    }
    if ((int64_t)c->num_threads * ndev > 4096)
        die("num_threads %d x %lld devices = %lld compute threads: more than the 4096 this trainer starts "
            "(0 shares the cores out over the devices)", c->num_threads, (long long)ndev,
            (long long)c->num_threads * ndev);
    // Under ./train_mpi the ici sizes are the global mesh's by now (base/hybrid.c); this
    // process holds its slice's devices only, an equal part of them.
    const Net *net = net_current();
    int64_t nlocal = net && net->nprocess > 1 && ndev % net->nprocess == 0 ? ndev / net->nprocess : ndev;
    int nproc;
    size_t share = mem_host_share(&nproc);
    int64_t need = largest * (int64_t)sizeof(float) * nlocal;
    char limit[160];
    if (!c->dry_run && share < SIZE_MAX && (uint64_t)need > share)
        die("%s alone would take %lld bytes on each of %s%lld devices, %lld bytes in all: more than %s (the "
            "simulated devices are threads sharing it); dry_run=true plans such a run without computing it",
            largest_what, (long long)(largest * (int64_t)sizeof(float)), nlocal < ndev ? "this process's " : "the ",
            (long long)nlocal, (long long)need, mem_host_share_text(limit, sizeof limit));
}
