// pipeline/pipeline.c: the pipeline loop on one stage device (see pipeline.h).
//
//   gpipe (MaxText's loop)                        1f1b
//   stage 0 embeds every microbatch (state_io)    one loop over the 1F1B table: stage 0
//   forward loop: M*R + P - 1 ticks               embeds a microbatch at its first F, the
//   last stage: head + loss of every output       last stage runs the head as soon as an
//   backward loop: the same ticks reversed        output leaves, stage 0 the embedding's
//   stage 0: dense layers + embedding backward    backward as soon as a gradient arrives
//
// A tick: this stage runs its task of the table (pipeline/schedule.h), then every stage
// device takes part in the rotations of that tick (pipeline/shift.h): outputs to the next
// stage, gradients to the previous one; from the last stage to stage 0 (and back) when a
// microbatch starts its next repeat. Every device reads the same table, so each knows who
// sends what, and the collectives pair up; idle ticks compute nothing (MaxText's SPMD loop
// runs the bubble iterations on dummy data; the numbers it keeps are the same).
#include "pipeline/pipe.h"
#include "sharding/fsdp.h"
#include "base/memory.h"
#include "core/common.h"

// What this stage does at tick t: its task, then the two rotations.
static void run_tick(Pipe *P, int t) {
    int nstages = P->p.nstages, R = P->p.R, s = P->s;
    const PipeTask *k = schedule_at(&P->sc, t, s);
    float *fout = NULL, *bout = NULL;
    if (k->op == PP_F) {
        int j = pipe_job(P, k->mb, k->rep);
        float *x;
        if (s == 0 && k->rep == 0) {   // enters the pipeline: from state_io, or embedded now
            x = P->state_io[k->mb] ? P->state_io[k->mb] : stage_embed(P, k->mb);
            P->state_io[k->mb] = NULL;
        } else {
            x = P->shift_in[j];
            P->shift_in[j] = NULL;
        }
        if (!x) die("internal: stage %d has no input for microbatch %d repeat %d at tick %d", s, k->mb, k->rep, t);
        fout = stage_forward(P, k->mb, k->rep, x);
        if (s == nstages - 1 && k->rep == R - 1) {   // leaves the pipeline
            if (P->sc.kind == PP_GPIPE) P->state_io[k->mb] = fout;   // the head runs after the loop
            else P->grad_in[j] = stage_head(P, k->mb, fout);
            fout = NULL;
        }
    } else if (k->op == PP_B) {
        int j = pipe_job(P, k->mb, k->rep);
        float *dy = P->grad_in[j];
        P->grad_in[j] = NULL;
        if (!dy) die("internal: stage %d has no gradient for microbatch %d repeat %d at tick %d", s, k->mb, k->rep, t);
        bout = stage_backward(P, k->mb, k->rep, dy);
        if (s == 0 && k->rep == 0) {   // back at the pipeline's input
            if (P->sc.kind == PP_GPIPE) P->state_io[k->mb] = bout;   // the embedding's backward runs after the loop
            else stage_embed_backward(P, k->mb, bout);
            bout = NULL;
        }
    }
    // The rotations of this tick, if any stage sends.
    int fsend[256], bsend[256], anyf = 0, anyb = 0;
    for (int r = 0; r < nstages; r++) {
        const PipeTask *q = schedule_at(&P->sc, t, r);
        fsend[r] = q->op == PP_F && !(r == nstages - 1 && q->rep == R - 1);
        bsend[r] = q->op == PP_B && !(r == 0 && q->rep == 0);
        anyf |= fsend[r];
        anyb |= bsend[r];
    }
    if (anyf) {   // from stage s-1; from the last stage it is the microbatch's next repeat
        int from = (s - 1 + nstages) % nstages;
        const PipeTask *q = schedule_at(&P->sc, t, from);
        float *got = shift_rotate(&P->fwd, fout, fsend, s == 0 ? "circ_storage" : "shift");
        if (got) P->shift_in[pipe_job(P, q->mb, q->rep + (s == 0))] = got;   // s == 0: circ_storage
    }
    if (anyb) {   // from stage s+1; from stage 0 it is the microbatch's previous repeat
        int from = (s + 1) % nstages;
        const PipeTask *q = schedule_at(&P->sc, t, from);
        float *got = shift_rotate(&P->bwd, bout, bsend, s == nstages - 1 ? "circ_storage grad" : "shift grad");
        if (got) P->grad_in[pipe_job(P, q->mb, q->rep - (s == nstages - 1))] = got;
    }
}

