// kernels/sum.h: adds of whole arrays: the canonical tree's merges (base/treesum.c) and
// the residual connections (model/model.c).
#ifndef MESHMOE_KERNELS_SUM_H
#define MESHMOE_KERNELS_SUM_H
#include <stddef.h>

typedef struct SumKernels {
    // left (n) += right (n): one merge of the canonical tree, left the earlier block of leaves.
    void (*tree_add)(float *left, const float *right, size_t n);
    // h (n) += x (n): a residual connection, h = x + the block's output.
    void (*residual_add)(float *h, const float *x, size_t n);
} SumKernels;

extern const SumKernels sum_cpu;    // kernels/cpu/sum.c

#endif
