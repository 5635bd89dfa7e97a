// kernels/cpu/gemm.h: the ordered GEMM, the CPU backend's matmul kernel (kernels/matmul.h).
//
// Every output element is one chain of fused multiply-adds over k, in order, starting from
// 0.0f:  C[i][j] = fma(A[i][K-1], B[K-1][j], ... fma(A[i][0], B[0][j], 0.0f));
// with accumulate the finished chain is then added to C's old value (one add). The chain
// of an element involves nothing else: not the other rows or columns, not the shapes or
// strides, not the block it falls in, not the thread that computes it, not the kernel
// (a lane of a vector FMA rounds exactly like the scalar fmaf).
#ifndef MESHMOE_KERNELS_CPU_GEMM_H
#define MESHMOE_KERNELS_CPU_GEMM_H
#include <stddef.h>
#include <stdint.h>

// C (M,N) = op(A) (M,K) @ op(B) (K,N), or C += ... when accumulate is 1; row-major with row
// strides lda, ldb, ldc as stored; op(X) = X^T when transX.
void ordered_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                  const float *B, int ldb, int accumulate, float *C, int ldc);
// The same product of operands stored as bf16 bits (kernels/bf16.h), widened exactly into the
// packed panels: the bits of ordered_gemm on the widened values, without a float32 copy of
// either operand (kernels/cpu/gemm_pack16.c).
void ordered_gemm16(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                    int ldb, int accumulate, float *C, int ldc);
// The same product as the plain triple loop (kernels/cpu/gemm_plain.c): the same bits,
// slowly; what matmul_impl=plain runs.
void plain_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                const float *B, int ldb, int accumulate, float *C, int ldc);

// C (M,N) = the contraction of A (M,K) with op(B) (K,N) cut into `chunks` pieces of
// K/chunks, each piece's product (its own chains, from 0.0f) added along the canonical tree
// (base/treesum.h), then onto 0.0f: C is overwritten. op(B) = B, or B^T with B (N,K) when
// transB. What kernels/matmul.h:gemm_chunked asks, the merges done tile by tile.
void ordered_gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                          int ldb, float *C, int ldc);
// The same of 16-bit operands, widened into the panels (ordered_gemm16).
void ordered_gemm_chunked16(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, float *C, int ldc);
// The same as the plain loops: each element's pieces, then their tree.
void plain_gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                        int ldb, float *C, int ldc);

// C (M,N) += the tree over n leaves of a weight gradient: leaf l is the product of rows
// off[l] .. off[l+1]-1 of A (.,M) and of B (.,N), op(A) = A^T, each its own chains from 0.0f;
// the leaves are added along the canonical tree (base/treesum.h) and the root onto C's old
// values, or with accumulate 0 onto 0.0f (C is then written, never read: the bits of
// accumulate 1 onto a C of zeros). off (n+1, host memory) starts at 0 and never decreases; a
// leaf may be empty (its product 0.0f). What kernels/matmul.h:matmul_backward_dw_leaves
// asks, the merges done tile by tile (kernels/cpu/gemm_tree.c).
void ordered_gemm_leaves(int M, int N, const int *off, int n, const float *A, int lda, const float *B, int ldb,
                         int accumulate, float *C, int ldc);
// The same of 16-bit operands, widened into the panels (ordered_gemm16).
void ordered_gemm_leaves16(int M, int N, const int *off, int n, const uint16_t *A, int lda, const uint16_t *B,
                           int ldb, int accumulate, float *C, int ldc);
// The same as the plain loops: each element's leaves, then their tree, then onto C (or 0.0f).
void plain_gemm_leaves(int M, int N, const int *off, int n, const float *A, int lda, const float *B, int ldb,
                       int accumulate, float *C, int ldc);

// The micro-kernels, chosen once at run time from what the CPU supports (the fastest
// available); all give the same bits. A test can force one to compare them.
typedef enum { GEMM_KERNEL_AUTO, GEMM_KERNEL_SCALAR, GEMM_KERNEL_AVX2, GEMM_KERNEL_AVX512 } GemmKernel;
int gemm_kernel_available(GemmKernel k);    // 1 if this CPU runs it (AUTO and SCALAR always)
void gemm_force_kernel(GemmKernel k);       // dies if not available; AUTO: back to the fastest
const char *gemm_kernel_name(void);         // "avx512 12x32", "avx2 6x16" or "scalar 4x8"
// The micro-kernel named by the environment's MESHMOE_GEMM_KERNEL (avx512, avx2, scalar), if
// set: what the GEMM runs on a CPU without the wider ones (the same bits, another speed).
// Dies, naming the variable, on another value or one this CPU does not run.
void gemm_kernel_from_env(void);

// Where B is read in place instead of packed (the same bits either way), when K fits one K
// block (1024): op(B) = B at any number of rows (gemm_stream), op(B) = W^T up to
// STREAM_M_WT rows (gemm_stream_t). Measured by build/gemm_bench's "few rows" lines on a
// Zen 4, per CPU-second against the packed path with vectorised packing, warm and `cold`:
// B read in place gains at every row count from 8 to 512; the transposed tile gains from
// 32 to 128 rows (at 128 cold; warm it is even), and from 192 rows it is even at best and
// mostly loses (at 8 rows it loses warm and gains cold). The AVX2 set's transposed tile
// (6 columns by 16 rows) gains more, its packing being 8 x 8 transpositions: (M,1024)@
// (1024,512)^T, 2 threads, cold, 60 against 21 GFLOP/s at 8 rows, 167 against 91 at 64,
// 188 against 173 at 512, 185 against 175 at 1024, and 176 against 186 at 2048 (K = 384 and
// 512 alike), hence its own bound. A test can set 0 (always pack) or a large value (always
// in place) for both paths; a negative value restores the defaults.
enum { STREAM_M_WT = 128, STREAM_M_WT_AVX2 = 1024 };
void gemm_set_stream_rows(int rows);
// Whether the in-place paths copy a B panel as its first row panel reads it, for the row
// panels after it (kernels/cpu/gemm.c:stream_tiles): on (1) by default; off (0) reads every
// panel in place, so that a test runs both and a benchmark compares them. The same bits.
void gemm_set_copy_b(int on);
// Whether the in-place paths read op(A) = A where it lies instead of packing it (on: 1, by
// default, where the kernel set has the tile for it, AVX-512's and AVX2's; 0 packs it, so
// that a test runs both and a benchmark compares them). The same bits.
void gemm_set_a_in_place(int on);
// Whether a chunked product whose pieces are longer than a K block (1024) runs each piece as
// a blocked product of its own, the pieces merged in passes (on: 1, by default; the tiles'
// tree of gemm_tree.c packs op(B) again for every few rows at such a K: build/gemm_bench's
// "long pieces" lines); 0 keeps the tiles' tree, so that a test runs both. The same bits.
void gemm_set_long_pieces(int on);

// P (kc, w) k-major: P[k*w + r] = X[r*ld + k] for r < rows, 0 for rows <= r < w; lines of
// X laid out k-major, as the ordered GEMM packs op(A) (16 x 16 at a time in registers on
// AVX-512). The attention tiles pack their query rows with it.
void gemm_pack_lines(float *P, int w, const float *X, size_t ld, int rows, int kc);

#endif
