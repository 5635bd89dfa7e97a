// gpu/norm.cu: RMSNorm on the GPU (kernels/norm.h), the twin of kernels/cpu/norm.c.
//
// The CPU sums a row's squares (and the backward's dot product) in element order, one
// float32 add after another; a parallel reduction would add them in another order and give
// other bits. So here too one thread adds each row's sum in order, and the block's other
// threads then scale the row's elements in parallel: the CPU's bits, at the cost of a
// serial sum of D terms per row (D is the model width: a few thousand adds).
//
// Launch geometry of the forward and backward: one block of NORM_THREADS per token (row). The
// block's threads first make the row's terms (squares; the backward's products) into shared
// memory, each its own elements (four at a time where the row allows), then thread 0 adds them
// in element order (the same roundings as the CPU's loop: products are rounded before they are
// added, --fmad=false), and then each thread takes its elements again for the outputs. A row wider
// than NORM_TERMS_MAX (shared memory's 48 KiB) has thread 0 make the terms as it adds them,
// reading device memory one element after another: the same sum, far slower.
// The serial sum is each row's critical path (D dependent adds), so the blocks are small
// (NORM_THREADS): a multiprocessor then holds more rows at once (its limit is blocks, 32, and
// threads, 2048: 8 rows with blocks of 256, 27 with 64 and a row of 2048 terms in shared memory),
// and their sums run side by side.
// dscale: see rmsnorm_dscale_leaf_kernel.
#include "gpu/gpu.h"
#include "gpu/backend.h"

// (12256: 48 KiB less the 128 bytes of static shared memory the kernels' own variables take,
// GPU_SHARED's alignment, so that a launch never needs the opt-in past 48 KiB.)
enum { NORM_TERMS_MAX = 12256, NORM_THREADS = 64 };

// The shared memory a row's terms take: D floats, or none for a row too wide.
static size_t terms_bytes(int D) { return D <= NORM_TERMS_MAX ? sizeof(float) * (size_t)D : 0; }

// Rows whose every array starts on 16 bytes and whose width is a multiple of 4 are read and
// written four elements at a time (float4), each element's arithmetic as it is alone.
__device__ static inline int aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }
__device__ static inline float4 load4(const float *p) { return *(const float4 *)p; }
__device__ static inline void store4(float *p, float4 v) { *(float4 *)p = v; }

// a[0] + a[1] + ... + a[n-1], one add after another (a: the block's terms, 16-byte aligned),
// four terms a shared-memory load, so that the loads run ahead of the chain of adds.
__device__ static float sum_in_order(const float *a, int n) {
    float s = 0.0f;
    int i = 0;
#pragma unroll 4
    for (; i + 4 <= n; i += 4) {
        float4 v = load4(a + i);
        s += v.x;
        s += v.y;
        s += v.z;
        s += v.w;
    }
    for (; i < n; i++) s += a[i];
    return s;
}

// An output element: (x * r) * scale, in bf16 each product rounded (cast point 3).
__device__ static inline float norm_out(float x, float sc, float r, int bf16) {
    return bf16 ? bf16_round_dev(bf16_round_dev(x * r) * sc) : (x * r) * sc;
}

