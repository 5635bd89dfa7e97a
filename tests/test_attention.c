// tests/test_attention.c: RoPE, grouped-query attention (Mixtral) and multi-head latent
// attention (DeepSeek, with and without the query low-rank path):
//   1. RoPE keeps pair norms, its backward undoes it, and a value at position 1 by hand;
//   2. causality: changing token j changes no output at tokens i < j (bit for bit);
//   3. forward equals a naive double-precision reference written from the definition
//      (full S x S scores, masked entries replaced by -0.7*FLT_MAX);
//   4. gradcheck of the input and of every weight, one tensor at a time;
//   5. nothing leaks: no activations or temporaries live after the backward pass;
//   6. a batch of 2 gives, row for row, the bits of each sequence run alone; and the
//      forward and backward give the same bits with 1 and 2 OpenMP threads;
//   7. context parallelism (base/context.h): the attention core run in parts (each
//      part's queries against all parts' keys, dK/dV summed over the parts along the tree)
//      gives one device's o, dq, dk, dv bit for bit; and both layers on a real mesh of 2
//      and 4 context devices (threads) give one device's output, dx and weight gradients.
// The cases use S = 6 with context_reduce_chunks = 2, so the gradient checks
// run through the chunked dK/dV sum (two query chunks of 3 rows).
#include "core/common.h"
#include "base/memory.h"
#include "base/config.h"
#include "model/params.h"
#include "model/attention.h"
#include "model/mla.h"
#include "model/rope.h"
#include "model/attn_core.h"
#include "base/mesh.h"
#include "base/collectives.h"
#include "tests/test.h"
#include "tests/gradcheck.h"
#include <float.h>
#include <omp.h>

#define D 12   // model width of every case

static Device dev;

static float *falloc(long n) {
    float *p = calloc((size_t)n, sizeof(float));
    if (!p) die("test: out of host memory");
    return p;
}

// ---------------------------------------------------------------------------------------
// A layer under test: GQA or MLA, its config, parameters, gradients and inputs.

typedef struct { char name[48]; float *p, *g; long n; } Tensor;

typedef struct {
    const char *name;
    Config c;
    LocalDims ld;    // one device: the Config's heads
    int mla, B, S;
    AttentionParams ap, ag;
    MLAParams mp, mg;
    AttentionSaved as;
    MLASaved ms;
    Tensor t[10];
    int nt;
    float *x, *dx;   // (B*S, D) input and its gradient (tensor 0)
    float *R;        // (B*S, D) fixed projection: loss = sum(out * R)
    float *out;      // (B*S, D)
} Case;

// Random tensor around `base` (weights: 0 +- scale; norm scales: 1 +- scale) and its grad.
static void add_tensor(Case *k, const char *name, float **p, float **g, long n, float base, float scale,
                       uint64_t *seed) {
    *p = falloc(n);
    *g = falloc(n);
    for (long i = 0; i < n; i++) (*p)[i] = base + scale * gc_uniform(seed);
    Tensor *t = &k->t[k->nt++];
    snprintf(t->name, sizeof t->name, "%s %s", k->name, name);
    t->p = *p; t->g = *g; t->n = n;
}

