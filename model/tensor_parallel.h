// model/tensor_parallel.h: the tensor-parallel matmuls the layers call (base/tensor.h
// explains the split and the order of the sum): this device's slice of the product, then
// the all-reduce over `tensor`.
#ifndef MESHMOE_TENSOR_PARALLEL_H
#define MESHMOE_TENSOR_PARALLEL_H
#include "base/config.h"

// Row-parallel forward: out (T,OC) = sum over the split C of inp (T,Cl) @ w (Cl,OC), Cl = C/t.
void tp_rowpar_forward(const Config *c, float *out, const float *inp, const float *w, int T, int Cl, int OC);
// Column-parallel input gradient: dinp (T,C) += sum over the split OC of dout (T,OCl) @ w^T (w: (C,OCl)).
void tp_colpar_dinp(const Config *c, float *dinp, const float *dout, const float *w, int T, int C, int OCl);
// The same two with their temporaries allocated for cap >= T rows (model/matmul.h).
void tp_rowpar_forward_cap(const Config *c, float *out, const float *inp, const float *w, int T, int cap, int Cl, int OC);
void tp_colpar_dinp_cap(const Config *c, float *dinp, const float *dout, const float *w, int T, int cap, int C, int OCl);
// The same two for the experts' grouped products (megablox=true): group g's rows [rows[g],
// rows[g+1]) with its own weight of w (G,Cl,OC), resp. (G,C,OCl); T = rows[G] <= cap.
void tp_rowpar_forward_grouped(const Config *c, float *out, const float *inp, const float *w, const int *rows, int G,
                               int cap, int Cl, int OC);
void tp_colpar_dinp_grouped(const Config *c, float *dinp, const float *dout, const float *w, const int *rows, int G,
                            int cap, int C, int OCl);

#endif
