// model/vocab_tiling.c: the output head and the loss in token tiles (num_vocab_tiling).
//
//   for each tile of n/nt leaves (R = rows of the tile):
//     forward:  z (R,V) = nf[tile] @ W_out;  loss_forward(z) -> lse[tile], leaf losses
//     backward: z (R,V) = nf[tile] @ W_out again;  z := dl/dz (loss_backward)
//               dW_out += nf[leaf]^T z[leaf] for each leaf (the canonical LeafSum)
//               dnf[tile] = z @ W_out^T
#include "model/vocab_tiling.h"
#include "model/matmul.h"
#include "model/loss.h"
#include "model/precision.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "base/tensor.h"
#include "model/tensor_parallel.h"
#include "core/common.h"

int vocab_tiled(const Config *c) { return c->num_vocab_tiling > 1; }

// The leaves of this device's B*S tokens, checked against num_vocab_tiling.
static Leaves tiled_leaves(const Config *c, int B, int S) {
    Leaves lv = leaves_of(c, B, S);
    if (lv.n % c->num_vocab_tiling)
        die("num_vocab_tiling (%d) must divide this device's %ld leaves (%d sequences of %d tokens, leaves of %d "
            "tokens: reduce_leaf_tokens / context_reduce_chunks): a tile is a whole number of leaves, so that the "
            "loss and the gradients keep their canonical order; choose a divisor of %ld",
            c->num_vocab_tiling, lv.n, B, S, lv.len, lv.n);
    return lv;
}

void vocab_tiling_check(const Config *c, int B, int S) {
    if (vocab_tiled(c)) tiled_leaves(c, B, S);
}

// One tile: leaves [l0, l0+nl) in tree order, R = nl*len rows; row r is token
// leaf_token(lv, l0 + r/len) + r%len, so each leaf's len rows are consecutive on both
// sides. Contiguous when all the tile's tokens are consecutive rows (always without context
// chunks: tree order is then token order).
typedef struct { Leaves lv; long l0, nl; int R; int contiguous; long row0; } Tile;

static Tile tile_of(Leaves lv, int nt, int k) {
    Tile t = {lv, k * (lv.n / nt), lv.n / nt, 0, 1, 0};
    t.R = (int)(t.nl * lv.len);
    t.row0 = leaf_token(lv, t.l0);
    for (long i = 1; i < t.nl; i++)
        if (leaf_token(lv, t.l0 + i) != t.row0 + i * lv.len) t.contiguous = 0;
    return t;
}

// dst (R,w) = the tile's rows of src (T,w), leaf by leaf.
static void tile_gather(const Tile *t, float *dst, const float *src, int w) {
    int len = t->lv.len;
    for (long i = 0; i < t->nl; i++)
        kern()->loss->tile_gather_rows(dst + (size_t)i * len * w, src, leaf_token(t->lv, t->l0 + i), len, w);
}
// The tile's rows of dst (T,w) = src (R,w), leaf by leaf.
static void tile_scatter(const Tile *t, float *dst, const float *src, int w) {
    int len = t->lv.len;
    for (long i = 0; i < t->nl; i++)
        kern()->loss->tile_scatter_rows(dst, src + (size_t)i * len * w, leaf_token(t->lv, t->l0 + i), len, w);
}

// The tile's rows of src (T,w): src itself when contiguous, else a copy in *own (MEM_TEMP).
static const float *tile_rows(const Tile *t, const float *src, int w, float **own, const char *name) {
    *own = NULL;
    if (t->contiguous) return src + (size_t)t->row0 * w;
    *own = mem_floats(MEM_TEMP, (size_t)t->R * w, name);
    tile_gather(t, *own, src, w);
    return *own;
}
// The tile's targets (R), MEM_TEMP (small).
static int *tile_targets(const Tile *t, const int *targets) {
    int *tg = (int *)mem_alloc(MEM_TEMP, sizeof(int) * (size_t)t->R, "targets of one vocab tile");
    int len = t->lv.len;
    for (long i = 0; i < t->nl; i++)
        kern()->loss->tile_gather_targets(tg + (size_t)i * len, targets, leaf_token(t->lv, t->l0 + i), len);
    return tg;
}

