// kernels/watch.c: the watched backend (kernels/watch.h): each kernel of the backend it
// wraps, called through a twin of the same name and arguments that calls the watchers'
// enter hook before it and their leave hook after, with the kernel's family and its work.
// The work is the least the kernel's contract implies: 2 flops per multiply-add of a
// product, each operand read once and each result written once (4 bytes a float); a kernel
// that reads an operand twice, or from cache, moves more or less than its byte count.
// Attention counts the score pairs a causal query row can see, which is what the kernels
// compute, not the full S x S of the model-FLOPs formula (tests/bench.py).
#include "kernels/watch.h"
#include "core/common.h"   // die

static const Backend *inner = &backend_cpu;   // the backend watched
#define INNER(family) inner->family
static WatchHooks hooks[WATCH_MOST];          // the watchers, in the order added
static int nhooks;
_Thread_local WatchProduct watch_product;
_Thread_local const char *watch_kernel;

// Before a kernel the watchers' enter in the order they were added, after it their leave in
// the reverse order: the first added brackets the others (strict's protection around the
// profile's clock, so that the clock times the kernel alone).
static void enter(int family) {
    for (int i = 0; i < nhooks; i++) hooks[i].enter(family);
}
static void leave(int family, double flops, double bytes) {
    for (int i = nhooks - 1; i >= 0; i--) hooks[i].leave(family, flops, bytes);
}

// Run `call` (a kernel of the watched backend) between the hooks, with fl flops and by
// floats moved, in family F.
#define WATCHED(F, call, fl, by)                            \
    do {                                                    \
        watch_kernel = __func__;                            \
        enter(F);                                           \
        call;                                               \
        leave(F, (double)(fl), 4.0 * (double)(by));         \
    } while (0)

// ---- matmul: 2 flops per multiply-add; A, B read and C written (read too when added to)
static void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    watch_product = (WatchProduct){"x @ w", T, OC, C};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->matmul_forward(out, inp, w, T, C, OC, accumulate), 2.0 * T * C * OC,
          (double)T * C + (double)C * OC + (1.0 + accumulate) * T * OC);
}
static void matmul_backward_dinp(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    watch_product = (WatchProduct){"dy @ w^T", T, C, OC};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->matmul_backward_dinp(dinp, dout, w, T, C, OC), 2.0 * T * C * OC,
          (double)T * OC + (double)C * OC + 2.0 * T * C);
}
static void matmul_backward_dw(float *dw, const float *inp, const float *dout, int len, int C, int OC, int accumulate) {
    watch_product = (WatchProduct){"x^T @ dy", C, OC, len};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->matmul_backward_dw(dw, inp, dout, len, C, OC, accumulate), 2.0 * len * C * OC,
          (double)len * C + (double)len * OC + (1.0 + accumulate) * C * OC);
}
static void gemm(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                 int accumulate, float *C, int ldc) {
    static const char *const forms[2][2] = {{"A @ B", "A @ B^T"}, {"A^T @ B", "A^T @ B^T"}};
    watch_product = (WatchProduct){forms[!!transA][!!transB], M, N, K};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->gemm(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc),
          2.0 * M * N * K, (double)M * K + (double)K * N + (1.0 + accumulate) * M * N);
}
static void gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B, int ldb,
                         float *C, int ldc) {
    watch_product = (WatchProduct){transB ? "A @ B^T, pieces" : "A @ B, pieces", M, N, K};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->gemm_chunked(transB, M, N, K, chunks, A, lda, B, ldb, C, ldc),
          2.0 * M * N * K, (double)M * K + (double)K * N + (double)M * N);
}
static void matmul_backward_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C,
                                      int OC, int accumulate) {
    double K = n > 0 ? off[n] : 0;
    watch_product = (WatchProduct){"x^T @ dy, leaves", C, OC, (int)K};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->matmul_backward_dw_leaves(dw, inp, dout, off, n, C, OC, accumulate),
            2.0 * K * C * OC, K * C + K * OC + (accumulate ? 2.0 : 1.0) * C * OC);
}
// The grouped products: M counts the rows of all the groups.
static void matmul_forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC,
                                   int accumulate) {
    double R = rows[G];
    watch_product = (WatchProduct){"x @ w, grouped", rows[G], OC, C};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->matmul_forward_grouped(out, inp, w, rows, G, C, OC, accumulate),
            2.0 * R * C * OC, R * C + (double)G * C * OC + (1.0 + accumulate) * R * OC);
}
static void matmul_backward_dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C,
                                         int OC) {
    double R = rows[G];
    watch_product = (WatchProduct){"dy @ w^T, grouped", rows[G], C, OC};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->matmul_backward_dinp_grouped(dinp, dout, w, rows, G, C, OC),
            2.0 * R * C * OC, R * OC + (double)G * C * OC + 2.0 * R * C);
}
static void gemm_chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const float *A,
                                 const float *B, float *out) {
    double R = rows[G];
    watch_product = (WatchProduct){transB ? "A @ B^T, pieces, grouped" : "A @ B, pieces, grouped", rows[G], N, K};
    WATCHED(FAMILY_MATMUL, INNER(matmul)->gemm_chunked_grouped(transB, rows, G, N, K, chunks, A, B, out),
            2.0 * R * N * K, R * K + (double)G * K * N + R * N);
}
static void matmul_backward_dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n,
                                              int G, int C, int OC, int accumulate) {
    double K = off[(size_t)G * n];
    watch_product = (WatchProduct){"x^T @ dy, leaves, grouped", C, OC, (int)K};
    WATCHED(FAMILY_MATMUL,
            INNER(matmul)->matmul_backward_dw_leaves_grouped(dw, inp, dout, off, n, G, C, OC, accumulate),
            2.0 * K * C * OC, K * C + K * OC + (accumulate ? 2.0 : 1.0) * G * C * OC);
}
static const MatmulKernels matmul_watched = {.matmul_forward = matmul_forward,
                                             .matmul_backward_dinp = matmul_backward_dinp,
                                             .matmul_backward_dw = matmul_backward_dw,
                                             .gemm = gemm,
                                             .gemm_chunked = gemm_chunked,
                                             .matmul_backward_dw_leaves = matmul_backward_dw_leaves,
                                             .matmul_forward_grouped = matmul_forward_grouped,
                                             .matmul_backward_dinp_grouped = matmul_backward_dinp_grouped,
                                             .gemm_chunked_grouped = gemm_chunked_grouped,
                                             .matmul_backward_dw_leaves_grouped = matmul_backward_dw_leaves_grouped};

