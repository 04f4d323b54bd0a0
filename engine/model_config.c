/*
 * model_config.c -- config.json into a model's info and flags: its typed
 * fields, bounded, each refusal naming the file and the key; rotary scaling;
 * the activation; and each architecture's config function (what
 * transformers' configuration class of it says, with the defaults it has),
 * which model.c's architecture rows call. model.c then checks what they read
 * together and binds the weights.
 * Must not: read any file, or know of tensors.
 */
#define _POSIX_C_SOURCE 200809L
#include "model_priv.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util_int.h"

/*
 * The value of key in obj, or NULL. A key written twice counts by its last
 * value, as Python's json (and so Hugging Face) reads it; cJSON keeps every
 * item and its own lookup would return the first.
 */
cJSON *hp_cfg_get(const cJSON *obj, const char *key)
{
    cJSON *hit = NULL, *e;
    if (!cJSON_IsObject(obj))
        return NULL;
    cJSON_ArrayForEach(e, obj)
        if (e->string && strcmp(e->string, key) == 0)
            hit = e;
    return hit;
}

/* Integer field in [1, max]; def < 0 means required. */
int hp_cfg_int(struct cfg *c, const char *key, int def, int max)
{
    cJSON *v = hp_cfg_get(c->j, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0 && c->st == HP_OK)
            c->st = hp_fail(c->err, HP_ERR_FORMAT, "%s: missing \"%s\"", c->path, key);
        return def < 0 ? 1 : def;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= max) ||
        v->valuedouble != floor(v->valuedouble)) {
        if (c->st == HP_OK)
            c->st = hp_fail(c->err, HP_ERR_FORMAT, "%s: \"%s\" must be a whole number from 1 to %d", c->path, key,
                            max);
        return def < 0 ? 1 : def;
    }
    return (int)v->valuedouble;
}

/* Number field in (lo, hi]: epsilons and the rotary base, which must be positive and finite. */
double hp_cfg_num(struct cfg *c, const char *key, double def, double lo, double hi)
{
    cJSON *v = hp_cfg_get(c->j, key);
    if (!v || cJSON_IsNull(v))
        return def;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > lo && v->valuedouble <= hi)) {
        if (c->st == HP_OK)
            c->st = hp_fail(c->err, HP_ERR_FORMAT, "%s: \"%s\" must be a number above %g and at most %g", c->path,
                            key, lo, hi);
        return def;
    }
    return v->valuedouble;
}

const char *hp_cfg_str(struct cfg *c, const char *key, const char *def)
{
    cJSON *v = hp_cfg_get(c->j, key);
    if (!v || cJSON_IsNull(v))
        return def;
    if (!cJSON_IsString(v)) {
        if (c->st == HP_OK)
            c->st = hp_fail(c->err, HP_ERR_FORMAT, "%s: \"%s\" must be a string", c->path, key);
        return def;
    }
    return v->valuestring;
}

bool hp_cfg_bool(struct cfg *c, const char *key, bool def)
{
    cJSON *v = hp_cfg_get(c->j, key);
    if (!v || cJSON_IsNull(v))
        return def;
    if (!cJSON_IsBool(v)) {
        if (c->st == HP_OK)
            c->st = hp_fail(c->err, HP_ERR_FORMAT, "%s: \"%s\" must be true or false", c->path, key);
        return def;
    }
    return cJSON_IsTrue(v);
}

/*
 * config.json's rope_scaling (NULL or null: none) into m->rope, as Hugging
 * Face's modeling_rope_utils reads it: "linear", "dynamic" (NTK, past
 * max_position_embeddings; it then allows factor times as many positions)
 * and "llama3" (Llama 3.1 / 3.2); "default" is none. Other types are
 * refused rather than run unscaled.
 */
