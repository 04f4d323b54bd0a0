/*
 * headprune.h -- the one public contract of the headprune engine.
 *
 * If a type or function is not declared here, it is not public. The engine's
 * own headers live in its folders (engine/<stage>/x.h, and a family's private
 * x_priv.h).
 *
 * Conventions:
 *  - Fallible functions return enum hp_status and hand results back through
 *    out-parameters; on failure *err (when non-NULL) holds one line of the
 *    form "file: what is wrong (hint)". Nothing in the library prints or exits.
 *  - Constructors name their destructor; destructors accept NULL.
 *  - All matrices are row-major; shapes are given on every field.
 */
#ifndef HEADPRUNE_H
#define HEADPRUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HP_VERSION "0.1.0"

/* Bumped whenever a change can alter any number the engine computes (4: the unmasked model's loss from the
 * LM head's online sum, as every variant's and gradient pass's; 5: gradients summed over chunks of their own,
 * of more rows than the forward's; the norms', the softmax's and the gate sums' additions in 8 lanes; libmvec's
 * 16-wide expf on AVX-512; 6: the reuse path makes a resumed layer's output projection again from its heads'
 * outputs instead of subtracting the changed heads' part from the saved one; checkpoints whose untied GPT-2
 * head or Llama MLP biases were ignored are read whole). */
#define HP_NUMERIC_VERSION 6

// --- errors -----------------------------------------------------------------

enum hp_status {
    HP_OK = 0,
    HP_ERR_IO,          /* file missing, unreadable, short read */
    HP_ERR_FORMAT,      /* file content malformed */
    HP_ERR_SHAPE,       /* shapes/dtypes disagree with each other or the config */
    HP_ERR_NOMEM,
    HP_ERR_ARG,         /* bad argument: mask spec, option value */
    HP_ERR_UNSUPPORTED, /* valid but not supported (model_type, dtype) */
    HP_ERR_SQL,
    HP_ERR_PLAN,
};

#define HP_ERR_MSG_MAX 1024
struct hp_error {
    char msg[HP_ERR_MSG_MAX];
};

/* Static name of a status ("io", "format", ...). */
const char *hp_status_name(enum hp_status st);

// --- runtime ----------------------------------------------------------------

/*
 * Initialise the numeric backend once, before any model is used: selects the
 * BLIS kernel set (skx where the CPU has AVX-512F, unless BLIS_ARCH_TYPE is
 * set by the user) and the number of threads (0 = BLIS default).
 * Safe to call again to change the thread count.
 *
 * Process-wide: the state lives in globals of blas.c and in BLIS and OpenMP
 * themselves, not in a context. The first call sets BLIS_ARCH_TYPE in the
 * environment (setenv: not thread-safe against other threads reading the
 * environment) and initialises BLIS; n_threads > 0 sets BLIS's thread count
 * and omp_set_num_threads, which every later BLIS product and OpenMP loop of
 * the process uses, other models' and evaluators' included. Call it from one
 * thread, between evaluations (the sweep does, when it changes its threads).
 */
void hp_runtime_init(int n_threads);

/*
 * The machine's measured speed: GFLOP/s of (n, n) x (n, n) sgemms on the
 * threads set, repeated for at least min_seconds. a, b, c: the caller's n * n
 * floats each (contents are overwritten).
 */
double hp_runtime_sgemm_gflops(float *a, float *b, float *c, int n, double min_seconds);

/* Name of the BLIS kernel set in use ("skx", "haswell", ...), after init. */
const char *hp_runtime_kernel(void);

/* Whether the kernel set came from headprune's choice or the user's env. */
bool hp_runtime_kernel_from_env(void);

// --- models -----------------------------------------------------------------

enum hp_arch {
    HP_ARCH_GPT2,
    HP_ARCH_BERT,
    HP_ARCH_LLAMA, /* llama, mistral, qwen2, qwen3, phi3, olmo2 */
    HP_ARCH_GPT_NEOX, /* gpt_neox (Pythia) */
    HP_ARCH_COUNT  /* how many there are (not an architecture): model.c's table is sized by it */
};

struct hp_model_info {
    enum hp_arch arch;
    char model_type[32]; /* as in config.json: "gpt2", "bert", "llama", ... */
    int n_layers;
    int n_heads;    /* query heads per layer */
    int n_kv_heads; /* key/value heads per layer (== n_heads without GQA) */
    int d_head;
    int d_model;
    int d_ff;
    int n_vocab;
    int n_ctx;      /* maximum positions */
    /* Mistral's sliding window: each token attends to itself and the window - 1
     * tokens before it; 0 = no window */
    int window;
    /* NULL: the window (if any) on every layer; else (n_layers), 1 where a layer
     * has it (Gemma's sliding layers; the others see every key) */
    const uint8_t *sliding;
    /* > 0: attention scores s (logits z) become cap tanh(s / cap) (Gemma 2) */
    float attn_softcap, logit_softcap;
    int64_t n_params;
    char dtype[8];  /* stored dtype of the weights: "f32", "f16", "bf16" */
    bool gguf;      /* opened from a GGUF file: its weights read as f32, the matrices dequantized a panel at
                     * a time from the file's blocks (dtype "f32") */
    bool causal;       /* decoder (GPT-2, Llama) vs encoder (BERT) */
    bool has_lm_head;  /* logits available: causal LM head or BERT MLM head */
    int n_token_types; /* token types its embeddings read (BERT's type_vocab_size); 0: none, data's are dropped */
    bool gated_mlp;    /* its MLP is down(act(gate x) * up x), three matrices (the Llama family); else down(act(up x)) */
    bool parallel;     /* a layer's attention and MLP both read its input (GPT-NeoX's use_parallel_residual) */
    /* how transformers reads a checkpoint with heads removed (headprune prune): config.json's pruned_heads (GPT-2,
     * BERT), fewer heads in every layer alike (the Llama family), or not at all (GPT-NeoX) */
    enum hp_hf_prune { HP_HF_PRUNE_KEY, HP_HF_PRUNE_COMPACT, HP_HF_PRUNE_NONE } hf_prune;
    /* encoders: how a sentence embedding is pooled from the final hidden states, as
     * sentence-transformers' 1_Pooling/config.json declares (mean when absent) */
    enum hp_pooling { HP_POOL_MEAN, HP_POOL_CLS, HP_POOL_MAX } pooling;
    /* BERT ForSequenceClassification (pooler + classifier): its classes, named as
     * config.json's id2label names them; 0 and NULL for other models */
    int n_labels;
    const char *const *label_names;
    /* a pruned checkpoint (config.json's "pruned_heads", Hugging Face's for GPT-2 and
     * BERT, or the "headprune" record `headprune prune` writes): the query heads it
     * lacks, in the original grid above, which masks and results keep using. A pruned
     * head's output is zero, as under zero ablation; a KV group goes with its last
     * query head. NULL and 0 for a complete checkpoint. */
    const uint8_t *pruned; /* NULL or (n_layers, n_heads): 1 = pruned */
    int n_pruned;
};

struct hp_model;

/*
 * Open a Hugging Face model directory: config.json plus model.safetensors or
 * the shards named by model.safetensors.index.json, or a llama GGUF file.
 * Weights are memory-mapped and used in place in their stored dtype (f32,
 * f16 or bf16; a GGUF file's matrices in their quantized blocks): the model
 * takes about its stored size in memory.
 * Destructor: hp_model_close.
 */
enum hp_status hp_model_open(const char *dir, struct hp_model **out,
                             struct hp_error *err);
void hp_model_close(struct hp_model *m);
const struct hp_model_info *hp_model_get_info(const struct hp_model *m);

// --- tokenizers ---------------------------------------------------------------

struct hp_tokenizer;

/*
 * The tokenizer of a model directory: tokenizer.json (byte-level BPE as
 * GPT-2 and Llama-3/Qwen2, SentencePiece-style BPE with byte fallback as
 * Llama-2/Mistral, WordPiece as BERT), else vocab.txt (BERT WordPiece), else
 * vocab.json + merges.txt (GPT-2). For a GGUF model (dir a .gguf file, or a
 * folder holding one and no config.json) without those files beside it, the
 * file's own tokenizer.ggml.* metadata (docs/gguf.md). A kind it does not
 * support is an error that names it. Destructor: hp_tokenizer_free.
 */
enum hp_status hp_tokenizer_open(const char *dir, struct hp_tokenizer **out, struct hp_error *err);
void hp_tokenizer_free(struct hp_tokenizer *t);

/* Where t was read from, for people: "DIR/tokenizer.json", or "FILE.gguf (its metadata: byte-level BPE
 * \"gpt2\", pre-tokenizer \"smollm\", 49152 tokens)". Owned by t. */
const char *hp_tokenizer_source(const struct hp_tokenizer *t);

/* Where dir's tokenizer would come from, as inspect and Model.info say it: HP_OK with *source a malloc'd copy of
 * hp_tokenizer_source (NULL when dir has no tokenizer: text needs one, token ids do not), or the error opening
 * the one dir has (*source NULL). */
enum hp_status hp_tokenizer_describe(const char *dir, char **source, struct hp_error *err);

/* One past the largest token id the tokenizer can produce. */
int hp_tokenizer_n_ids(const struct hp_tokenizer *t);

/* The id of the token whose string is token (as hp_tokenizer_piece shows it, e.g. "[SEP]"); -1 when none. */
int32_t hp_tokenizer_token_id(const struct hp_tokenizer *t, const char *token);

struct hp_encoding {
    int32_t *ids;
    int32_t *type_ids; /* 0 for text a, 1 for text b (pairs) */
    int n;
};
void hp_encoding_free(struct hp_encoding *e);

/*
 * Token ids of UTF-8 text a (na bytes) or of the pair (a, b) (b NULL: one
 * text), with the special tokens the post-processor adds when special is
 * true. Text that is not valid UTF-8 is an error naming the byte offset; so
 * is a pre-tokenizer regex that fails (PCRE2's match limit: never taken as
 * "no more matches") and a normalizer that would grow the text past 256 MB.
 * Linear in the text (BPE merges through a heap: O(n log n) in a word).
 */
enum hp_status hp_tokenizer_encode(const struct hp_tokenizer *t, const char *a, size_t na,
                                   const char *b, size_t nb, bool special,
                                   struct hp_encoding *out, struct hp_error *err);

/*
 * The token string of id, as the tokenizers library's Encoding.tokens shows
 * it (GPT-2's "Ġworld", WordPiece's "##ing", SentencePiece's "▁the", byte
 * fallback's "<0x0A>"), NUL-terminated, with its length in *n (n may be
 * NULL); NULL when no token has that id. Owned by t.
 */
const char *hp_tokenizer_piece(const struct hp_tokenizer *t, int32_t id, size_t *n);

