// model/adafactor.c: opt_type=adafactor (see adafactor.h for the math and the sharding).
#include "model/adafactor.h"
#include "model/model.h"
#include "sharding/memory.h"
#include "sharding/collectives.h"
#include "common.h"

#define AF_MIN_DIM 128          // min_dim_size_to_factor
#define AF_DECAY_EXP 0.8f       // decay_rate: beta2 at update t is 1 - t^-0.8
#define AF_EPS 1e-30f           // eps, added to every g^2
#define AF_CLIP 1.0f            // clipping_threshold on each tensor's update RMS
#define AF_MIN_SCALE 1e-3f      // scale_by_param_block_rms's floor on RMS(param)

__extension__ typedef __int128 fx128;   // 64 fractional bits: sums of squares, exact
#define FX_SCALE 18446744073709551616.0 // 2^64

void adafactor_check(const Config *c) {
    if (c->opt_type != OPT_ADAFACTOR) return;
    if (c->ici_tensor_parallelism > 1 || c->ici_expert_parallelism > 1)
        die("opt_type=adafactor with ici_tensor_parallelism=%d ici_expert_parallelism=%d: the factored second "
            "moment needs each tensor's rows and columns whole, and tensor/expert pieces are not gathered for it "
            "here; use data, fsdp, context or pipeline parallelism", c->ici_tensor_parallelism,
            c->ici_expert_parallelism);
    if (c->shard_optimizer_over_data)
        die("opt_type=adafactor with shard_optimizer_over_data=true: adafactor's state is kept per tensor (row and "
            "column means), not as the flat per-weight pieces ZeRO-1 splits; use fsdp to shard it");
}

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

// One tensor as this device sees it: its whole shape and the part [k0, k1) of its
// elements (row-major) in this device's shard, at local offset `at` of the flat buffers.
typedef struct {
    const ParamSpec *sp;
    int unit;
    size_t k0, k1, at;
    int factored, drow, dcol;
    size_t R, C, lead;   // factored: rows (dim drow), columns (dim dcol), product of the other dims
} TensorPart;

