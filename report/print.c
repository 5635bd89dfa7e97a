// report/print.c: the parameter line every run prints, and the print_sharding=true
// report (see print.h). Everything here is read from the model's own layout (model/params.c),
// its StateShard (sharding/fsdp.h) and the rule table (base/partition.c): nothing is
// worked out a second way, so what is printed is what the devices hold.
#include "report/print.h"
#include "base/partition.h"
#include "base/memory.h"
#include "model/constraint.h"
#include "model/precision.h"
#include "optim/optimizer.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "core/common.h"

// "(256, 128)"
static const char *fmt_shape(char *buf, size_t cap, int ndim, const int *shape) {
    size_t at = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && at < cap; d++) at += (size_t)snprintf(buf + at, cap - at, "%s%d", d ? ", " : "", shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, ")");
    return buf;
}

// "[vocab, embed]"
static const char *fmt_axes(char *buf, size_t cap, int ndim, const char *const *logical) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++) at += (size_t)snprintf(buf + at, cap - at, "%s%s", d ? ", " : "", logical[d]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
    return buf;
}

// A table printed with each column as wide as its widest cell: cells are filled row by
// row (ncols per row, the first row the header), then printed. Columns whose bit is set in
// `right` are right-aligned (numbers).
#define CELL 128
typedef struct {
    int ncols, nrows, cap;
    char (*cell)[CELL];
} Table;

static void table_init(Table *t, int ncols, int max_rows) {
    t->ncols = ncols;
    t->nrows = 0;
    t->cap = max_rows;
    t->cell = calloc((size_t)ncols * max_rows, CELL);
}

static void table_row(Table *t, const char *const *cells) {
    if (t->nrows == t->cap) die("internal: table of %d rows is full", t->cap);
    for (int j = 0; j < t->ncols; j++) snprintf(t->cell[t->nrows * t->ncols + j], CELL, "%s", cells[j] ? cells[j] : "");
    t->nrows++;
}

static void table_print(Table *t, unsigned right) {
    int w[16] = {0};
    for (int i = 0; i < t->nrows; i++)
        for (int j = 0; j < t->ncols; j++) w[j] = MM_MAX(w[j], (int)strlen(t->cell[i * t->ncols + j]));
    char *line = malloc((size_t)t->ncols * (CELL + 2) + 4);
    for (int i = 0; i < t->nrows; i++) {
        int at = sprintf(line, " ");
        for (int j = 0; j < t->ncols; j++)
            at += sprintf(line + at, (right & (1u << j)) ? " %*s" : " %-*s", w[j], t->cell[i * t->ncols + j]);
        while (at > 0 && line[at - 1] == ' ') at--;   // no trailing blanks after a short last cell
        printf("%.*s\n", at, line);
    }
    free(line);
    free(t->cell);
}

size_t sharding_global_params(const Model *m) {
    size_t n = 0;
    for (int i = 0; i < m->ntensors; i++) {
        size_t k = 1;
        for (int d = 0; d < m->specs[i].ndim; d++) k *= (size_t)m->specs[i].gshape[d];
        n += k;
    }
    return n;
}

// Floats of this device's layout once every unit is padded for the fsdp/zero-1 shards
// (= nparams when nothing is split; F times what the device stores).
static size_t padded_params(const StateShard *s) {
    size_t n = 0;
    for (int u = 0; u < s->nunits; u++) n += s->unit_pad[u];
    return n;
}

