// gpu/embedding.cu: the embedding gather, its scatter-add and the one-hot tokens on the GPU
// (kernels/embedding.h), the twin of kernels/cpu/embedding.c. Copies and adds in the CPU's
// order: the CPU's bits.
//
// Launch geometry: the gather, one thread per output element (t, i); the scatter-add, one
// thread per column i, which walks the leaf's tokens in order (two tokens with the same id
// add into the same row, so the token order is kept by keeping each column in one thread);
// the one-hot, one thread per token.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__global__ static void embedding_forward_kernel(float *out, const int *ids, const float *table, int T, int D, int V,
                                                int v0) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)T * D) return;
    size_t t = k / D, i = k % D;
    int row = ids[t] - v0;
    out[k] = row >= 0 && row < V ? table[(size_t)row * D + i] : 0.0f;
}

// One thread per column, walking the leaf's tokens in order EMB_RUN at a time. A run whose
// rows (on this device) are distinct reads all their gradient rows first and then writes
// them, each element added to once, as in order; a run with a repeated row adds one token
// at a time. (One token at a time throughout, each read of dtable waited for the write
// before it: 0.87 ms a call on an H200, about 0.4 us a token.)
enum { EMB_RUN = 8 };
__global__ static void embedding_backward_leaf_kernel(float *dtable, const float *dout, const int *ids, long t0,
                                                      long len, int D, int V, int v0) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    for (long t = t0; t < t0 + len; t += EMB_RUN) {
        int row[EMB_RUN], distinct = 1;   // row k: token t+k's row here, or -1 (past the leaf, or another device's)
#pragma unroll
        for (int k = 0; k < EMB_RUN; k++) {
            int id = t + k < t0 + len ? ids[t + k] : v0 - 1;
            row[k] = id >= v0 && id < v0 + V ? id - v0 : -1;
#pragma unroll
            for (int j = 0; j < k; j++) distinct &= row[k] < 0 || row[k] != row[j];
        }
        if (distinct) {
            float cur[EMB_RUN], add[EMB_RUN];
#pragma unroll
            for (int k = 0; k < EMB_RUN; k++)
                if (row[k] >= 0) {
                    cur[k] = dtable[(size_t)row[k] * D + i];
                    add[k] = dout[(size_t)(t + k) * D + i];
                }
#pragma unroll
            for (int k = 0; k < EMB_RUN; k++)
                if (row[k] >= 0) dtable[(size_t)row[k] * D + i] = cur[k] + add[k];
        } else {
            for (int k = 0; k < EMB_RUN; k++)
                if (row[k] >= 0) dtable[(size_t)row[k] * D + i] += dout[(size_t)(t + k) * D + i];
        }
    }
}

__global__ static void embedding_onehot_kernel(float *onehot, const int *ids, int T, int V, int v0) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T && ids[t] >= v0 && ids[t] < v0 + V) onehot[(size_t)t * V + (ids[t] - v0)] = 1.0f;
}

// out (T,D) = table (V,D) [ids (T) - v0], 0 for the ids another device holds.
static void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    size_t n = (size_t)T * D;
    if (n == 0) return;
    GPU_LAUNCH(embedding_forward_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(
        out, ids, table, T, D, V, v0);
    GPU_CHECK_LAUNCH();
}

// dtable (V,D) += dout (t,D) by ids (t), tokens t0 .. t0+len-1 in order.
static void embedding_backward_leaf(float *dtable, const float *dout, const int *ids, long t0, long len,
                                    int D, int V, int v0) {
    if (D <= 0 || len <= 0) return;
    GPU_LAUNCH(embedding_backward_leaf_kernel, blocks_for((size_t)D, GPU_THREADS), GPU_THREADS, 0)(
        dtable, dout, ids, t0, len, D, V, v0);
    GPU_CHECK_LAUNCH();
}

// onehot (T,V), zeroed by the caller: 1 at (t, ids[t] - v0).
static void embedding_onehot(float *onehot, const int *ids, int T, int V, int v0) {
    if (T <= 0) return;
    GPU_LAUNCH(embedding_onehot_kernel, blocks_for((size_t)T, GPU_THREADS), GPU_THREADS, 0)(
        onehot, ids, T, V, v0);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const EmbeddingKernels embedding_cuda = {embedding_forward, embedding_backward_leaf, embedding_onehot};
#endif
