// model/matmul.h: the one matrix multiply every layer uses, with its backward.
// Weights are stored as MaxText kernels: w is (C, OC) row-major and out = inp @ w.
// A weight with a 16-bit copy (bf16_storage, model/weights16.h) is multiplied as
// that copy through the 16-bit kernels (kernels/matmul16.h), with the same bits; so are the
// weight gradients' products under it, their operands packed for the call.
// Every product is a kernel (kernels/matmul.h): on the CPU the ordered GEMM, where each
// output element is one fused multiply-add chain over k in order, whatever the shapes
// around it (kernels/cpu/gemm.c); with matmul_impl=openblas OpenBLAS does the work instead
// (not row-stable).
#ifndef MESHMOE_MATMUL_H
#define MESHMOE_MATMUL_H
#include "base/context.h"
#include "kernels/matmul.h"   // blas_description, blas_set_threads, blas_prefer_fast_kernels

// out (T,OC) = inp (T,C) @ w (C,OC), or out += ... when accumulate is 1.
void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate);

// Backward of matmul_forward. Either output may be NULL (not needed).
//   dinp (T,C)  += dout (T,OC) @ w^T
//   dw   (C,OC) += sum over tokens of inp^T dout, summed leaf by leaf along the canonical
//                  tree (the leaves of the T = leaf.B * leaf.S tokens: base/context.h).
void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, Leaves leaf);
// The same with every product in float32 for operands that are not bf16-valued in bf16 mode
// (the router's gate: its logits' gradient, and with float32_gate_logits its weights).
// The CPU runs the same kernels either way; gpu_matmul=cublas_bf16 runs matmul_backward's
// products on tensor cores, which is exact only for bf16-valued operands.
void matmul_backward_float32(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             int T, int C, int OC, Leaves leaf);
// One leaf of a weight gradient: g (C,OC) = inp^T (C,len) @ dout (len,OC), or g += ... when
// onto is 1 (the leaf added onto the one before it, base/treesum.h). inp and dout hold len
// contiguous rows; in bf16 mode both are bf16-valued.
void matmul_dw_leaf(float *g, const float *inp, const float *dout, int len, int C, int OC, int onto);

// All the leaves of a weight gradient at once: dw (C,OC) += the leaves' products added along
// the canonical tree, leaf l over rows off[l] .. off[l+1]-1 of inp (.,C) and dout (.,OC)
// (off: n+1 host ints from 0, never decreasing). The same bits as matmul_dw_leaf leaf by
// leaf through a LeafSum of one chunk (base/context.h), without its buffers: the kernel
// merges the leaves tile by tile (kernels/matmul.h:matmul_backward_dw_leaves).
void matmul_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C, int OC);

// An operand that several products read in turn (the input of attention's q, k and v; of the
// MLP's and the experts' wi_0 and wi_1 and their weight gradients; a gradient read by its
// input's and its weight's products): under bf16_storage, whose products take 16-bit
// operands, packed once by matmul_share for every product that reads it (or rows of it)
// until matmul_unshare (the same x and n), where each product packed its own copy. x must
// not change between the two. Elsewhere both do nothing; the products are the same, so are
// the bits. matmul_share_cap allocates the copy for cap elements, of which it packs n: an
// operand whose rows follow the routing (an expert's, under expert parallelism) takes the
// bytes of their bound, as the operand itself does, so that a step's memory does not
// depend on the routing (the planner routes otherwise than the step: kernels/dry.c).
void matmul_share(const float *x, size_t n);
void matmul_share_cap(const float *x, size_t n, size_t cap);
void matmul_unshare(const float *x, size_t n);

// An operand made as 16-bit numbers by its kernel (kernels/mlp.h's packed forms, under
// bf16_storage): matmul_packed(h, n) returns the `const float *` that the layers hand
// on to the products like any operand, rows of it included (element i at p + i), and the
// products read h's numbers in place. That pointer lies in an address range reserved for
// such operands and never mapped, where no array can be: a read of it as floats faults at
// once. A
// product whose weight has no 16-bit copy dies on it; matmul_share and matmul_unshare leave
// it as it is. matmul_packed_free(p) ends it and frees h; given any other array it frees
// that (mem_free), so that a layer frees its operands one way whichever they are.
const float *matmul_packed(uint16_t *h, size_t n);
void matmul_packed_free(const float *p);
// A copy of the 16-bit operand p's numbers, in a new MEM_TEMP array `name` of room for cap,
// as a 16-bit operand of its own.
const float *matmul_packed_copy(const float *p, size_t cap, const char *name);

