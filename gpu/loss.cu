// gpu/loss.cu: softmax cross-entropy and z-loss on the GPU (kernels/loss.h), the twin of
// kernels/cpu/loss.c. The forward's reads take the logits as floats or as bf16 bits (the
// 16-bit forms), one template each.
//
// The sums keep the CPU's order: a token's sum of exponentials is added over its columns
// in order by one thread (the block having made the exponentials), the loss leaf over its
// tokens in order (in double) by one thread.
// The row max is the one parallel reduction (a max is exact in any order): one block per
// row, each thread a strided part of the row, then the warps' maxima through shuffles.
// expf and logf are the device's (CUDA: within 2 and 1 ulp; glibc's within 1): an
// exponential, a log-sum-exp and the gradient may differ from the CPU's by a few ulp.
//
// Launch geometry: row max, one block of GPU_THREADS per token; sum of exponentials, one
// block of GPU_THREADS per SUM_ROWS tokens; target logit and lse, one thread per token; the
// loss leaf, one thread in all (len adds); the backward, one thread per column of a block's
// rows (loss_grid); the tile moves, one thread per element.
#include "gpu/gpu.h"
#include "gpu/backend.h"

// A logit as float32, from logits stored as floats or (the 16-bit forms) as bf16 bits.
__device__ static inline float logit_at(const float *z, size_t i) { return z[i]; }
__device__ static inline float logit_at(const uint16_t *z, size_t i) { return bf16_float_dev(z[i]); }

template <class L> __global__ static void row_max_kernel(float *m, const L *logits, int V) {
    const L *z = logits + (size_t)blockIdx.x * V;
    float mx = logit_at(z, 0);
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, logit_at(z, i));
    for (int lanes = WARP_SIZE / 2; lanes > 0; lanes /= 2) mx = fmaxf(mx, warp_shfl_xor(mx, lanes));
    __shared__ float warp_max[GPU_THREADS / WARP_SIZE];
    if (threadIdx.x % WARP_SIZE == 0) warp_max[threadIdx.x / WARP_SIZE] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)blockDim.x / WARP_SIZE; w++) mx = fmaxf(mx, warp_max[w]);
        m[blockIdx.x] = mx;
    }
}

// A block of SUM_ROWS tokens: its threads bring a tile of SUM_ROWS rows x SUM_COLS columns
// into shared memory as exponentials, a warp reading consecutive columns of a row (one
// thread walking its own row read a column of 32 rows at a time, a 32-byte sector for each
// 4 bytes: 245 GB/s on an H200, 4.3 ms a step for mixtral-medium's head); then thread r
// adds row r's tile to its sum in column order, the order of the CPU's loop.
enum { SUM_ROWS = 32, SUM_COLS = 128 };
template <class L>
__global__ static void sum_exp_kernel(float *piece, const L *logits, const float *m, int T, int V, int c0, int Vc) {
    __shared__ float e[SUM_ROWS][SUM_COLS + 1];   // (+1: thread r's reads of row r fall in different banks)
    int t0 = blockIdx.x * SUM_ROWS, rows = T - t0 < SUM_ROWS ? T - t0 : SUM_ROWS;
    float s = 0.0f;
    for (int j0 = 0; j0 < Vc; j0 += SUM_COLS) {
        int cols = Vc - j0 < SUM_COLS ? Vc - j0 : SUM_COLS;
        for (int k = threadIdx.x; k < SUM_ROWS * SUM_COLS; k += blockDim.x) {
            int r = k / SUM_COLS, j = k % SUM_COLS;
            if (r < rows && j < cols) e[r][j] = expf(logit_at(logits, (size_t)(t0 + r) * V + c0 + j0 + j) - m[t0 + r]);
        }
        __syncthreads();
        if ((int)threadIdx.x < rows)
            for (int j = 0; j < cols; j++) s += e[threadIdx.x][j];
        __syncthreads();
    }
    if ((int)threadIdx.x < rows) piece[t0 + threadIdx.x] = s;
}

template <class L>
__global__ static void target_logit_kernel(float *zt, const L *logits, const int *targets, int T, int V, int v0) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int y = targets[t] - v0;
    zt[t] = targets[t] >= 0 && y >= 0 && y < V ? logit_at(logits, (size_t)t * V + y) : 0.0f;
}

__global__ static void lse_kernel(float *lse, const float *m, const float *sum, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T) lse[t] = m[t] + logf(sum[t]);
}

