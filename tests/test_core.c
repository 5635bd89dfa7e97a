// tests/test_core.c: the pieces every layer relies on: the canonical gradient sum and the
// leaf order (chunk outermost, base/context.h), the small layers (RMSNorm, embedding,
// loss, matmul) checked against finite differences,
// the schedule and AdamW against hand-computed values, the config's JSON round trip and
// one device's share of the dimensions under tensor parallelism.
#include "core/common.h"
#include "base/config.h"
#include "base/treesum.h"
#include "model/rmsnorm.h"
#include "model/embedding.h"
#include "model/loss.h"
#include "model/matmul.h"
#include "optim/optimizer.h"
#include "optim/adafactor.h"
#include "model/precision.h"
#include "base/collectives.h"
#include "model/dims.h"
#include "model/moe.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "base/context.h"
#include "tests/gradcheck.h"

// ---- treesum: the sum must not depend on how the leaves are split ----
static void test_treesum(void) {
    enum { N = 5, LEAVES = 8 };
    float leaf[LEAVES][N];
    uint64_t seed = 7;
    for (int l = 0; l < LEAVES; l++) gc_fill(leaf[l], N, &seed, 1000.0f);
    // All 8 leaves in one tree.
    float whole[N] = {0};
    TreeSum t;
    treesum_begin(&t, N, MEM_TEMP, "test");
    for (int l = 0; l < LEAVES; l++) { memcpy(treesum_leaf(&t), leaf[l], sizeof leaf[l]); treesum_push(&t); }
    treesum_end(&t, whole);
    // Two "devices" of 4 leaves, then their roots added: must be bit-identical.
    float half[2][N] = {{0}};
    for (int d = 0; d < 2; d++) {
        treesum_begin(&t, N, MEM_TEMP, "test");
        for (int l = 4 * d; l < 4 * d + 4; l++) { memcpy(treesum_leaf(&t), leaf[l], sizeof leaf[l]); treesum_push(&t); }
        treesum_end(&t, half[d]);
    }
    float split[N];
    for (int i = 0; i < N; i++) split[i] = half[0][i] + half[1][i];
    CHECK(memcmp(whole, split, sizeof whole) == 0, "treesum: 8 leaves vs 2 subtrees of 4 differ");
    // The explicit tree ((0+1)+(2+3)) + ((4+5)+(6+7)).
    float byhand[N];
    for (int i = 0; i < N; i++)
        byhand[i] = ((leaf[0][i] + leaf[1][i]) + (leaf[2][i] + leaf[3][i])) +
                    ((leaf[4][i] + leaf[5][i]) + (leaf[6][i] + leaf[7][i]));
    CHECK(memcmp(whole, byhand, sizeof whole) == 0, "treesum: not the pairwise tree");
    // A sequential sum is (almost surely) different: the test can fail.
    float seq[N] = {0};
    for (int l = 0; l < LEAVES; l++) for (int i = 0; i < N; i++) seq[i] += leaf[l][i];
    printf("  treesum 8 leaves: tree %.9g, sequential %.9g (element 0)\n", whole[0], seq[0]);
    // 7 leaves: (0..3) + ((4+5)+6), the same rule as tree_sum_double.
    float seven[N] = {0};
    treesum_begin(&t, N, MEM_TEMP, "test");
    for (int l = 0; l < 7; l++) { memcpy(treesum_leaf(&t), leaf[l], sizeof leaf[l]); treesum_push(&t); }
    treesum_end(&t, seven);
    for (int i = 0; i < N; i++)
        byhand[i] = ((leaf[0][i] + leaf[1][i]) + (leaf[2][i] + leaf[3][i])) + ((leaf[4][i] + leaf[5][i]) + leaf[6][i]);
    CHECK(memcmp(seven, byhand, sizeof seven) == 0, "treesum: 7 leaves not (0..3)+((4+5)+6)");
    // Leaves added onto the waiting leaf (treesum_leaf_onto: odd leaves, as an accumulating
    // product adds them), 7 and 8 of them: the same trees, bit for bit.
    for (int n = 7; n <= 8; n++) {
        float onto_sum[N] = {0};
        int folded = 0;
        treesum_begin(&t, N, MEM_TEMP, "test");
        for (int l = 0; l < n; l++) {
            int onto;
            float *g = treesum_leaf_onto(&t, &onto);
            for (int i = 0; i < N; i++) g[i] = onto ? g[i] + leaf[l][i] : leaf[l][i];
            folded += onto;
            treesum_push(&t);
        }
        treesum_end(&t, onto_sum);
        CHECK(folded == n / 2 && memcmp(onto_sum, n == 7 ? seven : whole, sizeof onto_sum) == 0,
              "treesum: %d leaves, %d added onto the waiting one, not the tree's bits", n, folded);
    }
    double xd[7];
    for (int l = 0; l < 7; l++) xd[l] = leaf[l][0];
    double td = tree_sum_double(xd, 7);
    double hd = ((xd[0] + xd[1]) + (xd[2] + xd[3])) + ((xd[4] + xd[5]) + xd[6]);
    CHECK(td == hd, "tree_sum_double: %.17g vs %.17g", td, hd);
}

