// tests/test_moe.c: the MoE block. Routing against cases worked out by hand (top-k order
// and ties, group masking, bias used for selection only, capacity dropping), every
// gradient of the block (both routers, both dispatch paths, dropping, load-balance loss,
// shared experts) and of the dense SwiGLU against finite differences, and the dense and
// sparse paths against each other.
#include "core/common.h"
#include "base/config.h"
#include "model/moe.h"
#include "model/mlp.h"
#include "base/memory.h"
#include "kernels/kernels.h"
#include "tests/gradcheck.h"

static float sig(float z) { return 1.0f / (1.0f + expf(-z)); }

// ---- routing, by hand ----
static void test_routing(void) {
    // Mixtral: top-2 of [1, 3, 2, 3]: the tie at 3 goes to the lower index first, and the
    // weights are the softmax of the two chosen logits only: [0.5, 0.5].
    {
        float logits[4] = {1, 3, 2, 3}, w[2], sc[4];
        int idx[2];
        route_mixtral(idx, w, sc, logits, 1, 4, 2);
        CHECK(idx[0] == 1 && idx[1] == 3, "mixtral tie: idx %d %d, want 1 3", idx[0], idx[1]);
        CHECK_CLOSE(w[0], 0.5, 1e-7, "mixtral tie weight");
        float l2[4] = {0.5f, -1, 2, 1};
        route_mixtral(idx, w, sc, l2, 1, 4, 2);
        // softmax([2, 1]) = [e/(e+1), 1/(e+1)] = [0.7310586, 0.2689414]
        CHECK(idx[0] == 2 && idx[1] == 3, "mixtral top-2 order: %d %d, want 2 3", idx[0], idx[1]);
        CHECK_CLOSE(w[0], 0.7310586, 1e-6, "mixtral weight 0");
        CHECK_CLOSE(w[1], 0.2689414, 1e-6, "mixtral weight 1");
    }
    // DeepSeek: 8 experts in 4 groups of 2, keep 2 groups, top-2, scaling 2.5.
    // s = sigmoid([0, 2, 1, 1, -1, 3, .5, .5]) = [.5, .881, .731, .731, .269, .953, .622, .622]
    // group scores (sum of both): g0 1.381, g1 1.462, g2 1.222, g3 1.245 -> keep g1, g0.
    // Expert 5 has the best score but its group is dropped. Among experts 0..3: 1 (.881),
    // then 2 (.731, tied with 3: lower index). w = 2.5 * [s1, s2] / (s1 + s2).
    Config c;
    config_defaults(&c);
    c.num_experts = 8; c.num_experts_per_tok = 2; c.n_routing_groups = 4; c.topk_routing_group = 2;
    c.routed_scaling_factor = 2.5f;
    float logits[8] = {0, 2, 1, 1, -1, 3, 0.5f, 0.5f}, w[2], sc[8];
    int idx[2];
    route_deepseek(&c, idx, w, sc, logits, NULL, 1);
    CHECK(idx[0] == 1 && idx[1] == 2, "deepseek group masking: idx %d %d, want 1 2", idx[0], idx[1]);
    CHECK_CLOSE(w[0], 2.5 * sig(2) / (sig(2) + sig(1)), 1e-6, "deepseek weight 0");
    CHECK_CLOSE(w[1], 2.5 * sig(1) / (sig(2) + sig(1)), 1e-6, "deepseek weight 1");
    // Without groups expert 5 wins.
    c.n_routing_groups = -1;
    route_deepseek(&c, idx, w, sc, logits, NULL, 1);
    CHECK(idx[0] == 5 && idx[1] == 1, "deepseek no groups: idx %d %d, want 5 1", idx[0], idx[1]);
    // Bias for selection only: +0.5 on expert 3 makes it first (s' = 1.231), but its
    // weight still comes from the unbiased s3 = .731.
    c.n_routing_groups = 4;
    float bias[8] = {0, 0, 0, 0.5f, 0, 0, 0, 0};
    route_deepseek(&c, idx, w, sc, logits, bias, 1);
    CHECK(idx[0] == 3 && idx[1] == 1, "deepseek bias: idx %d %d, want 3 1", idx[0], idx[1]);
    CHECK_CLOSE(w[0], 2.5 * sig(1) / (sig(1) + sig(2)), 1e-6, "deepseek biased pick keeps the unbiased weight");
    CHECK_CLOSE(sc[3], sig(1) + 0.5, 1e-6, "selection score = s + bias");
    // routed_score_func=softmax: p = softmax([1, 3, 2, 0]) = [e, e^3, e^2, 1] / Z; top-2 is
    // experts 1, 2. Mixtral block: w = softmax([p1, p2]); DeepSeek block: 2.5 * [p1, p2].
    {
        Config cs;
        config_defaults(&cs);
        cs.routed_score_func = SCORE_FUNC_SOFTMAX;
        cs.num_experts = 4; cs.num_experts_per_tok = 2; cs.routed_scaling_factor = 2.5f;
        float l4[4] = {1, 3, 2, 0}, w4[2], p4[4];
        int i4[2];
        double Z = exp(1) + exp(3) + exp(2) + 1, p1 = exp(3) / Z, p2 = exp(2) / Z;
        route_softmax(&cs, i4, w4, p4, l4, 1);
        CHECK(i4[0] == 1 && i4[1] == 2, "softmax routing: idx %d %d, want 1 2", i4[0], i4[1]);
        CHECK_CLOSE(p4[3], 1 / Z, 1e-7, "softmax routing: the scores are the probabilities");
        CHECK_CLOSE(w4[0], 1 / (1 + exp(p2 - p1)), 1e-6, "softmax routing, mixtral block: softmax of the probabilities");
        cs.decoder_block = DECODER_DEEPSEEK;
        route_softmax(&cs, i4, w4, p4, l4, 1);
        CHECK_CLOSE(w4[1], 2.5 * p2, 1e-6, "softmax routing, deepseek block: the probability, scaled");
    }
    // DeepSeek-V2's groups (softmax scores): 8 experts in 4 groups of 2, keep 1, top-2.
    // logits g0 {2, -5}, g1 {1.8, 1.8}, g2 {0, 0}, g3 {-1, -1}. A group's score is its best p:
    // g0 (e^2) beats g1 (e^1.8), so experts 0 and 1 are chosen; by the sum of the two best
    // (V3's rule) g1 would win (2 e^1.8 > e^2 + e^-5), and without groups experts 0 and 2.
    {
        Config cs;
        config_defaults(&cs);
        cs.decoder_block = DECODER_DEEPSEEK; cs.routed_score_func = SCORE_FUNC_SOFTMAX;
        cs.num_experts = 8; cs.num_experts_per_tok = 2; cs.routed_scaling_factor = 2.5f;
        cs.n_routing_groups = 4; cs.topk_routing_group = 1;
        float l8[8] = {2, -5, 1.8f, 1.8f, 0, 0, -1, -1}, w8[2], p8[8];
        int i8[2];
        double Z = exp(2) + exp(-5) + 2 * exp(1.8) + 2 + 2 * exp(-1);
        route_softmax(&cs, i8, w8, p8, l8, 1);
        CHECK(i8[0] == 0 && i8[1] == 1, "softmax routing, V2 groups: idx %d %d, want 0 1", i8[0], i8[1]);
        CHECK_CLOSE(w8[1], 2.5 * exp(-5) / Z, 1e-9, "softmax routing, V2 groups: the masked-in probability, scaled");
        CHECK_CLOSE(p8[2], exp(1.8) / Z, 1e-7, "softmax routing, V2 groups: the scores stay unmasked");
        cs.n_routing_groups = -1;
        route_softmax(&cs, i8, w8, p8, l8, 1);
        CHECK(i8[0] == 0 && i8[1] == 2, "softmax routing, no groups: idx %d %d, want 0 2", i8[0], i8[1]);
    }
    // Capacity: C = int(max(ceil(S*K/E) * cf, cf)).
    c.num_experts = 2; c.num_experts_per_tok = 1; c.capacity_factor = 1.0f;
    CHECK(moe_capacity(&c, 4) == 2, "capacity S=4 K=1 E=2 cf=1: %d, want 2", moe_capacity(&c, 4));
    c.capacity_factor = 1.5f;
    CHECK(moe_capacity(&c, 4) == 3, "capacity cf=1.5: %d, want 3", moe_capacity(&c, 4));
    c.capacity_factor = 0.25f;
    CHECK(moe_capacity(&c, 1) == 0, "capacity S=1 cf=0.25: %d, want int(0.25) = 0", moe_capacity(&c, 1));
    // Dropping, (s, k) order s-major within each sequence, counted per sequence:
    // sequence 0: (s0: e0, e1) (s1: e0, e1) (s2: e1, e0); capacity 1 keeps only s0's two.
    // sequence 1 starts counting again.
    int top[12] = {0, 1, 0, 1, 1, 0, /* seq 1 */ 1, 0, 0, 1, 1, 0}, keep[12];
    capacity_mask(keep, top, 2, 3, 2, 2, 1, NULL);
    int want[12] = {1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0};
    CHECK(memcmp(keep, want, sizeof want) == 0, "capacity mask capacity 1");
    capacity_mask(keep, top, 2, 3, 2, 2, 2, NULL);
    int want2[12] = {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0};
    CHECK(memcmp(keep, want2, sizeof want2) == 0, "capacity mask capacity 2");
    // The same sequences as the second part of longer ones (context parallelism): the
    // earlier part sent 1 assignment to e0 and 2 to e1 in sequence 0, 2 and 0 in sequence 1.
    int before[4] = {1, 2, 2, 0};
    capacity_mask(keep, top, 2, 3, 2, 2, 2, before);
    int want3[12] = {1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0};
    CHECK(memcmp(keep, want3, sizeof want3) == 0, "capacity mask capacity 2 after an earlier part");
}

