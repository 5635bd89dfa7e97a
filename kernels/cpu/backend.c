// kernels/cpu/backend.c: the CPU backend, one table per kernel family (kernels/kernels.h).
#include "kernels/kernels.h"

const Backend backend_cpu = {
    .name = "cpu",
    .computes = 1,

    .norm = &norm_cpu,

};