/*
 * The text of ids[0..n), as Hugging Face's tokenizer.decode(ids) gives it:
 * the tokenizer.json's decoder (byte-level bytes that are not UTF-8 become
 * U+FFFD; WordPiece's "##" joined), then transformers' clean-up of spaces
 * before punctuation when the directory's tokenizer_config.json sets
 * clean_up_tokenization_spaces. skip_special leaves out the special tokens
 * (skip_special_tokens=True). An id no token has is an error naming its
 * place (1-based) and the id, where Hugging Face would drop it silently;
 * so is a decoder headprune does not support. *out (NUL-terminated,
 * *n_out bytes, which may include NULs) is the caller's to free().
 */
enum hp_status hp_tokenizer_decode(const struct hp_tokenizer *t, const int32_t *ids, int n,
                                   bool skip_special, char **out, size_t *n_out,
                                   struct hp_error *err);

// --- held-out data ----------------------------------------------------------

/*
 * Prompt-pair task rows (docs/tasks.md): for a causal LM the one scored item
 * of row s is position pos[s] (the prompt's last real token) with target
 * answer[s]; no other position is scored. ids hold the prompts, padded right
 * under attn_mask (always present for task data).
 */
struct hp_task {
    int32_t *answer;  /* (n_seqs): the one-token answer */
    int32_t *wrong;   /* NULL (no row has one) or (n_seqs): the wrong answer */
    int32_t *pos;     /* (n_seqs): the answer position, the prompt's last token */
    int32_t *corrupt; /* NULL (no corrupt prompts) or (n_seqs, seq_len), row-major, padded as ids */
    int32_t *line;    /* (n_seqs): each row's line in the file (from 1), for errors */
    bool swapped;     /* ids and corrupt exchanged, the data denoise runs on (hp_ablation_bind_data) */
};

struct hp_data {
    int n_seqs;
    int seq_len;
    int32_t *ids;       /* (n_seqs, seq_len), row-major */
    int32_t *labels;    /* NULL or (n_seqs, seq_len); -100 = ignore (MLM) */
    uint8_t *attn_mask; /* NULL or (n_seqs, seq_len); 1 = real token, 0 = pad */
    int32_t *type_ids;  /* NULL or (n_seqs, seq_len); BERT token types */
    int32_t *seq_labels; /* NULL or (n_seqs): each sequence's class (classification) */
    int64_t n_dropped;   /* text only: tokens left out to fit the rows (a causal model's packed
                          * remainder, an encoder's documents or .jsonl rows cut to seq_len) */
    char *path;          /* the file as given (owned; hp_data_free frees it) */
    struct hp_task *task; /* NULL, or task rows' answers (owned; hp_data_free frees it) */
};

/*
 * Load token ids from:
 *  - .npy: little-endian int32/int64/uint16/uint32, C order; [n_seqs, seq_len],
 *    or 1-D cut into rows of seq_len (the remainder dropped);
 *  - .jsonl: {"ids": [...], "labels": [...], "attention_mask": [...],
 *    "token_type_ids": [...]} per line, every row the same length; or task
 *    rows {"prompt_ids": [...], "answer_id": N, "wrong_id": N, "corrupt_ids":
 *    [...]} (docs/tasks.md: rows of any length, padded; d->task set; text
 *    fields need hp_data_load_for);
 *  - .bin: llm.c token files (magic 20240520 with uint16 tokens, 20240801 with
 *    uint32) or, without a magic, raw nanoGPT uint16; 1-D, needs seq_len.
 * seq_len = 0 means "take it from the file".
 * Destructor: hp_data_free.
 */
enum hp_status hp_data_load(const char *path, int seq_len, struct hp_data **out,
                            struct hp_error *err);

/*
 * The same, and text as well, tokenized with model_dir's tokenizer: .txt
 * (documents separated by blank lines, each with the tokenizer's special
 * tokens, packed into rows of seq_len, which is then required) and .jsonl
 * with "text" (or "text_a"/"text_b" pairs; one padded row each, cut to
 * seq_len when it is given), and task rows whose first row has a text
 * field (docs/tasks.md: prompts without special tokens unless "special",
 * one-token answers). Files of ids go to hp_data_load. info (may be
 * NULL) is the model's: a tokenizer that can make ids its embedding does not
 * have is refused.
 *
 * Side effect: tokenized text is cached on disk, in
 * $HP_CACHE_DIR/tokens/, else $XDG_CACHE_HOME/headprune/tokens/, else
 * ~/.cache/headprune/tokens/ (that folder and tokens/ made when missing; no
 * cache without any of the three), one file per digest of text, tokenizer,
 * seq_len and class names, written atomically (a temporary file renamed). A later call reads it instead of tokenizing.
 * The cache is only an optimisation: an entry that cannot be written, read
 * or checked is ignored, never an error. Set HP_CACHE_DIR to move it.
 */
enum hp_status hp_data_load_for(const char *path, const char *model_dir, const struct hp_model_info *info,
                                int seq_len, struct hp_data **out, struct hp_error *err);
void hp_data_free(struct hp_data *d);

/*
 * A held-out set from token ids in memory, row-major, of shape dims (ndim of them), copied, by the rule a .npy
 * file of that shape follows in hp_data_load: 2-D (n_seqs, seq_len) taken whole (seq_len 0 or equal to the
 * rows'), 1-D (n_tokens) cut into rows of seq_len (required; the tail dropped); the same errors, with name
 * where the file's would have its path (results call the data name too). Ids are checked against a model's
 * vocabulary when an evaluator binds them. Destructor: hp_data_free.
 */
enum hp_status hp_data_from_ids(const int32_t *ids, int ndim, const uint64_t *dims, int seq_len, const char *name,
                                struct hp_data **out, struct hp_error *err);

/* Every id, and every label but -100, must be in [0, n_vocab): else HP_ERR_ARG
 * naming the file, row and position (counting from 0); for task data every
 * answer, wrong answer and corrupt id too, naming the row's line. */
enum hp_status hp_data_check_vocab(const struct hp_data *d, int n_vocab,
                                   struct hp_error *err);

// --- task generators ----------------------------------------------------------

/* Task rows made for a model (docs/tasks.md, "Generators"): each a generator of engine/text/task_gen.c's table. */
enum hp_task_gen {
    HP_TASK_GEN_IOI,       /* indirect-object identification prompt pairs, text rows */
    HP_TASK_GEN_INDUCTION, /* random tokens repeated, rows of ids */
    HP_TASK_GEN_DOCSTRING, /* the next parameter of a Python docstring, text rows */
    HP_TASK_GEN_COUNT      /* how many there are (not a generator): task_gen.c's table is sized by it */
};

#define HP_TASK_GEN_MAX_ROWS 100000 /* the most rows one call makes */

struct hp_task_gen_opts {
    int n;         /* rows, 1..HP_TASK_GEN_MAX_ROWS */
    uint64_t seed; /* the same seed (and model, and options) gives the same rows, byte for byte */
    int len;       /* induction: random tokens K in a half; 0 = the default (docs/tasks.md) */
    int templ;     /* ioi: 0 = every template in turn; k = only template k (from 1) */
};

/*
 * n task rows of generator g for the model directory model_dir (ioi and
 * docstring read its tokenizer; induction its config.json for the
 * vocabulary and, when there is one, its tokenizer for the special tokens to
 * leave out), each handed to row as one line of JSON (no newline; n bytes,
 * NUL-terminated) in the text or ids form docs/tasks.md defines. row returns
 * false to stop: then HP_ERR_IO, "stopped". A model the generator cannot
 * serve (too few one-token words, a vocabulary too small for K, no tokenizer
 * for a text generator) is an error naming the directory and the reason.
 */
enum hp_status hp_task_generate(enum hp_task_gen g, const char *model_dir, const struct hp_task_gen_opts *o,
                                bool (*row)(void *user, const char *line, size_t n), void *user,
                                struct hp_error *err);

// --- masks ------------------------------------------------------------------

struct hp_mask {
    int n_layers;
    int n_heads;
    float *gate; /* (n_layers, n_heads), row-major; 1 = kept, 0 = ablated */
    float *mlp;  /* (n_layers): each layer's MLP block, "mlp:L"; 1 = kept, 0 = ablated */
    /* where: -1 (hp_mask_new's) every position; else the ablated heads are replaced at position pos of every
     * row only, and keep their own outputs under the unmasked model at the others (activation patching one
     * position at a time; heads only, at gates of 0). Not part of the mask's text (hp_mask_format): a sweep
     * marks the content address of such a variant with it (HP_KEY_POS). */
    int pos;
    /* edges patched (hp_edge): n_edges of them, sorted and unique (hp_edge_cmp), malloc'd; 0 and NULL: none */
    int n_edges;
    struct hp_edge *edges;
};

/*
 * Paths through the residual stream. A sender writes to it: the embeddings "emb", a head "L.H" (its output
 * times its rows of the output projection, no bias), an MLP block "mlp:L" (its output as it joins the stream).
 * A receiver reads it: a head's query, key or value input "L.H:q" / ":k" / ":v" (under GQA the keys and values
 * head H alone sees), an MLP block's input "mlp:L", or "logits" (the final stream, before the final norm).
 * Patching edge u>v: v reads its stream plus (a_u(other) - a_u(this run)), a_u(other) the ablation's value of
 * the sender (zero: 0; mean, mean-pos, resample: the head's or MLP's replacement), before its own norm.
 */
enum hp_node_kind { HP_NODE_EMB, HP_NODE_HEAD, HP_NODE_MLP, HP_NODE_LOGITS };
enum hp_chan { HP_CHAN_Q, HP_CHAN_K, HP_CHAN_V };

struct hp_node {
    enum hp_node_kind kind;
    int layer, head; /* head: a head's; layer: a head's or an MLP's (else 0) */
    int chan;        /* a receiving head's input (enum hp_chan); else 0 */
};

struct hp_edge {
    struct hp_node from, to;
};

/* Edges' order: by receiver (layer, then heads by index and channel q, k, v, then the MLP; logits last), then by
 * sender (emb, then by layer, a layer's heads before its MLP). A qsort comparator. */
int hp_edge_cmp(const void *a, const void *b);

/* Whether u can write before v reads: a sender of an earlier layer, or a head of layer L into mlp:L unless the
 * model's residual is parallel; emb into anything, anything into logits. */
bool hp_edge_valid(const struct hp_model_info *info, const struct hp_node *u, const struct hp_node *v);

/* A node's text ("emb", "L.H", "mlp:L", "L.H:q", "logits"). Returns what snprintf returns. */
int hp_node_label(char *buf, size_t size, const struct hp_node *n);

/* A mask of all ones. Destructor: hp_mask_free. NULL if a size is < 1 or out of memory. */
struct hp_mask *hp_mask_new(int n_layers, int n_heads);
void hp_mask_free(struct hp_mask *m);

/* Copy src's gates, position and edges into dst, of the same shape. false (dst unchanged) when out of memory
 * for the edges. */
bool hp_mask_copy(struct hp_mask *dst, const struct hp_mask *src);