// ---- matmul16: the same products and flops, each bf16 operand 2 bytes a value (half a float)
static void matmul16_forward(float *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC, int accumulate) {
    watch_product = (WatchProduct){"x @ w, bf16", T, OC, C};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_forward(out, inp, w, T, C, OC, accumulate), 2.0 * T * C * OC,
            0.5 * ((double)T * C + (double)C * OC) + (1.0 + accumulate) * T * OC);
}
static void matmul16_backward_dinp(float *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {
    watch_product = (WatchProduct){"dy @ w^T, bf16", T, C, OC};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_backward_dinp(dinp, dout, w, T, C, OC), 2.0 * T * C * OC,
            0.5 * ((double)T * OC + (double)C * OC) + 2.0 * T * C);
}
static void matmul16_backward_dw(float *dw, const uint16_t *inp, const uint16_t *dout, int len, int C, int OC,
                                 int accumulate) {
    watch_product = (WatchProduct){"x^T @ dy, bf16", C, OC, len};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_backward_dw(dw, inp, dout, len, C, OC, accumulate),
            2.0 * len * C * OC, 0.5 * ((double)len * C + (double)len * OC) + (1.0 + accumulate) * C * OC);
}
static void matmul16_gemm_chunked(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda,
                                  const uint16_t *B, int ldb, float *C, int ldc) {
    watch_product = (WatchProduct){transB ? "A @ B^T, pieces, bf16" : "A @ B, pieces, bf16", M, N, K};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->gemm_chunked(transB, M, N, K, chunks, A, lda, B, ldb, C, ldc),
            2.0 * M * N * K, 0.5 * ((double)M * K + (double)K * N) + (double)M * N);
}
static void matmul16_backward_dw_leaves(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n,
                                        int C, int OC, int accumulate) {
    double K = n > 0 ? off[n] : 0;
    watch_product = (WatchProduct){"x^T @ dy, leaves, bf16", C, OC, (int)K};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_backward_dw_leaves(dw, inp, dout, off, n, C, OC, accumulate),
            2.0 * K * C * OC, 0.5 * (K * C + K * OC) + (accumulate ? 2.0 : 1.0) * C * OC);
}
static void matmul16_forward_grouped(float *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G, int C,
                                     int OC, int accumulate) {
    double R = rows[G];
    watch_product = (WatchProduct){"x @ w, grouped, bf16", rows[G], OC, C};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_forward_grouped(out, inp, w, rows, G, C, OC, accumulate),
            2.0 * R * C * OC, 0.5 * (R * C + (double)G * C * OC) + (1.0 + accumulate) * R * OC);
}
static void matmul16_backward_dinp_grouped(float *dinp, const uint16_t *dout, const uint16_t *w, const int *rows,
                                           int G, int C, int OC) {
    double R = rows[G];
    watch_product = (WatchProduct){"dy @ w^T, grouped, bf16", rows[G], C, OC};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_backward_dinp_grouped(dinp, dout, w, rows, G, C, OC),
            2.0 * R * C * OC, 0.5 * (R * OC + (double)G * C * OC) + 2.0 * R * C);
}
static void matmul16_gemm_chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks,
                                          const uint16_t *A, const uint16_t *B, float *out) {
    double R = rows[G];
    watch_product = (WatchProduct){transB ? "A @ B^T, pieces, grouped, bf16" : "A @ B, pieces, grouped, bf16",
                                   rows[G], N, K};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->gemm_chunked_grouped(transB, rows, G, N, K, chunks, A, B, out),
            2.0 * R * N * K, 0.5 * (R * K + (double)G * K * N) + R * N);
}
static void matmul16_backward_dw_leaves_grouped(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off,
                                                int n, int G, int C, int OC, int accumulate) {
    double K = off[(size_t)G * n];
    watch_product = (WatchProduct){"x^T @ dy, leaves, grouped, bf16", C, OC, (int)K};
    WATCHED(FAMILY_MATMUL,
            INNER(matmul16)->matmul_backward_dw_leaves_grouped(dw, inp, dout, off, n, G, C, OC, accumulate),
            2.0 * K * C * OC, 0.5 * (K * C + K * OC) + (accumulate ? 2.0 : 1.0) * G * C * OC);
}
// The rounded forms: the output 2 bytes a value too, written once.
static void matmul16_forward_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC) {
    watch_product = (WatchProduct){"x @ w, bf16 out", T, OC, C};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_forward_round16(out, inp, w, T, C, OC), 2.0 * T * C * OC,
            0.5 * ((double)T * C + (double)C * OC + (double)T * OC));
}
static void matmul16_backward_dinp_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int T, int C,
                                           int OC) {
    watch_product = (WatchProduct){"dy @ w^T, bf16 out", T, C, OC};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_backward_dinp_round16(dinp, dout, w, T, C, OC), 2.0 * T * C * OC,
            0.5 * ((double)T * OC + (double)C * OC + (double)T * C));
}
static void matmul16_forward_grouped_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, const int *rows,
                                             int G, int C, int OC) {
    double R = rows[G];
    watch_product = (WatchProduct){"x @ w, grouped, bf16 out", rows[G], OC, C};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_forward_grouped_round16(out, inp, w, rows, G, C, OC),
            2.0 * R * C * OC, 0.5 * (R * C + (double)G * C * OC + R * OC));
}
static void matmul16_backward_dinp_grouped_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,
                                                   const int *rows, int G, int C, int OC) {
    double R = rows[G];
    watch_product = (WatchProduct){"dy @ w^T, grouped, bf16 out", rows[G], C, OC};
    WATCHED(FAMILY_MATMUL, INNER(matmul16)->matmul_backward_dinp_grouped_round16(dinp, dout, w, rows, G, C, OC),
            2.0 * R * C * OC, 0.5 * (R * OC + (double)G * C * OC + R * C));
}
static const Matmul16Kernels matmul16_watched = {
    .matmul_forward_round16 = matmul16_forward_round16,
    .matmul_backward_dinp_round16 = matmul16_backward_dinp_round16,
    .matmul_forward_grouped_round16 = matmul16_forward_grouped_round16,
    .matmul_backward_dinp_grouped_round16 = matmul16_backward_dinp_grouped_round16,
    .matmul_forward = matmul16_forward,
    .matmul_backward_dinp = matmul16_backward_dinp,
    .matmul_backward_dw = matmul16_backward_dw,
    .gemm_chunked = matmul16_gemm_chunked,
    .matmul_backward_dw_leaves = matmul16_backward_dw_leaves,
    .matmul_forward_grouped = matmul16_forward_grouped,
    .matmul_backward_dinp_grouped = matmul16_backward_dinp_grouped,
    .gemm_chunked_grouped = matmul16_gemm_chunked_grouped,
    .matmul_backward_dw_leaves_grouped = matmul16_backward_dw_leaves_grouped};