static enum hp_status read_rope_scaling(struct hp_model *m, const char *path, const cJSON *rs, struct hp_error *err)
{
    if (!rs || cJSON_IsNull(rs))
        return HP_OK;
    if (!cJSON_IsObject(rs))
        return hp_fail(err, HP_ERR_FORMAT, "%s: \"rope_scaling\" must be an object or null", path);
    struct cfg c = {path, (cJSON *)rs, err, HP_OK};
    const char *type = hp_cfg_str(&c, "rope_type", NULL), *old = hp_cfg_str(&c, "type", NULL); /* old: before 4.45 */
    if (c.st != HP_OK)
        return c.st;
    /* Both named and different: transformers' Llama and Qwen2 configs copy "type" over "rope_type", its
     * Mistral reads "rope_type" first; either choice here would run some of them with the other scaling */
    if (type && old && strcmp(type, old) != 0)
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: rope_scaling names \"rope_type\" \"%.40s\" and \"type\" \"%.40s\": transformers' Llama "
                       "and Qwen2 use \"type\", its Mistral \"rope_type\" (keep one of them)",
                       path, type, old);
    if (!type)
        type = old;
    /* transformers 4.57 refuses it too ("Missing required keys in `rope_scaling` for 'rope_type'='None'"):
     * run unscaled, its factor would be dropped silently */
    if (!type)
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: rope_scaling has no \"rope_type\" (or \"type\"): name one (default, linear, dynamic, "
                       "llama3), as transformers requires",
                       path);
    struct hp_rope *r = &m->rope;
    if (strcmp(type, "default") == 0)
        return c.st;
    if (strcmp(type, "linear") == 0)
        r->type = HP_ROPE_LINEAR;
    else if (strcmp(type, "dynamic") == 0)
        r->type = HP_ROPE_DYNAMIC;
    else if (strcmp(type, "llama3") == 0)
        r->type = HP_ROPE_LLAMA3;
    else
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       "%s: rope_scaling type \"%s\" is not supported (default, linear, dynamic and llama3 are)", path,
                       type);
    /* Hugging Face requires factor >= 1 */
    r->factor = hp_cfg_num(&c, "factor", NAN, 0, 1e6);
    if (c.st == HP_OK && !(r->factor >= 1))
        return hp_fail(err, HP_ERR_FORMAT, "%s: rope_scaling needs a \"factor\" of at least 1", path);
    struct hp_model_info *in = &m->info;
    if (r->type == HP_ROPE_DYNAMIC) {
        r->original_max = in->n_ctx;
        in->n_ctx = (int)fmin((double)in->n_ctx * r->factor, CFG_MAX_CTX);
    }
    if (r->type == HP_ROPE_LLAMA3) {
        r->low_freq_factor = hp_cfg_num(&c, "low_freq_factor", NAN, 0, 1e6);
        r->high_freq_factor = hp_cfg_num(&c, "high_freq_factor", NAN, 0, 1e6);
        r->original_max = hp_cfg_int(&c, "original_max_position_embeddings", -1, CFG_MAX_CTX);
        if (c.st == HP_OK && !(r->high_freq_factor > r->low_freq_factor))
            return hp_fail(err, HP_ERR_FORMAT,
                           "%s: rope_scaling (llama3) needs low_freq_factor and high_freq_factor, the high above the "
                           "low",
                           path);
    }
    return c.st;
}

/* a * b as a width: at most CFG_MAX_DIM, computed in 64 bits so it cannot wrap */
int hp_cfg_width(struct cfg *c, const char *ka, int a, const char *kb, int b)
{
    int64_t w = (int64_t)a * b;
    if (w > CFG_MAX_DIM) {
        if (c->st == HP_OK)
            c->st = hp_fail(c->err, HP_ERR_SHAPE, "%s: \"%s\" %d x \"%s\" %d = %lld is too wide (at most %d)",
                            c->path, ka, a, kb, b, (long long)w, CFG_MAX_DIM);
        return 0;
    }
    return (int)w;
}

enum hp_status hp_cfg_act(struct cfg *c, const char *name, enum hp_act *out)
{
    if (strcmp(name, "gelu") == 0)
        *out = HP_ACT_GELU;
    else if (strcmp(name, "gelu_new") == 0 || strcmp(name, "gelu_pytorch_tanh") == 0 ||
             strcmp(name, "gelu_fast") == 0)
        *out = HP_ACT_GELU_TANH;
    else if (strcmp(name, "relu") == 0)
        *out = HP_ACT_RELU;
    else if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0)
        *out = HP_ACT_SILU;
    else
        return hp_fail(c->err, HP_ERR_UNSUPPORTED, "%s: activation \"%s\" is not supported (gelu, gelu_new, relu, silu)",
                       c->path, name);
    return HP_OK;
}

