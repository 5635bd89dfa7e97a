// tests/gemm_bench.c (build/gemm_bench, run by tests/bench.sh): GFLOP/s of a square
// n x n x n product on 1 and 2 threads, by OpenBLAS's sgemm (this machine's peak, when the
// build has OpenBLAS) and by the ordered GEMM; then the ordered GEMM at the shapes the
// -small presets run, B read in place against copied by its first reader, op(A) = A packed
// against read in place, a weight gradient's leaves one by one and in one call, and the
// products of 16-bit operands (ordered_gemm16) against float32 ones. Each figure is the best of a few repeats
// (2 M N K flops per product), by the clock and per CPU-second (the process's CPU time, all
// threads): on a machine shared with other work the clock says what this run got, the CPU
// time what the kernel does.
// With `cold`, every timed product first writes a 64 MiB buffer, so that its operands come
// from memory, as in a training step, where a weight or an activation was last touched a
// whole layer before; without it the repeats find them in the caches.
//   build/gemm_bench [n] [cold]        (n = 2048 by default)
//   MESHMOE_GEMM_KERNEL=avx2 build/gemm_bench   (the ordered GEMM on the AVX2 tile)
#include "core/common.h"
#include "kernels/cpu/gemm.h"
#include "kernels/bf16.h"
#include "model/matmul.h"
#include "base/memory.h"
#include <omp.h>
#include <math.h>
#include <time.h>

#ifndef MESHMOE_NO_BLAS
#include <cblas.h>
#endif

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static float *filled(size_t n) {
    float *x = malloc(sizeof(float) * n);
    if (!x) die("gemm_bench: out of memory");
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return x;
}

typedef struct { double wall, cpu; } Rate;   // GFLOP per second, per CPU-second

static float *evict;   // cold: written before each timed product (64 MiB, more than L3)
enum { EVICT_FLOATS = 16 << 20 };

static uint16_t *halved(const float *x, size_t n) {
    uint16_t *h = malloc(sizeof(uint16_t) * n);
    if (!h) die("gemm_bench: out of memory");
    for (size_t i = 0; i < n; i++) h[i] = bf16_bits(x[i]);
    return h;
}

// Which product gflops times: the ordered GEMM on float32 operands, OpenBLAS's sgemm, the
// ordered GEMM on 16-bit operands widened into its panels (ordered_gemm16), or widened whole
// into float32 copies first, then the float32 product (the copies made inside the timing).
enum { ORDERED, BLAS, PACKED16, COPIES16 };

// C (M,N) = op(A) @ op(B), best of `reps` (after one warm-up), by `how`.
static Rate gflops(int how, int tA, int tB, int M, int N, int K, int reps) {
    float *A = filled((size_t)M * K), *B = filled((size_t)K * N), *C = filled((size_t)M * N);
    uint16_t *A16 = halved(A, (size_t)M * K), *B16 = halved(B, (size_t)K * N);
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r <= reps; r++) {
        if (evict)
            for (size_t i = 0; i < EVICT_FLOATS; i += 16) evict[i] += 1.0f;
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
#ifndef MESHMOE_NO_BLAS
        if (how == BLAS)
            cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, M, N, K,
                        1.0f, A, tA ? M : K, B, tB ? K : N, 0.0f, C, N);
#endif
        if (how == ORDERED) ordered_gemm(tA, tB, M, N, K, A, tA ? M : K, B, tB ? K : N, 0, C, N);
        if (how == PACKED16) ordered_gemm16(tA, tB, M, N, K, A16, tA ? M : K, B16, tB ? K : N, 0, C, N);
        if (how == COPIES16) {
            float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
            #pragma omp parallel for
            for (size_t i = 0; i < (size_t)M * K; i++) a[i] = bf16_float(A16[i]);
            #pragma omp parallel for
            for (size_t i = 0; i < (size_t)K * N; i++) b[i] = bf16_float(B16[i]);
            ordered_gemm(tA, tB, M, N, K, a, tA ? M : K, b, tB ? K : N, 0, C, N);
            free(a); free(b);
        }
        double t = now(CLOCK_MONOTONIC) - t0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (r > 0 && t < best) best = t;
        if (r > 0 && c < best_cpu) best_cpu = c;
    }
    free(A); free(B); free(C); free(A16); free(B16);
    double f = 2.0 * M * N * K / 1e9;
    return (Rate){f / best, f / best_cpu};
}

