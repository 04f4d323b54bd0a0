/*
 * test_data.c -- hp_data_load / hp_data_check_vocab.
 *
 * Happy paths read fixtures under tests/data/ written by numpy and Python's
 * json module (tests/data/make_fixtures.py says how to regenerate them), so
 * the loader is checked against independent writers; the expected values
 * below are typed in by hand from that script. Malformed inputs are built
 * byte by byte in a per-test temporary directory. Every failure case checks
 * the status and that the one-line message starts with the path and names
 * the problem.
 *
 * The fixture directory is HP_TEST_DATA_DIR when the build defines it, else
 * $HP_TESTS/data (tests/meson.build sets HP_TESTS to the tests/ source
 * directory), else "data" next to this source file as named by __FILE__
 * (which works when the tests run from the directory the compiler ran in).
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// --- temporary files -----------------------------------------------------------

#define MAX_FILES 64
static char g_dir[64];
static char g_files[MAX_FILES][1024];
static int g_nfiles;

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/hp_test_data_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp failed");
    g_nfiles = 0;
}

static void teardown(void)
{
    // Removed in reverse so directories made by a test go after their files.
    for (int i = g_nfiles - 1; i >= 0; i--)
        remove(g_files[i]);
    rmdir(g_dir);
}

TestSuite(data, .init = setup, .fini = teardown);

// A path in the test's directory, removed at teardown.
static const char *tpath(const char *name)
{
    cr_assert_lt(g_nfiles, MAX_FILES);
    char *p = g_files[g_nfiles++];
    snprintf(p, sizeof g_files[0], "%s/%s", g_dir, name);
    return p;
}

static const char *write_file(const char *name, const void *buf, size_t n)
{
    const char *p = tpath(name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f, "cannot create %s", p);
    if (n)
        cr_assert_eq(fwrite(buf, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    return p;
}

static const char *write_text(const char *name, const char *text)
{
    return write_file(name, text, strlen(text));
}

static void put_u16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)((v >> 8) & 0xff);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/*
 * Write a .npy: magic, version major.0, header length, then dict padded with
 * spaces and a newline to a multiple of 64 bytes, then n data bytes.
 */
static const char *write_npy(const char *name, int major, const char *dict,
                             const void *data, size_t n)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hlen = dl + 1;
    while ((pre + hlen) % 64)
        hlen++;
    unsigned char *buf = calloc(1, pre + hlen + n + 1);
    cr_assert_not_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1)
        put_u16(buf + 8, (unsigned)hlen);
    else
        put_u32(buf + 8, (uint32_t)hlen);
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[pre + hlen - 1] = '\n';
    if (n)
        memcpy(buf + pre + hlen, data, n);
    const char *p = write_file(name, buf, pre + hlen + n);
    free(buf);
    return p;
}

static const char *npy_dict(char *buf, size_t cap, const char *descr, const char *fortran,
                            const char *shape)
{
    snprintf(buf, cap, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
             fortran, shape);
    return buf;
}

// An llm.c token file header (256 int32) followed by nbytes of tokens.
static const char *write_llmc(const char *name, uint32_t magic, uint32_t version,
                              uint32_t count, const void *toks, size_t nbytes)
{
    unsigned char *buf = calloc(1, 1024 + nbytes + 1);
    cr_assert_not_null(buf);
    put_u32(buf, magic);
    put_u32(buf + 4, version);
    put_u32(buf + 8, count);
    if (nbytes)
        memcpy(buf + 1024, toks, nbytes);
    const char *p = write_file(name, buf, 1024 + nbytes);
    free(buf);
    return p;
}

// --- fixtures --------------------------------------------------------------

static const char *fixture(const char *name)
{
    static char bufs[8][1024];
    static int next;
    char *p = bufs[next++ % 8];
#ifdef HP_TEST_DATA_DIR
    snprintf(p, sizeof bufs[0], "%s/%s", HP_TEST_DATA_DIR, name);
#else
    const char *tests = getenv("HP_TESTS");
    if (tests && *tests) {
        snprintf(p, sizeof bufs[0], "%s/data/%s", tests, name);
    } else {
        const char *f = __FILE__, *slash = strrchr(f, '/');
        int n = slash ? (int)(slash - f) : 0;
        snprintf(p, sizeof bufs[0], "%.*s%sdata/%s", n, f, n ? "/" : "", name);
    }
#endif
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "fixture %s is missing (run the tests from the directory "
                 "they were compiled in, or define HP_TEST_DATA_DIR)", p);
    return p;
}

// --- assertions ------------------------------------------------------------

static struct hp_data *load_ok(const char *path, int seq_len)
{
    struct hp_data *d = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_data_load(path, seq_len, &d, &err);
    cr_assert_eq(st, HP_OK, "%s: status %s: %s", path, hp_status_name(st), err.msg);
    cr_assert_not_null(d);
    cr_assert_str_eq(d->path, path);
    return d;
}

static void expect_ids(const struct hp_data *d, int n_seqs, int seq_len, const int32_t *want)
{
    cr_assert_eq(d->n_seqs, n_seqs, "n_seqs %d, want %d", d->n_seqs, n_seqs);
    cr_assert_eq(d->seq_len, seq_len, "seq_len %d, want %d", d->seq_len, seq_len);
    for (int i = 0; i < n_seqs * seq_len; i++)
        cr_assert_eq(d->ids[i], want[i], "ids[%d] = %d, want %d", i, d->ids[i], want[i]);
}

// The load fails with status want; the message is one line that starts with
// the path (or the path and ":") and contains what.
static void expect_fail(const char *path, int seq_len, enum hp_status want, const char *what)
{
    struct hp_data *d = (struct hp_data *)&d; // any non-NULL: must be reset
    struct hp_error err = {{0}};
    enum hp_status st = hp_data_load(path, seq_len, &d, &err);
    cr_assert_eq(st, want, "%s: status %s, want %s: %s", path, hp_status_name(st),
                 hp_status_name(want), err.msg);
    cr_assert_null(d, "*out not NULL after failure");
    size_t n = strlen(path);
    cr_assert(strncmp(err.msg, path, n) == 0 && (err.msg[n] == ':'),
              "message does not start with the path: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, what), "message lacks \"%s\": %s", what, err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "message is not one line: %s", err.msg);
    cr_assert_not_null(strchr(err.msg, '('), "message has no hint: %s", err.msg);
    // The same failure without an error buffer must not crash.
    d = NULL;
    cr_assert_eq(hp_data_load(path, seq_len, &d, NULL), want);
    cr_assert_null(d);
}

// --- .npy happy paths ---------------------------------------------------------

Test(data, npy_2d_int32_from_numpy)
{
    const int32_t want[] = {0, 1, 2, 3, 96, 95, 94, 93, 7, 70, 700, 7000};
    struct hp_data *d = load_ok(fixture("ids_2d_i4.npy"), 0);
    expect_ids(d, 3, 4, want);
    cr_assert_null(d->labels);
    cr_assert_null(d->attn_mask);
    cr_assert_null(d->type_ids);
    hp_data_free(d);
    d = load_ok(fixture("ids_2d_i4.npy"), 4); // seq_len equal to the file's
    expect_ids(d, 3, 4, want);
    hp_data_free(d);
}

Test(data, npy_1d_int64_v2_cut_into_rows)
{
    // arange(10) * 3; rows of 3, the tenth token (27) is dropped
    const int32_t want[] = {0, 3, 6, 9, 12, 15, 18, 21, 24};
    struct hp_data *d = load_ok(fixture("ids_1d_i8_v2.npy"), 3);
    expect_ids(d, 3, 3, want);
    hp_data_free(d);
}

Test(data, npy_1d_uint16_v3)
{
    const int32_t want2[] = {0, 1, 65535, 300};
    struct hp_data *d = load_ok(fixture("ids_1d_u2_v3.npy"), 2);
    expect_ids(d, 2, 2, want2);
    hp_data_free(d);
    const int32_t want5[] = {0, 1, 65535, 300, 5};
    d = load_ok(fixture("ids_1d_u2_v3.npy"), 5); // exactly one row
    expect_ids(d, 1, 5, want5);
    hp_data_free(d);
}

Test(data, npy_int64_2d_extremes_and_uppercase_extension)
{
    unsigned char raw[4 * 8];
    const int64_t v[] = {INT32_MAX, INT32_MIN, -1, 0};
    for (int i = 0; i < 4; i++)
        put_u64(raw + 8 * i, (uint64_t)v[i]);
    char dict[256];
    const char *p = write_npy("x.NPY", 1, npy_dict(dict, sizeof dict, "<i8", "False", "(2, 2)"),
                              raw, sizeof raw);
    const int32_t want[] = {INT32_MAX, INT32_MIN, -1, 0};
    struct hp_data *d = load_ok(p, 0);
    expect_ids(d, 2, 2, want);
    hp_data_free(d);
}