static void run_loop(Pipe *P) {
    int nstages = P->p.nstages, M = P->p.M, R = P->p.R, s = P->s, impl = P->p.shift;
    size_t n = (size_t)P->Tm * P->D;
    if (P->sc.kind == PP_1F1B) {
        shift_init(&P->fwd, impl, P->stage, nstages, s, +1, n);
        shift_init(&P->bwd, impl, P->stage, nstages, s, -1, n);
        for (int t = 0; t < P->sc.nticks; t++) run_tick(P, t);
        shift_free(&P->fwd);
        shift_free(&P->bwd);
        return;
    }
    // MaxText's loop: the whole batch is embedded first (state_io holds the inputs).
    if (s == 0)
        for (int mb = 0; mb < M; mb++) P->state_io[mb] = stage_embed(P, mb);
    shift_init(&P->fwd, impl, P->stage, nstages, s, +1, n);
    for (int t = 0; t < P->sc.nfwd; t++) run_tick(P, t);
    shift_free(&P->fwd);
    // The head and the loss on the outputs, which give the backward loop its gradients.
    if (s == nstages - 1)
        for (int mb = 0; mb < M; mb++) {
            P->grad_in[pipe_job(P, mb, R - 1)] = stage_head(P, mb, P->state_io[mb]);
            P->state_io[mb] = NULL;
        }
    if (!P->train) return;
    shift_init(&P->bwd, impl, P->stage, nstages, s, -1, n);
    for (int t = P->sc.nfwd; t < P->sc.nticks; t++) run_tick(P, t);
    shift_free(&P->bwd);
    if (s == 0)
        for (int mb = 0; mb < M; mb++) {
            stage_embed_backward(P, mb, P->state_io[mb]);
            P->state_io[mb] = NULL;
        }
}

// After the loop: the loss, aux and expert counts summed over `stage` (every entry was
// written on one stage, so the sums are exact) into st; the loop's buffers freed.
static void run_collect(Pipe *P, FwdStats *st, int nmoe, size_t nleaf, size_t ncount) {
    int nseq = P->nseq, J = P->p.M * P->p.R;
    for (int j = 0; j < J; j++)
        if (P->shift_in[j] || P->grad_in[j] || P->saved[j] || (P->acts && P->acts[(size_t)j * P->p.lps].x))
            die("internal: stage %d ends with job %d still held", P->s, j);
    coll_all_reduce_double(P->stage, P->loss_leaf, nleaf);
    coll_all_reduce_double(P->stage, P->aux, (size_t)nmoe * nseq);
    if (P->counts) coll_all_reduce_long(P->stage, P->counts, ncount);
    mem_copy(st->loss_leaf, P->loss_leaf, sizeof(double) * nleaf);
    for (int r = 0; r < nmoe; r++)
        mem_copy(st->aux_seq + (size_t)r * st->aux_stride, P->aux + (size_t)r * nseq, sizeof(double) * nseq);
    if (P->counts) {   // device data, added on the host: a few counts per layer
        long *mine = mem_host_copy(st->expert_counts, sizeof(long) * ncount);
        long *stage = mem_host_copy(P->counts, sizeof(long) * ncount);
        for (size_t i = 0; i < ncount; i++) mine[i] += stage[i];
        mem_upload(st->expert_counts, mine, sizeof(long) * ncount);
        free(mine);
        free(stage);
    }
    mem_free(P->loss_leaf);
    mem_free(P->aux);
    mem_free(P->counts);
    free(P->shift_in); free(P->grad_in); free(P->saved); free(P->dli); free(P->state_io); free(P->dense);
    free(P->acts);
    free(P->tree); free(P->held);
    schedule_free(&P->sc);
}

