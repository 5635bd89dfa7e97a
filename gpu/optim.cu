// gpu/optim.cu: the optimizer's arithmetic on the GPU (kernels/optim.h), the twin of
// kernels/cpu/optim.c.
//
// Element-wise updates (AdamW, SGD, clipping, EMA, Adafactor's scaling and apply, Muon's
// moment and sums) are the CPU's expressions in the CPU's order, IEEE division and square
// root, no fused operations: the CPU's bits. AdamW's and Muon's bias corrections 1 - b^t are
// computed once on the host with the C library's powf, as the CPU does. The sum of squares
// is a sum of integers (kernels/optim.h), so the blocks add them with atomics in any order
// and get the CPU's integer exactly.
// Adafactor's row and column sums are in double and in element order, one thread per sum.
//
// Launch geometry: one thread per element, per row sum or per column sum; squares_add at
// most SQUARES_GRID blocks, each thread a strided run of elements, one set of atomics per
// block into three 64-bit device counters, then one thread folding them into the 128-bit sum.
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include "kernels/bf16.h"   // b1 rounded to bf16 on the host (a bf16 first moment)
#include <math.h>
#include <string.h>

// A tensor's shape passed by value (the header's shape arrays are host arrays): up to 4 dims.
typedef struct { int d[4]; int ndim; } Shape4;

static Shape4 shape4(const int *shape, int ndim) {
    if (ndim < 1 || ndim > 4) {
        fprintf(stderr, "meshmoe: the GPU's Adafactor takes 1 to 4 dims, not %d\n", ndim);
        exit(1);
    }
    Shape4 s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < ndim; i++) s.d[i] = shape[i];
    s.ndim = ndim;
    return s;
}

// g as the update reads it: clipped (kernels/optim.h GradClip) or as it is.
__device__ static inline float clipped(float g, GradClip c) { return c.on ? (g / c.norm) * c.threshold : g; }

// AdamW's constants for one call: the step size, the bias corrections 1 - b^t (on the host,
// with the C library's powf, as the CPU computes them), the decays (b1m: b1 rounded to bf16,
// the decay of a bf16 first moment), epsilon and eps_root, the weight decay; nesterov (optax's
// adamw(nesterov=True)) with c1n = 1 - b1^(t+1), also from the host's powf.
typedef struct { float lr, c1, c2, b1, b1m, b2, eps, eps_root, wd, c1n; int nesterov; GradClip clip; } AdamW;

// One element's update, the CPU's expressions in its order; mu16: the old first moment m
// read from bf16, b1 m a bf16 product (kernels/optim.h), the new m rounded by the caller.
// Nesterov's first moment reads the new m before that rounding, as the CPU's does.
template <bool mu16 = false>
__device__ static inline void adamw_one(float &p, float g, float &m, float &v, const AdamW &a) {
    float gi = clipped(g, a.clip);
    m = mu16 ? (1.0f - a.b1) * gi + bf16_round_dev(a.b1m * m) : (1.0f - a.b1) * gi + a.b1 * m;
    v = (1.0f - a.b2) * (gi * gi) + a.b2 * v;
    float mhat = a.nesterov ? a.b1 * (m / a.c1n) + (1.0f - a.b1) * (gi / a.c1) : m / a.c1, vhat = v / a.c2;
    float u = mhat / (sqrtf(vhat + a.eps_root) + a.eps);   // scale_by_adam
    u = u + a.wd * p;                        // add_decayed_weights
    p = p + (-a.lr) * u;                     // scale_by_learning_rate, apply_updates
}

// The first moment as stored: float32, or bf16 bits (mu_dtype=bfloat16), read exactly and
// stored rounded; one element (float, uint16_t) or four (float4, uint2).
__device__ static inline float moment_load(float m) { return m; }
__device__ static inline float moment_load(uint16_t m) { return bf16_float_dev(m); }
__device__ static inline float4 moment_load(float4 m) { return m; }
__device__ static inline float4 moment_load(uint2 m) { return bf16_float4_dev(m); }
__device__ static inline void moment_store(float &m, float x) { m = x; }
__device__ static inline void moment_store(uint16_t &m, float x) { m = bf16_bits_dev(x); }
__device__ static inline void moment_store(float4 &m, float4 x) { m = x; }
__device__ static inline void moment_store(uint2 &m, float4 x) { m = bf16_bits4_dev(x); }

