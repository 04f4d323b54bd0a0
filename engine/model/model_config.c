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

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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

/*
 * What each Llama-family configuration class and modeling file does beyond Llama's, one row per model_type:
 * the defaults its class has (positions, norm epsilon, head width, window) and the features its modeling code
 * builds. hp_config_llama reads config.json by the row, so a new member is a row, not a branch.
 */
enum {
    F_ATTN_BIAS = 1,    /* attention_bias read: q/k/v_proj and o_proj biases (LlamaAttention's, Qwen3's, OLMo 2's) */
    F_MLP_BIAS = 2,     /* mlp_bias read: gate/up/down_proj biases (LlamaMLP's) */
    F_QKV_BIAS = 4,     /* q/k/v_proj biases always (Qwen2) */
    F_QK_NORM = 8,      /* q_norm and k_norm over each head, before rotary (Qwen3, Gemma 3) */
    F_OLMO = 16,        /* q_norm and k_norm over the whole projection; norms after attention and the MLP, none
                         * before (OLMo 2) */
    F_FUSED = 32,       /* qkv_proj and gate_up_proj, one tensor each (Phi-3) */
    F_QWEN_WINDOW = 64, /* use_sliding_window and sliding layer_types refused (Qwen2, Qwen3) */
    F_GEMMA = 128,      /* Gemma 2 and 3: four (1 + weight) RMSNorms a layer, embeddings times sqrt(hidden_size),
                         * query_pre_attn_scalar, soft-capping, sliding layers by layer_types */
    F_ROPE_LONG = 256,  /* rope_scaling: the config class takes only longrope, which headprune does not implement
                         * (Phi3Config): anything but null refused */
    F_ROPE_OLD = 512,   /* rope_scaling: the config class takes only {"type": linear | dynamic, "factor": > 1}, two
                         * fields (Olmo2Config) */
    F_ROPE_NEW = 1024,  /* rope_scaling: the config class reads only "rope_type", not the old "type" (Gemma3TextConfig
                         * does not copy one to the other) */
};

/* HP_MODEL_TYPES's names and architectures, by id */
static const struct {
    const char *name;
    enum hp_arch arch;
} model_types[] = {
#define MT_ROW(id, arch) [HP_MT_##id] = {#id, arch},
    HP_MODEL_TYPES(MT_ROW)
#undef MT_ROW
};
static_assert(sizeof model_types / sizeof model_types[0] == HP_MT_COUNT, "model_types: one row per model_type");

bool hp_model_type_find(const char *model_type, enum hp_model_type_id *id, enum hp_arch *arch)
{
    for (int i = 0; i < HP_MT_COUNT; i++)
        if (strcmp(model_types[i].name, model_type) == 0) {
            if (id)
                *id = (enum hp_model_type_id)i;
            if (arch)
                *arch = model_types[i].arch;
            return true;
        }
    return false;
}

const char *hp_model_type_at(int i)
{
    return i >= 0 && i < HP_MT_COUNT ? model_types[i].name : NULL;
}

/* The Llama family's rows, by the id of their model_type (model.h's HP_MODEL_TYPES: a misspelt id is a build
 * error; a Llama-family model_type without its row here is refused by hp_config_llama, and the config-key test's
 * fixtures, every member's, would fail). X(id, ctx, eps, head_dim, window, flags, act_key) */