Test(data, npy_uint32_and_python2_shape)
{
    unsigned char raw[3 * 4];
    const uint32_t v[] = {1, 2, 3};
    for (int i = 0; i < 3; i++)
        put_u32(raw + 4 * i, v[i]);
    // Python 2 numpy wrote "3L"; keys in another order are fine too.
    const char *p = write_npy("x.npy", 1,
                              "{'shape': (1L, 3L), 'fortran_order': False, 'descr': '<u4'}",
                              raw, sizeof raw);
    const int32_t want[] = {1, 2, 3};
    struct hp_data *d = load_ok(p, 0);
    expect_ids(d, 1, 3, want);
    hp_data_free(d);
}

Test(data, long_path_is_kept_whole)
{
    // A path of 1,600+ bytes, made long with "./" so the file exists.
    char name[900];
    size_t k = 0;
    while (k < 800)
        k += (size_t)snprintf(name + k, sizeof name - k, "./");
    snprintf(name + k, sizeof name - k, "x.npy");
    const char *p = write_npy("x.npy", 1, "{'descr': '<i4', 'fortran_order': False, "
                              "'shape': (1, 1), }", "\x05\0\0\0", 4);
    char longp[1100];
    snprintf(longp, sizeof longp, "%s/%s", g_dir, name);
    struct hp_data *d = NULL;
    struct hp_error err;
    cr_assert_eq(hp_data_load(longp, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(d->path, longp);
    cr_assert_eq(d->ids[0], 5);
    hp_data_free(d);
    (void)p;
}

// --- .npy failures ------------------------------------------------------------

Test(data, npy_empty_file)
{
    expect_fail(write_file("e.npy", "", 0), 0, HP_ERR_FORMAT, "truncated");
}

Test(data, npy_truncated_header)
{
    char dict[256];
    const char *full = write_npy("full.npy", 1,
                                 npy_dict(dict, sizeof dict, "<i4", "False", "(1, 2)"),
                                 "\1\0\0\0\2\0\0\0", 8);
    // Keep the magic and length but cut the dict short.
    FILE *f = fopen(full, "rb");
    unsigned char buf[40];
    cr_assert_eq(fread(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    expect_fail(write_file("t.npy", buf, sizeof buf), 0, HP_ERR_FORMAT, "truncated");
    expect_fail(write_file("t2.npy", buf, 9), 0, HP_ERR_FORMAT, "truncated");
    // v2 preamble cut inside its 4-byte length
    expect_fail(write_file("t3.npy", "\x93NUMPY\x02\x00\x10\x00\x00", 11), 0, HP_ERR_FORMAT,
                "truncated");
    // v2 header length of 4 GiB on a tiny file
    expect_fail(write_file("t4.npy", "\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14), 0,
                HP_ERR_FORMAT, "truncated");
}

Test(data, npy_bad_magic_and_version)
{
    expect_fail(write_file("m.npy", "\x93NUMPX\x01\x00\x00\x00{}", 12), 0, HP_ERR_FORMAT,
                "bad magic");
    expect_fail(write_file("v.npy", "\x93NUMPY\x09\x00\x02\x00{}", 12), 0, HP_ERR_UNSUPPORTED,
                "version 9.0");
}

Test(data, npy_garbage_headers)
{
    const char *bad[] = {
        "garbage",
        "{'descr': '<i4', 'fortran_order': False}",               // no shape
        "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (2,)}", // not a bool
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,3}", // unclosed tuple
        "{'descr': '<i4', 'fortran_order': False, 'shape': (-2,)}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2 3)}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
        "{'descr': <i4, 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<i4' 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,)",
        "{'descr': '<i4\\x00', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': 'an absurdly long dtype string', 'fortran_order': False, 'shape': (2,)}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "g%zu.npy", i);
        expect_fail(write_npy(name, 1, bad[i], "\0\0\0\0\0\0\0\0", 8), 2, HP_ERR_FORMAT,
                    "malformed .npy header");
    }
}

Test(data, npy_bad_descr)
{
    expect_fail(fixture("ids_f4.npy"), 2, HP_ERR_UNSUPPORTED, "dtype '<f4' is not supported");
    char dict[256];
    expect_fail(write_npy("be.npy", 1, npy_dict(dict, sizeof dict, ">i4", "False", "(2,)"),
                          "\0\0\0\1\0\0\0\2", 8), 2, HP_ERR_UNSUPPORTED, "dtype '>i4'");
    expect_fail(write_npy("u1.npy", 1, npy_dict(dict, sizeof dict, "|u1", "False", "(2,)"),
                          "\1\2", 2), 2, HP_ERR_UNSUPPORTED, "dtype '|u1'");
    expect_fail(write_npy("st.npy", 1, "{'descr': [('a', '<i4')], 'fortran_order': False, "
                          "'shape': (2,)}", "\0\0\0\0\0\0\0\0", 8), 2, HP_ERR_UNSUPPORTED,
                "structured dtype");
}

Test(data, npy_fortran_order)
{
    expect_fail(fixture("ids_fortran.npy"), 0, HP_ERR_UNSUPPORTED, "Fortran order");
}

Test(data, npy_wrong_dims)
{
    expect_fail(fixture("ids_3d.npy"), 0, HP_ERR_SHAPE, "shape (2, 2, 2)");
    char dict[256];
    expect_fail(write_npy("s.npy", 1, npy_dict(dict, sizeof dict, "<i4", "False", "()"),
                          "\1\0\0\0", 4), 0, HP_ERR_SHAPE, "shape ()");
}

Test(data, npy_2d_seq_len_disagrees)
{
    expect_fail(fixture("ids_2d_i4.npy"), 5, HP_ERR_SHAPE, "rows have 4 tokens but seq_len is 5");
}

Test(data, npy_1d_needs_seq_len)
{
    expect_fail(fixture("ids_1d_i8_v2.npy"), 0, HP_ERR_ARG, "needs a seq_len");
}

Test(data, npy_1d_fewer_tokens_than_seq_len)
{
    expect_fail(fixture("ids_1d_i8_v2.npy"), 11, HP_ERR_SHAPE,
                "only 10 tokens, fewer than seq_len 11");
}

Test(data, npy_truncated_and_overlong_data)
{
    char dict[256];
    npy_dict(dict, sizeof dict, "<i4", "False", "(2, 2)");
    expect_fail(write_npy("short.npy", 1, dict, "\0\0\0\0\0\0\0\0\0\0\0\0", 12), 0,
                HP_ERR_FORMAT, "truncated");
    expect_fail(write_npy("long.npy", 1, dict, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 18), 0,
                HP_ERR_FORMAT, "2 unexpected bytes");
}

Test(data, npy_huge_shapes_do_not_allocate)
{
    char dict[256];
    // The product overflows 64 bits.
    expect_fail(write_npy("h1.npy", 1, npy_dict(dict, sizeof dict, "<i4", "False",
                                                "(4611686018427387904, 4611686018427387904)"),
                          "\0\0\0\0", 4), 0, HP_ERR_FORMAT, "too large");
    // The product fits, but would need terabytes: caught by the size check.
    expect_fail(write_npy("h2.npy", 1, npy_dict(dict, sizeof dict, "<i8", "False",
                                                "(1099511627776, 4)"),
                          "\0\0\0\0", 4), 0, HP_ERR_FORMAT, "truncated");
    // Bytes times item size overflows.
    expect_fail(write_npy("h3.npy", 1, npy_dict(dict, sizeof dict, "<i8", "False",
                                                "(4611686018427387904,)"),
                          "\0\0\0\0", 4), 3, HP_ERR_FORMAT, "truncated");
}

Test(data, npy_int64_outside_int32)
{
    unsigned char raw[3 * 8];
    put_u64(raw, 1);
    put_u64(raw + 8, (uint64_t)INT32_MAX + 1);
    put_u64(raw + 16, 2);
    char dict[256];
    expect_fail(write_npy("big.npy", 1, npy_dict(dict, sizeof dict, "<i8", "False", "(3,)"),
                          raw, sizeof raw), 3, HP_ERR_FORMAT,
                "token 2147483648 at index 1 does not fit in int32");
    put_u64(raw + 8, (uint64_t)INT32_MIN - 1);
    expect_fail(write_npy("neg.npy", 1, npy_dict(dict, sizeof dict, "<i8", "False", "(3,)"),
                          raw, sizeof raw), 3, HP_ERR_FORMAT,
                "token -2147483649 at index 1");
}

Test(data, npy_no_tokens)
{
    char dict[256];
    expect_fail(write_npy("z2.npy", 1, npy_dict(dict, sizeof dict, "<i4", "False", "(0, 4)"),
                          "", 0), 0, HP_ERR_FORMAT, "no tokens");
    expect_fail(write_npy("z1.npy", 2, npy_dict(dict, sizeof dict, "<i4", "False", "(0,)"),
                          "", 0), 4, HP_ERR_FORMAT, "no tokens");
}

// --- .jsonl -------------------------------------------------------------------

Test(data, jsonl_all_fields_from_python)
{
    struct hp_data *d = load_ok(fixture("rows.jsonl"), 0);
    const int32_t ids[] = {101, 7, 8, 102, 101, 9, 102, 0};
    const int32_t labels[] = {-100, 7, -100, -100, -100, -100, 5, -100};
    const uint8_t mask[] = {1, 1, 1, 1, 1, 1, 1, 0};
    const int32_t types[] = {0, 0, 0, 0, 0, 1, 1, 0};
    expect_ids(d, 2, 4, ids);
    cr_assert_not_null(d->labels);
    cr_assert_not_null(d->attn_mask);
    cr_assert_not_null(d->type_ids);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(d->labels[i], labels[i], "labels[%d]", i);
        cr_assert_eq(d->attn_mask[i], mask[i], "attn_mask[%d]", i);
        cr_assert_eq(d->type_ids[i], types[i], "type_ids[%d]", i);
    }
    hp_data_free(d);
}

Test(data, jsonl_ids_only_crlf_blank_lines_and_extra_keys)
{
    const char *p = write_text("r.jsonl",
                               "\r\n  \n{\"ids\": [1, 2, 3], \"text\": \"ignored\"}\r\n"
                               "\t\n{\"ids\":[4,5,6.0]}\n{\"ids\": [7, 8, 1e1]}");
    const int32_t want[] = {1, 2, 3, 4, 5, 6, 7, 8, 10};
    struct hp_data *d = load_ok(p, 3);
    expect_ids(d, 3, 3, want);
    cr_assert_null(d->labels);
    cr_assert_null(d->attn_mask);
    cr_assert_null(d->type_ids);
    hp_data_free(d);
}

Test(data, jsonl_ragged)
{
    const char *p = write_text("x.jsonl", "{\"ids\": [1, 2, 3, 4]}\n\n{\"ids\": [1, 2, 3]}\n");
    char want[1200];
    snprintf(want, sizeof want, "%s:3: row has 3 ids, expected 4 (all rows must have the same "
             "length; pad and set attention_mask)", p);
    struct hp_data *d = NULL;
    struct hp_error err;
    cr_assert_eq(hp_data_load(p, 0, &d, &err), HP_ERR_SHAPE);
    cr_assert_str_eq(err.msg, want);
    expect_fail(p, 0, HP_ERR_SHAPE, ":3: row has 3 ids, expected 4");
}

Test(data, jsonl_seq_len_disagrees)
{
    const char *p = write_text("x.jsonl", "{\"ids\": [1, 2, 3, 4]}\n");
    expect_fail(p, 8, HP_ERR_SHAPE, ":1: row has 4 ids, expected 8");
}

Test(data, jsonl_mismatched_field_lengths)
{
    expect_fail(write_text("l.jsonl", "{\"ids\": [1, 2, 3], \"labels\": [1, 2]}\n"), 0,
                HP_ERR_SHAPE, ":1: \"labels\" has 2 entries but \"ids\" has 3");
    expect_fail(write_text("m.jsonl", "{\"ids\": [1, 2], \"attention_mask\": [1, 1]}\n"
                                      "{\"ids\": [1, 2], \"attention_mask\": [1]}\n"),
                0, HP_ERR_SHAPE, ":2: \"attention_mask\" has 1 entries");
    expect_fail(write_text("t.jsonl", "{\"ids\": [1, 2], \"token_type_ids\": [0, 0, 0]}\n"),
                0, HP_ERR_SHAPE, ":1: \"token_type_ids\" has 3 entries");
}

Test(data, jsonl_field_on_some_rows_only)
{
    expect_fail(write_text("a.jsonl", "{\"ids\": [1, 2], \"labels\": [1, 2]}\n"
                                      "{\"ids\": [1, 2]}\n"),
                0, HP_ERR_FORMAT, ":2: row has no \"labels\" but line 1 does");
    expect_fail(write_text("b.jsonl", "\n{\"ids\": [1, 2]}\n"
                                      "{\"ids\": [1, 2], \"attention_mask\": [1, 0]}\n"),
                0, HP_ERR_FORMAT, ":3: row has \"attention_mask\" but line 2 does not");
}

Test(data, jsonl_non_integer_values)
{
    expect_fail(write_text("f.jsonl", "{\"ids\": [1, 2.5]}\n"), 0, HP_ERR_FORMAT,
                ":1: \"ids\"[1] is not an integer");
    expect_fail(write_text("s.jsonl", "{\"ids\": [\"1\", 2]}\n"), 0, HP_ERR_FORMAT,
                "\"ids\"[0] is not an integer");
    expect_fail(write_text("b.jsonl", "{\"ids\": [1, 3000000000]}\n"), 0, HP_ERR_FORMAT,
                "\"ids\"[1] is not an integer in int32 range");
    expect_fail(write_text("n.jsonl", "{\"ids\": [1, null]}\n"), 0, HP_ERR_FORMAT,
                "\"ids\"[1]");
    expect_fail(write_text("l.jsonl", "{\"ids\": [1, 2], \"labels\": [true, 2]}\n"), 0,
                HP_ERR_FORMAT, "\"labels\"[0]");
    expect_fail(write_text("m.jsonl", "{\"ids\": [1, 2], \"attention_mask\": [1, 2]}\n"), 0,
                HP_ERR_FORMAT, "\"attention_mask\"[1] is not 0 or 1");
    expect_fail(write_text("t.jsonl", "{\"ids\": [1, 2], \"token_type_ids\": [0, -1]}\n"), 0,
                HP_ERR_FORMAT, "\"token_type_ids\"[1]");
    expect_fail(write_text("a.jsonl", "{\"ids\": [1, 2], \"labels\": 5}\n"), 0,
                HP_ERR_FORMAT, "\"labels\" is not an array");
}

Test(data, jsonl_invalid_json)
{
    expect_fail(write_text("j.jsonl", "{\"ids\": [1, 2]}\n{\"ids\": [1, 2]\n"), 0,
                HP_ERR_FORMAT, ":2: invalid JSON at column");
    expect_fail(write_text("k.jsonl", "{\"ids\": [1, 2]} {\"ids\": [3, 4]}\n"), 0,
                HP_ERR_FORMAT, ":1: invalid JSON");
    expect_fail(write_text("q.jsonl", "{'ids': [1, 2]}\n"), 0, HP_ERR_FORMAT,
                ":1: invalid JSON");
    expect_fail(write_file("z.jsonl", "{\"ids\": [1,\0 2]}\n", 17), 0, HP_ERR_FORMAT,
                ":1: line contains a NUL byte");
}

Test(data, jsonl_not_an_object_or_no_ids)
{
    expect_fail(write_text("a.jsonl", "[1, 2, 3]\n"), 0, HP_ERR_FORMAT,
                ":1: line is not a JSON object");
    expect_fail(write_text("b.jsonl", "{\"input_ids\": [1, 2, 3]}\n"), 0, HP_ERR_FORMAT,
                ":1: no \"ids\" array");
    expect_fail(write_text("c.jsonl", "{\"ids\": 3}\n"), 0, HP_ERR_FORMAT,
                ":1: \"ids\" is not an array");
    /* another key: the message names every kind of row accepted */
    expect_fail(write_text("s.jsonl", "{\"sentence\": \"a b\"}\n"), 0, HP_ERR_FORMAT,
                "{\"ids\": [...]}, or text for the model's tokenizer: {\"text\": \"...\"} or {\"text_a\"");
    expect_fail(write_text("d.jsonl", "{\"ids\": []}\n"), 0, HP_ERR_SHAPE,
                ":1: row has no ids");
}

Test(data, jsonl_empty)
{
    expect_fail(write_text("e.jsonl", ""), 0, HP_ERR_FORMAT, "no rows");
    expect_fail(write_text("w.jsonl", "\n  \n\r\n"), 0, HP_ERR_FORMAT, "no rows");
}

// --- .bin -------------------------------------------------------------------

Test(data, bin_llmc_from_python)
{
    const int32_t want[] = {10, 20, 30, 40, 50, 60};
    struct hp_data *d = load_ok(fixture("tokens_llmc.bin"), 3);
    expect_ids(d, 2, 3, want);
    hp_data_free(d);
}

Test(data, bin_raw_nanogpt_from_numpy)
{
    const int32_t want2[] = {5, 4, 3, 2, 1, 0};
    struct hp_data *d = load_ok(fixture("tokens_raw.bin"), 2);
    expect_ids(d, 3, 2, want2);
    hp_data_free(d);
    const int32_t want7[] = {5, 4, 3, 2, 1, 0, 65535};
    d = load_ok(fixture("tokens_raw.bin"), 7);
    expect_ids(d, 1, 7, want7);
    hp_data_free(d);
}

Test(data, bin_llmc_llama3_uint32)
{
    unsigned char toks[4 * 4];
    const uint32_t v[] = {128000, 1, 2, 128255};
    for (int i = 0; i < 4; i++)
        put_u32(toks + 4 * i, v[i]);
    const char *p = write_llmc("l3.bin", 20240801, 7, 4, toks, sizeof toks);
    const int32_t want[] = {128000, 1, 2, 128255};
    struct hp_data *d = load_ok(p, 2);
    expect_ids(d, 2, 2, want);
    hp_data_free(d);
    put_u32(toks + 4, 0x80000000u);
    expect_fail(write_llmc("l3big.bin", 20240801, 7, 4, toks, sizeof toks), 2, HP_ERR_FORMAT,
                "token 2147483648 at index 1 does not fit in int32");
}

Test(data, bin_bad_size_and_header)
{
    unsigned char toks[8] = {1, 0, 2, 0, 3, 0, 4, 0};
    expect_fail(write_llmc("short.bin", 20240520, 1, 5, toks, sizeof toks), 2, HP_ERR_FORMAT,
                "header says 5 tokens (10 bytes) but 8 bytes follow");
    expect_fail(write_llmc("long.bin", 20240520, 1, 3, toks, sizeof toks), 2, HP_ERR_FORMAT,
                "header says 3 tokens");
    expect_fail(write_llmc("ver.bin", 20240520, 2, 4, toks, sizeof toks), 2,
                HP_ERR_UNSUPPORTED, "version 2 is not supported");
    expect_fail(write_llmc("neg.bin", 20240520, 1, 0xffffffffu, toks, sizeof toks), 2,
                HP_ERR_FORMAT, "negative token count");
    // The magic, then the file ends inside the header.
    unsigned char head[100] = {0};
    put_u32(head, 20240520);
    expect_fail(write_file("cut.bin", head, sizeof head), 2, HP_ERR_FORMAT,
                "shorter than the 1024-byte llm.c header");
    // No magic and an odd size: neither llm.c nor raw uint16.
    expect_fail(write_file("odd.bin", "\x01\x02\x03\x04\x05", 5), 2, HP_ERR_FORMAT,
                "not a whole number of uint16 tokens");
}

Test(data, bin_empty_and_seq_len)
{
    expect_fail(write_file("e.bin", "", 0), 2, HP_ERR_FORMAT, "empty");
    expect_fail(write_llmc("z.bin", 20240520, 1, 0, "", 0), 2, HP_ERR_FORMAT, "no tokens");
    expect_fail(fixture("tokens_raw.bin"), 0, HP_ERR_ARG, "needs a seq_len");
    expect_fail(fixture("tokens_raw.bin"), 8, HP_ERR_SHAPE, "only 7 tokens, fewer than seq_len 8");
    expect_fail(fixture("tokens_llmc.bin"), 0, HP_ERR_ARG, "needs a seq_len");
}

// --- anything ---------------------------------------------------------------

Test(data, unknown_extension)
{
    expect_fail(write_text("x.txt", "1 2 3"), 2, HP_ERR_UNSUPPORTED, "unknown data format '.txt'");
    expect_fail(write_text("noext", "1 2 3"), 2, HP_ERR_UNSUPPORTED, "unknown data format ''");
    expect_fail(write_text("x.json", "{}"), 2, HP_ERR_UNSUPPORTED, "(use .npy, .jsonl or .bin of token ids, or .txt or .jsonl of text");
}

Test(data, missing_file_and_directory)
{
    expect_fail(tpath("missing.npy"), 0, HP_ERR_IO, "cannot open");
    const char *dir = tpath("dir.npy");
    cr_assert_eq(mkdir(dir, 0700), 0);
    expect_fail(dir, 0, HP_ERR_IO, "not a regular file");
}

Test(data, negative_seq_len)
{
    expect_fail(fixture("ids_2d_i4.npy"), -1, HP_ERR_ARG, "seq_len -1 is negative");
}

// --- ids in memory -----------------------------------------------------------

/*
 * hp_data_from_ids against hp_data_load on the .npy file of the same ids and shape, named alike: the same
 * status, rows and ids, or the same line. Each case also says what the file gives, so that the two cannot
 * agree on a wrong answer: rows x row_len, or the status and a piece of the line.
 */
struct ids_case {
    int ndim;
    uint64_t dims[3];
    int seq_len;
    int n_seqs, row_len;  /* on success */
    enum hp_status st;    /* HP_OK or the failure */
    const char *what;     /* on failure */
};

static const struct ids_case ids_cases[] = {
    {2, {3, 4}, 0, 3, 4, HP_OK, NULL},
    {2, {3, 4}, 4, 3, 4, HP_OK, NULL},
    {2, {3, 4}, 2, 0, 0, HP_ERR_SHAPE, "rows have 4 tokens but seq_len is 2"},
    {2, {3, 4}, -1, 0, 0, HP_ERR_ARG, "seq_len -1 is negative"},
    {1, {12}, 4, 3, 4, HP_OK, NULL},
    {1, {12}, 5, 2, 5, HP_OK, NULL}, /* the tail of 2 dropped */
    {1, {12}, 12, 1, 12, HP_OK, NULL},
    {1, {12}, 0, 0, 0, HP_ERR_ARG, "1-D token stream of 12 tokens needs a seq_len"},
    {1, {12}, 13, 0, 0, HP_ERR_SHAPE, "only 12 tokens, fewer than seq_len 13"},
    {1, {0}, 4, 0, 0, HP_ERR_FORMAT, "holds no tokens"},
    {2, {0, 4}, 0, 0, 0, HP_ERR_FORMAT, "array of shape (0, 4) holds no tokens"},
    {2, {3, 0}, 0, 0, 0, HP_ERR_FORMAT, "array of shape (3, 0) holds no tokens"},
    {3, {2, 2, 3}, 0, 0, 0, HP_ERR_SHAPE, "array has shape (2, 2, 3)"},
    {0, {0}, 0, 0, 0, HP_ERR_SHAPE, "array has shape ()"},
};

Test(data, ids_in_memory_follow_the_npy_rules)
{
    int32_t ids[12];
    unsigned char raw[sizeof ids];
    for (int i = 0; i < 12; i++) {
        ids[i] = i == 3 ? INT32_MAX : i == 7 ? -5 : 10 * i;
        put_u32(raw + 4 * i, (uint32_t)ids[i]);
    }
    for (size_t c = 0; c < sizeof ids_cases / sizeof ids_cases[0]; c++) {
        const struct ids_case *k = &ids_cases[c];
        char shape[64], dict[256], name[32];
        size_t at = (size_t)snprintf(shape, sizeof shape, "(");
        uint64_t count = 1;
        for (int i = 0; i < k->ndim; i++) {
            at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%llu", i ? ", " : "",
                                   (unsigned long long)k->dims[i]);
            count *= k->dims[i];
        }
        snprintf(shape + at, sizeof shape - at, "%s)", k->ndim == 1 ? "," : "");
        snprintf(name, sizeof name, "case%zu.npy", c);
        const char *path = write_npy(name, 1, npy_dict(dict, sizeof dict, "<i4", "False", shape), raw, 4 * count);
        struct hp_data *f = NULL, *m = (struct hp_data *)&m; /* must be reset */
        struct hp_error ef = {{0}}, em = {{0}};
        enum hp_status sf = hp_data_load(path, k->seq_len, &f, &ef);
        enum hp_status sm = hp_data_from_ids(ids, k->ndim, k->dims, k->seq_len, path, &m, &em);
        cr_assert_eq(sf, k->st, "case %zu %s seq_len %d: the file: %s", c, shape, k->seq_len, ef.msg);
        cr_assert_eq(sm, sf, "case %zu %s seq_len %d: %s from memory, %s from the file: %s", c, shape, k->seq_len,
                     hp_status_name(sm), hp_status_name(sf), em.msg);
        if (sf != HP_OK) {
            cr_assert_null(m, "case %zu: *out not NULL after failure", c);
            cr_assert_str_eq(em.msg, ef.msg, "case %zu", c);
            cr_assert_not_null(strstr(ef.msg, k->what), "case %zu lacks \"%s\": %s", c, k->what, ef.msg);
            continue;
        }
        cr_assert_str_eq(m->path, path);
        cr_assert(f->n_seqs == k->n_seqs && f->seq_len == k->row_len, "case %zu: the file gives %d x %d", c,
                  f->n_seqs, f->seq_len);
        expect_ids(m, f->n_seqs, f->seq_len, f->ids);
        expect_ids(m, k->n_seqs, k->row_len, ids); /* the first rows of the ids, row-major */
        hp_data_free(f);
        hp_data_free(m);
    }
}

// --- vocabulary -------------------------------------------------------------

Test(data, check_vocab_ids)
{
    struct hp_data *d = load_ok(fixture("ids_2d_i4.npy"), 0);
    struct hp_error err;
    cr_assert_eq(hp_data_check_vocab(d, 7001, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_check_vocab(d, 97, &err), HP_ERR_ARG);
    char want[1200];
    snprintf(want, sizeof want, "%s: token id 700 at row 2, position 2 is outside the "
             "vocabulary (model has 97 tokens)", d->path);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(hp_data_check_vocab(d, 7000, NULL), HP_ERR_ARG); // 7000 itself is out
    cr_assert_eq(hp_data_check_vocab(d, 0, &err), HP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "vocabulary size 0 is invalid"), "%s", err.msg);
    hp_data_free(d);
}

Test(data, check_vocab_negative_id)
{
    unsigned char raw[8];
    put_u32(raw, 3);
    put_u32(raw + 4, (uint32_t)-1);
    char dict[256];
    const char *p = write_npy("n.npy", 1, npy_dict(dict, sizeof dict, "<i4", "False", "(1, 2)"),
                              raw, sizeof raw);
    struct hp_data *d = load_ok(p, 0);
    struct hp_error err;
    cr_assert_eq(hp_data_check_vocab(d, 10, &err), HP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "token id -1 at row 0, position 1"), "%s", err.msg);
    hp_data_free(d);
}

Test(data, check_vocab_labels)
{
    struct hp_data *d = load_ok(fixture("rows.jsonl"), 0);
    struct hp_error err;
    cr_assert_eq(hp_data_check_vocab(d, 103, &err), HP_OK, "%s", err.msg); // -100 ignored
    hp_data_free(d);

    const char *p = write_text("l.jsonl", "{\"ids\": [1, 2], \"labels\": [-100, 2]}\n"
                                          "{\"ids\": [3, 4], \"labels\": [4, -100]}\n");
    d = load_ok(p, 0);
    cr_assert_eq(hp_data_check_vocab(d, 5, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_check_vocab(d, 4, &err), HP_ERR_ARG);
    // ids are checked first: 4 at row 1, position 1
    cr_assert_not_null(strstr(err.msg, "token id 4 at row 1, position 1"), "%s", err.msg);
    hp_data_free(d);

    p = write_text("m.jsonl", "{\"ids\": [1, 2], \"labels\": [-100, 9]}\n");
    d = load_ok(p, 0);
    cr_assert_eq(hp_data_check_vocab(d, 5, &err), HP_ERR_ARG);
    cr_assert_eq(strncmp(err.msg, p, strlen(p)), 0, "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "label 9 at row 0, position 1 is outside the vocabulary"),
                       "%s", err.msg);
    hp_data_free(d);

    p = write_text("k.jsonl", "{\"ids\": [1, 2], \"labels\": [-101, 1]}\n");
    d = load_ok(p, 0);
    cr_assert_eq(hp_data_check_vocab(d, 5, &err), HP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "label -101 at row 0, position 0"), "%s", err.msg);
    hp_data_free(d);
}

Test(data, free_null)
{
    hp_data_free(NULL);
}

// --- robustness ---------------------------------------------------------------

static size_t read_all(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    cr_assert_lt(n, cap, "%s is larger than the test expects", path);
    return n;
}

// Loading must either succeed or fail with a one-line message; never crash
// (run under ASan/UBSan to make "crash" include memory errors).
static void load_any(const char *path, int seq_len)
{
    struct hp_data *d = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_data_load(path, seq_len, &d, &err);
    if (st == HP_OK) {
        cr_assert_not_null(d);
        cr_assert(d->n_seqs >= 1 && d->seq_len >= 1);
        hp_data_check_vocab(d, 97, &err);
        hp_data_free(d);
    } else {
        cr_assert_null(d);
        cr_assert_neq(err.msg[0], '\0', "%s: empty message for %s", path,
                      hp_status_name(st));
        cr_assert_null(strchr(err.msg, '\n'));
    }
}

Test(data, every_truncation_is_handled)
{
    const char *names[] = {"ids_2d_i4.npy", "ids_1d_i8_v2.npy", "ids_1d_u2_v3.npy",
                           "tokens_llmc.bin", "tokens_raw.bin", "rows.jsonl"};
    static unsigned char buf[4096];
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        size_t n = read_all(fixture(names[f]), buf, sizeof buf);
        const char *ext = strrchr(names[f], '.');
        char name[32];
        snprintf(name, sizeof name, "cut%zu%s", f, ext);
        const char *p = tpath(name);
        for (size_t len = 0; len < n; len++) {
            FILE *out = fopen(p, "wb");
            cr_assert_not_null(out);
            if (len)
                cr_assert_eq(fwrite(buf, 1, len, out), len);
            fclose(out);
            load_any(p, 2);
        }
    }
}