// ---- the leaf order: chunk, then sequence, then leaf ----
static void test_leaf_order(void) {
    // 2 sequences of 8 tokens, chunks of 4, leaves of 2.
    Config c;
    config_defaults(&c);
    c.max_target_length = 8; c.context_reduce_chunks = 2; c.reduce_leaf_tokens = 2;
    Leaves lv = leaves_of(&c, 2, 8);
    long want[8] = {0, 2, 8, 10, 4, 6, 12, 14};   // chunk 0 of sequence 0, of sequence 1; chunk 1
    int order = lv.n == 8 && lv.nchunks == 2;
    for (int i = 0; i < 8 && order; i++) order &= leaf_token(lv, i) == want[i];
    CHECK(order, "leaf order: not (chunk, sequence, leaf)");
    // matmul's dw is the tree over the chunks of the tree over each chunk's leaves:
    // ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), leaf i = rows want[i], want[i]+1.
    enum { TT = 16, CC = 3, OO = 5 };
    float inp[TT * CC], dout[TT * OO], dw[CC * OO] = {0}, leaf[8][CC * OO], byhand[CC * OO];
    uint64_t seed = 11;
    gc_fill(inp, TT * CC, &seed, 100.0f);
    gc_fill(dout, TT * OO, &seed, 100.0f);
    matmul_backward(NULL, dw, dout, inp, NULL, TT, CC, OO, lv);
    for (int i = 0; i < 8; i++)
        gemm(1, 0, CC, OO, 2, 1.0f, inp + want[i] * CC, CC, dout + want[i] * OO, OO, 0.0f, leaf[i], OO);
    for (int k = 0; k < CC * OO; k++)
        byhand[k] = ((leaf[0][k] + leaf[1][k]) + (leaf[2][k] + leaf[3][k])) +
                    ((leaf[4][k] + leaf[5][k]) + (leaf[6][k] + leaf[7][k]));
    CHECK(memcmp(dw, byhand, sizeof dw) == 0, "matmul dw: not the tree over chunks of the trees over leaves");
    // Two context devices, each with one chunk of both sequences (tokens 4r .. 4r+3 of each):
    // each adds a subtree, and the two roots added give the same bits.
    float part[2][CC * OO], pin[8 * CC], pout[8 * OO];
    Leaves half = {2, 4, 2, 4, 1, 4};   // what leaves_of gives a device of context=2
    for (int r = 0; r < 2; r++) {
        for (int b = 0; b < 2; b++) {
            memcpy(pin + b * 4 * CC, inp + (b * 8 + 4 * r) * CC, sizeof(float) * 4 * CC);
            memcpy(pout + b * 4 * OO, dout + (b * 8 + 4 * r) * OO, sizeof(float) * 4 * OO);
        }
        memset(part[r], 0, sizeof part[r]);
        matmul_backward(NULL, part[r], pout, pin, NULL, 8, CC, OO, half);
    }
    int same = 1;
    for (int k = 0; k < CC * OO; k++) same &= part[0][k] + part[1][k] == dw[k];
    CHECK(same, "matmul dw: two context devices' subtrees do not add up to the one-device tree");
    printf("  leaf order (chunk, sequence, leaf) and its tree: one device = two context devices: %s\n",
           same ? "bit for bit" : "NO");
}

// ---- small layers against finite differences ----
enum { T = 6, D = 8, V = 11, LEAF = 3 };
#define LEAVES leaves_flat(T, LEAF)   // T tokens of one sequence, leaves of LEAF
static float X[T * D], SC[D], R[T * D], OUT[T * D], RSTD[T], TABLE[V * D], W[D * V], LOGITS[T * V];
static int IDS[T] = {3, 1, 3, 10, 0, 3}, TGT[T] = {2, 5, -1, 7, 7, 0};

static double rmsnorm_loss(void *ctx) {
    (void)ctx;
    rmsnorm_forward(OUT, RSTD, X, SC, T, D, 1e-5f, 0);
    return gc_dot(OUT, R, T * D);
}
static double embed_loss(void *ctx) {
    (void)ctx;
    embedding_forward(OUT, IDS, TABLE, T, D, V, 0);
    return gc_dot(OUT, R, T * D);
}
static double matmul_loss(void *ctx) {
    (void)ctx;
    matmul_forward(LOGITS, X, W, T, D, V, 0);
    float r2[T * V];
    uint64_t s = 99;
    gc_fill(r2, T * V, &s, 1.0f);
    return gc_dot(LOGITS, r2, T * V);
}
static double ce_loss(void *ctx) {
    float lse[T];
    double sums[T / LEAF];
    float zmul = *(float *)ctx;
    loss_forward(lse, sums, LOGITS, 0, TGT, T, V, 0, 1, zmul, LEAVES);
    return sums[0] + sums[1];
}

