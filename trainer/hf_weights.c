// trainer/hf_weights.c: the tensors of a Hugging Face model directory, read by their names in
// transformers 5's layout whatever form the files hold them in:
//
//   - one model.safetensors, or the shards that model.safetensors.index.json names;
//   - F32; BF16 or F16, widened (exact); FP8 (F8_E4M3) with a float32 scale for each block of
//     config.json's quantization_config.weight_block_size in the tensor `NAME_scale_inv`
//     beside it, as DeepSeek-V3 is published: the value is the FP8 number times its block's
//     scale, one float32 product, as transformers dequantizes it;
//   - a layer's experts as transformers 5 keeps them, two 3-D tensors (gate_up_proj [E, 2H, D],
//     down_proj [E, D, H]), or a tensor per expert and projection, as the published
//     checkpoints hold them (Mixtral-8x7B's block_sparse_moe.experts.<e>.w1, w3 and w2 and its
//     router block_sparse_moe.gate; DeepSeek-V3's mlp.experts.<e>.gate_proj, up_proj and
//     down_proj), which transformers 5 stacks as it loads them, as this does.
//
// Every tensor of the files is to be read by the model: one that is not means the files hold
// another model, and is refused by name. DeepSeek's multi-token prediction layers are the
// exception: transformers' DeepseekV3ForCausalLM does not read them either (they train a
// second prediction head that this model does not have), so they are left out and said.
#include "trainer/hf_weights.h"
#include "base/paths.h"
#include "trainer/hf_json.h"
#include "data/safetensors.h"
#include "base/config.h"   // CFG_STR: a path's room
#include "core/common.h"
#include <math.h>
#include <string.h>
#include <unistd.h>

struct HfWeights {
    int n;                   // files
    StFile **f;
    char **path;
    unsigned char **read;    // [file][tensor]: read by the model (or as an expert's, a scale)
    char what[CFG_STR + 96];
    int block[2];            // FP8's block of rows and columns (0: the files hold no FP8)
    int layers, mtp;         // num_hidden_layers, num_nextn_predict_layers (DeepSeek's, else 0)
    int per_expert, fp8;     // whether tensors were read in those forms
    int headers_only;        // a dry run: names, shapes and dtypes checked, no value read
};

// ---- a sharded model: model.safetensors.index.json's "weight_map" (tensor -> file) ----

// The names the index's text names (*n of them, malloc'd), or NULL with why: nothing is
// allocated when it fails, so that its caller frees the text before dying (die() may jump
// back to a fuzz harness, which counts what is left as a leak; a clean-up hook would be one
// for the whole process, and every device reads the index).
static char **shard_names_in(const char *text, const char *path, int *n, char *why, size_t cap) {
    const char *v0, *v1, *p, *k0, *f0, *f1;
    int klen, count = 0, room = 0;
    char **names = NULL;
    if (json_repeated_member(text, &k0, &klen)) {
        snprintf(why, cap, "load_hf: %s gives \"%.*s\" twice", path, klen, k0);
        return NULL;
    }
    if (!json_member_at(text, "weight_map", &v0, &v1) || *v0 != '{') {
        snprintf(why, cap, "load_hf: %s has no \"weight_map\" object (tensor name -> file)", path);
        return NULL;
    }
    for (p = v0 + 1; json_next_member(&p, &k0, &klen, &f0, &f1);) {
        int len = (int)(f1 - f0) - 2, known = 0;
        if (*f0 != '"' || f1[-1] != '"' || len < 1 || memchr(f0 + 1, '/', (size_t)len) ||
            memchr(f0 + 1, '\\', (size_t)len) || memchr(f0 + 1, '"', (size_t)len) || f0[1] == '.') {
            snprintf(why, cap, "load_hf: %s maps \"%.*s\" to %.*s: a shard is a file name beside the index", path,
                     klen, k0, (int)(f1 - f0), f0);
            break;
        }
        for (int i = 0; i < count && !known; i++) known = (int)strlen(names[i]) == len && !strncmp(names[i], f0 + 1, (size_t)len);
        if (known) continue;
        char **more = count < room ? names : realloc(names, sizeof(char *) * (size_t)(room = room ? 2 * room : 8));
        if (!more || !(more[count] = strndup(f0 + 1, (size_t)len))) {
            snprintf(why, cap, "load_hf: out of host memory for %s", path);
            names = more ? more : names;
            break;
        }
        names = more;
        count++;
    }
    if (!*why && count == 0) snprintf(why, cap, "load_hf: %s maps no tensor to a file", path);
    if (*why) {
        for (int i = 0; i < count; i++) free(names[i]);
        free(names);
        return NULL;
    }
    *n = count;
    return names;
}

