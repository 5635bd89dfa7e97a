// kernels/dry.c: the planner's backend (dry_run=true). Every kernel returns at once: the
// layers still allocate every buffer, so the tagged allocator counts exactly what a real
// step holds, and nothing is computed. Same names and argument order as the CPU kernels;
// the arguments are unused by design (this file builds with -Wno-unused-parameter).
#include "kernels/kernels.h"
#include "core/common.h"

// The planner's small buffers are real memory (base/memory.h), so what a dry kernel
// wrote there (a balanced routing's counts) reads back as on the CPU (memory_cpu's to_host).

// The planner's memory is the host's: its small buffers are real (kernels/cpu/memory.c), its
// large ones lie in the void that base/memory.c reserves and counts itself, never allocated
// here. Nothing is zeroed or copied into the void: mem_zero and mem_copy skip a dry run.

// norm
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                            int T, int D, float eps, int bf16) {}
static void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale,
                                size_t scale_stride, const float *rstd, int T, int D, int bf16) {}
static void rmsnorm_dscale_leaf(float *dscale, const float *dout, const float *x, const float *rstd,
                                long t0, long len, int D, int bf16) {}
static void broadcast_rows(float *out, const float *row, int T, int D) {}
static const NormKernels norm_dry = {rmsnorm_forward, rmsnorm_backward_dx, rmsnorm_dscale_leaf, broadcast_rows};

// router
static void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K) {}
static void route_softmax(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K,
                          int G, int keep_groups, int scaled, float routed_scaling_factor) {}
static void route_deepseek(int *top_idx, float *top_w, float *scores, const float *logits, const float *bias,
                           int T, int E, int K, int G, int keep_groups, float routed_scaling_factor,
                           int gate_round, int bf16) {}
static void count_sequence_assignments(int *counts, const int *top_idx, int B, int S, int E, int K) {}
static void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before) {}
static void drop_weights(float *w, const int *keep, size_t A) {}
static void count_experts(long *counts, const int *top_idx, size_t A) {}
static void router_probs(float *probs, const float *logits, int T, int E) {}
static void lb_chunk_sums(double *part, const int *top_idx, const float *probs, int B, int S, int nchunks,
                          int chunk, int E, int K) {}
static void lb_loss(float *f, double *lb_seq, const double *tot, int B, int E, int Sg, float lb_coef) {}
static void lb_backward(float *dlogits, const float *probs, const float *f, int B, int S, int Sg, int E, float lb_coef) {}
static void router_mixtral_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    int T, int E, int K) {}
static void router_softmax_backward(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    const float *probs, int T, int E, int K, int scaled, float routed_scaling_factor) {}
static void router_deepseek_backward(float *dlogits, const float *dw, const int *top_idx, const float *logits,
                                     int T, int E, int K, float routed_scaling_factor, int gate_round) {}
static const RouterKernels router_dry = {
    route_mixtral, route_softmax, route_deepseek,
    count_sequence_assignments, capacity_mask, drop_weights, count_experts,
    router_probs, lb_chunk_sums, lb_loss, lb_backward,
    router_mixtral_backward, router_softmax_backward, router_deepseek_backward,
};
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
                               int Nkv, int Dqk, int Dv, AttnRounding rnd, int bkv) {}
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



// moe
// The planner has no logits to route on: the rows are those of a balanced routing,
// assignment a to expert a mod E. The layer reads back only the row starts (the experts'
// row counts, the all-to-all's sizes); every buffer whose size depends on the routing is
// allocated for its bound (model/moe.c:expert_forward), so the plan does not depend on
// this choice. row_token and assign_row stay as allocated (zero).
static void sort_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    size_t A = (size_t)T * K;
    for (int e = 0; e <= E; e++) row_start[e] = (int)(A / E * e + MM_MIN((size_t)e, A % E));
}
static void dense_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    for (int e = 0; e <= E; e++) row_start[e] = e * T;
}
static void gather_rows(float *xs, const float *x, const int *row_token, int r0, int n, int D) {}
static void gather_rows_packed(uint16_t *xs, const float *x, const int *row_token, int r0, int n, int D) {}
static void scatter_add_rows(float *dx, const float *dxs, const int *row_token, int r0, int n, int D) {}
static void scatter_add_tokens(float *dx, const float *dxs, const int *assign_row, int T, int K, int D) {}
static void combine_forward(float *out, const float *y, const float *w, const int *top_idx, const int *assign_row,
                            int T, int D, int K, int bf16_sum, int bf16) {}
static void combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
                             const float *top_w, const int *assign_row, size_t A, int D, int K) {}
static void combine_forward_packed(float *out, const uint16_t *y, const float *w, const int *top_idx,
                                   const int *assign_row, int T, int D, int K, int bf16_sum, int bf16) {}
static void combine_backward_packed(uint16_t *dy, float *dw, const float *dout, const uint16_t *y, const float *w,
                                    const float *top_w, const int *assign_row, size_t A, int D, int K) {}