static void test_layers(void) {
    uint64_t seed = 1;
    gc_fill(X, T * D, &seed, 1.0f);
    gc_fill(SC, D, &seed, 1.0f);
    gc_fill(R, T * D, &seed, 1.0f);
    gc_fill(TABLE, V * D, &seed, 1.0f);
    gc_fill(W, D * V, &seed, 0.5f);
    // RMSNorm: dx and dscale.
    float dx[T * D] = {0}, dsc[D] = {0};
    rmsnorm_forward(OUT, RSTD, X, SC, T, D, 1e-5f, 0);
    rmsnorm_backward(dx, dsc, R, X, SC, RSTD, T, D, LEAVES, 0);
    gradcheck("rmsnorm dx", X, T * D, dx, rmsnorm_loss, NULL, 1e-2, 1e-2);
    gradcheck("rmsnorm dscale", SC, D, dsc, rmsnorm_loss, NULL, 1e-2, 1e-2);
    // Embedding: the scatter-add, with a repeated id.
    float dtab[V * D] = {0};
    embedding_backward(dtab, R, IDS, T, D, V, 0, LEAVES);
    gradcheck("embedding dtable", TABLE, V * D, dtab, embed_loss, NULL, 1e-2, 1e-2);
    // Matmul: dinp and dw.
    float r2[T * V], dX[T * D] = {0}, dW[D * V] = {0};
    uint64_t s = 99;
    gc_fill(r2, T * V, &s, 1.0f);
    matmul_backward(dX, dW, r2, X, W, T, D, V, LEAVES);
    gradcheck("matmul dinp", X, T * D, dX, matmul_loss, NULL, 1e-2, 1e-2);
    gradcheck("matmul dw", W, D * V, dW, matmul_loss, NULL, 1e-2, 1e-2);
    // Cross-entropy with z-loss; token 2 is ignored (target -1).
    for (int zi = 0; zi < 2; zi++) {
        float zmul = zi ? 1e-2f : 0.0f;
        matmul_forward(LOGITS, X, W, T, D, V, 0);
        float lse[T], dz[T * V];
        double sums[T / LEAF];
        loss_forward(lse, sums, LOGITS, 0, TGT, T, V, 0, 1, zmul, LEAVES);
        memcpy(dz, LOGITS, sizeof dz);
        loss_backward(dz, lse, TGT, T, V, 0, zmul, 1.0f);
        int zero = 1;
        for (int v = 0; v < V; v++) zero &= dz[2 * V + v] == 0.0f;
        CHECK(zero, "ignored token has a non-zero gradient");
        gradcheck(zi ? "cross-entropy + z-loss" : "cross-entropy", LOGITS, T * V, dz, ce_loss, &zmul, 1e-2, 1e-2);
    }
    // Cross-entropy of uniform logits is log(V) per token.
    memset(LOGITS, 0, sizeof LOGITS);
    float lse[T];
    double sums[T / LEAF];
    loss_forward(lse, sums, LOGITS, 0, TGT, T, V, 0, 1, 0.0f, LEAVES);
    CHECK_CLOSE((sums[0] + sums[1]) / 5, log(11.0), 1e-6, "uniform logits give log(V)");
}

// ---- use_iota_embed: the one-hot matmul gives the gather's bits, forward and backward ----
static void test_iota_embed(void) {
    enum { IT = 40, ID = 40, IV = 25, IV0 = 10, ILEAF = 8 };   // this device holds rows 10..34 of 50
    static float table[IV * ID], dout[IT * ID], a[IT * ID], b[IT * ID], ga[IV * ID], gb[IV * ID];
    int ids[IT];
    uint64_t seed = 7;
    gc_fill(table, IV * ID, &seed, 1.0f);
    gc_fill(dout, IT * ID, &seed, 1.0f);
    gc_fill(ga, IV * ID, &seed, 1.0f);   // a gradient already holding something (+=)
    memcpy(gb, ga, sizeof ga);
    for (int t = 0; t < IT; t++) ids[t] = (t * 7 + t / 3) % 50;   // repeats, and ids of other devices
    embedding_forward(a, ids, table, IT, ID, IV, IV0);
    embedding_forward_onehot(b, ids, table, IT, ID, IV, IV0);
    CHECK(!memcmp(a, b, sizeof a), "one-hot embedding forward differs from the gather");
    embedding_backward(ga, dout, ids, IT, ID, IV, IV0, leaves_flat(IT, ILEAF));
    embedding_backward_onehot(gb, dout, ids, IT, ID, IV, IV0, leaves_flat(IT, ILEAF));
    CHECK(!memcmp(ga, gb, sizeof ga), "one-hot embedding backward differs from the scatter-add");
    printf("  use_iota_embed: one-hot @ table = gather, onehot^T @ dout = scatter-add (leaves of %d): bit for bit\n",
           ILEAF);
}

