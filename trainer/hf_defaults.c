// trainer/hf_defaults.c: the value transformers' config classes (MixtralConfig, DeepseekV3Config,
// DeepseekV2Config, as transformers 5.23 has them) take for a key of config.json, whether the file gives it or
// leaves it out: a key left out takes the class's default, a `head_dim` or
// `num_key_value_heads` of null is made from the others, and RoPE's parameters are gathered as
// transformers 5 does it from a file of any age (`rope_parameters`, or the older `rope_scaling`
// beside `rope_theta`, with yarn's defaults, or nothing: the default RoPE at the class's base
// wavelength). Published models' files often leave keys out (Mixtral-8x7B's has no head_dim,
// rope_parameters or router_jitter_noise; DeepSeek-V3's yarn no truncate or attention_factor),
// and load_hf and hf-preset read them as transformers would.
#include "trainer/hf_json.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *key, *mixtral, *v3, *v2; } Default;   // MixtralConfig, DeepseekV3Config, DeepseekV2Config; NULL: none
static const Default DEFAULTS[] = {
    {"vocab_size", "32000", "129280", "102400"},
    {"hidden_size", "4096", "7168", "4096"},
    {"intermediate_size", "14336", "18432", "11008"},
    {"moe_intermediate_size", NULL, "2048", "1407"},
    {"num_hidden_layers", "32", "61", "32"},
    {"num_attention_heads", "32", "128", "32"},
    {"num_key_value_heads", "8", "128", NULL},   // (V2's None: one per query head)
    {"num_experts_per_tok", "2", "8", NULL},     // (V2's None: a file must give it)
    {"num_local_experts", "8", NULL, NULL},
    {"n_routed_experts", NULL, "256", "64"},
    {"n_shared_experts", NULL, "1", "2"},
    {"routed_scaling_factor", NULL, "2.5", "1.0"},
    {"kv_lora_rank", NULL, "512", "512"},
    {"q_lora_rank", NULL, "1536", "1536"},
    {"qk_rope_head_dim", NULL, "64", "64"},
    {"qk_nope_head_dim", NULL, "128", "128"},
    {"v_head_dim", NULL, "128", "128"},
    {"n_group", NULL, "8", "null"},
    {"topk_group", NULL, "4", "null"},
    {"topk_method", NULL, NULL, "\"greedy\""},
    {"first_k_dense_replace", NULL, "3", "0"},
    {"num_nextn_predict_layers", NULL, "1", NULL},   // (num_mtp_layers): the layers load_hf leaves out
    {"norm_topk_prob", NULL, "true", "false"},
    {"rope_interleave", NULL, "true", NULL},   // (V2 rotates interleaved pairs always)
    {"attention_bias", NULL, "false", "false"},
    {"max_position_embeddings", "131072", "4096", "2048"},
    {"rms_norm_eps", "1e-05", "1e-06", "1e-06"},
    {"hidden_act", "\"silu\"", "\"silu\"", "\"silu\""},
    {"tie_word_embeddings", "false", "false", "false"},
    {"attention_dropout", "0.0", "0.0", "0.0"},
    {"sliding_window", "null", NULL, NULL},
    {"router_jitter_noise", "0.0", NULL, NULL},
};
#define NDEFAULTS ((int)(sizeof DEFAULTS / sizeof DEFAULTS[0]))

static int copy(char *out, size_t cap, const char *s) {
    return (size_t)snprintf(out, cap, "%s", s) < cap;
}

int hf_model_class(const char *text) {
    char kind[64] = "";
    json_member(text, "model_type", kind, sizeof kind);
    return !strcmp(kind, "\"mixtral\"") ? HF_MIXTRAL : !strcmp(kind, "\"deepseek_v3\"") ? HF_DEEPSEEK_V3
         : !strcmp(kind, "\"deepseek_v2\"") ? HF_DEEPSEEK_V2 : HF_OTHER;
}

// The class's default for key, 0 when it has none (another model_type's: Mixtral's, which
// hf-preset refuses by name).
static int class_default(int cls, const char *key, char *out, size_t cap) {
    for (int i = 0; i < NDEFAULTS; i++)
        if (!strcmp(DEFAULTS[i].key, key)) {
            const char *v = cls == HF_DEEPSEEK_V3 ? DEFAULTS[i].v3 : cls == HF_DEEPSEEK_V2 ? DEFAULTS[i].v2 : DEFAULTS[i].mixtral;
            return v && copy(out, cap, v);
        }
    return 0;
}

// The value as given, 0 when left out or (for the keys made from others) null.
static int given(const char *text, const char *key, char *out, size_t cap, int null_is_unset) {
    if (!json_member(text, key, out, cap)) return 0;
    return !(null_is_unset && !strcmp(out, "null"));
}

// transformers takes `beta_fast or 32`: a 0, a null or a false is the default too, put before
// the file's member so that it is the one read (a reader takes a key's first member).
static int falsy(const char *v) {
    char *end;
    double x = strtod(v, &end);
    return !strcmp(v, "null") || !strcmp(v, "false") || (end != v && *end == '\0' && x == 0);
}

