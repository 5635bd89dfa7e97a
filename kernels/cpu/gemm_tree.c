// kernels/cpu/gemm_tree.c: the ordered GEMM's products whose contraction is cut into pieces
// added along the canonical tree (base/treesum.h), the tree done tile by tile in the thread's
// cache: a thread runs each piece down a group of its row panels, merges the group's tiles
// as the tree says, and writes each tile of C once, instead of a product's worth of partial
// sums per piece merged in passes over memory. Two products take this form (kernels/cpu/gemm.h):
//   - the chunked product: a tensor-parallel sum's pieces of equal length, then onto 0.0f;
//   - a weight gradient's leaves: the pieces are the leaves' runs of token rows, of any
//     length (an expert's rows per sequence), and the tree's root is added onto C.
// The chains, the merges and the last add are the ones the separate products and merges
// make (model/matmul.c, base/treesum.c), so the bits are the same.
#include "kernels/cpu/gemm_parts.h"
#include "kernels/piece_tree.h"   // piece_tree_levels
#include "core/common.h"          // die
#include <stdint.h>               // uintptr_t
#include <stdlib.h>

// Row panels whose trees a thread grows side by side: each leaf's B rows are read once for
// the group, from L1 while its tiles run, and the group's partial sums (a tile per level
// and panel) stay in L2.
enum { TREE_GROUP = 16 };

// A group's tiles: slot s of the group's row panel q at T + (s*TREE_GROUP + q)*mr*nr.
static float *slot_tile(const KernelInfo *kn, float *T, int s, int q) {
    return T + ((size_t)s * TREE_GROUP + q) * kn->mr * kn->nr;
}

// left (n) += right (n): a merge of two of a panel's tiles.
static void add_tile(float *left, const float *right, int n) {
    for (int i = 0; i < n; i += 8) *(V8 *)(left + i) += *(const V8 *)(right + i);
}

// c (n) = c + t (n): a row of a finished tile added onto C's old values (the root's add).
static void onto_old(float *c, const float *t, int n) {
    int j = 0;
    for (; j + 8 <= n; j += 8) *(V8 *)(c + j) += *(const V8 *)(t + j);
    for (; j < n; j++) c[j] += t[j];
}

// c (n) = 0.0f + t (n), as onto_zero, in non-temporal stores: c 64-byte aligned and n a
// multiple of 16, so that each store fills its part of whole lines, which go to memory
// without C's old lines being read first (a store to a line not in the cache reads it).
static void onto_zero_streamed(float *c, const float *t, int n) {
    for (int j = 0; j < n; j += 4) _mm_stream_ps(c + j, _mm_add_ps(_mm_setzero_ps(), _mm_load_ps(t + j)));
}

// The trees of row panels [p0, p1) (at most TREE_GROUP) of the chunk at i0, column panel jr
// (B panel b, row stride ldb; where Bc is not NULL, panel p0 copies each leaf's B rows into
// it), grown leaf by leaf as base/treesum.c grows a tree of buffers: an even leaf's chains
// are a new tile; an odd leaf's are added onto the tile of the leaf before it (the kernel's
// "old + finished chain"), and that pair is carried up the levels, merged left += right
// into each waiting block of the same size; at the end the blocks left are joined from the
// lowest level up, and the root goes onto C (g->accumulate) or onto 0.0f. The bookkeeping
// (which slot holds which level) is the same for every panel.
static void tree_group(const KernelInfo *kn, const GemmArgs *g, const int *off, int n, const float *Ap,
                       const float *b, int ldb, float *Bc, float *T, int slots, int i0, int jr, int p0, int p1) {
    int mr = kn->mr, nr = kn->nr, cols = imin(nr, g->N - jr), level[34], spare[34], nspare = 0, cur = -1;
    for (int k = 0; k < 34; k++) level[k] = -1;
    for (int s = slots - 1; s >= 0; s--) spare[nspare++] = s;
    for (int l = 0; l < n; l++) {
        int kc = off[l + 1] - off[l], odd = l % 2;
        if (!odd) cur = spare[--nspare];
        const float *bl = b + (size_t)off[l] * ldb;
        int lb = ldb;
        for (int p = p0; p < p1; p++) {
            float *t = slot_tile(kn, T, cur, p - p0);
            int copy = Bc && p == p0;   // the leaf's B rows copied into Bc as the first panel reads them
            gemm_panel_tile(kn, g, Ap, i0, p, off[l], kc, bl, lb, t, nr, mr, nr, odd ? t : NULL, nr,
                            copy ? Bc + (size_t)off[l] * nr : NULL, 0);
            if (copy) {
                bl = Bc + (size_t)off[l] * nr;
                lb = nr;
            }
        }
        if (!odd) continue;
        int carry = cur, k = 1;
        for (cur = -1; level[k] >= 0; k++) {
            for (int p = p0; p < p1; p++)
                add_tile(slot_tile(kn, T, level[k], p - p0), slot_tile(kn, T, carry, p - p0), mr * nr);
            spare[nspare++] = carry;
            carry = level[k];
            level[k] = -1;
        }
        level[k] = carry;
    }
    level[0] = cur;   // the last leaf, when n is odd
    int root = -1;
    for (int k = 0; k < 34; k++) {
        if (level[k] < 0) continue;
        if (root >= 0)
            for (int p = p0; p < p1; p++)
                add_tile(slot_tile(kn, T, level[k], p - p0), slot_tile(kn, T, root, p - p0), mr * nr);
        root = level[k];
    }
    for (int p = p0; p < p1; p++) {
        const float *t = slot_tile(kn, T, root, p - p0);
        for (int r = 0; r < imin(mr, g->M - i0 - p * mr); r++) {
            float *c = g->C + (size_t)(i0 + p * mr + r) * g->ldc + jr;
            if (g->accumulate) onto_old(c, t + r * nr, cols);
            else if (g->stream && cols % 16 == 0 && (uintptr_t)c % 64 == 0) onto_zero_streamed(c, t + r * nr, cols);
            else onto_zero(c, t + r * nr, cols);
        }
    }
}