// ---- norm
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride, int T,
                            int D, float eps, int bf16) {
    WATCHED(FAMILY_NORM, INNER(norm)->rmsnorm_forward(out, rstd, x, scale, scale_stride, T, D, eps, bf16), 4.0 * T * D,
          2.0 * T * D + (scale_stride ? (double)T * D : D) + T);
}
static void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale, size_t scale_stride,
                                const float *rstd, int T, int D, int bf16) {
    WATCHED(FAMILY_NORM, INNER(norm)->rmsnorm_backward_dx(dx, dout, x, scale, scale_stride, rstd, T, D, bf16),
          6.0 * T * D, 4.0 * T * D + (scale_stride ? (double)T * D : D) + T);
}
static void rmsnorm_dscale_leaf(float *dscale, const float *dout, const float *x, const float *rstd, long t0, long len,
                                int D, int bf16) {
    WATCHED(FAMILY_NORM, INNER(norm)->rmsnorm_dscale_leaf(dscale, dout, x, rstd, t0, len, D, bf16), 3.0 * len * D,
          2.0 * len * D + len + 2.0 * D);
}
static void broadcast_rows(float *out, const float *row, int T, int D) {
    WATCHED(FAMILY_NORM, INNER(norm)->broadcast_rows(out, row, T, D), 0, (double)T * D + D);
}
static const NormKernels norm_watched = {.rmsnorm_forward = rmsnorm_forward,
                                         .rmsnorm_backward_dx = rmsnorm_backward_dx,
                                         .rmsnorm_dscale_leaf = rmsnorm_dscale_leaf,
                                         .broadcast_rows = broadcast_rows};

// ---- rope
static void rope_table(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float max_ts, int bf16) {
    WATCHED(FAMILY_ROPE, INNER(rope)->rope_table(sn, cs, S, pos0, Dr, min_ts, max_ts, bf16), 0, (double)S * Dr);
}
static void rope_rotate(float *x, const float *sn, const float *cs, int B, int S, int H, int stride, int Dr, int dir,
                        int bf16) {
    WATCHED(FAMILY_ROPE, INNER(rope)->rope_rotate(x, sn, cs, B, S, H, stride, Dr, dir, bf16), 3.0 * B * S * H * Dr,
          2.0 * B * S * H * Dr + (double)S * Dr);
}
static void rope_table_freq(float *sn, float *cs, int S, int pos0, int half, const float *freq, float scale) {
    WATCHED(FAMILY_ROPE, INNER(rope)->rope_table_freq(sn, cs, S, pos0, half, freq, scale), 0, 2.0 * S * half);
}
static void rope_rotate_pairs(float *dst, const float *src, const float *sn, const float *cs, int B, int S, int H,
                              int stride, int Dr, int dir, int bf16) {
    WATCHED(FAMILY_ROPE, INNER(rope)->rope_rotate_pairs(dst, src, sn, cs, B, S, H, stride, Dr, dir, bf16),
            3.0 * B * S * H * Dr, 2.0 * B * S * H * Dr + (double)S * Dr);
}
static const RopeKernels rope_watched = {.rope_table = rope_table, .rope_rotate = rope_rotate,
                                         .rope_table_freq = rope_table_freq, .rope_rotate_pairs = rope_rotate_pairs};

// ---- embedding
static void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    WATCHED(FAMILY_EMBEDDING, INNER(embedding)->embedding_forward(out, ids, table, T, D, V, v0), 0, 2.0 * T * D + T);
}
static void embedding_backward_leaf(float *dtable, const float *dout, const int *ids, long t0, long len, int D, int V,
                                    int v0) {
    WATCHED(FAMILY_EMBEDDING, INNER(embedding)->embedding_backward_leaf(dtable, dout, ids, t0, len, D, V, v0),
          (double)len * D, 3.0 * len * D + len);
}
static void embedding_onehot(float *onehot, const int *ids, int T, int V, int v0) {
    WATCHED(FAMILY_EMBEDDING, INNER(embedding)->embedding_onehot(onehot, ids, T, V, v0), 0, (double)T * V + T);
}
static const EmbeddingKernels embedding_watched = {.embedding_forward = embedding_forward,
                                                   .embedding_backward_leaf = embedding_backward_leaf,
                                                   .embedding_onehot = embedding_onehot};

// ---- attention: the (query row, key) pairs that rows r0 .. r1-1 at positions q0 + i see
// among nkeys keys from position k0 (causal: key position <= query position).
static double visible(int q0, int k0, int nkeys, int r0, int r1) {
    double n = 0;
    for (int i = r0; i < r1; i++) {
        long v = (long)q0 + i - k0 + 1;
        n += v < 0 ? 0 : v > nkeys ? nkeys : v;
    }
    return n;
}
// Per visible pair: forward q.k and p*v (2 (Dqk + Dv) flops); backward the score again,
// dO.v, p*dO into dv, dS*k into dq and dS*q into dk (2 (3 Dqk + 2 Dv) flops).
#define FWD_FLOPS(pairs) (2.0 * B * N * (pairs) * (Dqk + Dv))
#define BWD_FLOPS(pairs) (2.0 * B * N * (pairs) * (3.0 * Dqk + 2.0 * Dv))
#define QO_FLOATS(rows) ((double)B * (rows) * N * (Dqk + Dv))
#define KV_FLOATS(keys) ((double)B * (keys) * Nkv * (Dqk + Dv))