// What transformers' yarn takes for members its parameters leave out (older files, such as
// DeepSeek-V3's rope_scaling, give neither truncate nor attention_factor), as ", KEY: VALUE"
// members into extra: truncate true, beta_fast 32, beta_slow 1, and the attention factor made
// from factor and, where both are given and nonzero, mscale and mscale_all_dim (HF's get_mscale).
// A falsy beta (falsy above) or a null attention_factor counts as left out, as transformers reads it.
static void yarn_defaults(const char *dict, char *extra, size_t cap) {
    char v[64], m[64], a[64];
    size_t at = 0;
    if (!json_member(dict, "truncate", v, sizeof v)) at += (size_t)snprintf(extra + at, cap - at, ", \"truncate\": true");
    if (!json_member(dict, "beta_fast", v, sizeof v) || falsy(v))
        at += (size_t)snprintf(extra + at, cap - at, ", \"beta_fast\": 32");
    if (!json_member(dict, "beta_slow", v, sizeof v) || falsy(v))
        at += (size_t)snprintf(extra + at, cap - at, ", \"beta_slow\": 1");
    if ((json_member(dict, "attention_factor", v, sizeof v) && strcmp(v, "null")) || !json_member(dict, "factor", v, sizeof v))
        return;   // (a null attention_factor is made from the others, as transformers makes it)
    double f = strtod(v, NULL), att = 1.0;
    double ms = json_member(dict, "mscale", m, sizeof m) ? strtod(m, NULL) : 0;
    double all = json_member(dict, "mscale_all_dim", a, sizeof a) ? strtod(a, NULL) : 0;
    if (f > 1) att = ms != 0 && all != 0 ? (0.1 * ms * log(f) + 1.0) / (0.1 * all * log(f) + 1.0) : 0.1 * log(f) + 1.0;
    snprintf(extra + at, cap - at, ", \"attention_factor\": %.17g", att);
}

// RoPE's parameters as transformers 5 gathers them: rope_parameters, else rope_scaling, else
// none; their rope_type (or the older `type`), "default" if none; their rope_theta, else the
// file's, else the class's (Mixtral's 1e6, DeepSeek's (V2 and V3) the base class's 10000).
static int rope(const char *text, int deepseek, char *out, size_t cap) {
    char dict[1024] = "", kind[64] = "\"default\"", theta[64];
    if (!json_member(text, "rope_parameters", dict, sizeof dict) || dict[0] != '{')
        if (!json_member(text, "rope_scaling", dict, sizeof dict) || dict[0] != '{') dict[0] = '\0';
    if (dict[0] && !json_member(dict, "rope_type", kind, sizeof kind)) json_member(dict, "type", kind, sizeof kind);
    if (!(dict[0] && json_member(dict, "rope_theta", theta, sizeof theta)) &&
        !json_member(text, "rope_theta", theta, sizeof theta))
        copy(theta, sizeof theta, deepseek ? "10000.0" : "1000000.0");
    if (!strcmp(kind, "\"default\""))
        return (size_t)snprintf(out, cap, "{\"rope_type\": \"default\", \"rope_theta\": %s}", theta) < cap;
    // Other kinds as given, with their type and base wavelength where the file put them apart,
    // and yarn's members taken by default where they are left out.
    char *body = dict[0] ? strchr(dict, '{') + 1 : (char *)"}", extra[256] = "";
    if (!strcmp(kind, "\"yarn\"")) yarn_defaults(dict, extra, sizeof extra);
    return (size_t)snprintf(out, cap, "{\"rope_type\": %s, \"rope_theta\": %s%s%s%s", kind, theta, extra,
                            strspn(body, " \t\r\n}") == strlen(body) ? "" : ", ", body) < cap;
}

int hf_config_value(const char *text, const char *key, char *out, size_t cap) {
    int cls = hf_model_class(text), deepseek = cls == HF_DEEPSEEK_V3 || cls == HF_DEEPSEEK_V2;
    if (!strcmp(key, "rope_parameters")) return rope(text, deepseek, out, cap);
    if (!strcmp(key, "num_key_value_heads") && !given(text, key, out, cap, 1) &&
        (cls == HF_DEEPSEEK_V2 || json_member(text, key, out, cap)))   // null (V2's default too): one per query head
        return hf_config_value(text, "num_attention_heads", out, cap);
    if (!strcmp(key, "head_dim") && !deepseek && !given(text, key, out, cap, 1)) {   // hidden / heads
        char d[64], h[64];
        if (!hf_config_value(text, "hidden_size", d, sizeof d) || !hf_config_value(text, "num_attention_heads", h, sizeof h))
            return 0;
        long heads = atol(h);
        return heads > 0 && (size_t)snprintf(out, cap, "%ld", atol(d) / heads) < cap;
    }
    return json_member(text, key, out, cap) || class_default(cls, key, out, cap);
}
