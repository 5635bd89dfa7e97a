// trainer/sample.c: autoregressive sampling. Each new token re-runs the forward pass over
// the last max_target_length tokens (no KV cache: this is a trainer, and the point is to
// show what was learned, not to be fast).
//
// Every device of a mesh runs the sampling loop (the forward pass is a collective under FSDP
// and tensor parallelism) and draws the same token; only device 0 prints. Under context
// parallelism the sequence is padded to a whole number of parts (token 0, no target: a
// causal model's last real position does not see what follows it, and the MoE capacity is
// counted over the real tokens) and each device runs its part; on a pipeline mesh the
// stages run it in turn. The device that makes the logits of the last real position gives
// them to the others, so every mesh draws one device's tokens.
#include "trainer/sample.h"
#include "trainer/sampling.h"
#include "base/collectives.h"
#include "base/context.h"
#include "base/memory.h"
#include "base/mesh.h"
#include "base/net.h"
#include "base/placement.h"
#include "base/tensor.h"
#include "core/common.h"
#include "pipeline/pipeline.h"
#include <stdlib.h>
#include <unistd.h>

static int talk(void) { return mesh_device_id() == 0; }

// On a terminal the prompt is printed in bold, so that what the model wrote stands apart
// from what it was given (plain where NO_COLOR is set and not empty, the no-color.org
// convention); into a file or a pipe, the tokens alone. Not over MPI processes: mpirun
// gives them a terminal of its own whatever its output goes to.
static int bold_prompt(void) {
    const char *no = getenv("NO_COLOR");
    return talk() && !net_current() && isatty(STDOUT_FILENO) && !(no && no[0]);
}

static void print_token(int tok, int vocab) {
    if (!talk()) return;
    if (vocab != 256) { printf("[%d]", tok); return; }
    if (tok == '\n' || tok == '\t' || (tok >= 32 && tok < 127)) putchar(tok);
    else printf("\\x%02x", tok);
}

// The logits of the last of the ctx tokens ids_h (on the host), this device's part of the
// vocabulary, on every device (the caller frees them). leaf_sums and aux: room for the forward
// pass's statistics of one sequence.
static float *last_logits(Model *m, const int *ids_h, int ctx, double *leaf_sums, double *aux) {
    const Mesh *mesh = mesh_current();
    int c = cp_size(), Sl = (ctx + c - 1) / c;   // this device's part: positions cp_rank()*Sl ..
    int mine = cp_rank() == (ctx - 1) / Sl ? (ctx - 1) % Sl : -1;   // the last position's row here, or -1
    int copies = pipeline_active() ? pipeline_sample_copies(&m->cfg, mesh->size[AX_STAGE]) : 1;
    size_t n = (size_t)copies * Sl, V = (size_t)m->dims.vocab_size;
    int *host = malloc(sizeof(int) * 2 * n);   // ids, then targets (none)
    if (!host) die("host out of memory for sampling");
    for (size_t i = 0; i < n; i++) {
        int pos = cp_rank() * Sl + (int)(i % (size_t)Sl);
        host[i] = pos < ctx ? ids_h[pos] : 0;
        host[n + i] = -1;
    }
    int *ids = (int *)mem_alloc(MEM_TEMP, sizeof(int) * 2 * n, "sample tokens");
    mem_upload(ids, host, sizeof(int) * 2 * n);
    free(host);
    // The forward pass wants a whole number of chunks and leaves: one of each a device.
    Config saved = m->cfg;
    m->cfg.reduce_leaf_tokens = Sl;
    m->cfg.context_reduce_chunks = c;
    m->cfg.num_vocab_tiling = 1;   // sampling reads the whole logits
    cp_set_sequence_length(ctx);   // the MoE capacity counts the real tokens, not the padding
    float *row = mem_floats(MEM_TEMP, V, "sample logits (this device's part)");
    if (pipeline_active()) {
        pipeline_sample_logits(m, ids, ids + n, Sl, mine, row);
    } else {
        FwdStats st = {leaf_sums, aux, 1, NULL};
        model_forward(m, ids, ids + n, 1, Sl, 0.0f, &st);
        if (mine >= 0) {
            float *z = model_logits_rows(m, (size_t)mine, 1);
            mem_copy(row, z, sizeof(float) * V);
            mem_free(z);
        }
        model_discard(m);
    }
    m->cfg = saved;
    cp_set_sequence_length(0);
    mem_free(ids);
    // One device of the context and stage axes made the row, the others hold zeros: their sum
    // is the row, exactly, on all of them.
    if (c > 1 || pipeline_active())
        coll_all_reduce(mesh_group(mesh, mesh_device_id(), AXIS_BIT(AX_STAGE) | AXIS_BIT(AX_CONTEXT)), row, V);
    return row;
}

