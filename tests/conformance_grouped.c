// tests/conformance_grouped.c: the experts' grouped products (kernels/matmul.h, the *_grouped
// kernels of the matmul family; megablox=true): G groups of ragged rows, one of them empty,
// each group with its own weight. Expected: the test's own loops group by group
// (tests/conformance_dense.c's references), bit for bit; on the GPU also under cuBLAS, fp32
// and bf16, within the bound of a dot product's sums in another order. The same cases run
// against the 16-bit twins (kernels/matmul16.h) on bf16 operands, with the same expectations.
#include "tests/conformance.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
#endif

enum { G_FORWARD, G_DINP, G_CHUNKED, G_DW, G_KINDS };
static const char *const kind_names[G_KINDS] = {"matmul_forward_grouped", "matmul_backward_dinp_grouped",
                                                "gemm_chunked_grouped", "matmul_backward_dw_leaves_grouped"};

// One case: the kind, its groups (rows: G+1), the widths (C, OC as the layers name them: the
// chunked product's K = C, N = OC), and its options.
typedef struct {
    int kind, G, C, OC, acc, tb, chunks, nl;
    const int *rows;
    int *off;   // G*nl+1: each group's nl leaves (G_DW)
    int b16;    // 1: the 16-bit twin, its operands X and Y as bf16 bits
    const char *way;   // under cuBLAS: MESHMOE_GROUPED (NULL: the default)
} Case;

// The floats of the first operand X, the second Y and the result Z.
static void sizes(const Case *k, size_t *nx, size_t *ny, size_t *nz) {
    size_t R = (size_t)k->rows[k->G], G = (size_t)k->G, C = (size_t)k->C, OC = (size_t)k->OC;
    *nx = R * (k->kind == G_DINP ? OC : C);
    *ny = k->kind == G_DW ? R * OC : G * C * OC;
    *nz = k->kind == G_DW ? G * C * OC : R * (k->kind == G_DINP ? C : OC);
}

// Z = the case's products by the reference, group by group, from X and Y.
static void reference(const Case *k, const float *X, const float *Y, float *Z) {
    int C = k->C, OC = k->OC;
    for (int g = 0; g < k->G; g++) {
        int r0 = k->rows[g], n = k->rows[g + 1] - r0;
        size_t w = (size_t)g * C * OC;
        if (n == 0) continue;
        if (k->kind == G_FORWARD) ref_gemm(0, 0, n, OC, C, X + (size_t)r0 * C, C, Y + w, OC, k->acc, Z + (size_t)r0 * OC, OC);
        if (k->kind == G_DINP) ref_gemm(0, 1, n, C, OC, X + (size_t)r0 * OC, OC, Y + w, OC, 1, Z + (size_t)r0 * C, C);
        if (k->kind == G_CHUNKED)
            ref_gemm_chunked(k->tb, n, OC, C, k->chunks, X + (size_t)r0 * C, C, Y + w, k->tb ? C : OC,
                             Z + (size_t)r0 * OC, OC);
        if (k->kind == G_DW) ref_dw_leaves(C, OC, k->off + (size_t)g * k->nl, k->nl, X, Y, k->acc, Z + w);
    }
}

// The case's kernel on the device's operands: X and Y as floats, or their bf16 bits X16, Y16.
static void run_kernel(const Case *k, const float *dX, const float *dY, const uint16_t *dX16, const uint16_t *dY16,
                       float *dZ) {
    if (k->b16) {
        const Matmul16Kernels *m = UNDER_TEST->matmul16;
        if (k->kind == G_FORWARD) m->matmul_forward_grouped(dZ, dX16, dY16, k->rows, k->G, k->C, k->OC, k->acc);
        if (k->kind == G_DINP) m->matmul_backward_dinp_grouped(dZ, dX16, dY16, k->rows, k->G, k->C, k->OC);
        if (k->kind == G_CHUNKED) m->gemm_chunked_grouped(k->tb, k->rows, k->G, k->OC, k->C, k->chunks, dX16, dY16, dZ);
        if (k->kind == G_DW)
            m->matmul_backward_dw_leaves_grouped(dZ, dX16, dY16, k->off, k->nl, k->G, k->C, k->OC, k->acc);
        return;
    }
    const MatmulKernels *m = UNDER_TEST->matmul;
    if (k->kind == G_FORWARD) m->matmul_forward_grouped(dZ, dX, dY, k->rows, k->G, k->C, k->OC, k->acc);
    if (k->kind == G_DINP) m->matmul_backward_dinp_grouped(dZ, dX, dY, k->rows, k->G, k->C, k->OC);
    if (k->kind == G_CHUNKED) m->gemm_chunked_grouped(k->tb, k->rows, k->G, k->OC, k->C, k->chunks, dX, dY, dZ);
    if (k->kind == G_DW) m->matmul_backward_dw_leaves_grouped(dZ, dX, dY, k->off, k->nl, k->G, k->C, k->OC, k->acc);
}

