// kernels/cpu/backend.c: the CPU backend, one table per kernel family (kernels/kernels.h).
#include "kernels/kernels.h"
#include <string.h>

static void to_host(void *host, const void *src, size_t bytes) { memcpy(host, src, bytes); }

const Backend backend_cpu = {
    .name = "cpu",
    .to_host = to_host,
    .matmul = &matmul_cpu,
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