// p16, unless NULL: the updated p's bf16 bits (the weights' 16-bit copy, kernels/optim.h).
// M: the moment's storage, float or uint16_t.
template <class M>
__global__ static void adamw_kernel(float *p, uint16_t *p16, const float *g, M *m, float *v, size_t n, AdamW a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mi = moment_load(m[i]);
    adamw_one<sizeof(M) == 2>(p[i], g[i], mi, v[i], a);
    moment_store(m[i], mi);
    if (p16) p16[i] = bf16_bits_dev(p[i]);
}

// Four elements a thread, each float array read and written 16 bytes at a time (the copy and
// a bf16 moment 8). M4: the moment's four, float4 or uint2.
template <class M4>
__global__ static void adamw4_kernel(float4 *p, uint2 *p16, const float4 *g, M4 *m, float4 *v, size_t n4, AdamW a) {
    constexpr bool mu16 = sizeof(M4) == 8;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 P = p[i], G = g[i], M = moment_load(m[i]), V = v[i];
    adamw_one<mu16>(P.x, G.x, M.x, V.x, a);
    adamw_one<mu16>(P.y, G.y, M.y, V.y, a);
    adamw_one<mu16>(P.z, G.z, M.z, V.z, a);
    adamw_one<mu16>(P.w, G.w, M.w, V.w, a);
    p[i] = P;
    moment_store(m[i], M);
    v[i] = V;
    if (p16) p16[i] = bf16_bits4_dev(P);
}

__global__ static void sgd_kernel(float *p, const float *g, size_t n, float lr, GradClip clip) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] + (-lr) * clipped(g[i], clip);
}

__global__ static void clip_kernel(float *g, size_t n, float norm, float threshold) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = (g[i] / norm) * threshold;   // optax's order of operations
}

__global__ static void ema_kernel(float *ema, const float *p, size_t n, float d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ema[i] = d * ema[i] + (1.0f - d) * p[i];
}

// One element's square into a thread's hi, mid and low parts, or its flag, as
// kernels/cpu/optim.c:squares_add splits it.
__device__ static inline void add_square(float v, unsigned long long *h, unsigned long long *mid,
                                         unsigned long long *low, int *bad) {
    double sq = (double)v * v * SQUARES_SCALE;   // exact (a power-of-two scale)
    if (!(sq < 0x1p100)) { *bad = 1; return; }   // non-finite or absurdly large
    unsigned long long hk = (unsigned long long)(sq * 0x1p-64);
    unsigned long long r = (unsigned long long)(sq - (double)hk * 0x1p64);
    *h += hk;
    *mid += r >> 32;
    *low += r & 0xffffffffull;
}
__device__ static inline void add_squares4(float4 v, unsigned long long *h, unsigned long long *mid,
                                           unsigned long long *low, int *bad) {
    add_square(v.x, h, mid, low, bad);
    add_square(v.y, h, mid, low, bad);
    add_square(v.z, h, mid, low, bad);
    add_square(v.w, h, mid, low, bad);
}

// parts (4) += hi, mid, low and the flag of x (n). Each thread adds the parts of its elements
// (a grid-strided run, four elements a load where x is 16-byte aligned, two loads in flight:
// with one element a load the kernel read 2.0 TB/s on an H200, with one quad 2.6), the block
// adds its threads' parts in shared memory, and one thread adds the block's into parts: one set of atomics per block, not one per element
// (a whole gradient, billions of elements, through three counters). Integers, so the total
// is the same in any grouping.
__global__ static void squares_kernel(unsigned long long *parts, const float *x, size_t n) {
    __shared__ unsigned long long part[3][GPU_THREADS];
    __shared__ int flag[GPU_THREADS];
    unsigned long long h = 0, mid = 0, low = 0;
    int bad = 0;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    size_t quads = quads_of(n, (uintptr_t)x), k = first;
    for (; k + stride < quads; k += 2 * stride) {   // two loads in flight before the adds
        float4 v = ((const float4 *)x)[k], u = ((const float4 *)x)[k + stride];
        add_squares4(v, &h, &mid, &low, &bad);
        add_squares4(u, &h, &mid, &low, &bad);
    }
    if (k < quads) add_squares4(((const float4 *)x)[k], &h, &mid, &low, &bad);
    for (size_t i = 4 * quads + first; i < n; i += stride) add_square(x[i], &h, &mid, &low, &bad);
    int t = threadIdx.x;
    part[0][t] = h; part[1][t] = mid; part[2][t] = low; flag[t] = bad;
    __syncthreads();
    for (int half = GPU_THREADS / 2; half > 0; half /= 2) {   // blockDim.x == GPU_THREADS
        if (t < half) {
            for (int j = 0; j < 3; j++) part[j][t] += part[j][t + half];
            flag[t] |= flag[t + half];
        }
        __syncthreads();
    }
    if (t == 0) {
        for (int j = 0; j < 3; j++) atomicAdd(&parts[j], part[j][0]);
        if (flag[0]) atomicOr(&parts[3], 1ull);
    }
}

