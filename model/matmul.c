// model/matmul.c: the matmul layer every layer uses: the flops it counts, the weight
// gradient's leaves added along the canonical tree, a contraction cut into pieces; the
// products themselves are kernels (kernels/matmul.h).
#include "model/matmul.h"
#include "model/weights16.h"
#include "base/treesum.h"
#include "base/fresh.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"
#include <sys/mman.h>

// 1 while every product's row is a function of its own operand rows alone (the ordered
// GEMM, the plain loop, the GPU's ordered GEMM); 0 under OpenBLAS or cuBLAS. Set at start-up.
static int rows_independent = 1;

void matmul_set_impl(const char *impl, int gpu_cublas) {
    if (!strcmp(impl, "ordered")) matmul_cpu_use_openblas(0);
    else if (!strcmp(impl, "openblas")) matmul_cpu_use_openblas(1);
    else if (!strcmp(impl, "plain")) matmul_cpu_use_openblas(0);   // its kernels are backend_cpu_plain's (train.c)
    else die("matmul_impl '%s' is not one of: ordered, openblas, plain", impl);
    rows_independent = strcmp(impl, "openblas") && !gpu_cublas;
}

int matmul_rows_independent(void) { return rows_independent; }

// A product whose weight has a 16-bit copy (bf16_storage, model/weights16.h) runs the
// kernel's 16-bit twin (kernels/matmul16.h) on that copy and on its other operand, a bf16-
// valued activation or gradient: one made 16-bit by its kernel (matmul_packed) read in
// place, any other packed into a 16-bit temporary for the call (docs/performance-gpu.md's
// step 3 makes more of them 16-bit where they are made).
// The weight gradients' products, which read no weight, run on 16-bit operands too under
// bf16_storage, both packed for the call (on an H200 a product on bf16 storage took
// 0.29-0.33 of the time of its float32 operands converted inside cuBLAS, packing each
// operand a fraction of that). Exact, so the float32 products' bits.
static uint16_t *packed_copy(const float *x, size_t n, size_t cap, const char *name) {
    uint16_t *h = mem_alloc_uninit(MEM_TEMP, sizeof(uint16_t) * (cap ? cap : 1), name);
    kern()->cast->pack_bf16(h, x, n);
    return h;
}

// The operands shared by several products (matmul_share), and those made 16-bit by their
// kernel (matmul_packed: `borrowed`, h the caller's, x in the slot's reserved range): the
// device's own (each device is a thread), a few at a time; an operand shared again inside
// its sharing (a layer's, then a product's own) counts its users. A slot keeps its reserved
// range for the next operand that fits (no system call a step once the ranges have grown).
enum { SHARED_MAX = 8 };
static _Thread_local struct {
    const float *x;
    size_t n;
    uint16_t *h;
    int users, borrowed;
    void *range;          // addresses reserved, never mapped (matmul_packed)
    size_t range_bytes;
} shared[SHARED_MAX];

static int free_slot(void) {
    for (int i = 0; i < SHARED_MAX; i++)
        if (!shared[i].h) return i;
    die("internal: more than %d operands shared by products at once", SHARED_MAX);
}

// The 16-bit operand (matmul_packed) whose range holds x, or -1.
static int borrowed_at(const float *x) {
    uintptr_t a = (uintptr_t)x;
    for (int i = 0; i < SHARED_MAX; i++)
        if (shared[i].h && shared[i].borrowed && a >= (uintptr_t)shared[i].x &&
            a < (uintptr_t)(shared[i].x + (shared[i].n ? shared[i].n : 1)))
            return i;
    return -1;
}

void matmul_share(const float *x, size_t n) { matmul_share_cap(x, n, n); }

void matmul_share_cap(const float *x, size_t n, size_t cap) {
    if (!weights16_on() || !x || borrowed_at(x) >= 0) return;
    for (int i = 0; i < SHARED_MAX; i++)
        if (shared[i].h && shared[i].x == x && shared[i].n == n) { shared[i].users++; return; }
    int i = free_slot();
    shared[i].x = x;
    shared[i].n = n;
    shared[i].users = 1;
    shared[i].borrowed = 0;
    shared[i].h = packed_copy(x, n, MM_MAX(n, cap), "an operand of several products, 16-bit (bf16_storage)");
}