void sharding_print_state(const Model *m) {
    const StateShard *s = &m->shard;
    size_t P = sharding_global_params(m);
    char a[32], b[32], c[32], d[32];
    printf("parameters: %zu", P);
    if (m->nparams != P) printf(", %zu in each device's tensor/expert piece", m->nparams);
    printf(" (stored padded for fsdp=%d zero1=%d: %zu)\n", s->F, s->Z, padded_params(s));
    // The same buffers model_init allocates: params (and the DeepSeek routing bias, a
    // parameter-tagged state), grads, and AdamW's two moments.
    size_t bias = m->router_bias ? sizeof(float) * (size_t)m->cfg.base_num_decoder_layers * m->cfg.num_experts : 0;
    size_t pb = sizeof(float) * s->local_n + bias, gb = sizeof(float) * s->local_n;
    int adafactor = m->cfg.opt_type == OPT_ADAFACTOR, muon = m->cfg.opt_type == OPT_MUON;
    int adamw = m->cfg.opt_type == OPT_ADAMW || m->cfg.opt_type == OPT_ADAM_PAX;
    size_t ob = adafactor ? sizeof(float) * adafactor_state_floats(m)
              : muon      ? optimizer_mu_bytes(&m->cfg) * (s->local_n / s->Z) + sizeof(float) * muon_nu_floats(m)
              : adamw     ? (optimizer_mu_bytes(&m->cfg) + sizeof(float)) * (s->local_n / s->Z) : 0;
    const char *what = adafactor ? "adafactor v_row, v_col / v" : muon ? "muon mu; nu of the AdamW tensors"
                     : !adamw ? "sgd: none" : optimizer_mu_bytes(&m->cfg) == 2 ? "AdamW mu (bf16), nu"
                     : adamw && m->cfg.opt_type == OPT_ADAM_PAX ? "adam_pax mu, nu" : "AdamW mu, nu";
    printf("model state per device: params %s + grads %s + optimizer %s (%s) = %s\n", mem_fmt(pb, a, sizeof a),
           mem_fmt(gb, b, sizeof b), mem_fmt(ob, c, sizeof c), what, mem_fmt(pb + gb + ob, d, sizeof d));
}

// ---------------------------------------------------------------------------------------
// Parameters: one row per tensor, then one per unit (what fsdp stores and gathers).

static const char *unit_name(const Config *c, int u, char *buf, size_t cap) {
    int L = c->base_num_decoder_layers;
    if (u == 0) snprintf(buf, cap, "embedding");
    else if (u <= L) snprintf(buf, cap, "layer %d", u - 1);
    else snprintf(buf, cap, "head (final norm, logits)");
    return buf;
}

static void print_params(const Model *m, const Mesh *mesh) {
    const Config *c = &m->cfg;
    const StateShard *s = &m->shard;
    int F = s->F, Z = s->Z;
    printf("parameters: the logical axes give the spec by the rules above. tensor and expert cut a\n"
           "tensor's local shape (what a device computes with).");
    if (F > 1)
        printf(" fsdp=%d does not cut shapes: each device stores\n1/%d of every unit (the embedding, each layer, "
               "the head) flattened and padded to a multiple of\n%d floats, and all-gathers a unit just before use.",
               F, F, F * Z * NORM_CHUNK);
    else
        printf(" fsdp is 1: each device stores its local shapes whole.");
    if (Z > 1)
        printf("\nZeRO-1: the AdamW moments of each stored shard are cut again into data=%d pieces.", Z);
    if (mesh->size[AX_DATA] > 1) printf("\ndata=%d holds replicas of the weights (it splits the batch).", mesh->size[AX_DATA]);
    if (mesh->size[AX_EXPERT] > 1)
        printf("\nexpert=%d cuts the experts and holds replicas of the other weights (it splits the batch).",
               mesh->size[AX_EXPERT]);
    if (mesh->size[AX_CONTEXT] > 1)
        printf("\ncontext=%d holds replicas of the weights (it splits the sequence).", mesh->size[AX_CONTEXT]);
    printf("\n");
    Table t;
    table_init(&t, 7, m->ntensors + 1);
    table_row(&t, (const char *const[]){"name", "global shape", "logical axes", "spec", "local shape",
                                        "local bytes", "stored per device"});
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *p = &m->specs[i];
        char gs[64], ax[112], sp[64], ls[64], lb[32], st[48];
        if (F > 1) snprintf(st, sizeof st, "1/%d of unit %d", F, model_unit_of(c, p->name));
        else snprintf(st, sizeof st, "all of it");
        table_row(&t, (const char *const[]){p->name, fmt_shape(gs, sizeof gs, p->ndim, p->gshape),
                                            fmt_axes(ax, sizeof ax, p->ndim, p->logical),
                                            partition_describe(&p->part, sp, sizeof sp),
                                            fmt_shape(ls, sizeof ls, p->ndim, p->shape),
                                            mem_fmt(sizeof(float) * p->size, lb, sizeof lb), st});
    }
    table_print(&t, 1u << 5);
    printf("units (each a contiguous run of a device's local layout):\n");
    table_init(&t, 6, s->nunits + 1);
    table_row(&t, (const char *const[]){"unit", "holds", "floats", "padded", "stored per device", "gathered in use"});
    for (int u = 0; u < s->nunits; u++) {
        char un[16], name[48], fl[24], pd[24], sb[32], st[64], gb[32];
        size_t n = shard_len(s, u);
        snprintf(un, sizeof un, "%d", u);
        snprintf(fl, sizeof fl, "%zu", s->unit_size[u]);
        snprintf(pd, sizeof pd, "%zu", s->unit_pad[u]);
        snprintf(st, sizeof st, "%zu floats, %s", n, mem_fmt(sizeof(float) * n, sb, sizeof sb));
        table_row(&t, (const char *const[]){un, unit_name(c, u, name, sizeof name), fl, pd, st,
                                            F > 1 ? mem_fmt(sizeof(float) * s->unit_pad[u], gb, sizeof gb) : "-"});
    }
    table_print(&t, 0x3fu & ~2u);
    if (F > 1)
        printf("  a gathered unit is tagged params while in use; its full gradient, tagged grads, lives from\n"
               "  the unit's backward pass to its reduce-scatter.\n");
}

