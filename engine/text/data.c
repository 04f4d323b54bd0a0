/*
 * data.c -- load held-out token ids into a struct hp_data.
 *
 * Formats, chosen by the file's extension:
 *   .npy    NumPy v1/v2/v3, dtype <i4, <i8, <u2 or <u4, C order; shape
 *           (n_seqs, seq_len), or (n_tokens,) cut into rows of seq_len.
 *   .jsonl  one {"ids": [...], "labels": [...], "attention_mask": [...],
 *           "token_type_ids": [...]} object per line; blank lines ignored.
 *   .bin    llm.c token file (256 int32 header: magic 20240520 version 1 with
 *           uint16 tokens, or magic 20240801 version 7 with uint32 tokens),
 *           else raw nanoGPT uint16 tokens. 1-D, cut like a 1-D .npy.
 * Ids in memory (hp_data_from_ids: the Python package's arrays) are shaped
 * by the rule the .npy and .bin files follow, in one place (ids_rows), so
 * an array and the file numpy.save makes of it give the same rows or the
 * same error.
 *
 * Invariants: on success every array is (n_seqs, seq_len) row-major with
 * n_seqs >= 1 and seq_len >= 1, and all ids fit in int32. On failure nothing
 * is allocated, *out is NULL and err->msg holds one line
 * "path: what is wrong (hint)".
 *
 * Must not: trust any size read from a file before checking it against the
 * file's real size (no allocation is sized by an unchecked header), print,
 * or exit. File bytes are decoded explicitly as little-endian, so the loader
 * does not depend on the host's byte order.
 */
#define _POSIX_C_SOURCE 200809L

#include "data.h"
#include "json.h"
#include "util.h"

#include <cjson/cJSON.h>

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// --- errors and small helpers ------------------------------------------------

static uint16_t rd_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t u = rd_u32(p);
    // Two's-complement reinterpretation without implementation-defined casts.
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 2147483648u) - INT32_MAX - 1;
}

static int64_t rd_i64(const unsigned char *p)
{
    uint64_t u = (uint64_t)rd_u32(p) | ((uint64_t)rd_u32(p + 4) << 32);
    return u <= INT64_MAX ? (int64_t)u : (int64_t)(u - UINT64_C(9223372036854775808)) - INT64_MAX - 1;
}

static bool ext_is(const char *ext, const char *want)
{
    for (; *ext && *want; ext++, want++) {
        char c = *ext;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != *want)
            return false;
    }
    return *ext == '\0' && *want == '\0';
}

// The extension of the last path component, without the dot ("" if none).
static const char *path_ext(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot + 1 : "";
}

bool hp_path_has_ext(const char *path, const char *ext)
{
    return ext_is(path_ext(path), ext);
}

// --- the result ---------------------------------------------------------------

// Allocates d and its arrays (n_seqs, seq_len); the caller checked the sizes.
enum hp_status hp_data_alloc(const char *path, int n_seqs, int seq_len, bool labels,
                                 bool mask, bool types, struct hp_data **out,
                                 struct hp_error *err)
{
    size_t n = (size_t)n_seqs * (size_t)seq_len;
    if ((size_t)n_seqs > SIZE_MAX / (size_t)seq_len || n > SIZE_MAX / sizeof(int32_t))
        return hp_fail(err, HP_ERR_NOMEM, "%s: %d x %d tokens do not fit in memory "
                    "(use fewer sequences)", path, n_seqs, seq_len);
    struct hp_data *d = calloc(1, sizeof *d);
    if (!d)
        goto nomem;
    d->n_seqs = n_seqs;
    d->seq_len = seq_len;
    d->path = strdup(path);
    d->ids = malloc(n * sizeof *d->ids);
    if (!d->path || !d->ids)
        goto nomem;
    if (labels && !(d->labels = malloc(n * sizeof *d->labels)))
        goto nomem;
    if (mask && !(d->attn_mask = malloc(n * sizeof *d->attn_mask)))
        goto nomem;
    if (types && !(d->type_ids = malloc(n * sizeof *d->type_ids)))
        goto nomem;
    *out = d;
    return HP_OK;
nomem:
    hp_data_free(d);
    return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory for %d x %d tokens "
                "(use fewer sequences)", path, n_seqs, seq_len);
}

void hp_data_free(struct hp_data *d)
{
    if (!d)
        return;
    free(d->ids);
    free(d->labels);
    free(d->attn_mask);
    free(d->type_ids);
    free(d->seq_labels);
    hp_task_free(d->task);
    free(d->path);
    free(d);
}

// --- the rows ids make: one rule for files and memory ------------------------

static enum hp_status seq_len_check(const char *name, int seq_len, struct hp_error *err)
{
    if (seq_len < 0)
        return hp_fail(err, HP_ERR_ARG, "%s: seq_len %d is negative (pass 0 to take it from "
                    "the data)", name, seq_len);
    return HP_OK;
}

