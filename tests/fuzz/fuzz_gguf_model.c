/*
 * fuzz_gguf_model -- a GGUF file opened as a model (engine/model/gguf_model.c, then
 * model.c's config parsing and binding on what it makes of the metadata and
 * tensors).
 *
 * Input: a whole GGUF file, written into a scratch folder as model.gguf and
 * opened by its path. A failed open hands back nothing and a one-line error.
 * A model that opens must report a sane shape and run a 4-token forward
 * without fault (a sanitizer sees a read past a buffer, an assertion a view outside
 * a matrix's blocks, in a build with assertions).
 * Seeds: tests/fixtures/llama-gguf's file.
 */
#include "fuzz_common.h"
#include "headprune.h"

#include <stdlib.h>

#define MAX_INPUT (64 << 10)

static char path[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    hp_runtime_init(1);
    snprintf(path, sizeof path, "%s/model.gguf", fz_scratch());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    fz_write(path, data, size);
    struct hp_model *m = NULL;
    struct hp_error err = {{0}};
    if (hp_model_open(path, &m, &err) != HP_OK) {
        FZ_CHECK(m == NULL, "a failed open handed back a model");
        FZ_CHECK_ERR(err);
        return 0;
    }
    const struct hp_model_info *in = hp_model_get_info(m);
    FZ_CHECK(in->gguf && in->n_layers >= 1 && in->n_heads >= 1 && in->n_kv_heads >= 1 &&
                 in->n_heads % in->n_kv_heads == 0 && in->d_head >= 1 && in->d_model >= 1 && in->n_vocab >= 1 &&
                 in->n_ctx >= 1,
             "opened with layers %d heads %d/%d d_head %d d_model %d vocab %d ctx %d", in->n_layers, in->n_heads,
             in->n_kv_heads, in->d_head, in->d_model, in->n_vocab, in->n_ctx);
    enum { N_TOK = 4 };
    int n_tok = in->n_ctx < N_TOK ? in->n_ctx : N_TOK;
    int32_t ids[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        ids[i] = (i * 7 + 1) % in->n_vocab;
    float *out = malloc((size_t)n_tok * (size_t)in->n_vocab * sizeof *out);
    FZ_CHECK(out != NULL, "out of memory for %d x %d logits", n_tok, in->n_vocab);
    if (hp_model_forward(m, ids, NULL, NULL, n_tok, NULL, out, &err) != HP_OK)
        FZ_CHECK_ERR(err);
    free(out);
    hp_model_close(m);
    return 0;
}
