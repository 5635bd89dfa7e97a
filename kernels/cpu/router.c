// kernels/cpu/router.c: the MoE router on the CPU (the arithmetic of kernels/router.h).
#include "kernels/router.h"
#include "kernels/bf16.h"
#include <math.h>
#include <string.h>

// idx (k) = the k largest entries of v (n), largest first; ties go to the lower index
// (as jax.lax.top_k). -inf entries are only picked when nothing else is left.
static void topk_desc(const float *v, int n, int k, int *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= idx[q] == i;
            if (taken) continue;
            if (best < 0 || v[i] > v[best]) best = i;
        }
        idx[j] = best;
    }
}

// masked (E) = sel (E), except that the experts of every group outside the keep_groups best
// are -inf. The E experts are G groups of E/G in order; a group's score is the sum of its
// n_best best entries of sel (n_best = 1: its best, DeepSeek-V2; 2: DeepSeek-V3).
static void keep_best_groups(float *masked, const float *sel, int E, int G, int keep_groups, int n_best) {
    for (int e = 0; e < E; e++) masked[e] = sel[e];
    if (G <= 0) return;   // groups off: every expert eligible
    int per = E / G, top[2], best[G];
    float gscore[G];
    for (int g = 0; g < G; g++) {
        topk_desc(sel + g * per, per, n_best, top);
        gscore[g] = n_best == 1 ? sel[g * per + top[0]] : sel[g * per + top[0]] + sel[g * per + top[1]];
    }
    topk_desc(gscore, G, keep_groups, best);
    for (int g = 0; g < G; g++) {
        int kept = 0;
        for (int j = 0; j < keep_groups; j++) kept |= best[j] == g;
        if (!kept)
            for (int e = g * per; e < (g + 1) * per; e++) masked[e] = -INFINITY;
    }
}

static void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        int *idx = top_idx + (size_t)t * K;
        float *w = top_w + (size_t)t * K;
        memcpy(scores + (size_t)t * E, l, sizeof(float) * E);
        topk_desc(l, E, K, idx);
        // softmax over the K chosen logits only; the first is the largest
        float m = l[idx[0]], sum = 0.0f;
        for (int k = 0; k < K; k++) { w[k] = expf(l[idx[k]] - m); sum += w[k]; }
        for (int k = 0; k < K; k++) w[k] /= sum;
    }
}

static void route_softmax(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K,
                          int G, int keep_groups, int scaled, float routed_scaling_factor) {
    float masked[E];
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = scores + (size_t)t * E, *w = top_w + (size_t)t * K;
        int *idx = top_idx + (size_t)t * K;
        // p = softmax over all E experts; the K largest eligible p are chosen
        float m = l[0], z = 0.0f;
        for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
        for (int e = 0; e < E; e++) { p[e] = expf(l[e] - m); z += p[e]; }
        for (int e = 0; e < E; e++) p[e] /= z;
        // with G > 0 groups (DeepSeek-V2's group_limited_greedy), only the keep_groups groups
        // with the best single p stay eligible
        keep_best_groups(masked, p, E, G, keep_groups, 1);
        topk_desc(masked, E, K, idx);
        if (scaled) {   // the chosen probabilities, scaled
            for (int k = 0; k < K; k++) w[k] = p[idx[k]] * routed_scaling_factor;
        } else {        // a softmax over the K chosen probabilities; the first is the largest
            float sum = 0.0f;
            for (int k = 0; k < K; k++) { w[k] = expf(p[idx[k]] - p[idx[0]]); sum += w[k]; }
            for (int k = 0; k < K; k++) w[k] /= sum;
        }
    }
}

