// gpu/gemm.cu: the ordered GEMM on the GPU (gpu/gemm.h): shared-memory tiles, one output
// element per thread.
//
// Launch geometry: a block of TILE x TILE threads computes a TILE x TILE tile of C, thread
// (x, y) the element (row i0 + y, column j0 + x); the grid covers C with
// (ceil(N/TILE), ceil(M/TILE)) blocks. The contraction is walked in steps of TILE: each
// step the block loads a TILE x TILE piece of op(A) and of op(B) into shared memory (each
// thread one element of each, zero past the edges), waits, and every thread continues its
// own chain over the step's k in order, then waits again before the next load. A thread's
// chain thus sees k = 0, 1, ..., K-1 in order whatever TILE is and whatever tile its element
// falls in: the CPU kernel's chain (kernels/cpu/gemm.h), hence its bits.
//
// This is the plain form of a GEMM (no register tiles, no vector loads, no tensor cores): a
// few times slower than cuBLAS, and the one that keeps the bits. gpu/matmul.cu can call
// cuBLAS instead.
#include "gpu/gpu.h"
#include "gpu/gemm.h"

enum { TILE = 16 };

// op(A)[i][k] and op(B)[k][j] as stored (row-major, row strides lda and ldb).
__device__ static inline float op_a(const float *A, int lda, int transA, int i, int k) {
    return transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
}
__device__ static inline float op_b(const float *B, int ldb, int transB, int k, int j) {
    return transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
}

__global__ static void ordered_gemm_kernel(int transA, int transB, int M, int N, int K, const float *A, int lda,
                                           const float *B, int ldb, int accumulate, float *C, int ldc) {
    __shared__ float As[TILE][TILE];       // As[y][kk] = op(A)[i0 + y][k0 + kk]
    __shared__ float Bs[TILE][TILE + 1];   // Bs[kk][x] = op(B)[k0 + kk][j0 + x] (+1: no bank conflicts)
    int x = threadIdx.x, y = threadIdx.y;
    int i = blockIdx.y * TILE + y, j = blockIdx.x * TILE + x;
    float chain = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // this thread loads op(A)[i][k0 + x] and op(B)[k0 + y][j]
        As[y][x] = (i < M && k0 + x < K) ? op_a(A, lda, transA, i, k0 + x) : 0.0f;
        Bs[y][x] = (k0 + y < K && j < N) ? op_b(B, ldb, transB, k0 + y, j) : 0.0f;
        __syncthreads();
        int steps = K - k0 < TILE ? K - k0 : TILE;
        for (int kk = 0; kk < steps; kk++) chain = fmaf(As[y][kk], Bs[kk][x], chain);
        __syncthreads();
    }
    if (i < M && j < N) {
        float *c = C + (size_t)i * ldc + j;
        *c = accumulate ? *c + chain : chain;
    }
}

void ordered_gemm_gpu(int transA, int transB, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    dim3 block(TILE, TILE), grid((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    GPU_LAUNCH(ordered_gemm_kernel, grid, block, 0)(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
    GPU_CHECK_LAUNCH();
}