static int tensor_part(const Model *m, int i, TensorPart *t) {
    const StateShard *s = &m->shard;
    const ParamSpec *sp = &m->specs[i];
    t->sp = sp;
    t->unit = model_unit_of(&m->cfg, sp->name);
    size_t g0 = shard_first(s, t->unit), g1 = g0 + shard_len(s, t->unit);
    size_t a = MM_MAX(g0, sp->offset), b = MM_MIN(g1, sp->offset + sp->size);
    if (a >= b) return 0;
    t->k0 = a - sp->offset;
    t->k1 = b - sp->offset;
    t->at = s->local_off[t->unit] + (a - g0);
    t->factored = adafactor_factored_dims(sp->gshape, sp->ndim, &t->drow, &t->dcol);
    t->R = t->factored ? (size_t)sp->gshape[t->drow] : 0;
    t->C = t->factored ? (size_t)sp->gshape[t->dcol] : 0;
    t->lead = t->factored ? sp->size / (t->R * t->C) : 0;
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

// Element k of a factored tensor: its leading index, row and column.
static void element_coords(const TensorPart *t, size_t k, size_t *lead, size_t *r, size_t *col) {
    const ParamSpec *sp = t->sp;
    size_t rest = k, coord[4];
    for (int d = sp->ndim - 1; d >= 0; d--) {
        coord[d] = rest % (size_t)sp->gshape[d];
        rest /= (size_t)sp->gshape[d];
    }
    size_t l = 0;
    for (int d = 0; d < sp->ndim; d++)
        if (d != t->drow && d != t->dcol) l = l * (size_t)sp->gshape[d] + coord[d];
    *lead = l;
    *r = coord[t->drow];
    *col = coord[t->dcol];
}

// The running row and column means of a factored tensor from its whole gradient g (the
// tensor's elements in row-major order): v_row = decay v_row + (1-decay) mean_col(g^2+eps),
// v_col likewise over rows. Sums in double, in element order: the same on every mesh.
static void factored_moments(const TensorPart *t, const float *g, float *state, float decay) {
    size_t R = t->R, C = t->C, L = t->lead, n = t->sp->size;
    double *rs = calloc(L * (R + C), sizeof(double)), *cs = rs + L * R;
    for (size_t k = 0; k < n; k++) {
        size_t l, r, col;
        element_coords(t, k, &l, &r, &col);
        float sq = g[k] * g[k] + AF_EPS;
        rs[l * R + r] += sq;
        cs[l * C + col] += sq;
    }
    float *vrow = state, *vcol = state + L * R;
    for (size_t j = 0; j < L * R; j++) vrow[j] = decay * vrow[j] + (1.0f - decay) * (float)(rs[j] / (double)C);
    for (size_t j = 0; j < L * C; j++) vcol[j] = decay * vcol[j] + (1.0f - decay) * (float)(cs[j] / (double)R);
    free(rs);
}

// Row factors (v_row / mean over rows of v_row)^-1/2 and column factors v_col^-1/2 into f.
static void factored_scales(const TensorPart *t, const float *state, float *f) {
    size_t R = t->R, C = t->C, L = t->lead;
    const float *vrow = state, *vcol = state + L * R;
    for (size_t l = 0; l < L; l++) {
        double s = 0.0;
        for (size_t r = 0; r < R; r++) s += vrow[l * R + r];
        float mean = (float)(s / (double)R);
        for (size_t r = 0; r < R; r++) f[l * R + r] = 1.0f / sqrtf(vrow[l * R + r] / mean);
    }
    for (size_t j = 0; j < L * C; j++) f[L * R + j] = 1.0f / sqrtf(vcol[j]);
}

typedef struct { fx128 u2, p2; int bad; } Sums;

static void add_square(fx128 *acc, float x, int *bad) {
    double sq = (double)x * x * FX_SCALE;   // exact: a float squared fits a double, times 2^64
    if (!(sq < 0x1p100)) { *bad = 1; return; }
    *acc += (fx128)sq;                       // truncated to the fixed-point grid
}

void adafactor_update(Model *m, float lr, int t) {
    const StateShard *s = &m->shard;
    int n = m->ntensors, dry = mem_dry();
    float decay = 1.0f - powf((float)t, -AF_DECAY_EXP);
    TensorPart *parts = calloc((size_t)n, sizeof(TensorPart));
    unsigned char *has = calloc((size_t)n, 1);
    size_t *soff = calloc((size_t)n, sizeof(size_t));
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        has[i] = (unsigned char)tensor_part(m, i, &parts[i]);
        soff[i] = at;
        if (has[i]) at += part_state(&parts[i]);
    }
    // 1. The factored tensors' row and column means, from their whole gradients (gathered
    //    over fsdp unit by unit: every fsdp device takes part in the same gathers).
    for (int u = 0; u < s->nunits; u++) {
        if (!s->here[u]) continue;
        int any = 0;
        for (int i = 0; i < n; i++) {
            int r, c;
            any |= model_unit_of(&m->cfg, m->specs[i].name) == u &&
                   adafactor_factored_dims(m->specs[i].gshape, m->specs[i].ndim, &r, &c);
        }
        if (!any) continue;
        const float *unit_g = m->grads_mem + s->local_off[u];   // (unit_pad) the unit's gradient, whole
        float *full = NULL;
        if (s->F > 1) {
            size_t len = shard_len(s, u);
            full = mem_floats(MEM_COMM, len * (size_t)s->F, "adafactor: unit gradient gathered");
            coll_all_gather(s->fsdp, m->grads_mem + s->local_off[u], full, sizeof(float) * len);
            unit_g = full;
        }
        for (int i = 0; i < n && !dry; i++)
            if (has[i] && parts[i].unit == u && parts[i].factored)
                factored_moments(&parts[i], unit_g + (m->specs[i].offset - s->unit_off[u]), m->v_mem + soff[i], decay);
        mem_free(full);
    }
    // 2. Each tensor's update for the elements held here, written over the gradient, and
    //    the squares of the update and of the parameter, in fixed point.
    Sums *mine = mem_alloc(MEM_COMM, sizeof(Sums) * (size_t)n, "adafactor: sums of squares");
    for (int i = 0; i < n; i++) {
        if (!has[i]) continue;
        TensorPart *tp = &parts[i];
        float *g = m->grads_mem + tp->at, *p = m->params_mem + tp->at, *st = m->v_mem + soff[i];
        size_t cnt = tp->k1 - tp->k0;
        float *f = tp->factored ? mem_floats(MEM_TEMP, part_state(tp), "adafactor: row and column factors") : NULL;
        if (!dry) {
            if (tp->factored) {
                factored_scales(tp, st, f);
                for (size_t j = 0; j < cnt; j++) {
                    size_t l, r, col;
                    element_coords(tp, tp->k0 + j, &l, &r, &col);
                    g[j] = g[j] * f[l * tp->R + r] * f[tp->lead * tp->R + l * tp->C + col];
                }
            } else {
                for (size_t j = 0; j < cnt; j++) {
                    st[j] = decay * st[j] + (1.0f - decay) * (g[j] * g[j] + AF_EPS);
                    g[j] = g[j] * (1.0f / sqrtf(st[j]));
                }
            }
            for (size_t j = 0; j < cnt; j++) {
                add_square(&mine[i].u2, g[j], &mine[i].bad);
                add_square(&mine[i].p2, p[j], &mine[i].bad);
            }
        }
        mem_free(f);
    }
    // 3. The sums over the fsdp devices (the data/context replicas hold the same ones).
    Sums *all = mine;
    if (s->F > 1) {
        all = mem_alloc(MEM_COMM, sizeof(Sums) * (size_t)n * (size_t)s->F, "adafactor: sums of every fsdp device");
        coll_all_gather(s->fsdp, mine, all, sizeof(Sums) * (size_t)n);
        for (int q = 1; q < s->F && !dry; q++)
            for (int i = 0; i < n; i++) {
                all[i].u2 += all[(size_t)q * n + i].u2;
                all[i].p2 += all[(size_t)q * n + i].p2;
                all[i].bad |= all[(size_t)q * n + i].bad;
            }
    }
    // 4. Clip each tensor's update to RMS 1, scale by lr and by the parameter's RMS, apply.
    for (int i = 0; i < n && !dry; i++) {
        if (!has[i]) continue;
        TensorPart *tp = &parts[i];
        double N = (double)tp->sp->size;
        float rms_u = (float)sqrt((double)all[i].u2 / FX_SCALE / N);
        float rms_p = (float)sqrt((double)all[i].p2 / FX_SCALE / N);
        if (all[i].bad) rms_u = rms_p = NAN;   // a non-finite update: the loss shows it
        float clip = fmaxf(1.0f, rms_u / AF_CLIP);
        float ps = rms_p <= AF_MIN_SCALE ? AF_MIN_SCALE : rms_p;
        float *g = m->grads_mem + tp->at, *p = m->params_mem + tp->at;
        for (size_t j = 0; j < tp->k1 - tp->k0; j++) {
            float u = g[j] / clip;   // clip_by_block_rms
            u = u * lr;              // scale_by_learning_rate
            u = u * ps;              // scale_by_param_block_rms
            p[j] = p[j] - u;         // scale(-1), apply_updates
        }
    }
    if (all != mine) mem_free(all);
    mem_free(mine);
    free(parts); free(has); free(soff);
}