#define LLAMA_FAMILY_ROWS(X)                                                                                           \
    X(llama, 2048, 1e-6, 0, -1, F_ATTN_BIAS | F_MLP_BIAS, "hidden_act")                                                \
    X(mistral, 131072, 1e-6, 0, 4096, 0, "hidden_act") /* MistralConfig's 4096 * 32 positions */                       \
    X(qwen2, 32768, 1e-6, 0, -1, F_QKV_BIAS | F_QWEN_WINDOW, "hidden_act")                                             \
    X(qwen3, 32768, 1e-6, 128, -1, F_ATTN_BIAS | F_QK_NORM | F_QWEN_WINDOW, "hidden_act")                              \
    X(phi3, 4096, 1e-5, 0, 0, F_FUSED | F_ROPE_LONG, "hidden_act")                                                     \
    X(olmo2, 2048, 1e-5, 0, -1, F_ATTN_BIAS | F_OLMO | F_ROPE_OLD, "hidden_act")                                       \
    X(gemma2, 8192, 1e-6, 256, 4096, F_ATTN_BIAS | F_GEMMA, "hidden_activation")                                       \
    X(gemma3_text, 131072, 1e-6, 256, 4096, F_ATTN_BIAS | F_GEMMA | F_QK_NORM | F_ROPE_NEW, "hidden_activation")

static const struct llama_row {
    int ctx;       /* max_position_embeddings absent */
    double eps;    /* rms_norm_eps absent */
    int head_dim;  /* head_dim absent (0: hidden_size / num_attention_heads) */
    int window;    /* sliding_window absent (-1: the key is not read; 0: none) */
    unsigned flags;
    const char *act_key; /* the key naming the MLP's activation; NULL: no row (not of the Llama family) */
} llama_rows[HP_MT_COUNT] = {
#define LLAMA_ROW(id, ctx, eps, head_dim, window, flags, act_key) [HP_MT_##id] = {ctx, eps, head_dim, window, flags, act_key},
    LLAMA_FAMILY_ROWS(LLAMA_ROW)
#undef LLAMA_ROW
};

static const struct llama_row *llama_row(const char *mt)
{
    enum hp_model_type_id id;
    enum hp_arch arch;
    return hp_model_type_find(mt, &id, &arch) && arch == HP_ARCH_LLAMA && llama_rows[id].act_key ? &llama_rows[id]
                                                                                                  : NULL;
}

/* Qwen2's and Qwen3's window on their upper layers, which headprune does not implement. */
static enum hp_status refuse_qwen_window(struct cfg *c, const char *mt)
{
    if (hp_cfg_bool(c, "use_sliding_window", false))
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: use_sliding_window (%s's window on its upper layers) is not supported", c->path, mt);
    const cJSON *lt = hp_cfg_get(c->j, "layer_types"), *t;
    if (!lt || cJSON_IsNull(lt))
        return c->st;
    if (!cJSON_IsArray(lt))
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: \"layer_types\" must be a list", c->path);
    cJSON_ArrayForEach(t, lt)
    {
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention") != 0)
            return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                           "%s: \"layer_types\" other than \"full_attention\" are not supported", c->path);
    }
    return c->st;
}

/* A soft cap (Gemma's attn_logit_softcapping, final_logit_softcapping): def when absent, none (0) when null. */
static float softcap(struct cfg *c, const char *key, double def)
{
    const cJSON *v = hp_cfg_get(c->j, key);
    if (v && cJSON_IsNull(v))
        return 0;
    return (float)hp_cfg_num(c, key, def, 0, 1e9);
}

/*
 * Gemma 2's and Gemma 3's own keys: which layers have the window (layer_types, else the class's pattern: Gemma 2
 * every other one from layer 0, Gemma 3 five of every six), the scale of the scores, the soft caps and Gemma 3's
 * rotary base for its sliding layers.
 */