char **hf_shard_names(const char *path, int *n) {
    char *text = json_read_text(path, "load_hf"), why[CFG_STR + 512] = "";
    char **names = shard_names_in(text, path, n, why, sizeof why);
    free(text);
    if (!names) die("%s", why);
    return names;
}

char **hf_dir_shards(const char *dir, int *n) {
    char single[CFG_STR + 64], index[CFG_STR + 64];
    path_join(single, sizeof single, dir, "model.safetensors");
    path_join(index, sizeof index, dir, HF_INDEX);
    *n = 1;
    return access(single, F_OK) && !access(index, R_OK) ? hf_shard_names(index, n) : NULL;
}

// ---- config.json: what it says of the files ----

// A count of layers as config.json gives it, 0 if it is not one (the run's own config is
// checked against config.json by hf_check_config; this only says which layers are MTP's).
static int count(const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    return end != v && *end == '\0' && x > 0 && x < 1000000 ? (int)x : 0;
}

// quantization_config (absent: no FP8 tensors expected) and the multi-token prediction layers.
static void read_config(HfWeights *w, const char *dir) {
    char path[CFG_STR + 64], v[512];
    path_join(path, sizeof path, dir, "config.json");
    char *text = json_read_text(path, "load_hf");
    if (hf_config_value(text, "num_hidden_layers", v, sizeof v)) w->layers = count(v);
    if (hf_model_class(text) == HF_DEEPSEEK_V3 && hf_config_value(text, "num_nextn_predict_layers", v, sizeof v))
        w->mtp = count(v);
    const char *q0, *q1;
    if (json_member_at(text, "quantization_config", &q0, &q1) && *q0 == '{') {
        char method[64] = "", fmt[64] = "\"e4m3\"", blocks[64] = "";
        json_member(q0, "quant_method", method, sizeof method);
        json_member(q0, "fmt", fmt, sizeof fmt);
        json_member(q0, "weight_block_size", blocks, sizeof blocks);
        int ok = !strcmp(method, "\"fp8\"") && !strcmp(fmt, "\"e4m3\"") &&
                 sscanf(blocks, " [ %d , %d ]", &w->block[0], &w->block[1]) == 2 && w->block[0] > 0 && w->block[1] > 0;
        free(text);
        if (!ok)
            die("load_hf: %s: quantization_config says quant_method %s, fmt %s, weight_block_size %s: FP8 (\"fp8\", "
                "\"e4m3\") with a block of [rows, columns] is what is read", path, method[0] ? method : "(none)", fmt,
                blocks[0] ? blocks : "(none)");
        return;
    }
    free(text);
}

// What hfw_open had made when it failed freed (the names from `from` on too), then the death:
// a fuzz harness that catches die() finds nothing left behind.
static void open_failed(HfWeights *w, char **names, int from, const char *why) {
    char msg[CFG_STR + 640];
    snprintf(msg, sizeof msg, "%s", why);
    for (int i = from; names && i < w->n; i++) free(names[i]);
    free(names);
    hfw_close(w);
    die("%s", msg);
}

HfWeights *hfw_open(const char *dir, int headers_only) {
    HfWeights c = {.headers_only = headers_only};
    read_config(&c, dir);   // first: it dies with nothing allocated
    char err[512], why[CFG_STR + 600];
    char **names = hf_dir_shards(dir, &c.n);   // (dies with nothing allocated)
    path_join(c.what, sizeof c.what, dir, names ? HF_INDEX : "model.safetensors");
    if (names) snprintf(c.what + strlen(c.what), sizeof c.what - strlen(c.what), " (%d files)", c.n);
    HfWeights *w = malloc(sizeof *w);
    if (w) {
        *w = c;
        w->f = calloc((size_t)w->n, sizeof(StFile *));
        w->path = calloc((size_t)w->n, sizeof(char *));
        w->read = calloc((size_t)w->n, sizeof(unsigned char *));
    }
    snprintf(why, sizeof why, "load_hf: out of host memory for %s", c.what);
    if (!w) {
        for (int i = 0; names && i < c.n; i++) free(names[i]);
        free(names);
        die("%s", why);
    }
    if (!w->f || !w->path || !w->read) open_failed(w, names, 0, why);
    for (int i = 0; i < w->n; i++) {
        if (!(w->path[i] = malloc(CFG_STR + 64))) open_failed(w, names, i, why);
        path_join(w->path[i], CFG_STR + 64, dir, names ? names[i] : "model.safetensors");
        if (names) { free(names[i]); names[i] = NULL; }
        if (!(w->f[i] = st_open_header_try(w->path[i], err, sizeof err))) {
            snprintf(why, sizeof why, "load_hf: %s", err);
            open_failed(w, names, i + 1, why);
        }
        if (!(w->read[i] = calloc((size_t)st_count(w->f[i]) + 1, 1))) open_failed(w, names, i + 1, why);
    }
    free(names);
    return w;
}