void matmul_unshare(const float *x, size_t n) {
    if (!x || borrowed_at(x) >= 0) return;
    for (int i = 0; i < SHARED_MAX; i++)
        if (shared[i].h && shared[i].x == x && shared[i].n == n && --shared[i].users == 0) {
            mem_free(shared[i].h);
            shared[i].x = NULL;
            shared[i].h = NULL;
        }
}

// Slot i's reserved range, at least `bytes` long.
static void *reserved(int i, size_t bytes) {
    if (shared[i].range_bytes >= bytes) return shared[i].range;
    if (shared[i].range) munmap(shared[i].range, shared[i].range_bytes);
    void *r = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) die("could not reserve %zu bytes of addresses for a 16-bit operand", bytes);
    shared[i].range = r;
    shared[i].range_bytes = bytes;
    return r;
}

const float *matmul_packed(uint16_t *h, size_t n) {
    if (!weights16_on()) die("internal: a 16-bit operand without bf16_storage");
    int i = free_slot();
    void *r = reserved(i, sizeof(float) * (n ? n : 1));
    shared[i].x = r;
    shared[i].n = n;
    shared[i].h = h;
    shared[i].users = 1;
    shared[i].borrowed = 1;
    return r;
}

void matmul_packed_free(const float *p) {
    if (!p) return;
    int i = borrowed_at(p);
    if (i < 0) { mem_free((void *)p); return; }
    if (shared[i].x != p) die("internal: matmul_packed_free inside a 16-bit operand, not at its start");
    mem_free(shared[i].h);
    shared[i].x = NULL;
    shared[i].h = NULL;
}

const float *matmul_packed_copy(const float *p, size_t cap, const char *name) {
    int i = borrowed_at(p);
    if (i < 0 || shared[i].x != p) die("internal: matmul_packed_copy of an operand not from matmul_packed");
    size_t n = shared[i].n;
    uint16_t *h = mem_alloc(MEM_TEMP, sizeof(uint16_t) * (cap ? cap : 1), name);
    mem_copy(h, shared[i].h, sizeof(uint16_t) * n);
    return matmul_packed(h, n);
}

// The shared operand whose range holds the n floats at x (n may be 0: a leaf without rows,
// at most at the range's end), or -1.
static int shared_of(const float *x, size_t n) {
    uintptr_t a = (uintptr_t)x;
    for (int i = 0; i < SHARED_MAX; i++) {
        uintptr_t s = (uintptr_t)shared[i].x;
        if (shared[i].h && a >= s && (a - s) % sizeof(float) == 0 && (a - s) / sizeof(float) + n <= shared[i].n)
            return i;
    }
    return -1;
}

// The n floats at x packed: inside a shared operand, that operand's 16-bit numbers; else a
// new temporary, which packed_free(h, x, n) frees (the same x and n: the same decision).
static uint16_t *packed(const float *x, size_t n) {
    int i = shared_of(x, n);
    if (i >= 0) return shared[i].h + ((uintptr_t)x - (uintptr_t)shared[i].x) / sizeof(float);
    return packed_copy(x, n, n, "a product's activation, 16-bit (bf16_storage)");
}
static void packed_free(uint16_t *h, const float *x, size_t n) {
    if (shared_of(x, n) < 0) mem_free(h);
}

// A product about to read x as floats: x must not be a 16-bit operand's (matmul_packed).
static void floats_at(const float *x) {
    if (borrowed_at(x) >= 0)
        die("internal: a 16-bit operand given to a product on float32 operands (its weight has no 16-bit copy)");
}

// The device's flop count (2 M N K per product), which the planner counts too.
static void count_flops(int M, int N, int K) {
    if (M == 0 || N == 0) return;
    mem_device()->flops += 2.0 * M * N * K;
}

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) die("internal: gemm takes alpha 1 and beta 0 or 1");
    count_flops(M, N, K);
    floats_at(A);
    floats_at(B);
    kern()->matmul->gemm(transA, transB, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc);
}

void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    count_flops(T, OC, C);
    const uint16_t *w16 = weights16_find(w, (size_t)C * OC);
    if (!w16) {
        floats_at(inp);
        kern()->matmul->matmul_forward(out, inp, w, T, C, OC, accumulate);
        return;
    }
    uint16_t *a = packed(inp, (size_t)T * C);
    kern()->matmul16->matmul_forward(out, a, w16, T, C, OC, accumulate);
    packed_free(a, inp, (size_t)T * C);
}