// "(3, 4)", "(12,)" or "()", truncated to fit buf.
static void fmt_shape(char *buf, size_t cap, int ndim, const uint64_t *dims)
{
    size_t k = 0;
    int w;
#define APPEND(...)                                       \
    do {                                                  \
        w = snprintf(buf + k, cap - k, __VA_ARGS__);      \
        if (w < 0 || (size_t)w >= cap - k)                \
            return;                                       \
        k += (size_t)w;                                   \
    } while (0)
    buf[0] = '\0';
    APPEND("(");
    for (int i = 0; i < ndim; i++)
        APPEND("%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    APPEND("%s)", ndim == 1 ? "," : "");
#undef APPEND
}

// A 1-D stream of n_tokens cut into rows of seq_len, which it needs; the tail that does not fill a row is dropped.
static enum hp_status stream_rows(const char *name, uint64_t n_tokens, int seq_len, int *n_seqs,
                                  struct hp_error *err)
{
    if (n_tokens == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: the token stream holds no tokens (give a non-empty "
                    "token file or array)", name);
    if (seq_len == 0)
        return hp_fail(err, HP_ERR_ARG, "%s: 1-D token stream of %llu tokens needs a seq_len "
                    "(pass seq_len > 0 to cut it into rows)", name,
                    (unsigned long long)n_tokens);
    if (n_tokens < (uint64_t)seq_len)
        return hp_fail(err, HP_ERR_SHAPE, "%s: only %llu tokens, fewer than seq_len %d "
                    "(use a shorter seq_len or more data)", name,
                    (unsigned long long)n_tokens, seq_len);
    uint64_t rows = n_tokens / (uint64_t)seq_len;
    if (rows > INT_MAX)
        return hp_fail(err, HP_ERR_SHAPE, "%s: %llu rows of %d tokens is too many (use a "
                    "longer seq_len or less data)", name, (unsigned long long)rows,
                    seq_len);
    *n_seqs = (int)rows;
    return HP_OK;
}

/*
 * The rows (*n_seqs of *row_len tokens) that ids of shape dims (ndim of them) make with seq_len (>= 0): the rule
 * every source of ids follows, .npy and .bin files and ids in memory alike. A 1-D stream is cut into rows of
 * seq_len (stream_rows); a 2-D array's rows are taken whole, with seq_len 0 or their length. name names the data
 * in errors.
 */
static enum hp_status ids_rows(const char *name, int ndim, const uint64_t *dims, int seq_len, int *n_seqs,
                               int *row_len, struct hp_error *err)
{
    char shape[128];
    fmt_shape(shape, sizeof shape, ndim, dims);
    if (ndim != 1 && ndim != 2)
        return hp_fail(err, HP_ERR_SHAPE, "%s: array has shape %s (expected (n_seqs, seq_len) "
                    "or a 1-D token stream (n_tokens,))", name, shape);
    if (ndim == 1) {
        *row_len = seq_len;
        return stream_rows(name, dims[0], seq_len, n_seqs, err);
    }
    if (dims[0] == 0 || dims[1] == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: array of shape %s holds no tokens (give at "
                    "least one non-empty row)", name, shape);
    if (seq_len != 0 && dims[1] != (uint64_t)seq_len)
        return hp_fail(err, HP_ERR_SHAPE, "%s: rows have %llu tokens but seq_len is %d (give "
                    "no seq_len, or %llu, for a 2-D array)", name,
                    (unsigned long long)dims[1], seq_len, (unsigned long long)dims[1]);
    if (dims[0] > INT_MAX || dims[1] > INT_MAX)
        return hp_fail(err, HP_ERR_SHAPE, "%s: shape %s is too large (at most 2^31-1 rows "
                    "and columns)", name, shape);
    *n_seqs = (int)dims[0];
    *row_len = (int)dims[1];
    return HP_OK;
}

enum hp_status hp_data_from_ids(const int32_t *ids, int ndim, const uint64_t *dims, int seq_len, const char *name,
                                struct hp_data **out, struct hp_error *err)
{
    *out = NULL;
    int n_seqs = 0, row_len = 0;
    enum hp_status st = seq_len_check(name, seq_len, err);
    if (st == HP_OK)
        st = ids_rows(name, ndim, dims, seq_len, &n_seqs, &row_len, err);
    if (st == HP_OK)
        st = hp_data_alloc(name, n_seqs, row_len, false, false, false, out, err);
    if (st == HP_OK) // a stream's first n_seqs x row_len ids, an array's all
        memcpy((*out)->ids, ids, (size_t)n_seqs * (size_t)row_len * sizeof *ids);
    return st;
}

// --- binary token streams (shared by .npy and .bin) --------------------------

enum elem { EL_I32, EL_I64, EL_U16, EL_U32 };

static size_t elem_size(enum elem e)
{
    switch (e) {
    case EL_I32: return 4;
    case EL_I64: return 8;
    case EL_U16: return 2;
    case EL_U32: return 4;
    }
    return 1;
}

struct src {
    const char *path;
    FILE *f;
    uint64_t size; // bytes in the file
};

static enum hp_status src_open(const char *path, struct src *s, struct hp_error *err)
{
    s->path = path;
    s->f = fopen(path, "rb");
    if (!s->f)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open: %s (check the path)", path,
                    hp_strerror(errno));
    struct stat st;
    if (fstat(fileno(s->f), &st) != 0) {
        int e = errno;
        fclose(s->f);
        s->f = NULL;
        return hp_fail(err, HP_ERR_IO, "%s: cannot stat: %s (check the path)", path,
                    hp_strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(s->f);
        s->f = NULL;
        return hp_fail(err, HP_ERR_IO, "%s: not a regular file (give a token file, not a "
                    "directory or device)", path);
    }
    s->size = (uint64_t)st.st_size;
    return HP_OK;
}

static void src_close(struct src *s)
{
    if (s->f)
        fclose(s->f);
    s->f = NULL;
}

static enum hp_status src_read(struct src *s, void *buf, size_t n, struct hp_error *err)
{
    if (n && fread(buf, 1, n, s->f) != n)
        return hp_fail(err, HP_ERR_IO, "%s: short read: %s (was the file changed while "
                    "loading?)", s->path, ferror(s->f) ? hp_strerror(errno) : "end of file");
    return HP_OK;
}

/*
 * Read n values of type e from the current position into dst, converting to
 * int32. Values that do not fit in int32 are an error naming their index.
 */
static enum hp_status read_tokens(struct src *s, enum elem e, int32_t *dst, size_t n,
                                  struct hp_error *err)
{
    unsigned char buf[1 << 16];
    size_t es = elem_size(e), per = sizeof buf / es, done = 0;
    while (done < n) {
        size_t k = n - done < per ? n - done : per;
        enum hp_status st = src_read(s, buf, k * es, err);
        if (st)
            return st;
        for (size_t i = 0; i < k; i++) {
            const unsigned char *p = buf + i * es;
            int64_t v;
            switch (e) {
            case EL_I32: v = rd_i32(p); break;
            case EL_I64: v = rd_i64(p); break;
            case EL_U16: v = rd_u16(p); break;
            case EL_U32: v = rd_u32(p); break;
            default: v = 0; break;
            }
            if (v < INT32_MIN || v > INT32_MAX)
                return hp_fail(err, HP_ERR_FORMAT, "%s: token %lld at index %zu does not fit "
                            "in int32 (token ids must be below 2^31)", s->path,
                            (long long)v, done + i);
            dst[done + i] = (int32_t)v;
        }
        done += k;
    }
    return HP_OK;
}

/*
 * Read the rows (ids_rows) that ids of type e and shape dims make with seq_len: a stream's
 * tail that does not fill a row is left unread. The ids start at the current position and
 * their size was checked against the file.
 */
static enum hp_status load_rows(struct src *s, enum elem e, int ndim, const uint64_t *dims,
                                int seq_len, struct hp_data **out, struct hp_error *err)
{
    int n_seqs = 0, row_len = 0;
    struct hp_data *d;
    enum hp_status st = ids_rows(s->path, ndim, dims, seq_len, &n_seqs, &row_len, err);
    if (st || (st = hp_data_alloc(s->path, n_seqs, row_len, false, false, false, &d, err)))
        return st;
    st = read_tokens(s, e, d->ids, (size_t)n_seqs * (size_t)row_len, err);
    if (st) {
        hp_data_free(d);
        return st;
    }
    *out = d;
    return HP_OK;
}

// --- .npy ------------------------------------------------------------------

/*
 * The .npy header is a Python dict literal, e.g.
 *   {'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }
 * parsed here by a tiny recursive-descent reader over [s, s + n).
 */
struct pyp {
    const char *s;
    size_t n, i;
};

#define NPY_MAX_DIMS 32

static void py_ws(struct pyp *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
                           p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static bool py_lit(struct pyp *p, const char *lit)
{
    size_t k = strlen(lit);
    if (p->n - p->i < k || memcmp(p->s + p->i, lit, k) != 0)
        return false;
    p->i += k;
    return true;
}

static bool py_str(struct pyp *p, char *out, size_t cap)
{
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
        return false;
    char q = p->s[p->i++];
    size_t k = 0;
    while (p->i < p->n && p->s[p->i] != q) {
        char c = p->s[p->i++];
        if (c == '\\' || c == '\0' || k + 1 >= cap)
            return false;
        out[k++] = c;
    }
    if (p->i >= p->n)
        return false;
    p->i++;
    out[k] = '\0';
    return true;
}

// "(3, 4)", "(12,)", "()"; Python 2 files may write "3L".
static bool py_shape(struct pyp *p, uint64_t *dims, int *ndim)
{
    if (!py_lit(p, "("))
        return false;
    *ndim = 0;
    for (;;) {
        py_ws(p);
        if (py_lit(p, ")"))
            return true;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return false;
        uint64_t v = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned dgt = (unsigned)(p->s[p->i++] - '0');
            if (v > (UINT64_MAX - dgt) / 10)
                return false;
            v = v * 10 + dgt;
        }
        py_lit(p, "L");
        if (*ndim >= NPY_MAX_DIMS)
            return false;
        dims[(*ndim)++] = v;
        py_ws(p);
        if (py_lit(p, ")"))
            return true;
        if (!py_lit(p, ","))
            return false;
    }
}

struct npy_head {
    char descr[16];
    bool fortran;
    uint64_t dims[NPY_MAX_DIMS];
    int ndim;
};

// Returns 0 on success, else the byte offset (1-based) where parsing failed,
// or -1 for a structured (list) dtype.
static long npy_parse_dict(const char *s, size_t n, struct npy_head *h)
{
    struct pyp p = {s, n, 0};
    bool have_descr = false, have_fortran = false, have_shape = false;
    py_ws(&p);
    if (!py_lit(&p, "{"))
        return (long)p.i + 1;
    for (;;) {
        py_ws(&p);
        if (py_lit(&p, "}"))
            break;
        char key[32];
        if (!py_str(&p, key, sizeof key))
            return (long)p.i + 1;
        py_ws(&p);
        if (!py_lit(&p, ":"))
            return (long)p.i + 1;
        py_ws(&p);
        if (strcmp(key, "descr") == 0) {
            if (p.i < p.n && p.s[p.i] == '[')
                return -1;
            if (!py_str(&p, h->descr, sizeof h->descr))
                return (long)p.i + 1;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (py_lit(&p, "True"))
                h->fortran = true;
            else if (py_lit(&p, "False"))
                h->fortran = false;
            else
                return (long)p.i + 1;
            have_fortran = true;
        } else if (strcmp(key, "shape") == 0) {
            if (!py_shape(&p, h->dims, &h->ndim))
                return (long)p.i + 1;
            have_shape = true;
        } else {
            return (long)p.i + 1; // numpy itself rejects extra keys
        }
        py_ws(&p);
        if (py_lit(&p, "}"))
            break;
        if (!py_lit(&p, ","))
            return (long)p.i + 1;
    }
    if (!have_descr || !have_fortran || !have_shape)
        return (long)p.i + 1;
    return 0;
}

#define NPY_MAX_HEADER (1u << 20)

static enum hp_status load_npy(struct src *s, int seq_len, struct hp_data **out,
                               struct hp_error *err)
{
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    unsigned char pre[12];
    if (s->size < 10)
        return hp_fail(err, HP_ERR_FORMAT, "%s: file is truncated: %llu bytes, too short for "
                    "a .npy header (re-save it with numpy.save)", s->path,
                    (unsigned long long)s->size);
    enum hp_status st = src_read(s, pre, 10, err);
    if (st)
        return st;
    if (memcmp(pre, magic, sizeof magic) != 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a .npy file: bad magic (expected "
                    "\\x93NUMPY; save the array with numpy.save)", s->path);
    unsigned major = pre[6], minor = pre[7];
    uint64_t hlen, pre_len;
    if (major == 1) {
        hlen = rd_u16(pre + 8);
        pre_len = 10;
    } else if (major == 2 || major == 3) {
        if (s->size < 12)
            return hp_fail(err, HP_ERR_FORMAT, "%s: file is truncated inside the .npy header "
                        "(re-save it with numpy.save)", s->path);
        if ((st = src_read(s, pre + 10, 2, err)))
            return st;
        hlen = rd_u32(pre + 8);
        pre_len = 12;
    } else {
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: .npy format version %u.%u is not "
                    "supported (versions 1.0 to 3.0 are)", s->path, major, minor);
    }
    if (hlen > s->size - pre_len)
        return hp_fail(err, HP_ERR_FORMAT, "%s: file is truncated: header claims %llu bytes, "
                    "only %llu follow (re-save it with numpy.save)", s->path,
                    (unsigned long long)hlen, (unsigned long long)(s->size - pre_len));
    if (hlen > NPY_MAX_HEADER)
        return hp_fail(err, HP_ERR_FORMAT, "%s: .npy header of %llu bytes is implausibly "
                    "large (file is corrupt)", s->path, (unsigned long long)hlen);
    char *text = malloc((size_t)hlen + 1);
    if (!text)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory reading the .npy header "
                    "(free some memory)", s->path);
    if ((st = src_read(s, text, (size_t)hlen, err))) {
        free(text);
        return st;
    }
    text[hlen] = '\0';
    struct npy_head h;
    memset(&h, 0, sizeof h);
    long bad = npy_parse_dict(text, (size_t)hlen, &h);
    free(text);
    if (bad == -1)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: structured dtype is not supported "
                    "(save a plain integer array of token ids)", s->path);
    if (bad)
        return hp_fail(err, HP_ERR_FORMAT, "%s: malformed .npy header at byte %ld (expected "
                    "a dict with 'descr', 'fortran_order' and 'shape')", s->path, bad);

