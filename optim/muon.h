// optim/muon.h: opt_type=muon, MaxText's optax.contrib.muon (learning_rate, eps=adam_eps,
// beta=muon_beta, weight_decay=muon_weight_decay, consistent_rms=muon_consistent_rms,
// adam_b1, adam_b2, adam_eps_root, adam_weight_decay, Nesterov momentum, 5 Newton-Schulz
// steps with optax's coefficients) and MaxText's muon dimension numbers
// (maxtext/utils/muon_utils.py), which say per tensor, by its path, whether it is
// orthogonalized and which of its dimensions are the matrix's rows (reduction, fan-in) and
// columns (output, fan-out); the others are batch dimensions, each index its own matrix:
//   the embedding, the head (logits_dense), every norm scale: AdamW (Nesterov);
//   the experts' wi_0, wi_1, wo (exp, in, out): rows in, columns out, a matrix per expert;
//   attention's out (heads, head_dim, embed): rows heads x head_dim, columns embed;
//   query, key, value, MLA's wq_b, wkv_b (in, heads, head_dim): rows in, columns the rest;
//   every other kernel (in, out): the router's gate, the dense and shared MLPs, wq_a, wkv_a.
// A matrix update: mu = (1 - beta) g + beta mu; mu_hat the Nesterov moment; X = mu_hat /
// (||mu_hat||_F + eps), transposed when it has more rows than columns; 5 times A = X X^T,
// B = b A + (c A) A, X = a X + B X; then scaled by sqrt(max(1, fan_out / fan_in)) (or
// sqrt(max(fan_in, fan_out)) * muon_consistent_rms), weight decay added, times -lr.
//
// The state: mu for every weight (kept like AdamW's, one per weight of the device's shard)
// and nu for the AdamW tensors only, one per element the device holds. A matrix is
// orthogonalized whole: its momentum is gathered over fsdp (a unit at a time) and over the
// tensor or expert axes that cut its rows or columns (optim/tensor_box.h), then every device
// holding part of it runs the iteration on the same numbers with the same products, so the
// bits do not depend on the mesh. The Frobenius norm adds the squares in fixed point
// (kernels/optim.h squares_add, exact, so any device gets the same norm), where a square
// under 2^-64 (an element under 2.3e-10) counts as 0; the host reads each norm back (on a
// GPU, one synchronisation per matrix). Under ZeRO-1 (shard_optimizer_over_data) a data
// replica keeps the moments of its piece of each shard, makes that piece's Nesterov moment,
// gathers the other pieces' before the iteration, updates its piece of the weights and
// leaves the others' to optimizer_step's gather (as AdamW's ZeRO-1). With
// mu_dtype=bfloat16 both halves keep their first moment as bf16 bits (optax's mu_dtype, as
// AdamW keeps it: kernels/optim.h).
#ifndef MESHMOE_MUON_H
#define MESHMOE_MUON_H
#include <stddef.h>
#include "base/config.h"
#include "kernels/optim.h"

struct Model;

// Whether tensor `name` (MaxText's path, ndim dims) is orthogonalized: 1, with its rows the
// dims [nbatch, nbatch + nred) and its columns the rest, the batch dims before them. Dies if
// MaxText's dimension numbers give an order this layout does not have.
int muon_matrix_dims(const char *name, int ndim, int *nbatch, int *nred);
// Floats of the AdamW second moment this device keeps (the nu of the tensors not orthogonalized).
size_t muon_nu_floats(const struct Model *m);
// Where tensor i's nu lies in this device's m->v_mem: 0 if the tensor is orthogonalized or
// the device holds none of it; else elements [*k0, *k1) of its piece, one float each from *off.
int muon_nu_slot(const struct Model *m, int i, size_t *off, size_t *k0, size_t *k1);
// One update of this device's parameters (under ZeRO-1 its piece of them); t is 1-based; the
// gradient clipped as `clip` says.
void muon_update(struct Model *m, float lr, int t, GradClip clip);

#endif
