// trainer/hf.c: Hugging Face transformers' layout of the same model, both ways.
//
//   ./train export-hf CKPT.safetensors OUT_DIR   -> OUT_DIR/config.json, OUT_DIR/model.safetensors
//   ./train CONFIG.yml load_hf=DIR               start training from such a directory, or from a
//                                                published one (trainer/hf_weights.c reads its forms)
//
// Mixtral exports as `MixtralForCausalLM`, DeepSeek as `DeepseekV3ForCausalLM`, or with softmax
// routing (routed_score_func=softmax, DeepSeek-V2's) as `DeepseekV2ForCausalLM` (transformers
// 5.x: the experts of a layer are two fused 3-D tensors; `per-expert` after OUT_DIR writes
// them a tensor per expert and projection, as the published checkpoints hold them). meshmoe stores kernels as MaxText
// does, [in, out] and used as x @ kernel; torch's Linear stores [out, in]. So almost every
// tensor is a transpose: the kernel viewed as (R, C) (R the product of its input dimensions,
// C of its output ones, per expert for expert stacks) becomes (C, R). Transposes are exact,
// both ways.
//
// One value is not: GQA's query. MaxText folds attention's 1/sqrt(head_dim) into the query
// kernel (model/attention.c applies no scale); HF scales the scores at run time, so HF's
// q_proj is meshmoe's query times sqrt(head_dim). That product is exact only when sqrt(Dh)
// is a power of two (Dh = 16, 64, 256); for others (mixtral-tiny's 32, Mixtral-8x7B's 128)
// float32 cannot hold both the scaled kernel and the means to undo it. The export then also
// writes the unscaled kernels to OUT_DIR/meshmoe_query_kernels.safetensors, which HF ignores;
// load_hf takes them when they still match q_proj (fl(x * sqrt(Dh)) == q_proj for every
// element), so a round trip gives back every weight bit for bit. MLA scales at run time on
// both sides: nothing to fold there.
//
// The mapping table below is the one place that knows the HF names.
#include "trainer/step.h"
#include "trainer/hf.h"
#include "trainer/checkpoint.h"   // checkpoint_load_param: a device's part of a whole tensor
#include "optim/offload.h"        // ema_restart
#include "model/model.h"
#include "data/safetensors.h"
#include "base/paths.h"     // atomic_file_open, _hold, atomic_files_commit: the export's files as a set
#include "base/memory.h"    // mem_upload: the routing biases onto the device
#include "core/common.h"
#include "trainer/hf_json.h"   // config.json, read
#include "trainer/hf_weights.h"   // the files' tensors in any of their forms
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <errno.h>
#include <unistd.h>

#define SIDECAR "meshmoe_query_kernels.safetensors"

// How one meshmoe tensor lands in an HF tensor.
typedef enum { COPY, TRANSPOSE, EXPERT_TRANSPOSE } Move;
typedef struct {
    const char *maxtext;   // the layout key's suffix after "decoder/layers_<l>/" (or the whole key)
    const char *hf;        // HF's name (after "model.layers.<l>." for a layer's tensor)
    Move move;
    int part, parts;       // rows [part*C, (part+1)*C) of an HF tensor of parts*C rows (gate_up_proj)
    int in_dims;           // the kernel's input dimensions (R is their product): 2 for out/kernel [N,Dh,D]
} Rule;

static const Rule RULES[] = {
    {"token_embedder/embedding", "model.embed_tokens.weight", COPY, 0, 1, 1},
    {"decoder/decoder_norm/scale", "model.norm.weight", COPY, 0, 1, 1},
    {"decoder/logits_dense/kernel", "lm_head.weight", TRANSPOSE, 0, 1, 1},
    {"pre_self_attention_layer_norm/scale", "input_layernorm.weight", COPY, 0, 1, 1},
    {"post_self_attention_layer_norm/scale", "post_attention_layernorm.weight", COPY, 0, 1, 1},
    {"self_attention/query/kernel", "self_attn.q_proj.weight", TRANSPOSE, 0, 1, 1},   // GQA: times sqrt(Dh)
    {"self_attention/key/kernel", "self_attn.k_proj.weight", TRANSPOSE, 0, 1, 1},
    {"self_attention/value/kernel", "self_attn.v_proj.weight", TRANSPOSE, 0, 1, 1},
    {"self_attention/out/kernel", "self_attn.o_proj.weight", TRANSPOSE, 0, 1, 2},
    {"self_attention/wq_a/kernel", "self_attn.q_a_proj.weight", TRANSPOSE, 0, 1, 1},
    {"self_attention/q_norm/scale", "self_attn.q_a_layernorm.weight", COPY, 0, 1, 1},
    {"self_attention/wq_b/kernel", "self_attn.q_b_proj.weight", TRANSPOSE, 0, 1, 1},
    {"self_attention/wkv_a/kernel", "self_attn.kv_a_proj_with_mqa.weight", TRANSPOSE, 0, 1, 1},
    {"self_attention/kv_norm/scale", "self_attn.kv_a_layernorm.weight", COPY, 0, 1, 1},
    {"self_attention/wkv_b/kernel", "self_attn.kv_b_proj.weight", TRANSPOSE, 0, 1, 1},
    {"mlp/wi_0/kernel", "mlp.gate_proj.weight", TRANSPOSE, 0, 1, 1},
    {"mlp/wi_1/kernel", "mlp.up_proj.weight", TRANSPOSE, 0, 1, 1},
    {"mlp/wo/kernel", "mlp.down_proj.weight", TRANSPOSE, 0, 1, 1},
    {"MoeBlock_0/gate/kernel", "mlp.gate.weight", TRANSPOSE, 0, 1, 1},
    {"MoeBlock_0/wi_0", "mlp.experts.gate_up_proj", EXPERT_TRANSPOSE, 0, 2, 1},   // [E,D,H] -> rows 0..H-1 of [E,2H,D]
    {"MoeBlock_0/wi_1", "mlp.experts.gate_up_proj", EXPERT_TRANSPOSE, 1, 2, 1},   // -> rows H..2H-1
    {"MoeBlock_0/wo", "mlp.experts.down_proj", EXPERT_TRANSPOSE, 0, 1, 1},        // [E,H,D] -> [E,D,H]
    {"shared_experts/wi_0/kernel", "mlp.shared_experts.gate_proj.weight", TRANSPOSE, 0, 1, 1},
    {"shared_experts/wi_1/kernel", "mlp.shared_experts.up_proj.weight", TRANSPOSE, 0, 1, 1},
    {"shared_experts/wo/kernel", "mlp.shared_experts.down_proj.weight", TRANSPOSE, 0, 1, 1},
};
#define NRULES ((int)(sizeof RULES / sizeof RULES[0]))
// DeepSeek's routing bias (non-trained state, model_bias_name) -> the router's buffer.
#define HF_BIAS "mlp.gate.e_score_correction_bias"