static void causal_mask(unsigned char *mask, int B, int S, int q0) {
    WATCHED(FAMILY_ATTENTION, INNER(attention)->causal_mask(mask, B, S, q0), 0, (double)B * S * (q0 + S) / 4);
}
static void dot_forward(float *o, float *stats, float *rows, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd) {
    WATCHED(FAMILY_ATTENTION, INNER(attention)->dot_forward(o, stats, rows, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd),
          FWD_FLOPS(visible(q0, 0, q0 + S, 0, S)), QO_FLOATS(S) + KV_FLOATS(q0 + S) + 2.0 * B * N * S);
}
static void dot_backward_rows(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                              const float *v, const float *o, const float *stats, const unsigned char *mask, int B,
                              int S, int q0, int r0, int r1, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    WATCHED(FAMILY_ATTENTION,
          INNER(attention)->dot_backward_rows(dq, dk, dv, dout, q, k, v, o, stats, mask, B, S, q0, r0, r1, N, Nkv, Dqk,
                                            Dv, rnd),
          BWD_FLOPS(visible(q0, 0, q0 + S, r0, r1)), 2.0 * QO_FLOATS(r1 - r0) + 3.0 * KV_FLOATS(q0 + r1));
}
static void flash_forward(float *o, float *stats, float *blocks, const float *q, const float *k, const float *v,
                          const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd, int bq, int bkv) {
    WATCHED(FAMILY_ATTENTION,
          INNER(attention)->flash_forward(o, stats, blocks, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd, bq, bkv),
          FWD_FLOPS(visible(q0, 0, q0 + S, 0, S)), QO_FLOATS(S) + KV_FLOATS(q0 + S) + 2.0 * B * N * S);
}
static void flash_backward_rows(float *dq, float *dk, float *dv, float *Dblk, const float *dout, const float *q,
                                const float *k, const float *v, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                                int Dqk, int Dv, AttnRounding rnd, int bq, int bkv) {
    WATCHED(FAMILY_ATTENTION,
          INNER(attention)->flash_backward_rows(dq, dk, dv, Dblk, dout, q, k, v, o, stats, mask, B, S, q0, r0, r1, N,
                                              Nkv, Dqk, Dv, rnd, bq, bkv),
          BWD_FLOPS(visible(q0, 0, q0 + S, r0, r1)), 2.0 * QO_FLOATS(r1 - r0) + 3.0 * KV_FLOATS(q0 + r1));
}
static void ring_begin(float *stats, int B, int S, int N) {
    WATCHED(FAMILY_ATTENTION, INNER(attention)->ring_begin(stats, B, S, N), 0, 2.0 * B * S * N);
}
static void ring_block_forward(float *o, float *stats, float *rows, const float *q, const float *kb, const float *vb,
                               const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk,
                               int Dv, AttnRounding rnd, int bkv) {
    WATCHED(FAMILY_ATTENTION,
          INNER(attention)->ring_block_forward(o, stats, rows, q, kb, vb, mask, B, S, q0, k0, N, Nkv, Dqk, Dv, rnd,
                                               bkv),
          FWD_FLOPS(visible(q0, k0, S, 0, S)), QO_FLOATS(S) + (double)B * S * N * Dv + KV_FLOATS(S));
}
static void ring_end(float *o, const float *stats, int B, int S, int N, int Dv, AttnRounding rnd) {
    WATCHED(FAMILY_ATTENTION, INNER(attention)->ring_end(o, stats, B, S, N, Dv, rnd), (double)B * S * N * Dv,
          2.0 * B * S * N * Dv + 2.0 * B * S * N);
}
static void ring_block_backward(float *dq, float *dkb, float *dvb, const float *dout, const float *q, const float *kb,
                                const float *vb, const float *o, const float *stats, const unsigned char *mask, int B,
                                int S, int q0, int k0, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    WATCHED(FAMILY_ATTENTION,
          INNER(attention)->ring_block_backward(dq, dkb, dvb, dout, q, kb, vb, o, stats, mask, B, S, q0, k0, N, Nkv, Dqk,
                                              Dv, rnd),
          BWD_FLOPS(visible(q0, k0, S, 0, S)), 2.0 * QO_FLOATS(S) + 3.0 * KV_FLOATS(S));
}
static void uniform_fill(float *x, size_t n, uint32_t seed) {
    WATCHED(FAMILY_ATTENTION, INNER(attention)->uniform_fill(x, n, seed), 0, n);
}
static const AttentionKernels attention_watched = {
    .causal_mask = causal_mask,     .dot_forward = dot_forward,
    .dot_backward_rows = dot_backward_rows, .flash_forward = flash_forward,
    .flash_backward_rows = flash_backward_rows, .ring_begin = ring_begin,
    .ring_block_forward = ring_block_forward, .ring_end = ring_end,
    .ring_block_backward = ring_block_backward, .uniform_fill = uniform_fill};