Test(data, random_byte_flips_are_handled)
{
    const char *names[] = {"ids_2d_i4.npy", "ids_1d_i8_v2.npy", "ids_1d_u2_v3.npy",
                           "tokens_llmc.bin", "rows.jsonl"};
    static unsigned char orig[4096], buf[4096];
    uint32_t rng = 12345; // fixed seed: failures reproduce
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        size_t n = read_all(fixture(names[f]), orig, sizeof orig);
        const char *ext = strrchr(names[f], '.');
        char name[32];
        snprintf(name, sizeof name, "flip%zu%s", f, ext);
        const char *p = tpath(name);
        for (int trial = 0; trial < 300; trial++) {
            memcpy(buf, orig, n);
            // Flip bytes mostly in the header, where the parsing happens.
            int flips = 1 + trial % 4;
            for (int k = 0; k < flips; k++) {
                rng = rng * 1664525u + 1013904223u;
                size_t span = n < 140 ? n : 140;
                size_t at = (rng >> 8) % (trial % 3 ? span : n);
                rng = rng * 1664525u + 1013904223u;
                buf[at] = (unsigned char)(rng >> 24);
            }
            FILE *out = fopen(p, "wb");
            cr_assert_not_null(out);
            cr_assert_eq(fwrite(buf, 1, n, out), n);
            fclose(out);
            load_any(p, 2);
        }
    }
}

