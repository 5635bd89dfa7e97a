// kernels/optim.h: the optimizer's kernels (docs/model.md#optimizer-and-schedule): AdamW,
// SGD and Adafactor's updates, gradient clipping, the EMA of the weights, and sums of
// squares in fixed point. The orchestration (which shard, which tensor, the state's moves
// to and from host memory) is optim/optimizer.c, optim/adafactor.c and optim/offload.c.
#ifndef MESHMOE_KERNELS_OPTIM_H
#define MESHMOE_KERNELS_OPTIM_H
#include <stddef.h>
#include <stdint.h>

// A sum of squares that does not depend on the order of its terms: each square, a float32
// squared and so exact in double, is scaled by 2^64 (SQUARES_SCALE) and truncated to an
// integer, a 128-bit fixed-point number with 64 fraction bits. Integer addition is exact,
// so devices can add their parts in any order. A square that is non-finite or >= 2^36 is
// not added: it sets a flag instead.
__extension__ typedef __int128 fixed128;
typedef struct { fixed128 sum; int bad; } Squares;   // a sum and its flag
#define SQUARES_SCALE 18446744073709551616.0   // 2^64

// optax.clip_by_global_norm, applied where an update reads the gradient: when on, each
// g[i] is used as (g[i] / norm) * threshold (optax's order of operations, the bits of
// clip_scale followed by the update), and g itself is left as it is. One pass over the
// gradient fewer than scaling it first.
typedef struct { int on; float norm, threshold; } GradClip;

// AdamW's hyperparameters for one update: the step size, the 1-based update count t, the
// decays, epsilon outside and inside the square root (optax's eps and eps_root: MaxText's
// adam_eps, adam_eps_root), the decoupled weight decay; nesterov (optax's adamw(nesterov=
// True), the AdamW half of opt_type=muon): the first moment used is b1 m / (1 - b1^(t+1)) +
// (1 - b1) g / (1 - b1^t), not m / (1 - b1^t); uncorrected (opt_type=adam_pax, whose decays
// b1, b2 of update t hold the bias correction): m and v used as they are, not divided.
typedef struct { float lr; int t; float b1, b2, eps, eps_root, weight_decay; int nesterov, uncorrected; } AdamWParams;

typedef struct OptimKernels {
    // AdamW as optax chains it (clip_by_global_norm, scale_by_adam, add_decayed_weights,
    // scale_by_learning_rate), at update h.t: m, v (n) the first and second moments, updated;
    // u = mhat / (sqrt(vhat + eps_root) + eps) + weight_decay p; p (n) -= lr * u. p, g, m, v (n). p16 (n), unless NULL: the updated p as bf16
    // bits (rounded to nearest even, as kernels/cast.h's pack_bf16), the weights' 16-bit copy
    // written in the same pass (model/model.c: copy16_current).
    // m16 (n), unless NULL (m is then NULL): the first moment kept as bf16 bits
    // (mu_dtype=bfloat16), as optax keeps it in JAX: the old moment decays as a bf16 array
    // times a Python float does, a bf16 product (b1 rounded to bf16, 0.9 -> 0.8984375, and
    // the product rounded to bf16); the new moment, the float32 sum of that and (1 - b1) g,
    // makes this update and is stored rounded to nearest even.
    void (*adamw_update)(float *p, uint16_t *p16, const float *g, float *m, uint16_t *m16, float *v, size_t n,
                         AdamWParams h, GradClip clip);
    // Plain SGD (optax.sgd without momentum): p (n) += -lr * g (n), g clipped as above.
    void (*sgd_update)(float *p, const float *g, size_t n, float lr, GradClip clip);
    // optax.clip_by_global_norm's scaling on its own (Adafactor's updates read g more than
    // once), for a norm at or above the threshold: g (n) = g / norm * threshold.
    void (*clip_scale)(float *g, size_t n, float norm, float threshold);
    // ema (n) = decay * ema + (1 - decay) * p (n).
    void (*ema_update)(float *ema, const float *p, size_t n, float decay);
    // *sum += the squares of x (n), in fixed point; *bad = 1 if one is non-finite or too
    // large (Squares above). sum and bad are device memory, like x (the callers gather them
    // over the mesh before reading them back once).
    void (*squares_add)(fixed128 *sum, int *bad, const float *x, size_t n);

    // Adafactor (optim/adafactor.h). A factored tensor of global shape `shape` (ndim dims)
    // keeps its second moment as row means vrow (L,R) and column means vcol (L,C): R rows
    // along dim drow, C columns along dim dcol, L the product of the other dims.
    // g (the whole tensor, row-major): vrow = decay * vrow + (1-decay) * mean over columns
    // of g^2 + eps, vcol likewise over rows; the sums in double, in element order, into
    // rs (L*R) and cs (L*C), scratch that this kernel zeroes first.
    void (*adafactor_factored_moments)(float *vrow, float *vcol, double *rs, double *cs, const float *g,
                                       const int *shape, int ndim, int drow, int dcol, float decay, float eps);
    // f (L*R + L*C): the row factors (vrow / mean over rows of vrow)^-1/2, then the column
    // factors vcol^-1/2; vrow (L,R), vcol (L,C).
    void (*adafactor_factors)(float *f, const float *vrow, const float *vcol, size_t L, size_t R, size_t C);
    // g (n) *= the row and column factors f of its element: g[j] is element k0 + j of the
    // factored tensor (shape, drow, dcol as above).
    void (*adafactor_scale_factored)(float *g, const float *f, size_t k0, size_t n, const int *shape, int ndim,
                                     int drow, int dcol);
    // An unfactored tensor: v (n) = decay * v + (1-decay) * (g^2 + eps); g (n) /= sqrt(v).
    void (*adafactor_scale_full)(float *g, float *v, size_t n, float decay, float eps);
    // p (n) -= g / clip * lr * param_scale (clip_by_block_rms, scale_by_learning_rate,
    // scale_by_param_block_rms, in optax's order); g (n) the scaled update.
    void (*adafactor_apply)(float *p, const float *g, size_t n, float clip, float lr, float param_scale);

    // Muon (optim/muon.h): optax.contrib.muon's scale_by_muon with Nesterov momentum, at
    // update t >= 1. mu (n) = (1 - beta) g + beta mu, g (n) clipped as adamw_update reads it;
    // mu_hat (n) = beta mu / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t), what the
    // Newton-Schulz iteration orthogonalizes. mu16 (n), unless NULL (mu is then NULL): the
    // momentum kept as bf16 bits (mu_dtype=bfloat16), as adamw_update keeps AdamW's: beta mu
    // a bf16 product (beta rounded to bf16), the float32 sum makes mu_hat, stored rounded.
    void (*muon_moment)(float *mu, uint16_t *mu16, float *mu_hat, const float *g, size_t n, float beta, int t,
                        GradClip clip);
    // x (n) = x / d (the iteration's start: the moment over its Frobenius norm plus eps).
    void (*muon_divide)(float *x, size_t n, float d);
    // out (n) = a * x + y, or a * x where y is NULL (the iteration's sums, in its order:
    // B = b A + (c A) @ A, X = a X + B @ X); out may be y.
    void (*muon_axpy)(float *out, float a, const float *x, const float *y, size_t n);
    // p (n) += -lr * (scale * o + weight_decay * p): the orthogonalized moment o (n) scaled by
    // its shape (scale_by_shape), the decoupled weight decay, the learning rate, in optax's
    // order.
    void (*muon_apply)(float *p, const float *o, size_t n, float scale, float weight_decay, float lr);
} OptimKernels;

extern const OptimKernels optim_cpu;    // kernels/cpu/optim.c

#endif