// The rule for a layout key, and HF's full name for it.
static const Rule *rule_for(const char *key, char *hf, size_t cap) {
    int l, n = 0;
    const char *rest = key;
    if (sscanf(key, "decoder/layers_%d/%n", &l, &n) == 1 && n > 0) rest = key + n;
    for (int i = 0; i < NRULES; i++)
        if (!strcmp(RULES[i].maxtext, rest)) {
            if (rest == key) snprintf(hf, cap, "%s", RULES[i].hf);
            else snprintf(hf, cap, "model.layers.%d.%s", l, RULES[i].hf);
            return &RULES[i];
        }
    die("internal: no Hugging Face name for '%s'", key);
}

// A tensor of the layout as (batch, R, C): batch = experts for an expert stack, R the
// product of the input dimensions after it, C the product of the rest (the outputs).
typedef struct { int batch, R, C; } View;
static View view_of(const ParamSpec *s, const Rule *r) {
    View v = {1, 1, 1};
    int d = 0;
    if (r->move == EXPERT_TRANSPOSE) v.batch = s->gshape[d++];
    for (int i = 0; i < r->in_dims; i++) v.R *= s->gshape[d++];
    for (; d < s->ndim; d++) v.C *= s->gshape[d];
    if (r->move == COPY) { v.C *= v.R; v.R = 1; }
    return v;
}

// HF's shape of the tensor a rule writes: COPY keeps the layout's, TRANSPOSE (parts*C, R),
// EXPERT_TRANSPOSE (batch, parts*C, R).
static int hf_shape(const ParamSpec *s, const Rule *r, int64_t *shape) {
    View v = view_of(s, r);
    if (r->move == COPY) {
        for (int d = 0; d < s->ndim; d++) shape[d] = s->gshape[d];
        return s->ndim;
    }
    int n = 0;
    if (r->move == EXPERT_TRANSPOSE) shape[n++] = v.batch;
    shape[n++] = (int64_t)r->parts * v.C;
    shape[n++] = v.R;
    return n;
}

// meshmoe (batch, R, C) <-> HF (batch, parts*C, R) rows [part*C, (part+1)*C): dir 1 writes hf
// from mm, dir 0 writes mm from hf.
static void move_tensor(float *mm, float *hf, const ParamSpec *s, const Rule *r, int dir) {
    View v = view_of(s, r);
    size_t n = (size_t)v.batch * v.R * v.C;
    if (r->move == COPY) {
        if (dir) memcpy(hf, mm, sizeof(float) * n);
        else memcpy(mm, hf, sizeof(float) * n);
        return;
    }
    size_t hrows = (size_t)r->parts * v.C;
    for (int b = 0; b < v.batch; b++)
        for (int i = 0; i < v.R; i++)
            for (int j = 0; j < v.C; j++) {
                float *a = mm + ((size_t)b * v.R + i) * v.C + j;
                float *h = hf + ((size_t)b * hrows + (size_t)r->part * v.C + j) * v.R + i;
                if (dir) *h = *a;
                else *a = *h;
            }
}

static int is_gqa_query(const Config *c, const Rule *r) {
    return !cfg_is_mla(c) && !strcmp(r->maxtext, "self_attention/query/kernel");
}
static double query_scale(const Config *c) { return sqrt((double)c->head_dim); }
static int scale_is_exact(const Config *c) {   // sqrt(Dh) a power of two
    double s = query_scale(c);
    return s == ldexp(1.0, ilogb(s));
}

// ---------------------------------------------------------------------------------------
// config.json: every key HF's config class reads that this model fixes. Values are JSON text.

typedef struct { const char *key, *mm; char val[512]; } HfKey;   // HF key, meshmoe key(s), value

// The shortest decimal that reads back as the same float.
static void fmt_float(char *buf, size_t cap, float x) {
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".eEn")) snprintf(buf + strlen(buf), cap - strlen(buf), ".0");   // a JSON float
}

static void refuse(const char *why, const char *key, const char *value) {
    die("this model has no Hugging Face counterpart: %s (%s=%s)", why, key, value);
}