// Element k's leading index, row and column (kernels/cpu/optim.c:element_coords).
__device__ static void element_coords(size_t k, Shape4 s, int drow, int dcol, size_t *lead, size_t *r, size_t *col) {
    size_t rest = k, coord[4];
    for (int d = s.ndim - 1; d >= 0; d--) { coord[d] = rest % (size_t)s.d[d]; rest /= (size_t)s.d[d]; }
    size_t l = 0;
    for (int d = 0; d < s.ndim; d++)
        if (d != drow && d != dcol) l = l * (size_t)s.d[d] + coord[d];
    *lead = l; *r = coord[drow]; *col = coord[dcol];
}

// The element at (lead l, row r, column c): the inverse of element_coords.
__device__ static size_t element_at(Shape4 s, int drow, int dcol, size_t l, size_t r, size_t c) {
    size_t coord[4];
    for (int d = s.ndim - 1; d >= 0; d--)
        if (d == drow) coord[d] = r;
        else if (d == dcol) coord[d] = c;
        else { coord[d] = l % (size_t)s.d[d]; l /= (size_t)s.d[d]; }
    size_t k = 0;
    for (int d = 0; d < s.ndim; d++) k = k * (size_t)s.d[d] + coord[d];
    return k;
}

// One thread per sum: rows j < L*R sum over their columns, then columns over their rows,
// each in ascending element order (the CPU's order of adds into that sum).
__global__ static void factored_sums_kernel(double *rs, double *cs, const float *g, Shape4 s, int drow, int dcol,
                                            size_t L, size_t R, size_t C, float eps) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= L * R + L * C) return;
    double acc = 0.0;
    if (j < L * R)
        for (size_t c = 0; c < C; c++) { float x = g[element_at(s, drow, dcol, j / R, j % R, c)]; acc += x * x + eps; }
    else
        for (size_t r = 0; r < R; r++) {
            size_t jc = j - L * R;
            float x = g[element_at(s, drow, dcol, jc / C, r, jc % C)];
            acc += x * x + eps;
        }
    if (j < L * R) rs[j] = acc; else cs[j - L * R] = acc;
}

__global__ static void factored_moments_kernel(float *vrow, float *vcol, const double *rs, const double *cs, size_t L,
                                               size_t R, size_t C, float decay) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < L * R) vrow[j] = decay * vrow[j] + (1.0f - decay) * (float)(rs[j] / (double)C);
    else if (j < L * R + L * C) {
        size_t jc = j - L * R;
        vcol[jc] = decay * vcol[jc] + (1.0f - decay) * (float)(cs[jc] / (double)R);
    }
}

// One thread per leading index l: its row mean (double, in order), then its R row factors.
__global__ static void row_factors_kernel(float *f, const float *vrow, size_t L, size_t R) {
    size_t l = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= L) return;
    double s = 0.0;
    for (size_t r = 0; r < R; r++) s += vrow[l * R + r];
    float mean = (float)(s / (double)R);
    for (size_t r = 0; r < R; r++) f[l * R + r] = 1.0f / sqrtf(vrow[l * R + r] / mean);
}

__global__ static void col_factors_kernel(float *f, const float *vcol, size_t n) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n) f[j] = 1.0f / sqrtf(vcol[j]);
}

__global__ static void scale_factored_kernel(float *g, const float *f, size_t k0, size_t n, Shape4 s, int drow,
                                             int dcol, size_t L, size_t R) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    size_t l, r, col;
    element_coords(k0 + j, s, drow, dcol, &l, &r, &col);
    g[j] = g[j] * f[l * R + r] * f[L * R + l * (size_t)s.d[dcol] + col];
}