    enum elem e;
    if (strcmp(h.descr, "<i4") == 0)
        e = EL_I32;
    else if (strcmp(h.descr, "<i8") == 0)
        e = EL_I64;
    else if (strcmp(h.descr, "<u2") == 0)
        e = EL_U16;
    else if (strcmp(h.descr, "<u4") == 0)
        e = EL_U32;
    else
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: dtype '%s' is not supported (token ids "
                    "must be little-endian int32, int64, uint16 or uint32)", s->path,
                    h.descr);
    if (h.fortran)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: array is in Fortran order (save a "
                    "C-ordered array: numpy.save(path, numpy.ascontiguousarray(a)))", s->path);

    char shape[128];
    fmt_shape(shape, sizeof shape, h.ndim, h.dims);

    // Element count and byte size, checked against the real file size before
    // anything is allocated: a garbage shape must not become a huge malloc.
    uint64_t count = 1;
    for (int i = 0; i < h.ndim; i++) {
        if (h.dims[i] != 0 && count > UINT64_MAX / h.dims[i])
            return hp_fail(err, HP_ERR_FORMAT, "%s: shape %s is too large (file is corrupt)",
                        s->path, shape);
        count *= h.dims[i];
    }
    uint64_t es = elem_size(e), data_off = pre_len + hlen;
    uint64_t have = s->size - data_off;
    if (count > UINT64_MAX / es || count * es > have)
        return hp_fail(err, HP_ERR_FORMAT, "%s: file is truncated: shape %s of %s needs "
                    "%llu data bytes, file has %llu (re-save the array)", s->path, shape,
                    h.descr,
                    count > UINT64_MAX / es ? (unsigned long long)UINT64_MAX
                                            : (unsigned long long)(count * es),
                    (unsigned long long)have);
    if (count * es < have)
        return hp_fail(err, HP_ERR_FORMAT, "%s: %llu unexpected bytes after the array data "
                    "(file is corrupt or not written by numpy.save)", s->path,
                    (unsigned long long)(have - count * es));
    return load_rows(s, e, h.ndim, h.dims, seq_len, out, err);
}

