// tests/test_gpu_attention.cpp: the GPU's attention kernels run on this machine's CPU
// (gpu/emu.h emulates the part of CUDA they use), so that they are tested where there
// is no GPU. gpu/attention.cu and gpu/attn_tiles.cu are compiled as they are, with g++, with
// GPU_EMULATE; the table under test is attention_cuda, the one the GPU backend runs.
// Compared bit for bit, on random inputs, every kernel of kernels/attention.h (dot-product
// forward and backward over query chunks, flash at several block sizes, ring blocks at every
// offset), float32 and with each bf16 rounding point, on ragged shapes:
//   1. the tiles (gpu/attn_tiles.cu) against the per-row kernels (gpu_attention=rows): the
//      tiles promise the per-row kernels' sums in their order;
//   2. the tiles with their threads run in descending order between barriers against
//      ascending: a thread reading what another writes between the same two barriers (a
//      race on the GPU) gives different numbers here;
//   3. the per-row kernels against the CPU's per-row loops (attention_cpu_plain), which
//      define the sums: the same C library expf here, so the same bits (on a GPU the
//      device's expf differs by a few ulp: tests/gpu.sh checks within tolerances there).
// What the emulation cannot show: the GPU's speed, its expf, its memory model across blocks
// (here blocks run one after another; the kernels write disjoint outputs per block) and
// resource limits; tests/gpu.sh's conformance and sanitizer steps run the same kernels on a GPU.
#include "gpu/gpu.h"
#include "gpu/attention.h"
#include "gpu/backend.h"
#include "tests/attn_cases.h"
#include <omp.h>

cudaStream_t gpu_stream(void) { return nullptr; }

// The ways: 0 the tiles (threads ascending between barriers), 1 the tiles (descending), 2 the
// per-row GPU kernels, 3 the CPU's per-row loops; compared 0 with 1, 0 with 2, 2 with 3.
static const AttentionKernels *use(int way) {
    gpu_attention_use(way <= 1 ? GPU_ATTENTION_KIND_TILES : GPU_ATTENTION_KIND_ROWS);
    emu_order = way == 1;
    return way == 3 ? &attention_cpu_plain : &attention_cuda;
}
static const char *const way_names[4] = {"tiles", "tiles, threads descending", "per-row kernels",
                                         "CPU per-row loops"};
static const int way_pairs[3][2] = {{0, 1}, {0, 2}, {2, 3}};
static const AttnWays ways = {4, use, way_names, 3, way_pairs};

// ---- the tensor-core kernels (gpu/attn_mma.cu) ----
// Not the CPU's bits (the file's opening comment says why): against the CPU's per-row loops
// on bf16-valued q, k, v and dO (as bf16 training gives them), every output's largest
// difference relative to the largest magnitude of the CPU's (for dk and dv, of what the call
// added to their starting values); and the two thread orders bit for bit (a race), the first
// with the dk, dv kernel's query tiles in two stages, the second in one (MESHMOE_ATTN_STAGES);
// and dq from dS in memory against dq made again (MESHMOE_ATTN_DQ), bit for bit.
struct TcWorst { double o, m, l, dq, dk, dv; };

static float *bf16_random(size_t n, float scale) {
    float *p = attn_random(n, scale);
    for (size_t i = 0; i < n; i++) p[i] = __bfloat162float(__float2bfloat16(p[i]));
    return p;
}
// max |got - want| / max |want|, over want - base and got - base when base is given.
static double rel_diff(const float *want, const float *got, const float *base, size_t n) {
    double top = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        double w = want[i] - (base ? base[i] : 0.0f), g = got[i] - (base ? base[i] : 0.0f);
        if (fabs(w) > top) top = fabs(w);
        if (!(fabs(g - w) <= diff)) diff = fabs(g - w);
        if (isnan(diff)) break;   // (a NaN makes it NaN, whatever follows)
    }
    return top > 0 ? diff / top : diff;
}

// A digest (FNV-1a over the bits) of every tensor-core output, printed: a change to the
// kernels that should keep their results (a schedule, a layout) is checked by comparing it
// before and after.
static uint64_t tc_digest = 1469598103934665603ull;
static void digest_floats(const float *x, size_t n) {
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++) tc_digest = (tc_digest ^ p[i]) * 1099511628211ull;
}

