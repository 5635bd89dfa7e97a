// model/optimizer.c: schedule, clipping, AdamW, and the routing-bias update.
#include "model/optimizer.h"
#include "sharding/memory.h"
#include "common.h"

float lr_schedule(const Config *c, int step) {
    float lr = c->learning_rate;
    int warmup = (int)(c->warmup_steps_fraction * c->steps);
    if (step < warmup) return lr * (float)step / (float)warmup;   // optax.linear_schedule from 0
    int n = c->steps - warmup, k = step - warmup;
    float pct = n > 1 ? (float)k / (float)(n - 1) : 0.0f;
    if (pct > 1.0f) pct = 1.0f;
    float a = 0.5f * (cosf((float)M_PI * pct) + 1.0f);
    return lr * a + c->cosine_learning_rate_final_fraction * lr * (1.0f - a);
}

float grad_global_norm(const float *g, size_t n) {
    if (mem_dry()) return 0.0f;   // dry run (sharding/memory.h)
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    return (float)sqrt(ss);
}

void grad_clip(float *g, size_t n, float norm, float threshold) {
    if (mem_dry()) return;   // dry run: nothing to compute (sharding/memory.h)
    if (threshold <= 0.0f || norm < threshold) return;
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) g[i] = (g[i] / norm) * threshold;   // optax's order of operations
}

void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, int t, const Config *c) {
    if (mem_dry()) return;   // dry run: nothing to compute (sharding/memory.h)
    float b1 = c->adam_b1, b2 = c->adam_b2, eps = c->adam_eps, wd = c->adam_weight_decay;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    // Element by element, so vector instructions (IEEE division and square root, exactly
    // rounded like the scalar ones) give the scalar loop's bits; the Makefile builds this
    // file with -fno-math-errno so that sqrtf needs no errno branch (its argument is >= 0).
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        m[i] = (1.0f - b1) * g[i] + b1 * m[i];
        v[i] = (1.0f - b2) * (g[i] * g[i]) + b2 * v[i];
        float mhat = m[i] / c1, vhat = v[i] / c2;
        float u = mhat / (sqrtf(vhat) + eps);   // scale_by_adam
        u = u + wd * p[i];                      // add_decayed_weights
        p[i] = p[i] + (-lr) * u;                // scale_by_learning_rate, apply_updates
    }
}

int optimizer_state_floats(const Config *c) {
    if (c->opt_type == OPT_ADAMW) return 2;
    if (c->opt_type == OPT_SGD) return 0;   // no state: that is what it saves
    if (c->opt_type == OPT_ADAFACTOR) return 1;   // at most one: per tensor (model/adafactor.h)
    die("internal: opt_type %d has no state size", (int)c->opt_type);
}

void optimizer_update(float *p, const float *g, float *m, float *v, size_t n, float lr, int t, const Config *c) {
    if (optimizer_state_floats(c) == 2) { adamw_update(p, g, m, v, n, lr, t, c); return; }
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) p[i] = p[i] + (-lr) * g[i];   // scale_by_learning_rate, apply_updates
}

void router_bias_update(float *bias, const long *counts, long tokens, int E, int K, float rate) {
    float target = (float)tokens * K / E;   // the count every expert would get if balanced
    for (int e = 0; e < E; e++) {
        float diff = target - (float)counts[e];
        float sign = diff > 0 ? 1.0f : diff < 0 ? -1.0f : 0.0f;
        bias[e] += rate * sign;
    }
}
