// trainer/sampling.c: how the sample chooses each token, MaxText's four decode strategies
// (its inference_utils.sampling) on one row of logits z:
//   greedy    the largest logit (the first, on a tie);
//   weighted  a draw from softmax(z / temperature);
//   topk      the same draw among the top_k largest logits only (ties to the lower index);
//   nucleus   the same draw among the largest logits whose probabilities, softmax(z) without
//             the temperature, first add up to nucleus_p or more, with every logit equal to the
//             last one taken.
// A draw walks the tokens in index order, adding their weights until it passes u times
// their sum; a token left out has weight 0.
#include "trainer/sampling.h"
#include "core/common.h"
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

SamplingRule sampling_rule(const Config *c) {
    SamplingRule r = {c->decode_sampling_strategy, c->decode_sampling_top_k, c->decode_sampling_nucleus_p,
                      c->sample_temperature};
    return r;
}

typedef struct { float z; int i; } Logit;

// Largest first; on a tie, the lower index first; a NaN (a diverged model's) below every
// number, so that the order is total, as qsort needs.
static int larger_first(const void *a, const void *b) {
    const Logit *x = a, *y = b;
    float zx = isnan(x->z) ? -INFINITY : x->z, zy = isnan(y->z) ? -INFINITY : y->z;
    if (zx != zy) return zx < zy ? 1 : -1;
    return x->i - y->i;
}

static Logit *sorted_logits(const float *z, int V) {
    Logit *s = malloc(sizeof(Logit) * (size_t)V);
    if (!s) die("host out of memory for sampling (%d logits)", V);
    for (int v = 0; v < V; v++) s[v] = (Logit){z[v], v};
    qsort(s, (size_t)V, sizeof(Logit), larger_first);
    return s;
}

// topk: every token but the k largest logits' gets weight 0.
static void keep_top_k(const float *z, int V, int k, float *p) {
    Logit *s = sorted_logits(z, V);
    for (int j = k; j < V; j++) p[s[j].i] = 0.0f;
    free(s);
}

// nucleus: the smallest run of the largest logits whose softmax(z) reaches mass, and every
// logit equal to its last; the other tokens get weight 0.
static void keep_nucleus(const float *z, int V, float mass, float *p) {
    Logit *s = sorted_logits(z, V);
    double total = 0, acc = 0;
    for (int j = 0; j < V; j++) total += exp((double)s[j].z - s[0].z);
    int last = 0;   // the number of logits whose running mass stays below `mass`, at most V - 1
    for (; last < V - 1; last++) {
        acc += exp((double)s[last].z - s[0].z) / total;
        if (acc >= mass) break;
    }
    for (int v = 0; v < V; v++)
        if (z[v] < s[last].z) p[v] = 0.0f;
    free(s);
}

int sampling_choose(const float *z, int V, const SamplingRule *r, double u, float *p) {
    if (r->strategy == SAMPLING_GREEDY) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (z[v] > z[best]) best = v;
        return best;
    }
    float mx = z[0];
    for (int v = 1; v < V; v++) mx = fmaxf(mx, z[v]);
    for (int v = 0; v < V; v++) p[v] = expf((z[v] - mx) / fmaxf(r->temperature, 1e-6f));
    if (r->strategy == SAMPLING_TOPK) keep_top_k(z, V, r->top_k, p);
    if (r->strategy == SAMPLING_NUCLEUS) keep_nucleus(z, V, r->nucleus_p, p);
    double sum = 0, acc = 0;
    for (int v = 0; v < V; v++) sum += p[v];
    double at = u * sum;
    for (int v = 0; v < V; v++) {
        acc += p[v];
        if (at < acc) return v;
    }
    return V - 1;
}

// ---- the prompt ----

// Whether text is token ids, "[ID][ID]...", with blanks and '|' between them.
static int is_ids(const char *text) {
    const char *t = text;
    int n = 0;
    for (;;) {
        while (*t == ' ' || *t == '|') t++;
        if (!*t) return n > 0;
        if (*t++ != '[' || !isdigit((unsigned char)*t)) return 0;
        while (isdigit((unsigned char)*t)) t++;
        if (*t++ != ']') return 0;
        n++;
    }
}

static int prompt_ids(const char *text, int vocab, int *out) {
    int n = 0;
    for (const char *t = text; *t; t++) {
        if (*t != '[') continue;
        int digits = (int)strspn(t + 1, "0123456789");   // (digits only: is_ids checked)
        long id = digits > 9 ? LONG_MAX : strtol(t + 1, NULL, 10);
        if (id >= vocab)
            die("prompt: token %.*s, at position %d, is outside the vocabulary (vocab_size=%d)", digits, t + 1, n + 1,
                vocab);
        if (out) out[n] = (int)id;
        n++;
    }
    return n;
}

static int prompt_bytes(const char *text, int vocab, int *out) {
    int n = 0;
    for (const unsigned char *t = (const unsigned char *)text; *t; t++) {
        int b = *t;
        if (b == '\\' && (t[1] == 'n' || t[1] == 't' || t[1] == '\\')) {
            t++;
            b = *t == 'n' ? '\n' : *t == 't' ? '\t' : '\\';
        }
        if (b >= vocab)
            die("prompt: byte 0x%02x, its token %d, is outside the vocabulary (vocab_size=%d)", b, n + 1, vocab);
        if (out) out[n] = b;
        n++;
    }
    return n;
}

int sampling_prompt(const char *prompt, int vocab, int bytes, int *out) {
    if (!prompt[0]) return 0;
    if (is_ids(prompt)) return prompt_ids(prompt, vocab, out);
    if (!bytes)
        die("prompt: '%.40s' is a text, and this data's tokens are not bytes (dataset_path is a token file, and "
            "vocab_size is not 256): give "
            "the prompt as token ids, as the sample prints them, prompt=[1][415][2936] (data/hf_tokens.py ids HF_DIR "
            "TEXT prints a text's)", prompt);
    return prompt_bytes(prompt, vocab, out);
}