// rope_parameters: the default frequencies, or yarn's with every number HF's yarn reads.
// MLA's softmax scale grows by mscale^2 past the original context (model/mla.c); HF's
// DeepseekV3 does so from yarn's mscale_all_dim only, so without yarn that is refused.
// HF applies attention_factor to sin and cos: given here (1, or rope_attention_scaling's).
static int hf_rope(const Config *c, HfKey *k) {
    char theta[24], factor[24], fast[24], slow[24], att[24], ms[24];   // (fmt_float: 17 characters at most)
    fmt_float(theta, sizeof theta, c->rope_max_timescale);
    k->key = "rope_parameters";
    int extended = cfg_is_mla(c) && c->max_position_embeddings > c->original_max_position_embeddings && c->mscale != 0;
    if (c->rope_type != ROPE_YARN) {
        if (extended)
            refuse("past original_max_position_embeddings MLA's scale takes yarn's mscale^2, which HF's DeepseekV3 "
                   "applies under yarn only (set max_position_embeddings <= original_max_position_embeddings, or "
                   "rope_type=yarn)", "rope_type", "default");
        k->mm = "rope_max_timescale";
        snprintf(k->val, sizeof k->val, "{\"rope_type\": \"default\", \"rope_theta\": %s}", theta);
        return 1;
    }
    if (extended && c->rope_factor <= 1)
        refuse("HF's mscale is 1 for a factor of 1 or less, where MLA's scale here still takes 0.1 mscale ln(factor) + 1",
               "rope_factor", "<= 1");
    fmt_float(factor, sizeof factor, c->rope_factor);
    fmt_float(fast, sizeof fast, c->beta_fast);
    fmt_float(slow, sizeof slow, c->beta_slow);
    fmt_float(att, sizeof att, c->rope_attention_scaling && c->rope_factor > 1
                                   ? (float)(0.1 * log(c->rope_factor) + 1.0) : 1.0f);
    fmt_float(ms, sizeof ms, extended ? c->mscale : 0.0f);
    k->mm = "rope_type=yarn: rope_max_timescale, rope_factor, original_max_position_embeddings, beta_fast, beta_slow, "
            "rope_truncate, rope_attention_scaling, mscale";
    snprintf(k->val, sizeof k->val,
             "{\"rope_type\": \"yarn\", \"rope_theta\": %s, \"factor\": %s, \"original_max_position_embeddings\": %d, "
             "\"beta_fast\": %s, \"beta_slow\": %s, \"truncate\": %s, \"attention_factor\": %s, \"mscale\": %s, "
             "\"mscale_all_dim\": %s}",
             theta, factor, c->original_max_position_embeddings, fast, slow, c->rope_truncate ? "true" : "false", att,
             ms, ms);
    return 1;
}

// The transformers class that runs this model.
static const char *hf_class(const Config *c) {
    return !cfg_is_deepseek(c) ? "MixtralForCausalLM" : cfg_softmax_router(c) ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM";
}

// PUT: one key of config.json into k[n], its value formatted as printf does.
#define PUT(name, mmkey, ...) do { k[n].key = name; k[n].mm = mmkey; snprintf(k[n].val, sizeof k[n].val, __VA_ARGS__); n++; } while (0)
#define PUTF(name, mmkey, x) do { fmt_float(f, sizeof f, x); PUT(name, mmkey, "%s", f); } while (0)