Test(data, jsonl_blank_lines_do_not_inflate_allocation)
{
    // One long row and many blank lines: sized by rows, not lines.
    size_t n_ids = 20000, n_blank = 200000;
    size_t cap = 16 + n_ids * 2 + n_blank + 8;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    size_t k = (size_t)snprintf(text, cap, "{\"ids\": [");
    for (size_t i = 0; i < n_ids; i++) {
        text[k++] = '1';
        text[k++] = i + 1 < n_ids ? ',' : ']';
    }
    text[k++] = '}';
    memset(text + k, '\n', n_blank);
    k += n_blank;
    const char *p = write_file("wide.jsonl", text, k);
    free(text);
    struct hp_data *d = load_ok(p, 0);
    cr_assert_eq(d->n_seqs, 1);
    cr_assert_eq(d->seq_len, (int)n_ids);
    cr_assert_eq(d->ids[n_ids - 1], 1);
    hp_data_free(d);
}

// --- sizes bounded by the file before they size an allocation ----------------------

// A first row of 200k ids over 200k short rows asked for 200k x 200k ints
// (160 GB) before line 2 was read; now line 2 is named.
Test(data, jsonl_long_first_row_over_many_short_rows)
{
    enum { N = 200000 };
    size_t cap = (size_t)N * 16 + 64, k = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    k += (size_t)snprintf(buf + k, cap - k, "{\"ids\": [");
    for (int i = 0; i < N; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ",1" : "1");
    k += (size_t)snprintf(buf + k, cap - k, "]}\n");
    for (int i = 0; i < N; i++)
        k += (size_t)snprintf(buf + k, cap - k, "{\"ids\":[1]}\n");
    const char *p = write_file("long.jsonl", buf, k);
    free(buf);
    expect_fail(p, 0, HP_ERR_SHAPE, ":2: row has 1 ids, expected 200000");
}

