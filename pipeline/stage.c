// pipeline/stage.c: what one stage computes in a tick: its chunk of layers forward (saving
// only what the pipeline's remat keeps) and backward (recomputing the rest), and, on the
// first and last stages, the parts outside the pipeline: the embedding and the dense
// first layers, the head and the loss.
//
// Remat inside the pipeline. MaxText's policy for a pipeline iteration saves the names
// "iteration_input" and "decoder_layer_input" together with whatever remat_policy saves.
// With remat_policy=full (which saves nothing of its own) the forward of a job keeps its
// input, the iteration_input, and frees every layer's internals; with
// pipeline_save_decoder_layer_input it also keeps each layer's input in a buffer of its own
// (for the chunk's first layer that is a second copy of the iteration_input, as MaxText's
// two stacked checkpoint buffers are). The backward recomputes the chunk's forward from
// what was saved: from the iteration_input all layers at once, holding every layer's
// activations; from the saved layer inputs one layer at a time, holding one layer's. The
// recomputation adds no statistics (no expert counts, aux loss into scratch): the forward
// already did. Any other policy: each layer of each job keeps what the policy keeps
// (model/remat.h remat_after_forward, its input among them, on the device or offloaded as
// the policy says) until the job's backward, which restores the rest layer by layer, as
// model_backward does without a pipeline.
//
// Gradients: per job, each unit's gradient is computed alone (a leaf of its own), reduced
// over the batch devices as model_backward does, and put at leaf `microbatch` of the
// unit's tree (pipeline/gradtree.h).
#include "pipeline/pipe.h"
#include "sharding/fsdp.h"
#include "model/precision.h"
#include "model/remat.h"
#include "base/memory.h"
#include "core/common.h"

// Weights: gathered per use, except the stage's own layers under pipeline_fsdp_ag_once,
// which were gathered once before the loop.
static void acquire(Pipe *P, int u) { if (!P->held[u]) model_unit_acquire(P->m, u); }
static void release(Pipe *P, int u) { if (!P->held[u]) model_unit_release(P->m, u); }

// Where microbatch mb's statistics go: its sequences' places in the batch, in this
// device's chunk (the leaves' order is chunk, then sequence, then leaf: base/context.h).
static FwdStats mb_stats(Pipe *P, int mb) {
    long seq = P->seq0 + (long)mb * P->stride;
    FwdStats st = {P->loss_leaf + ((long)P->crank * P->nseq + seq) * P->leaves_per_seq, P->aux + seq, P->nseq,
                   P->counts};
    return st;
}

// One microbatch's gradient of unit u: into a leaf buffer of the unit's tree (the first
// one is the gradient's destination itself; FSDP: the full unit, reduced into the leaf by
// fsdp_grad_end_into), then into the tree.
static float *leaf_begin(Pipe *P, int u) {
    Model *m = P->m;
    float *leaf = gradtree_buffer(&P->tree[u], "pipeline microbatch grads");
    if (m->shard.F == 1) model_bind_unit(m, &m->grads, u, leaf);   // the backward writes straight into it
    fsdp_grad_begin(m, u);
    return leaf;
}
static void leaf_end(Pipe *P, int u, int mb, float *leaf) {
    fsdp_grad_end_into(P->m, u, leaf);
    gradtree_push(&P->tree[u], mb, leaf);
}

// Layer l's backward for microbatch mb from what a keeps (restoring the rest), its
// gradient one leaf of the unit's tree; then a is freed. dy becomes d(layer input).
static void layer_backward(Pipe *P, int mb, int l, LayerActs *a, float *dy, float *dh, float *dn) {
    acquire(P, 1 + l);
    float *leaf = leaf_begin(P, 1 + l);
    model_layer_backward(P->m, l, a, dy, dh, dn, P->Bm, P->S, P->lb_coef);
    leaf_end(P, 1 + l, mb, leaf);
    release(P, 1 + l);
    model_layer_free(P->m, l, a);
}

