// trainer/hf_preset.c: ./train hf-preset DIR, the model keys of a preset for the Hugging Face
// model in DIR (its config.json: MixtralForCausalLM, DeepseekV3ForCausalLM or DeepseekV2ForCausalLM), so that a model
// from the Hub, or from transformers' save_pretrained, trains here:
//
//   ./train hf-preset hf/ > my.yml
//   ./train my.yml load_hf=hf/ dataset_path=my.bin steps=1000
//
// Each key is read from its HF counterpart (PAIRS below, the inverse of trainer/hf.c's
// hf_config), as transformers reads it: a key the file leaves out takes its config class's
// default (trainer/hf_defaults.c), RoPE's parameters come from a file of any age. The config made so is then checked against
// config.json key by key, as load_hf checks it (hf_check_config): what this prints is what
// load_hf accepts, and a config.json that meshmoe cannot express is refused, naming the key.
// The run's own keys (batch, sequence, steps, data, mesh) are left to the user.
#include "trainer/hf.h"
#include "base/paths.h"
#include "trainer/hf_json.h"
#include "base/config.h"
#include "core/common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BOTH, MIXTRAL, DEEPSEEK };
typedef struct { const char *hf, *key; int block; } Pair;
static const Pair PAIRS[] = {
    {"vocab_size", "vocab_size", BOTH},
    {"hidden_size", "base_emb_dim", BOTH},
    {"num_hidden_layers", "base_num_decoder_layers", BOTH},
    {"num_attention_heads", "base_num_query_heads", BOTH},
    {"num_experts_per_tok", "num_experts_per_tok", BOTH},
    {"intermediate_size", "base_mlp_dim", BOTH},   // Mixtral's experts', DeepSeek's dense layers'
    {"max_position_embeddings", "max_position_embeddings", BOTH},
    {"rms_norm_eps", "normalization_layer_epsilon", BOTH},
    {"num_key_value_heads", "base_num_kv_heads", MIXTRAL},
    {"head_dim", "head_dim", MIXTRAL},
    {"num_local_experts", "num_experts", MIXTRAL},
    {"moe_intermediate_size", "base_moe_mlp_dim", DEEPSEEK},
    {"n_routed_experts", "num_experts", DEEPSEEK},
    {"n_shared_experts", "shared_experts", DEEPSEEK},
    {"routed_scaling_factor", "routed_scaling_factor", DEEPSEEK},
    {"first_k_dense_replace", "first_num_dense_layers", DEEPSEEK},
    {"q_lora_rank", "q_lora_rank", DEEPSEEK},   // null: no low-rank query path (0)
    {"kv_lora_rank", "kv_lora_rank", DEEPSEEK},
    {"qk_nope_head_dim", "qk_nope_head_dim", DEEPSEEK},
    {"qk_rope_head_dim", "qk_rope_head_dim", DEEPSEEK},
    {"v_head_dim", "v_head_dim", DEEPSEEK},
    {"rope_interleave", "rope_interleave", DEEPSEEK},
};
#define NPAIRS ((int)(sizeof PAIRS / sizeof PAIRS[0]))

// What is set, in order, each key with the text it was given (printed as the preset).
typedef struct { char key[48], val[64]; } Set;
typedef struct { Config c; Set set[64]; int n; char path[CFG_STR + 64]; } Preset;

static void put(Preset *p, const char *key, const char *val) {
    if (strlen(val) >= sizeof p->set[0].val) die("hf-preset: %s: %s's value is too long: %s", p->path, key, val);
    config_set(&p->c, key, val, p->path);   // (each key is set once: the pairs and RoPE's are apart)
    if (p->n == (int)(sizeof p->set / sizeof p->set[0])) die("internal: hf-preset sets more keys than it holds");
    snprintf(p->set[p->n].key, sizeof p->set[0].key, "%s", key);
    snprintf(p->set[p->n++].val, sizeof p->set[0].val, "%s", val);
}

