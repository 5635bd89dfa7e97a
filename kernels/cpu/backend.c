// kernels/cpu/backend.c: the CPU backend, one table per kernel family (kernels/kernels.h).
#include "kernels/kernels.h"
#include <string.h>

static void to_host(void *host, const void *src, size_t bytes) { memcpy(host, src, bytes); }

const Backend backend_cpu = {
    .name = "cpu",
    .computes = 1,
    .to_host = to_host,

    .norm = &norm_cpu,
    .router = &router_cpu,
    .moe = &moe_cpu,
    .mlp = &mlp_cpu,
    .matmul = &matmul_cpu,
    .rope = &rope_cpu,
    .embedding = &embedding_cpu,
    .loss = &loss_cpu,
    .cast = &cast_cpu,
    .optim = &optim_cpu,
    .sum = &sum_cpu,
    .init = &init_cpu,
    .attention = &attention_cpu,
    .mla = &mla_cpu,

};