static void setup(Case *k, const char *name, int mla, int q_lora, int B, int S) {
    memset(k, 0, sizeof(*k));
    k->name = name; k->mla = mla; k->B = B; k->S = S;
    Config *c = &k->c;
    config_defaults(c);
    c->base_emb_dim = D;
    c->base_num_query_heads = 4;
    c->base_num_kv_heads = 2;
    c->head_dim = 6;
    c->max_target_length = S;
    c->context_reduce_chunks = 2;   // two query chunks, see the header
    c->per_device_batch_size = B;
    if (mla) {
        c->decoder_block = DECODER_DEEPSEEK;
        c->attention_type = ATTENTION_MLA;
        c->q_lora_rank = q_lora;
        c->kv_lora_rank = 8;
        c->qk_nope_head_dim = 4;
        c->qk_rope_head_dim = 4;
        c->v_head_dim = 6;
        c->normalization_layer_epsilon = 1e-6f;
        c->max_position_embeddings = c->original_max_position_embeddings;   // the scale without yarn's mscale
    }
    k->ld = local_dims(c, 1, 0);
    int N = c->base_num_query_heads, T = B * S;
    uint64_t seed = 1000 + 10 * mla + q_lora;
    add_tensor(k, "x", &k->x, &k->dx, (long)T * D, 0.0f, 1.0f, &seed);
    if (!mla) {
        int Nkv = c->base_num_kv_heads, Dh = c->head_dim;
        add_tensor(k, "wq", &k->ap.wq, &k->ag.wq, (long)D * N * Dh, 0.0f, 0.3f, &seed);
        add_tensor(k, "wk", &k->ap.wk, &k->ag.wk, (long)D * Nkv * Dh, 0.0f, 0.3f, &seed);
        add_tensor(k, "wv", &k->ap.wv, &k->ag.wv, (long)D * Nkv * Dh, 0.0f, 0.3f, &seed);
        add_tensor(k, "wo", &k->ap.wo, &k->ag.wo, (long)N * Dh * D, 0.0f, 0.3f, &seed);
    } else {
        int Q = q_lora, R = c->kv_lora_rank, Dn = c->qk_nope_head_dim, Dr = c->qk_rope_head_dim;
        int Dv = c->v_head_dim, Qk = Dn + Dr;
        MLAParams *p = &k->mp, *g = &k->mg;
        if (Q > 0) {
            add_tensor(k, "wq_a", &p->wq_a, &g->wq_a, (long)D * Q, 0.0f, 0.3f, &seed);
            add_tensor(k, "q_norm", &p->q_norm, &g->q_norm, Q, 1.0f, 0.3f, &seed);
            add_tensor(k, "wq_b", &p->wq_b, &g->wq_b, (long)Q * N * Qk, 0.0f, 0.3f, &seed);
        } else {
            add_tensor(k, "wq", &p->wq, &g->wq, (long)D * N * Qk, 0.0f, 0.3f, &seed);
        }
        add_tensor(k, "wkv_a", &p->wkv_a, &g->wkv_a, (long)D * (R + Dr), 0.0f, 0.3f, &seed);
        add_tensor(k, "kv_norm", &p->kv_norm, &g->kv_norm, R, 1.0f, 0.3f, &seed);
        add_tensor(k, "wkv_b", &p->wkv_b, &g->wkv_b, (long)R * N * (Dn + Dv), 0.0f, 0.3f, &seed);
        add_tensor(k, "wo", &p->wo, &g->wo, (long)N * Dv * D, 0.0f, 0.3f, &seed);
    }
    k->R = falloc((long)T * D);
    gc_fill(k->R, (long)T * D, &seed, 1.0f);
    k->out = falloc((long)T * D);
}

static void teardown(Case *k) {
    for (int i = 0; i < k->nt; i++) { free(k->t[i].p); free(k->t[i].g); }
    free(k->R);
    free(k->out);
}

// out (B*S, D) = layer(x) for B sequences; keep = 1 keeps the saved state for backward.
static void forward(Case *k, float *out, const float *x, int B, int keep) {
    if (k->mla) {
        mla_forward(&k->c, &k->ld, &k->mp, &k->ms, out, x, B, k->S);
        if (!keep) mla_saved_free(&k->ms);
    } else {
        attention_forward(&k->c, &k->ld, &k->ap, &k->as, out, x, B, k->S);
        if (!keep) attention_saved_free(&k->as);
    }
}

// Zero every gradient, then forward + backward of loss = sum(out * R).
static void forward_backward(Case *k) {
    for (int i = 0; i < k->nt; i++) memset(k->t[i].g, 0, sizeof(float) * k->t[i].n);
    forward(k, k->out, k->x, k->B, 1);
    if (k->mla) mla_backward(&k->c, &k->ld, &k->mp, &k->mg, &k->ms, k->dx, k->R, k->x, k->B, k->S);
    else attention_backward(&k->c, &k->ld, &k->ap, &k->ag, &k->as, k->dx, k->R, k->x, k->B, k->S);
}

static double loss_fn(void *ctx) {
    Case *k = ctx;
    forward(k, k->out, k->x, k->B, 0);
    return gc_dot(k->out, k->R, (long)k->B * k->S * D);
}

// ---------------------------------------------------------------------------------------
// The naive reference, in double, written straight from docs/model.md#gqa-attention.

static double *dalloc(long n) {
    double *p = calloc((size_t)n, sizeof(double));
    if (!p) die("test: out of host memory");
    return p;
}

// out (T,OC) = in (T,C) @ w (C,OC)
static void ref_matmul(double *out, const double *in, const float *w, int T, int C, int OC) {
    for (int t = 0; t < T; t++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += in[(size_t)t * C + i] * w[(size_t)i * OC + o];
            out[(size_t)t * OC + o] = s;
        }
}

// x (T,H,stride): rotate [0,Dr) of every head; token t sits at position t % S.
static void ref_rope(double *x, int T, int S, int H, int stride, int Dr, double lo, double hi) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Dr / 2; i++) {
                double th = (t % S) / (lo * pow(hi / lo, 2.0 * i / Dr));
                double *p = x + ((size_t)t * H + h) * stride;
                double a = p[i], b = p[i + Dr / 2];
                p[i] = a * cos(th) - b * sin(th);
                p[i + Dr / 2] = b * cos(th) + a * sin(th);
            }
}

static void ref_rmsnorm(double *out, const double *x, const float *scale, int T, int C, double eps) {
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[(size_t)t * C + i] * x[(size_t)t * C + i];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) out[(size_t)t * C + i] = x[(size_t)t * C + i] * r * scale[i];
    }
}