// ---- mla: moves of latent pieces
static void mla_apply_scale(float *x, size_t n, float s) {
    WATCHED(FAMILY_MLA, INNER(mla)->mla_apply_scale(x, n, s), n, 2.0 * n);
}
static void mla_copy_cols(float *dst, size_t dst_stride, const float *src, size_t src_stride, int T, int W) {
    WATCHED(FAMILY_MLA, INNER(mla)->mla_copy_cols(dst, dst_stride, src, src_stride, T, W), 0, 2.0 * T * W);
}
static void mla_assemble_kv(float *k, float *v, const float *kv, const float *ckv, int T, int N, int Dn, int Dr,
                            int Dv, int R) {
    WATCHED(FAMILY_MLA, INNER(mla)->mla_assemble_kv(k, v, kv, ckv, T, N, Dn, Dr, Dv, R), 0,
          2.0 * T * N * (Dn + Dv) + (double)T * N * Dr + (double)T * R);
}
static void mla_split_dkv(float *dkv, const float *dk, const float *dv, int T, int N, int Dn, int Dr, int Dv) {
    WATCHED(FAMILY_MLA, INNER(mla)->mla_split_dkv(dkv, dk, dv, T, N, Dn, Dr, Dv), 0,
          2.0 * T * N * (Dn + Dv) + (double)T * N * Dr);
}
static void mla_k_rope_grad_leaf(float *piece, const float *dk, int T, int N, int Dn, int Dr, int h0, int h1) {
    WATCHED(FAMILY_MLA, INNER(mla)->mla_k_rope_grad_leaf(piece, dk, T, N, Dn, Dr, h0, h1), (double)T * (h1 - h0) * Dr,
          (double)T * (h1 - h0) * Dr + (double)T * Dr);
}
static const MlaKernels mla_watched = {.mla_apply_scale = mla_apply_scale,
                                       .mla_copy_cols = mla_copy_cols,
                                       .mla_assemble_kv = mla_assemble_kv,
                                       .mla_split_dkv = mla_split_dkv,
                                       .mla_k_rope_grad_leaf = mla_k_rope_grad_leaf};

// ---- router: scores (T,E) and choices (T,K); the flops are few and not counted
static void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K) {
    WATCHED(FAMILY_ROUTER, INNER(router)->route_mixtral(top_idx, top_w, scores, logits, T, E, K), 0,
          2.0 * T * E + 2.0 * T * K);
}
static void route_softmax(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K,
                          int G, int keep_groups, int scaled, float routed_scaling_factor) {
    WATCHED(FAMILY_ROUTER,
          INNER(router)->route_softmax(top_idx, top_w, scores, logits, T, E, K, G, keep_groups, scaled,
                                     routed_scaling_factor),
          0, 2.0 * T * E + 2.0 * T * K);
}
static void route_deepseek(int *top_idx, float *top_w, float *scores, const float *logits, const float *bias, int T,
                           int E, int K, int G, int keep_groups, float routed_scaling_factor, int gate_round,
                           int bf16) {
    WATCHED(FAMILY_ROUTER,
          INNER(router)->route_deepseek(top_idx, top_w, scores, logits, bias, T, E, K, G, keep_groups,
                                      routed_scaling_factor, gate_round, bf16),
          0, 2.0 * T * E + 2.0 * T * K);
}
static void count_sequence_assignments(int *counts_, const int *top_idx, int B, int S, int E, int K) {
    WATCHED(FAMILY_ROUTER, INNER(router)->count_sequence_assignments(counts_, top_idx, B, S, E, K), 0,
          (double)B * S * K + (double)B * E);
}
static void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity,
                          const int *before) {
    WATCHED(FAMILY_ROUTER, INNER(router)->capacity_mask(keep, top_idx, B, S, E, K, capacity, before), 0,
          2.0 * B * S * K);
}
static void drop_weights(float *w, const int *keep, size_t A) {
    WATCHED(FAMILY_ROUTER, INNER(router)->drop_weights(w, keep, A), 0, 3.0 * A);
}
static void count_experts(long *counts_, const int *top_idx, size_t A) {
    WATCHED(FAMILY_ROUTER, INNER(router)->count_experts(counts_, top_idx, A), 0, A);
}
static void router_probs(float *probs, const float *logits, int T, int E) {
    WATCHED(FAMILY_ROUTER, INNER(router)->router_probs(probs, logits, T, E), 0, 2.0 * T * E);
}
static void lb_chunk_sums(double *part, const int *top_idx, const float *probs, int B, int S, int nchunks, int chunk,
                          int E, int K) {
    WATCHED(FAMILY_ROUTER, INNER(router)->lb_chunk_sums(part, top_idx, probs, B, S, nchunks, chunk, E, K), 0,
          (double)B * S * (K + E));
}
static void lb_loss(float *f, double *lb_seq, const double *tot, int B, int E, int Sg, float lb_coef) {
    WATCHED(FAMILY_ROUTER, INNER(router)->lb_loss(f, lb_seq, tot, B, E, Sg, lb_coef), 0, 4.0 * B * E);
}
static void lb_backward(float *dlogits, const float *probs, const float *f, int B, int S, int Sg, int E,
                        float lb_coef) {
    WATCHED(FAMILY_ROUTER, INNER(router)->lb_backward(dlogits, probs, f, B, S, Sg, E, lb_coef), 0, 3.0 * B * S * E);
}
static void router_mixtral_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w, int T,
                                    int E, int K) {
    WATCHED(FAMILY_ROUTER, INNER(router)->router_mixtral_backward(dlogits, dw, top_idx, top_w, T, E, K), 0,
          2.0 * T * E + 3.0 * T * K);
}
static void router_softmax_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    const float *probs, int T, int E, int K, int scaled,
                                    float routed_scaling_factor) {
    WATCHED(FAMILY_ROUTER,
          INNER(router)->router_softmax_backward(dlogits, dw, top_idx, top_w, probs, T, E, K, scaled,
                                               routed_scaling_factor),
          0, 3.0 * T * E + 3.0 * T * K);
}
static void router_deepseek_backward(float *dlogits, const float *dw, const int *top_idx, const float *logits, int T,
                                     int E, int K, float routed_scaling_factor, int gate_round) {
    WATCHED(FAMILY_ROUTER,
          INNER(router)->router_deepseek_backward(dlogits, dw, top_idx, logits, T, E, K, routed_scaling_factor,
                                                gate_round),
          0, 3.0 * T * E + 2.0 * T * K);
}
static const RouterKernels router_watched = {.route_mixtral = route_mixtral,
                                             .route_softmax = route_softmax,
                                             .route_deepseek = route_deepseek,
                                             .count_sequence_assignments = count_sequence_assignments,
                                             .capacity_mask = capacity_mask,
                                             .drop_weights = drop_weights,
                                             .count_experts = count_experts,
                                             .router_probs = router_probs,
                                             .lb_chunk_sums = lb_chunk_sums,
                                             .lb_loss = lb_loss,
                                             .lb_backward = lb_backward,
                                             .router_mixtral_backward = router_mixtral_backward,
                                             .router_softmax_backward = router_softmax_backward,
                                             .router_deepseek_backward = router_deepseek_backward};

