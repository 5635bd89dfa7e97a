// optim/adafactor.c: opt_type=adafactor (see adafactor.h for the math and the sharding).
#include "optim/adafactor.h"
#include "optim/tensor_box.h"
#include "model/model.h"
#include "base/memory.h"
#include "base/collectives.h"
#include "kernels/kernels.h"
#include "core/common.h"

#define AF_MIN_DIM 128          // min_dim_size_to_factor
#define AF_DECAY_EXP 0.8f       // decay_rate: beta2 at update t is 1 - t^-0.8
#define AF_EPS 1e-30f           // eps, added to every g^2
#define AF_CLIP 1.0f            // clipping_threshold on each tensor's update RMS
#define AF_MIN_SCALE 1e-3f      // scale_by_param_block_rms's floor on RMS(param)

int adafactor_factored_dims(const int *shape, int ndim, int *drow, int *dcol) {
    if (ndim < 2) return 0;
    // np.argsort of the shape (stable for so few dims): the last of the largest is dcol,
    // the last of the largest among the rest is drow.
    int c0 = 0;
    for (int d = 1; d < ndim; d++) if (shape[d] >= shape[c0]) c0 = d;
    int r0 = c0 == 0 ? 1 : 0;
    for (int d = 0; d < ndim; d++) if (d != c0 && shape[d] >= shape[r0]) r0 = d;
    if (shape[r0] < AF_MIN_DIM) return 0;
    *drow = r0;
    *dcol = c0;
    return 1;
}

// One tensor as this device sees it: its piece (the whole tensor unless tensor or expert
// parallelism cuts it) and the part [k0, k1) of the piece's elements (row-major in its local
// shape) in this device's shard, at local offset `at` of the flat buffers. A factored
// tensor's moments are kept for a box: the piece's indices along the lead dimensions, every
// row and every column.
typedef struct {
    const ParamSpec *sp;
    int unit;
    size_t k0, k1, at;
    size_t gsize;        // elements of the whole tensor
    int factored, drow, dcol;
    size_t R, C, lead;   // factored: rows (dim drow) and columns (dim dcol) whole, the piece's product of the other dims
    size_t Rl, Cl, r0, c0;   // the piece's rows [r0, r0 + Rl) and columns [c0, c0 + Cl)
    TensorBox box;       // factored: the piece with every row and column (box.cut: the axes to gather them over)
} TensorPart;

static int tensor_part(const Model *m, int i, TensorPart *t) {
    const StateShard *s = &m->shard;
    const ParamSpec *sp = &m->specs[i];
    memset(t, 0, sizeof *t);
    t->sp = sp;
    t->unit = model_unit_of(&m->cfg, sp->name);
    size_t g0 = shard_first(s, t->unit), off, n = shard_zero1_piece(s, shard_len(s, t->unit), &off);
    size_t a = MM_MAX(g0 + off, sp->offset), b = MM_MIN(g0 + off + n, sp->offset + sp->size);
    if (a >= b) return 0;
    t->k0 = a - sp->offset;
    t->k1 = b - sp->offset;
    t->at = s->local_off[t->unit] + (a - g0);
    t->gsize = 1;
    for (int d = 0; d < sp->ndim; d++) t->gsize *= (size_t)sp->gshape[d];
    t->factored = adafactor_factored_dims(sp->gshape, sp->ndim, &t->drow, &t->dcol);
    if (!t->factored) return 1;
    t->R = (size_t)sp->gshape[t->drow];
    t->C = (size_t)sp->gshape[t->dcol];
    t->Rl = (size_t)sp->shape[t->drow];
    t->Cl = (size_t)sp->shape[t->dcol];
    t->r0 = (size_t)sp->lindex[t->drow] * t->Rl;
    t->c0 = (size_t)sp->lindex[t->dcol] * t->Cl;
    t->lead = sp->size / (t->Rl * t->Cl);
    tensor_box_init(&t->box, sp, (1u << t->drow) | (1u << t->dcol));
    return 1;
}

// State floats of a tensor part: lead * (R + C) factored, one per element held otherwise.
static size_t part_state(const TensorPart *t) {
    return t->factored ? t->lead * (t->R + t->C) : t->k1 - t->k0;
}

size_t adafactor_state_floats(const Model *m) {
    size_t n = 0;
    TensorPart t;
    for (int i = 0; i < m->ntensors; i++)
        if (tensor_part(m, i, &t)) n += part_state(&t);
    return n;
}

int adafactor_slot(const Model *m, int i, AdafactorSlot *slot) {
    TensorPart t;
    size_t off = 0;
    for (int j = 0; j < i; j++)
        if (tensor_part(m, j, &t)) off += part_state(&t);
    if (!tensor_part(m, i, &t)) return 0;
    *slot = (AdafactorSlot){off, t.k0, t.k1, t.R, t.C, t.lead, t.factored, t.drow, t.dcol};
    return 1;
}

