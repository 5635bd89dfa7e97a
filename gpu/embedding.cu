// gpu/embedding.cu: the embedding gather, its scatter-add and the one-hot tokens on the GPU
// (kernels/embedding.h), the twin of kernels/cpu/embedding.c. Copies and adds in the CPU's
// order: the CPU's bits.
//
// Launch geometry: the gather, one thread per output element (t, i); the scatter-add, a chain
// per row: the leaf's tokens of one row add onto it in token order (the CPU's order), and
// rows are independent, so a block per (token that starts its row's chain, 256 columns)
// walks the chain's links (the next token of the same row) made by a first kernel, one
// thread per token; a leaf too long for those links (they cost len^2/2 reads of the ids)
// has one thread per column walk all its tokens instead. The one-hot, one thread per token.
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

// The links of a leaf's tokens (k: token t0 + k): next[k], the leaf's next token of the same
// row (-1: none, or another device's row), and later[next[k]] = 1, that token not its row's
// first (later: zeroed before; each token has at most one such predecessor, so no two
// threads write one element).
__global__ static void embedding_links_kernel(int *next, int *later, const int *ids, long t0, long len, int V,
                                              int v0) {
    long k = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= len) return;
    int id = ids[t0 + k], nx = -1;
    if (id >= v0 && id < v0 + V)
        for (long u = k + 1; u < len && nx < 0; u++)
            if (ids[t0 + u] == id) nx = (int)u;
    next[k] = nx;
    if (nx >= 0) later[nx] = 1;
}

// Block (column block, k): if token t0 + k starts its row's chain, each thread adds the
// chain's gradient rows onto its column of the row, in token order.
__global__ static void embedding_chains_kernel(float *dtable, const float *dout, const int *ids, const int *next,
                                               const int *later, long t0, int D, int V, int v0) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long k = blockIdx.y;
    int id = ids[t0 + k];
    if (i >= D || later[k] || id < v0 || id >= v0 + V) return;
    float *row = dtable + (size_t)(id - v0) * D + i, acc = *row;
    for (long u = k; u >= 0; u = next[u]) acc += dout[(size_t)(t0 + u) * D + i];
    *row = acc;
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
// A leaf of up to EMB_LINKS_MAX tokens goes by chains (8 M reads of the ids at most); a longer
// one by columns. (By columns, a thread's walk over 2048 tokens took 0.77 ms a call on an
// H200 and kept 8 of its 132 multiprocessors busy, mixtral-medium's 2048 columns.)
enum { EMB_LINKS_MAX = 4096 };

static void embedding_backward_leaf(float *dtable, const float *dout, const int *ids, long t0, long len,
                                    int D, int V, int v0) {
    if (D <= 0 || len <= 0) return;
    if (len > EMB_LINKS_MAX) {
        GPU_LAUNCH(embedding_backward_leaf_kernel, blocks_for((size_t)D, GPU_THREADS), GPU_THREADS, 0)(
            dtable, dout, ids, t0, len, D, V, v0);
        GPU_CHECK_LAUNCH();
        return;
    }
    int *next, *later;   // (len) each, the stream's scratch
    GPU_CHECK(cudaMallocAsync((void **)&next, sizeof(int) * (size_t)len, gpu_stream()));
    GPU_CHECK(cudaMallocAsync((void **)&later, sizeof(int) * (size_t)len, gpu_stream()));
    GPU_CHECK(cudaMemsetAsync(later, 0, sizeof(int) * (size_t)len, gpu_stream()));
    GPU_LAUNCH(embedding_links_kernel, blocks_for((size_t)len, GPU_THREADS), GPU_THREADS, 0)(
        next, later, ids, t0, len, V, v0);
    GPU_CHECK_LAUNCH();
    dim3 grid(blocks_for((size_t)D, GPU_THREADS), (unsigned)len);
    GPU_LAUNCH(embedding_chains_kernel, grid, GPU_THREADS, 0)(dtable, dout, ids, next, later, t0, D, V, v0);
    GPU_CHECK_LAUNCH();
    GPU_CHECK(cudaFreeAsync(next, gpu_stream()));
    GPU_CHECK(cudaFreeAsync(later, gpu_stream()));
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