// DeepSeek's keys: DeepseekV3 routes by sigmoid scores (with its selection bias and expert
// groups), DeepseekV2 by a softmax over all experts (routed_score_func=softmax: its "greedy"
// top k, or with groups its "group_limited_greedy", weighted by their probabilities times
// routed_scaling_factor, unnormalised). HF's
// DeepseekV2 rotates interleaved pairs always; export-hf writes them so (reorder_rotated).
static int hf_deepseek_keys(const Config *c, HfKey *k, int yarn) {
    int n = 0, v2 = cfg_softmax_router(c);
    char f[48], v[48];
    if (!cfg_is_mla(c)) refuse("DeepSeek uses MLA", "attention_type", attention_type_name(c->attention_type));
    if (!cfg_sigmoid_router(c) && !v2)
        refuse("DeepseekV3 routes by sigmoid scores, DeepseekV2 by a softmax over all experts", "routed_score_func",
               score_func_name(c->routed_score_func));
    snprintf(v, sizeof v, "%d", c->shared_experts);
    if (c->shared_experts < 1) refuse("DeepSeek has at least one shared expert", "shared_experts", v);
    float latent = c->mla_norm_epsilon > 0 ? c->mla_norm_epsilon : c->normalization_layer_epsilon;
    fmt_float(v, sizeof v, latent);
    if (latent != 1e-6f)
        refuse("DeepSeek's q_a_layernorm and kv_a_layernorm use epsilon 1e-6 whatever rms_norm_eps is",
               c->mla_norm_epsilon > 0 ? "mla_norm_epsilon" : "normalization_layer_epsilon", v);
    PUT("architectures", "decoder_block", "[\"%s\"]", hf_class(c));
    PUT("model_type", "decoder_block", v2 ? "\"deepseek_v2\"" : "\"deepseek_v3\"");
    PUT("intermediate_size", "base_mlp_dim", "%d", c->base_mlp_dim);
    PUT("moe_intermediate_size", "base_moe_mlp_dim", "%d", cfg_expert_dim(c));
    PUT("num_key_value_heads", "base_num_query_heads", "%d", c->base_num_query_heads);
    PUT("n_shared_experts", "shared_experts", "%d", c->shared_experts);
    PUT("n_routed_experts", "num_experts", "%d", c->num_experts);
    PUTF("routed_scaling_factor", "routed_scaling_factor", c->routed_scaling_factor);
    PUT("kv_lora_rank", "kv_lora_rank", "%d", c->kv_lora_rank);
    if (c->q_lora_rank > 0) PUT("q_lora_rank", "q_lora_rank", "%d", c->q_lora_rank);
    else PUT("q_lora_rank", "q_lora_rank", "null");
    PUT("qk_rope_head_dim", "qk_rope_head_dim", "%d", c->qk_rope_head_dim);
    PUT("qk_nope_head_dim", "qk_nope_head_dim", "%d", c->qk_nope_head_dim);
    PUT("v_head_dim", "v_head_dim", "%d", c->v_head_dim);
    PUT("first_k_dense_replace", "first_num_dense_layers", "%d", c->first_num_dense_layers);
    if (v2 && c->n_routing_groups > 0) {   // groups ranked by their best probability
        PUT("topk_method", "routed_score_func=softmax, n_routing_groups", "\"group_limited_greedy\"");
        PUT("n_group", "n_routing_groups", "%d", c->n_routing_groups);
        PUT("topk_group", "topk_routing_group", "%d", c->topk_routing_group);
        PUT("norm_topk_prob", "softmax weights are not normalised", "false");
    } else if (v2) {
        PUT("topk_method", "routed_score_func=softmax, n_routing_groups=-1", "\"greedy\"");
        PUT("norm_topk_prob", "softmax weights are not normalised", "false");
    } else {
        PUT("n_group", "n_routing_groups", "%d", c->n_routing_groups > 0 ? c->n_routing_groups : 1);   // groups off: one group
        PUT("topk_group", "topk_routing_group", "%d", c->n_routing_groups > 0 ? c->topk_routing_group : 1);
        PUT("norm_topk_prob", "sigmoid weights are normalised", "true");
        PUT("rope_interleave", "rope_interleave (yarn's; half-split otherwise)", "%s",
            yarn && c->rope_interleave ? "true" : "false");
    }
    PUT("attention_bias", "meshmoe has no attention bias", "false");
    return n;
}

// Mixtral's keys: grouped-query attention, the top k of the gate logits, no shared experts.
static int hf_mixtral_keys(const Config *c, HfKey *k, int yarn) {
    int n = 0;
    char v[48];
    if (cfg_is_mla(c))
        refuse("Mixtral uses grouped-query attention", "attention_type", attention_type_name(c->attention_type));
    if (c->routed_score_func != SCORE_FUNC_MIXTRAL || c->routed_bias)
        refuse("Mixtral weights the top-k experts by a softmax of their logits (routed_score_func \"\")",
               "routed_score_func", score_func_name(c->routed_score_func));
    snprintf(v, sizeof v, "%d", c->shared_experts);
    if (c->shared_experts) refuse("Mixtral has no shared experts", "shared_experts", v);
    snprintf(v, sizeof v, "%d", c->first_num_dense_layers);
    if (c->first_num_dense_layers) refuse("every Mixtral layer is MoE", "first_num_dense_layers", v);
    PUT("architectures", "decoder_block", "[\"MixtralForCausalLM\"]");
    PUT("model_type", "decoder_block", "\"mixtral\"");
    PUT("intermediate_size", "base_mlp_dim", "%d", cfg_expert_dim(c));
    PUT("num_key_value_heads", "base_num_kv_heads", "%d", c->base_num_kv_heads);
    PUT("head_dim", "head_dim", "%d", c->head_dim);
    if (yarn && c->rope_interleave)
        refuse("HF's Mixtral rotates half-split pairs only", "rope_interleave", "true");
    PUT("num_local_experts", "num_experts", "%d", c->num_experts);
    PUT("sliding_window", "meshmoe has no sliding window", "null");
    PUT("router_jitter_noise", "meshmoe has no router jitter", "0.0");
    return n;
}

static int hf_config(const Config *c, HfKey *k) {
    int n = 0;
    char f[48], v[48];
    fmt_float(v, sizeof v, c->rope_min_timescale);
    int yarn = c->rope_type == ROPE_YARN;
    if (!yarn && c->rope_min_timescale != 1.0f)
        refuse("HF's RoPE has no minimum timescale (it is 1)", "rope_min_timescale", v);
    n += cfg_is_deepseek(c) ? hf_deepseek_keys(c, k + n, yarn) : hf_mixtral_keys(c, k + n, yarn);
    PUT("vocab_size", "vocab_size", "%d", c->vocab_size);
    PUT("hidden_size", "base_emb_dim", "%d", c->base_emb_dim);
    PUT("num_hidden_layers", "base_num_decoder_layers", "%d", c->base_num_decoder_layers);
    PUT("num_attention_heads", "base_num_query_heads", "%d", c->base_num_query_heads);
    PUT("num_experts_per_tok", "num_experts_per_tok", "%d", c->num_experts_per_tok);
    PUT("hidden_act", "meshmoe's FFNs are SwiGLU", "\"silu\"");
    PUT("max_position_embeddings", "max_position_embeddings", "%d", c->max_position_embeddings);
    PUTF("rms_norm_eps", "normalization_layer_epsilon", c->normalization_layer_epsilon);
    n += hf_rope(c, k + n);
    PUT("tie_word_embeddings", "meshmoe's head is untied", "false");
    PUT("attention_dropout", "meshmoe has no dropout", "0.0");
    PUT("dtype", "float32 weights", "\"float32\"");
#undef PUT
#undef PUTF
    return n;
}

