// model/model.h: the decoder stack (docs/model.md#decoder-stack): its parameter layout,
// names and initialisation (model/params.c), and one microbatch's forward and backward
// passes (model/model.c).
#ifndef MESHMOE_MODEL_H
#define MESHMOE_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "base/config.h"
#include "model/params.h"
#include "model/attention.h"
#include "model/mla.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/dims.h"
#include "base/shard.h"
#include "base/partition.h"

// One tensor of the layout: its MaxText-style name, shape, place in the flat buffer and init.
// Under tensor or expert parallelism `shape` is this device's piece of `gshape`.
typedef struct {
    char name[112];     // MaxText's path, e.g. "decoder/layers_0/self_attention/query/kernel"
    char key[112];      // the family-independent key "decoder/layers_<l>/..." that seeds the init
    int ndim;
    int shape[4];       // local shape (what this device holds)
    int gshape[4];      // global shape
    int lindex[4];      // this device's piece along each dimension
    const char *logical[4];   // logical axis names (base/partition.h)
    PartSpec part;      // the partition spec those names give on this mesh
    size_t offset;      // in floats, from the start of the flat buffer
    size_t size;        // floats
    float init_std;     // > 0: truncated normal with this std (normal(0, std) for the embedding); 0: constant
    float init_const;   // the constant (1 for norm scales)
    int truncated;      // 1: truncated to +-2 std
} ParamSpec;

// What one layer's forward pass keeps for its backward pass.
typedef struct {
    float *x;           // (T,D) layer input (the residual stream)
    float *n1, *rstd1;  // (T,D), (T) pre-attention RMSNorm output and its 1/rms
    AttentionSaved attn;
    MLASaved mla;
    float *h;           // (T,D) residual after attention
    float *n2, *rstd2;  // (T,D), (T) post-attention RMSNorm
    float *scale1, *scale2;   // the norms' broadcast scales, rmsnorm_fused_scale=false only (model/rmsnorm.h)
    MlpSaved mlp;
    MoeSaved moe;
    float *ffn_y;       // (nrows,D) a MoE layer's expert outputs, kept by remat while the rest of
                        // its FFN is recomputed (mlpwo kept, mlpwi remat: model/remat.c), or NULL
} LayerActs;

// What a sharding strategy does around the model's walk over its units. The model does not
// know the strategy: sharding/fsdp.c fills these in (fsdp_attach) and the model calls them
// at the moments named below; NULL members, or no hooks at all, do nothing: the weights
// are the model's own and gradients land where model_set_grad_target bound them.
struct Model;
typedef struct ShardHooks {
    void (*gather)(struct Model *m, int u);       // unit u's weights whole on this device, bound
    void (*release)(struct Model *m, int u);      // unit u's gathered weights no longer needed
    void (*prefetch)(struct Model *m, int u);     // start gathering unit u early (overlap_collectives)
    void (*drain)(struct Model *m);               // wait for every prefetch in flight
    void (*grad_begin)(struct Model *m, int u);   // unit u's weight gradients are about to be written
    void (*grad_end)(struct Model *m, int u);     // ... and are written: reduce them over the mesh
    void (*detach)(struct Model *m);              // free what the strategy holds (model_free)
} ShardHooks;

typedef struct Model {
    Config cfg;             // the model and the run, global dimensions (the same on every device)
    LocalDims dims;         // this device's heads, widths and vocabulary slice (model/dims.h)
    int ntensors;
    ParamSpec *specs;       // (ntensors) the layout, in order
    size_t nparams;         // floats in the flat buffer
    StateShard shard;       // this device's share of the state (sharding/fsdp.h)
    float *params_mem, *grads_mem;   // (shard.local_n) each: nparams on one device
    float *m_mem, *v_mem;   // (shard.local_n / shard.Z) AdamW moments; adafactor: v_mem only, per tensor (optim/adafactor.h);
                            // muon: m_mem as AdamW's, v_mem for its AdamW tensors only (optim/muon.h)
    uint16_t *m16_mem;      // (shard.local_n / shard.Z) mu_dtype=bfloat16: AdamW's first moment as bf16 bits, m_mem NULL
    float *grad_dst;        // where finished gradients go (grads_mem, or a microbatch's buffer)
    int grad_partial;       // 1: the gradients are a microbatch's, per chunk slot; the sum over context waits (sharding/fsdp.h)
    float **gathered;       // (2*units) FSDP: all-gathered weights [2u] and full grads [2u+1] in use
    float **bf16_copy;      // (units) bf16 mode: the rounded weights of a unit in use, or NULL
    uint16_t **copy16;      // (units) the same as 16-bit numbers under bf16_storage (model/weights16.h), or NULL
    uint16_t *copy16_kept;  // (shard.local_n) every unit's 16-bit copy where model_copy16_kept, or NULL
    int copy16_step;        // the step whose weights copy16_kept holds (-1: none yet)
    struct Prefetch *prefetch; // overlap_collectives: the unit gathered in the background (sharding/overlap.h)
    const ShardHooks *hooks;   // the sharding strategy's part of the walk (above), or NULL
    Params params, grads;   // pointers into params_mem / grads_mem
    float *router_bias;     // (L, E) DeepSeek selection bias (non-trained state), or NULL
    float *ema;             // (shard.local_n) EMA of the weights (ema_decay > 0), or NULL
    int step;               // optimizer updates done
    int training;           // 1 while compute_gradients runs: forwards keep what a backward reads per remat_policy
    // One microbatch's forward state.
    int B, S;
    const int *ids;         // (B,S)
    const int *targets;     // (B,S)
    LayerActs *acts;        // (L)
    float *xL, *nf, *rstdf; // (T,D) final residual, final norm output, (T)
    float *scalef;          // the final norm's broadcast scale (rmsnorm_fused_scale=false), or NULL
    float *logits;          // (T,V) logits, overwritten by dlogits in the backward pass (NULL with num_vocab_tiling > 1)
    int logits16;           // 1: logits holds T*V 16-bit numbers (bf16 bits, under bf16_storage), never read as floats
    float *lse;             // (T)
} Model;