// ---- moe: rows moved between tokens and experts
static void sort_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    WATCHED(FAMILY_MOE, INNER(moe)->sort_rows(row_start, row_token, assign_row, top_idx, T, E, K), 0,
          3.0 * T * K + E);
}
static void dense_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    WATCHED(FAMILY_MOE, INNER(moe)->dense_rows(row_start, row_token, assign_row, top_idx, T, E, K), 0,
          (double)E * T + 2.0 * T * K);
}
static void gather_rows(float *xs, const float *x, const int *row_token, int r0, int n, int D) {
    WATCHED(FAMILY_MOE, INNER(moe)->gather_rows(xs, x, row_token, r0, n, D), 0, 2.0 * n * D + n);
}
static void gather_rows_packed(uint16_t *xs, const float *x, const int *row_token, int r0, int n, int D) {
    WATCHED(FAMILY_MOE, INNER(moe)->gather_rows_packed(xs, x, row_token, r0, n, D), 0, 1.5 * n * D + n);
}
static void scatter_add_rows(float *dx, const float *dxs, const int *row_token, int r0, int n, int D) {
    WATCHED(FAMILY_MOE, INNER(moe)->scatter_add_rows(dx, dxs, row_token, r0, n, D), (double)n * D, 3.0 * n * D + n);
}
static void scatter_add_tokens(float *dx, const float *dxs, const int *assign_row, int T, int K, int D) {
    WATCHED(FAMILY_MOE, INNER(moe)->scatter_add_tokens(dx, dxs, assign_row, T, K, D), (double)T * K * D,
            2.0 * T * D + (double)T * K * D + (double)T * K);
}
static void combine_forward(float *out, const float *y, const float *w, const int *top_idx, const int *assign_row,
                            int T, int D, int K, int bf16_sum, int bf16) {
    WATCHED(FAMILY_MOE, INNER(moe)->combine_forward(out, y, w, top_idx, assign_row, T, D, K, bf16_sum, bf16),
          2.0 * T * K * D, (double)T * D + (double)T * K * D + 3.0 * T * K);
}
static void combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
                             const float *top_w, const int *assign_row, size_t A, int D, int K) {
    WATCHED(FAMILY_MOE, INNER(moe)->combine_backward(dy, dw, dout, y, w, top_w, assign_row, A, D, K), 3.0 * A * D,
          2.0 * A * D + (double)A / K * D + 4.0 * A);
}
// The packed forms: y read (and dy written) at 2 bytes a value.
static void combine_forward_packed(float *out, const uint16_t *y, const float *w, const int *top_idx,
                                   const int *assign_row, int T, int D, int K, int bf16_sum, int bf16) {
    WATCHED(FAMILY_MOE, INNER(moe)->combine_forward_packed(out, y, w, top_idx, assign_row, T, D, K, bf16_sum, bf16),
          2.0 * T * K * D, (double)T * D + 0.5 * T * K * D + 3.0 * T * K);
}
static void combine_backward_packed(uint16_t *dy, float *dw, const float *dout, const uint16_t *y, const float *w,
                                    const float *top_w, const int *assign_row, size_t A, int D, int K) {
    WATCHED(FAMILY_MOE, INNER(moe)->combine_backward_packed(dy, dw, dout, y, w, top_w, assign_row, A, D, K),
          3.0 * A * D, 1.0 * A * D + (double)A / K * D + 4.0 * A);
}
static void add_shared(float *out, const float *shared, size_t n) {
    WATCHED(FAMILY_MOE, INNER(moe)->add_shared(out, shared, n), n, 3.0 * n);
}
static const MoeKernels moe_watched = {.sort_rows = sort_rows,
                                       .dense_rows = dense_rows,
                                       .gather_rows = gather_rows,
                                       .gather_rows_packed = gather_rows_packed,
                                       .scatter_add_rows = scatter_add_rows,
                                       .scatter_add_tokens = scatter_add_tokens,
                                       .combine_forward = combine_forward,
                                       .combine_backward = combine_backward,
                                       .combine_forward_packed = combine_forward_packed,
                                       .combine_backward_packed = combine_backward_packed,
                                       .add_shared = add_shared};

// ---- mlp: SwiGLU, elementwise
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    WATCHED(FAMILY_MLP, INNER(mlp)->swiglu_forward(act, h0, h1, n, bf16), 5.0 * n, 3.0 * n);
}
static void swiglu_backward(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16) {
    WATCHED(FAMILY_MLP, INNER(mlp)->swiglu_backward(act, dh0, dh1, dact, h0, h1, n, bf16), (act ? 12.0 : 10.0) * n,
            (act ? 6.0 : 5.0) * n);
}
// The packed forms: 2 bytes a 16-bit value (the counts are in floats of 4 bytes).
static void swiglu_forward_packed(uint16_t *act, const uint16_t *h0, const uint16_t *h1, long n) {
    WATCHED(FAMILY_MLP, INNER(mlp)->swiglu_forward_packed(act, h0, h1, n), 5.0 * n, 1.5 * n);
}
static void swiglu_backward_packed(uint16_t *act, uint16_t *dh0, uint16_t *dh1, const uint16_t *dact,
                                   const uint16_t *h0, const uint16_t *h1, long n) {
    WATCHED(FAMILY_MLP, INNER(mlp)->swiglu_backward_packed(act, dh0, dh1, dact, h0, h1, n), (act ? 12.0 : 10.0) * n,
            (act ? 3.0 : 2.5) * n);
}
static const MlpKernels mlp_watched = {.swiglu_forward = swiglu_forward,
                                       .swiglu_backward = swiglu_backward,
                                       .swiglu_forward_packed = swiglu_forward_packed,
                                       .swiglu_backward_packed = swiglu_backward_packed};

