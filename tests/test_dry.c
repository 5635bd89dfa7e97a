// tests/test_dry.c: the planner's backend (kernels/dry.c) computes nothing. The layers of
// the matmul, RoPE, embedding, loss and cast kernels and the vocabulary-tile kernels, run
// on backend_dry, leave every output exactly as it was and write no loss leaf, while the
// device's flop count grows as on the CPU; the same calls on backend_cpu change every
// output, so the check sees a dry kernel that computes.
#include "core/common.h"
#include "kernels/kernels.h"
#include "base/config.h"
#include "model/matmul.h"
#include "model/rope.h"
#include "model/embedding.h"
#include "model/loss.h"
#include "model/precision.h"
#include "base/memory.h"
#include "base/context.h"
#include "tests/test.h"

enum { T = 8, C = 16, OC = 12, H = 2, DR = 8, V = 10, LEAF = 4, ROWS = 4, NOUT = 13 };

// x (n) = values in [-scale, scale) from a small generator.
static void fill(float *x, size_t n, uint32_t *s, float scale) {
    for (size_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        x[i] = scale * ((float)(*s >> 8) / 8388608.0f - 1.0f);
    }
}

// What one backend did: how many of the NOUT outputs it changed, the loss leaves it
// wrote, the flops the device counted, and whether act_pack/act_unpack brought the
// values back.
typedef struct { int changed; int leaves; double flops; int unpacked; } Result;

static Result run_layers(const Backend *b) {
    static float inp[T * C], w[C * OC], dout[T * OC], table[V * C], demb[T * C], logits[T * V];
    static float out[T * OC], dinp[T * C], dw[C * OC], gc[C * OC], rot[T * H * DR], drot[T * H * DR];
    static float emb[T * C], emb1[T * C], dtab[V * C], lse[T], dz[T * V], rows[ROWS * C], back[T * C];
    static float rounded[T * C], rounded_before[T * C];
    static float before[NOUT][T * C * V];
    int ids[T], tg[T], tile_tg[ROWS];
    double sums[T / LEAF];
    uint32_t seed = 3;
    float *ins[] = {inp, w, dout, table, demb, logits};
    size_t in_sizes[] = {T * C, C * OC, T * OC, V * C, T * C, T * V};
    for (int i = 0; i < 6; i++) fill(ins[i], in_sizes[i], &seed, 1.0f);
    for (int t = 0; t < T; t++) { ids[t] = (3 * t) % V; tg[t] = t == 5 ? -1 : (t + 1) % V; }
    float *outs[NOUT] = {out, dinp, dw, gc, rot, drot, emb, emb1, dtab, lse, dz, rows, back};
    size_t sizes[NOUT] = {T * OC, T * C, C * OC, C * OC, T * H * DR, T * H * DR, T * C, T * C, V * C, T, T * V,
                          ROWS * C, T * C};
    for (int o = 0; o < NOUT; o++) {
        fill(outs[o], sizes[o], &seed, 1.0f);
        memcpy(before[o], outs[o], sizeof(float) * sizes[o]);
    }
    fill(rounded, T * C, &seed, 1.0f);   // not bf16-valued: rounding changes them
    memcpy(rounded_before, rounded, sizeof rounded);
    for (int r = 0; r < ROWS; r++) tile_tg[r] = -2;

    kern_use(b);
    Device *d = mem_device();
    double flops0 = d->flops;
    Result res = {0, 0, 0, 0};
    Leaves lv = leaves_flat(T, LEAF);
    matmul_forward(out, inp, w, T, C, OC, 0);
    matmul_backward(dinp, dw, dout, inp, w, T, C, OC, lv);
    gemm(1, 0, C, OC, T, 1.0f, inp, C, dout, OC, 0.0f, gc, OC);
    Config rc;   // RoPE's keys: the default frequencies, then yarn's interleaved pairs
    config_defaults(&rc);
    rope_forward(&rc, rot, 1, T, 0, H, DR, DR);
    rope_backward(&rc, drot, 1, T, 0, H, DR, DR);
    rc.rope_type = ROPE_YARN;
    rope_forward(&rc, rot, 1, T, 0, H, DR, DR);
    rope_backward(&rc, drot, 1, T, 0, H, DR, DR);
    embedding_forward(emb, ids, table, T, C, V, 0);
    embedding_forward_onehot(emb1, ids, table, T, C, V, 0);
    embedding_backward(dtab, demb, ids, T, C, V, 0, lv);
    for (int l = 0; l < T / LEAF; l++) sums[l] = -1.0;   // no leaf's sum (the losses are positive)
    loss_forward(lse, sums, logits, 0, tg, T, V, 0, 1, 0.0f, lv);
    for (int l = 0; l < T / LEAF; l++) res.leaves += sums[l] != -1.0;
    loss_backward(dz, lse, tg, T, V, 0, 0.0f, 1.0f);
    kern()->loss->tile_gather_rows(rows, inp, 2, ROWS, C);       // rows (ROWS,C) = inp rows 2..5
    kern()->loss->tile_scatter_rows(back, demb, 3, ROWS, C);     // back rows 3..6 = demb (ROWS,C)
    kern()->loss->tile_gather_targets(tile_tg, tg, 1, ROWS);
    round_bf16(rounded, T * C, 1);
    res.flops = d->flops - flops0;
    for (int o = 0; o < NOUT; o++) res.changed += memcmp(before[o], outs[o], sizeof(float) * sizes[o]) != 0;
    res.changed += memcmp(rounded_before, rounded, sizeof rounded) != 0;
    res.changed += tile_tg[0] != -2;
    // act_pack / act_unpack in bf16 mode: the values come back only if they were moved.
    Config cfg;
    config_defaults(&cfg);
    cfg.dtype = DTYPE_BFLOAT16;
    float *x = mem_floats(MEM_ACTIVATIONS, 64, "test activation");
    for (int i = 0; i < 64; i++) x[i] = bf16_round(1.0f + (float)i);
    act_pack(&cfg, &x, 64);
    act_unpack(&cfg, &x, 64);
    res.unpacked = 1;
    for (int i = 0; i < 64; i++) res.unpacked &= x[i] == bf16_round(1.0f + (float)i);
    mem_free(x);
    kern_use(NULL);   // back to the process's default
    return res;
}

