/*
 * config_keys.c -- every config.json key transformers 4.x knows for each
 * supported model_type, and what headprune does with it.
 *
 * One table per model_type plus one for PretrainedConfig's keys, which every
 * architecture shares (a model_type's row overrides the shared one). Each row
 * carries its decision:
 *   HONOUR   model.c reads the key and implements the values it accepts,
 *            refusing the others itself, naming the key;
 *   DEFAULT  the key changes the maths in transformers' modeling code and
 *            headprune implements only its default: any other value is
 *            refused here, naming the key (hp_config_audit);
 *   IGNORE   the key changes nothing headprune computes (training, dropout,
 *            generation, output format, heads headprune never runs).
 * docs/checkpoints.md gives the same tables for people; tests/test_model.c
 * holds them to tests/fixtures/config-keys.json, the keys tools/gen_config_keys.py
 * lists from transformers' configuration classes and modeling code, so a key a
 * new release adds fails that test until it has a row here.
 * A key no row knows is one transformers stores and its modeling code never
 * reads (the fixture lists every key it reads): it changes nothing.
 * Must not: print; know anything of tensors.
 */
#include "model.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

#define H(k, why) {k, HP_KEY_HONOUR, {NULL}, why}
#define I(k, why) {k, HP_KEY_IGNORE, {NULL}, why}
#define D(k, why, ...) {k, HP_KEY_DEFAULT, {__VA_ARGS__, NULL}, why}
#define A(k, why) {k, HP_KEY_DEFAULT, {NULL}, why} /* DEFAULT with no value accepted: only absence (or null) */

#define GEN "a generation setting"

/* PretrainedConfig (configuration_utils.py): every architecture's */
static const struct hp_config_key shared[] = {
    H("model_type", "the architecture"),
    H("pruned_heads", "heads the checkpoint lacks (GPT-2, BERT; refused on the Llama family)"),
    H("tie_word_embeddings", "the LM head is the embedding matrix"),
    H("headprune", "headprune's own record of a pruned checkpoint"),
    I("id2label", "class names of a sequence-classification head, which headprune runs only for BERT"),
    I("label2id", "the inverse of id2label"),
    I("num_labels", "the size of id2label when it is absent; headprune reads id2label and checks the classifier's shape"),
    I("problem_type", "the loss of a sequence-classification head headprune does not run for this architecture"),
    I("is_decoder", "read only by models with cross-attention (BERT's row decides it there)"),
    I("add_cross_attention", "not read by this architecture's modeling code"),
    I("cross_attention_hidden_size", "encoder-decoder models only"),
    I("is_encoder_decoder", "encoder-decoder wrappers and generation only"),
    I("tie_encoder_decoder", "encoder-decoder wrappers only"),
    I("chunk_size_feed_forward", "computes the feed-forward in chunks of positions: the same numbers"),
    I("output_hidden_states", "what the forward returns, not how"),
    I("output_attentions", "what the forward returns, not how"),
    I("return_dict", "the forward's return type"),
    I("use_return_dict", "the forward's return type (a property)"),
    I("torchscript", "export to TorchScript"),
    I("dtype", "the dtype transformers loads in when asked for \"auto\"; headprune computes in f32 from the stored weights"),
    I("torch_dtype", "the old name of dtype"),
    I("use_bfloat16", "a deprecated TensorFlow setting"),
    I("tf_legacy_loss", "a deprecated TensorFlow setting"),
    I("architectures", "the class that saved the checkpoint; headprune goes by model_type and the tensors present"),
    I("finetuning_task", "a label"),
    I("task_specific_params", "pipeline settings"),
    I("tokenizer_class", "the tokenizer's class"),
    I("prefix", "a generation prompt prefix"),
    I("bos_token_id", "a tokenizer id"),
    I("eos_token_id", "a tokenizer id"),
    I("sep_token_id", "a tokenizer id; the forward ignores it (the roles study reads it to find [SEP] for sep_token)"),
    I("pad_token_id", "the embedding's padding_idx: no gradient to that row in training; the forward reads it as any other"),
    I("decoder_start_token_id", "encoder-decoder generation"),
    I("name_or_path", "where the checkpoint came from"),
    I("_name_or_path", "where the checkpoint came from"),
    I("_commit_hash", "where the checkpoint came from"),
    I("transformers_version", "the version that saved it"),
    I("attn_implementation", "eager, sdpa or flash attention: the same maths"),
    I("_attn_implementation", "eager, sdpa or flash attention: the same maths"),
    I("gradient_checkpointing", "training only"),
    I("use_cache", "the KV cache of generation"),
    I("max_length", GEN),
    I("min_length", GEN),
    I("do_sample", GEN),
    I("early_stopping", GEN),
    I("num_beams", GEN),
    I("num_beam_groups", GEN),
    I("diversity_penalty", GEN),
    I("temperature", GEN),
    I("top_k", GEN),
    I("top_p", GEN),
    I("typical_p", GEN),
    I("repetition_penalty", GEN),
    I("length_penalty", GEN),
    I("no_repeat_ngram_size", GEN),
    I("encoder_no_repeat_ngram_size", GEN),
    I("bad_words_ids", GEN),
    I("num_return_sequences", GEN),
    I("output_scores", GEN),
    I("return_dict_in_generate", GEN),
    I("forced_bos_token_id", GEN),
    I("forced_eos_token_id", GEN),
    I("remove_invalid_values", GEN),
    I("exponential_decay_length_penalty", GEN),
    I("suppress_tokens", GEN),
    I("begin_suppress_tokens", GEN),
};

