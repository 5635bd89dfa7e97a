// gpu/attention.cu: causal softmax attention on the GPU (kernels/attention.h), the twin of
// kernels/cpu/attention.c's per-row loops (attention_cpu_plain, which defines every sum
// and its order). The calls without a mask whose heads fit shared memory run on the tiles
// of gpu/attn_tiles.cu instead (the same sums in the same order), unless gpu_attention=rows;
// under gpu_attention=tensor_cores the bf16 calls that fit run on gpu/attn_mma.cu's; under
// gpu_attention=cudnn those that cuDNN takes on gpu/attn_cudnn.cu's, the rest as tensor_cores.
//
// Every sum keeps the CPU's order: a score is one in-order dot product; a row's softmax
// merges its keys in key order (the online log-sum-exp merge, kernels/cpu/attention.c:
// merge_keys_row); in the backward a dq row adds its keys in key order and a dk or dv row
// adds the query rows of its kv group in (head, row) order. So, as on the CPU, the flash
// backward is the dot-product backward, and the only differences from the CPU are the
// device's expf (a few ulp in a probability).
//
// Launch geometry. The forward: one thread per query row (b, h, i); where the CPU keeps a
// key block's scores in a scratch array, the thread computes each score a second time
// instead (the same dot product, the same bits), so the kernels need no scratch (rows,
// blocks and Dblk are not used). The backward: two kernels, each recomputing the
// probabilities p_ij and dS_ij it needs: one thread per query row (b, h, i) for dq, one
// thread per key (b, kv head g, j) for dk and dv. GPU_THREADS a block.
#include "gpu/gpu.h"
#include "gpu/attention.h"
#include "gpu/backend.h"

// Which kernels take the calls that fit them (gpu/backend.h: gpu_attention_use).
static int attention_kind = GPU_ATTENTION_KIND_TILES;
extern "C" void gpu_attention_use(int kind) { attention_kind = kind; }

// Does query row i of sequence b see key j (at position k0 + j)? The mask decides if there is one.
__device__ static int visible(const Geom &G, int b, int i, int j) {
    return G.mask ? G.mask[((size_t)b * G.S + i) * (G.q0 + G.S) + G.k0 + j] : G.k0 + j <= G.q0 + i;
}
// The score of row i (q_i) against key j of kv head g, rounded as the scores are.
__device__ static float score(const Geom &G, const float *qi, const float *k, int b, int g, int j) {
    return score_of(G, qi, k + (key_row(G, b, j) * G.Nkv + g) * G.Dqk);
}

// Keys ja .. jb-1 into row i's running state acc (Dv) and st = (m, l): the CPU's merge.
__device__ static void merge_keys_row(float *acc, float *st, const float *qi, const float *k, const float *v,
                                      const Geom &G, int b, int i, int g, int ja, int jb) {
    float m = st[0], l = st[1], bm = ATTN_MASK_VALUE;
    int seen = 0;
    for (int j = ja; j < jb; j++) {
        if (!visible(G, b, i, j)) continue;
        float s = score(G, qi, k, b, g, j);
        if (s > bm) bm = s;
        seen = 1;
    }
    if (!seen) return;
    if (bm > m) {
        float a = expf(m - bm);
        l *= a;
        for (int d = 0; d < G.Dv; d++) acc[d] *= a;
        m = bm;
    }
    for (int j = ja; j < jb; j++) {
        if (!visible(G, b, i, j)) continue;
        float e = expf(score(G, qi, k, b, g, j) - m);
        if (G.rnd.probs) e = bf16_round_dev(e);
        l += e;
        const float *vj = v + (key_row(G, b, j) * G.Nkv + g) * G.Dv;
        for (int d = 0; d < G.Dv; d++) acc[d] += e * vj[d];
    }
    st[0] = m;
    st[1] = l;
}

// o_i = acc / l, with the output's roundings.
__device__ static void finish_row(float *oi, float l, const Geom &G) {
    for (int d = 0; d < G.Dv; d++) {
        float num = G.rnd.probs ? bf16_round_dev(oi[d]) : oi[d];
        oi[d] = G.rnd.out ? bf16_round_dev(num / l) : num / l;
    }
}

