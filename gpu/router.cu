// gpu/router.cu: the MoE router on the GPU (kernels/router.h), the twin of
// kernels/cpu/router.c.
//
// Routing is a small serial computation per token (a softmax or sigmoid over E experts, a
// top-k), so each token is one thread that runs the CPU's loops in the CPU's order; the
// parallelism is over tokens. The same holds for the backward kernels and the load-balance
// statistics (one thread per sequence, per chunk and expert, or per token). Counting is
// integer (or whole numbers in double), exact in any order: those kernels add with atomics.
// The only differences from the CPU are the device's expf (within 2 ulp; glibc's within 1):
// a probability or a weight may differ by a few ulp, and a top-k choice between two
// experts whose scores then tie or swap could differ (the conformance test's random
// logits are far apart compared with an ulp).
//
// Launch geometry: one thread per token unless a kernel says otherwise, GPU_THREADS a block.
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include <math.h>

// The widest routing a thread holds in its local arrays: experts, experts per token, groups.
enum { ROUTER_MAX_E = 256, ROUTER_MAX_K = 32, ROUTER_MAX_G = 64 };

// idx (k) = the k largest entries of v (n), largest first; ties to the lower index; -inf
// entries only when nothing else is left (kernels/cpu/router.c:topk_desc).
__device__ static void topk_desc(const float *v, int n, int k, int *idx) {
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

__device__ static inline float sigmoid_dev(float z) { return 1.0f / (1.0f + expf(-z)); }

__global__ static void route_mixtral_kernel(int *top_idx, float *top_w, float *scores, const float *logits, int T,
                                            int E, int K) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E;
    int *idx = top_idx + (size_t)t * K;
    float *w = top_w + (size_t)t * K;
    for (int e = 0; e < E; e++) scores[(size_t)t * E + e] = l[e];
    topk_desc(l, E, K, idx);
    float m = l[idx[0]], sum = 0.0f;   // softmax over the K chosen logits
    for (int k = 0; k < K; k++) { w[k] = expf(l[idx[k]] - m); sum += w[k]; }
    for (int k = 0; k < K; k++) w[k] /= sum;
}

// p (E) = softmax(l (E)): the max, then the exponentials and their sum in order.
__device__ static void softmax_row(float *p, const float *l, int E) {
    float m = l[0], z = 0.0f;
    for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
    for (int e = 0; e < E; e++) { p[e] = expf(l[e] - m); z += p[e]; }
    for (int e = 0; e < E; e++) p[e] /= z;
}

// masked (E) = sel (E), with the experts of the groups outside the keep_groups best set to
// -inf; a group's score is the sum of its n_best best entries (1: DeepSeek-V2, 2: V3).
__device__ static void keep_best_groups(float *masked, const float *sel, int E, int G, int keep_groups, int n_best) {
    for (int e = 0; e < E; e++) masked[e] = sel[e];
    if (G <= 0) return;   // groups off: every expert eligible
    int per = E / G, top[2], best[ROUTER_MAX_G];
    float gscore[ROUTER_MAX_G];
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

__global__ static void route_softmax_kernel(int *top_idx, float *top_w, float *scores, const float *logits, int T,
                                            int E, int K, int G, int keep_groups, int scaled, float rsf) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float masked[ROUTER_MAX_E];
    float *p = scores + (size_t)t * E, *w = top_w + (size_t)t * K;
    int *idx = top_idx + (size_t)t * K;
    softmax_row(p, logits + (size_t)t * E, E);
    keep_best_groups(masked, p, E, G, keep_groups, 1);   // DeepSeek-V2's group_limited_greedy
    topk_desc(masked, E, K, idx);
    if (scaled) {
        for (int k = 0; k < K; k++) w[k] = p[idx[k]] * rsf;
    } else {
        float sum = 0.0f;
        for (int k = 0; k < K; k++) { w[k] = expf(p[idx[k]] - p[idx[0]]); sum += w[k]; }
        for (int k = 0; k < K; k++) w[k] /= sum;
    }
}