// ---- loss: passes over the logits (T,V)
static void loss_row_max(float *m, const float *logits, int T, int V) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_row_max(m, logits, T, V), 0, (double)T * V + T);
}
static void loss_sum_exp(float *piece, const float *logits, const float *m, int T, int V, int c0, int Vc) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_sum_exp(piece, logits, m, T, V, c0, Vc), 2.0 * T * Vc,
          (double)T * Vc + 2.0 * T);
}
static void loss_target_logit(float *zt, const float *logits, const int *targets, int T, int V, int v0) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_target_logit(zt, logits, targets, T, V, v0), 0, 3.0 * T);
}
static void loss_lse(float *lse, const float *m, const float *sum, int T) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_lse(lse, m, sum, T), T, 3.0 * T);
}
static void loss_leaf_sum(double *sum, const float *lse, const float *zt, const int *targets, long t0, long len,
                          float zmul) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_leaf_sum(sum, lse, zt, targets, t0, len, zmul), 4.0 * len, 3.0 * len);
}
static void loss_backward(float *logits_to_dlogits, const float *lse, const int *targets, int T, int V, int v0,
                          float zmul, float scale) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_backward(logits_to_dlogits, lse, targets, T, V, v0, zmul, scale),
          4.0 * T * V, 2.0 * T * V + 2.0 * T);
}
static void loss_backward_packed(uint16_t *dz, const float *logits, const float *lse, const int *targets, int T, int V,
                                 int v0, float zmul, float scale) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_backward_packed(dz, logits, lse, targets, T, V, v0, zmul, scale),
          4.0 * T * V, 1.5 * T * V + 2.0 * T);
}
static void tile_gather_rows(float *dst, const float *src, long t0, int len, int w) {
    WATCHED(FAMILY_LOSS, INNER(loss)->tile_gather_rows(dst, src, t0, len, w), 0, 2.0 * len * w);
}
static void tile_scatter_rows(float *dst, const float *src, long t0, int len, int w) {
    WATCHED(FAMILY_LOSS, INNER(loss)->tile_scatter_rows(dst, src, t0, len, w), 0, 2.0 * len * w);
}
static void tile_gather_targets(int *dst, const int *src, long t0, int len) {
    WATCHED(FAMILY_LOSS, INNER(loss)->tile_gather_targets(dst, src, t0, len), 0, 2.0 * len);
}
// The 16-bit logits: half a float a value.
static void loss_row_max16(float *m, const uint16_t *logits, int T, int V) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_row_max16(m, logits, T, V), 0, 0.5 * T * V + T);
}
static void loss_sum_exp16(float *piece, const uint16_t *logits, const float *m, int T, int V, int c0, int Vc) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_sum_exp16(piece, logits, m, T, V, c0, Vc), 2.0 * T * Vc,
            0.5 * T * Vc + 2.0 * T);
}
static void loss_target_logit16(float *zt, const uint16_t *logits, const int *targets, int T, int V, int v0) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_target_logit16(zt, logits, targets, T, V, v0), 0, 2.5 * T);
}
static void loss_backward16(uint16_t *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                            float scale) {
    WATCHED(FAMILY_LOSS, INNER(loss)->loss_backward16(dz, lse, targets, T, V, v0, zmul, scale), 4.0 * T * V,
            1.0 * T * V + 2.0 * T);
}
static const LossKernels loss_watched = {.loss_row_max16 = loss_row_max16,
                                         .loss_sum_exp16 = loss_sum_exp16,
                                         .loss_target_logit16 = loss_target_logit16,
                                         .loss_backward16 = loss_backward16,
                                         .loss_row_max = loss_row_max,
                                         .loss_sum_exp = loss_sum_exp,
                                         .loss_target_logit = loss_target_logit,
                                         .loss_lse = loss_lse,
                                         .loss_leaf_sum = loss_leaf_sum,
                                         .loss_backward = loss_backward,
                                         .loss_backward_packed = loss_backward_packed,
                                         .tile_gather_rows = tile_gather_rows,
                                         .tile_scatter_rows = tile_scatter_rows,
                                         .tile_gather_targets = tile_gather_targets};

// ---- cast: bf16 rounding and packing (a bf16 is half a float: 0.5 in float units)
static void round_to_bf16(float *x, size_t n) { WATCHED(FAMILY_CAST, INNER(cast)->round_to_bf16(x, n), 0, 2.0 * n); }
static void round_copy_bf16(float *out, const float *x, size_t n) {
    WATCHED(FAMILY_CAST, INNER(cast)->round_copy_bf16(out, x, n), 0, 2.0 * n);
}
static void pack_bf16(uint16_t *h, const float *x, size_t n) {
    WATCHED(FAMILY_CAST, INNER(cast)->pack_bf16(h, x, n), 0, 1.5 * n);
}
static void unpack_bf16(float *x, const uint16_t *h, size_t n) {
    WATCHED(FAMILY_CAST, INNER(cast)->unpack_bf16(x, h, n), 0, 1.5 * n);
}
static const CastKernels cast_watched = {.round_to_bf16 = round_to_bf16, .round_copy_bf16 = round_copy_bf16,
                                         .pack_bf16 = pack_bf16, .unpack_bf16 = unpack_bf16};

// ---- sum: a = a + b over n floats
static void tree_add(float *left, const float *right, size_t n) {
    WATCHED(FAMILY_SUM, INNER(sum)->tree_add(left, right, n), n, 3.0 * n);
}
static void residual_add(float *h, const float *x, size_t n) {
    WATCHED(FAMILY_SUM, INNER(sum)->residual_add(h, x, n), n, 3.0 * n);
}
static const SumKernels sum_watched = {.tree_add = tree_add, .residual_add = residual_add};