// --- .bin ------------------------------------------------------------------

#define LLMC_HEADER_INTS 256
#define LLMC_MAGIC_GPT2 20240520  // version 1: uint16 tokens
#define LLMC_MAGIC_LLAMA3 20240801 // version 7: uint32 tokens

static enum hp_status load_bin(struct src *s, int seq_len, struct hp_data **out,
                               struct hp_error *err)
{
    enum hp_status st;
    unsigned char head[LLMC_HEADER_INTS * 4];
    int32_t magic = 0;
    if (s->size >= 4) {
        if ((st = src_read(s, head, 4, err)))
            return st;
        magic = rd_i32(head);
    }
    if (magic == LLMC_MAGIC_GPT2 || magic == LLMC_MAGIC_LLAMA3) {
        if (s->size < sizeof head)
            return hp_fail(err, HP_ERR_FORMAT, "%s: file is truncated: %llu bytes, shorter "
                        "than the 1024-byte llm.c header (regenerate the token file)",
                        s->path, (unsigned long long)s->size);
        if ((st = src_read(s, head + 4, sizeof head - 4, err)))
            return st;
        int32_t version = rd_i32(head + 4), n = rd_i32(head + 8);
        int32_t want = magic == LLMC_MAGIC_GPT2 ? 1 : 7;
        enum elem e = magic == LLMC_MAGIC_GPT2 ? EL_U16 : EL_U32;
        if (version != want)
            return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: llm.c token file version %d is not "
                        "supported (magic %d expects version %d)", s->path, (int)version,
                        (int)magic, (int)want);
        if (n < 0)
            return hp_fail(err, HP_ERR_FORMAT, "%s: llm.c header gives a negative token count "
                        "%d (file is corrupt)", s->path, (int)n);
        uint64_t want_bytes = (uint64_t)n * elem_size(e), have = s->size - sizeof head;
        if (want_bytes != have)
            return hp_fail(err, HP_ERR_FORMAT, "%s: llm.c header says %d tokens (%llu bytes) "
                        "but %llu bytes follow the header (file truncated or corrupt)",
                        s->path, (int)n, (unsigned long long)want_bytes,
                        (unsigned long long)have);
        return load_rows(s, e, 1, &(uint64_t){(uint64_t)n}, seq_len, out, err);
    }
    // No llm.c magic: raw nanoGPT uint16 tokens from byte 0.
    if (s->size == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: file is empty (give a non-empty token file)",
                    s->path);
    if (s->size % 2 != 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: %llu bytes is not a whole number of uint16 "
                    "tokens (expected an llm.c .bin with magic %d or raw nanoGPT uint16 "
                    "tokens)", s->path, (unsigned long long)s->size, LLMC_MAGIC_GPT2);
    if (fseek(s->f, 0, SEEK_SET) != 0)
        return hp_fail(err, HP_ERR_IO, "%s: cannot seek: %s (give a regular file)", s->path,
                    hp_strerror(errno));
    return load_rows(s, EL_U16, 1, &(uint64_t){s->size / 2}, seq_len, out, err);
}