// *sum = the leaf's sum, *count = its tokens (as a double: exact below 2^53).
__global__ static void leaf_sum_kernel(double *sum, const float *lse, const float *zt, const int *targets, long t0,
                                       long len, float zmul) {
    double s = 0.0;
    for (long t = t0; t < t0 + len; t++) {
        if (targets[t] < 0) continue;
        float l = lse[t] - zt[t] + zmul * lse[t] * lse[t];
        s += l;
    }
    *sum = s;
}

// Element (t, c) of scale * dl/dz from its logit z: softmax * (1 + 2*zmul*lse) - onehot, 0 for
// a token without a target.
__device__ static inline float dz_dev(float z, int t, int c, const float *lse, const int *targets, int v0, float zmul,
                                      float scale) {
    if (targets[t] < 0) return 0.0f;
    float coef = 1.0f + 2.0f * zmul * lse[t];   // d(lse + zmul*lse^2)/d lse
    float g = scale * (expf(z - lse[t]) * coef);
    if (c == targets[t] - v0) g -= scale;
    return g;
}

// The backward's grid (loss_grid): x across a row's columns, y down the rows, each block then
// taking rows blockIdx.y, blockIdx.y + gridDim.y, ... (LOSS_GRID_ROWS in y at most: CUDA allows
// 65535; a medium preset's 8192 tokens make 8 rows a block, 125 x 1024 blocks). An element's row
// and column come from the grid, not from a flat index: a division of that index by V (and its
// remainder) is a routine of tens of integer instructions on a GPU, which has no divide
// instruction, for each of those 262 million logits, whose bf16 bits are read and written once.
enum { LOSS_GRID_ROWS = 1024 };
static dim3 loss_grid(int T, int V) {
    return dim3(blocks_for((size_t)V, GPU_THREADS), T < LOSS_GRID_ROWS ? T : LOSS_GRID_ROWS);
}

__global__ static void backward_kernel(float *dz, const float *lse, const int *targets, int T, int V, int v0,
                                       float zmul, float scale) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= V) return;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        size_t k = (size_t)t * V + c;
        dz[k] = dz_dev(dz[k], t, c, lse, targets, v0, zmul, scale);
    }
}

// The same rounded to bf16 bits, from logits stored as floats or as bf16 bits (L); dz may be
// the logits' bits themselves (loss_backward16): each thread reads its element, then writes it.
template <class L>
__global__ static void backward_packed_kernel(uint16_t *dz, const L *logits, const float *lse, const int *targets,
                                              int T, int V, int v0, float zmul, float scale) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= V) return;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        size_t k = (size_t)t * V + c;
        dz[k] = bf16_bits_dev(dz_dev(logit_at(logits, k), t, c, lse, targets, v0, zmul, scale));
    }
}

__global__ static void move_rows_kernel(float *dst, const float *src, long dst_row0, long src_row0, int len, int w) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)len * w) return;
    size_t r = k / w, c = k % w;
    dst[(dst_row0 + r) * w + c] = src[(src_row0 + r) * w + c];
}

__global__ static void gather_targets_kernel(int *dst, const int *src, long t0, int len) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < len) dst[r] = src[t0 + r];
}

// m (T) = the max of each token's V logits (L: float, or uint16_t for the bf16 bits).
template <class L> static void row_max(float *m, const L *logits, int T, int V) {
    if (T <= 0) return;
    GPU_LAUNCH(row_max_kernel<L>, T, GPU_THREADS, 0)(m, logits, V);
    GPU_CHECK_LAUNCH();
}

// piece (T) = sum over columns c0 .. c0+Vc-1 of exp(logits - m), in column order.
template <class L> static void sum_exp(float *piece, const L *logits, const float *m, int T, int V, int c0, int Vc) {
    if (T <= 0) return;
    GPU_LAUNCH(sum_exp_kernel<L>, blocks_for((size_t)T, SUM_ROWS), GPU_THREADS, 0)(piece, logits, m, T, V, c0, Vc);
    GPU_CHECK_LAUNCH();
}

// zt (T) = the target's logit where this device holds it, else 0.
template <class L> static void target_logit(float *zt, const L *logits, const int *targets, int T, int V, int v0) {
    if (T <= 0) return;
    GPU_LAUNCH(target_logit_kernel<L>, blocks_for((size_t)T, GPU_THREADS), GPU_THREADS, 0)(
        zt, logits, targets, T, V, v0);
    GPU_CHECK_LAUNCH();
}