// One thread per query row (b, h, i). bkv > 0: flash's key blocks (the row merges the keys
// it sees bkv at a time, in order, from the first key of k); bkv = 0: all its keys in one
// merge (dot product). begin: start from the empty state; end: divide by l. A ring block
// neither begins nor ends.
__global__ static void forward_kernel(float *o, float *stats, const float *q, const float *k, const float *v, Geom G,
                                      int bkv, int begin, int end) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)G.B * G.N * G.S) return;
    int i = (int)(id % G.S), h = (int)(id / G.S % G.N), b = (int)(id / G.S / G.N), g = h / (G.N / G.Nkv);
    size_t row = ((size_t)b * G.S + i) * G.N + h;
    float *oi = o + row * G.Dv, *st = stats + (((size_t)b * G.N + h) * G.S + i) * 2;
    if (begin) {
        for (int d = 0; d < G.Dv; d++) oi[d] = 0.0f;
        st[0] = ATTN_MASK_VALUE;
        st[1] = 0.0f;
    }
    int nj = keys_scanned(G, i), span = bkv > 0 ? bkv : nj;
    for (int j0 = 0; j0 < nj; j0 += span)
        merge_keys_row(oi, st, q + row * G.Dqk, k, v, G, b, i, g, j0, j0 + span < nj ? j0 + span : nj);
    if (end) finish_row(oi, st[1], G);
}

// p_ij and dS_ij = p_ij (dO_i . v_j - D_i) of row (b, h, i) and key j (visible).
__device__ static void prob_and_ds(const Geom &G, const float *q, const float *k, const float *v, const float *dout,
                                   const float *o, const float *stats, int b, int h, int i, int j, float *p,
                                   float *ds) {
    int g = h / (G.N / G.Nkv);
    size_t row = ((size_t)b * G.S + i) * G.N + h;
    const float *st = stats + (((size_t)b * G.N + h) * G.S + i) * 2, *doi = dout + row * G.Dv;
    float e = expf(score(G, q + row * G.Dqk, k, b, g, j) - st[0]);
    if (G.rnd.probs) e = bf16_round_dev(e);
    *p = e / st[1];
    float dp = dot_dev(doi, v + (key_row(G, b, j) * G.Nkv + g) * G.Dv, G.Dv);
    *ds = *p * (dp - dot_dev(doi, o + row * G.Dv, G.Dv));
}

// dq row (b, h, i), i in r0 .. r1-1: zeroed first (zero = 1) or added to (a ring block),
// then dS_ij k_j for its keys in order.
__global__ static void backward_dq_kernel(float *dq, const float *dout, const float *q, const float *k,
                                          const float *v, const float *o, const float *stats, Geom G, int r0, int r1,
                                          int zero) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x, rows = (size_t)(r1 - r0);
    if (id >= (size_t)G.B * G.N * rows) return;
    int i = r0 + (int)(id % rows), h = (int)(id / rows % G.N), b = (int)(id / rows / G.N), g = h / (G.N / G.Nkv);
    float *dqi = dq + (((size_t)b * G.S + i) * G.N + h) * G.Dqk;
    if (zero) for (int d = 0; d < G.Dqk; d++) dqi[d] = 0.0f;
    int nj = keys_scanned(G, i);
    for (int j = 0; j < nj; j++) {
        if (!visible(G, b, i, j)) continue;
        float p, ds;
        prob_and_ds(G, q, k, v, dout, o, stats, b, h, i, j, &p, &ds);
        const float *kj = k + (key_row(G, b, j) * G.Nkv + g) * G.Dqk;
        for (int d = 0; d < G.Dqk; d++) dqi[d] += ds * kj[d];
    }
}

// dk, dv rows of key (b, g, j) += the contributions of the rows r0 .. r1-1 of the query
// heads of kv group g, in (head, row) order.
__global__ static void backward_dkdv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
                                            const float *v, const float *o, const float *stats, Geom G, int r0,
                                            int r1) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)G.B * G.Nkv * G.W) return;
    int j = (int)(id % G.W), g = (int)(id / G.W % G.Nkv), b = (int)(id / G.W / G.Nkv), group = G.N / G.Nkv;
    size_t krow = key_row(G, b, j) * G.Nkv + g;
    float *dkj = dk + krow * G.Dqk, *dvj = dv + krow * G.Dv;
    for (int h = g * group; h < (g + 1) * group; h++)
        for (int i = r0; i < r1; i++) {
            if (j >= keys_scanned(G, i) || !visible(G, b, i, j)) continue;
            float p, ds;
            prob_and_ds(G, q, k, v, dout, o, stats, b, h, i, j, &p, &ds);
            size_t row = ((size_t)b * G.S + i) * G.N + h;
            const float *doi = dout + row * G.Dv, *qi = q + row * G.Dqk;
            for (int d = 0; d < G.Dv; d++) dvj[d] += p * doi[d];
            for (int d = 0; d < G.Dqk; d++) dkj[d] += ds * qi[d];
        }
}