// o (B,S,N,Dv) from q (B,S,N,Dqk), k (B,S,Nkv,Dqk), v (B,S,Nkv,Dv): full S x S scores,
// masked ones replaced by -0.7*FLT_MAX, m = max, e = exp(s - m), o = (e @ v) / sum(e).
static void ref_core(double *o, const double *q, const double *k, const double *v,
                     int B, int S, int N, int Nkv, int Dqk, int Dv) {
    double *sc = dalloc(S);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++) {
            int g = h / (N / Nkv);
            for (int i = 0; i < S; i++) {
                double m = -INFINITY, l = 0;
                for (int j = 0; j < S; j++) {
                    double s = 0;
                    for (int d = 0; d < Dqk; d++)
                        s += q[(((size_t)b * S + i) * N + h) * Dqk + d] * k[(((size_t)b * S + j) * Nkv + g) * Dqk + d];
                    sc[j] = j <= i ? s : -0.7 * (double)FLT_MAX;
                    m = fmax(m, sc[j]);
                }
                double *oi = o + (((size_t)b * S + i) * N + h) * Dv;
                for (int d = 0; d < Dv; d++) oi[d] = 0;
                for (int j = 0; j < S; j++) {
                    double e = exp(sc[j] - m);
                    l += e;
                    for (int d = 0; d < Dv; d++) oi[d] += e * v[(((size_t)b * S + j) * Nkv + g) * Dv + d];
                }
                for (int d = 0; d < Dv; d++) oi[d] /= l;
            }
        }
    free(sc);
}

static void ref_forward(const Case *k, double *out) {
    const Config *c = &k->c;
    int B = k->B, S = k->S, T = B * S, N = c->base_num_query_heads;
    double lo = c->rope_min_timescale, hi = c->rope_max_timescale;
    double *x = dalloc(T * D);
    for (int i = 0; i < T * D; i++) x[i] = k->x[i];
    if (!k->mla) {
        int Nkv = c->base_num_kv_heads, Dh = c->head_dim;
        double *q = dalloc(T * N * Dh), *o = dalloc(T * N * Dh);
        double *kk = dalloc(T * Nkv * Dh), *v = dalloc(T * Nkv * Dh);
        ref_matmul(q, x, k->ap.wq, T, D, N * Dh);
        ref_matmul(kk, x, k->ap.wk, T, D, Nkv * Dh);
        ref_matmul(v, x, k->ap.wv, T, D, Nkv * Dh);
        ref_rope(q, T, S, N, Dh, Dh, lo, hi);
        ref_rope(kk, T, S, Nkv, Dh, Dh, lo, hi);
        ref_core(o, q, kk, v, B, S, N, Nkv, Dh, Dh);
        ref_matmul(out, o, k->ap.wo, T, N * Dh, D);
        free(q); free(kk); free(v); free(o);
    } else {
        const MLAParams *p = &k->mp;
        int Q = c->q_lora_rank, R = c->kv_lora_rank, Dn = c->qk_nope_head_dim, Dr = c->qk_rope_head_dim;
        int Dv = c->v_head_dim, Qk = Dn + Dr;
        double eps = c->normalization_layer_epsilon;
        double *q = dalloc(T * N * Qk), *kk = dalloc(T * N * Qk);
        double *v = dalloc(T * N * Dv), *o = dalloc(T * N * Dv);
        double *ckv = dalloc(T * (R + Dr)), *lat = dalloc(T * R);
        double *latn = dalloc(T * R), *kv = dalloc(T * N * (Dn + Dv));
        if (Q > 0) {
            double *qa = dalloc(T * Q), *qn = dalloc(T * Q);
            ref_matmul(qa, x, p->wq_a, T, D, Q);
            ref_rmsnorm(qn, qa, p->q_norm, T, Q, eps);
            ref_matmul(q, qn, p->wq_b, T, Q, N * Qk);
            free(qa); free(qn);
        } else {
            ref_matmul(q, x, p->wq, T, D, N * Qk);
        }
        ref_rope(q + Dn, T, S, N, Qk, Dr, lo, hi);
        for (int i = 0; i < T * N * Qk; i++) q[i] /= sqrt((double)Qk);
        ref_matmul(ckv, x, p->wkv_a, T, D, R + Dr);
        ref_rope(ckv + R, T, S, 1, R + Dr, Dr, lo, hi);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < R; i++) lat[t * R + i] = ckv[t * (R + Dr) + i];
        ref_rmsnorm(latn, lat, p->kv_norm, T, R, eps);
        ref_matmul(kv, latn, p->wkv_b, T, R, N * (Dn + Dv));
        for (int t = 0; t < T; t++)
            for (int h = 0; h < N; h++) {
                for (int d = 0; d < Dn; d++) kk[(t * N + h) * Qk + d] = kv[(t * N + h) * (Dn + Dv) + d];
                for (int d = 0; d < Dr; d++) kk[(t * N + h) * Qk + Dn + d] = ckv[t * (R + Dr) + R + d];
                for (int d = 0; d < Dv; d++) v[(t * N + h) * Dv + d] = kv[(t * N + h) * (Dn + Dv) + Dn + d];
            }
        ref_core(o, q, kk, v, B, S, N, N, Qk, Dv);
        ref_matmul(out, o, p->wo, T, N * Dv, D);
        free(q); free(kk); free(v); free(o); free(ckv); free(lat); free(latn); free(kv);
    }
    free(x);
}

