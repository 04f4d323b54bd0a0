/*
 * prune.c -- `headprune prune`: write the checkpoint without some heads.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hash.h"

static const char prune_usage[] =
    "Usage: headprune prune --model DIR --mask SPEC --out NEWDIR\n"
    "       headprune prune --db FILE [--sweep ID] [--study NAME] --step N\n"
    "                       [--model DIR] --out NEWDIR\n"
    "\n"
    "Write a Hugging Face checkpoint directory with attention heads physically\n"
    "removed: their query, key and value rows and biases and their rows of the\n"
    "output projection (a KV group goes with its last query head). Weights keep\n"
    "their dtype; config.json names what was pruned; the tokenizer and the other\n"
    "files of DIR but weights are copied. headprune loads the result (eval, plan,\n"
    "run) with masks and results in the original head numbering, and evaluates\n"
    "it as DIR with those heads zero-ablated.\n"
    "\n"
    "Hugging Face transformers 4.x loads the GPT-2 and BERT checkpoints it writes\n"
    "(config.json's \"pruned_heads\", as its own prune_heads + save_pretrained\n"
    "write them). Llama, Mistral and Qwen2 have no pruned heads in transformers:\n"
    "it loads the result when every layer keeps the same numbers of whole KV\n"
    "groups (config.json then counts the heads left); otherwise only headprune\n"
    "does, and the command says why.\n";

static const char prune_tail[] =
    "The files written and the config.json record: docs/checkpoints.md.\n";

/* "12.3 MB" */
static void fmt_bytes(double b, char *buf, size_t n)
{
    if (b >= 1e9)
        snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(buf, n, "%.1f MB", b / 1e6);
    else
        snprintf(buf, n, "%.1f kB", b / 1e3);
}

int cmd_prune(int argc, char **argv)
{
    struct mask_arg spec = {0};
    const char *dir = NULL, *db = NULL, *study = NULL, *out = NULL;
    bool quiet = false;
    int step = -1, sweep = 0;
    const struct opt opts[] = {
        OPT_MODEL(&dir, "the model to prune (with --db: defaults to the model the sweep measured, which DIR must be)"),
        OPT_MASK(&spec, 'k', "heads to remove, as eval's --mask: " MASK_SYNTAX),
        OPT_KEEP(&spec, 'K', "remove every head except these"),
        OPT_DB(&db, "a results database: remove what an iterative study had pruned after --step N (0 = nothing), "
                    "or what a gates study's lambda number N (0 = its first) pruned"),
        OPT_SWEEP(&sweep),
        OPT_STRING("study", 'S', &study, "NAME", "the iterative or gates study, when the sweep has several"),
        OPT_INT_WHAT("step", 'n', &step, "N", 0, 1 << 30, "a step number, an integer",
                     "with --db: the step or lambda number (`headprune query curve` and `query gates` list them)"),
        OPT_OUT(&out, 'o', "NEWDIR", "the directory to write; it must not exist, and appears whole or not at all"),
        OPT_QUIET(&quiet, "no summary on stdout"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "prune", .usage = prune_usage, .opts = opts, .tail = prune_tail};
    int n_args, c = parse_options(&h, argc, argv, &n_args);
    if (c >= 0)
        return c;
    if (n_args)
        return usage_error("prune", "unexpected argument");
    const bool keep = spec.keep;
    if (!out)
        return usage_error("prune", "--out NEWDIR is required");
    if (!spec.spec == !db)
        return usage_error("prune", "name the heads to remove with --mask (or --keep), or with --db and --step");
    if (db && step < 0)
        return usage_error("prune", "--db needs --step N: what the study had pruned after step N");
    if (!db && (step >= 0 || sweep || study))
        return usage_error("prune", "--sweep, --study and --step read a results database: give --db FILE");
    if (!db && !dir)
        return usage_error("prune", "--model DIR is required");

    struct hp_error err = {0};
    struct hp_model *m = NULL, *back = NULL;
    struct hp_mask *mask = NULL;
    char *db_mask = NULL, *db_model = NULL, *db_digest = NULL;
    int rc = 1;
    if (db && hp_store_step_mask(db, sweep, study, step, &db_mask, &db_model, &db_digest, &err) != HP_OK)
        goto out;
    if (!dir)
        dir = db_model;
    if (hp_model_open(dir, &m, &err) != HP_OK)
        goto out;
    if (db) {
        char digest[HP_DIGEST_HEX];
        hp_digest_model(m, digest);
        if (strcmp(digest, db_digest) != 0) {
            hp_fail(&err, HP_ERR_ARG,
                    "%s: not the model the sweep measured (%s; their config or weights differ): prune that one", dir,
                    db_model);
            goto out;
        }
    }
    const struct hp_model_info *in = hp_model_get_info(m);
    if (hp_mask_parse(db ? db_mask : spec.spec, keep, in, &mask, &err) != HP_OK)
        goto out;
    struct hp_export_info ex;
    if (hp_model_export(m, mask, out, &ex, &err) != HP_OK)
        goto out;
    /* what was written must load: the checkpoint the user gets is one headprune reads */
    if (hp_model_open(out, &back, &err) != HP_OK) {
        char msg[sizeof err.msg];
        memcpy(msg, err.msg, sizeof msg);
        hp_fail(&err, HP_ERR_FORMAT, "%s: written but does not load back (%s): please report this", out, msg);
        goto out;
    }
    if (!quiet) {
        const int n_all = in->n_layers * in->n_heads;
        char was[32], now[32];
        fmt_bytes((double)ex.source_bytes, was, sizeof was);
        fmt_bytes((double)ex.bytes, now, sizeof now);
        printf("wrote     %s\n", out);
        printf("heads     %d of %d removed", ex.n_removed, n_all);
        if (ex.n_pruned != ex.n_removed)
            printf(" (%d pruned in all: %d were already)", ex.n_pruned, ex.n_pruned - ex.n_removed);
        printf("; %d left\n", n_all - ex.n_pruned);
        printf("size      %s (was %s%s); %lld parameters (was %lld)\n", now, was, in->gguf ? " in f32" : "",
               (long long)ex.n_params, (long long)in->n_params);
        printf("weights   %s%s\n", in->dtype, in->gguf ? ", dequantized from the GGUF file: a Hugging Face checkpoint" : ", as stored");
        if (ex.hf_loadable)
            printf("loads in  headprune and Hugging Face transformers 4.x\n");
        else
            printf("loads in  headprune only: %s\n", ex.why_not);
    }
    rc = 0;
out:
    if (rc)
        die(&err);
    hp_model_close(back);
    hp_mask_free(mask);
    hp_model_close(m);
    free(db_mask);
    free(db_model);
    free(db_digest);
    return rc;
}
