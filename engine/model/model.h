/*
 * model.h -- the private shape of a loaded model.
 *
 * Every weight matrix is held as a hp_mat (mat.h): the logical B operand
 * (in, out) of y = x B, given by pointer, strides and the dtype it is stored
 * in, so Hugging Face Linear weights (out, in) and GPT-2 Conv1D weights
 * (in, out) both go into products uncopied, and f16 / bf16 stay 16-bit in
 * the mapping, as GGUF matrices stay in their quantized blocks. The
 * embedding tables and the LM head are hp_mats too, as stored (rows =
 * tokens or positions). Vectors are f32 (converted at load when stored
 * 16-bit or quantized: they are small).
 */
#ifndef HP_MODEL_H
#define HP_MODEL_H

#include "headprune.h"
#include "mat.h"
#include "ops.h" /* enum hp_act, struct hp_rope: what the ops compute, the model chooses */
#include "safetensors.h"

/*
 * A pruned checkpoint (Hugging Face's "pruned_heads", or headprune's own
 * "headprune" record) lacks some query heads, and the KV groups all of whose
 * query heads it lacks: its attention matrices hold only the heads it has,
 * in order. The model keeps the original head grid (info.n_heads, masks and
 * results are in its indices); a slot table maps each head to its block of
 * the stored matrices. Unpruned: slot[h] = h.
 */
struct hp_layer {
    const int *q_slot;  /* (n_heads): head h's block of wq, bq and wo; -1 when pruned */
    const int *kv_slot; /* (n_kv_heads): KV head g's block of wk, wv, bk, bv; -1 when pruned */
    int n_q, n_kv;      /* the query and KV heads the layer has */
    /* pre-norm archs: ln1 before attention, ln2 before MLP (NULL: none, OLMo 2).
     * BERT (post-norm): ln1 after attention + residual, ln2 after MLP + residual. */
    const float *ln1_w, *ln1_b; /* (d_model); ln1_b NULL for RMSNorm */
    const float *ln2_w, *ln2_b; /* (d_model) */
    const float *pn1_w, *pn2_w; /* NULL, or (d_model): RMSNorms of the attention and MLP outputs, before the residual
                                 * add (OLMo 2's post_attention_layernorm and post_feedforward_layernorm) */
    struct hp_mat wq;           /* (d_model, n_q * d_head) */
    struct hp_mat wk, wv;       /* (d_model, n_kv * d_head) */
    const float *bq, *bk, *bv;  /* NULL or (n_q * d_head), (n_kv * d_head) */
    const float *q_norm, *k_norm; /* qk_norm: (d_head) the RMSNorm gains every query / key head shares;
                                   * qk_norm_whole: (n_q * d_head), (n_kv * d_head); else NULL */
    struct hp_mat wo;           /* (n_q * d_head, d_model) */
    const float *bo;            /* NULL or (d_model) */
    struct hp_mat w_up;         /* (d_model, d_ff) */
    struct hp_mat w_gate;       /* Llama only: (d_model, d_ff); p NULL otherwise */
    struct hp_mat w_down;       /* (d_ff, d_model) */
    const float *b_up, *b_down; /* NULL or (d_ff), (d_model) */
    const float *b_gate;        /* NULL or (d_ff): Llama's mlp_bias */
    int window;                 /* > 0: each query sees itself and the window - 1 keys before it; 0: every key */
    bool local_rope;            /* rotary by the model's rope_local (Gemma 3's sliding layers), else by its rope */
};

/*
 * A stored tensor that holds attention heads in blocks of d_head along one
 * axis (the heads of the layer, in slot order), n_seg segments side by side
 * (GPT-2's fused c_attn: q, k, v; Phi-3's qkv_proj: q, then the narrower k
 * and v of its KV heads), or in blocks of 3 d_head, a head's q, k and v
 * together (GPT-NeoX's query_key_value): what an export cuts when it removes
 * heads.
 */
struct hp_head_tensor {
    const struct hp_st_tensor *t;
    int layer;
    int axis;        /* 0: rows (or a vector's elements), 1: columns */
    int n_seg;       /* 1, or 3 for a fused q, k, v */
    unsigned seg_kv; /* bit s: segment s's blocks are KV heads (kv_slot), else query heads (q_slot) */
    int blk;         /* a block's width in d_head: 1, or 3 where each head's q, k and v lie together (GPT-NeoX) */
};