// ---------------------------------------------------------------------------------------
// Activations: global shapes, the spec the rule table gives over every mesh axis (batch
// and sequence are split over data, fsdp, expert and context, which do not cut weights),
// and one device's piece.

typedef struct {
    const char *name;
    int ndim;
    int shape[4];
    const char *logical[4];
    const char *note;
    int packed;         // kept as 16-bit numbers in bf16 mode (the layers' act_pack calls)
} Act;

static void act_row(Table *t, const Mesh *mesh, const Act *a, int bf16) {
    PartSpec p = partition_spec(mesh, a->ndim, a->logical);
    char gs[64], ax[112], sp[64], ls[64], lb[32];
    size_t at = 0, bytes = bf16 && a->packed ? 2 : sizeof(float);
    at += (size_t)snprintf(ls, sizeof ls, "(");
    for (int d = 0; d < a->ndim; d++) {
        int n = a->shape[d], k = p.pieces[d];
        // A dimension that does not divide is shown as the fraction it would be.
        if (n % k) at += (size_t)snprintf(ls + at, sizeof ls - at, "%s%d/%d", d ? ", " : "", n, k);
        else at += (size_t)snprintf(ls + at, sizeof ls - at, "%s%d", d ? ", " : "", n / k);
        bytes *= (size_t)(n / k);
    }
    snprintf(ls + at, sizeof ls - at, ")");
    table_row(t, (const char *const[]){a->name, fmt_axes(ax, sizeof ax, a->ndim, a->logical),
                                       fmt_shape(gs, sizeof gs, a->ndim, a->shape), partition_describe(&p, sp, sizeof sp),
                                       ls, mem_fmt(bytes, lb, sizeof lb), a->note});
}