// ---- optim: passes over the parameters, gradients and state
static size_t elements(const int *shape, int ndim) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}
static void adamw_update(float *p, uint16_t *p16, const float *g, float *m, uint16_t *m16, float *v, size_t n,
                         AdamWParams h, GradClip clip) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->adamw_update(p, p16, g, m, m16, v, n, h, clip),
            (clip.on ? 17.0 : 15.0) * n, (7.0 - (m16 ? 1.0 : 0.0) + (p16 ? 0.5 : 0.0)) * n);   // (bf16: 2 bytes)
}
static void sgd_update(float *p, const float *g, size_t n, float lr, GradClip clip) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->sgd_update(p, g, n, lr, clip), (clip.on ? 4.0 : 2.0) * n, 3.0 * n);
}
static void clip_scale(float *g, size_t n, float norm, float threshold) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->clip_scale(g, n, norm, threshold), n, 2.0 * n);
}
static void ema_update(float *ema, const float *p, size_t n, float decay) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->ema_update(ema, p, n, decay), 3.0 * n, 3.0 * n);
}
static void squares_add(fixed128 *sum, int *bad, const float *x, size_t n) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->squares_add(sum, bad, x, n), 2.0 * n, n);
}
static void adafactor_factored_moments(float *vrow, float *vcol, double *rs, double *cs, const float *g,
                                       const int *shape, int ndim, int drow, int dcol, float decay, float eps) {
    WATCHED(FAMILY_OPTIM,
          INNER(optim)->adafactor_factored_moments(vrow, vcol, rs, cs, g, shape, ndim, drow, dcol, decay, eps),
          3.0 * elements(shape, ndim), elements(shape, ndim));
}
static void adafactor_factors(float *f, const float *vrow, const float *vcol, size_t L, size_t R, size_t C) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->adafactor_factors(f, vrow, vcol, L, R, C), 2.0 * L * R * C, (double)L * R * C);
}
static void adafactor_scale_factored(float *g, const float *f, size_t k0, size_t n, const int *shape, int ndim,
                                     int drow, int dcol) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->adafactor_scale_factored(g, f, k0, n, shape, ndim, drow, dcol), n, 3.0 * n);
}
static void adafactor_scale_full(float *g, float *v, size_t n, float decay, float eps) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->adafactor_scale_full(g, v, n, decay, eps), 5.0 * n, 4.0 * n);
}
static void adafactor_apply(float *p, const float *g, size_t n, float clip, float lr, float param_scale) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->adafactor_apply(p, g, n, clip, lr, param_scale), 3.0 * n, 3.0 * n);
}
static void muon_moment(float *mu, uint16_t *mu16, float *mu_hat, const float *g, size_t n, float beta, int t,
                        GradClip clip) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->muon_moment(mu, mu16, mu_hat, g, n, beta, t, clip),
            (clip.on ? 9.0 : 7.0) * n, (mu16 ? 3.0 : 4.0) * n);   // (bf16: 2 bytes read and written)
}
static void muon_divide(float *x, size_t n, float d) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->muon_divide(x, n, d), n, 2.0 * n);
}
static void muon_axpy(float *out, float a, const float *x, const float *y, size_t n) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->muon_axpy(out, a, x, y, n), (y ? 2.0 : 1.0) * n, (y ? 3.0 : 2.0) * n);
}
static void muon_apply(float *p, const float *o, size_t n, float scale, float weight_decay, float lr) {
    WATCHED(FAMILY_OPTIM, INNER(optim)->muon_apply(p, o, n, scale, weight_decay, lr), 5.0 * n, 3.0 * n);
}
static const OptimKernels optim_watched = {.adamw_update = adamw_update,
                                           .sgd_update = sgd_update,
                                           .clip_scale = clip_scale,
                                           .ema_update = ema_update,
                                           .squares_add = squares_add,
                                           .adafactor_factored_moments = adafactor_factored_moments,
                                           .adafactor_factors = adafactor_factors,
                                           .adafactor_scale_factored = adafactor_scale_factored,
                                           .adafactor_scale_full = adafactor_scale_full,
                                           .adafactor_apply = adafactor_apply,
                                           .muon_moment = muon_moment,
                                           .muon_divide = muon_divide,
                                           .muon_axpy = muon_axpy,
                                           .muon_apply = muon_apply};

// ---- init
static void param_init(float *x, size_t i0, size_t n, uint64_t name_hash, int seed, float std, float constant,
                       int truncated, const int *shape, const int *lindex, const int *gshape, int ndim) {
    WATCHED(FAMILY_INIT,
          INNER(init)->param_init(x, i0, n, name_hash, seed, std, constant, truncated, shape, lindex, gshape, ndim), 0,
          n);
}
static const InitKernels init_watched = {.param_init = param_init};

static Backend backend_watched = {   // .name, .mem: the watched backend's, or a watcher's (watch_backend)
    .matmul = &matmul_watched,
    .matmul16 = &matmul16_watched,
    .norm = &norm_watched,
    .rope = &rope_watched,
    .embedding = &embedding_watched,
    .attention = &attention_watched,
    .mla = &mla_watched,
    .router = &router_watched,
    .moe = &moe_watched,
    .mlp = &mlp_watched,
    .loss = &loss_watched,
    .cast = &cast_watched,
    .sum = &sum_watched,
    .optim = &optim_watched,
    .init = &init_watched,
};

const Backend *watch_backend(const Backend *b, const MemoryOps *mem, WatchHooks h) {
    if (nhooks == WATCH_MOST) die("internal: more than %d watchers of the kernels", WATCH_MOST);
    if (b != &backend_watched) {   // the first watcher: b is the backend watched
        inner = b;
        backend_watched.mem = b->mem;
        backend_watched.name = b->name;
        // a device thread's hooks: the watched backend's own (its GPU, stream and pool)
        backend_watched.bind = b->bind, backend_watched.sync = b->sync, backend_watched.unbind = b->unbind;
        backend_watched.workspace_bytes = b->workspace_bytes, backend_watched.set_workspace = b->set_workspace;
        backend_watched.mark = b->mark, backend_watched.elapsed_ms = b->elapsed_ms;
        backend_watched.marks_release = b->marks_release;
    }
    if (mem) backend_watched.mem = mem;   // the strict mode's: it opens its memory around each copy
    hooks[nhooks++] = h;
    return &backend_watched;
}