const char *hfw_what(const HfWeights *w) { return w->what; }

void hfw_close(HfWeights *w) {
    for (int i = 0; i < w->n; i++) {   // (any of the arrays may be missing after a failed open)
        if (w->f) st_close(w->f[i]);
        if (w->path) free(w->path[i]);
        if (w->read) free(w->read[i]);
    }
    free(w->f);
    free(w->path);
    free(w->read);
    free(w);
}

// ---- one tensor of the files ----

// The tensor called name in any file (its file in *at), marked read; NULL if none has it.
static const StTensor *find(HfWeights *w, const char *name, int *at) {
    for (int i = 0; i < w->n; i++) {
        const StTensor *t = st_get(w->f[i], name);
        if (!t) continue;
        w->read[i][t - st_tensor(w->f[i], 0)] = 1;   // a file's tensors are one array, in file order
        *at = i;
        return t;
    }
    return NULL;
}

static void shape_text(char *s, size_t cap, int ndim, const int64_t *shape) {
    s[0] = 0;
    for (int d = 0; d < ndim; d++) snprintf(s + strlen(s), cap - strlen(s), "%s%lld", d ? "," : "", (long long)shape[d]);
}

static void check_shape(const HfWeights *w, int at, const StTensor *t, const char *name, int ndim, const int64_t *shape) {
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (same) return;
    char want[96], got[96];
    shape_text(want, sizeof want, ndim, shape);
    shape_text(got, sizeof got, t->ndim, t->shape);
    die("load_hf: '%s': tensor '%s' has shape [%s], this config needs [%s]", w->path[at], name, got, want);
}

// An FP8 E4M3 number (1 sign bit, 4 exponent bits biased by 7, 3 mantissa bits; no infinity,
// the bits S.1111.111 a NaN) as a float: exact.
static float e4m3(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    float v = e == 15 && m == 7 ? NAN : e ? ldexpf(1.0f + (float)m / 8, e - 7) : ldexpf((float)m / 8, -6);
    return b & 0x80 ? -v : v;
}

// An IEEE half (F16) as a float: exact.
static float half(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexpf(1.0f + (float)m / 1024, e - 15) : ldexpf((float)m / 1024, -14);
    return h & 0x8000 ? -v : v;
}

// x (the FP8 tensor t's n bytes, read into its first n bytes) made floats in place, each times
// its block's scale: the last two dimensions (R, C) are cut into blocks of block[0] x block[1],
// the scales `NAME_scale_inv` of shape [..., ceil(R / block[0]), ceil(C / block[1])].
static void dequantize(HfWeights *w, int at, const StTensor *t, const char *name, float *x, size_t n) {
    char sname[160];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    if (!w->block[0])
        die("load_hf: '%s': tensor '%s' is F8_E4M3 and config.json has no quantization_config (its weight_block_size)",
            w->path[at], name);
    if (t->ndim < 2) die("load_hf: '%s': tensor '%s' is F8_E4M3 with %d dimensions: a matrix or a stack of them is read",
                         w->path[at], name, t->ndim);
    int sat;
    const StTensor *s = find(w, sname, &sat);
    if (!s) die("load_hf: %s has no tensor '%s', the scales of the F8_E4M3 tensor '%s'", w->what, sname, name);
    int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1], shape[8];
    for (int d = 0; d < t->ndim - 2; d++) shape[d] = t->shape[d];
    shape[t->ndim - 2] = (R + w->block[0] - 1) / w->block[0];
    shape[t->ndim - 1] = (C + w->block[1] - 1) / w->block[1];
    check_shape(w, sat, s, sname, t->ndim, shape);
    if (s->dtype != ST_F32) die("load_hf: '%s': the scales '%s' are %s; F32 is read", w->path[sat], sname, st_dtype_name(s->dtype));
    w->fp8 = 1;
    if (w->headers_only) return;
    size_t ns = s->nbytes / 4;
    float *scale = malloc(sizeof(float) * (ns ? ns : 1));
    if (!scale) die("load_hf: out of host memory for '%s'", sname);
    st_read_at(w->f[sat], s, 0, scale, s->nbytes);
    const uint8_t *q = (const uint8_t *)(void *)x;
    for (size_t i = n; i-- > 0;) {   // from the end: byte i precedes float i's 4 bytes
        size_t c = i % (size_t)C, r = i / (size_t)C % (size_t)R, b = i / ((size_t)R * (size_t)C);
        float sc = scale[(b * (size_t)shape[t->ndim - 2] + r / (size_t)w->block[0]) * (size_t)shape[t->ndim - 1] +
                         c / (size_t)w->block[1]];
        x[i] = e4m3(q[i]) * sc;
    }
    free(scale);
}