__global__ static void rmsnorm_forward_kernel(float *out, float *rstd, const float *x, const float *scale,
                                              size_t scale_stride, int D, float eps, int bf16) {
    GPU_SHARED(float, terms);   // (D) the squares, when the row fits
    int t = blockIdx.x, held = D <= NORM_TERMS_MAX;
    const float *xt = x + (size_t)t * D, *sc = scale + (size_t)t * scale_stride;
    float *ot = out + (size_t)t * D;
    int vec = D % 4 == 0 && aligned16(xt) && aligned16(sc) && aligned16(ot), step = vec ? 4 : 1;
    __shared__ float r;
    if (held) {
        for (int i = step * threadIdx.x; i < D; i += step * blockDim.x) {
            if (!vec) {
                terms[i] = xt[i] * xt[i];
                continue;
            }
            float4 v = load4(xt + i);
            store4(terms + i, make_float4(v.x * v.x, v.y * v.y, v.z * v.z, v.w * v.w));
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float ss = 0.0f;   // mean of squares, float32, in element order
        if (held) ss = sum_in_order(terms, D);
        else
            for (int i = 0; i < D; i++) ss += xt[i] * xt[i];
        r = 1.0f / sqrtf(ss / D + eps);
        rstd[t] = r;
    }
    __syncthreads();
    for (int i = step * threadIdx.x; i < D; i += step * blockDim.x) {
        if (!vec) {
            ot[i] = norm_out(xt[i], sc[i], r, bf16);
            continue;
        }
        float4 v = load4(xt + i), s = load4(sc + i);
        store4(ot + i, make_float4(norm_out(v.x, s.x, r, bf16), norm_out(v.y, s.y, r, bf16),
                                   norm_out(v.z, s.z, r, bf16), norm_out(v.w, s.w, r, bf16)));
    }
}

// The backward's g = dy * scale (bf16: rounded), and its term g * n, n = x * r.
__device__ static inline float grad_of(float dy, float sc, int bf16) {
    return bf16 ? bf16_round_dev(dy * sc) : dy * sc;
}
__device__ static inline float dx_term(float dy, float x, float sc, float r, int bf16) {
    return grad_of(dy, sc, bf16) * (x * r);
}
// dx's element: dx + r (g - n mean(g n)).
__device__ static inline float dx_add(float dx, float dy, float x, float sc, float r, float dot, int bf16) {
    return dx + r * (grad_of(dy, sc, bf16) - (x * r) * dot);
}

// dx = r * (g - n * mean(g * n)), n = x * r, g = dy * scale (bf16: g rounded).
__global__ static void rmsnorm_backward_dx_kernel(float *dx, const float *dout, const float *x, const float *scale,
                                                  size_t scale_stride, const float *rstd, int D, int bf16) {
    GPU_SHARED(float, terms);   // (D) g * n, when the row fits
    int t = blockIdx.x, held = D <= NORM_TERMS_MAX;
    const float *xt = x + (size_t)t * D, *dyt = dout + (size_t)t * D, *sc = scale + (size_t)t * scale_stride;
    float *dxt = dx + (size_t)t * D, r = rstd[t];
    int vec = D % 4 == 0 && aligned16(xt) && aligned16(dyt) && aligned16(sc) && aligned16(dxt), step = vec ? 4 : 1;
    __shared__ float dot;
    if (held) {
        for (int i = step * threadIdx.x; i < D; i += step * blockDim.x) {
            if (!vec) {
                terms[i] = dx_term(dyt[i], xt[i], sc[i], r, bf16);
                continue;
            }
            float4 g = load4(dyt + i), v = load4(xt + i), s = load4(sc + i);
            store4(terms + i, make_float4(dx_term(g.x, v.x, s.x, r, bf16), dx_term(g.y, v.y, s.y, r, bf16),
                                          dx_term(g.z, v.z, s.z, r, bf16), dx_term(g.w, v.w, s.w, r, bf16)));
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float s = 0.0f;
        if (held) s = sum_in_order(terms, D);
        else
            for (int i = 0; i < D; i++) s += dx_term(dyt[i], xt[i], sc[i], r, bf16);
        dot = s / D;
    }
    __syncthreads();
    for (int i = step * threadIdx.x; i < D; i += step * blockDim.x) {
        if (!vec) {
            dxt[i] = dx_add(dxt[i], dyt[i], xt[i], sc[i], r, dot, bf16);
            continue;
        }
        float4 a = load4(dxt + i), g = load4(dyt + i), v = load4(xt + i), s = load4(sc + i);
        store4(dxt + i, make_float4(dx_add(a.x, g.x, v.x, s.x, r, dot, bf16),
                                    dx_add(a.y, g.y, v.y, s.y, r, dot, bf16),
                                    dx_add(a.z, g.z, v.z, s.z, r, dot, bf16),
                                    dx_add(a.w, g.w, v.w, s.w, r, dot, bf16)));
    }
}

// dscale: a block per DSCALE_COLS columns, which walks the leaf's tokens a tile of
// DSCALE_TILE at a time: all its threads make the tile's products dout * n into shared
// memory, then the first DSCALE_COLS threads, one per column, add them in token order (the
// CPU's order: the same bits). Each thread loads its share of a tile (DSCALE_LOADS tokens of
// its column) into registers all at once, so that those loads wait out one memory latency
// together rather than one each, and loads the next tile's while the adders add this one's
// (one tile of terms in shared memory, the next in registers). (Loads waited one after another
// took 84 us a call of 2048 tokens x 2048 columns on an H200, whose bytes take 8.)
enum { DSCALE_COLS = 16, DSCALE_TILE = 128, DSCALE_LOADS = DSCALE_TILE / (GPU_THREADS / DSCALE_COLS) };

// One thread's share of the tile at `tile`: for j < DSCALE_LOADS, token tile + r + j * rows of
// column i, into g (dout), v (x) and s (rstd); 0 past the leaf or the columns.
__device__ static inline void dscale_load(float *g, float *v, float *s, const float *dout, const float *x,
                                          const float *rstd, long tile, long end, int r, int rows, int i, int D) {
#pragma unroll
    for (int j = 0; j < DSCALE_LOADS; j++) {
        long t = tile + r + (long)j * rows;
        int in = t < end && i < D;
        g[j] = in ? dout[(size_t)t * D + i] : 0.0f;
        v[j] = in ? x[(size_t)t * D + i] : 0.0f;
        s[j] = in ? rstd[t] : 0.0f;
    }
}

__global__ static void rmsnorm_dscale_leaf_kernel(float *dscale, const float *dout, const float *x,
                                                  const float *rstd, long t0, long len, int D, int bf16) {
    __shared__ float terms[DSCALE_TILE][DSCALE_COLS + 1];   // (+1: the adders' reads fall in distinct banks)
    // (rows: the launch is GPU_THREADS threads a block)
    int c = threadIdx.x % DSCALE_COLS, r = threadIdx.x / DSCALE_COLS, rows = GPU_THREADS / DSCALE_COLS;
    int i = blockIdx.x * DSCALE_COLS + c;
    long end = t0 + len;
    float acc = i < D && r == 0 ? dscale[i] : 0.0f;
    float g[DSCALE_LOADS], v[DSCALE_LOADS], s[DSCALE_LOADS];
    dscale_load(g, v, s, dout, x, rstd, t0, end, r, rows, i, D);
    for (long tile = t0; tile < end; tile += DSCALE_TILE) {
#pragma unroll
        for (int j = 0; j < DSCALE_LOADS; j++) {
            float n = v[j] * s[j];
            terms[r + j * rows][c] = g[j] * (bf16 ? bf16_round_dev(n) : n);
        }
        __syncthreads();
        if (tile + DSCALE_TILE < end) dscale_load(g, v, s, dout, x, rstd, tile + DSCALE_TILE, end, r, rows, i, D);
        if (r == 0 && i < D)
            for (int k = 0; k < DSCALE_TILE && tile + k < end; k++) acc += terms[k][c];
        __syncthreads();
    }
    if (r == 0 && i < D) dscale[i] = acc;
}

__global__ static void broadcast_rows_kernel(float *out, const float *row, int T, int D) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < (size_t)T * D) out[k] = row[k % D];
}