static void add_shared(float *out, const float *shared, size_t n) {}
static const MoeKernels moe_dry = {
    sort_rows, dense_rows, gather_rows, gather_rows_packed, scatter_add_rows, scatter_add_tokens,
    combine_forward, combine_backward, combine_forward_packed, combine_backward_packed, add_shared,
};

// mlp
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {}
static void swiglu_backward(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16) {}
static void swiglu_forward_packed(uint16_t *act, const uint16_t *h0, const uint16_t *h1, long n) {}
static void swiglu_backward_packed(uint16_t *act, uint16_t *dh0, uint16_t *dh1, const uint16_t *dact,
                                   const uint16_t *h0, const uint16_t *h1, long n) {}
static const MlpKernels mlp_dry = {swiglu_forward, swiglu_backward, swiglu_forward_packed, swiglu_backward_packed};
// matmul
static void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {}
static void matmul_backward_dinp(float *dinp, const float *dout, const float *w, int T, int C, int OC) {}
static void matmul_backward_dw(float *dw, const float *inp, const float *dout, int len, int C, int OC, int accumulate) {}
static void gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, int accumulate, float *C, int ldc) {}
static void gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B, int ldb,
                         float *C, int ldc) {}
static void matmul_backward_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C,
                                      int OC, int accumulate) {}
static void forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC,
                            int accumulate) {}
static void dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC) {}
static void chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const float *A,
                            const float *B, float *out) {}
static void dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n, int G, int C,
                              int OC, int accumulate) {}
static const MatmulKernels matmul_dry = {matmul_forward,  matmul_backward_dinp, matmul_backward_dw,
                                         gemm,            gemm_chunked,         matmul_backward_dw_leaves,
                                         forward_grouped, dinp_grouped,         chunked_grouped,
                                         dw_leaves_grouped};
// matmul16
static void forward16(float *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC, int accumulate) {}
static void dinp16(float *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {}
static void dw16(float *dw, const uint16_t *inp, const uint16_t *dout, int len, int C, int OC, int accumulate) {}
static void chunked16(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda, const uint16_t *B,
                      int ldb, float *C, int ldc) {}
static void dw_leaves16(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n, int C, int OC,
                        int accumulate) {}
static void forward_grouped16(float *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G, int C,
                              int OC, int accumulate) {}
static void dinp_grouped16(float *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G, int C,
                           int OC) {}
static void chunked_grouped16(int transB, const int *rows, int G, int N, int K, int chunks, const uint16_t *A,
                              const uint16_t *B, float *out) {}
static void dw_leaves_grouped16(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n, int G,
                                int C, int OC, int accumulate) {}
static void forward_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC) {}
static void dinp_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {}
static void forward_grouped_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G,
                                    int C, int OC) {}
static void dinp_grouped_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G,
                                 int C, int OC) {}
static const Matmul16Kernels matmul16_dry = {forward16,         dinp16,         dw16,
                                             chunked16,         dw_leaves16,    forward_grouped16,
                                             dinp_grouped16,    chunked_grouped16, dw_leaves_grouped16,
                                             forward_round16,   dinp_round16,   forward_grouped_round16,
                                             dinp_grouped_round16};

// rope
static void rope_table(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float max_ts, int bf16) {}
static void rope_rotate(float *x, const float *sn, const float *cs, int B, int S, int H, int stride, int Dr,
                        int dir, int bf16) {}
static void rope_table_freq(float *sn, float *cs, int S, int pos0, int half, const float *freq, float scale) {}
static void rope_rotate_pairs(float *dst, const float *src, const float *sn, const float *cs, int B, int S, int H,
                              int stride, int Dr, int dir, int bf16) {}
static const RopeKernels rope_dry = {rope_table, rope_rotate, rope_table_freq, rope_rotate_pairs};

// embedding
static void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {}
static void embedding_backward_leaf(float *dtable, const float *dout, const int *ids, long t0, long len,
                                    int D, int V, int v0) {}
static void embedding_onehot(float *onehot, const int *ids, int T, int V, int v0) {}
static const EmbeddingKernels embedding_dry = {embedding_forward, embedding_backward_leaf, embedding_onehot};

// loss (a leaf's sum is left unwritten: the planner has no loss)
static void loss_row_max(float *m, const float *logits, int T, int V) {}
static void loss_sum_exp(float *piece, const float *logits, const float *m, int T, int V, int c0, int Vc) {}
static void loss_target_logit(float *zt, const float *logits, const int *targets, int T, int V, int v0) {}
static void loss_lse(float *lse, const float *m, const float *sum, int T) {}
static void loss_leaf_sum(double *sum, const float *lse, const float *zt, const int *targets, long t0, long len,
                          float zmul) {}