/*
 * Parse a mask spec: comma-separated "L.H", "L.*" (a whole layer's heads),
 * "kv:L.G" (every query head sharing KV head G of layer L), "mlp:L" (layer
 * L's MLP block) and edges "SENDER>RECEIVER" (struct hp_edge; a receiver head
 * without a channel is its three inputs; "*" on either side every node there:
 * "0.1>*", "*>logits"; an edge that cannot exist is refused, one in a "*" left
 * out). With keep = true the named units are kept and all others
 * of their kind ablated: every head not named, and, when the spec names an
 * MLP, every MLP not named (a keep spec of heads alone leaves the MLPs);
 * edges are patched either way (keep is for units). An
 * empty spec ablates nothing (or, with keep, every head).
 * Destructor: hp_mask_free.
 */
enum hp_status hp_mask_parse(const char *spec, bool keep,
                             const struct hp_model_info *info,
                             struct hp_mask **out, struct hp_error *err);

/* Number of ablated (gate == 0) heads (MLP blocks not counted: hp_mask_count_mlps). */
int hp_mask_count_ablated(const struct hp_mask *m);

/* Number of ablated (gate == 0) MLP blocks. */
int hp_mask_count_mlps(const struct hp_mask *m);

/*
 * How every count of heads is made (the sweep's rows, queries, figures): a
 * head a pruned checkpoint lacks is neither kept nor pruned; it is not
 * there. The model has hp_heads_present(info) query heads: n_layers *
 * n_heads less the n_pruned it lacks. hp_mask_drop_absent sets m's gate of
 * every head the checkpoint lacks to 1 (such a head's output is zero
 * whatever its gate: the same variant) and returns how many it changed;
 * after it a mask, its text, its key and its count of ablated heads name only
 * heads the model has, and heads kept = hp_heads_present(info) -
 * hp_mask_count_ablated(m). Every job of a sweep goes through it.
 */
int hp_heads_present(const struct hp_model_info *info);
int hp_mask_drop_absent(struct hp_mask *m, const struct hp_model_info *info);

/*
 * Units: what a study ablates one at a time. The kinds are one table in
 * mask.c (their names, labels, counts and gates); the values are what the
 * database's kv columns store (0 and 1 were a bool before MLPs were units).
 */
enum hp_unit_kind {
    HP_UNIT_HEAD = 0, /* a query head, "L.H" */
    HP_UNIT_KV = 1,   /* a KV group: every query head sharing one key/value head, "kv:L.G" */
    HP_UNIT_MLP = 2,  /* a layer's MLP block, "mlp:L": its whole output into the residual stream */
    HP_UNIT_COUNT
};

/* Units per layer: n_heads; KV groups: n_kv_heads (n_heads when the model
 * declares none); MLP blocks: 1. */
int hp_unit_count(const struct hp_model_info *info, enum hp_unit_kind u);

/* Query heads one unit covers: 1, or for a KV group n_heads / n_kv_heads (0 when the
 * query heads do not group evenly over the KV heads); an MLP block covers none: 0. */
int hp_unit_width(const struct hp_model_info *info, enum hp_unit_kind u);

/* Whether the checkpoint lacks every query head of unit (layer, unit) (a
 * pruned checkpoint: hp_model_info.pruned). Studies leave such units out:
 * ablating them changes nothing, and a curve that "pruned" them would
 * claim heads for free. An MLP block is never pruned. */
bool hp_unit_pruned(const struct hp_model_info *info, enum hp_unit_kind u, int layer, int unit);

/* "head", "KV group" or "MLP"; plural: "heads", "KV groups", "MLPs". Static. */
const char *hp_unit_name(enum hp_unit_kind u, bool plural);

/* How plans and options spell the kind: "heads", "kv", "mlp". Static. */
const char *hp_unit_word(enum hp_unit_kind u);

/* The kind spelled word (hp_unit_word's), into *out; false if none is. */
bool hp_unit_parse(const char *word, enum hp_unit_kind *out);

/* The unit's label as masks and tables write it: "L.U", "kv:L.U" or "mlp:L" (unit 0). Returns
 * what snprintf returns. */
int hp_unit_label(char *buf, size_t size, enum hp_unit_kind u, int layer, int unit);

/* Set the gate of unit (layer, unit) to g (0 = ablate): every query head it covers, or the MLP's.
 * The unit must exist in m (as hp_unit_count and hp_unit_width say). */
void hp_mask_set_unit(struct hp_mask *m, const struct hp_model_info *info, enum hp_unit_kind u, int layer, int unit,
                      float g);

/* Whether unit (layer, unit) is at gate 0 in m (a study's base mask: the unit is already
 * removed). The unit must exist in m, as for hp_mask_set_unit. */
bool hp_mask_unit_ablated(const struct hp_mask *m, const struct hp_model_info *info, enum hp_unit_kind u, int layer,
                          int unit);

/* The first layer with a gate (a head's or the MLP's) that is not 1 or an edge's sender (emb: 0), where a
 * variant's forward starts to differ from the unmasked model's, or from which it must run to see every sender
 * it patches; n_layers when nothing is ablated
 * (also for m == NULL, which is given as n_layers). */
int hp_mask_first_changed(const struct hp_mask *m, int n_layers);

/* Patch the edges spec names in m as well (items SENDER>RECEIVER as hp_mask_parse reads them, each an edge). An
 * error names the item in one line. */
enum hp_status hp_mask_add_edges(struct hp_mask *m, const char *spec, const struct hp_model_info *info,
                                 struct hp_error *err);

/* Patch in m every edge of the model but those the circuit file path keeps: one edge item a line ("0.1>2.3:q",
 * "0.1>2.3" its three inputs, a "*" pattern), '#' comments and blank lines skipped. With every edge in the file
 * nothing is patched. An error names the file and the line. */
enum hp_status hp_mask_circuit(struct hp_mask *m, const char *path, const struct hp_model_info *info,
                               struct hp_error *err);

/* The same from the text of such a file (len bytes; name: what errors call it, "NAME:LINE: ..."). */
enum hp_status hp_mask_circuit_text(struct hp_mask *m, const char *text, size_t len, const char *name,
                                    const struct hp_model_info *info, struct hp_error *err);

/* Whether m patches an edge (m may be NULL). */
bool hp_mask_has_edges(const struct hp_mask *m);

/* Whether some MLP block's gate in m is not 1 (m may be NULL). */
bool hp_mask_has_mlp(const struct hp_mask *m);

/* Canonical text of a mask: layer by layer, ascending "L.H" items (a layer
 * with every head ablated as "L.*"), then "mlp:L" when its MLP is ablated,
 * then the edges in their order (hp_edge_cmp) as "SENDER>RECEIVER" with
 * channels; "" when nothing is ablated. A mask of heads only reads as it did before
 * MLPs were units (its content address is unchanged). Parses back to the
 * same mask. NULL on out-of-memory; the caller frees it with free(). */
char *hp_mask_format(const struct hp_mask *m);

/* A pruned checkpoint's missing heads (hp_model_info.pruned) as a mask spec, malloc'd; NULL for a complete
 * checkpoint, and when out of memory. */
char *hp_pruned_spec(const struct hp_model_info *in);

// --- pruned checkpoints --------------------------------------------------------

struct hp_export_info {
    int n_removed;    /* heads this export removed (not counting those the source already lacked) */
    int n_pruned;     /* heads the written checkpoint lacks in all */
    int64_t n_params; /* its parameters (of the tensors headprune reads) */
    int64_t bytes;    /* the size of its model.safetensors */
    int64_t source_bytes; /* the source's safetensors files, for comparison (a GGUF model's: its tensors
                           * in f32, the safetensors file an export of it whole would be, near enough) */
    bool hf_loadable; /* Hugging Face transformers 4.x loads it: GPT-2 and BERT (config's
                       * "pruned_heads"), Llama-family models when every layer keeps the same
                       * numbers of heads and KV groups and only whole groups go; never when a
                       * layer keeps no heads */
    char why_not[200]; /* when not: why */
};

/*
 * Write m without the heads whose gate in remove is 0 (gates must be 0 or 1)
 * to the new directory out_dir, as a Hugging Face checkpoint directory: one
 * model.safetensors in the source's dtypes with the heads' Q/K/V rows, biases
 * and output-projection rows removed (a KV group with its last query head),
 * config.json naming what was pruned (struct hp_model_info's pruned), and
 * the directory's other files but weights copied. hp_model_open reads it,
 * and evaluates it as m under the mask. out_dir must not exist; it appears
 * whole or not at all. info gets what was written.
 */
enum hp_status hp_model_export(const struct hp_model *m, const struct hp_mask *remove, const char *out_dir,
                               struct hp_export_info *info, struct hp_error *err);

// --- evaluation -------------------------------------------------------------

/* How a head is taken out: one row each in engine/eval/ablation.c (its name, prepare step and replacement). */
enum hp_ablation {
    HP_ABLATE_ZERO,     /* the head's output is zero */
    HP_ABLATE_MEAN,     /* replaced by its mean over all held-out tokens */
    HP_ABLATE_MEAN_POS, /* replaced by its mean at each position */
    HP_ABLATE_RESAMPLE, /* replaced by its value on the row's corrupt prompt (noising; task rows with corrupt) */
    HP_ABLATE_DENOISE,  /* on the corrupt prompt, the head's clean value restored (hp_ablation_bind_data swaps) */
    HP_ABLATE_COUNT
};
#define HP_N_ABLATIONS HP_ABLATE_COUNT

/* The method's name as plans, digests and the database write it: "zero",
 * "mean", "mean-pos", "resample", "denoise" ("unknown" for a value outside
 * the enum). Static. */
const char *hp_ablation_name(enum hp_ablation a);

/* The method a name means; false if it names none. */
bool hp_ablation_parse(const char *name, enum hp_ablation *out);

/* What the method makes of a dead head's output, as a phrase for help texts: "the head's output is zero". Static. */
const char *hp_ablation_help(enum hp_ablation a);

/* Whether the method replaces a head with the evaluator's mean statistics (hp_evaluator_means),
 * which a sweep keeps in its database beside the results. */
bool hp_ablation_reads_means(enum hp_ablation a);

/*
 * Data d as ablation a runs on it, checked before anything is run or
 * written: resample and denoise need task rows with corrupt prompts (else one
 * line naming d's file), denoise runs on the corrupt prompts and so swaps d
 * (ids and task->corrupt exchanged, task->swapped set) unless it is so
 * already; resample refuses swapped data.
 * Other ablations take any data as it is. The eval CLI and the sweep call it
 * on the data they load, before making the evaluator.
 */
enum hp_status hp_ablation_bind_data(enum hp_ablation a, struct hp_data *d, struct hp_error *err);

/*
 * The metrics a variant is measured by, one table (engine/core/metric.c) for every
 * module that names, scores, stores or ranks them: plans, the evaluator, the
 * sweep's iterative scoring, the store's columns, queries, the CLI. A new
 * metric is a value here (before HP_N_METRICS) and its row there.
 */