// Where one forward pass writes its statistics. Loss and aux loss are kept per leaf and
// per sequence so that the step can add them along the canonical tree (base/treesum.h):
// the printed loss is then bit-identical however the batch is split.
typedef struct {
    double *loss_leaf;      // (leaves_of(c,B,S).n) written: sum of token losses per leaf, tree order
    double *aux_seq;        // (n_moe, stride) written: load-balance loss per MoE layer and sequence
    int aux_stride;         // sequences per row of aux_seq (the global batch)
    long *expert_counts;    // (L, E) += assignments per expert, or NULL
} FwdStats;

// ---- The parameter layout, MaxText's names, initialisation (model/params.c) ----

// MaxText's unscanned path of the tensor whose layout key (ParamSpec.key) is `key`.
void model_maxtext_name(const Config *c, const char *key, char *name, size_t cap);
// prefix + the path of layer l's routing bias (the gate's bias, DeepSeek's selection bias).
void model_bias_name(const Config *c, int l, const char *prefix, char *buf, size_t cap);
// Fill the layout of every tensor for cfg. Returns the count; specs may be NULL to count.
int model_layout(const Config *c, ParamSpec *specs, size_t *nparams);
// The layout's cuts on `mesh` checked from the calling thread, before its device threads
// start: a tensor or head count a mesh axis does not divide stops the run with one message.
void model_check_mesh(const Config *c, const Mesh *mesh);
// Set up the model in two steps, so that the optimizer state (optim/, above the model) is
// allocated between them as a training run lays out memory (trainer/step.c:step_init):
// model_init_layout: the layout, this device's share of it (base/shard.h), parameters
// (MEM_PARAMS) and gradients (MEM_GRADS); model_init_weights: the weights drawn from the
// seed, the pointers bound, the routing bias.
void model_init_layout(Model *m, const Config *c);
void model_init_weights(Model *m);
void model_free(Model *m);
// Where finished gradients go (the gradient buffer, or a microbatch's leaf): with whole
// units on this device the backward writes straight into buf. _partial: while accumulating
// microbatches, buf holds one copy of the local layout per chunk slot (sharding/fsdp.h).
void model_set_grad_target(Model *m, float *buf);
void model_set_grad_partial(Model *m, float *buf);
// Bind the struct of pointers `p` to a flat buffer laid out by model_layout.
void model_bind(const Model *m, Params *p, float *base);
// The unit (sharding/fsdp.h) a tensor belongs to: 0 embedding, 1+l layer l, L+1 head.
int model_unit_of(const Config *c, const char *name);
// Bind only unit u's pointers of `p`, to buf holding that unit's floats.
void model_bind_unit(const Model *m, Params *p, int u, float *buf);
int model_num_moe_layers(const Config *c);
// The global row-major index (in gshape) of element i of tensor s as this device holds it
// (row-major in its local shape): the device's piece of each cut dimension, shifted.
size_t model_global_index(const ParamSpec *s, size_t i);

// ---- Forward and backward of one microbatch (model/model.c) ----

// Forward pass over B sequences of S tokens (ids, targets: (B,S); under context parallelism
// S is this device's part of each sequence, base/context.h). Keeps the activations
// for model_backward. lb_coef: the load-balance loss's coefficient (model_lb_coef, moe_forward).
void model_forward(Model *m, const int *ids, const int *targets, int B, int S, float lb_coef, FwdStats *st);
// Backward pass of the last forward; grads += d(loss)/d(params) with the loss scaled by
// `scale` (1 / tokens in the global batch). Frees the activations.
void model_backward(Model *m, float scale, float lb_coef);
// Drop the activations of the last forward without a backward pass (eval, sampling).
void model_discard(Model *m);

