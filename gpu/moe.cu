// gpu/moe.cu: the MoE block's row layout, gather and combine on the GPU (kernels/moe.h), the
// twin of kernels/cpu/moe.c: the same sums in the same order, the CPU's bits.
//
// Launch geometry: sort_rows runs one block per expert (below); dense_rows and add_shared one
// thread per element; the gather, the scatter-adds, combine_forward and combine_backward's dy
// one thread per element too (the gather and dy four where the rows allow: quads), a block per
// row's piece of columns (row_grid); combine_forward's
// block orders its token's K slots by expert once (token_order) and each thread adds them in
// that order; combine_backward's dw a block per 32 assignments, one thread of it adding an
// assignment's products over d in order.
#include "gpu/gpu.h"
#include "gpu/backend.h"

// The most experts per token the combine and the scatter-add sort (the presets use 2 to 8).
enum { MOE_MAX_K = 32 };

// The CPU's counting sort in parallel, with its result: block e (of E) places the rows of
// expert e. Its first row is the number of assignments to experts 0 .. e-1 (each thread
// counts a strided part of top_idx, and the block adds the counts in shared memory). Then
// the block walks the A = T*K assignments in order, SORT_THREADS at a time: each thread
// marks whether its assignment goes to e, a prefix sum of the marks over the tile gives the
// marked ones their ranks, and they take the next rows in that order. So the rows of each
// expert keep the order of the assignments, as the CPU's do, with no atomics; every block
// reads top_idx twice (E x 2A reads of L2-resident integers, microseconds on the presets).
enum { SORT_THREADS = 256 };
__global__ static void sort_rows_kernel(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T,
                                        int E, int K) {
    __shared__ int part[SORT_THREADS];
    int e = blockIdx.x, tid = threadIdx.x;
    size_t A = (size_t)T * K;
    int before = 0;
    for (size_t a = tid; a < A; a += SORT_THREADS) before += top_idx[a] < e;
    part[tid] = before;
    __syncthreads();
    for (int half = SORT_THREADS / 2; half > 0; half /= 2) {   // tree sum into part[0]
        if (tid < half) part[tid] += part[tid + half];
        __syncthreads();
    }
    int row = part[0];
    if (tid == 0) {
        row_start[e] = row;
        if (e == E - 1) row_start[E] = (int)A;
    }
    __syncthreads();   // part[0] read by every thread before the tiles reuse part
    for (size_t a0 = 0; a0 < A; a0 += SORT_THREADS) {
        size_t a = a0 + tid;
        int mine = a < A && top_idx[a] == e;
        part[tid] = mine;
        __syncthreads();
        for (int step = 1; step < SORT_THREADS; step *= 2) {   // inclusive prefix sum of the marks
            int left = tid >= step ? part[tid - step] : 0;
            __syncthreads();
            part[tid] += left;
            __syncthreads();
        }
        if (mine) {
            int r = row + part[tid] - 1;
            row_token[r] = (int)(a / K);
            assign_row[a] = r;
        }
        row += part[SORT_THREADS - 1];
        __syncthreads();   // the tile's total read before the next tile's marks
    }
}

// One thread per index k of the longest of the three arrays.
__global__ static void dense_rows_kernel(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T,
                                         int E, int K) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k <= (size_t)E) row_start[k] = (int)k * T;
    if (k < (size_t)E * T) row_token[k] = (int)(k % T);
    if (k < (size_t)T * K) assign_row[k] = top_idx[k] * T + (int)(k / K);
}

// The row kernels below take a grid of (rows, pieces of GPU_THREADS columns) (row_grid): block
// (i, c) handles row i's columns c * GPU_THREADS + threadIdx.x, one thread each, so a warp
// reads and writes consecutive floats and no thread divides an index to find its row.
static dim3 row_grid(size_t rows, int D) { return dim3((unsigned)rows, (D + GPU_THREADS - 1) / GPU_THREADS, 1); }
__device__ static int row_col(void) { return blockIdx.y * blockDim.x + threadIdx.x; }

