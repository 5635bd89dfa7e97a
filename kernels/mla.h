// kernels/mla.h: the data movement of DeepSeek's multi-head latent attention
// (docs/model.md#mla): the latent and the shared rotary key cut out of and put back into
// the down-projection's rows, the per-head keys and values assembled from the
// up-projection, the query scale. The layer is model/mla.c; T tokens, N heads, R =
// kv_lora_rank, Dn = qk_nope_head_dim, Dr = qk_rope_head_dim, Dv = v_head_dim.
#ifndef MESHMOE_KERNELS_MLA_H
#define MESHMOE_KERNELS_MLA_H
#include <stddef.h>

typedef struct MlaKernels {
    // x (n) *= s: the query scale (Dn+Dr)^-0.5, and its gradient.
    void (*mla_apply_scale)(float *x, size_t n, float s);
    // dst (T, W) = src (T, W), each row at its own stride: dst + t*dst_stride, src +
    // t*src_stride (a column range of a wider row on either side).
    void (*mla_copy_cols)(float *dst, size_t dst_stride, const float *src, size_t src_stride, int T, int W);
    // k (T,N,Dn+Dr) = [k_nope, k_rope] per head, v (T,N,Dv): from kv (T,N,Dn+Dv) (per head
    // k_nope then v) and the rotated k_rope (Dr) at column R of ckv (T,R+Dr), shared by every head.
    void (*mla_assemble_kv)(float *k, float *v, const float *kv, const float *ckv, int T, int N, int Dn, int Dr,
                            int Dv, int R);
    // dkv (T,N,Dn+Dv) = per head [dk_nope, dv], from dk (T,N,Dn+Dr) and dv (T,N,Dv).
    void (*mla_split_dkv)(float *dkv, const float *dk, const float *dv, int T, int N, int Dn, int Dr, int Dv);
    // piece (T,Dr) += sum over heads h0 .. h1-1, in head order, of dk[:, h, Dn:]: one leaf of
    // the shared k_rope's gradient (the layer adds the leaves in the canonical tree).
    void (*mla_k_rope_grad_leaf)(float *piece, const float *dk, int T, int N, int Dn, int Dr, int h0, int h1);
} MlaKernels;

extern const MlaKernels mla_cpu;   // kernels/cpu/mla.c

#endif
