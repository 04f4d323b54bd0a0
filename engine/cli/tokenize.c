/*
 * tokenize.c -- `headprune tokenize`: text to token ids (or token strings)
 * with a model directory's tokenizer, and with --decode ids back to text.
 *
 * --decode is an option rather than a command of its own: it is the same
 * tokenizer, the same --model, the same line-per-line input and output, run
 * the other way (as `base64 --decode`), and one --help shows both ways.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <utf8proc.h>

#include "cli.h"

static const char tokenize_help[] =
    "Usage: headprune tokenize --model DIR [--special] [--pieces [--ids]] [FILE]\n"
    "       headprune tokenize --model DIR --decode [--skip-special]\n"
    "                          [--pieces [--ids]] [FILE]\n"
    "\n"
    "Tokenize text with the model directory's tokenizer (tokenizer.json, or\n"
    "vocab.txt, or vocab.json + merges.txt; for a GGUF model without them, the\n"
    "file's own tokenizer.ggml.* metadata) and print the token ids: one line of\n"
    "space-separated ids per line of input (FILE, or standard input). Agrees with\n"
    "Hugging Face's tokenizers library token for token on byte-level BPE (GPT-2,\n"
    "Llama-3, Qwen2), SentencePiece-style BPE with byte fallback (Llama-2,\n"
    "Mistral) and WordPiece (BERT).\n";

/* Whitespace (Rust's char::is_whitespace) or a control character: escaped in a piece. */
static bool needs_escape(int32_t c)
{
    return c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == ' ' || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* s[0..n) escaped as --help says (bytes that are not UTF-8 as \xHH), at most max bytes of it ("..." after). */
static void put_escaped(FILE *f, const char *s, size_t n, size_t max)
{
    for (size_t i = 0; i < n && i < max;) {
        int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) {
            fprintf(f, "\\x%02X", (unsigned char)s[i++]);
            continue;
        }
        if (c == '\\')
            fputs("\\\\", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (needs_escape(c))
            fprintf(f, "\\u%04X", (unsigned)c);
        else
            fwrite(s + i, 1, (size_t)k, f);
        i += (size_t)k;
    }
    if (n > max)
        fputs("...", f);
}

/* One line of output for ids: the ids, the pieces, or ID:PIECE. */
static void put_tokens(const struct hp_tokenizer *t, const int32_t *ids, int n, bool pieces, bool with_ids)
{
    for (int i = 0; i < n; i++) {
        if (i)
            putchar(' ');
        if (!pieces || with_ids)
            printf(pieces ? "%d:" : "%d", ids[i]);
        if (pieces) {
            size_t len;
            const char *s = hp_tokenizer_piece(t, ids[i], &len);
            put_escaped(stdout, s ? s : "", s ? len : 0, SIZE_MAX);
        }
    }
    putchar('\n');
}

struct ids {
    int32_t *v;
    int n, cap;
};

/*
 * The ids of one line of --decode input: whole numbers separated by blanks.
 * A word that is not one, or a number the vocabulary does not reach, is
 * named (1-based place and the word as written) on stderr; false then.
 */
static bool parse_ids(const char *name, long no, const char *dir, int n_ids, char *line, size_t n,
                      struct ids *out)
{
    out->n = 0;
    int place = 0;
    for (size_t i = 0; i < n;) {
        if (strchr(" \t\r\v\f", line[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < n && !strchr(" \t\r\v\f", line[i]))
            i++;
        place++;
        bool digits = true;
        int64_t v = 0;
        for (size_t k = start; k < i; k++) {
            digits &= line[k] >= '0' && line[k] <= '9';
            if (digits && v <= INT32_MAX)
                v = v * 10 + (line[k] - '0');
        }
        if (!digits || v >= n_ids) {
            fprintf(stderr, digits ? "%s: %s:%ld: token %d: id " : "%s: %s:%ld: token %d, '", prog, name, no, place);
            put_escaped(stderr, line + start, i - start, 40);
            if (digits)
                fprintf(stderr, " is not in the vocabulary of %s (ids 0..%d)\n", dir, n_ids - 1);
            else
                fprintf(stderr, "', is not a token id (ids are whole numbers from 0 to %d, separated by spaces)\n",
                        n_ids - 1);
            return false;
        }
        if (out->n == out->cap) {
            int cap = out->cap ? 2 * out->cap : 64;
            int32_t *p = realloc(out->v, (size_t)cap * sizeof *p);
            if (!p) {
                fprintf(stderr, "%s: %s:%ld: out of memory\n", prog, name, no);
                return false;
            }
            out->v = p;
            out->cap = cap;
        }
        out->v[out->n++] = (int32_t)v;
    }
    return true;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL;
    bool special = false, pieces = false, with_ids = false, decode = false, skip = false;
    const struct opt opts[] = {
        OPT_MODEL(&dir, "the model directory"),
        OPT_FLAG("special", 's', &special, "add the special tokens the tokenizer declares ([CLS] ... [SEP], <s>)"),
        OPT_FLAG("pieces", 0, &pieces,
                 "print the token strings instead of the ids, as the library's Encoding.tokens has them (GPT-2's "
                 "\"\u0120world\", WordPiece's \"##ing\", SentencePiece's \"\u2581the\", byte fallback's \"<0x0A>\"), "
                 "one space between them. Within a piece a backslash is printed as \\\\, tab, newline and carriage "
                 "return as \\t \\n \\r, and any other whitespace or control character as \\uXXXX (a space: "
                 "\\u0020), so a line splits at its spaces into exactly its pieces"),
        OPT_FLAG("ids", 0, &with_ids, "with --pieces: print each token as ID:PIECE"),
        OPT_FLAG("decode", 0, &decode,
                 "the other way: read lines of token ids (whole numbers separated by spaces, as tokenize prints "
                 "them) and print, a line each, the text Hugging Face's tokenizer.decode(ids) gives: the decoder of "
                 "tokenizer.json (bytes that are not UTF-8 become U+FFFD), then transformers' clean-up of spaces "
                 "before punctuation if tokenizer_config.json sets clean_up_tokenization_spaces. The text is printed "
                 "as it is: a newline in it breaks its line. With --pieces: the token strings of the ids instead. An "
                 "id the tokenizer has no token for is an error (Hugging Face skips it)"),
        OPT_FLAG("skip-special", 0, &skip,
                 "with --decode: leave special tokens out of the text (skip_special_tokens=True; by default they "
                 "are kept, as transformers' decode keeps them)"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "tokenize", .usage = tokenize_help, .opts = opts};
    int n_args, c = parse_options(&h, argc, argv, &n_args);
    if (c >= 0)
        return c;
    if (!dir)
        return usage_error("tokenize", "--model DIR is required");
    if (with_ids && !pieces)
        return usage_error("tokenize", "--ids goes with --pieces (ids alone are the default output)");
    if (decode && special)
        return usage_error("tokenize", "--special adds special tokens to text; --decode keeps those in the ids "
                                       "(--skip-special leaves them out)");
    if (skip && !decode)
        return usage_error("tokenize", "--skip-special goes with --decode (without --special, tokenize adds none)");
    if (skip && pieces)
        return usage_error("tokenize", "--skip-special applies to decoded text, not to --pieces");
    if (n_args > 1)
        return usage_error("tokenize", "give at most one FILE");
    const char *name = n_args ? argv[1] : "<stdin>";
    FILE *f = n_args ? fopen(name, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, hp_strerror(errno));
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
    struct ids ids = {0};
    for (long no = 1; rc == 0 && (n = getline(&line, &cap, f)) >= 0; no++) {
        if (n > 0 && line[n - 1] == '\n')
            n--;
        if (decode) {
            char *text;
            size_t len;
            if (!parse_ids(name, no, dir, hp_tokenizer_n_ids(t), line, (size_t)n, &ids)) {
                rc = 1;
            } else if (pieces) {
                int gap = 0;
                while (gap < ids.n && hp_tokenizer_piece(t, ids.v[gap], NULL))
                    gap++;
                if (gap < ids.n) {
                    fprintf(stderr, "%s: %s:%ld: token %d: no token has id %d in %s (a gap among its ids)\n", prog,
                            name, no, gap + 1, ids.v[gap], dir);
                    rc = 1;
                } else {
                    put_tokens(t, ids.v, ids.n, true, with_ids);
                }
            } else if (hp_tokenizer_decode(t, ids.v, ids.n, skip, &text, &len, &err) != HP_OK) {
                fprintf(stderr, "%s: %s:%ld: %s\n", prog, name, no, err.msg);
                rc = 1;
            } else {
                fwrite(text, 1, len, stdout);
                putchar('\n');
                free(text);
            }
            continue;
        }
        struct hp_encoding e;
        if (hp_tokenizer_encode(t, line, (size_t)n, NULL, 0, special, &e, &err) != HP_OK) {
            fprintf(stderr, "%s: %s:%ld: %s\n", prog, name, no, err.msg);
            rc = 1;
            break;
        }
        put_tokens(t, e.ids, e.n, pieces, with_ids);
        hp_encoding_free(&e);
    }
    if (rc == 0 && ferror(f)) { /* a directory, or a failing disk: not an empty file */
        fprintf(stderr, "%s: %s: cannot read (%s)\n", prog, name, hp_strerror(errno));
        rc = 1;
    }
    free(ids.v);
    free(line);
    if (f != stdin)
        fclose(f);
    hp_tokenizer_free(t);
    return rc;
}