// The gather and combine_backward's dy four columns a thread (a 16-byte access to floats, 8
// bytes to bf16 bits) where every row starts so aligned: D a multiple of 4 and the arrays'
// addresses, a bf16 array's times 2 (as quads_of's callers give them, gpu/gpu.h), multiples
// of 16. One element a thread, the packed gather ran at 1.3-2.0 TB/s on an H200
// (2026-12-04), as the casts did before they went four at a time (gpu/cast.cu).
static int quads(int D, uintptr_t addresses) { return D % 4 == 0 && addresses % 16 == 0; }
// An array of Y's address, scaled as quads wants it: a float's as it is, bf16 bits' times 2.
static uintptr_t quad_address(const float *x) { return (uintptr_t)x; }
static uintptr_t quad_address(const uint16_t *h) { return (uintptr_t)h * 2; }
__device__ static int row_quad(void) { return 4 * row_col(); }

__global__ static void gather_rows_kernel(float *xs, const float *x, const int *row_token, int r0, int D) {
    size_t i = blockIdx.x;
    int d = row_col();
    if (d < D) xs[i * D + d] = x[(size_t)row_token[r0 + i] * D + d];
}

__global__ static void gather_rows_packed_kernel(uint16_t *xs, const float *x, const int *row_token, int r0, int D) {
    size_t i = blockIdx.x;
    int d = row_col();
    if (d < D) xs[i * D + d] = bf16_bits_dev(x[(size_t)row_token[r0 + i] * D + d]);
}

__global__ static void gather_rows4_kernel(float *xs, const float *x, const int *row_token, int r0, int D) {
    size_t i = blockIdx.x;
    int d = row_quad();
    if (d < D) *(float4 *)(xs + i * D + d) = *(const float4 *)(x + (size_t)row_token[r0 + i] * D + d);
}

__global__ static void gather_rows_packed4_kernel(uint16_t *xs, const float *x, const int *row_token, int r0, int D) {
    size_t i = blockIdx.x;
    int d = row_quad();
    if (d < D) *(uint2 *)(xs + i * D + d) = bf16_bits4_dev(*(const float4 *)(x + (size_t)row_token[r0 + i] * D + d));
}

// The n rows belong to one expert: their tokens are distinct, so no two threads add into one element.
__global__ static void scatter_add_rows_kernel(float *dx, const float *dxs, const int *row_token, int r0, int D) {
    size_t i = blockIdx.x;
    int d = row_col();
    if (d < D) dx[(size_t)row_token[r0 + i] * D + d] += dxs[((size_t)r0 + i) * D + d];
}

// ord[0..K) = one token's slots 0 .. K-1 in ascending order of key[slot] (a stable insertion
// sort), made in the block's shared memory by its first thread, then the barrier: once a block,
// where each thread sorted them for its own column (an array indexed at run time, which the GPU
// keeps in local memory, at every element of the (T,D) output).
__device__ static void token_order(int *ord, const int *key, int K) {
    if (threadIdx.x == 0) {
        for (int k = 0; k < K; k++) {
            int j = k;
            for (; j > 0 && key[ord[j - 1]] > key[k]; j--) ord[j] = ord[j - 1];
            ord[j] = k;
        }
    }
    __syncthreads();
}

// One thread per element of dx (a block per token's piece of columns): its token's K rows in
// ascending row order, added one after another onto the element (no two threads write one
// element).
__global__ static void scatter_add_tokens_kernel(float *dx, const float *dxs, const int *assign_row, int K, int D) {
    __shared__ int ord[MOE_MAX_K];   // the token's slots by row
    size_t t = blockIdx.x;
    int d = row_col();
    const int *rows = assign_row + t * K;
    token_order(ord, rows, K);
    if (d >= D) return;
    size_t id = t * D + d;
    float o = dx[id];
    for (int k = 0; k < K; k++) o += dxs[(size_t)rows[ord[k]] * D + d];
    dx[id] = o;
}

// The experts' outputs y as floats or as bf16 bits (the packed forms), and dy written either way.
__device__ static inline float y_at(const float *y, size_t i) { return y[i]; }
__device__ static inline float y_at(const uint16_t *y, size_t i) { return bf16_float_dev(y[i]); }
__device__ static inline void dy_put(float *dy, size_t i, float v) { dy[i] = v; }
__device__ static inline void dy_put(uint16_t *dy, size_t i, float v) { dy[i] = bf16_bits_dev(v); }