// Runs one direction of a shape with the given table: ring = 0 the dot product (forward,
// then the backward in query chunks from the CPU's o and stats), ring = 1 the ring blocks.
struct TcRun { float *o, *st, *dq, *dk, *dv; };
static void tc_run(const AttentionKernels *K, const AttnShape *s, AttnRounding rnd, int ring, const float *q,
                   const float *k, const float *v, const float *dout, const float *dk0, const float *dv0,
                   const float *o_cpu, const float *st_cpu, TcRun *out) {
    int B = s->B, S = s->S, N = s->N, Nkv = s->Nkv, Dqk = s->Dqk, Dv = s->Dv, q0 = s->part * S;
    size_t nq = (size_t)B * S * N, nk = (size_t)s->P * B * S * Nkv, nst = (size_t)B * N * S * 2;
    size_t pk = (size_t)B * S * Nkv * Dqk, pv = (size_t)B * S * Nkv * Dv;
    float *scratch = attn_random((size_t)B * N * (q0 + S) * 2 + (size_t)B * S * Nkv * 2, 1.0f);
    out->o = attn_random(nq * Dv, 1.0f);
    out->st = attn_random(nst, 1.0f);
    out->dq = attn_random(nq * Dqk, 1.0f);
    out->dk = attn_copy(dk0, nk * Dqk);
    out->dv = attn_copy(dv0, nk * Dv);
    if (!ring) {
        K->dot_forward(out->o, out->st, scratch, q, k, v, NULL, B, S, q0, N, Nkv, Dqk, Dv, rnd);
        for (int r0 = 0; r0 < S; r0 += s->chunk)
            K->dot_backward_rows(out->dq, out->dk, out->dv, dout, q, k, v, o_cpu ? o_cpu : out->o,
                                 st_cpu ? st_cpu : out->st, NULL, B, S, q0, r0, r0 + s->chunk < S ? r0 + s->chunk : S,
                                 N, Nkv, Dqk, Dv, rnd);
    } else {
        memset(out->o, 0, nq * Dv * sizeof(float));
        memset(out->dq, 0, nq * Dqk * sizeof(float));
        K->ring_begin(out->st, B, S, N);
        for (int p = s->part; p >= 0; p--)
            K->ring_block_forward(out->o, out->st, scratch, q, k + p * pk, v + p * pv, NULL, B, S, q0, p * S, N, Nkv,
                                  Dqk, Dv, rnd, 0);
        K->ring_end(out->o, out->st, B, S, N, Dv, rnd);
        for (int p = s->part; p >= 0; p--)
            K->ring_block_backward(out->dq, out->dk + p * pk, out->dv + p * pv, dout, q, k + p * pk, v + p * pv,
                                   o_cpu ? o_cpu : out->o, st_cpu ? st_cpu : out->st, NULL, B, S, q0, p * S, N, Nkv,
                                   Dqk, Dv, rnd);
    }
    free(scratch);
}
static void tc_free(TcRun *r) { free(r->o); free(r->st); free(r->dq); free(r->dk); free(r->dv); }