// ---------------------------------------------------------------------------------------
// 1. RoPE

// A config with RoPE's keys: the default frequencies, timescales 1 .. max_ts.
static Config rope_config(float max_ts) {
    Config c;
    config_defaults(&c);
    c.rope_min_timescale = 1.0f;
    c.rope_max_timescale = max_ts;
    return c;
}

static void test_rope(void) {
    printf("rope\n");
    Config c4 = rope_config(10000.0f), c6 = rope_config(1e6f);
    enum { RB = 2, RS = 5, H = 3, STRIDE = 7, DR = 6 };   // entry 6 of each head is not rotated
    long n = (long)RB * RS * H * STRIDE;
    float *x = falloc(n), *y = falloc(n);
    uint64_t seed = 7;
    gc_fill(x, n, &seed, 1.0f);
    memcpy(y, x, sizeof(float) * n);
    rope_forward(&c4, y, RB, RS, 0, H, STRIDE, DR);
    double worst_norm = 0, worst_inv = 0;
    int untouched = 1;
    for (long hd = 0; hd < n / STRIDE; hd++) {
        const float *a = x + hd * STRIDE, *b = y + hd * STRIDE;
        for (int i = 0; i < DR / 2; i++) {
            double na = hypot(a[i], a[i + DR / 2]), nb = hypot(b[i], b[i + DR / 2]);
            worst_norm = max_keep_nan(worst_norm, fabs(na - nb) / fmax(na, 1e-30));
        }
        untouched &= a[DR] == b[DR];
    }
    rope_backward(&c4, y, RB, RS, 0, H, STRIDE, DR);
    for (long i = 0; i < n; i++) worst_inv = max_keep_nan(worst_inv, fabs(y[i] - x[i]));
    printf("  pair norm rel change %.2e, backward(forward(x)) - x max %.2e\n", worst_norm, worst_inv);
    CHECK(worst_norm <= 1e-6, "rope changes a pair's norm by %.3e", worst_norm);
    CHECK(worst_inv <= 1e-6, "rope_backward(rope_forward(x)) differs from x by %.3e", worst_inv);
    CHECK(untouched, "rope touched an entry beyond Dr");
    free(x); free(y);

    // By hand: Dr = 4, timescales 1 and 10000^(2/4) = 100; at position 1 the angles are 1
    // and 0.01. Position 0 is the identity.
    float h[2 * 4] = {1, 2, 3, 4, 1, 2, 3, 4};   // (B=1, S=2, H=1, 4)
    rope_forward(&c4, h, 1, 2, 0, 1, 4, 4);
    double want[4] = {1 * cos(1.0) - 3 * sin(1.0), 2 * cos(0.01) - 4 * sin(0.01),
                      3 * cos(1.0) + 1 * sin(1.0), 4 * cos(0.01) + 2 * sin(0.01)};
    CHECK(h[0] == 1 && h[1] == 2 && h[2] == 3 && h[3] == 4, "rope at position 0 is not the identity");
    for (int i = 0; i < 4; i++) CHECK_CLOSE(h[4 + i], want[i], 1e-6, "rope at position 1");
    // A part of the sequence (context parallelism) starting at position 5 gets the rotation
    // of positions 5, 6, 7 of the whole sequence, bit for bit.
    float whole[8 * 6], part[3 * 6];
    uint64_t s2 = 3;
    gc_fill(whole, 8 * 6, &s2, 1.0f);
    memcpy(part, whole + 5 * 6, sizeof part);
    rope_forward(&c6, whole, 1, 8, 0, 1, 6, 6);
    rope_forward(&c6, part, 1, 3, 5, 1, 6, 6);
    CHECK(memcmp(part, whole + 5 * 6, sizeof part) == 0, "rope of positions 5.. differs from the whole sequence's");
}