// ---- row-stable matmul: a row's result must not depend on the other rows in the call ----
static void test_row_stable_matmul(void) {
    enum { TT = 200, CC = 96, OO = 80 };
    float *inp = malloc(sizeof(float) * TT * CC), *w = malloc(sizeof(float) * CC * OO);
    float *full = malloc(sizeof(float) * TT * OO), *part = malloc(sizeof(float) * TT * OO);
    float *dfull = calloc(TT * CC, sizeof(float)), *dpart = calloc(TT * CC, sizeof(float));
    uint64_t seed = 5;
    gc_fill(inp, TT * CC, &seed, 1.0f);
    gc_fill(w, CC * OO, &seed, 1.0f);
    matmul_forward(full, inp, w, TT, CC, OO, 0);
    matmul_backward(dfull, NULL, full, NULL, w, TT, CC, OO, leaves_flat(TT, TT));
    // Every start offset in 0..47 (a row lands on every place of a register tile), and a
    // few lengths: each sub-call must reproduce its rows of the 200-row call bit for bit.
    int counts[5] = {1, 7, 37, 64, 130}, same = 1, dsame = 1;
    for (int i = 0; i < 5; i++)
        for (int t0 = 0; t0 < 48; t0++) {
            int n = counts[i];
            matmul_forward(part, inp + (size_t)t0 * CC, w, n, CC, OO, 0);
            same &= memcmp(part, full + (size_t)t0 * OO, sizeof(float) * n * OO) == 0;
            memset(dpart, 0, sizeof(float) * TT * CC);
            matmul_backward(dpart, NULL, full + (size_t)t0 * OO, NULL, w, n, CC, OO, leaves_flat(n, n));
            dsame &= memcmp(dpart, dfull + (size_t)t0 * CC, sizeof(float) * n * CC) == 0;
        }
    // Column-stable too (tensor parallelism computes a slice of the columns): the columns
    // [j0, j0+nc) of w alone give the same bits as those columns of the full product.
    int csame = 1;
    float *wc = malloc(sizeof(float) * CC * OO), *pc = malloc(sizeof(float) * TT * OO);
    int cj[4][2] = {{0, 16}, {16, 40}, {3, 5}, {37, 43}};
    for (int i = 0; i < 4; i++) {
        int j0 = cj[i][0], nc = cj[i][1];
        for (int k = 0; k < CC; k++) memcpy(wc + (size_t)k * nc, w + (size_t)k * OO + j0, sizeof(float) * nc);
        matmul_forward(pc, inp, wc, TT, CC, nc, 0);
        for (int t = 0; t < TT; t++) csame &= memcmp(pc + (size_t)t * nc, full + (size_t)t * OO + j0, sizeof(float) * nc) == 0;
    }
    free(wc); free(pc);
    CHECK(same, "matmul_forward: a row's bits depend on the rows around it");
    CHECK(dsame, "matmul_backward dinp: a row's bits depend on the rows around it");
    CHECK(csame, "matmul_forward: a column's bits depend on the columns around it");
    printf("  row-stable matmul: calls of 1, 7, 37, 64, 130 rows at every offset 0..47, and 4 column slices, "
           "equal the full product: %s\n", same && dsame && csame ? "bit for bit" : "NO");
    free(inp); free(w); free(full); free(part); free(dfull); free(dpart);
}