__global__ static void scale_full_kernel(float *g, float *v, size_t n, float decay, float eps) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float vj = decay * v[j] + (1.0f - decay) * (g[j] * g[j] + eps);
    v[j] = vj;
    g[j] = g[j] * (1.0f / sqrtf(vj));
}

__global__ static void adafactor_apply_kernel(float *p, const float *g, size_t n, float clip, float lr, float ps) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float u = g[j] / clip;   // clip_by_block_rms
    u = u * lr;              // scale_by_learning_rate
    u = u * ps;              // scale_by_param_block_rms
    p[j] = p[j] - u;         // scale(-1), apply_updates
}

// Muon's moment on element i (kernels/cpu/optim.c:muon_element): mu = (1 - beta) g + beta mu,
// mu_hat = beta mu / c1n + (1 - beta) g / c1 with c1 = 1 - beta^t, c1n = 1 - beta^(t+1).
// mu16, unless NULL (mu is then NULL): the momentum as bf16 bits, beta mu a bf16 product with
// betam (beta rounded to bf16), stored rounded, as the CPU's muon_m16.
__global__ static void muon_moment_kernel(float *mu, uint16_t *mu16, float *mu_hat, const float *g, size_t n,
                                          float beta, float betam, float c1, float c1n, GradClip clip) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = clipped(g[i], clip);
    float decayed = mu16 ? bf16_round_dev(betam * bf16_float_dev(mu16[i])) : beta * mu[i];
    float m = (1.0f - beta) * gi + decayed;
    if (mu16) mu16[i] = bf16_bits_dev(m);
    else mu[i] = m;
    mu_hat[i] = beta * (m / c1n) + (1.0f - beta) * (gi / c1);
}

__global__ static void muon_divide_kernel(float *x, size_t n, float d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] / d;
}

// out = a x + y, or a x where y is NULL; out may be y (each thread reads its y before writing).
__global__ static void muon_axpy_kernel(float *out, float a, const float *x, const float *y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = y ? a * x[i] + y[i] : a * x[i];
}

__global__ static void muon_apply_kernel(float *p, const float *o, size_t n, float scale, float wd, float lr) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float u = scale * o[i];   // scale_by_shape
    u = u + wd * p[i];        // add_decayed_weights
    p[i] = p[i] + u * (-lr);  // scale_by_learning_rate, apply_updates
}

// The whole quads four at a time when the float arrays are 16-byte aligned (a device's shard:
// the buffers' starts) and the 16-bit ones 8-byte aligned, the last 0-3 elements (or all)
// one at a time. M, M4: the moment's storage (float, float4 or uint16_t, uint2).
template <class M, class M4>
static void adamw_launch(float *p, uint16_t *p16, const float *g, M *m, float *v, size_t n, const AdamW &a) {
    uintptr_t at = (uintptr_t)p | (uintptr_t)g | (uintptr_t)v | ((uintptr_t)p16 % 8 != 0) |
                   (sizeof(M) == 2 ? (uintptr_t)m % 8 != 0 : (uintptr_t)m);
    size_t quads = quads_of(n, at), done = 4 * quads;
    if (quads) {
        GPU_LAUNCH(adamw4_kernel<M4>, blocks_for(quads, GPU_THREADS), GPU_THREADS, 0)(
            (float4 *)p, (uint2 *)p16, (const float4 *)g, (M4 *)m, (float4 *)v, quads, a);
        GPU_CHECK_LAUNCH();
    }
    if (done < n) {
        GPU_LAUNCH(adamw_kernel<M>, blocks_for(n - done, GPU_THREADS), GPU_THREADS, 0)(
            p + done, p16 ? p16 + done : NULL, g + done, m + done, v + done, n - done, a);
        GPU_CHECK_LAUNCH();
    }
}