// The bound (at most size / seq_len rows) still fits the densest valid file:
// one-digit ids, every byte but the JSON around them an id.
Test(data, jsonl_dense_rows_all_load)
{
    char buf[4096];
    size_t k = 0;
    for (int r = 0; r < 50; r++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "{\"ids\":[%d,1,2,3,4,5,6,7,8,9]}\n", r % 10);
    struct hp_data *d = load_ok(write_file("dense.jsonl", buf, k), 0);
    cr_assert_eq(d->n_seqs, 50);
    cr_assert_eq(d->seq_len, 10);
    cr_assert_eq(d->ids[49 * 10], 9);
    hp_data_free(d);
}

// Every reader refuses a directory by name (fopen alone accepts one).
Test(data, directory_given_as_data_or_text)
{
    const char *jl = tpath("d.jsonl"), *txt = tpath("d.txt");
    cr_assert_eq(mkdir(jl, 0700), 0);
    cr_assert_eq(mkdir(txt, 0700), 0);
    expect_fail(jl, 0, HP_ERR_IO, "not a regular file");
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_data *d = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_data_load_for(txt, tok, NULL, 4, &d, &err), HP_ERR_IO, "%s", err.msg);
    cr_assert_null(d);
    cr_assert(strncmp(err.msg, txt, strlen(txt)) == 0 && strstr(err.msg, "is a directory"), "%s", err.msg);
    cr_assert_eq(hp_data_load_for(jl, tok, NULL, 4, &d, &err), HP_ERR_IO, "%s", err.msg);
    cr_assert(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

// `headprune tokenize DIR` printed nothing and exited 0.
Test(data, tokenize_a_directory_fails)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' tokenize --model '%s/tokenizers/gpt2-bpe' '%s' 2>&1", getenv("HP_HEADPRUNE"),
             getenv("HP_FIXTURES"), g_dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[1024] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    cr_assert_neq(rc, 0, "exit 0 on a directory: %s", out);
    cr_assert(strstr(out, g_dir) && strstr(out, "directory"), "%s", out);
}