struct hp_model {
    struct hp_model_info info;
    char *dir;         /* the folder as given (owned) */
    char *config_text; /* config.json as read (for the model digest) */
    float norm_eps;
    /* What the passes test, set with the architecture by the config parser (model.c), so the forward and
     * its reverse ask what the model does, never which family it is: */
    bool rotary;    /* rotary positions on queries and keys (rope) */
    bool post_norm; /* norms after each residual add, the embeddings' too (BERT), else before attention and MLP */
    bool qk_norm;   /* each query and key head RMS-normalised (layers' q_norm, k_norm) before rotary (Qwen3) */
    bool qk_norm_whole; /* the queries of all heads RMS-normalised together, and the keys, before rotary (OLMo 2):
                         * every head's are projected, live or not, and no head may be missing */
    bool parallel;  /* pre-norm, attention and MLP side by side: x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX) */
    struct hp_rope rope;  /* rotary: the frequencies (ops.h) */
    struct hp_rope rope_local; /* theta > 0: the frequencies of the layers with local_rope (Gemma 3's sliding ones) */
    uint8_t *sliding;     /* info.sliding, owned */
    float embed_scale;    /* > 0: the token embeddings times this (Gemma's sqrt(hidden_size)); 0: as stored */
    float attn_scale;     /* > 0: the scores' scale (Gemma's query_pre_attn_scalar ** -0.5); 0: 1 / sqrt(d_head) */
    enum hp_act act;
    float attn_scale_div; /* GPT-2 scale_attn_by_inverse_layer_idx: 1 or layer-dependent */
    bool scale_by_layer;
    int n_types;          /* BERT token types */

    struct hp_mat wte; /* (n_vocab, d_model) as stored, row-major */
    struct hp_mat wpe; /* p NULL or (n_ctx, d_model), row-major */
    struct hp_mat wtt; /* p NULL or (n_types, d_model), row-major */
    const float *emb_ln_w, *emb_ln_b; /* BERT embedding LayerNorm */
    struct hp_layer *layers; /* (n_layers) */
    uint8_t *pruned;         /* NULL, or (n_layers, n_heads): 1 = the checkpoint lacks the head (info.pruned) */
    int *slots;              /* (n_layers, n_heads + n_kv_heads): the layers' q_slot, kv_slot */
    const float *lnf_w, *lnf_b; /* final norm (GPT-2, Llama); NULL for BERT */
    struct hp_mat lm_head;      /* p NULL or (n_vocab, d_model) as stored, row-major (wte's when tied) */
    /* BERT MLM head: logits = LN(act(h W + b)) E^T + bias */
    struct hp_mat mlm_dense;    /* (d_model, d_model) */
    const float *mlm_dense_b, *mlm_ln_w, *mlm_ln_b, *mlm_bias;
    /* BERT sequence classification: logits = tanh(h_CLS P + p) C + c */
    struct hp_mat pooler;       /* (d_model, d_model); p NULL without a classifier */
    const float *pooler_b;
    struct hp_mat classifier;   /* (d_model, n_labels) */
    const float *classifier_b;
    char **label_names;         /* (n_label_names): id2label */
    int n_label_names;

    struct hp_st_set *st;   /* mapped shards */
    struct hp_gguf *gguf;   /* NULL, or the GGUF file the model was opened from, mapped: its matrices' blocks */
    struct hp_head_tensor *head_tensors; /* (n_head_tensors): every bound tensor that holds heads */
    int n_head_tensors;
    unsigned flags;         /* hp_model_open_ex's */
    /* converted vectors (f16/bf16) and realigned f32 tensors; with HP_MODEL_CONVERT every 16-bit tensor */
    void **owned;
    int n_owned, cap_owned;
    /* Nothing here changes after hp_model_open: passes keep their state in
     * workspaces of their own (forward.h), so threads may share a model. */
};

/* hp_model_open_ex's flags */
enum {
    /* f16, bf16 and quantized (GGUF) matrices converted to owned f32 at load,
     * as before they were streamed (twice the stored size in memory for 16-bit
     * ones, four bytes a weight for GGUF's): the second path the tests compare
     * the streamed one with */
    HP_MODEL_CONVERT = 1,
};

/*
 * config.json keys transformers 4.x knows, per model_type, with what headprune
 * does with each (config_keys.c; docs/checkpoints.md has them as tables).
 */
enum hp_key_rule {
    HP_KEY_HONOUR,  /* model.c reads it, implementing or refusing each value itself */
    HP_KEY_DEFAULT, /* changes the maths; only the values in ok are implemented, any other is refused */
    HP_KEY_IGNORE,  /* changes nothing headprune computes */
};

struct hp_config_key {
    const char *key;
    enum hp_key_rule rule;
    const char *ok[4]; /* HP_KEY_DEFAULT: the accepted values as JSON text, NULL-terminated (none: only absence) */
    const char *why;   /* what the key does in transformers, and why the rule */
};

/*
 * Every model_type headprune reads, once: X(id, architecture). Each member has, by its id, its architecture's row
 * (model.c: config parser, binder), its table of config.json keys (config_keys.c: the table named id, a build
 * error when missing) and, in the Llama family, its row of defaults and features (model_config.c's
 * LLAMA_FAMILY_ROWS, indexed by HP_MT_id: a misspelt id is a build error). A new model_type is a line here and
 * those rows.
 */