enum hp_metric {
    HP_METRIC_LOSS, /* mean token loss, nats: larger = worse */
    HP_METRIC_KL,   /* KL(unmasked || masked), nats: larger = worse */
    HP_METRIC_ACC,  /* top-1 accuracy: larger = better */
    HP_METRIC_COS,  /* cosine to the unmasked model's embedding: larger = better */
    /* task rows only (docs/tasks.md), at the answer position: larger = better */
    HP_METRIC_LOGIT_DIFF,     /* logit(answer) - logit(wrong): rows with a wrong answer */
    HP_METRIC_ANSWER_LOGPROB, /* log p(answer), nats */
    HP_METRIC_ANSWER_PROB,    /* p(answer) */
    HP_METRIC_ANSWER_ACC,     /* the answer is the top-1 token */
    HP_METRIC_PATCH_RECOVERY, /* (logit_diff - corrupt's) / (clean's - corrupt's): rows with wrong and corrupt */
    HP_N_METRICS    /* the count: engine/core/metric.c's table is sized and pinned by it */
};

/* "loss", "kl", "acc", "cos" ("unknown" outside the enum). Static. */
const char *hp_metric_name(enum hp_metric m);

/* The metric a name means; false if it names none. */
bool hp_metric_parse(const char *name, enum hp_metric *out);

/* +1 when a larger value is worse (loss, kl), -1 when it is better (acc, cos):
 * damage = sign * value ranks variants the same way for every metric. The one
 * statement of which way is worse: every other rule derives from it. */
int hp_metric_sign(enum hp_metric m);

/* A variant's effect on the metric, signed so that larger = worse: v the
 * variant's value, b its baseline's (ignored where the metric is measured
 * against the unmasked model already, as KL is: its baseline is 0). */
double hp_metric_effect(enum hp_metric m, double v, double b);

/* Whether hp_evaluator_grad differentiates the metric (loss, kl, cos, logit_diff: not acc, a step function of the
 * gates, nor the other task metrics). */
bool hp_metric_has_grad(enum hp_metric m);

/* What a sweep's gradient studies (importance, attribution, a gradient-ranked curve) differentiate when the
 * sweep's metric is m: m itself for loss, logit_diff and cos (an encoder without a head has no other: its
 * studies need a base mask, hp_metric_grad_zero_unmasked), else the loss (kl's gradient vanishes at the
 * unmasked model where the loss's does not; acc has none). The one statement of the rule: the sweep, its job
 * keys and the queries derive from it. */
enum hp_metric hp_metric_grad_of(enum hp_metric sweep_metric);

/* Whether m's gradient is identically 0 at the unmasked model, where m is minimal (kl, cos as 1 - cos): a
 * gradient study that differentiates it must start from heads already removed (a study's mask:). */
bool hp_metric_grad_zero_unmasked(enum hp_metric m);

/* What hp_evaluator_grad differentiates for m, signed so that larger = worse: "loss", "kl", "1 - cos",
 * "-logit_diff"; "" for a metric without a gradient. Static. */
const char *hp_metric_grad_what(enum hp_metric m);

/* Every metric's name (grad_only: those with a gradient) into buf as "loss, kl, acc, cos", joined by ", "
 * and the last by last_sep (", " or " or "), for messages that list them; cut to n. */
void hp_metric_names(char *buf, size_t n, bool grad_only, const char *last_sep);

/* What the metric's values, and effects on it, are counted in, for axis labels:
 * "nats" (loss, kl), "fraction correct" (acc), "cosine similarity" (cos). Static. */
const char *hp_metric_unit(enum hp_metric m);

/* How an effect is measured on the metric, signed so that larger = worse, as one
 * phrase: "effect = loss - baseline loss (nats; larger = worse)", ... Static. */
const char *hp_metric_effect_text(enum hp_metric m);

/*
 * A variant's metrics: value, seq and has are indexed by enum hp_metric (a new
 * metric needs no new member); the named members alias them for the metrics
 * the CLI and tests name (loss is value[HP_METRIC_LOSS], seq_loss is
 * seq[HP_METRIC_LOSS], has_loss is has[HP_METRIC_LOSS], ...).
 */
struct hp_metrics {
    int n_seqs;
    int64_t n_tokens; /* predicted (causal) or labelled (MLM) tokens */
    union {           /* whether the model and data produce the metric */
        bool has[HP_N_METRICS];
        struct {
            bool has_loss; /* causal LM, MLM with labels, or a classifier with class labels (so kl, acc too) */
            bool has_kl, has_acc;
            bool has_cos; /* encoders without an LM head */
        };
    };
    union { /* the means over the set, as each metric's row reduces them */
        double value[HP_N_METRICS];
        struct {
            double loss; /* mean token loss, nats */
            double kl;   /* mean per-token KL(unmasked || masked), nats */
            double acc;  /* top-1 accuracy over the same tokens */
            double cos;  /* mean cosine of the pooled final hidden states (pooled as the model
                          * declares: mean, CLS or max; hp_model_info.pooling) */
        };
    };
    double ppl; /* exp(loss) */
    /* per sequence, each (n_seqs): */
    union {
        double *seq[HP_N_METRICS];
        struct {
            double *seq_loss, *seq_kl, *seq_acc, *seq_cos;
        };
    };
    int64_t *seq_tokens;
};

void hp_metrics_free(struct hp_metrics *m);

struct hp_evaluator;

/*
 * An evaluator binds a model to a held-out set, checks them against each
 * other (vocabulary, context length, labels), and caches what every variant
 * shares (mean-ablation statistics). The model and data must outlive it.
 * Destructor: hp_evaluator_free.
 */
enum hp_status hp_evaluator_new(struct hp_model *model, const struct hp_data *data,
                                struct hp_evaluator **out, struct hp_error *err);
void hp_evaluator_free(struct hp_evaluator *ev);

/* Optional progress callback, called as sequences finish (done of total):
 * after each sequence on the plain path, after each chunk of sequences on the
 * reuse path (hp_evaluator_run_many) and for classifiers, and on the reuse
 * path between blocks of variants too; always from the calling thread,
 * outside any parallel region. */
void hp_evaluator_set_progress(struct hp_evaluator *ev,
                               void (*fn)(void *user, int done, int total),
                               void *user);

/*
 * The metrics this model produces on this data: "loss", "kl" and "acc" where
 * it has a loss (a causal LM, an MLM head with labelled data, a classifier),
 * else "cos" (an encoder without a head: the cosine of its embeddings).
 */
bool hp_evaluator_has_metric(const struct hp_evaluator *ev, const char *metric);

/*
 * A plan's metric resolved against the model and data: asked "" (not given)
 * becomes the model's own ("loss" where it has one, else "cos"); a metric the
 * model cannot produce is an HP_ERR_PLAN naming plan_path, the metric, the
 * model and the metrics it has. *out points to a static name.
 */
enum hp_status hp_evaluator_pick_metric(const struct hp_evaluator *ev, const char *plan_path, const char *asked,
                                        const char **out, struct hp_error *err);

/*
 * Whether held-out data looks made for another model, from the unmasked
 * model's loss and accuracy on it: it predicts none of the tokens (or
 * classes) at a loss above half of log(vocabulary), what guessing uniformly
 * costs. A trained model on its own kind of data does far better; ids from
 * another tokenizer look like this (and so does an untrained model).
 */
bool hp_evaluator_looks_foreign(const struct hp_evaluator *ev, double unmasked_loss, double unmasked_acc);

/* The warning for data that looks made for another model (the command line's and the Python package's one
 * wording), into buf: "DATA looks made for another model: unmasked, MODEL predicts ...". */
void hp_foreign_warning(char *buf, size_t n, const char *data, const char *model, double unmasked_loss,
                        double unmasked_acc);

/*
 * Evaluate one masked variant on the whole held-out set. mask may be NULL
 * (no head ablated). Destructor of *out: hp_metrics_free.
 */
enum hp_status hp_evaluator_run(struct hp_evaluator *ev, const struct hp_mask *mask,
                                enum hp_ablation ablation, struct hp_metrics **out,
                                struct hp_error *err);

/*
 * Evaluate n variants (masks[i] may be NULL) together into out[0..n).
 * Variants go inside chunks of the held-out set: each chunk's unmasked pass
 * runs once, each variant resumes from its first changed layer, variants
 * sharing that layer run on together, and the LM head is fused with the
 * metrics. Equal to evaluating them one by one on the plain path up to float
 * rounding (a test checks 1e-6). On error every out[i] is NULL.
 *
 * A mask whose pos is a position (struct hp_mask) has its dead heads replaced
 * at that position of every row only: at every other position a head keeps its
 * own output in the unmasked model on the same rows, computed once per
 * evaluator. Activation patching one position at a time (Heimersheim & Nanda;
 * TransformerLens's get_act_patch_attn_head_out_by_pos): exact for masks whose
 * dead heads share one layer, whose inputs the patch leaves as they were; for
 * heads of several layers the others' outputs are frozen at the unmasked
 * model's. Variants at different positions (and at every one) run together.
 * Where the replacement at pos is every head's own output there to the bit
 * (resample at a position up to which every row's corrupt prompt is its
 * prompt, in a causal model), the variant is the unmasked model, evaluated as
 * such.
 */
enum hp_status hp_evaluator_run_many(struct hp_evaluator *ev, const struct hp_mask *const *masks,
                                     int n, enum hp_ablation ablation, struct hp_metrics **out,
                                     struct hp_error *err);


/*
 * The gradient of the mean metric L with respect to every head's gate, at
 * mask's gates (NULL: all 1; fractional gates are allowed) under ablation,
 * over the whole held-out set, chunk by chunk as the evaluator walks it. L
 * is the metric as hp_evaluator_run computes it, signed as damage (larger =
 * worse): HP_METRIC_LOSS (causal LM, MLM over labelled positions, or a
 * classifier's cross-entropy), HP_METRIC_KL (KL(unmasked || masked) over the
 * same items), or for an encoder without a head HP_METRIC_COS, differentiated
 * as 1 - cos. KL and 1 - cos are at their minimum, 0, at the unmasked model:
 * their gradient there is 0 (a first-order estimate says nothing), and means
 * something only under a mask or fractional gates. The gate g_h of a head
 * multiplies its output a_h where the output projection reads it, so
 *   grad[l * n_heads + h] = dL/dg_h = sum over tokens of <dL/dctx_h, a_h>
 * (mean-ablated heads at 0, where the forward jumps to the mean m_h: the
 * derivative along m_h + g (a_h - m_h), from the mean back to the head);
 *   atp (may be NULL): the first-order estimate of L(head h alone ablated) -
 * L(at mask): <dL/dctx_h, r_h - g_h a_h> with r_h the replacement (zero:
 * -g_h dL/dg_h; mean: the head's mean; resample: its output on the corrupt
 * prompt); 0 for heads at 0.
 *   value (may be NULL): L at mask, as hp_evaluator_run gives it (for cos,
 * 1 - its cos).
 * Pruned heads get 0. The arrays are (n_layers, n_heads), row-major. A metric
 * the model and data do not have (hp_evaluator_has_metric), or acc (a step
 * function), is refused: HP_ERR_UNSUPPORTED.
 */