// The chunked product C (M,N) = A (M,K) @ B^T, B (N,K), in `chunks` pieces: the input
// gradient of a product whose contraction is long (the head's, over the vocabulary). Best of
// `reps`, 2 M N K flops.
static Rate chunked(int M, int N, int K, int chunks, int reps) {
    float *A = filled((size_t)M * K), *B = filled((size_t)N * K), *C = filled((size_t)M * N);
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r <= reps; r++) {
        if (evict)
            for (size_t i = 0; i < EVICT_FLOATS; i += 16) evict[i] += 1.0f;
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        ordered_gemm_chunked(1, M, N, K, chunks, A, K, B, K, C, N);
        double t = now(CLOCK_MONOTONIC) - t0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (r > 0 && t < best) best = t;
        if (r > 0 && c < best_cpu) best_cpu = c;
    }
    free(A); free(B); free(C);
    double f = 2.0 * M * N * K / 1e9;
    return (Rate){f / best, f / best_cpu};
}

// A weight gradient's n leaves of `len` rows each, dw (M,N) += their tree: one by one as
// base/treesum.c adds them (a product per leaf, an odd leaf onto the one before, the merges
// and the add onto dw in passes over (M,N)), or in one call (ordered_gemm_leaves). Best of
// `reps`, 2 M N K flops in all.
static void add_into(float *left, const float *right, size_t n) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) left[i] += right[i];
}
static Rate leaves(int one_call, int M, int N, int len, int n, int reps) {
    size_t mn = (size_t)M * N;
    float *A = filled((size_t)len * n * M), *B = filled((size_t)len * n * N), *dw = filled(mn), *level[8];
    int off[9];
    for (int l = 0; l <= n; l++) off[l] = l * len;
    for (int k = 0; k < 8; k++) level[k] = filled(mn);
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r <= reps; r++) {
        if (evict)
            for (size_t i = 0; i < EVICT_FLOATS; i += 16) evict[i] += 1.0f;
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (one_call) ordered_gemm_leaves(M, N, off, n, A, M, B, N, 1, dw, N);
        else {   // n = 8: pairs into level[0 .. 3], then (01)+(23), (45)+(67), and the root
            for (int l = 0; l < n; l++)
                ordered_gemm(1, 0, M, N, len, A + (size_t)off[l] * M, M, B + (size_t)off[l] * N, N, l % 2, level[l / 2], N);
            add_into(level[0], level[1], mn);
            add_into(level[2], level[3], mn);
            add_into(level[0], level[2], mn);
            add_into(dw, level[0], mn);
        }
        double t = now(CLOCK_MONOTONIC) - t0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (r > 0 && t < best) best = t;
        if (r > 0 && c < best_cpu) best_cpu = c;
    }
    free(A); free(B); free(dw);
    for (int k = 0; k < 8; k++) free(level[k]);
    double f = 2.0 * M * N * len * n / 1e9;
    return (Rate){f / best, f / best_cpu};
}

// Each shape, op(B) = B, on 1 and 2 threads with a switch of the GEMM off and on (the same
// bits either way); each variant timed twice, in the order off, on, on, off, the better
// kept (a variant run first in a round tends to be favoured here). The switch is left on.
typedef struct { const char *what; int M, N, K; } Shape;
static void in_turn(const char *tag, const char *off_name, const char *on_name, void (*set)(int), const Shape *sh,
                    int n) {
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        for (int s = 0; s < n; s++) {
            Rate r[4];
            for (int v = 0; v < 4; v++) {
                set(v == 1 || v == 2);
                r[v] = gflops(ORDERED, 0, 0, sh[s].M, sh[s].N, sh[s].K, 5);
            }
            set(1);
            Rate off = r[0].wall > r[3].wall ? r[0] : r[3], on = r[1].wall > r[2].wall ? r[1] : r[2];
            printf("%s threads=%d %-46s: %s GFLOP/s %5.1f per-CPU-second %5.1f; %s GFLOP/s %5.1f "
                   "per-CPU-second %5.1f\n", tag, th, sh[s].what, off_name, off.wall, off.cpu, on_name, on.wall,
                   on.cpu);
        }
    }
}

static Device dev;