static void tc_compare(const AttnShape *s, AttnRounding rnd, TcWorst *worst) {
    int B = s->B, S = s->S, N = s->N, Nkv = s->Nkv, Dqk = s->Dqk, Dv = s->Dv;
    size_t nq = (size_t)B * S * N, nk = (size_t)s->P * B * S * Nkv, nst = (size_t)B * N * S * 2;
    float *q = bf16_random(nq * Dqk, 1.5f), *k = bf16_random(nk * Dqk, 1.5f), *v = bf16_random(nk * Dv, 1.0f);
    float *dout = bf16_random(nq * Dv, 1.0f), *dk0 = attn_random(nk * Dqk, 0.5f), *dv0 = attn_random(nk * Dv, 0.5f);
    for (int ring = 0; ring < 2; ring++) {
        TcRun cpu, tc[3];
        tc_run(&attention_cpu_plain, s, rnd, ring, q, k, v, dout, dk0, dv0, NULL, NULL, &cpu);
        for (int run = 0; run < 3; run++) {   // (dk, dv's query tiles in two stages, then one; then dq recomputed)
            gpu_attention_use(GPU_ATTENTION_KIND_TENSOR_CORES);
            emu_order = run == 1;
            setenv("MESHMOE_ATTN_STAGES", run == 1 ? "1" : "2", 1);
            if (run == 2) setenv("MESHMOE_ATTN_DQ", "scores", 1);
            uint32_t rng = attn_rng;   // (the third run's draws leave the later cases' inputs as they were)
            tc_run(&attention_cuda, s, rnd, ring, q, k, v, dout, dk0, dv0, cpu.o, cpu.st, &tc[run]);
            if (run == 2) attn_rng = rng;
            unsetenv("MESHMOE_ATTN_STAGES");
            unsetenv("MESHMOE_ATTN_DQ");
        }
        emu_order = 0;
        const char *what = ring ? "ring blocks" : "dot product";
        float *got[5] = {tc[0].o, tc[0].st, tc[0].dq, tc[0].dk, tc[0].dv};
        float *again[5] = {tc[1].o, tc[1].st, tc[1].dq, tc[1].dk, tc[1].dv};
        size_t n[5] = {nq * Dv, nst, nq * Dqk, nk * Dqk, nk * Dv};
        const char *names[5] = {"o", "stats", "dq", "dk", "dv"};
        for (int x = 0; x < 5; x++) {
            digest_floats(got[x], n[x]);
            size_t i = attn_first_diff(got[x], again[x], n[x]);
            CHECK(i == n[x],
                  "tensor cores %s %s rnd=%d%d%d: %s: ascending in two stages, descending in one differ at %zu",
                  s->name, what, rnd.scores, rnd.probs, rnd.out, names[x], i);
        }
        // dq from the dk, dv kernel's dS in memory, or made again from S and dP: here the same
        // bits (the emulated products add in the same order either way; on a GPU they need not)
        float *recomputed[3] = {tc[2].dq, tc[2].dk, tc[2].dv};
        for (int x = 2; x < 5; x++) {
            size_t i = attn_first_diff(got[x], recomputed[x - 2], n[x]);
            CHECK(i == n[x], "tensor cores %s %s rnd=%d%d%d: %s: dq from dS in memory and dq made again differ at %zu",
                  s->name, what, rnd.scores, rnd.probs, rnd.out, names[x], i);
        }
        // m and l apart: stats holds (m, l) pairs
        float *mw = (float *)malloc(nst / 2 * sizeof(float)), *mg = (float *)malloc(nst / 2 * sizeof(float));
        float *lw = (float *)malloc(nst / 2 * sizeof(float)), *lg = (float *)malloc(nst / 2 * sizeof(float));
        for (size_t i = 0; i < nst / 2; i++) {
            mw[i] = cpu.st[2 * i]; mg[i] = tc[0].st[2 * i]; lw[i] = cpu.st[2 * i + 1]; lg[i] = tc[0].st[2 * i + 1];
        }
        double e[6] = {rel_diff(cpu.o, tc[0].o, NULL, nq * Dv), rel_diff(mw, mg, NULL, nst / 2),
                       rel_diff(lw, lg, NULL, nst / 2), rel_diff(cpu.dq, tc[0].dq, NULL, nq * Dqk),
                       rel_diff(cpu.dk, tc[0].dk, dk0, nk * Dqk), rel_diff(cpu.dv, tc[0].dv, dv0, nk * Dv)};
        double *wp[6] = {&worst->o, &worst->m, &worst->l, &worst->dq, &worst->dk, &worst->dv};
        for (int x = 0; x < 6; x++)   // (a NaN stays: no later case may take its place)
            if (!(e[x] <= *wp[x]) && !isnan(*wp[x])) *wp[x] = e[x];
        free(mw); free(mg); free(lw); free(lg);
        tc_free(&cpu); tc_free(&tc[0]); tc_free(&tc[1]); tc_free(&tc[2]);
    }
    free(q); free(k); free(v); free(dout); free(dk0); free(dv0);
}

