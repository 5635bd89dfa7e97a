// kernels/dry.c: the planner's backend (dry_run=true). Every kernel returns at once: the
// layers still allocate every buffer, so the tagged allocator counts exactly what a real
// step holds, and nothing is computed. Same names and argument order as the CPU kernels;
// the arguments are unused by design (this file builds with -Wno-unused-parameter).
#include "kernels/kernels.h"
#include <string.h>

// The planner's small buffers are real memory (sharding/memory.h), so what a dry kernel
// wrote there (a balanced routing's counts) reads back as on the CPU.
static void to_host(void *host, const void *src, size_t bytes) { memcpy(host, src, bytes); }

// norm
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                            int T, int D, float eps, int bf16) {}
static void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale,
                                size_t scale_stride, const float *rstd, int T, int D, int bf16) {}
static void rmsnorm_dscale_leaf(float *dscale, const float *dout, const float *x, const float *rstd,
                                long t0, long len, int D, int bf16) {}
static void broadcast_rows(float *out, const float *row, int T, int D) {}
static const NormKernels norm_dry = {rmsnorm_forward, rmsnorm_backward_dx, rmsnorm_dscale_leaf, broadcast_rows};

// attention
static void causal_mask(unsigned char *mask, int B, int S, int q0) {}
static void dot_forward(float *o, float *stats, float *rows, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd) {}
static void dot_backward_rows(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *o, const float *stats,
                              const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                              int Dqk, int Dv, AttnRounding rnd) {}
static void flash_forward(float *o, float *stats, float *blocks, const float *q, const float *k, const float *v,
                          const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd, int bq, int bkv) {}
static void flash_backward_rows(float *dq, float *dk, float *dv, float *Dblk, const float *dout, const float *q,
                                const float *k, const float *v, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                                int Dqk, int Dv, AttnRounding rnd, int bq, int bkv) {}
static void ring_begin(float *stats, int B, int S, int N) {}
static void ring_block_forward(float *o, float *stats, float *rows, const float *q, const float *kb,
                               const float *vb, const unsigned char *mask, int B, int S, int q0, int k0, int N,
                               int Nkv, int Dqk, int Dv, AttnRounding rnd) {}
static void ring_end(float *o, const float *stats, int B, int S, int N, int Dv, AttnRounding rnd) {}
static void ring_block_backward(float *dq, float *dkb, float *dvb, const float *dout, const float *q,
                                const float *kb, const float *vb, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk,
                                int Dv, AttnRounding rnd) {}
static void uniform_fill(float *x, size_t n, uint32_t seed) {}
static const AttentionKernels attention_dry = {causal_mask, dot_forward, dot_backward_rows, flash_forward,
                                               flash_backward_rows, ring_begin, ring_block_forward, ring_end,
                                               ring_block_backward, uniform_fill};

// mla
static void mla_apply_scale(float *x, size_t n, float s) {}
static void mla_copy_cols(float *dst, size_t dst_stride, const float *src, size_t src_stride, int T, int W) {}
static void mla_assemble_kv(float *k, float *v, const float *kv, const float *ckv, int T, int N, int Dn, int Dr,
                            int Dv, int R) {}
static void mla_split_dkv(float *dkv, const float *dk, const float *dv, int T, int N, int Dn, int Dr, int Dv) {}
static void mla_k_rope_grad_leaf(float *piece, const float *dk, int T, int N, int Dn, int Dr, int h0, int h1) {}
static const MlaKernels mla_dry = {mla_apply_scale, mla_copy_cols, mla_assemble_kv, mla_split_dkv,
                                   mla_k_rope_grad_leaf};




const Backend backend_dry = {
    .name = "dry",
    .computes = 0,
    .to_host = to_host,

    .norm = &norm_dry,
    .attention = &attention_dry,
    .mla = &mla_dry,

};