// A cached-tokens entry whose header claims 2^24 x 2^24 ids was trusted and
// sized an allocation (a petabyte; ASan aborts). Its sizes must add up to the
// entry's real size; a damaged entry is ignored and rewritten.
Test(data, cache_entry_header_checked_against_its_size)
{
    char cache[128], tokens[160], cmd[512], entry[512];
    snprintf(cache, sizeof cache, "%s/cache", g_dir);
    snprintf(tokens, sizeof tokens, "%s/tokens", cache);
    setenv("HP_CACHE_DIR", cache, 1);
    const char *text = "First document, with a few words.\n\nSecond one; a little longer than the first.\n";
    const char *p = write_text("docs.txt", text);
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_error err = {{0}};
    struct hp_data *a, *b;
    cr_assert_eq(hp_data_load_for(p, tok, NULL, 4, &a, &err), HP_OK, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "ls '%s'/*.bin", tokens);
    FILE *ls = popen(cmd, "r");
    cr_assert(fgets(entry, sizeof entry, ls), "no cache entry was written");
    pclose(ls);
    entry[strcspn(entry, "\n")] = 0;
    struct stat st0, st1;
    cr_assert_eq(stat(entry, &st0), 0);
    // magic (8 bytes), then n_seqs and seq_len as int32
    FILE *f = fopen(entry, "r+b");
    cr_assert_not_null(f);
    int32_t huge[2] = {1 << 24, 1 << 24};
    cr_assert_eq(fseek(f, 8, SEEK_SET), 0);
    cr_assert_eq(fwrite(huge, 4, 2, f), 2);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(hp_data_load_for(p, tok, NULL, 4, &b, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(b->n_seqs, a->n_seqs);
    cr_assert_arr_eq(a->ids, b->ids, (size_t)a->n_seqs * 4 * sizeof(int32_t));
    hp_data_free(b);
    cr_assert_eq(stat(entry, &st1), 0);
    cr_assert_eq(st1.st_size, st0.st_size, "the damaged entry was not rewritten");
    f = fopen(entry, "rb");
    int32_t head[2];
    cr_assert_eq(fseek(f, 8, SEEK_SET), 0);
    cr_assert_eq(fread(head, 4, 2, f), 2);
    fclose(f);
    cr_assert_eq(head[0], a->n_seqs, "the damaged entry was not rewritten");
    hp_data_free(a);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    cr_assert_eq(system(cmd), 0);
}

// --- JSON strings holding a NUL -----------------------------------------------------------
//
// cJSON reads a string only up to a NUL character: the text row "hello\u0000 world the cat" was
// evaluated as "hello" (one token) and an "ids\u0000..." key was read as "ids", exit 0. Such a
// string (escaped, or a raw 0 byte) is refused, naming the file, the row and the string as written.

// hp_data_load_for with the gpt2-bpe fixture fails with HP_ERR_FORMAT and a one-line message that
// starts with path:line and contains what.
static void expect_text_fail(const char *path, int line, const char *what)
{
    char tok[1024], head[1100];
    snprintf(tok, sizeof tok, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    snprintf(head, sizeof head, "%s:%d: ", path, line);
    struct hp_data *d = (struct hp_data *)&d;
    struct hp_error err = {{0}};
    enum hp_status st = hp_data_load_for(path, tok, NULL, 0, &d, &err);
    cr_assert_eq(st, HP_ERR_FORMAT, "%s: status %s (%d rows of %d): %s", path, hp_status_name(st),
                 st == HP_OK ? d->n_seqs : 0, st == HP_OK ? d->seq_len : 0, err.msg);
    cr_assert_null(d);
    cr_assert(strncmp(err.msg, head, strlen(head)) == 0, "message does not start with %s: %s", head, err.msg);
    cr_assert_not_null(strstr(err.msg, what), "message lacks \"%s\": %s", what, err.msg);
    cr_assert_not_null(strstr(err.msg, "NUL"), "message does not say NUL: %s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "message is not one line: %s", err.msg);
}

Test(data, text_jsonl_string_with_a_nul_is_refused)
{
    expect_text_fail(write_text("a.jsonl", "{\"text\": \"hello\\u0000 world the cat\"}\n"), 1,
                     "the string \"hello\\u0000 world the cat\" holds a NUL");
    expect_text_fail(write_text("b.jsonl", "{\"text\": \"one\"}\n\n{\"text\": \"hello\\u0000 world the cat\"}\n"), 3,
                     "the string \"hello\\u0000 world the cat\" holds a NUL");
    expect_text_fail(write_text("c.jsonl", "{\"text_a\": \"one\", \"text_b\": \"two\"}\n"
                                           "{\"text_a\": \"three\", \"text_b\": \"fo\\u0000ur\"}\n"),
                     2, "\"fo\\u0000ur\"");
    // a raw 0 byte inside the string: cJSON copies it and the string ends there too
    static const char raw[] = "{\"text\": \"one\"}\n{\"text\": \"hello\0 world\"}\n";
    expect_text_fail(write_file("d.jsonl", raw, sizeof raw - 1), 2, "\"hello\\u0000 world\"");
    // a key: "text\u0000junk" was read as "text"
    expect_text_fail(write_text("e.jsonl", "{\"text\": \"one\"}\n{\"text\\u0000junk\": \"hello\", \"text\": \"x\"}\n"),
                     2, "\"text\\u0000junk\"");
    // a long row shows the part around the NUL, its column and the row's line
    char longrow[400];
    snprintf(longrow, sizeof longrow, "{\"text\": \"one\"}\n{\"text\": \"%0200d and then\\u0000 more words after it\"}\n", 0);
    expect_text_fail(write_text("f.jsonl", longrow), 2, "\"...000000000000000 and then\\u0000 more words after it\" holds a NUL "
                                                       "character at column 220");
}

Test(data, text_jsonl_other_escapes_still_read)
{
    // an escaped backslash before "u0000" is six plain characters, and \t, \u00e9 decode as before
    const char *p = write_text("e.jsonl", "{\"text\": \"a\\\\u0000 b\\t\\u00e9\"}\n");
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_tokenizer *t;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_tokenizer_open(tok, &t, &err), HP_OK, "%s", err.msg);
    struct hp_encoding want;
    cr_assert_eq(hp_tokenizer_encode(t, "a\\u0000 b\t\xc3\xa9", 12, NULL, 0, true, &want, &err), HP_OK);
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(p, tok, NULL, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(d->seq_len, want.n);
    cr_assert_arr_eq(d->ids, want.ids, (size_t)want.n * sizeof(int32_t));
    hp_data_free(d);
    hp_encoding_free(&want);
    hp_tokenizer_free(t);
}

Test(data, jsonl_ids_key_with_a_nul_is_refused)
{
    expect_fail(write_text("k.jsonl", "{\"ids\": [1, 2]}\n{\"ids\\u0000x\": [3, 4]}\n"), 0, HP_ERR_FORMAT,
                ":2: the string \"ids\\u0000x\" holds a NUL");
}

// Every JSON text the engine reads goes through hp_json_parse, which refuses a NUL in a string:
// a reader that called cJSON itself would bring the cut strings back.
Test(data, json_is_parsed_in_one_place)
{
    char cmd[2048];
    /* every .c file below engine/, at any depth; json.c's own call must be among them, or the grep read nothing */
    snprintf(cmd, sizeof cmd, "cd '%s/../engine' && grep -rn --include='*.c' 'cJSON_Parse' .", getenv("HP_TESTS"));
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[8192] = "", line[1024];
    int own = 0, others = 0;
    while (fgets(line, sizeof line, p)) {
        if (strncmp(line, "./core/json.c:", 14) == 0)
            own++;
        else if (++others && strlen(out) + strlen(line) < sizeof out)
            strcat(out, line);
    }
    pclose(p);
    cr_assert_gt(own, 0, "the grep found no cJSON_Parse in engine/core/json.c: it read nothing (%s)", cmd);
    cr_assert_eq(others, 0, "cJSON parsed outside engine/core/json.c (use hp_json_parse):\n%s", out);
}

// --- task rows (docs/tasks.md) -----------------------------------------------

// Ids task rows of different lengths: padded right under the mask, the answer position the prompt's last token,
// answer, wrong and corrupt per row; blank lines keep the line numbers.
Test(data, task_ids_rows_are_padded_with_answers)
{
    const char *p = write_text("t.jsonl",
                               "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"wrong_id\": 9, \"corrupt_ids\": [5, 6, 1]}\n"
                               "\n"
                               "{\"prompt_ids\": [3], \"answer_id\": 4, \"wrong_id\": 2, \"corrupt_ids\": [1]}\n");
    struct hp_data *d;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_data_load(p, 0, &d, &err), HP_OK, "%s", err.msg);
    const int32_t ids[] = {5, 6, 7, 3, 0, 0}, cor[] = {5, 6, 1, 1, 0, 0};
    const uint8_t mask[] = {1, 1, 1, 1, 0, 0};
    expect_ids(d, 2, 3, ids);
    cr_assert_not_null(d->task);
    cr_assert_arr_eq(d->attn_mask, mask, sizeof mask);
    cr_assert_arr_eq(d->task->corrupt, cor, sizeof cor);
    cr_assert_eq(d->task->pos[0], 2);
    cr_assert_eq(d->task->pos[1], 0);
    cr_assert_eq(d->task->answer[0], 8);
    cr_assert_eq(d->task->answer[1], 4);
    cr_assert_eq(d->task->wrong[0], 9);
    cr_assert_eq(d->task->wrong[1], 2);
    cr_assert_eq(d->task->line[1], 3);
    cr_assert_null(d->labels);
    hp_data_free(d);

    // without wrong and corrupt: NULL; seq_len given pads to it
    p = write_text("t2.jsonl", "{\"prompt_ids\": [5, 6], \"answer_id\": 8}\n");
    cr_assert_eq(hp_data_load(p, 4, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(d->seq_len, 4);
    cr_assert_null(d->task->wrong);
    cr_assert_null(d->task->corrupt);
    cr_assert_eq(d->task->pos[0], 1);
    hp_data_free(d);
}

Test(data, task_bad_rows_are_refused_naming_the_line)
{
    expect_fail(write_text("a.jsonl", "{\"prompt_ids\": [1], \"answer_id\": 2}\n[1, 2]\n"), 0, HP_ERR_FORMAT,
                ":2: line is not a JSON object");
    expect_fail(write_text("b.jsonl", "{\"prompt_ids\": [1, 2]}\n"), 0, HP_ERR_FORMAT, ":1: task row has no \"answer\"");
    expect_fail(write_text("c.jsonl", "{\"prompt_ids\": [], \"answer_id\": 2}\n"), 0, HP_ERR_SHAPE,
                ":1: \"prompt_ids\" is empty");
    expect_fail(write_text("d.jsonl", "{\"prompt_ids\": [1, 2], \"answer_id\": 2, \"corrupt_ids\": [1]}\n"), 0,
                HP_ERR_SHAPE, ":1: the prompt is 2 tokens but the corrupt prompt is 1");
    expect_fail(write_text("e.jsonl", "{\"prompt_ids\": [1, 2], \"answer_id\": 2}\n{\"ids\": [1, 2]}\n"), 0,
                HP_ERR_FORMAT, ":2: row has no \"prompt\" or \"prompt_ids\" but line 1 is a task row");
    expect_fail(write_text("f.jsonl", "{\"ids\": [1, 2]}\n{\"prompt_ids\": [1, 2], \"answer_id\": 2}\n"), 0,
                HP_ERR_FORMAT, ":2: a task row (with \"prompt\" or \"prompt_ids\") but line 1 is not");
    expect_fail(write_text("g.jsonl", "{\"prompt_ids\": [1, 2, 3], \"answer_id\": 2}\n"), 2, HP_ERR_SHAPE,
                ":1: the prompt is 3 tokens, more than seq_len 2");
    expect_fail(write_text("h.jsonl", "{\"prompt_ids\": [1], \"answer_id\": 2, \"wrong_id\": 3}\n"
                                      "{\"prompt_ids\": [1], \"answer_id\": 2}\n"),
                0, HP_ERR_FORMAT, ":2: row has no a wrong answer (\"wrong\" or \"wrong_id\") but line 1 does");
    expect_fail(write_text("i.jsonl", "{\"prompt_ids\": [1], \"answer_id\": 2}\n"
                                      "{\"prompt_ids\": [1], \"answer_id\": 2, \"corrupt_ids\": [4]}\n"),
                0, HP_ERR_FORMAT, ":2: row has a corrupt prompt (\"corrupt\" or \"corrupt_ids\") but line 1 does not");
    expect_fail(write_text("j.jsonl", "{\"prompt_ids\": [1, -1], \"answer_id\": 2}\n"), 0, HP_ERR_FORMAT,
                ":1: \"prompt_ids\"[1] is not a token id");
    expect_fail(write_text("k.jsonl", "{\"prompt_ids\": [1], \"answer_id\": 2.5}\n"), 0, HP_ERR_FORMAT,
                ":1: \"answer_id\" is not a token id");
    expect_fail(write_text("l.jsonl", "{\"prompt_ids\": [1], \"answer_id\": 2, \"answer\": \" x\"}\n"), 0,
                HP_ERR_FORMAT, ":1: row has both \"answer\" and \"answer_id\"");
    expect_fail(write_text("m.jsonl", "{\"prompt_ids\": [1], \"prompt\": \"a\", \"answer_id\": 2}\n"), 0,
                HP_ERR_FORMAT, ":1: row has both \"prompt\" and \"prompt_ids\"");
    // text needs the model's tokenizer: hp_data_load has none
    expect_fail(write_text("n.jsonl", "{\"prompt_ids\": [1], \"answer\": \" x\"}\n"), 0, HP_ERR_ARG,
                ":1: \"answer\" is text, which needs the model's tokenizer");
    expect_fail(write_text("o.jsonl", "{\"prompt_ids\": [1], \"answer_id\": 2, \"special\": 1}\n"), 0,
                HP_ERR_FORMAT, ":1: \"special\" is not true or false");
    expect_fail(write_text("p.jsonl", "{\"prompt_ids\": 3, \"answer_id\": 2}\n"), 0, HP_ERR_FORMAT,
                ":1: \"prompt_ids\" is not a list of token ids");
}

// The vocabulary check names the row's line, for prompts, answers, wrong answers and corrupt prompts.
Test(data, task_ids_outside_the_vocabulary_are_refused)
{
    static const char *const rows[][2] = {
        {"{\"prompt_ids\": [1, 20], \"answer_id\": 2}", "prompt token 20"},
        {"{\"prompt_ids\": [1, 2], \"answer_id\": 10}", "answer 10"},
        {"{\"prompt_ids\": [1, 2], \"answer_id\": 3, \"wrong_id\": 11}", "wrong answer 11"},
        {"{\"prompt_ids\": [1, 2], \"answer_id\": 3, \"corrupt_ids\": [1, 12]}", "corrupt prompt's token 12"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "v%zu.jsonl", i);
        /* a good first row, so the bad one is on line 2 */
        const char *good = strstr(rows[i][0], "wrong") ? "{\"prompt_ids\": [1], \"answer_id\": 3, \"wrong_id\": 4}"
                           : strstr(rows[i][0], "corrupt") ? "{\"prompt_ids\": [1], \"answer_id\": 3, \"corrupt_ids\": [4]}"
                                                             : "{\"prompt_ids\": [1], \"answer_id\": 3}";
        snprintf(text, sizeof text, "%s\n%s\n", good, rows[i][0]);
        const char *p = write_text(name, text);
        struct hp_data *d;
        struct hp_error err = {{0}};
        cr_assert_eq(hp_data_load(p, 0, &d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_data_check_vocab(d, 10, &err), HP_ERR_ARG, "%s accepted", rows[i][0]);
        char want[128];
        snprintf(want, sizeof want, "%s:2: %s is outside the vocabulary", p, rows[i][1]);
        cr_assert_not_null(strstr(err.msg, want), "message lacks \"%s\": %s", want, err.msg);
        cr_assert_eq(hp_data_check_vocab(d, 200, &err), HP_OK, "%s", err.msg);
        hp_data_free(d);
    }
}

// --- task rows as text ----------------------------------------------------------------------
//
// No causal fixture model has a tokenizer, so the text form is checked through the ids it makes with
// the gpt2-bpe tokenizer fixture: prompts against the ids Hugging Face's tokenizers gave for the same
// corpus lines (tokenizers/gpt2-bpe/expected.json), answers against vocab.json.

static cJSON *read_json(const char *path)
{
    size_t n;
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 20];
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

// Line i of the tokenizer corpus (static buffer).
static const char *corpus_line(int i)
{
    static char lines[2][4096];
    static int which;
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/corpus.txt", getenv("HP_FIXTURES"));
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char *out = lines[which++ & 1];
    for (int k = 0; k <= i; k++)
        cr_assert_not_null(fgets(out, sizeof lines[0], f), "corpus has no line %d", i);
    fclose(f);
    out[strcspn(out, "\n")] = 0;
    return out;
}

// One task row as JSON text (escaped by cJSON) with text prompt and corrupt, answer and wrong.
static void task_text_row(char *out, size_t n, const char *prompt, const char *corrupt, const char *answer,
                          const char *wrong)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", prompt);
    if (corrupt)
        cJSON_AddStringToObject(o, "corrupt", corrupt);
    cJSON_AddStringToObject(o, "answer", answer);
    if (wrong)
        cJSON_AddStringToObject(o, "wrong", wrong);
    char *s = cJSON_PrintUnformatted(o);
    snprintf(out, n, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

static void expect_task_data(const struct hp_data *d, const cJSON *ids[2], const cJSON *cor[2], int32_t answer,
                             int32_t wrong)
{
    cr_assert_not_null(d->task);
    cr_assert_not_null(d->task->corrupt);
    cr_assert_not_null(d->task->wrong);
    cr_assert_eq(d->n_seqs, 2);
    for (int r = 0; r < 2; r++) {
        int n = cJSON_GetArraySize(ids[r]);
        cr_assert_leq(n, d->seq_len);
        cr_assert_eq(d->task->pos[r], n - 1, "row %d: pos %d, want %d", r, d->task->pos[r], n - 1);
        cr_assert_eq(d->task->answer[r], answer);
        cr_assert_eq(d->task->wrong[r], wrong);
        for (int t = 0; t < d->seq_len; t++) {
            size_t at = (size_t)r * d->seq_len + t;
            cr_assert_eq(d->attn_mask[at], t < n);
            if (t < n) {
                cr_assert_eq(d->ids[at], cJSON_GetArrayItem(ids[r], t)->valueint, "row %d, token %d", r, t);
                cr_assert_eq(d->task->corrupt[at], cJSON_GetArrayItem(cor[r], t)->valueint, "row %d, token %d", r, t);
            }
        }
    }
}

Test(data, task_text_rows_tokenize_as_hugging_face_and_are_cached_by_their_answers)
{
    char tok[1024], path[2048];
    snprintf(tok, sizeof tok, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    snprintf(path, sizeof path, "%s/expected.json", tok);
    cJSON *exp = read_json(path);
    snprintf(path, sizeof path, "%s/vocab.json", tok);
    cJSON *vocab = read_json(path);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(exp, "cases");
    // two lines with the same number of tokens (a prompt pair), and a line of another length
    int pi = -1, pj = -1, pk = -1, nc = cJSON_GetArraySize(cases);
    for (int i = 0; i < nc && pj < 0; i++)
        for (int j = i + 1; j < nc && pj < 0; j++)
            if (cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "ids")) ==
                    cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, j), "ids")) &&
                cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "ids")) > 1)
                pi = i, pj = j;
    cr_assert_geq(pj, 0, "no two corpus lines of the same length");
    int len_i = cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pi), "ids"));
    for (int k = 0; k < nc && pk < 0; k++) {
        int n = cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, k), "ids"));
        if (n > 0 && n != len_i)
            pk = k;
    }
    const cJSON *ids[2], *cor[2];
    ids[0] = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pi), "ids");
    cor[0] = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pj), "ids");
    ids[1] = cor[1] = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pk), "ids");
    int line_i = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pi), "line")->valueint;
    int line_j = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pj), "line")->valueint;
    int line_k = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, pk), "line")->valueint;
    int32_t the = cJSON_GetObjectItem(vocab, "\xc4\xa0" "the")->valueint, and = cJSON_GetObjectItem(vocab, "\xc4\xa0" "and")->valueint,
            of = cJSON_GetObjectItem(vocab, "\xc4\xa0" "of")->valueint;

    static char text[16384];
    char row[8192];
    task_text_row(text, sizeof text, corpus_line(line_i), corpus_line(line_j), " the", " and");
    char li[4096];
    snprintf(li, sizeof li, "%s", corpus_line(line_k));
    task_text_row(row, sizeof row, li, li, " the", " and");
    strcat(text, row);
    const char *p = write_text("tt.jsonl", text);
    struct hp_data *d;
    struct hp_error err = {{0}};
    for (int pass = 0; pass < 2; pass++) { // the second reads the cache
        cr_assert_eq(hp_data_load_for(p, tok, NULL, 0, &d, &err), HP_OK, "%s", err.msg);
        expect_task_data(d, ids, cor, the, and);
        cr_assert_null(d->labels);
        hp_data_free(d);
    }
    // the same prompts with another answer: never the cached answer
    task_text_row(text, sizeof text, corpus_line(line_i), corpus_line(line_j), " of", " and");
    task_text_row(row, sizeof row, li, li, " of", " and");
    strcat(text, row);
    p = write_text("tt.jsonl", text);
    cr_assert_eq(hp_data_load_for(p, tok, NULL, 0, &d, &err), HP_OK, "%s", err.msg);
    expect_task_data(d, ids, cor, of, and);
    hp_data_free(d);
    cJSON_Delete(exp);
    cJSON_Delete(vocab);
}