int main(int argc, char **argv) {
    blas_prefer_fast_kernels(argv);
    gemm_kernel_from_env();   // MESHMOE_GEMM_KERNEL=avx2: the AVX2 tile on an AVX-512 CPU
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    if (n < 16) die("gemm_bench: n must be at least 16");
    if (argc > 2) {
        if (strcmp(argv[2], "cold") != 0) die("gemm_bench: the second argument can only be 'cold', got '%s'", argv[2]);
        evict = filled(EVICT_FLOATS);
    }
    printf("gemm kernel: %s; BLAS: %s\n", gemm_kernel_name(), blas_description());
    printf("caches: %s\n", evict ? "cold (64 MiB written before each product)" : "warm (repeats)");
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        blas_set_threads(th);
#ifndef MESHMOE_NO_BLAS
        Rate b = gflops(BLAS, 0, 0, n, n, n, 3);
        printf("sgemm_peak threads=%d n=%d GFLOP/s %.1f per-CPU-second %.1f\n", th, n, b.wall, b.cpu);
#endif
        Rate o = gflops(ORDERED, 0, 0, n, n, n, 3);
        printf("ordered threads=%d n=%d GFLOP/s %.1f per-CPU-second %.1f\n", th, n, o.wall, o.cpu);
    }
    // The products of one layer of the -small presets (d 512, heads 8 x 64, expert width
    // 1024 or 384, 256 tokens per sequence), forward and both backward forms, 2 threads.
    omp_set_num_threads(2);
    struct { const char *what; int tA, tB, M, N, K; } shapes[] = {
        {"q projection, one sequence (256,512)@(512,512)", 0, 0, 256, 512, 512},
        {"expert up, 512 rows (512,512)@(512,1024)", 0, 0, 512, 1024, 512},
        {"expert down, 512 rows (512,1024)@(1024,512)", 0, 0, 512, 512, 1024},
        {"expert dinp, dout@w^T (512,1024)@(1024,512)^T", 0, 1, 512, 512, 1024},
        {"expert dw leaf, inp^T@dout (512,256)@(256,1024)", 1, 0, 512, 1024, 256},
        {"deepseek expert up (512,512)@(512,384)", 0, 0, 512, 384, 512},
        {"head (2048,512)@(512,256)", 0, 0, 2048, 256, 512},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Rate o = gflops(ORDERED, shapes[s].tA, shapes[s].tB, shapes[s].M, shapes[s].N, shapes[s].K, 5);
        printf("ordered threads=2 %-50s GFLOP/s %.1f per-CPU-second %.1f\n", shapes[s].what, o.wall, o.cpu);
    }
    // The same products of 16-bit operands (bf16 mode's products, kernels/matmul16.h), which
    // take the blocked path with every panel packed from them (ordered_gemm16), beside the
    // float32 product and beside the whole operands widened into copies first; in turn, the
    // better of two rounds each (float32, packed, copies, then the reverse).
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Rate r[6];
        const int how[6] = {ORDERED, PACKED16, COPIES16, COPIES16, PACKED16, ORDERED};
        for (int v = 0; v < 6; v++) r[v] = gflops(how[v], shapes[s].tA, shapes[s].tB, shapes[s].M, shapes[s].N,
                                                   shapes[s].K, 5);
        double f32 = fmax(r[0].wall, r[5].wall), p16 = fmax(r[1].wall, r[4].wall), c16 = fmax(r[2].wall, r[3].wall);
        printf("16-bit threads=2 %-50s float32 GFLOP/s %5.1f; 16-bit packed %5.1f (%.2fx); widened copies %5.1f "
               "(%.2fx)\n", shapes[s].what, f32, p16, p16 / f32, c16, c16 / f32);
    }
    // An expert's few rows (a small batch, or a rarely chosen expert), forward (expert up)
    // and input gradient (expert dinp): B packed against B read in place
    // (kernels/cpu/gemm.c:gemm_stream, gemm_stream_t), side by side, 2 threads.
    int rows[] = {8, 32, 64, 128, 192, 256, 384, 512};
    for (int tB = 0; tB < 2; tB++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            int N = tB ? 512 : 1024, K = tB ? 1024 : 512;
            gemm_set_stream_rows(0);
            Rate p = gflops(ORDERED, 0, tB, rows[r], N, K, 10);
            gemm_set_stream_rows(1 << 30);
            Rate q = gflops(ORDERED, 0, tB, rows[r], N, K, 10);
            gemm_set_stream_rows(-1);
            printf("few rows threads=2 expert %s (%3d,%d)@(%d,%d)%s: B packed GFLOP/s %5.1f per-CPU-second %5.1f;"
                   " B in place GFLOP/s %5.1f per-CPU-second %5.1f\n", tB ? "dinp" : "up  ", rows[r], K, K, N,
                   tB ? "^T" : "  ", p.wall, p.cpu, q.wall, q.cpu);
        }
    // The in-place path's B panel read in place by every row panel, or copied by its first
    // reader for the others (kernels/cpu/gemm.c:stream_tiles); then op(A) = A packed into
    // panels, or read where it lies (kernels/cpu/gemm.c:tile_avx512_ain; a kernel set without
    // that tile packs either way).
    Shape cshapes[] = {
        {"expert up, 512 rows (512,512)@(512,1024)", 512, 1024, 512},
        {"expert up, 2048 rows (2048,512)@(512,1024)", 2048, 1024, 512},
        {"expert down, 1024 rows (1024,1024)@(1024,512)", 1024, 512, 1024},
        {"deepseek expert up (1024,512)@(512,384)", 1024, 384, 512},
    };
    Shape ashapes[] = {
        {"q projection, one sequence (256,512)@(512,512)", 256, 512, 512},
        {"expert up, 768 rows (768,512)@(512,1024)", 768, 1024, 512},
        {"deepseek expert up (1024,512)@(512,384)", 1024, 384, 512},
        {"head (2048,512)@(512,256)", 2048, 256, 512},
    };
    in_turn("copy", "B in place", "copied", gemm_set_copy_b, cshapes, 4);
    in_turn("ain", "A packed", "A in place", gemm_set_a_in_place, ashapes, 4);
    omp_set_num_threads(2);
    // A weight gradient's 8 leaves (one per sequence) of an expert's rows or of a dense
    // layer's tokens: one by one against in one call, side by side, 2 threads.
    int lens[] = {64, 128, 256};
    for (size_t r = 0; r < sizeof lens / sizeof lens[0]; r++)
        for (int N = 512; N <= 1024; N += 512) {
            Rate a = leaves(0, 512, N, lens[r], 8, 9), b = leaves(1, 512, N, lens[r], 8, 9);
            printf("leaves threads=2 dw (512,%d) += 8 leaves of %3d rows: one by one GFLOP/s %5.1f per-CPU-second "
                   "%5.1f; in one call GFLOP/s %5.1f per-CPU-second %5.1f\n", N, lens[r], a.wall, a.cpu, b.wall, b.cpu);
        }
    // Chunked products whose pieces are longer than a K block (1024): the tiles' tree against
    // each piece its own blocked product (kernels/cpu/gemm_tree.c: chunked_long), in the
    // order tree, pieces, pieces, tree, the better of each kept, 2 threads: the head's input
    // gradient over a vocabulary of 32000 (the medium presets') in one piece and in 4
    // (tensor_reduce_chunks=4), and an expert's input gradient over a width of 7168.
    struct { const char *what; int M, N, K, chunks; } lshapes[] = {
        {"head dinp, one piece (256,32000)@(512,32000)^T", 256, 512, 32000, 1},
        {"head dinp, 4 pieces (256,32000)@(512,32000)^T", 256, 512, 32000, 4},
        {"expert dinp, one piece (256,7168)@(2048,7168)^T", 256, 2048, 7168, 1},
    };
    for (size_t s = 0; s < sizeof lshapes / sizeof lshapes[0]; s++) {
        Rate r[4];
        for (int v = 0; v < 4; v++) {
            gemm_set_long_pieces(v == 1 || v == 2);
            r[v] = chunked(lshapes[s].M, lshapes[s].N, lshapes[s].K, lshapes[s].chunks, 3);
        }
        gemm_set_long_pieces(1);
        Rate tree = r[0].wall > r[3].wall ? r[0] : r[3], own = r[1].wall > r[2].wall ? r[1] : r[2];
        printf("long pieces threads=2 %-48s: tiles' tree GFLOP/s %5.1f per-CPU-second %5.1f; a product a piece "
               "GFLOP/s %5.1f per-CPU-second %5.1f (%.2fx)\n", lshapes[s].what, tree.wall, tree.cpu, own.wall, own.cpu,
               own.wall / tree.wall);
    }
    return 0;
}
