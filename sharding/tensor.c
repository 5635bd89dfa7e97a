// sharding/tensor.c: tensor parallelism's matmuls and reductions (see tensor.h).
#include "sharding/tensor.h"
#include "sharding/mesh.h"
#include "sharding/collectives.h"
#include "sharding/memory.h"
#include "model/matmul.h"
#include "common.h"

static Group *tensor_group(void) {
    const Mesh *mesh = mesh_current();
    if (!mesh || mesh->size[AX_TENSOR] == 1) return NULL;
    return mesh_group(mesh, mesh_device_id(), AXIS_BIT(AX_TENSOR));
}

int tp_size(void) {
    const Mesh *mesh = mesh_current();
    return mesh ? mesh->size[AX_TENSOR] : 1;
}

int tp_rank(void) {
    const Mesh *mesh = mesh_current();
    return mesh ? mesh_coord(mesh, mesh_device_id(), AX_TENSOR) : 0;
}

Config tp_local_config(const Config *c) {
    Config l = *c;
    int t = tp_size();
    l.base_num_query_heads /= t;
    l.base_num_kv_heads /= t;
    l.base_mlp_dim /= t;
    l.base_moe_mlp_dim /= t;
    return l;
}

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

void tp_all_reduce(float *x, size_t n) {
    Group *g = tensor_group();
    if (g) coll_all_reduce(g, x, n);
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
    for (size_t i = 0; i < (mem_dry() ? 0 : n); i++)
        for (int r = 0; r < t; r++) x[i] = fmaxf(x[i], all[(size_t)r * n + i]);
    mem_free(all);
}

void tp_rowpar_forward(const Config *c, float *out, const float *inp, const float *w, int T, int Cl, int OC) {
    tp_rowpar_forward_cap(c, out, inp, w, T, T, Cl, OC);
}

// shard_mode (docs/optimizations.md#shard_mode), read here only. The row-parallel product's result
// on each device is a partial sum (MaxText/JAX: an "unreduced" value); its output sharding
// (replicated over tensor: activation_embed) is reached by an all-reduce.
//   auto (default): the runtime places that reshard and fuses it into the product: the
//     partial sums are written into `out` and all-reduced in place.
//   explicit: the matmul declares its output sharding (MaxText's explicit mode: einsum
//     out_sharding / reshard), so the unreduced result is a value of its own: a (T,OC)
//     temporary, all-reduced there and then resharded (copied) into `out` at the declared
//     point. With tensor=1 there is no partial sum and nothing to reshard: the same code.
// The same sums in the same tree order either way: the same bits.
static int explicit_reshard(const Config *c) { return tp_size() > 1 && c->shard_mode == SHARD_MODE_EXPLICIT; }

void tp_rowpar_forward_cap(const Config *c, float *out, const float *inp, const float *w, int T, int cap, int Cl, int OC) {
    if (explicit_reshard(c)) {
        float *part = mem_floats(MEM_TEMP, (size_t)cap * OC, "row-parallel partial sums (shard_mode=explicit)");
        matmul_forward_chunked_cap(part, inp, w, T, cap, Cl, OC, tp_local_chunks(c));
        tp_all_reduce(part, (size_t)T * OC);
        mem_copy(out, part, sizeof(float) * (size_t)T * OC);   // the declared reshard into the output
        mem_free(part);
        return;
    }
    matmul_forward_chunked_cap(out, inp, w, T, cap, Cl, OC, tp_local_chunks(c));
    tp_all_reduce(out, (size_t)T * OC);
}

void tp_colpar_dinp(const Config *c, float *dinp, const float *dout, const float *w, int T, int C, int OCl) {
    tp_colpar_dinp_cap(c, dinp, dout, w, T, T, C, OCl);
}

void tp_colpar_dinp_cap(const Config *c, float *dinp, const float *dout, const float *w, int T, int cap, int C, int OCl) {
    float *part = mem_floats(MEM_TEMP, (size_t)cap * C, "tensor-split input grad");   // (T,C) of (cap,C)
    matmul_dinp_chunked_cap(part, dout, w, T, cap, C, OCl, tp_local_chunks(c));
    tp_all_reduce(part, (size_t)T * C);
    for (size_t i = 0; i < (mem_dry() ? 0 : (size_t)T * C); i++) dinp[i] += part[i];
    mem_free(part);
}