// ---------------------------------------------------------------------------------------
// Rotary pairs

// meshmoe's DeepSeek RoPE rotates half-split pairs (x[i], x[i + Dr/2]), as MaxText's does, but
// under yarn with rope_interleave (DeepSeek's own checkpoints' interleaved pairs (x[2i],
// x[2i+1])). HF's DeepseekV3 rotates interleaved pairs where config.json says rope_interleave
// (the class's default), HF's DeepseekV2 always. A rotated part's entries are only ever rotated
// and then multiplied by the same part of the other side (q_rope . k_rope), so the same model
// is the kernels whose rotated output columns are reordered. Where they are: DeepseekV3 without
// yarn (load_hf takes either kind of file, exactly; export-hf writes rope_interleave false; under
// yarn the file's rope_interleave must be the run's), and DeepseekV2 wherever meshmoe rotates
// halves (export-hf writes interleaved pairs, load_hf makes them halves again).
static int reorders_pairs(const Config *c) {
    if (!cfg_is_deepseek(c)) return 0;
    if (cfg_softmax_router(c)) return !(c->rope_type == ROPE_YARN && c->rope_interleave);
    return c->rope_type != ROPE_YARN;
}

static int file_interleaves(const char *dir) {
    char path[CFG_STR + 64], v[64] = "";
    path_join(path, sizeof path, dir, "config.json");
    char *text = json_read_text(path, "load_hf");
    int yes = hf_model_class(text) == HF_DEEPSEEK_V2 ||
              (hf_config_value(text, "rope_interleave", v, sizeof v) && !strcmp(v, "true"));
    free(text);
    return yes;
}

// k (n floats) as rows of `width` columns, the last Dr of each a rotated part: interleaved pairs
// made half-split ones (to_halves), or half-split made interleaved. Exact.
static void reorder_pairs(float *k, size_t n, int width, int Dr, int to_halves) {
    float *tmp = malloc(sizeof(float) * (size_t)(Dr > 0 ? Dr : 1));
    if (!tmp) die("out of host memory");
    for (size_t row = 0; row + (size_t)width <= n; row += (size_t)width) {
        float *x = k + row + width - Dr;
        memcpy(tmp, x, sizeof(float) * (size_t)Dr);
        for (int i = 0; i < Dr / 2; i++) {
            if (to_halves) { x[i] = tmp[2 * i]; x[i + Dr / 2] = tmp[2 * i + 1]; }
            else { x[2 * i] = tmp[i]; x[2 * i + 1] = tmp[i + Dr / 2]; }
        }
    }
    free(tmp);
}

// The row width of a kernel whose outputs are rotated (MLA's query; the key's rope part, which
// wkv_a makes beside the latent), the last qk_rope_head_dim of each row; 0 for the others.
static int rotated_width(const Config *c, const Rule *r) {
    if (!strcmp(r->maxtext, "self_attention/wq_b/kernel") || !strcmp(r->maxtext, "self_attention/query/kernel"))
        return c->qk_nope_head_dim + c->qk_rope_head_dim;
    if (!strcmp(r->maxtext, "self_attention/wkv_a/kernel")) return c->kv_lora_rank + c->qk_rope_head_dim;
    return 0;
}

// Such a kernel in meshmoe's layout (n floats), reordered; the others left as they are.
static void reorder_rotated(const Config *c, const Rule *r, float *k, size_t n, int to_halves) {
    int width = rotated_width(c, r);
    if (width) reorder_pairs(k, n, width, c->qk_rope_head_dim, to_halves);
}

// ---------------------------------------------------------------------------------------
// Export

// text written to path's temporary file, held until the export's files are all written.
static void write_text_held(const char *path, const char *text) {
    FILE *f = atomic_file_open(path);
    fputs(text, f);
    atomic_file_hold(f);   // checks the write: the stream's error flag is sticky
}

// One HF tensor being assembled.
typedef struct { char name[128]; int ndim; int64_t shape[4]; float *data; } Out;

static Out *out_tensor(Out *outs, int *n, const char *name, int ndim, const int64_t *shape) {
    for (int i = 0; i < *n; i++) if (!strcmp(outs[i].name, name)) return &outs[i];
    Out *o = &outs[(*n)++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = ndim;
    size_t size = 1;
    for (int d = 0; d < ndim; d++) { o->shape[d] = shape[d]; size *= (size_t)shape[d]; }
    o->data = calloc(size ? size : 1, sizeof(float));
    if (!o->data) die("export-hf: out of memory");
    return o;
}

static const float *ckpt_tensor(const StFile *f, const char *path, const char *name, const ParamSpec *s) {
    const StTensor *t = st_get(f, name);
    if (!t) die("export-hf: checkpoint '%s' has no tensor '%s' (written by another version of meshmoe?)", path, name);
    size_t n = 1;
    for (int d = 0; s && d < s->ndim; d++) n *= (size_t)s->gshape[d];
    if (t->dtype != ST_F32 || (s && t->nbytes != n * sizeof(float)))
        die("export-hf: checkpoint '%s': tensor '%s' is not the float32 tensor its config describes", path, name);
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "export-hf: checkpoint '%s'", path);
    checkpoint_check_finite((const float *)t->data, t->nbytes / sizeof(float), what, name, 0);
    return (const float *)t->data;
}

