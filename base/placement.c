// base/placement.c: the pipeline's shape from the config keys, which stage holds which
// unit of the model, and the checks (one clear line each) of what cannot be pipelined.
#include "base/placement.h"
#include "core/common.h"

PipeShape pipeline_shape(const Config *c, int stages) {
    PipeShape p;
    memset(&p, 0, sizeof p);
    p.nstages = stages;
    p.first = c->first_num_dense_layers;
    p.schedule = c->pipeline_schedule == SCHEDULE_1F1B ? PP_1F1B : PP_GPIPE;
    p.shift = c->pipeline_shift_impl == SHIFT_SLICE ? PP_SLICE : PP_PPERMUTE;
    p.save_dli = c->pipeline_save_decoder_layer_input;
    p.ag_once = c->pipeline_fsdp_ag_once;
    int L = c->base_num_decoder_layers, Lp = L - p.first, P = stages;
    // MaxText: num_pipeline_microbatches -1 means one per stage.
    p.M = c->num_pipeline_microbatches == -1 ? P : c->num_pipeline_microbatches;
    if (p.M < 1) die("num_pipeline_microbatches must be positive or -1 (one per stage), got %d", p.M);
    if (p.M % P)
        die("num_pipeline_microbatches (%d) must be a multiple of ici_pipeline_parallelism (%d): the loop hands "
            "each stage the microbatches in groups of one per stage", p.M, P);
    if (Lp < 1)
        die("nothing to pipeline: base_num_decoder_layers %d minus first_num_dense_layers %d leaves no layer for "
            "the %d stages", L, p.first, P);
    // Layers per stage and repeats: give one (or neither: MaxText's 1 layer per stage).
    int lps = c->num_layers_per_pipeline_stage, R = c->num_pipeline_repeats;
    if (lps < 0) die("num_layers_per_pipeline_stage must be positive (or 0: derived), got %d", lps);
    if (R == 0 || R < -1) die("num_pipeline_repeats must be positive or -1 (derived), got %d", R);
    if (lps == 0 && R == -1) lps = 1;
    if (lps == 0) {
        if (Lp % (P * R))
            die("the %d pipelined layers (base_num_decoder_layers %d - first_num_dense_layers %d) do not split into "
                "%d stages x num_pipeline_repeats=%d", Lp, L, p.first, P, R);
        lps = Lp / (P * R);
    }
    if (R == -1) {
        if (Lp % (P * lps))
            die("the %d pipelined layers (base_num_decoder_layers %d - first_num_dense_layers %d) do not split into "
                "%d stages x num_layers_per_pipeline_stage=%d", Lp, L, p.first, P, lps);
        R = Lp / (P * lps);
    }
    if (lps * P * R != Lp)
        die("the %d pipelined layers (base_num_decoder_layers %d - first_num_dense_layers %d) are not %d stages x "
            "num_layers_per_pipeline_stage=%d x num_pipeline_repeats=%d = %d", Lp, L, p.first, P, lps, R, lps * P * R);
    p.lps = lps;
    p.R = R;
    return p;
}

void pipeline_check(const Config *c, const int size[MESH_NAXES], int ndev) {
    int P = size[AX_STAGE];
    if (P == 1) return;
    PipeShape p = pipeline_shape(c, P);
    if (cfg_context_chunks(c) > size[AX_CONTEXT])
        die("ici_pipeline_parallelism=%d with context_reduce_chunks=%d on %d context device%s is not supported: the "
            "pipeline's gradient tree has the microbatches as its leaves, so each device may hold one chunk of each "
            "sequence; use context_reduce_chunks=0 (one chunk per context device)", P, cfg_context_chunks(c),
            size[AX_CONTEXT], size[AX_CONTEXT] > 1 ? "s" : "");
    // The devices along `stage` share one batch: B sequences each (train.c's split).
    int nbatch = size[AX_DATA] * size[AX_FSDP] * size[AX_EXPERT];
    int Bg = c->per_device_batch_size * ndev, B = Bg / nbatch;
    if (B % p.M)
        die("the %d sequences each pipeline runs per step (per_device_batch_size %d x %d devices / %d devices "
            "sharing the batch) do not split into num_pipeline_microbatches=%d", B, c->per_device_batch_size,
            ndev, nbatch, p.M);
}

int pipeline_stage_of_unit(const Config *c, int stages, int u) {
    int L = c->base_num_decoder_layers;
    if (stages == 1) return 0;
    PipeShape p = pipeline_shape(c, stages);
    if (u <= p.first) return 0;           // the embedding and the dense first layers
    if (u == L + 1) return stages - 1;    // the final norm and the logits
    return ((u - 1 - p.first) / p.lps) % stages;
}

int pipeline_active(void) {
    const Mesh *mesh = mesh_current();
    return mesh && mesh->size[AX_STAGE] > 1;
}

int pipeline_microbatches(const Config *c) {
    const Mesh *mesh = mesh_current();
    if (!mesh || mesh->size[AX_STAGE] == 1) return 1;
    return pipeline_shape(c, mesh->size[AX_STAGE]).M;
}