__global__ static void route_deepseek_kernel(int *top_idx, float *top_w, float *scores, const float *logits,
                                             const float *bias, int T, int E, int K, int G, int keep_groups,
                                             float rsf, int gr, int bf16) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float masked[ROUTER_MAX_E], s[ROUTER_MAX_E];
    const float *l = logits + (size_t)t * E;
    float *sel = scores + (size_t)t * E, *w = top_w + (size_t)t * K;
    int *idx = top_idx + (size_t)t * K;
    for (int e = 0; e < E; e++) {   // s = sigmoid(l), s' = s + bias (cast point 13 when gr)
        s[e] = sigmoid_dev(l[e]);
        if (gr) s[e] = bf16_round_dev(s[e]);
        float b = bias ? (gr ? bf16_round_dev(bias[e]) : bias[e]) : 0.0f;
        sel[e] = gr ? bf16_round_dev(s[e] + b) : s[e] + b;
    }
    keep_best_groups(masked, sel, E, G, keep_groups, 2);   // DeepSeek-V3's noaux_tc
    topk_desc(masked, E, K, idx);
    float sum = 0.0f;
    for (int k = 0; k < K; k++) { w[k] = s[idx[k]]; sum += w[k]; }
    for (int k = 0; k < K; k++) w[k] = w[k] / (sum + 1e-20f) * rsf;
    if (bf16) for (int k = 0; k < K; k++) w[k] = bf16_round_dev(w[k]);
}

// One thread per assignment; integer counts, added atomically (exact in any order).
__global__ static void count_sequence_kernel(int *counts, const int *top_idx, int S, int E, int K, size_t A) {
    size_t a = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (a < A) atomicAdd(&counts[(a / K / S) * E + top_idx[a]], 1);
}

__global__ static void count_experts_kernel(unsigned long long *counts, const int *top_idx, size_t A) {
    size_t a = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (a < A) atomicAdd(&counts[top_idx[a]], 1ull);
}

// One thread per sequence b: its assignments in (s, k) order.
__global__ static void capacity_mask_kernel(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity,
                                            const int *before) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    int used[ROUTER_MAX_E];
    for (int e = 0; e < E; e++) used[e] = before ? before[(size_t)b * E + e] : 0;
    for (size_t a = (size_t)b * S * K; a < (size_t)(b + 1) * S * K; a++) keep[a] = ++used[top_idx[a]] <= capacity;
}

__global__ static void drop_weights_kernel(float *w, const int *keep, size_t A) {
    size_t a = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (a < A) w[a] *= (float)keep[a];
}

__global__ static void router_probs_kernel(float *probs, const float *logits, int T, int E) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T) softmax_row(probs + (size_t)t * E, logits + (size_t)t * E, E);
}

// One thread per (sequence b, chunk j, expert e): the count (whole numbers, exact) and the
// sum of probabilities over the chunk's tokens in order.
__global__ static void lb_chunk_sums_kernel(double *part, const int *top_idx, const float *probs, int B, int S,
                                            int nchunks, int chunk, int E, int K) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)B * nchunks * E) return;
    int e = (int)(id % E), j = (int)(id / E % nchunks), b = (int)(id / E / nchunks);
    double *cnt = part + ((size_t)b * nchunks + j) * 2 * E, *psum = cnt + E;
    int t0 = b * S + j * chunk, t1 = t0 + chunk;
    double c = cnt[e], ps = psum[e];
    for (int t = t0; t < t1; t++)
        for (int k = 0; k < K; k++) c += top_idx[(size_t)t * K + k] == e ? 1.0 : 0.0;
    for (int t = t0; t < t1; t++) ps += probs[(size_t)t * E + e];
    cnt[e] = c;
    psum[e] = ps;
}

// One thread per sequence b.
__global__ static void lb_loss_kernel(float *f, double *lb_seq, const double *tot, int B, int E, int Sg, float coef) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    float *fb = f + (size_t)b * E;
    const double *cnt = tot + (size_t)b * 2 * E, *pbar = cnt + E;
    double acc = 0.0;
    for (int e = 0; e < E; e++) {
        fb[e] = (float)cnt[e] / (float)Sg;
        acc += (double)fb[e] * (pbar[e] / Sg);
    }
    lb_seq[b] = coef * acc;
}

__global__ static void lb_backward_kernel(float *dlogits, const float *probs, const float *f, int B, int S, int Sg,
                                          int E, float coef) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= B * S) return;
    const float *p = probs + (size_t)t * E, *fb = f + (size_t)(t / S) * E;
    float dot = 0.0f;
    for (int e = 0; e < E; e++) dot += p[e] * (coef * fb[e] / Sg);
    for (int e = 0; e < E; e++) dlogits[(size_t)t * E + e] += p[e] * (coef * fb[e] / Sg - dot);
}