static const struct hp_config_key gpt2[] = {
    H("vocab_size", "rows of wte"),
    H("n_positions", "rows of wpe"),
    H("n_embd", "the hidden size"),
    H("n_layer", "layers"),
    H("n_head", "heads per layer"),
    H("n_inner", "the MLP's width (null: 4 n_embd)"),
    H("activation_function", "the MLP's activation (gelu, gelu_new, relu, silu ...; others refused)"),
    H("layer_norm_epsilon", "the LayerNorms' epsilon"),
    H("scale_attn_by_inverse_layer_idx", "scores also divided by the layer's index + 1"),
    D("scale_attn_weights", "scores divided by sqrt(d_head); false leaves them unscaled", "true"),
    D("add_cross_attention", "cross-attention blocks in every layer (an encoder-decoder's decoder)", "false"),
    D("hidden_size", "attribute_map alias of n_embd, which it would override", NULL),
    D("max_position_embeddings", "attribute_map alias of n_positions, which it would override", NULL),
    D("num_attention_heads", "attribute_map alias of n_head, which it would override", NULL),
    D("num_hidden_layers", "attribute_map alias of n_layer, which it would override", NULL),
    I("reorder_and_upcast_attn", "computes the scores in float32 with the scale applied first: the same maths"),
    I("resid_pdrop", "dropout (training)"),
    I("embd_pdrop", "dropout (training)"),
    I("attn_pdrop", "dropout (training)"),
    I("initializer_range", "initialisation (training)"),
    I("summary_type", "GPT2DoubleHeadsModel's multiple-choice head, which headprune does not run"),
    I("summary_use_proj", "GPT2DoubleHeadsModel's multiple-choice head"),
    I("summary_activation", "GPT2DoubleHeadsModel's multiple-choice head"),
    I("summary_proj_to_labels", "GPT2DoubleHeadsModel's multiple-choice head"),
    I("summary_first_dropout", "GPT2DoubleHeadsModel's multiple-choice head"),
    I("summary_last_dropout", "GPT2DoubleHeadsModel's multiple-choice head"),
    I("hidden_dropout", "GPT2ForTokenClassification's dropout"),
    I("classifier_dropout", "GPT2ForTokenClassification's dropout"),
};

