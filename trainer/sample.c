// trainer/sample.c: autoregressive sampling. Each new token re-runs the forward pass over
// the last max_target_length tokens (no KV cache: this is a trainer, and the point is to
// show what was learned, not to be fast).
#include "trainer/sample.h"
#include "base/memory.h"
#include "base/mesh.h"
#include "base/tensor.h"
#include "core/common.h"

// Every device of a mesh runs the sampling loop (the forward pass is a collective under
// FSDP); only device 0 prints.
static int talk(void) { return mesh_device_id() == 0; }

static void print_token(int tok, int vocab) {
    if (!talk()) return;
    if (vocab != 256) { printf("[%d]", tok); return; }
    if (tok == '\n' || tok == '\t' || (tok >= 32 && tok < 127)) putchar(tok);
    else printf("\\x%02x", tok);
}

void sample_print(Model *m, const DataLoader *dl, int len, float temperature) {
    const Config *c = &m->cfg;
    int S = c->max_target_length, V = c->vocab_size, leaf = cfg_leaf_tokens(c);
    int prompt = MM_MIN(S / 2, 32);
    int total = prompt + len;
    int *seq = (int *)mem_alloc(MEM_TEMP, sizeof(int) * (size_t)total, "sample tokens");
    int *tg = (int *)mem_alloc(MEM_TEMP, sizeof(int) * (size_t)S, "sample targets");
    // The tokens on the host (seq_h, what is printed and sampled from), copied to the device's
    // seq as they come; the host's work on the logits on a copy of the last row (z, p).
    int *seq_h = malloc(sizeof(int) * (size_t)MM_MAX(total, S));
    float *p = malloc(sizeof(float) * (size_t)V), *z = malloc(sizeof(float) * (size_t)V);
    if (!seq_h || !p || !z) die("host out of memory for sampling");
    for (int i = 0; i < S; i++) seq_h[i] = -1;   // no loss is needed
    mem_upload(tg, seq_h, sizeof(int) * (size_t)S);
    for (int i = 0; i < prompt; i++) seq_h[i] = dl->tokens[dl->eval_begin + i];
    mem_upload(seq, seq_h, sizeof(int) * (size_t)prompt);
    double *leaf_sums = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)(S / leaf + 1), "sample loss");
    double *aux = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)MM_MAX(1, model_num_moe_layers(c)), "sample aux");
    uint64_t rng = 0x5eed1234u + (uint64_t)c->init_weights_seed;
    if (talk()) printf("---- sample (prompt from the held-out text, then %d generated tokens, temperature %.2f) ----\n",
           len, temperature);
    for (int i = 0; i < prompt; i++) print_token(seq_h[i], V);
    if (talk()) printf("%s", V == 256 ? "" : " |");
    for (int n = prompt; n < total; n++) {
        int ctx = MM_MIN(n, S), start = n - ctx;
        FwdStats st = {leaf_sums, aux, 1, NULL};
        // The forward pass wants a whole number of chunks and leaves: one of each, of ctx
        // tokens (positions 0..ctx-1).
        Config saved = m->cfg;
        m->cfg.reduce_leaf_tokens = ctx;
        m->cfg.context_reduce_chunks = 1;
        m->cfg.num_vocab_tiling = 1;   // sampling reads the whole logits
        model_forward(m, seq + start, tg, 1, ctx, 0.0f, &st);
        m->cfg = saved;
        // The last position's logits over the whole vocabulary (gathered from the tensor
        // devices when the vocabulary is split over them).
        float *zd = mem_floats(MEM_TEMP, (size_t)V, "sample logits");
        float *row = model_logits_rows(m, (size_t)(ctx - 1), 1);
        tp_all_gather(row, zd, (size_t)m->dims.vocab_size);
        mem_download(z, zd, sizeof(float) * (size_t)V);
        mem_free(row);
        mem_free(zd);
        float mx = z[0];
        for (int v = 1; v < V; v++) mx = fmaxf(mx, z[v]);
        double sum = 0;
        for (int v = 0; v < V; v++) { p[v] = expf((z[v] - mx) / fmaxf(temperature, 1e-6f)); sum += p[v]; }
        model_discard(m);
        // xorshift64 for a uniform draw
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        double u = (rng >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
        int tok = V - 1;
        for (int v = 0; v < V; v++) { acc += p[v]; if (u < acc) { tok = v; break; } }
        seq_h[n] = tok;
        mem_upload(seq + n, &tok, sizeof(int));
        print_token(tok, V);
    }
    if (talk()) printf("\n----\n");
    mem_free(seq); mem_free(tg); mem_free(leaf_sums); mem_free(aux);
    free(seq_h); free(p); free(z);
}