// --- .jsonl ------------------------------------------------------------------

enum { F_LABELS, F_MASK, F_TYPES, N_FIELDS };
static const char *const field_name[N_FIELDS] = {"labels", "attention_mask",
                                                 "token_type_ids"};

// An integer in [lo, hi]: a JSON number with no fractional part.
static bool json_int(const cJSON *v, double lo, double hi, int32_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi))
        return false; // also rejects NaN
    int32_t k = (int32_t)x;
    if ((double)k != x)
        return false;
    *out = k;
    return true;
}

struct jl {
    const char *path;
    int line;
    int seq_len;      // from the first row (or the caller)
    int first_line;   // line of the first row
    bool has[N_FIELDS];
    bool has_label;   // a "label" per row (sequence classification)
    int n_rows, max_rows;
    uint64_t size;    // bytes in the file
    struct hp_data *d;
};

static enum hp_status jl_row(struct jl *j, const cJSON *obj, struct hp_error *err)
{
    const char *path = j->path;
    int line = j->line;
    if (!cJSON_IsObject(obj))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: line is not a JSON object (expected "
                    "{\"ids\": [...]} on every line)", path, line);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(obj, "ids");
    if (!cJSON_IsArray(ids))
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s:%d: %s (a line holds token ids {\"ids\": [...]}, or text for the model's tokenizer: "
                       "{\"text\": \"...\"} or {\"text_a\": \"...\", \"text_b\": \"...\"})",
                       path, line, ids ? "\"ids\" is not an array" : "no \"ids\" array");
    int n = cJSON_GetArraySize(ids);
    if (n == 0)
        return hp_fail(err, HP_ERR_SHAPE, "%s:%d: row has no ids (every row needs at least "
                    "one token)", path, line);
    const cJSON *f[N_FIELDS];
    for (int k = 0; k < N_FIELDS; k++)
        f[k] = cJSON_GetObjectItemCaseSensitive(obj, field_name[k]);

    if (!j->d) {
        // First row: fixes the row length and which fields every row carries.
        if (j->seq_len != 0 && n != j->seq_len)
            return hp_fail(err, HP_ERR_SHAPE, "%s:%d: row has %d ids, expected %d (seq_len is "
                        "%d; every row must have exactly seq_len ids)", path, line, n,
                        j->seq_len, j->seq_len);
        j->seq_len = n;
        j->first_line = line;
        for (int k = 0; k < N_FIELDS; k++)
            j->has[k] = f[k] != NULL;
        // Every id of every row takes at least one byte of its own line, so a
        // file of size bytes holds at most size / n rows of n ids. Bounding
        // the rows by that keeps the arrays within a few times the file's
        // size: a long first row over many short lines must fail on the
        // first short line, not ask for rows x n ints up front.
        if ((uint64_t)j->max_rows > j->size / (uint64_t)n)
            j->max_rows = (int)(j->size / (uint64_t)n);
        enum hp_status st = hp_data_alloc(path, j->max_rows, n, j->has[F_LABELS],
                                       j->has[F_MASK], j->has[F_TYPES], &j->d, err);
        if (st)
            return st;
        j->has_label = cJSON_GetObjectItemCaseSensitive(obj, "label") != NULL;
        if (j->has_label && !(j->d->seq_labels = malloc((size_t)j->max_rows * sizeof(int32_t))))
            return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    } else if (n != j->seq_len) {
        return hp_fail(err, HP_ERR_SHAPE, "%s:%d: row has %d ids, expected %d (all rows must "
                    "have the same length; pad and set attention_mask)", path, line, n,
                    j->seq_len);
    }
    for (int k = 0; k < N_FIELDS; k++) {
        if ((f[k] != NULL) != j->has[k])
            return hp_fail(err, HP_ERR_FORMAT, "%s:%d: row %s \"%s\" but line %d %s (give "
                        "\"%s\" on every row or on none)", path, line,
                        f[k] ? "has" : "has no", field_name[k], j->first_line,
                        f[k] ? "does not" : "does", field_name[k]);
        if (f[k] && !cJSON_IsArray(f[k]))
            return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\" is not an array (give one value "
                        "per id)", path, line, field_name[k]);
        if (f[k] && cJSON_GetArraySize(f[k]) != n)
            return hp_fail(err, HP_ERR_SHAPE, "%s:%d: \"%s\" has %d entries but \"ids\" has %d "
                        "(give one value per id)", path, line, field_name[k],
                        cJSON_GetArraySize(f[k]), n);
    }