static void loss_row_max(float *m, const float *logits, int T, int V) { row_max(m, logits, T, V); }
static void loss_sum_exp(float *piece, const float *logits, const float *m, int T, int V, int c0, int Vc) {
    sum_exp(piece, logits, m, T, V, c0, Vc);
}
static void loss_target_logit(float *zt, const float *logits, const int *targets, int T, int V, int v0) {
    target_logit(zt, logits, targets, T, V, v0);
}
static void loss_row_max16(float *m, const uint16_t *logits, int T, int V) { row_max(m, logits, T, V); }
static void loss_sum_exp16(float *piece, const uint16_t *logits, const float *m, int T, int V, int c0, int Vc) {
    sum_exp(piece, logits, m, T, V, c0, Vc);
}
static void loss_target_logit16(float *zt, const uint16_t *logits, const int *targets, int T, int V, int v0) {
    target_logit(zt, logits, targets, T, V, v0);
}

// lse (T) = m + log(sum).
static void loss_lse(float *lse, const float *m, const float *sum, int T) {
    if (T <= 0) return;
    GPU_LAUNCH(lse_kernel, blocks_for((size_t)T, GPU_THREADS), GPU_THREADS, 0)(lse, m, sum, T);
    GPU_CHECK_LAUNCH();
}

// *sum (device) = the leaf's loss in token order and double; returns its token count, which
// comes back through a small device buffer taken on the stream: this call waits for it.
static void loss_leaf_sum(double *sum, const float *lse, const float *zt, const int *targets, long t0, long len,
                          float zmul) {
    GPU_LAUNCH(leaf_sum_kernel, 1, 1, 0)(sum, lse, zt, targets, t0, len, zmul);
    GPU_CHECK_LAUNCH();
}

// dz (T,V) = scale * dl/dz, in place over the logits.
static void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                          float scale) {
    if ((size_t)T * V == 0) return;
    GPU_LAUNCH(backward_kernel, loss_grid(T, V), GPU_THREADS, 0)(dz, lse, targets, T, V, v0, zmul, scale);
    GPU_CHECK_LAUNCH();
}

// dz (T,V) = the bits of scale * dl/dz, from logits as floats or as bf16 bits (L).
template <class L>
static void backward_packed(uint16_t *dz, const L *logits, const float *lse, const int *targets, int T, int V, int v0,
                            float zmul, float scale) {
    if ((size_t)T * V == 0) return;
    GPU_LAUNCH(backward_packed_kernel<L>, loss_grid(T, V), GPU_THREADS, 0)(dz, logits, lse, targets, T, V, v0, zmul,
                                                                           scale);
    GPU_CHECK_LAUNCH();
}
static void loss_backward_packed(uint16_t *dz, const float *logits, const float *lse, const int *targets, int T, int V,
                                 int v0, float zmul, float scale) {
    backward_packed(dz, logits, lse, targets, T, V, v0, zmul, scale);
}
static void loss_backward16(uint16_t *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                            float scale) {
    backward_packed(dz, (const uint16_t *)dz, lse, targets, T, V, v0, zmul, scale);   // written over the logits
}

// dst (len,w) = rows t0 .. t0+len-1 of src (T,w).
static void tile_gather_rows(float *dst, const float *src, long t0, int len, int w) {
    if ((size_t)len * w == 0) return;
    GPU_LAUNCH(move_rows_kernel, blocks_for((size_t)len * w, GPU_THREADS), GPU_THREADS, 0)(
        dst, src, 0, t0, len, w);
    GPU_CHECK_LAUNCH();
}

// rows t0 .. t0+len-1 of dst (T,w) = src (len,w).
static void tile_scatter_rows(float *dst, const float *src, long t0, int len, int w) {
    if ((size_t)len * w == 0) return;
    GPU_LAUNCH(move_rows_kernel, blocks_for((size_t)len * w, GPU_THREADS), GPU_THREADS, 0)(
        dst, src, t0, 0, len, w);
    GPU_CHECK_LAUNCH();
}

// dst (len) = src[t0 .. t0+len-1].
static void tile_gather_targets(int *dst, const int *src, long t0, int len) {
    if (len <= 0) return;
    GPU_LAUNCH(gather_targets_kernel, blocks_for((size_t)len, GPU_THREADS), GPU_THREADS, 0)(dst, src, t0, len);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const LossKernels loss_cuda = {loss_row_max,     loss_sum_exp,         loss_target_logit, loss_lse,
                                          loss_leaf_sum,    loss_backward,        loss_backward_packed,
                                          tile_gather_rows, tile_scatter_rows,    tile_gather_targets,
                                          loss_row_max16,   loss_sum_exp16,       loss_target_logit16,
                                          loss_backward16};
#endif