static const struct hp_config_key bert[] = {
    H("vocab_size", "rows of the word embeddings"),
    H("hidden_size", "the hidden size"),
    H("num_hidden_layers", "layers"),
    H("num_attention_heads", "heads per layer"),
    H("intermediate_size", "the feed-forward's width"),
    H("hidden_act", "the feed-forward's and the MLM head's activation"),
    H("max_position_embeddings", "rows of the position embeddings"),
    H("type_vocab_size", "rows of the token-type embeddings"),
    H("layer_norm_eps", "the LayerNorms' epsilon"),
    H("position_embedding_type", "absolute (relative_key and relative_key_query refused)"),
    H("id2label", "a classifier's classes"),
    H("problem_type", "the classifier's loss: cross-entropy is implemented (null or single_label_classification "
                      "with two or more classes); regression and multi-label refused"),
    D("is_decoder", "a causal attention mask (BertLMHeadModel); headprune runs BERT bidirectionally", "false"),
    D("add_cross_attention", "cross-attention blocks in every layer (an encoder-decoder's decoder)", "false"),
    I("hidden_dropout_prob", "dropout (training)"),
    I("attention_probs_dropout_prob", "dropout (training)"),
    I("classifier_dropout", "dropout (training)"),
    I("initializer_range", "initialisation (training)"),
};

/* the keys the Llama-family rotary models read alike */
#define LLAMA_FAMILY                                                                                                   \
    H("vocab_size", "rows of the embedding and the head"), H("hidden_size", "the hidden size"),                      \
        H("intermediate_size", "the MLP's width"), H("num_hidden_layers", "layers"),                                 \
        H("num_attention_heads", "query heads per layer"), H("num_key_value_heads", "key/value heads per layer"),    \
        H("head_dim", "each head's width (else hidden_size / num_attention_heads)"),                                 \
        H("hidden_act", "the gated MLP's activation"),                                                               \
        H("max_position_embeddings", "the positions (and dynamic rotary scaling's threshold)"),                      \
        H("rms_norm_eps", "the RMSNorms' epsilon"), H("rope_theta", "the rotary base"),                              \
        H("rope_scaling", "rotary scaling: default, linear, dynamic and llama3 (others, and none named, refused)"),  \
        D("partial_rotary_factor", "rotary embedding on only this fraction of each head (modeling_rope_utils)",     \
          "1"),                                                                                                      \
        I("original_max_position_embeddings", "read by modeling_rope_utils for longrope only, which is refused"),  \
        I("attention_dropout", "dropout (training)"), I("initializer_range", "initialisation (training)")

static const struct hp_config_key llama[] = {
    LLAMA_FAMILY,
    H("attention_bias", "biases on q_proj, k_proj, v_proj and o_proj"),
    H("mlp_bias", "biases on gate_proj, up_proj and down_proj"),
    I("pretraining_tp", "no longer read by modeling_llama (it split the matrix products: the same maths)"),
};

static const struct hp_config_key mistral[] = {
    LLAMA_FAMILY,
    H("sliding_window", "each query sees this many keys back (null: all; absent: 4096, MistralConfig's default)"),
};

/* the keys of Qwen2's and Qwen3's window on their upper layers, which headprune refuses */
#define QWEN_WINDOW                                                                                                    \
    H("layer_types", "full or sliding attention per layer: every layer full is implemented"),                        \
        D("use_sliding_window", "a sliding window on the layers from max_window_layers up", "false"),                \
        I("sliding_window", "null unless use_sliding_window, which is refused"),                                     \
        I("max_window_layers", "where the window starts, with use_sliding_window only")

static const struct hp_config_key qwen2[] = {
    LLAMA_FAMILY,
    QWEN_WINDOW,
};

static const struct hp_config_key qwen3[] = {
    LLAMA_FAMILY,
    H("attention_bias", "biases on q_proj, k_proj, v_proj and o_proj"),
    QWEN_WINDOW,
};

static const struct hp_config_key phi3[] = {
    LLAMA_FAMILY,
    H("sliding_window", "each query sees this many keys back (null: all)"),
    I("resid_pdrop", "dropout after attention and the MLP (training)"),
    I("embd_pdrop", "dropout of the embeddings (training)"),
};

/* Olmo2Config: a Llama's keys; its q/k norms and where its norms sit come with the model_type */
static const struct hp_config_key olmo2[] = {
    LLAMA_FAMILY,
    H("attention_bias", "biases on q_proj, k_proj, v_proj and o_proj"),
};