    if (j->n_rows >= j->max_rows) // cannot happen (see the bound above); refuse rather than overrun
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: more ids than the file's size allows (file changed while "
                       "loading?)", path, line);
    size_t base = (size_t)j->n_rows * (size_t)j->seq_len;
    struct hp_data *d = j->d;
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(obj, "label");
    if ((label != NULL) != j->has_label)
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: row %s \"label\" but line %d %s (give it on every row or on none)",
                       path, line, label ? "has" : "has no", j->first_line, label ? "does not" : "does");
    if (label && !json_int(label, 0, INT32_MAX, &d->seq_labels[j->n_rows]))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"label\" is not a class id (a non-negative integer; use text "
                       "data for label names)", path, line);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, ids) {
        if (!json_int(v, INT32_MIN, INT32_MAX, &d->ids[base + (size_t)i]))
            return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"ids\"[%d] is not an integer in int32 "
                        "range (token ids must be whole numbers)", path, line, i);
        i++;
    }
    if (f[F_LABELS]) {
        i = 0;
        cJSON_ArrayForEach(v, f[F_LABELS]) {
            if (!json_int(v, INT32_MIN, INT32_MAX, &d->labels[base + (size_t)i]))
                return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"labels\"[%d] is not an integer in "
                            "int32 range (use token ids, or -100 to ignore a position)",
                            path, line, i);
            i++;
        }
    }
    if (f[F_MASK]) {
        i = 0;
        cJSON_ArrayForEach(v, f[F_MASK]) {
            int32_t m;
            if (!json_int(v, 0, 1, &m))
                return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"attention_mask\"[%d] is not 0 or 1 "
                            "(1 = real token, 0 = padding)", path, line, i);
            d->attn_mask[base + (size_t)i] = (uint8_t)m;
            i++;
        }
    }
    if (f[F_TYPES]) {
        i = 0;
        cJSON_ArrayForEach(v, f[F_TYPES]) {
            if (!json_int(v, 0, INT32_MAX, &d->type_ids[base + (size_t)i]))
                return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"token_type_ids\"[%d] is not a "
                            "non-negative integer (BERT segment ids are 0 or 1)", path,
                            line, i);
            i++;
        }
    }
    j->n_rows++;
    return HP_OK;
}