// The pieces model_forward and model_backward are made of, also run one by one by the
// pipeline (pipeline/). Each is pure computation: the caller puts the weights in place
// (model_unit_acquire) and brackets a backward piece with model_grad_begin/end. T = B*S.
// Unit u's weights ready for use / done with: the FSDP all-gather, and in bf16 mode the
// rounded copy the layers compute with (model/precision.h).
void model_unit_acquire(Model *m, int u);
void model_unit_release(Model *m, int u);
// Whether the 16-bit copy of the weights (bf16_storage=kept) is kept from one update to the
// next: the device holds whole units (no FSDP) in device memory (no parameter offload).
int model_copy16_kept(const Model *m);
// Around unit u's backward piece: the strategy's gradient buffers and reduction (ShardHooks).
void model_grad_begin(Model *m, int u);
void model_grad_end(Model *m, int u);
// x (T,D) = Embed(ids); grads.embedding += the embedding's gradient from dx (T,D).
void model_embed_forward(Model *m, float *x, const int *ids, int T);
void model_embed_backward(Model *m, const float *dx, const int *ids, int B, int S);
// Decoder layer l on x (T,D), which `a` takes over (a->x = x; in bf16 mode replaced by a
// 16-bit copy, as the layer's other saved activations); keeps its activations in a and
// returns its output (T,D) (MEM_ACTIVATIONS). st: aux loss and expert counts.
float *model_layer_forward(Model *m, int l, LayerActs *a, float *x, int B, int S, float lb_coef, FwdStats *st);
// The layer's two halves (what model_layer_forward runs, and what a remat policy recomputes):
// the attention block h = x + Attention(RMSNorm_pre(x)) keeps n1, rstd1 and attention's
// saved tensors in a and returns h (T,D); the FFN block x' = h + FFN(RMSNorm_post(h)) keeps
// n2, rstd2 and the FFN's saved tensors and returns x' (T,D). Both MEM_ACTIVATIONS.
float *model_attn_block_forward(Model *m, int l, LayerActs *a, const float *x, int B, int S);
// The attention block's second part alone: h = x + Wo attention(q, k, v) from the q, k, v
// (and MLA's intermediates) that `a` kept (remat_policy=save_qkv_proj); sets o and stats.
// x NULL (the policy kept h: minimal, save_dot_except_mlp): o and stats alone, returns NULL.
float *model_attn_core_forward(Model *m, int l, LayerActs *a, const float *x, int B, int S);
float *model_ffn_block_forward(Model *m, int l, LayerActs *a, const float *h, int B, int S, float lb_coef,
                               FwdStats *st);
// What a recomputation of the FFN block needs: n2, rstd2 and the FFN's saved tensors in a,
// without the block's output, which its backward does not read (the dense MLP's and the
// shared experts' wo products, the MoE combine and the residual add are left out, as XLA
// leaves out of a rematerialised forward what the backward does not use).
void model_ffn_block_saved(Model *m, int l, LayerActs *a, const float *h, int B, int S, float lb_coef,
                           FwdStats *st);
// dx (T,D): on entry d loss/d(layer output), on return d loss/d(layer input); dh, dn:
// (T,D) scratch. grads.layers[l] += the layer's weight gradients. `a` may hold less than the
// forward saved (a remat policy, or the pipeline's: at least a->x): the rest is recomputed.
void model_layer_backward(Model *m, int l, LayerActs *a, float *dx, float *dh, float *dn, int B, int S, float lb_coef);
// Free everything `a` holds, a->x included (after the backward, or instead of it).
void model_layer_free(Model *m, int l, LayerActs *a);
// Output head on the final residual x (T,D) (taken over as m->xL): final norm and logits
// (needs the head's weights); then the loss against targets (T), its leaves into st.
void model_head_forward(Model *m, float *x, int T);
void model_loss_forward(Model *m, const int *targets, int B, int S, FwdStats *st);
// Loss and head backward, after model_head_unpack (bf16 mode: the saved activations back
// to floats): grads of the head +=; returns d loss/d xL (T,D) and in *dnf the final norm's
// output gradient (T,D), both MEM_TEMP for the caller to free.
void model_head_unpack(Model *m, int T);
float *model_head_backward(Model *m, int B, int S, float scale, float **dnf);
void model_head_free(Model *m);
// Rows t0 .. t0+n-1 of this device's logits (n, V/tensor) as floats, 16-bit ones widened: a
// new MEM_TEMP array for the caller to free (sampling and the parity dump read them).
float *model_logits_rows(const Model *m, size_t t0, size_t n);
// Coefficient of sum_{b,e} f*Pbar for the load-balance loss (0 when off); global_seqs:
// sequences in the whole step.
float model_lb_coef(const Config *c, int global_seqs);
#endif
