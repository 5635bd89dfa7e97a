// kernels/cpu/backend.c: the CPU backend, one table per kernel family (kernels/kernels.h),
// and its plain twin for reading and stepping through (matmul_impl=plain): the GEMM as the
// in-order triple loop (kernels/cpu/gemm_plain.c) and attention in per-row loops
// (attention_cpu_plain); the other families have one kernel, plain already. Same bits.
#include "kernels/kernels.h"

const Backend backend_cpu = {
    .name = "cpu",
    .mem = &memory_cpu,
    .matmul = &matmul_cpu,
    .matmul16 = &matmul16_cpu,
    .norm = &norm_cpu,
    .rope = &rope_cpu,
    .embedding = &embedding_cpu,
    .attention = &attention_cpu,
    .mla = &mla_cpu,
    .router = &router_cpu,
    .moe = &moe_cpu,
    .mlp = &mlp_cpu,
    .loss = &loss_cpu,
    .cast = &cast_cpu,
    .sum = &sum_cpu,
    .optim = &optim_cpu,
    .init = &init_cpu,
};

// What differs from backend_cpu: the matmul tables and attention's. Made once, by main,
// before the devices start.
const Backend *backend_cpu_plain(void) {
    static Backend plain;
    plain = backend_cpu;
    plain.name = "cpu-plain";
    plain.matmul = &matmul_cpu_plain;
    plain.matmul16 = &matmul16_cpu_plain;
    plain.attention = &attention_cpu_plain;
    return &plain;
}