enum hp_status hp_evaluator_grad(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                 enum hp_ablation ablation, double *grad, double *atp, double *value,
                                 struct hp_error *err);

/* Where the evaluator's last gradient pass spent its time, in seconds, summed over its chunks: the unmasked
 * model's outputs it compares with or ablates toward (kl and cos's reference, a variant's KL, mean ablation's
 * means; 0 when made by an earlier pass), the layers' forward (keeping what the reverse reads), the head with
 * the metric's gradient at its input (an LM's logits and their gradient, fused a vocabulary block at a time),
 * and the layers' reverse pass. All 0 before any pass, and after one that failed. */
struct hp_grad_phases {
    double reference, forward, head, reverse;
};
void hp_evaluator_grad_phases(const struct hp_evaluator *ev, struct hp_grad_phases *out);

/*
 * A gradient pass at the unmasked model always keeps its metrics, so that
 * hp_evaluator_run_many hands out a copy instead of running that pass again:
 * they are the same bits as the evaluator's own pass. This lets a gradient
 * pass at masked gates keep its metrics too (off by default), for
 * hp_evaluator_grad_pass_metrics only: they equal a pass of the variant's
 * own within float rounding, not bit for bit, so hp_evaluator_run_many never
 * hands them out (a resumed or shared sweep must store the same bits
 * whichever process evaluated a variant).
 */
void hp_evaluator_keep_grad_metrics(struct hp_evaluator *ev, bool on);

/*
 * The metrics of mask under ablation as the forward of a gradient pass at
 * those gates measures them (eval --grad --mask; a gradient-ranked curve's
 * points, hp_job.grad_pass): those the last pass kept when it was there
 * (hp_evaluator_keep_grad_metrics), else a gradient pass for them. Where a
 * pass cannot keep them (an LM whose unmasked reference of the whole set
 * does not fit in memory), and on the plain path (hp_evaluator_set_plain),
 * the evaluator's own pass. *out: destructor hp_metrics_free.
 */
enum hp_status hp_evaluator_grad_pass_metrics(struct hp_evaluator *ev, const struct hp_mask *mask,
                                              enum hp_ablation ablation, struct hp_metrics **out,
                                              struct hp_error *err);

/*
 * hp_evaluator_grad, and seq_grad (NULL, or (n_seqs, n_layers, n_heads),
 * row-major): each held-out sequence's share of grad, the gradient of its
 * own summed metric divided by what the mean divides by (the scored tokens
 * of the whole set; a classifier's or a cosine's sequences), so the shares
 * add up to grad. Michel et al.'s importance takes |.| of them. The
 * workspace is bounded by the evaluator's chunk, as hp_evaluator_grad's;
 * only seq_grad grows with the data.
 */
enum hp_status hp_evaluator_grad_seq(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                     enum hp_ablation ablation, double *grad, double *atp, double *seq_grad,
                                     double *value, struct hp_error *err);

/*
 * hp_evaluator_grad_seq for the gates of layers from on only (0 <= from <
 * n_layers): their entries and value are the same bits as a whole pass's,
 * those of the layers below are 0. The reverse pass stops at layer from, and
 * the forward starts below it only as far back as it must: the evaluator
 * keeps the residual stream entering each layer that such passes made (while
 * the whole set's fits in 512 MB), and a pass whose gates below some layer
 * are a kept pass's starts there. Integrated gradients a layer's gates at a
 * time (ig-layer: the gates below the layer the same for every pass) so cost
 * about half of whole passes.
 */
/*
 * The gradient pass of hp_evaluator_grad_from with the MLP blocks' gates beside the heads': each output NULL or
 * filled, grad, atp, seq_grad as there; mlp_grad (n_layers) d(metric)/dg of each MLP's gate (the block's output
 * o into the residual stream joins as g o + (1 - g) r, r its replacement under the ablation), mlp_atp
 * (n_layers) <dmetric/dctx, r - ctx> with ctx what joined (each MLP's first-order estimate of its effect
 * ablated alone; 0 for one already at 0), mlp_seq_grad (n_seqs, n_layers) mlp_grad's shares by sequence.
 * The mask may ablate MLPs (not at one position).
 */
struct hp_grad_out {
    double *grad, *atp, *seq_grad;
    double *mlp_grad, *mlp_atp, *mlp_seq_grad;
};
enum hp_status hp_evaluator_grad_units(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                       enum hp_ablation abl, int from, const struct hp_grad_out *out, double *value,
                                       struct hp_error *err);

enum hp_status hp_evaluator_grad_from(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                      enum hp_ablation ablation, int from, double *grad, double *atp,
                                      double *seq_grad, double *value, struct hp_error *err);

/* Mean-ablation statistics: each head's output averaged over the real tokens
 * of the held-out set under the unmasked model. */
struct hp_means {
    int n_layers, seq_len, width; /* width = n_heads * d_head */
    float *all;                   /* (n_layers, width) */
    float *pos;                   /* (n_layers, seq_len, width): at each position */
    int d_model;                  /* the MLP blocks' statistics, of their outputs into the residual stream: */
    float *mlp_all;               /* (n_layers, d_model) */
    float *mlp_pos;               /* (n_layers, seq_len, d_model) */
};

/* The evaluator's statistics, computed on first use; the arrays belong to the evaluator. */
enum hp_status hp_evaluator_means(struct hp_evaluator *ev, struct hp_means *out, struct hp_error *err);

/* Use statistics computed before (e.g. stored with the results) instead of computing them; copied. */
enum hp_status hp_evaluator_set_means(struct hp_evaluator *ev, const struct hp_means *m, struct hp_error *err);

/*
 * plain = true: evaluate every variant by whole forward passes of its own,
 * with logits materialised (the reference the reuse path is tested
 * against; slower). Default false.
 */
void hp_evaluator_set_plain(struct hp_evaluator *ev, bool plain);

/*
 * Forward one sequence and write logits (n_tokens, n_vocab) or, for encoders
 * without an LM head, final hidden states (n_tokens, d_model). attn_mask
 * and type_ids may be NULL. For mean ablations use an evaluator instead. Mostly for tests.
 * Cost: one full pass, plus a workspace allocated and freed in each call,
 * n_tokens * (3 d_model + (2 n_heads + 2 n_kv_heads + 1) d_head + 2 d_ff)
 * + threads * n_tokens^2 floats. The model is only read (nothing is kept in
 * it between calls), so threads may share one.
 */
enum hp_status hp_model_forward(struct hp_model *m, const int32_t *ids,
                                const uint8_t *attn_mask, const int32_t *type_ids,
                                int n_tokens,
                                const struct hp_mask *mask, float *out,
                                struct hp_error *err);

// --- one evaluation (`headprune eval`) ------------------------------------------

/* The most threads and the longest rows a caller may ask for: `--threads` and `--seq-len` take 1 to these, and
 * the Python package's threads and seq_len the same. */
#define HP_THREADS_MAX 1024
#define HP_SEQ_LEN_MAX (1 << 20)

/* What one evaluation computes besides the variant's metrics. */
struct hp_eval_opts {
    const char *mask;        /* NULL, or the heads to ablate (hp_mask_parse's spec) */
    bool keep;               /* mask names the heads kept: every other one is ablated */
    const char *edges;       /* NULL, or edges to patch besides (hp_mask_add_edges's spec) */
    const char *circuit;     /* NULL, or a circuit file: every edge it does not keep is patched (hp_mask_circuit) */
    const char *circuit_text; /* NULL, or such a file's text, given in memory (hp_mask_circuit_text) */
    enum hp_ablation ablation;
    bool grad;               /* also the gradient at every head's gate and its first-order estimates */
    const char *grad_metric; /* what grad differentiates (NULL: loss where the model and data have one, else
                              * cos); naming one implies grad */
    int threads;             /* > 0: that many; <= 0: as many as other processes leave CPUs idle, chosen again
                              * as the sequences go */
    void (*progress)(void *user, int done, int total); /* NULL, or called as sequences finish (in the calling
                                                         * thread) */
    void *user;
};

struct hp_eval_result {
    struct hp_metrics *mt;   /* the variant */
    struct hp_metrics *base; /* the unmasked model beside it; NULL when the mask changes nothing */
    double *grad, *atp;      /* with grad: (n_layers, n_heads) d(metric)/dgate and each head's first-order
                              * estimate of its effect ablated alone (larger = worse); else NULL */
    double *mlp_grad, *mlp_atp; /* with grad: the same of each MLP block's gate, (n_layers); else NULL */
    enum hp_metric grad_metric;
    const char *grad_what;   /* what grad differentiates, in words ("loss", "-logit_diff", "1 - cos") */
    bool grad_vanishes;      /* KL or 1 - cos at the unmasked model: 0 there, and so its gradient */
    struct hp_grad_phases ph; /* where the gradient pass spent its time */
    int n_ablated;           /* heads the mask ablates (a pruned checkpoint's absent heads not counted) */
    int n_mlps;              /* MLP blocks the mask ablates */
    int n_edges;             /* edges the variant patches */
    int threads_min, threads_max; /* the threads the evaluation ran with */
    double seconds;          /* the evaluation's time, after the model and data were open */
    bool foreign;            /* the unmasked model's results look like data made for another model
                              * (hp_evaluator_looks_foreign) */
};

/*
 * Evaluate one masked variant of m on d as `headprune eval` does: the
 * variant, the unmasked model beside it (its pass is the one the variant
 * resumes from), and with o->grad the gradient (whose forward is the
 * variant's evaluation). d is bound to the ablation (hp_ablation_bind_data:
 * denoise swaps a task's prompts). Destructor of *out: hp_eval_result_free.
 */
enum hp_status hp_eval(struct hp_model *m, struct hp_data *d, const struct hp_eval_opts *o,
                       struct hp_eval_result **out, struct hp_error *err);
void hp_eval_result_free(struct hp_eval_result *r);

/*
 * The result as `eval --json` prints it: one JSON object (malloc'd text; NULL
 * when out of memory), model and data as the caller names them. Numbers are
 * the shortest text that reads back to the same double.
 */
char *hp_eval_json(const struct hp_model_info *in, const struct hp_eval_opts *o, const struct hp_eval_result *r,
                   const char *model, const char *data);

/* The model as `inspect --json` describes it, model as the caller names it, and its tokenizer as
 * hp_tokenizer_describe found it (tokenizer the source or NULL when none; tokenizer_error, when not NULL, why the
 * one it has cannot be read): malloc'd JSON text, NULL when out of memory. */
char *hp_model_info_json(const struct hp_model_info *in, const char *model, const char *tokenizer,
                         const char *tokenizer_error);

/* "GPT-2", "BERT", "Llama": the architecture's name for people. */
const char *hp_arch_name(enum hp_arch a);

// --- head roles ---------------------------------------------------------------

/*
 * What each attention head attends to, from attention probabilities of the
 * unmasked model: one pass over a held-out set, and one over a probe of
 * random tokens repeated twice (for induction). docs/roles.md defines every
 * score: which queries and keys count, how padding and the first position
 * are handled, how per-query values are averaged. For GQA the heads are the
 * query heads. Every score is a mean over queries, each query weighted
 * alike across the whole set; accumulated in double.
 */