static enum hp_status config_gemma(struct cfg *c, struct hp_model *m, const char *mt)
{
    struct hp_model_info *in = &m->info;
    const bool g3 = strcmp(mt, "gemma3_text") == 0;
    const cJSON *sw = hp_cfg_get(c->j, "sliding_window");
    if (sw && cJSON_IsNull(sw))
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: \"sliding_window\" null is not supported (%s's sliding layers need a window)", c->path, mt);
    if (!(m->sliding = calloc((size_t)in->n_layers, 1)))
        return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", c->path);
    in->sliding = m->sliding;
    const cJSON *lt = hp_cfg_get(c->j, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != in->n_layers)
            return hp_fail(c->err, HP_ERR_FORMAT, "%s: \"layer_types\" must be a list of %d layer types (one a layer)",
                           c->path, in->n_layers);
        int l = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, lt)
        {
            const bool slide = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
            if (!slide && !(cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0))
                return hp_fail(c->err, HP_ERR_FORMAT,
                               "%s: \"layer_types\" entry %d must be \"full_attention\" or \"sliding_attention\"",
                               c->path, l);
            m->sliding[l++] = slide;
        }
    } else {
        /* Gemma3TextConfig reads sliding_window_pattern (6) only to make layer_types; Gemma2Config's is 2 */
        const int pattern = g3 ? hp_cfg_int(c, "sliding_window_pattern", 6, CFG_MAX_COUNT) : 2;
        for (int l = 0; l < in->n_layers; l++)
            m->sliding[l] = (l + 1) % pattern != 0;
    }
    m->attn_scale = (float)(1.0 / sqrt(hp_cfg_num(c, "query_pre_attn_scalar", 256, 0, 1e9)));
    /* Gemma 3 keeps the key but its attention never applies it (transformers' Gemma3Attention passes no softcap
     * to the attention function, where Gemma 2's does): ignored here as there (config_keys.c) */
    m->info.attn_softcap = g3 ? 0 : softcap(c, "attn_logit_softcapping", 50.0);
    m->info.logit_softcap = softcap(c, "final_logit_softcapping", g3 ? 0 : 30.0);
    /* Gemma 3's sliding layers turn by their own base, unscaled (rope_scaling is the global layers') */
    if (g3)
        m->rope_local = (struct hp_rope){.theta = (float)hp_cfg_num(c, "rope_local_base_freq", 10000.0, 0, 1e15)};
    /* Gemma3TextScaledWordEmbedding's embed_scale and Gemma2Model's normalizer, in float32 */
    m->embed_scale = (float)sqrt((double)in->d_model);
    return c->st;
}

/*
 * The forms of rope_scaling a row's configuration class accepts beside Llama's (read_rope_scaling's): where the
 * class refuses a form, transformers runs nothing to compare with, so headprune refuses it too rather than run
 * Llama's reading of it. Gemma3TextConfig reads only "rope_type"; Phi3Config takes only longrope; Olmo2Config only {"type", "factor"} with linear or
 * dynamic and a factor above 1 (that it be a float, JSON's 3.0 against 3, is not seen here).
 */
static enum hp_status rope_scaling_form(struct cfg *c, const char *mt, unsigned f)
{
    const cJSON *rs = hp_cfg_get(c->j, "rope_scaling");
    if (!rs || cJSON_IsNull(rs) || !(f & (F_ROPE_LONG | F_ROPE_OLD | F_ROPE_NEW)))
        return HP_OK;
    if (f & F_ROPE_NEW)
        return !cJSON_IsObject(rs) || cJSON_GetObjectItemCaseSensitive(rs, "rope_type")
                   ? HP_OK
                   : hp_fail(c->err, HP_ERR_UNSUPPORTED,
                             "%s: \"rope_scaling\" for %s must name \"rope_type\" (transformers' configuration "
                             "refuses the old \"type\" alone)",
                             c->path, mt);
    if (f & F_ROPE_LONG)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: \"rope_scaling\" is not supported for %s (transformers' configuration takes only longrope, "
                       "which headprune does not implement; null runs unscaled)",
                       c->path, mt);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "type"), *fa = cJSON_GetObjectItemCaseSensitive(rs, "factor");
    if (!cJSON_IsObject(rs) || cJSON_GetArraySize(rs) != 2 || !cJSON_IsString(t) ||
        (strcmp(t->valuestring, "linear") != 0 && strcmp(t->valuestring, "dynamic") != 0) || !cJSON_IsNumber(fa) ||
        !(fa->valuedouble > 1))
        return hp_fail(c->err, HP_ERR_UNSUPPORTED,
                       "%s: \"rope_scaling\" for %s must be {\"type\": \"linear\" or \"dynamic\", \"factor\": > 1}, "
                       "the only form transformers' configuration takes",
                       c->path, mt);
    return HP_OK;
}