// rope_type=yarn: the frequencies against the formula worked by hand, and the interleaved
// rotation: pair (x[2i], x[2i+1]) lands in the halves, its backward puts it back.
static void test_rope_yarn(void) {
    printf("rope, yarn\n");
    Config c = rope_config(10000.0f);
    c.rope_type = ROPE_YARN;
    c.original_max_position_embeddings = 1024;
    c.rope_factor = 4.0f;
    c.beta_fast = 32.0f;
    c.beta_slow = 1.0f;
    // Dr = 16, theta 10000: the correction range is 16 ln(1024 / (r 2 pi)) / (2 ln 10000)
    // for r = 32 and 1, 1.41 and 4.42, rounded out to [1, 5]: dimension 0 and 1 keep their
    // frequency, 5 and above are divided by 4, 2..4 are mixed with ramp (i - 1) / 4.
    float f[8];
    rope_yarn_freqs(&c, f, 16);
    for (int i = 0; i < 8; i++) {
        double base = pow(10000.0, -2.0 * i / 16), ramp = fmin(fmax((i - 1) / 4.0, 0.0), 1.0);
        CHECK(fabs(f[i] - (base / 4 * ramp + base * (1 - ramp))) <= 1e-6 * base, "yarn frequency %d: %.9g", i, f[i]);
    }
    // The interleaved rotation at position 1: pair i = (x[2i], x[2i+1]) by the angle f[i],
    // written to (out[i], out[4 + i]) of the 8 rotated entries; entry 8 not touched.
    enum { STRIDE = 9, DR = 8 };
    float x[2 * STRIDE], y[2 * STRIDE];   // (B=1, S=2, H=1, STRIDE)
    uint64_t seed = 11;
    gc_fill(x, 2 * STRIDE, &seed, 1.0f);
    memcpy(y, x, sizeof x);
    c.rope_interleave = 1;
    rope_forward(&c, y, 1, 2, 0, 1, STRIDE, DR);
    rope_yarn_freqs(&c, f, DR);
    const float *x1 = x + STRIDE, *y1 = y + STRIDE;
    for (int i = 0; i < DR / 2; i++) {
        double a = x1[2 * i], b = x1[2 * i + 1], t = f[i];
        CHECK(fabs(y1[i] - (a * cos(t) - b * sin(t))) <= 1e-6, "yarn interleaved rotation, pair %d, first", i);
        CHECK(fabs(y1[DR / 2 + i] - (b * cos(t) + a * sin(t))) <= 1e-6, "yarn interleaved rotation, pair %d, second", i);
        CHECK(y[i] == x[2 * i] && y[DR / 2 + i] == x[2 * i + 1], "yarn at position 0 moves pair %d unrotated", i);
    }
    CHECK(y1[DR] == x1[DR] && y[DR] == x[DR], "yarn touched an entry beyond Dr");
    rope_backward(&c, y, 1, 2, 0, 1, STRIDE, DR);
    double worst = 0;
    for (int i = 0; i < 2 * STRIDE; i++) worst = max_keep_nan(worst, fabs(y[i] - x[i]));
    printf("  backward(forward(x)) - x max %.2e (interleaved)\n", worst);
    CHECK(worst <= 1e-6, "yarn rope_backward(rope_forward(x)) differs from x by %.3e", worst);
}

// ---------------------------------------------------------------------------------------
// 2-6 for one case.

static void test_case(const char *name, int mla, int q_lora) {
    printf("%s\n", name);
    Case k;
    setup(&k, name, mla, q_lora, 2, 6);
    int B = k.B, S = k.S, T = B * S;
    size_t row = sizeof(float) * D;
    float *out0 = falloc((long)T * D), *out1 = falloc((long)T * D), *xs = falloc((long)T * D);

    // 3. against the double reference.
    double *ref = dalloc(T * D);
    forward(&k, out0, k.x, B, 0);
    ref_forward(&k, ref);
    double diff = 0, mag = 0;
    for (int i = 0; i < T * D; i++) { diff = max_keep_nan(diff, fabs(out0[i] - ref[i])); mag = fmax(mag, fabs(ref[i])); }
    printf("  forward vs double reference: max abs diff %.2e (max |out| %.2f)\n", diff, mag);
    CHECK(diff <= 1e-5, "%s forward differs from the reference by %.3e", name, diff);
    free(ref);

    // 2. causality: perturb token j of sequence b; rows i < j of b and every row of the
    // other sequence must keep their bits, row j must change.
    int causal = 1, moved = 1;
    for (int b = 0; b < B; b++)
        for (int j = 1; j < S; j++) {
            memcpy(xs, k.x, sizeof(float) * T * D);
            for (int d = 0; d < D; d++) xs[((size_t)b * S + j) * D + d] += 0.5f;
            forward(&k, out1, xs, B, 0);
            for (int bb = 0; bb < B; bb++)
                for (int i = 0; i < S; i++) {
                    size_t r = ((size_t)bb * S + i) * D;
                    int same = memcmp(out0 + r, out1 + r, row) == 0;
                    if (bb != b || i < j) causal &= same;
                    if (bb == b && i == j) moved &= !same;
                }
        }
    CHECK(causal, "%s: changing a later token changed an earlier output", name);
    CHECK(moved, "%s: changing token j did not change output j", name);

    // 6a. per-row results do not depend on the batch size.
    int batch_same = 1;
    for (int b = 0; b < B; b++) {
        forward(&k, out1, k.x + (size_t)b * S * D, 1, 0);
        batch_same &= memcmp(out1, out0 + (size_t)b * S * D, row * S) == 0;
    }
    CHECK(batch_same, "%s: forward of B=2 differs from each sequence alone", name);
    // ... and neither do the input gradients of the backward pass (weight gradients do:
    // they are sums over the batch).
    forward_backward(&k);
    memcpy(xs, k.dx, sizeof(float) * T * D);   // dx of the batch of 2
    Case one = k;                              // the same layer, pointed at one sequence
    one.B = 1;
    for (int b = 0; b < B; b++) {
        one.x = k.x + (size_t)b * S * D;
        one.dx = k.dx + (size_t)b * S * D;
        one.R = k.R + (size_t)b * S * D;
        one.out = k.out + (size_t)b * S * D;
        forward_backward(&one);   // zeroes all of k.dx, then writes sequence b's rows
        batch_same &= memcmp(one.dx, xs + (size_t)b * S * D, row * S) == 0;
    }
    CHECK(batch_same, "%s: dx of B=2 differs from each sequence alone", name);
    CHECK(dev.live[MEM_ACTIVATIONS] == 0 && dev.live[MEM_TEMP] == 0, "%s: forward-only leaks", name);

    // 4. gradcheck of every tensor; 5. nothing left live after the backward pass.
    forward_backward(&k);
    CHECK(dev.live[MEM_ACTIVATIONS] == 0 && dev.live[MEM_TEMP] == 0,
          "%s: live after backward: activations %zu B, temp %zu B", name, dev.live[MEM_ACTIVATIONS],
          dev.live[MEM_TEMP]);
    for (int i = 0; i < k.nt; i++) gradcheck(k.t[i].name, k.t[i].p, k.t[i].n, k.t[i].g, loss_fn, &k, 1e-2, 2e-2);

    free(out0); free(out1); free(xs);
    teardown(&k);
}