#define HP_ROLES_PROBE_SEQS 16   /* probe sequences by default */
#define HP_ROLES_PROBE_LEN 32    /* random tokens per half by default (at most n_ctx / 2 of the model) */
#define HP_ROLES_PROBE_MIN_LEN 8 /* shortest half allowed */
#define HP_ROLES_PROBE_SEED 0x726f6c6573ull /* "roles": the probe's fixed seed */
#define HP_ROLES_WINDOW 4        /* induction offsets looked at: -4..+4 from the earlier occurrence */

struct hp_roles_opts {
    int probe_seqs; /* 0 = HP_ROLES_PROBE_SEQS */
    int probe_len;  /* tokens per half; 0 = HP_ROLES_PROBE_LEN, or n_ctx / 2 when that is smaller */
    /* NULL, or called from the calling thread after each chunk: sequences done (data, then probe) of total */
    void (*progress)(void *user, int done, int total);
    void *user;
};

/* An induction offset means something only where its mass is at least this: below it the largest of the window's
 * near-zero masses is noise (a head with 0.00007 there has no preferred offset), and the offset is left empty. */
#define HP_ROLES_OFFSET_MIN_MASS 0.05
bool hp_roles_offset_shown(double induction_mass);

/* One head's scores; NaN where undefined (no query qualifies: docs/roles.md). */
struct hp_head_roles {
    bool present;           /* false: a pruned checkpoint lacks the head; every score NaN */
    double prev_token;      /* mean attention to the previous position */
    double duplicate_token; /* mean attention to other occurrences of the query's token (causal: earlier ones) */
    double induction;       /* probe: mean attention to the token after the earlier occurrence */
    int induction_offset;   /* probe: the offset from the earlier occurrence with most mass, in
                             * -HP_ROLES_WINDOW..HP_ROLES_WINDOW (1 = the induction target); shown (stored,
                             * printed, queried) only where hp_roles_offset_shown(induction_mass) */
    double induction_mass;  /* ... and its mean attention */
    double first_token;     /* mean attention to the sequence's first real position */
    int dominant_offset;    /* the relative position (key - query) holding most of the attention */
    double dominant_mass;   /* ... and its share: mean over queries of the attention at that offset */
    double entropy;         /* mean attention entropy, bits */
    double rare_token;      /* encoders: mean attention to the sequence's rarest token (frequencies from the
                             * data); NaN for causal models */
    double sep_token;       /* mean attention to the sequence's [SEP] tokens (Clark et al. 2019); NaN when the
                             * model has no [SEP] (hp_roles.sep_id < 0) */
};

struct hp_roles {
    int n_layers, n_heads;
    bool causal;
    int n_seqs, seq_len;          /* the held-out set */
    int probe_seqs, probe_len;    /* the probe: probe_seqs rows of 2 probe_len tokens */
    uint64_t probe_seed;
    /* queries each score averages over, the same for every head: */
    int64_t n_queries;   /* entropy, dominant offset (and rare token for encoders) */
    int64_t n_prev, n_duplicate, n_first;
    int64_t n_induction; /* probe queries (second halves) */
    int32_t sep_id;      /* the model's [SEP] id (config.json's sep_token_id, else its tokenizer's "[SEP]"); -1: none */
    int64_t n_sep;       /* queries behind sep_token: not [SEP] themselves, in a row with a [SEP] */
    struct hp_head_roles *heads; /* (n_layers, n_heads), row-major */
};

/*
 * Every head's roles on data d (unmasked, zero gates nowhere), chunk by
 * chunk, reducing each head's attention probabilities as the forward makes
 * them (memory: rows of a chunk x 2 x n_layers x n_heads doubles besides the
 * pass's workspace). Data the model cannot run (positions, vocabulary, token
 * types, an all-padding row), a probe the model cannot take and attention
 * that is not finite are errors naming the file. Destructor: hp_roles_free.
 */
enum hp_status hp_roles_compute(const struct hp_model *m, const struct hp_data *d, const struct hp_roles_opts *o,
                                struct hp_roles **out, struct hp_error *err);
void hp_roles_free(struct hp_roles *r);

// --- plans ------------------------------------------------------------------

enum hp_study_kind {
    HP_STUDY_BASELINE,  /* nothing ablated */
    HP_STUDY_SINGLE,    /* each unit ablated alone (leave-one-out) */
    HP_STUDY_ONLY,      /* per layer: every unit ablated but one */
    HP_STUDY_LAYER,     /* each layer's attention ablated whole */
    HP_STUDY_RANDOM,    /* k random units, `samples` draws for each k */
    HP_STUDY_EXPLICIT,  /* named unit sets */
    HP_STUDY_PAIRS,     /* every pair of units within a layer */
    HP_STUDY_ITERATIVE, /* pruning curve; jobs depend on earlier results */
    HP_STUDY_IMPORTANCE,  /* Michel et al.'s E|dL/dξ| per unit: one forward + backward */
    HP_STUDY_ATTRIBUTION, /* first-order (AtP) estimate of each unit's single ablation effect */
    HP_STUDY_ROLES,       /* what each head attends to (hp_roles_compute): one unmasked pass */
    HP_STUDY_GATES,       /* Voita et al.'s L0-regularised Hard Concrete gates, trained per lambda (weights frozen) */
    HP_STUDY_PATCHING,    /* activation patching of each unit alone, at every position together or at each */
    HP_STUDY_SCREEN,      /* the exact top k: units evaluated in estimate order, with random audits and a bound */
    HP_STUDY_DIRECT,      /* each unit's total effect beside its direct one (only its edges into the logits) */
    HP_STUDY_EDGES,       /* each edge between two components patched alone (exact) */
    HP_STUDY_CIRCUIT,     /* circuits of increasing size, each evaluated exactly: faithfulness, CPR, CMD */
    HP_STUDY_COUNT        /* not a kind: how many there are (each is a row of engine/plan/study/study.c) */
};

/* How importance scores are scaled: per layer to unit L2 norm (Michel et al.), or not. */
enum hp_normalize { HP_NORMALIZE_LAYER, HP_NORMALIZE_NONE };
/* What an iterative study ranks the remaining units by at each step. */
enum hp_rank {
    HP_RANK_EXACT,    /* the measured damage of ablating each one (one evaluation a unit) */
    HP_RANK_GRADIENT, /* importance recomputed under the current mask (one backward a step) */
    HP_RANK_ESTIMATE, /* an estimator's estimate of every unit's effect, once, where the curve starts */
};
/* What an attribution study estimates each unit's single-ablation effect by (docs/gradients.md, "Estimators"). */
enum hp_estimator {
    HP_EST_ATP,        /* -dL/dxi at the gates of 1: attribution patching, one pass */
    HP_EST_IMPORTANCE, /* E_x |dL_x/dxi| at the gates of 1 (Michel et al., unnormalised): a ranker, unsigned, one pass */
    HP_EST_IG,         /* integrated gradients, every unit's gate from 1 to 0 together: steps passes */
    HP_EST_IG_LAYER,   /* ... one layer's gates together, the others at 1: steps passes a layer */
    HP_EST_COUNT       /* not an estimator: how many there are */
};
const char *hp_normalize_name(enum hp_normalize n);
const char *hp_rank_name(enum hp_rank r);
const char *hp_estimator_name(enum hp_estimator e);

/* Static name as written in plans: "baseline", "single", ... */
const char *hp_study_kind_name(enum hp_study_kind k);

/* Whether a study of kind k runs in the first shard only (iterative, importance, attribution, roles, gates: each
 * step's work depends on results before it, or it is one computation): the sweep and `slurm` both ask here. */
bool hp_study_first_shard_only(enum hp_study_kind k);

/* Each kind's own options (docs/plans.md), a struct a kind, nested in struct hp_study by the kind's name:
 * s->random.samples, s->gates.lambda (explicit's: s->explicit_sets). Named structs, not a union: a study's other kinds' options stay
 * zeroed, so a wrong-kind read gives 0 or NULL, never another kind's bits. */
struct hp_study_random_opts {
    int n_k;
    int *k;      /* (n_k) numbers of units to ablate */
    int samples; /* draws per k */
};
/* edges (docs/edges.md): each edge FROM>TO the model has, patched alone; circuit: the same edges (its graph) */
struct hp_study_edges_opts {
    char *from, *to; /* a sender and a receiver pattern as --edges reads them (owned; NULL: "*") */
};
/* circuit (docs/edges.md): circuits of the graph's edges ranked by their effects patched alone, at each size */
struct hp_study_circuit_opts {
    int n_sizes;
    double *sizes; /* (n_sizes) fractions of the graph's edges kept, in (0, 1], ascending (owned; NULL: defaults) */
};
struct hp_study_explicit_opts {
    int n;
    char **names; /* (n) the sets' names */
    char **specs; /* (n) their mask specs, as in --mask */
};
struct hp_study_iterative_opts {
    double prune_frac;       /* fraction of ALL the study's units pruned per step (Michel et al.), in (0, 1) */
    double floor_frac;       /* stop once at most this fraction of units remains, in [0, 1) */
    bool keep_one_per_layer; /* never prune a layer's last unit */
    enum hp_rank rank;       /* how each step ranks the units (default exact) */
};
struct hp_study_roles_opts {
    int probe_seqs, probe_len; /* the induction probe's size (struct hp_roles_opts; 0 = the default) */
};
/* patching (docs/tasks.md, "Per-position patching"): each unit's output replaced alone, at every position
 * together (positions: all, the single study's variants) or at each position by itself (each, the default); the
 * replacement is the plan's ablation's, and direction, when given, must agree with it */
enum hp_patch_positions { HP_PATCH_EACH, HP_PATCH_ALL };
enum hp_patch_direction { HP_PATCH_ANY, HP_PATCH_NOISE, HP_PATCH_DENOISE }; /* ANY: not given */
struct hp_study_patching_opts {
    enum hp_patch_positions positions;
    enum hp_patch_direction direction;
};
/* screen (docs/plans.md, "Screen"): the exact top k of the single study's effects, walking the units in the
 * order of s->estimator's estimate, then auditing units drawn at random, until an audit finds none above */
struct hp_study_screen_opts {
    int k;          /* the top k wanted, >= 1; 0: k_frac of the units */
    double k_frac;  /* k as a fraction of the study's units, in (0, 1) (default 10%, rounded up) */
    int batch;      /* units a walk step evaluates (0: the default, hp_study_screen_sizes) */
    int audit;      /* units an audit draws at random (0: the default) */
};
#define HP_IG_STEPS_MAX 64 /* integrated gradients' steps: at most */
/* gates (docs/plans.md, "Gate training"): one gate a query head, trained with Adam on its log alpha
 * for `steps` steps per penalty weight, on training data separate from the held-out set */
