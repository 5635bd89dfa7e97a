// kernels/cpu/gemm_tree.c: the ordered GEMM's products whose contraction is cut into pieces
// added along the canonical tree (base/treesum.h), the tree done tile by tile in the thread's
// cache: each tile of C runs its pieces' chains and the tree's merges, and C is written
// once, instead of a product's worth of partial sums per piece merged in passes over
// memory. Two products take this form (kernels/cpu/gemm.h):
//   - the chunked product: a tensor-parallel sum's pieces of equal length, then onto 0.0f;
//   - a weight gradient's leaves: the pieces are the leaves' runs of token rows, of any
//     length (an expert's rows per sequence), and the tree's root is added onto C.
// The chains, the merges and the last add are the ones the separate products and merges
// make (model/matmul.c, base/treesum.c), so the bits are the same.
#include "kernels/cpu/gemm_parts.h"
#include "kernels/piece_tree.h"   // tree_left, piece_tree_levels
#include "core/common.h"          // die
#include <stdlib.h>

// A tile (mr x nr, row stride nr) of the tree over n pieces: piece r runs k from off[r] to
// off[r+1], its A panel from a + off[r]*mr and its B panel from b + off[r]*ldb. The
// canonical tree: the left subtree holds the largest power of two of pieces below n, and a
// merge is left + right; a lone pair is the kernel's own "old + finished chain". R holds
// the right subtrees, a tile per level below this one.
static void tile_tree(const KernelInfo *kn, const int *off, const float *a, const float *b, int ldb, float *T, int n,
                      float *R) {
    int mr = kn->mr, nr = kn->nr;
    if (n <= 2) {
        kn->fn(off[1] - off[0], a + (size_t)off[0] * mr, b + (size_t)off[0] * ldb, ldb, T, nr, 0, NULL, 0);
        if (n == 2) kn->fn(off[2] - off[1], a + (size_t)off[1] * mr, b + (size_t)off[1] * ldb, ldb, T, nr, 0, T, nr);
        return;
    }
    int h = tree_left(n);
    tile_tree(kn, off, a, b, ldb, T, h, R);
    tile_tree(kn, off + h, a, b, ldb, R, n - h, R + mr * nr);
    for (int i = 0; i < mr * nr; i += 8) *(V8 *)(T + i) += *(const V8 *)(R + i);
}

// c (n) = c + t (n): a row of a finished tile added onto C's old values (the root's add).
static void onto_old(float *c, const float *t, int n) {
    int j = 0;
    for (; j + 8 <= n; j += 8) *(V8 *)(c + j) += *(const V8 *)(t + j);
    for (; j < n; j++) c[j] += t[j];
}

// The column panel at jr run down row panels [p0, p1) of the chunk at i0: B read in place
// where op(B) = B and the panel is whole, else its K x nr packed into the thread's Bt; T
// holds a tile per level of the tree. The root goes onto C's old values (g->accumulate) or
// onto 0.0f.
static void tree_tiles(const KernelInfo *kn, const GemmArgs *g, const int *off, int n, const float *Ap, float *Bt,
                       float *T, int i0, int jr, int p0, int p1) {
    int mr = kn->mr, nr = kn->nr, cols = imin(nr, g->N - jr), ldp = (int)g->bk;
    const float *b = g->B + jr;
    if (g->bk == 1 || cols < nr) {
        gemm_pack_b(kn, Bt, g->B, g->bk, g->bj, jr, cols, 0, g->K, nr);
        b = Bt;
        ldp = nr;
    }
    for (int p = p0; p < p1; p++) {
        tile_tree(kn, off, Ap + (size_t)p * mr * g->K, b, ldp, T, n, T + mr * nr);
        int rows = imin(mr, g->M - i0 - p * mr);
        for (int r = 0; r < rows; r++) {
            float *c = g->C + (size_t)(i0 + p * mr + r) * g->ldc + jr;
            if (g->accumulate) onto_old(c, T + r * nr, cols);
            else onto_zero(c, T + r * nr, cols);
        }
    }
}

