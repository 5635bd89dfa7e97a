// gpu/attention.h: what the GPU's two sets of attention kernels share: the per-row kernels
// (gpu/attention.cu, the twins of kernels/cpu/attention.c's per-row loops, which define every
// sum and its order) and the tiles (gpu/attn_tiles.cu, the same sums on tiles in shared
// memory): the shapes of a call and the arithmetic of one score.
#ifndef MESHMOE_GPU_ATTENTION_H
#define MESHMOE_GPU_ATTENTION_H
#include "gpu/gpu.h"
#include "kernels/attention.h"

// The shapes every attention kernel shares (kernels/attention.h), passed by value.
typedef struct {
    int B, S, q0, k0, N, Nkv, Dqk, Dv, W;   // W: the keys (q0 + S, or S for a ring block)
    AttnRounding rnd;
    const unsigned char *mask;
} Geom;

__host__ __device__ static inline int imin(int a, int b) { return a < b ? a : b; }

// One in-order sum of rounded products (the build keeps multiplies and adds apart).
__device__ static inline float dot_dev(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}
// Key j of sequence b: its row in k (P,B,S,Nkv,.) or v.
__device__ static inline size_t key_row(const Geom &G, int b, int j) {
    return ((size_t)(j / G.S) * G.B + b) * G.S + j % G.S;
}
// How many keys row i scans: up to its own position, or all of them when a mask decides.
// Without a mask these are exactly the keys row i sees: j < keys_scanned(G, i).
__host__ __device__ static inline int keys_scanned(const Geom &G, int i) {
    if (G.mask) return G.W;
    int n = G.q0 + i - G.k0 + 1;
    return n < 0 ? 0 : n > G.W ? G.W : n;
}
// The score q_i . k_j, rounded as the scores are.
__device__ static inline float score_of(const Geom &G, const float *qi, const float *kj) {
    float s = dot_dev(qi, kj, G.Dqk);
    return G.rnd.scores ? bf16_round_dev(s) : s;
}

// The tiles (gpu/attn_tiles.cu): each runs the call if it can (no mask, heads narrow enough
// for shared memory) and returns 1, else returns 0 and the per-row kernels run it (under
// gpu_attention=rows they are not asked).
// forward: bkv > 0 merges key blocks of bkv keys (flash), bkv = 0 all keys at once (dot
// product, ring block); begin, end as gpu/attention.cu's forward. backward: dq rows r0 .. r1-1
// written (zero_dq) or added to, dk and dv added to.
int attn_tiles_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int bkv,
                       int begin, int end);
int attn_tiles_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq);
// The same calls with the products on tensor cores (gpu/attn_mma.cu, gpu_attention=tensor_cores):
// bf16 calls without a mask whose heads are multiples of 16 up to 256 wide; they merge the keys
// 64 at a time whatever the flash blocks.
int attn_mma_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int begin,
                     int end);
int attn_mma_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq);
// The same calls by cuDNN's fused flash attention (gpu/attn_cudnn.cu, gpu_attention=cudnn): whole
// bf16 causal calls without a mask, q0 = 0 (the backward of all rows at once), heads multiples
// of 8 up to 256 wide, in shapes cuDNN accepts; the forward's stats (m, l) are (LSE, 1).
int attn_cudnn_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int begin,
                       int end);
int attn_cudnn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq);
#endif