void matmul_dw_leaf(float *g, const float *inp, const float *dout, int len, int C, int OC, int onto) {
    if (C == 0 || OC == 0) return;
    count_flops(C, OC, len);
    if (!weights16_on()) { kern()->matmul->matmul_backward_dw(g, inp, dout, len, C, OC, onto); return; }
    uint16_t *a = packed(inp, (size_t)len * C), *d = packed(dout, (size_t)len * OC);
    kern()->matmul16->matmul_backward_dw(g, a, d, len, C, OC, onto);
    packed_free(d, dout, (size_t)len * OC);
    packed_free(a, inp, (size_t)len * C);
}

// A block of gradient still holding the step's zeros (base/fresh.h) is written onto 0.0f
// rather than read back and added to: the same bits. The leaves' rows are 0 .. off[n]-1
// (off[0] = 0), packed whole under bf16_storage.
void matmul_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C, int OC) {
    if (C == 0 || OC == 0 || n <= 0) return;
    count_flops(C, OC, off[n]);
    int fresh = fresh_claim(dw, (size_t)C * OC);
    if (!weights16_on()) { kern()->matmul->matmul_backward_dw_leaves(dw, inp, dout, off, n, C, OC, !fresh); return; }
    uint16_t *a = packed(inp, (size_t)off[n] * C), *d = packed(dout, (size_t)off[n] * OC);
    kern()->matmul16->matmul_backward_dw_leaves(dw, a, d, off, n, C, OC, !fresh);
    packed_free(d, dout, (size_t)off[n] * OC);
    packed_free(a, inp, (size_t)off[n] * C);
}

// dw (C,OC) += the leaves' products along the tree, in one call where the leaves are one
// chunk's (leaf i: rows i*len ..), else leaf by leaf through a LeafSum (bf16_valued 0: the
// general product, which a GPU keeps in float32).
static void backward_dw(float *dw, const float *dout, const float *inp, int C, int OC, Leaves leaf, int bf16_valued) {
    if (leaf.nchunks == 1 && bf16_valued) {
        int *off = malloc(sizeof(int) * ((size_t)leaf.n + 1));
        if (!off) die("out of host memory for a weight gradient's %ld leaves", leaf.n);
        for (long i = 0; i <= leaf.n; i++) off[i] = (int)(i * leaf.len);
        matmul_dw_leaves(dw, inp, dout, off, (int)leaf.n, C, OC);
        free(off);
        return;
    }
    LeafSum ls;
    leafsum_begin(&ls, leaf, dw, (size_t)C * OC, "matmul dw leaf");
    for (long i = 0; i < leaf.n; i++) {
        int onto;
        float *g = leafsum_leaf_onto(&ls, &onto);   // written whole below, or added onto
        long t0 = leaf_token(leaf, i);
        // g (C,OC) = (or +=) inp[t0:t0+len]^T (C,len) @ dout[t0:t0+len] (len,OC)
        const float *x = inp + (size_t)t0 * C, *d = dout + (size_t)t0 * OC;
        if (bf16_valued) matmul_dw_leaf(g, x, d, leaf.len, C, OC, onto);
        else gemm(1, 0, C, OC, leaf.len, 1.0f, x, C, d, OC, (float)onto, g, OC);
        leafsum_push(&ls);
    }
    leafsum_end(&ls);
}

// dinp (T,C) += dout (T,OC) @ w^T: the layers' kernel (on the weight's 16-bit copy where it has one).
static void dinp_product(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    count_flops(T, C, OC);
    const uint16_t *w16 = weights16_find(w, (size_t)C * OC);
    if (!w16) {
        floats_at(dout);
        kern()->matmul->matmul_backward_dinp(dinp, dout, w, T, C, OC);
        return;
    }
    uint16_t *d = packed(dout, (size_t)T * OC);
    kern()->matmul16->matmul_backward_dinp(dinp, d, w16, T, C, OC);
    packed_free(d, dout, (size_t)T * OC);
}

// dinp (T,C) += dout (T,OC) @ w^T in float32 (dout not bf16-valued): the weight's 16-bit copy
// widened first where it has one.
static void dinp_float32(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    float *wf = weights16_widened(w, (size_t)C * OC, "a weight widened from its 16-bit copy (bf16_storage)");
    gemm(0, 1, T, C, OC, 1.0f, dout, OC, wf ? wf : w, OC, 1.0f, dinp, C);
    mem_free(wf);
}