// dl_k += w_k (g_k - sum_j w_j g_j) at the chosen experts.
__global__ static void mixtral_backward_kernel(float *dlogits, const float *dw, const int *top_idx,
                                               const float *top_w, int T, int E, int K) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int *idx = top_idx + (size_t)t * K;
    const float *w = top_w + (size_t)t * K, *g = dw + (size_t)t * K;
    float *dl = dlogits + (size_t)t * E, dot = 0.0f;
    for (int k = 0; k < K; k++) dot += w[k] * g[k];
    for (int k = 0; k < K; k++) dl[idx[k]] += w[k] * (g[k] - dot);
}

// Through the chosen p (softmax or scaled), then the softmax over all E.
__global__ static void softmax_backward_kernel(float *dlogits, const float *dw, const int *top_idx,
                                               const float *top_w, const float *probs, int T, int E, int K,
                                               int scaled, float rsf) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int *idx = top_idx + (size_t)t * K;
    const float *w = top_w + (size_t)t * K, *g = dw + (size_t)t * K, *p = probs + (size_t)t * E;
    float *dl = dlogits + (size_t)t * E, dp[ROUTER_MAX_E], dot = 0.0f;
    for (int e = 0; e < E; e++) dp[e] = 0.0f;
    for (int k = 0; k < K; k++) dot += w[k] * g[k];
    for (int k = 0; k < K; k++) dp[idx[k]] = scaled ? rsf * g[k] : w[k] * (g[k] - dot);
    float pdp = 0.0f;
    for (int e = 0; e < E; e++) pdp += p[e] * dp[e];
    for (int e = 0; e < E; e++) dl[e] += p[e] * (dp[e] - pdp);
}

// w_k = scale * s_k / Z through the sigmoid (kernels/cpu/router.c:router_deepseek_backward).
__global__ static void deepseek_backward_kernel(float *dlogits, const float *dw, const int *top_idx,
                                                const float *logits, int T, int E, int K, float rsf, int gr) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int *idx = top_idx + (size_t)t * K;
    const float *g = dw + (size_t)t * K, *l = logits + (size_t)t * E;
    float *dl = dlogits + (size_t)t * E;
    float sg[ROUTER_MAX_K], sig[ROUTER_MAX_K], Z = 0.0f, gs = 0.0f;
    for (int k = 0; k < K; k++) {
        sig[k] = sigmoid_dev(l[idx[k]]);
        sg[k] = gr ? bf16_round_dev(sig[k]) : sig[k];
        Z += sg[k];
    }
    Z += 1e-20f;
    for (int k = 0; k < K; k++) gs += g[k] * sg[k];
    for (int k = 0; k < K; k++) {
        float ds = rsf * (g[k] / Z - gs / (Z * Z));
        if (gr) ds = bf16_round_dev(ds);
        dl[idx[k]] += ds * sig[k] * (1.0f - sig[k]);
    }
}

// The local arrays' limits, checked on the host before a launch.
static void check_router_dims(const char *kernel, int E, int K, int G) {
    if (E <= ROUTER_MAX_E && K <= ROUTER_MAX_K && G <= ROUTER_MAX_G) return;
    fprintf(stderr, "meshmoe: the GPU's %s takes at most %d experts, %d per token and %d groups (got %d, %d, %d)\n",
            kernel, ROUTER_MAX_E, ROUTER_MAX_K, ROUTER_MAX_G, E, K, G);
    exit(1);
}

static unsigned grid(size_t n) { return blocks_for(n, GPU_THREADS); }

static void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K) {
    check_router_dims("route_mixtral", E, K, 0);
    if (T <= 0) return;
    GPU_LAUNCH(route_mixtral_kernel, grid(T), GPU_THREADS, 0)(top_idx, top_w, scores, logits, T, E, K);
    GPU_CHECK_LAUNCH();
}

static void route_softmax(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K,
                          int G, int keep_groups, int scaled, float routed_scaling_factor) {
    check_router_dims("route_softmax", E, K, G);
    if (T <= 0) return;
    GPU_LAUNCH(route_softmax_kernel, grid(T), GPU_THREADS, 0)(top_idx, top_w, scores, logits, T, E, K, G,
                                                                    keep_groups, scaled, routed_scaling_factor);
    GPU_CHECK_LAUNCH();
}

static void route_deepseek(int *top_idx, float *top_w, float *scores, const float *logits, const float *bias,
                           int T, int E, int K, int G, int keep_groups, float routed_scaling_factor,
                           int gate_round, int bf16) {
    check_router_dims("route_deepseek", E, K, G);
    if (T <= 0) return;
    GPU_LAUNCH(route_deepseek_kernel, grid(T), GPU_THREADS, 0)(top_idx, top_w, scores, logits, bias, T, E, K, G,
                                                                     keep_groups, routed_scaling_factor, gate_round,
                                                                     bf16);
    GPU_CHECK_LAUNCH();
}

