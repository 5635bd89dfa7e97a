// kernels/cpu/gemm_parts.h: what the ordered GEMM's files share: kernels/cpu/gemm.c (the
// micro-kernels, the packing, the plain and in-place products), kernels/cpu/gemm_tree.c
// (products whose contraction is cut into pieces added along the canonical tree, the tree
// done tile by tile) and kernels/cpu/gemm_pack16.c (the packing from 16-bit operands). Not
// part of the kernel seam: nothing outside these three files includes it.
#ifndef MESHMOE_KERNELS_CPU_GEMM_PARTS_H
#define MESHMOE_KERNELS_CPU_GEMM_PARTS_H
#include "kernels/cpu/gemm.h"
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

// Cache blocks. A row block's A (at most MC x KC, 384 KiB) stays in a 1 MiB L2 while the
// micro-kernel sweeps the B panels (KC x 32) across it; the B block (up to KC x NC, 4 MiB)
// is read from L3. MS, MC and NC are multiples of every kernel's tile so that only the
// edges of C are partial tiles; MC shrinks for small M so that every thread gets row
// blocks. KC = 1024 runs the presets' contractions (K <= 1024) in one block; NC = 1024
// packs op(A) once per call at N <= 1024; MS = 768 rows per in-place chunk is as fast as
// no chunks at all while bounding the packed op(A) (smaller blocks and chunks are no
// faster on a Zen 4, build/gemm_bench).
enum { MS = 768, MC = 96, NC = 1024, KC = 1024, MR_MAX = 12, NR_MAX = 32 };

// The micro-kernel: a tile (mr, nr) of C from a packed A panel Ap (kc, mr), k-major, and a
// B panel Bp (kc, nr) whose k-th row starts at Bp + k*ldb: packed (ldb = nr) or read in
// place from B. The accumulators start at 0 (load = 0) or at the partial chains held in C
// (load = 1); after kc steps the tile is stored, plus old (row stride ldo) when old is not
// NULL.
typedef void (*MicroKernel)(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                            const float *old, int ldo);
// The same tile, storing the B panel's rows (kc, nr) into Bc, k-major, as it reads them.
typedef void (*CopyKernel)(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                           const float *old, int ldo, float *Bc);

// The tile with op(A) = A read where it lies, for a whole row panel on the in-place paths
// (one K block: the accumulators start at 0): row r of the tile at A + r*lda, its k-th value
// broadcast as the packed panel's would be; B, C and old as MicroKernel's, and the B
// panel's rows stored into Bc as they are read when Bc is not NULL. Where next is not NULL,
// the rows of the panel that runs after this one (row r at next + r*lda, the same kc) are
// asked into L2 as the tile goes (gemm.c: prefetch_a).
typedef void (*InPlaceKernel)(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                              const float *old, int ldo, float *Bc, const float *next);

// The transposed tile, for op(B) = W^T with W (N,K) read in place (gemm_stream_t): 12
// columns of C, j0 .. j0+11, whose W rows start at w[0..11], by 32 rows of C held in the
// lanes, from a panel Ap (kc, 32) of op(A)^T, k-major. T[r*32 + l] receives the chain of
// C(i0+l, j0+r): the same fmas in the same order as the row-major tile (fma's product is
// commutative), with the roles of the two operands swapped.
typedef void (*WeightKernel)(int kc, const float *const *w, const float *Ap, float *T);

// P (kc, w) k-major: P[k*w + r] = X[(r0+r)*ld + k0 + k] for r < rows, 0 for rows <= r < w.
typedef void (*PackT)(float *P, int w, const float *X, size_t ld, int r0, int rows, int k0, int kc);