// 6b. Same bits with 1 and 2 threads, on a size where the OpenMP loops do run in parallel.
static void test_threads(const char *name, int mla, int q_lora) {
    Case k;
    setup(&k, name, mla, q_lora, 2, 64);
    long T = (long)k.B * k.S;
    float *out = falloc(T * D), *grads[10];
    omp_set_num_threads(1);
    forward_backward(&k);
    memcpy(out, k.out, sizeof(float) * T * D);
    for (int i = 0; i < k.nt; i++) {
        grads[i] = falloc(k.t[i].n);
        memcpy(grads[i], k.t[i].g, sizeof(float) * k.t[i].n);
    }
    omp_set_num_threads(2);
    forward_backward(&k);
    int same = memcmp(out, k.out, sizeof(float) * T * D) == 0;
    for (int i = 0; i < k.nt; i++) {
        same &= memcmp(grads[i], k.t[i].g, sizeof(float) * k.t[i].n) == 0;
        free(grads[i]);
    }
    printf("%s, S=64: output and all gradients with 1 vs 2 threads: %s\n", name, same ? "identical" : "DIFFER");
    CHECK(same, "%s: results depend on the thread count", name);
    free(out);
    teardown(&k);
}

// ---------------------------------------------------------------------------------------
// 7. Context parallelism.

// (B,S,H,d) rows of positions [p*Sl, (p+1)*Sl) of every sequence <-> part p (B,Sl,H,d).
static void take_rows(float *part, const float *whole, int B, int S, int Sl, int p, long row) {
    for (int b = 0; b < B; b++)
        memcpy(part + (size_t)b * Sl * row, whole + ((size_t)b * S + (size_t)p * Sl) * row, sizeof(float) * Sl * row);
}
static int same_rows(const float *part, const float *whole, int B, int S, int Sl, int p, long row) {
    int same = 1;
    for (int b = 0; b < B; b++)
        same &= memcmp(part + (size_t)b * Sl * row, whole + ((size_t)b * S + (size_t)p * Sl) * row, sizeof(float) * Sl * row) == 0;
    return same;
}