template <class Y>
__global__ static void combine_forward_kernel(float *out, const Y *y, const float *w, const int *top_idx,
                                              const int *assign_row, int D, int K, int bf16_sum, int bf16) {
    __shared__ int ord[MOE_MAX_K];   // the token's slots by expert index
    size_t t = blockIdx.x;
    int d = row_col();
    token_order(ord, top_idx + t * K, K);
    if (d >= D) return;
    size_t id = t * D + d;
    float o = 0.0f;
    for (int k = 0; k < K; k++) {
        size_t a = t * K + ord[k];
        float ya = y_at(y, (size_t)assign_row[a] * D + d), wa = w[a];
        o = bf16_sum ? bf16_round_dev(o + bf16_round_dev(wa * ya)) : o + wa * ya;   // cast point 14
    }
    out[id] = !bf16_sum && bf16 ? bf16_round_dev(o) : o;   // float32_weight_sum: one rounding
}

// combine_backward in two kernels: dy's rows a block per assignment's piece of columns (the
// writes of a warp consecutive), then dw (its dot products each one in-order sum, as the
// CPU's).
template <class Y>
__global__ static void combine_dy_kernel(Y *dy, const float *dout, const float *w, const int *assign_row, int D, int K) {
    size_t a = blockIdx.x;
    int d = row_col();
    if (d < D) dy_put(dy, (size_t)assign_row[a] * D + d, w[a] * dout[(a / K) * D + d]);
}

__device__ static inline void dy_put4(float *dy, size_t i, float4 v) { *(float4 *)(dy + i) = v; }
__device__ static inline void dy_put4(uint16_t *dy, size_t i, float4 v) { *(uint2 *)(dy + i) = bf16_bits4_dev(v); }
template <class Y>
__global__ static void combine_dy4_kernel(Y *dy, const float *dout, const float *w, const int *assign_row, int D,
                                          int K) {
    size_t a = blockIdx.x;
    int d = row_quad();
    if (d >= D) return;
    float wa = w[a];
    float4 g = *(const float4 *)(dout + (a / K) * D + d);
    dy_put4(dy, (size_t)assign_row[a] * D + d, make_float4(wa * g.x, wa * g.y, wa * g.z, wa * g.w));
}

// dw (A): a block of DW_ROWS assignments brings the products dout[t][d] * y[row][d] of a tile
// of DW_COLS columns into shared memory, a warp reading a row's consecutive columns (a
// thread walking its own two rows read 32 rows' columns at a time: 610-870 GB/s on an
// H200), then thread r adds its row's products in column order, as the CPU's loop does.
// Each thread loads its DW_LOADS products' operands of a tile into registers at once, and the
// next tile's while the adders add (the block's rows' tokens and rows of y found once):
// loads waited for one after another took 0.3 ms a call of 16384 assignments x 2048 columns
// on an H200, whose bytes take 0.05.
enum { DW_ROWS = 32, DW_COLS = 128, DW_STRIDE = GPU_THREADS / DW_COLS, DW_LOADS = DW_ROWS / DW_STRIDE };

// The thread's operands of the tile at column d0 (column j of it; rows r0 + i * DW_STRIDE,
// whose token and row of y are tok[r], yrow[r]): g[i] = dout's, v[i] = y's, 0 past the
// block's rows or the columns.
template <class Y>
__device__ static inline void dw_load(float *g, float *v, const float *dout, const Y *y, const int *tok,
                                      const int *yrow, int r0, int rows, int j, int d0, int cols, int D) {
#pragma unroll
    for (int i = 0; i < DW_LOADS; i++) {
        int r = r0 + i * DW_STRIDE, in = r < rows && j < cols;
        g[i] = in ? dout[(size_t)tok[r] * D + d0 + j] : 0.0f;
        v[i] = in ? y_at(y, (size_t)yrow[r] * D + d0 + j) : 0.0f;
    }
}