static void route_deepseek(int *top_idx, float *top_w, float *scores, const float *logits, const float *bias,
                           int T, int E, int K, int G, int keep_groups, float routed_scaling_factor,
                           int gate_round, int bf16) {
    float masked[E], s[E];
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        float *sel = scores + (size_t)t * E;
        int *idx = top_idx + (size_t)t * K;
        float *w = top_w + (size_t)t * K;
        // 1. s = sigmoid(logits); selection scores s' = s + bias (selection only).
        // (bf16, cast point 13: s, the bias and s' are rounded like the gate logits)
        int gr = gate_round;
        for (int e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-l[e]));
            if (gr) s[e] = bf16_round(s[e]);
            float b = bias ? (gr ? bf16_round(bias[e]) : bias[e]) : 0.0f;
            sel[e] = gr ? bf16_round(s[e] + b) : s[e] + b;
        }
        // 2. Group-limited routing (DeepSeek-V3): a group's score is the sum of its two best
        //    s'; only the best keep_groups groups stay eligible.
        keep_best_groups(masked, sel, E, G, keep_groups, 2);
        // 3. The K best eligible experts; weights from the unbiased s, normalised, scaled.
        topk_desc(masked, E, K, idx);
        float sum = 0.0f;
        for (int k = 0; k < K; k++) { w[k] = s[idx[k]]; sum += w[k]; }
        for (int k = 0; k < K; k++) w[k] = w[k] / (sum + 1e-20f) * routed_scaling_factor;
        if (bf16) for (int k = 0; k < K; k++) w[k] = bf16_round(w[k]);
    }
}

static void count_sequence_assignments(int *counts, const int *top_idx, int B, int S, int E, int K) {
    size_t A = (size_t)B * S * K;
    for (size_t a = 0; a < A; a++) counts[(a / K / S) * E + top_idx[a]]++;
}

static void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before) {
    int used[E];
    for (int b = 0; b < B; b++) {
        if (before) memcpy(used, before + (size_t)b * E, sizeof used);
        else memset(used, 0, sizeof used);
        // priority: (s, k) order within the sequence, s-major
        for (size_t a = (size_t)b * S * K; a < (size_t)(b + 1) * S * K; a++)
            keep[a] = ++used[top_idx[a]] <= capacity;
    }
}

static void drop_weights(float *w, const int *keep, size_t A) {
    for (size_t a = 0; a < A; a++) w[a] *= (float)keep[a];
}

static void count_experts(long *counts, const int *top_idx, size_t A) {
    for (size_t a = 0; a < A; a++) counts[top_idx[a]]++;
}

static void router_probs(float *probs, const float *logits, int T, int E) {
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *l = logits + t * E;
        float *p = probs + t * E, m = l[0], sum = 0.0f;
        for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
        for (int e = 0; e < E; e++) { p[e] = expf(l[e] - m); sum += p[e]; }
        for (int e = 0; e < E; e++) p[e] /= sum;
    }
}

static void lb_chunk_sums(double *part, const int *top_idx, const float *probs, int B, int S, int nchunks,
                          int chunk, int E, int K) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nchunks; j++) {
            double *cnt = part + ((size_t)b * nchunks + j) * 2 * E, *psum = cnt + E;
            for (int t = b * S + j * chunk; t < b * S + (j + 1) * chunk; t++)
                for (int k = 0; k < K; k++) cnt[top_idx[(size_t)t * K + k]] += 1.0;
            for (int e = 0; e < E; e++)
                for (int t = b * S + j * chunk; t < b * S + (j + 1) * chunk; t++) psum[e] += probs[(size_t)t * E + e];
        }
}

static void lb_loss(float *f, double *lb_seq, const double *tot, int B, int E, int Sg, float lb_coef) {
    for (int b = 0; b < B; b++) {
        float *fb = f + (size_t)b * E;
        const double *cnt = tot + (size_t)b * 2 * E, *pbar = cnt + E;
        double acc = 0.0;
        for (int e = 0; e < E; e++) {
            fb[e] = (float)cnt[e] / (float)Sg;
            acc += (double)fb[e] * (pbar[e] / Sg);
        }
        lb_seq[b] = lb_coef * acc;
    }
}