int main(void) {
    Device dev;
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    Result dry = run_layers(&backend_dry), cpu = run_layers(&backend_cpu);
    int n = NOUT + 2;   // and the rounded array and the tile's targets
    // forward, dinp, dw (two leaves), gemm: 2*T*C*OC each; the one-hot embedding: 2*T*V*C
    double flops = 4 * 2.0 * T * C * OC + 2.0 * T * V * C;
    printf("  outputs changed of %d: dry %d, cpu %d; loss leaves written: dry %d, cpu %d; flops: dry %.0f, cpu %.0f\n",
           n, dry.changed, cpu.changed, dry.leaves, cpu.leaves, dry.flops, cpu.flops);
    CHECK(dry.changed == 0, "the dry backend changed %d of %d outputs", dry.changed, n);
    CHECK(cpu.changed == n, "the cpu backend changed %d of %d outputs", cpu.changed, n);
    CHECK(dry.leaves == 0 && cpu.leaves == T / LEAF, "loss leaves written: dry %d (want 0), cpu %d (want %d)",
          dry.leaves, cpu.leaves, T / LEAF);
    CHECK(dry.flops == flops && cpu.flops == flops,
          "flops counted: dry %.0f, cpu %.0f, want %.0f each (the planner counts what a step runs)",
          dry.flops, cpu.flops, flops);
    CHECK(!dry.unpacked && cpu.unpacked, "act_pack/act_unpack moved values: dry %d (want 0), cpu %d (want 1)",
          dry.unpacked, cpu.unpacked);
    CHECK(dev.live_total == 0, "leaked %zu bytes of device memory", dev.live_total);
    TEST_SUMMARY();
}