struct hp_study_gates_opts {
    int n_lambda;
    double *lambda;     /* (n_lambda) L0 penalty weights, ascending, each >= 0 */
    int steps;          /* Adam steps per lambda, >= 1 (default 300) */
    double lr;          /* Adam's step size, > 0 (default 0.05) */
    double beta;        /* the Hard Concrete temperature, > 0 (default 2/3) */
    double init;        /* every head's log alpha at step 0 (default 3: every test-time gate open) */
    uint64_t seed;      /* the noise's seed (default: the plan's seed) */
    bool seed_set;      /* whether the study gave `seed:` (else seed follows the plan's) */
    char *train;        /* training data, resolved against the plan file's folder; NULL with split */
    double split_frac;  /* split: this fraction of the data's sequences (the last ones) trains, in (0, 1) ... */
    int split_count;    /* ... or this many (0 when a fraction is given); the rest is the held-out set */
};

/* A unit is a query head, a KV group or a layer's MLP block (units:, enum hp_unit_kind). */
struct hp_study {
    enum hp_study_kind kind;
    char name[64];    /* unique within the plan: `name:` if given, else the kind */
    int line;         /* 1-based line in the plan file where the study starts (0: the inserted baseline) */
    enum hp_unit_kind unit; /* what its units are: `units: heads | kv | mlp` (`kv: true` is units: kv) */
    int n_layers_sel; /* 0 = every layer */
    int *layers;      /* (n_layers_sel) layers the study is narrowed to */
    int n_units_sel;  /* 0 = every head (or KV group) */
    int *units;       /* (n_units_sel) heads (or KV groups) narrowed to */
    /* How gradient scores are scaled (default layer). Shared by two kinds, importance and iterative with
     * rank: gradient, so it is no one kind's: a field here rather than a copy in each kind's struct. */
    enum hp_normalize normalize;
    /* mask: (importance, attribution, iterative), likewise shared: the units already removed where the study
     * starts, a mask spec in --mask syntax (owned; NULL: none), parsed against the model by hp_study_base_mask */
    char *mask;
    /* estimator: (attribution), likewise no one kind's (a kind that estimates effects takes it): what each unit's
     * effect is estimated by (attribution's default, chosen by evidence, docs/gradients.md: ig-layer under zero
     * ablation, the path it walks, atp under any other), and steps: for integrated gradients, the gradients along
     * the path, midpoint rule (in [1, HP_IG_STEPS_MAX], default 2; else 0) */
    enum hp_estimator estimator;
    int steps;
    bool estimator_default; /* no estimator: given (nor steps:), so the plan's ablation chooses it (check_plan) */
    /* the kind's own options: only s->kind's member is filled, the rest stay zeroed */
    struct hp_study_random_opts random;
    struct hp_study_explicit_opts explicit_sets; /* not `explicit`: this header is C++'s too */
    struct hp_study_iterative_opts iterative;
    struct hp_study_roles_opts roles;
    struct hp_study_gates_opts gates;
    struct hp_study_patching_opts patching;
    struct hp_study_screen_opts screen;
    struct hp_study_edges_opts edges;
    struct hp_study_circuit_opts circuit;
};

struct hp_plan {
    char *path;       /* the plan file as given (owned, as model and data) */
    char name[128];
    char *model;      /* resolved against the plan file's folder */
    char *data;       /* likewise */
    int seq_len;      /* 0 = from the data file */
    char metric[16];  /* "loss", "kl", "acc" or "cos": what iterative scoring and queries rank by;
                       * "" when the plan gives none (the model's own: hp_evaluator_pick_metric) */
    enum hp_ablation ablation;
    uint64_t seed;    /* random studies */
    int n_studies;
    struct hp_study *studies; /* (n_studies) */
    char *text;       /* the plan file as read */
};

/*
 * Read a YAML plan. Errors say "file:line:column: what is wrong", an unknown
 * key gets a did-you-mean. A plan without a baseline study gets one, first:
 * every effect is measured against it. Destructor: hp_plan_free.
 */
enum hp_status hp_plan_load(const char *path, struct hp_plan **out, struct hp_error *err);
void hp_plan_free(struct hp_plan *p);

struct hp_job {
    int study;        /* index into plan->studies */
    int step;         /* iterative: the step (0 = the unpruned start); else 0 */
    int sample;       /* random: the draw; else 0 */
    int k;            /* units ablated */
    int layer;        /* single, only, layer, pairs: the layer; else -1 */
    int unit;         /* single: the unit ablated; only: the unit kept; pairs: the first; else -1 */
    int unit2;        /* pairs: the second unit; else -1 */
    char label[96];   /* "3.2", "layer 1", "only 2.5", "k=8 #3", "1.0+1.3", a set name */
    struct hp_mask *mask;
    /* iterative, rank gradient: a point measured by the forward of its step's gradient pass (the same gates),
     * a result of its own: its content address is marked so, apart from any other pass of the same mask */
    bool grad_pass;
    /* (patching, positions: each: the mask's pos, a result of its own with its content address marked so) */
};

struct hp_joblist {
    int n, cap;
    struct hp_job *jobs; /* (n) */
};

/*
 * Expand every study except iterative ones into jobs, in a deterministic
 * order (plan order, then layer, then unit). Layers, heads or KV groups that
 * the model lacks are errors naming "plan:line:column". Destructor: hp_joblist_free
 * (a zeroed, calloc'd hp_joblist is a valid empty list).
 */
enum hp_status hp_plan_expand(const struct hp_plan *p, const struct hp_model_info *info,
                              struct hp_joblist **out, struct hp_error *err);
void hp_joblist_free(struct hp_joblist *jl);

/*
 * How an iterative study proceeds on a model: the sweep prunes by it step by
 * step, and hp_study_evals counts its evaluations by it.
 */
struct hp_iterative_schedule {
    int n_units;     /* units in play: the study's layers x units, less those its mask: removed */
    int n_layers;    /* layers in play */
    int per_step;    /* units pruned per step: prune_frac of n_units, at least 1 */
    int floor_units; /* stop once at most this many remain: floor_frac of n_units, rounded up, and with
                      * keep_one_per_layer at least n_layers (a layer's last unit is never pruned) */
};
struct hp_iterative_schedule hp_study_schedule(const struct hp_study *s, const struct hp_model_info *info);

/* Units pruned by the step that starts with `left` units in play; 0: the curve ends at `left`. */
int hp_iterative_step(const struct hp_iterative_schedule *sc, int left);

/*
 * Evaluations a sweep of an iterative study records (jobs of kind
 * 'iterative', one a curve point, plus 'iterative-score', one a candidate
 * scored). Exact unless keep_one_per_layer lets the scores leave a layer at
 * its last unit early (possible only with more than 2 units a layer): that
 * layer's unit is then not scored, and the count is an upper bound.
 */
long hp_study_evals(const struct hp_study *s, const struct hp_model_info *info);

/*
 * Forward + backward passes over the held-out set a sweep of the study runs
 * (hp_evaluator_grad_seq): 1 for importance and attribution, one a step but
 * the last for a gradient-ranked iterative study, steps x lambdas for a gates
 * study (over its training set), else 0. Its evaluations (curve points; a
 * gates study's two a lambda) are hp_study_evals'.
 */
long hp_study_backwards(const struct hp_study *s, const struct hp_model_info *info);

/*
 * The training data of a plan's gates studies (docs/plans.md, "Gate
 * training"), made and checked before anything runs: with `train:` the file
 * (with the plan's seq_len), refused when any of its rows is also a row of
 * the held-out set *data; with `split:` the last sequences of *data, which is
 * replaced by the rest (freed and made anew: every study of the plan is then
 * evaluated on those), refused when that leaves no sequence on either side.
 * The training set must fit the model (vocabulary, positions, labels) and
 * give the plan's metric (as hp_evaluator_pick_metric resolved it: loss, kl
 * or cos; acc is refused). *train is NULL for a plan without a gates study.
 * Errors are one line naming the plan, the study's line and the study.
 * Destructor of *train: hp_data_free.
 */
enum hp_status hp_gates_data_load(const struct hp_plan *p, const char *metric, struct hp_model *m,
                                  struct hp_data **data, struct hp_data **train, struct hp_error *err);

/* Whether the study needs a gradient (importance, attribution, iterative rank: gradient). */
bool hp_study_needs_grad(const struct hp_study *s);

/*
 * The study's base mask on the model: its mask: (the units already removed
 * where it starts; all ones without one), heads the checkpoint lacks dropped
 * (hp_mask_drop_absent). plan_path names the plan in errors, one line with
 * the study's line. Destructor: hp_mask_free.
 */
enum hp_status hp_study_base_mask(const char *plan_path, const struct hp_study *s, const struct hp_model_info *info,
                                  struct hp_mask **out, struct hp_error *err);

/*
 * Refuse a plan whose gradient studies would have no gradient to read, before
 * anything runs: what they differentiate (hp_metric_grad_of the plan's
 * metric, as hp_evaluator_pick_metric resolved it) must be a metric the
 * model has on the data, and where its gradient is 0 at the unmasked model
 * (an encoder without a head: 1 - cos) the study must start from a base
 * mask that removes heads. One line naming the plan, the study and what
 * would work. ev: the plan's evaluator; info: its model's.
 */
enum hp_status hp_plan_check_grad(const struct hp_plan *p, const struct hp_evaluator *ev,
                                  const struct hp_model_info *info, const char *metric, struct hp_error *err);

// --- gradient scores ----------------------------------------------------------

/*
 * Michel et al.'s importance of every unit from per-sequence gradient
 * shares seq_grad (n_seqs, n_layers, n_heads) as hp_evaluator_grad_seq gives
 * them: raw[l, u] = sum over sequences of |sum over the unit's query heads of
 * seq_grad[s, l, h]| (a query head: its own; a KV group: its heads' sum, the
 * gradient at one gate shared by the group), the mean over sequences of
 * |dL_s/dξ| weighted as the loss weights them. score: raw, or with
 * HP_NORMALIZE_LAYER raw divided by the L2 norm of its layer's raw (every
 * unit of the layer; a layer of zeros stays zero). raw and score are
 * (n_layers, units) with units = hp_unit_count(info, kv); may alias. For MLP
 * units (HP_UNIT_MLP) seq_grad is the MLPs' own (n_seqs, n_layers):
 * hp_evaluator_grad_units' mlp_seq_grad.
 */
void hp_importance(const double *seq_grad, int n_seqs, const struct hp_model_info *info, enum hp_unit_kind kv,
                   enum hp_normalize normalize, double *raw, double *score);

/*
 * A per-head quantity (n_layers, n_heads) per unit: a query head's own, a
 * KV group's the sum of its heads'. Of hp_evaluator_grad's atp, the
 * attribution (AtP) estimate of each unit's single ablation effect (first
 * order: linear in the heads); of its grad, the derivative at the unit's one
 * gate, shared by a group's heads. out: (n_layers, hp_unit_count(info, kv)).
 * For MLP units per_head is the MLPs' own (n_layers): mlp_grad or mlp_atp.
 */
void hp_unit_sums(const double *per_head, const struct hp_model_info *info, enum hp_unit_kind kv, double *out);