static void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                          float scale) {}
static void tile_gather_rows(float *dst, const float *src, long t0, int len, int w) {}
static void tile_scatter_rows(float *dst, const float *src, long t0, int len, int w) {}
static void tile_gather_targets(int *dst, const int *src, long t0, int len) {}
static void loss_backward_packed(uint16_t *dz, const float *logits, const float *lse, const int *targets, int T, int V,
                                 int v0, float zmul, float scale) {}
static void loss_row_max16(float *m, const uint16_t *logits, int T, int V) {}
static void loss_sum_exp16(float *piece, const uint16_t *logits, const float *m, int T, int V, int c0, int Vc) {}
static void loss_target_logit16(float *zt, const uint16_t *logits, const int *targets, int T, int V, int v0) {}
static void loss_backward16(uint16_t *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                            float scale) {}
static const LossKernels loss_dry = {loss_row_max, loss_sum_exp, loss_target_logit, loss_lse, loss_leaf_sum,
                                     loss_backward, loss_backward_packed, tile_gather_rows, tile_scatter_rows,
                                     tile_gather_targets, loss_row_max16, loss_sum_exp16, loss_target_logit16,
                                     loss_backward16};

// cast
static void round_to_bf16(float *x, size_t n) {}
static void round_copy_bf16(float *out, const float *x, size_t n) {}
static void pack_bf16(uint16_t *h, const float *x, size_t n) {}
static void unpack_bf16(float *x, const uint16_t *h, size_t n) {}
static const CastKernels cast_dry = {round_to_bf16, round_copy_bf16, pack_bf16, unpack_bf16};


// optim
static void adamw_update(float *p, uint16_t *p16, const float *g, float *m, uint16_t *m16, float *v, size_t n,
                         AdamWParams h, GradClip clip) {}
static void sgd_update(float *p, const float *g, size_t n, float lr, GradClip clip) {}
static void clip_scale(float *g, size_t n, float norm, float threshold) {}
static void ema_update(float *ema, const float *p, size_t n, float decay) {}
static void squares_add(fixed128 *sum, int *bad, const float *x, size_t n) {}
static void adafactor_factored_moments(float *vrow, float *vcol, double *rs, double *cs, const float *g,
                                       const int *shape, int ndim, int drow, int dcol, float decay, float eps) {}
static void adafactor_factors(float *f, const float *vrow, const float *vcol, size_t L, size_t R, size_t C) {}
static void adafactor_scale_factored(float *g, const float *f, size_t k0, size_t n, const int *shape, int ndim,
                                     int drow, int dcol) {}
static void adafactor_scale_full(float *g, float *v, size_t n, float decay, float eps) {}
static void adafactor_apply(float *p, const float *g, size_t n, float clip, float lr, float param_scale) {}
static void muon_moment(float *mu, uint16_t *mu16, float *mu_hat, const float *g, size_t n, float beta, int t,
                        GradClip clip) {}
static void muon_divide(float *x, size_t n, float d) {}
static void muon_axpy(float *out, float a, const float *x, const float *y, size_t n) {}
static void muon_apply(float *p, const float *o, size_t n, float scale, float weight_decay, float lr) {}
static const OptimKernels optim_dry = {adamw_update, sgd_update, clip_scale, ema_update, squares_add,
                                       adafactor_factored_moments, adafactor_factors, adafactor_scale_factored,
                                       adafactor_scale_full, adafactor_apply, muon_moment, muon_divide, muon_axpy,
                                       muon_apply};

// sum
static void tree_add(float *left, const float *right, size_t n) {}
static void residual_add(float *h, const float *x, size_t n) {}
static const SumKernels sum_dry = {tree_add, residual_add};

// init
static void param_init(float *x, size_t i0, size_t n, uint64_t name_hash, int seed, float std, float constant,
                       int truncated, const int *shape, const int *lindex, const int *gshape, int ndim) {}
static const InitKernels init_dry = {param_init};

// The library workspace a device takes before its step (base/mesh.c:workspace_begin): the
// bytes dry_plan_workspace set, allocated under MEM_WORKSPACE as a GPU run allocates cuBLAS's.
static size_t planned_workspace;
void dry_plan_workspace(size_t bytes) { planned_workspace = bytes; }
static size_t workspace_bytes(void) { return planned_workspace; }
static void set_workspace(void *p, size_t bytes) {}

const Backend backend_dry = {
    .name = "dry",
    .mem = &memory_cpu,
    .matmul = &matmul_dry,
    .matmul16 = &matmul16_dry,
    .norm = &norm_dry,
    .rope = &rope_dry,
    .embedding = &embedding_dry,
    .attention = &attention_dry,
    .mla = &mla_dry,
    .router = &router_dry,
    .moe = &moe_dry,
    .mlp = &mlp_dry,
    .loss = &loss_dry,
    .cast = &cast_dry,
    .sum = &sum_dry,
    .optim = &optim_dry,
    .init = &init_dry,
    .workspace_bytes = workspace_bytes,
    .set_workspace = set_workspace,
};