// The work is gemm_stream's (kernels/cpu/gemm.c), split over the threads the same way: rows
// in chunks whose op(A) (all of K) is packed, each thread its own run of row panels over
// every column panel (or, with few rows, column panels over runs of row panels). The A
// chunk is bounded to MS x KC floats, so a long K takes fewer rows at a time.
static void gemm_tree(const KernelInfo *kn, const GemmArgs *g, const int *off, int n, int par) {
    int mr = kn->mr, nr = kn->nr, M = g->M, N = g->N, K = g->K, levels = piece_tree_levels(n);
    int ms = imin(M, imax(mr, (int)((size_t)MS * KC / (size_t)K) / mr * mr));
    int cpanels = (N + nr - 1) / nr, runs = gemm_row_runs(cpanels, par);
    float *Ap = gemm_buffer((size_t)(ms + mr - 1) / mr * mr * K);
    #pragma omp parallel if (par)
    {
        float *Bt = gemm_buffer((size_t)K * nr), *T = gemm_buffer((size_t)levels * mr * nr);   // a tile per level
        int threads, t;
        gemm_team_place(&threads, &t);
        for (int i0 = 0; i0 < M; i0 += ms) {
            int rows = imin(ms, M - i0), panels = (rows + mr - 1) / mr;
            if (gemm_own_rows(panels, threads)) {   // each thread its own rows
                int p0 = panels * t / threads, p1 = panels * (t + 1) / threads;
                gemm_stream_pack(kn, g, Ap, i0, rows, p0, p1);
                for (int jr = 0; jr < N; jr += nr) tree_tiles(kn, g, off, n, Ap, Bt, T, i0, jr, p0, p1);
                #pragma omp barrier   // before the next chunk is packed into Ap
                continue;
            }
            #pragma omp for schedule(static)
            for (int p = 0; p < panels; p++) gemm_stream_pack(kn, g, Ap, i0, rows, p, p + 1);
            #pragma omp for schedule(static)
            for (int item = 0; item < cpanels * runs; item++) {
                int run = item % runs;
                tree_tiles(kn, g, off, n, Ap, Bt, T, i0, item / runs * nr, panels * run / runs,
                           panels * (run + 1) / runs);
            }
        }
        free(Bt);
        free(T);
    }
    free(Ap);
}

// The pieces' boundaries: off[r] = r * K/chunks.
static int *even_pieces(int K, int chunks) {
    int *off = malloc(sizeof(int) * ((size_t)chunks + 1));
    if (!off) die("out of host memory for a chunked product's %d pieces", chunks);
    for (int r = 0; r <= chunks; r++) off[r] = (int)((long)r * (K / chunks));
    return off;
}

void ordered_gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                          int ldb, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (chunks < 1 || K % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", K, chunks);
    if (K == 0) {   // empty chains and their sum: 0
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = 0.0f;
        return;
    }
    // op(A) = A (M,K); op(B) = B (K,N), or B^T with B (N,K)
    GemmArgs g = {M, N, K, 0, ldc, A, B, (size_t)lda, 1, transB ? 1 : (size_t)ldb, transB ? (size_t)ldb : 1, C};
    int *off = even_pieces(K, chunks);
    gemm_tree(gemm_kernel_pick(), &g, off, chunks, (double)M * N * K > 1e6);
    free(off);
}

void ordered_gemm_leaves(int M, int N, const int *off, int n, const float *A, int lda, const float *B, int ldb,
                         float *C, int ldc) {
    if (M <= 0 || N <= 0 || n <= 0) return;
    if (off[0] != 0) die("internal: a weight gradient's first leaf starts at row %d, not 0", off[0]);
    for (int l = 0; l < n; l++)
        if (off[l + 1] < off[l]) die("internal: leaf %d of a weight gradient ends before it starts", l);
    int K = off[n];
    if (K == 0) {   // every leaf empty: the tree's root is 0.0f, added onto C
        for (int i = 0; i < M; i++) onto_zero(C + (size_t)i * ldc, C + (size_t)i * ldc, N);
        return;
    }
    // op(A) = A^T with A (K,M): a leaf's rows of A are its k's; op(B) = B (K,N)
    GemmArgs g = {M, N, K, 1, ldc, A, B, 1, (size_t)lda, (size_t)ldb, 1, C};
    gemm_tree(gemm_kernel_pick(), &g, off, n, (double)M * N * K > 1e6);
}