// The values of the file tensor t (of the shape given) into x, as floats.
static void read_values(HfWeights *w, int at, const StTensor *t, const char *name, int ndim, const int64_t *shape, float *x) {
    check_shape(w, at, t, name, ndim, shape);
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F8_E4M3)
        die("load_hf: '%s': tensor '%s' is %s; F32, BF16, F16 and F8_E4M3 are read", w->path[at], name,
            st_dtype_name(t->dtype));
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    if (!w->headers_only) st_read_at(w->f[at], t, 0, x, t->nbytes);   // n floats, or the first 2n or n bytes of them
    if (t->dtype == ST_F8_E4M3) { dequantize(w, at, t, name, x, n); return; }
    if (t->dtype == ST_F32 || w->headers_only) return;
    const uint16_t *b = (const uint16_t *)(void *)x;
    for (size_t i = n; i-- > 0;) {   // widened in place from the end: value i's 2 bytes precede its 4
        uint32_t u = (uint32_t)b[i] << 16;
        if (t->dtype == ST_F16) x[i] = half(b[i]);
        else memcpy(&x[i], &u, 4);
    }
}

// ---- the per-expert form ----

// A layer's experts one tensor per expert and projection: the names of the first (and for
// gate_up_proj the second) tensor of expert e, after "model.layers.<l>.".
typedef struct { const char *gate, *up, *down; } PerExpert;
static const PerExpert FORMS[] = {
    {"block_sparse_moe.experts.%d.w1.weight", "block_sparse_moe.experts.%d.w3.weight", "block_sparse_moe.experts.%d.w2.weight"},
    {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight", "mlp.experts.%d.down_proj.weight"},
};
#define NFORMS ((int)(sizeof FORMS / sizeof FORMS[0]))

void hf_expert_name(char *out, size_t cap, int mixtral, int layer, int expert, int which) {
    const PerExpert *f = &FORMS[mixtral ? 0 : 1];
    int at = snprintf(out, cap, "model.layers.%d.", layer);
    snprintf(out + at, cap - (size_t)at, which == 0 ? f->gate : which == 1 ? f->up : f->down, expert);
}

// name "model.layers.<l>.mlp.experts.gate_up_proj" [E, 2H, D] or "...down_proj" [E, D, H]
// assembled into x from its experts' tensors (gate_proj's rows, then up_proj's): 1 if the
// files hold them so, 0 if not.
static int per_expert(HfWeights *w, const char *name, const int64_t *shape, float *x) {
    int l, n = 0;
    char part[32] = "", each[160];
    if (sscanf(name, "model.layers.%d.mlp.experts.%31[a-z_]%n", &l, part, &n) != 2 || name[n]) return 0;
    int gate_up = !strcmp(part, "gate_up_proj");
    if (!gate_up && strcmp(part, "down_proj")) return 0;
    for (int f = 0; f < NFORMS; f++) {
        const char *first = gate_up ? FORMS[f].gate : FORMS[f].down;
        int at;
        snprintf(each, sizeof each, "model.layers.%d.", l);
        snprintf(each + strlen(each), sizeof each - strlen(each), first, 0);
        int held = 0;
        for (int i = 0; i < w->n && !held; i++) held = st_get(w->f[i], each) != NULL;
        if (!held) continue;
        int64_t rows = gate_up ? shape[1] / 2 : shape[1], one[2] = {rows, shape[2]};
        size_t size = (size_t)rows * (size_t)shape[2];
        for (int e = 0; e < shape[0]; e++)
            for (int h = 0; h <= gate_up; h++) {
                snprintf(each, sizeof each, "model.layers.%d.", l);
                snprintf(each + strlen(each), sizeof each - strlen(each), h ? FORMS[f].up : first, e);
                const StTensor *t = find(w, each, &at);
                if (!t) die("load_hf: %s has no tensor '%s': the experts of layer %d are one tensor each, and %lld are needed",
                            w->what, each, l, (long long)shape[0]);
                read_values(w, at, t, each, 2, one, x ? x + ((size_t)e * (size_t)(gate_up + 1) + (size_t)h) * size : NULL);
            }
        w->per_expert = 1;
        return 1;
    }
    return 0;
}

// Mixtral's router under its published name.
static const StTensor *find_router(HfWeights *w, const char *name, int *at, char *held, size_t cap) {
    int l, n = 0;
    if (sscanf(name, "model.layers.%d.mlp.gate.weight%n", &l, &n) != 1 || name[n]) return NULL;
    snprintf(held, cap, "model.layers.%d." HF_MIXTRAL_ROUTER, l);
    return find(w, held, at);
}

float *hfw_tensor(HfWeights *w, const char *name, int ndim, const int64_t *shape, float **scratch) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    float *x = NULL;
    if (!w->headers_only) {
        if (!(x = realloc(*scratch, sizeof(float) * (n ? n : 1)))) die("load_hf: out of host memory for '%s' (%zu values)", name, n);
        *scratch = x;
    }
    int at;
    char held[160];
    const StTensor *t = find(w, name, &at);
    if (t) { read_values(w, at, t, name, ndim, shape, x); return x; }
    if (ndim == 3 && per_expert(w, name, shape, x)) return x;
    if ((t = find_router(w, name, &at, held, sizeof held))) { read_values(w, at, t, held, ndim, shape, x); return x; }
    die("load_hf: %s has no tensor '%s': it was written for another model or config", w->what, name);
}