float *stage_embed(Pipe *P, int mb) {
    Model *m = P->m;
    int T = P->Tm, first = P->p.first;
    FwdStats st = mb_stats(P, mb);
    float *x = mem_floats(MEM_ACTIVATIONS, (size_t)T * P->D, "x (layer input)");   // (T,D)
    model_unit_acquire(m, 0);
    model_embed_forward(m, x, P->ids + (size_t)mb * T, T);
    model_unit_release(m, 0);
    for (int l = 0; l < first; l++) {   // DeepSeek's dense layers, outside the pipeline's loop
        LayerActs *a = &P->dense[(size_t)mb * first + l];
        model_unit_acquire(m, 1 + l);
        float *y = model_layer_forward(m, l, a, x, P->Bm, P->S, P->lb_coef, &st);
        model_unit_release(m, 1 + l);
        if (P->train) remat_after_forward(m, l, a);   // what remat_policy keeps, as model_forward
        else model_layer_free(m, l, a);
        x = y;
    }
    return x;
}

void stage_embed_backward(Pipe *P, int mb, float *dx) {
    Model *m = P->m;
    int T = P->Tm, first = P->p.first;
    float *dh = mem_floats(MEM_TEMP, (size_t)T * P->D, "d h");
    float *dn = mem_floats(MEM_TEMP, (size_t)T * P->D, "d norm out");
    for (int l = first - 1; l >= 0; l--) layer_backward(P, mb, l, &P->dense[(size_t)mb * first + l], dx, dh, dn);
    float *leaf = leaf_begin(P, 0);
    model_embed_backward(m, dx, P->ids + (size_t)mb * T, P->Bm, P->S);
    leaf_end(P, 0, mb, leaf);
    mem_free(dh); mem_free(dn); mem_free(dx);
}

float *stage_head(Pipe *P, int mb, float *y) {
    Model *m = P->m;
    int T = P->Tm, L = m->cfg.base_num_decoder_layers;
    FwdStats st = mb_stats(P, mb);
    model_unit_acquire(m, L + 1);
    model_head_forward(m, y, T);
    model_unit_release(m, L + 1);
    model_loss_forward(m, P->targets + (size_t)mb * T, P->Bm, P->S, &st);
    if (P->logits && P->logits_at >= 0 && mb == 0) {   // sampling: the next token's logits
        float *row = model_logits_rows(m, (size_t)P->logits_at, 1);
        mem_copy(P->logits, row, sizeof(float) * (size_t)m->dims.vocab_size);
        mem_free(row);
    }
    float *dx = NULL;
    if (P->train) {
        model_head_unpack(m, T);
        model_unit_acquire(m, L + 1);
        float *leaf = leaf_begin(P, L + 1), *dnf;
        dx = model_head_backward(m, P->Bm, P->S, P->scale, &dnf);   // (T,D) d loss / d output
        leaf_end(P, L + 1, mb, leaf);
        model_unit_release(m, L + 1);
        mem_free(dnf);
    }
    model_head_free(m);   // y too: it was the head's input
    return dx;
}

// remat_policy other than full: the chunk's layers each keep what the policy keeps.
static float *chunk_forward_kept(Pipe *P, int mb, int rep, float *x) {
    Model *m = P->m;
    FwdStats st = mb_stats(P, mb);
    for (int i = 0; i < P->p.lps; i++) {
        int l = pipeline_layer(&P->p, P->s, rep, i);
        LayerActs *a = &P->acts[(size_t)pipe_job(P, mb, rep) * P->p.lps + i];
        acquire(P, 1 + l);
        float *y = model_layer_forward(m, l, a, x, P->Bm, P->S, P->lb_coef, &st);
        release(P, 1 + l);
        if (P->train) remat_after_forward(m, l, a);
        else model_layer_free(m, l, a);
        x = y;
    }
    return x;
}

static void chunk_backward_kept(Pipe *P, int mb, int rep, float *dy, float *dh, float *dn) {
    for (int i = P->p.lps - 1; i >= 0; i--)
        layer_backward(P, mb, pipeline_layer(&P->p, P->s, rep, i), &P->acts[(size_t)pipe_job(P, mb, rep) * P->p.lps + i],
                       dy, dh, dn);
}

