// kernels/cpu/gemm_pack16.c: the ordered GEMM's packing from operands stored as bf16 bits
// (kernels/matmul16.h on the CPU). The panels the micro-kernels read are float32 either way;
// a bf16 value widens to float32 exactly, so a panel packed from 16-bit numbers holds the
// very floats a panel packed from their float32 copy would, and every chain is the same.
// Only the packed paths take 16-bit operands (kernels/cpu/gemm.c: the tiles that read an
// operand where it lies read floats), so nothing of the operand exists as floats beyond the
// panels: no widened copy of a whole activation or weight.
#include "kernels/cpu/gemm_parts.h"
#include "kernels/bf16.h"

// x (n floats) = the bf16 values h (n), 16 at a time in vector lanes (GCC's vector
// extensions: one AVX-512 register, two AVX2 ones), each value's bits moved to the top half
// of its float: the exact widening bf16_float makes.
typedef uint16_t H16 __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t W16 __attribute__((vector_size(64)));
typedef float F16 __attribute__((vector_size(64), aligned(4), may_alias));
static void widen(float *x, const uint16_t *h, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) *(F16 *)(x + i) = (F16)(__builtin_convertvector(*(const H16 *)(h + i), W16) << 16);
    for (; i < n; i++) x[i] = bf16_float(h[i]);
}

// Lines of k widened a piece at a time into a small buffer, then transposed by the kernel
// set's own pack_t: 32 lines (the widest panel, NR_MAX) of WIDEN_K values, 32 KiB.
enum { WIDEN_K = 256 };

// P (kc, w) k-major: P[k*w + r] = X[(r0+r)*ld + k0 + k] widened, for r < rows; 0 for
// rows <= r < w. The 16-bit twin of PackT.
static void pack16_t(const KernelInfo *kn, float *P, int w, const uint16_t *X, size_t ld, int r0, int rows, int k0,
                     int kc) {
    float buf[NR_MAX * WIDEN_K];
    for (int kk = 0; kk < kc; kk += WIDEN_K) {
        int n = imin(WIDEN_K, kc - kk);
        for (int r = 0; r < rows; r++) widen(buf + r * WIDEN_K, X + (size_t)(r0 + r) * ld + k0 + kk, n);
        kn->pack(P + (size_t)kk * w, w, buf, WIDEN_K, 0, rows, 0, n);
    }
}

// P (kc, w) k-major: P[k*w + c] = X[(k0+k)*ld + j0 + c] widened, for c < cols; 0 for
// cols <= c < w: lines that are already contiguous runs of the panel's width.
static void pack16_runs(float *P, int w, const uint16_t *X, size_t ld, int j0, int cols, int k0, int kc) {
    for (int k = 0; k < kc; k++) {
        float *p = P + (size_t)k * w;
        widen(p, X + (size_t)(k0 + k) * ld + j0, cols);
        for (int c = cols; c < w; c++) p[c] = 0.0f;
    }
}

void gemm_pack_a16(const KernelInfo *kn, float *Ap, const GemmArgs *g, int i0, int rows, int k0, int kc, int mr) {
    if (g->ak == 1) pack16_t(kn, Ap, mr, g->A16, g->ai, i0, rows, k0, kc);   // op(A) = A: a transposition
    else pack16_runs(Ap, mr, g->A16, g->ak, i0, rows, k0, kc);                // op(A) = A^T: runs of rows
}

void gemm_pack_b16(const KernelInfo *kn, float *Bp, const GemmArgs *g, int j0, int cols, int k0, int kc, int nr) {
    if (g->bk == 1) pack16_t(kn, Bp, nr, g->B16, g->bj, j0, cols, k0, kc);   // op(B) = B^T: a transposition
    else pack16_runs(Bp, nr, g->B16, g->bk, j0, cols, k0, kc);                // op(B) = B: runs of columns
}