/* config.json of a Llama-family checkpoint (a row of llama_rows): shape, rotary, biases, q/k norms, fused
 * projections, window, where the norms are and what Gemma adds. */
enum hp_status hp_config_llama(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                               const char **act)
{
    const struct llama_row *row = llama_row(mt);
    if (!row) /* a model_type of the family in HP_MODEL_TYPES without its row in LLAMA_FAMILY_ROWS */
        return hp_fail(c->err, HP_ERR_UNSUPPORTED, "%s: model_type \"%s\" has no Llama-family row", c->path, mt);
    const unsigned f = row->flags;
    struct hp_model_info *in = &m->info;
    in->arch = HP_ARCH_LLAMA;
    m->rotary = true;
    in->n_layers = hp_cfg_int(c, "num_hidden_layers", -1, CFG_MAX_COUNT);
    in->n_heads = hp_cfg_int(c, "num_attention_heads", -1, CFG_MAX_COUNT);
    in->n_kv_heads = hp_cfg_int(c, "num_key_value_heads", in->n_heads, CFG_MAX_COUNT);
    in->d_model = hp_cfg_int(c, "hidden_size", -1, CFG_MAX_DIM);
    in->d_ff = hp_cfg_int(c, "intermediate_size", -1, 4 * CFG_MAX_DIM);
    in->n_vocab = hp_cfg_int(c, "vocab_size", -1, CFG_MAX_VOCAB);
    /* the positions, and dynamic rotary scaling's threshold */
    in->n_ctx = hp_cfg_int(c, "max_position_embeddings", row->ctx, CFG_MAX_CTX);
    m->norm_eps = (float)hp_cfg_num(c, "rms_norm_eps", row->eps, 0, 1);
    m->rope = (struct hp_rope){.theta = (float)hp_cfg_num(c, "rope_theta", 10000.0, 0, 1e15)};
    *act = hp_cfg_str(c, row->act_key, f & F_GEMMA ? "gelu_pytorch_tanh" : "silu");
    /* Gemma's classes tie by default; the others' (LlamaConfig's, ...) do not */
    o->tied = hp_cfg_bool(c, "tie_word_embeddings", (f & F_GEMMA) != 0);
    o->head_dim_def = row->head_dim;
    if (f & F_ATTN_BIAS)
        o->qkv_bias = o->o_bias = hp_cfg_bool(c, "attention_bias", false);
    if (f & F_MLP_BIAS)
        o->mlp_bias = hp_cfg_bool(c, "mlp_bias", false);
    o->qkv_bias |= (f & F_QKV_BIAS) != 0;
    m->qk_norm = (f & F_QK_NORM) != 0;
    m->qk_norm_whole = o->post_norms = (f & F_OLMO) != 0;
    o->fused = (f & F_FUSED) != 0;
    o->gemma_norms = (f & F_GEMMA) != 0;
    if (c->st != HP_OK)
        return c->st;
    enum hp_status st = rope_scaling_form(c, mt, f);
    if (st == HP_OK)
        st = read_rope_scaling(m, c->path, hp_cfg_get(c->j, "rope_scaling"), c->err);
    if (st != HP_OK)
        return st;
    /* the window: Mistral's 4096 when config.json leaves the key out (null: none), Phi-3's none, Gemma's 4096 on
     * its sliding layers */
    if (row->window >= 0)
        in->window = hp_cfg_int(c, "sliding_window", hp_cfg_get(c->j, "sliding_window") ? 0 : row->window, INT_MAX);
    if (f & F_QWEN_WINDOW)
        st = refuse_qwen_window(c, m->qk_norm ? "Qwen3" : "Qwen2");
    if (st == HP_OK && (f & F_GEMMA))
        st = config_gemma(c, m, mt);
    in->causal = true;
    return st != HP_OK ? st : c->st;
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