// Set up, run, and hand the results over: gradients into m->grad_dst, statistics summed
// over `stage` into st.
static void run(Model *m, const int *ids, const int *targets, int B, int S, int train, float scale,
                float lb_coef, FwdStats *st, long seq0_of_device, int nseq, float *logits, int logits_at) {
    const Mesh *mesh = mesh_current();
    const Config *c = &m->cfg;
    const StateShard *sh = &m->shard;
    int dev = mesh_device_id(), L = c->base_num_decoder_layers;
    Pipe P;
    memset(&P, 0, sizeof P);
    P.m = m;
    P.p = pipeline_shape(c, mesh->size[AX_STAGE]);
    P.s = mesh_coord(mesh, dev, AX_STAGE);
    P.stage = mesh_group(mesh, dev, AXIS_BIT(AX_STAGE));
    P.train = train;
    P.logits = logits;
    P.logits_at = logits_at;
    if (logits) P.p.M = B;   // sampling: B copies of one sequence, a microbatch each
    schedule_build(&P.sc, train ? P.p.schedule : PP_GPIPE, P.p.nstages, P.p.M, P.p.R, !train);
    int M = P.p.M, J = M * P.p.R;
    P.Bm = B / M;
    P.S = S;
    P.Tm = P.Bm * S;
    P.D = c->base_emb_dim;
    P.ids = ids;
    P.targets = targets;
    P.scale = scale;
    P.lb_coef = lb_coef;
    // Training: microbatch k is sequences k*Bg/M .. of the batch, this device's piece of
    // each at brank*Bm; eval: this device's B consecutive sequences, cut in M.
    P.seq0 = seq0_of_device;
    P.stride = train ? nseq / M : P.Bm;
    P.nseq = nseq;
    P.crank = sh->crank;
    P.leaves_per_seq = S / cfg_leaf_tokens(c);
    int nmoe = MM_MAX(1, model_num_moe_layers(c));
    size_t nleaf = (size_t)sh->nctx * nseq * P.leaves_per_seq, ncount = (size_t)L * c->num_experts;
    P.loss_leaf = (double *)mem_alloc(MEM_TEMP, sizeof(double) * nleaf, "pipeline loss per leaf");
    P.aux = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)nmoe * nseq, "pipeline aux per sequence");
    if (st->expert_counts) P.counts = (long *)mem_alloc(MEM_TEMP, sizeof(long) * ncount, "pipeline expert counts");
    P.shift_in = calloc((size_t)J, sizeof(float *));
    P.grad_in = calloc((size_t)J, sizeof(float *));
    P.saved = calloc((size_t)J, sizeof(float *));
    P.dli = calloc((size_t)J * P.p.lps, sizeof(float *));
    P.state_io = calloc((size_t)M, sizeof(float *));
    P.dense = calloc((size_t)M * MM_MAX(1, P.p.first), sizeof(LayerActs));
    if (c->remat_policy != REMAT_FULL) P.acts = calloc((size_t)J * P.p.lps, sizeof(LayerActs));
    P.tree = calloc((size_t)sh->nunits, sizeof(GradTree));
    P.held = calloc((size_t)sh->nunits, 1);
    if (train)
        for (int u = 0; u < sh->nunits; u++)
            if (sh->here[u]) gradtree_begin(&P.tree[u], M, shard_len(sh, u), m->grad_dst + sh->local_off[u]);
    // pipeline_fsdp_ag_once: the stage's own layers, all repeats, gathered once and held
    // for the whole loop (tag params), instead of an all-gather at every tick that uses
    // them (forward, and again for the backward's recomputation). MaxText also keeps the
    // gradients gathered and reduce-scatters them once; here each microbatch's gradient is
    // still reduced as soon as it is made, because the canonical tree adds the batch
    // devices' shares of a microbatch before the microbatches (pipeline.h). So the switch
    // trades the gathered weights' memory for the all-gathers' bytes and time.
    // Context parallelism: the sum over `context` is the tree's outermost level, above the
    // microbatches (base/context.h), so each microbatch's gradient is reduced over the batch
    // devices only (as while accumulating: grad_partial), and over context after the loop.
    int context_after = train && sh->nctx > 1;
    if (context_after) m->grad_partial = 1;
    if (P.p.ag_once && sh->F > 1)
        for (int u = 1 + P.p.first; u <= L; u++)
            if (sh->here[u]) { model_unit_acquire(m, u); P.held[u] = 1; }

    run_loop(&P);

    for (int u = 0; u < sh->nunits; u++) {
        if (P.held[u]) model_unit_release(m, u);
        if (train && sh->here[u]) gradtree_end(&P.tree[u]);
    }
    if (train) model_set_grad_target(m, m->grad_dst);   // the leaves were bound in turn: back to the target
    // Over context now, unless the step accumulates microbatches (trainer/step.c adds them
    // first, then fsdp_grad_finish sums over context).
    if (context_after && m->grad_dst == m->grads_mem) fsdp_grad_finish(m, m->grads_mem);
    run_collect(&P, st, nmoe, nleaf, ncount);
}

void pipeline_train(Model *m, const int *ids, const int *targets, int B, int S, float scale, float lb_coef,
                    FwdStats *st) {
    const StateShard *sh = &m->shard;
    int M = pipeline_microbatches(&m->cfg);
    run(m, ids, targets, B, S, 1, scale, lb_coef, st, (long)sh->brank * (B / M), B * sh->nbatch, NULL, -1);
}

void pipeline_eval(Model *m, const int *ids, const int *targets, int B, int S, float lb_coef, FwdStats *st) {
    const StateShard *sh = &m->shard;
    run(m, ids, targets, B, S, 0, 0.0f, lb_coef, st, (long)sh->brank * B, B * sh->nbatch, NULL, -1);
}

int pipeline_sample_copies(const Config *c, int stages) {
    return pipeline_shape(c, stages).R > 1 ? stages : 1;
}

void pipeline_sample_logits(Model *m, const int *ids, const int *targets, int S, int at, float *row) {
    const StateShard *sh = &m->shard;
    int B = pipeline_sample_copies(&m->cfg, mesh_current()->size[AX_STAGE]);
    int nmoe = MM_MAX(1, model_num_moe_layers(&m->cfg)), nseq = B * sh->nbatch;
    size_t nleaf = (size_t)sh->nctx * nseq * (S / cfg_leaf_tokens(&m->cfg));
    double *leaf = (double *)mem_alloc(MEM_TEMP, sizeof(double) * nleaf, "sample loss per leaf");
    double *aux = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)nmoe * nseq, "sample aux");
    FwdStats st = {leaf, aux, nseq, NULL};
    run(m, ids, targets, B, S, 0, 0.0f, 0.0f, &st, (long)sh->brank * B, nseq, row, at);
    mem_free(leaf);
    mem_free(aux);
}