/* config.json of a GPT-2 checkpoint (model_type gpt2): its shape, norm, activation and tying. */
enum hp_status hp_config_gpt2(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                              const char **act)
{
    (void)mt; /* one model_type */
    struct hp_model_info *in = &m->info;
    in->arch = HP_ARCH_GPT2;
    in->n_layers = hp_cfg_int(c, "n_layer", -1, CFG_MAX_COUNT);
    in->n_heads = hp_cfg_int(c, "n_head", -1, CFG_MAX_COUNT);
    in->d_model = hp_cfg_int(c, "n_embd", -1, CFG_MAX_DIM);
    in->d_ff = hp_cfg_int(c, "n_inner", 4 * in->d_model, 4 * CFG_MAX_DIM);
    in->n_vocab = hp_cfg_int(c, "vocab_size", -1, CFG_MAX_VOCAB);
    in->n_ctx = hp_cfg_int(c, "n_positions", 1024, CFG_MAX_CTX);
    m->norm_eps = (float)hp_cfg_num(c, "layer_norm_epsilon", 1e-5, 0, 1);
    *act = hp_cfg_str(c, "activation_function", "gelu_new");
    m->scale_by_layer = hp_cfg_bool(c, "scale_attn_by_inverse_layer_idx", false);
    if (!hp_cfg_bool(c, "scale_attn_weights", true) && c->st == HP_OK)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED, "%s: scale_attn_weights = false is not supported", c->path);
    /* GPT2LMHeadModel ties by default (PretrainedConfig's default) */
    o->tied = hp_cfg_bool(c, "tie_word_embeddings", true);
    in->n_kv_heads = in->n_heads;
    in->causal = true;
    return HP_OK;
}

/* config.json of a BERT checkpoint: its shape, norm, activation, token types, tying and classes. */
enum hp_status hp_config_bert(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                              const char **act)
{
    (void)mt; /* one model_type */
    struct hp_model_info *in = &m->info;
    in->arch = HP_ARCH_BERT;
    m->post_norm = true;
    in->n_layers = hp_cfg_int(c, "num_hidden_layers", -1, CFG_MAX_COUNT);
    in->n_heads = hp_cfg_int(c, "num_attention_heads", -1, CFG_MAX_COUNT);
    in->d_model = hp_cfg_int(c, "hidden_size", -1, CFG_MAX_DIM);
    in->d_ff = hp_cfg_int(c, "intermediate_size", -1, 4 * CFG_MAX_DIM);
    in->n_vocab = hp_cfg_int(c, "vocab_size", -1, CFG_MAX_VOCAB);
    in->n_ctx = hp_cfg_int(c, "max_position_embeddings", 512, CFG_MAX_CTX);
    m->n_types = hp_cfg_int(c, "type_vocab_size", 2, CFG_MAX_COUNT);
    m->norm_eps = (float)hp_cfg_num(c, "layer_norm_eps", 1e-12, 0, 1);
    *act = hp_cfg_str(c, "hidden_act", "gelu");
    const char *pet = hp_cfg_str(c, "position_embedding_type", "absolute");
    if (c->st == HP_OK && strcmp(pet, "absolute") != 0)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: position_embedding_type \"%s\" is not supported (absolute only)", c->path, pet);
    in->n_kv_heads = in->n_heads;
    in->causal = false;
    o->tied = hp_cfg_bool(c, "tie_word_embeddings", true);
    /* BertForSequenceClassification's loss: cross-entropy is what headprune computes */
    const char *pt = hp_cfg_str(c, "problem_type", NULL);
    if (c->st == HP_OK && pt && strcmp(pt, "single_label_classification") != 0)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: \"problem_type\" \"%s\" is not supported (a classifier's loss is cross-entropy: "
                       "single_label_classification)", c->path, pt);
    o->no_problem = !pt;
    /* classes of a ForSequenceClassification checkpoint, by id */
    const cJSON *i2l = hp_cfg_get(c->j, "id2label");
    int nl = cJSON_IsObject(i2l) ? cJSON_GetArraySize(i2l) : 0;
    if (nl > 0) {
        m->label_names = calloc((size_t)nl, sizeof *m->label_names);
        m->n_label_names = nl;
        if (!m->label_names)
            return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", c->path);
        const cJSON *e;
        cJSON_ArrayForEach(e, i2l)
        {
            char *end;
            long id = strtol(e->string, &end, 10);
            if (*end || id < 0 || id >= nl || !cJSON_IsString(e) || m->label_names[id])
                return hp_fail(c->err, HP_ERR_FORMAT, "%s: id2label must map 0..%d to names", c->path, nl - 1);
            if (!(m->label_names[id] = strdup(e->valuestring)))
                return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", c->path);
        }
        in->n_labels = nl;
    }
    return HP_OK;
}