template <class Y>
__global__ static void combine_dw_kernel(float *dw, const float *dout, const Y *y, const float *w, const float *top_w,
                                         const int *assign_row, size_t A, int D, int K) {
    __shared__ float prod[DW_ROWS][DW_COLS + 1];   // (+1: thread r's reads of row r fall in different banks)
    __shared__ int tok[DW_ROWS], yrow[DW_ROWS];    // the block's rows: their token, their row of y
    size_t a0 = (size_t)blockIdx.x * DW_ROWS;
    int rows = A - a0 < (size_t)DW_ROWS ? (int)(A - a0) : DW_ROWS;
    int j = threadIdx.x % DW_COLS, r0 = threadIdx.x / DW_COLS;
    if ((int)threadIdx.x < rows) {
        tok[threadIdx.x] = (int)((a0 + threadIdx.x) / K);
        yrow[threadIdx.x] = assign_row[a0 + threadIdx.x];
    }
    __syncthreads();
    float g[DW_LOADS], v[DW_LOADS], dot = 0.0f;
    dw_load(g, v, dout, y, tok, yrow, r0, rows, j, 0, D < DW_COLS ? D : DW_COLS, D);
    for (int d0 = 0; d0 < D; d0 += DW_COLS) {
        int cols = D - d0 < DW_COLS ? D - d0 : DW_COLS;
#pragma unroll
        for (int i = 0; i < DW_LOADS; i++) prod[r0 + i * DW_STRIDE][j] = g[i] * v[i];
        __syncthreads();
        int next = d0 + DW_COLS;
        if (next < D) dw_load(g, v, dout, y, tok, yrow, r0, rows, j, next, D - next < DW_COLS ? D - next : DW_COLS, D);
        if ((int)threadIdx.x < rows)
            for (int c = 0; c < cols; c++) dot += prod[threadIdx.x][c];
        __syncthreads();
    }
    if ((int)threadIdx.x >= rows) return;
    size_t a = a0 + threadIdx.x;
    // w = top_w * keep: a dropped assignment (keep 0) passes no gradient to top_w
    dw[a] = (w[a] == 0.0f && top_w[a] != 0.0f) ? 0.0f : dot;
}

__global__ static void add_kernel(float *out, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += x[i];
}

// row_start (E+1), row_token (A), assign_row (A): the assignments sorted by expert.
static void sort_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    GPU_LAUNCH(sort_rows_kernel, E, SORT_THREADS, 0)(row_start, row_token, assign_row, top_idx, T, E, K);
    GPU_CHECK_LAUNCH();
}

// The dense path's rows: expert e on every token.
static void dense_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    size_t n = (size_t)E * T > (size_t)T * K ? (size_t)E * T : (size_t)T * K;
    n = n > (size_t)E + 1 ? n : (size_t)E + 1;
    GPU_LAUNCH(dense_rows_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(row_start, row_token, assign_row,
                                                                                    top_idx, T, E, K);
    GPU_CHECK_LAUNCH();
}

// xs (n,D) = the x rows of rows r0 .. r0+n-1's tokens.
static void gather_rows(float *xs, const float *x, const int *row_token, int r0, int n, int D) {
    if (n <= 0 || D <= 0) return;
    if (quads(D, (uintptr_t)x | (uintptr_t)xs))
        GPU_LAUNCH(gather_rows4_kernel, row_grid(n, D / 4), GPU_THREADS, 0)(xs, x, row_token, r0, D);
    else
        GPU_LAUNCH(gather_rows_kernel, row_grid(n, D), GPU_THREADS, 0)(xs, x, row_token, r0, D);
    GPU_CHECK_LAUNCH();
}

// xs (n,D) = the bf16 bits of those rows.
static void gather_rows_packed(uint16_t *xs, const float *x, const int *row_token, int r0, int n, int D) {
    if (n <= 0 || D <= 0) return;
    if (quads(D, (uintptr_t)x | (uintptr_t)xs * 2))
        GPU_LAUNCH(gather_rows_packed4_kernel, row_grid(n, D / 4), GPU_THREADS, 0)(xs, x, row_token, r0, D);
    else
        GPU_LAUNCH(gather_rows_packed_kernel, row_grid(n, D), GPU_THREADS, 0)(xs, x, row_token, r0, D);
    GPU_CHECK_LAUNCH();
}

// dx (T,D) += dxs rows r0 .. r0+n-1, each into its token's row.
static void scatter_add_rows(float *dx, const float *dxs, const int *row_token, int r0, int n, int D) {
    if (n <= 0 || D <= 0) return;
    GPU_LAUNCH(scatter_add_rows_kernel, row_grid(n, D), GPU_THREADS, 0)(dx, dxs, row_token, r0, D);
    GPU_CHECK_LAUNCH();
}