// ---- schedule and AdamW, against values worked out by hand ----
static void test_optimizer(void) {
    Config c;
    config_defaults(&c);
    c.learning_rate = 1.0f; c.steps = 11; c.warmup_steps_fraction = 0.1f; c.learning_rate_final_fraction = 0.1f;
    // warmup = int(0.1*11) = 1 step: lr(0) = 0. Cosine over n = 10 steps, k = step-1,
    // pct = k/9: lr(1) = 1 (a = 1), lr(10) = 0.1 (a = 0), lr(5.5...) midpoint:
    CHECK_CLOSE(lr_schedule(&c, 0), 0.0, 0, "lr at step 0 (warm-up starts at 0)");
    CHECK_CLOSE(lr_schedule(&c, 1), 1.0, 1e-7, "lr after warm-up");
    CHECK_CLOSE(lr_schedule(&c, 10), 0.1, 1e-7, "final lr");
    // k = 3: pct = 1/3, a = 0.5*(cos(pi/3)+1) = 0.75, lr = 0.75 + 0.1*0.25 = 0.775
    CHECK_CLOSE(lr_schedule(&c, 4), 0.775, 1e-6, "cosine at pct 1/3");
    // learning_rate_schedule_steps = 11 sets the same schedule whatever steps is: with
    // steps = 5 (a run stopped early, to be resumed) step 4 still has 0.775; with steps = 22
    // step 10 ends the cosine at 0.1, and steps 11..21, past the schedule, have 0.
    c.learning_rate_schedule_steps = 11; c.steps = 5;
    CHECK_CLOSE(lr_schedule(&c, 4), 0.775, 1e-6, "schedule of 11 steps in a run of 5: cosine at pct 1/3");
    c.steps = 22;
    CHECK_CLOSE(lr_schedule(&c, 10), 0.1, 1e-7, "schedule of 11 steps in a run of 22: its final lr");
    CHECK_CLOSE(lr_schedule(&c, 11), 0.0, 0, "schedule of 11 steps in a run of 22: 0 after it");
    CHECK_CLOSE(lr_schedule(&c, 21), 0.0, 0, "schedule of 11 steps in a run of 22: 0 at the last step");
    c.learning_rate_schedule_steps = -1;
    // MaxText's warm-up is optax.linear_schedule(0, lr, transition_steps = W - 1): its last
    // step reaches the peak. steps = 10, fraction 0.3: W = 3, lr 0, 0.5, 1; then the cosine
    // over n = 7 steps, k = step - 3: step 5 has pct 2/6 = 1/3 (0.775), step 9 the final rate.
    c.steps = 10; c.warmup_steps_fraction = 0.3f;
    CHECK_CLOSE(lr_schedule(&c, 1), 0.5, 1e-7, "warm-up of 3 steps: step 1 halfway");
    CHECK_CLOSE(lr_schedule(&c, 2), 1.0, 1e-7, "warm-up of 3 steps: its last step at the peak");
    CHECK_CLOSE(lr_schedule(&c, 3), 1.0, 1e-7, "cosine's first step at the peak");
    CHECK_CLOSE(lr_schedule(&c, 5), 0.775, 1e-6, "cosine of 7 steps at pct 1/3");
    CHECK_CLOSE(lr_schedule(&c, 9), 0.1, 1e-7, "cosine of 7 steps: final lr");
    // A cosine of one step is MaxText's pct = 1: the final rate (fraction 0.9: W = 9, n = 1).
    c.warmup_steps_fraction = 0.9f;
    CHECK_CLOSE(lr_schedule(&c, 8), 1.0, 1e-7, "warm-up of 9 steps: its last step at the peak");
    CHECK_CLOSE(lr_schedule(&c, 9), 0.1, 1e-7, "cosine of one step: the final rate");
    // lr_schedule_type=wsd, steps = 10: warm-up W = 2 (0, 1), decay D = int(0.4*10) = 4 over
    // steps 6..9, the peak held over the 4 steps between. Linear: 1, 0.7, 0.4, 0.1; cosine:
    // pct 1/3 gives 0.775, 2/3 gives a = 0.25, 0.25 + 0.1*0.75 = 0.325.
    c.lr_schedule_type = LR_SCHEDULE_WSD; c.warmup_steps_fraction = 0.2f; c.wsd_decay_steps_fraction = 0.4f;
    c.wsd_decay_style = WSD_DECAY_LINEAR;
    CHECK_CLOSE(lr_schedule(&c, 1), 1.0, 1e-7, "wsd: warm-up of 2 steps at the peak");
    CHECK_CLOSE(lr_schedule(&c, 2), 1.0, 0, "wsd: stable");
    CHECK_CLOSE(lr_schedule(&c, 5), 1.0, 0, "wsd: stable's last step");
    CHECK_CLOSE(lr_schedule(&c, 6), 1.0, 1e-7, "wsd linear: decay's first step");
    CHECK_CLOSE(lr_schedule(&c, 7), 0.7, 1e-6, "wsd linear: decay's second step");
    CHECK_CLOSE(lr_schedule(&c, 8), 0.4, 1e-6, "wsd linear: decay's third step");
    CHECK_CLOSE(lr_schedule(&c, 9), 0.1, 1e-7, "wsd linear: the final rate");
    c.wsd_decay_style = WSD_DECAY_COSINE;
    CHECK_CLOSE(lr_schedule(&c, 7), 0.775, 1e-6, "wsd cosine: pct 1/3");
    CHECK_CLOSE(lr_schedule(&c, 8), 0.325, 1e-6, "wsd cosine: pct 2/3");
    CHECK_CLOSE(lr_schedule(&c, 9), 0.1, 1e-7, "wsd cosine: the final rate");
    // A decay of one step (D = 1): optax's linear schedule of transition_steps 0 stays at the
    // peak, the cosine of one step is the final rate.
    c.warmup_steps_fraction = 0.0f; c.wsd_decay_steps_fraction = 0.1f;
    CHECK_CLOSE(lr_schedule(&c, 9), 0.1, 1e-7, "wsd cosine of one step: the final rate");
    c.wsd_decay_style = WSD_DECAY_LINEAR;
    CHECK_CLOSE(lr_schedule(&c, 9), 1.0, 0, "wsd linear of one step: the peak (optax's transition_steps 0)");
    CHECK_CLOSE(lr_schedule(&c, 0), 1.0, 0, "no warm-up: the peak from step 0");
    c.lr_schedule_type = LR_SCHEDULE_COSINE; c.warmup_steps_fraction = 0.1f; c.steps = 11;
    // Step counts of a fraction are MaxText's int(n * fraction) of the decimal written, in
    // double: 0.21 x 300 = 63 and 0.13 x 900 = 117, where the floats' product gives 62 and 116.
    CHECK(cfg_steps_fraction(0.21f, 300) == 63, "int(0.21 x 300) = 63, as Python computes it");
    CHECK(cfg_steps_fraction(0.13f, 900) == 117, "int(0.13 x 900) = 117, as Python computes it");
    CHECK(cfg_steps_fraction(0.1f, 5) == 0 && cfg_steps_fraction(1.0f, 7) == 7, "int(0.1 x 5) = 0, int(1 x 7) = 7");
    // The MoE capacity likewise: S K / E = 10 (S = 20, K = 2, E = 4), factor 0.7: MaxText's 7.
    Config mc;
    config_defaults(&mc);
    mc.num_experts = 4; mc.num_experts_per_tok = 2; mc.capacity_factor = 0.7f;
    CHECK(moe_capacity(&mc, 20) == 7, "capacity int(ceil(20 x 2 / 4) x 0.7) = 7 (the float's product: 6)");
    // AdamW, one step from m = v = 0 with g = 0.5, p = 2, lr = 0.1, wd = 0.1:
    // mhat = g, vhat = g^2, u = g/(|g| + eps) ~= 1, p = 2 - 0.1*(1 + 0.2) = 1.88
    float p = 2.0f, g = 0.5f, m = 0, v = 0;
    AdamWParams h = {0.1f, 1, c.adam_b1, c.adam_b2, c.adam_eps, c.adam_eps_root, c.adam_weight_decay, 0, 0};
    kern()->optim->adamw_update(&p, NULL, &g, &m, NULL, &v, 1, h, grad_clip_of(0.0f, 0.0f));
    CHECK_CLOSE(p, 1.88, 1e-6, "AdamW first step");
    CHECK_CLOSE(m, 0.05, 1e-7, "AdamW mu = (1-b1) g");
    CHECK_CLOSE(v, 0.0125, 1e-8, "AdamW nu = (1-b2) g^2");
    // Clipping: norm 5 with threshold 1 scales by 1/5; below the threshold nothing changes.
    // The norm's sum of squares in fixed point: 9 + 16 = 25 exactly, 2^64 per unit.
    float gr[2] = {3.0f, 4.0f};
    Squares sq = {0, 0};
    kern()->optim->squares_add(&sq.sum, &sq.bad, gr, 2);
    CHECK(sq.sum == (fixed128)25 << 64 && !sq.bad, "fixed-point squares of 3, 4: %g", (double)sq.sum / SQUARES_SCALE);
    float n = (float)sqrt((double)sq.sum / SQUARES_SCALE);
    CHECK_CLOSE(n, 5.0, 0, "global norm");
    float inf[1] = {INFINITY};
    kern()->optim->squares_add(&sq.sum, &sq.bad, inf, 1);
    CHECK(sq.bad && sq.sum == (fixed128)25 << 64, "a non-finite gradient is flagged, not added");
    // Many elements (the threaded path) over magnitudes 2^-60 .. 2^17, squares from below
    // the fixed-point grid to above 2^64 units: the same integer as a serial sum of the C
    // library's conversions, and one huge element raises the flag without being added.
    size_t big = 300005;   // not a multiple of 8: the vector loop and its tail
    float *xs = malloc(sizeof(float) * big);
    fixed128 want = 0;
    for (size_t k = 0; k < big; k++) {
        xs[k] = ldexpf(1.0f + (float)(k % 977) / 977.0f, (int)(k % 78) - 60) * (k % 3 ? 1.0f : -1.0f);
        want += (fixed128)((double)xs[k] * xs[k] * SQUARES_SCALE);
    }
    Squares many = {0, 0};
    kern()->optim->squares_add(&many.sum, &many.bad, xs, big);
    CHECK(many.sum == want && !many.bad, "fixed-point squares of %zu elements: %.17g, serial %.17g", big,
          (double)many.sum, (double)want);
    float orig = xs[big / 2];
    fixed128 orig_term = (fixed128)((double)orig * orig * SQUARES_SCALE);
    xs[big / 2] = 0x1p40f;   // its square is 2^80, 2^144 units: past the 2^100 bound
    Squares flagged = {0, 0};
    kern()->optim->squares_add(&flagged.sum, &flagged.bad, xs, big);
    CHECK(flagged.bad && flagged.sum == want - orig_term, "a square past the bound is flagged, the others added");
    // Random bit patterns over every exponent (subnormals, infinities, NaNs), and the floats
    // either side of the bound 2^18: the same integer and flag as the serial sum, by halves
    // (the first all below the bound, the second with the flagged ones left out).
    uint32_t state = 12345;
    for (size_t k = 0; k < big; k++) {
        state = state * 1664525u + 1013904223u;
        uint32_t bits = (state & 0x807fffffu) | ((k < big / 2 ? (state >> 8) % 145 : (state >> 8) % 256) << 23);
        memcpy(&xs[k], &bits, sizeof bits);
    }
    xs[1] = nextafterf(0x1p18f, 0.0f);
    xs[big - 2] = 0x1p18f;
    for (int half = 0; half < 2; half++) {
        size_t k0 = half ? big / 2 : 0, k1 = half ? big : big / 2;
        fixed128 serial = 0;
        int serial_bad = 0;
        for (size_t k = k0; k < k1; k++) {
            double sqk = (double)xs[k] * xs[k] * SQUARES_SCALE;
            if (sqk < 0x1p100) serial += (fixed128)sqk;
            else serial_bad = 1;
        }
        Squares got = {0, 0};
        kern()->optim->squares_add(&got.sum, &got.bad, xs + k0, k1 - k0);
        CHECK(got.sum == serial && got.bad == serial_bad && serial_bad == half,
              "random bits, half %d: fixed-point squares %.17g (flag %d), serial %.17g (flag %d)", half,
              (double)got.sum, got.bad, (double)serial, serial_bad);
    }
    free(xs);
    grad_clip(gr, 2, n, 1.0f);
    CHECK_CLOSE(gr[0], 0.6, 1e-7, "clipped gradient");
    grad_clip(gr, 2, 1.0f - 1e-6f, 1.0f);
    CHECK_CLOSE(gr[0], 0.6, 1e-7, "no clip below the threshold");
    // Routing bias: target = T*K/E = 8*2/4 = 4 per expert.
    float bias[4] = {0};
    long counts[4] = {8, 4, 3, 1};
    router_bias_update(bias, counts, 8, 4, 2, 0.01f);
    CHECK(bias[0] == -0.01f && bias[1] == 0.0f && bias[2] == 0.01f && bias[3] == 0.01f,
          "bias update: got %g %g %g %g", bias[0], bias[1], bias[2], bias[3]);
}