// ---- the sparse path's row layout, by hand ----
static void test_row_layout(void) {
    // T=3 tokens, K=2, E=3: top_idx = [[1,0],[1,2],[0,1]], assignments a = t*K + k.
    // Expert 0 gets a1 (t0), a4 (t2); expert 1 gets a0 (t0), a2 (t1), a5 (t2); expert 2
    // gets a3 (t1): each expert's rows in token order, row_start = 0, 2, 5, 6.
    int top[6] = {1, 0, 1, 2, 0, 1}, start[4], token[6], arow[6];
    kern()->moe->sort_rows(start, token, arow, top, 3, 3, 2);
    int want_start[4] = {0, 2, 5, 6}, want_token[6] = {0, 2, 0, 1, 2, 1}, want_arow[6] = {2, 0, 3, 5, 1, 4};
    CHECK(memcmp(start, want_start, sizeof start) == 0, "sort_rows row starts: %d %d %d %d, want 0 2 5 6",
          start[0], start[1], start[2], start[3]);
    CHECK(memcmp(token, want_token, sizeof token) == 0, "sort_rows: each expert's rows in token order");
    CHECK(memcmp(arow, want_arow, sizeof arow) == 0, "sort_rows: the row of each assignment");
    // The planner's twin routes nothing: the row starts of a balanced routing (assignment a
    // to expert a mod E): A=10 over E=4 gives 3, 3, 2, 2 rows; the other arrays untouched.
    int dstart[5], dtoken[10], darow[10], dtop[10] = {0};
    memset(dtoken, 0x7f, sizeof dtoken);
    memcpy(darow, dtoken, sizeof darow);
    backend_dry.moe->sort_rows(dstart, dtoken, darow, dtop, 5, 4, 2);
    int want_d[5] = {0, 3, 6, 8, 10};
    CHECK(memcmp(dstart, want_d, sizeof dstart) == 0, "dry sort_rows: %d %d %d %d %d, want 0 3 6 8 10",
          dstart[0], dstart[1], dstart[2], dstart[3], dstart[4]);
    CHECK(dtoken[0] == 0x7f7f7f7f && darow[9] == 0x7f7f7f7f, "dry sort_rows writes only the row starts");
}