// A raw JSON value as config_set's text (a string unquoted, null as `null`) into out.
static void unquote(const char *name, const char *raw, char *out, size_t cap) {
    size_t n = strlen(raw);
    int quoted = n >= 2 && raw[0] == '"' && raw[n - 1] == '"';
    if (n - 2 * (size_t)quoted >= cap) die("hf-preset: \"%s\"'s value is longer than meshmoe's keys take: %s", name, raw);
    snprintf(out, cap, "%.*s", (int)(n - 2 * (size_t)quoted), raw + quoted);
}

// The value transformers reads for config.json's key `name` (the file's or the class's
// default: trainer/hf_defaults.c), as config_set's text: 0 when there is none.
static int value_of(const char *text, const char *name, char *out, size_t cap) {
    char raw[1024];
    if (!hf_config_value(text, name, raw, sizeof raw)) return 0;
    unquote(name, raw, out, cap);
    return 1;
}

// Member `name` of a JSON object (RoPE's parameters), as config_set's text: 0 when absent.
static int member_of(const char *obj, const char *name, char *out, size_t cap) {
    char raw[256];
    if (!json_member(obj, name, raw, sizeof raw)) return 0;
    unquote(name, raw, out, cap);
    return 1;
}

// RoPE, from its parameters as transformers gathers them (rope_parameters, or the older
// rope_theta and rope_scaling, or the class's default: hf_config_value).
static void put_rope(Preset *p, const char *text, int deepseek) {
    char rope[1024], v[64], kind[32] = "";
    if (!hf_config_value(text, "rope_parameters", rope, sizeof rope))
        die("hf-preset: %s: RoPE's parameters could not be read", p->path);
    member_of(rope, "rope_type", kind, sizeof kind);
    if (member_of(rope, "rope_theta", v, sizeof v)) put(p, "rope_max_timescale", v);
    if (!strcmp(kind, "default")) {   // HF's DeepseekV3 takes no mscale^2 off yarn: the whole context is "original"
        if (deepseek && value_of(text, "max_position_embeddings", v, sizeof v)) put(p, "original_max_position_embeddings", v);
        return;
    }
    if (strcmp(kind, "yarn"))
        die("hf-preset: %s: rope type \"%s\": meshmoe's RoPE is the default or yarn", p->path, kind);
    put(p, "rope_type", "yarn");
    static const char *const YARN[][2] = {{"factor", "rope_factor"},
                                          {"original_max_position_embeddings", "original_max_position_embeddings"},
                                          {"beta_fast", "beta_fast"}, {"beta_slow", "beta_slow"},
                                          {"truncate", "rope_truncate"}};
    for (int i = 0; i < 5; i++)
        if (member_of(rope, YARN[i][0], v, sizeof v)) put(p, YARN[i][1], v);
    if (deepseek && member_of(rope, "mscale", v, sizeof v)) put(p, "mscale", v);
    if (member_of(rope, "attention_factor", v, sizeof v) && strtod(v, NULL) != 1.0)
        put(p, "rope_attention_scaling", "true");   // 0.1 ln(factor) + 1, which hf_check_config checks
    if (!deepseek) put(p, "rope_interleave", "false");   // HF's Mixtral rotates half-split pairs
}

// DeepSeek-V2 routes by a softmax over all experts, its top k weighted by their probabilities
// times routed_scaling_factor (routed_score_func=softmax here): `greedy`, or with expert
// groups ranked by their best probability `group_limited_greedy` (n_routing_groups). 1 when
// its groups are read (n_group, topk_group), 0 when it has none; another method is refused.
static int v2_groups(const Preset *p, const char *text) {
    char v[64] = "";
    value_of(text, "topk_method", v, sizeof v);
    if (!strcmp(v, "greedy")) return 0;
    if (!strcmp(v, "group_limited_greedy")) return 1;
    die("hf-preset: %s: topk_method \"%s\": meshmoe routes DeepSeek-V2 models by \"greedy\" or "
        "\"group_limited_greedy\" (the top k of a softmax over all experts, or of the best groups')", p->path, v);
}