static void count_sequence_assignments(int *counts, const int *top_idx, int B, int S, int E, int K) {
    size_t A = (size_t)B * S * K;
    if (A == 0) return;
    GPU_LAUNCH(count_sequence_kernel, grid(A), GPU_THREADS, 0)(counts, top_idx, S, E, K, A);
    GPU_CHECK_LAUNCH();
}

static void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before) {
    check_router_dims("capacity_mask", E, K, 0);
    if (B <= 0) return;
    GPU_LAUNCH(capacity_mask_kernel, grid(B), GPU_THREADS, 0)(keep, top_idx, B, S, E, K, capacity, before);
    GPU_CHECK_LAUNCH();
}

static void drop_weights(float *w, const int *keep, size_t A) {
    if (A == 0) return;
    GPU_LAUNCH(drop_weights_kernel, grid(A), GPU_THREADS, 0)(w, keep, A);
    GPU_CHECK_LAUNCH();
}

// counts (E, long) += per expert: added as 64-bit two's complement integers, the same bits.
static void count_experts(long *counts, const int *top_idx, size_t A) {
    if (A == 0) return;
    GPU_LAUNCH(count_experts_kernel, grid(A), GPU_THREADS, 0)((unsigned long long *)counts, top_idx, A);
    GPU_CHECK_LAUNCH();
}

static void router_probs(float *probs, const float *logits, int T, int E) {
    if (T <= 0) return;
    GPU_LAUNCH(router_probs_kernel, grid(T), GPU_THREADS, 0)(probs, logits, T, E);
    GPU_CHECK_LAUNCH();
}

static void lb_chunk_sums(double *part, const int *top_idx, const float *probs, int B, int S, int nchunks,
                          int chunk, int E, int K) {
    size_t n = (size_t)B * nchunks * E;
    if (n == 0) return;
    GPU_LAUNCH(lb_chunk_sums_kernel, grid(n), GPU_THREADS, 0)(part, top_idx, probs, B, S, nchunks, chunk, E, K);
    GPU_CHECK_LAUNCH();
}

static void lb_loss(float *f, double *lb_seq, const double *tot, int B, int E, int Sg, float lb_coef) {
    if (B <= 0) return;
    GPU_LAUNCH(lb_loss_kernel, grid(B), GPU_THREADS, 0)(f, lb_seq, tot, B, E, Sg, lb_coef);
    GPU_CHECK_LAUNCH();
}

static void lb_backward(float *dlogits, const float *probs, const float *f, int B, int S, int Sg, int E,
                        float lb_coef) {
    if (B * S <= 0) return;
    GPU_LAUNCH(lb_backward_kernel, grid((size_t)B * S), GPU_THREADS, 0)(dlogits, probs, f, B, S, Sg, E, lb_coef);
    GPU_CHECK_LAUNCH();
}

static void router_mixtral_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    int T, int E, int K) {
    if (T <= 0) return;
    GPU_LAUNCH(mixtral_backward_kernel, grid(T), GPU_THREADS, 0)(dlogits, dw, top_idx, top_w, T, E, K);
    GPU_CHECK_LAUNCH();
}

static void router_softmax_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    const float *probs, int T, int E, int K, int scaled, float routed_scaling_factor) {
    check_router_dims("router_softmax_backward", E, K, 0);
    if (T <= 0) return;
    GPU_LAUNCH(softmax_backward_kernel, grid(T), GPU_THREADS, 0)(dlogits, dw, top_idx, top_w, probs, T, E, K,
                                                                       scaled, routed_scaling_factor);
    GPU_CHECK_LAUNCH();
}

static void router_deepseek_backward(float *dlogits, const float *dw, const int *top_idx, const float *logits,
                                     int T, int E, int K, float routed_scaling_factor, int gate_round) {
    check_router_dims("router_deepseek_backward", E, K, 0);
    if (T <= 0) return;
    GPU_LAUNCH(deepseek_backward_kernel, grid(T), GPU_THREADS, 0)(dlogits, dw, top_idx, logits, T, E, K,
                                                                        routed_scaling_factor, gate_round);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const RouterKernels router_cuda = {
    route_mixtral, route_softmax, route_deepseek,
    count_sequence_assignments, capacity_mask, drop_weights, count_experts,
    router_probs, lb_chunk_sums, lb_loss, lb_backward,
    router_mixtral_backward, router_softmax_backward, router_deepseek_backward,
};
#endif
