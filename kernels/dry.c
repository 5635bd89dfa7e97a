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



const Backend backend_dry = {
    .name = "dry",
    .computes = 0,
    .to_host = to_host,

    .norm = &norm_dry,

};