bool hp_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v')
            return false;
    return true;
}

static enum hp_status load_jsonl(struct src *s, int seq_len, struct hp_data **out,
                                 struct hp_error *err)
{
    if (s->size >= SIZE_MAX)
        return hp_fail(err, HP_ERR_NOMEM, "%s: file is too large to read (split it)", s->path);
    size_t size = (size_t)s->size;
    char *buf = malloc(size + 1);
    if (!buf)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory reading %zu bytes (split the "
                    "file)", s->path, size);
    enum hp_status st = src_read(s, buf, size, err);
    if (st) {
        free(buf);
        return st;
    }
    buf[size] = '\0';

    // Every non-blank line is a row or an error, so counting them sizes the
    // arrays exactly, once. (Counting all lines would let blank lines inflate
    // rows x seq_len far beyond what the file holds.)
    size_t rows = 0;
    for (char *p = buf, *end = buf + size; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        rows += !hp_blank(p, (size_t)(le - p));
        p = le + 1;
    }
    if (rows > INT_MAX) {
        free(buf);
        return hp_fail(err, HP_ERR_SHAPE, "%s: more than %d rows (split the file)", s->path,
                    INT_MAX);
    }

    struct jl j = {.path = s->path, .seq_len = seq_len, .max_rows = (int)rows, .size = size};
    struct hp_task_rows tr = {.path = s->path, .seq_len = seq_len};
    bool task = false; // the first row's kind: task rows or rows of ids
    char *p = buf, *end = buf + size;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        j.line++;
        if (!hp_blank(p, (size_t)(le - p))) {
            if (memchr(p, '\0', (size_t)(le - p))) {
                st = hp_fail(err, HP_ERR_FORMAT, "%s:%d: line contains a NUL byte (is this a "
                          "text file?)", s->path, j.line);
                break;
            }
            const char *stop = NULL;
            cJSON *obj;
            if ((st = hp_json_parse(s->path, (size_t)j.line, p, (size_t)(le - p), &stop, &obj, err)) != HP_OK)
                break;
            /* after the object only whitespace, as cJSON counts it (bytes up to the space) */
            while (obj && stop < le && (unsigned char)*stop <= ' ')
                stop++;
            if (obj && stop != le) {
                cJSON_Delete(obj);
                obj = NULL;
            }
            if (!obj) {
                long col = stop && stop >= p && stop <= le ? (long)(stop - p) + 1 : 1;
                st = hp_fail(err, HP_ERR_FORMAT, "%s:%d: invalid JSON at column %ld (each line "
                          "must be one JSON object)", s->path, j.line, col);
                break;
            }
            if (j.n_rows == 0 && tr.n == 0)
                task = hp_task_row_is(obj);
            if (task)
                st = hp_task_rows_add(&tr, obj, j.line, NULL, err);
            else if (hp_task_row_is(obj))
                st = hp_fail(err, HP_ERR_FORMAT, "%s:%d: a task row (with \"prompt\" or \"prompt_ids\") but line "
                             "%d is not (a file holds task rows or other rows, not both)", s->path, j.line,
                             j.first_line);
            else
                st = jl_row(&j, obj, err);
            cJSON_Delete(obj);
            if (st)
                break;
        }
        p = le + 1;
    }
    free(buf);
    if (task) {
        if (!st)
            st = hp_data_from_task_rows(&tr, 0, out, err);
        hp_task_rows_free(&tr);
        return st;
    }
    if (!st && j.n_rows == 0)
        st = hp_fail(err, HP_ERR_FORMAT, "%s: no rows (expected one {\"ids\": [...]} object "
                  "per line)", s->path);
    if (st) {
        hp_data_free(j.d);
        return st;
    }
    j.d->n_seqs = j.n_rows;
    *out = j.d;
    return HP_OK;
}

