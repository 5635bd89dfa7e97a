// tests/fuzz/fuzz_hf_weights.c: load_hf's reading of a Hugging Face directory's tensors
// (trainer/hf_weights.c), on files as they come from the internet: the input is a config.json,
// a NUL byte, then a model.safetensors (no NUL: the whole input is config.json, the weights
// file empty). Both are written into a directory of this process, and the tensors a small
// DeepSeek-like model reads are asked for in transformers 5's names, so that every form is
// reached: one tensor, the experts' per-expert tensors and Mixtral's router name, BF16, F16
// and FP8 with its blocks' scales (quantization_config), the multi-token prediction layer's
// tensors left out, the others refused. A refusal is a die(), which jumps back here; what was
// read must lie inside the values asked for (ASan), and nothing may be left allocated. The
// property: a tensor the file holds under the name asked for, as F32, BF16 or F16, comes back
// as the file's values, widened here by this harness's own loop and compared bit for bit.
#include "fuzz.h"
#include "data/safetensors.h"
#include "trainer/hf_weights.h"
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

// The names and shapes asked for, as load_hf asks a model of 2 experts, D = 4, H = 2.
typedef struct { const char *name; int ndim; int64_t shape[3]; } Want;
static const Want WANT[] = {
    {"model.embed_tokens.weight", 2, {8, 4}},
    {"model.layers.0.self_attn.q_proj.weight", 2, {6, 4}},
    {"model.layers.0.mlp.gate.weight", 2, {2, 4}},
    {"model.layers.0.mlp.experts.gate_up_proj", 3, {2, 4, 4}},
    {"model.layers.0.mlp.experts.down_proj", 3, {2, 4, 2}},
    {"model.layers.0.mlp.gate.e_score_correction_bias", 1, {2}},
};
#define NWANT ((int)(sizeof WANT / sizeof WANT[0]))

static void write_all(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) { perror(path); abort(); }
}

// Statics, not locals: their values after die()'s longjmp are the ones last stored.
static HfWeights *w;
static StFile *file;
static float *scratch;
static char dir[64] = "", config[96], weights[96];

// An IEEE half as a float, by its fields (the loader's own conversion is what is checked).
static float half_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), e - 25);
    return sign ? -v : v;
}

// Aborts unless x (n floats, the loader's values of `name`) are the file's tensor of that
// name, where it holds one as F32, BF16 or F16; other dtypes and the per-expert form pass.
static void check_values(const StFile *held, const char *name, const float *x, size_t n) {
    const StTensor *t = held ? st_get(held, name) : NULL;
    if (!t || !(t->dtype == ST_F32 || t->dtype == ST_BF16 || t->dtype == ST_F16)) return;
    if (t->nbytes != n * st_dtype_size(t->dtype)) abort();   // the loader took another shape
    for (size_t k = 0; k < n; k++) {
        uint32_t got, want;
        float f;
        memcpy(&got, &x[k], 4);
        if (t->dtype == ST_F32) {
            memcpy(&want, (const char *)t->data + 4 * k, 4);
        } else {
            uint16_t b;
            memcpy(&b, (const char *)t->data + 2 * k, 2);
            if (t->dtype == ST_BF16) want = (uint32_t)b << 16;
            else if (f = half_value(b), isnan(f)) { if (!isnan(x[k])) abort(); continue; }
            else memcpy(&want, &f, 4);
        }
        if (got != want) {
            fprintf(stderr, "fuzz_hf_weights: '%s' value %zu is 0x%08x, the file's 0x%08x\n", name, k, got, want);
            abort();
        }
    }
}

static void remove_dir(void) {   // (at exit: the directory and its two files)
    unlink(config);
    unlink(weights);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/meshmoe-fuzz-hf.XXXXXX");
        if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
        snprintf(config, sizeof config, "%s/config.json", dir);
        snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
        atexit(remove_dir);
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t nc = nul ? (size_t)(nul - data) : size;
    write_all(config, data, nc);
    write_all(weights, nul ? nul + 1 : data, nul ? size - nc - 1 : 0);
    jmp_buf jump;
    w = NULL;
    file = NULL;
    scratch = NULL;
    if (!setjmp(jump)) {
        die_set_jump(&jump, 1);
        w = hfw_open(dir, size % 7 == 3);   // (a dry run's check now and then)
        char err[256];
        file = st_open_try(weights, err, sizeof err);   // (NULL where it is not one safetensors file)
        for (int i = 0; i < NWANT; i++) {
            const float *x = hfw_tensor(w, WANT[i].name, WANT[i].ndim, WANT[i].shape, &scratch);
            size_t n = 1;
            for (int d = 0; d < WANT[i].ndim; d++) n *= (size_t)WANT[i].shape[d];
            volatile float sum = 0;   // every value asked for is there (ASan: inside the buffer)
            for (size_t k = 0; x && k < n; k++) sum += x[k];
            (void)sum;
            if (x) check_values(file, WANT[i].name, x, n);
        }
        char said[256];
        hfw_all_read(w, said, sizeof said);
    }
    die_set_jump(NULL, 0);
    if (file) st_close(file);
    if (w) hfw_close(w);
    free(scratch);
    return 0;
}