// matmul_backward (bf16_valued 1: the layers' kernels) or matmul_backward_float32 (0: the
// general product, the same on the CPU).
static void backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int T, int C,
                     int OC, Leaves leaf, int bf16_valued) {
    if (dinp && bf16_valued) dinp_product(dinp, dout, w, T, C, OC);
    if (dinp && !bf16_valued) dinp_float32(dinp, dout, w, T, C, OC);
    if (dw) {
        if ((long)leaf.B * leaf.S != T) die("internal: matmul_backward of %d tokens given leaves of %d", T, leaf.B * leaf.S);
        backward_dw(dw, dout, inp, C, OC, leaf, bf16_valued);
    }
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, Leaves leaf) {
    if (dinp && dw) matmul_share(dout, (size_t)T * OC);   // read by both products
    backward(dinp, dw, dout, inp, w, T, C, OC, leaf, 1);
    if (dinp && dw) matmul_unshare(dout, (size_t)T * OC);
}

void matmul_backward_float32(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             int T, int C, int OC, Leaves leaf) {
    backward(dinp, dw, dout, inp, w, T, C, OC, leaf, 0);
}

// out (T,N) = A (T,K) @ op(Bm), the contraction over K cut into `chunks` pieces whose
// products are added along the tree (the kernel's gemm_chunked); op(Bm) = Bm (K,N) or,
// transB, Bm^T with Bm (N,K).
static void chunked_product(float *out, const float *A, const float *Bm, int transB, int T, int N, int K, int chunks) {
    if (chunks < 1 || K % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", K, chunks);
    count_flops(T, N, K);
    if (T == 0 || N == 0) return;
    const uint16_t *b16 = weights16_find(Bm, (size_t)K * N);
    if (!b16) {
        floats_at(A);
        kern()->matmul->gemm_chunked(transB, T, N, K, chunks, A, K, Bm, transB ? K : N, out, N);
        return;
    }
    uint16_t *a = packed(A, (size_t)T * K);
    kern()->matmul16->gemm_chunked(transB, T, N, K, chunks, a, K, b16, transB ? K : N, out, N);
    packed_free(a, A, (size_t)T * K);
}

void matmul_forward_chunked(float *out, const float *inp, const float *w, int T, int C, int OC, int chunks) {
    chunked_product(out, inp, w, 0, T, OC, C, chunks);   // w (C,OC)
}

void matmul_dinp_chunked(float *dinp, const float *dout, const float *w, int T, int C, int OC, int chunks) {
    chunked_product(dinp, dout, w, 1, T, C, OC, chunks);   // w^T (OC,C)
}

// The grouped products count the flops of all their rows, as the calls expert by expert did.
void matmul_forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC) {
    count_flops(rows[G], OC, C);
    const uint16_t *w16 = weights16_find(w, (size_t)G * C * OC);
    if (!w16) {
        floats_at(inp);
        kern()->matmul->matmul_forward_grouped(out, inp, w, rows, G, C, OC, 0);
        return;
    }
    uint16_t *a = packed(inp, (size_t)rows[G] * C);
    kern()->matmul16->matmul_forward_grouped(out, a, w16, rows, G, C, OC, 0);
    packed_free(a, inp, (size_t)rows[G] * C);
}

void matmul_dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC) {
    count_flops(rows[G], C, OC);
    const uint16_t *w16 = weights16_find(w, (size_t)G * C * OC);
    if (!w16) {
        floats_at(dout);
        kern()->matmul->matmul_backward_dinp_grouped(dinp, dout, w, rows, G, C, OC);
        return;
    }
    uint16_t *d = packed(dout, (size_t)rows[G] * OC);
    kern()->matmul16->matmul_backward_dinp_grouped(dinp, d, w16, rows, G, C, OC);
    packed_free(d, dout, (size_t)rows[G] * OC);
}

static void chunked_grouped(float *out, const float *A, const float *Bm, int transB, const int *rows, int G, int N,
                            int K, int chunks) {
    if (chunks < 1 || K % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", K, chunks);
    count_flops(rows[G], N, K);
    if (rows[G] == 0 || N == 0) return;
    const uint16_t *b16 = weights16_find(Bm, (size_t)G * K * N);
    if (!b16) {
        floats_at(A);
        kern()->matmul->gemm_chunked_grouped(transB, rows, G, N, K, chunks, A, Bm, out);
        return;
    }
    uint16_t *a = packed(A, (size_t)rows[G] * K);
    kern()->matmul16->gemm_chunked_grouped(transB, rows, G, N, K, chunks, a, b16, out);
    packed_free(a, A, (size_t)rows[G] * K);
}

void matmul_forward_chunked_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C,
                                    int OC, int chunks) {
    chunked_grouped(out, inp, w, 0, rows, G, OC, C, chunks);   // w_g (C,OC)
}