// p, m, v (n) updated by AdamW at 1-based step t from g (n), clipped on the way; m16 in
// place of m: the first moment as bf16 bits. p16 (n), unless NULL, the updated p's bf16 bits.
static void adamw_update(float *p, uint16_t *p16, const float *g, float *m, uint16_t *m16, float *v, size_t n,
                         AdamWParams h, GradClip clip) {
    if (n == 0) return;
    float c1 = h.uncorrected ? 1.0f : 1.0f - powf(h.b1, (float)h.t);   // (as the CPU's, kernels/cpu/optim.c)
    float c2 = h.uncorrected ? 1.0f : 1.0f - powf(h.b2, (float)h.t);
    AdamW a = {h.lr, c1, c2, h.b1, bf16_round(h.b1), h.b2, h.eps, h.eps_root, h.weight_decay,
               1.0f - powf(h.b1, (float)(h.t + 1)), h.nesterov, clip};
    if (m16) adamw_launch<uint16_t, uint2>(p, p16, g, m16, v, n, a);
    else adamw_launch<float, float4>(p, p16, g, m, v, n, a);
}

// p (n) += -lr * g (n), g clipped on the way.
static void sgd_update(float *p, const float *g, size_t n, float lr, GradClip clip) {
    if (n == 0) return;
    GPU_LAUNCH(sgd_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(p, g, n, lr, clip);
    GPU_CHECK_LAUNCH();
}

// g (n) = g / norm * threshold.
static void clip_scale(float *g, size_t n, float norm, float threshold) {
    if (n == 0) return;
    GPU_LAUNCH(clip_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(g, n, norm, threshold);
    GPU_CHECK_LAUNCH();
}

// ema (n) = decay * ema + (1 - decay) * p (n).
static void ema_update(float *ema, const float *p, size_t n, float decay) {
    if (n == 0) return;
    GPU_LAUNCH(ema_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(ema, p, n, decay);
    GPU_CHECK_LAUNCH();
}

// *sum += the parts' value, *bad |= their flag: one thread, after squares_kernel.
__global__ static void squares_fold_kernel(fixed128 *sum, int *bad, const unsigned long long *parts) {
    *sum += (fixed128)(((unsigned __int128)parts[0] << 64) + ((unsigned __int128)parts[1] << 32) + parts[2]);
    if (parts[3]) *bad = 1;
}

// The most blocks of squares_kernel: enough to fill an H100's 132 SMs several times over,
// few enough that their atomics are a negligible part of the kernel.
enum { SQUARES_GRID = 1024 };

// *sum, *bad (device) += the squares of x (n) in fixed point, with no wait for the stream. In
// blocks of 2^27 elements, as on the CPU, so that no 64-bit part can overflow
// (kernels/cpu/optim.c); each block's parts are folded into *sum on the device.
static void squares_add(fixed128 *sum, int *bad, const float *x, size_t n) {
    const size_t BLOCK = (size_t)1 << 27;
    unsigned long long *parts;
    GPU_CHECK(cudaMallocAsync(&parts, 4 * sizeof *parts, gpu_stream()));
    for (size_t k0 = 0; k0 < n; k0 += BLOCK) {
        size_t len = n - k0 < BLOCK ? n - k0 : BLOCK;
        GPU_CHECK(cudaMemsetAsync(parts, 0, 4 * sizeof *parts, gpu_stream()));
        unsigned grid = blocks_for(len, GPU_THREADS);
        if (grid > (unsigned)SQUARES_GRID) grid = SQUARES_GRID;
        GPU_LAUNCH(squares_kernel, grid, GPU_THREADS, 0)(parts, x + k0, len);
        GPU_CHECK_LAUNCH();
        GPU_LAUNCH(squares_fold_kernel, 1, 1, 0)(sum, bad, parts);
        GPU_CHECK_LAUNCH();
    }
    GPU_CHECK(cudaFreeAsync(parts, gpu_stream()));
}

// The factored tensor's second moment: vrow (L,R), vcol (L,C) from g; rs (L*R) and cs (L*C)
// the sums (device scratch, written here).
static void adafactor_factored_moments(float *vrow, float *vcol, double *rs, double *cs, const float *g,
                                       const int *shape, int ndim, int drow, int dcol, float decay, float eps) {
    Shape4 s = shape4(shape, ndim);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    size_t R = (size_t)shape[drow], C = (size_t)shape[dcol], L = n / (R * C), sums = L * R + L * C;
    GPU_LAUNCH(factored_sums_kernel, blocks_for(sums, GPU_THREADS), GPU_THREADS, 0)(rs, cs, g, s, drow, dcol, L,
                                                                                          R, C, eps);
    GPU_CHECK_LAUNCH();
    GPU_LAUNCH(factored_moments_kernel, blocks_for(sums, GPU_THREADS), GPU_THREADS, 0)(vrow, vcol, rs, cs, L, R,
                                                                                             C, decay);
    GPU_CHECK_LAUNCH();
}

// f (L*R + L*C): the row factors, then the column factors.
static void adafactor_factors(float *f, const float *vrow, const float *vcol, size_t L, size_t R, size_t C) {
    if (L == 0) return;
    GPU_LAUNCH(row_factors_kernel, blocks_for(L, GPU_THREADS), GPU_THREADS, 0)(f, vrow, L, R);
    GPU_CHECK_LAUNCH();
    GPU_LAUNCH(col_factors_kernel, blocks_for(L * C, GPU_THREADS), GPU_THREADS, 0)(f + L * R, vcol, L * C);
    GPU_CHECK_LAUNCH();
}

// g (n) *= its element's row and column factors; g[j] is element k0 + j.
static void adafactor_scale_factored(float *g, const float *f, size_t k0, size_t n, const int *shape, int ndim,
                                     int drow, int dcol) {
    if (n == 0) return;
    Shape4 s = shape4(shape, ndim);
    size_t size = 1;
    for (int d = 0; d < ndim; d++) size *= (size_t)shape[d];
    size_t R = (size_t)shape[drow], C = (size_t)shape[dcol], L = size / (R * C);
    GPU_LAUNCH(scale_factored_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(g, f, k0, n, s, drow, dcol, L,
                                                                                        R);
    GPU_CHECK_LAUNCH();
}

// v (n) = decay * v + (1-decay) * (g^2 + eps); g (n) /= sqrt(v).
static void adafactor_scale_full(float *g, float *v, size_t n, float decay, float eps) {
    if (n == 0) return;
    GPU_LAUNCH(scale_full_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(g, v, n, decay, eps);
    GPU_CHECK_LAUNCH();
}

// p (n) -= g / clip * lr * param_scale.
static void adafactor_apply(float *p, const float *g, size_t n, float clip, float lr, float param_scale) {
    if (n == 0) return;
    GPU_LAUNCH(adafactor_apply_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(p, g, n, clip, lr,
                                                                                         param_scale);
    GPU_CHECK_LAUNCH();
}

// Muon's momentum at update t >= 1: mu (or mu16) (n) updated from g (n), clipped on the way;
// mu_hat (n) its Nesterov moment. The bias corrections on the host with powf, as the CPU's.
static void muon_moment(float *mu, uint16_t *mu16, float *mu_hat, const float *g, size_t n, float beta, int t,
                        GradClip clip) {
    if (n == 0) return;
    float c1 = 1.0f - powf(beta, (float)t), c1n = 1.0f - powf(beta, (float)(t + 1)), betam = bf16_round(beta);
    GPU_LAUNCH(muon_moment_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(mu, mu16, mu_hat, g, n, beta, betam,
                                                                                     c1, c1n, clip);
    GPU_CHECK_LAUNCH();
}

// x (n) = x / d.
static void muon_divide(float *x, size_t n, float d) {
    if (n == 0) return;
    GPU_LAUNCH(muon_divide_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(x, n, d);
    GPU_CHECK_LAUNCH();
}

// out (n) = a * x + y, or a * x where y is NULL; out may be y.
static void muon_axpy(float *out, float a, const float *x, const float *y, size_t n) {
    if (n == 0) return;
    GPU_LAUNCH(muon_axpy_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(out, a, x, y, n);
    GPU_CHECK_LAUNCH();
}

// p (n) += -lr * (scale * o + weight_decay * p), in optax's order.
static void muon_apply(float *p, const float *o, size_t n, float scale, float weight_decay, float lr) {
    if (n == 0) return;
    GPU_LAUNCH(muon_apply_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(p, o, n, scale, weight_decay, lr);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const OptimKernels optim_cuda = {adamw_update, sgd_update, clip_scale, ema_update, squares_add,
                                            adafactor_factored_moments, adafactor_factors, adafactor_scale_factored,
                                            adafactor_scale_full, adafactor_apply, muon_moment, muon_divide,
                                            muon_axpy, muon_apply};
#endif