/* config.json of a Llama-family checkpoint (llama, mistral, qwen2, qwen3, phi3, olmo2): shape, rotary, biases,
 * q/k norms, fused projections, window, where the norms are. */
enum hp_status hp_config_llama(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                               const char **act)
{
    struct hp_model_info *in = &m->info;
    in->arch = HP_ARCH_LLAMA;
    m->rotary = true;
    in->n_layers = hp_cfg_int(c, "num_hidden_layers", -1, CFG_MAX_COUNT);
    in->n_heads = hp_cfg_int(c, "num_attention_heads", -1, CFG_MAX_COUNT);
    in->n_kv_heads = hp_cfg_int(c, "num_key_value_heads", in->n_heads, CFG_MAX_COUNT);
    in->d_model = hp_cfg_int(c, "hidden_size", -1, CFG_MAX_DIM);
    in->d_ff = hp_cfg_int(c, "intermediate_size", -1, 4 * CFG_MAX_DIM);
    in->n_vocab = hp_cfg_int(c, "vocab_size", -1, CFG_MAX_VOCAB);
    /* the configuration classes' defaults (MistralConfig 4096 * 32, Qwen2Config and Qwen3Config 32768,
     * Phi3Config 4096, the others 2048): the positions, and dynamic rotary scaling's threshold */
    const int ctx_default = strcmp(mt, "mistral") == 0   ? 131072
                            : strncmp(mt, "qwen", 4) == 0 ? 32768
                            : strcmp(mt, "phi3") == 0     ? 4096
                                                          : 2048;
    in->n_ctx = hp_cfg_int(c, "max_position_embeddings", ctx_default, CFG_MAX_CTX);
    /* the configuration classes' defaults: Phi3Config's and Olmo2Config's 1e-5, the others' 1e-6 */
    const double eps_default = strcmp(mt, "phi3") == 0 || strcmp(mt, "olmo2") == 0 ? 1e-5 : 1e-6;
    m->norm_eps = (float)hp_cfg_num(c, "rms_norm_eps", eps_default, 0, 1);
    m->rope = (struct hp_rope){.theta = (float)hp_cfg_num(c, "rope_theta", 10000.0, 0, 1e15)};
    *act = hp_cfg_str(c, "hidden_act", "silu");
    o->tied = hp_cfg_bool(c, "tie_word_embeddings", false);
    /* the biases each modeling file builds: LlamaAttention's and LlamaMLP's by the config, Qwen3Attention's
     * by it too (Qwen3MLP has none), Qwen2's q/k/v always, Mistral's none */
    if (strcmp(mt, "llama") == 0 || strcmp(mt, "qwen3") == 0 || strcmp(mt, "olmo2") == 0)
        o->qkv_bias = o->o_bias = hp_cfg_bool(c, "attention_bias", false);
    if (strcmp(mt, "llama") == 0)
        o->mlp_bias = hp_cfg_bool(c, "mlp_bias", false);
    o->qkv_bias |= strcmp(mt, "qwen2") == 0;
    /* Qwen3's attention: q_norm and k_norm over each head, before rotary */
    m->qk_norm = strcmp(mt, "qwen3") == 0;
    /* OLMo 2's: q_norm over all the heads' queries together, k_norm over the keys', and its norms after attention
     * and the MLP instead of before */
    m->qk_norm_whole = o->post_norms = strcmp(mt, "olmo2") == 0;
    const bool qwen = strncmp(mt, "qwen", 4) == 0;
    enum hp_status st = read_rope_scaling(m, c->path, hp_cfg_get(c->j, "rope_scaling"), c->err);
    if (st != HP_OK)
        return st;
    /* Phi-3: q, k and v in one projection and the MLP's gate and up in another; a window as Mistral's */
    o->fused = strcmp(mt, "phi3") == 0;
    /* MistralConfig's window is 4096 when config.json leaves the key out (null: none); Phi3Config's none */
    if (strcmp(mt, "mistral") == 0 || o->fused)
        in->window = hp_cfg_int(c, "sliding_window", !o->fused && !hp_cfg_get(c->j, "sliding_window") ? 4096 : 0, INT_MAX);
    if (qwen && hp_cfg_bool(c, "use_sliding_window", false))
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: use_sliding_window (%s's window on its upper layers) is not supported", c->path,
                       m->qk_norm ? "Qwen3" : "Qwen2");
    /* Qwen2's and Qwen3's layer types: a sliding layer is one with a window, which headprune does not
     * implement here */
    const cJSON *lt = hp_cfg_get(c->j, "layer_types"), *t;
    if (qwen && lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt))
            return hp_fail(c->err, HP_ERR_FORMAT, "%s: \"layer_types\" must be a list", c->path);
        cJSON_ArrayForEach(t, lt)
        {
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention") != 0)
                return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                               "%s: \"layer_types\" other than \"full_attention\" are not supported", c->path);
        }
    }
    in->causal = true;
    return HP_OK;
}