// The B row PF_ROWS k-steps ahead, asked into L1 (two loads of `half` floats). A B panel
// read in place (gemm_stream) has its rows a whole row of B apart (2-4 KiB at the presets'
// widths), a stride the hardware prefetchers follow late: without this, a product of 8 to
// 128 rows ran at 19-139 GFLOP/s, with it 28-162 (build/gemm_bench's "few rows" lines, B in
// place, docs/performance.md). A prefetch changes no arithmetic and never faults, past
// the end of B included. Always inlined: GCC counts a function that only prefetches as one
// without effects and drops the calls it does not inline (it did so from the tiles).
enum { PF_ROWS = 8 };
__attribute__((always_inline)) static inline void prefetch_b(const float *Bp, int ldb, int half) {
    _mm_prefetch((const char *)(Bp + PF_ROWS * (size_t)ldb), _MM_HINT_T0);
    _mm_prefetch((const char *)(Bp + PF_ROWS * (size_t)ldb + half), _MM_HINT_T0);
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

// tn, tl: the transposed tile's columns of C and rows of C (lanes); NULL where the kernel
// set has none (then op(B) = W^T is always packed); wt_rows: the most rows it takes (gemm.h,
// STREAM_M_WT). pack: the set's pack_t.
// copy: the tile that also copies the B panel it reads (gemm.c: stream_tiles); NULL where the
// set has none. ain: the tile that reads op(A) = A in place (gemm.c: gemm_panel_tile); NULL where
// the set packs it.
typedef struct {
    MicroKernel fn;
    int mr, nr;
    const char *name;
    WeightKernel tfn;
    int tn, tl, wt_rows;
    PackT pack;
    CopyKernel copy;
    InPlaceKernel ain;
} KernelInfo;

// A product: C (M,N, row stride ldc) = op(A) @ op(B), or C += ... when accumulate; op(A)(i, k)
// = A[i*ai + k*ak], op(B)(k, j) = B[k*bk + j*bj]. stream: C's whole cache lines are written
// with non-temporal stores, past the caches (a weight gradient written onto 0.0f, which
// nothing reads before the optimizer: gemm_tree.c). A16, B16: the operands stored as bf16
// bits instead of A, B (NULL then), at the same strides: every panel of them is packed,
// widened as it is (gemm_pack16.c), and none is read in place.
typedef struct {
    int M, N, K, accumulate, ldc;
    const float *A, *B;
    size_t ai, ak, bk, bj;
    float *C;
    int stream;
    const uint16_t *A16, *B16;
} GemmArgs;

// 8 floats, added lane by lane (GCC's vector extension: the same adds as a scalar loop).
typedef float V8 __attribute__((vector_size(32), aligned(4), may_alias));

// c (n) = 0.0f + t (n): a row of a finished tile into C, 8 floats per vector operation.
static inline void onto_zero(float *c, const float *t, int n) {
    int j = 0;
    for (; j + 8 <= n; j += 8) *(V8 *)(c + j) = (V8){0} + *(const V8 *)(t + j);
    for (; j < n; j++) c[j] = 0.0f + t[j];
}

// The kernel set this CPU runs (or the one a test forced).
const KernelInfo *gemm_kernel_pick(void);
// The product g by the blocked path (gemm.c): every operand packed, K in blocks of KC, each
// chain going on from block to block. par: the threads share it.
void gemm_blocked(const KernelInfo *kn, const GemmArgs *g, int par);
// An aligned host buffer of the GEMM's own (kernels/cpu/gemm.c says why outside the allocator).
float *gemm_buffer(size_t floats);
// Bp (kc, nr) k-major: Bp[k*nr + c] = op(B)(k0+k, j0+c), 0 for c >= cols; op(B)(k, j) = B[k*bk + j*bj].
void gemm_pack_b(const KernelInfo *kn, float *Bp, const float *B, size_t bk, size_t bj, int j0, int cols, int k0,
                 int kc, int nr);
// The packing of a product's operands from 16-bit numbers (GemmArgs.A16, B16; gemm_pack16.c):
// Ap (kc, mr) k-major: Ap[k*mr + r] = op(A)(i0+r, k0+k), 0 for r >= rows; and Bp as
// gemm_pack_b's, widened.
void gemm_pack_a16(const KernelInfo *kn, float *Ap, const GemmArgs *g, int i0, int rows, int k0, int kc, int mr);
void gemm_pack_b16(const KernelInfo *kn, float *Bp, const GemmArgs *g, int j0, int cols, int k0, int kc, int nr);
// The B panel of the product g, from B or B16: gemm_pack_b or gemm_pack_b16.
void gemm_pack_b_of(const KernelInfo *kn, float *Bp, const GemmArgs *g, int j0, int cols, int k0, int kc, int nr);
// Row panels [p0, p1) of the chunk of `rows` rows at i0, op(A) (all of K) packed into Ap,
// but for the whole panels of op(A) = A that the tiles read in place (gemm.c: panel_in_place).
void gemm_stream_pack(const KernelInfo *kn, const GemmArgs *g, float *Ap, int i0, int rows, int p0, int p1);
// Row panel p of the chunk at i0 (packed in Ap as gemm_stream_pack leaves it), its k range
// [k0, k0+kc), against the B panel at b (row stride ldb), onto c (row stride ldc), of which
// rows x cols are written (mr x nr where c is a tile of the caller's own); old and ldo as
// MicroKernel's, Bc as CopyKernel's (whole tiles only). ahead: panel p+1 runs next over the
// same k range and has not been read yet (the first column panel), so a tile reading A in
// place asks for its rows as it goes.
void gemm_panel_tile(const KernelInfo *kn, const GemmArgs *g, const float *Ap, int i0, int p, int k0, int kc,
                     const float *b, int ldb, float *c, int ldc, int rows, int cols, const float *old, int ldo,
                     float *Bc, int ahead);
// How the in-place paths share their work (kernels/cpu/gemm.c): the runs of row panels per
// column panel, whether each thread takes its own row panels, the thread's place in its team.
int gemm_row_runs(int cpanels, int par);
int gemm_own_rows(int panels, int threads);
void gemm_team_place(int *threads, int *t);
// The kernel set's copy kernel where the copy is on (gemm_set_copy_b), else NULL.
CopyKernel gemm_copy_kernel(const KernelInfo *kn);

#endif