// ---- gradients of the whole block ----
enum { B = 2, S = 4, T = B * S, D = 8, E = 4, K = 2, H = 6, FS = 6 };
static Config C;
static MoeParams P, G;
// One device: the Config's expert width (model/dims.h).
static const LocalDims *one_device(void) {
    static LocalDims ld;
    ld = local_dims(&C, 1, 0);
    return &ld;
}
static float X[T * D], DX[T * D], OUT[T * D], R[T * D], BIAS[E];
static float LB_COEF;

static double moe_loss(void *ctx) {
    (void)ctx;
    MoeSaved s;
    double lb[B] = {0};
    moe_forward(&C, one_device(), &P, cfg_sigmoid_router(&C) ? BIAS : NULL, &s, OUT, X, B, S, LB_COEF, lb, NULL);
    moe_saved_free(&s);
    return gc_dot(OUT, R, T * D) + (LB_COEF > 0 ? lb[0] + lb[1] : 0.0);
}

static float *filled(size_t n, uint64_t *seed, float scale) {
    float *x = calloc(n, sizeof(float));
    gc_fill(x, (long)n, seed, scale);
    return x;
}

static void moe_case(const char *name, int deepseek, const char *router, int sparse, float cf, float lb) {
    config_defaults(&C);
    C.tensor_reduce_chunks = 2;   // widths of 6: split sums in 2 pieces
    C.base_emb_dim = D; C.num_experts = E; C.num_experts_per_tok = K; C.max_target_length = S;
    C.base_mlp_dim = H; C.base_moe_mlp_dim = H; C.sparse_matmul = sparse; C.capacity_factor = cf;
    if (deepseek) {
        C.decoder_block = DECODER_DEEPSEEK; C.routed_score_func = SCORE_FUNC_SIGMOID;
        C.n_routing_groups = 2; C.topk_routing_group = 1; C.routed_scaling_factor = 2.5f;
        C.shared_experts = 1;
    }
    if (router) config_set(&C, "routed_score_func", router, "test");
    if (router && !strcmp(router, "")) C.n_routing_groups = -1;   // groups need sigmoid or softmax scores
    LB_COEF = lb;
    uint64_t seed = 42;
    memset(&P, 0, sizeof P); memset(&G, 0, sizeof G);
    P.gate = filled(D * E, &seed, 1.0f);
    P.wi_0 = filled(E * D * H, &seed, 0.5f); P.wi_1 = filled(E * D * H, &seed, 0.5f);
    P.wo = filled(E * H * D, &seed, 0.5f);
    G.gate = calloc(D * E, 4); G.wi_0 = calloc(E * D * H, 4); G.wi_1 = calloc(E * D * H, 4); G.wo = calloc(E * H * D, 4);
    if (deepseek) {
        P.shared.wi_0 = filled(D * FS, &seed, 0.5f); P.shared.wi_1 = filled(D * FS, &seed, 0.5f);
        P.shared.wo = filled(FS * D, &seed, 0.5f);
        G.shared.wi_0 = calloc(D * FS, 4); G.shared.wi_1 = calloc(D * FS, 4); G.shared.wo = calloc(FS * D, 4);
    }
    gc_fill(X, T * D, &seed, 1.0f);
    gc_fill(R, T * D, &seed, 1.0f);
    gc_fill(BIAS, E, &seed, 0.05f);
    memset(DX, 0, sizeof DX);

    MoeSaved s;
    double lbs[B] = {0};
    long counts[E] = {0};
    moe_forward(&C, one_device(), &P, deepseek ? BIAS : NULL, &s, OUT, X, B, S, lb, lbs, counts);
    long total = 0;
    for (int e = 0; e < E; e++) total += counts[e];
    CHECK(total == T * K, "%s: expert counts add to %ld, want %d", name, total, T * K);
    if (cf > 0) {
        int dropped = 0;
        for (int a = 0; a < T * K; a++) dropped += s.w_eff[a] == 0.0f;
        printf("  %s: %d of %d assignments dropped at capacity %d\n", name, dropped, T * K, moe_capacity(&C, S));
        CHECK(dropped > 0, "%s: the capacity case drops nothing, so it tests nothing", name);
    }
    moe_backward(&C, one_device(), &P, &G, &s, DX, R, X, B, S, lb);
    moe_saved_free(&s);
    char what[96];
    #define GC(field, n) snprintf(what, sizeof what, "%s %s", name, #field); \
        gradcheck(what, P.field, n, G.field, moe_loss, NULL, 1e-3, 2e-2)
    gradcheck(name, X, T * D, DX, moe_loss, NULL, 1e-3, 2e-2);
    GC(gate, D * E);
    GC(wi_0, E * D * H);
    GC(wi_1, E * D * H);
    GC(wo, E * H * D);
    if (deepseek) { GC(shared.wi_0, D * FS); GC(shared.wi_1, D * FS); GC(shared.wo, FS * D); }
    #undef GC
    free(P.gate); free(P.wi_0); free(P.wi_1); free(P.wo);
    free(G.gate); free(G.wi_0); free(G.wi_1); free(G.wo);
    free(P.shared.wi_0); free(P.shared.wi_1); free(P.shared.wo);
    free(G.shared.wi_0); free(G.shared.wi_1); free(G.shared.wo);
}