__global__ static void causal_mask_kernel(unsigned char *mask, int B, int S, int q0) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x, W = (size_t)q0 + S;
    if (id >= (size_t)B * S * W) return;
    size_t j = id % W, i = id / W % S;
    mask[id] = j <= q0 + i;
}

__global__ static void ring_begin_kernel(float *stats, size_t rows) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= rows) return;
    stats[2 * x] = ATTN_MASK_VALUE;
    stats[2 * x + 1] = 0.0f;
}

__global__ static void ring_end_kernel(float *o, const float *stats, Geom G) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)G.B * G.N * G.S) return;
    int h = (int)(id % G.N), i = (int)(id / G.N % G.S), b = (int)(id / G.N / G.S);
    finish_row(o + id * G.Dv, stats[(((size_t)b * G.N + h) * G.S + i) * 2 + 1], G);
}

// The LCG is a serial recurrence: one thread (the autotuner's inputs, once per run).
__global__ static void uniform_fill_kernel(float *x, size_t n, uint32_t seed) {
    uint32_t r = seed;
    for (size_t i = 0; i < n; i++) { r = r * 1664525u + 1013904223u; x[i] = (r >> 8) / 8388608.0f - 1.0f; }
}

static Geom geom(int B, int S, int q0, int k0, int N, int Nkv, int Dqk, int Dv, int W, AttnRounding rnd,
                 const unsigned char *mask) {
    Geom G = {B, S, q0, k0, N, Nkv, Dqk, Dv, W, rnd, mask};
    return G;
}
static unsigned grid(size_t n) { return blocks_for(n, GPU_THREADS); }

static void forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int bkv,
                    int begin, int end) {
    size_t rows = (size_t)G.B * G.N * G.S;
    if (rows == 0) return;
    int tc = attention_kind == GPU_ATTENTION_KIND_TENSOR_CORES || attention_kind == GPU_ATTENTION_KIND_CUDNN;
    if (attention_kind == GPU_ATTENTION_KIND_CUDNN && attn_cudnn_forward(o, stats, q, k, v, G, begin, end)) return;
    if (tc && attn_mma_forward(o, stats, q, k, v, G, begin, end)) return;
    if (attention_kind != GPU_ATTENTION_KIND_ROWS && attn_tiles_forward(o, stats, q, k, v, G, bkv, begin, end)) return;
    GPU_LAUNCH(forward_kernel, grid(rows), GPU_THREADS, 0)(o, stats, q, k, v, G, bkv, begin, end);
    GPU_CHECK_LAUNCH();
}

// The backward of query rows r0 .. r1-1 over G.W keys: dq rows zeroed (or added to), dk, dv added to.
static void backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                     const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq) {
    size_t rows = (size_t)G.B * G.N * (r1 - r0), keys = (size_t)G.B * G.Nkv * G.W;
    if (rows == 0) return;
    int tc = attention_kind == GPU_ATTENTION_KIND_TENSOR_CORES || attention_kind == GPU_ATTENTION_KIND_CUDNN;
    if (attention_kind == GPU_ATTENTION_KIND_CUDNN &&
        attn_cudnn_backward(dq, dk, dv, dout, q, k, v, o, stats, G, r0, r1, zero_dq))
        return;
    if (tc && attn_mma_backward(dq, dk, dv, dout, q, k, v, o, stats, G, r0, r1, zero_dq)) return;
    if (attention_kind != GPU_ATTENTION_KIND_ROWS &&
        attn_tiles_backward(dq, dk, dv, dout, q, k, v, o, stats, G, r0, r1, zero_dq))
        return;
    GPU_LAUNCH(backward_dq_kernel, grid(rows), GPU_THREADS, 0)(dq, dout, q, k, v, o, stats, G, r0, r1, zero_dq);
    GPU_CHECK_LAUNCH();
    if (keys == 0) return;
    GPU_LAUNCH(backward_dkdv_kernel, grid(keys), GPU_THREADS, 0)(dk, dv, dout, q, k, v, o, stats, G, r0, r1);
    GPU_CHECK_LAUNCH();
}