// The core alone: one device (its rows cut into C = 4 query chunks for dK/dV) against
// P = 2 and 4 parts, each part's queries against every part's keys; dK and dV of part p
// are the tree over the parts' contributions (what the reduce-scatter adds).
static void test_core_parts(const char *name, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    enum { CB = 2, CS = 8, CHUNKS = 4 };
    int chunk = CS / CHUNKS;
    long nq = (long)CB * CS * N, nk = (long)CB * CS * Nkv;
    float *q = falloc(nq * Dqk), *k = falloc(nk * Dqk), *v = falloc(nk * Dv), *dout = falloc(nq * Dv);
    float *o = falloc(nq * Dv), *st = falloc(nq * 2), *dq = falloc(nq * Dqk), *dk = falloc(nk * Dqk), *dv = falloc(nk * Dv);
    uint64_t seed = 77;
    gc_fill(q, nq * Dqk, &seed, 1.0f); gc_fill(k, nk * Dqk, &seed, 1.0f);
    gc_fill(v, nk * Dv, &seed, 1.0f); gc_fill(dout, nq * Dv, &seed, 1.0f);
    attn_core_forward(o, st, q, k, v, NULL, CB, CS, 0, N, Nkv, Dqk, Dv, rnd);
    attn_core_backward(dq, dk, dv, dout, q, k, v, o, st, NULL, CB, CS, 0, 1, chunk, N, Nkv, Dqk, Dv, rnd);
    for (int P = 2; P <= 4; P *= 2) {
        int Sl = CS / P;
        long pq = (long)CB * Sl * N, pk = (long)CB * Sl * Nkv;   // rows of one part
        float *kp = falloc(P * pk * Dqk), *vp = falloc(P * pk * Dv);   // (P,B,Sl,Nkv,.)
        float *dkp = falloc((long)P * P * pk * Dqk), *dvp = falloc((long)P * P * pk * Dv);   // per device
        for (int p = 0; p < P; p++) {
            take_rows(kp + p * pk * Dqk, k, CB, CS, Sl, p, (long)Nkv * Dqk);
            take_rows(vp + p * pk * Dv, v, CB, CS, Sl, p, (long)Nkv * Dv);
        }
        int fwd = 1, dqs = 1, dks = 1;
        float *qr = falloc(pq * Dqk), *dor = falloc(pq * Dv), *or = falloc(pq * Dv), *sr = falloc(pq * 2), *dqr = falloc(pq * Dqk);
        for (int r = 0; r < P; r++) {   // device r: queries at positions r*Sl ..
            take_rows(qr, q, CB, CS, Sl, r, (long)N * Dqk);
            take_rows(dor, dout, CB, CS, Sl, r, (long)N * Dv);
            attn_core_forward(or, sr, qr, kp, vp, NULL, CB, Sl, r * Sl, N, Nkv, Dqk, Dv, rnd);
            fwd &= same_rows(or, o, CB, CS, Sl, r, (long)N * Dv);
            attn_core_backward(dqr, dkp + (long)r * P * pk * Dqk, dvp + (long)r * P * pk * Dv, dor, qr, kp, vp, or, sr,
                               NULL, CB, Sl, r * Sl, P, chunk, N, Nkv, Dqk, Dv, rnd);
            dqs &= same_rows(dqr, dq, CB, CS, Sl, r, (long)N * Dqk);
        }
        // Part p's dK, dV: device r's piece p, added over r along the tree.
        float *stage = falloc(P * pk * (Dqk > Dv ? Dqk : Dv));
        for (int p = 0; p < P; p++) {
            for (int r = 0; r < P; r++) memcpy(stage + r * pk * Dqk, dkp + ((long)r * P + p) * pk * Dqk, sizeof(float) * pk * Dqk);
            tree_reduce_inplace(stage, P, (size_t)pk * Dqk);
            dks &= same_rows(stage, dk, CB, CS, Sl, p, (long)Nkv * Dqk);
            for (int r = 0; r < P; r++) memcpy(stage + r * pk * Dv, dvp + ((long)r * P + p) * pk * Dv, sizeof(float) * pk * Dv);
            tree_reduce_inplace(stage, P, (size_t)pk * Dv);
            dks &= same_rows(stage, dv, CB, CS, Sl, p, (long)Nkv * Dv);
        }
        printf("%s core in %d parts (4 query chunks): o %s, dq %s, dk and dv %s\n", name, P, fwd ? "identical" : "DIFFER",
               dqs ? "identical" : "DIFFER", dks ? "identical" : "DIFFER");
        CHECK(fwd && dqs && dks, "%s: the attention core in %d parts differs from one device", name, P);
        free(kp); free(vp); free(dkp); free(dvp); free(qr); free(dor); free(or); free(sr); free(dqr); free(stage);
    }
    free(q); free(k); free(v); free(dout); free(o); free(st); free(dq); free(dk); free(dv);
}

// The layer on a real mesh of P context devices (threads): device r gets positions
// [r*S/P, (r+1)*S/P) of both sequences; its output and dx rows and, added over the devices
// along the tree, its weight gradients must equal one device's.
typedef struct {
    Case *k;
    int P;
    float *out, *dx;      // (B,S,D) assembled from the devices' rows
    float *g[4][10];      // per device, per tensor (tensor 0, x, unused)
} CpRun;

// p's float* fields that point at one of k's gradient buffers are re-pointed at dev's own.
static void repoint(float **fields, int nfields, const Case *k, float **dev_g) {
    for (int f = 0; f < nfields; f++)
        for (int i = 1; i < k->nt; i++)
            if (fields[f] && fields[f] == k->t[i].g) fields[f] = dev_g[i];
}