// z (R,V) = the tile's logits nf (R,D) @ W_out, rounded as the whole logits are (cast
// point 16). MEM_TEMP: the only logits that exist.
static float *tile_logits(Model *m, const Tile *t, const float *nf) {
    int D = m->cfg.base_emb_dim, V = m->dims.vocab_size;
    float *z = mem_floats(MEM_TEMP, (size_t)t->R * V, "logits of one vocab tile");
    matmul_forward(z, nf, m->params.logits, t->R, D, V, 0);
    round_bf16(z, (size_t)t->R * V, cfg_bf16(&m->cfg));
    return z;
}

void vocab_tiled_loss_forward(Model *m, const int *targets, int B, int S, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, V = m->dims.vocab_size, L = c->base_num_decoder_layers;
    int nt = c->num_vocab_tiling;
    Leaves lv = tiled_leaves(c, B, S);
    m->lse = mem_floats(MEM_ACTIVATIONS, (size_t)T, "logsumexp");
    model_unit_acquire(m, L + 1);
    for (int k = 0; k < nt; k++) {
        Tile t = tile_of(lv, nt, k);
        float *own;
        const float *nf = tile_rows(&t, m->nf, D, &own, "final norm out of one vocab tile");   // (R,D)
        int *tg = tile_targets(&t, targets);                                                  // (R)
        float *z = tile_logits(m, &t, nf);                                                     // (R,V)
        float *lse = mem_floats(MEM_TEMP, (size_t)t.R, "logsumexp of one vocab tile");         // (R)
        // The tile's leaves are leaves l0.. of the device: their sums go to those places.
        loss_forward(lse, st->loss_leaf + t.l0, z, 0, tg, t.R, V, m->dims.vocab_first, tp_local_chunks(c),
                     c->z_loss_multiplier, leaves_flat(t.R, lv.len));
        tile_scatter(&t, m->lse, lse, 1);
        mem_free(lse); mem_free(z); mem_free(tg); mem_free(own);
    }
    model_unit_release(m, L + 1);
}

float *vocab_tiled_head_backward(Model *m, int B, int S, float scale) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, V = m->dims.vocab_size, nt = c->num_vocab_tiling;
    Leaves lv = tiled_leaves(c, B, S);
    float *dnf = mem_floats(MEM_TEMP, (size_t)T * D, "d final norm out");   // (T,D), zeroed
    // The weight gradient: one LeafSum over all tiles, fed leaf by leaf in tree order,
    // exactly as matmul_backward feeds it for the whole logits.
    LeafSum ls;
    leafsum_begin(&ls, lv, m->grads.logits, (size_t)D * V, "matmul dw leaf");
    for (int k = 0; k < nt; k++) {
        Tile t = tile_of(lv, nt, k);
        float *own, *own_lse;
        const float *nf = tile_rows(&t, m->nf, D, &own, "final norm out of one vocab tile");   // (R,D)
        const float *lse = tile_rows(&t, m->lse, 1, &own_lse, "logsumexp of one vocab tile");   // (R)
        int *tg = tile_targets(&t, m->targets);                                               // (R)
        float *z = tile_logits(m, &t, nf);   // (R,V) recomputed: the same bits as the forward's
        loss_backward(z, lse, tg, t.R, V, m->dims.vocab_first, c->z_loss_multiplier, scale);   // z := dl/dz
        prec_round(c, z, (size_t)t.R * V);
        for (long i = 0; i < t.nl; i++) {   // g (D,V) = nf[leaf]^T (D,len) @ dz[leaf] (len,V)
            int onto;
            float *g = leafsum_leaf_onto(&ls, &onto);
            size_t r0 = (size_t)i * lv.len;
            gemm(1, 0, D, V, lv.len, 1.0f, nf + r0 * D, D, z + r0 * V, V, (float)onto, g, V);
            leafsum_push(&ls);
        }
        // dnf[tile] (R,D) = dz @ W_out^T, a sum over the (split) vocabulary, per token.
        float *dt = t.contiguous ? dnf + (size_t)t.row0 * D
                                 : mem_floats(MEM_TEMP, (size_t)t.R * D, "d final norm out of one vocab tile");
        tp_colpar_dinp(c, dt, z, m->params.logits, t.R, D, V);
        if (!t.contiguous) {
            tile_scatter(&t, dnf, dt, D);
            mem_free(dt);
        }
        mem_free(z); mem_free(tg); mem_free(own_lse); mem_free(own);
    }
    leafsum_end(&ls);
    return dnf;
}