/* Gemma2Config's and Gemma3TextConfig's keys: a Llama's shape and rotary, and what Gemma adds */
#define GEMMA_FAMILY                                                                                                   \
    H("vocab_size", "rows of the embedding and the head"), H("hidden_size", "the hidden size"),                      \
        H("intermediate_size", "the MLP's width"), H("num_hidden_layers", "layers"),                                 \
        H("num_attention_heads", "query heads per layer"), H("num_key_value_heads", "key/value heads per layer"),    \
        H("head_dim", "each head's width (256 when absent, the classes' default)"),                                  \
        H("hidden_activation", "the gated MLP's activation (Gemma's modeling reads this, not hidden_act)"),          \
        H("max_position_embeddings", "the positions (and dynamic rotary scaling's threshold)"),                      \
        H("rms_norm_eps", "the RMSNorms' epsilon"), H("rope_theta", "the rotary base (of the full layers)"),         \
        H("rope_scaling", "rotary scaling (of the full layers): default, linear, dynamic and llama3"),               \
        D("partial_rotary_factor", "rotary embedding on only this fraction of each head (modeling_rope_utils)",     \
          "1"),                                                                                                      \
        H("attention_bias", "biases on q_proj, k_proj, v_proj and o_proj"),                                          \
        H("query_pre_attn_scalar", "the scores' scale is its inverse square root (not head_dim's)"),                 \
        H("final_logit_softcapping", "logits z become cap tanh(z / cap) (null: none)"),                              \
        H("sliding_window", "each query on a sliding layer sees this many keys back (null refused)"),               \
        H("layer_types", "which layers slide (sliding_attention) and which see every key (full_attention)"),         \
        I("original_max_position_embeddings", "read by modeling_rope_utils for longrope and yarn only, refused"),  \
        I("attention_dropout", "dropout (training)"), I("initializer_range", "initialisation (training)")

static const struct hp_config_key gemma2[] = {
    GEMMA_FAMILY,
    H("attn_logit_softcapping", "scores s become cap tanh(s / cap) before the mask (null: none)"),
};

static const struct hp_config_key gemma3_text[] = {
    GEMMA_FAMILY,
    I("attn_logit_softcapping", "kept by Gemma3TextConfig, but Gemma3Attention never applies it (Gemma 2's does): "
                                "the scores are not capped, whatever its value"),
    H("rope_local_base_freq", "the rotary base of the sliding layers, which rope_scaling leaves unscaled"),
    H("sliding_window_pattern", "without layer_types: every pattern-th layer full, the others sliding"),
    I("_sliding_window_pattern", "written by save_pretrained; the class sets it from sliding_window_pattern, "
                                 "whatever config.json says"),
    D("use_bidirectional_attention", "every query sees every key in the window (EmbeddingGemma)", "false"),
    I("image_token_id", "Gemma3ForConditionalGeneration's images; the text model never reads it"),
    I("mm_tokens_per_image", "Gemma3ForConditionalGeneration's images; the text model never reads it"),
    I("vision_config", "Gemma3ForConditionalGeneration's vision tower"),
    I("text_config", "Gemma3ForConditionalGeneration's; a gemma3_text config is the text config itself"),
};

/* GPTNeoXConfig (Pythia) */
static const struct hp_config_key gpt_neox[] = {
    H("vocab_size", "rows of embed_in and embed_out"), H("hidden_size", "the hidden size"),
    H("intermediate_size", "the MLP's width"), H("num_hidden_layers", "layers"),
    H("num_attention_heads", "heads per layer (each hidden_size / heads wide)"),
    H("hidden_act", "the MLP's activation"), H("layer_norm_eps", "the LayerNorms' epsilon"),
    H("max_position_embeddings", "the positions (and dynamic rotary scaling's threshold)"),
    H("rotary_pct", "the fraction of each head rotary turns: its first int(head size * rotary_pct) dimensions"),
    H("rotary_emb_base", "the rotary base"),
    H("rope_scaling", "rotary scaling: default, linear, dynamic and llama3 (others, and none named, refused)"),
    H("use_parallel_residual", "x + attn(ln1(x)) + mlp(ln2(x)) when true, else attention then the MLP"),
    H("attention_bias", "biases on query_key_value and dense"),
    I("rope_theta", "GPTNeoXConfig sets it from rotary_emb_base, whatever config.json says"),
    I("partial_rotary_factor", "GPTNeoXConfig sets it from rotary_pct, whatever config.json says"),
    A("head_dim", "modeling_rope_utils would size the rotary frequencies by it while attention uses hidden_size / "
                  "num_attention_heads"),
    I("rms_norm_eps", "read only by GPTNeoXDecoderLayer, a class GPTNeoXModel does not build"),
    I("original_max_position_embeddings", "read by modeling_rope_utils for longrope and yarn only, which are refused"),
    I("attention_dropout", "dropout (training)"), I("hidden_dropout", "dropout (training)"),
    I("classifier_dropout", "dropout of the classification heads (training)"),
    I("initializer_range", "initialisation (training)"),
};