// The column panel at jr run down row panels [p0, p1) of the chunk at i0, TREE_GROUP at a
// time: where op(B) = B and the panel is whole, the first group's first panel reads each
// leaf's B rows in place and copies them into the thread's Bt as it goes, and the rest read
// Bt (gemm.c: stream_tiles says why); else (and from 16-bit numbers) the panel's K x nr is
// packed into Bt first. T holds the group's tiles.
static void tree_tiles(const KernelInfo *kn, const GemmArgs *g, const int *off, int n, const float *Ap, float *Bt,
                       float *T, int slots, int i0, int jr, int p0, int p1) {
    int nr = kn->nr, cols = imin(nr, g->N - jr), ldp = (int)g->bk, copy = 0;
    const float *b = g->B + jr;
    if (g->bk == 1 || cols < nr || g->B16) {
        gemm_pack_b_of(kn, Bt, g, jr, cols, 0, g->K, nr);
        b = Bt;
        ldp = nr;
    } else copy = gemm_copy_kernel(kn) && p1 - p0 >= 2;
    for (int q = p0; q < p1; q += TREE_GROUP) {
        tree_group(kn, g, off, n, Ap, b, ldp, copy ? Bt : NULL, T, slots, i0, jr, q, imin(p1, q + TREE_GROUP));
        if (copy) {   // the first group copied the whole panel
            b = Bt;
            ldp = nr;
            copy = 0;
        }
    }
}