// hp_data_load_for with the gpt2-bpe fixture fails with status want, one line starting with path:line, with what.
static void expect_task_text_fail(const char *path, int line, enum hp_status want, const char *what)
{
    char tok[1024], head[1100];
    snprintf(tok, sizeof tok, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    snprintf(head, sizeof head, "%s:%d: ", path, line);
    struct hp_data *d = (struct hp_data *)&d;
    struct hp_error err = {{0}};
    enum hp_status st = hp_data_load_for(path, tok, NULL, 0, &d, &err);
    cr_assert_eq(st, want, "%s: status %s: %s", path, hp_status_name(st), err.msg);
    cr_assert_null(d);
    cr_assert(strncmp(err.msg, head, strlen(head)) == 0, "message does not start with %s: %s", head, err.msg);
    cr_assert_not_null(strstr(err.msg, what), "message lacks \"%s\": %s", what, err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "message is not one line: %s", err.msg);
}

Test(data, task_text_bad_rows_are_refused_naming_the_line)
{
    // an answer of several tokens says how many and which; an empty one is 0 tokens
    expect_task_text_fail(write_text("a.jsonl", "{\"prompt\": \"the cat\", \"answer\": \" the\"}\n"
                                                "{\"prompt\": \"the cat\", \"answer\": \" the the\"}\n"),
                          2, HP_ERR_FORMAT, "\"answer\" \" the the\" is 2 tokens (ids 303, 303), not one");
    expect_task_text_fail(write_text("b.jsonl", "{\"prompt\": \"the cat\", \"answer\": \"\"}\n"), 1, HP_ERR_FORMAT,
                          "\"answer\" \"\" is 0 tokens, not one");
    expect_task_text_fail(write_text("c.jsonl", "{\"prompt\": \"the cat\", \"answer\": \" the\", \"wrong\": \" the the the\"}\n"),
                          1, HP_ERR_FORMAT, "\"wrong\" \" the the the\" is 3 tokens (ids 303, 303, 303)");
    expect_task_text_fail(write_text("d.jsonl", "{\"prompt\": \" the the\", \"corrupt\": \" the\", \"answer\": \" the\"}\n"),
                          1, HP_ERR_SHAPE, "the prompt is 2 tokens but the corrupt prompt is 1");
    expect_task_text_fail(write_text("e.jsonl", "{\"prompt\": \"\", \"answer\": \" the\"}\n"), 1, HP_ERR_SHAPE,
                          "\"prompt\" is empty");
    expect_task_text_fail(write_text("f.jsonl", "{\"prompt\": \"a\", \"answer\": \" the\"}\n{\"text\": \"a\"}\n"), 2,
                          HP_ERR_FORMAT, "row has no \"prompt\" or \"prompt_ids\" but line 1 is a task row");
    expect_task_text_fail(write_text("g.jsonl", "{\"text\": \"a\"}\n{\"prompt\": \"a\", \"answer\": \" the\"}\n"), 2,
                          HP_ERR_FORMAT, "a task row (with \"prompt\" or \"prompt_ids\") but line 1 is not");
    expect_task_text_fail(write_text("h.jsonl", "{\"prompt\": \"a\", \"answer\": 3}\n"), 1, HP_ERR_FORMAT,
                          "\"answer\" is not a string");
    expect_task_text_fail(write_text("i.jsonl", "{\"prompt\": \"a\", \"answer\": \" the\"}\n7\n"), 2, HP_ERR_FORMAT,
                          "line is not a JSON object");
}

// "special": true encodes the prompt with the tokenizer's template (sp-bpe's <s> first), as Hugging Face's
// ids_special for the same corpus line; without it, the plain ids. The answer position is the last token.
Test(data, task_text_special_adds_the_template_tokens)
{
    char tok[1024], path[2048];
    snprintf(tok, sizeof tok, "%s/tokenizers/sp-bpe", getenv("HP_FIXTURES"));
    snprintf(path, sizeof path, "%s/expected.json", tok);
    cJSON *exp = read_json(path);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(exp, "cases"), 0);
    const char *line = corpus_line(cJSON_GetObjectItem(c0, "line")->valueint);
    for (int special = 0; special < 2; special++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", line);
        cJSON_AddNumberToObject(o, "answer_id", 5);
        cJSON_AddBoolToObject(o, "special", special);
        char *s = cJSON_PrintUnformatted(o);
        const char *p = write_text(special ? "sp1.jsonl" : "sp0.jsonl", s);
        free(s);
        cJSON_Delete(o);
        const cJSON *want = cJSON_GetObjectItem(c0, special ? "ids_special" : "ids");
        int n = cJSON_GetArraySize(want);
        struct hp_data *d;
        struct hp_error err = {{0}};
        cr_assert_eq(hp_data_load_for(p, tok, NULL, 0, &d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(d->seq_len, n, "special %d: %d tokens, want %d", special, d->seq_len, n);
        for (int t = 0; t < n; t++)
            cr_assert_eq(d->ids[t], cJSON_GetArrayItem(want, t)->valueint, "special %d, token %d", special, t);
        cr_assert_eq(d->task->pos[0], n - 1);
        cr_assert_eq(d->task->answer[0], 5);
        hp_data_free(d);
    }
    cJSON_Delete(exp);
}
