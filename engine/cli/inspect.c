/*
 * inspect.c -- `headprune inspect`: what headprune sees in a model directory.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static const char inspect_help[] =
    "Usage: headprune inspect --model DIR|FILE.gguf [--json]\n"
    "\n"
    "Print what headprune sees in a Hugging Face model directory (config.json plus\n"
    "model.safetensors or sharded safetensors) or a GGUF file: architecture, layers,\n"
    "query heads, key/value heads, head size, window and soft caps where the model\n"
    "has them, parameter count and stored dtype, and where its tokenizer comes from\n"
    "(tokenizer.json, or a GGUF file's own metadata; none, or why the one there\n"
    "cannot be read). --json prints the same as one object (\"tokenizer\": null when\n"
    "there is none, \"tokenizer_error\" when it cannot be read); Python's Model.info\n"
    "is that object.\n";

int cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL;
    bool json = false;
    const struct opt opts[] = {
        OPT_MODEL(&dir, "the model directory"),
        OPT_JSON(&json, "one JSON object instead of the table"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "inspect", .usage = inspect_help, .opts = opts};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc >= 0)
        return rc;
    if (!dir)
        return usage_error("inspect", "--model DIR is required");
    if (n_args)
        return usage_error("inspect", "unexpected argument");
    struct hp_error err = {0};
    struct hp_model *m;
    if (hp_model_open(dir, &m, &err) != HP_OK)
        return die(&err);
    const struct hp_model_info *in = hp_model_get_info(m);
    char *pruned = hp_pruned_spec(in); /* a pruned checkpoint's missing heads */
    /* Where its tokenizer comes from; one that cannot be read says why, and inspect goes on (text needs it, token
     * ids do not). */
    char *tok = NULL;
    struct hp_error tok_err = {0};
    const bool tok_ok = hp_tokenizer_describe(dir, &tok, &tok_err) == HP_OK;
    if (json) {
        char *s = hp_model_info_json(in, dir, tok, tok_ok ? NULL : tok_err.msg);
        if (!s) {
            free(tok);
            free(pruned);
            hp_model_close(m);
            return die(&(struct hp_error){"inspect: out of memory"});
        }
        puts(s);
        free(s);
    } else {
        printf("model          %s\n", dir);
        printf("architecture   %s (model_type %s), %s\n", hp_arch_name(in->arch), in->model_type,
               in->causal ? "causal decoder" : "bidirectional encoder");
        printf("layers         %d\n", in->n_layers);
        printf("query heads    %d per layer, %d in all\n", in->n_heads, in->n_heads * in->n_layers);
        if (in->n_pruned)
            printf("pruned         %d heads the checkpoint lacks: %s\n", in->n_pruned, pruned ? pruned : "?");
        printf("KV heads       %d per layer%s\n", in->n_kv_heads,
               in->n_kv_heads < in->n_heads ? " (grouped-query attention)" : "");
        printf("head size      %d\n", in->d_head);
        printf("hidden size    %d (MLP %d)\n", in->d_model, in->d_ff);
        printf("vocabulary     %d\n", in->n_vocab);
        printf("positions      %d\n", in->n_ctx);
        if (in->window > 0) {
            printf("window         %d (each token attends to itself and the %d before it)", in->window,
                   in->window - 1);
            for (int l = 0, n = 0; in->sliding && l < in->n_layers; l++)
                if (in->sliding[l])
                    printf("%s%d", n++ ? ", " : " on layers ", l);
            printf("%s\n", in->sliding ? "; the others see every key" : "");
        }
        if (in->attn_softcap > 0 || in->logit_softcap > 0)
            printf("soft caps      scores %g, logits %g (each x becomes cap tanh(x / cap); 0: none)\n",
                   (double)in->attn_softcap, (double)in->logit_softcap);
        printf("parameters     %lld\n", (long long)in->n_params);
        printf("dtype          %s%s\n", in->dtype,
               in->gguf ? " (dequantized from the GGUF file's blocks as products read them)" : "");
        printf("LM head        %s\n", in->has_lm_head ? (in->causal ? "yes" : "yes (MLM)") : "no");
        if (!tok_ok)
            printf("tokenizer      not usable: %s\n", tok_err.msg);
        else if (!tok)
            printf("tokenizer      none (text needs one; token ids do not: .npy, .jsonl with \"ids\")\n");
        else
            printf("tokenizer      %s\n", tok);
    }
    free(tok);
    free(pruned);
    hp_model_close(m);
    return 0;
}