// Per tensor, the sums of squares of its update and of its parameter (kernels/optim.h),
// and whether a square was non-finite.
typedef struct { fixed128 u, p; int bad; } TensorSquares;

// Every tensor's part on this device (has[i] = 0: none) and where its state starts in v_mem.
typedef struct { int n; TensorPart *parts; unsigned char *has; size_t *soff; } Parts;

static Parts parts_of(const Model *m) {
    Parts ps = {m->ntensors, calloc((size_t)m->ntensors, sizeof(TensorPart)), calloc((size_t)m->ntensors, 1),
                calloc((size_t)m->ntensors, sizeof(size_t))};
    if (!ps.parts || !ps.has || !ps.soff) die("host out of memory (adafactor)");
    size_t at = 0;
    for (int i = 0; i < ps.n; i++) {
        ps.has[i] = (unsigned char)tensor_part(m, i, &ps.parts[i]);
        ps.soff[i] = at;
        if (ps.has[i]) at += part_state(&ps.parts[i]);
    }
    return ps;
}

// 1. The row and column means of unit u's factored tensors, from their boxes' gradients
//    (the unit gathered over fsdp: every fsdp device takes part in the same gathers; a
//    tensor's box over the axes that cut its rows or columns).
static void unit_moments(Model *m, const Parts *ps, int u, float decay) {
    const StateShard *s = &m->shard;
    int any = 0;
    for (int i = 0; i < ps->n; i++) {
        int r, c;
        any |= model_unit_of(&m->cfg, m->specs[i].name) == u &&
               adafactor_factored_dims(m->specs[i].gshape, m->specs[i].ndim, &r, &c);
    }
    if (!any) return;
    size_t len = shard_len(s, u), off, piece = shard_zero1_piece(s, len, &off);
    const float *shard_g = m->grads_mem + s->local_off[u], *unit_g = shard_g;   // (unit_pad) the unit's gradient, whole
    float *reduced = NULL, *full = NULL;
    if (s->Z > 1) {   // ZeRO-1: each data replica holds its piece of the shard reduced; the rest gathered
        reduced = mem_floats_uninit(MEM_COMM, len, "adafactor: the shard's gradient, every piece reduced");
        mem_copy(reduced + off, shard_g + off, sizeof(float) * piece);
        coll_all_gather(s->data, reduced + off, reduced, sizeof(float) * piece);
        unit_g = shard_g = reduced;
    }
    if (s->F > 1) {
        full = mem_floats(MEM_COMM, len * (size_t)s->F, "adafactor: unit gradient gathered");
        coll_all_gather(s->fsdp, shard_g, full, sizeof(float) * len);
        unit_g = full;
    }
    for (int i = 0; i < ps->n; i++) {
        const TensorPart *tp = &ps->parts[i];
        if (!ps->has[i] || tp->unit != u || !tp->factored) continue;
        const float *piece = unit_g + (tp->sp->offset - s->unit_off[u]);
        float *box = tp->box.cut ? tensor_box_gather(&tp->box, piece) : NULL;
        size_t LR = tp->lead * tp->R;
        double *sums = mem_alloc(MEM_TEMP, sizeof(double) * (LR + tp->lead * tp->C), "adafactor: row and column sums");
        float *vrow = m->v_mem + ps->soff[i];
        kern()->optim->adafactor_factored_moments(vrow, vrow + LR, sums, sums + LR, box ? box : piece, tp->box.shape,
                                                  tp->sp->ndim, tp->drow, tp->dcol, decay, AF_EPS);
        mem_free(sums);
        mem_free(box);
    }
    mem_free(full);
    mem_free(reduced);
}

// The factors of the piece's own rows and columns (lead * (Rl + Cl), MEM_TEMP, to free),
// cut from the box's f (lead * (R + C)).
static float *piece_factors(const TensorPart *tp, const float *f) {
    float *fl = mem_floats(MEM_TEMP, tp->lead * (tp->Rl + tp->Cl), "adafactor: the piece's row and column factors");
    for (size_t l = 0; l < tp->lead; l++) {
        mem_copy(fl + l * tp->Rl, f + l * tp->R + tp->r0, sizeof(float) * tp->Rl);
        mem_copy(fl + tp->lead * tp->Rl + l * tp->Cl, f + tp->lead * tp->R + l * tp->C + tp->c0, sizeof(float) * tp->Cl);
    }
    return fl;
}

// Whether this device adds tensor i's squares to the sums (sums_on_host adds them over
// fsdp, tensor and expert, and the data replicas under ZeRO-1): one device for each element,
// coordinate 0 along the tensor and expert axes that hold copies of the tensor (as the
// gradient norm, sharding/fsdp.c; data and context are not summed over, or hold pieces).
static int owns_squares(const ParamSpec *sp) {
    unsigned split = AXIS_BIT(AX_DATA) | AXIS_BIT(AX_CONTEXT);
    for (int d = 0; d < sp->ndim; d++) split |= sp->part.axes[d];
    return shard_first_copy(mesh_current(), mesh_device_id(), split);
}

