/*
 * fuzz_gguf -- the GGUF reader (engine/model/gguf.c).
 *
 * Input: a whole GGUF file, indexed from memory with hp_gguf_open_buffer. A
 * failed open hands back nothing and a one-line error. An accepted file: every
 * key is found again by its name and read through every typed getter (each
 * succeeds or fails with a one-line error) and every element accessor; every
 * string and tensor lies inside the input; each tensor has nel / block size x
 * bytes per block bytes, an aligned offset, no bytes shared with another, is
 * found by its name, and, when its type is supported, dequantizes (a sanitizer
 * sees any read past its bytes).
 */
#include "fuzz_common.h"
#include "gguf.h"

#define MAX_INPUT (256 << 10)

static const uint8_t *in_lo, *in_hi; /* the input, for range checks */

static void inside(const void *p, size_t n, const char *what)
{
    const uint8_t *q = p;
    FZ_CHECK(n == 0 || (q >= in_lo && q + n <= in_hi && q + n >= q), "%s outside the input", what);
    volatile uint8_t sink = 0;
    if (n)
        sink ^= q[0] ^ q[n - 1];
    (void)sink;
}

/* A getter either succeeds or says why in one line. */
#define GETTER_OK(call)                                                            \
    do {                                                                           \
        struct hp_error e_ = {{0}};                                                \
        enum hp_status st_ = (call);                                               \
        FZ_CHECK(st_ == HP_OK || st_ == HP_ERR_FORMAT, "%s: status %d", #call, st_); \
        if (st_ != HP_OK)                                                          \
            FZ_CHECK_ERR(e_);                                                      \
    } while (0)

static void read_kv(const struct hp_gguf *g, const struct hp_gguf_kv *kv)
{
    FZ_CHECK(hp_gguf_find_kv(g, kv->key) == kv, "key '%s' not found by its name", kv->key);
    FZ_CHECK(kv->type < HP_GGUF_V_COUNT && kv->elem < HP_GGUF_V_COUNT && kv->elem != HP_GGUF_V_ARRAY,
             "key '%s': types %d, %d", kv->key, kv->type, kv->elem);
    const char *k = kv->key;
    union {
        uint32_t u32;
        uint64_t u64;
        int32_t i32;
        int64_t i64;
        float f;
        double d;
        bool b;
        struct hp_gguf_str s;
        const struct hp_gguf_kv *kv;
    } out;
    bool found = false;
    GETTER_OK(hp_gguf_get_u32(g, k, &out.u32, NULL, &e_));
    GETTER_OK(hp_gguf_get_u64(g, k, &out.u64, &found, &e_));
    GETTER_OK(hp_gguf_get_i32(g, k, &out.i32, NULL, &e_));
    GETTER_OK(hp_gguf_get_i64(g, k, &out.i64, NULL, &e_));
    GETTER_OK(hp_gguf_get_f32(g, k, &out.f, NULL, &e_));
    GETTER_OK(hp_gguf_get_f64(g, k, &out.d, NULL, &e_));
    GETTER_OK(hp_gguf_get_bool(g, k, &out.b, NULL, &e_));
    GETTER_OK(hp_gguf_get_str(g, k, &out.s, NULL, &e_));
    GETTER_OK(hp_gguf_get_strs(g, k, &out.kv, NULL, &e_));
    GETTER_OK(hp_gguf_get_nums(g, k, &out.kv, NULL, &e_));
    FZ_CHECK(found, "key '%s' not found by get_u64", k);
    if (kv->elem == HP_GGUF_V_STRING) {
        FZ_CHECK(kv->str != NULL && kv->data == NULL, "string key '%s' without views", k);
        for (uint64_t i = 0; i < kv->n; i++)
            inside(kv->str[i].p, kv->str[i].len, "a string");
        return;
    }
    static const int size[HP_GGUF_V_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    inside(kv->data, (size_t)kv->n * (size_t)size[kv->elem], "a number or array of numbers");
    for (uint64_t i = 0; i <= kv->n; i++) {
        int64_t v;
        double d;
        bool ok_d = hp_gguf_arr_f64(kv, i, &d);
        FZ_CHECK(ok_d == (i < kv->n), "key '%s': element %llu of %llu", k, (unsigned long long)i,
                 (unsigned long long)kv->n);
        if (hp_gguf_arr_i64(kv, i, &v))
            FZ_CHECK(kv->elem != HP_GGUF_V_F32 && kv->elem != HP_GGUF_V_F64, "key '%s': a float as an integer", k);
    }
}

static void read_tensor(const struct hp_gguf *g, const struct hp_gguf_tensor *t, float *buf, int64_t cap)
{
    const struct hp_gguf_type_info *ti = hp_gguf_type_info(t->type);
    FZ_CHECK(ti != NULL, "tensor '%s': type %d", t->name, (int)t->type);
    FZ_CHECK(t->n_dims >= 0 && t->n_dims <= 4, "tensor '%s': %d dims", t->name, t->n_dims);
    uint64_t nel = 1;
    for (int d = 0; d < 4; d++) {
        FZ_CHECK(t->ne[d] >= 0 && (d < t->n_dims || t->ne[d] == 1), "tensor '%s': ne[%d] = %lld", t->name, d,
                 (long long)t->ne[d]);
        nel *= (uint64_t)t->ne[d]; /* open checked the product: no wrap here */
    }
    FZ_CHECK(nel == (uint64_t)t->nel && t->ne[0] % ti->block_size == 0, "tensor '%s': %lld elements", t->name,
             (long long)t->nel);
    FZ_CHECK(t->nbytes == nel / (uint64_t)ti->block_size * (uint64_t)ti->block_bytes, "tensor '%s': %zu bytes",
             t->name, t->nbytes);
    FZ_CHECK(t->offset % hp_gguf_alignment(g) == 0, "tensor '%s': offset %llu", t->name,
             (unsigned long long)t->offset);
    inside(t->data, t->nbytes, "a tensor");
    FZ_CHECK(hp_gguf_find_tensor(g, t->name) == t, "tensor '%s' not found by its name", t->name);
    if (t->nel > cap)
        return;
    struct hp_error err = {{0}};
    enum hp_status st = hp_gguf_tensor_dequant(g, t, buf, &err);
    FZ_CHECK(st == (ti->to_f32 ? HP_OK : HP_ERR_UNSUPPORTED), "tensor '%s' (%s): status %d", t->name, ti->name, st);
    if (st != HP_OK)
        FZ_CHECK_ERR(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    in_lo = data;
    in_hi = data + size;
    struct hp_gguf *g = (struct hp_gguf *)&g;
    struct hp_error err = {{0}};
    enum hp_status st = hp_gguf_open_buffer("fuzz.gguf", data, size, &g, &err);
    if (st != HP_OK) {
        FZ_CHECK(g == NULL, "a failed open handed back a file");
        FZ_CHECK(st == HP_ERR_FORMAT || st == HP_ERR_UNSUPPORTED, "status %d: %s", st, err.msg);
        FZ_CHECK_ERR(err);
        return 0;
    }
    const uint32_t a = hp_gguf_alignment(g);
    FZ_CHECK(a && (a & (a - 1)) == 0, "alignment %u", a);
    for (int64_t i = 0; i < hp_gguf_kv_count(g); i++)
        read_kv(g, hp_gguf_kv_at(g, i));
    /* every supported type takes at least 0.5 bytes an element, so all of it fits this cap */
    const int64_t cap = (int64_t)(2 * size + 256);
    float *buf = malloc((size_t)cap * sizeof *buf);
    if (!buf)
        abort();
    const int64_t n = hp_gguf_tensor_count(g);
    for (int64_t i = 0; i < n; i++)
        read_tensor(g, hp_gguf_tensor_at(g, i), buf, cap);
    /* no two tensors share a byte: checked directly for a small count */
    for (int64_t i = 0; i < n && n <= 64; i++)
        for (int64_t j = i + 1; j < n; j++) {
            const struct hp_gguf_tensor *x = hp_gguf_tensor_at(g, i), *y = hp_gguf_tensor_at(g, j);
            const uint8_t *xp = x->data, *yp = y->data;
            FZ_CHECK(!x->nbytes || !y->nbytes || xp + x->nbytes <= yp || yp + y->nbytes <= xp,
                     "tensors '%s' and '%s' overlap", x->name, y->name);
            FZ_CHECK(strcmp(x->name, y->name) != 0, "tensor '%s' twice", x->name);
        }
    free(buf);
    hp_gguf_close(g);
    return 0;
}