void matmul_dinp_chunked_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC,
                                 int chunks) {
    chunked_grouped(dinp, dout, w, 1, rows, G, C, OC, chunks);   // w_g^T (OC,C)
}

void matmul_dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n, int G, int C,
                              int OC) {
    if (C == 0 || OC == 0 || n <= 0 || G <= 0) return;
    count_flops(C, OC, off[(size_t)G * n]);
    int fresh = fresh_claim(dw, (size_t)G * C * OC);
    if (!weights16_on()) {
        kern()->matmul->matmul_backward_dw_leaves_grouped(dw, inp, dout, off, n, G, C, OC, !fresh);
        return;
    }
    size_t rows = (size_t)off[(size_t)G * n];   // every group's leaves, from row 0
    uint16_t *a = packed(inp, rows * C), *d = packed(dout, rows * OC);
    kern()->matmul16->matmul_backward_dw_leaves_grouped(dw, a, d, off, n, G, C, OC, !fresh);
    packed_free(d, dout, rows * OC);
    packed_free(a, inp, rows * C);
}

// ---- The rounded products: out = bf16(x @ w) (forward: x (R,C), out (R,OC)) or bf16(x @ w^T)
// (dinp: x the gradient (R,OC), out (R,C)) on R = T rows, or on the experts' groups of rows
// (rows != NULL: R = rows[G], w (G,C,OC)). A weight with no 16-bit copy: the float32 form into
// a temporary (zeroed: dinp adds onto it), packed after (what the layers did before these
// kernels, the same numbers).
static void round16(int dinp, float *out, const float *x, const float *w, const int *rows, int G, int T, int C,
                    int OC) {
    size_t R = rows ? (size_t)rows[G] : (size_t)T, nw = (size_t)(rows ? G : 1) * C * OC;
    size_t nx = R * (dinp ? OC : C), nout = R * (dinp ? C : OC);
    uint16_t *o = (uint16_t *)(void *)out;
    const uint16_t *w16 = weights16_find(w, nw);
    if (!w16) {
        float *f = mem_floats(MEM_TEMP, nout, "a product's output (float32, then 16-bit)");
        if (dinp && rows) matmul_dinp_grouped(f, x, w, rows, G, C, OC);
        if (dinp && !rows) dinp_product(f, x, w, T, C, OC);
        if (!dinp && rows) matmul_forward_grouped(f, x, w, rows, G, C, OC);
        if (!dinp && !rows) matmul_forward(f, x, w, T, C, OC, 0);
        kern()->cast->pack_bf16(o, f, nout);
        mem_free(f);
        return;
    }
    count_flops((int)R, dinp ? C : OC, dinp ? OC : C);
    uint16_t *a = packed(x, nx);
    const Matmul16Kernels *k = kern()->matmul16;
    if (dinp && rows) k->matmul_backward_dinp_grouped_round16(o, a, w16, rows, G, C, OC);
    if (dinp && !rows) k->matmul_backward_dinp_round16(o, a, w16, T, C, OC);
    if (!dinp && rows) k->matmul_forward_grouped_round16(o, a, w16, rows, G, C, OC);
    if (!dinp && !rows) k->matmul_forward_round16(o, a, w16, T, C, OC);
    packed_free(a, x, nx);
}

void matmul_forward_round16(float *out, const float *inp, const float *w, int T, int C, int OC) {
    round16(0, out, inp, w, NULL, 0, T, C, OC);
}
void matmul_dinp_round16(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    round16(1, dinp, dout, w, NULL, 0, T, C, OC);
}
void matmul_forward_grouped_round16(float *out, const float *inp, const float *w, const int *rows, int G, int C,
                                    int OC) {
    round16(0, out, inp, w, rows, G, 0, C, OC);
}
void matmul_dinp_grouped_round16(float *dinp, const float *dout, const float *w, const int *rows, int G, int C,
                                 int OC) {
    round16(1, dinp, dout, w, rows, G, 0, C, OC);
}