// 2. Each tensor's update for the elements held here, written over the gradient, and the
//    squares of the update and of the parameter into mine (n).
static void scaled_updates(Model *m, const Parts *ps, float decay, TensorSquares *mine) {
    for (int i = 0; i < ps->n; i++) {
        if (!ps->has[i]) continue;
        const TensorPart *tp = &ps->parts[i];
        float *g = m->grads_mem + tp->at, *p = m->params_mem + tp->at, *st = m->v_mem + ps->soff[i];
        size_t cnt = tp->k1 - tp->k0;
        if (tp->factored) {
            float *f = mem_floats(MEM_TEMP, part_state(tp), "adafactor: row and column factors");
            kern()->optim->adafactor_factors(f, st, st + tp->lead * tp->R, tp->lead, tp->R, tp->C);
            float *fl = tp->box.cut ? piece_factors(tp, f) : NULL;
            kern()->optim->adafactor_scale_factored(g, fl ? fl : f, tp->k0, cnt, tp->sp->shape, tp->sp->ndim,
                                                    tp->drow, tp->dcol);
            mem_free(fl);
            mem_free(f);
        } else {
            kern()->optim->adafactor_scale_full(g, st, cnt, decay, AF_EPS);
        }
        if (!owns_squares(tp->sp)) continue;
        kern()->optim->squares_add(&mine[i].u, &mine[i].bad, g, cnt);
        kern()->optim->squares_add(&mine[i].p, &mine[i].bad, p, cnt);
    }
}

// 3. The sums over the fsdp, tensor and expert devices, and under ZeRO-1 the data replicas
//    (each updates its piece of the shard; otherwise they, like the context replicas, hold
//    the same sums), read back to the host, where each tensor's scales are decided: (n)
//    host entries, to free.
static TensorSquares *sums_on_host(TensorSquares *mine, int n, int zero1) {
    const Mesh *mesh = mesh_current();
    unsigned over = AXIS_BIT(AX_FSDP) | AXIS_BIT(AX_TENSOR) | AXIS_BIT(AX_EXPERT) | (zero1 ? AXIS_BIT(AX_DATA) : 0);
    int members = 1;
    for (int a = 0; mesh && a < MESH_NAXES; a++)
        if (over & AXIS_BIT(a)) members *= mesh->size[a];
    size_t all_n = (size_t)n * (size_t)members;
    TensorSquares *all = mine;
    if (members > 1) {
        all = mem_alloc(MEM_COMM, sizeof(TensorSquares) * all_n, "adafactor: sums of every fsdp, tensor and expert device");
        coll_all_gather(mesh_group(mesh, mesh_device_id(), over), mine, all, sizeof(TensorSquares) * (size_t)n);
    }
    TensorSquares *sq = malloc(sizeof(TensorSquares) * all_n);
    if (!sq) die("host out of memory (adafactor sums)");
    mem_download(sq, all, sizeof(TensorSquares) * all_n);
    if (all != mine) mem_free(all);
    for (int q = 1; q < members; q++)
        for (int i = 0; i < n; i++) {
            const TensorSquares *o = &sq[(size_t)q * n + i];
            sq[i].u += o->u;
            sq[i].p += o->p;
            sq[i].bad |= o->bad;
        }
    return sq;
}

void adafactor_update(Model *m, float lr, int t) {
    const StateShard *s = &m->shard;
    float decay = 1.0f - powf((float)t, -AF_DECAY_EXP);
    Parts ps = parts_of(m);
    for (int u = 0; u < s->nunits; u++)
        if (s->here[u]) unit_moments(m, &ps, u, decay);
    TensorSquares *mine = mem_alloc(MEM_COMM, sizeof(TensorSquares) * (size_t)ps.n, "adafactor: sums of squares");
    scaled_updates(m, &ps, decay, mine);
    TensorSquares *sq = sums_on_host(mine, ps.n, s->Z > 1);
    // 4. Clip each tensor's update to RMS 1, scale by lr and by the parameter's RMS, apply.
    for (int i = 0; i < ps.n; i++) {
        if (!ps.has[i]) continue;
        const TensorPart *tp = &ps.parts[i];
        double N = (double)tp->gsize;
        float rms_u = (float)sqrt((double)sq[i].u / SQUARES_SCALE / N);
        float rms_p = (float)sqrt((double)sq[i].p / SQUARES_SCALE / N);
        if (sq[i].bad) rms_u = rms_p = NAN;   // a non-finite update: the loss shows it
        float clip = fmaxf(1.0f, rms_u / AF_CLIP);
        float scale = rms_p <= AF_MIN_SCALE ? AF_MIN_SCALE : rms_p;
        kern()->optim->adafactor_apply(m->params_mem + tp->at, m->grads_mem + tp->at, tp->k1 - tp->k0, clip, lr, scale);
    }
    free(sq);
    mem_free(mine);
    free(ps.parts); free(ps.has); free(ps.soff);
}
