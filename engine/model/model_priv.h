/*
 * model_priv.h -- what model.c and model_config.c share: reading config.json
 * (model_config.c: its typed fields and each architecture's config function,
 * which fill the model's info and flags and the binder's options) and the
 * options the binders (model.c) take from it. Private to those two files.
 */
#ifndef HP_MODEL_PRIV_H
#define HP_MODEL_PRIV_H

#include <cjson/cJSON.h>

#include "model.h"

/* config.json being read: its path for messages, its object, and the first error met (later reads say nothing). */
struct cfg {
    const char *path;
    cJSON *j;
    struct hp_error *err;
    enum hp_status st;
};

/*
 * Upper bounds on what config.json may declare. Far above any released
 * checkpoint, and low enough that every product of two of them is computed
 * exactly in 64 bits and every size the engine derives fits in an int.
 */
#define CFG_MAX_COUNT (1 << 16) /* layers, heads, token types */
#define CFG_MAX_DIM (1 << 20)   /* hidden, intermediate, head and attention widths */
#define CFG_MAX_VOCAB (1 << 26)
#define CFG_MAX_CTX (1 << 24)

/* What config.json says about tensors some checkpoints of an architecture have and others lack. */
struct bind_opts {
    bool tied;          /* tie_word_embeddings: the LM head is the embedding matrix */
    bool qkv_bias;      /* Llama family: q/k/v_proj biases (Llama's attention_bias, always for Qwen2) */
    bool o_bias;        /* Llama's attention_bias: o_proj bias */
    bool mlp_bias;      /* Llama's mlp_bias: gate/up/down_proj biases */
    bool fused;         /* Phi-3: self_attn.qkv_proj (q, k, v) and mlp.gate_up_proj (gate, up), one tensor each */
    double rotary_pct;  /* GPT-NeoX: the fraction of each head rotary turns (0: all of it) */
    bool post_norms;    /* OLMo 2: norms after attention and the MLP (post_attention_layernorm,
                         * post_feedforward_layernorm), none before */
    bool gemma_norms;   /* Gemma: four RMSNorms a layer (input, post_attention, pre_ and post_feedforward), each
                         * and the final norm and q/k norms scaling by 1 + weight */
    int head_dim_def;   /* > 0: the configuration class's head_dim when config.json has none (Qwen3, Gemma) */
    bool no_problem;    /* BERT: no problem_type, so one class is regression in transformers */
};

/* obj's member key, the last when written twice (as Python's json reads it); NULL when absent. */
cJSON *hp_cfg_get(const cJSON *obj, const char *key);
/* A whole number in [1, max] (def when absent or null; def < 0: required); else c->st set, naming the key. */
int hp_cfg_int(struct cfg *c, const char *key, int def, int max);
/* A number in (lo, hi] (def when absent or null; NAN: required). */
double hp_cfg_num(struct cfg *c, const char *key, double def, double lo, double hi);
/* A string (def when absent or null). */
const char *hp_cfg_str(struct cfg *c, const char *key, const char *def);
/* A bool (def when absent or null). */
bool hp_cfg_bool(struct cfg *c, const char *key, bool def);
/* a * b as a width: at most CFG_MAX_DIM, computed in 64 bits so it cannot wrap (ka, kb name them). */
int hp_cfg_width(struct cfg *c, const char *ka, int a, const char *kb, int b);
/* The activation config.json names. */
enum hp_status hp_cfg_act(struct cfg *c, const char *name, enum hp_act *out);

/* Each architecture's config.json (model_type mt) into m's info and flags and o, naming its activation in *act:
 * the config functions of model.c's architecture rows. */
enum hp_status hp_config_gpt2(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                              const char **act);
enum hp_status hp_config_bert(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                              const char **act);
enum hp_status hp_config_llama(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                               const char **act);
enum hp_status hp_config_neox(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o,
                              const char **act);

#endif