// --quick (the AddressSanitizer build in make test: tests/run_all.sh): two roundings of the
// bit-for-bit cases and one of the tensor-core cases, about a fifth of the work.
int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int roundings = quick ? 2 : ATTN_ROUNDINGS;
    omp_set_num_threads(1);   // the CPU's per-row loops: the same bits on any count, and no waits
    attn_rng = 11;
    for (int si = 0; si < ATTN_SHAPES; si++)
        for (int ri = 0; ri < roundings; ri++) attn_compare(&attn_shapes[si], attn_roundings[ri], NULL, "", &ways);
    // the widest heads of the presets: MLA's 192-wide queries and keys, 128-wide values
    AttnShape mla = {"MLA medium (192, 128)", 1, 20, 2, 2, 192, 128, 1, 0, 20};
    for (int ri = 0; ri < roundings; ri++) attn_compare(&mla, attn_roundings[ri], NULL, "", &ways);
    // the tensor-core kernels: heads of 16-multiples, several query and key tiles, bf16 roundings
    AttnShape tcs[] = {
        {"mixtral-small head (64, 64)", 2, 40, 4, 2, 64, 64, 1, 0, 40},
        {"MLA (192, 128), 2 chunks", 1, 37, 2, 2, 192, 128, 1, 0, 19},
        {"q0 = S, group of 3 (128, 128)", 1, 33, 6, 2, 128, 128, 2, 1, 33},
        {"two query tiles (16, 32)", 1, 70, 2, 1, 16, 32, 1, 0, 70},
        {"values wider than 128 (64, 192)", 1, 20, 2, 1, 64, 192, 1, 0, 20},   // the forward's 16 tiles a warp
    };
    AttnRounding bf16s[] = {{1, 1, 1}, {0, 1, 1}, {1, 0, 1}, {0, 0, 1}};
    TcWorst worst = {0, 0, 0, 0, 0, 0};
    int before = test_passed + test_failed;
    for (size_t si = 0; si < sizeof tcs / sizeof tcs[0]; si++)
        for (size_t ri = 0; ri < (quick ? 1 : sizeof bf16s / sizeof bf16s[0]); ri++) tc_compare(&tcs[si], bf16s[ri], &worst);
    printf("  tensor cores (emulated) against the CPU's bf16 loops, largest difference relative to the largest "
           "value: o %.2e, m %.2e, l %.2e, dq %.2e, dk %.2e, dv %.2e\n", worst.o, worst.m, worst.l, worst.dq,
           worst.dk, worst.dv);
    printf("  tensor cores' outputs: digest %016llx (FNV-1a of their bits; equal before and after a change that "
           "keeps them)\n", (unsigned long long)tc_digest);
    // Bounds: this emulation measured o 4.0e-3 (one bf16 step of the largest output, which is
    // rounded to bf16; 7.8e-3, two steps, when the forward merged 32 keys at a time), l 2.0e-4
    // (7.5e-4 then), m 0 (the emulated products sum in the CPU's order), dq, dk, dv 3.0e-3 (p
    // and dS rounded to bf16 for their products); a GPU's tensor cores sum in another order, a
    // float32-sized change that can move a value across a bf16 rounding. The bounds: o five
    // bf16 steps, l and the gradients 2.5 times the larger measurement, m 1e-3 for that order.
    CHECK(test_passed + test_failed > before, "the tensor-core cases ran");
    CHECK(worst.o <= 2e-2 && worst.l <= 2e-3 && worst.m <= 1e-3,
          "tensor cores' forward within its bounds of the CPU's: o %.2e (2e-2), l %.2e (2e-3), m %.2e (1e-3)", worst.o,
          worst.l, worst.m);
    CHECK(worst.dq <= 8e-3 && worst.dk <= 8e-3 && worst.dv <= 8e-3,
          "tensor cores' backward within 8e-3 of the CPU's: dq %.2e, dk %.2e, dv %.2e", worst.dq, worst.dk, worst.dv);
    printf("  emulated GPU attention: tiles = tiles with threads reversed = per-row kernels = CPU per-row loops, "
           "bit for bit: %d shapes x %d roundings, %d comparisons\n", ATTN_SHAPES + 1, roundings, test_passed);
    TEST_SUMMARY();
}