#define HP_MODEL_TYPES(X)                                                                                              \
    X(gpt2, HP_ARCH_GPT2)                                                                                              \
    X(bert, HP_ARCH_BERT)                                                                                              \
    X(llama, HP_ARCH_LLAMA)                                                                                            \
    X(mistral, HP_ARCH_LLAMA)                                                                                          \
    X(qwen2, HP_ARCH_LLAMA)                                                                                            \
    X(qwen3, HP_ARCH_LLAMA)                                                                                            \
    X(phi3, HP_ARCH_LLAMA)                                                                                             \
    X(olmo2, HP_ARCH_LLAMA)                                                                                            \
    X(gemma2, HP_ARCH_LLAMA)                                                                                           \
    X(gemma3_text, HP_ARCH_LLAMA)                                                                                      \
    X(gpt_neox, HP_ARCH_GPT_NEOX)

enum hp_model_type_id {
#define HP_MT_ENUM(id, arch) HP_MT_##id,
    HP_MODEL_TYPES(HP_MT_ENUM)
#undef HP_MT_ENUM
    HP_MT_COUNT
};

/* The i-th model_type (0 .. HP_MT_COUNT - 1), NULL past the last. Static. */
const char *hp_model_type_at(int i);
/* model_type's id and architecture: false when headprune reads no such model_type. */
bool hp_model_type_find(const char *model_type, enum hp_model_type_id *id, enum hp_arch *arch);

/* The rows of model_type's own table (NULL: PretrainedConfig's, which every architecture shares), n of them;
 * NULL for a model_type without a table. */
const struct hp_config_key *hp_config_keys(const char *model_type, int *n);
/* key's row for model_type: its own table's, else the shared one's; NULL when neither has it. */
const struct hp_config_key *hp_config_key_find(const char *model_type, const char *key);
struct cJSON;
/* Refuse the first key of cfg whose rule is HP_KEY_DEFAULT and whose value is not one it accepts, naming it. */
enum hp_status hp_config_audit(const char *model_type, const struct cJSON *cfg, const char *path,
                               struct hp_error *err);

/*
 * A GGUF file as a Hugging Face checkpoint (gguf_model.c): the config.json text transformers' GGUF loader would
 * make of its metadata, and a set of its tensors under their transformers names: the vectors dequantized to f32
 * in buf (a safetensors file in memory, the set's shard), the matrices views of the file's blocks (quantized ones
 * through q). Owned by the caller: config, buf and q are freed with free, st with hp_st_close before buf, g with
 * hp_gguf_close after st.
 */
struct hp_gguf;
struct hp_gguf_ckpt {
    char *config;
    struct hp_st_set *st;
    void *buf;
    struct hp_qrows *q; /* one per tensor of the file, in its order; those of the quantized matrices used */
    struct hp_gguf *g;  /* the file, mapped: the matrices' bytes */
};
enum hp_status hp_gguf_checkpoint(const char *path, struct hp_gguf_ckpt *out, struct hp_error *err);

/*
 * A GGUF model's messages in the file's terms, not in the transformers names and config.json keys it was opened
 * under (gguf_model.c's tables, read back): hp_gguf_tensor_name puts tensor hf's name in the file into out (false,
 * and hf, when the file holds no such tensor) and its block into *layer (-1: none); hp_gguf_sizes what in g's
 * metadata sizes each of hf's dimensions, in ggml's order ("llama.embedding_length 32; llama.attention.head_count
 * 4 x llama.rope.dimension_count 8"; "" for an unknown name); hp_gguf_meta_says config keys expr
 * ("num_hidden_layers", "num_attention_heads*head_dim") as g's metadata says them. out: n bytes, cut to fit.
 */
bool hp_gguf_tensor_name(const char *hf, char *out, size_t n, int *layer);
void hp_gguf_sizes(const struct hp_gguf *g, const char *hf, char *out, size_t n);
void hp_gguf_meta_says(const struct hp_gguf *g, const char *expr, char *out, size_t n);

/*
 * The GGUF file a model path names (gguf_model.c): path itself when it is a regular file ending in .gguf
 * (another file is HP_ERR_ARG), or the one .gguf file of a folder without config.json (two are HP_ERR_ARG,
 * naming them). *out NULL when path names neither (a Hugging Face folder, or nothing); else the caller's
 * to free.
 */
enum hp_status hp_gguf_find(const char *dir, char **out, struct hp_error *err);

/* hp_model_open with flags (above). Destructor: hp_model_close. */
enum hp_status hp_model_open_ex(const char *dir, unsigned flags, struct hp_model **out, struct hp_error *err);

/* A scratch for products with m's 16-bit and quantized matrices
 * (hp_mat_buf_alloc sized for its deepest and largest); holds nothing for an
 * f32 model. Destructor:
 * hp_mat_buf_free. NULL on OOM. */
struct hp_mat_buf *hp_mat_buf_new(const struct hp_model *m);

#endif