// The result's old values: random where the kernel adds onto them or must leave them (a
// group without rows), NaN where it must write without reading.
static float *old_values(const Case *k, size_t nz) {
    float *Z = rand_floats(nz, -1, 1);
    int writes = (k->kind == G_FORWARD && !k->acc) || k->kind == G_CHUNKED;
    if (writes)
        for (size_t i = 0; i < nz; i++) Z[i] = NAN;
    if (k->kind == G_DW && !k->acc)
        for (int g = 0; g < k->G; g++)
            if (k->rows[g + 1] > k->rows[g])
                for (size_t i = 0; i < (size_t)k->C * k->OC; i++) Z[(size_t)g * k->C * k->OC + i] = NAN;
    return Z;
}

// One case, mode 0 on the backend's own products (bit for bit), 1 under cuBLAS in float32, 2
// under cuBLAS on tensor cores (operands bf16-valued, as the layers give them in bf16 mode).
// Under cuBLAS each result is within 2 (K + m) u (|old| + sum |a b|) of the ordered one: K
// the longest contraction, m the roundings after it (the add onto the old value, the pieces'
// or leaves' merges), u = 2^-24; sum |a b| is the reference on |X| and |Y|.
static void run_case(const Case *k, int mode) {
    size_t nx, ny, nz;
    sizes(k, &nx, &ny, &nz);
    float *X = rand_floats(nx, -1, 1), *Y = rand_floats(ny, -1, 1), *Z0 = old_values(k, nz);
    if (mode == 2 || k->b16) {
        for (size_t i = 0; i < nx; i++) X[i] = bf16_round(X[i]);
        for (size_t i = 0; i < ny; i++) Y[i] = bf16_round(Y[i]);
    }
    float *want = copy_of(Z0, sizeof(float) * nz);
    reference(k, X, Y, want);
    float *dX = dev_copy(X, sizeof(float) * nx), *dY = dev_copy(Y, sizeof(float) * ny);
    float *dZ = dev_copy(Z0, sizeof(float) * nz);
    uint16_t *X16 = malloc(sizeof(uint16_t) * (nx ? nx : 1)), *Y16 = malloc(sizeof(uint16_t) * (ny ? ny : 1));
    for (size_t i = 0; i < nx; i++) X16[i] = bf16_bits(X[i]);
    for (size_t i = 0; i < ny; i++) Y16[i] = bf16_bits(Y[i]);
    uint16_t *dX16 = dev_copy(X16, sizeof(uint16_t) * nx), *dY16 = dev_copy(Y16, sizeof(uint16_t) * ny);
    char shape[128];
    snprintf(shape, sizeof shape, "%s%s%s%s G=%d rows=%d C=%d OC=%d acc=%d transB=%d chunks=%d leaves=%d",
             k->b16 ? "16-bit operands " : "", mode == 2 ? "cublas_bf16" : mode == 1 ? "cublas" : "",
             k->way ? " MESHMOE_GROUPED=" : "", k->way ? k->way : "", k->G, k->rows[k->G], k->C, k->OC, k->acc,
             k->tb, k->chunks, k->nl);
#ifdef MESHMOE_CONFORMANCE_GPU
    const char *why = NULL;
    if (k->way) setenv("MESHMOE_GROUPED", k->way, 1);   // read by the start-up call below
    else unsetenv("MESHMOE_GROUPED");
    if (mode && !gpu_matmul_use_cublas(mode, &why)) {
        skipped("%s %s: SKIPPED (%s)", kind_names[k->kind], shape, why);
        mode = -1;
    }
#endif
    if (mode == 0) {
        run_kernel(k, dX, dY, dX16, dY16, dZ);
        check_dev_floats(kind_names[k->kind], shape, want, dZ, nz, 0, 0);
    }
#ifdef MESHMOE_CONFORMANCE_GPU
    if (mode > 0) {
        run_kernel(k, dX, dY, dX16, dY16, dZ);
        float *got = dev_fetch(dZ, sizeof(float) * nz), *bound = calloc(nz, sizeof(float));
        gpu_matmul_use_cublas(0, &why);
        for (size_t i = 0; i < nx; i++) X[i] = fabsf(X[i]);
        for (size_t i = 0; i < ny; i++) Y[i] = fabsf(Y[i]);
        Case a = *k;
        a.acc = 0;
        reference(&a, X, Y, bound);   // sum |a b| where a group writes; 0 where it has no rows
        int K = k->C > k->OC ? k->C : k->OC;
        K = K > k->rows[k->G] ? K : k->rows[k->G];
        for (size_t i = 0; i < nz; i++)
            bound[i] = (float)(2.0 * (K + k->chunks + k->nl + 1) * 0x1p-24 *
                               ((isnan(bound[i]) ? 0 : bound[i]) + (isnan(Z0[i]) ? 0 : fabsf(Z0[i]))));
        int bad = 0;
        for (size_t i = 0; i < nz && !bad; i++) bad = !(fabsf(got[i] - want[i]) <= bound[i]);
        check(!bad, "%s %s: a result beyond its bound", kind_names[k->kind], shape);
        free(got); free(bound);
    }
#endif
    free(X); free(Y); free(Z0); free(want); free(X16); free(Y16);
    dev_free(dX); dev_free(dY); dev_free(dZ); dev_free(dX16); dev_free(dY16);
}

