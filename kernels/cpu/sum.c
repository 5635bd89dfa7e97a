// kernels/cpu/sum.c: adds of whole arrays on the CPU (kernels/sum.h).
#include "kernels/sum.h"

static void tree_add(float *left, const float *right, size_t n) {
    #pragma omp parallel for simd if (n > 65536)   // (element by element: vectors change no bits)
    for (size_t i = 0; i < n; i++) left[i] += right[i];
}

static void residual_add(float *h, const float *x, size_t n) {
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) h[i] += x[i];
}

const SumKernels sum_cpu = {tree_add, residual_add};