static void lb_backward(float *dlogits, const float *probs, const float *f, int B, int S, int Sg, int E, float lb_coef) {
    for (int t = 0; t < B * S; t++) {
        const float *p = probs + (size_t)t * E, *fb = f + (size_t)(t / S) * E;
        float dot = 0.0f;
        for (int e = 0; e < E; e++) dot += p[e] * (lb_coef * fb[e] / Sg);
        for (int e = 0; e < E; e++) dlogits[(size_t)t * E + e] += p[e] * (lb_coef * fb[e] / Sg - dot);
    }
}

// w = softmax(chosen logits): dl_k = w_k (g_k - sum_j w_j g_j)
static void router_mixtral_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    int T, int E, int K) {
    for (int t = 0; t < T; t++) {
        const int *idx = top_idx + (size_t)t * K;
        const float *w = top_w + (size_t)t * K, *g = dw + (size_t)t * K;
        float *dl = dlogits + (size_t)t * E;
        float dot = 0.0f;
        for (int k = 0; k < K; k++) dot += w[k] * g[k];
        for (int k = 0; k < K; k++) dl[idx[k]] += w[k] * (g[k] - dot);
    }
}

// p = softmax(logits); w from the chosen p:
//   softmax (scaled=0): w = softmax(p[idx]):  dp_idx[k] = w_k (g_k - sum_j w_j g_j)
//   scaled:             w = scale * p[idx]:   dp_idx[k] = scale * g_k
// then through the softmax over all E: dl_e = p_e (dp_e - sum_j p_j dp_j).
static void router_softmax_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    const float *probs, int T, int E, int K, int scaled, float routed_scaling_factor) {
    for (int t = 0; t < T; t++) {
        const int *idx = top_idx + (size_t)t * K;
        const float *w = top_w + (size_t)t * K, *g = dw + (size_t)t * K, *p = probs + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        float dp[E], dot = 0.0f;
        for (int e = 0; e < E; e++) dp[e] = 0.0f;
        for (int k = 0; k < K; k++) dot += w[k] * g[k];
        for (int k = 0; k < K; k++)
            dp[idx[k]] = scaled ? routed_scaling_factor * g[k] : w[k] * (g[k] - dot);
        float pdp = 0.0f;
        for (int e = 0; e < E; e++) pdp += p[e] * dp[e];
        for (int e = 0; e < E; e++) dl[e] += p[e] * (dp[e] - pdp);
    }
}

// w_k = scale * s_k / Z, Z = sum_j s_j + 1e-20, s = sigmoid(logit):
// ds_j = scale * (g_j / Z - sum_k g_k s_k / Z^2);  dl_j = ds_j * s_j (1 - s_j)
// gate_round: the forward used rb(sigmoid); its gradient is rounded the same way, and
// sigmoid' uses the unrounded value.
static void router_deepseek_backward(float *dlogits, const float *dw, const int *top_idx, const float *logits,
                                     int T, int E, int K, float routed_scaling_factor, int gate_round) {
    for (int t = 0; t < T; t++) {
        const int *idx = top_idx + (size_t)t * K;
        const float *g = dw + (size_t)t * K, *l = logits + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        int gr = gate_round;
        float sg[K], sig[K], Z = 0.0f, gs = 0.0f;
        for (int k = 0; k < K; k++) {
            sig[k] = 1.0f / (1.0f + expf(-l[idx[k]]));
            sg[k] = gr ? bf16_round(sig[k]) : sig[k];
            Z += sg[k];
        }
        Z += 1e-20f;
        for (int k = 0; k < K; k++) gs += g[k] * sg[k];
        for (int k = 0; k < K; k++) {
            float ds = routed_scaling_factor * (g[k] / Z - gs / (Z * Z));
            if (gr) ds = bf16_round(ds);
            dl[idx[k]] += ds * sig[k] * (1.0f - sig[k]);
        }
    }
}

const RouterKernels router_cpu = {
    route_mixtral, route_softmax, route_deepseek,
    count_sequence_assignments, capacity_mask, drop_weights, count_experts,
    router_probs, lb_chunk_sums, lb_loss, lb_backward,
    router_mixtral_backward, router_softmax_backward, router_deepseek_backward,
};
