// optim/muon.c: opt_type=muon (see muon.h for the math, the dimension numbers and the
// sharding).
#include "optim/muon.h"
#include "optim/tensor_box.h"
#include "model/model.h"
#include "base/memory.h"
#include "base/collectives.h"
#include "kernels/kernels.h"
#include "core/common.h"
#include <string.h>

#define NS_STEPS 5
static const float NS_COEFFS[3] = {3.4445f, -4.7750f, 2.0315f};   // optax's (a, b, c)

// Whether one of the '/'-separated components of `name` is `part` (MaxText's test `x in path`).
static int has_part(const char *name, const char *part) {
    size_t n = strlen(part);
    for (const char *s = name; s;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && !strncmp(s, part, n)) return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

int muon_matrix_dims(const char *name, int ndim, int *nbatch, int *nred) {
    const char *adam[] = {"scale", "bias", "embedding", "logits_dense"};
    for (int i = 0; i < 4; i++)
        if (has_part(name, adam[i])) return 0;
    // MaxText's (reduction, output) axes, negative from the end: as muon_utils.transform_logic.
    int red[2] = {0, 0}, out[2] = {-1, 0}, nr = 1, no = 1;
    int expert = has_part(name, "wi_0") || has_part(name, "wi_1") || has_part(name, "wo");
    int qkv = has_part(name, "query") || has_part(name, "key") || has_part(name, "value") ||
              has_part(name, "wq_b") || has_part(name, "wkv_b");
    if (has_part(name, "MoeBlock_0") && expert) red[0] = -2;
    else if (has_part(name, "self_attention") && has_part(name, "out")) { red[1] = -2; nr = 2; }
    else if (has_part(name, "self_attention") && qkv) { out[0] = -2; out[1] = -1; no = 2; }
    // This layout puts them batch dims first, then the rows, then the columns.
    for (int k = 0; k < nr; k++) red[k] = (red[k] + ndim) % ndim;
    for (int k = 0; k < no; k++) out[k] = (out[k] + ndim) % ndim;
    int b = ndim - nr - no, ok = ndim >= 2 && b >= 0;
    for (int k = 0; ok && k < nr; k++) ok = red[k] == b + k;
    for (int k = 0; ok && k < no; k++) ok = out[k] == b + nr + k;
    if (!ok) die("internal: muon's dimension numbers for %s (%d dims) are not batch, rows, columns in order", name, ndim);
    *nbatch = b;
    *nred = nr;
    return 1;
}

// One tensor as this device sees it: the part [k0, k1) of its piece's elements that this
// device updates (in its shard; under ZeRO-1 in its data rank's piece of the shard), at
// local offset `at` of the parameters and gradients and `mo` of the first moments; a matrix
// (muon) or not; its nu at `nu` (not a matrix).
typedef struct {
    const ParamSpec *sp;
    int unit, has, matrix, nbatch, nred;
    size_t k0, k1, at, mo, nu;
} Part;

static Part *parts_of(const Model *m, size_t *nu_total) {
    const StateShard *s = &m->shard;
    Part *ps = calloc((size_t)m->ntensors, sizeof(Part));
    if (!ps) die("host out of memory (muon)");
    size_t nu = 0;
    for (int i = 0; i < m->ntensors; i++) {
        Part *t = &ps[i];
        t->sp = &m->specs[i];
        t->unit = model_unit_of(&m->cfg, t->sp->name);
        t->matrix = muon_matrix_dims(t->sp->name, t->sp->ndim, &t->nbatch, &t->nred);
        size_t g0 = shard_first(s, t->unit), off, n = shard_zero1_piece(s, shard_len(s, t->unit), &off);
        size_t a = MM_MAX(g0 + off, t->sp->offset), b = MM_MIN(g0 + off + n, t->sp->offset + t->sp->size);
        t->has = a < b;
        if (!t->has) continue;
        t->k0 = a - t->sp->offset;
        t->k1 = b - t->sp->offset;
        t->at = s->local_off[t->unit] + (a - g0);
        t->mo = s->local_off[t->unit] / (size_t)s->Z + (a - g0 - off);
        t->nu = nu;
        if (!t->matrix) nu += t->k1 - t->k0;
    }
    if (nu_total) *nu_total = nu;
    return ps;
}

size_t muon_nu_floats(const Model *m) {
    size_t n;
    free(parts_of(m, &n));
    return n;
}

int muon_nu_slot(const Model *m, int i, size_t *off, size_t *k0, size_t *k1) {
    Part *ps = parts_of(m, NULL);
    Part t = ps[i];
    free(ps);
    if (!t.has || t.matrix) return 0;
    *off = t.nu;
    *k0 = t.k0;
    *k1 = t.k1;
    return 1;
}

// X (fi, fo) /= its Frobenius norm + eps; the norm's squares added exactly (kernels/optim.h
// squares_add), so it is one number whatever adds them.
static void frobenius_divide(float *X, size_t n, float eps) {
    Squares *sq = mem_alloc(MEM_TEMP, sizeof(Squares), "muon: a matrix's sum of squares");
    kern()->optim->squares_add(&sq->sum, &sq->bad, X, n);
    Squares host;
    mem_download(&host, sq, sizeof host);
    mem_free(sq);
    float norm = host.bad ? NAN : (float)sqrt((double)host.sum / SQUARES_SCALE);
    kern()->optim->muon_divide(X, n, norm + eps);
}

// X (fi, fo) orthogonalized in place by optax's Newton-Schulz iteration. With more rows than
// columns the iteration runs on X^T; its products are taken with X transposed in place of a
// transposed copy (the same products, summed in the same order).
static void orthogonalize(float *X, size_t fi, size_t fo, float eps) {
    const MatmulKernels *mm = kern()->matmul;
    const OptimKernels *op = kern()->optim;
    int tr = fi > fo;
    size_t n = fi * fo, r = tr ? fo : fi, c = tr ? fi : fo;   // the matrix iterated on: (r, c), r <= c
    frobenius_divide(X, n, eps);
    float *A = mem_floats_uninit(MEM_TEMP, r * r, "muon: X X^T");
    float *S = mem_floats_uninit(MEM_TEMP, r * r, "muon: c A");
    float *B = mem_floats_uninit(MEM_TEMP, r * r, "muon: b A + (c A) A");
    float *Q = mem_floats_uninit(MEM_TEMP, n, "muon: B X");
    for (int step = 0; step < NS_STEPS; step++) {
        if (tr) mm->gemm(1, 0, (int)r, (int)r, (int)c, X, (int)fo, X, (int)fo, 0, A, (int)r);   // X^T X
        else mm->gemm(0, 1, (int)r, (int)r, (int)c, X, (int)fo, X, (int)fo, 0, A, (int)r);      // X X^T
        op->muon_axpy(S, NS_COEFFS[2], A, NULL, r * r);
        mm->gemm(0, 0, (int)r, (int)r, (int)r, S, (int)r, A, (int)r, 0, B, (int)r);
        op->muon_axpy(B, NS_COEFFS[1], A, B, r * r);
        if (tr) mm->gemm(0, 1, (int)fi, (int)fo, (int)fo, X, (int)fo, B, (int)fo, 0, Q, (int)fo);   // (B X^T)^T
        else mm->gemm(0, 0, (int)fi, (int)fo, (int)fi, B, (int)fi, X, (int)fo, 0, Q, (int)fo);     // B X
        op->muon_axpy(X, NS_COEFFS[0], X, Q, n);
    }
    mem_free(A); mem_free(S); mem_free(B); mem_free(Q);
}

// scale_by_shape: sqrt(max(1, fan_out / fan_in)), or sqrt(max(fan_in, fan_out)) times
// muon_consistent_rms; in float32, as JAX computes them.
static float shape_scale(const Config *c, size_t fi, size_t fo) {
    if (c->muon_consistent_rms > 0) return sqrtf((float)MM_MAX(fi, fo)) * c->muon_consistent_rms;
    return sqrtf((float)MM_MAX(1.0, (double)fo / (double)fi));
}

// One matrix tensor's update for the elements this device holds, from its Nesterov moment
// `piece` (the device's piece of it, whole): the box (every row and column, its batch
// indices) gathered, each batch index's matrix orthogonalized, the held elements applied.
static void matrix_update(Model *m, const Part *t, const float *piece, float lr) {
    const Config *c = &m->cfg;
    const ParamSpec *sp = t->sp;
    unsigned whole = 0;
    for (int d = t->nbatch; d < sp->ndim; d++) whole |= 1u << d;
    TensorBox b;
    tensor_box_init(&b, sp, whole);
    float *box = b.cut ? tensor_box_gather(&b, piece) : NULL;   // (orthogonalized in place: a copy either way)
    if (!box) {
        box = mem_floats_uninit(MEM_TEMP, b.size, "muon: a moment to orthogonalize");
        mem_copy(box, piece, sizeof(float) * b.size);
    }
    size_t fi = 1, fo = 1, batch = 1;
    for (int d = 0; d < sp->ndim; d++) {
        size_t n = (size_t)b.shape[d];
        if (d < t->nbatch) batch *= n;
        else if (d < t->nbatch + t->nred) fi *= n;
        else fo *= n;
    }
    for (size_t k = 0; k < batch; k++) orthogonalize(box + k * fi * fo, fi, fo, c->adam_eps);
    size_t cnt = t->k1 - t->k0;
    float *o = b.cut ? mem_floats_uninit(MEM_TEMP, cnt, "muon: the held part of the update") : box + t->k0;
    if (b.cut) tensor_box_take(&b, box, t->k0, t->k1, o);
    kern()->optim->muon_apply(m->params_mem + t->at, o, cnt, shape_scale(c, fi, fo), c->muon_weight_decay, lr);
    if (b.cut) mem_free(o);
    mem_free(box);
}

// Unit u's matrices: their moments updated for the held elements, the Nesterov moments
// gathered over the data replicas' pieces (ZeRO-1) and over fsdp (every fsdp device takes
// part), each matrix updated.
static void unit_matrices(Model *m, const Part *ps, int u, float lr, int t, GradClip clip) {
    const StateShard *s = &m->shard;
    int any = 0;
    for (int i = 0; i < m->ntensors; i++) any |= ps[i].unit == u && ps[i].matrix;
    if (!any) return;
    size_t len = shard_len(s, u), off, piece = shard_zero1_piece(s, len, &off);
    float *hat = mem_floats(MEM_TEMP, len, "muon: the unit's Nesterov moments");
    for (int i = 0; i < m->ntensors; i++) {
        const Part *p = &ps[i];
        if (p->unit != u || !p->has || !p->matrix) continue;
        kern()->optim->muon_moment(m->m_mem ? m->m_mem + p->mo : NULL, m->m16_mem ? m->m16_mem + p->mo : NULL,
                                   hat + (p->at - s->local_off[u]), m->grads_mem + p->at, p->k1 - p->k0,
                                   m->cfg.muon_beta, t, clip);
    }
    // ZeRO-1: each data replica made its piece's moments; in place, as optimizer.c's zero1_gather.
    if (s->Z > 1) coll_all_gather(s->data, hat + off, hat, sizeof(float) * piece);
    const float *unit_hat = hat;   // (unit_pad) the unit's moments, whole
    float *full = NULL;
    if (s->F > 1) {
        full = mem_floats(MEM_COMM, len * (size_t)s->F, "muon: the unit's moments gathered");
        coll_all_gather(s->fsdp, hat, full, sizeof(float) * len);
        unit_hat = full;
    }
    for (int i = 0; i < m->ntensors; i++) {
        const Part *p = &ps[i];
        if (p->unit == u && p->has && p->matrix) matrix_update(m, p, unit_hat + (p->sp->offset - s->unit_off[u]), lr);
    }
    mem_free(full);
    mem_free(hat);
}

void muon_update(Model *m, float lr, int t, GradClip clip) {
    const Config *c = &m->cfg;
    const StateShard *s = &m->shard;
    Part *ps = parts_of(m, NULL);
    // The AdamW half (optax.adamw with nesterov=True, muon's eps): tensor by tensor.
    AdamWParams h = {lr, t, c->adam_b1, c->adam_b2, c->adam_eps, c->adam_eps_root, c->adam_weight_decay, 1, 0};
    for (int i = 0; i < m->ntensors; i++) {
        const Part *p = &ps[i];
        if (p->has && !p->matrix)
            kern()->optim->adamw_update(m->params_mem + p->at, NULL, m->grads_mem + p->at,
                                        m->m_mem ? m->m_mem + p->mo : NULL, m->m16_mem ? m->m16_mem + p->mo : NULL,
                                        m->v_mem + p->nu, p->k1 - p->k0, h, clip);
    }
    for (int u = 0; u < s->nunits; u++)
        if (s->here[u]) unit_matrices(m, ps, u, lr, t, clip);
    free(ps);
}