// ---- what was left unread ----

static int in_mtp_layer(const HfWeights *w, const char *name) {
    int l, n = 0;
    return sscanf(name, "model.layers.%d.%n", &l, &n) == 1 && n > 0 && l >= w->layers && l < w->layers + w->mtp;
}

void hfw_all_read(HfWeights *w, char *said, size_t cap) {
    int mtp = 0, experts = 0, scales = 0;
    for (int i = 0; i < w->n; i++)
        for (int j = 0; j < st_count(w->f[i]); j++) {
            const char *name = st_tensor(w->f[i], j)->name, *x = strstr(name, ".experts.");
            if (w->read[i][j]) {
                experts += x && x[9] >= '0' && x[9] <= '9' && !strstr(name, "_scale_inv");
                scales += strlen(name) > 10 && !strcmp(name + strlen(name) - 10, "_scale_inv");
                continue;
            }
            if (in_mtp_layer(w, name)) { mtp++; continue; }
            for (int k = 0; k < w->n; k++)   // read from another file (find takes the first)
                if (k != i && st_get(w->f[k], name))
                    die("load_hf: tensor '%s' is in both '%s' and '%s'", name, w->path[k], w->path[i]);
            die("load_hf: '%s' holds tensor '%s', which this config does not read: it was written for another model",
                w->path[i], name);
        }
    said[0] = 0;
    const char *stacked = w->headers_only ? "to stack" : "stacked", *fp8 = w->headers_only ? "with" : "dequantized by";
    if (w->per_expert)
        snprintf(said + strlen(said), cap - strlen(said), "%s%d experts' tensors %s", said[0] ? "; " : "", experts, stacked);
    if (w->fp8)
        snprintf(said + strlen(said), cap - strlen(said), "%s%d FP8 tensors %s their %dx%d blocks' scales",
                 said[0] ? "; " : "", scales, fp8, w->block[0], w->block[1]);
    if (w->headers_only)
        snprintf(said + strlen(said), cap - strlen(said), "%sa dry run: the tensors' names, shapes and dtypes checked, "
                 "no value read", said[0] ? "; " : "");
    if (mtp)
        snprintf(said + strlen(said), cap - strlen(said),
                 "%s%d tensors of the multi-token prediction layer%s from %d left out, as transformers does",
                 said[0] ? "; " : "", mtp, w->mtp > 1 ? "s" : "", w->layers);
}
