// model/matmul.c: the matmul layer every layer uses: the flops it counts, the weight
// gradient's leaves added along the canonical tree, a contraction cut into pieces; the
// products themselves are kernels (kernels/matmul.h).
#include "model/matmul.h"
#include "base/treesum.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"

void matmul_set_impl(const char *impl) {
    if (!strcmp(impl, "ordered")) matmul_cpu_use_openblas(0);
    else if (!strcmp(impl, "openblas")) matmul_cpu_use_openblas(1);
    else die("matmul_impl '%s' is not one of: ordered, openblas", impl);
}

// The device's flop count (2 M N K per product), which the planner counts too.
static void count_flops(int M, int N, int K) {
    if (M == 0 || N == 0) return;
    mem_device()->flops += 2.0 * M * N * K;
}

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) die("internal: gemm takes alpha 1 and beta 0 or 1");
    count_flops(M, N, K);
    kern()->matmul->gemm(transA, transB, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc);
}

void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    count_flops(T, OC, C);
    kern()->matmul->matmul_forward(out, inp, w, T, C, OC, accumulate);
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, Leaves leaf) {
    if (dinp) {
        count_flops(T, C, OC);
        kern()->matmul->matmul_backward_dinp(dinp, dout, w, T, C, OC);
    }
    if (dw) {
        if ((long)leaf.B * leaf.S != T) die("internal: matmul_backward of %d tokens given leaves of %d", T, leaf.B * leaf.S);
        LeafSum ls;
        leafsum_begin(&ls, leaf, dw, (size_t)C * OC, "matmul dw leaf");
        for (long i = 0; i < leaf.n; i++) {
            float *g = leafsum_leaf_overwrite(&ls);   // written whole below
            long t0 = leaf_token(leaf, i);
            // g (C,OC) = inp[t0:t0+len]^T (C,len) @ dout[t0:t0+len] (len,OC)
            count_flops(C, OC, leaf.len);
            kern()->matmul->matmul_backward_dw(g, inp + (size_t)t0 * C, dout + (size_t)t0 * OC, leaf.len, C, OC);
            leafsum_push(&ls);
        }
        leafsum_end(&ls);
    }
}

void matmul_forward_chunked(float *out, const float *inp, const float *w, int T, int C, int OC, int chunks) {
    matmul_forward_chunked_cap(out, inp, w, T, T, C, OC, chunks);
}

void matmul_forward_chunked_cap(float *out, const float *inp, const float *w, int T, int cap, int C, int OC, int chunks) {
    if (chunks < 1 || C % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", C, chunks);
    int Cc = C / chunks;
    TreeSum ts;
    treesum_begin_cap(&ts, (size_t)T * OC, (size_t)cap * OC, MEM_TEMP, "matmul partial product");
    for (int r = 0; r < chunks; r++) {
        float *part = treesum_leaf_overwrite(&ts);   // (T,OC) = inp[:, piece r] @ w[piece r, :]
        gemm(0, 0, T, OC, Cc, 1.0f, inp + (size_t)r * Cc, C, w + (size_t)r * Cc * OC, OC, 0.0f, part, OC);
        treesum_push(&ts);
    }
    mem_zero(out, sizeof(float) * T * OC);
    treesum_end(&ts, out);
}

void matmul_dinp_chunked(float *dinp, const float *dout, const float *w, int T, int C, int OC, int chunks) {
    matmul_dinp_chunked_cap(dinp, dout, w, T, T, C, OC, chunks);
}

void matmul_dinp_chunked_cap(float *dinp, const float *dout, const float *w, int T, int cap, int C, int OC, int chunks) {
    if (chunks < 1 || OC % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", OC, chunks);
    int Oc = OC / chunks;
    TreeSum ts;
    treesum_begin_cap(&ts, (size_t)T * C, (size_t)cap * C, MEM_TEMP, "matmul partial input grad");
    for (int r = 0; r < chunks; r++) {
        float *part = treesum_leaf_overwrite(&ts);   // (T,C) = dout[:, piece r] @ w[:, piece r]^T
        gemm(0, 1, T, C, Oc, 1.0f, dout + (size_t)r * Oc, OC, w + (size_t)r * Oc, OC, 0.0f, part, C);
        treesum_push(&ts);
    }
    mem_zero(dinp, sizeof(float) * T * C);
    treesum_end(&ts, dinp);
}