#define N(t) ((int)(sizeof t / sizeof t[0]))

/* a table per model_type of HP_MODEL_TYPES (model.h), named by its id: one missing is a build error */
static const struct {
    const char *model_type;
    const struct hp_config_key *rows;
    int n;
} tables[] = {
#define KEYS_TABLE(id, arch) {#id, id, N(id)},
    HP_MODEL_TYPES(KEYS_TABLE)
#undef KEYS_TABLE
    {NULL, shared, N(shared)},
};
static_assert(sizeof tables / sizeof tables[0] == HP_MT_COUNT + 1, "config keys: a table per model_type");

const struct hp_config_key *hp_config_keys(const char *model_type, int *n)
{
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (model_type ? tables[i].model_type && strcmp(tables[i].model_type, model_type) == 0 : !tables[i].model_type) {
            *n = tables[i].n;
            return tables[i].rows;
        }
    *n = 0;
    return NULL;
}

static const struct hp_config_key *find_in(const struct hp_config_key *rows, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].key, key) == 0)
            return &rows[i];
    return NULL;
}

const struct hp_config_key *hp_config_key_find(const char *model_type, const char *key)
{
    int n;
    const struct hp_config_key *rows = hp_config_keys(model_type, &n), *hit = rows ? find_in(rows, n, key) : NULL;
    if (hit)
        return hit;
    rows = hp_config_keys(NULL, &n);
    return find_in(rows, n, key);
}

/* v equals one of the row's accepted values (JSON texts); none listed: only absence (or null) is. */
static bool accepted(const struct hp_config_key *r, const cJSON *v)
{
    for (int i = 0; r->ok[i]; i++) {
        cJSON *want = NULL; /* the table's own texts: a NUL is not among them */
        struct hp_error ignored;
        hp_json_parse("config_keys.c", 0, r->ok[i], strlen(r->ok[i]), NULL, &want, &ignored);
        bool same = want && (cJSON_Compare(v, want, true) ||
                             (cJSON_IsNumber(v) && cJSON_IsNumber(want) && v->valuedouble == want->valuedouble));
        cJSON_Delete(want);
        if (same)
            return true;
    }
    return false;
}

enum hp_status hp_config_audit(const char *model_type, const struct cJSON *cfg, const char *path,
                               struct hp_error *err)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cfg)
    {
        if (!e->string || cJSON_IsNull(e))
            continue;
        const struct hp_config_key *r = hp_config_key_find(model_type, e->string);
        if (!r || r->rule != HP_KEY_DEFAULT || accepted(r, e))
            continue;
        char *txt = cJSON_PrintUnformatted(e);
        char ok[96] = "";
        for (int i = 0; r->ok[i]; i++)
            snprintf(ok + strlen(ok), sizeof ok - strlen(ok), "%s%s", i ? " or " : "", r->ok[i]);
        enum hp_status st =
            hp_fail(err, HP_ERR_UNSUPPORTED, "%s: \"%s\" = %.40s%s is not supported: %s (headprune %s%s)", path,
                    e->string, txt ? txt : "?", txt && strlen(txt) > 40 ? "..." : "", r->why,
                    r->ok[0] ? "implements only " : "needs the key left out", ok);
        free(txt);
        return st;
    }
    return HP_OK;
}