static void test_config_json(void) {
    Config a, b;
    config_defaults(&a);
    config_set(&a, "decoder_block", "deepseek", "test");
    config_set(&a, "capacity_factor", "1.25", "test");
    config_set(&a, "sparse_matmul", "false", "test");
    config_set(&a, "metrics_file", "a \"quoted\" path\\x", "test");
    char json[16384];
    config_to_json(&a, json, sizeof json);
    config_defaults(&b);
    config_from_json(&b, json, "test");
    CHECK(memcmp(&a, &b, sizeof a) == 0, "config JSON round trip changed the config");
}

// ---- bf16: round to nearest even, and saved activations that really take 2 bytes ----
static void test_bf16(void) {
    // (input bits, expected bf16 bits), worked out by hand: the upper 16 bits, rounded on
    // the lower 16 (0x8000 is the halfway point; ties go to the even upper half).
    uint32_t cases[][2] = {
        {0x3f800000u, 0x3f80},   // 1.0 exact
        {0x3f808000u, 0x3f80},   // halfway, upper half even: stays
        {0x3f818000u, 0x3f82},   // halfway, upper half odd: up to even
        {0x3f808001u, 0x3f81},   // just above halfway: up
        {0x3f807fffu, 0x3f80},   // just below: down
        {0xbf818000u, 0xbf82},   // negative, halfway to even (away from zero here)
        {0x7f7fffffu, 0x7f80},   // largest float rounds to +inf
        {0x7f800000u, 0x7f80},   // +inf stays
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i][0], 4);
        ok &= bf16_bits(f) == cases[i][1];
    }
    float nan = NAN;
    ok &= isnan(bf16_round(nan));
    CHECK(ok, "bf16 rounding is not round-to-nearest-even on the hand-worked cases");
    // act_pack: n bf16-valued floats become 2n bytes under the same tag, and come back exactly.
    Config c;
    config_defaults(&c);
    c.dtype = DTYPE_BFLOAT16;
    size_t n = 1000;
    Device *d = mem_device();
    size_t before = d->live[MEM_ACTIVATIONS];
    float *x = mem_floats(MEM_ACTIVATIONS, n, "test activation"), ref[1000];
    for (size_t i = 0; i < n; i++) ref[i] = x[i] = bf16_round((float)i * 0.37f - 100.0f);
    act_pack(&c, &x, n);
    size_t packed = d->live[MEM_ACTIVATIONS] - before;
    act_unpack(&c, &x, n);
    CHECK(packed == 2 * n, "a packed activation holds %zu bytes, want %zu", packed, 2 * n);
    CHECK(memcmp(x, ref, sizeof ref) == 0, "pack/unpack changed a bf16 value");
    mem_free(x);
    printf("  bf16: round-to-nearest-even on 9 hand-worked cases; a saved activation of %zu values takes %zu bytes\n",
           n, packed);
}