/* config.json of a GPT-NeoX checkpoint (model_type gpt_neox: Pythia): shape, partial rotary, parallel residual,
 * biases, tying. */
enum hp_status hp_config_neox(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                              const char **act)
{
    (void)mt; /* one model_type */
    struct hp_model_info *in = &m->info;
    in->arch = HP_ARCH_GPT_NEOX;
    m->rotary = true;
    in->n_layers = hp_cfg_int(c, "num_hidden_layers", -1, CFG_MAX_COUNT);
    in->n_heads = hp_cfg_int(c, "num_attention_heads", -1, CFG_MAX_COUNT);
    in->n_kv_heads = in->n_heads;
    in->d_model = hp_cfg_int(c, "hidden_size", -1, CFG_MAX_DIM);
    in->d_ff = hp_cfg_int(c, "intermediate_size", -1, 4 * CFG_MAX_DIM);
    in->n_vocab = hp_cfg_int(c, "vocab_size", -1, CFG_MAX_VOCAB);
    in->n_ctx = hp_cfg_int(c, "max_position_embeddings", 2048, CFG_MAX_CTX);
    m->norm_eps = (float)hp_cfg_num(c, "layer_norm_eps", 1e-5, 0, 1);
    /* GPTNeoXConfig sets rope_theta from rotary_emb_base and partial_rotary_factor from rotary_pct, over
     * whatever config.json says of those two */
    m->rope = (struct hp_rope){.theta = (float)hp_cfg_num(c, "rotary_emb_base", 10000.0, 0, 1e15)};
    o->rotary_pct = hp_cfg_num(c, "rotary_pct", 0.25, 0, 1);
    m->parallel = hp_cfg_bool(c, "use_parallel_residual", true);
    *act = hp_cfg_str(c, "hidden_act", "gelu");
    o->tied = hp_cfg_bool(c, "tie_word_embeddings", false);
    o->qkv_bias = o->o_bias = hp_cfg_bool(c, "attention_bias", true); /* query_key_value's and dense's */
    in->causal = true;
    return read_rope_scaling(m, c->path, hp_cfg_get(c->j, "rope_scaling"), c->err);
}