// mask (B,S,q0+S) = 1 where key j <= query position q0 + i.
static void causal_mask(unsigned char *mask, int B, int S, int q0) {
    size_t n = (size_t)B * S * (q0 + S);
    if (n == 0) return;
    GPU_LAUNCH(causal_mask_kernel, grid(n), GPU_THREADS, 0)(mask, B, S, q0);
    GPU_CHECK_LAUNCH();
}

// o (B,S,N,Dv), stats (B,N,S,2): the one-pass softmax over all q0 + S keys (rows: unused).
static void dot_forward(float *o, float *stats, float *rows, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd) {
    (void)rows;
    forward(o, stats, q, k, v, geom(B, S, q0, 0, N, Nkv, Dqk, Dv, q0 + S, rnd, mask), 0, 1, 1);
}

// dq rows r0 .. r1-1 written; dk, dv += their share.
static void dot_backward_rows(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                              const float *v, const float *o, const float *stats, const unsigned char *mask, int B,
                              int S, int q0, int r0, int r1, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    backward(dq, dk, dv, dout, q, k, v, o, stats, geom(B, S, q0, 0, N, Nkv, Dqk, Dv, q0 + S, rnd, mask), r0, r1, 1);
}

// As dot_forward, key block by key block (blocks: unused; the query blocks of bq rows do not
// change a row's key blocks).
static void flash_forward(float *o, float *stats, float *blocks, const float *q, const float *k, const float *v,
                          const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd, int bq, int bkv) {
    (void)blocks; (void)bq;
    forward(o, stats, q, k, v, geom(B, S, q0, 0, N, Nkv, Dqk, Dv, q0 + S, rnd, mask), bkv, 1, 1);
}

// The same sums in the same order as dot_backward_rows, whatever the blocks (Dblk: unused).
static void flash_backward_rows(float *dq, float *dk, float *dv, float *Dblk, const float *dout, const float *q,
                                const float *k, const float *v, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                                int Dqk, int Dv, AttnRounding rnd, int bq, int bkv) {
    (void)Dblk; (void)bq; (void)bkv;
    backward(dq, dk, dv, dout, q, k, v, o, stats, geom(B, S, q0, 0, N, Nkv, Dqk, Dv, q0 + S, rnd, mask), r0, r1, 1);
}

// stats (B,N,S,2) = (mask value, 0).
static void ring_begin(float *stats, int B, int S, int N) {
    size_t rows = (size_t)B * N * S;
    if (rows == 0) return;
    GPU_LAUNCH(ring_begin_kernel, grid(rows), GPU_THREADS, 0)(stats, rows);
    GPU_CHECK_LAUNCH();
}

// The block kb, vb at positions k0 .. k0+S-1 merged into the running state, bkv keys at a
// time when bkv > 0 (rows: unused).
static void ring_block_forward(float *o, float *stats, float *rows, const float *q, const float *kb, const float *vb,
                               const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk,
                               int Dv, AttnRounding rnd, int bkv) {
    (void)rows;
    forward(o, stats, q, kb, vb, geom(B, S, q0, k0, N, Nkv, Dqk, Dv, S, rnd, mask), bkv, 0, 0);
}

// o = acc / l.
static void ring_end(float *o, const float *stats, int B, int S, int N, int Dv, AttnRounding rnd) {
    size_t rows = (size_t)B * S * N;
    if (rows == 0) return;
    Geom G = geom(B, S, 0, 0, N, 1, 0, Dv, 0, rnd, NULL);
    GPU_LAUNCH(ring_end_kernel, grid(rows), GPU_THREADS, 0)(o, stats, G);
    GPU_CHECK_LAUNCH();
}

// dq += the block's share; dkb, dvb += this device's queries' contributions.
static void ring_block_backward(float *dq, float *dkb, float *dvb, const float *dout, const float *q,
                                const float *kb, const float *vb, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk,
                                int Dv, AttnRounding rnd) {
    backward(dq, dkb, dvb, dout, q, kb, vb, o, stats, geom(B, S, q0, k0, N, Nkv, Dqk, Dv, S, rnd, mask), 0, S, 0);
}

// x (n) = uniform numbers in [-1, 1) from the LCG started at seed.
static void uniform_fill(float *x, size_t n, uint32_t seed) {
    if (n == 0) return;
    GPU_LAUNCH(uniform_fill_kernel, 1, 1, 0)(x, n, seed);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const AttentionKernels attention_cuda = {causal_mask,         dot_forward, dot_backward_rows,  flash_forward,
                                                    flash_backward_rows, ring_begin,  ring_block_forward, ring_end,
                                                    ring_block_backward, uniform_fill};
#endif
