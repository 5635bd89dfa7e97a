// base/partition.c: the logical-axis rule table (see partition.h).
#include "base/partition.h"
#include "core/common.h"

// One rule: a logical axis and the mesh axes it is split over, in order. The names are
// MaxText's (base.yml). Where MaxText splits more than this trainer does, the comment says.
typedef struct {
    const char *logical;
    MeshAxis axes[3];
    int naxes;
} Rule;

static const Rule RULES[] = {
    // activations
    {"activation_batch", {AX_DATA, AX_FSDP, AX_EXPERT}, 3},   // the batch: split over every batch axis
    {"activation_length", {AX_CONTEXT}, 1},                   // the sequence (context parallelism)
    {"activation_heads", {AX_TENSOR}, 1},
    {"activation_kv_heads", {AX_TENSOR}, 1},
    {"activation_mlp", {AX_TENSOR}, 1},
    {"activation_vocab", {AX_TENSOR}, 1},
    {"activation_exp", {AX_EXPERT}, 1},
    {"activation_kv", {0}, 0},         // the head dimension of q, k, v
    {"activation_embed", {0}, 0},      // MaxText: tensor (sequence-parallel norms); here replicated
    // weights
    {"vocab", {AX_TENSOR}, 1},
    {"heads", {AX_TENSOR}, 1},
    {"q_heads", {AX_TENSOR}, 1},
    {"kv_heads", {AX_TENSOR}, 1},
    {"mlp", {AX_TENSOR}, 1},
    {"exp", {AX_EXPERT}, 1},
    {"embed", {AX_FSDP}, 1},           // MaxText: also expert; here non-expert weights are replicated over expert
    {"embed_no_exp", {AX_FSDP}, 1},
    {"q_lora", {AX_FSDP}, 1},
    {"kv_lora", {AX_FSDP}, 1},
    {"layers", {AX_STAGE}, 1},
    {"norm", {0}, 0},                  // MaxText: tensor; here norm scales are replicated
    {"kv", {0}, 0},
    {"kv_head_dim", {0}, 0},
};
#define NRULES ((int)(sizeof RULES / sizeof RULES[0]))

static const Rule *rule_of(const char *logical) {
    for (int i = 0; i < NRULES; i++)
        if (!strcmp(RULES[i].logical, logical)) return &RULES[i];
    die("internal: logical axis '%s' has no rule in base/partition.c", logical);
}

unsigned partition_named_axes(int ndim, const char *const *logical) {
    unsigned named = 0;
    for (int d = 0; d < ndim; d++) {
        const Rule *r = rule_of(logical[d]);
        for (int k = 0; k < r->naxes; k++) named |= AXIS_BIT(r->axes[k]);
    }
    return named;
}

PartSpec partition_spec(const Mesh *mesh, int ndim, const char *const *logical) {
    PartSpec p;
    memset(&p, 0, sizeof p);
    p.ndim = ndim;
    unsigned used = 0;
    for (int d = 0; d < ndim; d++) {
        p.pieces[d] = 1;
        const Rule *r = rule_of(logical[d]);
        for (int k = 0; k < r->naxes; k++) {
            MeshAxis a = r->axes[k];
            int size = mesh ? mesh->size[a] : 1;
            if (size == 1 || (used & AXIS_BIT(a))) continue;   // nothing to split, or taken
            p.axes[d] |= AXIS_BIT(a);
            p.pieces[d] *= size;
            used |= AXIS_BIT(a);
        }
    }
    return p;
}

// The axes that cut a weight's local shape: tensor and expert.
static const unsigned CUT_AXES = AXIS_BIT(AX_TENSOR) | AXIS_BIT(AX_EXPERT);

int partition_local_pieces(const Mesh *mesh, const PartSpec *p, int d) {
    int n = 1;
    for (int a = 0; a < MESH_NAXES; a++)
        if (p->axes[d] & CUT_AXES & AXIS_BIT(a)) n *= mesh->size[a];
    return n;
}

int partition_local_index(const Mesh *mesh, int dev, const PartSpec *p, int d) {
    return mesh_rank(mesh, dev, p->axes[d] & CUT_AXES);
}

const char *partition_describe(const PartSpec *p, char *buf, size_t cap) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, cap - at, "(");
    for (int d = 0; d < p->ndim && at < cap; d++) {
        if (d) at += (size_t)snprintf(buf + at, cap - at, ", ");
        if (!p->axes[d]) { at += (size_t)snprintf(buf + at, cap - at, "-"); continue; }
        int first = 1;
        for (int a = 0; a < MESH_NAXES && at < cap; a++)
            if (p->axes[d] & AXIS_BIT(a)) {
                at += (size_t)snprintf(buf + at, cap - at, "%s%s", first ? "" : "+", MESH_AXIS_NAMES[a]);
                first = 0;
            }
    }
    if (at < cap) snprintf(buf + at, cap - at, ")");
    return buf;
}

void partition_print_rules(void) {
    printf("logical axis rules (first match wins; mesh axes of size 1 are dropped):\n");
    for (int i = 0; i < NRULES; i++) {
        printf("  %-20s ->", RULES[i].logical);
        if (!RULES[i].naxes) printf(" (replicated)");
        for (int k = 0; k < RULES[i].naxes; k++) printf(" %s", MESH_AXIS_NAMES[RULES[i].axes[k]]);
        printf("\n");
    }
}