void hf_files(RunFiles *r, const char *key, const char *dir, int written) {
    static const char *const WRITTEN[] = {"config.json", "model.safetensors", SIDECAR};
    static const char *const READ[] = {"config.json", "model.safetensors", SIDECAR, HF_INDEX};
    if (written) { runfiles_output_dir(r, key, dir, WRITTEN, 3); return; }
    runfiles_inputs_in(r, key, dir, READ, 4);
    int n;
    char **shards = hf_dir_shards(dir, &n);   // the shards are inputs too
    if (!shards) return;
    runfiles_inputs_in(r, key, dir, (const char *const *)shards, n);
    for (int i = 0; i < n; i++) free(shards[i]);
    free(shards);
}

char **hf_read_names(const char *dir, int *n) {
    int nweights;
    char **shards = hf_dir_shards(dir, &nweights), side[CFG_STR + 64];
    path_join(side, sizeof side, dir, SIDECAR);
    int has_side = !access(side, R_OK), k = 0;   // (read_weights takes it where it can be read)
    *n = 1 + (shards != NULL) + nweights + has_side;
    char **names = calloc((size_t)*n, sizeof(char *));
    if (!names) die("load_hf: out of host memory for the names of %s's files", dir);
    names[k++] = strdup("config.json");
    if (shards) names[k++] = strdup(HF_INDEX);
    for (int i = 0; i < nweights; i++) names[k++] = shards ? shards[i] : strdup("model.safetensors");
    if (has_side) names[k++] = strdup(SIDECAR);
    free(shards);
    for (int i = 0; i < k; i++)
        if (!names[i]) die("load_hf: out of host memory for the names of %s's files", dir);
    return names;
}

// config.json: the HF config's keys, one per line, held with the export's other files.
static void write_config_json(const char *path, const HfKey *keys, int nkeys) {
    char text[8192];
    int len = snprintf(text, sizeof text, "{\n");
    for (int i = 0; i < nkeys; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "  \"%s\": %s%s\n", keys[i].key, keys[i].val,
                        i + 1 < nkeys ? "," : "");
    snprintf(text + len, sizeof text - (size_t)len, "}\n");
    write_text_held(path, text);
}

// export-hf's files compared by identity (base/runfiles.h): none written is one read.
static void export_files_check(const char *ckpt, const char *dir) {
    RunFiles files;
    runfiles_init(&files);
    runfiles_input(&files, "export-hf CKPT", ckpt);
    hf_files(&files, "export-hf OUT_DIR", dir, 1);
    runfiles_check(&files);
    runfiles_free(&files);
}

// Out tensor o added to w as the published checkpoints hold it: a layer's experts one tensor
// per expert and projection (rows of o's data, which st_writer_add does not copy), Mixtral's
// router under its older name; every other tensor as it is. Returns the tensors added.
static int add_per_expert(StWriter *w, const Out *o, int mixtral) {
    int l, end = 0, n = 0;
    char part[32] = "", name[160];
    if (sscanf(o->name, "model.layers.%d.mlp.%31[a-z_.]%n", &l, part, &end) != 2 || o->name[end]) part[0] = 0;
    if (mixtral && !strcmp(part, "gate.weight")) {
        snprintf(name, sizeof name, "model.layers.%d." HF_MIXTRAL_ROUTER, l);
        st_writer_add(w, name, ST_F32, o->ndim, o->shape, o->data);
        return 1;
    }
    int gate_up = !strcmp(part, "experts.gate_up_proj");
    if (!gate_up && strcmp(part, "experts.down_proj")) {
        st_writer_add(w, o->name, ST_F32, o->ndim, o->shape, o->data);
        return 1;
    }
    int64_t rows = gate_up ? o->shape[1] / 2 : o->shape[1], shape[2] = {rows, o->shape[2]};
    size_t size = (size_t)rows * (size_t)o->shape[2];
    for (int e = 0; e < o->shape[0]; e++)
        for (int h = 0; h <= gate_up; h++) {   // gate_up_proj: the gate's rows, then the up projection's
            hf_expert_name(name, sizeof name, mixtral, l, e, gate_up ? h : 2);
            st_writer_add(w, name, ST_F32, 2, shape, o->data + ((size_t)e * (size_t)(gate_up + 1) + (size_t)h) * size);
            n++;
        }
    return n;
}

// DeepSeek's routing bias of every MoE layer, from the checkpoint's state (zeros without routed_bias).
static void add_routed_biases(const Config *c, StFile *f, const char *ckpt, Out *outs, int *nout) {
    char name[160], hf[128];
    for (int l = c->first_num_dense_layers; l < c->base_num_decoder_layers; l++) {
        int64_t shape[1] = {c->num_experts};
        snprintf(hf, sizeof hf, "model.layers.%d.%s", l, HF_BIAS);
        Out *o = out_tensor(outs, nout, hf, 1, shape);
        if (c->routed_bias) {
            model_bias_name(c, l, "state/", name, sizeof name);
            memcpy(o->data, ckpt_tensor(f, ckpt, name, NULL), sizeof(float) * c->num_experts);
        }
    }
}