// The work is gemm_stream's (kernels/cpu/gemm.c), split over the threads the same way: rows
// in chunks whose op(A) (all of K) is packed, each thread its own run of row panels over
// every column panel (or, with few rows, column panels over runs of row panels). The A
// chunk is bounded to MS x KC floats, so a long K takes fewer rows at a time.
static void gemm_tree(const KernelInfo *kn, const GemmArgs *g, const int *off, int n, int par) {
    // Tiles alive at once: a block per level of the counter, and the leaf being made.
    int mr = kn->mr, nr = kn->nr, M = g->M, N = g->N, K = g->K, slots = piece_tree_levels(n) + 1;
    int ms = imin(M, imax(mr, (int)((size_t)MS * KC / (size_t)K) / mr * mr));
    int cpanels = (N + nr - 1) / nr, runs = gemm_row_runs(cpanels, par);
    float *Ap = gemm_buffer((size_t)(ms + mr - 1) / mr * mr * K);
    #pragma omp parallel if (par)
    {
        float *Bt = gemm_buffer((size_t)K * nr), *T = gemm_buffer((size_t)slots * TREE_GROUP * mr * nr);
        int threads, t;
        gemm_team_place(&threads, &t);
        for (int i0 = 0; i0 < M; i0 += ms) {
            int rows = imin(ms, M - i0), panels = (rows + mr - 1) / mr;
            if (gemm_own_rows(panels, threads)) {   // each thread its own rows
                int p0 = panels * t / threads, p1 = panels * (t + 1) / threads;
                gemm_stream_pack(kn, g, Ap, i0, rows, p0, p1);
                for (int jr = 0; jr < N; jr += nr) tree_tiles(kn, g, off, n, Ap, Bt, T, slots, i0, jr, p0, p1);
                #pragma omp barrier   // before the next chunk is packed into Ap
                continue;
            }
            #pragma omp for schedule(static)
            for (int p = 0; p < panels; p++) gemm_stream_pack(kn, g, Ap, i0, rows, p, p + 1);
            #pragma omp for schedule(static)
            for (int item = 0; item < cpanels * runs; item++) {
                int run = item % runs;
                tree_tiles(kn, g, off, n, Ap, Bt, T, slots, i0, item / runs * nr, panels * run / runs,
                           panels * (run + 1) / runs);
            }
        }
        if (g->stream) _mm_sfence();   // the streamed lines in memory before the threads' barrier
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

// Pieces longer than a K block (the head's input gradient: one piece of the vocabulary,
// 32000 long) take separate products: gemm_tree packs op(A) for all of K, so a long K leaves
// it a few rows a chunk (MS x KC floats), and packs each column panel's K x nr again for
// every chunk (op(B) packed 43 times over at 1024 x 2048 x 32000). The blocked path runs
// each piece's chains through K blocks, the same chains, and the pieces are merged as
// kernels/piece_tree.h merges them, in passes over M x N partial sums: a few passes of
// M x N against a product of M x N x K.

static int long_pieces = 1;   // gemm_set_long_pieces
void gemm_set_long_pieces(int on) { long_pieces = on; }

// C (M,N, row stride ldc) = piece k0 .. k0+kc-1 of the product g (op(A) = A), or, with
// accumulate, C's values + the piece's finished chains.
static void piece_blocked(const GemmArgs *g, int k0, int kc, int accumulate, float *C, int ldc, int par) {
    GemmArgs p = *g;
    p.K = kc, p.accumulate = accumulate, p.C = C, p.ldc = ldc, p.stream = 0;
    if (p.A) p.A += (size_t)k0 * p.ak;
    if (p.A16) p.A16 += (size_t)k0 * p.ak;
    if (p.B) p.B += (size_t)k0 * p.bk;
    if (p.B16) p.B16 += (size_t)k0 * p.bk;
    gemm_blocked(gemm_kernel_pick(), &p, par);
}

// C (M,N, row stride ldc) = the tree over pieces lo .. lo+n-1 of g, each kc long, merged left
// += right with the left subtree the largest power of two below n (kernels/piece_tree.h); a
// right subtree of one piece is added onto the left by its product (old + finished chain,
// the one add a merge makes), others go through S (M x N a level, row stride N).
static void pieces_tree(const GemmArgs *g, int kc, int lo, int n, float *C, int ldc, float *S, int par) {
    if (n == 1) {
        piece_blocked(g, lo * kc, kc, 0, C, ldc, par);
        return;
    }
    int h = tree_left(n), M = g->M, N = g->N;
    pieces_tree(g, kc, lo, h, C, ldc, S, par);
    if (n - h == 1) {
        piece_blocked(g, (lo + h) * kc, kc, 1, C, ldc, par);
        return;
    }
    pieces_tree(g, kc, lo + h, n - h, S, N, S + (size_t)M * N, par);
    #pragma omp parallel for schedule(static) if (par)
    for (int i = 0; i < M; i++) onto_old(C + (size_t)i * ldc, S + (size_t)i * N, N);
}

// The chunked product g of long pieces: the tree's root in C itself (one piece) or in a
// partial sum of the kernel's own, then onto 0.0f.
static void chunked_long(const GemmArgs *g, int chunks, int par) {
    int M = g->M, N = g->N, levels = piece_tree_levels(chunks);
    float *R = chunks > 1 ? malloc(sizeof(float) * (size_t)M * N * (size_t)levels) : NULL;
    if (chunks > 1 && !R) die("out of host memory for a chunked product's partial sums (%d x %d x %d)", M, N, levels);
    float *root = R ? R : g->C;
    int ldr = R ? N : g->ldc;
    pieces_tree(g, g->K / chunks, 0, chunks, root, ldr, R ? R + (size_t)M * N : NULL, par);
    #pragma omp parallel for schedule(static) if (par)
    for (int i = 0; i < M; i++) onto_zero(g->C + (size_t)i * g->ldc, root + (size_t)i * ldr, N);
    free(R);
}

// The chunked product g (op(A) = A, g->accumulate 0) in `chunks` pieces of K.
static void chunked(GemmArgs *g, int chunks) {
    int M = g->M, N = g->N, K = g->K;
    if (M <= 0 || N <= 0) return;
    if (chunks < 1 || K % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", K, chunks);
    if (K == 0) {   // empty chains and their sum: 0
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) g->C[(size_t)i * g->ldc + j] = 0.0f;
        return;
    }
    int par = (double)M * N * K > 1e6;
    if (long_pieces && K / chunks > KC) {
        chunked_long(g, chunks, par);
        return;
    }
    int *off = even_pieces(K, chunks);
    gemm_tree(gemm_kernel_pick(), g, off, chunks, par);
    free(off);
}

// A chunked product's shape and strides, its operands left for the caller to set: op(A) =
// A (M,K); op(B) = B (K,N), or B^T with B (N,K).
static GemmArgs chunked_args(int transB, int M, int N, int K, int lda, int ldb, float *C, int ldc) {
    return (GemmArgs){.M = M, .N = N, .K = K, .ldc = ldc, .ai = (size_t)lda, .ak = 1,
                      .bk = transB ? 1 : (size_t)ldb, .bj = transB ? (size_t)ldb : 1, .C = C};
}

void ordered_gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                          int ldb, float *C, int ldc) {
    GemmArgs g = chunked_args(transB, M, N, K, lda, ldb, C, ldc);
    g.A = A, g.B = B;
    chunked(&g, chunks);
}

void ordered_gemm_chunked16(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, float *C, int ldc) {
    GemmArgs g = chunked_args(transB, M, N, K, lda, ldb, C, ldc);
    g.A16 = A, g.B16 = B;
    chunked(&g, chunks);
}

// The leaves' product g (op(A) = A^T) over the n leaves at off.
static void leaves(GemmArgs *g, const int *off, int n) {
    int M = g->M, N = g->N;
    if (M <= 0 || N <= 0 || n <= 0) return;
    if (off[0] != 0) die("internal: a weight gradient's first leaf starts at row %d, not 0", off[0]);
    for (int l = 0; l < n; l++)
        if (off[l + 1] < off[l]) die("internal: leaf %d of a weight gradient ends before it starts", l);
    int K = g->K = off[n];
    float *C = g->C;
    size_t ldc = (size_t)g->ldc;
    if (K == 0) {   // every leaf empty: the tree's root is 0.0f, added onto C (or onto 0.0f)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[i * ldc + j] = (g->accumulate ? C[i * ldc + j] : 0.0f) + 0.0f;
        return;
    }
    gemm_tree(gemm_kernel_pick(), g, off, n, (double)M * N * K > 1e6);
}

// A weight gradient's shape and strides, its operands left for the caller to set (K too:
// leaves() counts it): op(A) = A^T with A (K,M), a leaf's rows of A are its k's; op(B) = B
// (K,N). A gradient written onto 0.0f is next read by the optimizer, after the rest of the
// step: streamed past the caches (GemmArgs), where it would evict the layer's operands.
static GemmArgs leaves_args(int M, int N, int lda, int ldb, int accumulate, float *C, int ldc) {
    return (GemmArgs){.M = M, .N = N, .accumulate = accumulate != 0, .ldc = ldc, .ai = 1, .ak = (size_t)lda,
                      .bk = (size_t)ldb, .bj = 1, .C = C, .stream = !accumulate};
}

void ordered_gemm_leaves(int M, int N, const int *off, int n, const float *A, int lda, const float *B, int ldb,
                         int accumulate, float *C, int ldc) {
    GemmArgs g = leaves_args(M, N, lda, ldb, accumulate, C, ldc);
    g.A = A, g.B = B;
    leaves(&g, off, n);
}

void ordered_gemm_leaves16(int M, int N, const int *off, int n, const uint16_t *A, int lda, const uint16_t *B,
                           int ldb, int accumulate, float *C, int ldc) {
    GemmArgs g = leaves_args(M, N, lda, ldb, accumulate, C, ldc);
    g.A16 = A, g.B16 = B;
    leaves(&g, off, n);
}