static void print_activations(const Model *m, const Mesh *mesh, int Bg, int S) {
    const Config *c = &m->cfg;
    int D = c->base_emb_dim, N = c->base_num_query_heads, V = c->vocab_size;
    int E = c->num_experts, K = c->num_experts_per_tok, H = cfg_expert_dim(c);
    const char *B_ = "activation_batch", *L_ = "activation_length";   // every activation starts with these
    Act acts[12];
    int n = 0;
    const LogicalSpec *R = &SPEC_RESIDUAL, *G = &SPEC_LOGITS;   // the constraints' specs (model/constraint.h)
    acts[n++] = (Act){"residual stream x", 3, {Bg, S, D}, {R->logical[0], R->logical[1], R->logical[2]}, "per layer", 1};
    if (!cfg_is_mla(c)) {
        int Nkv = c->base_num_kv_heads, Dh = c->head_dim;
        acts[n++] = (Act){"attention q", 4, {Bg, S, N, Dh}, {B_, L_, "activation_heads", "activation_kv"}, NULL, 1};
        acts[n++] = (Act){"attention k, v", 4, {Bg, S, Nkv, Dh}, {B_, L_, "activation_kv_heads", "activation_kv"}, "each", 1};
        acts[n++] = (Act){"attention output", 4, {Bg, S, N, Dh}, {B_, L_, "activation_heads", "activation_kv"},
                          "before the out projection", 1};
    } else {
        int Qk = c->qk_nope_head_dim + c->qk_rope_head_dim, Dv = c->v_head_dim;
        acts[n++] = (Act){"attention q, k", 4, {Bg, S, N, Qk}, {B_, L_, "activation_heads", "activation_kv"},
                          "each; MLA: k per head after wkv_b", 1};
        acts[n++] = (Act){"attention v", 4, {Bg, S, N, Dv}, {B_, L_, "activation_heads", "activation_kv"}, NULL, 1};
    }
    if (c->first_num_dense_layers > 0)
        acts[n++] = (Act){"dense MLP hidden", 3, {Bg, S, c->base_mlp_dim}, {B_, L_, "activation_mlp"},
                          "wi_0 and wi_1 outputs each", 1};
    if (c->sparse_matmul)
        acts[n++] = (Act){"MoE expert hidden", 3, {Bg, S * K, H}, {B_, L_, "activation_mlp"},
                          mesh->size[AX_EXPERT] > 1
                              ? "wi_0 and wi_1 outputs each; S*K: each token's K routed rows; a device computes the rows "
                                "its experts get from the expert group (all-to-all): this many on average"
                              : "wi_0 and wi_1 outputs each; S*K: each token's K routed rows, grouped by expert",
                          0};
    else
        acts[n++] = (Act){"MoE expert hidden", 4, {E, Bg, S, H}, {"activation_exp", B_, L_, "activation_mlp"},
                          "wi_0 and wi_1 outputs each; dense path: every expert on every token", 0};
    if (c->shared_experts > 0)
        acts[n++] = (Act){"shared expert hidden", 3, {Bg, S, c->shared_experts * H}, {B_, L_, "activation_mlp"},
                          "wi_0 and wi_1 outputs each", 1};
    acts[n++] = (Act){"logits", 3, {Bg, S, V}, {G->logical[0], G->logical[1], G->logical[2]}, NULL, 0};
    int bf16 = cfg_bf16(c);
    printf("activations of one microbatch (%d sequences x %d tokens), spec over every mesh axis%s:\n", Bg, S,
           bf16 ? " (dtype=bfloat16: those the layers save as 16-bit numbers count 2 bytes each)" : "");
    Table t;
    table_init(&t, 7, n + 1);
    table_row(&t, (const char *const[]){"name", "logical axes", "global shape", "spec", "per-device shape", "bytes", ""});
    for (int i = 0; i < n; i++) act_row(&t, mesh, &acts[i], bf16);
    table_print(&t, 1u << 5);
    // What the sharding constraints on these two specs cost on this mesh (skip_trivial_specs, remove_size_one_mesh_axis).
    printf("sharding constraints (residual stream and norm outputs, logits; and their gradients): %s, %s "
           "(skip_trivial_specs=%s, remove_size_one_mesh_axis=%s)\n",
           constraint_copies(c, R) ? "each copies the residual" : "no copies of the residual",
           constraint_copies(c, G) ? "each copies the logits" : "no copies of the logits",
           c->skip_trivial_specs ? "true" : "false", c->remove_size_one_mesh_axis ? "true" : "false");
}

void sharding_print(const Model *m, int Bg, int S) {
    const Mesh *mesh = mesh_current();
    if (!mesh) die("internal: print_sharding needs the mesh (call it from a device thread)");
    char b[64];
    printf("---- sharding on mesh %s (%d device%s) ----\n", mesh_describe(mesh, b, sizeof b), mesh->ndev,
           mesh->ndev > 1 ? "s" : "");
    partition_print_rules();
    print_params(m, mesh);
    print_activations(m, mesh, Bg, S);
    printf("----\n");
}