// ---- adafactor: which dims optax factors over (np.argsort: ties go to the later index) ----
static void test_adafactor_dims(void) {
    struct { int nd, shape[3], factored, row, col; } cases[] = {
        {2, {256, 128}, 1, 1, 0},      // embedding (V, D): rows D, columns V
        {2, {128, 128}, 1, 0, 1},      // a tie: the later dim is the larger
        {3, {4, 128, 256}, 1, 1, 2},   // expert stack (E, D, F): per expert, rows D, columns F
        {3, {128, 4, 32}, 0, 0, 0},    // second largest 32 < 128: full second moment
        {2, {128, 127}, 0, 0, 0},
        {1, {4096}, 0, 0, 0},          // vectors are never factored
        {3, {256, 256, 256}, 1, 1, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = -1, c = -1, f = adafactor_factored_dims(cases[i].shape, cases[i].nd, &r, &c);
        CHECK(f == cases[i].factored && (!f || (r == cases[i].row && c == cases[i].col)),
              "adafactor dims case %zu: factored %d rows %d cols %d", i, f, r, c);
    }
}

// ---- local dims: one device's heads, widths and vocabulary slice (model/dims.h) ----
static void set_all(Config *c, const char *const kv[][2], int n) {
    config_defaults(c);
    for (int i = 0; i < n; i++) config_set(c, kv[i][0], kv[i][1], "test");
}

static int dims_are(LocalDims d, int nq, int nkv, int mlp, int expert, int vocab, int first) {
    return d.num_query_heads == nq && d.num_kv_heads == nkv && d.mlp_dim == mlp && d.expert_dim == expert &&
           d.vocab_size == vocab && d.vocab_first == first;
}

static void test_local_dims(void) {
    // The tiny presets' dimensions; expected values divided by hand.
    static const char *const mixtral[][2] = {{"base_num_query_heads", "4"}, {"base_num_kv_heads", "2"},
                                             {"base_mlp_dim", "256"}, {"vocab_size", "256"}};
    static const char *const deepseek[][2] = {{"decoder_block", "deepseek"}, {"attention_type", "mla"},
                                              {"base_num_query_heads", "4"}, {"base_num_kv_heads", "1"},
                                              {"base_mlp_dim", "256"}, {"base_moe_mlp_dim", "96"},
                                              {"first_num_dense_layers", "1"}, {"vocab_size", "256"}};
    Config c;
    set_all(&c, mixtral, 4);
    // Mixtral: base_mlp_dim is the expert width; no dense layer, so no dense width.
    CHECK(dims_are(local_dims(&c, 1, 0), 4, 2, 0, 256, 256, 0), "mixtral, one device: not the Config's dims");
    CHECK(dims_are(local_dims(&c, 2, 1), 2, 1, 0, 128, 128, 128), "mixtral, tensor 2, rank 1: wrong share");
    set_all(&c, deepseek, 8);
    // DeepSeek MLA: a key and value head per query head, whatever base_num_kv_heads says.
    CHECK(dims_are(local_dims(&c, 1, 0), 4, 4, 256, 96, 256, 0), "deepseek, one device: not the Config's dims");
    CHECK(dims_are(local_dims(&c, 2, 1), 2, 2, 128, 48, 128, 128), "deepseek, tensor 2, rank 1: wrong share");
    CHECK(dims_are(local_dims(&c, 4, 3), 1, 1, 64, 24, 64, 192), "deepseek, tensor 4, rank 3: wrong share");
}

// The all-reduce (base/collectives.c:coll_all_reduce): every member ends with the tree sum
// over ranks of every member's buffer, bit for bit, on groups of 2, 3 and 4 (3: slices of
// unequal length), for buffers shorter than the group and above the kernels' threading
// threshold. The reduce-scatter in place (coll_reduce_scatter_inplace, ZeRO-1's gradient):
// member r ends with that sum in its slice [n r / P, n (r+1) / P) and its own values
// elsewhere. The expected sums are plain float adds in the tree's order, made here.
typedef struct { size_t n; int scatter; float *got[4]; } ArRun;
static float ar_value(int r, size_t i) { return (float)((r % 2 ? -1.0 : 1.0) / (3.0 + 0.37 * (double)i + 1.91 * r)); }
static void ar_device(int d, void *arg) {
    ArRun *a = (ArRun *)arg;
    float *b = mem_floats(MEM_TEMP, a->n, "all-reduce test buffer");
    for (size_t i = 0; i < a->n; i++) b[i] = ar_value(d, i);
    if (a->scatter) coll_reduce_scatter_inplace(mesh_axis_group(AX_DATA), b, a->n);
    else coll_all_reduce(mesh_axis_group(AX_DATA), b, a->n);
    memcpy(a->got[d], b, sizeof(float) * a->n);
    mem_free(b);
}
static void test_all_reduce(int scatter) {
    const size_t sizes[] = {1, 5, 1001, 100003};
    const char *what = scatter ? "reduce-scatter in place" : "all-reduce";
    int failed_before = test_failed;
    for (int P = 2; P <= 4; P++)
        for (int k = 0; k < 4; k++) {
            size_t n = sizes[k];
            Config c;
            config_defaults(&c);
            c.ici_data_parallelism = P;
            Mesh mesh;
            mesh_init(&mesh, &c);
            ArRun run = {n, scatter, {0}};
            for (int r = 0; r < P; r++) run.got[r] = malloc(sizeof(float) * n);
            mesh_run(&mesh, ar_device, &run);
            int same = 1, leak = 0;
            for (size_t i = 0; i < n; i++) {
                float v[4];
                for (int r = 0; r < P; r++) v[r] = ar_value(r, i);
                float want = P == 2 ? v[0] + v[1] : P == 3 ? (v[0] + v[1]) + v[2] : (v[0] + v[1]) + (v[2] + v[3]);
                for (int r = 0; r < P; r++) {
                    int summed = !scatter || (i >= n * r / P && i < n * (r + 1) / P);
                    same &= memcmp(&run.got[r][i], summed ? &want : &v[r], sizeof want) == 0;
                }
            }
            for (int r = 0; r < P; r++) { leak |= mesh.devices[r].live_total != 0; free(run.got[r]); }
            CHECK(same && !leak, "%s of %zu floats over %d devices: %s bit for bit (%s, %s)", what, n, P,
                  scatter ? "each member's slice holds the tree sum, the rest its own values" : "every member has the tree sum",
                  same ? "same" : "DIFFERS", leak ? "LEAKED" : "no leak");
            mesh_free(&mesh);
        }
    if (test_failed == failed_before)
        printf("  %s: groups of 2, 3, 4, buffers of 1 to 100003 floats: the tree sum %s, bit for bit\n", what,
               scatter ? "in each member's slice" : "on every member");
}

int main(void) {
    Device dev;
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    test_treesum();
    test_leaf_order();
    test_bf16();
    test_layers();
    test_row_stable_matmul();
    test_iota_embed();
    test_optimizer();
    test_adafactor_dims();
    test_config_json();
    test_local_dims();
    test_all_reduce(0);
    test_all_reduce(1);
    CHECK(dev.live_total == 0, "leaked %zu bytes of device memory", dev.live_total);
    TEST_SUMMARY();
}
