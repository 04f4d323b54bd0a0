/*
 * tokenize.c -- `headprune tokenize`: text to token ids with a model
 * directory's tokenizer.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cli_int.h"

static const char tokenize_help[] =
    "Usage: headprune tokenize --model DIR [--special] [FILE]\n"
    "\n"
    "Tokenize text with the model directory's tokenizer (tokenizer.json, or\n"
    "vocab.txt, or vocab.json + merges.txt) and print the token ids: one line of\n"
    "space-separated ids per line of input (FILE, or standard input). Agrees with\n"
    "Hugging Face's tokenizers library token for token on byte-level BPE (GPT-2,\n"
    "Llama-3, Qwen2), SentencePiece-style BPE with byte fallback (Llama-2,\n"
    "Mistral) and WordPiece (BERT).\n"
    "\n"
    "  --model DIR   the model directory\n"
    "  --special     add the special tokens the tokenizer declares ([CLS] ... [SEP], <s>)\n";

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"special", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *dir = NULL;
    bool special = false;
    int c;
    while ((c = getopt_long(argc, argv, "m:sh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 's': special = true; break;
        case 'h': fputs(tokenize_help, stdout); return 0;
        default: return usage_error("tokenize", "unknown option");
        }
    }
    if (!dir)
        return usage_error("tokenize", "--model DIR is required");
    if (argc - optind > 1)
        return usage_error("tokenize", "give at most one FILE");
    const char *name = optind < argc ? argv[optind] : "<stdin>";
    FILE *f = optind < argc ? fopen(name, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, strerror(errno));
        return 1;
    }
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    if (hp_tokenizer_open(dir, &t, &err) != HP_OK) {
        if (f != stdin)
            fclose(f);
        return die(&err);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    for (long no = 1; rc == 0 && (n = getline(&line, &cap, f)) >= 0; no++) {
        if (n > 0 && line[n - 1] == '\n')
            n--;
        struct hp_encoding e;
        if (hp_tokenizer_encode(t, line, (size_t)n, NULL, 0, special, &e, &err) != HP_OK) {
            fprintf(stderr, "%s: %s:%ld: %s\n", prog, name, no, err.msg);
            rc = 1;
            break;
        }
        for (int i = 0; i < e.n; i++)
            printf(i ? " %d" : "%d", e.ids[i]);
        putchar('\n');
        hp_encoding_free(&e);
    }
    if (rc == 0 && ferror(f)) { /* a directory, or a failing disk: not an empty file */
        fprintf(stderr, "%s: %s: cannot read (%s)\n", prog, name, strerror(errno));
        rc = 1;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    hp_tokenizer_free(t);
    return rc;
}