/* Append a job (the list takes the mask). HP_ERR_NOMEM on failure (mask freed). */
enum hp_status hp_joblist_push(struct hp_joblist *jl, const struct hp_job *job);

// --- sweeps -----------------------------------------------------------------

struct hp_sweep_progress {
    int64_t done;        /* jobs finished in this run, cached ones included */
    int64_t total;       /* the plan's estimate of this run's jobs, iterative evaluations included
                          * (hp_study_evals; at least done) */
    int64_t cached;      /* found finished: in the database, or repeating a variant of this run */
    const char *label;   /* the study at work ("single", "iterative, step 3") */
    double elapsed;      /* seconds since the sweep started */
    int64_t evaluated;   /* jobs this run did (evaluated, trained, not found) */
    double eval_seconds; /* seconds they took */
    double eta;          /* seconds the work left takes, each kind of work (evaluations, gradient passes, training
                          * steps, roles passes) at its own measured rate (a kind not yet met at the mean cost of
                          * what was); NAN before anything was measured */
    double rate;         /* jobs of the kind at work done per second (0: not yet measured) */
    const char *unit;    /* that kind, plural: "jobs", "gradient passes", "training steps", "roles passes" */
};

#define HP_SWEEP_BATCH 64

struct hp_sweep_opts {
    const char *db_path;
    int shard_index;   /* 0-based: this process runs jobs with ord % shard_count == shard_index */
    int shard_count;   /* 1 = everything; iterative studies run in shard 0 only */
    int threads;       /* > 0: that many (set by the sweep through hp_runtime_init); 0: as many as other
                        * processes leave CPUs idle, measured from /proc/stat as the sweep runs (each
                        * result records the threads it ran with) */
    int batch;         /* variants evaluated together (0 = HP_SWEEP_BATCH); each is stored as its batch ends */
    bool plain;        /* evaluate every variant by whole passes of its own (the reference path) */
    void (*progress)(void *user, const struct hp_sweep_progress *p);
    void *user;
    volatile int *stop; /* set non-zero (e.g. from a signal handler) to stop after the current batch */
};

struct hp_sweep_summary {
    int64_t sweep_id;
    int64_t n_jobs, n_run;
    int64_t n_repeated; /* jobs this run had already evaluated: the same variant twice in the plan */
    int64_t n_cached;   /* jobs finished by an earlier run, found in the database */
    int threads_min, threads_max; /* the threads variants ran with */
    double seconds;
    bool interrupted;
    /* the unmasked model's results on the data look like data made for another model
     * (hp_evaluator_looks_foreign), with its loss and accuracy */
    bool foreign;
    double base_loss, base_acc;
};

/*
 * Run a plan into a results database: jobs already finished there (same
 * content-addressed key) are skipped; every result is written atomically.
 */
enum hp_status hp_sweep_run(const struct hp_plan *plan, const struct hp_sweep_opts *o,
                            struct hp_sweep_summary *sum, struct hp_error *err);

/*
 * What an iterative study had pruned after step `step` (0 = nothing), or
 * what a gates study's lambda number `step` (0 = its first, in plan order)
 * pruned, in sweep sweep_id (0 = the newest sweep with either) of the
 * database at db_path, read-only: the canonical mask text of the pruned
 * heads, and the path and digest of the model the sweep measured, into
 * *mask, *model_path and *model_digest (each freed by the caller). study
 * names the study; NULL takes the sweep's only such study, and more than one
 * is refused, naming them. A step past the study's last is refused, naming it.
 */
enum hp_status hp_store_step_mask(const char *db_path, int64_t sweep_id, const char *study, int step, char **mask,
                                  char **model_path, char **model_digest, struct hp_error *err);

/* Merge shard databases into out (created if missing); re-runnable, no duplicates. */
enum hp_status hp_store_merge(const char *out, const char *const *in, int n_in,
                              int64_t *n_added, struct hp_error *err);

// --- queries ----------------------------------------------------------------

/*
 * A result table: what queries return and the CLI prints. Every cell has its
 * text; a cell of a numeric column also has its number, in full precision, of
 * which the text is the rounding a reader of the aligned table sees (an
 * integer's text is exact). CSV and JSON print the number round-trip exact.
 */
struct hp_table {
    int n_cols, n_rows;
    char **cols;    /* (n_cols) */
    bool *numeric;  /* (n_cols) */
    char **cells;   /* (n_rows, n_cols) row-major; NULL = empty */
    double *values; /* (n_rows, n_cols) row-major: the cell as a number, in full precision (the text its
                     * rounding), where it is one (every non-empty cell of a numeric column is); NaN otherwise */
    char *note;     /* NULL or a line to print before the table */
    int n_summary;  /* the last n_summary rows summarise the others (a rank correlation, a mean over every unit):
                     * they are no unit, so JSON holds them apart ("summary") and CSV leaves them out */
};
void hp_table_free(struct hp_table *t);

/*
 * t as JSON: {"rows": [...], "summary": [...]}, an object per row with a key per column, the summary rows
 * (n_summary) apart; empty cells and numbers that are not finite null. Malloc'd text; NULL when out of memory.
 */
char *hp_table_json(const struct hp_table *t);

/*
 * Cell i (row * n_cols + col) of t in full precision, as CSV and JSON write it: a number as the shortest text
 * that reads back to the same double, an integer as its exact text, anything else (text, NaN, infinities) as
 * its text; NULL for an empty cell. buf: at least 32 bytes, which a number's text is written into.
 */
const char *hp_table_cell_full(const struct hp_table *t, size_t i, char *buf, size_t n);

enum hp_query_kind {
    HP_QUERY_SWEEPS,     /* the sweeps in the database */
    HP_QUERY_CURVE,      /* pruning curve (iterative, random, gates) */
    HP_QUERY_HEADS,      /* single-unit effects with paired 95% CIs */
    HP_QUERY_REDUNDANCY, /* per-layer summary */
    HP_QUERY_PAIRS,      /* interactions */
    HP_QUERY_SQL,        /* read-only SQL */
    HP_QUERY_SETS,       /* explicit studies: each named set's effect with its paired 95% CI */
    HP_QUERY_COMPARE,    /* two sweeps' single-unit effects side by side, with rank correlations */
    HP_QUERY_IMPORTANCE, /* an importance study's scores, largest first */
    HP_QUERY_ATTRIBUTION, /* an attribution study's estimates against the exact single effects */
    HP_QUERY_ROLES,       /* a roles study's scores per head, with the single effects and rank correlations */
    HP_QUERY_GATES,       /* each lambda of the gates studies against the other curves at its heads kept */
    HP_QUERY_PATCHING,    /* a patching study's effects: the unit x position grid */
    HP_QUERY_SCREEN,      /* a screen study's verified top k, its evaluations and its bound */
    HP_QUERY_SELF_REPAIR, /* a direct study: each unit's total and direct effect and what later layers make up for */
    HP_QUERY_EDGES,       /* an edges study: each edge patched alone, with its paired 95% CI */
    HP_QUERY_CIRCUIT,     /* a circuit study: faithfulness by size, CPR and CMD */
    HP_QUERY_KIND_COUNT   /* how many kinds there are (not a kind): the query table is sized by it */
};

struct hp_query_opts {
    enum hp_query_kind kind;
    int64_t sweep_id;   /* 0 = the newest sweep */
    const char *metric; /* NULL = the sweep's plan metric (compare: both sweeps' metric, which must agree) */
    int top;            /* heads, sets, pairs: at most this many rows (0 = all); compare: the units
                         * whose effects differ most */
    double eps;         /* redundancy: a unit is redundant when its effect is below this */
    const char *sql;    /* HP_QUERY_SQL */
    bool full_mask;     /* curve: each iterative step's whole mask too (column "mask"), not only
                         * the units it pruned (column "pruned") */
    const char *study;  /* heads, compare: the single study (NULL = the sweep's first over query
                         * heads, else its first); sets, curve, gates: only this study (NULL = every one) */
    bool matrix;        /* heads: one row per layer, one column per unit, cells the effects (with gates: the
                         * smallest lambda whose test-time gate is 0) */
    bool gates;         /* heads: a gates study's (--study, else the first) test-time gates at each lambda
                         * instead of the single effects */
    /* compare: the second sweep (B; the first, A, is db_path's sweep_id) */
    const char *db2;    /* NULL = db_path */
    int64_t sweep_id2;  /* 0 = the newest sweep of B's database */
    const char *study2; /* NULL = study */
    bool by_layer;      /* one row per layer instead of per unit */
    double timeout_s;   /* reading stops with an error after this long (a hostile file's views; runaway
                         * SQL); <= 0: 600 s */
};

/* Destructor of *out: hp_table_free. Opens the database read-only. */
enum hp_status hp_query(const char *db_path, const struct hp_query_opts *o, struct hp_table **out,
                        struct hp_error *err);

// --- reports ----------------------------------------------------------------

struct hp_report_opts {
    const char *db_path;
    int64_t sweep_id;    /* 0 = the newest sweep */
    const char *out;     /* the HTML file to write; replaced whole or not at all */
    const char *svg_dir; /* NULL, or a folder (made when missing, its parent must exist) to hold each
                          * figure as its own SVG file, <figure id>.svg */
    double eps;          /* redundancy: a unit whose effect is below eps counts as redundant, as
                          * `query redundancy --eps` (0.01 there by default) */
    double timeout_s;    /* reading the database stops with an error after this long; <= 0: 600 s */
    int scale;           /* the signed colour scales (effects, interactions, patching): HP_REPORT_SCALE_* */
};

/* A report's colour scale for signed values: symmetric-log (small values stay visible beside large ones; the
 * default) or linear (a colour's depth is proportional to the value, so small values stay pale). */
enum { HP_REPORT_SCALE_LOG = 0, HP_REPORT_SCALE_LINEAR = 1 };

struct hp_report_summary {
    int64_t sweep_id;  /* the sweep reported */
    int n_figures;     /* figures drawn (each layer's pair matrix counts as one) */
    int n_left_out;    /* figures left out, each with a line in the report naming the study that
                        * would produce it */
    int n_svg;         /* SVG files written into svg_dir */
};

/*
 * Write one self-contained HTML report of a sweep of the database at
 * db_path (opened read-only; every number is read through the queries, in
 * one snapshot, so a figure shows what `headprune query` prints): the layers
 * x heads heatmap of single-head effects (and of KV groups), the pruning
 * curves, per-layer redundancy, pair interactions, and what was run. No
 * scripts, no styles, fonts or images from anywhere else: inline SVG and one
 * inline style sheet, under a Content-Security-Policy that forbids loading
 * anything. Every string from the database is escaped. The files appear
 * whole or not at all (each written to a temporary file beside it, then
 * renamed): on any error nothing was changed. sum may be NULL.
 */
enum hp_status hp_report_write(const struct hp_report_opts *o, struct hp_report_summary *sum,
                               struct hp_error *err);

#ifdef __cplusplus
}
#endif
#endif
