// model/dims.c: this device's dimensions under tensor parallelism (see dims.h).
#include "model/dims.h"
#include "core/common.h"

static int split(int n, int tensor, const char *key) {
    if (n % tensor) die("ici_tensor_parallelism=%d does not divide %s (%d)", tensor, key, n);
    return n / tensor;
}

LocalDims local_dims(const Config *c, int tensor, int rank) {
    LocalDims d;
    d.num_query_heads = split(c->base_num_query_heads, tensor, "base_num_query_heads");
    d.num_kv_heads = cfg_is_mla(c) ? d.num_query_heads : split(c->base_num_kv_heads, tensor, "base_num_kv_heads");
    // Only dense layers read mlp_dim (a Mixtral model's base_mlp_dim is its expert width).
    d.mlp_dim = c->first_num_dense_layers > 0 ? split(c->base_mlp_dim, tensor, "base_mlp_dim") : 0;
    d.expert_dim = split(cfg_expert_dim(c), tensor, cfg_is_deepseek(c) ? "base_moe_mlp_dim" : "base_mlp_dim");
    d.vocab_size = split(c->vocab_size, tensor, "vocab_size");
    d.vocab_first = rank * d.vocab_size;
    return d;
}