// One weight of the checkpoint into its HF tensor (outs): transposed, GQA's query scaled (its
// exact kernel into side, returning 1, where the scaling cannot be undone), DeepseekV2's
// rotated columns made interleaved pairs.
static int export_param(const Config *c, StFile *f, const char *ckpt, const ParamSpec *s, Out *outs, int *nout,
                        StWriter *side) {
    char name[160], hf[128];
    const Rule *r = rule_for(s->key, hf, sizeof hf);
    snprintf(name, sizeof name, "params/%s", s->name);
    float *src = (float *)ckpt_tensor(f, ckpt, name, s), *pairs = NULL;
    int64_t shape[4];
    int nd = hf_shape(s, r, shape);
    Out *o = out_tensor(outs, nout, hf, nd, shape);
    if (cfg_softmax_router(c) && reorders_pairs(c) && rotated_width(c, r)) {   // (DeepseekV2; a copy: the file is mapped)
        if (!(pairs = malloc(sizeof(float) * s->size))) die("export-hf: out of host memory");
        memcpy(pairs, src, sizeof(float) * s->size);
        reorder_rotated(c, r, pairs, s->size, 0);
    }
    move_tensor(pairs ? pairs : src, o->data, s, r, 1);
    free(pairs);
    if (!is_gqa_query(c, r)) return 0;
    for (size_t j = 0; j < s->size; j++) o->data[j] = (float)((double)o->data[j] * query_scale(c));
    if (scale_is_exact(c)) return 0;
    int64_t sh[4];   // the exact kernel beside it (see the top of this file)
    for (int d = 0; d < s->ndim; d++) sh[d] = s->gshape[d];
    st_writer_add(side, s->name, ST_F32, s->ndim, sh, src);
    return 1;
}

int hf_export(const char *ckpt, const char *dir, int per_expert) {
    export_files_check(ckpt, dir);   // nothing is read or written before the paths are checked
    char err[512];
    StFile *f = st_open_try(ckpt, err, sizeof err);
    if (!f) die("export-hf: %s", err);
    checkpoint_check_meta(f, "export-hf", ckpt);
    const char *json = st_meta(f, "config");
    Config c;
    config_defaults(&c);
    config_from_json(&c, json, ckpt);
    step_check_config(&c);
    HfKey keys[64];
    int nkeys = hf_config(&c, keys);   // refuses a model HF cannot express, before anything is written
    output_dir_make("export-hf", dir);   // removed again if the export fails before its files are in

    int nt = model_layout(&c, NULL, NULL);
    ParamSpec *specs = calloc((size_t)nt, sizeof(ParamSpec));
    model_layout(&c, specs, NULL);
    Out *outs = calloc((size_t)nt + (size_t)c.base_num_decoder_layers, sizeof(Out));
    int nout = 0;
    StWriter *side = st_writer_new();
    int nside = 0;
    for (int i = 0; i < nt; i++) nside += export_param(&c, f, ckpt, &specs[i], outs, &nout, side);
    if (cfg_sigmoid_router(&c)) add_routed_biases(&c, f, ckpt, outs, &nout);   // (DeepseekV3's)
    StWriter *w = st_writer_new();
    st_writer_meta(w, "format", "pt");
    int written = 0;
    for (int i = 0; i < nout; i++) {
        if (per_expert) { written += add_per_expert(w, &outs[i], !cfg_is_deepseek(&c)); continue; }
        st_writer_add(w, outs[i].name, ST_F32, outs[i].ndim, outs[i].shape, outs[i].data);
        written++;
    }
    char path[CFG_STR + 64];
    path_join(path, sizeof path, dir, "model.safetensors");
    st_write_file_held(w, path);
    path_join(path, sizeof path, dir, SIDECAR);
    if (nside) st_write_file_held(side, path);
    char config_path[CFG_STR + 64];
    path_join(config_path, sizeof config_path, dir, "config.json");
    write_config_json(config_path, keys, nkeys);
    atomic_files_commit();   // all three written: none replaces its target before then
    if (!nside) unlink(path);   // (an older export's, which would no longer match)
    printf("exported %s (%s, step %s) to %s: config.json, model.safetensors (%d tensors%s)%s\n", ckpt,
           hf_class(&c), st_meta(f, "step") ? st_meta(f, "step") : "?",
           dir, written, per_expert ? ", a tensor per expert" : "", nside ? ", " SIDECAR " (the exact query kernels)" : "");
    for (int i = 0; i < nout; i++) free(outs[i].data);
    free(outs);
    free(specs);
    st_writer_free(w);
    st_writer_free(side);
    st_close(f);
    return 0;
}

// ---------------------------------------------------------------------------------------
// Load

void hf_check_config(const Config *c, const char *dir, const char *who) {
    char path[CFG_STR + 64];
    path_join(path, sizeof path, dir, "config.json");
    char *text = json_read_text(path, who);
    json_members_unique(text, path, who);
    HfKey keys[64];
    int n = hf_config(c, keys);
    for (int i = 0; i < n; i++) {
        char got[512];
        // The context length and the dtype the weights are used at are the run's own choice.
        if (!strcmp(keys[i].key, "max_position_embeddings") || !strcmp(keys[i].key, "dtype")) continue;
        if (!strcmp(keys[i].key, "rope_interleave") && reorders_pairs(c)) continue;   // (either is read)
        if (!hf_config_value(text, keys[i].key, got, sizeof got))   // (given, or transformers' default)
            die("%s: %s has no \"%s\"; this run's config (%s) gives %s", who, path, keys[i].key, keys[i].mm,
                keys[i].val);
        if (!json_same(keys[i].val, got))
            die("%s: %s says \"%s\": %s, this run's config gives %s (%s)", who, path, keys[i].key, got,
                keys[i].val, keys[i].mm);
    }
    free(text);
}