enum hp_status hp_data_from_task_rows(const struct hp_task_rows *r, int32_t pad, struct hp_data **out,
                                      struct hp_error *err)
{
    *out = NULL;
    if (r->n == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: no rows (expected one task row {\"prompt\": ..., \"answer\": ...} "
                       "per line)", r->path);
    struct hp_data *d;
    enum hp_status st = hp_data_alloc(r->path, r->n, hp_task_rows_len(r), false, true, false, &d, err);
    if (st == HP_OK && (st = hp_task_rows_fill(r, pad, d, err)) != HP_OK) {
        hp_data_free(d);
        d = NULL;
    }
    *out = d;
    return st;
}

// --- public ------------------------------------------------------------------

enum hp_status hp_data_load(const char *path, int seq_len, struct hp_data **out,
                            struct hp_error *err)
{
    assert(path && out);
    *out = NULL;
    const char *ext = path_ext(path);
    enum hp_status (*loader)(struct src *, int, struct hp_data **, struct hp_error *);
    if (ext_is(ext, "npy"))
        loader = load_npy;
    else if (ext_is(ext, "jsonl"))
        loader = load_jsonl;
    else if (ext_is(ext, "bin"))
        loader = load_bin;
    else
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: unknown data format '%s%s' (use .npy, "
                    ".jsonl or .bin of token ids, or .txt or .jsonl of text for the model's tokenizer)",
                       path, *ext ? "." : "", ext);
    struct src s;
    enum hp_status st = seq_len_check(path, seq_len, err);
    if (st || (st = src_open(path, &s, err)))
        return st;
    st = loader(&s, seq_len, out, err);
    src_close(&s);
    assert(st != HP_OK || (*out && (*out)->n_seqs >= 1 && (*out)->seq_len >= 1));
    return st;
}

/* A task's prompts, answers, wrong answers and corrupt prompts in [0, n_vocab), naming the row's line. */
static enum hp_status check_task_vocab(const struct hp_data *d, int n_vocab, struct hp_error *err)
{
    const struct hp_task *k = d->task;
    for (int s = 0; k && s < d->n_seqs; s++) {
        const char *what = NULL;
        int32_t v = 0;
        if (k->answer[s] < 0 || k->answer[s] >= n_vocab)
            what = "answer", v = k->answer[s];
        else if (k->wrong && (k->wrong[s] < 0 || k->wrong[s] >= n_vocab))
            what = "wrong answer", v = k->wrong[s];
        for (int t = 0; !what && t <= k->pos[s]; t++) {
            v = d->ids[(size_t)s * d->seq_len + t];
            what = v < 0 || v >= n_vocab ? "prompt token" : NULL;
        }
        for (int t = 0; !what && k->corrupt && t <= k->pos[s]; t++) {
            v = k->corrupt[(size_t)s * d->seq_len + t];
            what = v < 0 || v >= n_vocab ? "corrupt prompt's token" : NULL;
        }
        if (what)
            return hp_fail(err, HP_ERR_ARG, "%s:%d: %s %d is outside the vocabulary (model has %d tokens)", d->path,
                           (int)k->line[s], what, (int)v, n_vocab);
    }
    return HP_OK;
}

enum hp_status hp_data_check_vocab(const struct hp_data *d, int n_vocab,
                                   struct hp_error *err)
{
    assert(d);
    if (n_vocab < 1)
        return hp_fail(err, HP_ERR_ARG, "%s: vocabulary size %d is invalid (the model must "
                    "have at least one token)", d->path, n_vocab);
    if (d->task)
        return check_task_vocab(d, n_vocab, err);
    size_t n = (size_t)d->n_seqs * (size_t)d->seq_len;
    for (size_t i = 0; i < n; i++)
        if (d->ids[i] < 0 || d->ids[i] >= n_vocab)
            return hp_fail(err, HP_ERR_ARG, "%s: token id %d at row %zu, position %zu is "
                        "outside the vocabulary (model has %d tokens)", d->path,
                        (int)d->ids[i], i / (size_t)d->seq_len, i % (size_t)d->seq_len,
                        n_vocab);
    if (d->labels)
        for (size_t i = 0; i < n; i++)
            if (d->labels[i] != -100 && (d->labels[i] < 0 || d->labels[i] >= n_vocab))
                return hp_fail(err, HP_ERR_ARG, "%s: label %d at row %zu, position %zu is "
                            "outside the vocabulary (model has %d tokens; -100 ignores a "
                            "position)", d->path, (int)d->labels[i],
                            i / (size_t)d->seq_len, i % (size_t)d->seq_len, n_vocab);
    return HP_OK;
}