// out (T,D), rstd (T) from x (T,D) and scale + t*scale_stride (D).
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                            int T, int D, float eps, int bf16) {
    if (T <= 0) return;
    GPU_LAUNCH(rmsnorm_forward_kernel, T, NORM_THREADS, terms_bytes(D))(out, rstd, x, scale, scale_stride, D, eps, bf16);
    GPU_CHECK_LAUNCH();
}

// dx (T,D) += the input gradient.
static void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale,
                                size_t scale_stride, const float *rstd, int T, int D, int bf16) {
    if (T <= 0) return;
    GPU_LAUNCH(rmsnorm_backward_dx_kernel, T, NORM_THREADS, terms_bytes(D))(dx, dout, x, scale, scale_stride, rstd, D,
                                                                           bf16);
    GPU_CHECK_LAUNCH();
}

// dscale (D) += sum over tokens t0 .. t0+len-1 of dout * n.
static void rmsnorm_dscale_leaf(float *dscale, const float *dout, const float *x, const float *rstd,
                                long t0, long len, int D, int bf16) {
    if (D <= 0 || len <= 0) return;
    GPU_LAUNCH(rmsnorm_dscale_leaf_kernel, blocks_for((size_t)D, DSCALE_COLS), GPU_THREADS, 0)(
        dscale, dout, x, rstd, t0, len, D, bf16);
    GPU_CHECK_LAUNCH();
}

// out (T,D): row t = row (D).
static void broadcast_rows(float *out, const float *row, int T, int D) {
    size_t n = (size_t)T * D;
    if (n == 0) return;
    GPU_LAUNCH(broadcast_rows_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(out, row, T, D);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const NormKernels norm_cuda = {rmsnorm_forward, rmsnorm_backward_dx, rmsnorm_dscale_leaf, broadcast_rows};
#endif