// Without dropping, the dense path (every expert on every token, zero weights elsewhere)
// and the sparse path compute the same rows in the same order: equal bit for bit, since
// the matmuls are row-stable (model/matmul.c).
static void test_dense_equals_sparse(int deepseek) {
    float out_sparse[T * D], out_dense[T * D];
    for (int sparse = 1; sparse >= 0; sparse--) {
        config_defaults(&C);
        C.tensor_reduce_chunks = 2;
        C.base_emb_dim = D; C.num_experts = E; C.num_experts_per_tok = K; C.max_target_length = S;
        C.base_mlp_dim = H; C.base_moe_mlp_dim = H; C.sparse_matmul = sparse;
        if (deepseek) { C.decoder_block = DECODER_DEEPSEEK; C.routed_score_func = SCORE_FUNC_SIGMOID; }
        uint64_t seed = 7;
        memset(&P, 0, sizeof P);
        P.gate = filled(D * E, &seed, 1.0f);
        P.wi_0 = filled(E * D * H, &seed, 0.5f); P.wi_1 = filled(E * D * H, &seed, 0.5f);
        P.wo = filled(E * H * D, &seed, 0.5f);
        gc_fill(X, T * D, &seed, 1.0f);
        MoeSaved s;
        moe_forward(&C, one_device(), &P, NULL, &s, sparse ? out_sparse : out_dense, X, B, S, 0.0f, NULL, NULL);
        moe_saved_free(&s);
        free(P.gate); free(P.wi_0); free(P.wi_1); free(P.wo);
    }
    CHECK(memcmp(out_sparse, out_dense, sizeof out_dense) == 0, "%s: dense and sparse paths differ",
          deepseek ? "deepseek" : "mixtral");
}