// What the sample's first line says of its prompt and its choice of tokens.
static void print_header(int from_key, int prompt, int len, const SamplingRule *r, int bold) {
    if (!talk()) return;
    printf("---- sample (prompt: %s %d tokens%s, then %d generated, %s", from_key ? "the prompt key's" :
           "the held-out text's first", prompt, bold ? " in bold" : "", len, decode_sampling_strategy_name(r->strategy));
    if (r->strategy == SAMPLING_TOPK) printf(" among the %d largest logits", r->top_k);
    if (r->strategy == SAMPLING_NUCLEUS) printf(" among the largest logits holding %g of the probability", r->nucleus_p);
    if (r->strategy != SAMPLING_GREEDY) printf(" at temperature %.2f", r->temperature);
    printf(") ----\n");
}

void sample_print(Model *m, const DataLoader *dl, const int *prompt_ids, int nprompt, int len, const SamplingRule *rule) {
    const Config *c = &m->cfg;
    int S = c->max_target_length, V = c->vocab_size;
    int prompt = nprompt > 0 ? nprompt : MM_MIN(S / 2, 32);
    int total = prompt + len;
    // The tokens on the host (what is printed and sampled from); the host's work on the
    // logits on a copy of the last row (z, p).
    int *seq = malloc(sizeof(int) * (size_t)total);
    float *p = malloc(sizeof(float) * (size_t)V), *z = malloc(sizeof(float) * (size_t)V);
    if (!seq || !p || !z) die("host out of memory for sampling");
    for (int i = 0; i < prompt; i++) seq[i] = nprompt > 0 ? prompt_ids[i] : (int)dl->tokens[dl->eval_begin + i];
    double *leaf_sums = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)(S + 1), "sample loss");
    double *aux = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)MM_MAX(1, model_num_moe_layers(c)), "sample aux");
    uint64_t rng = 0x5eed1234u + (uint64_t)c->init_weights_seed;
    int bold = bold_prompt();
    print_header(nprompt > 0, prompt, len, rule, bold);
    if (bold) printf("\033[1m");
    for (int i = 0; i < prompt; i++) print_token(seq[i], V);
    if (bold) printf("\033[0m");
    if (talk()) printf("%s", V == 256 ? "" : " |");
    for (int n = prompt; n < total; n++) {
        int ctx = MM_MIN(n, S);
        float *row = last_logits(m, seq + n - ctx, ctx, leaf_sums, aux);
        // The last position's logits over the whole vocabulary (gathered from the tensor
        // devices when the vocabulary is split over them).
        float *zd = mem_floats(MEM_TEMP, (size_t)V, "sample logits");
        tp_all_gather(row, zd, (size_t)m->dims.vocab_size);
        mem_download(z, zd, sizeof(float) * (size_t)V);
        mem_free(row);
        mem_free(zd);
        // xorshift64 for a uniform draw in [0, 1), taken for every token (greedy reads none)
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int tok = sampling_choose(z, V, rule, (rng >> 11) * (1.0 / 9007199254740992.0), p);
        seq[n] = tok;
        print_token(tok, V);
    }
    if (talk()) {
        printf("\n----\n");
        fflush(stdout);
    }
    // The other devices wait for the text to be out before they go on to print their own
    // lines (a GPU device's memory line when its thread ends), which could cut into it.
    const Mesh *mesh = mesh_current();
    if (mesh && mesh->ndev > 1) coll_barrier(mesh_group(mesh, mesh_device_id(), MESH_ALL_AXES));
    mem_free(leaf_sums); mem_free(aux);
    free(seq); free(p); free(z);
}