// Each group's nl leaves: its rows cut at random points (some leaves empty).
static int *leaf_offsets(const int *rows, int G, int nl) {
    int *off = malloc(sizeof(int) * ((size_t)G * nl + 1));
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        off[(size_t)g * nl] = r0;
        for (int l = 1; l < nl; l++) {
            int cut = r0 + rng_int(n + 1);
            off[(size_t)g * nl + l] = cut > off[(size_t)g * nl + l - 1] ? cut : off[(size_t)g * nl + l - 1];
        }
    }
    off[(size_t)G * nl] = rows[G];
    return off;
}

// Every kind on the groups `rows` (G+1) with widths C, OC, on the float32 kernels (b16 0) or
// their 16-bit twins (1); where the products are bf16 under cuBLAS (cublas_bf16, or 16-bit
// operands) also by each of MESHMOE_GROUPED's ways (gpu/matmul.cu), or (kernel_only, a GPU's
// only) by the backend's own tensor-core kernel (gpu/grouped16.cu) alone.
static void grouped_cases(int b16, const int *rows, int G, int C, int OC, int kernel_only) {
    int nl = 3, *off = leaf_offsets(rows, G, nl);
    static const char *const ways[] = {NULL, "kernel", "cublas"};
    int modes = 1;
#ifdef MESHMOE_CONFORMANCE_GPU
    modes = 3;
#endif
    for (int mode = 0; mode < modes; mode++)
        for (int w = 0; w < (mode == 2 || (mode && b16) ? 3 : 1); w++) {
            const char *way = ways[w];
            if (kernel_only && (mode != 2 || !way || strcmp(way, "kernel"))) continue;
            for (int acc = 0; acc < 2; acc++) {
                run_case(&(Case){G_FORWARD, G, C, OC, acc, 0, 0, 0, rows, NULL, b16, way}, mode);
                run_case(&(Case){G_DW, G, C, OC, acc, 0, 0, nl, rows, off, b16, way}, mode);
            }
            run_case(&(Case){G_DINP, G, C, OC, 1, 0, 0, 0, rows, NULL, b16, way}, mode);
            for (int tb = 0; tb < 2; tb++) {   // (C + 20, OC - 23: a tree of 3 pieces that is not complete)
                run_case(&(Case){G_CHUNKED, G, C + 20, OC - 23, 0, tb, 3, 0, rows, NULL, b16, way}, mode);
                run_case(&(Case){G_CHUNKED, G, C + 24, OC - 8, 0, tb, 1, 0, rows, NULL, b16, way}, mode);
            }
        }
    free(off);
}

// 6 groups: 37, 0 (empty), 5, 64, 1, 20 rows, widths off 16-byte alignment; and, for the
// tensor-core kernel's tiles of 128 x 128 (gpu/grouped16.cu), 3 groups of 140, 0 and 133 rows
// with widths of two tiles, the second a part one, so that each form's output has tiles cut
// at both edges and its contraction a part slice.
static const int small_rows[] = {0, 37, 37, 42, 106, 107, 127}, tile_rows[] = {0, 140, 140, 273};

void test_grouped(void) {
    grouped_cases(0, small_rows, 6, 40, 56, 0);
    grouped_cases(0, tile_rows, 3, 136, 136, 1);
}
void test_grouped16(void) {
    grouped_cases(1, small_rows, 6, 40, 56, 0);
    grouped_cases(1, tile_rows, 3, 136, 136, 1);
}