// ---- the dense SwiGLU ----
static MlpParams MP, MG;
static double mlp_loss(void *ctx) {
    (void)ctx;
    MlpSaved s;
    mlp_forward(&C, &MP, &s, OUT, X, T, D, FS);
    mlp_saved_free(&s);
    return gc_dot(OUT, R, T * D);
}
static void test_mlp(void) {
    uint64_t seed = 3;
    config_defaults(&C);
    C.tensor_reduce_chunks = 2;   // the sum over FS = 6 is cut into 2 pieces
    MP.wi_0 = filled(D * FS, &seed, 0.5f); MP.wi_1 = filled(D * FS, &seed, 0.5f); MP.wo = filled(FS * D, &seed, 0.5f);
    MG.wi_0 = calloc(D * FS, 4); MG.wi_1 = calloc(D * FS, 4); MG.wo = calloc(FS * D, 4);
    gc_fill(X, T * D, &seed, 1.0f);
    gc_fill(R, T * D, &seed, 1.0f);
    memset(DX, 0, sizeof DX);
    MlpSaved s;
    mlp_forward(&C, &MP, &s, OUT, X, T, D, FS);
    mlp_backward(&C, &MP, &MG, &s, DX, R, X, T, D, FS, leaves_flat(T, S));
    gradcheck("mlp dx", X, T * D, DX, mlp_loss, NULL, 1e-3, 1e-2);
    gradcheck("mlp wi_0", MP.wi_0, D * FS, MG.wi_0, mlp_loss, NULL, 1e-3, 1e-2);
    gradcheck("mlp wi_1", MP.wi_1, D * FS, MG.wi_1, mlp_loss, NULL, 1e-3, 1e-2);
    gradcheck("mlp wo", MP.wo, FS * D, MG.wo, mlp_loss, NULL, 1e-3, 1e-2);
    free(MP.wi_0); free(MP.wi_1); free(MP.wo); free(MG.wi_0); free(MG.wi_1); free(MG.wo);
}