static void put_model(Preset *p, const char *text, int deepseek, int v2) {
    char v[64], groups[64], topk[64];
    put(p, "decoder_block", deepseek ? "deepseek" : "mixtral");
    put(p, "attention_type", deepseek ? "mla" : "global");
    put(p, "routed_score_func", v2 ? "softmax" : deepseek ? "sigmoid" : "");
    if (deepseek && !v2) put(p, "routed_bias", "true");   // (e_score_correction_bias: every V3 model has one)
    if (deepseek && value_of(text, "rms_norm_eps", v, sizeof v) && strtod(v, NULL) != 1e-6)
        put(p, "mla_norm_epsilon", "1e-06");   // (q_a_layernorm, kv_a_layernorm: 1e-6 in HF's class, whatever rms_norm_eps)
    for (int i = 0; i < NPAIRS; i++) {
        if (PAIRS[i].block != BOTH && PAIRS[i].block != (deepseek ? DEEPSEEK : MIXTRAL)) continue;
        if (v2 && !strcmp(PAIRS[i].hf, "rope_interleave")) continue;   // (V2's pairs are interleaved whatever it says)
        if (!value_of(text, PAIRS[i].hf, v, sizeof v)) continue;   // (hf_check_config names it if needed)
        put(p, PAIRS[i].key, strcmp(v, "null") ? v : "0");   // (DeepSeek's q_lora_rank null: no low-rank path)
    }
    if (deepseek && v2 && v2_groups(p, text)) {   // (group_limited_greedy: its groups, one or more)
        if (!value_of(text, "n_group", groups, sizeof groups) || !value_of(text, "topk_group", topk, sizeof topk) ||
            atoi(groups) < 1 || atoi(topk) < 1)
            die("hf-preset: %s: topk_method \"group_limited_greedy\" needs n_group and topk_group of 1 or more "
                "(n_routing_groups, topk_routing_group)", p->path);
        put(p, "n_routing_groups", groups);
        put(p, "topk_routing_group", topk);
    } else if (deepseek && !v2 && value_of(text, "n_group", groups, sizeof groups) && atoi(groups) > 1 &&
               value_of(text, "topk_group", topk, sizeof topk)) {   // (V3's: one group is the groups off)
        put(p, "n_routing_groups", groups);
        put(p, "topk_routing_group", topk);
    }
    put_rope(p, text, deepseek);
}

int hf_preset(const char *dir) {
    static Preset p;   // (large: the config and the keys set)
    config_defaults(&p.c);
    p.n = 0;
    path_join(p.path, sizeof p.path, dir, "config.json");
    char *text = json_read_text(p.path, "hf-preset");
    json_members_unique(text, p.path, "hf-preset");
    char kind[64] = "";
    value_of(text, "model_type", kind, sizeof kind);
    int cls = hf_model_class(text), v2 = cls == HF_DEEPSEEK_V2, deepseek = v2 || cls == HF_DEEPSEEK_V3;
    if (cls == HF_OTHER)
        die("hf-preset: %s: model_type \"%s\": meshmoe trains Mixtral (\"mixtral\"), DeepSeek-V3 "
            "(\"deepseek_v3\") and DeepSeek-V2 (\"deepseek_v2\") models", p.path, kind);
    put_model(&p, text, deepseek, v2);
    free(text);
    config_validate(&p.c);
    hf_check_config(&p.c, dir, "hf-preset");   // what load_hf will check, checked now
    printf("# The model of %s (%s), as meshmoe's keys: ./train hf-preset %s\n"
           "# Train it from its weights: ./train THIS.yml load_hf=%s dataset_path=...\n",
           p.path, v2 ? "DeepseekV2ForCausalLM" : deepseek ? "DeepseekV3ForCausalLM" : "MixtralForCausalLM", dir, dir);
    for (int i = 0; i < p.n; i++)
        printf("%s: %s\n", p.set[i].key, p.set[i].val[0] ? p.set[i].val : "\"\"");
    return 0;
}
