// base/tensor.c: tensor parallelism's matmuls and reductions (see tensor.h).
#include "base/tensor.h"
#include "base/mesh.h"
#include "base/collectives.h"
#include "base/memory.h"
#include "core/common.h"

static Group *tensor_group(void) { return mesh_axis_size(AX_TENSOR) > 1 ? mesh_axis_group(AX_TENSOR) : NULL; }

int tp_size(void) { return mesh_axis_size(AX_TENSOR); }

int tp_rank(void) { return mesh_axis_rank(AX_TENSOR); }

int tp_local_chunks(const Config *c) { return c->tensor_reduce_chunks / tp_size(); }

void tp_check(const Config *c, int t) {
    int R = c->tensor_reduce_chunks;
    if (R < 1 || (R & (R - 1)))
        die("tensor_reduce_chunks must be a power of two (the pieces of a split sum form a pairwise tree), got %d", R);
    if (R % t)
        die("ici_tensor_parallelism=%d must divide tensor_reduce_chunks (%d): each device adds a whole subtree of "
            "the pieces; raise tensor_reduce_chunks (a power of two) to a multiple of %d", t, R, t);
    // Every contraction that tensor parallelism splits is cut into R pieces.
    const char *what[6];
    int n[6], nd = 0;
    what[nd] = "vocab_size"; n[nd++] = c->vocab_size;
    if (cfg_is_mla(c)) {
        what[nd] = "base_num_query_heads"; n[nd++] = c->base_num_query_heads;
    } else {
        what[nd] = "base_num_query_heads * head_dim"; n[nd++] = c->base_num_query_heads * c->head_dim;
        what[nd] = "base_num_kv_heads * head_dim"; n[nd++] = c->base_num_kv_heads * c->head_dim;
    }
    if (c->first_num_dense_layers > 0) { what[nd] = "base_mlp_dim"; n[nd++] = c->base_mlp_dim; }
    what[nd] = "the expert width"; n[nd++] = cfg_expert_dim(c);
    for (int i = 0; i < nd; i++)
        if (n[i] % R)
            die("tensor_reduce_chunks=%d does not divide %s (%d): the split sums are cut into that many "
                "pieces; choose a power of two that divides it", R, what[i], n[i]);
}

void tp_all_reduce(float *x, size_t n) { tp_all_reduce_cap(x, n, n); }

void tp_all_reduce_cap(float *x, size_t n, size_t cap) {
    Group *g = tensor_group();
    if (g) coll_all_reduce_cap(g, x, n, cap);
}

void tp_all_gather(const float *x, float *all, size_t n) {
    Group *g = tensor_group();
    if (g) coll_all_gather(g, x, all, sizeof(float) * n);
    else mem_copy(all, x, sizeof(float) * n);
}

void tp_all_reduce_max(float *x, size_t n) {
    Group *g = tensor_group();
    if (!g) return;
    int t = group_size(g);
    float *all = mem_floats(MEM_COMM, (size_t)t * n, "tensor max (all-gathered)");
    coll_all_gather(g, x, all, sizeof(float) * n);
    if (!mem_dry()) {   // the maxima on the host, over host copies (n: a row per token)
        float *mx = mem_host_copy(x, sizeof(float) * n), *pieces = mem_host_copy(all, sizeof(float) * t * n);
        for (size_t i = 0; i < n; i++)
            for (int r = 0; r < t; r++) mx[i] = fmaxf(mx[i], pieces[(size_t)r * n + i]);
        mem_upload(x, mx, sizeof(float) * n);
        free(mx);
        free(pieces);
    }
    mem_free(all);
}