float *stage_forward(Pipe *P, int mb, int rep, float *x) {
    if (P->acts) return chunk_forward_kept(P, mb, rep, x);
    Model *m = P->m;
    const Config *c = &m->cfg;
    int j = pipe_job(P, mb, rep), lps = P->p.lps;
    size_t n = (size_t)P->Tm * P->D;
    FwdStats st = mb_stats(P, mb);
    float *cur = x;
    for (int i = 0; i < lps; i++) {
        int l = pipeline_layer(&P->p, P->s, rep, i);
        int keep = P->train && (i == 0 || P->p.save_dli);   // this layer's input stays saved
        float *copy = NULL;
        if (P->train && P->p.save_dli && i == 0) {   // the chunk's input a second time: the second stacked buffer
            copy = mem_floats(MEM_ACTIVATIONS, n, "decoder_layer_input");
            mem_copy(copy, cur, sizeof(float) * n);
            act_pack(c, &copy, n);   // stored as the activations are (16-bit in bf16 mode)
        }
        LayerActs a;
        memset(&a, 0, sizeof a);
        acquire(P, 1 + l);
        float *y = model_layer_forward(m, l, &a, cur, P->Bm, P->S, P->lb_coef, &st);
        release(P, 1 + l);
        if (keep) {   // a.x is the layer's input as the layer keeps it (16-bit in bf16 mode)
            if (i == 0) P->saved[j] = a.x;   // iteration_input
            if (P->p.save_dli) P->dli[(size_t)j * lps + i] = i == 0 ? copy : a.x;   // decoder_layer_input
            a.x = NULL;
        }
        model_layer_free(m, l, &a);   // remat: the rest is recomputed by the backward
        cur = y;
    }
    return cur;
}

float *stage_backward(Pipe *P, int mb, int rep, float *dy) {
    Model *m = P->m;
    const Config *c = &m->cfg;
    int j = pipe_job(P, mb, rep), lps = P->p.lps, T = P->Tm, Bm = P->Bm, S = P->S;
    float *dh = mem_floats(MEM_TEMP, (size_t)T * P->D, "d h");
    float *dn = mem_floats(MEM_TEMP, (size_t)T * P->D, "d norm out");
    if (P->acts) {
        chunk_backward_kept(P, mb, rep, dy, dh, dn);
    } else if (P->p.save_dli) {
        // One layer at a time: the layer's backward recomputes it from its own saved input
        // (model/remat.h remat_restore, as remat_policy=full does without a pipeline).
        for (int i = lps - 1; i >= 0; i--) {
            int l = pipeline_layer(&P->p, P->s, rep, i);
            LayerActs a;
            memset(&a, 0, sizeof a);
            a.x = P->dli[(size_t)j * lps + i];
            layer_backward(P, mb, l, &a, dy, dh, dn);   // and the saved input freed with a
            P->dli[(size_t)j * lps + i] = NULL;
        }
        mem_free(P->saved[j]);
    } else {
        // The whole chunk from the iteration_input, every layer's activations held. The
        // recomputation's statistics go to scratch (the forward counted them already).
        int nmoe = MM_MAX(1, model_num_moe_layers(c));
        double *aux = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)nmoe * Bm, "recompute aux (discarded)");
        FwdStats rs = {NULL, aux, Bm, NULL};
        LayerActs *a = calloc((size_t)lps, sizeof(LayerActs));
        float *cur = P->saved[j];
        act_unpack(c, &cur, (size_t)T * P->D);
        for (int i = 0; i < lps; i++) {
            int l = pipeline_layer(&P->p, P->s, rep, i);
            acquire(P, 1 + l);
            cur = model_layer_forward(m, l, &a[i], cur, Bm, S, P->lb_coef, &rs);
        }
        mem_free(cur);   // the chunk's output is not needed for its backward
        for (int i = lps - 1; i >= 0; i--) {
            int l = pipeline_layer(&P->p, P->s, rep, i);
            float *leaf = leaf_begin(P, 1 + l);
            model_layer_backward(m, l, &a[i], dy, dh, dn, Bm, S, P->lb_coef);
            leaf_end(P, 1 + l, mb, leaf);
            release(P, 1 + l);
            model_layer_free(m, l, &a[i]);   // a[0].x is the iteration_input
        }
        free(a);
        mem_free(aux);
    }
    P->saved[j] = NULL;
    mem_free(dh); mem_free(dn);
    return dy;   // now d loss / d(chunk input)
}