// Weight i, made whole on the host in h (malloc'd, its global shape): this device's elements
// of it to the device (its shard, tensor or expert piece, stage), as a checkpoint's; h freed.
static void upload_weight(Model *m, int i, float *h) {
    checkpoint_load_param(m, i, h);
    free(h);
}

static size_t global_size(const ParamSpec *s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->gshape[d];
    return n;
}

// Each weight of specs (and DeepSeek's routing biases) read from w by its HF name. With m,
// made whole on the host and m's devices given their parts (returns how many query kernels
// came exactly from the sidecar; halves: the rotated columns reordered); with w opened headers
// only, each checked by name, shape and dtype, and nothing read or uploaded (m may be NULL).
static int read_weights(const Config *c, const ParamSpec *specs, int n, Model *m, HfWeights *w, const char *dir,
                        int halves) {
    char err[512], hf[128], last[128] = "";
    float *scratch = NULL, *kernel = NULL;
    char spath[CFG_STR + 64];
    path_join(spath, sizeof spath, dir, SIDECAR);
    StFile *side = m && !access(spath, R_OK) ? st_open_header_try(spath, err, sizeof err) : NULL;
    int used = 0;
    for (int i = 0; i < n; i++) {   // each weight made whole on the host (dst), then its part here copied
        const ParamSpec *s = &specs[i];
        const Rule *r = rule_for(s->key, hf, sizeof hf);
        int64_t shape[4];
        int nd = hf_shape(s, r, shape);
        // (wi_0 and wi_1 are halves of one HF tensor, gate_up_proj: read once for both)
        float *src = strcmp(hf, last) ? hfw_tensor(w, hf, nd, shape, &scratch) : scratch;
        snprintf(last, sizeof last, "%s", hf);
        if (!src) continue;   // (headers only)
        size_t count = global_size(s);
        float *dst = malloc(sizeof(float) * count);
        if (!dst) die("load_hf: out of host memory for %s (%zu floats)", s->name, count);
        move_tensor(dst, src, s, r, 0);
        if (halves) reorder_rotated(c, r, dst, count, 1);
        if (!is_gqa_query(c, r)) { upload_weight(m, i, dst); continue; }
        const StTensor *exact = side ? st_get(side, s->name) : NULL;
        int match = exact && exact->dtype == ST_F32 && exact->nbytes == count * sizeof(float);
        if (match) {
            if (!(kernel = realloc(kernel, exact->nbytes))) die("load_hf: out of host memory for %s", s->name);
            st_read_at(side, exact, 0, kernel, exact->nbytes);
        }
        for (size_t j = 0; match && j < count; j++)   // still the kernel q_proj was made from?
            match = (float)((double)kernel[j] * query_scale(c)) == dst[j];
        if (match) { memcpy(dst, kernel, exact->nbytes); used++; }
        else for (size_t j = 0; j < count; j++) dst[j] = (float)((double)dst[j] / query_scale(c));
        upload_weight(m, i, dst);
    }
    for (int l = c->first_num_dense_layers; cfg_sigmoid_router(c) && l < c->base_num_decoder_layers; l++) {
        int64_t shape[1] = {c->num_experts};
        snprintf(hf, sizeof hf, "model.layers.%d.%s", l, HF_BIAS);
        const float *b = hfw_tensor(w, hf, 1, shape, &scratch);
        if (!b) continue;   // (headers only)
        if (m->router_bias) { mem_upload(m->router_bias + (size_t)l * c->num_experts, b, sizeof(float) * c->num_experts); continue; }
        for (int e = 0; e < c->num_experts; e++)
            if (b[e] != 0.0f) die("load_hf: %s has a nonzero e_score_correction_bias in layer %d, and this run has "
                                  "routed_bias=false: set routed_bias=true", hfw_what(w), l);
    }
    free(scratch);
    free(kernel);
    if (side) st_close(side);
    return used;
}

void hf_check(const Config *c, const char *dir) {
    hf_check_config(c, dir, "load_hf");
    int n = model_layout(c, NULL, NULL);   // (the global layout: no mesh here)
    ParamSpec *specs = calloc((size_t)n, sizeof(ParamSpec));
    if (!specs) die("out of host memory");
    model_layout(c, specs, NULL);
    HfWeights *w = hfw_open(dir, 1);
    read_weights(c, specs, n, NULL, w, dir, 0);
    char said[512];
    hfw_all_read(w, said, sizeof said);
    hfw_close(w);
    free(specs);
}

int hf_load(Model *m, const char *dir, char *said, size_t cap) {
    const Config *c = &m->cfg;
    // The headers only: each tensor is read when it is needed, so that a device holds one
    // tensor of the files at a time, not the whole model (every device of a mesh reads it).
    // A dry run reads no value (hf_check has checked every tensor's name, shape and dtype).
    HfWeights *w = hfw_open(dir, c->dry_run);
    int halves = reorders_pairs(c) && file_interleaves(dir);
    int used = read_weights(c, m->specs, m->ntensors, m, w, dir, halves);
    hfw_all_read(w, said, cap);
    if (halves)
        snprintf(said + strlen(said), cap - strlen(said), "%sthe rotary pairs of the query and key kernels from "
                 "interleaved (as the file rotates them) to half-split", said[0] ? "; " : "");
    hfw_close(w);
    if (!c->dry_run) ema_restart(m);   // (the EMA starts from the loaded weights, as from a checkpoint's)
    return used;
}