// dx (T,D) += each token's K rows of dxs, in ascending row order.
static void scatter_add_tokens(float *dx, const float *dxs, const int *assign_row, int T, int K, int D) {
    if (K > MOE_MAX_K) {
        fprintf(stderr, "meshmoe: the GPU's scatter_add_tokens takes at most %d experts per token, not %d\n",
                MOE_MAX_K, K);
        exit(1);
    }
    if (T <= 0 || D <= 0) return;
    GPU_LAUNCH(scatter_add_tokens_kernel, row_grid(T, D), GPU_THREADS, 0)(dx, dxs, assign_row, K, D);
    GPU_CHECK_LAUNCH();
}

// out (T,D) = sum_k w * y, slots in ascending expert order; y floats or bits.
template <class Y>
static void combine_forward_any(float *out, const Y *y, const float *w, const int *top_idx, const int *assign_row,
                                int T, int D, int K, int bf16_sum, int bf16) {
    if (K > MOE_MAX_K) {
        fprintf(stderr, "meshmoe: the GPU's combine_forward takes at most %d experts per token, not %d\n",
                MOE_MAX_K, K);
        exit(1);
    }
    if (T <= 0 || D <= 0) return;
    GPU_LAUNCH(combine_forward_kernel<Y>, row_grid(T, D), GPU_THREADS, 0)(out, y, w, top_idx, assign_row, D, K,
                                                                           bf16_sum, bf16);
    GPU_CHECK_LAUNCH();
}
static void combine_forward(float *out, const float *y, const float *w, const int *top_idx, const int *assign_row,
                            int T, int D, int K, int bf16_sum, int bf16) {
    combine_forward_any(out, y, w, top_idx, assign_row, T, D, K, bf16_sum, bf16);
}
static void combine_forward_packed(float *out, const uint16_t *y, const float *w, const int *top_idx,
                                   const int *assign_row, int T, int D, int K, int bf16_sum, int bf16) {
    combine_forward_any(out, y, w, top_idx, assign_row, T, D, K, bf16_sum, bf16);
}

// dy rows and dw (A) from dout (T,D); y and dy floats, or both bits.
template <class Y>
static void combine_backward_any(Y *dy, float *dw, const float *dout, const Y *y, const float *w, const float *top_w,
                                 const int *assign_row, size_t A, int D, int K) {
    if (A == 0 || D <= 0) return;
    if (quads(D, (uintptr_t)dout | quad_address(dy)))
        GPU_LAUNCH(combine_dy4_kernel<Y>, row_grid(A, D / 4), GPU_THREADS, 0)(dy, dout, w, assign_row, D, K);
    else
        GPU_LAUNCH(combine_dy_kernel<Y>, row_grid(A, D), GPU_THREADS, 0)(dy, dout, w, assign_row, D, K);
    GPU_CHECK_LAUNCH();
    GPU_LAUNCH(combine_dw_kernel<Y>, blocks_for(A, DW_ROWS), GPU_THREADS, 0)(dw, dout, y, w, top_w, assign_row, A, D,
                                                                              K);
    GPU_CHECK_LAUNCH();
}
static void combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
                             const float *top_w, const int *assign_row, size_t A, int D, int K) {
    combine_backward_any(dy, dw, dout, y, w, top_w, assign_row, A, D, K);
}
static void combine_backward_packed(uint16_t *dy, float *dw, const float *dout, const uint16_t *y, const float *w,
                                    const float *top_w, const int *assign_row, size_t A, int D, int K) {
    combine_backward_any(dy, dw, dout, y, w, top_w, assign_row, A, D, K);
}

// out (n) += shared (n).
static void add_shared(float *out, const float *shared, size_t n) {
    if (n == 0) return;
    GPU_LAUNCH(add_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(out, shared, n);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const MoeKernels moe_cuda = {
    sort_rows, dense_rows, gather_rows, gather_rows_packed, scatter_add_rows, scatter_add_tokens,
    combine_forward, combine_backward, combine_forward_packed, combine_backward_packed, add_shared,
};
#endif
