// model/tensor_parallel.c: row- and column-parallel matmuls (model/tensor_parallel.h).
#include "model/tensor_parallel.h"
#include "model/matmul.h"
#include "kernels/kernels.h"
#include "base/tensor.h"
#include "base/memory.h"
#include "core/common.h"

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

// This device's slice of a row-parallel product: out (T,OC) = inp (T,Cl) @ w (Cl,OC), or, with
// rows, each group's rows with its own weight of w (G,Cl,OC) (the experts' grouped products).
static void rowpar_slice(const Config *c, float *out, const float *inp, const float *w, const int *rows, int G, int T,
                         int Cl, int OC) {
    if (rows) matmul_forward_chunked_grouped(out, inp, w, rows, G, Cl, OC, tp_local_chunks(c));
    else matmul_forward_chunked(out, inp, w, T, Cl, OC, tp_local_chunks(c));
}

static void rowpar_forward(const Config *c, float *out, const float *inp, const float *w, const int *rows, int G,
                           int T, int cap, int Cl, int OC) {
    if (explicit_reshard(c)) {
        float *part = mem_floats_uninit(MEM_TEMP, (size_t)cap * OC, "row-parallel partial sums (shard_mode=explicit)");
        rowpar_slice(c, part, inp, w, rows, G, T, Cl, OC);
        tp_all_reduce_cap(part, (size_t)T * OC, (size_t)cap * OC);
        mem_copy(out, part, sizeof(float) * (size_t)T * OC);   // the declared reshard into the output
        mem_free(part);
        return;
    }
    rowpar_slice(c, out, inp, w, rows, G, T, Cl, OC);
    tp_all_reduce_cap(out, (size_t)T * OC, (size_t)cap * OC);
}

void tp_rowpar_forward_cap(const Config *c, float *out, const float *inp, const float *w, int T, int cap, int Cl, int OC) {
    rowpar_forward(c, out, inp, w, NULL, 0, T, cap, Cl, OC);
}

void tp_rowpar_forward_grouped(const Config *c, float *out, const float *inp, const float *w, const int *rows, int G,
                               int cap, int Cl, int OC) {
    rowpar_forward(c, out, inp, w, rows, G, rows[G], cap, Cl, OC);
}

void tp_colpar_dinp(const Config *c, float *dinp, const float *dout, const float *w, int T, int C, int OCl) {
    tp_colpar_dinp_cap(c, dinp, dout, w, T, T, C, OCl);
}

static void colpar_dinp(const Config *c, float *dinp, const float *dout, const float *w, const int *rows, int G, int T,
                        int cap, int C, int OCl) {
    float *part = mem_floats_uninit(MEM_TEMP, (size_t)cap * C, "tensor-split input grad");   // (T,C) of (cap,C), written whole
    if (rows) matmul_dinp_chunked_grouped(part, dout, w, rows, G, C, OCl, tp_local_chunks(c));
    else matmul_dinp_chunked(part, dout, w, T, C, OCl, tp_local_chunks(c));
    tp_all_reduce_cap(part, (size_t)T * C, (size_t)cap * C);
    kern()->sum->residual_add(dinp, part, (size_t)T * C);   // dinp += the reduced part
    mem_free(part);
}

void tp_colpar_dinp_cap(const Config *c, float *dinp, const float *dout, const float *w, int T, int cap, int C, int OCl) {
    colpar_dinp(c, dinp, dout, w, NULL, 0, T, cap, C, OCl);
}

void tp_colpar_dinp_grouped(const Config *c, float *dinp, const float *dout, const float *w, const int *rows, int G,
                            int cap, int C, int OCl) {
    colpar_dinp(c, dinp, dout, w, rows, G, rows[G], cap, C, OCl);
}
