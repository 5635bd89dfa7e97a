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


// optim
static void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, int t,
                         float b1, float b2, float eps, float weight_decay) {}
static void sgd_update(float *p, const float *g, size_t n, float lr) {}
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
static const OptimKernels optim_dry = {adamw_update, sgd_update, clip_scale, ema_update, squares_add,
                                       adafactor_factored_moments, adafactor_factors, adafactor_scale_factored,
                                       adafactor_scale_full, adafactor_apply};

// sum
static void tree_add(float *left, const float *right, size_t n) {}
static void residual_add(float *h, const float *x, size_t n) {}
static const SumKernels sum_dry = {tree_add, residual_add};

// init
static void param_init(float *x, size_t i0, size_t n, uint64_t name_hash, int seed, float std, float constant,
                       int truncated, const int *shape, const int *lindex, const int *gshape, int ndim) {}
static const InitKernels init_dry = {param_init};

const Backend backend_dry = {
    .name = "dry",
    .computes = 0,
    .to_host = to_host,

    .norm = &norm_dry,
    .optim = &optim_dry,
    .sum = &sum_dry,
    .init = &init_dry,

};