// "ordered" (default), "openblas" or "plain" (config key matmul_impl; plain's kernels are a
// backend of their own, kernels/cpu/backend.c), the CPU backend's choice made
// once at start-up; dies on anything else. gpu_cublas: the GPU runs cuBLAS (gpu_matmul=cublas or
// cublas_bf16).
void matmul_set_impl(const char *impl, int gpu_cublas);

// 1 when a product's output row depends on its own input row only, never on how many rows
// share the call or where it sits among them (the ordered GEMM on either backend, the plain
// loop); 0 under OpenBLAS or cuBLAS, whose blocking follows the shape.
int matmul_rows_independent(void);

// The same products with one contraction cut into `chunks` equal pieces whose partial
// products are added along the canonical tree (base/treesum.h). Tensor parallelism
// (base/tensor.c) gives each device a whole subtree of pieces, so the all-reduce of the
// devices' partials adds them in the same order as one device does: the sum is
// bit-identical to the single-device one.
// out (T,OC) = inp (T,C) @ w (C,OC), the sum over C in `chunks` pieces (out is overwritten).
void matmul_forward_chunked(float *out, const float *inp, const float *w, int T, int C, int OC, int chunks);
// dinp (T,C) = dout (T,OC) @ w^T, the sum over OC in `chunks` pieces (dinp is overwritten).
void matmul_dinp_chunked(float *dinp, const float *dout, const float *w, int T, int C, int OC, int chunks);

// The experts' products, all of a layer's experts in one call each (megablox=true,
// model/moe_experts.c; kernels/matmul.h, the *_grouped kernels): group g owns the rows
// [rows[g], rows[g+1]) (G+1 host ints from 0) and its weight is the g-th of G stacked ones.
// Each group's rows get the bits the call without _grouped gives them on their own.
// out (R,OC) = inp (R,C) @ w_g (C,OC) on group g's rows; w (G,C,OC).
void matmul_forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC);
// dinp (R,C) += dout (R,OC) @ w_g^T on group g's rows.
void matmul_dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC);
// matmul_forward_chunked and matmul_dinp_chunked of each group's rows with its weight.
void matmul_forward_chunked_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C,
                                    int OC, int chunks);
void matmul_dinp_chunked_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC,
                                 int chunks);
// matmul_dw_leaves of each group: dw_g (C,OC) of dw (G,C,OC) += group g's n leaves, leaf l
// over the rows off[g*n+l] .. off[g*n+l+1] (off: G*n+1 host ints from 0); a group without
// rows adds nothing.
void matmul_dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n, int G, int C,
                              int OC);

// The products whose result is rounded to bf16 at once and kept as 16-bit numbers (under
// bf16_storage: SwiGLU's inputs h0, h1 and the gradient of its activation, model/mlp.h): out
// holds T*OC (dinp T*C) 16-bit numbers, as packed_alloc makes them (model/precision.h), each
// the product's sum rounded (kernels/matmul16.h: the *_round16 kernels), with no float32
// output in between; the bits of the float32 product followed by packing. A weight without a
// 16-bit copy takes that way itself: its product into a float32 temporary, then packed.
// out = bf16(inp (T,C) @ w (C,OC)).
void matmul_forward_round16(float *out, const float *inp, const float *w, int T, int C, int OC);
// dinp = bf16(dout (T,OC) @ w^T), written (matmul_backward's dinp onto zeros, then rounded).
void matmul_dinp_round16(float *dinp, const float *dout, const float *w, int T, int C, int OC);
// The same on the experts' groups of rows, as matmul_forward_grouped and matmul_dinp_grouped.
void matmul_forward_grouped_round16(float *out, const float *inp, const float *w, const int *rows, int G, int C,
                                    int OC);
void matmul_dinp_grouped_round16(float *dinp, const float *dout, const float *w, const int *rows, int G, int C,
                                 int OC);

// The raw GEMM: C (M,N) = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X or X^T.
// alpha must be 1 and beta 0 or 1 (all the model needs).
// lda/ldb/ldc are the row strides of A, B, C as stored.
void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

#endif