static void cp_device(int dev, void *arg) {
    CpRun *run = arg;
    Case *k = run->k;
    int B = k->B, S = k->S, P = run->P, Sl = S / P;
    long n = (long)B * Sl * D;
    float *x = falloc(n), *R = falloc(n), *out = falloc(n), *dx = falloc(n);
    take_rows(x, k->x, B, S, Sl, dev, D);
    take_rows(R, k->R, B, S, Sl, dev, D);
    for (int i = 1; i < k->nt; i++) run->g[dev][i] = falloc(k->t[i].n);
    if (k->mla) {
        MLAParams g = k->mg;
        MLASaved s;
        repoint((float **)&g, (int)(sizeof g / sizeof(float *)), k, run->g[dev]);
        mla_forward(&k->c, &k->ld, &k->mp, &s, out, x, B, Sl);
        mla_backward(&k->c, &k->ld, &k->mp, &g, &s, dx, R, x, B, Sl);
    } else {
        AttentionParams g = k->ag;
        AttentionSaved s;
        repoint((float **)&g, (int)(sizeof g / sizeof(float *)), k, run->g[dev]);
        attention_forward(&k->c, &k->ld, &k->ap, &s, out, x, B, Sl);
        attention_backward(&k->c, &k->ld, &k->ap, &g, &s, dx, R, x, B, Sl);
    }
    for (int b = 0; b < B; b++) {   // this device's rows into the assembled arrays
        memcpy(run->out + ((size_t)b * S + (size_t)dev * Sl) * D, out + (size_t)b * Sl * D, sizeof(float) * Sl * D);
        memcpy(run->dx + ((size_t)b * S + (size_t)dev * Sl) * D, dx + (size_t)b * Sl * D, sizeof(float) * Sl * D);
    }
    free(x); free(R); free(out); free(dx);
}

static void test_layer_mesh(const char *name, int mla, int q_lora) {
    Case k;
    setup(&k, name, mla, q_lora, 2, 8);
    k.c.context_reduce_chunks = 4;   // chunks of 2 positions: 2 per device on P = 2, 1 on P = 4
    forward_backward(&k);            // one device: k.out, k.dx, k.t[i].g
    long T = (long)k.B * k.S;
    for (int P = 2; P <= 4; P *= 2) {
        Config mc = k.c;
        mc.ici_context_parallelism = P;
        Mesh mesh;
        mesh_init(&mesh, &mc);
        CpRun run = {&k, P, falloc(T * D), falloc(T * D), {{0}}};
        mesh_run(&mesh, cp_device, &run);
        mesh_set_current(NULL, 0);   // back to no mesh on this thread
        mem_set_device(&dev);
        int same = memcmp(run.out, k.out, sizeof(float) * T * D) == 0 && memcmp(run.dx, k.dx, sizeof(float) * T * D) == 0;
        int gsame = 1, leak = 0;
        size_t comm = 0;
        for (int i = 1; i < k.nt; i++) {
            float *stage = falloc((long)P * k.t[i].n);
            for (int r = 0; r < P; r++) memcpy(stage + (size_t)r * k.t[i].n, run.g[r][i], sizeof(float) * k.t[i].n);
            tree_reduce_inplace(stage, P, (size_t)k.t[i].n);   // the all-reduce over context
            gsame &= memcmp(stage, k.t[i].g, sizeof(float) * k.t[i].n) == 0;
            free(stage);
            for (int r = 0; r < P; r++) free(run.g[r][i]);
        }
        for (int r = 0; r < P; r++) {
            leak |= mesh.devices[r].live_total != 0;
            comm += mesh.devices[r].comm_recv[COLL_ALL_GATHER] + mesh.devices[r].comm_recv[COLL_REDUCE_SCATTER];
        }
        printf("%s on %d context devices: output and dx %s, weight gradients %s (%zu bytes received)\n", name, P,
               same ? "identical" : "DIFFER", gsame ? "identical" : "DIFFER", comm);
        CHECK(same && gsame, "%s: context=%d differs from one device", name, P);
        CHECK(!leak && comm > 0, "%s: context=%d leaked device memory or moved no K/V", name, P);
        free(run.out); free(run.dx);
        mesh_free(&mesh);
    }
    teardown(&k);
}

int main(void) {
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    test_rope();
    test_rope_yarn();
    test_case("gqa", 0, 0);
    test_case("mla q_lora=0", 1, 0);
    test_case("mla q_lora=6", 1, 6);
    test_threads("gqa", 0, 0);
    test_threads("mla q_lora=6", 1, 6);
    test_core_parts("gqa", 4, 2, 6, 6, (AttnRounding){0, 0, 0});
    test_core_parts("mla", 4, 4, 8, 6, (AttnRounding){0, 0, 0});
    test_core_parts("gqa bf16 rounding", 4, 2, 6, 6, (AttnRounding){1, 1, 1});
    test_layer_mesh("gqa", 0, 0);
    test_layer_mesh("mla q_lora=6", 1, 6);
    CHECK(dev.live[MEM_ACTIVATIONS] == 0 && dev.live[MEM_TEMP] == 0, "leak at the end");
    TEST_SUMMARY();
}
