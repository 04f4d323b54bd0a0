/*
 * fuzz_config -- config.json (engine/model/model.c: hp_model_open's config
 * parsing and the binding of weights it drives).
 *
 * Input: byte 0 picks a fixture model whose model.safetensors is linked into
 * a scratch model folder (gpt2-tiny, gpt2-noprefix, bert-encoder, bert-mlm,
 * bert-cls, llama-gqa, qwen2-bias, llama-tied-bf16, two pruned ones:
 * gpt2-pruned by transformers, exported/llama-gqa-uneven by headprune, then
 * qwen3-qknorm, phi3-fused, neox-parallel and olmo2-post-norms); the rest is written as that folder's
 * config.json. A model that opens must report a sane shape and run a 4-token
 * forward without fault.
 */
#include "fuzz_common.h"
#include "headprune.h"

#include <sys/stat.h>

#define MAX_INPUT (64 << 10)
#define N_FIXTURES 14

static const char *const fixtures[N_FIXTURES] = {
    "gpt2-tiny", "gpt2-noprefix", "bert-encoder", "bert-mlm", "bert-cls", "llama-gqa", "qwen2-bias", "llama-tied-bf16",
    "gpt2-pruned", "exported/llama-gqa-uneven", "qwen3-qknorm", "phi3-fused", "neox-parallel",
    "olmo2-post-norms",
};
static char dirs[N_FIXTURES][512];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    hp_runtime_init(1);
    const char *scratch = fz_scratch();
    for (int i = 0; i < N_FIXTURES; i++) {
        char src[1024], dst[1100];
        snprintf(dirs[i], sizeof dirs[i], "%s/model%d", scratch, i);
        snprintf(src, sizeof src, "%s/tests/fixtures/%s/model.safetensors", HP_FUZZ_ROOT, fixtures[i]);
        snprintf(dst, sizeof dst, "%s/model.safetensors", dirs[i]);
        if (mkdir(dirs[i], 0777) != 0 || symlink(src, dst) != 0) {
            perror(dst);
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_INPUT)
        return 0;
    const char *dir = dirs[data[0] % N_FIXTURES];
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    fz_write(path, data + 1, size - 1);

    struct hp_model *m = NULL;
    struct hp_error err = {{0}};
    if (hp_model_open(dir, &m, &err) != HP_OK) {
        FZ_CHECK(m == NULL, "a failed open handed back a model");
        FZ_CHECK_ERR(err);
        return 0;
    }
    const struct hp_model_info *in = hp_model_get_info(m);
    FZ_CHECK(in->n_layers >= 1 && in->n_heads >= 1 && in->n_kv_heads >= 1 && in->n_heads % in->n_kv_heads == 0 &&
                 in->d_head >= 1 && in->d_model >= 1 && in->n_vocab >= 1 && in->n_ctx >= 1,
             "opened with layers %d heads %d/%d d_head %d d_model %d vocab %d ctx %d", in->n_layers, in->n_heads,
             in->n_kv_heads, in->d_head, in->d_model, in->n_vocab, in->n_ctx);
    for (int i = 0; i < in->n_labels; i++)
        FZ_CHECK(in->label_names && in->label_names[i], "label %d has no name", i);

    enum { N_TOK = 4 };
    int n_tok = in->n_ctx < N_TOK ? in->n_ctx : N_TOK;
    int32_t ids[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        ids[i] = (i * 7 + 1) % in->n_vocab;
    size_t width = in->has_lm_head ? (size_t)in->n_vocab : (size_t)in->d_model;
    float *out = malloc((size_t)n_tok * width * sizeof *out);
    FZ_CHECK(out != NULL, "out of memory for %d x %zu logits", n_tok, width);
    if (hp_model_forward(m, ids, NULL, NULL, n_tok, NULL, out, &err) != HP_OK)
        FZ_CHECK_ERR(err);
    free(out);
    hp_model_close(m);
    return 0;
}