// moe_forward on the default (Mixtral) config must weight each token's experts by the
// softmax of its K chosen gate logits, not by normalised sigmoids (a first-letter test of
// "softmax" vs "sigmoid" could pick the DeepSeek router here).
static void test_mixtral_router_in_block(void) {
    config_defaults(&C);
    C.tensor_reduce_chunks = 2;
    C.base_emb_dim = D; C.num_experts = E; C.num_experts_per_tok = K; C.max_target_length = S;
    C.base_mlp_dim = H; C.base_moe_mlp_dim = H;
    CHECK(!cfg_sigmoid_router(&C) && !cfg_softmax_router(&C), "the default routed_score_func \"\" is taken for another router");
    uint64_t seed = 11;
    memset(&P, 0, sizeof P);
    P.gate = filled(D * E, &seed, 1.0f);
    P.wi_0 = filled(E * D * H, &seed, 0.5f); P.wi_1 = filled(E * D * H, &seed, 0.5f);
    P.wo = filled(E * H * D, &seed, 0.5f);
    float x[T * D], out[T * D];
    gc_fill(x, T * D, &seed, 1.0f);
    MoeSaved s;
    moe_forward(&C, one_device(), &P, NULL, &s, out, x, B, S, 0.0f, NULL, NULL);
    // The saved logits are x @ gate (D x E), and the chosen experts their K largest: both from
    // this test's own loop, so that the weights below rest on inputs checked here.
    int ok = 1, logits_ok = 1, chosen_ok = 1;
    for (int t = 0; t < T; t++) {
        double lref[E];
        for (int e = 0; e < E; e++) {
            lref[e] = 0.0;
            for (int d = 0; d < D; d++) lref[e] += (double)x[t * D + d] * P.gate[d * E + e];
            logits_ok &= fabs(s.logits[t * E + e] - lref[e]) <= 1e-5 * (1.0 + fabs(lref[e]));
        }
        for (int k = 0; k < K; k++) {   // no expert outside the chosen beats a chosen one
            int chosen = s.top_idx[t * K + k];
            for (int e = 0; e < E; e++) {
                int in = 0;
                for (int j = 0; j < K; j++) in |= s.top_idx[t * K + j] == e;
                if (!in && lref[e] > lref[chosen] + 1e-6) chosen_ok = 0;
            }
        }
    }
    CHECK(logits_ok, "Mixtral block: the saved gate logits are not x @ gate");
    CHECK(chosen_ok, "Mixtral block: an expert left out has a larger logit than a chosen one");
    for (int t = 0; t < T; t++) {
        const float *l = s.logits + t * E;
        const int *idx = s.top_idx + t * K;
        float m = l[idx[0]], z = 0.0f, want[K];
        for (int k = 0; k < K; k++) { want[k] = expf(l[idx[k]] - m); z += want[k]; }
        for (int k = 0; k < K; k++) ok &= fabsf(s.top_w[t * K + k] - want[k] / z) < 1e-6f;
    }
    CHECK(ok, "Mixtral block: routing weights are not the softmax of the chosen logits");
    moe_saved_free(&s);
    free(P.gate); free(P.wi_0); free(P.wi_1); free(P.wo);
}

int main(void) {
    Device dev;
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    test_routing();
    test_row_layout();
    test_mixtral_router_in_block();
    test_mlp();
    moe_case("mixtral sparse", 0, NULL, 1, -1, 0);
    moe_case("mixtral dense", 0, NULL, 0, -1, 0);
    moe_case("mixtral dense capacity 0.5", 0, NULL, 0, 0.5f, 0);
    moe_case("mixtral sparse + load-balance", 0, NULL, 1, -1, 0.5f);
    moe_case("deepseek sparse (groups, shared)", 1, NULL, 1, -1, 0);
    moe_case("deepseek dense + load-balance", 1, NULL, 0, -1, 0.5f);
    moe_case("mixtral sparse, softmax over all experts", 0, "softmax", 1, -1, 0);
    moe_case("mixtral dense, softmax over all experts + load-balance", 0, "softmax", 0, -1, 0.5f);
    moe_case("deepseek sparse, softmax over all experts (DeepSeek-V2's groups, shared)", 1, "softmax", 1, -1, 0);
    test_dense_equals_sparse(0);
    test_dense_equals_sparse(1);
    CHECK(dev.live_total == 0, "leaked %zu bytes of device memory", dev.live_total);
    TEST_SUMMARY();
}
