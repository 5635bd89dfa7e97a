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

// matmul
static void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {}
static void matmul_backward_dinp(float *dinp, const float *dout, const float *w, int T, int C, int OC) {}
static void matmul_backward_dw(float *dw, const float *inp, const float *dout, int len, int C, int OC) {}
static void gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, int accumulate, float *C, int ldc) {}
static const MatmulKernels matmul_dry = {matmul_forward, matmul_backward_dinp, matmul_backward_dw, gemm};

// rope
static void rope_table(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float max_ts, int bf16) {}
static void rope_rotate(float *x, const float *sn, const float *cs, int B, int S, int H, int stride, int Dr,
                        int dir, int bf16) {}
static const RopeKernels rope_dry = {rope_table, rope_rotate};

// embedding
static void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {}
static void embedding_backward_leaf(float *dtable, const float *dout, const int *ids, long t0, long len,
                                    int D, int V, int v0) {}
static void embedding_onehot(float *onehot, const int *ids, int T, int V, int v0) {}
static const EmbeddingKernels embedding_dry = {embedding_forward, embedding_backward_leaf, embedding_onehot};

// loss (a leaf's sum is left unwritten and counts no tokens: the planner has no loss)
static void loss_row_max(float *m, const float *logits, int T, int V) {}
static void loss_sum_exp(float *piece, const float *logits, const float *m, int T, int V, int c0, int Vc) {}
static void loss_target_logit(float *zt, const float *logits, const int *targets, int T, int V, int v0) {}
static void loss_lse(float *lse, const float *m, const float *sum, int T) {}
static long loss_leaf_sum(double *sum, const float *lse, const float *zt, const int *targets, long t0, long len,
                          float zmul) { return 0; }
static void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                          float scale) {}
static void tile_gather_rows(float *dst, const float *src, long t0, int len, int w) {}
static void tile_scatter_rows(float *dst, const float *src, long t0, int len, int w) {}
static void tile_gather_targets(int *dst, const int *src, long t0, int len) {}
static const LossKernels loss_dry = {loss_row_max, loss_sum_exp, loss_target_logit, loss_lse, loss_leaf_sum,
                                     loss_backward, tile_gather_rows, tile_scatter_rows, tile_gather_targets};

// cast
static void round_to_bf16(float *x, size_t n) {}
static void pack_bf16(uint16_t *h, const float *x, size_t n) {}
static void unpack_bf16(float *x, const uint16_t *h, size_t n) {}
static const CastKernels cast_dry = {round_to_bf16, pack_bf16, unpack_bf16};



const Backend backend_dry = {
    .name = "dry",
    .computes = 0,
    .to_host = to_host,

    .norm = &norm_dry,
    .matmul = &matmul_dry,
    .rope = &rope_dry,
    .embedding = &embedding_dry,
    .loss = &loss_dry,
    .cast = &cast_dry,

};
